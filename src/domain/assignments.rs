//! Runtime assignments on the node's side (`04-registration.md`, "Node sessions and
//! assignments"): the node methods `getRuntimeAssignments`, `resolveRuntimeSecretBindings` and
//! `reportRuntimeAssignmentState`, and [`Controller::running_assignments`] (the definition of
//! *running*). What the specs call for is planned in `plan::assignments`; the reconcile that issues
//! it runs in `runners`. Every generation is signed and kept.

use super::plan::assignments::{AssignmentState, is_ready_under};
use super::{Controller, DomainError};
use crate::contract::assignment::{EnvironmentSource, RuntimeAssignment};
use crate::contract::reader::compare_bytes;
use crate::contract::session::RuntimeSessionReference;
use crate::contract::signing::Signed;
use crate::contract::{AuthorityReference, Id, NodeId};
use crate::store::FactScope;
use crate::store::assignments::StoredAssignment;
use std::collections::BTreeSet;

/// `resolveRuntimeSecretBindings`: `{ session, assignment }`; the session is checked first
/// ([`Controller::check_node_session`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolveRuntimeSecretBindingsRequest {
    /// The assignment generation whose secret bindings to resolve.
    pub assignment: AuthorityReference,
}

/// `reportRuntimeAssignmentState`: `{ session, assignment, state }`; the session is checked
/// first ([`Controller::check_node_session`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReportRuntimeAssignmentStateRequest {
    /// The assignment generation reported on.
    pub assignment: AuthorityReference,
    /// Its state.
    pub state: AssignmentState,
}

impl Controller {
    /// The node's current assignment set, sorted by id, without the heads whose records do not
    /// read back: each of those is logged and affects only itself (the next reconcile replaces
    /// it or takes it out of the set).
    async fn readable_node_assignments(
        &self,
        cluster_id: &Id,
        node_id: &NodeId,
    ) -> Result<Vec<StoredAssignment>, DomainError> {
        let heads = self.store.node_assignments(cluster_id, node_id).await?;
        for head in &heads.unreadable {
            tracing::error!(cluster = %cluster_id, node = %node_id, assignment = %head.reference.id, generation = head.reference.generation, problem = %head.problem, "a stored runtime assignment does not read back; left out of the node's set");
        }
        Ok(heads.readable)
    }

    /// `getRuntimeAssignments`: `{ session }` → `{ assignments }`, the node's current set,
    /// sorted by `payload.id`. `session` is the one
    /// [`Controller::check_node_session`] answered.
    pub async fn get_runtime_assignments(
        &self,
        session: &RuntimeSessionReference,
    ) -> Result<Vec<Signed<RuntimeAssignment>>, DomainError> {
        // What this process scheduled for the cluster in the background (a designation's
        // re-issue, a claim's new state) runs before the answer; a cluster owed a reconcile (its
        // last one here failed) is reconciled first; every other change was reconciled as it was
        // written.
        self.reconciler.settled(&session.cluster_id).await;
        self.reconciler.reconcile_if_owed(&session.cluster_id, &session.node_id).await;
        let mut assignments: Vec<Signed<RuntimeAssignment>> = self
            .readable_node_assignments(&session.cluster_id, &session.node_id)
            .await?
            .into_iter()
            .map(|stored| stored.signed)
            .collect();
        assignments.sort_by(|left, right| compare_bytes(left.payload.id.as_str(), right.payload.id.as_str()));
        Ok(assignments)
    }

    /// `resolveRuntimeSecretBindings`: `{ session, assignment }` → the `(name, value)` of every
    /// secret binding of that assignment. Only for an assignment of the node's current set (the
    /// reference equal in id, generation and digest); any other is `not-found` (`what:
    /// "assignment"`). `session` is the one [`Controller::check_node_session`] answered.
    pub async fn resolve_runtime_secret_bindings(
        &self,
        session: &RuntimeSessionReference,
        request: ResolveRuntimeSecretBindingsRequest,
    ) -> Result<Vec<(String, super::secrets::Bearer)>, DomainError> {
        let ResolveRuntimeSecretBindingsRequest { assignment: reference } = request;
        let current = self.readable_node_assignments(&session.cluster_id, &session.node_id).await?;
        let assignment = current
            .into_iter()
            .map(|stored| stored.signed.payload)
            .find(|assignment| assignment.reference() == reference)
            .ok_or(DomainError::AssignmentNotFound)?;
        let mut values = Vec::new();
        for entry in &assignment.workload.environment {
            let EnvironmentSource::Secret(version) = &entry.source else { continue };
            let sealed =
                self.store.get_secret(&version.secret_id, &version.secret_version_id).await?.ok_or_else(|| {
                    tracing::error!(assignment = %assignment.id, "a secret binding names a missing secret version");
                    DomainError::Internal
                })?;
            let value = super::secrets::open(self.keys.secret_key(), &sealed).map_err(|error| {
                tracing::error!(assignment = %assignment.id, %error, "a secret binding does not open");
                DomainError::Internal
            })?;
            values.push((entry.name.as_str().to_owned(), value));
        }
        tracing::info!(node = %session.node_id, assignment = %assignment.id, count = values.len(), "secret bindings resolved");
        Ok(values)
    }

    /// `reportRuntimeAssignmentState`: `{ session, assignment, state }` → `{ recorded: true }`.
    /// The assignment generation must have been issued to this node (reference equal in id,
    /// generation and digest), else `not-found` (`what: "assignment"`); the state is recorded
    /// for that generation with the reporting session, the one [`Controller::check_node_session`]
    /// answered.
    pub async fn report_runtime_assignment_state(
        &self,
        session: &RuntimeSessionReference,
        request: ReportRuntimeAssignmentStateRequest,
    ) -> Result<(), DomainError> {
        let ReportRuntimeAssignmentStateRequest { assignment: reference, state } = request;
        let stored = self
            .store
            .get_assignment(&session.cluster_id, &reference.id, reference.generation)
            .await?
            .filter(|stored| {
                stored.signed.payload.reference() == reference && stored.signed.payload.node_id == session.node_id
            })
            .ok_or(DomainError::AssignmentNotFound)?;
        self.store
            .record_assignment_state(
                &session.cluster_id,
                &stored.signed.payload.id,
                stored.signed.payload.generation,
                state.as_str(),
                session,
                self.clock.now_ms(),
            )
            .await?;
        tracing::info!(node = %session.node_id, assignment = %reference.id, generation = reference.generation, state = state.as_str(), "assignment state reported");
        let scope = FactScope::Services(BTreeSet::from([stored.signed.payload.service_id]));
        self.service_statuses_changed(&session.cluster_id, &scope).await;
        Ok(())
    }

    /// The assignments of `service_id` on `node_id` that are **running**: in the node's current
    /// set, with the latest reported state of their current generation `ready`, reported under
    /// the node's current session. Sorted by id.
    pub async fn running_assignments(
        &self,
        cluster_id: &Id,
        service_id: &Id,
        node_id: &NodeId,
    ) -> Result<Vec<RuntimeAssignment>, DomainError> {
        let Some(session) = self.store.current_session(cluster_id, node_id).await? else { return Ok(Vec::new()) };
        let mut running = Vec::new();
        for stored in self.readable_node_assignments(cluster_id, node_id).await? {
            let assignment = stored.signed.payload;
            if assignment.service_id != *service_id {
                continue;
            }
            let state = self.store.assignment_state(cluster_id, &assignment.id, assignment.generation).await?;
            if state.is_some_and(|state| is_ready_under(&state, &session)) {
                running.push(assignment);
            }
        }
        Ok(running)
    }
}

/// One assignment of a node's current set with the latest state reported for its generation, as
/// the operator console shows it ([`Controller::node_assignment_reports`]). It carries no secret:
/// not the workload, only what names the assignment and what the node said of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AssignmentReport {
    /// The assignment id.
    pub assignment_id: Id,
    /// Its current generation.
    pub generation: u64,
    /// The service it runs.
    pub service_id: Id,
    /// The spec revision it was issued for.
    pub spec_revision: u64,
    /// The latest state the node reported for this generation, under any session.
    pub state: Option<String>,
    /// When that state was reported, ms since the epoch.
    pub reported_at: Option<u64>,
    /// True when it is running ([`Controller::running_assignments`]).
    pub running: bool,
}

impl Controller {
    /// The node's current assignment set with the latest state reported for each generation,
    /// sorted by id: a read for the operator console, which changes nothing. `_caller` is the
    /// proof that the reader was authorized to read ([`Controller::authorize`] with
    /// `Access::Read`), the check every read of the method table makes.
    pub async fn node_assignment_reports(
        &self,
        _caller: &super::identity::Caller,
        cluster_id: &Id,
        node_id: &NodeId,
    ) -> Result<Vec<AssignmentReport>, DomainError> {
        let session = self.store.current_session(cluster_id, node_id).await?;
        let mut reports = Vec::new();
        for stored in self.readable_node_assignments(cluster_id, node_id).await? {
            let assignment = stored.signed.payload;
            let reported = self.store.assignment_state(cluster_id, &assignment.id, assignment.generation).await?;
            let running = match (&reported, &session) {
                (Some(reported), Some(session)) => is_ready_under(reported, session),
                _ => false,
            };
            reports.push(AssignmentReport {
                assignment_id: assignment.id,
                generation: assignment.generation,
                service_id: assignment.service_id,
                spec_revision: assignment.spec_revision,
                state: reported.as_ref().map(|reported| reported.state.clone()),
                reported_at: reported.as_ref().map(|reported| reported.reported_at),
                running,
            });
        }
        Ok(reports)
    }
}
