//! The verdict on a spec (`06-storage-claims.md`, "IServiceRuntimeStatus").
//!
//! **A spec is judged before anything is issued for it.** [`blocking_verdict`] is the one judge of
//! whether a spec can run; the assignment planner issues nothing for a spec it refuses or keeps
//! waiting (and takes the service's earlier assignments out of their nodes' sets), so a spec
//! the assignment record cannot hold never reaches the store as an assignment.
//!
//! The checks, each producing its reason, in the table order of the spec (the first that fails
//! names the verdict; [`REFUSALS`] and [`WAITING`] list them):
//! `port-protocol-unsupported` (a port whose protocol is neither `tcp` nor `udp`),
//! `ports-too-many` (more than 64 target ports), `environment-too-large` (the assignment's
//! environment, the ingress names included, over its bounds), `no-eligible-node` (a placement node
//! that does not exist), `network-workload-pool-missing` / `-exhausted` (the cluster has an
//! address plan and the organization's workload pool is missing or cannot hold a lease per
//! replica beside other services' leases: [`super::leases::judge_lease_refusal`]), the four
//! volume refusals, then `conflict` (a declared volume whose claim is `uncertain` on its node,
//! unreadable, or being purged), `storage-import-pending` (an `import` volume its node has not
//! answered `ready` for; [`super::claims::storage_waits`]) and `bindings-pending` (the designated
//! ingress of a cluster without `relayOrigin`). A spec that passes is `converged` when every
//! assignment it calls for is running (its head carries what the spec calls for, is in its node's
//! set, and its latest state is `ready` under the node's current session), else `converging`.
//!
//! **A write never changes another service's verdict to `refused`.** The rules that relate two
//! services refuse the later one only: a volume id is held by its first declarer (a revision that
//! keeps a volume keeps its place), and a pool counts each service's own leases as available, so
//! what runs keeps its volumes and leases. When the holder drops the id or a lease is released,
//! the write that did it lets the waiting service run (`tests/operator_safety.rs`). A spec's port
//! protocol may be any lowercase name: `port-protocol-unsupported` is a status, which a spec
//! limited to `tcp`/`udp` could never produce.

use super::claims;
use super::leases::judge_lease_refusal;
use super::lookups::Lookups;
use crate::contract::assignment::{
    MAXIMUM_ENVIRONMENT_ENTRIES, MAXIMUM_ENVIRONMENT_NAME_BYTES, MAXIMUM_ENVIRONMENT_TOTAL_BYTES,
    MAXIMUM_WORKLOAD_PORTS,
};
use crate::contract::inventory::ServiceRuntimeSpec;
use crate::contract::registration::CLUSTER_INGRESS_ENVIRONMENT_NAMES;
use crate::contract::service_status::{
    ServiceRuntimeRefusal as Refusal, ServiceRuntimeVerdict as Verdict, ServiceRuntimeWaitingReason as Waiting,
};
use crate::store::assignments::AssignmentFacts;

/// The refusals this controller produces, in the order [`blocking_verdict`] checks them (the
/// spec's table order).
pub const REFUSALS: &[Refusal] = &[
    Refusal::PortProtocolUnsupported,
    Refusal::PortsTooMany,
    Refusal::EnvironmentTooLarge,
    Refusal::NoEligibleNode,
    Refusal::NetworkWorkloadPoolMissing,
    Refusal::NetworkWorkloadPoolExhausted,
    Refusal::VolumeDriverUnsupported,
    Refusal::VolumeOptionsUnsupported,
    Refusal::VolumeSharedUnsupported,
    Refusal::VolumePlacementUnsupported,
];

/// The waiting reasons this controller produces, in the order [`blocking_verdict`] checks them.
pub const WAITING: &[Waiting] = &[Waiting::Conflict, Waiting::StorageImportPending, Waiting::BindingsPending];

/// The one node-local volume driver (`06-storage-claims.md`).
const LOCAL_DRIVER: &str = "local";

/// True when the spec's volumes would be mounted by more than one workload
/// (`volume-shared-unsupported`): it declares a volume and runs more than one replica, or
/// another service of the cluster holds a volume with the same id (declared it first: **a write
/// never takes a volume from the service that holds it**, so only the later declarer is refused).
fn volume_shared(spec: &ServiceRuntimeSpec, lookups: &Lookups) -> bool {
    !spec.body.volumes.is_empty() && (spec.body.replicas > 1 || lookups.another_service_holds_a_volume_of(spec))
}

/// True when the spec trips `refusal`.
fn refuses(refusal: Refusal, spec: &ServiceRuntimeSpec, facts: &AssignmentFacts, lookups: &Lookups) -> bool {
    let body = &spec.body;
    match refusal {
        Refusal::PortProtocolUnsupported => body.ports.iter().any(|port| port.protocol.runnable().is_none()),
        Refusal::PortsTooMany => body.ports.len() > MAXIMUM_WORKLOAD_PORTS,
        Refusal::EnvironmentTooLarge => environment_too_large(spec, facts),
        Refusal::NoEligibleNode => body.placement.node_ids.iter().any(|node_id| lookups.node(node_id).is_none()),
        Refusal::NetworkWorkloadPoolMissing | Refusal::NetworkWorkloadPoolExhausted => {
            let others = lookups.leases_held_by_other_services(&body.organization_id, &body.service_id);
            judge_lease_refusal(facts.plan.as_ref(), &body.organization_id, body.replicas, others) == Some(refusal)
        }
        Refusal::VolumeDriverUnsupported => body.volumes.iter().any(|volume| volume.driver != LOCAL_DRIVER),
        Refusal::VolumeOptionsUnsupported => {
            body.volumes.iter().any(|volume| !volume.driver_options.is_empty() || !volume.mount_options.is_empty())
        }
        Refusal::VolumeSharedUnsupported => volume_shared(spec, lookups),
        Refusal::VolumePlacementUnsupported => !body.volumes.is_empty() && body.placement.node_ids.len() > 1,
        _ => false,
    }
}

/// True when the service is the cluster's designated ingress.
fn is_designated_ingress(spec: &ServiceRuntimeSpec, facts: &AssignmentFacts) -> bool {
    facts.designation.as_ref().is_some_and(|designation| designation.ingress_service_id == spec.body.service_id)
}

/// True when the environment an assignment of the spec would carry breaks the assignment's
/// bounds: entry count, name length, or the bytes of names and plain values together. The
/// designated ingress also carries the three ingress names (the bearer as a secret binding, the
/// relay origin and the node id as values, counted at the longest placement node id).
fn environment_too_large(spec: &ServiceRuntimeSpec, facts: &AssignmentFacts) -> bool {
    let body = &spec.body;
    let mut entries = body.environment.len();
    let mut bytes: usize = body.environment.iter().map(|entry| entry.name.len() + entry.value.len()).sum();
    if is_designated_ingress(spec, facts) {
        let names = CLUSTER_INGRESS_ENVIRONMENT_NAMES;
        entries += 3;
        bytes += names.bearer.len() + names.relay_origin.len() + names.node_id.len();
        bytes +=
            facts.cluster.as_ref().and_then(|cluster| cluster.cluster.relay_origin.as_ref()).map_or(0, String::len);
        bytes += body.placement.node_ids.iter().map(|node_id| node_id.as_str().len()).max().unwrap_or(0);
    }
    entries > MAXIMUM_ENVIRONMENT_ENTRIES
        || bytes > MAXIMUM_ENVIRONMENT_TOTAL_BYTES
        || body.environment.iter().any(|entry| entry.name.len() > MAXIMUM_ENVIRONMENT_NAME_BYTES)
}

/// True when the spec waits for `reason`.
fn waits(reason: Waiting, spec: &ServiceRuntimeSpec, facts: &AssignmentFacts) -> bool {
    match reason {
        Waiting::Conflict | Waiting::StorageImportPending => claims::storage_waits(reason, spec, facts),
        Waiting::BindingsPending => {
            let relay_origin_missing =
                facts.cluster.as_ref().is_some_and(|cluster| cluster.cluster.relay_origin.is_none());
            is_designated_ingress(spec, facts) && relay_origin_missing
        }
        _ => false,
    }
}

/// The first refusal in table order the spec trips, if any: a refused spec gets neither
/// assignments nor claims. `lookups` is [`Lookups::of`] the same facts.
pub fn refusal_of(spec: &ServiceRuntimeSpec, facts: &AssignmentFacts, lookups: &Lookups) -> Option<Refusal> {
    REFUSALS.iter().copied().find(|refusal| refuses(*refusal, spec, facts, lookups))
}

/// The verdict that keeps the spec from running (`refused` or `waiting`, the first reason in
/// table order), or `None` when assignments can be issued for it. `lookups` is [`Lookups::of`]
/// the same facts.
pub fn blocking_verdict(spec: &ServiceRuntimeSpec, facts: &AssignmentFacts, lookups: &Lookups) -> Option<Verdict> {
    if let Some(refusal) = refusal_of(spec, facts, lookups) {
        return Some(Verdict::Refused(refusal));
    }
    WAITING.iter().copied().find(|reason| waits(*reason, spec, facts)).map(Verdict::Waiting)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::Id;
    use crate::contract::inventory::parse_service_spec_body;
    use crate::store::FactScope;
    use serde_json::{Value, json};
    use std::collections::BTreeMap;

    /// A one-replica spec of `service` on one node declaring `volume_ids` (sorted, unique).
    fn spec(service: &str, volume_ids: &[&str]) -> ServiceRuntimeSpec {
        let volumes: Vec<Value> = volume_ids
            .iter()
            .map(|id| {
                json!({ "id": id, "mountPath": format!("/var/lib/{id}"), "readOnly": false, "driver": "local",
                        "driverOptions": [], "mountOptions": [],
                        "initialization": { "kind": "empty", "ownership": { "uid": 1000, "gid": 1000, "mode": 493 } } })
            })
            .collect();
        let body = parse_service_spec_body(&json!({
            "clusterId": "c1", "serviceId": service, "organizationId": "org",
            "image": "registry.example/app:1", "replicas": 1,
            "placement": { "nodeIds": ["node-1"] },
            "ports": [], "environment": [], "volumes": volumes,
        }))
        .unwrap();
        ServiceRuntimeSpec { body, revision: 1 }
    }

    /// Facts holding `services` and the declarers of their volume ids, as the store reads them.
    fn facts_of(services: &[ServiceRuntimeSpec]) -> AssignmentFacts {
        // Declared in the order of `services`.
        let mut volume_declarers: BTreeMap<Id, Vec<Id>> = BTreeMap::new();
        for spec in services {
            for volume in &spec.body.volumes {
                let declarers = volume_declarers.entry(volume.id.clone()).or_default();
                if !declarers.contains(&spec.body.service_id) {
                    declarers.push(spec.body.service_id.clone());
                }
            }
        }
        AssignmentFacts {
            scope: FactScope::Cluster,
            cluster: None,
            nodes: Vec::new(),
            services: services.to_vec(),
            volume_declarers,
            designation: None,
            heads: Default::default(),
            plan: None,
            leases: Default::default(),
            claims: Default::default(),
        }
    }

    /// The services refused `volume-shared-unsupported` among `services`, in order.
    fn shared(services: &[ServiceRuntimeSpec]) -> Vec<&str> {
        let facts = facts_of(services);
        let lookups = Lookups::of(&facts);
        services.iter().filter(|spec| volume_shared(spec, &lookups)).map(|spec| spec.body.service_id.as_str()).collect()
    }

    #[test]
    fn the_first_declarer_of_a_volume_id_holds_it_and_every_later_one_is_refused() {
        // Declared in the order listed: `api` first holds `data`.
        let services = [spec("api", &["cache", "data"]), spec("db", &["data"]), spec("logs", &["logs"])];
        assert_eq!(shared(&services), ["db"]);
        let services = [spec("c", &["data"]), spec("a", &["data"]), spec("b", &["data"]), spec("d", &[])];
        assert_eq!(shared(&services), ["a", "b"]);
        // Once the holder no longer declares it, the next declarer holds it.
        let services = [spec("c", &["other"]), spec("a", &["data"]), spec("b", &["data"])];
        assert_eq!(shared(&services), ["b"]);
    }

    #[test]
    fn a_volume_id_declared_by_one_service_only_is_not_shared() {
        let mut twice = spec("db", &["data"]);
        twice.body.volumes.push(twice.body.volumes[0].clone());
        assert_eq!(twice.body.volumes.len(), 2);
        assert!(shared(&[twice, spec("web", &["static"])]).is_empty());
        // The same service listed twice is still one service.
        assert!(shared(&[spec("db", &["data"]), spec("db", &["data"])]).is_empty());
    }

    #[test]
    fn a_spec_with_volumes_and_more_than_one_replica_is_shared() {
        let mut replicated = spec("db", &["data"]);
        replicated.body.replicas = 2;
        let mut without_volumes = spec("web", &[]);
        without_volumes.body.replicas = 2;
        assert_eq!(shared(&[replicated, without_volumes]), ["db"]);
    }

    #[test]
    fn a_spec_outside_the_facts_is_shared_when_a_service_of_the_facts_holds_its_volume() {
        let facts = facts_of(&[spec("db", &["data"])]);
        let lookups = Lookups::of(&facts);
        assert!(volume_shared(&spec("api", &["data"]), &lookups));
        assert!(!volume_shared(&spec("db", &["data"]), &lookups));
        assert!(!volume_shared(&spec("api", &["other"]), &lookups));
    }
}
