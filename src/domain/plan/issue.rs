//! What a reconcile issues: the assignments and claims the specs of a scope call for, as the
//! changes that bring the heads there (new generations linking the heads, set entries and
//! exits), drafted, digested and (by the `plan_*` functions) signed. Claims are planned first: the
//! assignments seal the bound heads of their service's declared volumes.

use super::assignments::{self, assignment_id};
use super::claims::{self, ClaimDecision, held, node_state, resolution, sealed_claims};
use super::lookups::Lookups;
use super::verdicts::{blocking_verdict, refusal_of};
use crate::contract::assignment::{
    EnvironmentEntry, EnvironmentName, EnvironmentSource, RuntimeAssignment, RuntimeWorkload, WorkloadPort,
};
use crate::contract::reader::compare_bytes;
use crate::contract::registration::CLUSTER_INGRESS_ENVIRONMENT_NAMES;
use crate::contract::session::ControllerReference;
use crate::contract::signing::sign;
use crate::contract::storage_claim::{
    LocalStorageClaimNodeState as NodeState, LocalStorageLifecycle, RuntimeLocalStorageClaim,
};
use crate::contract::{DigestedRecord, Id, NodeId, Sha256Digest};
use crate::store::assignments::{AssignmentChange, AssignmentFacts, StoredAssignment};
use crate::store::storage_claims::ClaimChange;
use ed25519_dalek::SigningKey;
use std::collections::{BTreeMap, BTreeSet};

/// The assignments the facts call for, by id, as unsigned generation-1 drafts: none for a spec
/// the status judge refuses or keeps waiting ([`blocking_verdict`]).
pub fn desired_assignments(
    facts: &AssignmentFacts,
    lookups: &Lookups,
    controller: &ControllerReference,
) -> BTreeMap<Id, RuntimeAssignment> {
    let mut desired = BTreeMap::new();
    let Some(cluster) = &facts.cluster else { return desired };
    let names = CLUSTER_INGRESS_ENVIRONMENT_NAMES;
    for spec in &facts.services {
        if blocking_verdict(spec, facts, lookups).is_some() {
            continue;
        }
        let body = &spec.body;
        let designation =
            facts.designation.as_ref().filter(|designation| designation.ingress_service_id == body.service_id);
        let node_count = body.placement.node_ids.len() as u64;
        let ports: Vec<WorkloadPort> = body
            .ports
            .iter()
            .filter_map(|port| Some(WorkloadPort { protocol: port.protocol.runnable()?, port: port.port }))
            .collect();
        for index in 0..body.replicas {
            let node_id = &body.placement.node_ids[(index % node_count) as usize];
            let Some(node) = lookups.node(node_id) else { continue };
            let mut environment: Vec<EnvironmentEntry> = body
                .environment
                .iter()
                .filter_map(|entry| {
                    Some(EnvironmentEntry {
                        name: EnvironmentName::parse(&entry.name)?,
                        source: EnvironmentSource::Value(entry.value.clone()),
                    })
                })
                .collect();
            if let Some(designation) = designation {
                let entry = |name: &str, source| EnvironmentEntry {
                    name: EnvironmentName::parse(name).expect("the ingress names are environment names"),
                    source,
                };
                environment
                    .retain(|entry| ![names.bearer, names.relay_origin, names.node_id].contains(&entry.name.as_str()));
                environment.push(entry(
                    names.bearer,
                    EnvironmentSource::Secret(designation.credential.secret_version.clone()),
                ));
                environment.push(entry(
                    names.relay_origin,
                    EnvironmentSource::Value(cluster.cluster.relay_origin.clone().unwrap_or_default()),
                ));
                environment.push(entry(names.node_id, EnvironmentSource::Value(node_id.as_str().to_owned())));
            }
            environment.sort_by(|left, right| compare_bytes(left.name.as_str(), right.name.as_str()));
            let id = assignment_id(&body.cluster_id, &body.service_id, index);
            let draft = RuntimeAssignment {
                id: id.clone(),
                generation: 1,
                previous: None,
                controller: controller.clone(),
                organization_id: body.organization_id.clone(),
                cluster_id: body.cluster_id.clone(),
                node_id: node_id.clone(),
                runtime_namespace: node.node.runtime_namespace.clone(),
                service_id: body.service_id.clone(),
                spec_revision: spec.revision,
                workload: RuntimeWorkload {
                    image: body.image.clone(),
                    environment,
                    ports: ports.clone(),
                    storage: sealed_claims(facts, spec, node_id),
                },
                digest: Sha256Digest::from_bytes(&[0; 32]),
            };
            desired.insert(id, draft);
        }
    }
    desired
}

/// One change a reconcile decided, before signing.
pub enum PlannedChange {
    /// A new generation, drafted with its generation and previous (no digest yet).
    Issue(Box<RuntimeAssignment>),
    /// The head generation enters or leaves its node's current set.
    SetActive { id: Id, generation: u64, active: bool },
}

/// The reconcile's decision, unsigned: what to issue, activate and deactivate so the stored
/// heads match what the facts call for. Pure but for one check: a draft whose record would not
/// read back is never issued (logged instead), so no stored assignment fails its reader.
///
/// A head whose record does not read back affects only itself: it leaves its node's set when the
/// facts no longer call for it, and is replaced by a new generation linking it (by the reference
/// its head row keeps) when they do.
pub fn planned_changes(
    facts: &AssignmentFacts,
    lookups: &Lookups,
    controller: &ControllerReference,
) -> Vec<PlannedChange> {
    let desired = desired_assignments(facts, lookups, controller);
    let heads = &facts.heads;
    // Heads that leave their node's set, listed after the issues and activations.
    let leaving = heads
        .readable
        .iter()
        .filter(|head| head.active)
        .map(|head| head.signed.payload.reference())
        .chain(heads.unreadable.iter().filter(|head| head.extra.active).map(|head| head.reference.clone()))
        .filter(|reference| !desired.contains_key(&reference.id))
        .map(|reference| PlannedChange::SetActive {
            id: reference.id,
            generation: reference.generation,
            active: false,
        });
    let leaving: Vec<PlannedChange> = leaving.collect();
    let mut changes = Vec::new();
    for (id, mut draft) in desired {
        if let Some(head) = heads.get(&id)
            && assignments::same_content(&head.signed.payload, &draft)
        {
            if !head.active {
                changes.push(PlannedChange::SetActive { id, generation: head.signed.payload.generation, active: true });
            }
            continue;
        }
        if let Some(previous) = heads.reference(&id) {
            draft.generation = previous.generation + 1;
            draft.previous = Some(previous);
        }
        draft.digest = draft.compute_digest();
        if !assignments::reads_back(&draft) {
            tracing::error!(assignment = %id, service = %draft.service_id, "a planned assignment would not read back; not issued");
            continue;
        }
        changes.push(PlannedChange::Issue(Box::new(draft)));
    }
    changes.extend(leaving);
    changes
}

/// The reconcile's decision: what to issue, activate and deactivate so the stored heads match
/// what the facts call for, every new generation digested and signed. Pure but for signing.
pub fn plan_assignments(
    facts: &AssignmentFacts,
    lookups: &Lookups,
    controller: &ControllerReference,
    key: &SigningKey,
) -> Vec<AssignmentChange> {
    planned_changes(facts, lookups, controller)
        .into_iter()
        .map(|change| match change {
            PlannedChange::Issue(draft) => AssignmentChange::Issue(Box::new(sign(key, *draft))),
            PlannedChange::SetActive { id, generation, active } => {
                AssignmentChange::SetActive { id, generation, active }
            }
        })
        .collect()
}

/// The facts as they are once `changes` are written: each new generation the active head of its
/// assignment, each set entry or exit applied to its head. Pure.
pub fn with_changes(mut facts: AssignmentFacts, changes: &[AssignmentChange]) -> AssignmentFacts {
    for change in changes {
        match change {
            AssignmentChange::Issue(signed) => {
                let id = &signed.payload.id;
                facts.heads.unreadable.retain(|head| head.reference.id != *id);
                let stored = StoredAssignment { signed: (**signed).clone(), active: true };
                match facts
                    .heads
                    .readable
                    .binary_search_by(|head| compare_bytes(head.signed.payload.id.as_str(), id.as_str()))
                {
                    Ok(index) => facts.heads.readable[index] = stored,
                    Err(index) => facts.heads.readable.insert(index, stored),
                }
            }
            AssignmentChange::SetActive { id, generation, active } => {
                for head in facts.heads.readable.iter_mut() {
                    if head.signed.payload.id == *id && head.signed.payload.generation == *generation {
                        head.active = *active;
                    }
                }
                for head in facts.heads.unreadable.iter_mut() {
                    if head.reference.id == *id && head.reference.generation == *generation {
                        head.extra.active = *active;
                    }
                }
            }
        }
    }
    facts
}

/// The nodes whose current set the changes touch.
pub fn touched_nodes(facts: &AssignmentFacts, changes: &[AssignmentChange]) -> BTreeSet<NodeId> {
    let mut nodes = BTreeSet::new();
    for change in changes {
        let id = match change {
            AssignmentChange::Issue(signed) => {
                nodes.insert(signed.payload.node_id.clone());
                &signed.payload.id
            }
            AssignmentChange::SetActive { id, .. } => id,
        };
        if let Some(head) = facts.heads.get(id) {
            nodes.insert(head.signed.payload.node_id.clone());
        }
        if let Some(head) = facts.heads.get_unreadable(id) {
            nodes.insert(head.node_id.clone());
        }
    }
    nodes
}

/// The claims the facts call for (drafts, by id: the volumes of every spec that is not refused),
/// and the services whose current spec is refused (their claims stay as they are).
fn desired_claims(
    facts: &AssignmentFacts,
    lookups: &Lookups,
    controller: &ControllerReference,
) -> (BTreeMap<Id, RuntimeLocalStorageClaim>, BTreeSet<Id>) {
    let mut desired = BTreeMap::new();
    let mut refused = BTreeSet::new();
    if facts.cluster.is_none() {
        return (desired, refused);
    }
    for spec in &facts.services {
        let body = &spec.body;
        if refusal_of(spec, facts, lookups).is_some() {
            refused.insert(body.service_id.clone());
            continue;
        }
        for volume in &body.volumes {
            if let Some(draft) = claims::draft_claim(spec, volume, lookups, controller) {
                desired.insert(draft.id.clone(), draft);
            }
        }
    }
    (desired, refused)
}

/// The claim generations a reconcile issues, unsigned but digested (see the module
/// documentation for the rules). Pure but for one check: a generation whose record would not
/// read back is never issued (logged instead).
pub fn planned_claims(
    facts: &AssignmentFacts,
    lookups: &Lookups,
    controller: &ControllerReference,
) -> Vec<RuntimeLocalStorageClaim> {
    let (mut desired, refused) = desired_claims(facts, lookups, controller);
    let heads = &facts.claims;
    let mut issued = Vec::new();
    for head in &heads.readable {
        let current = &head.signed.payload;
        let wanted = desired.remove(&current.id);
        if held(head) {
            continue;
        }
        let decision = resolution(head);
        let next = match (current.lifecycle, wanted) {
            (LocalStorageLifecycle::Bound, _) if decision == Some(ClaimDecision::Purge) => {
                Some(claims::purge_of(current))
            }
            (LocalStorageLifecycle::Bound, Some(wanted)) => (!claims::same_content(current, &wanted)
                || decision == Some(ClaimDecision::Rebind))
            .then(|| claims::following(wanted, Some(current.reference()))),
            (LocalStorageLifecycle::Bound, None) => {
                (!refused.contains(&current.service_id)).then(|| claims::purge_of(current))
            }
            (LocalStorageLifecycle::Purge, Some(wanted)) => (node_state(head) == Some(NodeState::Purged)
                || decision == Some(ClaimDecision::Rebind))
            .then(|| claims::following(wanted, Some(current.reference()))),
            (LocalStorageLifecycle::Purge, None) => None,
        };
        issued.extend(next);
    }
    for unreadable in &heads.unreadable {
        // Its content is unknown: it is replaced by the generation the spec calls for, or held.
        if let Some(wanted) = desired.remove(&unreadable.reference.id) {
            issued.push(claims::following(wanted, Some(unreadable.reference.clone())));
        }
    }
    issued.extend(desired.into_values().map(|draft| claims::following(draft, None)));
    issued.retain(|claim| {
        let fits = claims::reads_back(claim);
        if !fits {
            tracing::error!(claim = %claim.id, service = %claim.service_id, "a planned claim would not read back; not issued");
        }
        fits
    });
    issued
}

/// The claim generations a reconcile issues, each signed. Pure but for signing.
pub fn plan_claims(
    facts: &AssignmentFacts,
    lookups: &Lookups,
    controller: &ControllerReference,
    key: &SigningKey,
) -> Vec<ClaimChange> {
    planned_claims(facts, lookups, controller)
        .into_iter()
        .map(|claim| ClaimChange::Issue(Box::new(sign(key, claim))))
        .collect()
}
