//! The pure part of the `registerClusterIngress` judge (`domain::registration::judge_facts`):
//! steps 4–7 over hand-built facts, each refusal from facts where every earlier step passes,
//! including the cases the wire can reach only in a race (a ready assignment that still carries
//! the previous credential, a ready report made under an older session).

mod support;

use cloudly::contract::assignment::{
    EnvironmentEntry, EnvironmentName, EnvironmentSource, RuntimeAssignment, RuntimeWorkload,
};
use cloudly::contract::designation::{SecretVersionReference, snapshot_cluster_ingress_designation};
use cloudly::contract::inventory::{ServiceRuntimeSpec, parse_service_spec_body};
use cloudly::contract::registration::{RefusalReason, parse_cluster_ingress_registration};
use cloudly::contract::session::{ControllerKind, ControllerReference, RuntimeSessionReference};
use cloudly::contract::{DigestedRecord as _, Id, NodeId, Sha256Digest};
use cloudly::domain::plan::assignments::AssignmentState;
use cloudly::domain::registration::{carries_credential, judge_facts};
use cloudly::domain::secrets::hash_value;
use cloudly::store::registrations::RegistrationFacts;
use cloudly::store::sessions::ReportedState;
use serde_json::json;

const BEARER: &str = "szci_the-right-bearer-of-this-designation";

fn id(text: &str) -> Id {
    Id::parse(text).unwrap()
}

fn session(generation: u64) -> RuntimeSessionReference {
    RuntimeSessionReference {
        id: id(&format!("session-{generation}")),
        generation,
        controller: ControllerReference { kind: ControllerKind::Cloudly, id: id("cloudly") },
        cluster_id: id("cluster-4f876aa3"),
        node_id: NodeId::parse("node-1").unwrap(),
        runtime_namespace: id("ns-main"),
    }
}

fn assignment(secret: &SecretVersionReference) -> RuntimeAssignment {
    let mut assignment = RuntimeAssignment {
        id: id("asg-1"),
        generation: 1,
        previous: None,
        controller: ControllerReference { kind: ControllerKind::Cloudly, id: id("cloudly") },
        organization_id: id("org"),
        cluster_id: id("cluster-4f876aa3"),
        node_id: NodeId::parse("node-1").unwrap(),
        runtime_namespace: id("ns-main"),
        service_id: id("svc-022dd18d"),
        spec_revision: 30,
        workload: RuntimeWorkload {
            image: "registry.example/ingress:1".to_owned(),
            environment: vec![EnvironmentEntry {
                name: EnvironmentName::parse("SERVEZONE_CLUSTER_INGRESS_BEARER").unwrap(),
                source: EnvironmentSource::Secret(secret.clone()),
            }],
            ports: Vec::new(),
            storage: Vec::new(),
        },
        digest: Sha256Digest::from_bytes(&[0; 32]),
    };
    assignment.digest = assignment.compute_digest();
    assignment
}

fn ready(session: &RuntimeSessionReference) -> Option<ReportedState> {
    Some(ReportedState {
        state: AssignmentState::Ready.as_str().to_owned(),
        session_id: session.id.clone(),
        session_generation: session.generation,
        reported_at: 1,
    })
}

/// Facts that accept a registration of node-1 with [`BEARER`].
fn accepting() -> RegistrationFacts {
    let vector = support::load_vector("cluster-ingress-designation.json");
    let designation = snapshot_cluster_ingress_designation(&vector["valid"][0]["record"]).unwrap();
    let spec = ServiceRuntimeSpec {
        body: parse_service_spec_body(&json!({
            "clusterId": "cluster-4f876aa3", "serviceId": "svc-022dd18d", "organizationId": "org",
            "image": "registry.example/ingress:1", "replicas": 1, "placement": { "nodeIds": ["node-1"] },
            "ports": [], "environment": [], "volumes": [],
        }))
        .unwrap(),
        revision: 30,
    };
    let current = session(2);
    RegistrationFacts {
        assignments: vec![(assignment(&designation.credential.secret_version), ready(&current))],
        designation: Some(designation),
        spec: Some(spec),
        node_exists: true,
        session: Some(current),
        credential_hash: Some(hash_value(BEARER)),
        route_table_revision: None,
    }
}

fn judge(facts: &RegistrationFacts, bearer: &str, node: &str) -> Result<(), RefusalReason> {
    let registration = parse_cluster_ingress_registration(&json!({
        "bearer": bearer, "version": "1.0.0", "nodeId": node,
        "protocol": { "name": "serve.zone/cluster-ingress", "minimum": 1, "maximum": 1 },
    }))
    .unwrap();
    judge_facts(facts, &registration).map(|_| ())
}

#[test]
fn accepting_facts_are_accepted_with_their_assignment_and_session() {
    let facts = accepting();
    let registration = parse_cluster_ingress_registration(&json!({
        "bearer": BEARER, "version": "1.0.0", "nodeId": "node-1",
        "protocol": { "name": "serve.zone/cluster-ingress", "minimum": 1, "maximum": 1 },
    }))
    .unwrap();
    let judged = judge_facts(&facts, &registration).unwrap();
    assert_eq!(judged.assignment, &facts.assignments[0].0);
    assert_eq!(judged.session, facts.session.as_ref().unwrap());
    assert_eq!(judged.designation, facts.designation.as_ref().unwrap());
}

#[test]
fn each_step_refuses_in_order() {
    let mut facts = accepting();
    facts.designation = None;
    assert_eq!(judge(&facts, "szci_wrong-bearer-entirely", "node-9"), Err(RefusalReason::IngressNotDesignated));

    let mut facts = accepting();
    facts.node_exists = false;
    assert_eq!(judge(&facts, BEARER, "node-1"), Err(RefusalReason::NodeMismatch));
    let facts = accepting();
    assert_eq!(judge(&facts, "szci_wrong-bearer-entirely", "node-2"), Err(RefusalReason::NodeMismatch));
    let mut facts = accepting();
    facts.spec = None;
    assert_eq!(judge(&facts, BEARER, "node-1"), Err(RefusalReason::NodeMismatch));

    let mut facts = accepting();
    facts.session = None;
    assert_eq!(judge(&facts, "szci_wrong-bearer-entirely", "node-1"), Err(RefusalReason::AssignmentNotRunning));
    let mut facts = accepting();
    facts.assignments.clear();
    assert_eq!(judge(&facts, BEARER, "node-1"), Err(RefusalReason::AssignmentNotRunning));

    let facts = accepting();
    assert_eq!(judge(&facts, "szci_wrong-bearer-entirely", "node-1"), Err(RefusalReason::BearerRefused));
    assert_eq!(judge(&facts, BEARER, "node-1"), Ok(()));
}

#[test]
fn a_ready_assignment_must_run_under_the_current_session_and_carry_the_current_credential() {
    // Ready, but reported under the previous session.
    let mut facts = accepting();
    facts.assignments[0].1 = ready(&session(1));
    assert_eq!(judge(&facts, BEARER, "node-1"), Err(RefusalReason::AssignmentNotRunning));
    // Reported under the current session, but not ready.
    for state in [AssignmentState::Starting, AssignmentState::Failed, AssignmentState::Stopped] {
        let mut facts = accepting();
        facts.assignments[0].1.as_mut().unwrap().state = state.as_str().to_owned();
        assert_eq!(judge(&facts, BEARER, "node-1"), Err(RefusalReason::AssignmentNotRunning));
    }
    // Never reported.
    let mut facts = accepting();
    facts.assignments[0].1 = None;
    assert_eq!(judge(&facts, BEARER, "node-1"), Err(RefusalReason::AssignmentNotRunning));
    // Running, but bound to the previous credential's secret version.
    let mut facts = accepting();
    let previous = SecretVersionReference { secret_id: id("secret-dab4fcb8"), secret_version_id: id("sv-previous") };
    let current_session = facts.session.clone().unwrap();
    facts.assignments = vec![(assignment(&previous), ready(&current_session))];
    assert!(!carries_credential(&facts.assignments[0].0, facts.designation.as_ref().unwrap()));
    assert_eq!(judge(&facts, BEARER, "node-1"), Err(RefusalReason::AssignmentNotRunning));
    // A second replica on the node that does carry it is enough.
    let designation = facts.designation.clone().unwrap();
    let mut carrying = assignment(&designation.credential.secret_version);
    carrying.id = id("asg-2");
    carrying.digest = carrying.compute_digest();
    facts.assignments.push((carrying, ready(&current_session)));
    assert_eq!(judge(&facts, BEARER, "node-1"), Ok(()));
}
