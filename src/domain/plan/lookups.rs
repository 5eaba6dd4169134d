//! Lookups over one read of facts, built once per read: judging a spec is then a few map lookups
//! rather than passes over the cluster.

use super::leases::lease_in_pool;
use crate::contract::inventory::ServiceRuntimeSpec;
use crate::contract::{Id, NodeId};
use crate::store::assignments::AssignmentFacts;
use crate::store::{FactScope, StoredNode};
use std::collections::{BTreeMap, BTreeSet, HashMap};

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
    volume_declarers: &'facts BTreeMap<Id, Vec<Id>>,
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
    pub fn leases_held_by_other_services(&self, organization_id: &Id, service_id: &Id) -> u64 {
        self.pool_leases.get(organization_id).copied().unwrap_or(0)
            - self.service_pool_leases.get(&(organization_id, service_id)).copied().unwrap_or(0)
    }

    /// True when another service holds one of the spec's volume ids: it declared the id before
    /// the spec's service did (the first declarer of a volume id holds it, so a later declarer
    /// never takes it from a service that runs with it).
    pub fn another_service_holds_a_volume_of(&self, spec: &ServiceRuntimeSpec) -> bool {
        let body = &spec.body;
        body.volumes.iter().any(|volume| {
            self.volume_declarers
                .get(&volume.id)
                .and_then(|services| services.first())
                .is_some_and(|holder| *holder != body.service_id)
        })
    }
}
