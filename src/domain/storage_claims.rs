//! Runtime local storage claims (`06-storage-claims.md`): issuing them from the service specs,
//! pushing them to their nodes (`applyRuntimeLocalStorageClaim`), judging the node's answers, and
//! the operator methods `listRuntimeLocalStorageClaims` and `resolveRuntimeLocalStorageClaim`.
//!
//! **Issuing.** Every volume of a spec the status judge does not refuse gets a claim on the node
//! the spec pins it to, with that node's runtime namespace. The claim id is stable per (cluster,
//! service, volume); a new generation (linking the previous one) is issued only when what it
//! carries changes. When the volume leaves its spec, or the service is deleted, the head `bound`
//! generation is followed by a `purge` generation; the claims of a service whose current spec is
//! refused stay as they are, also those of volumes the refused revision drops (a refusal never
//! purges data). A claim whose node answered `uncertain` is held — no new
//! generation, no purge, no mount — until an operator decides: `rebind` issues a new bound
//! generation, `purge` a purge generation (or, for an uncertain purge, pushes it again). After a
//! purge the volume, declared again, gets a new bound generation once the node answered `purged`.
//! Claims are planned, signed and written in the assignment reconcile's locked transaction
//! (`assignments`), before the assignments, which seal the references of the bound heads of
//! their service's declared volumes in `workload.storage` ([`sealed_claims`]).
//!
//! **Status.** A declared `import` volume whose head its node has not answered `ready` keeps the
//! service `waiting` with `storage-import-pending`; a declared volume whose claim is `uncertain`,
//! being purged or unreadable keeps it `waiting` with `conflict` ([`storage_waits`]).
//!
//! **Pushing.** [`ClaimPusher`] runs one worker per connected node of this process: it pushes
//! every head generation of the node that needs it — never answered, or answered `ready` under an
//! older session (so every new session gets every live claim again), or `import-required` (asked
//! again with backoff until the node says `ready`) — and records the answer when it passes
//! `bindApplyRuntimeLocalStorageClaimResponse`. An answer that does not (or an error answer) is
//! counted as a protocol fault on that generation, its state left as it was, and the push retried
//! with exponential backoff. `purged` and `uncertain` are never pushed again (an operator's
//! decision may). Pushes of all nodes share one bound of concurrent requests. A state change
//! schedules a reconcile, so an `import` volume that became `ready` gets its assignment. Claims
//! issued by any controller process wake the worker of the process holding the node's socket
//! (a `claims` signal, `signals`); a worker also reads its node's claims again every
//! `storage_claim_sweep_ms` (30 s) in case a signal was missed.

use super::assignments::{AssignmentReconciler, Change};
use super::service_status::{Lookups, refusal_of};
use super::sessions::{LinkError, NodeLinks};
use super::{Clock, Controller, DomainError, MissingKind};
use crate::contract::inventory::{ServiceRuntimeSpec, VolumeInitialization, VolumeSpec};
use crate::contract::reader::compare_bytes;
use crate::contract::service_status::ServiceRuntimeWaitingReason as Waiting;
use crate::contract::session::{ControllerReference, RuntimeSessionReference};
use crate::contract::signing::sign;
use crate::contract::storage_claim::{
    APPLY_RUNTIME_LOCAL_STORAGE_CLAIM_METHOD, ApplyRuntimeLocalStorageClaimRequest,
    ApplyRuntimeLocalStorageClaimResponse, ApplyRuntimeLocalStorageClaimStatus, InitialOwnership,
    LocalStorageAccessMode, LocalStorageClaimNodeState as NodeState, LocalStorageInitialization, LocalStorageLifecycle,
    LocalStorageMount, LocalStorageReclaimPolicy, LocalStorageSource, MountPath, RuntimeLocalStorageClaim,
    bind_apply_runtime_local_storage_claim_request, bind_apply_runtime_local_storage_claim_response,
    snapshot_runtime_local_storage_claim,
};
use crate::contract::{AuthorityReference, DigestedRecord as _, Id, NodeId, Sha256Digest};
use crate::store::sessions::AssignmentFacts;
use crate::store::storage_claims::{
    ClaimAnswer, ClaimChange, ClaimFault, ClaimResolution, LastClaimAnswer, StoredClaim,
};
use crate::store::{ChangeKind, FactScope, SharedStore};
use ed25519_dalek::SigningKey;
use sha2::{Digest as _, Sha256};
use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;
use tokio::sync::{Notify, Semaphore};
use tokio::time::Instant;

/// The stable id of a service's volume claim: `lsc-` + 40 hex digits of
/// SHA-256(cluster ∥ 0 ∥ service ∥ 0 ∥ volume).
pub fn claim_id(cluster_id: &Id, service_id: &Id, volume_id: &Id) -> Id {
    let mut hasher = Sha256::new();
    hasher.update(cluster_id.as_str().as_bytes());
    hasher.update([0]);
    hasher.update(service_id.as_str().as_bytes());
    hasher.update([0]);
    hasher.update(volume_id.as_str().as_bytes());
    let hex: String = hasher.finalize().iter().take(20).map(|byte| format!("{byte:02x}")).collect();
    Id::parse(&format!("lsc-{hex}")).expect("a hex id is an Id")
}

/// An operator's decision on an `uncertain` claim (`resolveRuntimeLocalStorageClaim`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClaimDecision {
    /// `purge`: delete the bytes (a purge generation, or the uncertain purge pushed again).
    Purge,
    /// `rebind`: keep the bytes and mount them (a new bound generation).
    Rebind,
}

impl ClaimDecision {
    /// Parses the wire spelling (also the stored one).
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "purge" => Some(ClaimDecision::Purge),
            "rebind" => Some(ClaimDecision::Rebind),
            _ => None,
        }
    }

    /// The wire spelling (also the stored one).
    pub fn as_str(self) -> &'static str {
        match self {
            ClaimDecision::Purge => "purge",
            ClaimDecision::Rebind => "rebind",
        }
    }
}

/// The node's last trusted state of a stored generation.
pub fn node_state(stored: &StoredClaim) -> Option<NodeState> {
    stored.answer.as_ref().and_then(|answer| NodeState::parse(&answer.state))
}

fn resolution(stored: &StoredClaim) -> Option<ClaimDecision> {
    stored.resolution.as_ref().and_then(|resolution| ClaimDecision::parse(&resolution.decision))
}

/// True when the controller holds the claim for an operator: `uncertain`, no decision yet.
fn held(stored: &StoredClaim) -> bool {
    node_state(stored) == Some(NodeState::Uncertain) && stored.resolution.is_none()
}

/// The unsigned generation-1 claim the facts call for for one volume of a spec, or `None` when
/// its node does not exist or a value does not fit the claim (neither passes the status judge).
fn draft_claim(
    spec: &ServiceRuntimeSpec,
    volume: &VolumeSpec,
    lookups: &Lookups,
    controller: &ControllerReference,
) -> Option<RuntimeLocalStorageClaim> {
    let body = &spec.body;
    let node_id = body.placement.node_ids.first()?;
    let node = lookups.node(node_id)?;
    let initialization = match volume.initialization {
        VolumeInitialization::Empty { ownership } => LocalStorageInitialization::Empty(InitialOwnership {
            uid: u32::try_from(ownership.uid).ok()?,
            gid: u32::try_from(ownership.gid).ok()?,
            mode: u16::try_from(ownership.mode).ok()?,
        }),
        VolumeInitialization::Import => LocalStorageInitialization::Import,
    };
    Some(RuntimeLocalStorageClaim {
        id: claim_id(&body.cluster_id, &body.service_id, &volume.id),
        generation: 1,
        previous: None,
        controller: controller.clone(),
        organization_id: body.organization_id.clone(),
        cluster_id: body.cluster_id.clone(),
        node_id: node_id.clone(),
        runtime_namespace: node.node.runtime_namespace.clone(),
        service_id: body.service_id.clone(),
        volume_id: volume.id.clone(),
        source: LocalStorageSource::Directory,
        initialization,
        mount: LocalStorageMount { mount_path: MountPath::parse(&volume.mount_path)?, read_only: volume.read_only },
        access_mode: LocalStorageAccessMode::ReadWriteOnce,
        reclaim_policy: LocalStorageReclaimPolicy::Retain,
        lifecycle: LocalStorageLifecycle::Bound,
        digest: Sha256Digest::from_bytes(&[0; 32]),
    })
}

/// The claims the facts call for (drafts, by id: the volumes of every spec that is not refused),
/// and the services whose current spec is refused (their claims stay as they are).
fn desired_claims(
    facts: &AssignmentFacts,
    lookups: &Lookups,
    controller: &ControllerReference,
) -> (BTreeMap<Id, RuntimeLocalStorageClaim>, BTreeSet<Id>) {
    let mut desired = BTreeMap::new();
    let mut refused = BTreeSet::new();
    if facts.cluster.is_none() {
        return (desired, refused);
    }
    for spec in &facts.services {
        let body = &spec.body;
        if refusal_of(spec, facts, lookups).is_some() {
            refused.insert(body.service_id.clone());
            continue;
        }
        for volume in &body.volumes {
            if let Some(draft) = draft_claim(spec, volume, lookups, controller) {
                desired.insert(draft.id.clone(), draft);
            }
        }
    }
    (desired, refused)
}

/// True when two claims carry the same order (everything but the revision members and digest).
fn same_content(left: &RuntimeLocalStorageClaim, right: &RuntimeLocalStorageClaim) -> bool {
    let order = |claim: &RuntimeLocalStorageClaim| RuntimeLocalStorageClaim {
        generation: 0,
        previous: None,
        digest: Sha256Digest::from_bytes(&[0; 32]),
        ..claim.clone()
    };
    order(left) == order(right)
}

/// `draft` as the generation after `head` (or generation 1), digested.
fn following(mut draft: RuntimeLocalStorageClaim, head: Option<AuthorityReference>) -> RuntimeLocalStorageClaim {
    if let Some(head) = head {
        draft.generation = head.generation + 1;
        draft.previous = Some(head);
    } else {
        draft.generation = 1;
        draft.previous = None;
    }
    draft.digest = draft.compute_digest();
    draft
}

/// The purge generation following the bound generation `bound`.
fn purge_of(bound: &RuntimeLocalStorageClaim) -> RuntimeLocalStorageClaim {
    let draft = RuntimeLocalStorageClaim { lifecycle: LocalStorageLifecycle::Purge, ..bound.clone() };
    following(draft, Some(bound.reference()))
}

/// True when the claim's record passes the contract's reader (with its digest).
fn reads_back(claim: &RuntimeLocalStorageClaim) -> bool {
    serde_json::to_value(claim).is_ok_and(|value| snapshot_runtime_local_storage_claim(&value).is_ok())
}

/// The claim generations a reconcile issues, unsigned but digested (see the module
/// documentation for the rules). Pure but for one check: a generation whose record would not
/// read back is never issued (logged instead).
pub(super) fn planned_claims(
    facts: &AssignmentFacts,
    lookups: &Lookups,
    controller: &ControllerReference,
) -> Vec<RuntimeLocalStorageClaim> {
    let (mut desired, refused) = desired_claims(facts, lookups, controller);
    let heads = &facts.claims;
    let mut issued = Vec::new();
    for head in &heads.readable {
        let current = &head.signed.payload;
        let wanted = desired.remove(&current.id);
        if held(head) {
            continue;
        }
        let decision = resolution(head);
        let next = match (current.lifecycle, wanted) {
            (LocalStorageLifecycle::Bound, _) if decision == Some(ClaimDecision::Purge) => Some(purge_of(current)),
            (LocalStorageLifecycle::Bound, Some(wanted)) => (!same_content(current, &wanted)
                || decision == Some(ClaimDecision::Rebind))
            .then(|| following(wanted, Some(current.reference()))),
            (LocalStorageLifecycle::Bound, None) => (!refused.contains(&current.service_id)).then(|| purge_of(current)),
            (LocalStorageLifecycle::Purge, Some(wanted)) => (node_state(head) == Some(NodeState::Purged)
                || decision == Some(ClaimDecision::Rebind))
            .then(|| following(wanted, Some(current.reference()))),
            (LocalStorageLifecycle::Purge, None) => None,
        };
        issued.extend(next);
    }
    for unreadable in &heads.unreadable {
        // Its content is unknown: it is replaced by the generation the spec calls for, or held.
        if let Some(wanted) = desired.remove(&unreadable.reference.id) {
            issued.push(following(wanted, Some(unreadable.reference.clone())));
        }
    }
    issued.extend(desired.into_values().map(|draft| following(draft, None)));
    issued.retain(|claim| {
        let fits = reads_back(claim);
        if !fits {
            tracing::error!(claim = %claim.id, service = %claim.service_id, "a planned claim would not read back; not issued");
        }
        fits
    });
    issued
}

/// The claim generations a reconcile issues, each signed. Pure but for signing.
pub fn plan_claims(
    facts: &AssignmentFacts,
    lookups: &Lookups,
    controller: &ControllerReference,
    key: &SigningKey,
) -> Vec<ClaimChange> {
    planned_claims(facts, lookups, controller)
        .into_iter()
        .map(|claim| ClaimChange::Issue(Box::new(sign(key, claim))))
        .collect()
}

/// The facts as they are once `changes` (issued at `issued_at`) are written: each new
/// generation the head of its claim, without an answer.
pub(super) fn with_issued_claims<'a>(
    facts: &'a AssignmentFacts,
    changes: &[ClaimChange],
    issued_at: u64,
) -> Cow<'a, AssignmentFacts> {
    if changes.is_empty() {
        return Cow::Borrowed(facts);
    }
    let mut facts = facts.clone();
    for ClaimChange::Issue(signed) in changes {
        let id = &signed.payload.id;
        facts.claims.readable.retain(|head| head.signed.payload.id != *id);
        facts.claims.unreadable.retain(|head| head.reference.id != *id);
        facts.claims.readable.push(StoredClaim {
            signed: (**signed).clone(),
            issued_at,
            answer: None,
            fault_count: 0,
            last_fault: None,
            resolution: None,
        });
    }
    facts
        .claims
        .readable
        .sort_by(|left, right| compare_bytes(left.signed.payload.id.as_str(), right.signed.payload.id.as_str()));
    Cow::Owned(facts)
}

/// The references an assignment of `spec` on `node_id` seals in `workload.storage`: the bound
/// head of each declared volume's claim on that node, sorted by id.
pub(super) fn sealed_claims(
    facts: &AssignmentFacts,
    spec: &ServiceRuntimeSpec,
    node_id: &NodeId,
) -> Vec<AuthorityReference> {
    let body = &spec.body;
    let mut sealed: Vec<AuthorityReference> = body
        .volumes
        .iter()
        .filter_map(|volume| facts.claims.get(&claim_id(&body.cluster_id, &body.service_id, &volume.id)))
        .map(|head| &head.signed.payload)
        .filter(|claim| claim.lifecycle == LocalStorageLifecycle::Bound && claim.node_id == *node_id)
        .map(RuntimeLocalStorageClaim::reference)
        .collect();
    sealed.sort_by(|left, right| compare_bytes(left.id.as_str(), right.id.as_str()));
    sealed
}

/// What keeps one declared volume from being mounted, if anything.
fn volume_waits(facts: &AssignmentFacts, spec: &ServiceRuntimeSpec, volume: &VolumeSpec) -> Option<Waiting> {
    let body = &spec.body;
    let id = claim_id(&body.cluster_id, &body.service_id, &volume.id);
    if facts.claims.get(&id).is_none() && facts.claims.reference(&id).is_some() {
        // An unreadable head.
        return Some(Waiting::Conflict);
    }
    let import = matches!(volume.initialization, VolumeInitialization::Import);
    let Some(head) = facts.claims.get(&id) else {
        return import.then_some(Waiting::StorageImportPending);
    };
    let state = node_state(head);
    if state == Some(NodeState::Uncertain) || head.signed.payload.lifecycle == LocalStorageLifecycle::Purge {
        return Some(Waiting::Conflict);
    }
    let import = head.signed.payload.initialization == LocalStorageInitialization::Import;
    (import && state != Some(NodeState::Ready)).then_some(Waiting::StorageImportPending)
}

/// True when a declared volume of the spec keeps it waiting for `reason` (`conflict` or
/// `storage-import-pending`).
pub(super) fn storage_waits(reason: Waiting, spec: &ServiceRuntimeSpec, facts: &AssignmentFacts) -> bool {
    spec.body.volumes.iter().any(|volume| volume_waits(facts, spec, volume) == Some(reason))
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

/// Removes a worker's entry if its task ends without doing so (a panic, or the runtime shutting
/// down), so the node's next wake starts a new worker.
struct WorkerGuard<'a> {
    pusher: &'a ClaimPusher,
    key: &'a (Id, NodeId),
    armed: bool,
}

impl Drop for WorkerGuard<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.pusher.lock_workers().remove(self.key);
        }
    }
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
        let mut guard = WorkerGuard { pusher: &self, key: &key, armed: true };
        let mut retries: HashMap<(Id, u64), Retry> = HashMap::new();
        let mut covered = 0;
        loop {
            let requested = self.lock_workers().get(&key).map_or(covered, |worker| worker.requested);
            let pass = self.pass(&key.0, &key.1, &mut retries).await;
            covered = requested;
            if !pass.changed.is_empty() {
                self.states_changed(&key.0, pass.changed);
            }
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

    /// Schedules a reconcile of the services whose claims' recorded state changed in a way the
    /// plan reads: it can let an assignment be issued (an `import` volume became `ready`) and
    /// moves statuses.
    fn states_changed(&self, cluster_id: &Id, services: BTreeSet<Id>) {
        if let Some(reconciler) = self.reconciler.get().and_then(Weak::upgrade) {
            reconciler.schedule(cluster_id, Change::Claims(services));
        }
    }

    /// One pass over the node's claims: pushes each head that needs it and is not waiting out a
    /// retry, and records what came back.
    async fn pass(&self, cluster_id: &Id, node_id: &NodeId, retries: &mut HashMap<(Id, u64), Retry>) -> Pass {
        let mut pass = Pass { next: None, changed: BTreeSet::new(), disconnected: false };
        let Some(session) = self.links.connected_session(cluster_id, node_id) else {
            pass.disconnected = true;
            return pass;
        };
        let retry_soon = || Pass {
            next: Some(Instant::now() + self.settings.retry_initial),
            changed: BTreeSet::new(),
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
                    Ok(changed) => {
                        if changed {
                            pass.changed.insert(claim.service_id.clone());
                        }
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
                APPLY_RUNTIME_LOCAL_STORAGE_CLAIM_METHOD,
                request.to_value(),
                self.settings.timeout,
            )
            .await;
        match answer {
            Ok(value) => judge_answer(&request, &value),
            Err(LinkError::Refused(_)) => Pushed::Fault("the node answered an error"),
            Err(LinkError::Timeout) => Pushed::NoAnswer,
            Err(LinkError::Closed | LinkError::NotConnected) => Pushed::Gone,
        }
    }

    /// Records a bound answer on the generation pushed (and, for `historical`, on the newer
    /// generation it names when this controller issued it with that digest). True when the
    /// pushed generation's state changed.
    async fn record_answer(
        &self,
        session: &RuntimeSessionReference,
        stored: &StoredClaim,
        response: &ApplyRuntimeLocalStorageClaimResponse,
    ) -> Result<bool, DomainError> {
        let claim = &stored.signed.payload;
        let answer = ClaimAnswer {
            status: status_text(response.status).to_owned(),
            state: response.state.as_str().to_owned(),
            session_id: session.id.clone(),
            session_generation: session.generation,
            answered_at: self.clock.now_ms(),
        };
        let cluster_id = &session.cluster_id;
        self.store.record_claim_answer(cluster_id, &claim.id, claim.generation, &answer).await?;
        if response.status == ApplyRuntimeLocalStorageClaimStatus::Historical {
            let newer = self.store.get_claim(cluster_id, &claim.id, response.claim.generation).await?;
            if newer.is_some_and(|newer| newer.signed.payload.reference() == response.claim) {
                self.store.record_claim_answer(cluster_id, &claim.id, response.claim.generation, &answer).await?;
            }
        }
        tracing::info!(cluster = %cluster_id, claim = %claim.id, generation = claim.generation, status = %answer.status, state = %answer.state, "claim answer recorded");
        let before = node_state(stored);
        let historical = response.status == ApplyRuntimeLocalStorageClaimStatus::Historical;
        Ok(before != Some(response.state) && (historical || state_change_moves_the_plan(claim, before, response.state)))
    }
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

/// An answer trusted only when it reads as a response and passes
/// `bindApplyRuntimeLocalStorageClaimResponse` against the request it answers.
fn judge_answer(request: &ApplyRuntimeLocalStorageClaimRequest, value: &serde_json::Value) -> Pushed {
    let Ok(response) = ApplyRuntimeLocalStorageClaimResponse::read(value) else {
        return Pushed::Fault("the answer is not an applyRuntimeLocalStorageClaim response");
    };
    match bind_apply_runtime_local_storage_claim_response(&response, request) {
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

/// `resolveRuntimeLocalStorageClaim`: `{ identity, claim, decision }`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolveRuntimeLocalStorageClaimRequest {
    /// The `uncertain` head generation decided on.
    pub claim: AuthorityReference,
    /// What the operator decided.
    pub decision: ClaimDecision,
}

/// One claim as `listRuntimeLocalStorageClaims` lists it: its head generation (with that
/// generation's faults and decision) and the node's latest answer to any of its generations.
#[derive(Debug, Clone, PartialEq)]
pub struct ClaimListing {
    /// The head generation.
    pub head: StoredClaim,
    /// The latest answered generation and its answer.
    pub last_answer: Option<LastClaimAnswer>,
}

/// The violation of a decision that does not apply to the claim named.
const NOT_UNCERTAIN: &str = "request claim must name the current generation of a claim whose node state is uncertain";

impl Controller {
    /// Wakes the claim pusher of a node that just opened a session on a socket of this process:
    /// every live claim of the node is pushed again under it.
    pub fn node_session_attached(&self, session: &RuntimeSessionReference) {
        self.claims.wake(&session.cluster_id, &session.node_id);
    }

    /// The claims of the cluster, listed (sorted by claim id).
    async fn claim_listings(&self, cluster_id: &Id) -> Result<Vec<ClaimListing>, DomainError> {
        let heads = self.store.claim_heads(cluster_id).await?;
        for head in &heads.unreadable {
            tracing::error!(cluster = %cluster_id, claim = %head.reference.id, problem = %head.problem, "a stored claim does not read back; not listed");
        }
        let mut answers = self.store.last_claim_answers(cluster_id).await?;
        Ok(heads
            .readable
            .into_iter()
            .map(|head| {
                let index = answers.iter().position(|answer| answer.claim_id == head.signed.payload.id);
                ClaimListing { last_answer: index.map(|index| answers.swap_remove(index)), head }
            })
            .collect())
    }

    /// `listRuntimeLocalStorageClaims` (every role) → `{ claims }`: every claim of the cluster
    /// with its head generation and the node's last state, sorted by claim id.
    pub async fn list_runtime_local_storage_claims(
        &self,
        request: super::ClusterRequest,
    ) -> Result<Vec<ClaimListing>, DomainError> {
        let super::ClusterRequest { cluster_id } = request;
        self.store.get_cluster(&cluster_id).await?.ok_or(DomainError::NotFound(MissingKind::Cluster))?;
        self.claim_listings(&cluster_id).await
    }

    /// `resolveRuntimeLocalStorageClaim` (admin) → `{ claim }`: an operator's decision on the
    /// `uncertain` head generation `claim` names. `not-found` (`storage-claim`) when it names no
    /// current claim generation; `request-invalid` when its node state is not `uncertain`, or
    /// `rebind` is asked for a volume the service's current runnable spec does not declare. The
    /// decision is recorded, then the reconcile issues what it calls for; the answer is the
    /// claim's listing after it.
    pub async fn resolve_runtime_local_storage_claim(
        &self,
        request: ResolveRuntimeLocalStorageClaimRequest,
    ) -> Result<ClaimListing, DomainError> {
        let ResolveRuntimeLocalStorageClaimRequest { claim: reference, decision } = request;
        let cluster_id =
            self.store.claim_cluster(&reference.id).await?.ok_or(DomainError::NotFound(MissingKind::StorageClaim))?;
        let named = self
            .store
            .get_claim(&cluster_id, &reference.id, reference.generation)
            .await?
            .ok_or(DomainError::NotFound(MissingKind::StorageClaim))?;
        let scope = FactScope::Services(BTreeSet::from([named.signed.payload.service_id.clone()]));
        let facts = self.store.assignment_facts(&cluster_id, &scope).await?;
        let head = facts
            .claims
            .get(&reference.id)
            .filter(|head| head.signed.payload.reference() == reference)
            .ok_or(DomainError::NotFound(MissingKind::StorageClaim))?;
        if node_state(head) != Some(NodeState::Uncertain) {
            return Err(DomainError::RequestInvalid(vec![NOT_UNCERTAIN.to_owned()]));
        }
        let claim = &head.signed.payload;
        if decision == ClaimDecision::Rebind {
            let lookups = Lookups::of(&facts);
            let runnable = facts.services.iter().any(|spec| {
                spec.body.service_id == claim.service_id
                    && spec.body.volumes.iter().any(|volume| volume.id == claim.volume_id)
                    && refusal_of(spec, &facts, &lookups).is_none()
            });
            if !runnable {
                return Err(DomainError::RequestInvalid(vec![
                    "request decision rebind needs the volume in the service's current runnable spec".to_owned(),
                ]));
            }
        }
        // An uncertain purge decided `purge` is pushed again as it is: a purge follows only a
        // bound generation.
        let push_again = decision == ClaimDecision::Purge && claim.lifecycle == LocalStorageLifecycle::Purge;
        let resolution = ClaimResolution { decision: decision.as_str().to_owned(), at: self.clock.now_ms() };
        let recorded = self
            .store
            .record_claim_resolution(&cluster_id, &claim.id, claim.generation, &resolution, push_again)
            .await?;
        if !recorded {
            return Err(DomainError::RequestInvalid(vec![NOT_UNCERTAIN.to_owned()]));
        }
        tracing::info!(cluster = %cluster_id, claim = %claim.id, generation = claim.generation, decision = decision.as_str(), "uncertain claim resolved");
        let node_id = claim.node_id.clone();
        let claim_id = claim.id.clone();
        let services = BTreeSet::from([claim.service_id.clone()]);
        self.assignments_changed(&cluster_id, Change::Claims(services)).await;
        if push_again {
            let node = BTreeSet::from([node_id]);
            super::signals::notify_nodes_changed(&self.store, &cluster_id, node, &[ChangeKind::Claims]).await;
        }
        self.claim_listings(&cluster_id)
            .await?
            .into_iter()
            .find(|listing| listing.head.signed.payload.id == claim_id)
            .ok_or(DomainError::NotFound(MissingKind::StorageClaim))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claim_ids_are_valid_stable_and_distinct() {
        let (cluster, service, volume) =
            (Id::parse("c1").unwrap(), Id::parse("db").unwrap(), Id::parse("data").unwrap());
        let first = claim_id(&cluster, &service, &volume);
        assert_eq!(first, claim_id(&cluster, &service, &volume));
        assert_eq!(first.as_str().len(), 4 + 40);
        assert_ne!(first, claim_id(&cluster, &service, &Id::parse("logs").unwrap()));
        assert_ne!(first, claim_id(&Id::parse("c2").unwrap(), &service, &volume));
        // The separator keeps ("db", "1data") and ("db1", "data") apart.
        assert_ne!(
            claim_id(&cluster, &Id::parse("db1").unwrap(), &volume),
            claim_id(&cluster, &service, &Id::parse("1data").unwrap())
        );
    }
}
