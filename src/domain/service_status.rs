//! Service runtime status (`06-storage-claims.md`, "IServiceRuntimeStatus"): the methods
//! `getServiceRuntimeStatus` and `listServiceRuntimeStatuses`, and [`refresh_statuses`], which
//! judges a scope's services (`plan::verdicts`) and records what changed.
//!
//! **`changedAt` is the time the verdict changed.** Verdicts are recomputed for the services each
//! reconcile touched (in a writer's task and in the background), for the reported assignment's
//! service on a state report, for the services on a node at its session open, and on every read,
//! and recorded only where they differ (`store::service_status`).

use super::plan::status::{judge_services, recorded_verdicts};
use super::{Controller, DomainError, MissingKind};
use crate::contract::Id;
use crate::contract::service_status::{ServiceRuntimeState, ServiceRuntimeStatus, ServiceRuntimeVerdict as Verdict};
use crate::contract::session::ControllerReference;
use crate::store::assignments::AssignmentFacts;
use crate::store::service_status::RecordedStatus;
use crate::store::{FactScope, SharedStore};
use std::collections::BTreeSet;

/// `getServiceRuntimeStatus`: `{ identity, clusterId, serviceId }`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GetServiceRuntimeStatusRequest {
    /// The cluster.
    pub cluster_id: Id,
    /// The service.
    pub service_id: Id,
}

/// The stored form of a status.
fn status_of(recorded: &RecordedStatus) -> Result<ServiceRuntimeStatus, DomainError> {
    let verdict = ServiceRuntimeState::parse(&recorded.state)
        .and_then(|state| Verdict::from_parts(state, recorded.reason.as_deref()))
        .ok_or_else(|| {
            tracing::error!(service = %recorded.service_id, "a recorded service status does not read back");
            DomainError::Internal
        })?;
    Ok(ServiceRuntimeStatus {
        id: recorded.service_id.clone(),
        spec_revision: recorded.spec_revision,
        verdict,
        changed_at: recorded.changed_at,
    })
}

/// Judges the services of `scope` now and records the verdicts that changed (at `now_ms`);
/// answers every recorded status of the scope, sorted by service id. An unknown cluster has none.
pub(super) async fn refresh_statuses(
    store: &SharedStore,
    cluster_id: &Id,
    scope: &FactScope,
    controller: &ControllerReference,
    now_ms: u64,
) -> Result<Vec<ServiceRuntimeStatus>, DomainError> {
    let facts = store.assignment_facts(cluster_id, scope).await?;
    judge_and_record_statuses(store, cluster_id, scope, &facts, controller, now_ms).await
}

/// [`refresh_statuses`] from `facts` of the scope already read (a reconcile's, with what it
/// wrote).
pub(super) async fn judge_and_record_statuses(
    store: &SharedStore,
    cluster_id: &Id,
    scope: &FactScope,
    facts: &AssignmentFacts,
    controller: &ControllerReference,
    now_ms: u64,
) -> Result<Vec<ServiceRuntimeStatus>, DomainError> {
    if facts.cluster.is_none() {
        return Ok(Vec::new());
    }
    let status_facts = store.status_facts(cluster_id, scope).await?;
    let verdicts = recorded_verdicts(judge_services(facts, &status_facts, controller), now_ms);
    let recorded = store.record_statuses(cluster_id, scope, &verdicts).await?;
    recorded.iter().map(status_of).collect()
}

impl Controller {
    /// [`refresh_statuses`] of `scope` for this controller, now.
    pub async fn refresh_service_statuses(
        &self,
        cluster_id: &Id,
        scope: &FactScope,
    ) -> Result<Vec<ServiceRuntimeStatus>, DomainError> {
        refresh_statuses(&self.store, cluster_id, scope, &self.controller_reference(), self.clock.now_ms()).await
    }

    /// `getServiceRuntimeStatus` (every role) → `{ status }`, judged now.
    pub async fn get_service_runtime_status(
        &self,
        request: GetServiceRuntimeStatusRequest,
    ) -> Result<ServiceRuntimeStatus, DomainError> {
        let GetServiceRuntimeStatusRequest { cluster_id, service_id } = request;
        self.existing_cluster(&cluster_id).await?;
        self.refresh_service_statuses(&cluster_id, &FactScope::Services(BTreeSet::from([service_id.clone()])))
            .await?
            .into_iter()
            .find(|status| status.id == service_id)
            .ok_or(DomainError::NotFound(MissingKind::Service))
    }

    /// `listServiceRuntimeStatuses` (every role) → `{ statuses }`, judged now, sorted by service id.
    pub async fn list_service_runtime_statuses(
        &self,
        request: super::ClusterRequest,
    ) -> Result<Vec<ServiceRuntimeStatus>, DomainError> {
        let super::ClusterRequest { cluster_id } = request;
        self.existing_cluster(&cluster_id).await?;
        self.refresh_service_statuses(&cluster_id, &FactScope::Cluster).await
    }
}
