//! Reading a projection straight from its JSON text into typed records, without building a
//! `serde_json::Value` first (`01-contract-basics.md`, "Raw JSON text"; `05-projection.md`,
//! scale target).
//!
//! A 4 096-endpoint projection is about 3 MB of text; building a `Value` tree of it costs many
//! times what hashing it does. This reader accepts exactly what `parse_record_text` followed by
//! `snapshot_runtime_network_projection` accepts:
//!
//! * every object is one of the contract's records, read with exact keys: a missing key, an
//!   unknown key or a repeated key rejects;
//! * every number is a `Counter`: a plain integer literal up to 2^53 − 1 (serde_json hands
//!   fractions, exponents, `-0`, negative and oversized literals to other visitor methods, which
//!   reject);
//! * strings are decoded JSON strings, so escapes read as they would into a `Value`;
//! * after the fields, the same bound, order and revision checks as the snapshot.
//!
//! The tests compare the two paths on every vector and on raw-text rule breakers.

use super::authority::PlatformEndpoint;
use super::lease::{LeaseIpv4, RuntimeNetworkLease};
use super::projection::{
    ControllerKind, ProjectionController, ProjectionEndpoint, ProtectedAuthorityReference, RuntimeNetworkProjection,
};
use super::workload_ingress::{PacketGrant, PacketGrantDestination, WorkloadIngressGrant, WorkloadIngressProjection};
use crate::contract::kind::{RecordKind, Rejected};
use crate::contract::primitives::{Id, Ipv4, Ipv4Prefix, MAX_SAFE_INTEGER, NodeId, Protocol, Sha256Digest};
use crate::contract::reference::AuthorityReference;
use serde::de::{self, Deserialize, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use std::fmt;
use std::marker::PhantomData;

const KIND: RecordKind = RecordKind::RuntimeNetworkProjection;

/// `snapshotRuntimeNetworkProjection` read from JSON text under the raw-text rules: the typed
/// projection with every bound and order checked, or `Runtime network projection contract rejected.`.
pub fn snapshot_runtime_network_projection_text(text: &str) -> Result<RuntimeNetworkProjection, Rejected> {
    let mut deserializer = serde_json::Deserializer::from_str(text);
    let projection =
        Text::<RuntimeNetworkProjection>::deserialize(&mut deserializer).map_err(|_| Rejected::of(KIND))?.0;
    deserializer.end().map_err(|_| Rejected::of(KIND))?;
    projection.check_structure().map_err(|_| Rejected::of(KIND))?;
    Ok(projection)
}

/// `validateRuntimeNetworkProjection` of JSON text: [`snapshot_runtime_network_projection_text`],
/// then every whole-projection rule and the digest.
pub fn validate_runtime_network_projection_text(text: &str) -> Result<RuntimeNetworkProjection, Rejected> {
    let projection = snapshot_runtime_network_projection_text(text)?;
    projection.check_rules().map_err(|_| Rejected::of(KIND))?;
    Ok(projection)
}

/// A contract value read from text.
struct Text<T>(T);

fn fail<E: de::Error>() -> E {
    E::custom("contract")
}

/// Reads a string and parses it with `parse`.
struct Parse<T>(fn(&str) -> Option<T>);

impl<'de, T> Visitor<'de> for Parse<T> {
    type Value = T;

    fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        formatter.write_str("a contract string")
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<T, E> {
        (self.0)(text).ok_or_else(fail)
    }
}

macro_rules! text_string {
    ($type:ty, $parse:expr) => {
        impl<'de> Deserialize<'de> for Text<$type> {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                deserializer.deserialize_str(Parse::<$type>($parse)).map(Text)
            }
        }
    };
}

text_string!(Id, Id::parse);
text_string!(NodeId, NodeId::parse);
text_string!(Sha256Digest, Sha256Digest::parse);
text_string!(Ipv4, Ipv4::parse);
text_string!(Ipv4Prefix, Ipv4Prefix::parse);
text_string!(Protocol, Protocol::parse);
text_string!(ControllerKind, ControllerKind::parse);

/// A `Counter`: only a plain non-negative integer literal up to 2^53 − 1 reaches `visit_u64`.
struct Counter;

impl<'de> Visitor<'de> for Counter {
    type Value = u64;

    fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        formatter.write_str("a safe integer")
    }

    fn visit_u64<E: de::Error>(self, value: u64) -> Result<u64, E> {
        if value <= MAX_SAFE_INTEGER { Ok(value) } else { Err(fail()) }
    }
}

impl<'de> Deserialize<'de> for Text<u64> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(Counter).map(Text)
    }
}

/// A `Port`'s number (its lower bound is checked with the record's structure).
impl<'de> Deserialize<'de> for Text<u16> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = deserializer.deserialize_any(Counter)?;
        u16::try_from(value).map(Text).map_err(|_| fail())
    }
}

/// Reads a JSON list of `T`s.
fn read_list<'de, D: Deserializer<'de>, T>(deserializer: D) -> Result<Vec<T>, D::Error>
where
    Text<T>: Deserialize<'de>,
{
    struct Items<T>(PhantomData<T>);

    impl<'de, T> Visitor<'de> for Items<T>
    where
        Text<T>: Deserialize<'de>,
    {
        type Value = Vec<T>;

        fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
            formatter.write_str("a list")
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<T>, A::Error> {
            let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(4096));
            while let Some(Text(item)) = seq.next_element::<Text<T>>()? {
                items.push(item);
            }
            Ok(items)
        }
    }

    deserializer.deserialize_seq(Items::<T>(PhantomData))
}

/// Implements `Deserialize` for `Text<Vec<$type>>` (one impl per list type: a blanket impl over
/// `Vec<T>` would send the trait solver into an endless `Vec<Vec<…>>` search).
macro_rules! text_list {
    ($($type:ty),*) => {
        $(
            impl<'de> Deserialize<'de> for Text<Vec<$type>> {
                fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                    read_list(deserializer).map(Text)
                }
            }
        )*
    };
}

text_list!(Id, AuthorityReference, PlatformEndpoint, ProjectionEndpoint, WorkloadIngressGrant, PacketGrant);

/// Reads an object key and answers its index in `keys`; any other key rejects. `hint` is the
/// index expected next: keys are listed in canonical (byte) order, so a canonical text, as this
/// controller writes it, names each key where the hint points and costs one comparison.
struct KeySeed {
    keys: &'static [&'static str],
    hint: usize,
}

impl<'de> DeserializeSeed<'de> for KeySeed {
    type Value = usize;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<usize, D::Error> {
        deserializer.deserialize_str(self)
    }
}

/// Short keys compared inline: a `memcmp` call per key costs more than the comparison.
fn same_key(known: &str, key: &[u8]) -> bool {
    known.len() == key.len() && known.bytes().zip(key).all(|(left, right)| left == *right)
}

impl<'de> Visitor<'de> for KeySeed {
    type Value = usize;

    fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        formatter.write_str("a record key")
    }

    fn visit_str<E: de::Error>(self, key: &str) -> Result<usize, E> {
        let key = key.as_bytes();
        if self.keys.get(self.hint).is_some_and(|known| same_key(known, key)) {
            return Ok(self.hint);
        }
        self.keys.iter().position(|known| same_key(known, key)).ok_or_else(fail)
    }
}

/// Reads an object whose keys are `keys` (in canonical order; those whose bit is set in
/// `optional` may be absent, every other one is required), handing each member's index to
/// `member`. An unknown or repeated key rejects.
fn members<'de, A: MapAccess<'de>>(
    mut map: A,
    keys: &'static [&'static str],
    optional: u32,
    mut member: impl FnMut(usize, &mut A) -> Result<(), A::Error>,
) -> Result<(), A::Error> {
    debug_assert!(keys.len() < 32 && keys.windows(2).all(|pair| pair[0] < pair[1]));
    let mut seen = 0u32;
    let mut hint = 0;
    while let Some(index) = map.next_key_seed(KeySeed { keys, hint })? {
        if seen & (1 << index) != 0 {
            return Err(fail());
        }
        seen |= 1 << index;
        hint = index + 1;
        member(index, &mut map)?;
    }
    let required = ((1u32 << keys.len()) - 1) & !optional;
    if seen & required == required { Ok(()) } else { Err(fail()) }
}

/// Implements `Deserialize` for `Text<$type>` as an object read by `$read(map)`.
macro_rules! text_record {
    ($type:ty, $read:ident) => {
        impl<'de> Deserialize<'de> for Text<$type> {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                struct Record;

                impl<'de> Visitor<'de> for Record {
                    type Value = $type;

                    fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
                        formatter.write_str("a contract record")
                    }

                    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<$type, A::Error> {
                        $read(map)
                    }
                }

                deserializer.deserialize_map(Record).map(Text)
            }
        }
    };
}

/// Reads the current member's value into `slot`.
fn set<'de, A: MapAccess<'de>, T>(slot: &mut Option<T>, map: &mut A) -> Result<(), A::Error>
where
    Text<T>: Deserialize<'de>,
{
    *slot = Some(map.next_value::<Text<T>>()?.0);
    Ok(())
}

/// Reads the current member's value, `null` or a `T`, into `slot`.
fn set_nullable<'de, A: MapAccess<'de>, T>(slot: &mut Option<Option<T>>, map: &mut A) -> Result<(), A::Error>
where
    Text<T>: Deserialize<'de>,
{
    *slot = Some(map.next_value::<Option<Text<T>>>()?.map(|Text(value)| value));
    Ok(())
}

fn present<T, E: de::Error>(value: Option<T>) -> Result<T, E> {
    value.ok_or_else(fail)
}

fn read_reference<'de, A: MapAccess<'de>>(map: A) -> Result<AuthorityReference, A::Error> {
    let mut digest: Option<Sha256Digest> = None;
    let mut generation: Option<u64> = None;
    let mut id: Option<Id> = None;
    members(map, &["digest", "generation", "id"], 0, |index, map| match index {
        0 => set(&mut digest, map),
        1 => set(&mut generation, map),
        _ => set(&mut id, map),
    })?;
    Ok(AuthorityReference { id: present(id)?, generation: present(generation)?, digest: present(digest)? })
}
text_record!(AuthorityReference, read_reference);

fn read_lease_ipv4<'de, A: MapAccess<'de>>(map: A) -> Result<LeaseIpv4, A::Error> {
    let mut address: Option<Ipv4> = None;
    let mut link_subnet: Option<Ipv4Prefix> = None;
    members(map, &["address", "linkSubnet"], 0, |index, map| match index {
        0 => set(&mut address, map),
        _ => set(&mut link_subnet, map),
    })?;
    let lease = LeaseIpv4::for_link_subnet(present(link_subnet)?).ok_or_else(fail)?;
    if Some(lease.address()) == address { Ok(lease) } else { Err(fail()) }
}
text_record!(LeaseIpv4, read_lease_ipv4);

fn read_lease<'de, A: MapAccess<'de>>(map: A) -> Result<RuntimeNetworkLease, A::Error> {
    const KEYS: &[&str] = &[
        "assignmentId",
        "clusterId",
        "digest",
        "generation",
        "id",
        "ipv4",
        "nodeId",
        "organizationId",
        "previous",
        "serviceId",
    ];
    let mut assignment_id: Option<Id> = None;
    let mut cluster_id: Option<Id> = None;
    let mut id: Option<Id> = None;
    let mut organization_id: Option<Id> = None;
    let mut service_id: Option<Id> = None;
    let mut digest: Option<Sha256Digest> = None;
    let mut generation: Option<u64> = None;
    let mut node_id: Option<NodeId> = None;
    let mut ipv4: Option<LeaseIpv4> = None;
    let mut previous: Option<Option<AuthorityReference>> = None;
    members(map, KEYS, 0, |index, map| match index {
        0 => set(&mut assignment_id, map),
        1 => set(&mut cluster_id, map),
        2 => set(&mut digest, map),
        3 => set(&mut generation, map),
        4 => set(&mut id, map),
        5 => set(&mut ipv4, map),
        6 => set(&mut node_id, map),
        7 => set(&mut organization_id, map),
        8 => set_nullable(&mut previous, map),
        _ => set(&mut service_id, map),
    })?;
    Ok(RuntimeNetworkLease {
        id: present(id)?,
        generation: present(generation)?,
        previous: present(previous)?,
        organization_id: present(organization_id)?,
        cluster_id: present(cluster_id)?,
        service_id: present(service_id)?,
        node_id: present(node_id)?,
        assignment_id: present(assignment_id)?,
        ipv4: present(ipv4)?,
        digest: present(digest)?,
    })
}
text_record!(RuntimeNetworkLease, read_lease);

fn read_endpoint<'de, A: MapAccess<'de>>(map: A) -> Result<ProjectionEndpoint, A::Error> {
    let mut lease: Option<RuntimeNetworkLease> = None;
    members(map, &["lease"], 0, |_, map| set(&mut lease, map))?;
    Ok(ProjectionEndpoint { lease: present(lease)? })
}
text_record!(ProjectionEndpoint, read_endpoint);

fn read_platform_endpoint<'de, A: MapAccess<'de>>(map: A) -> Result<PlatformEndpoint, A::Error> {
    let mut address: Option<Ipv4> = None;
    let mut id: Option<Id> = None;
    let mut port: Option<u16> = None;
    let mut protocol: Option<Protocol> = None;
    members(map, &["address", "id", "port", "protocol"], 0, |index, map| match index {
        0 => set(&mut address, map),
        1 => set(&mut id, map),
        2 => set(&mut port, map),
        _ => set(&mut protocol, map),
    })?;
    Ok(PlatformEndpoint {
        id: present(id)?,
        address: present(address)?,
        protocol: present(protocol)?,
        port: present(port)?,
    })
}
text_record!(PlatformEndpoint, read_platform_endpoint);

fn read_authority<'de, A: MapAccess<'de>>(map: A) -> Result<ProtectedAuthorityReference, A::Error> {
    let mut digest: Option<Sha256Digest> = None;
    let mut generation: Option<u64> = None;
    let mut id: Option<Id> = None;
    let mut platform_endpoints: Option<Vec<PlatformEndpoint>> = None;
    members(map, &["digest", "generation", "id", "platformEndpoints"], 0, |index, map| match index {
        0 => set(&mut digest, map),
        1 => set(&mut generation, map),
        2 => set(&mut id, map),
        _ => set(&mut platform_endpoints, map),
    })?;
    Ok(ProtectedAuthorityReference {
        id: present(id)?,
        generation: present(generation)?,
        digest: present(digest)?,
        platform_endpoints: present(platform_endpoints)?,
    })
}
text_record!(ProtectedAuthorityReference, read_authority);

fn read_controller<'de, A: MapAccess<'de>>(map: A) -> Result<ProjectionController, A::Error> {
    let mut id: Option<Id> = None;
    let mut kind: Option<ControllerKind> = None;
    members(map, &["id", "kind"], 0, |index, map| match index {
        0 => set(&mut id, map),
        _ => set(&mut kind, map),
    })?;
    Ok(ProjectionController { kind: present(kind)?, id: present(id)? })
}
text_record!(ProjectionController, read_controller);

fn read_grant<'de, A: MapAccess<'de>>(map: A) -> Result<WorkloadIngressGrant, A::Error> {
    let mut authorization: Option<AuthorityReference> = None;
    let mut destination: Option<AuthorityReference> = None;
    let mut source: Option<AuthorityReference> = None;
    let mut port: Option<u16> = None;
    let mut protocol: Option<Protocol> = None;
    members(map, &["authorization", "destination", "port", "protocol", "source"], 0, |index, map| match index {
        0 => set(&mut authorization, map),
        1 => set(&mut destination, map),
        2 => set(&mut port, map),
        3 => set(&mut protocol, map),
        _ => set(&mut source, map),
    })?;
    Ok(WorkloadIngressGrant {
        source: present(source)?,
        destination: present(destination)?,
        protocol: present(protocol)?,
        port: present(port)?,
        authorization: present(authorization)?,
    })
}
text_record!(WorkloadIngressGrant, read_grant);

fn read_destination<'de, A: MapAccess<'de>>(map: A) -> Result<PacketGrantDestination, A::Error> {
    let mut lease: Option<AuthorityReference> = None;
    let mut port: Option<u16> = None;
    let mut protocol: Option<Protocol> = None;
    members(map, &["lease", "port", "protocol"], 0, |index, map| match index {
        0 => set(&mut lease, map),
        1 => set(&mut port, map),
        _ => set(&mut protocol, map),
    })?;
    Ok(PacketGrantDestination { lease: present(lease)?, protocol: present(protocol)?, port: present(port)? })
}
text_record!(PacketGrantDestination, read_destination);

fn read_packet_grant<'de, A: MapAccess<'de>>(map: A) -> Result<PacketGrant, A::Error> {
    let mut destination: Option<PacketGrantDestination> = None;
    let mut source: Option<AuthorityReference> = None;
    members(map, &["destination", "source"], 0, |index, map| match index {
        0 => set(&mut destination, map),
        _ => set(&mut source, map),
    })?;
    Ok(PacketGrant { source: present(source)?, destination: present(destination)? })
}
text_record!(PacketGrant, read_packet_grant);

fn read_workload_ingress<'de, A: MapAccess<'de>>(map: A) -> Result<WorkloadIngressProjection, A::Error> {
    let mut grants: Option<Vec<WorkloadIngressGrant>> = None;
    let mut withdrawals: Option<Vec<PacketGrant>> = None;
    members(map, &["grants", "withdrawals"], 0, |index, map| match index {
        0 => set(&mut grants, map),
        _ => set(&mut withdrawals, map),
    })?;
    Ok(WorkloadIngressProjection { grants: present(grants)?, withdrawals: present(withdrawals)? })
}
text_record!(WorkloadIngressProjection, read_workload_ingress);

fn read_projection<'de, A: MapAccess<'de>>(map: A) -> Result<RuntimeNetworkProjection, A::Error> {
    const KEYS: &[&str] = &[
        "clusterId",
        "controller",
        "digest",
        "endpoints",
        "generation",
        "hostPlatformEndpointIds",
        "id",
        "nodeId",
        "previous",
        "protectedAuthority",
        "retiredLeases",
        "runtimeNamespace",
        "workloadIngress",
    ];
    const OPTIONAL: u32 = 1 << 5 | 1 << 12;
    let mut cluster_id: Option<Id> = None;
    let mut id: Option<Id> = None;
    let mut runtime_namespace: Option<Id> = None;
    let mut controller: Option<ProjectionController> = None;
    let mut digest: Option<Sha256Digest> = None;
    let mut generation: Option<u64> = None;
    let mut node_id: Option<NodeId> = None;
    let mut endpoints: Option<Vec<ProjectionEndpoint>> = None;
    let mut retired_leases: Option<Vec<AuthorityReference>> = None;
    let mut previous: Option<Option<AuthorityReference>> = None;
    let mut protected_authority: Option<ProtectedAuthorityReference> = None;
    let mut workload_ingress: Option<WorkloadIngressProjection> = None;
    let mut host_platform_endpoint_ids: Option<Vec<Id>> = None;
    members(map, KEYS, OPTIONAL, |index, map| match index {
        0 => set(&mut cluster_id, map),
        1 => set(&mut controller, map),
        2 => set(&mut digest, map),
        3 => set(&mut endpoints, map),
        4 => set(&mut generation, map),
        5 => set(&mut host_platform_endpoint_ids, map),
        6 => set(&mut id, map),
        7 => set(&mut node_id, map),
        8 => set_nullable(&mut previous, map),
        9 => set(&mut protected_authority, map),
        10 => set(&mut retired_leases, map),
        11 => set(&mut runtime_namespace, map),
        _ => set(&mut workload_ingress, map),
    })?;
    Ok(RuntimeNetworkProjection {
        id: present(id)?,
        generation: present(generation)?,
        previous: present(previous)?,
        controller: present(controller)?,
        cluster_id: present(cluster_id)?,
        node_id: present(node_id)?,
        runtime_namespace: present(runtime_namespace)?,
        protected_authority: present(protected_authority)?,
        endpoints: present(endpoints)?,
        retired_leases: present(retired_leases)?,
        workload_ingress,
        host_platform_endpoint_ids,
        digest: present(digest)?,
    })
}
text_record!(RuntimeNetworkProjection, read_projection);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::json::parse_record_text;
    use crate::contract::network::projection::{
        snapshot_runtime_network_projection, validate_runtime_network_projection,
    };

    /// The Value path: `parse_record_text`, then the snapshot / validation.
    fn by_value(text: &str, validate: bool) -> Result<RuntimeNetworkProjection, Rejected> {
        let value = parse_record_text(text).map_err(|_| Rejected::of(KIND))?;
        if validate { validate_runtime_network_projection(&value) } else { snapshot_runtime_network_projection(&value) }
    }

    const VALID: &str = include_str!("../../../tests/vectors/signatures.json");

    fn signed_payload_text() -> String {
        let vector: serde_json::Value = serde_json::from_str(VALID).unwrap();
        serde_json::to_string(&vector["valid"][0]["signed"]["payload"]).unwrap()
    }

    #[test]
    fn text_and_value_paths_agree_on_raw_text_rules() {
        let text = signed_payload_text();
        assert!(validate_runtime_network_projection_text(&text).is_ok());
        assert_eq!(validate_runtime_network_projection_text(&text), by_value(&text, true));
        let with_spaces =
            serde_json::to_string_pretty(&serde_json::from_str::<serde_json::Value>(&text).unwrap()).unwrap();
        assert_eq!(validate_runtime_network_projection_text(&with_spaces), by_value(&text, true));
        let breakers = [
            text.replacen("\"generation\":1", "\"generation\":1.0", 1),
            text.replacen("\"generation\":1", "\"generation\":1e0", 1),
            text.replacen("\"generation\":1", "\"generation\":-0", 1),
            text.replacen("\"generation\":1", "\"generation\":-1", 1),
            text.replacen("\"generation\":1", "\"generation\":9007199254740992", 1),
            text.replacen("\"generation\":1", "\"generation\":\"1\"", 1),
            text.replacen("\"generation\":1", "\"generation\":1,\"generation\":1", 1),
            text.replacen("\"port\":9000", "\"port\":9000,\"port\":9000", 1),
            text.replacen("\"port\":9000", "\"port\":0", 1),
            text.replacen("\"port\":9000", "\"port\":65536", 1),
            text.replacen("\"port\":9000", "\"port\":9000,\"extra\":1", 1),
            text.replacen("\"previous\":null", "\"previous\":{}", 1),
            text.replacen("\"clusterId\":\"cluster-a\"", "\"clusterId\":null", 1),
            text.replacen("{\"address\":\"10.64.0.13\"", "{\"address\":\"10.64.0.14\"", 1),
            text.replacen("\"nodeId\":\"node-1\",", "", 1),
            text.replacen("\"lease\":{", "\"lease\":{\"lease\":1,", 1),
            text.replacen(
                "\"hostPlatformEndpointIds\":[\"corestore\",\"relay-listener\"]",
                "\"hostPlatformEndpointIds\":[]",
                1,
            ),
            format!("{text} 1"),
            format!("[{text}]"),
            text[..text.len() - 1].to_owned(),
        ];
        for breaker in &breakers {
            assert_ne!(breaker, &text);
            assert_eq!(snapshot_runtime_network_projection_text(breaker), Err(Rejected::of(KIND)), "{breaker:.200}");
            assert_eq!(by_value(breaker, false), Err(Rejected::of(KIND)), "{breaker:.200}");
        }
        // Escapes decode as they do into a Value.
        let escaped =
            text.replacen("\"clusterId\"", "\"cluster\\u0049d\"", 1).replacen("\"ctl-1\"", "\"ctl\\u002d1\"", 1);
        assert_ne!(escaped, text);
        assert_eq!(validate_runtime_network_projection_text(&escaped), by_value(&escaped, true));
        assert!(validate_runtime_network_projection_text(&escaped).is_ok());
    }
}
