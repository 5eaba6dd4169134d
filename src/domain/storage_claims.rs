//! Runtime local storage claims (`06-storage-claims.md`): the operator methods
//! `listRuntimeLocalStorageClaims` and `resolveRuntimeLocalStorageClaim`. What the specs call for
//! is planned in `plan::claims`; they are issued by the reconcile and pushed to their nodes
//! (`applyRuntimeLocalStorageClaim`) by `runners::ClaimPusher`.

use super::plan::Lookups;
use super::plan::claims::{ClaimDecision, node_state};
use super::plan::verdicts::refusal_of;
use super::runners::Change;
use super::{Controller, DomainError, MissingKind};
use crate::contract::session::RuntimeSessionReference;
use crate::contract::storage_claim::{LocalStorageClaimNodeState as NodeState, LocalStorageLifecycle};
use crate::contract::{AuthorityReference, Id};
use crate::store::storage_claims::{ClaimResolution, LastClaimAnswer, StoredClaim};
use crate::store::{ChangeKind, FactScope};
use std::collections::BTreeSet;

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
        self.existing_cluster(&cluster_id).await?;
        self.claim_listings(&cluster_id).await
    }

    /// `resolveRuntimeLocalStorageClaim` (admin) → `{ claim }`: an operator's decision on the
    /// `uncertain` head generation `claim` names. `not-found` (`storage-claim`) when it names no
    /// current claim generation; `request-invalid` when its node state is not `uncertain`, when a
    /// decision on it is already recorded (of two racing decisions, one is recorded), or when
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
