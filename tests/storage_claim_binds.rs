//! The three bind functions of runtime local storage claims (`06-storage-claims.md`): every
//! success and every failure path, and that none mutates its inputs.

mod support;

use cloudly::contract::assignment::{RuntimeAssignment, snapshot_runtime_assignment};
use cloudly::contract::session::RuntimeSessionReference;
use cloudly::contract::storage_claim::{
    ApplyRuntimeLocalStorageClaimRequest, ApplyRuntimeLocalStorageClaimResponse, CONTRACT_ERROR,
    LocalStorageClaimNodeState, RuntimeLocalStorageClaim, bind_apply_runtime_local_storage_claim_request,
    bind_apply_runtime_local_storage_claim_response, bind_runtime_local_storage_claim_to_assignment,
    snapshot_runtime_local_storage_claim,
};
use cloudly::contract::{DigestedRecord, Id, RecordKind, Rejected};
use serde_json::{Value, json};

const REJECTED: Rejected = Rejected::of(RecordKind::RuntimeLocalStorageClaim);
const CLUSTER: &str = "cluster-a";

/// An edit of a record's JSON.
type Edit = Box<dyn Fn(&mut Value)>;

/// Sets `value[path] = replacement`, walking objects by key.
fn set(value: &mut Value, path: &[&str], replacement: Value) {
    let mut slot = value;
    for key in path {
        slot = &mut slot[*key];
    }
    *slot = replacement;
}

fn claim_value(initialization: &str, lifecycle: &str) -> Value {
    let generation = if lifecycle == "purge" { 2 } else { 1 };
    let previous = if generation == 1 {
        Value::Null
    } else {
        json!({ "id": "claim-1", "generation": 1, "digest": format!("sha256:{}", "b".repeat(64)) })
    };
    let ownership =
        if initialization == "empty" { json!({ "uid": 1000, "gid": 1000, "mode": 0o750 }) } else { Value::Null };
    json!({
        "id": "claim-1", "generation": generation, "previous": previous,
        "controller": { "kind": "cloudly", "id": "ctl-1" },
        "organizationId": "org-1", "clusterId": CLUSTER, "nodeId": "node-1", "runtimeNamespace": "ns-1",
        "serviceId": "svc-1", "volumeId": "vol-1",
        "source": { "kind": "directory" },
        "initialization": initialization, "initialOwnership": ownership,
        "mount": { "mountPath": "/var/lib/data", "readOnly": false },
        "accessMode": "ReadWriteOnce", "reclaimPolicy": "retain", "lifecycle": lifecycle,
        "digest": format!("sha256:{}", "0".repeat(64))
    })
}

/// A claim with its content's digest, after `edit`.
fn claim_with(initialization: &str, lifecycle: &str, edit: impl FnOnce(&mut Value)) -> RuntimeLocalStorageClaim {
    let mut value = claim_value(initialization, lifecycle);
    edit(&mut value);
    let mut claim = snapshot_runtime_local_storage_claim(&value).unwrap();
    claim.digest = claim.compute_digest();
    claim
}

fn claim(initialization: &str, lifecycle: &str) -> RuntimeLocalStorageClaim {
    claim_with(initialization, lifecycle, |_| {})
}

fn assignment_value(storage: Vec<Value>) -> Value {
    json!({
        "id": "asg-1", "generation": 1, "previous": null,
        "controller": { "kind": "cloudly", "id": "ctl-1" },
        "organizationId": "org-1", "clusterId": CLUSTER, "nodeId": "node-1", "runtimeNamespace": "ns-1",
        "serviceId": "svc-1", "specRevision": 1,
        "workload": { "image": "registry.example/app:1", "environment": [], "ports": [], "storage": storage },
        "digest": format!("sha256:{}", "0".repeat(64))
    })
}

/// An assignment sealing `claim`'s reference, with its content's digest, after `edit`.
fn assignment_with(claim: &RuntimeLocalStorageClaim, edit: impl FnOnce(&mut Value)) -> RuntimeAssignment {
    let mut value = assignment_value(vec![serde_json::to_value(claim.reference()).unwrap()]);
    edit(&mut value);
    let mut assignment = snapshot_runtime_assignment(&value).unwrap();
    assignment.digest = assignment.compute_digest();
    assignment
}

fn cluster() -> Id {
    Id::parse(CLUSTER).unwrap()
}

fn session_value() -> Value {
    json!({
        "id": "session-1", "generation": 2, "controller": { "kind": "cloudly", "id": "ctl-1" },
        "clusterId": CLUSTER, "nodeId": "node-1", "runtimeNamespace": "ns-1"
    })
}

fn session_with(edit: impl FnOnce(&mut Value)) -> RuntimeSessionReference {
    let mut value = session_value();
    edit(&mut value);
    RuntimeSessionReference::read(&value).unwrap()
}

fn request(claim: RuntimeLocalStorageClaim) -> ApplyRuntimeLocalStorageClaimRequest {
    ApplyRuntimeLocalStorageClaimRequest { session: session_with(|_| {}), claim }
}

fn response(status: &str, state: &str, claim: Value) -> ApplyRuntimeLocalStorageClaimResponse {
    ApplyRuntimeLocalStorageClaimResponse::read(&json!({ "status": status, "state": state, "claim": claim })).unwrap()
}

// --- bindRuntimeLocalStorageClaimToAssignment ------------------------------------------------

#[test]
fn a_bound_claim_binds_to_the_assignment_that_seals_it() {
    for initialization in ["empty", "import"] {
        let claim = claim(initialization, "bound");
        let assignment = assignment_with(&claim, |_| {});
        let (claim_before, assignment_before) = (claim.clone(), assignment.clone());
        let bound = bind_runtime_local_storage_claim_to_assignment(&claim, &assignment, &cluster()).unwrap();
        assert_eq!(bound, claim);
        assert_eq!((claim, assignment), (claim_before, assignment_before), "inputs unchanged");
    }
}

#[test]
fn a_claim_binds_among_several_sealed_references() {
    let claim = claim("empty", "bound");
    let other = json!({ "id": "claim-0", "generation": 4, "digest": format!("sha256:{}", "c".repeat(64)) });
    let later = json!({ "id": "claim-2", "generation": 1, "digest": format!("sha256:{}", "d".repeat(64)) });
    let assignment = assignment_with(&claim, |value| {
        let own = value["workload"]["storage"][0].clone();
        set(value, &["workload", "storage"], json!([other, own, later]));
    });
    assert!(bind_runtime_local_storage_claim_to_assignment(&claim, &assignment, &cluster()).is_ok());
}

#[test]
fn a_purge_claim_binds_to_no_assignment() {
    let purge = claim("empty", "purge");
    let assignment = assignment_with(&purge, |_| {});
    assert_eq!(bind_runtime_local_storage_claim_to_assignment(&purge, &assignment, &cluster()), Err(REJECTED));
}

#[test]
fn each_mismatch_of_claim_and_assignment_is_refused() {
    let claim = claim("empty", "bound");
    let reference = serde_json::to_value(claim.reference()).unwrap();
    let assignment_edits: Vec<(&str, Edit)> = vec![
        ("storage lacks the claim", Box::new(|value| set(value, &["workload", "storage"], json!([])))),
        ("storage names another generation", {
            let mut wrong = reference.clone();
            wrong["generation"] = json!(2);
            Box::new(move |value| set(value, &["workload", "storage"], json!([wrong])))
        }),
        ("storage names another digest", {
            let mut wrong = reference.clone();
            wrong["digest"] = json!(format!("sha256:{}", "e".repeat(64)));
            Box::new(move |value| set(value, &["workload", "storage"], json!([wrong])))
        }),
        ("controller kind", Box::new(|value| set(value, &["controller", "kind"], json!("onebox")))),
        ("controller id", Box::new(|value| set(value, &["controller", "id"], json!("ctl-2")))),
        ("organization", Box::new(|value| set(value, &["organizationId"], json!("org-2")))),
        ("node", Box::new(|value| set(value, &["nodeId"], json!("node-2")))),
        ("runtime namespace", Box::new(|value| set(value, &["runtimeNamespace"], json!("ns-2")))),
        ("service", Box::new(|value| set(value, &["serviceId"], json!("svc-2")))),
        ("assignment in another cluster", Box::new(|value| set(value, &["clusterId"], json!("cluster-b")))),
    ];
    for (name, edit) in assignment_edits {
        let assignment = assignment_with(&claim, edit);
        assert_eq!(
            bind_runtime_local_storage_claim_to_assignment(&claim, &assignment, &cluster()),
            Err(REJECTED),
            "{name}"
        );
    }
}

#[test]
fn the_expected_cluster_and_both_digests_are_checked() {
    let claim = claim("empty", "bound");
    let assignment = assignment_with(&claim, |_| {});
    let elsewhere = Id::parse("cluster-b").unwrap();
    assert_eq!(bind_runtime_local_storage_claim_to_assignment(&claim, &assignment, &elsewhere), Err(REJECTED));

    // A claim of another cluster, sealed by an assignment of the expected cluster.
    let foreign = claim_with("empty", "bound", |value| set(value, &["clusterId"], json!("cluster-b")));
    let sealing = assignment_with(&foreign, |_| {});
    assert_eq!(bind_runtime_local_storage_claim_to_assignment(&foreign, &sealing, &cluster()), Err(REJECTED));

    // A claim whose content changed after its digest was stated (its reference is still sealed).
    let mut stale = claim.clone();
    stale.volume_id = Id::parse("vol-2").unwrap();
    assert_eq!(bind_runtime_local_storage_claim_to_assignment(&stale, &assignment, &cluster()), Err(REJECTED));

    let mut stale_assignment = assignment.clone();
    stale_assignment.spec_revision += 1;
    assert_eq!(bind_runtime_local_storage_claim_to_assignment(&claim, &stale_assignment, &cluster()), Err(REJECTED));
    assert_eq!(REJECTED.to_string(), CONTRACT_ERROR);
}

// --- bindApplyRuntimeLocalStorageClaimRequest ------------------------------------------------

#[test]
fn a_request_over_the_current_session_binds() {
    let request = request(claim("import", "bound"));
    let trusted = session_with(|_| {});
    let before = request.clone();
    assert_eq!(bind_apply_runtime_local_storage_claim_request(&request, &trusted).unwrap(), request);
    assert_eq!(request, before, "input unchanged");
}

#[test]
fn a_request_over_any_other_session_is_refused() {
    let request = request(claim("empty", "bound"));
    let edits: [(&str, Value); 7] = [
        ("id", json!("session-2")),
        ("generation", json!(3)),
        ("controller", json!({ "kind": "onebox", "id": "ctl-1" })),
        ("controller", json!({ "kind": "cloudly", "id": "ctl-2" })),
        ("clusterId", json!("cluster-b")),
        ("nodeId", json!("node-2")),
        ("runtimeNamespace", json!("ns-2")),
    ];
    for (key, replacement) in edits {
        let trusted = session_with(|value| value[key] = replacement.clone());
        assert_eq!(bind_apply_runtime_local_storage_claim_request(&request, &trusted), Err(REJECTED), "{key}");
    }
}

#[test]
fn a_request_whose_claim_names_another_session_scope_is_refused() {
    let trusted = session_with(|_| {});
    let edits: [(&str, Value); 5] = [
        ("controller", json!({ "kind": "onebox", "id": "ctl-1" })),
        ("controller", json!({ "kind": "cloudly", "id": "ctl-2" })),
        ("clusterId", json!("cluster-b")),
        ("nodeId", json!("node-2")),
        ("runtimeNamespace", json!("ns-2")),
    ];
    for (key, replacement) in edits {
        let request = request(claim_with("empty", "bound", |value| value[key] = replacement.clone()));
        assert_eq!(bind_apply_runtime_local_storage_claim_request(&request, &trusted), Err(REJECTED), "{key}");
    }
    let mut stale = request(claim("empty", "bound"));
    stale.claim.mount.read_only = true;
    assert_eq!(bind_apply_runtime_local_storage_claim_request(&stale, &trusted), Err(REJECTED), "stale digest");
}

#[test]
fn a_request_reads_from_and_writes_back_to_its_wire_json() {
    let request = request(claim("empty", "bound"));
    let value = request.to_value();
    assert_eq!(value["session"], session_value());
    assert_eq!(ApplyRuntimeLocalStorageClaimRequest::read(&value).unwrap(), request);
    let mut extra = value.clone();
    extra["extra"] = json!(1);
    let mut broken_claim = value.clone();
    broken_claim["claim"]["mount"]["mountPath"] = json!("/run");
    let mut broken_session = value.clone();
    broken_session["session"]["generation"] = json!(0);
    for broken in [extra, broken_claim, broken_session, json!(null), json!({ "session": session_value() })] {
        assert_eq!(ApplyRuntimeLocalStorageClaimRequest::read(&broken).unwrap_err().to_string(), CONTRACT_ERROR);
    }
}

// --- bindApplyRuntimeLocalStorageClaimResponse -----------------------------------------------

#[test]
fn accepted_and_replay_bind_exactly_the_states_the_claim_can_be_in() {
    let table: [(&str, &str, [bool; 4]); 3] = [
        // [ready, import-required, purged, uncertain]
        ("empty", "bound", [true, false, false, true]),
        ("import", "bound", [true, true, false, true]),
        ("empty", "purge", [false, false, true, true]),
    ];
    let states = ["ready", "import-required", "purged", "uncertain"];
    for (initialization, lifecycle, allowed) in table {
        let request = request(claim(initialization, lifecycle));
        let reference = serde_json::to_value(request.claim.reference()).unwrap();
        for status in ["accepted", "replay"] {
            for (state, allowed) in states.into_iter().zip(allowed) {
                let response = response(status, state, reference.clone());
                let before = (response.clone(), request.clone());
                let bound = bind_apply_runtime_local_storage_claim_response(&response, &request);
                assert_eq!(bound.is_ok(), allowed, "{initialization} {lifecycle} {status} {state}");
                if allowed {
                    assert_eq!(bound.unwrap(), response);
                } else {
                    assert_eq!(bound, Err(REJECTED));
                }
                assert_eq!((response, request.clone()), before, "inputs unchanged");
            }
        }
    }
}

#[test]
fn accepted_and_replay_must_name_the_sent_claim() {
    let request = request(claim("empty", "bound"));
    let reference = serde_json::to_value(request.claim.reference()).unwrap();
    let mut others = Vec::new();
    for (key, replacement) in
        [("id", json!("claim-2")), ("generation", json!(2)), ("digest", json!(format!("sha256:{}", "f".repeat(64))))]
    {
        let mut other = reference.clone();
        other[key] = replacement;
        others.push(other);
    }
    for status in ["accepted", "replay"] {
        for other in &others {
            let response = response(status, "ready", other.clone());
            assert_eq!(bind_apply_runtime_local_storage_claim_response(&response, &request), Err(REJECTED), "{other}");
        }
    }
}

#[test]
fn historical_binds_a_newer_generation_of_the_same_claim_in_any_state() {
    let request = request(claim("empty", "bound"));
    let newer = json!({ "id": "claim-1", "generation": 5, "digest": format!("sha256:{}", "a".repeat(64)) });
    for state in ["ready", "import-required", "purged", "uncertain"] {
        let response = response("historical", state, newer.clone());
        assert_eq!(bind_apply_runtime_local_storage_claim_response(&response, &request).unwrap(), response, "{state}");
    }
    let same = serde_json::to_value(request.claim.reference()).unwrap();
    let purge_request = self::request(claim("empty", "purge"));
    let older = json!({ "id": "claim-1", "generation": 1, "digest": format!("sha256:{}", "a".repeat(64)) });
    let other_id = json!({ "id": "claim-2", "generation": 5, "digest": format!("sha256:{}", "a".repeat(64)) });
    for (name, claim, request) in [
        ("the same generation", same, &request),
        ("an older generation", older, &purge_request),
        ("another claim", other_id, &request),
    ] {
        let response = response("historical", "ready", claim);
        assert_eq!(bind_apply_runtime_local_storage_claim_response(&response, request), Err(REJECTED), "{name}");
    }
}

#[test]
fn a_response_reads_from_and_writes_back_to_its_wire_json() {
    let reference = json!({ "id": "claim-1", "generation": 1, "digest": format!("sha256:{}", "a".repeat(64)) });
    let value = json!({ "status": "accepted", "state": "import-required", "claim": reference });
    let response = ApplyRuntimeLocalStorageClaimResponse::read(&value).unwrap();
    assert_eq!(response.state, LocalStorageClaimNodeState::ImportRequired);
    assert_eq!(response.to_value(), value);
    for (key, replacement) in [
        ("status", json!("rejected")),
        ("state", json!("importRequired")),
        ("state", Value::Null),
        ("claim", json!({ "id": "claim-1", "generation": 0, "digest": reference["digest"] })),
        ("extra", json!(true)),
    ] {
        let mut broken = value.clone();
        broken[key] = replacement;
        assert_eq!(ApplyRuntimeLocalStorageClaimResponse::read(&broken).unwrap_err(), REJECTED, "{key}");
    }
}
