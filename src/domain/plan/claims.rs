//! The runtime local storage claims the specs call for (`06-storage-claims.md`) and how they
//! differ from the heads.
//!
//! Every volume of a spec the verdict does not refuse gets a claim on the node the spec pins it
//! to, with that node's runtime namespace. The claim id is stable per (cluster, service, volume);
//! a new generation (linking the previous one) is issued only when what it carries changes. When
//! the volume leaves its spec, or the service is deleted, the head `bound` generation is followed
//! by a `purge` generation; the claims of a service whose current spec is refused stay as they
//! are, also those of volumes the refused revision drops (a refusal never purges data). A claim
//! whose node answered `uncertain` is held — no new generation, no purge, no mount — until an
//! operator decides: `rebind` issues a new bound generation, `purge` a purge generation (or, for
//! an uncertain purge, pushes it again). After a purge the volume, declared again, gets a new
//! bound generation once the node answered `purged`. Claims are planned before the assignments,
//! which seal the references of the bound heads of their service's declared volumes in
//! `workload.storage` ([`sealed_claims`]).
//!
//! A declared `import` volume whose head its node has not answered `ready` keeps the service
//! `waiting` with `storage-import-pending`; a declared volume whose claim is `uncertain`, being
//! purged or unreadable keeps it `waiting` with `conflict` ([`storage_waits`]).

use super::assignments::service_member_id;
use super::lookups::Lookups;
use crate::contract::inventory::{ServiceRuntimeSpec, VolumeInitialization, VolumeSpec};
use crate::contract::reader::compare_bytes;
use crate::contract::service_status::ServiceRuntimeWaitingReason as Waiting;
use crate::contract::session::ControllerReference;
use crate::contract::storage_claim::{
    InitialOwnership, LocalStorageAccessMode, LocalStorageClaimNodeState as NodeState, LocalStorageInitialization,
    LocalStorageLifecycle, LocalStorageMount, LocalStorageReclaimPolicy, LocalStorageSource, MountPath,
    RuntimeLocalStorageClaim, snapshot_runtime_local_storage_claim,
};
use crate::contract::{AuthorityReference, DigestedRecord, Id, NodeId, Sha256Digest};
use crate::store::assignments::AssignmentFacts;
use crate::store::storage_claims::{ClaimChange, StoredClaim};
use std::borrow::Cow;

/// The stable id of a service's volume claim: `lsc-` + 40 hex digits of
/// SHA-256(cluster ∥ 0 ∥ service ∥ 0 ∥ volume).
pub fn claim_id(cluster_id: &Id, service_id: &Id, volume_id: &Id) -> Id {
    service_member_id("lsc", cluster_id, service_id, volume_id.as_str())
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

pub fn resolution(stored: &StoredClaim) -> Option<ClaimDecision> {
    stored.resolution.as_ref().and_then(|resolution| ClaimDecision::parse(&resolution.decision))
}

/// True when the controller holds the claim for an operator: `uncertain`, no decision yet.
pub fn held(stored: &StoredClaim) -> bool {
    node_state(stored) == Some(NodeState::Uncertain) && stored.resolution.is_none()
}

/// The unsigned generation-1 claim the facts call for for one volume of a spec, or `None` when
/// its node does not exist or a value does not fit the claim (neither passes the status judge).
pub fn draft_claim(
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

/// True when two claims carry the same order (everything but the revision members and digest).
pub fn same_content(left: &RuntimeLocalStorageClaim, right: &RuntimeLocalStorageClaim) -> bool {
    let order = |claim: &RuntimeLocalStorageClaim| RuntimeLocalStorageClaim {
        generation: 0,
        previous: None,
        digest: Sha256Digest::from_bytes(&[0; 32]),
        ..claim.clone()
    };
    order(left) == order(right)
}

/// `draft` as the generation after `head` (or generation 1), digested.
pub fn following(mut draft: RuntimeLocalStorageClaim, head: Option<AuthorityReference>) -> RuntimeLocalStorageClaim {
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
pub fn purge_of(bound: &RuntimeLocalStorageClaim) -> RuntimeLocalStorageClaim {
    let draft = RuntimeLocalStorageClaim { lifecycle: LocalStorageLifecycle::Purge, ..bound.clone() };
    following(draft, Some(bound.reference()))
}

/// True when the claim's record passes the contract's reader (with its digest).
pub fn reads_back(claim: &RuntimeLocalStorageClaim) -> bool {
    serde_json::to_value(claim).is_ok_and(|value| snapshot_runtime_local_storage_claim(&value).is_ok())
}

/// The facts as they are once `changes` (issued at `issued_at`) are written: each new
/// generation the head of its claim, without an answer.
pub fn with_issued_claims<'a>(
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
pub fn sealed_claims(facts: &AssignmentFacts, spec: &ServiceRuntimeSpec, node_id: &NodeId) -> Vec<AuthorityReference> {
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
pub fn volume_waits(facts: &AssignmentFacts, spec: &ServiceRuntimeSpec, volume: &VolumeSpec) -> Option<Waiting> {
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
pub fn storage_waits(reason: Waiting, spec: &ServiceRuntimeSpec, facts: &AssignmentFacts) -> bool {
    spec.body.volumes.iter().any(|volume| volume_waits(facts, spec, volume) == Some(reason))
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
