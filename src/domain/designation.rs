//! `designateClusterIngress`, `getClusterIngressDesignation`, `listClusterIngressDesignations`
//! (`03-designation.md`).
//!
//! The judgement order is the spec's: identity and request shape (both checked by `api` before
//! the domain is called, so the request arrives as the contract's snapshot), then — on facts the
//! store read at one snapshot — replay (a recorded mutation id is answered before the judge is
//! asked), cluster, runtime, designation kind, service, spec revision, expected designation, and
//! the write. The compare-and-swap is [`commit_designation`]: the store's guarded write holds only
//! while those facts are unchanged; otherwise the facts are read again under the cluster's lock
//! and judged again. The judge is pure, so being asked twice is harmless.

use super::identity::Caller;
use super::runners::Change;
use super::secrets::{self, Bearer};
use super::{ClusterRequest, Controller, DomainError};
use crate::contract::AuthorityReference;
use crate::contract::designation::ClusterRuntimeReference;
use crate::contract::designation::{
    ClusterIngressDesignation, ClusterIngressDesignationRequest, CredentialReference, SecretVersionReference,
};
use crate::contract::inventory::ServiceRuntimeSpec;
use crate::contract::json::canonical;
use crate::contract::{DigestedRecord, Id, Sha256Digest};
use crate::store::{DesignationSnapshot, DesignationWrite, MissingKind, Store, StoreError};
use std::collections::BTreeSet;

/// The prefix of managed ingress bearers (`szci_` + 43 base64url characters = 256 random bits).
pub const INGRESS_BEARER_PREFIX: &str = "szci_";

/// The answer of `designateClusterIngress`.
#[derive(Debug, Clone)]
pub struct DesignationAnswer {
    /// The accepted (or replayed) designation.
    pub designation: ClusterIngressDesignation,
    /// The ingress service's spec at `preparedSpecRevision`.
    pub spec: ServiceRuntimeSpec,
    /// True when this answers an earlier request with the same mutation id.
    pub replayed: bool,
}

/// One page of the designation chain.
#[derive(Debug, Clone)]
pub struct DesignationPage {
    /// Oldest first.
    pub designations: Vec<ClusterIngressDesignation>,
    /// The generation to ask for next, or `None` at the end.
    pub next_generation: Option<u64>,
}

/// `listClusterIngressDesignations`: `{ identity, clusterId, fromGeneration?, limit? }`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListClusterIngressDesignationsRequest {
    /// The cluster.
    pub cluster_id: Id,
    /// The first generation to answer (a generation ≥ 1), `None` for 1.
    pub from_generation: Option<u64>,
    /// The page size (1 to [`MAX_DESIGNATION_PAGE`]), `None` for [`DEFAULT_DESIGNATION_PAGE`].
    pub limit: Option<u64>,
}

/// The most designations one `listClusterIngressDesignations` answers.
pub const MAX_DESIGNATION_PAGE: u64 = 500;

/// The page size of `listClusterIngressDesignations` without `limit`.
pub const DEFAULT_DESIGNATION_PAGE: u64 = 100;

fn fresh_id(prefix: &str) -> Id {
    Id::parse(&format!("{prefix}-{}", uuid::Uuid::new_v4().simple())).expect("a uuid id is an Id")
}

impl Controller {
    /// `designateClusterIngress` (admin, operator): `{ identity, designation }` →
    /// `{ designation, spec, replayed }`. `caller` (the verified identity) is the actor.
    pub async fn designate_cluster_ingress(
        &self,
        caller: &Caller,
        designation_request: ClusterIngressDesignationRequest,
    ) -> Result<DesignationAnswer, DomainError> {
        let request_canonical = canonical(&serde_json::to_value(&designation_request).expect("requests serialize"))
            .expect("requests are canonical");

        let bearer = Bearer::generate(INGRESS_BEARER_PREFIX).map_err(|_| DomainError::Internal)?;
        let fresh = FreshIdentity {
            designation_id: fresh_id("designation"),
            credential_id: fresh_id("cred"),
            secret_id: fresh_id("secret"),
            secret_version_id: fresh_id("sv"),
        };
        let nonce = secrets::fresh_nonce().map_err(|_| DomainError::Internal)?;
        let accepted_at = self.clock.now_ms();
        let secret_key = self.keys.secret_key();
        let judge = |facts: &DesignationSnapshot| {
            judge_designation(facts, &designation_request, &fresh, &caller.user_id, accepted_at).map(|designation| {
                let secret_version = &designation.credential.secret_version;
                let secret = secrets::seal_with_nonce(
                    secret_key,
                    &secret_version.secret_id,
                    &secret_version.secret_version_id,
                    &bearer,
                    nonce,
                );
                DesignationWrite {
                    designation,
                    secret,
                    mutation_id: designation_request.mutation_id.clone(),
                    request_canonical: request_canonical.clone(),
                }
            })
        };
        // A recorded mutation id (a replay) is answered before the judge is asked, also under the
        // cluster's lock when the optimistic write lost, so a racing twin that committed first is
        // replayed too.
        let commit = commit_designation(
            self.store.as_ref(),
            &designation_request.cluster_id,
            &designation_request.ingress_service_id,
            &designation_request.mutation_id,
            &judge,
        )
        .await?;
        let count =
            |outcome: &'static str| metrics::counter!("cloudly_designations_total", "outcome" => outcome).increment(1);
        match commit {
            DesignationCommit::Accepted { designation, spec, replaced } => {
                count("accepted");
                tracing::info!(
                    cluster = %designation.cluster_id,
                    service = %designation.ingress_service_id,
                    generation = designation.generation,
                    actor = %designation.actor_id,
                    "cluster ingress designation accepted"
                );
                // "Mark the ingress service's assignments for re-issue": the reconcile of the
                // designated service (and of the one it replaces) runs in the background.
                let services =
                    BTreeSet::from_iter([designation.ingress_service_id.clone()].into_iter().chain(replaced));
                self.assignments_changed_in_background(&designation.cluster_id, Change::Designation(services));
                Ok(DesignationAnswer { designation, spec, replayed: false })
            }
            DesignationCommit::Refused(refusal) => {
                count(refusal.outcome());
                Err(refusal_error(refusal))
            }
            DesignationCommit::MutationExists => {
                // Mutation records are never deleted, so the recorded one is there to answer.
                let Some(recorded) = self
                    .store
                    .find_designation_mutation(&designation_request.cluster_id, &designation_request.mutation_id)
                    .await?
                else {
                    tracing::error!("a recorded designation mutation cannot be read back");
                    return Err(DomainError::Internal);
                };
                if recorded.request_canonical == request_canonical {
                    count("replayed");
                    Ok(DesignationAnswer { designation: recorded.designation, spec: recorded.spec, replayed: true })
                } else {
                    count("mutation-conflict");
                    Err(DomainError::MutationConflict)
                }
            }
        }
    }

    /// `getClusterIngressDesignation` (every role) → `{ designation | null }`.
    pub async fn get_cluster_ingress_designation(
        &self,
        request: ClusterRequest,
    ) -> Result<Option<ClusterIngressDesignation>, DomainError> {
        let ClusterRequest { cluster_id } = request;
        self.store.cluster_designation(&cluster_id).await?.ok_or(DomainError::NotFound(MissingKind::Cluster))
    }

    /// `listClusterIngressDesignations` (every role) → `{ designations, nextGeneration }`,
    /// oldest first.
    pub async fn list_cluster_ingress_designations(
        &self,
        request: ListClusterIngressDesignationsRequest,
    ) -> Result<DesignationPage, DomainError> {
        let cluster_id = request.cluster_id;
        let from_generation = request.from_generation.unwrap_or(1);
        let limit = request.limit.unwrap_or(DEFAULT_DESIGNATION_PAGE);
        self.existing_cluster(&cluster_id).await?;
        // One more than asked tells whether a next page exists.
        let mut designations = self.store.list_designations(&cluster_id, from_generation, limit as u32 + 1).await?;
        let next_generation = if designations.len() > limit as usize {
            designations.truncate(limit as usize);
            designations.last().map(|last| last.generation + 1)
        } else {
            None
        };
        Ok(DesignationPage { designations, next_generation })
    }
}

/// Why a designation compare-and-swap was refused, decided by the judge from the facts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DesignationRefusal {
    /// `not-found`.
    NotFound(MissingKind),
    /// `runtime-mismatch`, with the cluster's current runtime reference.
    RuntimeMismatch(ClusterRuntimeReference),
    /// `designation-kind-conflict`.
    KindConflict,
    /// `spec-revision-mismatch`, with the current revision.
    SpecRevisionMismatch(u64),
    /// `designation-conflict`, with the current reference or `None`.
    DesignationConflict(Option<AuthorityReference>),
}

impl DesignationRefusal {
    /// The refusal's wire code, the outcome of `cloudly_designations_total`.
    pub fn outcome(&self) -> &'static str {
        match self {
            DesignationRefusal::NotFound(_) => "not-found",
            DesignationRefusal::RuntimeMismatch(_) => "runtime-mismatch",
            DesignationRefusal::KindConflict => "designation-kind-conflict",
            DesignationRefusal::SpecRevisionMismatch(_) => "spec-revision-mismatch",
            DesignationRefusal::DesignationConflict(_) => "designation-conflict",
        }
    }
}

/// The decision from the facts the store read at one snapshot: the write, or a refusal. Pure:
/// [`commit_designation`] may ask twice (once on the optimistic path, once more under the
/// cluster's lock when a fact changed in between).
pub type DesignationJudge<'a> =
    dyn Fn(&DesignationSnapshot) -> Result<DesignationWrite, DesignationRefusal> + Send + Sync + 'a;

/// The outcome of [`commit_designation`].
// The accepted answer is large and returned once per request; boxing it would only burden callers.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone)]
pub enum DesignationCommit {
    /// Written and committed: the designation and the service spec it was prepared against.
    Accepted {
        /// The committed generation.
        designation: ClusterIngressDesignation,
        /// The spec at `preparedSpecRevision`.
        spec: ServiceRuntimeSpec,
        /// The ingress service of the generation it replaced, if any.
        replaced: Option<Id>,
    },
    /// The judge refused; nothing was written.
    Refused(DesignationRefusal),
    /// Another request with this mutation id committed first; answer it as a replay.
    MutationExists,
}

/// What the facts decide: an answer without a write, or a write to commit.
enum DesignationDecision {
    Answer(DesignationCommit),
    Write(DesignationWrite),
}

/// A recorded mutation id answers `MutationExists` before the judge is asked; then the judge
/// decides. Nothing can be written for a cluster that does not exist.
fn decide(facts: &DesignationSnapshot, judge: &DesignationJudge<'_>) -> DesignationDecision {
    if facts.mutation_recorded {
        return DesignationDecision::Answer(DesignationCommit::MutationExists);
    }
    match judge(facts) {
        Err(refusal) => DesignationDecision::Answer(DesignationCommit::Refused(refusal)),
        Ok(_) if facts.cluster.is_none() => {
            DesignationDecision::Answer(DesignationCommit::Refused(DesignationRefusal::NotFound(MissingKind::Cluster)))
        }
        Ok(write) => DesignationDecision::Write(write),
    }
}

/// The answer of a committed designation: its spec is the facts' current spec (the store checked
/// that the designation was prepared against it).
fn accepted(facts: &DesignationSnapshot, write: DesignationWrite) -> Result<DesignationCommit, StoreError> {
    let spec = facts
        .service
        .clone()
        .ok_or_else(|| StoreError::Corrupt("an accepted designation names no current spec".into()))?;
    let replaced = facts.current.as_ref().map(|current| current.ingress_service_id.clone());
    Ok(DesignationCommit::Accepted { designation: write.designation, spec, replaced })
}

/// The designation compare-and-swap (`03-designation.md`). Optimistic first: the store reads
/// every fact at one snapshot, `judge` decides, and the store writes with one guarded statement
/// that commits only while no fact has been written since (the cluster's facts version); a
/// refusal is answered from that one snapshot. When a fact was written in between, the store
/// locks the cluster, reads the facts again, and `judge` decides again under the lock, so the
/// answer is exact: a racing twin's replay, `designation-conflict`, or an acceptance. Two racing
/// calls with the same expected designation end with exactly one write, across processes.
///
/// A write that breaks a rule of the chain is refused by the store ([`StoreError::Corrupt`], a bug
/// in the judge) and nothing is written.
pub async fn commit_designation(
    store: &dyn Store,
    cluster_id: &Id,
    service_id: &Id,
    mutation_id: &Id,
    judge: &DesignationJudge<'_>,
) -> Result<DesignationCommit, StoreError> {
    let facts = store.designation_snapshot(cluster_id, service_id, mutation_id).await?;
    match decide(&facts, judge) {
        DesignationDecision::Answer(commit) => return Ok(commit),
        DesignationDecision::Write(write) => {
            if store.write_designation(&facts, &write).await? {
                return accepted(&facts, write);
            }
        }
    }
    // A fact was written between the read and the write: judge again under the cluster's lock.
    let mut locked = store.lock_designation(cluster_id, service_id, mutation_id).await?;
    let write = match decide(locked.snapshot(), judge) {
        DesignationDecision::Answer(commit) => {
            locked.rollback().await?;
            return Ok(commit);
        }
        DesignationDecision::Write(write) => write,
    };
    // The guarded write is a second guard besides the lock.
    if !locked.write(&write).await? {
        locked.rollback().await?;
        let current = store.current_designation(cluster_id).await?;
        return Ok(DesignationCommit::Refused(DesignationRefusal::DesignationConflict(
            current.map(|designation| designation.reference()),
        )));
    }
    let commit = accepted(locked.snapshot(), write)?;
    locked.commit().await?;
    Ok(commit)
}

/// Ids drawn for a designation before the judgement; the judge uses those that apply.
struct FreshIdentity {
    designation_id: Id,
    credential_id: Id,
    secret_id: Id,
    secret_version_id: Id,
}

/// Steps 4–10 of the judgement order, from facts the store read at one snapshot.
fn judge_designation(
    facts: &DesignationSnapshot,
    request: &ClusterIngressDesignationRequest,
    fresh: &FreshIdentity,
    actor_id: &Id,
    accepted_at: u64,
) -> Result<ClusterIngressDesignation, DesignationRefusal> {
    let cluster = facts.cluster.as_ref().ok_or(DesignationRefusal::NotFound(MissingKind::Cluster))?;
    let runtime = cluster.cluster.runtime_reference();
    if runtime != request.current_runtime.as_reference() {
        return Err(DesignationRefusal::RuntimeMismatch(runtime));
    }
    if cluster.cluster.fleet_cutover_ingress_designation.is_some() {
        return Err(DesignationRefusal::KindConflict);
    }
    let spec = facts.service.as_ref().ok_or(DesignationRefusal::NotFound(MissingKind::Service))?;
    if spec.revision != request.expected_spec_revision {
        return Err(DesignationRefusal::SpecRevisionMismatch(spec.revision));
    }
    let current = facts.current.as_ref().map(ClusterIngressDesignation::reference);
    if current != request.expected_designation {
        return Err(DesignationRefusal::DesignationConflict(current));
    }
    let (id, generation, credential) = match &facts.current {
        None => (
            fresh.designation_id.clone(),
            1,
            CredentialReference {
                credential_id: fresh.credential_id.clone(),
                generation: 1,
                secret_version: SecretVersionReference {
                    secret_id: fresh.secret_id.clone(),
                    secret_version_id: fresh.secret_version_id.clone(),
                },
            },
        ),
        Some(previous) => (
            previous.id.clone(),
            previous.generation + 1,
            CredentialReference {
                credential_id: previous.credential.credential_id.clone(),
                generation: previous.credential.generation + 1,
                secret_version: SecretVersionReference {
                    secret_id: previous.credential.secret_version.secret_id.clone(),
                    secret_version_id: fresh.secret_version_id.clone(),
                },
            },
        ),
    };
    let mut designation = ClusterIngressDesignation {
        id,
        generation,
        previous: current,
        cluster_id: request.cluster_id.clone(),
        runtime: request.current_runtime.clone(),
        ingress_service_id: request.ingress_service_id.clone(),
        prepared_spec_revision: request.expected_spec_revision,
        credential,
        actor_id: actor_id.clone(),
        accepted_at,
        digest: Sha256Digest::from_bytes(&[0; 32]),
    };
    designation.digest = designation.compute_digest();
    Ok(designation)
}

fn refusal_error(refusal: DesignationRefusal) -> DomainError {
    match refusal {
        DesignationRefusal::NotFound(what) => DomainError::NotFound(what),
        DesignationRefusal::RuntimeMismatch(current) => DomainError::RuntimeMismatch(current),
        DesignationRefusal::KindConflict => DomainError::DesignationKindConflict,
        DesignationRefusal::SpecRevisionMismatch(current) => DomainError::SpecRevisionMismatch(Some(current)),
        DesignationRefusal::DesignationConflict(current) => DomainError::DesignationConflict(current),
    }
}
