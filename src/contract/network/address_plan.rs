//! `IRuntimeNetworkAddressPlan`: a cluster's address space, workload pools, managed VPN, hubs and
//! platform endpoints (`05-projection.md`, "Address plan").
//!
//! The plan's validator names every violation (our texts, at most one per top-level field, in the
//! type's field order), and its admission names every violation of a plan write. The snapshot is
//! the validator without violations: a [`RuntimeNetworkAddressPlan`] read from JSON satisfies
//! every rule.

use super::authority::{MAXIMUM_PLATFORM_ENDPOINTS, PlatformEndpoint};
use crate::contract::kind::{DigestedRecord, RecordKind, Rejected, compute_digest, digested_record};
use crate::contract::primitives::{Id, Ipv4, Ipv4Prefix, Sha256Digest};
use crate::contract::reader::{
    Invalid, Parsed, Record, compare_bytes, digest, generation, id, ipv4, ipv4_prefix, list, nullable, port,
};
use serde::ser::SerializeStruct;
use serde::{Serialize, Serializer};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

const KIND: RecordKind = RecordKind::RuntimeNetworkAddressPlan;

/// `runtimeNetworkAddressPlanContract.digestDomain`: `serve.zone/runtime-network-address-plan`.
pub const DIGEST_DOMAIN: &str = "serve.zone/runtime-network-address-plan";

/// `validateRuntimeNetworkAddressPlan`'s answer for a value that is not an object with exactly
/// the plan's keys.
pub const SCHEMA_VIOLATION: &str = "runtime network address plan must use its exact schema";

/// `validateRuntimeNetworkAddressPlan`'s answer for a stated digest that is not the content's.
pub const DIGEST_VIOLATION: &str = "runtime network address plan digest does not match";

const KEYS: [&str; 8] = ["clusterId", "revision", "prefixes", "pools", "vpn", "hubs", "platformEndpoints", "digest"];

/// The members of a plan as `putRuntimeNetworkAddressPlan` takes it: every member but `digest`
/// (the controller computes it).
pub const MEMBERS_WITHOUT_DIGEST: [&str; 7] =
    ["clusterId", "revision", "prefixes", "pools", "vpn", "hubs", "platformEndpoints"];

/// `IRuntimeNetworkAddressPlan['pools'][number]`: one organization's workload pool.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AddressPool {
    /// The pool id.
    pub id: Id,
    /// The organization whose workloads lease from it (at most one pool per organization).
    pub organization_id: Id,
    /// Inside the plan's `prefixes`, overlapping no other pool.
    pub prefix: Ipv4Prefix,
}

impl AddressPool {
    fn read(value: &Value) -> Parsed<Self> {
        let record = Record::exact(value, &["id", "organizationId", "prefix"])?;
        Ok(AddressPool {
            id: record.read("id", id)?,
            organization_id: record.read("organizationId", id)?,
            prefix: record.read("prefix", ipv4_prefix)?,
        })
    }
}

/// `IRuntimeNetworkAddressPlan['vpn']` when set: `{ prefix, hubPrefix }`, `hubPrefix` inside `prefix`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct VpnPlan {
    /// The managed VPN's address space.
    pub prefix: Ipv4Prefix,
    /// The hubs' addresses, inside `prefix`.
    pub hub_prefix: Ipv4Prefix,
}

impl VpnPlan {
    fn read(value: &Value) -> Parsed<Self> {
        let record = Record::exact(value, &["prefix", "hubPrefix"])?;
        Ok(VpnPlan { prefix: record.read("prefix", ipv4_prefix)?, hub_prefix: record.read("hubPrefix", ipv4_prefix)? })
    }

    /// True when `address` lies in either VPN prefix (the seed's "outside both VPN prefixes" rule).
    pub fn contains(&self, address: Ipv4) -> bool {
        self.prefix.contains(address) || self.hub_prefix.contains(address)
    }
}

/// `IRuntimeNetworkAddressPlan['hubs'][number]`: `{ id, address, port }`, the address inside
/// `vpn.hubPrefix`. Each hub becomes one `udp` platform endpoint of the protected authority.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct Hub {
    /// The hub id.
    pub id: Id,
    /// The hub's address, inside `vpn.hubPrefix`.
    pub address: Ipv4,
    /// The hub's UDP port.
    pub port: u16,
}

impl Hub {
    fn read(value: &Value) -> Parsed<Self> {
        let record = Record::exact(value, &["id", "address", "port"])?;
        Ok(Hub { id: record.read("id", id)?, address: record.read("address", ipv4)?, port: record.read("port", port)? })
    }
}

/// `IRuntimeNetworkAddressPlan`, digested under `serve.zone/runtime-network-address-plan`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeNetworkAddressPlan {
    /// The cluster.
    pub cluster_id: Id,
    /// Counts up from 1 with every accepted write.
    pub revision: u64,
    /// The cluster's address space: sorted, non-overlapping.
    pub prefixes: Vec<Ipv4Prefix>,
    /// Workload pools: sorted by id, inside `prefixes`, non-overlapping, one per organization.
    pub pools: Vec<AddressPool>,
    /// The managed VPN, or `None` (`null`).
    pub vpn: Option<VpnPlan>,
    /// Sorted by id; every address inside `vpn.hubPrefix`.
    pub hubs: Vec<Hub>,
    /// Sorted by id; inside `prefixes`, outside every pool and both VPN prefixes.
    pub platform_endpoints: Vec<PlatformEndpoint>,
    /// `computeRuntimeNetworkAddressPlanDigest` of the rest.
    pub digest: Sha256Digest,
}

impl RuntimeNetworkAddressPlan {
    /// `computeRuntimeNetworkAddressPlanDigest` applied by the controller for
    /// `putRuntimeNetworkAddressPlan`: the same plan with its digest computed from its content.
    pub fn with_computed_digest(mut self) -> Self {
        self.digest = self.compute_digest();
        self
    }
}

digested_record!(RuntimeNetworkAddressPlan, KIND, snapshot_runtime_network_address_plan);

/// The members of a plan as far as each could be read, with the violations found.
struct PlanReading {
    cluster_id: Option<Id>,
    revision: Option<u64>,
    prefixes: Option<Vec<Ipv4Prefix>>,
    pools: Option<Vec<AddressPool>>,
    vpn: Option<Option<VpnPlan>>,
    hubs: Option<Vec<Hub>>,
    platform_endpoints: Option<Vec<PlatformEndpoint>>,
    digest: Option<Sha256Digest>,
    violations: Vec<String>,
}

impl PlanReading {
    fn into_plan(self) -> Option<RuntimeNetworkAddressPlan> {
        if !self.violations.is_empty() {
            return None;
        }
        Some(RuntimeNetworkAddressPlan {
            cluster_id: self.cluster_id?,
            revision: self.revision?,
            prefixes: self.prefixes?,
            pools: self.pools?,
            vpn: self.vpn?,
            hubs: self.hubs?,
            platform_endpoints: self.platform_endpoints?,
            digest: self.digest?,
        })
    }
}

/// Keeps a field that was read, or names its violation.
fn field<T>(violations: &mut Vec<String>, parsed: Parsed<T>, violation: &str) -> Option<T> {
    parsed.map_err(|Invalid| violations.push(violation.to_owned())).ok()
}

/// Names the first failing rule of a field (`None` = all hold); answers whether all held.
fn rules(violations: &mut Vec<String>, first_failure: Option<&str>) -> bool {
    if let Some(violation) = first_failure {
        violations.push(violation.to_owned());
    }
    first_failure.is_none()
}

/// The one prefix of a sorted, non-overlapping list that could contain `inner`.
fn inside_sorted(prefixes: &[Ipv4Prefix], inner: Ipv4Prefix) -> bool {
    let after = prefixes.partition_point(|prefix| prefix.network() <= inner.network());
    after > 0 && prefixes[after - 1].contains_prefix(inner)
}

/// True when no two prefixes share an address (`O(n log n)`).
fn disjoint(prefixes: &mut [Ipv4Prefix]) -> bool {
    prefixes.sort_unstable();
    prefixes.windows(2).all(|pair| pair[0].last() < pair[1].network())
}

fn ascending_ids<'a>(mut ids: impl Iterator<Item = &'a Id>) -> bool {
    let Some(mut before) = ids.next() else { return true };
    ids.all(|id| {
        let ascending = compare_bytes(before.as_str(), id.as_str()).is_lt();
        before = id;
        ascending
    })
}

fn read_plan(value: &Value) -> Result<PlanReading, Invalid> {
    let record = Record::exact(value, &KEYS)?;
    let get = |key: &str| record.get(key).expect("exact keys are present");
    let mut violations = Vec::new();
    let violations = &mut violations;

    let cluster_id = field(violations, id(get("clusterId")), "clusterId must be an id");
    let revision = field(violations, generation(get("revision")), "revision must be a generation (an integer ≥ 1)");

    // Cross-field rules only trust a field that was read and holds its own rules.
    let prefixes =
        field(violations, list(get("prefixes"), usize::MAX, ipv4_prefix), "prefixes must be a list of IPv4 prefixes");
    let mut prefixes_valid = false;
    if let Some(prefixes) = &prefixes {
        let sorted = prefixes.windows(2).all(|pair| pair[0] < pair[1]);
        let failure = (!(sorted && prefixes.windows(2).all(|pair| pair[0].last() < pair[1].network())))
            .then_some("prefixes must be sorted and must not overlap");
        prefixes_valid = rules(violations, failure);
    }
    let valid_prefixes = prefixes.as_deref().filter(|_| prefixes_valid);

    let pools = field(
        violations,
        list(get("pools"), usize::MAX, AddressPool::read),
        "pools must be a list of { id, organizationId, prefix }",
    );
    if let Some(pools) = &pools {
        let mut organizations = BTreeSet::new();
        let failure = if !ascending_ids(pools.iter().map(|pool| &pool.id)) {
            Some("pools must be sorted by id")
        } else if valid_prefixes.is_some_and(|prefixes| !pools.iter().all(|pool| inside_sorted(prefixes, pool.prefix)))
        {
            Some("every pool must lie inside prefixes")
        } else if !disjoint(&mut pools.iter().map(|pool| pool.prefix).collect::<Vec<_>>()) {
            Some("pools must not overlap")
        } else if !pools.iter().all(|pool| organizations.insert(&pool.organization_id)) {
            Some("an organization may hold at most one pool")
        } else {
            None
        };
        rules(violations, failure);
    }

    let vpn = field(violations, nullable(get("vpn"), VpnPlan::read), "vpn must be null or { prefix, hubPrefix }");
    let mut vpn_valid = false;
    if let Some(vpn) = vpn {
        let failure = vpn
            .is_some_and(|vpn| !vpn.prefix.contains_prefix(vpn.hub_prefix))
            .then_some("vpn.hubPrefix must lie inside vpn.prefix");
        vpn_valid = rules(violations, failure);
    }
    let valid_vpn = vpn.filter(|_| vpn_valid);

    let hubs =
        field(violations, list(get("hubs"), usize::MAX, Hub::read), "hubs must be a list of { id, address, port }");
    if let Some(hubs) = &hubs {
        let failure = if !ascending_ids(hubs.iter().map(|hub| &hub.id)) {
            Some("hubs must be sorted by id")
        } else if valid_vpn
            .is_some_and(|vpn| !hubs.iter().all(|hub| vpn.is_some_and(|vpn| vpn.hub_prefix.contains(hub.address))))
        {
            Some("every hub address must lie inside vpn.hubPrefix")
        } else {
            None
        };
        rules(violations, failure);
    }

    let platform_endpoints = field(
        violations,
        list(get("platformEndpoints"), usize::MAX, PlatformEndpoint::read),
        "platformEndpoints must be a list of { id, address, protocol, port }",
    );
    if let Some(endpoints) = &platform_endpoints {
        let mut sockets = BTreeSet::new();
        let hub_ids: Option<BTreeSet<&Id>> = hubs.as_ref().map(|hubs| hubs.iter().map(|hub| &hub.id).collect());
        let failure = if !ascending_ids(endpoints.iter().map(|endpoint| &endpoint.id)) {
            Some("platformEndpoints must be sorted by id")
        } else if !endpoints.iter().all(|endpoint| sockets.insert((endpoint.address, endpoint.port, endpoint.protocol)))
        {
            Some("each platform endpoint address:port:protocol must be unique")
        } else if valid_prefixes
            .is_some_and(|prefixes| !endpoints.iter().all(|endpoint| inside_sorted(prefixes, single(endpoint.address))))
        {
            Some("every platform endpoint address must lie inside prefixes")
        } else if pools.as_ref().is_some_and(|pools| {
            endpoints.iter().any(|endpoint| pools.iter().any(|pool| pool.prefix.contains(endpoint.address)))
        }) {
            Some("no platform endpoint address may lie inside a pool")
        } else if valid_vpn.flatten().is_some_and(|vpn| endpoints.iter().any(|endpoint| vpn.contains(endpoint.address)))
        {
            Some("no platform endpoint address may lie inside the VPN prefixes")
        } else if hub_ids
            .as_ref()
            .is_some_and(|hub_ids| endpoints.iter().any(|endpoint| hub_ids.contains(&endpoint.id)))
        {
            Some("platform endpoint ids must differ from hub ids")
        } else if hubs.as_ref().map_or(0, Vec::len) + endpoints.len() > MAXIMUM_PLATFORM_ENDPOINTS {
            Some("hubs and platformEndpoints must hold at most 64 entries together")
        } else {
            None
        };
        rules(violations, failure);
    }

    let digest = field(violations, digest(get("digest")), "digest must be a sha256 digest");
    Ok(PlanReading {
        cluster_id,
        revision,
        prefixes,
        pools,
        vpn,
        hubs,
        platform_endpoints,
        digest,
        violations: std::mem::take(violations),
    })
}

fn single(address: Ipv4) -> Ipv4Prefix {
    Ipv4Prefix::new(address, 32).expect("a /32 has no host bits")
}

/// `snapshotRuntimeNetworkAddressPlan`: a plan that satisfies every rule (the digest is a
/// separate check); rejects with `Runtime network address plan contract rejected.`.
pub fn snapshot_runtime_network_address_plan(value: &Value) -> Result<RuntimeNetworkAddressPlan, Rejected> {
    read_plan(value).ok().and_then(PlanReading::into_plan).ok_or(Rejected::of(KIND))
}

/// `computeRuntimeNetworkAddressPlanDigest`: snapshots, then hashes under the plan domain.
pub fn compute_runtime_network_address_plan_digest(value: &Value) -> Result<Sha256Digest, Rejected> {
    Ok(snapshot_runtime_network_address_plan(value)?.compute_digest())
}

/// The controller's step for `putRuntimeNetworkAddressPlan { plan }` (sent without `digest`): the
/// same value with `digest` set to the digest of its content. It judges nothing; admit the result
/// with [`admit_runtime_network_address_plan_change`].
pub fn seal_runtime_network_address_plan(plan_without_digest: &Value) -> Result<Value, Rejected> {
    let mut sealed = plan_without_digest.clone();
    let members = sealed.as_object_mut().ok_or(Rejected::of(KIND))?;
    let digest = compute_digest(DIGEST_DOMAIN, plan_without_digest).map_err(|_| Rejected::of(KIND))?;
    members.insert("digest".to_owned(), Value::String(digest.as_str().to_owned()));
    Ok(sealed)
}

/// `validateRuntimeNetworkAddressPlan`: every violation, at most one per top-level field in field
/// order, then the digest check (`runtime network address plan digest does not match`) once
/// every field holds. A value without exactly the plan's keys is the one violation
/// [`SCHEMA_VIOLATION`].
pub fn validate_runtime_network_address_plan(value: &Value) -> Vec<String> {
    match read_plan(value) {
        Err(Invalid) => vec![SCHEMA_VIOLATION.to_owned()],
        Ok(reading) if !reading.violations.is_empty() => reading.violations,
        Ok(reading) => match reading.into_plan() {
            Some(plan) if plan.compute_digest() == plan.digest => Vec::new(),
            _ => vec![DIGEST_VIOLATION.to_owned()],
        },
    }
}

/// The answer of `admitRuntimeNetworkAddressPlanChange`: `{ accepted: true }` or
/// `{ accepted: false, violations }`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PlanAdmission {
    /// `{ accepted: true }`.
    Accepted,
    /// `{ accepted: false, violations }`, every violation named.
    Refused(Vec<String>),
}

impl PlanAdmission {
    /// The answer's `accepted` member.
    pub fn is_accepted(&self) -> bool {
        matches!(self, PlanAdmission::Accepted)
    }

    /// The answer's `violations` member (empty when accepted).
    pub fn violations(&self) -> &[String] {
        match self {
            PlanAdmission::Accepted => &[],
            PlanAdmission::Refused(violations) => violations,
        }
    }
}

impl Serialize for PlanAdmission {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            PlanAdmission::Accepted => {
                let mut state = serializer.serialize_struct("PlanAdmission", 1)?;
                state.serialize_field("accepted", &true)?;
                state.end()
            }
            PlanAdmission::Refused(violations) => {
                let mut state = serializer.serialize_struct("PlanAdmission", 2)?;
                state.serialize_field("accepted", &false)?;
                state.serialize_field("violations", violations)?;
                state.end()
            }
        }
    }
}

/// `admitRuntimeNetworkAddressPlanChange(previous | null, next)`: the pure decision for a plan
/// write. `next.revision` must be `previous.revision + 1` (1 without a previous plan); any other
/// revision, or none, rejects with `Runtime network address plan contract rejected.`. Otherwise
/// answers [`PlanAdmission::Accepted`] or every violation: those of
/// [`validate_runtime_network_address_plan`], then a changed `clusterId`, a previous pool that is
/// missing, changes organization or is not contained in its new prefix (pools may be added or
/// grown, never removed or shrunk), a set VPN that is changed or removed, and a previous hub that
/// is missing or moved (its address or port changed). Platform endpoints may change freely.
pub fn admit_runtime_network_address_plan_change(
    previous: Option<&RuntimeNetworkAddressPlan>,
    next: &Value,
) -> Result<PlanAdmission, Rejected> {
    let expected = previous.map_or(1, |previous| previous.revision + 1);
    let revision = next.get("revision").and_then(|revision| generation(revision).ok());
    if revision != Some(expected) {
        return Err(Rejected::of(KIND));
    }
    let mut violations = validate_runtime_network_address_plan(next);
    if let (Some(previous), Ok(reading)) = (previous, read_plan(next)) {
        violations.extend(change_violations(previous, &reading));
    }
    Ok(if violations.is_empty() { PlanAdmission::Accepted } else { PlanAdmission::Refused(violations) })
}

fn change_violations(previous: &RuntimeNetworkAddressPlan, next: &PlanReading) -> Vec<String> {
    let mut violations = Vec::new();
    let mut name = |failed: bool, violation: &str| {
        if failed {
            violations.push(violation.to_owned());
        }
    };
    name(next.cluster_id.as_ref().is_some_and(|id| *id != previous.cluster_id), "clusterId must not change");
    if let Some(pools) = &next.pools {
        let by_id: BTreeMap<&Id, &AddressPool> = pools.iter().map(|pool| (&pool.id, pool)).collect();
        let kept = |check: fn(&AddressPool, &AddressPool) -> bool| {
            previous.pools.iter().all(|old| by_id.get(&old.id).is_none_or(|new| check(old, new)))
        };
        name(
            !previous.pools.iter().all(|old| by_id.contains_key(&old.id)),
            "a pool of the previous revision is missing",
        );
        name(
            !kept(|old, new| old.organization_id == new.organization_id),
            "a pool of the previous revision changed its organization",
        );
        name(
            !kept(|old, new| new.prefix.contains_prefix(old.prefix)),
            "a pool of the previous revision must keep its prefix or grow around it",
        );
    }
    if let (Some(old), Some(new)) = (previous.vpn, next.vpn) {
        name(new != Some(old), "a VPN once set must not change or be removed");
    }
    if let Some(hubs) = &next.hubs {
        let by_id: BTreeMap<&Id, &Hub> = hubs.iter().map(|hub| (&hub.id, hub)).collect();
        name(!previous.hubs.iter().all(|old| by_id.contains_key(&old.id)), "a hub of the previous revision is missing");
        name(
            !previous
                .hubs
                .iter()
                .all(|old| by_id.get(&old.id).is_none_or(|new| new.address == old.address && new.port == old.port)),
            "a hub of the previous revision moved",
        );
    }
    violations
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::network::authority::compose_runtime_network_platform_endpoints;
    use serde_json::json;

    /// The seed's example: `hubPrefix` 192.0.2.0/28, a hub on 192.0.2.1, the relay listener and a
    /// Corestore on 192.0.2.17 with two ports.
    fn seed_example() -> Value {
        seal_runtime_network_address_plan(&json!({
            "clusterId": "cluster-a",
            "revision": 1,
            "prefixes": ["10.64.0.0/16", "192.0.2.16/28"],
            "pools": [
                { "id": "pool-api", "organizationId": "org-api", "prefix": "10.64.0.0/20" },
                { "id": "pool-shop", "organizationId": "org-shop", "prefix": "10.64.16.0/20" }
            ],
            "vpn": { "prefix": "192.0.2.0/28", "hubPrefix": "192.0.2.0/28" },
            "hubs": [{ "id": "hub-a", "address": "192.0.2.1", "port": 51820 }],
            "platformEndpoints": [
                { "id": "corestore", "address": "192.0.2.17", "protocol": "tcp", "port": 9000 },
                { "id": "relay-listener", "address": "192.0.2.17", "protocol": "tcp", "port": 8443 }
            ]
        }))
        .unwrap()
    }

    fn resealed(mut value: Value, edit: impl FnOnce(&mut Value)) -> Value {
        edit(&mut value);
        value.as_object_mut().unwrap().remove("digest");
        seal_runtime_network_address_plan(&value).unwrap()
    }

    #[test]
    fn the_seed_example_is_a_valid_plan() {
        let value = seed_example();
        assert_eq!(validate_runtime_network_address_plan(&value), Vec::<String>::new());
        let plan = snapshot_runtime_network_address_plan(&value).unwrap();
        assert_eq!(plan.to_value(), value);
        assert_eq!(admit_runtime_network_address_plan_change(None, &value), Ok(PlanAdmission::Accepted));
        let endpoints = compose_runtime_network_platform_endpoints(&plan).unwrap();
        let ids: Vec<&str> = endpoints.iter().map(|endpoint| endpoint.id.as_str()).collect();
        assert_eq!(ids, ["corestore", "hub-a", "relay-listener"]);
        assert_eq!(
            serde_json::to_value(&endpoints[1]).unwrap(),
            json!({ "id": "hub-a", "address": "192.0.2.1", "protocol": "udp", "port": 51820 })
        );
    }

    #[test]
    fn every_violation_is_named_once_per_field() {
        assert_eq!(validate_runtime_network_address_plan(&json!({ "clusterId": "a" })), [SCHEMA_VIOLATION]);
        assert_eq!(validate_runtime_network_address_plan(&json!(null)), [SCHEMA_VIOLATION]);
        let broken = resealed(seed_example(), |plan| {
            plan["revision"] = json!(0);
            plan["pools"][1]["prefix"] = json!("10.64.0.0/21"); // overlaps pool-api
            plan["hubs"][0]["address"] = json!("192.0.2.33"); // outside the hub prefix
            plan["platformEndpoints"][1]["port"] = json!(9000); // same socket as corestore
        });
        assert_eq!(
            validate_runtime_network_address_plan(&broken),
            [
                "revision must be a generation (an integer ≥ 1)",
                "pools must not overlap",
                "every hub address must lie inside vpn.hubPrefix",
                "each platform endpoint address:port:protocol must be unique",
            ]
        );
        let inside_vpn = resealed(seed_example(), |plan| plan["platformEndpoints"][0]["address"] = json!("192.0.2.2"));
        assert_eq!(
            validate_runtime_network_address_plan(&inside_vpn),
            ["every platform endpoint address must lie inside prefixes"]
        );
        let in_pool = resealed(seed_example(), |plan| plan["platformEndpoints"][0]["address"] = json!("10.64.0.1"));
        assert_eq!(
            validate_runtime_network_address_plan(&in_pool),
            ["no platform endpoint address may lie inside a pool"]
        );
        let mut tampered = seed_example();
        tampered["revision"] = json!(2);
        assert_eq!(validate_runtime_network_address_plan(&tampered), [DIGEST_VIOLATION]);
        let too_many = resealed(seed_example(), |plan| {
            plan["platformEndpoints"] = (0..64)
                .map(|port| json!({ "id": format!("e{port:02}"), "address": "192.0.2.17", "protocol": "udp", "port": port + 1 }))
                .collect();
        });
        assert_eq!(
            validate_runtime_network_address_plan(&too_many),
            ["hubs and platformEndpoints must hold at most 64 entries together"]
        );
    }

    #[test]
    fn a_change_keeps_pools_the_vpn_and_hubs() {
        let first = snapshot_runtime_network_address_plan(&seed_example()).unwrap();
        let wrong_revision = seed_example();
        assert_eq!(admit_runtime_network_address_plan_change(Some(&first), &wrong_revision), Err(Rejected::of(KIND)));
        assert_eq!(admit_runtime_network_address_plan_change(None, &json!([])), Err(Rejected::of(KIND)));

        let grown = resealed(seed_example(), |plan| {
            plan["revision"] = json!(2);
            plan["pools"][0]["prefix"] = json!("10.64.0.0/19");
            plan["pools"][1]["id"] = json!("pool-tshop");
            plan["pools"][1]["prefix"] = json!("10.64.32.0/20");
            plan["platformEndpoints"].as_array_mut().unwrap().pop();
        });
        let admission = admit_runtime_network_address_plan_change(Some(&first), &grown).unwrap();
        assert_eq!(admission.violations(), ["a pool of the previous revision is missing"]);

        let changed = resealed(seed_example(), |plan| {
            plan["revision"] = json!(2);
            plan["pools"][0]["organizationId"] = json!("org-other");
            plan["pools"][1]["prefix"] = json!("10.64.16.0/21");
            plan["vpn"] = json!(null);
            plan["hubs"] = json!([]);
        });
        let admission = admit_runtime_network_address_plan_change(Some(&first), &changed).unwrap();
        assert_eq!(
            admission.violations(),
            [
                "a pool of the previous revision changed its organization",
                "a pool of the previous revision must keep its prefix or grow around it",
                "a VPN once set must not change or be removed",
                "a hub of the previous revision is missing",
            ]
        );
        assert_eq!(serde_json::to_value(&admission).unwrap()["accepted"], json!(false));

        let moved = resealed(seed_example(), |plan| {
            plan["revision"] = json!(2);
            plan["hubs"][0]["port"] = json!(51821);
            plan["platformEndpoints"][0]["port"] = json!(9001);
        });
        let admission = admit_runtime_network_address_plan_change(Some(&first), &moved).unwrap();
        assert_eq!(admission.violations(), ["a hub of the previous revision moved"]);

        let endpoints_only = resealed(seed_example(), |plan| {
            plan["revision"] = json!(2);
            plan["platformEndpoints"][0]["port"] = json!(9001);
        });
        let admission = admit_runtime_network_address_plan_change(Some(&first), &endpoints_only).unwrap();
        assert_eq!(serde_json::to_value(&admission).unwrap(), json!({ "accepted": true }));
    }
}
