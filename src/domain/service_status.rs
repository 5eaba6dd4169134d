//! Service runtime status (`06-storage-claims.md`, "IServiceRuntimeStatus"): the controller's
//! verdict on the current spec revision of every service, and the methods
//! `getServiceRuntimeStatus` and `listServiceRuntimeStatuses`.
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
//! replica beside other services' leases: `domain::network::judge_lease_refusal`), the four
//! volume refusals, then `conflict` (a declared volume whose claim is `uncertain` on its node,
//! unreadable, or being purged), `storage-import-pending` (an `import` volume its node has not
//! answered `ready` for; `domain::storage_claims`) and `bindings-pending` (the designated
//! ingress of a cluster without `relayOrigin`). A spec that passes is `converged` when every
//! assignment it calls for is running (its head carries what the spec calls for, is in its node's
//! set, and its latest state is `ready` under the node's current session), else `converging`.
//!
//! **`changedAt` is the time the verdict changed.** Verdicts are recomputed after every reconcile
//! in a writer's or node's task, state report and session open of the cluster (best effort; not
//! after the background reconcile of a designation), and on every read, and recorded only where
//! they differ (`store::service_status`).

use super::assignments::{desired_assignments, is_ready_under, same_content};
use super::network::{judge_lease_refusal, leases_held_by_other_services};
use super::storage_claims;
use super::{Controller, DomainError, MissingKind};
use crate::contract::assignment::{
    MAXIMUM_ENVIRONMENT_ENTRIES, MAXIMUM_ENVIRONMENT_NAME_BYTES, MAXIMUM_ENVIRONMENT_TOTAL_BYTES,
    MAXIMUM_WORKLOAD_PORTS,
};
use crate::contract::inventory::ServiceRuntimeSpec;
use crate::contract::registration::CLUSTER_INGRESS_ENVIRONMENT_NAMES;
use crate::contract::service_status::{
    ServiceRuntimeRefusal as Refusal, ServiceRuntimeState, ServiceRuntimeStatus, ServiceRuntimeVerdict as Verdict,
    ServiceRuntimeWaitingReason as Waiting,
};
use crate::contract::session::ControllerReference;
use crate::contract::{Id, NodeId};
use crate::store::SharedStore;
use crate::store::service_status::{RecordedStatus, StatusFacts};
use crate::store::sessions::AssignmentFacts;
use std::collections::{BTreeMap, BTreeSet};

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

/// The services of the cluster that declare each volume id, read once from the facts so the
/// shared-volume check is a lookup rather than a pass over every other service.
pub struct VolumeDeclarers<'facts> {
    services_by_volume: BTreeMap<&'facts Id, BTreeSet<&'facts Id>>,
}

impl<'facts> VolumeDeclarers<'facts> {
    /// The declarers of every volume id of the current specs.
    pub fn of(facts: &'facts AssignmentFacts) -> Self {
        Self::of_services(&facts.services)
    }

    /// The declarers of every volume id of `services`.
    fn of_services(services: &'facts [ServiceRuntimeSpec]) -> Self {
        let mut services_by_volume: BTreeMap<&Id, BTreeSet<&Id>> = BTreeMap::new();
        for spec in services {
            for volume in &spec.body.volumes {
                services_by_volume.entry(&volume.id).or_default().insert(&spec.body.service_id);
            }
        }
        Self { services_by_volume }
    }

    /// True when a service other than the spec's declares one of the spec's volume ids.
    fn another_service_declares_a_volume_of(&self, spec: &ServiceRuntimeSpec) -> bool {
        let body = &spec.body;
        body.volumes.iter().any(|volume| {
            self.services_by_volume
                .get(&volume.id)
                .is_some_and(|services| services.iter().any(|service_id| **service_id != body.service_id))
        })
    }
}

/// True when the spec's volumes would be mounted by more than one workload
/// (`volume-shared-unsupported`): it declares a volume and runs more than one replica, or
/// another service of the cluster declares a volume with the same id.
fn volume_shared(spec: &ServiceRuntimeSpec, declarers: &VolumeDeclarers) -> bool {
    !spec.body.volumes.is_empty() && (spec.body.replicas > 1 || declarers.another_service_declares_a_volume_of(spec))
}

/// True when the spec trips `refusal`.
fn refuses(refusal: Refusal, spec: &ServiceRuntimeSpec, facts: &AssignmentFacts, declarers: &VolumeDeclarers) -> bool {
    let body = &spec.body;
    match refusal {
        Refusal::PortProtocolUnsupported => body.ports.iter().any(|port| port.protocol.runnable().is_none()),
        Refusal::PortsTooMany => body.ports.len() > MAXIMUM_WORKLOAD_PORTS,
        Refusal::EnvironmentTooLarge => environment_too_large(spec, facts),
        Refusal::NoEligibleNode => {
            body.placement.node_ids.iter().any(|node_id| !facts.nodes.iter().any(|node| node.node.id == *node_id))
        }
        Refusal::NetworkWorkloadPoolMissing | Refusal::NetworkWorkloadPoolExhausted => {
            let others = leases_held_by_other_services(
                facts.plan.as_ref(),
                &facts.leases,
                &body.organization_id,
                &body.service_id,
            );
            judge_lease_refusal(facts.plan.as_ref(), &body.organization_id, body.replicas, others) == Some(refusal)
        }
        Refusal::VolumeDriverUnsupported => body.volumes.iter().any(|volume| volume.driver != LOCAL_DRIVER),
        Refusal::VolumeOptionsUnsupported => {
            body.volumes.iter().any(|volume| !volume.driver_options.is_empty() || !volume.mount_options.is_empty())
        }
        Refusal::VolumeSharedUnsupported => volume_shared(spec, declarers),
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
        Waiting::Conflict | Waiting::StorageImportPending => storage_claims::storage_waits(reason, spec, facts),
        Waiting::BindingsPending => {
            let relay_origin_missing =
                facts.cluster.as_ref().is_some_and(|cluster| cluster.cluster.relay_origin.is_none());
            is_designated_ingress(spec, facts) && relay_origin_missing
        }
        _ => false,
    }
}

/// The first refusal in table order the spec trips, if any: a refused spec gets neither
/// assignments nor claims. `declarers` is [`VolumeDeclarers::of`] the same facts.
pub fn refusal_of(spec: &ServiceRuntimeSpec, facts: &AssignmentFacts, declarers: &VolumeDeclarers) -> Option<Refusal> {
    REFUSALS.iter().copied().find(|refusal| refuses(*refusal, spec, facts, declarers))
}

/// The verdict that keeps the spec from running (`refused` or `waiting`, the first reason in
/// table order), or `None` when assignments can be issued for it. `declarers` is
/// [`VolumeDeclarers::of`] the same facts.
pub fn blocking_verdict(
    spec: &ServiceRuntimeSpec,
    facts: &AssignmentFacts,
    declarers: &VolumeDeclarers,
) -> Option<Verdict> {
    if let Some(refusal) = refusal_of(spec, facts, declarers) {
        return Some(Verdict::Refused(refusal));
    }
    WAITING.iter().copied().find(|reason| waits(*reason, spec, facts)).map(Verdict::Waiting)
}

/// The verdict on every current spec of the cluster, by service id.
pub fn judge_services(
    facts: &AssignmentFacts,
    status: &StatusFacts,
    controller: &ControllerReference,
) -> BTreeMap<Id, (u64, Verdict)> {
    let desired = desired_assignments(facts, controller);
    let declarers = VolumeDeclarers::of(facts);
    let session_of = |node_id: &NodeId| status.sessions.iter().find(|(node, _)| node == node_id).map(|(_, s)| s);
    let running = |draft: &crate::contract::assignment::RuntimeAssignment| {
        let Some(head) = facts.heads.readable.iter().find(|head| head.signed.payload.id == draft.id) else {
            return false;
        };
        let payload = &head.signed.payload;
        let reported = status
            .head_states
            .iter()
            .find(|state| state.assignment_id == payload.id && state.generation == payload.generation);
        head.active
            && same_content(payload, draft)
            && reported
                .zip(session_of(&payload.node_id))
                .is_some_and(|(reported, session)| is_ready_under(&reported.reported, session))
    };
    facts
        .services
        .iter()
        .map(|spec| {
            let verdict = blocking_verdict(spec, facts, &declarers).unwrap_or_else(|| {
                let mut drafts = desired.values().filter(|draft| draft.service_id == spec.body.service_id).peekable();
                if drafts.peek().is_some() && drafts.all(running) { Verdict::Converged } else { Verdict::Converging }
            });
            (spec.body.service_id.clone(), (spec.revision, verdict))
        })
        .collect()
}

/// `getServiceRuntimeStatus`: `{ identity, clusterId, serviceId }`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GetServiceRuntimeStatusRequest {
    /// The cluster.
    pub cluster_id: Id,
    /// The service.
    pub service_id: Id,
}

/// The stored form of a status.
fn status_of(recorded: &RecordedStatus) -> Result<ServiceRuntimeStatus, DomainError> {
    let verdict = ServiceRuntimeState::parse(&recorded.state)
        .and_then(|state| Verdict::from_parts(state, recorded.reason.as_deref()))
        .ok_or_else(|| {
            tracing::error!(service = %recorded.service_id, "a recorded service status does not read back");
            DomainError::Internal
        })?;
    Ok(ServiceRuntimeStatus {
        id: recorded.service_id.clone(),
        spec_revision: recorded.spec_revision,
        verdict,
        changed_at: recorded.changed_at,
    })
}

/// Judges every service of the cluster now and records the verdicts that changed (at `now_ms`);
/// answers every status of the cluster, sorted by service id. An unknown cluster has none.
pub(super) async fn refresh_statuses(
    store: &SharedStore,
    cluster_id: &Id,
    controller: &ControllerReference,
    now_ms: u64,
) -> Result<Vec<ServiceRuntimeStatus>, DomainError> {
    let facts = store.assignment_facts(cluster_id).await?;
    if facts.cluster.is_none() {
        return Ok(Vec::new());
    }
    let status_facts = store.status_facts(cluster_id).await?;
    let verdicts: Vec<RecordedStatus> = judge_services(&facts, &status_facts, controller)
        .into_iter()
        .map(|(service_id, (spec_revision, verdict))| RecordedStatus {
            service_id,
            spec_revision,
            state: verdict.state().as_str().to_owned(),
            reason: verdict.reason().map(str::to_owned),
            changed_at: now_ms,
        })
        .collect();
    let recorded = store.record_statuses(cluster_id, &verdicts).await?;
    recorded.iter().map(status_of).collect()
}

impl Controller {
    /// [`refresh_statuses`] for this controller, now.
    pub async fn refresh_service_statuses(&self, cluster_id: &Id) -> Result<Vec<ServiceRuntimeStatus>, DomainError> {
        refresh_statuses(&self.store, cluster_id, &self.controller_reference(), self.clock.now_ms()).await
    }

    /// `getServiceRuntimeStatus` (every role) → `{ status }`, judged now.
    pub async fn get_service_runtime_status(
        &self,
        request: GetServiceRuntimeStatusRequest,
    ) -> Result<ServiceRuntimeStatus, DomainError> {
        let GetServiceRuntimeStatusRequest { cluster_id, service_id } = request;
        self.store.get_cluster(&cluster_id).await?.ok_or(DomainError::NotFound(MissingKind::Cluster))?;
        self.refresh_service_statuses(&cluster_id)
            .await?
            .into_iter()
            .find(|status| status.id == service_id)
            .ok_or(DomainError::NotFound(MissingKind::Service))
    }

    /// `listServiceRuntimeStatuses` (every role) → `{ statuses }`, judged now, sorted by service id.
    pub async fn list_service_runtime_statuses(
        &self,
        request: super::ClusterRequest,
    ) -> Result<Vec<ServiceRuntimeStatus>, DomainError> {
        let super::ClusterRequest { cluster_id } = request;
        self.store.get_cluster(&cluster_id).await?.ok_or(DomainError::NotFound(MissingKind::Cluster))?;
        self.refresh_service_statuses(&cluster_id).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::inventory::parse_service_spec_body;
    use serde_json::{Value, json};

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

    /// The services refused `volume-shared-unsupported` among `services`, in order.
    fn shared(services: &[ServiceRuntimeSpec]) -> Vec<&str> {
        let declarers = VolumeDeclarers::of_services(services);
        services
            .iter()
            .filter(|spec| volume_shared(spec, &declarers))
            .map(|spec| spec.body.service_id.as_str())
            .collect()
    }

    #[test]
    fn services_declaring_one_volume_id_are_all_refused_and_others_are_not() {
        let services = [spec("api", &["cache", "data"]), spec("db", &["data"]), spec("logs", &["logs"])];
        assert_eq!(shared(&services), ["api", "db"]);
        let services = [spec("a", &["data"]), spec("b", &["data"]), spec("c", &["data"]), spec("d", &[])];
        assert_eq!(shared(&services), ["a", "b", "c"]);
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
    fn a_spec_outside_the_facts_is_shared_when_a_service_of_the_facts_declares_its_volume() {
        let services = [spec("db", &["data"])];
        let declarers = VolumeDeclarers::of_services(&services);
        assert!(volume_shared(&spec("api", &["data"]), &declarers));
        assert!(!volume_shared(&spec("db", &["data"]), &declarers));
        assert!(!volume_shared(&spec("api", &["other"]), &declarers));
    }
}
