//! Runtime assignments (`04-registration.md`, "Node sessions and assignments";
//! `03-designation.md`, "The ingress environment"): issuing them from the cluster's service specs,
//! the node methods `getRuntimeAssignments`, `resolveRuntimeSecretBindings` and
//! `reportRuntimeAssignmentState`, and [`Controller::running_assignments`].
//!
//! **Issuing.** For every current service spec the status judge lets run
//! (`service_status::blocking_verdict`: a placement node that does not exist refuses the whole
//! spec, `no-eligible-node`), replica *i* runs on `placement.nodeIds[i mod n]` with that node's
//! runtime namespace. The assignment id is stable per (cluster, service, replica index); a new generation (linking the
//! previous one) is issued only when what it carries changes. The designated ingress service's
//! assignments also carry the three ingress names, the bearer as a secret binding to the
//! designation's `credential.secretVersion`; a designated ingress of a cluster without
//! `relayOrigin` gets no assignment (`waiting`/`bindings-pending`). Every generation is signed
//! and kept.
//!
//! **When.** A reconcile runs when a node asks for its assignments and after every write that
//! can change them: in the writer's task after `putCluster`, `putClusterNode`,
//! `putServiceRuntimeSpec` and `deleteService`, and in the background, coalesced per cluster,
//! after an accepted `designateClusterIngress` ([`AssignmentReconciler`]), so the designation's
//! answer does not wait for it. The nodes whose set changed get `pushRuntimeChanged` down their
//! socket, in whichever controller process holds it (`signals`), best effort. The decision runs
//! inside the store's transaction under the cluster's lock, so concurrent reconciles (also in
//! other processes) never issue two different generations with one number.

use super::Clock;
use super::projections::ProjectionIssuer;
use super::service_status::{VolumeDeclarers, blocking_verdict, refresh_statuses};
use super::signals::notify_nodes_changed;
use super::signing::SigningKeys;
use super::storage_claims::{plan_claims, planned_claims, sealed_claims, with_issued_claims};
use super::{Controller, DomainError};
use crate::contract::assignment::{
    EnvironmentEntry, EnvironmentName, EnvironmentSource, RuntimeAssignment, RuntimeWorkload, WorkloadPort,
    snapshot_runtime_assignment,
};
use crate::contract::reader::compare_bytes;
use crate::contract::registration::CLUSTER_INGRESS_ENVIRONMENT_NAMES;
use crate::contract::session::{ControllerReference, RuntimeSessionReference};
use crate::contract::signing::{Signed, sign};
use crate::contract::{AuthorityReference, DigestedRecord, Id, NodeId, Sha256Digest};
use crate::store::sessions::{AssignmentChange, AssignmentFacts, ReportedState, StoredAssignment};
use crate::store::storage_claims::ClaimChange;
use crate::store::{ChangeKind, SharedStore};
use ed25519_dalek::SigningKey;
use sha2::{Digest as _, Sha256};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;

/// A state a node reports for an assignment generation (`reportRuntimeAssignmentState`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AssignmentState {
    /// `starting`.
    Starting,
    /// `ready`.
    Ready,
    /// `failed`.
    Failed,
    /// `stopped`.
    Stopped,
}

impl AssignmentState {
    /// Parses the wire spelling (also the stored one).
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "starting" => Some(AssignmentState::Starting),
            "ready" => Some(AssignmentState::Ready),
            "failed" => Some(AssignmentState::Failed),
            "stopped" => Some(AssignmentState::Stopped),
            _ => None,
        }
    }

    /// The wire spelling (also the stored one).
    pub fn as_str(self) -> &'static str {
        match self {
            AssignmentState::Starting => "starting",
            AssignmentState::Ready => "ready",
            AssignmentState::Failed => "failed",
            AssignmentState::Stopped => "stopped",
        }
    }
}

/// True when `reported` is `ready` and was reported under `session` — with the assignment in
/// the node's current set, the definition of a **running** assignment.
pub fn is_ready_under(reported: &ReportedState, session: &RuntimeSessionReference) -> bool {
    AssignmentState::parse(&reported.state) == Some(AssignmentState::Ready)
        && reported.session_id == session.id
        && reported.session_generation == session.generation
}

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

/// The stable id of replica `index` of a service: `asg-` + 40 hex digits of
/// SHA-256(cluster ∥ 0 ∥ service ∥ 0 ∥ index).
pub fn assignment_id(cluster_id: &Id, service_id: &Id, index: u64) -> Id {
    let mut hasher = Sha256::new();
    hasher.update(cluster_id.as_str().as_bytes());
    hasher.update([0]);
    hasher.update(service_id.as_str().as_bytes());
    hasher.update([0]);
    hasher.update(index.to_string().as_bytes());
    let hex: String = hasher.finalize().iter().take(20).map(|byte| format!("{byte:02x}")).collect();
    Id::parse(&format!("asg-{hex}")).expect("a hex id is an Id")
}

/// True when two assignments carry the same order (everything but the revision members and
/// the digest).
pub(super) fn same_content(left: &RuntimeAssignment, right: &RuntimeAssignment) -> bool {
    left.controller == right.controller
        && left.organization_id == right.organization_id
        && left.cluster_id == right.cluster_id
        && left.node_id == right.node_id
        && left.runtime_namespace == right.runtime_namespace
        && left.service_id == right.service_id
        && left.spec_revision == right.spec_revision
        && left.workload == right.workload
}

/// The assignments the facts call for, by id, as unsigned generation-1 drafts: none for a spec
/// the status judge refuses or keeps waiting ([`blocking_verdict`]).
pub(super) fn desired_assignments(
    facts: &AssignmentFacts,
    controller: &ControllerReference,
) -> BTreeMap<Id, RuntimeAssignment> {
    let mut desired = BTreeMap::new();
    let Some(cluster) = &facts.cluster else { return desired };
    let names = CLUSTER_INGRESS_ENVIRONMENT_NAMES;
    let declarers = VolumeDeclarers::of(facts);
    for spec in &facts.services {
        if blocking_verdict(spec, facts, &declarers).is_some() {
            continue;
        }
        let body = &spec.body;
        let designation =
            facts.designation.as_ref().filter(|designation| designation.ingress_service_id == body.service_id);
        let node_count = body.placement.node_ids.len() as u64;
        let ports: Vec<WorkloadPort> = body
            .ports
            .iter()
            .filter_map(|port| Some(WorkloadPort { protocol: port.protocol.runnable()?, port: port.port }))
            .collect();
        for index in 0..body.replicas {
            let node_id = &body.placement.node_ids[(index % node_count) as usize];
            let Some(node) = facts.nodes.iter().find(|node| node.node.id == *node_id) else { continue };
            let mut environment: Vec<EnvironmentEntry> = body
                .environment
                .iter()
                .filter_map(|entry| {
                    Some(EnvironmentEntry {
                        name: EnvironmentName::parse(&entry.name)?,
                        source: EnvironmentSource::Value(entry.value.clone()),
                    })
                })
                .collect();
            if let Some(designation) = designation {
                let entry = |name: &str, source| EnvironmentEntry {
                    name: EnvironmentName::parse(name).expect("the ingress names are environment names"),
                    source,
                };
                environment
                    .retain(|entry| ![names.bearer, names.relay_origin, names.node_id].contains(&entry.name.as_str()));
                environment.push(entry(
                    names.bearer,
                    EnvironmentSource::Secret(designation.credential.secret_version.clone()),
                ));
                environment.push(entry(
                    names.relay_origin,
                    EnvironmentSource::Value(cluster.cluster.relay_origin.clone().unwrap_or_default()),
                ));
                environment.push(entry(names.node_id, EnvironmentSource::Value(node_id.as_str().to_owned())));
            }
            environment.sort_by(|left, right| compare_bytes(left.name.as_str(), right.name.as_str()));
            let id = assignment_id(&body.cluster_id, &body.service_id, index);
            let draft = RuntimeAssignment {
                id: id.clone(),
                generation: 1,
                previous: None,
                controller: controller.clone(),
                organization_id: body.organization_id.clone(),
                cluster_id: body.cluster_id.clone(),
                node_id: node_id.clone(),
                runtime_namespace: node.node.runtime_namespace.clone(),
                service_id: body.service_id.clone(),
                spec_revision: spec.revision,
                workload: RuntimeWorkload {
                    image: body.image.clone(),
                    environment,
                    ports: ports.clone(),
                    storage: sealed_claims(facts, spec, node_id),
                },
                digest: Sha256Digest::from_bytes(&[0; 32]),
            };
            desired.insert(id, draft);
        }
    }
    desired
}

/// One change a reconcile decided, before signing.
enum PlannedChange {
    /// A new generation, drafted with its generation and previous (no digest yet).
    Issue(Box<RuntimeAssignment>),
    /// The head generation enters or leaves its node's current set.
    SetActive { id: Id, generation: u64, active: bool },
}

/// The reconcile's decision, unsigned: what to issue, activate and deactivate so the stored
/// heads match what the facts call for. Pure but for one check: a draft whose record would not
/// read back is never issued (logged instead), so no stored assignment fails its reader.
///
/// A head whose record does not read back affects only itself: it leaves its node's set when the
/// facts no longer call for it, and is replaced by a new generation linking it (by the reference
/// its head row keeps) when they do.
fn planned_changes(facts: &AssignmentFacts, controller: &ControllerReference) -> Vec<PlannedChange> {
    let desired = desired_assignments(facts, controller);
    let heads = &facts.heads;
    // Heads that leave their node's set, listed after the issues and activations.
    let leaving = heads
        .readable
        .iter()
        .filter(|head| head.active)
        .map(|head| head.signed.payload.reference())
        .chain(heads.unreadable.iter().filter(|head| head.active).map(|head| head.reference.clone()))
        .filter(|reference| !desired.contains_key(&reference.id))
        .map(|reference| PlannedChange::SetActive {
            id: reference.id,
            generation: reference.generation,
            active: false,
        });
    let leaving: Vec<PlannedChange> = leaving.collect();
    let mut changes = Vec::new();
    for (id, mut draft) in desired {
        let head = heads.readable.iter().find(|head| head.signed.payload.id == id);
        if let Some(head) = head
            && same_content(&head.signed.payload, &draft)
        {
            if !head.active {
                changes.push(PlannedChange::SetActive { id, generation: head.signed.payload.generation, active: true });
            }
            continue;
        }
        if let Some(previous) = heads.reference(&id) {
            draft.generation = previous.generation + 1;
            draft.previous = Some(previous);
        }
        draft.digest = draft.compute_digest();
        if !reads_back(&draft) {
            tracing::error!(assignment = %id, service = %draft.service_id, "a planned assignment would not read back; not issued");
            continue;
        }
        changes.push(PlannedChange::Issue(Box::new(draft)));
    }
    changes.extend(leaving);
    changes
}

/// True when the assignment's record passes the contract's reader (with its digest).
fn reads_back(assignment: &RuntimeAssignment) -> bool {
    serde_json::to_value(assignment).is_ok_and(|value| snapshot_runtime_assignment(&value).is_ok())
}

/// The reconcile's decision: what to issue, activate and deactivate so the stored heads match
/// what the facts call for, every new generation digested and signed. Pure but for signing.
pub fn plan_assignments(
    facts: &AssignmentFacts,
    controller: &ControllerReference,
    key: &SigningKey,
) -> Vec<AssignmentChange> {
    planned_changes(facts, controller)
        .into_iter()
        .map(|change| match change {
            PlannedChange::Issue(draft) => AssignmentChange::Issue(Box::new(sign(key, *draft))),
            PlannedChange::SetActive { id, generation, active } => {
                AssignmentChange::SetActive { id, generation, active }
            }
        })
        .collect()
}

/// The nodes whose current set the changes touch.
fn touched_nodes(facts: &AssignmentFacts, changes: &[AssignmentChange]) -> BTreeSet<NodeId> {
    let mut nodes = BTreeSet::new();
    for change in changes {
        let id = match change {
            AssignmentChange::Issue(signed) => {
                nodes.insert(signed.payload.node_id.clone());
                &signed.payload.id
            }
            AssignmentChange::SetActive { id, .. } => id,
        };
        if let Some(head) = facts.heads.readable.iter().find(|head| head.signed.payload.id == *id) {
            nodes.insert(head.signed.payload.node_id.clone());
        }
        if let Some(head) = facts.heads.unreadable.iter().find(|head| head.reference.id == *id) {
            nodes.insert(head.node_id.clone());
        }
    }
    nodes
}

/// Reconciles the assignments of clusters for this process: in the caller's task (a node's ask,
/// an inventory write) or in the background (after a designation).
///
/// **Background reconciles coalesce per cluster.** At most one runs per cluster in this process,
/// and two runs of one cluster start at least `interval` apart: a change that arrives while a run
/// is in flight, or within the interval after its start, makes it run once more when the interval
/// is over (its facts are then read after that change committed). A lone change is reconciled at
/// once; a burst of designations is reconciled about once per interval, not once per designation. The decision itself is taken
/// under the cluster's lock in the store, so background runs, asks and other processes never
/// issue two generations with one number.
pub struct AssignmentReconciler {
    store: SharedStore,
    clock: Arc<dyn Clock>,
    signing: Arc<SigningKeys>,
    controller: ControllerReference,
    /// Issues the projections that follow the assignments (and their leases).
    projections: Arc<ProjectionIssuer>,
    /// The shortest time between the starts of two background runs of one cluster.
    interval: Duration,
    /// The clusters with a background reconcile in flight.
    running: Mutex<HashMap<Id, BackgroundRun>>,
}

struct BackgroundRun {
    /// How many changes were scheduled for the cluster while this task lives.
    requested: u64,
    /// The `requested` count that the last finished run read the facts after (so covered).
    reconciled: watch::Receiver<u64>,
}

/// Removes a background task's entry if the task ends without doing so (a panic, or the runtime
/// shutting down), so the cluster's next change starts a new task.
struct RunGuard<'a> {
    reconciler: &'a AssignmentReconciler,
    cluster_id: &'a Id,
    armed: bool,
}

impl Drop for RunGuard<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.reconciler.lock_running().remove(self.cluster_id);
        }
    }
}

impl AssignmentReconciler {
    /// A reconciler issuing assignments and claims as `controller`, signed with the signing key
    /// in use, signalling the nodes they touch through the store, starting background runs of
    /// one cluster at most once per `interval`.
    pub fn new(
        store: SharedStore,
        clock: Arc<dyn Clock>,
        signing: Arc<SigningKeys>,
        controller: ControllerReference,
        projections: Arc<ProjectionIssuer>,
        interval: Duration,
    ) -> Self {
        AssignmentReconciler { store, clock, signing, controller, projections, interval, running: Mutex::default() }
    }

    /// Recomputes the cluster's service statuses, best effort: a failure is logged and the next
    /// change or read repairs it.
    async fn refresh_statuses(&self, cluster_id: &Id) {
        let now = self.clock.now_ms();
        if let Err(error) = refresh_statuses(&self.store, cluster_id, &self.controller, now).await {
            tracing::warn!(cluster = %cluster_id, %error, "service status refresh failed");
        }
    }

    fn lock_running(&self) -> std::sync::MutexGuard<'_, HashMap<Id, BackgroundRun>> {
        self.running.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Reconciles now. Cheap when nothing changed: the facts are read without a lock and
    /// planned without signing first; the locked transaction runs only when there is work.
    async fn reconcile(&self, cluster_id: &Id) -> Result<BTreeSet<NodeId>, DomainError> {
        let facts = self.store.assignment_facts(cluster_id).await?;
        if planned_claims(&facts, &self.controller).is_empty() && planned_changes(&facts, &self.controller).is_empty() {
            return Ok(BTreeSet::new());
        }
        self.reconcile_locked(cluster_id).await
    }

    /// Reconciles now in one locked transaction: the facts are read under the cluster's lock,
    /// planned and signed once with the signing key in use (none held: nothing is written,
    /// [`DomainError::SigningKeyUnavailable`]), and the changes written with the store's guarded
    /// statements. The nodes of issued claims are signalled at once (`claims`).
    async fn reconcile_locked(&self, cluster_id: &Id) -> Result<BTreeSet<NodeId>, DomainError> {
        let key = self.signing.current()?;
        let mut locked = self.store.lock_assignments(cluster_id).await?;
        let facts = locked.facts();
        let issued_at = self.clock.now_ms();
        // An unknown cluster has nothing to issue. Claims are planned first: the assignments
        // seal the claims as they are once these are written.
        let (claims, changes) = match facts.cluster {
            Some(_) => {
                let claims = plan_claims(facts, &self.controller, &key);
                let facts = with_issued_claims(facts, &claims, issued_at);
                let changes = plan_assignments(&facts, &self.controller, &key);
                (claims, changes)
            }
            None => (Vec::new(), Vec::new()),
        };
        if claims.is_empty() && changes.is_empty() {
            locked.rollback().await?;
            return Ok(BTreeSet::new());
        }
        let nodes = touched_nodes(facts, &changes);
        // Leases follow the assignments only where there is something to allocate or release: a
        // cluster with neither a plan nor a live lease has no lease to change (the plan and the
        // leases were read under this lock, and applying assignments changes neither).
        let leases_follow = facts.plan.is_some() || !facts.leases.is_empty();
        locked.apply_claims(&claims, issued_at).await?;
        locked.apply(&changes).await?;
        if leases_follow {
            super::network::leases_follow_assignments(&mut *locked.leases()).await?;
        }
        locked.commit().await?;
        let claim_nodes = claims.iter().map(|ClaimChange::Issue(signed)| signed.payload.node_id.clone()).collect();
        notify_nodes_changed(&self.store, cluster_id, claim_nodes, &[ChangeKind::Claims]).await;
        tracing::info!(cluster = %cluster_id, claims = claims.len(), changes = changes.len(), nodes = nodes.len(), "runtime assignments reconciled");
        Ok(nodes)
    }

    /// Tells the nodes whose assignment set changed, wherever their sockets are (`signals`).
    async fn push_assignments_changed(&self, cluster_id: &Id, nodes: BTreeSet<NodeId>) {
        notify_nodes_changed(&self.store, cluster_id, nodes, &[ChangeKind::Assignments]).await;
    }

    /// Reconciles the cluster in the background, coalesced with a run already in flight.
    pub fn schedule(self: &Arc<Self>, cluster_id: &Id) {
        let reconciled = {
            let mut running = self.lock_running();
            if let Some(run) = running.get_mut(cluster_id) {
                run.requested += 1;
                return;
            }
            let (reconciled, receiver) = watch::channel(0);
            running.insert(cluster_id.clone(), BackgroundRun { requested: 1, reconciled: receiver });
            reconciled
        };
        let reconciler = Arc::clone(self);
        let cluster_id = cluster_id.clone();
        tokio::spawn(async move { reconciler.run_in_background(cluster_id, reconciled).await });
    }

    /// One cluster's background task: runs, then waits out the interval; runs again if changes
    /// arrived since the last run read its facts, else ends.
    async fn run_in_background(self: Arc<Self>, cluster_id: Id, reconciled: watch::Sender<u64>) {
        let mut guard = RunGuard { reconciler: &self, cluster_id: &cluster_id, armed: true };
        let mut covered = 0;
        loop {
            // The changes scheduled so far committed before this run reads its facts.
            let requested = self.lock_running().get(&cluster_id).map_or(covered, |run| run.requested);
            let started = tokio::time::Instant::now();
            match self.reconcile_locked(&cluster_id).await {
                Ok(nodes) => self.push_assignments_changed(&cluster_id, nodes).await,
                // Best effort: the next change or the next node ask repairs it.
                Err(error) => tracing::warn!(cluster = %cluster_id, %error, "background assignment reconcile failed"),
            }
            // Every change that schedules a run (a designation among them) can move projections.
            self.projections.issue_logged(&cluster_id).await;
            covered = requested;
            reconciled.send_replace(covered);
            tokio::time::sleep_until(started + self.interval).await;
            let mut running = self.lock_running();
            if running.get(&cluster_id).is_none_or(|run| run.requested == covered) {
                running.remove(&cluster_id);
                guard.armed = false;
                return;
            }
        }
    }

    /// Waits until every change scheduled for the cluster before the call has been reconciled
    /// by a background run of this process.
    pub async fn settled(&self, cluster_id: &Id) {
        let pending = self.lock_running().get(cluster_id).map(|run| (run.requested, run.reconciled.clone()));
        if let Some((requested, mut reconciled)) = pending {
            // An error means the task is gone, which ends its runs too.
            let _ = reconciled.wait_for(|covered| *covered >= requested).await;
        }
    }

    /// Waits until every change scheduled before the call, for any cluster, has been reconciled.
    pub async fn all_settled(&self) {
        let pending: Vec<(u64, watch::Receiver<u64>)> =
            self.lock_running().values().map(|run| (run.requested, run.reconciled.clone())).collect();
        for (requested, mut reconciled) in pending {
            let _ = reconciled.wait_for(|covered| *covered >= requested).await;
        }
    }
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

    /// Brings the cluster's stored assignments in line with its specs, nodes and designation,
    /// now. Answers the nodes whose current set changed.
    pub async fn reconcile_assignments(&self, cluster_id: &Id) -> Result<BTreeSet<NodeId>, DomainError> {
        self.reconciler.reconcile(cluster_id).await
    }

    /// After a write that may change the cluster's assignments: reconciles them and sends
    /// `pushRuntimeChanged { kinds: ["assignments"] }` to the nodes whose set changed, wherever
    /// their sockets are. Best effort: a failure is logged and never fails the write that called
    /// it.
    pub async fn assignments_changed(&self, cluster_id: &Id) {
        match self.reconcile_assignments(cluster_id).await {
            Ok(nodes) => self.reconciler.push_assignments_changed(cluster_id, nodes).await,
            Err(error) => tracing::warn!(cluster = %cluster_id, %error, "assignment reconcile failed"),
        }
        self.projections_changed(cluster_id).await;
        self.reconciler.refresh_statuses(cluster_id).await;
    }

    /// After a change that can move service statuses but not assignments (a state report, a
    /// session open): recomputes them, best effort.
    pub async fn service_statuses_changed(&self, cluster_id: &Id) {
        self.reconciler.refresh_statuses(cluster_id).await;
    }

    /// Like [`Controller::assignments_changed`], but in the background, off the caller's path:
    /// the reconcile and its pushes run in their own task, coalesced per cluster (see
    /// [`AssignmentReconciler`]). [`Controller::assignments_settled`] awaits it.
    pub fn assignments_changed_in_background(&self, cluster_id: &Id) {
        self.reconciler.schedule(cluster_id);
    }

    /// Waits until every background reconcile this process scheduled for the cluster before
    /// the call has run, so what those changes call for is issued.
    pub async fn assignments_settled(&self, cluster_id: &Id) {
        self.reconciler.settled(cluster_id).await;
    }

    /// The same for every cluster (a stopping server).
    pub async fn all_assignments_settled(&self) {
        self.reconciler.all_settled().await;
    }

    /// `getRuntimeAssignments`: `{ session }` → `{ assignments }`, the node's current set,
    /// reconciled first, sorted by `payload.id`. `session` is the one
    /// [`Controller::check_node_session`] answered.
    pub async fn get_runtime_assignments(
        &self,
        session: &RuntimeSessionReference,
    ) -> Result<Vec<Signed<RuntimeAssignment>>, DomainError> {
        let mut changed = self.reconcile_assignments(&session.cluster_id).await?;
        if !changed.is_empty() {
            self.projections_changed(&session.cluster_id).await;
            self.reconciler.refresh_statuses(&session.cluster_id).await;
        }
        // The asking node gets its set in the answer.
        changed.remove(&session.node_id);
        self.reconciler.push_assignments_changed(&session.cluster_id, changed).await;
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
        self.service_statuses_changed(&session.cluster_id).await;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn assignment_ids_are_valid_stable_and_distinct() {
        let (cluster, service) = (Id::parse("c1").unwrap(), Id::parse("web").unwrap());
        let first = assignment_id(&cluster, &service, 0);
        assert_eq!(first, assignment_id(&cluster, &service, 0));
        assert_eq!(first.as_str().len(), 4 + 40);
        assert_ne!(first, assignment_id(&cluster, &service, 1));
        assert_ne!(first, assignment_id(&Id::parse("c2").unwrap(), &service, 0));
        // The separator keeps ("c1", "1web") and ("c11", "web") apart.
        assert_ne!(
            assignment_id(&Id::parse("c11").unwrap(), &service, 0),
            assignment_id(&cluster, &Id::parse("1web").unwrap(), 0)
        );
    }
}
