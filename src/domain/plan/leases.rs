//! Address plan writes and the leases that follow the assignments (`05-projection.md`, "Address
//! plan", "Leases"), pure.
//!
//! [`judge_address_plan_write`] judges a plan write against the current plan and the live leases.
//! [`plan_lease_changes`] makes the live leases of a scope's services follow their assignments: a
//! lease is keyed to its assignment (a new assignment generation keeps it, a move to another node
//! is its next generation with the same address), it is released when its assignment leaves its
//! node's set or changes organization, and new leases take the lowest free `/30` of their
//! organization's pool (services in id order), found by binary search over the kept subnets.

use crate::contract::NodeId;
use crate::contract::network::address_plan::{AddressPool, admit_runtime_network_address_plan_change};
use crate::contract::network::authority::compose_runtime_network_protected_authority;
use crate::contract::network::lease::LINK_SUBNET_LENGTH;
use crate::contract::network::{
    LeaseIpv4, RuntimeNetworkAddressPlan, RuntimeNetworkLease, RuntimeNetworkProtectedAuthority,
};
use crate::contract::service_status::ServiceRuntimeRefusal;
use crate::contract::{DigestedRecord as _, Id, Ipv4, Ipv4Prefix, Sha256Digest};
use crate::domain::DomainError;
use crate::store::StoredNetworkPlan;
use crate::store::assignments::AssignmentChange;
use crate::store::assignments::AssignmentFacts;
use crate::store::network::{LeaseChange, LeaseFacts, LeaseHolder, LeaseSet, lease_by_id};
use std::borrow::Borrow;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

/// How many violations naming stranded leases name each lease before counting the rest.
const STRANDED_LEASES_NAMED: usize = 8;

/// The workload pool of `organization_id` in `plan` (at most one per organization).
pub fn pool_of<'a>(plan: &'a RuntimeNetworkAddressPlan, organization_id: &Id) -> Option<&'a AddressPool> {
    plan.pools.iter().find(|pool| pool.organization_id == *organization_id)
}

/// How many `/30` link subnets a pool holds (none when it is narrower than a `/30`).
pub fn link_subnet_capacity(pool: Ipv4Prefix) -> u64 {
    match LINK_SUBNET_LENGTH.checked_sub(pool.length()) {
        Some(spare_bits) => 1u64 << spare_bits,
        None => 0,
    }
}

/// Whether a service of `organization_id` that needs `replicas_needed` leases can have them:
/// `None` when it can (or when the cluster has no address plan: no leases, no refusal), else
/// `network-workload-pool-missing` (the cluster has a plan but the organization has no workload
/// pool) or `network-workload-pool-exhausted` (the pool holds fewer link subnets than
/// `replicas_needed` beside the `leases_held_by_other_services` in it). The service's own current
/// leases count as available, so a refused service does not flap. A service that needs none is
/// never refused. Pure.
pub fn judge_lease_refusal(
    plan: Option<&RuntimeNetworkAddressPlan>,
    organization_id: &Id,
    replicas_needed: u64,
    leases_held_by_other_services: u64,
) -> Option<ServiceRuntimeRefusal> {
    let plan = plan?;
    if replicas_needed == 0 {
        return None;
    }
    let Some(pool) = pool_of(plan, organization_id) else {
        return Some(ServiceRuntimeRefusal::NetworkWorkloadPoolMissing);
    };
    let available = link_subnet_capacity(pool.prefix).saturating_sub(leases_held_by_other_services);
    (replicas_needed > available).then_some(ServiceRuntimeRefusal::NetworkWorkloadPoolExhausted)
}

/// True when the lease lies in the workload pool of its organization in `plan`.
pub fn lease_in_pool(plan: &RuntimeNetworkAddressPlan, lease: &RuntimeNetworkLease) -> bool {
    pool_of(plan, &lease.organization_id).is_some_and(|pool| pool.prefix.contains_prefix(lease.ipv4.link_subnet()))
}

/// The live leases in the workload pool of `organization_id` held by services other than
/// `service_id` (the last argument of [`judge_lease_refusal`]); 0 without a plan or a pool.
pub fn leases_held_by_other_services<Lease: Borrow<RuntimeNetworkLease>>(
    plan: Option<&RuntimeNetworkAddressPlan>,
    leases: &[Lease],
    organization_id: &Id,
    service_id: &Id,
) -> u64 {
    let Some(plan) = plan else { return 0 };
    leases
        .iter()
        .map(Borrow::borrow)
        .filter(|lease| {
            lease.organization_id == *organization_id && lease.service_id != *service_id && lease_in_pool(plan, lease)
        })
        .count() as u64
}

/// The live leases that would lie outside their organization's pool in `plan`.
pub fn stranded_leases<'a>(
    plan: &RuntimeNetworkAddressPlan,
    leases: &'a [Arc<RuntimeNetworkLease>],
) -> Vec<&'a Arc<RuntimeNetworkLease>> {
    leases
        .iter()
        .filter(|lease| {
            pool_of(plan, &lease.organization_id)
                .is_none_or(|pool| !pool.prefix.contains_prefix(lease.ipv4.link_subnet()))
        })
        .collect()
}

/// The protected authority's id: one authority per cluster, named by the cluster's id.
fn authority_id(plan: &RuntimeNetworkAddressPlan) -> Id {
    plan.cluster_id.clone()
}

/// The judgement of a plan write against the current plan and the live leases, read under the
/// cluster's lock: the authority the new plan makes (the current one when its endpoints are
/// unchanged), or `revision-conflict` (the plan's revision is not the current one + 1, or 1) or
/// `address-plan-change-refused` with every violation of `admitRuntimeNetworkAddressPlanChange`
/// and one naming the live leases the plan would strand outside their organization's pool. Pure.
pub fn judge_address_plan_write(
    current: Option<&StoredNetworkPlan>,
    next: &RuntimeNetworkAddressPlan,
    live_leases: &[Arc<RuntimeNetworkLease>],
) -> Result<RuntimeNetworkProtectedAuthority, DomainError> {
    let expected = current.map_or(1, |current| current.plan.revision + 1);
    if next.revision != expected {
        return Err(DomainError::RevisionConflict(current.map(|current| current.plan.revision)));
    }
    let admission = admit_runtime_network_address_plan_change(current.map(|current| &current.plan), &next.to_value())
        .map_err(|rejected| {
        tracing::error!(%rejected, "an address plan of the expected revision was rejected by its admission");
        DomainError::Internal
    })?;
    let mut violations = admission.violations().to_vec();
    let stranded = stranded_leases(next, live_leases);
    if !stranded.is_empty() {
        let mut named: Vec<String> = stranded
            .iter()
            .take(STRANDED_LEASES_NAMED)
            .map(|lease| format!("{} ({})", lease.id, lease.ipv4.link_subnet()))
            .collect();
        if stranded.len() > STRANDED_LEASES_NAMED {
            named.push(format!("and {} more", stranded.len() - STRANDED_LEASES_NAMED));
        }
        violations.push(format!("live leases would lie outside their organization's pool: {}", named.join(", ")));
    }
    if !violations.is_empty() {
        return Err(DomainError::AddressPlanChangeRefused(violations));
    }
    compose_runtime_network_protected_authority(&authority_id(next), current.map(|current| &current.authority), next)
        .map_err(|rejected| {
            tracing::error!(%rejected, "a valid address plan does not compose its protected authority");
            DomainError::Internal
        })
}

/// The link subnets of the kept live leases (their `/30`s' network addresses), sorted and
/// unique, so the lowest free one of a pool is found by binary search.
struct LinkSubnets {
    used: Vec<u32>,
}

impl LinkSubnets {
    fn of<'a>(leases: impl Iterator<Item = &'a RuntimeNetworkLease>) -> Self {
        let mut used: Vec<u32> = leases.map(|lease| lease.ipv4.link_subnet().network().to_u32()).collect();
        used.sort_unstable();
        used.dedup();
        LinkSubnets { used }
    }

    /// The lowest `/30` of `pool` that no kept lease holds; marks it used. Every subnet is on a
    /// `/30` boundary, so the `j`-th used subnet of the pool is the pool's `j`-th `/30` until the
    /// first gap, which a binary search finds.
    fn take_lowest_free(&mut self, pool: Ipv4Prefix) -> Option<LeaseIpv4> {
        let capacity = link_subnet_capacity(pool);
        let start = u64::from(pool.network().to_u32());
        let first = self.used.partition_point(|used| u64::from(*used) < start);
        let count = self.used[first..].partition_point(|used| u64::from(*used) < start + capacity * 4);
        let run = &self.used[first..first + count];
        let (mut low, mut high) = (0, run.len());
        while low < high {
            let middle = (low + high) / 2;
            if u64::from(run[middle]) == start + 4 * middle as u64 {
                low = middle + 1;
            } else {
                high = middle;
            }
        }
        if low as u64 >= capacity {
            return None;
        }
        let network = u32::try_from(start + 4 * low as u64).ok()?;
        self.used.insert(first + low, network);
        Ipv4Prefix::new(Ipv4::from_u32(network), LINK_SUBNET_LENGTH).and_then(LeaseIpv4::for_link_subnet)
    }
}

/// The lease changes that make the live leases of the scope's services follow their assignments
/// (`facts`), in the order they are written: releases, then new generations of moved leases,
/// then new leases (services in id order, each of its assignments in id order, each on the lowest
/// free link subnet of its organization's pool). Leases of services outside the scope are left as
/// they are but counted: their subnets are taken and they fill their pools. A service that
/// [`judge_lease_refusal`] refuses gets no new lease. New lease ids come from `new_lease_id`. Pure
/// but for that.
pub fn plan_lease_changes(facts: &LeaseFacts, mut new_lease_id: impl FnMut() -> Id) -> Vec<LeaseChange> {
    let plan = facts.plan.as_ref();
    let holders: BTreeMap<&Id, &LeaseHolder> =
        facts.holders.iter().map(|holder| (&holder.assignment_id, holder)).collect();
    let mut releases = Vec::new();
    let mut moves = Vec::new();
    // Live leases after the decisions, by organization and by (organization, service).
    // Live leases after the decisions, by organization (few) and, for the scope's services, by
    // (organization, service): a lease outside the scope costs a comparison or two.
    let mut held_by_organization: BTreeMap<&Id, u64> = BTreeMap::new();
    let mut held_by_service: HashMap<(&Id, &Id), u64> = HashMap::new();
    let mut leased = BTreeSet::new();
    let mut kept: Vec<&RuntimeNetworkLease> = Vec::with_capacity(facts.leases.len());
    for lease in facts.leases.iter() {
        let in_scope = facts.scope.covers(&lease.service_id);
        if in_scope {
            let keeper = holders.get(&lease.assignment_id).filter(|holder| {
                holder.organization_id == lease.organization_id
                    && holder.service_id == lease.service_id
                    && plan
                        .and_then(|plan| pool_of(plan, &holder.organization_id))
                        .is_some_and(|pool| pool.prefix.contains_prefix(lease.ipv4.link_subnet()))
            });
            let Some(holder) = keeper else {
                releases.push(LeaseChange::Release { id: lease.id.clone(), generation: lease.generation });
                continue;
            };
            leased.insert(&holder.assignment_id);
            if holder.node_id != lease.node_id {
                let moved = RuntimeNetworkLease {
                    generation: lease.generation + 1,
                    previous: Some(lease.reference()),
                    node_id: holder.node_id.clone(),
                    ..lease.as_ref().clone()
                };
                moves.push(LeaseChange::Issue(Box::new(moved.with_computed_digest())));
            }
            *held_by_service.entry((&lease.organization_id, &lease.service_id)).or_default() += 1;
        }
        *held_by_organization.entry(&lease.organization_id).or_default() += 1;
        kept.push(lease);
    }
    let mut changes = releases;
    changes.append(&mut moves);
    let Some(plan) = plan else { return changes };

    // Each service's assignments (all of them need a lease) and those without one, by
    // (organization, service).
    let mut services: BTreeMap<(&Id, &Id), (u64, Vec<&LeaseHolder>)> = BTreeMap::new();
    for holder in &facts.holders {
        let (needed, lacking) = services.entry((&holder.organization_id, &holder.service_id)).or_default();
        *needed += 1;
        if !leased.contains(&holder.assignment_id) {
            lacking.push(holder);
        }
    }
    let mut subnets: Option<LinkSubnets> = None;
    for ((organization_id, service_id), (needed, lacking)) in services {
        if lacking.is_empty() {
            continue;
        }
        let others = held_by_organization.get(organization_id).copied().unwrap_or(0)
            - held_by_service.get(&(organization_id, service_id)).copied().unwrap_or(0);
        if judge_lease_refusal(Some(plan), organization_id, needed, others).is_some() {
            continue;
        }
        let Some(pool) = pool_of(plan, organization_id) else { continue };
        // Built once, only when a lease is to be allocated.
        let subnets = subnets.get_or_insert_with(|| LinkSubnets::of(kept.iter().copied()));
        for holder in lacking {
            let Some(ipv4) = subnets.take_lowest_free(pool.prefix) else { break };
            let lease = RuntimeNetworkLease {
                id: new_lease_id(),
                generation: 1,
                previous: None,
                organization_id: holder.organization_id.clone(),
                cluster_id: plan.cluster_id.clone(),
                service_id: holder.service_id.clone(),
                node_id: holder.node_id.clone(),
                assignment_id: holder.assignment_id.clone(),
                ipv4,
                digest: Sha256Digest::from_bytes(&[0; 32]),
            };
            *held_by_organization.entry(organization_id).or_default() += 1;
            *held_by_service.entry((organization_id, service_id)).or_default() += 1;
            changes.push(LeaseChange::Issue(Box::new(lease.with_computed_digest())));
        }
    }
    changes
}

/// What [`leases_follow_assignments`](crate::domain::runners::leases_follow_assignments) wrote.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct LeasesFollowed {
    /// How many lease changes.
    pub changes: usize,
    /// How many of them release a lease.
    pub releases: usize,
    /// The nodes a changed lease was on or is on now.
    pub nodes: BTreeSet<NodeId>,
    /// The services of the changed leases.
    pub services: BTreeSet<Id>,
    /// The live lease set after the changes (none when nothing was planned).
    pub after: Option<LeaseSet>,
}

/// The nodes and services `changes` of `leases` (the live set they were planned from) touch.
pub fn followed(leases: &[Arc<RuntimeNetworkLease>], changes: &[LeaseChange]) -> LeasesFollowed {
    let mut followed = LeasesFollowed { changes: changes.len(), ..LeasesFollowed::default() };
    for change in changes {
        let id = match change {
            LeaseChange::Issue(lease) => {
                followed.nodes.insert(lease.node_id.clone());
                followed.services.insert(lease.service_id.clone());
                &lease.id
            }
            LeaseChange::Release { id, .. } => {
                followed.releases += 1;
                id
            }
        };
        if let Some(before) = lease_by_id(leases, id) {
            followed.nodes.insert(before.node_id.clone());
            followed.services.insert(before.service_id.clone());
        }
    }
    followed
}

/// Whether `changes` (planned against `facts`) can move a lease of the scope: a change that
/// issues a new assignment id, moves an assignment to another node, organization or service, or
/// takes one into or out of its node's set — or an active assignment of the scope holds no live
/// lease yet (its pool was full when it entered its set). Changes that only issue new
/// generations in place (another image, another environment) leave every lease as it is. Pure.
pub fn leases_may_change(facts: &AssignmentFacts, changes: &[AssignmentChange]) -> bool {
    let moves = changes.iter().any(|change| match change {
        AssignmentChange::SetActive { .. } => true,
        AssignmentChange::Issue(signed) => {
            let next = &signed.payload;
            facts.heads.get(&next.id).is_none_or(|head| {
                let head_payload = &head.signed.payload;
                !head.active
                    || head_payload.node_id != next.node_id
                    || head_payload.organization_id != next.organization_id
                    || head_payload.service_id != next.service_id
            })
        }
    });
    if moves || facts.plan.is_none() {
        return moves || !facts.leases.is_empty();
    }
    let leased: BTreeSet<&Id> = facts
        .leases
        .iter()
        .filter(|lease| facts.scope.covers(&lease.service_id))
        .map(|lease| &lease.assignment_id)
        .collect();
    facts.heads.readable.iter().any(|head| head.active && !leased.contains(&head.signed.payload.id))
}

/// The services whose leases the assignments of `facts` (read without a lock, for the whole
/// cluster) call for otherwise as they stand: what a full pass would correct. Pure.
pub fn planned_lease_services(facts: &AssignmentFacts) -> BTreeSet<Id> {
    let holders = facts
        .heads
        .readable
        .iter()
        .filter(|head| head.active)
        .map(|head| LeaseHolder {
            assignment_id: head.signed.payload.id.clone(),
            organization_id: head.signed.payload.organization_id.clone(),
            service_id: head.signed.payload.service_id.clone(),
            node_id: head.signed.payload.node_id.clone(),
        })
        .collect();
    let lease_facts =
        LeaseFacts { scope: facts.scope.clone(), plan: facts.plan.clone(), holders, leases: facts.leases.clone() };
    let mut next = 0u64;
    let changes = plan_lease_changes(&lease_facts, || {
        next += 1;
        Id::parse(&format!("lease-planned-{next}")).expect("a planned lease id is an id")
    });
    followed(&facts.leases, &changes).services
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::NodeId;
    use crate::contract::network::address_plan::{
        seal_runtime_network_address_plan, snapshot_runtime_network_address_plan,
    };
    use crate::store::FactScope;
    use crate::store::network::LeaseSet;
    use serde_json::json;

    fn id(text: &str) -> Id {
        Id::parse(text).unwrap()
    }

    /// A plan with `org-a` on `10.64.0.0/29` (two link subnets) and `org-b` on `10.64.1.0/30`.
    fn plan() -> RuntimeNetworkAddressPlan {
        let value = seal_runtime_network_address_plan(&json!({
            "clusterId": "c1", "revision": 1, "prefixes": ["10.64.0.0/16"],
            "pools": [
                { "id": "pool-a", "organizationId": "org-a", "prefix": "10.64.0.0/29" },
                { "id": "pool-b", "organizationId": "org-b", "prefix": "10.64.1.0/30" },
            ],
            "vpn": null, "hubs": [], "platformEndpoints": [],
        }))
        .unwrap();
        snapshot_runtime_network_address_plan(&value).unwrap()
    }

    fn holder(assignment: &str, organization: &str, service: &str, node: &str) -> LeaseHolder {
        LeaseHolder {
            assignment_id: id(assignment),
            organization_id: id(organization),
            service_id: id(service),
            node_id: NodeId::parse(node).unwrap(),
        }
    }

    fn ids() -> impl FnMut() -> Id {
        let mut next = 0;
        move || {
            next += 1;
            id(&format!("lease-{next}"))
        }
    }

    fn set(leases: &[RuntimeNetworkLease]) -> LeaseSet {
        Arc::new(leases.iter().cloned().map(Arc::new).collect())
    }

    /// The facts of the whole cluster under `plan`, with these holders and live leases.
    fn cluster_facts(
        plan: &RuntimeNetworkAddressPlan,
        holders: Vec<LeaseHolder>,
        leases: &[RuntimeNetworkLease],
    ) -> LeaseFacts {
        LeaseFacts { scope: FactScope::Cluster, plan: Some(plan.clone()), holders, leases: set(leases) }
    }

    fn issued(changes: &[LeaseChange]) -> Vec<&RuntimeNetworkLease> {
        changes
            .iter()
            .filter_map(|change| match change {
                LeaseChange::Issue(lease) => Some(lease.as_ref()),
                LeaseChange::Release { .. } => None,
            })
            .collect()
    }

    #[test]
    fn the_refusal_judge_names_a_missing_or_exhausted_pool() {
        let plan = plan();
        let (org_a, org_c) = (id("org-a"), id("org-c"));
        assert_eq!(judge_lease_refusal(None, &org_c, 5, 0), None, "no plan: no leases, no refusal");
        assert_eq!(
            judge_lease_refusal(Some(&plan), &org_c, 1, 0),
            Some(ServiceRuntimeRefusal::NetworkWorkloadPoolMissing)
        );
        assert_eq!(judge_lease_refusal(Some(&plan), &org_c, 0, 0), None, "nothing needed");
        assert_eq!(judge_lease_refusal(Some(&plan), &org_a, 2, 0), None);
        assert_eq!(
            judge_lease_refusal(Some(&plan), &org_a, 3, 0),
            Some(ServiceRuntimeRefusal::NetworkWorkloadPoolExhausted)
        );
        assert_eq!(
            judge_lease_refusal(Some(&plan), &org_a, 2, 1),
            Some(ServiceRuntimeRefusal::NetworkWorkloadPoolExhausted)
        );
        assert_eq!(judge_lease_refusal(Some(&plan), &org_a, 1, 1), None);
        assert_eq!(
            judge_lease_refusal(Some(&plan), &org_a, 1, 9),
            Some(ServiceRuntimeRefusal::NetworkWorkloadPoolExhausted)
        );
        assert_eq!(link_subnet_capacity(Ipv4Prefix::parse("10.0.0.0/8").unwrap()), 1 << 22);
        assert_eq!(link_subnet_capacity(Ipv4Prefix::parse("10.0.0.0/30").unwrap()), 1);
        assert_eq!(link_subnet_capacity(Ipv4Prefix::parse("10.0.0.0/31").unwrap()), 0);
        assert_eq!(link_subnet_capacity(Ipv4Prefix::parse("0.0.0.0/0").unwrap()), 1 << 30);
    }

    #[test]
    fn a_service_holding_its_leases_does_not_flap() {
        let plan = plan();
        let facts = cluster_facts(
            &plan,
            vec![holder("a1", "org-a", "web", "node-1"), holder("a2", "org-a", "web", "node-2")],
            &[],
        );
        let changes = plan_lease_changes(&facts, ids());
        let leases: Vec<RuntimeNetworkLease> = issued(&changes).into_iter().cloned().collect();
        assert_eq!(leases.len(), 2);
        assert_eq!(leases[0].ipv4.link_subnet().to_string(), "10.64.0.0/30");
        assert_eq!(leases[0].ipv4.address().to_string(), "10.64.0.1");
        assert_eq!(leases[1].ipv4.link_subnet().to_string(), "10.64.0.4/30");
        assert!(leases.iter().all(|lease| lease.compute_digest() == lease.digest && lease.generation == 1));
        // The pool is full, held by the service itself: it is not refused, and nothing changes.
        let settled = LeaseFacts { leases: set(&leases), ..facts.clone() };
        assert!(plan_lease_changes(&settled, ids()).is_empty());
        let others = leases_held_by_other_services(Some(&plan), &leases, &id("org-a"), &id("web"));
        assert_eq!(others, 0);
        assert_eq!(judge_lease_refusal(Some(&plan), &id("org-a"), 2, others), None);
        assert_eq!(leases_held_by_other_services(Some(&plan), &leases, &id("org-a"), &id("api")), 2);
    }

    #[test]
    fn leases_move_with_their_assignment_and_are_released_when_it_ends() {
        let plan = plan();
        let first = cluster_facts(
            &plan,
            vec![holder("a1", "org-a", "web", "node-1"), holder("a2", "org-a", "web", "node-2")],
            &[],
        );
        let leases: Vec<RuntimeNetworkLease> =
            issued(&plan_lease_changes(&first, ids())).into_iter().cloned().collect();
        // a1 moves to node-3; a2 ends.
        let moved = cluster_facts(&plan, vec![holder("a1", "org-a", "web", "node-3")], &leases);
        let changes = plan_lease_changes(&moved, ids());
        assert_eq!(changes.len(), 2);
        assert_eq!(changes[0], LeaseChange::Release { id: leases[1].id.clone(), generation: 1 });
        let LeaseChange::Issue(next) = &changes[1] else { panic!("a new generation") };
        assert_eq!((next.id.clone(), next.generation), (leases[0].id.clone(), 2));
        assert_eq!(next.previous, Some(leases[0].reference()));
        assert_eq!(next.ipv4, leases[0].ipv4);
        assert_eq!(next.node_id.as_str(), "node-3");
        assert_eq!(next.compute_digest(), next.digest);
    }

    #[test]
    fn refused_services_get_no_lease_and_others_still_do() {
        let plan = plan();
        let facts = cluster_facts(
            &plan,
            vec![
                holder("a1", "org-a", "api", "node-1"),
                holder("a2", "org-a", "api", "node-1"),
                holder("a3", "org-a", "api", "node-1"),
                holder("b1", "org-b", "shop", "node-1"),
                holder("c1", "org-c", "blog", "node-1"),
            ],
            &[],
        );
        let changes = plan_lease_changes(&facts, ids());
        let leases = issued(&changes);
        // `api` needs three of org-a's two link subnets: exhausted; `blog`'s org-c has no pool.
        assert_eq!(leases.len(), 1);
        assert_eq!(leases[0].service_id.as_str(), "shop");
        assert_eq!(leases[0].ipv4.link_subnet().to_string(), "10.64.1.0/30");
        // Without a plan: nothing at all.
        let no_plan = LeaseFacts { plan: None, ..facts };
        assert!(plan_lease_changes(&no_plan, ids()).is_empty());
    }

    #[test]
    fn two_services_share_a_pool_without_overlap() {
        let plan = plan();
        let facts = cluster_facts(
            &plan,
            vec![holder("a1", "org-a", "api", "node-1"), holder("w1", "org-a", "web", "node-2")],
            &[],
        );
        let changes = plan_lease_changes(&facts, ids());
        let subnets: BTreeSet<String> =
            issued(&changes).iter().map(|lease| lease.ipv4.link_subnet().to_string()).collect();
        assert_eq!(subnets, ["10.64.0.0/30".to_owned(), "10.64.0.4/30".to_owned()].into());
        // A third service of org-a finds the pool exhausted by the other two.
        let mut crowded = facts.clone();
        crowded.leases = set(&issued(&changes).into_iter().cloned().collect::<Vec<_>>());
        crowded.holders.push(holder("x1", "org-a", "extra", "node-1"));
        assert!(plan_lease_changes(&crowded, ids()).is_empty());
    }

    #[test]
    fn a_plan_write_is_a_compare_and_swap_admitted_against_live_leases() {
        let plan = plan();
        let authority = judge_address_plan_write(None, &plan, &[]).unwrap();
        assert_eq!((authority.id.as_str(), authority.generation), ("c1", 1));
        let current = StoredNetworkPlan { plan: plan.clone(), authority: authority.clone() };
        assert_eq!(judge_address_plan_write(Some(&current), &plan, &[]), Err(DomainError::RevisionConflict(Some(1))));
        let mut second = plan.clone();
        second.revision = 2;
        let second = second.with_computed_digest();
        assert_eq!(judge_address_plan_write(None, &second, &[]), Err(DomainError::RevisionConflict(None)));
        assert_eq!(judge_address_plan_write(Some(&current), &second, &[]), Ok(authority));
        // A pool removed under a live lease: the contract's violation and the stranded lease.
        let facts = cluster_facts(&plan, vec![holder("b1", "org-b", "shop", "node-1")], &[]);
        let leases: Vec<RuntimeNetworkLease> =
            issued(&plan_lease_changes(&facts, ids())).into_iter().cloned().collect();
        let mut without_pool = second.clone();
        without_pool.pools.pop();
        let without_pool = without_pool.with_computed_digest();
        let Err(DomainError::AddressPlanChangeRefused(violations)) =
            judge_address_plan_write(Some(&current), &without_pool, &set(&leases))
        else {
            panic!("refused")
        };
        assert_eq!(
            violations,
            [
                "a pool of the previous revision is missing".to_owned(),
                "live leases would lie outside their organization's pool: lease-1 (10.64.1.0/30)".to_owned(),
            ]
        );
    }
}
