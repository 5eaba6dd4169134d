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
use super::network::LeasesFollowed;
use super::projections::{IssueScope, ProjectionIssuer};
use super::service_status::{
    Lookups, blocking_verdict, judge_services, recorded_verdicts, refresh_statuses, status_differences,
};
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
use crate::store::{ChangeKind, FactScope, SharedStore};
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
    lookups: &Lookups,
    controller: &ControllerReference,
) -> BTreeMap<Id, RuntimeAssignment> {
    let mut desired = BTreeMap::new();
    let Some(cluster) = &facts.cluster else { return desired };
    let names = CLUSTER_INGRESS_ENVIRONMENT_NAMES;
    for spec in &facts.services {
        if blocking_verdict(spec, facts, lookups).is_some() {
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
            let Some(node) = lookups.node(node_id) else { continue };
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
fn planned_changes(facts: &AssignmentFacts, lookups: &Lookups, controller: &ControllerReference) -> Vec<PlannedChange> {
    let desired = desired_assignments(facts, lookups, controller);
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
        if let Some(head) = heads.get(&id)
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
    lookups: &Lookups,
    controller: &ControllerReference,
    key: &SigningKey,
) -> Vec<AssignmentChange> {
    planned_changes(facts, lookups, controller)
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
        if let Some(head) = facts.heads.get(id) {
            nodes.insert(head.signed.payload.node_id.clone());
        }
        if let Some(head) = facts.heads.get_unreadable(id) {
            nodes.insert(head.node_id.clone());
        }
    }
    nodes
}

/// A change of the facts a reconcile reads, named by what was written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// A service's spec was written or the service deleted.
    Service(Id),
    /// A node was written (its namespace or host addresses may have changed).
    Node(NodeId),
    /// The cluster's record was written (its `relayOrigin` reaches the designated ingress).
    Cluster,
    /// The ingress designation moved: the services that were or are the designated ingress.
    Designation(BTreeSet<Id>),
    /// A claim's recorded state or an operator's decision on it changed: its service.
    Claims(BTreeSet<Id>),
    /// Everything may have moved (an address plan written, a reconcile that failed before).
    Everything,
}

/// The reasons of recorded verdicts that a spec write can lift: another service's volume
/// declarations and lease releases change the facts they were judged from.
const LIFTED_BY_SPEC_WRITES: &[&str] =
    &["volume-shared-unsupported", "network-workload-pool-missing", "network-workload-pool-exhausted"];

/// The reasons of recorded verdicts that a node write can lift.
const LIFTED_BY_NODE_WRITES: &[&str] = &["no-eligible-node"];

/// What one reconcile wrote.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Reconciled {
    /// The nodes whose current assignment set changed.
    pub nodes: BTreeSet<NodeId>,
    /// The nodes whose live leases changed (issued on, moved to or from, released on).
    pub lease_nodes: BTreeSet<NodeId>,
    /// The services whose live leases changed.
    pub lease_services: BTreeSet<Id>,
    /// How many assignment changes were written.
    pub assignment_changes: usize,
    /// How many claim generations were written.
    pub claim_changes: usize,
    /// How many lease changes were written.
    pub lease_changes: usize,
    /// How many of them released a lease.
    pub lease_releases: usize,
}

impl Reconciled {
    /// True when nothing was written.
    pub fn is_empty(&self) -> bool {
        self.assignment_changes == 0 && self.claim_changes == 0 && self.lease_changes == 0
    }
}

/// Reconciles the assignments of clusters for this process: in the caller's task (an inventory
/// write) or in the background (after a designation, a claim answer).
///
/// **A reconcile plans the services a change touches** ([`FactScope`]): their specs, heads, claim
/// heads and leases are read by key under the cluster's lock, so its cost follows what it
/// touches, not what the cluster holds. A reconcile that fails makes the cluster owed: the next
/// change of it in this process reconciles it whole.
///
/// **Background reconciles coalesce per cluster.** At most one runs per cluster in this process,
/// and two runs of one cluster start at least `interval` apart: a change that arrives while a run
/// is in flight, or within the interval after its start, makes it run once more when the interval
/// is over (its facts are then read after that change committed), for the union of the scopes
/// asked for. A lone change is reconciled at once; a burst of designations is reconciled about
/// once per interval, not once per designation. The decision itself is taken under the cluster's
/// lock in the store, so background runs, writers and other processes never issue two
/// generations with one number.
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
    /// The clusters whose last reconcile in this process failed.
    owed: Mutex<BTreeSet<Id>>,
}

struct BackgroundRun {
    /// How many changes were scheduled for the cluster while this task lives.
    requested: u64,
    /// The changes not yet taken by a run.
    pending: Vec<Change>,
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

/// What a set of changes touches: the services to reconcile, the nodes whose own projection
/// inputs moved, and the services whose grants moved (a designation's).
struct Touched {
    scope: FactScope,
    nodes: BTreeSet<NodeId>,
    granting: BTreeSet<Id>,
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
        AssignmentReconciler {
            store,
            clock,
            signing,
            controller,
            projections,
            interval,
            running: Mutex::default(),
            owed: Mutex::default(),
        }
    }

    fn lock_running(&self) -> std::sync::MutexGuard<'_, HashMap<Id, BackgroundRun>> {
        self.running.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn lock_owed(&self) -> std::sync::MutexGuard<'_, BTreeSet<Id>> {
        self.owed.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The services and nodes `changes` touch: for a spec write, the service, the services
    /// declaring a volume id it declares, and those whose recorded verdict a spec write can lift;
    /// for a node, the services with heads or claims on it and those refused for a missing node;
    /// for the cluster record, the designated ingress. Reads by index only.
    async fn touched(&self, cluster_id: &Id, changes: &[Change]) -> Result<Touched, DomainError> {
        let mut services = BTreeSet::new();
        let mut nodes = BTreeSet::new();
        let mut granting = BTreeSet::new();
        let mut written = BTreeSet::new();
        let mut node_written = false;
        for change in changes {
            match change {
                Change::Everything => return Ok(Touched { scope: FactScope::Cluster, nodes, granting }),
                Change::Service(service_id) => {
                    written.insert(service_id.clone());
                }
                Change::Node(node_id) => {
                    services.extend(self.store.services_on_node(cluster_id, node_id).await?);
                    nodes.insert(node_id.clone());
                    node_written = true;
                }
                Change::Cluster => {
                    if let Some(designation) = self.store.current_designation(cluster_id).await? {
                        services.insert(designation.ingress_service_id);
                    }
                }
                Change::Designation(touched) => {
                    services.extend(touched.iter().cloned());
                    granting.extend(touched.iter().cloned());
                }
                Change::Claims(touched) => services.extend(touched.iter().cloned()),
            }
        }
        if !written.is_empty() {
            services.extend(self.store.services_sharing_volumes(cluster_id, &written).await?);
            services.extend(self.store.services_with_reasons(cluster_id, LIFTED_BY_SPEC_WRITES).await?);
            services.extend(written);
        }
        if node_written {
            services.extend(self.store.services_with_reasons(cluster_id, LIFTED_BY_NODE_WRITES).await?);
        }
        Ok(Touched { scope: FactScope::Services(services), nodes, granting })
    }

    /// Reconciles `changes` now: their scope's assignments, claims and leases; then tells the
    /// nodes whose assignment set changed (but `asking`, which gets its set in an answer), issues
    /// the projections of the nodes they reach and judges the statuses of the scope. Best effort:
    /// a failure is logged and makes the cluster owed (its next change reconciles it whole).
    async fn reconcile_changes(&self, cluster_id: &Id, changes: &[Change], asking: Option<&NodeId>) {
        let owed = self.lock_owed().contains(cluster_id);
        let whole = || Touched { scope: FactScope::Cluster, nodes: BTreeSet::new(), granting: BTreeSet::new() };
        let touched = if owed { Ok(whole()) } else { self.touched(cluster_id, changes).await };
        let touched = touched.unwrap_or_else(|error| {
            tracing::warn!(cluster = %cluster_id, %error, "the services a change touches are not readable; reconciling the cluster");
            whole()
        });
        let issue = match self.reconcile_twice_if_freed(cluster_id, &touched.scope).await {
            Ok(mut reconciled) => {
                self.lock_owed().remove(cluster_id);
                if let Some(asking) = asking {
                    reconciled.nodes.remove(asking);
                }
                self.push_assignments_changed(cluster_id, reconciled.nodes).await;
                match touched.scope {
                    FactScope::Cluster => IssueScope::All,
                    FactScope::Services(_) => {
                        let mut nodes = touched.nodes;
                        nodes.extend(reconciled.lease_nodes);
                        let mut services = touched.granting;
                        services.extend(reconciled.lease_services);
                        IssueScope::Some { nodes, services }
                    }
                }
            }
            Err(error) => {
                self.lock_owed().insert(cluster_id.clone());
                tracing::warn!(cluster = %cluster_id, %error, "assignment reconcile failed; the cluster's next change reconciles it whole");
                IssueScope::All
            }
        };
        self.projections.issue_logged(cluster_id, &issue).await;
        self.refresh_statuses(cluster_id, &touched.scope).await;
    }

    /// [`Self::reconcile_locked`], and once more when it released a lease: the services of the
    /// scope were judged against the pool as it was before the release (a service waiting for
    /// pool space gets it in the write that freed it). Answers what both wrote.
    async fn reconcile_twice_if_freed(&self, cluster_id: &Id, scope: &FactScope) -> Result<Reconciled, DomainError> {
        let mut reconciled = self.reconcile_locked(cluster_id, scope).await?;
        if reconciled.lease_releases > 0 {
            let again = self.reconcile_locked(cluster_id, scope).await?;
            reconciled.nodes.extend(again.nodes);
            reconciled.lease_nodes.extend(again.lease_nodes);
            reconciled.lease_services.extend(again.lease_services);
            reconciled.assignment_changes += again.assignment_changes;
            reconciled.claim_changes += again.claim_changes;
            reconciled.lease_changes += again.lease_changes;
            reconciled.lease_releases += again.lease_releases;
        }
        Ok(reconciled)
    }

    /// Recomputes the statuses of the scope's services, best effort: a failure is logged and the
    /// next change, read or full pass repairs it.
    async fn refresh_statuses(&self, cluster_id: &Id, scope: &FactScope) {
        let now = self.clock.now_ms();
        if let Err(error) = refresh_statuses(&self.store, cluster_id, scope, &self.controller, now).await {
            tracing::warn!(cluster = %cluster_id, %error, "service status refresh failed");
        }
    }

    /// Reconciles `scope` now in one locked transaction: the facts are read under the cluster's
    /// lock, planned and signed once with the signing key in use (none held: nothing is written,
    /// [`DomainError::SigningKeyUnavailable`]), and the changes written with the store's guarded
    /// statements, the leases of the scope's services following their assignments. The nodes of
    /// issued claims are signalled at once (`claims`).
    async fn reconcile_locked(&self, cluster_id: &Id, scope: &FactScope) -> Result<Reconciled, DomainError> {
        self.reconcile(cluster_id, scope, *scope == FactScope::Cluster).await
    }

    /// [`Self::reconcile_locked`]; with `all_leases` the leases of the scope's services follow
    /// their assignments even when no assignment changes (a full pass correcting a lease).
    async fn reconcile(&self, cluster_id: &Id, scope: &FactScope, all_leases: bool) -> Result<Reconciled, DomainError> {
        let key = self.signing.current()?;
        let mut locked = self.store.lock_assignments(cluster_id, scope).await?;
        let facts = locked.facts();
        let issued_at = self.clock.now_ms();
        // An unknown cluster has nothing to issue. Claims are planned first: the assignments
        // seal the claims as they are once these are written.
        let (claims, changes) = match facts.cluster {
            Some(_) => {
                let lookups = Lookups::of(facts);
                let claims = plan_claims(facts, &lookups, &self.controller, &key);
                let facts = with_issued_claims(facts, &claims, issued_at);
                let changes = plan_assignments(&facts, &lookups, &self.controller, &key);
                (claims, changes)
            }
            None => (Vec::new(), Vec::new()),
        };
        // Leases follow the assignments where there may be something to allocate or release: a
        // cluster with neither a plan nor a live lease has none (the plan and the leases were
        // read under this lock, and applying assignments changes neither). A reconcile that
        // changes no assignment still lets them follow when it was asked for the whole cluster
        // (a plan written lets waiting assignments get their leases).
        let leases_follow = (facts.plan.is_some() || !facts.leases.is_empty()) && (!changes.is_empty() || all_leases);
        if claims.is_empty() && changes.is_empty() && !leases_follow {
            locked.rollback().await?;
            return Ok(Reconciled::default());
        }
        let nodes = touched_nodes(facts, &changes);
        locked.apply_claims(&claims, issued_at).await?;
        locked.apply(&changes).await?;
        let leases = if leases_follow {
            super::network::leases_follow_assignments(&mut *locked.leases(), scope).await?
        } else {
            LeasesFollowed::default()
        };
        if claims.is_empty() && changes.is_empty() && leases.changes == 0 {
            locked.rollback().await?;
            return Ok(Reconciled::default());
        }
        locked.commit().await?;
        let claim_nodes = claims.iter().map(|ClaimChange::Issue(signed)| signed.payload.node_id.clone()).collect();
        notify_nodes_changed(&self.store, cluster_id, claim_nodes, &[ChangeKind::Claims]).await;
        tracing::info!(cluster = %cluster_id, claims = claims.len(), changes = changes.len(), leases = leases.changes, nodes = nodes.len(), "runtime assignments reconciled");
        Ok(Reconciled {
            nodes,
            lease_nodes: leases.nodes,
            lease_services: leases.services,
            assignment_changes: changes.len(),
            claim_changes: claims.len(),
            lease_changes: leases.changes,
            lease_releases: leases.releases,
        })
    }

    /// Tells the nodes whose assignment set changed, wherever their sockets are (`signals`).
    async fn push_assignments_changed(&self, cluster_id: &Id, nodes: BTreeSet<NodeId>) {
        notify_nodes_changed(&self.store, cluster_id, nodes, &[ChangeKind::Assignments]).await;
    }

    /// Reconciles `change` of the cluster in the background, coalesced with a run already in
    /// flight.
    pub fn schedule(self: &Arc<Self>, cluster_id: &Id, change: Change) {
        let reconciled = {
            let mut running = self.lock_running();
            if let Some(run) = running.get_mut(cluster_id) {
                run.requested += 1;
                run.pending.push(change);
                return;
            }
            let (reconciled, receiver) = watch::channel(0);
            running.insert(
                cluster_id.clone(),
                BackgroundRun { requested: 1, pending: vec![change], reconciled: receiver },
            );
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
            let (requested, changes) = {
                let mut running = self.lock_running();
                match running.get_mut(&cluster_id) {
                    Some(run) => (run.requested, std::mem::take(&mut run.pending)),
                    None => (covered, Vec::new()),
                }
            };
            let started = tokio::time::Instant::now();
            self.reconcile_changes(&cluster_id, &changes, None).await;
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

    /// What a full pass would change now, found from facts read without a lock: the services
    /// whose assignments, claims or leases the facts call for otherwise, the nodes whose
    /// projection inputs moved, and the services whose recorded verdict is not the judged one.
    async fn detect(&self, cluster_id: &Id) -> Result<Findings, DomainError> {
        let scope = FactScope::Cluster;
        let facts = self.store.assignment_facts(cluster_id, &scope).await?;
        let mut found = Findings::default();
        if facts.cluster.is_none() {
            return Ok(found);
        }
        let lookups = Lookups::of(&facts);
        let claims = planned_claims(&facts, &lookups, &self.controller);
        found.services.extend(claims.into_iter().map(|claim| claim.service_id));
        for change in planned_changes(&facts, &lookups, &self.controller) {
            let service = match change {
                PlannedChange::Issue(draft) => Some(draft.service_id),
                PlannedChange::SetActive { id, .. } => facts
                    .heads
                    .get(&id)
                    .map(|head| head.signed.payload.service_id.clone())
                    .or_else(|| facts.heads.get_unreadable(&id).map(|head| head.service_id.clone())),
            };
            found.services.extend(service);
        }
        if facts.plan.is_some() || !facts.leases.is_empty() {
            found.services.extend(super::network::planned_lease_services(&facts));
        }
        found.nodes = self.projections.affected(cluster_id).await?;
        let status = self.store.status_facts(cluster_id, &scope).await?;
        let recorded = self.store.recorded_statuses(cluster_id, &scope).await?;
        found.statuses =
            status_differences(&judge_services(&facts, &status, &self.controller), &recorded).into_iter().collect();
        Ok(found)
    }

    /// One full pass over the cluster (anti-entropy): what a reconcile of the whole cluster, an
    /// issue of every node's projection and a judgement of every service would change. In a
    /// cluster whose every change was reconciled as it was written it finds nothing, holds no
    /// lock and writes nothing. A finding is looked for again after `grace`, and only what is
    /// found both times is corrected (a write whose own reconcile was in flight is not a
    /// correction): the services found are reconciled, the nodes found issued, the verdicts found
    /// recorded. Each change that correction makes is a bug in the incremental path or a change
    /// whose reconcile failed, counted (`cloudly_reconcile_corrections_total{kind}`) and logged
    /// with what differed.
    pub async fn full_pass(&self, cluster_id: &Id, grace: Duration) -> Result<Corrections, DomainError> {
        let first = self.detect(cluster_id).await?;
        if first.is_empty() {
            return Ok(Corrections::default());
        }
        tokio::time::sleep(grace).await;
        let found = first.both(&self.detect(cluster_id).await?);
        let mut corrections = Corrections::default();
        if !found.services.is_empty() {
            let scope = FactScope::Services(found.services.clone());
            let reconciled = self.reconcile(cluster_id, &scope, true).await?;
            corrections.assignments = reconciled.assignment_changes;
            corrections.claims = reconciled.claim_changes;
            corrections.leases = reconciled.lease_changes;
            self.push_assignments_changed(cluster_id, reconciled.nodes).await;
        }
        if !found.nodes.is_empty() {
            let scope = IssueScope::Some { nodes: found.nodes.clone(), services: BTreeSet::new() };
            corrections.projections = self.projections.issue(cluster_id, &scope).await?.len();
        }
        if !found.statuses.is_empty() {
            let scope = FactScope::Services(found.statuses.clone());
            let facts = self.store.assignment_facts(cluster_id, &scope).await?;
            let status = self.store.status_facts(cluster_id, &scope).await?;
            let recorded = self.store.recorded_statuses(cluster_id, &scope).await?;
            let verdicts = judge_services(&facts, &status, &self.controller);
            corrections.services = status_differences(&verdicts, &recorded);
            corrections.statuses = corrections.services.len();
            if corrections.statuses > 0 {
                let verdicts = recorded_verdicts(verdicts, self.clock.now_ms());
                self.store.record_statuses(cluster_id, &scope, &verdicts).await?;
            }
        }
        self.lock_owed().remove(cluster_id);
        for (kind, count) in corrections.by_kind() {
            if count > 0 {
                metrics::counter!("cloudly_reconcile_corrections_total", "kind" => kind).increment(count as u64);
            }
        }
        if !corrections.is_empty() {
            tracing::warn!(
                cluster = %cluster_id,
                assignments = corrections.assignments,
                claims = corrections.claims,
                leases = corrections.leases,
                projections = corrections.projections,
                statuses = corrections.statuses,
                services = ?found.services.iter().chain(&found.statuses).take(16).map(Id::as_str).collect::<Vec<_>>(),
                nodes = ?found.nodes.iter().take(16).map(NodeId::as_str).collect::<Vec<_>>(),
                "full pass corrected what the incremental reconcile left"
            );
        }
        Ok(corrections)
    }
}

/// What a full pass finds from facts read without a lock.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Findings {
    /// Services whose assignments, claims or leases the facts call for otherwise.
    pub services: BTreeSet<Id>,
    /// Nodes whose projection inputs moved (or that applied a head that retains something).
    pub nodes: BTreeSet<NodeId>,
    /// Services whose recorded verdict is not the one judged now.
    pub statuses: BTreeSet<Id>,
}

impl Findings {
    /// True when nothing was found.
    pub fn is_empty(&self) -> bool {
        self.services.is_empty() && self.nodes.is_empty() && self.statuses.is_empty()
    }

    /// What both findings hold.
    fn both(&self, other: &Findings) -> Findings {
        Findings {
            services: self.services.intersection(&other.services).cloned().collect(),
            nodes: self.nodes.intersection(&other.nodes).cloned().collect(),
            statuses: self.statuses.intersection(&other.statuses).cloned().collect(),
        }
    }
}

/// What a full pass changed, by kind.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Corrections {
    /// Assignment changes (new generations, set entries and exits).
    pub assignments: usize,
    /// Claim generations.
    pub claims: usize,
    /// Lease changes.
    pub leases: usize,
    /// Nodes whose projection was issued.
    pub projections: usize,
    /// Services whose recorded verdict was not the judged one.
    pub statuses: usize,
    /// Those services.
    pub services: Vec<Id>,
}

impl Corrections {
    /// True when nothing was changed.
    pub fn is_empty(&self) -> bool {
        self.by_kind().iter().all(|(_, count)| *count == 0)
    }

    /// The counts with the metric's `kind` label.
    pub fn by_kind(&self) -> [(&'static str, usize); 5] {
        [
            ("assignments", self.assignments),
            ("claims", self.claims),
            ("leases", self.leases),
            ("projections", self.projections),
            ("statuses", self.statuses),
        ]
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

    /// Reconciles the assignments, claims and leases of `scope` now, in one locked transaction,
    /// and answers what it wrote (no pushes, projections or statuses).
    pub async fn reconcile_assignments(&self, cluster_id: &Id, scope: &FactScope) -> Result<Reconciled, DomainError> {
        self.reconciler.reconcile_locked(cluster_id, scope).await
    }

    /// After a write that may change the cluster's assignments: reconciles what `change` touches
    /// in the writer's task, sends `pushRuntimeChanged { kinds: ["assignments"] }` to the nodes
    /// whose set changed, wherever their sockets are, issues the projections of the nodes it
    /// reached and judges the touched services again. Best effort: a failure is logged and never
    /// fails the write that called it (the cluster is then owed a whole reconcile).
    pub async fn assignments_changed(&self, cluster_id: &Id, change: Change) {
        self.reconciler.reconcile_changes(cluster_id, std::slice::from_ref(&change), None).await;
    }

    /// After a change that can move service statuses but not assignments (a state report, a
    /// session open): recomputes the statuses of the services of `scope`, best effort.
    pub async fn service_statuses_changed(&self, cluster_id: &Id, scope: &FactScope) {
        self.reconciler.refresh_statuses(cluster_id, scope).await;
    }

    /// Like [`Controller::assignments_changed`], but in the background, off the caller's path:
    /// the reconcile and its pushes run in their own task, coalesced per cluster (see
    /// [`AssignmentReconciler`]). [`Controller::assignments_settled`] awaits it.
    pub fn assignments_changed_in_background(&self, cluster_id: &Id, change: Change) {
        self.reconciler.schedule(cluster_id, change);
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

    /// What a full pass over the cluster would correct now, found without a lock and changing
    /// nothing (`AssignmentReconciler::full_pass` makes it).
    pub async fn pending_corrections(&self, cluster_id: &Id) -> Result<Findings, DomainError> {
        self.reconciler.detect(cluster_id).await
    }

    /// A full pass over the cluster ([`AssignmentReconciler::full_pass`]): what it corrected.
    pub async fn full_pass(&self, cluster_id: &Id, grace: Duration) -> Result<Corrections, DomainError> {
        self.reconciler.full_pass(cluster_id, grace).await
    }

    /// A full pass over every cluster, one after the other, best effort (the server runs it
    /// every `reconcile_full_pass_ms`): `cloudly_reconcile_full_passes_total` counts the passes
    /// and `cloudly_reconcile_full_pass_duration_seconds` holds the last one's duration.
    pub async fn full_pass_all(&self, grace: Duration) {
        let started = std::time::Instant::now();
        match self.store.list_clusters().await {
            Ok(clusters) => {
                for cluster in clusters {
                    if let Err(error) = self.full_pass(&cluster.cluster.id, grace).await {
                        tracing::warn!(cluster = %cluster.cluster.id, %error, "full pass failed");
                    }
                }
            }
            Err(error) => tracing::warn!(%error, "full pass: the clusters are not readable"),
        }
        metrics::counter!("cloudly_reconcile_full_passes_total").increment(1);
        metrics::gauge!("cloudly_reconcile_full_pass_duration_seconds").set(started.elapsed().as_secs_f64());
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
        if self.reconciler.lock_owed().contains(&session.cluster_id) {
            let asking = Some(&session.node_id);
            self.reconciler.reconcile_changes(&session.cluster_id, &[Change::Everything], asking).await;
        }
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
