//! `IRuntimeNetworkWorkloadIngressProjection`: the one-way flows from the cluster ingress workload
//! to exact target workload ports, carried by `cloudly` projections (seed `networkworkloadingress.ts`
//! as far as the 32.22.0 readme describes it; `05-projection.md`, "`workloadIngress`").

use super::canonical::{decimal_cmp, digest_head, push_list, push_reference, push_string, push_u64, reference_cmp};
use crate::contract::primitives::{MAX_SAFE_INTEGER, Protocol};
use crate::contract::reader::{Parsed, Record, compare_bytes, list, port, protocol, require};
use crate::contract::reference::AuthorityReference;
use serde::Serialize;
use serde_json::Value;
use std::cmp::Ordering;

/// `runtimeNetworkWorkloadIngressContract.maximumGrants`.
pub const MAXIMUM_GRANTS: usize = 1024;

/// `runtimeNetworkWorkloadIngressContract.maximumWithdrawals`.
pub const MAXIMUM_WITHDRAWALS: usize = 4096;

/// An `IRuntimeAuthorityReference` borrowed as a set key: equal exactly when the references are.
/// It orders by the digest first, starting with its head, so sorting and searching keys mostly
/// compares integers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct RefKey<'a> {
    head: u64,
    digest: &'a str,
    generation: u64,
    id: &'a str,
}

impl<'a> RefKey<'a> {
    /// The key of `reference`.
    pub(crate) fn of(reference: &'a AuthorityReference) -> Self {
        RefKey::new(reference.id.as_str(), reference.generation, reference.digest.as_str())
    }

    /// The key of a record with this id, generation and digest.
    pub(crate) fn new(id: &'a str, generation: u64, digest: &'a str) -> Self {
        RefKey { head: digest_head(digest), digest, generation, id }
    }
}

/// A packet grant's identity as a set key: equal exactly when the packet grants are. It orders
/// by the integers first (digest heads, port, protocol), then by the whole references, so sorting
/// and searching rarely compare strings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct PacketGrantKey<'a> {
    lease: RefKey<'a>,
    port: u16,
    protocol: Protocol,
    source: RefKey<'a>,
}

impl Ord for PacketGrantKey<'_> {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.lease.head, self.port, self.protocol, self.source.head)
            .cmp(&(other.lease.head, other.port, other.protocol, other.source.head))
            .then_with(|| (self.lease, self.source).cmp(&(other.lease, other.source)))
    }
}

impl PartialOrd for PacketGrantKey<'_> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// A packet grant's members, borrowed from a withdrawal or from a grant.
#[derive(Clone, Copy)]
struct PacketView<'a> {
    source: &'a AuthorityReference,
    lease: &'a AuthorityReference,
    protocol: Protocol,
    port: u16,
}

impl PacketView<'_> {
    /// The canonical-bytes order of `{"destination":{"lease":…,"port":…,"protocol":…},"source":…}`.
    fn canonical_cmp(&self, other: &Self) -> Ordering {
        reference_cmp(self.lease, other.lease)
            .then_with(|| decimal_cmp(u64::from(self.port), u64::from(other.port)))
            .then_with(|| self.protocol.cmp(&other.protocol))
            .then_with(|| reference_cmp(self.source, other.source))
    }
}

/// True when a typed reference could have been read from JSON: a generation 1 ≤ n ≤ 2^53 − 1.
pub(crate) fn reference_in_range(reference: &AuthorityReference) -> bool {
    (1..=MAX_SAFE_INTEGER).contains(&reference.generation)
}

/// `IRuntimeNetworkWorkloadIngressPacketGrant['destination']`: `{ lease, protocol, port }`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct PacketGrantDestination {
    /// The exact lease reference of the target workload.
    pub lease: AuthorityReference,
    /// `tcp` or `udp`.
    pub protocol: Protocol,
    /// The target's own listening port.
    pub port: u16,
}

/// `IRuntimeNetworkWorkloadIngressPacketGrant`: `{ source, destination: { lease, protocol, port } }`,
/// a grant's identity without its authorization. Withdrawals are packet grants.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct PacketGrant {
    /// The exact lease reference of the cluster ingress workload.
    pub source: AuthorityReference,
    /// The target lease, protocol and port.
    pub destination: PacketGrantDestination,
}

impl PacketGrant {
    /// The `networkCanonical` order of withdrawals: packet grants by their canonical bytes,
    /// `{"destination":{"lease":…,"port":…,"protocol":…},"source":…}`: the destination lease's
    /// canonical bytes, then the port's decimal text, then the protocol, then the source's bytes.
    /// Equal to comparing `canonical(grant)` byte-wise (a reference's canonical bytes are never a
    /// proper prefix of another's, and a number's text is followed by `,`, which sorts before
    /// every digit); the tests check it against the canonical bytes.
    pub fn canonical_cmp(&self, other: &Self) -> Ordering {
        self.view().canonical_cmp(&other.view())
    }

    fn view(&self) -> PacketView<'_> {
        PacketView {
            source: &self.source,
            lease: &self.destination.lease,
            protocol: self.destination.protocol,
            port: self.destination.port,
        }
    }

    pub(crate) fn key(&self) -> PacketGrantKey<'_> {
        PacketGrantKey {
            source: RefKey::of(&self.source),
            lease: RefKey::of(&self.destination.lease),
            protocol: self.destination.protocol,
            port: self.destination.port,
        }
    }

    fn read(value: &Value) -> Parsed<Self> {
        let record = Record::exact(value, &["source", "destination"])?;
        let source = record.read("source", AuthorityReference::read)?;
        let destination = Record::exact(record.get("destination")?, &["lease", "protocol", "port"])?;
        Ok(PacketGrant {
            source,
            destination: PacketGrantDestination {
                lease: destination.read("lease", AuthorityReference::read)?,
                protocol: destination.read("protocol", protocol)?,
                port: destination.read("port", port)?,
            },
        })
    }

    fn in_range(&self) -> bool {
        self.destination.port >= 1 && reference_in_range(&self.source) && reference_in_range(&self.destination.lease)
    }

    fn write_canonical(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(b"{\"destination\":{\"lease\":");
        push_reference(out, &self.destination.lease);
        out.extend_from_slice(b",\"port\":");
        push_u64(out, u64::from(self.destination.port));
        out.extend_from_slice(b",\"protocol\":");
        push_string(out, self.destination.protocol.as_str());
        out.extend_from_slice(b"},\"source\":");
        push_reference(out, &self.source);
        out.push(b'}');
    }
}

/// `IRuntimeNetworkWorkloadIngress`: one grant, `{ source, destination, protocol, port, authorization }`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct WorkloadIngressGrant {
    /// The exact lease reference of the cluster ingress workload.
    pub source: AuthorityReference,
    /// The exact lease reference of the target workload.
    pub destination: AuthorityReference,
    /// `tcp` or `udp`.
    pub protocol: Protocol,
    /// The target's own listening port.
    pub port: u16,
    /// The authority that allows the flow (this controller: the cluster's current ingress
    /// designation). Signed content, not grant identity.
    pub authorization: AuthorityReference,
}

impl WorkloadIngressGrant {
    /// `workloadIngressPacketGrantsOf` for one entry: `{ source, destination: { lease, protocol, port } }`.
    pub fn packet_grant(&self) -> PacketGrant {
        PacketGrant {
            source: self.source.clone(),
            destination: PacketGrantDestination {
                lease: self.destination.clone(),
                protocol: self.protocol,
                port: self.port,
            },
        }
    }

    /// The seed's grant order `[source.id, destination.id, protocol, port]`: ids byte-wise, `port`
    /// numerically.
    pub fn order_cmp(&self, other: &Self) -> Ordering {
        compare_bytes(self.source.id.as_str(), other.source.id.as_str())
            .then_with(|| compare_bytes(self.destination.id.as_str(), other.destination.id.as_str()))
            .then_with(|| self.protocol.cmp(&other.protocol))
            .then_with(|| self.port.cmp(&other.port))
    }

    fn view(&self) -> PacketView<'_> {
        PacketView { source: &self.source, lease: &self.destination, protocol: self.protocol, port: self.port }
    }

    pub(crate) fn key(&self) -> PacketGrantKey<'_> {
        PacketGrantKey {
            source: RefKey::of(&self.source),
            lease: RefKey::of(&self.destination),
            protocol: self.protocol,
            port: self.port,
        }
    }

    fn read(value: &Value) -> Parsed<Self> {
        let record = Record::exact(value, &["source", "destination", "protocol", "port", "authorization"])?;
        Ok(WorkloadIngressGrant {
            source: record.read("source", AuthorityReference::read)?,
            destination: record.read("destination", AuthorityReference::read)?,
            protocol: record.read("protocol", protocol)?,
            port: record.read("port", port)?,
            authorization: record.read("authorization", AuthorityReference::read)?,
        })
    }

    fn in_range(&self) -> bool {
        self.port >= 1
            && reference_in_range(&self.source)
            && reference_in_range(&self.destination)
            && reference_in_range(&self.authorization)
    }

    fn write_canonical(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(b"{\"authorization\":");
        push_reference(out, &self.authorization);
        out.extend_from_slice(b",\"destination\":");
        push_reference(out, &self.destination);
        out.extend_from_slice(b",\"port\":");
        push_u64(out, u64::from(self.port));
        out.extend_from_slice(b",\"protocol\":");
        push_string(out, self.protocol.as_str());
        out.extend_from_slice(b",\"source\":");
        push_reference(out, &self.source);
        out.push(b'}');
    }
}

/// `IRuntimeNetworkWorkloadIngressProjection`: `{ grants, withdrawals }`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct WorkloadIngressProjection {
    /// Strictly ordered by `[source.id, destination.id, protocol, port]`, at most 1 024.
    pub grants: Vec<WorkloadIngressGrant>,
    /// Retained withdrawals: sorted by canonical bytes, at most 4 096.
    pub withdrawals: Vec<PacketGrant>,
}

impl WorkloadIngressProjection {
    /// `snapshotWorkloadIngressProjection`'s reading: exact keys, bounds and orders.
    pub(crate) fn read(value: &Value) -> Parsed<Self> {
        let record = Record::exact(value, &["grants", "withdrawals"])?;
        let projection = WorkloadIngressProjection {
            grants: record.read("grants", |value| list(value, MAXIMUM_GRANTS, WorkloadIngressGrant::read))?,
            withdrawals: record.read("withdrawals", |value| list(value, MAXIMUM_WITHDRAWALS, PacketGrant::read))?,
        };
        projection.check_structure()?;
        Ok(projection)
    }

    /// Bounds, value ranges and strict orders (which also make entries unique).
    pub(crate) fn check_structure(&self) -> Parsed<()> {
        require(self.grants.len() <= MAXIMUM_GRANTS && self.withdrawals.len() <= MAXIMUM_WITHDRAWALS)?;
        require(self.grants.iter().all(WorkloadIngressGrant::in_range))?;
        require(self.withdrawals.iter().all(PacketGrant::in_range))?;
        require(self.grants.windows(2).all(|pair| pair[0].order_cmp(&pair[1]).is_lt()))?;
        require(self.withdrawals.windows(2).all(|pair| pair[0].canonical_cmp(&pair[1]).is_lt()))
    }

    /// `workloadIngressGrants.has(networkCanonical(grant))`: `packet_grant` is exactly the packet
    /// grant of a current grant (a binary search in the grant order the structure check guarantees).
    pub fn grants(&self, packet_grant: &PacketGrant) -> bool {
        let destination = &packet_grant.destination;
        self.grants
            .binary_search_by(|grant| {
                compare_bytes(grant.source.id.as_str(), packet_grant.source.id.as_str())
                    .then_with(|| compare_bytes(grant.destination.id.as_str(), destination.lease.id.as_str()))
                    .then_with(|| grant.protocol.cmp(&destination.protocol))
                    .then_with(|| grant.port.cmp(&destination.port))
            })
            .is_ok_and(|index| self.grants[index].key() == packet_grant.key())
    }

    /// The seed's "no withdrawal equals a current packet grant", in `O((g + w) log g)`: the grants'
    /// packet grants sorted into the withdrawals' canonical order, then one merge walk.
    pub(crate) fn withdraws_no_current_grant(&self) -> bool {
        let mut current: Vec<PacketView<'_>> = self.grants.iter().map(WorkloadIngressGrant::view).collect();
        current.sort_unstable_by(PacketView::canonical_cmp);
        let mut current = current.into_iter().peekable();
        self.withdrawals.iter().all(|withdrawal| {
            let withdrawal = withdrawal.view();
            while current.next_if(|grant| grant.canonical_cmp(&withdrawal).is_lt()).is_some() {}
            current.peek().is_none_or(|grant| grant.canonical_cmp(&withdrawal).is_ne())
        })
    }

    /// `workloadIngressPacketGrantsOf`: the detached packet grants, in grant order.
    pub fn packet_grants(&self) -> Vec<PacketGrant> {
        self.grants.iter().map(WorkloadIngressGrant::packet_grant).collect()
    }

    pub(crate) fn write_canonical(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(b"{\"grants\":");
        push_list(out, &self.grants, |out, grant| grant.write_canonical(out));
        out.extend_from_slice(b",\"withdrawals\":");
        push_list(out, &self.withdrawals, |out, withdrawal| withdrawal.write_canonical(out));
        out.push(b'}');
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::json::canonical;
    use crate::contract::primitives::{Id, Sha256Digest};

    fn reference(id: &str, generation: u64, digest_byte: u8) -> AuthorityReference {
        AuthorityReference {
            id: Id::parse(id).unwrap(),
            generation,
            digest: Sha256Digest::from_bytes(&[digest_byte; 32]),
        }
    }

    #[test]
    fn packet_grant_order_is_the_order_of_the_canonical_bytes() {
        let mut grants = Vec::new();
        for lease in [
            reference("a", 1, 1),
            reference("a", 12, 1),
            reference("a", 9, 1),
            reference("a-", 1, 1),
            reference("ab", 1, 1),
            reference("b", 1, 0),
        ] {
            for port in [1u16, 9, 10, 443, 8080, 10000, 65535] {
                for protocol in [Protocol::Tcp, Protocol::Udp] {
                    for source in [reference("ingress", 1, 7), reference("ingress", 10, 7), reference("ingress.", 2, 3)]
                    {
                        grants.push(PacketGrant {
                            source,
                            destination: PacketGrantDestination { lease: lease.clone(), protocol, port },
                        });
                    }
                }
            }
        }
        let texts: Vec<String> =
            grants.iter().map(|grant| canonical(&serde_json::to_value(grant).unwrap()).unwrap()).collect();
        for (left, left_text) in grants.iter().zip(&texts) {
            let mut written = Vec::new();
            left.write_canonical(&mut written);
            assert_eq!(written, left_text.as_bytes());
            for (right, right_text) in grants.iter().zip(&texts) {
                assert_eq!(
                    left.canonical_cmp(right),
                    left_text.as_bytes().cmp(right_text.as_bytes()),
                    "{left_text} {right_text}"
                );
            }
        }
    }

    #[test]
    fn a_withdrawal_of_a_current_grant_is_found_by_both_lookups() {
        let grant = |destination: &str, port| WorkloadIngressGrant {
            source: reference("ingress", 1, 1),
            destination: reference(destination, 1, destination.len() as u8),
            protocol: Protocol::Tcp,
            port,
            authorization: reference("designation", 1, 3),
        };
        let grants = vec![grant("a", 443), grant("a", 8080), grant("bb", 80), grant("ccc", 9000), grant("ccc", 10000)];
        for current in 0..grants.len() {
            let mut withdrawals: Vec<PacketGrant> =
                vec![grant("a", 1).packet_grant(), grant("bb", 81).packet_grant(), grants[current].packet_grant()];
            withdrawals.sort_by(PacketGrant::canonical_cmp);
            let ingress = WorkloadIngressProjection { grants: grants.clone(), withdrawals };
            assert_eq!(ingress.check_structure(), Ok(()));
            assert!(!ingress.withdraws_no_current_grant(), "{current}");
            assert!(ingress.withdrawals.iter().any(|withdrawal| ingress.grants(withdrawal)), "{current}");
        }
        let mut withdrawals = vec![grant("a", 1).packet_grant(), grant("bb", 81).packet_grant()];
        withdrawals.sort_by(PacketGrant::canonical_cmp);
        let mut stale = grants[3].packet_grant();
        stale.source.generation = 2;
        withdrawals.push(stale);
        withdrawals.sort_by(PacketGrant::canonical_cmp);
        let ingress = WorkloadIngressProjection { grants, withdrawals };
        assert!(ingress.withdraws_no_current_grant());
        assert!(!ingress.withdrawals.iter().any(|withdrawal| ingress.grants(withdrawal)));
    }

    #[test]
    fn grants_order_by_port_numerically() {
        let grant = |port| WorkloadIngressGrant {
            source: reference("ingress", 1, 1),
            destination: reference("web", 1, 2),
            protocol: Protocol::Tcp,
            port,
            authorization: reference("designation", 1, 3),
        };
        assert!(grant(443).order_cmp(&grant(8080)).is_lt());
        assert!(grant(9000).order_cmp(&grant(10000)).is_lt());
        let mut written = Vec::new();
        grant(443).write_canonical(&mut written);
        assert_eq!(written, canonical(&serde_json::to_value(grant(443)).unwrap()).unwrap().into_bytes());
    }
}
