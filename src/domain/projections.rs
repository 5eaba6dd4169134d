//! Signed runtime network projections (`05-projection.md`, "Projection", "Admission",
//! "Issuing") and the route table's backends (`04-registration.md`, "Route table").
//!
//! **What a node's projection holds.** For a cluster with an address plan, every node gets one
//! chain of projections (its id is the node's id):
//! - `protectedAuthority`: the cluster's protected authority (reference and platform endpoints);
//! - `workloadIngress.grants`: for every route (its target service, protocol and port), from each
//!   lease of the designated ingress service to each lease of the target service, where at least
//!   one of the two leases is on this node, authorized by the cluster's current designation
//!   reference (no designation, no grant);
//! - `endpoints`: the leases on this node and the other side of each of its grants;
//! - `hostPlatformEndpointIds`: the authority's platform endpoints whose address the node's host
//!   carries (`hostAddresses`);
//! - `retiredLeases` and `workloadIngress.withdrawals`: the endpoint leases and packet grants the
//!   previous generation had and this one has not, plus, until the node reports applying the
//!   previous generation, every retired lease and withdrawal that generation retained.
//!
//! A cluster without a plan has no protected authority, so its nodes get no projection.
//!
//! **Issuing.** [`ProjectionIssuer::issue`] reads the cluster's facts and works out each node's
//! inputs (the list above but the retained parts) and their digest. A node is rebuilt only when
//! that digest differs from the one its head was built from, or when the node applied a head
//! that retains withdrawals or retired leases (they can now be dropped): a change touches only
//! the nodes it affects. The rebuild runs under the cluster's lock: the facts are read again,
//! each affected node's projection is built against its current head, and a new generation is
//! made only when the content differs. Every generation passes `admitRuntimeNetworkProjection`
//! against the head (with the node's reported application) before it is signed and stored; a
//! generation the admission refuses is not issued — it can only be one that would re-grant a
//! withdrawal, bring back a retired lease or exceed 4 096 retained withdrawals before the node
//! applied the head — and the node waits for its own application report, which triggers the
//! issuer again.
//!
//! **Backends.** After the projections are written, the route table's backends are judged from
//! the grants of every node's current projection: a target lease with the route's protocol and
//! port is a backend once a grant to it exists in an issued projection. When the backends change,
//! the table's revision moves and this process's long polls wake.
//!
//! **Triggers.** Every change that can move a projection calls the issuer: assignment reconciles
//! (specs, deletes, nodes and their addresses, plans, designations — each reconciles first, and
//! leases follow assignments), route writes and application reports. Reads answer the stored
//! head; they issue first only for a node without a projection or a cluster whose last issue
//! here failed. The server's sweep ([`Controller::sweep_projections`]) issues every cluster, which
//! repairs an issue that failed or never ran (a process stopped between its write and its issue).
//! Nodes whose projection changed get `pushRuntimeChanged { kinds: ["projection"] }` wherever
//! their socket is; a node that misses it converges on its next `getRuntimeNetworkProjection`.

use super::relays::RouteTableWatch;
use super::sessions::judge_node_session;
use super::signals::notify_nodes_changed;
use super::signing::SigningKeys;
use super::{Clock, Controller, DomainError, run_to_end};
use crate::contract::inventory::NodeSpec;
use crate::contract::network::projection::{ProjectionController, ProjectionEndpoint, ProtectedAuthorityReference};
use crate::contract::network::workload_ingress::{
    MAXIMUM_GRANTS, MAXIMUM_WITHDRAWALS, PacketGrant, WorkloadIngressGrant, WorkloadIngressProjection,
};
use crate::contract::network::{RuntimeNetworkLease, RuntimeNetworkProjection};
use crate::contract::reader::compare_bytes;
use crate::contract::session::{ControllerReference, RuntimeSessionReference};
use crate::contract::signing::{Signed, sign};
use crate::contract::{AuthorityReference, Id, NodeId, Sha256Digest};
use crate::store::network::lease_by_id;
use crate::store::projections::{
    AppliedOutcome, GrantedDestination, IssuedProjection, LockedProjections, ProjectionFacts, ProjectionHead,
    StoredProjection,
};
use crate::store::relays::{IngressRoute, RouteBackend};
use crate::store::{ChangeKind, MissingKind, SharedStore, StoreError};
use sha2::{Digest as _, Sha256};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

/// The `kinds` of `pushRuntimeChanged` that a changed projection sends.
pub const PROJECTION_KIND: &str = "projection";

/// `getRuntimeNetworkProjectionForNode`: `{ identity, clusterId, nodeId }`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeProjectionRequest {
    /// The cluster.
    pub cluster_id: Id,
    /// The node.
    pub node_id: NodeId,
}

/// The answer of `getRuntimeNetworkProjectionForNode`.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeProjection {
    /// The node's current projection, `None` before one was issued.
    pub projection: Option<Signed<RuntimeNetworkProjection>>,
    /// The generation the node last reported applying.
    pub applied: Option<AuthorityReference>,
}

/// What one node's projection is built from, but the parts it retains from its previous
/// generation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeInputs {
    /// The node.
    pub node_id: NodeId,
    /// Its runtime namespace.
    pub runtime_namespace: Id,
    /// The endpoint leases, sorted by id.
    pub endpoints: Vec<RuntimeNetworkLease>,
    /// The grants, in grant order.
    pub grants: Vec<WorkloadIngressGrant>,
    /// The host platform endpoint ids, sorted.
    pub host_platform_endpoint_ids: Vec<Id>,
}

impl NodeInputs {
    /// The digest of the inputs (with the authority and controller they are built under): what
    /// the head records, so the issuer can tell whether a node is affected by a change.
    pub fn digest(&self, authority: &ProtectedAuthorityReference, controller: &ControllerReference) -> String {
        let mut hash = Sha256::new();
        let mut field = |text: &str| {
            hash.update(text.as_bytes());
            hash.update([0]);
        };
        field(controller.kind.as_str());
        field(controller.id.as_str());
        field(self.runtime_namespace.as_str());
        field(authority.digest.as_str());
        for lease in &self.endpoints {
            field(lease.digest.as_str());
        }
        field("grants");
        for grant in &self.grants {
            field(grant.source.digest.as_str());
            field(grant.destination.digest.as_str());
            field(grant.protocol.as_str());
            field(&grant.port.to_string());
            field(grant.authorization.digest.as_str());
        }
        field("host");
        for id in &self.host_platform_endpoint_ids {
            field(id.as_str());
        }
        hex::encode(hash.finalize())
    }
}

/// The inputs of every node of the facts, in node order. Pure.
///
/// One pass over the cluster's live leases finds each read node's leases and the designated
/// ingress service's leases; a second pass, only when a read node carries an ingress lease, finds
/// every route target's leases (that node grants to each). A node's grants are those whose source
/// or destination lease is on it, in grant order, unique.
pub fn node_inputs(facts: &ProjectionFacts) -> Vec<NodeInputs> {
    let Some(stored) = &facts.plan else { return Vec::new() };
    let read: BTreeSet<&NodeId> = facts.nodes.iter().map(|node| &node.id).collect();
    let designation = facts.designation.as_ref();
    let ingress_service = designation.map(|designation| &designation.ingress_service_id);
    let mut leases_on: BTreeMap<&NodeId, Vec<&RuntimeNetworkLease>> = BTreeMap::new();
    let mut ingress: Vec<&RuntimeNetworkLease> = Vec::new();
    for lease in facts.leases.iter() {
        if Some(&lease.service_id) == ingress_service {
            ingress.push(lease);
        }
        if let Some(node) = read.get(&lease.node_id) {
            leases_on.entry(node).or_default().push(lease);
        }
    }
    let mut routes_of: BTreeMap<&Id, Vec<&IngressRoute>> = BTreeMap::new();
    for route in &facts.routes {
        routes_of.entry(&route.service_id).or_default().push(route);
    }
    let mut targets: BTreeMap<&Id, Vec<&RuntimeNetworkLease>> = BTreeMap::new();
    if designation.is_some() && ingress.iter().any(|lease| read.contains(&lease.node_id)) {
        for lease in facts.leases.iter() {
            if routes_of.contains_key(&lease.service_id) {
                targets.entry(&lease.service_id).or_default().push(lease);
            }
        }
    }
    facts
        .nodes
        .iter()
        .map(|node| {
            let own: &[&RuntimeNetworkLease] = leases_on.get(&node.id).map_or(&[], Vec::as_slice);
            let mut grants = Vec::new();
            if let Some(designation) = designation {
                let authorization = designation.reference();
                let grant = |source: &RuntimeNetworkLease, target: &RuntimeNetworkLease, route: &IngressRoute| {
                    WorkloadIngressGrant {
                        source: source.reference(),
                        destination: target.reference(),
                        protocol: route.protocol,
                        port: route.port,
                        authorization: authorization.clone(),
                    }
                };
                for lease in own {
                    // Granted to, from every ingress lease.
                    for route in routes_of.get(&lease.service_id).into_iter().flatten() {
                        for source in ingress.iter().filter(|source| source.id != lease.id) {
                            grants.push(grant(source, lease, route));
                        }
                    }
                    // Granting, to every route target's lease.
                    if lease.service_id == designation.ingress_service_id {
                        for (service, routes) in &routes_of {
                            for target in
                                targets.get(service).into_iter().flatten().filter(|target| target.id != lease.id)
                            {
                                for route in routes {
                                    grants.push(grant(lease, target, route));
                                }
                            }
                        }
                    }
                }
            }
            grants.sort_by(WorkloadIngressGrant::order_cmp);
            grants.dedup_by(|later, earlier| later.order_cmp(earlier).is_eq());
            let lease = |id: &Id| lease_by_id(&facts.leases, id).map(|lease| lease.as_ref().clone());
            NodeInputs::of(node, own.iter().map(|lease| &lease.id), grants, lease, stored)
        })
        .collect()
}

impl NodeInputs {
    /// The inputs of `node` with its `grants`: its endpoints are its `own` leases and the leases
    /// at either end of each grant, found by `lease` and sorted by id.
    fn of<'a>(
        node: &NodeSpec,
        own: impl Iterator<Item = &'a Id>,
        grants: Vec<WorkloadIngressGrant>,
        lease: impl Fn(&Id) -> Option<RuntimeNetworkLease>,
        stored: &crate::store::StoredNetworkPlan,
    ) -> Self {
        let mut endpoint_ids: BTreeSet<&Id> = own.collect();
        for grant in &grants {
            endpoint_ids.insert(&grant.source.id);
            endpoint_ids.insert(&grant.destination.id);
        }
        let mut endpoints: Vec<RuntimeNetworkLease> = endpoint_ids.into_iter().filter_map(lease).collect();
        endpoints.sort_by(|left, right| compare_bytes(left.id.as_str(), right.id.as_str()));
        NodeInputs {
            node_id: node.id.clone(),
            runtime_namespace: node.runtime_namespace.clone(),
            endpoints,
            grants,
            host_platform_endpoint_ids: host_platform_endpoint_ids(node, stored),
        }
    }
}

/// The authority's platform endpoints whose address the node's host carries, sorted by id.
fn host_platform_endpoint_ids(node: &NodeSpec, stored: &crate::store::StoredNetworkPlan) -> Vec<Id> {
    let mut ids: Vec<Id> = stored
        .authority
        .platform_endpoints
        .iter()
        .filter(|endpoint| node.host_addresses.contains(&endpoint.address))
        .map(|endpoint| endpoint.id.clone())
        .collect();
    ids.sort_by(|left, right| compare_bytes(left.as_str(), right.as_str()));
    ids.dedup();
    ids
}

/// Which nodes an issue looks at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IssueScope {
    /// Every node of the cluster (a plan, a designation or a route written; the sweep).
    All,
    /// The nodes a change can have moved: `nodes` (whose leases, host addresses or application
    /// changed) and the nodes of the leases of `services` (whose leases changed); when one of
    /// those services is a route's target or the designated ingress, also the nodes on the other
    /// side of their grants.
    Some {
        /// Nodes whose own inputs changed.
        nodes: BTreeSet<NodeId>,
        /// Services whose leases changed.
        services: BTreeSet<Id>,
    },
}

impl IssueScope {
    /// Nothing to look at.
    pub fn is_empty(&self) -> bool {
        matches!(self, IssueScope::Some { nodes, services } if nodes.is_empty() && services.is_empty())
    }
}

/// The nodes a [`IssueScope::Some`] reaches over the cluster-wide facts (routes, designation,
/// live leases): its nodes, the nodes of its services' leases, the ingress leases' nodes when one
/// of its services is a route's target, and every route target lease's node when one is the
/// ingress. Pure.
pub fn scope_nodes(facts: &ProjectionFacts, nodes: &BTreeSet<NodeId>, services: &BTreeSet<Id>) -> BTreeSet<NodeId> {
    let ingress = facts.designation.as_ref().map(|designation| &designation.ingress_service_id);
    let targets: BTreeSet<&Id> = facts.routes.iter().map(|route| &route.service_id).collect();
    let touches_target = services.iter().any(|service| targets.contains(service));
    let touches_ingress = ingress.is_some_and(|ingress| services.contains(ingress));
    let mut reached = nodes.clone();
    for lease in facts.leases.iter() {
        let service = &lease.service_id;
        if services.contains(service)
            || (touches_target && Some(service) == ingress)
            || (touches_ingress && targets.contains(service))
        {
            reached.insert(lease.node_id.clone());
        }
    }
    reached
}

/// Whether a node must be rebuilt: it has no projection, its inputs moved, or it applied a head
/// that retains withdrawals or retired leases.
fn is_affected(head: Option<&ProjectionHead>, inputs_digest: &str) -> bool {
    match head {
        None => true,
        Some(head) => head.inputs != inputs_digest || (head.retains && head.applied.as_ref() == Some(&head.reference)),
    }
}

/// The inputs of every node the issuer must rebuild: its inputs' digest differs from the one its
/// head was built from, or it applied a head that retains withdrawals or retired leases. Pure.
pub fn affected_nodes(facts: &ProjectionFacts, controller: &ControllerReference) -> Vec<NodeInputs> {
    let Some(stored) = &facts.plan else { return Vec::new() };
    let authority = ProtectedAuthorityReference::of(&stored.authority);
    let heads: BTreeMap<&NodeId, &ProjectionHead> = facts.heads.iter().map(|head| (&head.node_id, head)).collect();
    node_inputs(facts)
        .into_iter()
        .filter(|inputs| is_affected(heads.get(&inputs.node_id).copied(), &inputs.digest(&authority, controller)))
        .collect()
}

/// Why a node's next generation is not issued now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Deferred {
    /// More than 1 024 grants or 4 096 endpoints: the node cannot be given this content.
    TooLarge,
    /// The admission refused it: it must wait for the node to apply the head.
    WaitsForApplication,
}

/// The next generation of one node's projection, or `None` when its content equals the head's.
/// Pure: `previous` is the node's head with its reported application; its projection has passed
/// [`RuntimeNetworkProjection::validate`] (the issuer validates a head it reads from the store, and
/// every generation it issues is admitted), so the admission validates only the new generation.
pub fn next_projection(
    inputs: &NodeInputs,
    authority: &ProtectedAuthorityReference,
    cluster_id: &Id,
    controller: &ControllerReference,
    previous: Option<&StoredProjection>,
) -> Result<Option<RuntimeNetworkProjection>, Deferred> {
    if inputs.grants.len() > MAXIMUM_GRANTS
        || inputs.endpoints.len() > crate::contract::network::projection::MAXIMUM_ENDPOINTS
    {
        return Err(Deferred::TooLarge);
    }
    let head = previous.map(|stored| &stored.signed.payload);
    let applied_head =
        previous.is_some_and(|stored| stored.applied.as_ref() == head.map(|head| head.reference()).as_ref());
    let current_ids: BTreeSet<&str> = inputs.endpoints.iter().map(|lease| lease.id.as_str()).collect();
    let mut retired: Vec<AuthorityReference> = Vec::new();
    let mut withdrawals: Vec<PacketGrant> = Vec::new();
    if let Some(head) = head {
        retired.extend(
            head.endpoints
                .iter()
                .filter(|endpoint| !current_ids.contains(endpoint.lease.id.as_str()))
                .map(|endpoint| endpoint.lease.reference()),
        );
        let granted: BTreeSet<(&str, &str, &str, u16)> = inputs
            .grants
            .iter()
            .map(|grant| {
                (grant.source.digest.as_str(), grant.destination.digest.as_str(), grant.protocol.as_str(), grant.port)
            })
            .collect();
        withdrawals.extend(head.packet_grants().into_iter().filter(|packet| {
            !granted.contains(&(
                packet.source.digest.as_str(),
                packet.destination.lease.digest.as_str(),
                packet.destination.protocol.as_str(),
                packet.destination.port,
            ))
        }));
        if !applied_head {
            retired.extend(head.retired_leases.iter().cloned());
            withdrawals.extend(head.withdrawals().iter().cloned());
        }
    }
    retired.sort_by(AuthorityReference::canonical_cmp);
    retired.dedup();
    withdrawals.sort_by(PacketGrant::canonical_cmp);
    withdrawals.dedup();
    if withdrawals.len() > MAXIMUM_WITHDRAWALS {
        return Err(Deferred::WaitsForApplication);
    }
    let workload_ingress = (!inputs.grants.is_empty() || !withdrawals.is_empty())
        .then(|| WorkloadIngressProjection { grants: inputs.grants.clone(), withdrawals });
    let host_platform_endpoint_ids =
        (!inputs.host_platform_endpoint_ids.is_empty()).then(|| inputs.host_platform_endpoint_ids.clone());
    let endpoints: Vec<ProjectionEndpoint> =
        inputs.endpoints.iter().map(|lease| ProjectionEndpoint { lease: lease.clone() }).collect();
    let controller = ProjectionController { kind: controller.kind, id: controller.id.clone() };
    if let Some(head) = head
        && head.controller == controller
        && head.runtime_namespace == inputs.runtime_namespace
        && head.protected_authority == *authority
        && head.endpoints == endpoints
        && head.retired_leases == retired
        && head.workload_ingress == workload_ingress
        && head.host_platform_endpoint_ids == host_platform_endpoint_ids
    {
        return Ok(None);
    }
    let next = RuntimeNetworkProjection {
        id: Id::parse(inputs.node_id.as_str()).expect("a node id is an id"),
        generation: head.map_or(1, |head| head.generation + 1),
        previous: head.map(RuntimeNetworkProjection::reference),
        controller,
        cluster_id: cluster_id.clone(),
        node_id: inputs.node_id.clone(),
        runtime_namespace: inputs.runtime_namespace.clone(),
        protected_authority: authority.clone(),
        endpoints,
        retired_leases: retired,
        workload_ingress,
        host_platform_endpoint_ids,
        digest: Sha256Digest::from_bytes(&[0; 32]),
    };
    let applied = previous.and_then(|stored| stored.applied.as_ref());
    let (next, _) = next.seal_and_admit(head, applied).map_err(|_| Deferred::WaitsForApplication)?;
    Ok(Some(next))
}

/// The backends of every route: each live lease of the route's target service whose grant (its
/// id, the route's protocol and port) is in `granted`. Sorted. Pure.
pub fn judge_route_backends(facts: &ProjectionFacts, granted: &BTreeSet<GrantedDestination>) -> Vec<RouteBackend> {
    let mut routes_of: BTreeMap<&Id, Vec<&IngressRoute>> = BTreeMap::new();
    for route in &facts.routes {
        routes_of.entry(&route.service_id).or_default().push(route);
    }
    let mut backends: Vec<RouteBackend> = Vec::new();
    for lease in facts.leases.iter() {
        for route in routes_of.get(&lease.service_id).into_iter().flatten() {
            if granted.contains(&(lease.id.clone(), route.protocol, route.port)) {
                backends.push(RouteBackend {
                    hostname: route.hostname.clone(),
                    lease_id: lease.id.clone(),
                    address: lease.ipv4.address(),
                    port: route.port,
                });
            }
        }
    }
    backends.sort();
    backends
}

/// Issues the projections of a cluster's nodes (see the module documentation).
pub struct ProjectionIssuer {
    store: SharedStore,
    clock: Arc<dyn Clock>,
    signing: Arc<SigningKeys>,
    controller: ControllerReference,
    route_tables: Arc<RouteTableWatch>,
    /// The clusters whose last issue in this process failed: a read issues them again before it
    /// answers, and the sweep retries them.
    owed: Mutex<BTreeSet<Id>>,
    /// The generations this process issued or read last, so the next one is built without
    /// reading its node's head back while it still is the head.
    heads: Mutex<HeadCache>,
}

/// The most a [`HeadCache`] holds, in estimated bytes ([`HeadCache::weight`]): 16 maximal
/// projections, or some 60 000 of a few endpoints.
const HEAD_CACHE_CAPACITY: usize = 64 << 20;

/// Signed projections by cluster and node, up to [`HEAD_CACHE_CAPACITY`]. An entry is used only
/// while its reference (generation and digest, which names the content) is the node's head as
/// read under the cluster's lock, so another process's issue makes it unused, never wrong.
#[derive(Default)]
struct HeadCache {
    entries: HashMap<(Id, NodeId), Arc<Signed<RuntimeNetworkProjection>>>,
    held: usize,
}

impl HeadCache {
    /// The projection's size estimated from its canonical bytes per member.
    fn weight(projection: &RuntimeNetworkProjection) -> usize {
        let ingress = projection.workload_ingress.as_ref();
        1024 + projection.endpoints.len() * 520
            + projection.retired_leases.len() * 120
            + ingress.map_or(0, |ingress| ingress.grants.len() * 420 + ingress.withdrawals.len() * 320)
    }

    /// The cached generation of the node when it is `head`.
    fn get(
        &self,
        cluster_id: &Id,
        node_id: &NodeId,
        head: &AuthorityReference,
    ) -> Option<Arc<Signed<RuntimeNetworkProjection>>> {
        self.entries
            .get(&(cluster_id.clone(), node_id.clone()))
            .filter(|signed| signed.payload.reference() == *head)
            .cloned()
    }

    /// Keeps `signed` as the node's generation, making room by dropping other entries.
    fn put(&mut self, cluster_id: &Id, signed: Arc<Signed<RuntimeNetworkProjection>>) {
        let key = (cluster_id.clone(), signed.payload.node_id.clone());
        if let Some(old) = self.entries.remove(&key) {
            self.held -= Self::weight(&old.payload);
        }
        let weight = Self::weight(&signed.payload);
        if weight > HEAD_CACHE_CAPACITY {
            return;
        }
        while self.held + weight > HEAD_CACHE_CAPACITY {
            let Some(victim) = self.entries.keys().next().cloned() else { break };
            if let Some(old) = self.entries.remove(&victim) {
                self.held -= Self::weight(&old.payload);
            }
        }
        self.held += weight;
        self.entries.insert(key, signed);
    }
}

impl ProjectionIssuer {
    /// An issuer signing with the signing key in use as `controller`, waking the route table
    /// long polls of `route_tables`.
    pub fn new(
        store: SharedStore,
        clock: Arc<dyn Clock>,
        signing: Arc<SigningKeys>,
        controller: ControllerReference,
        route_tables: Arc<RouteTableWatch>,
    ) -> Self {
        ProjectionIssuer {
            store,
            clock,
            signing,
            controller,
            route_tables,
            owed: Mutex::default(),
            heads: Mutex::default(),
        }
    }

    /// Issues every affected node's next generation and judges the route backends again; tells
    /// the nodes whose projection changed (`pushRuntimeChanged { kinds: ["projection"] }`,
    /// wherever their sockets are). Answers those nodes. Without a signing key in use nothing is
    /// issued ([`DomainError::SigningKeyUnavailable`]).
    pub async fn issue(&self, cluster_id: &Id, scope: &IssueScope) -> Result<BTreeSet<NodeId>, DomainError> {
        if scope.is_empty() {
            return Ok(BTreeSet::new());
        }
        let (unlocked, nodes) = match scope {
            IssueScope::All => (self.store.projection_facts(cluster_id, None).await?, None),
            IssueScope::Some { nodes, services } => {
                let facts = self.store.projection_facts(cluster_id, Some(nodes)).await?;
                let reached = scope_nodes(&facts, nodes, services);
                if reached == *nodes {
                    (facts, Some(reached))
                } else {
                    (self.store.projection_facts(cluster_id, Some(&reached)).await?, Some(reached))
                }
            }
        };
        let pre = affected_nodes(&unlocked, &self.controller);
        if pre.is_empty() {
            return Ok(BTreeSet::new());
        }
        let key = self.signing.current()?;
        let Some(mut locked) = self.store.lock_projections(cluster_id, nodes.as_ref()).await? else {
            return Ok(BTreeSet::new());
        };
        let facts = locked.facts().clone();
        let Some(stored) = &facts.plan else {
            locked.rollback().await?;
            return Ok(BTreeSet::new());
        };
        let authority = ProtectedAuthorityReference::of(&stored.authority);
        // The common case: nothing moved between the two reads (the leases are one shared set
        // then, compared by pointer), so the nodes found before the lock are the ones to rebuild.
        let affected = if facts == unlocked { pre } else { affected_nodes(&facts, &self.controller) };
        let current = self.current_heads(cluster_id, &facts, &affected, &mut *locked).await?;
        let issued_at = self.clock.now_ms();
        let mut issued = Vec::new();
        for inputs in &affected {
            let previous = current.get(&inputs.node_id);
            match next_projection(inputs, &authority, cluster_id, &self.controller, previous) {
                Ok(Some(next)) => {
                    let granted = next
                        .workload_ingress
                        .iter()
                        .flat_map(|ingress| &ingress.grants)
                        .map(|grant| (grant.destination.id.clone(), grant.protocol, grant.port))
                        .collect();
                    issued.push(IssuedProjection {
                        inputs: inputs.digest(&authority, &self.controller),
                        signed: sign(&key, next),
                        granted,
                        issued_at,
                    });
                }
                Ok(None) => {}
                Err(deferred) => tracing::warn!(
                    cluster = %cluster_id,
                    node = %inputs.node_id,
                    reason = ?deferred,
                    "runtime network projection not issued; it waits for the node's application report or a smaller input"
                ),
            }
        }
        locked.write(&issued).await?;
        // The route backends follow the grants of every node's projection: judged again when
        // every node was looked at or when an issued generation grants other destinations than
        // the head it replaces.
        let granted_moved = issued.iter().any(|issued| {
            let head = facts.heads.iter().find(|head| head.node_id == issued.signed.payload.node_id);
            head.map_or(!issued.granted.is_empty(), |head| head.granted != issued.granted)
        });
        let backends_changed = if nodes.is_none() || granted_moved {
            let granted = locked.granted().await?;
            let backends = judge_route_backends(&facts, &granted);
            locked.replace_backends(&backends).await?
        } else {
            false
        };
        locked.commit().await?;
        let nodes: BTreeSet<NodeId> = issued.iter().map(|issued| issued.signed.payload.node_id.clone()).collect();
        {
            let mut heads = self.lock_heads();
            for issued in issued {
                heads.put(cluster_id, Arc::new(issued.signed));
            }
        }
        if backends_changed {
            self.route_tables.changed(cluster_id);
        }
        if !nodes.is_empty() {
            tracing::info!(cluster = %cluster_id, nodes = nodes.len(), backends_changed, "runtime network projections issued");
        }
        notify_nodes_changed(&self.store, cluster_id, nodes.clone(), &[ChangeKind::Projection]).await;
        Ok(nodes)
    }

    /// The current generation of each affected node that has one, with its reported
    /// application: from the cache when it holds the head the facts name, else read under the
    /// lock (and cached).
    async fn current_heads(
        &self,
        cluster_id: &Id,
        facts: &ProjectionFacts,
        affected: &[NodeInputs],
        locked: &mut dyn LockedProjections,
    ) -> Result<BTreeMap<NodeId, StoredProjection>, DomainError> {
        let heads: BTreeMap<&NodeId, &ProjectionHead> = facts.heads.iter().map(|head| (&head.node_id, head)).collect();
        let mut current = BTreeMap::new();
        let mut unread = Vec::new();
        {
            let cache = self.lock_heads();
            for inputs in affected {
                let Some(head) = heads.get(&inputs.node_id) else { continue };
                match cache.get(cluster_id, &inputs.node_id, &head.reference) {
                    Some(signed) => {
                        let stored = StoredProjection { signed: (*signed).clone(), applied: head.applied.clone() };
                        current.insert(inputs.node_id.clone(), stored);
                    }
                    None => unread.push(inputs.node_id.clone()),
                }
            }
        }
        let read = locked.current(&unread).await?;
        for stored in &read {
            if stored.signed.payload.validate().is_err() {
                return Err(StoreError::Corrupt("a stored projection head does not validate".into()).into());
            }
        }
        let mut cache = self.lock_heads();
        for stored in read {
            cache.put(cluster_id, Arc::new(stored.signed.clone()));
            current.insert(stored.signed.payload.node_id.clone(), stored);
        }
        Ok(current)
    }

    fn lock_heads(&self) -> std::sync::MutexGuard<'_, HeadCache> {
        self.heads.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Issues, best effort: a failure is logged and the cluster is owed an issue (the next read
    /// of one of its projections or the next sweep repairs it). A cluster owed an issue is issued
    /// whole.
    pub async fn issue_logged(&self, cluster_id: &Id, scope: &IssueScope) {
        let scope = if self.is_owed(cluster_id) { &IssueScope::All } else { scope };
        match self.issue(cluster_id, scope).await {
            Ok(nodes) => {
                self.lock_owed().remove(cluster_id);
                let outcome = if nodes.is_empty() { "unchanged" } else { "issued" };
                metrics::counter!("cloudly_projections_issued_total", "outcome" => outcome).increment(1);
            }
            Err(error) => {
                self.lock_owed().insert(cluster_id.clone());
                metrics::counter!("cloudly_projections_issued_total", "outcome" => "failed").increment(1);
                tracing::warn!(cluster = %cluster_id, %error, "runtime network projection issue failed");
            }
        }
    }

    /// The nodes of the cluster an issue of every node would rebuild now (their inputs moved, or
    /// they applied a head that retains something), from facts read without a lock.
    pub async fn affected(&self, cluster_id: &Id) -> Result<BTreeSet<NodeId>, DomainError> {
        let facts = self.store.projection_facts(cluster_id, None).await?;
        Ok(affected_nodes(&facts, &self.controller).into_iter().map(|inputs| inputs.node_id).collect())
    }

    fn lock_owed(&self) -> std::sync::MutexGuard<'_, BTreeSet<Id>> {
        self.owed.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Whether the last issue of the cluster in this process failed.
    fn is_owed(&self, cluster_id: &Id) -> bool {
        self.lock_owed().contains(cluster_id)
    }

    /// The node's current projection, read from its head. The issuer runs first only when the
    /// node has none yet or the cluster is owed an issue; otherwise every change has issued
    /// already, and a read costs the same few statements however large the cluster is.
    async fn current(&self, cluster_id: &Id, node_id: &NodeId) -> Result<Option<StoredProjection>, DomainError> {
        if !self.is_owed(cluster_id) {
            if let Some(stored) = self.store.node_projection(cluster_id, node_id).await? {
                return Ok(Some(stored));
            }
        }
        let nodes = BTreeSet::from([node_id.clone()]);
        self.issue_logged(cluster_id, &IssueScope::Some { nodes, services: BTreeSet::new() }).await;
        Ok(self.store.node_projection(cluster_id, node_id).await?)
    }

    /// Issues every cluster of the store, best effort (the sweep, [`Controller::sweep_projections`]).
    async fn sweep(&self) -> Result<(), DomainError> {
        for cluster in self.store.list_clusters().await? {
            self.issue_logged(&cluster.cluster.id, &IssueScope::All).await;
        }
        Ok(())
    }
}

impl Controller {
    /// After a change that can move projections: issues the affected nodes' projections among
    /// those `scope` reaches, best effort.
    /// The issue runs to its end even when the caller stops waiting ([`run_to_end`]).
    pub async fn projections_changed(&self, cluster_id: &Id, scope: &IssueScope) {
        let (issuer, cluster_id, scope) = (Arc::clone(&self.projections), cluster_id.clone(), scope.clone());
        run_to_end(async move { issuer.issue_logged(&cluster_id, &scope).await }).await;
    }

    /// After a route write: issues every node of the cluster whose inputs moved (a route's grants
    /// reach its target's and the ingress's nodes), best effort, as [`Self::projections_changed`].
    pub async fn routes_changed(&self, cluster_id: &Id) {
        self.projections_changed(cluster_id, &IssueScope::All).await;
    }

    /// Issues every cluster's projections, best effort: repairs an issue that failed, or that a
    /// controller process stopped before running after its write. The server runs it every
    /// `projection_sweep_ms`.
    pub async fn sweep_projections(&self) {
        if let Err(error) = self.projections.sweep().await {
            tracing::warn!(%error, "runtime network projection sweep failed");
        }
    }

    /// `getRuntimeNetworkProjection` (node): `{ session, known }` → the node's current
    /// projection, `None` when `known` is exactly its reference (or none was issued), after the
    /// session check of [`Controller::check_node_session`] (`presented` against the socket's
    /// session). A `known` that is current is answered from the head's reference alone, read
    /// with the node's current session in one statement: the record is neither read nor
    /// re-encoded.
    pub async fn get_runtime_network_projection(
        &self,
        socket_session: Option<&RuntimeSessionReference>,
        presented: RuntimeSessionReference,
        known: Option<&AuthorityReference>,
    ) -> Result<Option<Signed<RuntimeNetworkProjection>>, DomainError> {
        let session = match (socket_session, known) {
            // The poll of a node that holds its current projection: the session check and the
            // head's reference in one read, and no record read.
            (Some(socket_session), Some(known)) if !self.projections.is_owed(&socket_session.cluster_id) => {
                let poll = self.store.projection_poll(&socket_session.cluster_id, &socket_session.node_id).await?;
                let session = judge_node_session(socket_session, presented, poll.session)?;
                if poll.reference.as_ref() == Some(known) {
                    return Ok(None);
                }
                session
            }
            _ => self.check_node_session(socket_session, presented).await?,
        };
        let current = self.projections.current(&session.cluster_id, &session.node_id).await?;
        Ok(current.map(|stored| stored.signed).filter(|signed| known != Some(&signed.payload.reference())))
    }

    /// `reportRuntimeNetworkProjectionApplied` (node): records the node's joined application of
    /// `applied`, a generation issued to it (the current one or the one before); any other
    /// reference is `not-found` (`what: "projection"`). Then issues again, so retained
    /// withdrawals and retired leases are dropped.
    pub async fn report_runtime_network_projection_applied(
        &self,
        session: &RuntimeSessionReference,
        applied: &AuthorityReference,
    ) -> Result<(), DomainError> {
        match self.store.record_projection_applied(&session.cluster_id, &session.node_id, applied).await? {
            AppliedOutcome::Recorded => {
                tracing::info!(cluster = %session.cluster_id, node = %session.node_id, generation = applied.generation, "runtime network projection applied");
                let nodes = BTreeSet::from([session.node_id.clone()]);
                self.projections_changed(&session.cluster_id, &IssueScope::Some { nodes, services: BTreeSet::new() })
                    .await;
                Ok(())
            }
            AppliedOutcome::Unknown => Err(DomainError::NotFound(MissingKind::Projection)),
        }
    }

    /// `getRuntimeNetworkProjectionForNode` (every administrator role): the node's current
    /// projection and its reported application; `not-found` for an unknown cluster or node.
    pub async fn get_runtime_network_projection_for_node(
        &self,
        request: NodeProjectionRequest,
    ) -> Result<NodeProjection, DomainError> {
        let NodeProjectionRequest { cluster_id, node_id } = request;
        self.existing_cluster(&cluster_id).await?;
        self.store.get_node(&cluster_id, &node_id).await?.ok_or(DomainError::NotFound(MissingKind::Node))?;
        let current = self.projections.current(&cluster_id, &node_id).await?;
        Ok(NodeProjection {
            applied: current.as_ref().and_then(|stored| stored.applied.clone()),
            projection: current.map(|stored| stored.signed),
        })
    }
}

#[cfg(test)]
mod oracle {
    use super::*;
    use crate::contract::Protocol;
    use crate::contract::network::address_plan::{
        seal_runtime_network_address_plan, snapshot_runtime_network_address_plan,
    };
    use crate::contract::network::authority::compose_runtime_network_protected_authority;
    use crate::store::StoredNetworkPlan;
    use serde_json::json;
    use std::sync::Arc;

    /// The inputs as the issuer computed them before it worked per node: every grant of the
    /// cluster, then each node's share.
    fn reference_node_inputs(facts: &ProjectionFacts) -> Vec<NodeInputs> {
        let Some(stored) = &facts.plan else { return Vec::new() };
        let grants = cluster_grants(facts);
        let leases: BTreeMap<&str, &RuntimeNetworkLease> =
            facts.leases.iter().map(|lease| (lease.id.as_str(), lease.as_ref())).collect();
        // Each node's leases and grants (in grant order), found in one pass over each.
        let mut leases_on: BTreeMap<&NodeId, Vec<&RuntimeNetworkLease>> = BTreeMap::new();
        for lease in facts.leases.iter() {
            leases_on.entry(&lease.node_id).or_default().push(lease);
        }
        let mut grants_on: BTreeMap<&NodeId, Vec<&WorkloadIngressGrant>> = BTreeMap::new();
        for grant in &grants {
            let node_of =
                |reference: &AuthorityReference| leases.get(reference.id.as_str()).map(|lease| &lease.node_id);
            let (source, destination) = (node_of(&grant.source), node_of(&grant.destination));
            for node in [source, destination.filter(|node| Some(*node) != source)].into_iter().flatten() {
                grants_on.entry(node).or_default().push(grant);
            }
        }
        facts
            .nodes
            .iter()
            .map(|node| {
                let grants: Vec<WorkloadIngressGrant> = grants_on
                    .get(&node.id)
                    .map(|grants| grants.iter().map(|grant| (*grant).clone()).collect())
                    .unwrap_or_default();
                let own = leases_on.get(&node.id).into_iter().flatten().map(|lease| &lease.id);
                let lease = |id: &Id| leases.get(id.as_str()).map(|lease| (*lease).clone());
                NodeInputs::of(node, own, grants, lease, stored)
            })
            .collect()
    }

    /// Every workload ingress grant of the cluster, in grant order, unique: for every route, from
    /// each lease of the designated ingress service to each other lease of the route's target
    /// service, authorized by the current designation.
    fn cluster_grants(facts: &ProjectionFacts) -> Vec<WorkloadIngressGrant> {
        let Some(designation) = &facts.designation else { return Vec::new() };
        let authorization = designation.reference();
        let by_service = leases_of_services(facts, route_services(facts));
        let ingress: &[&RuntimeNetworkLease] =
            by_service.get(&designation.ingress_service_id).map_or(&[], Vec::as_slice);
        let mut grants = Vec::new();
        for route in &facts.routes {
            for target in by_service.get(&route.service_id).into_iter().flatten() {
                for source in ingress.iter().filter(|source| source.id != target.id) {
                    grants.push(WorkloadIngressGrant {
                        source: source.reference(),
                        destination: target.reference(),
                        protocol: route.protocol,
                        port: route.port,
                        authorization: authorization.clone(),
                    });
                }
            }
        }
        grants.sort_by(WorkloadIngressGrant::order_cmp);
        grants.dedup_by(|later, earlier| later.order_cmp(earlier).is_eq());
        grants
    }

    /// The services grants are drawn between: every route's target and the designated ingress.
    fn route_services(facts: &ProjectionFacts) -> BTreeSet<&Id> {
        let mut services: BTreeSet<&Id> = facts.routes.iter().map(|route| &route.service_id).collect();
        services.extend(facts.designation.as_ref().map(|designation| &designation.ingress_service_id));
        services
    }

    /// The live leases of each of `services`, in lease order: one pass over the cluster's leases.
    fn leases_of_services<'a>(
        facts: &'a ProjectionFacts,
        services: BTreeSet<&Id>,
    ) -> BTreeMap<&'a Id, Vec<&'a RuntimeNetworkLease>> {
        let mut by_service: BTreeMap<&Id, Vec<&RuntimeNetworkLease>> = BTreeMap::new();
        for lease in facts.leases.iter() {
            if services.contains(&lease.service_id) {
                by_service.entry(&lease.service_id).or_default().push(lease);
            }
        }
        by_service
    }

    fn plan() -> StoredNetworkPlan {
        let plan = json!({
            "clusterId": "c1", "revision": 1, "prefixes": ["10.64.0.0/16", "192.0.2.16/28"],
            "pools": [{ "id": "pool-org", "organizationId": "org", "prefix": "10.64.0.0/20" }],
            "vpn": null, "hubs": [],
            "platformEndpoints": [{ "id": "corestore", "address": "192.0.2.17", "protocol": "tcp", "port": 9000 }],
        });
        let plan = snapshot_runtime_network_address_plan(&seal_runtime_network_address_plan(&plan).unwrap()).unwrap();
        let authority = compose_runtime_network_protected_authority(&plan.cluster_id, None, &plan).unwrap();
        StoredNetworkPlan { plan, authority }
    }

    fn designation() -> crate::contract::designation::ClusterIngressDesignation {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/vectors/cluster-ingress-designation.json");
        let vectors: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        let mut designation =
            crate::contract::designation::snapshot_cluster_ingress_designation(&vectors["valid"][0]["record"]).unwrap();
        designation.ingress_service_id = Id::parse("ingress").unwrap();
        designation
    }

    /// Six nodes; the ingress on nodes 0 and 3; `web` on 1, 2 and 3, `api` on 2 and 4, `solo` on
    /// 5; routes to `web` (two ports), `api` and the ingress itself.
    fn facts(read: &[usize]) -> ProjectionFacts {
        let placed =
            [("ingress", 0), ("ingress", 3), ("web", 1), ("web", 2), ("web", 3), ("api", 2), ("api", 4), ("solo", 5)];
        let mut leases: Vec<Arc<RuntimeNetworkLease>> = placed
            .iter()
            .enumerate()
            .map(|(index, (service, node))| Arc::new(testing::lease(index as u32, service, &format!("node-{node}"))))
            .collect();
        leases.sort_by(|left, right| compare_bytes(left.id.as_str(), right.id.as_str()));
        let route = |hostname: &str, service: &str, port: u16| IngressRoute {
            hostname: hostname.to_owned(),
            service_id: Id::parse(service).unwrap(),
            protocol: Protocol::Tcp,
            port,
        };
        let nodes = read
            .iter()
            .map(|index| NodeSpec {
                id: NodeId::parse(&format!("node-{index}")).unwrap(),
                runtime_namespace: Id::parse("ns-main").unwrap(),
                host_addresses: Vec::new(),
            })
            .collect();
        ProjectionFacts {
            plan: Some(plan()),
            nodes,
            leases: Arc::new(leases),
            routes: vec![
                route("a.example.net", "web", 443),
                route("b.example.net", "web", 8080),
                route("c.example.net", "api", 443),
                route("d.example.net", "ingress", 443),
            ],
            designation: Some(designation()),
            heads: Vec::new(),
        }
    }

    #[test]
    fn node_inputs_are_those_of_the_whole_cluster_computation() {
        for read in [vec![0, 1, 2, 3, 4, 5], vec![0], vec![1], vec![3, 5], vec![4], vec![]] {
            let facts = facts(&read);
            assert_eq!(node_inputs(&facts), reference_node_inputs(&facts), "nodes read: {read:?}");
        }
        let mut undesignated = facts(&[0, 1, 2]);
        undesignated.designation = None;
        assert_eq!(node_inputs(&undesignated), reference_node_inputs(&undesignated));
        assert!(node_inputs(&facts(&[0]))[0].grants.len() > 4, "the ingress node grants to every target");
    }
}

/// Fixtures of the issuer's tests and benchmarks (`tests/projections.rs`,
/// `benches/projection.rs`): records of cluster `c1` built in code, not read from a store.
#[cfg(any(test, feature = "testing"))]
pub mod testing {
    use crate::contract::network::projection::ProtectedAuthorityReference;
    use crate::contract::network::{LeaseIpv4, RuntimeNetworkLease};
    use crate::contract::session::{ControllerKind, ControllerReference};
    use crate::contract::{Id, Ipv4, Ipv4Prefix, NodeId, Sha256Digest};

    fn id(text: &str) -> Id {
        Id::parse(text).expect("a fixture id")
    }

    /// Controller `cloudly`.
    pub fn controller() -> ControllerReference {
        ControllerReference { kind: ControllerKind::Cloudly, id: id("cloudly") }
    }

    /// A protected authority reference of cluster `c1` (generation 1, a made-up digest, no
    /// platform endpoints).
    pub fn authority() -> ProtectedAuthorityReference {
        ProtectedAuthorityReference {
            id: id("c1"),
            generation: 1,
            digest: Sha256Digest::from_bytes(&[9; 32]),
            platform_endpoints: Vec::new(),
        }
    }

    /// Lease `lease-NNNNN` of cluster `c1` (organization `org`) for `service` on `node`: the
    /// `index`-th /30 from 10.64.0.0, held by `assignment-NNNNN`, generation 1.
    pub fn lease(index: u32, service: &str, node: &str) -> RuntimeNetworkLease {
        let subnet = Ipv4Prefix::new(Ipv4::from_u32(0x0a40_0000 + index * 4), 30).expect("a /30");
        RuntimeNetworkLease {
            id: id(&format!("lease-{index:05}")),
            generation: 1,
            previous: None,
            organization_id: id("org"),
            cluster_id: id("c1"),
            service_id: id(service),
            node_id: NodeId::parse(node).expect("a fixture node id"),
            assignment_id: id(&format!("assignment-{index:05}")),
            ipv4: LeaseIpv4::for_link_subnet(subnet).expect("a /30"),
            digest: Sha256Digest::from_bytes(&[0; 32]),
        }
        .with_computed_digest()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(text: &str) -> Id {
        Id::parse(text).unwrap()
    }

    /// Generation 1 of node `node`'s projection, without endpoints or grants.
    fn projection(node: &str, namespace: &str) -> Arc<Signed<RuntimeNetworkProjection>> {
        let inputs = NodeInputs {
            node_id: NodeId::parse(node).unwrap(),
            runtime_namespace: id(namespace),
            endpoints: Vec::new(),
            grants: Vec::new(),
            host_platform_endpoint_ids: Vec::new(),
        };
        let next =
            next_projection(&inputs, &testing::authority(), &id("c1"), &testing::controller(), None).unwrap().unwrap();
        Arc::new(sign(&ed25519_dalek::SigningKey::from_bytes(&[5; 32]), next))
    }

    #[test]
    fn the_head_cache_answers_only_the_head_it_holds() {
        let mut cache = HeadCache::default();
        let held = projection("node-1", "ns-a");
        cache.put(&id("c1"), held.clone());
        let reference = held.payload.reference();
        assert_eq!(cache.get(&id("c1"), &held.payload.node_id, &reference), Some(held.clone()));
        assert_eq!(cache.get(&id("c2"), &held.payload.node_id, &reference), None, "another cluster");
        // Another process issued a generation with other content: the cached one is not the head.
        let other = projection("node-1", "ns-b").payload.reference();
        assert_ne!(other, reference);
        assert_eq!(cache.get(&id("c1"), &held.payload.node_id, &other), None);
        // A newer generation of the node replaces the entry and its weight.
        cache.put(&id("c1"), projection("node-1", "ns-b"));
        assert_eq!(cache.entries.len(), 1);
        assert_eq!(cache.held, 1024);
    }

    #[test]
    fn the_head_cache_stays_within_its_capacity() {
        let mut cache = HeadCache::default();
        let one = projection("node-1", "ns-a");
        let fits = HEAD_CACHE_CAPACITY / HeadCache::weight(&one.payload);
        for index in 0..fits + 10 {
            cache.put(&id(&format!("c{index}")), one.clone());
        }
        assert_eq!(cache.entries.len(), fits);
        assert_eq!(cache.held, fits * HeadCache::weight(&one.payload));
    }
}
