//! `IRuntimeNetworkLease`: one assignment's IPv4 lease from its organization's pool
//! (`05-projection.md`, "Leases").
//!
//! The lease's `ipv4` is parsed into [`LeaseIpv4`], which holds its invariant privately: the link
//! subnet is a `/30` and the address is that subnet's network address + 1. The snapshot therefore
//! refuses a lease that breaks it (and so does the projection that embeds one): a value of the
//! type is a valid lease address by construction.

use super::canonical::{push_ipv4, push_nullable_reference, push_prefix, push_string, push_u64};
use crate::contract::kind::{
    DigestedRecord, RecordKind, Rejected, digest_canonical_bytes, digested_record, validate_digested,
};
use crate::contract::primitives::{Id, Ipv4, Ipv4Prefix, NodeId, Sha256Digest};
use crate::contract::reader::{Invalid, Parsed, Record, digest, id, ipv4, ipv4_prefix, node_id, require};
use crate::contract::reference::{AuthorityReference, REVISED_RECORD_KEYS, Revision, check_revision};
use serde::Serialize;
use serde_json::Value;

const KIND: RecordKind = RecordKind::RuntimeNetworkLease;

/// `runtimeNetworkLeaseContract.digestDomain`: `serve.zone/runtime-network-lease`.
pub const DIGEST_DOMAIN: &str = "serve.zone/runtime-network-lease";

/// The prefix length of `IRuntimeNetworkLease['ipv4']['linkSubnet']`: every link subnet is a `/30`.
pub const LINK_SUBNET_LENGTH: u8 = 30;

/// `IRuntimeNetworkLease['ipv4']`: `{ address, linkSubnet }`, where `linkSubnet` is a `/30` carved
/// from the pool and `address` is its network address + 1. Built only from a `/30`, so the
/// address can never disagree with the subnet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LeaseIpv4 {
    address: Ipv4,
    link_subnet: Ipv4Prefix,
}

impl LeaseIpv4 {
    /// `IRuntimeNetworkLease['ipv4']` of `link_subnet`, or `None` unless it is a `/30`.
    pub fn for_link_subnet(link_subnet: Ipv4Prefix) -> Option<Self> {
        (link_subnet.length() == LINK_SUBNET_LENGTH)
            .then(|| LeaseIpv4 { address: Ipv4::from_u32(link_subnet.network().to_u32() + 1), link_subnet })
    }

    /// `ipv4.address`: the link subnet's network address + 1.
    pub fn address(&self) -> Ipv4 {
        self.address
    }

    /// `ipv4.linkSubnet`: the `/30` link subnet.
    pub fn link_subnet(&self) -> Ipv4Prefix {
        self.link_subnet
    }

    /// Reads `{ address, linkSubnet }` with exact keys and the lease address rule.
    pub(crate) fn read(value: &Value) -> Parsed<Self> {
        let record = Record::exact(value, &["address", "linkSubnet"])?;
        let address = record.read("address", ipv4)?;
        let lease = LeaseIpv4::for_link_subnet(record.read("linkSubnet", ipv4_prefix)?).ok_or(Invalid)?;
        require(lease.address == address)?;
        Ok(lease)
    }
}

/// `IRuntimeNetworkLease`: a revised record, digested under `serve.zone/runtime-network-lease`.
/// A lease keeps its address for its whole life; a new generation only changes what else it
/// carries (its node, its assignment).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeNetworkLease {
    /// Stable across the lease's generations.
    pub id: Id,
    /// ≥ 1.
    pub generation: u64,
    /// The previous generation's reference, `None` for generation 1.
    pub previous: Option<AuthorityReference>,
    /// The organization whose pool the address comes from.
    pub organization_id: Id,
    /// The cluster.
    pub cluster_id: Id,
    /// The service of the assignment.
    pub service_id: Id,
    /// The node the assignment is placed on.
    pub node_id: NodeId,
    /// The assignment holding the lease.
    pub assignment_id: Id,
    /// The address and its link subnet.
    pub ipv4: LeaseIpv4,
    /// `computeRuntimeNetworkLeaseDigest` of the rest.
    pub digest: Sha256Digest,
}

/// Where the top-level `digest` member sits inside a lease's canonical bytes, so that a caller
/// that wrote the lease as part of a larger record can hash the lease without writing it again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LeaseSpan {
    /// The offset of the lease's `{`.
    pub start: usize,
    /// The offset of `"digest":` (the member that the lease digest leaves out).
    pub digest_start: usize,
    /// The offset just past that member's trailing comma.
    pub digest_end: usize,
    /// The offset just past the lease's `}`.
    pub end: usize,
}

impl LeaseSpan {
    /// SHA-256 over `domain ‖ 0x00 ‖ canonical(lease without digest)`, read from `bytes`.
    pub(crate) fn digest_output(&self, bytes: &[u8]) -> [u8; 32] {
        use sha2::{Digest as _, Sha256};
        let mut hasher = Sha256::new();
        hasher.update(DIGEST_DOMAIN.as_bytes());
        hasher.update([0u8]);
        hasher.update(&bytes[self.start..self.digest_start]);
        hasher.update(&bytes[self.digest_end..self.end]);
        hasher.finalize().into()
    }
}

impl RuntimeNetworkLease {
    /// `networkEqual(reference, networkReferenceOf(lease))`: `reference` is exactly this lease's
    /// reference (id, generation and digest).
    pub fn is_referenced_by(&self, reference: &AuthorityReference) -> bool {
        self.id == reference.id && self.generation == reference.generation && self.digest == reference.digest
    }

    /// `computeRuntimeNetworkLeaseDigest` applied by the issuer: the same lease with its digest
    /// computed from its content.
    pub fn with_computed_digest(mut self) -> Self {
        self.digest = self.compute_digest();
        self
    }

    /// Appends the lease's canonical bytes (with its `digest` member when `with_digest`) and
    /// answers where that member sits.
    pub(crate) fn write_canonical(&self, out: &mut Vec<u8>, with_digest: bool) -> LeaseSpan {
        let start = out.len();
        out.extend_from_slice(b"{\"assignmentId\":");
        push_string(out, self.assignment_id.as_str());
        out.extend_from_slice(b",\"clusterId\":");
        push_string(out, self.cluster_id.as_str());
        out.push(b',');
        let digest_start = out.len();
        if with_digest {
            out.extend_from_slice(b"\"digest\":");
            push_string(out, self.digest.as_str());
            out.push(b',');
        }
        let digest_end = out.len();
        out.extend_from_slice(b"\"generation\":");
        push_u64(out, self.generation);
        out.extend_from_slice(b",\"id\":");
        push_string(out, self.id.as_str());
        out.extend_from_slice(b",\"ipv4\":{\"address\":");
        push_ipv4(out, self.ipv4.address);
        out.extend_from_slice(b",\"linkSubnet\":");
        push_prefix(out, self.ipv4.link_subnet);
        out.extend_from_slice(b"},\"nodeId\":");
        push_string(out, self.node_id.as_str());
        out.extend_from_slice(b",\"organizationId\":");
        push_string(out, self.organization_id.as_str());
        out.extend_from_slice(b",\"previous\":");
        push_nullable_reference(out, self.previous.as_ref());
        out.extend_from_slice(b",\"serviceId\":");
        push_string(out, self.service_id.as_str());
        out.push(b'}');
        LeaseSpan { start, digest_start, digest_end, end: out.len() }
    }

    /// `networkCanonical` of the lease without its top-level `digest` (what its digest hashes).
    pub fn canonical_without_digest(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(512);
        self.write_canonical(&mut out, false);
        out
    }

    /// The typed checks a snapshot makes beyond the field readers: the revision rule.
    pub(crate) fn check(&self) -> Parsed<()> {
        check_revision(&self.id, self.generation, self.previous.as_ref())
    }

    /// Reads a lease with exact keys; the caller maps [`Invalid`] to its own kind.
    pub(crate) fn read(value: &Value) -> Parsed<Self> {
        const OWN_KEYS: [&str; 6] = ["organizationId", "clusterId", "serviceId", "nodeId", "assignmentId", "ipv4"];
        let record = Record::with_parts(value, &[&REVISED_RECORD_KEYS, &OWN_KEYS], &[])?;
        let Revision { id: lease_id, generation, previous } = Revision::read(&record)?;
        Ok(RuntimeNetworkLease {
            id: lease_id,
            generation,
            previous,
            organization_id: record.read("organizationId", id)?,
            cluster_id: record.read("clusterId", id)?,
            service_id: record.read("serviceId", id)?,
            node_id: record.read("nodeId", node_id)?,
            assignment_id: record.read("assignmentId", id)?,
            ipv4: record.read("ipv4", LeaseIpv4::read)?,
            digest: record.read("digest", digest)?,
        })
    }
}

digested_record!(
    revised RuntimeNetworkLease,
    KIND,
    snapshot_runtime_network_lease,
    /// Hashes the directly written canonical bytes (equal to the generic path's, faster).
    fn compute_digest(&self) -> Sha256Digest {
        digest_canonical_bytes(DIGEST_DOMAIN, &self.canonical_without_digest())
    }
);

/// `snapshotRuntimeNetworkLease`: detached exact-schema snapshot (the digest is a separate check);
/// rejects with `Runtime network lease contract rejected.`.
pub fn snapshot_runtime_network_lease(value: &Value) -> Result<RuntimeNetworkLease, Rejected> {
    RuntimeNetworkLease::read(value).map_err(|_| Rejected::of(KIND))
}

/// `computeRuntimeNetworkLeaseDigest`: snapshots, then hashes under the lease domain.
pub fn compute_runtime_network_lease_digest(value: &Value) -> Result<Sha256Digest, Rejected> {
    Ok(snapshot_runtime_network_lease(value)?.compute_digest())
}

/// `validateRuntimeNetworkLease`: `[]`, `["runtime network lease digest does not match"]` or
/// `["runtime network lease must use its exact canonical schema"]`.
pub fn validate_runtime_network_lease(value: &Value) -> Vec<String> {
    validate_digested::<RuntimeNetworkLease>(value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::json::canonical_without_digest;
    use serde_json::json;

    fn lease() -> Value {
        json!({
            "id": "lease-web-node-1", "generation": 1, "previous": null, "organizationId": "org-shop",
            "clusterId": "cluster-a", "serviceId": "web", "nodeId": "node-1", "assignmentId": "asg-web-node-1",
            "ipv4": { "address": "10.64.0.9", "linkSubnet": "10.64.0.8/30" },
            "digest": "sha256:66782aef39d88db0b8cfa650c17f5dc7970d3c7bfc85bae9dacc14e9d200f5a8"
        })
    }

    #[test]
    fn a_lease_reads_digests_and_round_trips() {
        let value = lease();
        let lease = snapshot_runtime_network_lease(&value).unwrap();
        assert_eq!(lease.canonical_without_digest(), canonical_without_digest(&value).unwrap().into_bytes());
        assert_eq!(lease.compute_digest(), lease.digest);
        assert!(validate_runtime_network_lease(&value).is_empty());
        assert_eq!(lease.to_value(), value);
        assert_eq!(lease.reference().generation, 1);
        assert!(lease.is_referenced_by(&lease.reference()));
    }

    #[test]
    fn the_lease_address_rule_is_part_of_the_schema() {
        for (address, subnet) in
            [("10.64.0.10", "10.64.0.8/30"), ("10.64.0.9", "10.64.0.8/29"), ("10.64.0.8", "10.64.0.8/30")]
        {
            let mut value = lease();
            value["ipv4"] = json!({ "address": address, "linkSubnet": subnet });
            assert_eq!(snapshot_runtime_network_lease(&value), Err(Rejected::of(KIND)), "{address} {subnet}");
        }
        let mut value = lease();
        value["digest"] = json!(format!("sha256:{}", "0".repeat(64)));
        assert_eq!(validate_runtime_network_lease(&value), vec!["runtime network lease digest does not match"]);
        let mut value = lease();
        value["generation"] = json!(2);
        assert_eq!(
            validate_runtime_network_lease(&value),
            vec!["runtime network lease must use its exact canonical schema"]
        );
    }
}
