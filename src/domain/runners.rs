//! Who runs the plan, and when: the assignment reconciler (in a writer's task, in the background
//! coalesced per cluster, and as the full pass) and the claim pusher (one worker per connected
//! node of this process).
//!
//! **When.** A write names what it wrote ([`Change`]); the reconciler widens it to the services it
//! touches, plans them ([`crate::domain::plan`]) from facts read under the cluster's reconcile
//! lock, writes what the plan calls for with the store's guarded statements (leases follow the
//! assignments in the same transaction), tells the nodes whose set changed (`pushRuntimeChanged`,
//! wherever their sockets are, `signals`), issues the projections of the nodes it reached and
//! judges the scope's statuses. After an accepted `designateClusterIngress` and a claim answer
//! the plan reads, that runs in the background, coalesced per cluster, so the answer does not
//! wait for it. The decision runs under the lock, so concurrent reconciles (also in other
//! processes) never issue two different generations with one number.
//!
//! **Pushing claims.** [`ClaimPusher`] runs one worker per connected node of this process: it
//! pushes every head generation of the node that needs it — never answered, or answered `ready`
//! under an older session (so every new session gets every live claim again), or
//! `import-required` (asked again with backoff until the node says `ready`) — and records the
//! answer when it passes `bindApplyRuntimeLocalStorageClaimResponse`. An answer that does not (or
//! an error answer) is counted as a protocol fault on that generation, its state left as it was,
//! and the push retried with exponential backoff. `purged` and `uncertain` are never pushed again
//! (an operator's decision may). Pushes of all nodes share one bound of concurrent requests. A
//! state change the plan reads schedules a reconcile of its service, so an `import` volume that
//! became `ready` gets its assignment. Claims issued by any controller process wake the worker of
//! the process holding the node's socket (a `claims` signal, `signals`); a worker also reads its
//! node's claims again every `storage_claim_sweep_ms` (30 s) in case a signal was missed.

use super::Clock;
use super::plan::Lookups;
use super::plan::claims::{node_state, with_issued_claims};
use super::plan::issue::{
    PlannedChange, plan_assignments, plan_claims, planned_changes, planned_claims, touched_nodes, with_changes,
};
use super::plan::leases::{LeasesFollowed, followed, leases_may_change, plan_lease_changes, planned_lease_services};
use super::plan::status::{judge_services, recorded_verdicts, status_differences};
use super::projections::{IssueScope, ProjectionIssuer};
use super::service_status::{judge_and_record_statuses, refresh_statuses};
use super::sessions::{LinkError, NodeAnswer, NodeLinks, NodeRequest};
use super::signals::notify_nodes_changed;
use super::signing::SigningKeys;
use super::{Controller, DomainError, run_to_end};
use crate::contract::session::{ControllerReference, RuntimeSessionReference};
use crate::contract::storage_claim::{
    ApplyRuntimeLocalStorageClaimRequest, ApplyRuntimeLocalStorageClaimResponse, ApplyRuntimeLocalStorageClaimStatus,
    LocalStorageClaimNodeState as NodeState, LocalStorageInitialization, RuntimeLocalStorageClaim,
    bind_apply_runtime_local_storage_claim_request, bind_apply_runtime_local_storage_claim_response,
};
use crate::contract::{Id, NodeId};
use crate::store::assignments::AssignmentFacts;
use crate::store::network::LeaseWriter;
use crate::store::storage_claims::{ClaimAnswer, ClaimChange, ClaimFault, StoredClaim};
use crate::store::{ChangeKind, FactScope, SharedStore, StoreError};
use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;
use tokio::sync::{Notify, Semaphore, watch};
use tokio::time::Instant;

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
    /// Something only a status reads was reported (a claim answered again, under a new session or
    /// in a state the plan does not read): these services' statuses are judged again, nothing is
    /// reconciled.
    Reported(BTreeSet<Id>),
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
#[derive(Debug, Default, Clone)]
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
    /// The facts of the scope as the reconcile left them (read under the lock, with what it
    /// wrote), for judging the scope's statuses without reading them again.
    pub facts: Option<AssignmentFacts>,
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
/// once per interval, not once per designation.
///
/// **Background runs share a fixed number of places** (`workers`, over all clusters): a cluster
/// whose run waits for a place keeps gathering changes into it. So when writes to many clusters
/// outpace the background work, each run covers more of them; the background work neither takes
/// more than its places of the store's connections nor grows per write with the number of
/// clusters written (without the bound, 64 clients rotating 64 clusters reconciled once per
/// designation and halved the throughput of 16). The decision itself is taken under the cluster's
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
    /// The places of background runs, over all clusters.
    workers: Arc<Semaphore>,
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

/// Removes a task's entry from its registry if the task ends without doing so (a panic, or the
/// runtime shutting down), so the next wake or change of its key starts a new task.
struct EntryGuard<'a, Key: std::hash::Hash + Eq, Entry> {
    entries: &'a Mutex<HashMap<Key, Entry>>,
    key: &'a Key,
    armed: bool,
}

impl<Key: std::hash::Hash + Eq, Entry> Drop for EntryGuard<'_, Key, Entry> {
    fn drop(&mut self) {
        if self.armed {
            self.entries.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(self.key);
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
    /// one cluster at most once per `interval` and at most `workers` (at least 1) at once.
    pub fn new(
        store: SharedStore,
        clock: Arc<dyn Clock>,
        signing: Arc<SigningKeys>,
        controller: ControllerReference,
        projections: Arc<ProjectionIssuer>,
        interval: Duration,
        workers: usize,
    ) -> Self {
        AssignmentReconciler {
            store,
            clock,
            signing,
            controller,
            projections,
            interval,
            running: Mutex::default(),
            workers: Arc::new(Semaphore::new(workers.max(1))),
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
                Change::Claims(touched) | Change::Reported(touched) => services.extend(touched.iter().cloned()),
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
        if !owed && changes.iter().all(|change| matches!(change, Change::Reported(_))) {
            // Nothing the plan reads moved: only the statuses of the services reported on.
            let services = changes
                .iter()
                .flat_map(|change| match change {
                    Change::Reported(services) => services.iter().cloned().collect::<Vec<_>>(),
                    _ => Vec::new(),
                })
                .collect();
            self.refresh_statuses(cluster_id, &FactScope::Services(services)).await;
            return;
        }
        let whole = || Touched { scope: FactScope::Cluster, nodes: BTreeSet::new(), granting: BTreeSet::new() };
        let touched = if owed { Ok(whole()) } else { self.touched(cluster_id, changes).await };
        let touched = touched.unwrap_or_else(|error| {
            tracing::warn!(cluster = %cluster_id, %error, "the services a change touches are not readable; reconciling the cluster");
            whole()
        });
        let mut judged_from = None;
        let issue = match self.reconcile_twice_if_freed(cluster_id, &touched.scope).await {
            Ok(mut reconciled) => {
                judged_from = reconciled.facts.take();
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
        // The scope's statuses are judged from the facts the reconcile read under its lock and
        // what it wrote (no second read of the scope); after a failed reconcile, from a new read.
        match judged_from {
            Some(facts) => self.record_statuses(cluster_id, &touched.scope, &facts).await,
            None => self.refresh_statuses(cluster_id, &touched.scope).await,
        }
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
            reconciled.facts = again.facts;
        }
        Ok(reconciled)
    }

    /// Reconciles the whole cluster when it is owed a reconcile (its last one in this process
    /// failed), telling the nodes whose set changed but `asking`.
    pub async fn reconcile_if_owed(&self, cluster_id: &Id, asking: &NodeId) {
        if self.lock_owed().contains(cluster_id) {
            self.reconcile_changes(cluster_id, &[Change::Everything], Some(asking)).await;
        }
    }

    /// Recomputes the statuses of the scope's services, best effort: a failure is logged and the
    /// next change, read or full pass repairs it.
    /// Judges the statuses of the scope's services from `facts` and records what changed, best
    /// effort.
    async fn record_statuses(&self, cluster_id: &Id, scope: &FactScope, facts: &AssignmentFacts) {
        let now = self.clock.now_ms();
        if let Err(error) =
            judge_and_record_statuses(&self.store, cluster_id, scope, facts, &self.controller, now).await
        {
            tracing::warn!(cluster = %cluster_id, %error, "service status refresh failed");
        }
    }

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
        let (claims, changes, planned) = match facts.cluster {
            Some(_) => {
                let lookups = Lookups::of(facts);
                let claims = plan_claims(facts, &lookups, &self.controller, &key);
                let planned = with_issued_claims(facts, &claims, issued_at).into_owned();
                let changes = plan_assignments(&planned, &lookups, &self.controller, &key);
                (claims, changes, planned)
            }
            None => (Vec::new(), Vec::new(), facts.clone()),
        };
        // Leases follow the assignments where there may be something to allocate or release: a
        // cluster with neither a plan nor a live lease has none (the plan and the leases were
        // read under this lock, and applying assignments changes neither), nor one whose changes
        // move no lease (`leases_may_change`). A reconcile asked for all leases (the whole
        // cluster, a full pass's correction) lets them follow whatever changed: a plan written
        // lets waiting assignments get their leases.
        let leases_follow =
            (facts.plan.is_some() || !facts.leases.is_empty()) && (all_leases || leases_may_change(facts, &changes));
        if claims.is_empty() && changes.is_empty() && !leases_follow {
            locked.rollback().await?;
            return Ok(Reconciled { facts: Some(planned), ..Reconciled::default() });
        }
        let nodes = touched_nodes(facts, &changes);
        locked.apply_claims(&claims, issued_at).await?;
        locked.apply(&changes).await?;
        let leases = if leases_follow {
            leases_follow_assignments(&mut *locked.leases(), scope).await?
        } else {
            LeasesFollowed::default()
        };
        if claims.is_empty() && changes.is_empty() && leases.changes == 0 {
            locked.rollback().await?;
            return Ok(Reconciled { facts: Some(planned), ..Reconciled::default() });
        }
        locked.commit().await?;
        let claim_nodes = claims.iter().map(|ClaimChange::Issue(signed)| signed.payload.node_id.clone()).collect();
        notify_nodes_changed(&self.store, cluster_id, claim_nodes, &[ChangeKind::Claims]).await;
        tracing::info!(cluster = %cluster_id, claims = claims.len(), changes = changes.len(), leases = leases.changes, nodes = nodes.len(), "runtime assignments reconciled");
        let mut after = with_changes(planned, &changes);
        if let Some(leases) = &leases.after {
            after.leases = leases.clone();
        }
        Ok(Reconciled {
            nodes,
            lease_nodes: leases.nodes,
            lease_services: leases.services,
            assignment_changes: changes.len(),
            claim_changes: claims.len(),
            lease_changes: leases.changes,
            lease_releases: leases.releases,
            facts: Some(after),
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
        let mut guard = EntryGuard { entries: &self.running, key: &cluster_id, armed: true };
        let mut covered = 0;
        loop {
            // A change arriving while the run waits for its place joins it. The semaphore is
            // never closed.
            let place = self.workers.acquire().await.expect("the workers semaphore stays open");
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
            drop(place);
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
            found.services.extend(planned_lease_services(&facts));
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
    /// Reconciles the assignments, claims and leases of `scope` now, in one locked transaction,
    /// and answers what it wrote (no pushes, projections or statuses).
    pub async fn reconcile_assignments(&self, cluster_id: &Id, scope: &FactScope) -> Result<Reconciled, DomainError> {
        self.reconciler.reconcile_locked(cluster_id, scope).await
    }

    /// After a write that may change the cluster's assignments: reconciles what `change` touches
    /// while the writer waits ([`run_to_end`]), sends `pushRuntimeChanged { kinds: ["assignments"] }`
    /// to the nodes whose set changed, wherever their sockets are, issues the projections of the
    /// nodes it reached and judges the touched services again. Best effort: a failure is logged
    /// and never fails the write that called it (the cluster is then owed a whole reconcile).
    pub async fn assignments_changed(&self, cluster_id: &Id, change: Change) {
        let (reconciler, cluster_id) = (Arc::clone(&self.reconciler), cluster_id.clone());
        run_to_end(async move { reconciler.reconcile_changes(&cluster_id, std::slice::from_ref(&change), None).await })
            .await;
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
}

/// A new lease id: `lease-` and 128 random bits in hex, never reused.
fn new_lease_id() -> Id {
    Id::parse(&format!("lease-{}", uuid::Uuid::new_v4().simple())).expect("a hex id is an Id")
}

/// Makes the live leases of the scope's services follow their assignments
/// ([`plan_lease_changes`]) in the transaction `leases` holds the cluster's lock with. Answers
/// what it wrote.
pub async fn leases_follow_assignments(
    leases: &mut dyn LeaseWriter,
    scope: &FactScope,
) -> Result<LeasesFollowed, StoreError> {
    let facts = leases.lease_facts(scope).await?;
    let changes = plan_lease_changes(&facts, new_lease_id);
    if !changes.is_empty() {
        leases.apply_leases(&changes).await?;
        if let Some(plan) = &facts.plan {
            tracing::info!(cluster = %plan.cluster_id, changes = changes.len(), "runtime network leases follow assignments");
        }
    }
    let after = crate::store::network::changed_lease_set(&facts.leases, &changes);
    Ok(LeasesFollowed { after: Some(after), ..followed(&facts.leases, &changes) })
}

/// How claims are pushed (from `ControllerSettings`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClaimPushSettings {
    /// The first retry delay after a fault, a missing answer or `import-required`; it doubles
    /// with every retry of the same generation.
    pub retry_initial: Duration,
    /// The longest retry delay.
    pub retry_max: Duration,
    /// How long one push waits for the node's answer.
    pub timeout: Duration,
    /// The most pushes in flight at once, over all nodes.
    pub concurrency: usize,
    /// How often a connected node's claims are read again when nothing woke its worker (a
    /// missed signal).
    pub sweep: Duration,
}

/// A generation's retry schedule, kept by its node's worker.
struct Retry {
    attempts: u32,
    not_before: Instant,
}

/// What one push came to.
enum Pushed {
    /// An answer that passed the bind.
    Answered(ApplyRuntimeLocalStorageClaimResponse),
    /// A protocol fault: an answer that did not pass, or an error answer.
    Fault(&'static str),
    /// No answer in time, or a request that does not bind to the session (retried later).
    NoAnswer,
    /// The node's socket is gone (its next session pushes again).
    Gone,
}

/// What one worker pass came to.
struct Pass {
    /// When the worker must look again (a retry), if ever.
    next: Option<Instant>,
    /// The services of the claims whose recorded state changed in a way the plan reads.
    changed: BTreeSet<Id>,
    /// The services of the claims whose recorded state or session changed otherwise (their
    /// statuses move: `converged` waits for every sealed claim `ready` under the current session).
    reported: BTreeSet<Id>,
    /// True when the node has no current session on a socket of this process.
    disconnected: bool,
}

/// One node's worker entry.
struct Worker {
    /// How many times the worker was woken while it lives.
    requested: u64,
    wake: Arc<Notify>,
}

/// Pushes claim generations to the nodes connected to this process (see the module
/// documentation).
pub struct ClaimPusher {
    store: SharedStore,
    clock: Arc<dyn Clock>,
    links: Arc<NodeLinks>,
    settings: ClaimPushSettings,
    permits: Arc<Semaphore>,
    workers: Mutex<HashMap<(Id, NodeId), Worker>>,
    reconciler: OnceLock<Weak<AssignmentReconciler>>,
}

impl ClaimPusher {
    /// A pusher over `store`, sending through `links`.
    pub fn new(store: SharedStore, clock: Arc<dyn Clock>, links: Arc<NodeLinks>, settings: ClaimPushSettings) -> Self {
        ClaimPusher {
            store,
            clock,
            links,
            permits: Arc::new(Semaphore::new(settings.concurrency.max(1))),
            settings,
            workers: Mutex::default(),
            reconciler: OnceLock::new(),
        }
    }

    /// The reconciler a state change schedules (set once, when the controller is built).
    pub fn set_reconciler(&self, reconciler: Weak<AssignmentReconciler>) {
        let _ = self.reconciler.set(reconciler);
    }

    fn lock_workers(&self) -> std::sync::MutexGuard<'_, HashMap<(Id, NodeId), Worker>> {
        self.workers.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Wakes the node's worker (starting one if none runs): new generations were issued for it,
    /// or it opened a session on a socket of this process.
    pub fn wake(self: &Arc<Self>, cluster_id: &Id, node_id: &NodeId) {
        let key = (cluster_id.clone(), node_id.clone());
        let wake = {
            let mut workers = self.lock_workers();
            if let Some(worker) = workers.get_mut(&key) {
                worker.requested += 1;
                worker.wake.notify_one();
                return;
            }
            let wake = Arc::new(Notify::new());
            workers.insert(key.clone(), Worker { requested: 1, wake: wake.clone() });
            wake
        };
        let pusher = Arc::clone(self);
        tokio::spawn(async move { pusher.run_worker(key, wake).await });
    }

    /// One node's worker: passes over its claims until the node is gone from this process and
    /// no wake is pending; between passes it sleeps until the next retry, a wake or the sweep.
    async fn run_worker(self: Arc<Self>, key: (Id, NodeId), wake: Arc<Notify>) {
        let mut guard = EntryGuard { entries: &self.workers, key: &key, armed: true };
        let mut retries: HashMap<(Id, u64), Retry> = HashMap::new();
        let mut covered = 0;
        loop {
            let requested = self.lock_workers().get(&key).map_or(covered, |worker| worker.requested);
            let pass = self.pass(&key.0, &key.1, &mut retries).await;
            covered = requested;
            self.states_changed(&key.0, pass.changed, pass.reported);
            if pass.disconnected {
                let mut workers = self.lock_workers();
                if workers.get(&key).is_none_or(|worker| worker.requested == covered) {
                    workers.remove(&key);
                    guard.armed = false;
                    return;
                }
                continue;
            }
            let until = pass.next.unwrap_or_else(|| Instant::now() + self.settings.sweep);
            tokio::select! {
                () = wake.notified() => {}
                () = tokio::time::sleep_until(until) => {}
            }
        }
    }

    /// Schedules, in the background, a reconcile of the services whose claims' recorded state
    /// changed in a way the plan reads (it can let an assignment be issued: an `import` volume
    /// became `ready`), and a judgement of the statuses of those whose answers moved otherwise.
    fn states_changed(&self, cluster_id: &Id, changed: BTreeSet<Id>, reported: BTreeSet<Id>) {
        let Some(reconciler) = self.reconciler.get().and_then(Weak::upgrade) else { return };
        if !changed.is_empty() {
            reconciler.schedule(cluster_id, Change::Claims(changed));
        }
        if !reported.is_empty() {
            reconciler.schedule(cluster_id, Change::Reported(reported));
        }
    }

    /// One pass over the node's claims: pushes each head that needs it and is not waiting out a
    /// retry, and records what came back.
    async fn pass(&self, cluster_id: &Id, node_id: &NodeId, retries: &mut HashMap<(Id, u64), Retry>) -> Pass {
        let mut pass = Pass { next: None, changed: BTreeSet::new(), reported: BTreeSet::new(), disconnected: false };
        let Some(session) = self.links.connected_session(cluster_id, node_id) else {
            pass.disconnected = true;
            return pass;
        };
        let retry_soon = || Pass {
            next: Some(Instant::now() + self.settings.retry_initial),
            changed: BTreeSet::new(),
            reported: BTreeSet::new(),
            disconnected: false,
        };
        // The store decides which session is current (several processes agree on it).
        match self.store.current_session(cluster_id, node_id).await {
            Ok(Some(current)) if current == session => {}
            Ok(_) => return Pass { disconnected: true, ..pass },
            Err(error) => {
                tracing::warn!(cluster = %cluster_id, node = %node_id, %error, "claim push: the session is not readable");
                return retry_soon();
            }
        }
        let heads = match self.store.node_claim_heads(cluster_id, node_id).await {
            Ok(heads) => heads,
            Err(error) => {
                tracing::warn!(cluster = %cluster_id, node = %node_id, %error, "claim push: the claims are not readable");
                return retry_soon();
            }
        };
        for head in &heads.unreadable {
            tracing::error!(cluster = %cluster_id, node = %node_id, claim = %head.reference.id, generation = head.reference.generation, problem = %head.problem, "a stored claim does not read back; not pushed");
        }
        for stored in &heads.readable {
            if !needs_push(stored, &session) {
                continue;
            }
            let claim = &stored.signed.payload;
            let key = (claim.id.clone(), claim.generation);
            let now = Instant::now();
            if let Some(retry) = retries.get(&key)
                && retry.not_before > now
            {
                pass.next = Some(pass.next.map_or(retry.not_before, |next| next.min(retry.not_before)));
                continue;
            }
            let pushed = self.push(&session, claim).await;
            let outcome = match &pushed {
                Pushed::Answered(_) => "answered",
                Pushed::Fault(_) => "fault",
                Pushed::NoAnswer => "no-answer",
                Pushed::Gone => "gone",
            };
            metrics::counter!("cloudly_storage_claim_pushes_total", "outcome" => outcome).increment(1);
            let retry = match pushed {
                Pushed::Gone => return Pass { disconnected: true, ..pass },
                Pushed::Answered(response) => match self.record_answer(&session, stored, &response).await {
                    Ok(moved) => {
                        match moved {
                            AnswerMoved::Plan => pass.changed.insert(claim.service_id.clone()),
                            AnswerMoved::Status => pass.reported.insert(claim.service_id.clone()),
                            AnswerMoved::Nothing => false,
                        };
                        response.state == NodeState::ImportRequired
                    }
                    Err(error) => {
                        tracing::warn!(cluster = %cluster_id, claim = %claim.id, %error, "a claim answer was not recorded");
                        true
                    }
                },
                Pushed::Fault(fault) => {
                    tracing::warn!(cluster = %cluster_id, node = %node_id, claim = %claim.id, generation = claim.generation, fault, "claim push: protocol fault");
                    let fault = ClaimFault { fault: fault.to_owned(), at: self.clock.now_ms() };
                    if let Err(error) =
                        self.store.record_claim_fault(cluster_id, &claim.id, claim.generation, &fault).await
                    {
                        tracing::warn!(cluster = %cluster_id, claim = %claim.id, %error, "a claim fault was not recorded");
                    }
                    true
                }
                Pushed::NoAnswer => true,
            };
            if retry {
                let attempts = retries.get(&key).map_or(0, |retry| retry.attempts);
                let delay =
                    self.settings.retry_initial.saturating_mul(1 << attempts.min(16)).min(self.settings.retry_max);
                let not_before = Instant::now() + delay;
                retries.insert(key, Retry { attempts: attempts + 1, not_before });
                pass.next = Some(pass.next.map_or(not_before, |next| next.min(not_before)));
            } else {
                retries.remove(&key);
            }
        }
        pass
    }

    /// Sends one claim generation down the node's socket and judges the answer.
    async fn push(&self, session: &RuntimeSessionReference, claim: &RuntimeLocalStorageClaim) -> Pushed {
        let request = ApplyRuntimeLocalStorageClaimRequest { session: session.clone(), claim: claim.clone() };
        if bind_apply_runtime_local_storage_claim_request(&request, session).is_err() {
            // The node's namespace moved since the claim was issued: the next reconcile issues
            // a generation for the new one.
            tracing::info!(claim = %claim.id, node = %claim.node_id, "a claim does not bind to its node's session; not pushed");
            return Pushed::NoAnswer;
        }
        let Ok(_permit) = self.permits.acquire().await else { return Pushed::Gone };
        let answer = self
            .links
            .request(
                &session.cluster_id,
                &session.node_id,
                NodeRequest::ApplyClaim(Box::new(request.clone())),
                self.settings.timeout,
            )
            .await;
        match answer {
            Ok(NodeAnswer::Claim(response)) => judge_answer(&request, &response),
            Ok(NodeAnswer::Acknowledged) | Err(LinkError::Unreadable) => {
                Pushed::Fault("the answer is not an applyRuntimeLocalStorageClaim response")
            }
            Err(LinkError::Refused) => Pushed::Fault("the node answered an error"),
            Err(LinkError::Timeout) => Pushed::NoAnswer,
            Err(LinkError::Closed | LinkError::NotConnected) => Pushed::Gone,
        }
    }

    /// Records a bound answer on the generation pushed (and, for `historical`, on the newer
    /// generation it names when this controller issued it with that digest). Answers what the
    /// answer moved: nothing when the generation keeps an answer of a newer session.
    async fn record_answer(
        &self,
        session: &RuntimeSessionReference,
        stored: &StoredClaim,
        response: &ApplyRuntimeLocalStorageClaimResponse,
    ) -> Result<AnswerMoved, DomainError> {
        let claim = &stored.signed.payload;
        let answer = ClaimAnswer {
            status: status_text(response.status).to_owned(),
            state: response.state.as_str().to_owned(),
            session_id: session.id.clone(),
            session_generation: session.generation,
            answered_at: self.clock.now_ms(),
        };
        let cluster_id = &session.cluster_id;
        if !self.store.record_claim_answer(cluster_id, &claim.id, claim.generation, &answer).await? {
            tracing::info!(cluster = %cluster_id, claim = %claim.id, generation = claim.generation, session = session.generation, "claim answer of an older session not recorded");
            return Ok(AnswerMoved::Nothing);
        }
        if response.status == ApplyRuntimeLocalStorageClaimStatus::Historical {
            let newer = self.store.get_claim(cluster_id, &claim.id, response.claim.generation).await?;
            if newer.is_some_and(|newer| newer.signed.payload.reference() == response.claim) {
                self.store.record_claim_answer(cluster_id, &claim.id, response.claim.generation, &answer).await?;
            }
        }
        tracing::info!(cluster = %cluster_id, claim = %claim.id, generation = claim.generation, status = %answer.status, state = %answer.state, "claim answer recorded");
        let before = node_state(stored);
        let historical = response.status == ApplyRuntimeLocalStorageClaimStatus::Historical;
        let state_moved = before != Some(response.state);
        if state_moved && (historical || state_change_moves_the_plan(claim, before, response.state)) {
            return Ok(AnswerMoved::Plan);
        }
        let session_moved = stored.answer.as_ref().is_none_or(|before| {
            before.session_id != answer.session_id || before.session_generation != answer.session_generation
        });
        Ok(if state_moved || session_moved { AnswerMoved::Status } else { AnswerMoved::Nothing })
    }
}

/// What a recorded claim answer moved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AnswerMoved {
    /// What the plan issues (a reconcile of the claim's service).
    Plan,
    /// Only its service's status (the answer's state or session changed).
    Status,
    /// Nothing.
    Nothing,
}

/// True when a claim's node state going from `before` to `after` can change what the plan calls
/// for: an `uncertain` claim is held and keeps its service waiting, a `purged` one lets its volume
/// be bound again, and an `import` volume's service waits until it is `ready`. An `empty` volume
/// answered `ready` (the common answer) moves nothing: its assignment sealed the claim when it was
/// issued.
fn state_change_moves_the_plan(claim: &RuntimeLocalStorageClaim, before: Option<NodeState>, after: NodeState) -> bool {
    let read_by_the_plan = |state: Option<NodeState>| matches!(state, Some(NodeState::Uncertain | NodeState::Purged));
    claim.initialization == LocalStorageInitialization::Import
        || read_by_the_plan(before)
        || read_by_the_plan(Some(after))
}

/// The wire spelling of an answer's status (also the stored one).
fn status_text(status: ApplyRuntimeLocalStorageClaimStatus) -> &'static str {
    match status {
        ApplyRuntimeLocalStorageClaimStatus::Accepted => "accepted",
        ApplyRuntimeLocalStorageClaimStatus::Replay => "replay",
        ApplyRuntimeLocalStorageClaimStatus::Historical => "historical",
    }
}

/// An answer (read as a response by the transport) trusted only when it passes
/// `bindApplyRuntimeLocalStorageClaimResponse` against the request it answers.
fn judge_answer(
    request: &ApplyRuntimeLocalStorageClaimRequest,
    response: &ApplyRuntimeLocalStorageClaimResponse,
) -> Pushed {
    match bind_apply_runtime_local_storage_claim_response(response, request) {
        Ok(response) => Pushed::Answered(response),
        Err(_) => Pushed::Fault("the answer does not bind to the claim it answers"),
    }
}

/// True when the head generation must be pushed under `session`: never answered; answered
/// `ready` under an older session; or `import-required` (asked again until `ready`). `purged`
/// and `uncertain` are final until an operator decides.
fn needs_push(stored: &StoredClaim, session: &RuntimeSessionReference) -> bool {
    let Some(answer) = &stored.answer else { return true };
    match NodeState::parse(&answer.state) {
        Some(NodeState::Ready) => answer.session_id != session.id || answer.session_generation != session.generation,
        Some(NodeState::ImportRequired) => true,
        Some(NodeState::Purged | NodeState::Uncertain) | None => false,
    }
}
