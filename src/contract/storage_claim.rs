//! Runtime local storage claims (seed `data/runtimelocalstorageclaim.ts`, readme section "Runtime
//! local storage claims", `06-storage-claims.md`): a controller's authority for one retained,
//! node-local volume of one service, and the `applyRuntimeLocalStorageClaim` exchange that pushes
//! it to its node.

use super::assignment::{PLACEMENT_KEYS, RuntimeAssignment};
use super::kind::{DigestedRecord, RecordKind, Rejected, digested_record, validate_digested};
use super::primitives::{Id, NodeId, Sha256Digest};
use super::reader::{
    Invalid, Parsed, Record, boolean, counter_in, digest, id, literal, node_id, parsed, require, string,
};
use super::reference::{AuthorityReference, REVISED_RECORD_KEYS, Revision};
use super::session::{ControllerReference, RuntimeSessionReference};
use serde::ser::SerializeStruct;
use serde::{Serialize, Serializer};
use serde_json::Value;

const KIND: RecordKind = RecordKind::RuntimeLocalStorageClaim;

/// `runtimeLocalStorageClaimContract.error`: the one message every refusal of this kind carries.
pub const CONTRACT_ERROR: &str = "Runtime local storage claim contract rejected.";

/// `runtimeLocalStorageClaimContract.digestDomain`.
pub const DIGEST_DOMAIN: &str = "serve.zone/runtime-local-storage-claim";

/// `runtimeLocalStorageClaimContract.directoryModeBits`: `0o3777`, the permission, setgid and
/// sticky bits; setuid (`0o4000`) and file type bits are refused.
pub const DIRECTORY_MODE_BITS: u64 = 0o3777;

/// The largest `IRuntimeLocalStorageClaim['initialOwnership']` `uid` / `gid`: 4 294 967 294
/// (`u32::MAX` is the "no id" marker).
pub const MAXIMUM_OWNER_ID: u64 = 4_294_967_294;

/// The longest `IRuntimeLocalStorageClaim['mount']['mountPath']`, in bytes.
pub const MAXIMUM_MOUNT_PATH_BYTES: usize = 4096;

/// The path no `IRuntimeLocalStorageClaim['mount']['mountPath']` may overlap: secrets are mounted there.
pub const SECRETS_MOUNT_PATH: &str = "/run/secrets";

/// The TypedRequest method name of `IReq_Controller_Pallet_ApplyRuntimeLocalStorageClaim`.
pub const APPLY_RUNTIME_LOCAL_STORAGE_CLAIM_METHOD: &str = "applyRuntimeLocalStorageClaim";

/// The seed's storage request mount path rule, judging `IRuntimeLocalStorageClaim['mount']['mountPath']`
/// and shared with the service runtime spec's volumes (`IServiceRuntimeSpec.volumes[].mountPath`): starts
/// with `/`, is not `/`, has no empty, `.` or `..` segment, no trailing `/`, no NUL, at most
/// 4 096 bytes, and never overlaps `/run/secrets` (not it, not below it, not an ancestor of it).
/// `/run/secretsx`, `/runner` and `/data/run/secrets` are fine.
pub fn is_canonical_mount_path(path: &str) -> bool {
    let Some(rest) = path.strip_prefix('/') else { return false };
    path.len() <= MAXIMUM_MOUNT_PATH_BYTES
        && !path.contains('\0')
        && rest.split('/').all(|segment| !matches!(segment, "" | "." | ".."))
        && !overlaps_secrets(path)
}

/// True when `path` (already canonical) is `/run/secrets`, below it, or an ancestor of it.
fn overlaps_secrets(path: &str) -> bool {
    let below_or_equal =
        path.strip_prefix(SECRETS_MOUNT_PATH).is_some_and(|rest| rest.is_empty() || rest.starts_with('/'));
    let ancestor = SECRETS_MOUNT_PATH.strip_prefix(path).is_some_and(|rest| rest.starts_with('/'));
    below_or_equal || ancestor
}

/// `IRuntimeLocalStorageClaim['mount']['mountPath']`: a path that passes [`is_canonical_mount_path`],
/// valid by construction.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MountPath(String);

impl MountPath {
    /// Parses the path, or `None` when it breaks the mount path rule.
    pub fn parse(text: &str) -> Option<Self> {
        is_canonical_mount_path(text).then(|| MountPath(text.to_owned()))
    }

    /// The path's text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Serialize for MountPath {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}

/// `IRuntimeLocalStorageClaim['source']`: `{ kind: "directory" }`, a node-local directory the node
/// derives from the claim's identity under a root only it knows. Further kinds join later.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum LocalStorageSource {
    /// `{ kind: "directory" }`.
    Directory,
}

impl LocalStorageSource {
    fn read(value: &Value) -> Parsed<Self> {
        Record::exact(value, &["kind"])?.read("kind", |kind| literal(kind, "directory"))?;
        Ok(LocalStorageSource::Directory)
    }
}

/// `IRuntimeLocalStorageClaim['initialOwnership']` when not null: `{ uid, gid, mode }`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub struct InitialOwnership {
    /// The root directory's owner, ≤ 4 294 967 294.
    pub uid: u32,
    /// The root directory's group, ≤ 4 294 967 294.
    pub gid: u32,
    /// Directory permission bits only: `mode & !0o3777 == 0`.
    pub mode: u16,
}

impl InitialOwnership {
    /// Reads `{ uid, gid, mode }` with exact keys and the seed's bounds.
    pub fn read(value: &Value) -> Parsed<Self> {
        let record = Record::exact(value, &["uid", "gid", "mode"])?;
        let owner = |value: &Value| counter_in(value, 0, MAXIMUM_OWNER_ID).map(|n| n as u32);
        Ok(InitialOwnership {
            uid: record.read("uid", owner)?,
            gid: record.read("gid", owner)?,
            mode: record.read("mode", |value| counter_in(value, 0, DIRECTORY_MODE_BITS).map(|n| n as u16))?,
        })
    }
}

/// `IRuntimeLocalStorageClaim['initialization']` together with `initialOwnership`, so the pairing
/// rule (`empty` ⇔ an ownership object, `import` ⇔ `null`) holds by construction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LocalStorageInitialization {
    /// `initialization: "empty"`: an empty root with this ownership.
    Empty(InitialOwnership),
    /// `initialization: "import"`, `initialOwnership: null`: wait for imported bytes, which keep
    /// their own ownership.
    Import,
}

impl LocalStorageInitialization {
    /// The wire spelling of `initialization`.
    pub fn as_str(self) -> &'static str {
        match self {
            LocalStorageInitialization::Empty(_) => "empty",
            LocalStorageInitialization::Import => "import",
        }
    }

    /// The wire `initialOwnership`: the ownership of an `empty` claim, `None` (`null`) for `import`.
    pub fn initial_ownership(self) -> Option<InitialOwnership> {
        match self {
            LocalStorageInitialization::Empty(ownership) => Some(ownership),
            LocalStorageInitialization::Import => None,
        }
    }

    fn read(record: &Record<'_>) -> Parsed<Self> {
        match record.read("initialization", string)? {
            "empty" => Ok(LocalStorageInitialization::Empty(record.read("initialOwnership", InitialOwnership::read)?)),
            "import" => {
                require(record.get("initialOwnership")?.is_null())?;
                Ok(LocalStorageInitialization::Import)
            }
            _ => Err(Invalid),
        }
    }
}

/// `IRuntimeLocalStorageClaim['mount']`: `{ mountPath, readOnly }`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LocalStorageMount {
    /// Where the workload sees the volume (canonical, absolute, clear of `/run/secrets`).
    pub mount_path: MountPath,
    /// Whether the workload mounts it read-only.
    pub read_only: bool,
}

impl LocalStorageMount {
    fn read(value: &Value) -> Parsed<Self> {
        let record = Record::exact(value, &["mountPath", "readOnly"])?;
        Ok(LocalStorageMount {
            mount_path: record.read("mountPath", |value| parsed(value, MountPath::parse))?,
            read_only: record.read("readOnly", boolean)?,
        })
    }
}

/// `IRuntimeLocalStorageClaim['accessMode']`: only `"ReadWriteOnce"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum LocalStorageAccessMode {
    /// `"ReadWriteOnce"`: one node mounts it.
    ReadWriteOnce,
}

/// `IRuntimeLocalStorageClaim['reclaimPolicy']`: only `"retain"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LocalStorageReclaimPolicy {
    /// `"retain"`: the bytes outlive the workload until a `purge` generation orders them deleted.
    Retain,
}

/// `IRuntimeLocalStorageClaim['lifecycle']`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LocalStorageLifecycle {
    /// `"bound"`: keep the volume.
    Bound,
    /// `"purge"`: delete its bytes; always follows a bound generation (`generation ≥ 2`).
    Purge,
}

impl LocalStorageLifecycle {
    fn read(value: &Value) -> Parsed<Self> {
        match string(value)? {
            "bound" => Ok(LocalStorageLifecycle::Bound),
            "purge" => Ok(LocalStorageLifecycle::Purge),
            _ => Err(Invalid),
        }
    }
}

/// `IRuntimeLocalStorageClaim`: a controller's authority for one retained, node-local volume of one
/// service, hashed under `serve.zone/runtime-local-storage-claim` and signed for its node. It
/// carries no host path, device, mount option or credential.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimeLocalStorageClaim {
    /// Stable for (service, volume).
    pub id: Id,
    /// ≥ 1; a `purge` is ≥ 2.
    pub generation: u64,
    /// The previous generation's reference, `None` for generation 1.
    pub previous: Option<AuthorityReference>,
    /// The issuing controller.
    pub controller: ControllerReference,
    /// The service's organization.
    pub organization_id: Id,
    /// The cluster.
    pub cluster_id: Id,
    /// The node that holds the volume.
    pub node_id: NodeId,
    /// The node's runtime namespace.
    pub runtime_namespace: Id,
    /// The service.
    pub service_id: Id,
    /// The service's own volume id.
    pub volume_id: Id,
    /// Where the bytes live.
    pub source: LocalStorageSource,
    /// `initialization` and `initialOwnership`.
    pub initialization: LocalStorageInitialization,
    /// How the workload mounts it.
    pub mount: LocalStorageMount,
    /// Always `ReadWriteOnce`.
    pub access_mode: LocalStorageAccessMode,
    /// Always `retain`.
    pub reclaim_policy: LocalStorageReclaimPolicy,
    /// `bound` or `purge`.
    pub lifecycle: LocalStorageLifecycle,
    /// The digest of the rest.
    pub digest: Sha256Digest,
}

impl Serialize for RuntimeLocalStorageClaim {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut state = serializer.serialize_struct("RuntimeLocalStorageClaim", 18)?;
        state.serialize_field("id", &self.id)?;
        state.serialize_field("generation", &self.generation)?;
        state.serialize_field("previous", &self.previous)?;
        state.serialize_field("controller", &self.controller)?;
        state.serialize_field("organizationId", &self.organization_id)?;
        state.serialize_field("clusterId", &self.cluster_id)?;
        state.serialize_field("nodeId", &self.node_id)?;
        state.serialize_field("runtimeNamespace", &self.runtime_namespace)?;
        state.serialize_field("serviceId", &self.service_id)?;
        state.serialize_field("volumeId", &self.volume_id)?;
        state.serialize_field("source", &self.source)?;
        state.serialize_field("initialization", self.initialization.as_str())?;
        state.serialize_field("initialOwnership", &self.initialization.initial_ownership())?;
        state.serialize_field("mount", &self.mount)?;
        state.serialize_field("accessMode", &self.access_mode)?;
        state.serialize_field("reclaimPolicy", &self.reclaim_policy)?;
        state.serialize_field("lifecycle", &self.lifecycle)?;
        state.serialize_field("digest", &self.digest)?;
        state.end()
    }
}

impl RuntimeLocalStorageClaim {
    /// True when the stated digest is the digest of the content.
    pub fn digest_matches(&self) -> bool {
        self.compute_digest() == self.digest
    }
}

digested_record!(revised RuntimeLocalStorageClaim, KIND, snapshot_runtime_local_storage_claim);

/// `snapshotRuntimeLocalStorageClaim`: detached exact-schema snapshot; the digest is a separate
/// check. Rejects with `Runtime local storage claim contract rejected.`
pub fn snapshot_runtime_local_storage_claim(value: &Value) -> Result<RuntimeLocalStorageClaim, Rejected> {
    read_claim(value).map_err(|_| Rejected::of(KIND))
}

fn read_claim(value: &Value) -> Parsed<RuntimeLocalStorageClaim> {
    const OWN_KEYS: [&str; 8] = [
        "volumeId",
        "source",
        "initialization",
        "initialOwnership",
        "mount",
        "accessMode",
        "reclaimPolicy",
        "lifecycle",
    ];
    let record = Record::with_parts(value, &[&REVISED_RECORD_KEYS, &PLACEMENT_KEYS, &OWN_KEYS], &[])?;
    let Revision { id: claim_id, generation, previous } = Revision::read(&record)?;
    let lifecycle = record.read("lifecycle", LocalStorageLifecycle::read)?;
    require(lifecycle == LocalStorageLifecycle::Bound || generation >= 2)?;
    record.read("accessMode", |value| literal(value, "ReadWriteOnce"))?;
    record.read("reclaimPolicy", |value| literal(value, "retain"))?;
    Ok(RuntimeLocalStorageClaim {
        id: claim_id,
        generation,
        previous,
        controller: record.read("controller", ControllerReference::read)?,
        organization_id: record.read("organizationId", id)?,
        cluster_id: record.read("clusterId", id)?,
        node_id: record.read("nodeId", node_id)?,
        runtime_namespace: record.read("runtimeNamespace", id)?,
        service_id: record.read("serviceId", id)?,
        volume_id: record.read("volumeId", id)?,
        source: record.read("source", LocalStorageSource::read)?,
        initialization: LocalStorageInitialization::read(&record)?,
        mount: record.read("mount", LocalStorageMount::read)?,
        access_mode: LocalStorageAccessMode::ReadWriteOnce,
        reclaim_policy: LocalStorageReclaimPolicy::Retain,
        lifecycle,
        digest: record.read("digest", digest)?,
    })
}

/// `computeRuntimeLocalStorageClaimDigest`: snapshots, then hashes under
/// `serve.zone/runtime-local-storage-claim`.
pub fn compute_runtime_local_storage_claim_digest(value: &Value) -> Result<Sha256Digest, Rejected> {
    Ok(snapshot_runtime_local_storage_claim(value)?.compute_digest())
}

/// `validateRuntimeLocalStorageClaim`: the schema, then the digest — `[]`,
/// `["runtime local storage claim must use its exact canonical schema"]` or
/// `["runtime local storage claim digest does not match"]`.
pub fn validate_runtime_local_storage_claim(value: &Value) -> Vec<String> {
    validate_digested::<RuntimeLocalStorageClaim>(value)
}

/// `getRuntimeLocalStorageClaimReference`: `{ id, generation, digest }` of the claim.
pub fn get_runtime_local_storage_claim_reference(claim: &RuntimeLocalStorageClaim) -> AuthorityReference {
    claim.reference()
}

/// `bindRuntimeLocalStorageClaimToAssignment(claim, assignment, expectedClusterId)`: answers the
/// claim (a detached copy) when the assignment may mount it, else the claim kind's rejection.
///
/// Binds when both records carry their content's digest, the claim is `bound` (a `purge` binds
/// to no assignment: no workload may mount a volume being deleted), the assignment's
/// `workload.storage` holds exactly the claim's reference, the two agree on `controller`,
/// `organizationId`, `nodeId`, `runtimeNamespace` and `serviceId`, and both name
/// `expected_cluster_id`.
pub fn bind_runtime_local_storage_claim_to_assignment(
    claim: &RuntimeLocalStorageClaim,
    assignment: &RuntimeAssignment,
    expected_cluster_id: &Id,
) -> Result<RuntimeLocalStorageClaim, Rejected> {
    let reference = claim.reference();
    let binds = claim.lifecycle == LocalStorageLifecycle::Bound
        && claim.cluster_id == *expected_cluster_id
        && assignment.cluster_id == *expected_cluster_id
        && claim.controller == assignment.controller
        && claim.organization_id == assignment.organization_id
        && claim.node_id == assignment.node_id
        && claim.runtime_namespace == assignment.runtime_namespace
        && claim.service_id == assignment.service_id
        && assignment.workload.storage.contains(&reference)
        && claim.digest_matches()
        && assignment.compute_digest() == assignment.digest;
    if binds { Ok(claim.clone()) } else { Err(Rejected::of(KIND)) }
}

/// `IReq_Controller_Pallet_ApplyRuntimeLocalStorageClaim['request']`: `{ session, claim }`, the
/// claim pushed to its node over the node's session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ApplyRuntimeLocalStorageClaimRequest {
    /// The node's session the claim is pushed over.
    pub session: RuntimeSessionReference,
    /// The claim.
    pub claim: RuntimeLocalStorageClaim,
}

impl ApplyRuntimeLocalStorageClaimRequest {
    /// Reads the request with exact keys; the claim is read by its snapshot (its digest and its
    /// session are checked by [`bind_apply_runtime_local_storage_claim_request`]).
    pub fn read(value: &Value) -> Result<Self, Rejected> {
        read_request(value).map_err(|_| Rejected::of(KIND))
    }

    /// The request as wire JSON.
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).expect("a claim request serializes to JSON")
    }
}

fn read_request(value: &Value) -> Parsed<ApplyRuntimeLocalStorageClaimRequest> {
    let record = Record::exact(value, &["session", "claim"])?;
    Ok(ApplyRuntimeLocalStorageClaimRequest {
        session: record.read("session", RuntimeSessionReference::read)?,
        claim: record.read("claim", read_claim)?,
    })
}

/// `bindApplyRuntimeLocalStorageClaimRequest(request, trustedSession)`: answers the request (a
/// detached copy) when `request.session` equals, in all six members, `trusted_session` — the
/// node's current `IRuntimeSessionReference` — and the claim names that session's `controller`,
/// `clusterId`, `nodeId` and `runtimeNamespace` and carries its content's digest.
pub fn bind_apply_runtime_local_storage_claim_request(
    request: &ApplyRuntimeLocalStorageClaimRequest,
    trusted_session: &RuntimeSessionReference,
) -> Result<ApplyRuntimeLocalStorageClaimRequest, Rejected> {
    let claim = &request.claim;
    let binds = request.session == *trusted_session
        && claim.controller == trusted_session.controller
        && claim.cluster_id == trusted_session.cluster_id
        && claim.node_id == trusted_session.node_id
        && claim.runtime_namespace == trusted_session.runtime_namespace
        && claim.digest_matches();
    if binds { Ok(request.clone()) } else { Err(Rejected::of(KIND)) }
}

/// `IReq_Controller_Pallet_ApplyRuntimeLocalStorageClaim['response']['status']`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ApplyRuntimeLocalStorageClaimStatus {
    /// `"accepted"`: the node took this generation now.
    Accepted,
    /// `"replay"`: the node already held exactly this generation.
    Replay,
    /// `"historical"`: the node holds a newer generation of the same claim.
    Historical,
}

impl ApplyRuntimeLocalStorageClaimStatus {
    fn read(value: &Value) -> Parsed<Self> {
        match string(value)? {
            "accepted" => Ok(ApplyRuntimeLocalStorageClaimStatus::Accepted),
            "replay" => Ok(ApplyRuntimeLocalStorageClaimStatus::Replay),
            "historical" => Ok(ApplyRuntimeLocalStorageClaimStatus::Historical),
            _ => Err(Invalid),
        }
    }
}

/// `IReq_Controller_Pallet_ApplyRuntimeLocalStorageClaim['response']['state']`: what the node
/// reports about the volume.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum LocalStorageClaimNodeState {
    /// `"ready"`: the volume can be mounted.
    Ready,
    /// `"import-required"`: an `import` claim whose bytes have not arrived.
    ImportRequired,
    /// `"purged"`: the bytes are deleted; the claim is finished.
    Purged,
    /// `"uncertain"`: the node can vouch for the volume neither way; it neither mounts nor deletes
    /// it until an operator decides.
    Uncertain,
}

impl LocalStorageClaimNodeState {
    /// Parses the wire spelling.
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "ready" => Some(LocalStorageClaimNodeState::Ready),
            "import-required" => Some(LocalStorageClaimNodeState::ImportRequired),
            "purged" => Some(LocalStorageClaimNodeState::Purged),
            "uncertain" => Some(LocalStorageClaimNodeState::Uncertain),
            _ => None,
        }
    }

    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            LocalStorageClaimNodeState::Ready => "ready",
            LocalStorageClaimNodeState::ImportRequired => "import-required",
            LocalStorageClaimNodeState::Purged => "purged",
            LocalStorageClaimNodeState::Uncertain => "uncertain",
        }
    }

    /// True when a claim like `claim` can be in this state: a bound claim is `ready`,
    /// `import-required` (an `import` claim only) or `uncertain`; a purge is `purged` or
    /// `uncertain`.
    pub fn is_possible_for(self, claim: &RuntimeLocalStorageClaim) -> bool {
        match (claim.lifecycle, self) {
            (
                LocalStorageLifecycle::Bound,
                LocalStorageClaimNodeState::Ready | LocalStorageClaimNodeState::Uncertain,
            ) => true,
            (LocalStorageLifecycle::Bound, LocalStorageClaimNodeState::ImportRequired) => {
                claim.initialization == LocalStorageInitialization::Import
            }
            (
                LocalStorageLifecycle::Purge,
                LocalStorageClaimNodeState::Purged | LocalStorageClaimNodeState::Uncertain,
            ) => true,
            _ => false,
        }
    }
}

/// `IReq_Controller_Pallet_ApplyRuntimeLocalStorageClaim['response']`: `{ status, state, claim }`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ApplyRuntimeLocalStorageClaimResponse {
    /// How the node took the claim.
    pub status: ApplyRuntimeLocalStorageClaimStatus,
    /// The volume's state on the node.
    pub state: LocalStorageClaimNodeState,
    /// The sent claim's reference (`accepted`, `replay`) or the newer generation the node holds
    /// (`historical`).
    pub claim: AuthorityReference,
}

impl ApplyRuntimeLocalStorageClaimResponse {
    /// Reads the response with exact keys.
    pub fn read(value: &Value) -> Result<Self, Rejected> {
        read_response(value).map_err(|_| Rejected::of(KIND))
    }

    /// The response as wire JSON.
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).expect("a claim response serializes to JSON")
    }
}

fn read_response(value: &Value) -> Parsed<ApplyRuntimeLocalStorageClaimResponse> {
    let record = Record::exact(value, &["status", "state", "claim"])?;
    Ok(ApplyRuntimeLocalStorageClaimResponse {
        status: record.read("status", ApplyRuntimeLocalStorageClaimStatus::read)?,
        state: record.read("state", |value| parsed(value, LocalStorageClaimNodeState::parse))?,
        claim: record.read("claim", AuthorityReference::read)?,
    })
}

/// `bindApplyRuntimeLocalStorageClaimResponse(response, request)`: answers the response (a
/// detached copy) when it answers this request: for `accepted` and `replay`, `response.claim` is
/// exactly the sent claim's reference and `state` is one the claim can be in
/// ([`LocalStorageClaimNodeState::is_possible_for`]); for `historical`, `response.claim` names the
/// same claim id at a higher generation, with any state.
pub fn bind_apply_runtime_local_storage_claim_response(
    response: &ApplyRuntimeLocalStorageClaimResponse,
    request: &ApplyRuntimeLocalStorageClaimRequest,
) -> Result<ApplyRuntimeLocalStorageClaimResponse, Rejected> {
    let sent = &request.claim;
    let binds = match response.status {
        ApplyRuntimeLocalStorageClaimStatus::Accepted | ApplyRuntimeLocalStorageClaimStatus::Replay => {
            response.claim == sent.reference() && response.state.is_possible_for(sent)
        }
        ApplyRuntimeLocalStorageClaimStatus::Historical => {
            response.claim.id == sent.id && response.claim.generation > sent.generation
        }
    };
    if binds { Ok(response.clone()) } else { Err(Rejected::of(KIND)) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mount_paths_follow_the_rule() {
        for good in ["/a", "/var/lib/data", "/run/secretsx", "/runner", "/data/run/secrets", "/run/other", "/ run"] {
            assert!(is_canonical_mount_path(good), "{good}");
        }
        let long = format!("/{}", "a".repeat(MAXIMUM_MOUNT_PATH_BYTES - 1));
        assert!(is_canonical_mount_path(&long));
        let too_long = format!("/{}", "a".repeat(MAXIMUM_MOUNT_PATH_BYTES));
        for bad in [
            "",
            "/",
            "a",
            "a/b",
            "//a",
            "/a//b",
            "/a/",
            "/./a",
            "/a/.",
            "/a/../b",
            "/..",
            "/a\0b",
            "/run/secrets",
            "/run/secrets/x",
            "/run",
            too_long.as_str(),
        ] {
            assert!(!is_canonical_mount_path(bad), "{bad:?}");
        }
    }
}
