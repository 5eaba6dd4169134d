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
use super::network::{judge_lease_refusal, lease_in_pool};
use super::storage_claims;
use super::{Controller, DomainError, MissingKind};
use crate::contract::assignment::RuntimeAssignment;
use crate::contract::assignment::{
    MAXIMUM_ENVIRONMENT_ENTRIES, MAXIMUM_ENVIRONMENT_NAME_BYTES, MAXIMUM_ENVIRONMENT_TOTAL_BYTES,
    MAXIMUM_WORKLOAD_PORTS,
};
use crate::contract::inventory::ServiceRuntimeSpec;
use crate::contract::reader::compare_bytes;
use crate::contract::registration::CLUSTER_INGRESS_ENVIRONMENT_NAMES;
use crate::contract::service_status::{
    ServiceRuntimeRefusal as Refusal, ServiceRuntimeState, ServiceRuntimeStatus, ServiceRuntimeVerdict as Verdict,
    ServiceRuntimeWaitingReason as Waiting,
};
use crate::contract::session::{ControllerReference, RuntimeSessionReference};
use crate::contract::{Id, NodeId};
use crate::store::service_status::{RecordedStatus, StatusFacts};
use crate::store::sessions::{AssignmentFacts, ReportedState};
use crate::store::{FactScope, SharedStore, StoredNode};
use std::collections::{BTreeMap, BTreeSet, HashMap};

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

/// Lookups over one read of facts, built once per read so that judging a spec is a few map
/// lookups rather than passes over the cluster: the nodes by id, the declarers of each volume id
/// (the store's `volume_declarers`) and the live leases in the workload pools of the facts'
/// organizations, counted in one pass over the live lease set that compares each lease with the
/// few organizations and services of the facts only.
pub struct Lookups<'facts> {
    nodes: BTreeMap<&'facts NodeId, &'facts StoredNode>,
    /// Live leases in each organization's workload pool (the organizations of the facts' specs).
    pool_leases: BTreeMap<&'facts Id, u64>,
    /// Live leases in its organization's workload pool by service (the facts' specs).
    service_pool_leases: HashMap<(&'facts Id, &'facts Id), u64>,
    volume_declarers: &'facts BTreeMap<Id, BTreeSet<Id>>,
}

impl<'facts> Lookups<'facts> {
    /// The lookups over `facts`.
    pub fn of(facts: &'facts AssignmentFacts) -> Self {
        let nodes = facts.nodes.iter().map(|node| (&node.node.id, node)).collect();
        let mut pool_leases: BTreeMap<&Id, u64> = BTreeMap::new();
        let mut service_pool_leases: HashMap<(&Id, &Id), u64> =
            facts.services.iter().map(|spec| ((&spec.body.organization_id, &spec.body.service_id), 0)).collect();
        if let Some(plan) = facts.plan.as_ref() {
            let organizations: Vec<&Id> = facts
                .services
                .iter()
                .map(|spec| &spec.body.organization_id)
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect();
            let every_service = facts.scope == FactScope::Cluster;
            for lease in facts.leases.iter() {
                let Some(organization) =
                    organizations.iter().find(|organization| ***organization == lease.organization_id)
                else {
                    continue;
                };
                if !lease_in_pool(plan, lease) {
                    continue;
                }
                *pool_leases.entry(organization).or_default() += 1;
                // A scope of a few services compares each lease with them; the whole cluster
                // counts every service.
                if every_service || facts.services.iter().any(|spec| spec.body.service_id == lease.service_id) {
                    *service_pool_leases.entry((*organization, &lease.service_id)).or_default() += 1;
                }
            }
        }
        Lookups { nodes, pool_leases, service_pool_leases, volume_declarers: &facts.volume_declarers }
    }

    /// The node with this id, if it exists.
    pub fn node(&self, node_id: &NodeId) -> Option<&'facts StoredNode> {
        self.nodes.get(node_id).copied()
    }

    /// The live leases in the workload pool of `organization_id` held by services other than
    /// `service_id`.
    fn leases_held_by_other_services(&self, organization_id: &Id, service_id: &Id) -> u64 {
        self.pool_leases.get(organization_id).copied().unwrap_or(0)
            - self.service_pool_leases.get(&(organization_id, service_id)).copied().unwrap_or(0)
    }

    /// True when a service other than the spec's declares one of the spec's volume ids.
    fn another_service_declares_a_volume_of(&self, spec: &ServiceRuntimeSpec) -> bool {
        let body = &spec.body;
        body.volumes.iter().any(|volume| {
            self.volume_declarers
                .get(&volume.id)
                .is_some_and(|services| services.iter().any(|service_id| *service_id != body.service_id))
        })
    }
}

/// True when the spec's volumes would be mounted by more than one workload
/// (`volume-shared-unsupported`): it declares a volume and runs more than one replica, or
/// another service of the cluster declares a volume with the same id.
fn volume_shared(spec: &ServiceRuntimeSpec, lookups: &Lookups) -> bool {
    !spec.body.volumes.is_empty() && (spec.body.replicas > 1 || lookups.another_service_declares_a_volume_of(spec))
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

/// The verdict on every current spec of the facts' scope, by service id.
pub fn judge_services(
    facts: &AssignmentFacts,
    status: &StatusFacts,
    controller: &ControllerReference,
) -> BTreeMap<Id, (u64, Verdict)> {
    let lookups = Lookups::of(facts);
    let desired = desired_assignments(facts, &lookups, controller);
    let sessions: BTreeMap<&NodeId, &RuntimeSessionReference> =
        status.sessions.iter().map(|(node, session)| (node, session)).collect();
    let states: BTreeMap<(&Id, u64), &ReportedState> =
        status.head_states.iter().map(|state| ((&state.assignment_id, state.generation), &state.reported)).collect();
    let running = |draft: &RuntimeAssignment| {
        let Some(head) = facts.heads.get(&draft.id) else { return false };
        let payload = &head.signed.payload;
        head.active
            && same_content(payload, draft)
            && states
                .get(&(&payload.id, payload.generation))
                .zip(sessions.get(&payload.node_id))
                .is_some_and(|(reported, session)| is_ready_under(reported, session))
    };
    let mut drafts_of: BTreeMap<&Id, Vec<&RuntimeAssignment>> = BTreeMap::new();
    for draft in desired.values() {
        drafts_of.entry(&draft.service_id).or_default().push(draft);
    }
    facts
        .services
        .iter()
        .map(|spec| {
            let verdict =
                blocking_verdict(spec, facts, &lookups).unwrap_or_else(|| match drafts_of.get(&spec.body.service_id) {
                    Some(drafts) if drafts.iter().all(|draft| running(draft)) => Verdict::Converged,
                    _ => Verdict::Converging,
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

/// The verdicts as the store records them, judged at `now_ms`.
pub(super) fn recorded_verdicts(verdicts: BTreeMap<Id, (u64, Verdict)>, now_ms: u64) -> Vec<RecordedStatus> {
    verdicts
        .into_iter()
        .map(|(service_id, (spec_revision, verdict))| RecordedStatus {
            service_id,
            spec_revision,
            state: verdict.state().as_str().to_owned(),
            reason: verdict.reason().map(str::to_owned),
            changed_at: now_ms,
        })
        .collect()
}

/// The services whose judged verdict is not the recorded one (a service judged without a
/// record, or recorded without a current spec, included), sorted by id.
pub(super) fn status_differences(verdicts: &BTreeMap<Id, (u64, Verdict)>, recorded: &[RecordedStatus]) -> Vec<Id> {
    let recorded: BTreeMap<&Id, &RecordedStatus> = recorded.iter().map(|status| (&status.service_id, status)).collect();
    let mut differing: Vec<Id> = verdicts
        .iter()
        .filter(|(service_id, (revision, verdict))| {
            recorded.get(service_id).is_none_or(|status| {
                status.spec_revision != *revision
                    || status.state != verdict.state().as_str()
                    || status.reason.as_deref() != verdict.reason()
            })
        })
        .map(|(service_id, _)| service_id.clone())
        .collect();
    differing.extend(recorded.keys().filter(|service_id| !verdicts.contains_key(**service_id)).map(|id| (*id).clone()));
    differing.sort_by(|left, right| compare_bytes(left.as_str(), right.as_str()));
    differing
}

/// Judges the services of `scope` now and records the verdicts that changed (at `now_ms`);
/// answers every recorded status of the scope, sorted by service id. An unknown cluster has none.
pub(super) async fn refresh_statuses(
    store: &SharedStore,
    cluster_id: &Id,
    scope: &FactScope,
    controller: &ControllerReference,
    now_ms: u64,
) -> Result<Vec<ServiceRuntimeStatus>, DomainError> {
    let facts = store.assignment_facts(cluster_id, scope).await?;
    if facts.cluster.is_none() {
        return Ok(Vec::new());
    }
    let status_facts = store.status_facts(cluster_id, scope).await?;
    let verdicts = recorded_verdicts(judge_services(&facts, &status_facts, controller), now_ms);
    let recorded = store.record_statuses(cluster_id, scope, &verdicts).await?;
    recorded.iter().map(status_of).collect()
}

impl Controller {
    /// [`refresh_statuses`] of `scope` for this controller, now.
    pub async fn refresh_service_statuses(
        &self,
        cluster_id: &Id,
        scope: &FactScope,
    ) -> Result<Vec<ServiceRuntimeStatus>, DomainError> {
        refresh_statuses(&self.store, cluster_id, scope, &self.controller_reference(), self.clock.now_ms()).await
    }

    /// `getServiceRuntimeStatus` (every role) → `{ status }`, judged now.
    pub async fn get_service_runtime_status(
        &self,
        request: GetServiceRuntimeStatusRequest,
    ) -> Result<ServiceRuntimeStatus, DomainError> {
        let GetServiceRuntimeStatusRequest { cluster_id, service_id } = request;
        self.store.get_cluster(&cluster_id).await?.ok_or(DomainError::NotFound(MissingKind::Cluster))?;
        self.refresh_service_statuses(&cluster_id, &FactScope::Services(BTreeSet::from([service_id.clone()])))
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
        self.refresh_service_statuses(&cluster_id, &FactScope::Cluster).await
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

    /// Facts holding `services` and the declarers of their volume ids, as the store reads them.
    fn facts_of(services: &[ServiceRuntimeSpec]) -> AssignmentFacts {
        let mut volume_declarers: BTreeMap<Id, BTreeSet<Id>> = BTreeMap::new();
        for spec in services {
            for volume in &spec.body.volumes {
                volume_declarers.entry(volume.id.clone()).or_default().insert(spec.body.service_id.clone());
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
        let facts = facts_of(&[spec("db", &["data"])]);
        let lookups = Lookups::of(&facts);
        assert!(volume_shared(&spec("api", &["data"]), &lookups));
        assert!(!volume_shared(&spec("db", &["data"]), &lookups));
        assert!(!volume_shared(&spec("api", &["other"]), &lookups));
    }
}
