//! The cluster ingress designation of a cluster born on Pallet (seed `data/clusteringressdesignation.ts`,
//! `03-designation.md`).

use super::kind::{DigestedRecord, RecordKind, Rejected, digested_record, validate_digested};
use super::primitives::{Id, Sha256Digest};
use super::reader::{Parsed, Record, counter, digest, generation, id, nullable, parsed, require};
use super::reference::{AuthorityReference, REVISED_RECORD_KEYS, Revision};
use serde::ser::SerializeStruct;
use serde::{Serialize, Serializer};
use serde_json::Value;

const KIND: RecordKind = RecordKind::ClusterIngressDesignation;

/// `clusterIngressDesignationContract.error`.
pub const CONTRACT_ERROR: &str = "Cluster ingress designation contract rejected.";

/// `clusterIngressDesignationContract.digestDomain`.
pub const DIGEST_DOMAIN: &str = "serve.zone/cluster-ingress-designation";

/// `IClusterRuntimeReference['phase']`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RuntimePhase {
    /// `"swarm"`.
    Swarm,
    /// `"cutover"`.
    Cutover,
    /// `"pallet"`.
    Pallet,
}

impl RuntimePhase {
    /// Parses a phase name.
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "swarm" => Some(RuntimePhase::Swarm),
            "cutover" => Some(RuntimePhase::Cutover),
            "pallet" => Some(RuntimePhase::Pallet),
            _ => None,
        }
    }
}

/// `IClusterRuntimeReference`: `{ id, phase, generation }`, the cluster's current runtime.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct ClusterRuntimeReference {
    /// The cluster id.
    pub id: Id,
    /// The runtime phase.
    pub phase: RuntimePhase,
    /// The runtime generation (≥ 1).
    pub generation: u64,
}

impl ClusterRuntimeReference {
    /// `snapshotClusterRuntimeReference`.
    pub fn read(value: &Value) -> Parsed<Self> {
        let record = Record::exact(value, &["id", "phase", "generation"])?;
        Ok(ClusterRuntimeReference {
            id: record.read("id", id)?,
            phase: record.read("phase", |value| parsed(value, RuntimePhase::parse))?,
            generation: record.read("generation", generation)?,
        })
    }
}

/// `IClusterRuntimeReference & { phase: 'pallet' }` whose id is the cluster's (`palletRuntime`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PalletRuntime {
    /// The cluster id.
    pub id: Id,
    /// The runtime generation (≥ 1).
    pub generation: u64,
}

impl PalletRuntime {
    fn read(value: &Value, cluster_id: &Id) -> Parsed<Self> {
        let runtime = ClusterRuntimeReference::read(value)?;
        require(runtime.id == *cluster_id && runtime.phase == RuntimePhase::Pallet)?;
        Ok(PalletRuntime { id: runtime.id, generation: runtime.generation })
    }

    /// The general runtime reference this one is.
    pub fn as_reference(&self) -> ClusterRuntimeReference {
        ClusterRuntimeReference { id: self.id.clone(), phase: RuntimePhase::Pallet, generation: self.generation }
    }
}

impl Serialize for PalletRuntime {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut state = serializer.serialize_struct("PalletRuntime", 3)?;
        state.serialize_field("id", &self.id)?;
        state.serialize_field("phase", "pallet")?;
        state.serialize_field("generation", &self.generation)?;
        state.end()
    }
}

/// `ISecretVersionReference`: `{ secretId, secretVersionId }`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SecretVersionReference {
    /// The secret, stable across versions.
    pub secret_id: Id,
    /// This version.
    pub secret_version_id: Id,
}

impl SecretVersionReference {
    /// Reads `{ secretId, secretVersionId }` with exact keys.
    pub fn read(value: &Value) -> Parsed<Self> {
        let record = Record::exact(value, &["secretId", "secretVersionId"])?;
        Ok(SecretVersionReference {
            secret_id: record.read("secretId", id)?,
            secret_version_id: record.read("secretVersionId", id)?,
        })
    }
}

/// `IClusterIngressCredentialReference`: the public identity of the active ingress credential
/// generation; it never contains the credential value.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CredentialReference {
    /// Stable for the cluster's ingress credential.
    pub credential_id: Id,
    /// Counts up from 1 with every new bearer.
    pub generation: u64,
    /// The secret version holding the bearer.
    pub secret_version: SecretVersionReference,
}

impl CredentialReference {
    /// `credentialOf`.
    fn read(value: &Value) -> Parsed<Self> {
        let record = Record::exact(value, &["credentialId", "generation", "secretVersion"])?;
        Ok(CredentialReference {
            credential_id: record.read("credentialId", id)?,
            generation: record.read("generation", counter)?,
            secret_version: record.read("secretVersion", SecretVersionReference::read)?,
        })
    }
}

/// `IClusterIngressDesignation`: Cloudly's accepted designation of one service as a Pallet
/// cluster's ingress. Each generation links the previous one (a hash chain).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterIngressDesignation {
    /// Stable across the cluster's generations.
    pub id: Id,
    /// ≥ 1.
    pub generation: u64,
    /// The previous generation's reference, `None` for generation 1.
    pub previous: Option<AuthorityReference>,
    /// The cluster.
    pub cluster_id: Id,
    /// The cluster's Pallet runtime the designation was accepted against.
    pub runtime: PalletRuntime,
    /// The designated service.
    pub ingress_service_id: Id,
    /// The ingress service's runtime spec revision the designation was accepted against.
    pub prepared_spec_revision: u64,
    /// The managed bearer's public identity.
    pub credential: CredentialReference,
    /// The accepting identity's `userId`.
    pub actor_id: Id,
    /// Milliseconds since the Unix epoch.
    pub accepted_at: u64,
    /// `computeClusterIngressDesignationDigest` of the rest.
    pub digest: Sha256Digest,
}

digested_record!(revised ClusterIngressDesignation, KIND, snapshot_cluster_ingress_designation);

/// `snapshotClusterIngressDesignation`: detached exact-schema snapshot; the digest is a separate check.
pub fn snapshot_cluster_ingress_designation(value: &Value) -> Result<ClusterIngressDesignation, Rejected> {
    read_designation(value).map_err(|_| Rejected::of(KIND))
}

fn read_designation(value: &Value) -> Parsed<ClusterIngressDesignation> {
    const OWN_KEYS: [&str; 7] =
        ["clusterId", "runtime", "ingressServiceId", "preparedSpecRevision", "credential", "actorId", "acceptedAt"];
    let record = Record::with_parts(value, &[&REVISED_RECORD_KEYS, &OWN_KEYS], &[])?;
    let Revision { id: designation_id, generation, previous } = Revision::read(&record)?;
    let cluster_id = record.read("clusterId", id)?;
    Ok(ClusterIngressDesignation {
        id: designation_id,
        generation,
        previous,
        runtime: record.read("runtime", |value| PalletRuntime::read(value, &cluster_id))?,
        cluster_id,
        ingress_service_id: record.read("ingressServiceId", id)?,
        prepared_spec_revision: record.read("preparedSpecRevision", counter)?,
        credential: record.read("credential", CredentialReference::read)?,
        actor_id: record.read("actorId", id)?,
        accepted_at: record.read("acceptedAt", counter)?,
        digest: record.read("digest", digest)?,
    })
}

/// `computeClusterIngressDesignationDigest`: snapshots, then hashes under the designation domain.
pub fn compute_cluster_ingress_designation_digest(value: &Value) -> Result<Sha256Digest, Rejected> {
    Ok(snapshot_cluster_ingress_designation(value)?.compute_digest())
}

/// `validateClusterIngressDesignation`: `[]`, `["cluster ingress designation digest does not match"]`
/// or `["cluster ingress designation must use its exact canonical schema"]`.
pub fn validate_cluster_ingress_designation(value: &Value) -> Vec<String> {
    validate_digested::<ClusterIngressDesignation>(value)
}

/// `IClusterIngressDesignationRequest`: the administrator's compare-and-swap intent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterIngressDesignationRequest {
    /// The idempotency key of this mutation.
    pub mutation_id: Id,
    /// The cluster.
    pub cluster_id: Id,
    /// The service to designate.
    pub ingress_service_id: Id,
    /// The cluster's Pallet runtime as the caller last saw it.
    pub current_runtime: PalletRuntime,
    /// The service's current runtime spec revision as the caller last saw it.
    pub expected_spec_revision: u64,
    /// `None` for creation; the exact current designation for rotation or a change of service.
    pub expected_designation: Option<AuthorityReference>,
}

/// `snapshotClusterIngressDesignationRequest`: detached exact-schema snapshot of a request.
pub fn snapshot_cluster_ingress_designation_request(
    value: &Value,
) -> Result<ClusterIngressDesignationRequest, Rejected> {
    read_request(value).map_err(|_| Rejected::of(RecordKind::ClusterIngressDesignationRequest))
}

fn read_request(value: &Value) -> Parsed<ClusterIngressDesignationRequest> {
    let record = Record::exact(
        value,
        &[
            "mutationId",
            "clusterId",
            "ingressServiceId",
            "currentRuntime",
            "expectedSpecRevision",
            "expectedDesignation",
        ],
    )?;
    let cluster_id = record.read("clusterId", id)?;
    Ok(ClusterIngressDesignationRequest {
        mutation_id: record.read("mutationId", id)?,
        ingress_service_id: record.read("ingressServiceId", id)?,
        current_runtime: record.read("currentRuntime", |value| PalletRuntime::read(value, &cluster_id))?,
        cluster_id,
        expected_spec_revision: record.read("expectedSpecRevision", counter)?,
        expected_designation: record.read("expectedDesignation", |value| nullable(value, AuthorityReference::read))?,
    })
}

/// The violations of a designation request: `[]` or the seed's one snapshot message.
pub fn validate_cluster_ingress_designation_request(value: &Value) -> Vec<String> {
    match snapshot_cluster_ingress_designation_request(value) {
        Ok(_) => Vec::new(),
        Err(rejected) => vec![rejected.to_string()],
    }
}
