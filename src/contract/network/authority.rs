//! `IRuntimeNetworkProtectedAuthority`: the record holding a cluster's platform endpoints
//! (`05-projection.md`, "Address plan").
//!
//! Its `platformEndpoints` are the address plan's platform endpoints plus one `udp` endpoint per
//! hub, sorted by id, at most 64: one hub costs one of the authority's 64 places. Here each
//! cluster has its own authority (upstream one may serve up to 64 clusters).

use super::address_plan::RuntimeNetworkAddressPlan;
use crate::contract::kind::{DigestedRecord, RecordKind, Rejected, digested_record, validate_digested};
use crate::contract::primitives::{Id, Ipv4, Protocol, Sha256Digest};
use crate::contract::reader::{Parsed, Record, compare_bytes, digest, id, ipv4, list, port, protocol, require};
use crate::contract::reference::{AuthorityReference, REVISED_RECORD_KEYS, Revision, check_revision};
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeSet;

const KIND: RecordKind = RecordKind::RuntimeNetworkProtectedAuthority;

/// `runtimeNetworkProtectedAuthorityContract.digestDomain`: `serve.zone/runtime-network-protected-authority`.
pub const DIGEST_DOMAIN: &str = "serve.zone/runtime-network-protected-authority";

/// `runtimeNetworkProtectedAuthorityContract.maximumPlatformEndpoints`: 64, hubs included.
pub const MAXIMUM_PLATFORM_ENDPOINTS: usize = 64;

/// `IRuntimeNetworkPlatformEndpoint`: `{ id, address, protocol, port }`. It names no node.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct PlatformEndpoint {
    /// The endpoint id, unique within its list.
    pub id: Id,
    /// The address the endpoint listens on.
    pub address: Ipv4,
    /// `tcp` or `udp`.
    pub protocol: Protocol,
    /// The listening port.
    pub port: u16,
}

impl PlatformEndpoint {
    /// Reads `{ id, address, protocol, port }` with exact keys.
    pub(crate) fn read(value: &Value) -> Parsed<Self> {
        let record = Record::exact(value, &["id", "address", "protocol", "port"])?;
        Ok(PlatformEndpoint {
            id: record.read("id", id)?,
            address: record.read("address", ipv4)?,
            protocol: record.read("protocol", protocol)?,
            port: record.read("port", port)?,
        })
    }
}

/// Reads a platform endpoint list and checks it with [`check_platform_endpoints`].
pub(crate) fn read_platform_endpoints(value: &Value) -> Parsed<Vec<PlatformEndpoint>> {
    let endpoints = list(value, MAXIMUM_PLATFORM_ENDPOINTS, PlatformEndpoint::read)?;
    check_platform_endpoints(&endpoints)?;
    Ok(endpoints)
}

/// An authority's endpoint list: sorted by id (so ids are unique), at most 64, and each
/// `address:port:protocol` unique (several endpoints may share one address on distinct ports).
pub(crate) fn check_platform_endpoints(endpoints: &[PlatformEndpoint]) -> Parsed<()> {
    require(endpoints.len() <= MAXIMUM_PLATFORM_ENDPOINTS)?;
    require(endpoints.windows(2).all(|pair| compare_bytes(pair[0].id.as_str(), pair[1].id.as_str()).is_lt()))?;
    let mut sockets = BTreeSet::new();
    require(endpoints.iter().all(|endpoint| sockets.insert((endpoint.address, endpoint.port, endpoint.protocol))))
}

/// `IRuntimeNetworkProtectedAuthority`: a revised record digested under
/// `serve.zone/runtime-network-protected-authority`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeNetworkProtectedAuthority {
    /// Stable across the authority's generations.
    pub id: Id,
    /// ≥ 1.
    pub generation: u64,
    /// The previous generation's reference, `None` for generation 1.
    pub previous: Option<AuthorityReference>,
    /// Sorted by id, at most 64, each `address:port:protocol` unique.
    pub platform_endpoints: Vec<PlatformEndpoint>,
    /// `computeRuntimeNetworkProtectedAuthorityDigest` of the rest.
    pub digest: Sha256Digest,
}

impl RuntimeNetworkProtectedAuthority {
    /// `computeRuntimeNetworkProtectedAuthorityDigest` applied by the issuer: the same authority
    /// with its digest computed from its content.
    pub fn with_computed_digest(mut self) -> Self {
        self.digest = self.compute_digest();
        self
    }
}

digested_record!(revised RuntimeNetworkProtectedAuthority, KIND, snapshot_runtime_network_protected_authority);

/// `snapshotRuntimeNetworkProtectedAuthority`: detached exact-schema snapshot (the digest is a
/// separate check); rejects with `Runtime network protected authority contract rejected.`.
pub fn snapshot_runtime_network_protected_authority(
    value: &Value,
) -> Result<RuntimeNetworkProtectedAuthority, Rejected> {
    read_authority(value).map_err(|_| Rejected::of(KIND))
}

fn read_authority(value: &Value) -> Parsed<RuntimeNetworkProtectedAuthority> {
    let record = Record::with_parts(value, &[&REVISED_RECORD_KEYS, &["platformEndpoints"]], &[])?;
    let Revision { id, generation, previous } = Revision::read(&record)?;
    Ok(RuntimeNetworkProtectedAuthority {
        id,
        generation,
        previous,
        platform_endpoints: record.read("platformEndpoints", read_platform_endpoints)?,
        digest: record.read("digest", digest)?,
    })
}

/// `computeRuntimeNetworkProtectedAuthorityDigest`: snapshots, then hashes under the authority domain.
pub fn compute_runtime_network_protected_authority_digest(value: &Value) -> Result<Sha256Digest, Rejected> {
    Ok(snapshot_runtime_network_protected_authority(value)?.compute_digest())
}

/// `validateRuntimeNetworkProtectedAuthority`: `[]`, `["runtime network protected authority digest
/// does not match"]` or `["runtime network protected authority must use its exact canonical schema"]`.
pub fn validate_runtime_network_protected_authority(value: &Value) -> Vec<String> {
    validate_digested::<RuntimeNetworkProtectedAuthority>(value)
}

/// `composeRuntimeNetworkProtectedAuthority`'s endpoint list: the plan's platform endpoints plus
/// `{ id: hub id, address: hub address, protocol: "udp", port: hub port }` per hub, sorted by
/// id, at most 64, each `address:port:protocol` unique. Rejects (authority kind) when a hub id
/// equals an endpoint id or the list would not fit.
pub fn compose_runtime_network_platform_endpoints(
    plan: &RuntimeNetworkAddressPlan,
) -> Result<Vec<PlatformEndpoint>, Rejected> {
    let hubs = plan.hubs.iter().map(|hub| PlatformEndpoint {
        id: hub.id.clone(),
        address: hub.address,
        protocol: Protocol::Udp,
        port: hub.port,
    });
    let mut endpoints: Vec<PlatformEndpoint> = plan.platform_endpoints.iter().cloned().chain(hubs).collect();
    endpoints.sort_by(|left, right| compare_bytes(left.id.as_str(), right.id.as_str()));
    check_platform_endpoints(&endpoints).map_err(|_| Rejected::of(KIND))?;
    Ok(endpoints)
}

/// `composeRuntimeNetworkProtectedAuthority`: the authority a plan revision asks for. Answers
/// `previous` unchanged when its endpoints already equal the plan's; otherwise the next generation
/// (generation 1 with `id` when there is no previous), digest computed. Rejects when `previous`
/// has another id or breaks the revision rule, or the plan's endpoints do not compose.
pub fn compose_runtime_network_protected_authority(
    id: &Id,
    previous: Option<&RuntimeNetworkProtectedAuthority>,
    plan: &RuntimeNetworkAddressPlan,
) -> Result<RuntimeNetworkProtectedAuthority, Rejected> {
    let platform_endpoints = compose_runtime_network_platform_endpoints(plan)?;
    let next = match previous {
        None => RuntimeNetworkProtectedAuthority {
            id: id.clone(),
            generation: 1,
            previous: None,
            platform_endpoints,
            digest: Sha256Digest::from_bytes(&[0; 32]),
        },
        Some(previous) => {
            require(previous.id == *id)
                .and_then(|()| check_revision(&previous.id, previous.generation, previous.previous.as_ref()))
                .map_err(|_| Rejected::of(KIND))?;
            if previous.platform_endpoints == platform_endpoints {
                return Ok(previous.clone());
            }
            RuntimeNetworkProtectedAuthority {
                id: id.clone(),
                generation: previous.generation + 1,
                previous: Some(previous.reference()),
                platform_endpoints,
                digest: Sha256Digest::from_bytes(&[0; 32]),
            }
        }
    };
    Ok(next.with_computed_digest())
}
