//! `IRuntimeNetworkProjection`: the signed per-node network projection, in this project's profile
//! (`05-projection.md`, "Projection"; seed `networkprojection.ts`).
//!
//! Three layers, each usable on its own:
//!
//! * the **snapshot** reads the exact schema into typed records and checks every bound and order
//!   (lists are checked, never re-sorted);
//! * [`RuntimeNetworkProjection::validate`] checks the whole-projection rules on a typed value —
//!   canonical size, lease digests, link subnets, retired leases, workload ingress, host endpoints,
//!   digest — so the issuer can judge what it built without going through JSON;
//! * [`admit_projection`] is the admission against the previous generation.
//!
//! The canonical bytes are written once per check straight from the typed records; lease digests
//! are hashed from the lease's slice of those same bytes.
//!
//! The rule "the endpoints are the leases of every assignment on this node, plus every lease that
//! is the other side of a workload ingress grant with a lease on this node" is an **issuing** rule:
//! it is not checked here, because it needs the store's assignments (a projection alone cannot
//! tell an assignment's lease from another lease), and the golden vectors hold a valid projection
//! whose off-node endpoints are the other side of no grant.
//!
//! Two rules the spec lists and the seed hunk does not show are checked: a present
//! `workloadIngress` with no grant and no withdrawal rejects (the spec: it "is omitted when it
//! would hold no grant and no withdrawal"), and so does a present, empty `hostPlatformEndpointIds`
//! (seed and vector). A lease's address rule (`/30`, network + 1) is part of the lease schema.
//!
//! For JSON text at scale, `super::text` reads the projection without a `serde_json::Value`.

use super::authority::{PlatformEndpoint, RuntimeNetworkProtectedAuthority, check_platform_endpoints};
use super::canonical::{
    digest_matches, push_ipv4, push_list, push_nullable_reference, push_reference, push_reference_members, push_string,
    push_u64, reference_cmp,
};
use super::lease::{LeaseSpan, RuntimeNetworkLease};
use super::workload_ingress::{PacketGrant, RefKey, WorkloadIngressProjection, reference_in_range};
use crate::contract::kind::{DigestedRecord, RecordKind, Rejected, digest_canonical_bytes, digested_record};
use crate::contract::primitives::{Id, MAX_SAFE_INTEGER, NodeId, Sha256Digest};
use crate::contract::reader::{
    Invalid, Parsed, Record, compare_bytes, digest, generation, id, list, node_id, parsed, require,
};
use crate::contract::reference::{AuthorityReference, REVISED_RECORD_KEYS, Revision, check_revision};
use serde::Serialize;
use serde_json::Value;
use sha2::{Digest as _, Sha256};

const KIND: RecordKind = RecordKind::RuntimeNetworkProjection;

/// `runtimeNetworkProjectionContract.error`.
pub const CONTRACT_ERROR: &str = "Runtime network projection contract rejected.";

/// `runtimeNetworkProjectionContract.digestDomain`.
pub const DIGEST_DOMAIN: &str = "serve.zone/runtime-network-projection";

/// `runtimeNetworkProjectionContract.maximumCanonicalBytes`.
pub const MAXIMUM_CANONICAL_BYTES: usize = 8_388_608;

/// `runtimeNetworkProjectionContract`'s endpoint bound: `endpoints` holds at most 4 096.
pub const MAXIMUM_ENDPOINTS: usize = 4096;

/// The bound of `IRuntimeNetworkProjection['hostPlatformEndpointIds']`: at most 64 (one per
/// platform endpoint of the authority).
pub const MAXIMUM_HOST_PLATFORM_ENDPOINT_IDS: usize = 64;

/// The bytes the top-level `"digest":"sha256:<64 hex>",` member adds to the canonical bytes.
const DIGEST_MEMBER_BYTES: usize = 83;

/// `IRuntimeNetworkProjection['controller']['kind']`: the controller kind shared by every runtime
/// record (`cloudly` or `onebox`); only `cloudly` projections may carry `workloadIngress`.
pub use crate::contract::session::ControllerKind;

/// `IRuntimeNetworkProjection['controller']`: `{ kind, id }`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct ProjectionController {
    /// The controller kind.
    pub kind: ControllerKind,
    /// The controller id.
    pub id: Id,
}

/// `IRuntimeNetworkProjection['protectedAuthority']`: the authority's reference and its platform
/// endpoints (sorted by id, at most 64). Its digest is a reference and is not recomputed here.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ProtectedAuthorityReference {
    /// The authority id.
    pub id: Id,
    /// The authority generation (≥ 1).
    pub generation: u64,
    /// The authority digest.
    pub digest: Sha256Digest,
    /// The authority's platform endpoints.
    pub platform_endpoints: Vec<PlatformEndpoint>,
}

impl ProtectedAuthorityReference {
    /// The projection's `protectedAuthority` for `authority`: its reference and platform endpoints.
    pub fn of(authority: &RuntimeNetworkProtectedAuthority) -> Self {
        ProtectedAuthorityReference {
            id: authority.id.clone(),
            generation: authority.generation,
            digest: authority.digest.clone(),
            platform_endpoints: authority.platform_endpoints.clone(),
        }
    }

    /// `getReference(authority)`.
    pub fn reference(&self) -> AuthorityReference {
        AuthorityReference { id: self.id.clone(), generation: self.generation, digest: self.digest.clone() }
    }

    fn read(value: &Value) -> Parsed<Self> {
        let record = Record::exact(value, &["id", "generation", "digest", "platformEndpoints"])?;
        Ok(ProtectedAuthorityReference {
            id: record.read("id", id)?,
            generation: record.read("generation", generation)?,
            digest: record.read("digest", digest)?,
            platform_endpoints: record.read("platformEndpoints", |value| {
                list(value, super::authority::MAXIMUM_PLATFORM_ENDPOINTS, PlatformEndpoint::read)
            })?,
        })
    }

    fn write_canonical(&self, out: &mut Vec<u8>) {
        push_reference_members(out, &self.id, self.generation, &self.digest);
        out.extend_from_slice(b",\"platformEndpoints\":");
        push_list(out, &self.platform_endpoints, |out, endpoint| {
            out.extend_from_slice(b"{\"address\":");
            push_ipv4(out, endpoint.address);
            out.extend_from_slice(b",\"id\":");
            push_string(out, endpoint.id.as_str());
            out.extend_from_slice(b",\"port\":");
            push_u64(out, u64::from(endpoint.port));
            out.extend_from_slice(b",\"protocol\":");
            push_string(out, endpoint.protocol.as_str());
            out.push(b'}');
        });
        out.push(b'}');
    }
}

/// `IRuntimeNetworkProjection['endpoints'][number]`: `{ lease }`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ProjectionEndpoint {
    /// The endpoint's lease, embedded whole (its digest is recomputed by validation).
    pub lease: RuntimeNetworkLease,
}

/// `IRuntimeNetworkProjection` (this project's profile): one node's network view, a revised
/// record digested under `serve.zone/runtime-network-projection`. Build one from typed parts and
/// finish it with [`RuntimeNetworkProjection::with_computed_digest`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeNetworkProjection {
    /// Stable per node: one chain per node.
    pub id: Id,
    /// ≥ 1; every change of content is a new generation.
    pub generation: u64,
    /// The previous generation's reference, `None` for generation 1.
    pub previous: Option<AuthorityReference>,
    /// The issuing controller.
    pub controller: ProjectionController,
    /// The cluster (this profile's addition).
    pub cluster_id: Id,
    /// The node the projection is for.
    pub node_id: NodeId,
    /// The node's runtime namespace.
    pub runtime_namespace: Id,
    /// The cluster's protected authority and its platform endpoints.
    pub protected_authority: ProtectedAuthorityReference,
    /// Sorted by `lease.id`, at most 4 096.
    pub endpoints: Vec<ProjectionEndpoint>,
    /// Sorted by canonical bytes; never a current endpoint lease.
    pub retired_leases: Vec<AuthorityReference>,
    /// `cloudly` only; absent when it would hold no grant and no withdrawal.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workload_ingress: Option<WorkloadIngressProjection>,
    /// Sorted, unique, never empty when present, at most 64; absent when empty.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host_platform_endpoint_ids: Option<Vec<Id>>,
    /// `computeRuntimeNetworkProjectionDigest` of the rest.
    pub digest: Sha256Digest,
}

/// Whether [`RuntimeNetworkProjection::encode`] writes the endpoints or an empty list.
#[derive(Clone, Copy)]
enum Endpoints {
    Written,
    Elided,
}

/// The canonical bytes of a projection without its top-level digest, and where each endpoint's
/// lease sits inside them.
struct Encoded {
    bytes: Vec<u8>,
    leases: Vec<LeaseSpan>,
}

impl RuntimeNetworkProjection {
    /// `computeRuntimeNetworkProjectionDigest` applied by the issuer: the same projection with its
    /// digest computed from its content.
    pub fn with_computed_digest(mut self) -> Self {
        self.digest = self.compute_digest();
        self
    }

    /// `networkCanonical` of the projection without its top-level `digest` (what its digest hashes).
    pub fn canonical_without_digest(&self) -> Vec<u8> {
        self.encode(false, None, Endpoints::Written).bytes
    }

    /// `networkCanonical(projection)`, digest included: the record as it is served.
    pub fn canonical(&self) -> String {
        String::from_utf8(self.encode(false, Some(&self.digest), Endpoints::Written).bytes)
            .expect("canonical JSON is UTF-8")
    }

    /// [`RuntimeNetworkProjection::canonical`] with `endpoints` written as `[]`: the record as a
    /// store keeps it that keeps the endpoint leases by reference. Put the leases back before
    /// checking its digest.
    pub fn canonical_without_endpoints(&self) -> String {
        String::from_utf8(self.encode(false, Some(&self.digest), Endpoints::Elided).bytes)
            .expect("canonical JSON is UTF-8")
    }

    /// The length of `networkCanonical(projection)`, `digest` member included (the quantity
    /// bounded by `runtimeNetworkProjectionContract.maximumCanonicalBytes`).
    pub fn canonical_len(&self) -> usize {
        self.encode(false, None, Endpoints::Written).bytes.len() + DIGEST_MEMBER_BYTES
    }

    /// `workloadIngressPacketGrantsOf`: the detached packet grants, in grant order.
    pub fn packet_grants(&self) -> Vec<PacketGrant> {
        self.workload_ingress.as_ref().map_or_else(Vec::new, WorkloadIngressProjection::packet_grants)
    }

    /// `workloadIngress.withdrawals`, empty when the member is absent.
    pub fn withdrawals(&self) -> &[PacketGrant] {
        self.workload_ingress.as_ref().map_or(&[], |ingress| &ingress.withdrawals)
    }

    /// `validateRuntimeNetworkProjection` on a typed value: the snapshot's bounds and orders, then
    /// every whole-projection rule and the digest. Rejects with
    /// `Runtime network projection contract rejected.`.
    pub fn validate(&self) -> Result<(), Rejected> {
        self.check_structure().and_then(|()| self.check_rules()).map_err(|_| Rejected::of(KIND))
    }

    /// Writes the canonical bytes, with the top-level digest member when `digest` is given.
    /// `record_leases` records lease spans.
    fn encode(&self, record_leases: bool, digest: Option<&Sha256Digest>, endpoints: Endpoints) -> Encoded {
        let estimate = 1024
            + self.endpoints.len() * 520
            + self.retired_leases.len() * 120
            + self
                .workload_ingress
                .as_ref()
                .map_or(0, |ingress| ingress.grants.len() * 420 + ingress.withdrawals.len() * 320);
        let mut out = Vec::with_capacity(estimate);
        let mut leases = Vec::with_capacity(if record_leases { self.endpoints.len() } else { 0 });
        out.extend_from_slice(b"{\"clusterId\":");
        push_string(&mut out, self.cluster_id.as_str());
        out.extend_from_slice(b",\"controller\":{\"id\":");
        push_string(&mut out, self.controller.id.as_str());
        out.extend_from_slice(b",\"kind\":");
        push_string(&mut out, self.controller.kind.as_str());
        out.push(b'}');
        if let Some(digest) = digest {
            out.extend_from_slice(b",\"digest\":");
            push_string(&mut out, digest.as_str());
        }
        out.extend_from_slice(b",\"endpoints\":[");
        let written = match endpoints {
            Endpoints::Written => &self.endpoints[..],
            Endpoints::Elided => &[],
        };
        for (index, endpoint) in written.iter().enumerate() {
            if index > 0 {
                out.push(b',');
            }
            out.extend_from_slice(b"{\"lease\":");
            let span = endpoint.lease.write_canonical(&mut out, true);
            if record_leases {
                leases.push(span);
            }
            out.push(b'}');
        }
        out.extend_from_slice(b"],\"generation\":");
        push_u64(&mut out, self.generation);
        if let Some(ids) = &self.host_platform_endpoint_ids {
            out.extend_from_slice(b",\"hostPlatformEndpointIds\":");
            push_list(&mut out, ids, |out, id| push_string(out, id.as_str()));
        }
        out.extend_from_slice(b",\"id\":");
        push_string(&mut out, self.id.as_str());
        out.extend_from_slice(b",\"nodeId\":");
        push_string(&mut out, self.node_id.as_str());
        out.extend_from_slice(b",\"previous\":");
        push_nullable_reference(&mut out, self.previous.as_ref());
        out.extend_from_slice(b",\"protectedAuthority\":");
        self.protected_authority.write_canonical(&mut out);
        out.extend_from_slice(b",\"retiredLeases\":");
        push_list(&mut out, &self.retired_leases, push_reference);
        out.extend_from_slice(b",\"runtimeNamespace\":");
        push_string(&mut out, self.runtime_namespace.as_str());
        if let Some(ingress) = &self.workload_ingress {
            out.extend_from_slice(b",\"workloadIngress\":");
            ingress.write_canonical(&mut out);
        }
        out.push(b'}');
        Encoded { bytes: out, leases }
    }

    /// The endpoint whose lease has this id (endpoints are sorted by lease id).
    fn endpoint_lease(&self, lease_id: &Id) -> Option<&RuntimeNetworkLease> {
        self.endpoints
            .binary_search_by(|endpoint| compare_bytes(endpoint.lease.id.as_str(), lease_id.as_str()))
            .ok()
            .map(|index| &self.endpoints[index].lease)
    }

    /// The endpoint lease that `reference` names exactly, if any.
    fn referenced_lease(&self, reference: &AuthorityReference) -> Option<&RuntimeNetworkLease> {
        self.endpoint_lease(&reference.id).filter(|lease| lease.is_referenced_by(reference))
    }

    /// What the snapshot checks beyond reading fields: revisions, value ranges, bounds, strict
    /// orders, a non-empty `hostPlatformEndpointIds`.
    pub(super) fn check_structure(&self) -> Parsed<()> {
        check_revision(&self.id, self.generation, self.previous.as_ref())?;
        require(self.generation <= MAX_SAFE_INTEGER)?;
        require((1..=MAX_SAFE_INTEGER).contains(&self.protected_authority.generation))?;
        check_platform_endpoints(&self.protected_authority.platform_endpoints)?;
        require(self.protected_authority.platform_endpoints.iter().all(|endpoint| endpoint.port >= 1))?;
        require(self.endpoints.len() <= MAXIMUM_ENDPOINTS)?;
        require(
            self.endpoints
                .windows(2)
                .all(|pair| compare_bytes(pair[0].lease.id.as_str(), pair[1].lease.id.as_str()).is_lt()),
        )?;
        for endpoint in &self.endpoints {
            endpoint.lease.check()?;
            require(endpoint.lease.generation <= MAX_SAFE_INTEGER)?;
        }
        require(self.retired_leases.iter().all(reference_in_range))?;
        require(self.retired_leases.windows(2).all(|pair| reference_cmp(&pair[0], &pair[1]).is_lt()))?;
        if let Some(ingress) = &self.workload_ingress {
            ingress.check_structure()?;
        }
        if let Some(ids) = &self.host_platform_endpoint_ids {
            require(!ids.is_empty() && ids.len() <= MAXIMUM_HOST_PLATFORM_ENDPOINT_IDS)?;
            require(ids.windows(2).all(|pair| compare_bytes(pair[0].as_str(), pair[1].as_str()).is_lt()))?;
        }
        Ok(())
    }

    /// The whole-projection rules of `validateRuntimeNetworkProjection`, on a structurally
    /// checked projection, its digest last. Every check is `O(n log n)` or better.
    pub(super) fn check_rules(&self) -> Parsed<()> {
        let encoded = self.encode(true, None, Endpoints::Written);
        self.check_content(&encoded)?;
        let mut hasher = Sha256::new();
        hasher.update(DIGEST_DOMAIN.as_bytes());
        hasher.update([0u8]);
        hasher.update(&encoded.bytes);
        require(digest_matches(&hasher.finalize().into(), self.digest.as_str()))
    }

    /// The whole-projection rules but the digest, on `encoded` (this projection's canonical bytes
    /// without its digest, lease spans recorded).
    fn check_content(&self, encoded: &Encoded) -> Parsed<()> {
        require(encoded.bytes.len() + DIGEST_MEMBER_BYTES <= MAXIMUM_CANONICAL_BYTES)?;

        // Every endpoint lease: its digest recomputed from its slice of the canonical bytes, and
        // in this cluster. (Its address rule holds by construction of `LeaseIpv4`.)
        for (endpoint, span) in self.endpoints.iter().zip(&encoded.leases) {
            let lease = &endpoint.lease;
            require(lease.cluster_id == self.cluster_id)?;
            require(digest_matches(&span.digest_output(&encoded.bytes), lease.digest.as_str()))?;
        }

        // No two link subnets overlap: sorted by network, each must end before the next starts.
        let mut subnets: Vec<_> = self.endpoints.iter().map(|endpoint| endpoint.lease.ipv4.link_subnet()).collect();
        subnets.sort_unstable();
        require(subnets.windows(2).all(|pair| pair[0].last() < pair[1].network()))?;

        // A retired lease is never a current endpoint lease.
        require(self.retired_leases.iter().all(|retired| self.referenced_lease(retired).is_none()))?;

        // Each host platform endpoint id names a current platform endpoint of the authority.
        if let Some(ids) = &self.host_platform_endpoint_ids {
            let platform = &self.protected_authority.platform_endpoints;
            require(ids.iter().all(|id| {
                platform.binary_search_by(|endpoint| compare_bytes(endpoint.id.as_str(), id.as_str())).is_ok()
            }))?;
        }

        if let Some(ingress) = &self.workload_ingress {
            require(self.controller.kind == ControllerKind::Cloudly)?;
            require(!ingress.grants.is_empty() || !ingress.withdrawals.is_empty())?;
            // Grants are ordered by source first, so one ingress lease is looked up once.
            let mut last_source: Option<(&AuthorityReference, &RuntimeNetworkLease)> = None;
            for grant in &ingress.grants {
                require(grant.source != grant.destination)?;
                let source = match last_source {
                    Some((reference, lease)) if *reference == grant.source => lease,
                    _ => self.referenced_lease(&grant.source).ok_or(Invalid)?,
                };
                last_source = Some((&grant.source, source));
                let destination = self.referenced_lease(&grant.destination).ok_or(Invalid)?;
                require(source.node_id == self.node_id || destination.node_id == self.node_id)?;
            }
            require(ingress.withdraws_no_current_grant())?;
        }
        Ok(())
    }

    /// The issuer's path for a generation it built:
    /// [`RuntimeNetworkProjection::with_computed_digest`], then
    /// [`admit_projection_after_validated`] against the node's validated head, the same answers
    /// with the canonical bytes written and hashed once.
    pub fn seal_and_admit(
        mut self,
        validated_previous: Option<&RuntimeNetworkProjection>,
        applied: Option<&AuthorityReference>,
    ) -> Result<(Self, AdmissionStatus), Rejected> {
        self.check_structure().map_err(|_| Rejected::of(KIND))?;
        let encoded = self.encode(true, None, Endpoints::Written);
        self.digest = digest_canonical_bytes(DIGEST_DOMAIN, &encoded.bytes);
        self.check_content(&encoded).map_err(|_| Rejected::of(KIND))?;
        let status = admit_validated(validated_previous, &self, applied).map_err(|_| Rejected::of(KIND))?;
        Ok((self, status))
    }
}

digested_record!(
    revised RuntimeNetworkProjection,
    KIND,
    snapshot_runtime_network_projection,
    /// Hashes the directly written canonical bytes (equal to the generic path's, faster).
    fn compute_digest(&self) -> Sha256Digest {
        digest_canonical_bytes(DIGEST_DOMAIN, &self.encode(false, None, Endpoints::Written).bytes)
    }
);

fn read_controller(value: &Value) -> Parsed<ProjectionController> {
    let record = Record::exact(value, &["kind", "id"])?;
    Ok(ProjectionController {
        kind: record.read("kind", |value| parsed(value, ControllerKind::parse))?,
        id: record.read("id", id)?,
    })
}

fn read_endpoint(value: &Value) -> Parsed<ProjectionEndpoint> {
    let record = Record::exact(value, &["lease"])?;
    Ok(ProjectionEndpoint { lease: record.read("lease", RuntimeNetworkLease::read)? })
}

fn read_projection(value: &Value) -> Parsed<RuntimeNetworkProjection> {
    const OWN_KEYS: [&str; 7] =
        ["controller", "clusterId", "nodeId", "runtimeNamespace", "protectedAuthority", "endpoints", "retiredLeases"];
    const OPTIONAL_KEYS: [&str; 2] = ["workloadIngress", "hostPlatformEndpointIds"];
    let record = Record::with_parts(value, &[&REVISED_RECORD_KEYS, &OWN_KEYS], &OPTIONAL_KEYS)?;
    let Revision { id: projection_id, generation, previous } = Revision::read(&record)?;
    let projection = RuntimeNetworkProjection {
        id: projection_id,
        generation,
        previous,
        controller: record.read("controller", read_controller)?,
        cluster_id: record.read("clusterId", id)?,
        node_id: record.read("nodeId", node_id)?,
        runtime_namespace: record.read("runtimeNamespace", id)?,
        protected_authority: record.read("protectedAuthority", ProtectedAuthorityReference::read)?,
        endpoints: record.read("endpoints", |value| list(value, MAXIMUM_ENDPOINTS, read_endpoint))?,
        retired_leases: record.read("retiredLeases", |value| list(value, usize::MAX, AuthorityReference::read))?,
        workload_ingress: record.read_optional("workloadIngress", WorkloadIngressProjection::read)?,
        host_platform_endpoint_ids: record
            .read_optional("hostPlatformEndpointIds", |value| list(value, MAXIMUM_HOST_PLATFORM_ENDPOINT_IDS, id))?,
        digest: record.read("digest", digest)?,
    };
    projection.check_structure()?;
    Ok(projection)
}

/// `snapshotRuntimeNetworkProjection`: detached exact-schema snapshot with every bound and order
/// checked (the whole-projection rules and the digest are [`validate_runtime_network_projection`]'s).
pub fn snapshot_runtime_network_projection(value: &Value) -> Result<RuntimeNetworkProjection, Rejected> {
    read_projection(value).map_err(|_| Rejected::of(KIND))
}

/// `computeRuntimeNetworkProjectionDigest`: snapshots, then hashes under the projection domain.
pub fn compute_runtime_network_projection_digest(value: &Value) -> Result<Sha256Digest, Rejected> {
    Ok(snapshot_runtime_network_projection(value)?.compute_digest())
}

/// `validateRuntimeNetworkProjection`: the snapshot, every whole-projection rule and the digest;
/// answers the typed projection or rejects with `Runtime network projection contract rejected.`.
pub fn validate_runtime_network_projection(value: &Value) -> Result<RuntimeNetworkProjection, Rejected> {
    let projection = snapshot_runtime_network_projection(value)?;
    projection.check_rules().map_err(|_| Rejected::of(KIND))?;
    Ok(projection)
}

/// The CLI's form of `validateRuntimeNetworkProjection`: `[]` or
/// `["Runtime network projection contract rejected."]`.
pub fn validate_runtime_network_projection_violations(value: &Value) -> Vec<String> {
    match validate_runtime_network_projection(value) {
        Ok(_) => Vec::new(),
        Err(rejected) => vec![rejected.to_string()],
    }
}

/// `getRuntimeNetworkProjectionWorkloadIngressPacketGrants`: validates the complete projection and
/// answers the detached packet grants in grant order.
pub fn get_runtime_network_projection_workload_ingress_packet_grants(
    value: &Value,
) -> Result<Vec<PacketGrant>, Rejected> {
    Ok(validate_runtime_network_projection(value)?.packet_grants())
}

/// `admitRuntimeNetworkProjection(...)['status']`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum AdmissionStatus {
    /// `"accepted"`: a first generation or the exact successor of the previous one.
    Accepted,
    /// `"replay"`: exactly the previous generation again.
    Replay,
}

/// The answer of `admitRuntimeNetworkProjection`: `{ status, projection }`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ProjectionAdmission {
    /// Accepted or replay.
    pub status: AdmissionStatus,
    /// The validated next projection.
    pub projection: RuntimeNetworkProjection,
}

/// `admitRuntimeNetworkProjection(previous | null, next, applied | null)`: validates `next` (and
/// `previous`), then runs [`admit_projection`]'s rules. Rejects with
/// `Runtime network projection contract rejected.`.
pub fn admit_runtime_network_projection(
    previous: Option<&Value>,
    next: &Value,
    applied: Option<&AuthorityReference>,
) -> Result<ProjectionAdmission, Rejected> {
    let next = validate_runtime_network_projection(next)?;
    let previous = previous.map(validate_runtime_network_projection).transpose()?;
    let status = admit_validated(previous.as_ref(), &next, applied).map_err(|_| Rejected::of(KIND))?;
    Ok(ProjectionAdmission { status, projection: next })
}

/// The typed admission the issuer runs before it signs (and that
/// [`admit_runtime_network_projection`] runs on parsed values). Validates `next` and `previous`
/// with [`RuntimeNetworkProjection::validate`], then:
///
/// * without `previous`: `next` is generation 1, `applied` is `None`, and it has no withdrawals
///   and no retired leases;
/// * same generation as `previous`: the same digest is a replay, anything else rejects;
/// * otherwise `next.previous` is exactly `previous`'s reference; `controller`, `clusterId`,
///   `nodeId`, `runtimeNamespace` are unchanged; a lease id in both keeps its address;
/// * every retired lease of `next` was an endpoint lease or a retired lease of `previous`;
/// * every packet grant of `previous` is granted or withdrawn in `next`; every withdrawal of
///   `next` was a grant or a withdrawal of `previous` (and none is a current grant: validation);
/// * while `applied` is not exactly `previous`'s reference, every withdrawal and every retired
///   lease of `previous` stays in `next`; once it is, they may be dropped.
pub fn admit_projection(
    previous: Option<&RuntimeNetworkProjection>,
    next: &RuntimeNetworkProjection,
    applied: Option<&AuthorityReference>,
) -> Result<AdmissionStatus, Rejected> {
    if let Some(previous) = previous {
        previous.validate()?;
    }
    admit_projection_after_validated(previous, next, applied)
}

/// [`admit_projection`] for a `previous` that already passed [`RuntimeNetworkProjection::validate`]
/// (an issuer's own head): validates `next` only, then the same rules, so the same answer.
pub fn admit_projection_after_validated(
    validated_previous: Option<&RuntimeNetworkProjection>,
    next: &RuntimeNetworkProjection,
    applied: Option<&AuthorityReference>,
) -> Result<AdmissionStatus, Rejected> {
    next.validate()?;
    admit_validated(validated_previous, next, applied).map_err(|_| Rejected::of(KIND))
}

/// A set of keys as a sorted list: deterministic (no hasher seed) and `O(log n)` to query.
struct Keys<K>(Vec<K>);

impl<K: Ord> Keys<K> {
    fn new(keys: impl Iterator<Item = K>) -> Self {
        let mut keys: Vec<K> = keys.collect();
        keys.sort_unstable();
        Keys(keys)
    }

    fn contains(&self, key: &K) -> bool {
        self.0.binary_search(key).is_ok()
    }
}

fn lease_key(lease: &RuntimeNetworkLease) -> RefKey<'_> {
    RefKey::new(lease.id.as_str(), lease.generation, lease.digest.as_str())
}

/// The admission rules on two validated projections.
fn admit_validated(
    previous: Option<&RuntimeNetworkProjection>,
    next: &RuntimeNetworkProjection,
    applied: Option<&AuthorityReference>,
) -> Parsed<AdmissionStatus> {
    let Some(previous) = previous else {
        require(
            next.generation == 1
                && applied.is_none()
                && next.withdrawals().is_empty()
                && next.retired_leases.is_empty(),
        )?;
        return Ok(AdmissionStatus::Accepted);
    };
    if next.generation == previous.generation {
        require(next.digest == previous.digest)?;
        return Ok(AdmissionStatus::Replay);
    }
    let previous_reference = previous.reference();
    require(next.previous.as_ref() == Some(&previous_reference))?;
    require(
        next.controller == previous.controller
            && next.cluster_id == previous.cluster_id
            && next.node_id == previous.node_id
            && next.runtime_namespace == previous.runtime_namespace,
    )?;

    // A lease id present in both keeps its address (both lists are sorted by lease id: merge).
    let mut older = previous.endpoints.iter().peekable();
    for endpoint in &next.endpoints {
        while older.next_if(|old| compare_bytes(old.lease.id.as_str(), endpoint.lease.id.as_str()).is_lt()).is_some() {}
        if let Some(old) = older.next_if(|old| old.lease.id == endpoint.lease.id) {
            require(old.lease.ipv4 == endpoint.lease.ipv4)?;
        }
    }

    let joined = applied == Some(&previous_reference);

    let known_leases = Keys::new(
        previous
            .endpoints
            .iter()
            .map(|endpoint| lease_key(&endpoint.lease))
            .chain(previous.retired_leases.iter().map(RefKey::of)),
    );
    require(next.retired_leases.iter().all(|retired| known_leases.contains(&RefKey::of(retired))))?;
    if !joined {
        let retired = Keys::new(next.retired_leases.iter().map(RefKey::of));
        require(previous.retired_leases.iter().all(|old| retired.contains(&RefKey::of(old))))?;
    }

    let previous_grants = previous.workload_ingress.as_ref().map_or(&[][..], |ingress| &ingress.grants);
    let next_grants = next.workload_ingress.as_ref().map_or(&[][..], |ingress| &ingress.grants);
    let granted = Keys::new(next_grants.iter().map(|grant| grant.key()));
    let withdrawn = Keys::new(next.withdrawals().iter().map(PacketGrant::key));
    require(previous_grants.iter().all(|grant| granted.contains(&grant.key()) || withdrawn.contains(&grant.key())))?;
    let known_withdrawals = Keys::new(
        previous_grants.iter().map(|grant| grant.key()).chain(previous.withdrawals().iter().map(PacketGrant::key)),
    );
    require(next.withdrawals().iter().all(|withdrawal| known_withdrawals.contains(&withdrawal.key())))?;
    require(next.withdrawals().iter().all(|withdrawal| !granted.contains(&withdrawal.key())))?;
    if !joined {
        require(previous.withdrawals().iter().all(|old| withdrawn.contains(&old.key())))?;
    }
    Ok(AdmissionStatus::Accepted)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::json::canonical_without_digest;
    use crate::contract::network::lease::LeaseIpv4;
    use crate::contract::network::workload_ingress::{PacketGrantDestination, WorkloadIngressGrant};
    use crate::contract::primitives::{Ipv4, Ipv4Prefix, Protocol};

    fn id(text: &str) -> Id {
        Id::parse(text).unwrap()
    }

    fn lease(index: u32, node: &str) -> RuntimeNetworkLease {
        let subnet = Ipv4Prefix::new(Ipv4::from_u32(0x0a40_0000 + index * 4), 30).unwrap();
        RuntimeNetworkLease {
            id: id(&format!("lease-{index:04}")),
            generation: 1,
            previous: None,
            organization_id: id("org-a"),
            cluster_id: id("cluster-a"),
            service_id: id(&format!("svc-{}", index % 7)),
            node_id: NodeId::parse(node).unwrap(),
            assignment_id: id(&format!("asg-{index:04}")),
            ipv4: LeaseIpv4::for_link_subnet(subnet).unwrap(),
            digest: Sha256Digest::from_bytes(&[0; 32]),
        }
        .with_computed_digest()
    }

    fn reference(text: &str, byte: u8) -> AuthorityReference {
        AuthorityReference { id: id(text), generation: 1, digest: Sha256Digest::from_bytes(&[byte; 32]) }
    }

    /// Lease 0 is the ingress on node-1; it reaches leases 1..=grants (odd ones on node-2) on
    /// port 8080; the withdrawals are older ports of the same flows.
    fn projection(endpoints: u32, grants: u32, withdrawals: u32) -> RuntimeNetworkProjection {
        let leases: Vec<_> =
            (0..endpoints).map(|index| lease(index, if index % 2 == 1 { "node-2" } else { "node-1" })).collect();
        let ingress = leases[0].reference();
        let grant_list = (1..=grants)
            .map(|index| WorkloadIngressGrant {
                source: ingress.clone(),
                destination: leases[index as usize].reference(),
                protocol: Protocol::Tcp,
                port: 8080,
                authorization: reference("designation-a", 9),
            })
            .collect();
        let mut withdrawal_list: Vec<PacketGrant> = (0..withdrawals)
            .map(|index| PacketGrant {
                source: ingress.clone(),
                destination: PacketGrantDestination {
                    lease: leases[1 + (index % grants) as usize].reference(),
                    protocol: Protocol::Tcp,
                    port: 10_000 + (index / grants) as u16,
                },
            })
            .collect();
        withdrawal_list.sort_by(PacketGrant::canonical_cmp);
        RuntimeNetworkProjection {
            id: id("projection-node-1"),
            generation: 1,
            previous: None,
            controller: ProjectionController { kind: ControllerKind::Cloudly, id: id("ctl-1") },
            cluster_id: id("cluster-a"),
            node_id: NodeId::parse("node-1").unwrap(),
            runtime_namespace: id("ns-main"),
            protected_authority: ProtectedAuthorityReference {
                id: id("authority-a"),
                generation: 1,
                digest: Sha256Digest::from_bytes(&[5; 32]),
                platform_endpoints: vec![PlatformEndpoint {
                    id: id("corestore"),
                    address: Ipv4::parse("192.0.2.17").unwrap(),
                    protocol: Protocol::Tcp,
                    port: 9000,
                }],
            },
            endpoints: leases.into_iter().map(|lease| ProjectionEndpoint { lease }).collect(),
            retired_leases: Vec::new(),
            workload_ingress: Some(WorkloadIngressProjection { grants: grant_list, withdrawals: withdrawal_list }),
            host_platform_endpoint_ids: Some(vec![id("corestore")]),
            digest: Sha256Digest::from_bytes(&[0; 32]),
        }
        .with_computed_digest()
    }

    #[test]
    fn a_built_projection_writes_the_canonical_bytes_of_its_json() {
        let built = projection(40, 12, 30);
        let value = built.to_value();
        assert_eq!(built.canonical_without_digest(), canonical_without_digest(&value).unwrap().into_bytes());
        assert_eq!(built.canonical_len(), crate::contract::json::canonical(&value).unwrap().len());
        assert_eq!(built.canonical(), crate::contract::json::canonical(&value).unwrap());
        let mut without_endpoints = value.clone();
        without_endpoints["endpoints"] = serde_json::json!([]);
        assert_eq!(built.canonical_without_endpoints(), crate::contract::json::canonical(&without_endpoints).unwrap());
        assert_eq!(built.validate(), Ok(()));
        assert_eq!(validate_runtime_network_projection(&value), Ok(built.clone()));
        assert_eq!(built.withdrawals().len(), 30);
        assert_eq!(
            admit_projection(None, &built, None),
            Err(Rejected::of(KIND)),
            "a first generation has no withdrawals"
        );
        let mut first = built.clone();
        first.workload_ingress.as_mut().unwrap().withdrawals.clear();
        assert_eq!(admit_projection(None, &first.with_computed_digest(), None), Ok(AdmissionStatus::Accepted));
    }

    fn rejects(projection: RuntimeNetworkProjection) -> bool {
        projection.with_computed_digest().validate() == Err(Rejected::of(KIND))
    }

    #[test]
    fn whole_projection_rules_reject() {
        let base = projection(16, 4, 4);
        assert_eq!(base.validate(), Ok(()));

        let mut tampered = base.clone();
        tampered.digest = Sha256Digest::from_bytes(&[1; 32]);
        assert_eq!(tampered.validate(), Err(Rejected::of(KIND)));

        // Overlapping link subnets far apart in id order.
        let mut overlapping = base.clone();
        let mut moved = lease(3, "node-2");
        moved.ipv4 = overlapping.endpoints[14].lease.ipv4;
        overlapping.endpoints[3].lease = moved.with_computed_digest();
        if let Some(ingress) = overlapping.workload_ingress.as_mut() {
            ingress.grants.retain(|grant| grant.destination.id.as_str() != "lease-0003");
            ingress.withdrawals.retain(|withdrawal| withdrawal.destination.lease.id.as_str() != "lease-0003");
        }
        assert!(rejects(overlapping));

        let mut empty_ingress = base.clone();
        empty_ingress.workload_ingress = Some(WorkloadIngressProjection::default());
        assert!(rejects(empty_ingress));

        let mut onebox = base.clone();
        onebox.controller.kind = ControllerKind::Onebox;
        assert!(rejects(onebox.clone()));
        onebox.workload_ingress = None;
        assert_eq!(onebox.with_computed_digest().validate(), Ok(()));

        let mut unsorted = base.clone();
        unsorted.endpoints.swap(4, 5);
        assert!(rejects(unsorted));

        let mut stale_grant = base.clone();
        stale_grant.workload_ingress.as_mut().unwrap().grants[0].destination.generation = 2;
        assert!(rejects(stale_grant));

        let mut retired_current = base.clone();
        retired_current.retired_leases = vec![retired_current.endpoints[9].lease.reference()];
        assert!(rejects(retired_current.clone()));
        retired_current.retired_leases[0].generation = 2;
        assert_eq!(retired_current.with_computed_digest().validate(), Ok(()), "an older generation may be retired");

        let mut other_cluster = base.clone();
        let mut foreign = other_cluster.endpoints[15].lease.clone();
        foreign.cluster_id = id("cluster-b");
        other_cluster.endpoints[15].lease = foreign.with_computed_digest();
        assert!(rejects(other_cluster));
    }

    #[test]
    fn the_canonical_size_is_bounded() {
        let mut large = projection(4, 1, 0);
        // 36 000 retired references of 128-byte ids are about 9 MB of canonical bytes.
        large.retired_leases = (0..36_000u32)
            .map(|index| AuthorityReference {
                id: id(&format!("r{index:0>127}")),
                generation: 1,
                digest: Sha256Digest::from_bytes(&[7; 32]),
            })
            .collect();
        large.retired_leases.sort_by(AuthorityReference::canonical_cmp);
        assert!(large.canonical_len() > MAXIMUM_CANONICAL_BYTES);
        assert!(rejects(large));
    }

    #[test]
    fn admission_carries_withdrawals_and_retired_leases_until_applied() {
        let first = projection(8, 4, 0);
        let mut second = first.clone();
        second.generation = 2;
        second.previous = Some(first.reference());
        let ingress = second.workload_ingress.as_mut().unwrap();
        let dropped = ingress.grants.pop().unwrap();
        ingress.withdrawals = vec![dropped.packet_grant()];
        let retired = second.endpoints.remove(7).lease.reference();
        second.retired_leases = vec![retired];
        let second = second.with_computed_digest();
        assert_eq!(admit_projection(Some(&first), &second, None), Ok(AdmissionStatus::Accepted));
        assert_eq!(admit_projection(Some(&second), &second, None), Ok(AdmissionStatus::Replay));

        let mut third = second.clone();
        third.generation = 3;
        third.previous = Some(second.reference());
        third.workload_ingress.as_mut().unwrap().withdrawals.clear();
        third.retired_leases.clear();
        let third = third.with_computed_digest();
        assert_eq!(admit_projection(Some(&second), &third, None), Err(Rejected::of(KIND)));
        assert_eq!(admit_projection(Some(&second), &third, Some(&first.reference())), Err(Rejected::of(KIND)));
        assert_eq!(admit_projection(Some(&second), &third, Some(&second.reference())), Ok(AdmissionStatus::Accepted));

        // A lease keeps its address across generations.
        let mut moved = second.clone();
        moved.generation = 3;
        moved.previous = Some(second.reference());
        let mut lease = moved.endpoints[6].lease.clone();
        lease.previous = Some(lease.reference());
        lease.generation = 2;
        lease.ipv4 = LeaseIpv4::for_link_subnet(Ipv4Prefix::parse("10.65.0.0/30").unwrap()).unwrap();
        moved.endpoints[6].lease = lease.with_computed_digest();
        let moved = moved.with_computed_digest();
        assert_eq!(moved.validate(), Ok(()));
        assert_eq!(admit_projection(Some(&second), &moved, None), Err(Rejected::of(KIND)));

        // With a validated previous generation, the admission that skips validating it again
        // answers the same in every case above; an invalid next generation still rejects.
        let cases = [
            (None, &first, None),
            (Some(&first), &second, None),
            (Some(&second), &second, None),
            (Some(&second), &third, None),
            (Some(&second), &third, Some(first.reference())),
            (Some(&second), &third, Some(second.reference())),
            (Some(&second), &moved, None),
        ];
        for (previous, next, applied) in cases {
            assert_eq!(
                admit_projection_after_validated(previous, next, applied.as_ref()),
                admit_projection(previous, next, applied.as_ref())
            );
            // Sealing a generation built with any digest computes its digest, then admits it.
            let built = RuntimeNetworkProjection { digest: Sha256Digest::from_bytes(&[7; 32]), ..next.clone() };
            assert_eq!(
                built.seal_and_admit(previous, applied.as_ref()),
                admit_projection(previous, next, applied.as_ref()).map(|status| (next.clone(), status))
            );
        }
        let mut untrue = third.clone();
        untrue.runtime_namespace = id("elsewhere");
        assert_eq!(
            admit_projection_after_validated(Some(&second), &untrue, Some(&second.reference())),
            Err(Rejected::of(KIND))
        );
    }
}
