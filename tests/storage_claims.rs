//! Runtime local storage claims over the real server (`06-storage-claims.md`): issued from the
//! service specs, pushed down the node's socket with `applyRuntimeLocalStorageClaim` to a test
//! node answering over it, the answers bound or recorded as protocol faults, the bound claims
//! sealed in the assignments, `storage-import-pending` and `uncertain` as the operator sees them
//! (one decision on it), and purge generations after a delete. On PostgreSQL and on SQLite.

#[macro_use]
mod support;

use cloudly::api::Limits;
use cloudly::api::methods::name;
use cloudly::api::wire;
use cloudly::domain::ControllerSettings;
use serde_json::{Value, json};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use support::node_agent::{ClaimReply, NodeAgent, NodeVolumes, node_bearer};
use support::service::{Backend, TestService, spec_body};

/// Pushes retried quickly, so faults and imports settle within a test.
fn settings() -> ControllerSettings {
    ControllerSettings {
        storage_claim_retry_ms: 50,
        storage_claim_retry_max_ms: 200,
        storage_claim_push_timeout_ms: 1_000,
        storage_claim_sweep_ms: 300,
        ..ControllerSettings::default()
    }
}

async fn start(backend: Backend) -> TestService {
    let service = TestService::start_with_settings(backend, Limits::default(), settings()).await;
    service.seed_cluster("c1", "ingress").await;
    service
}

fn empty_volume(id: &str, mount: &str, uid: u64, mode: u64) -> Value {
    json!({
        "id": id, "mountPath": mount, "readOnly": false, "driver": "local", "driverOptions": [], "mountOptions": [],
        "initialization": { "kind": "empty", "ownership": { "uid": uid, "gid": uid, "mode": mode } },
    })
}

fn import_volume(id: &str, mount: &str) -> Value {
    json!({
        "id": id, "mountPath": mount, "readOnly": true, "driver": "local", "driverOptions": [], "mountOptions": [],
        "initialization": { "kind": "import" },
    })
}

/// Service `db` on node-1 alone, one replica, with `volumes`.
fn db_spec(volumes: Value) -> Value {
    let mut body = spec_body("c1", "db");
    body["replicas"] = json!(1);
    body["placement"] = json!({ "nodeIds": ["node-1"] });
    body["volumes"] = volumes;
    body
}

async fn put_db(service: &TestService, volumes: Value, expected: Value) -> Value {
    service.admin_call("putServiceRuntimeSpec", json!({ "spec": db_spec(volumes), "expectedRevision": expected })).await
        ["spec"]
        .clone()
}

async fn claims(service: &TestService) -> Vec<Value> {
    service.admin_call("listRuntimeLocalStorageClaims", json!({ "clusterId": "c1" })).await["claims"]
        .as_array()
        .unwrap()
        .clone()
}

/// The listing of the claim of volume `volume`.
async fn claim_of(service: &TestService, volume: &str) -> Value {
    claims(service).await.into_iter().find(|listing| listing["claim"]["volumeId"] == volume).unwrap()
}

fn reference(claim: &Value) -> Value {
    json!({ "id": claim["id"], "generation": claim["generation"], "digest": claim["digest"] })
}

async fn status(service: &TestService) -> (Value, Value) {
    let status =
        service.admin_call("getServiceRuntimeStatus", json!({ "clusterId": "c1", "serviceId": "db" })).await["status"]
            .clone();
    (status["state"].clone(), status["reason"].clone())
}

/// Polls `probe` until it answers something, for at most ten seconds.
async fn eventually<T, F: Future<Output = Option<T>>>(what: &str, mut probe: impl FnMut() -> F) -> T {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(found) = probe().await {
            return found;
        }
        assert!(tokio::time::Instant::now() < deadline, "{what}: not within 10 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until the claim of `volume` has the node state `state` for its head generation.
async fn head_state(service: &TestService, volume: &str, state: &str) -> Value {
    eventually(&format!("{volume} {state}"), || async {
        let listing = claim_of(service, volume).await;
        (listing["node"]["state"] == state && listing["node"]["generation"] == listing["claim"]["generation"])
            .then_some(listing)
    })
    .await
}

/// Node-1's agent with `volumes`, its session open.
async fn node_one(service: &TestService, volumes: &Arc<NodeVolumes>) -> (NodeAgent, Value) {
    let bearer = node_bearer(service, "c1", "node-1").await;
    let agent = NodeAgent::connect_with(service, volumes.clone()).await;
    let session = agent.open("c1", "node-1", &bearer).await;
    (agent, session)
}

/// Node-1's assignment of `db`, if it has one.
async fn db_assignment(agent: &NodeAgent, session: &Value) -> Option<Value> {
    let answer =
        agent.call(name::GET_RUNTIME_ASSIGNMENTS, wire::GetRuntimeAssignments { session: &session }).await.unwrap();
    answer["assignments"].as_array().unwrap().iter().find(|signed| signed["payload"]["serviceId"] == "db").cloned()
}

on_both_stores!(two_empty_volumes_are_claimed_pushed_sealed_and_converge, |backend| async move {
    let service = start(backend).await;
    put_db(
        &service,
        json!([empty_volume("data", "/var/lib/db", 1000, 0o750), empty_volume("logs", "/var/log/db", 0, 0o700)]),
        Value::Null,
    )
    .await;

    // Issued before the node connects: one bound generation per volume, with its ownership.
    let listed = claims(&service).await;
    assert_eq!(listed.len(), 2);
    let data = claim_of(&service, "data").await;
    assert_eq!(data["claim"]["generation"], json!(1));
    assert_eq!(data["claim"]["lifecycle"], json!("bound"));
    assert_eq!(data["claim"]["nodeId"], json!("node-1"));
    assert_eq!(data["claim"]["runtimeNamespace"], json!("ns-main"));
    assert_eq!(data["claim"]["initialization"], json!("empty"));
    assert_eq!(data["claim"]["initialOwnership"], json!({ "uid": 1000, "gid": 1000, "mode": 0o750 }));
    assert_eq!(data["claim"]["mount"], json!({ "mountPath": "/var/lib/db", "readOnly": false }));
    assert_eq!(data["node"], Value::Null);
    assert_eq!(data["faults"], json!({ "count": 0, "last": null }));

    // Pushed once the node opens its session; both answered accepted / ready.
    let volumes = NodeVolumes::new();
    let (agent, session) = node_one(&service, &volumes).await;
    let data = head_state(&service, "data", "ready").await;
    let logs = head_state(&service, "logs", "ready").await;
    assert_eq!(data["node"]["status"], json!("accepted"));
    let received = volumes.received();
    assert_eq!(received.len(), 2);
    for request in &received {
        assert_eq!(request["session"], session);
    }
    let pushed: Vec<&Value> = received.iter().map(|request| &request["claim"]).collect();
    assert!(pushed.contains(&&data["claim"]) && pushed.contains(&&logs["claim"]));

    // The assignment seals both references, sorted by id; it converges once it runs.
    let assignment = eventually("the db assignment", || db_assignment(&agent, &session)).await;
    let mut sealed = vec![reference(&data["claim"]), reference(&logs["claim"])];
    sealed.sort_by(|left, right| left["id"].as_str().cmp(&right["id"].as_str()));
    assert_eq!(assignment["payload"]["workload"]["storage"], json!(sealed));
    assert_eq!(status(&service).await, (json!("converging"), Value::Null));
    let payload = &assignment["payload"];
    agent
        .call(
            name::REPORT_RUNTIME_ASSIGNMENT_STATE,
            wire::ReportRuntimeAssignmentState {
                session: &session,
                assignment: &reference(payload),
                state: &json!("ready"),
            },
        )
        .await
        .unwrap();
    assert_eq!(status(&service).await, (json!("converged"), Value::Null));
    service.stop().await;
});

on_both_stores!(a_service_whose_node_runs_it_before_confirming_its_storage_is_not_converged, |backend| async move {
    let service = start(backend).await;
    put_db(&service, json!([empty_volume("data", "/var/lib/db", 1000, 0o750)]), Value::Null).await;
    // The node takes the first push and does not answer it (it answers the retry honestly).
    let volumes = NodeVolumes::new();
    volumes.script([ClaimReply::Silent]);
    let (agent, session) = node_one(&service, &volumes).await;
    let assignment = eventually("the db assignment", || db_assignment(&agent, &session)).await;
    assert_eq!(assignment["payload"]["workload"]["storage"].as_array().map(Vec::len), Some(1));
    assert_ne!(claim_of(&service, "data").await["node"]["state"], json!("ready"), "not answered yet");
    agent
        .call(
            name::REPORT_RUNTIME_ASSIGNMENT_STATE,
            wire::ReportRuntimeAssignmentState {
                session: &session,
                assignment: &reference(&assignment["payload"]),
                state: &json!("ready"),
            },
        )
        .await
        .unwrap();
    // Running, but the storage it seals is not confirmed: waiting, not converged.
    assert_eq!(status(&service).await, (json!("waiting"), json!("storage-import-pending")));
    // Once the node answers the retried push `ready`, the service converges without another write.
    head_state(&service, "data", "ready").await;
    eventually("converged", || async { (status(&service).await.0 == json!("converged")).then_some(()) }).await;

    // A new session: until the node answers the claim again under it, the service is not
    // converged (its assignment is not running under the new session either).
    let bearer = node_bearer(&service, "c1", "node-1").await;
    drop(agent);
    let renewed = NodeAgent::connect_with(&service, volumes.clone()).await;
    let session = renewed.open("c1", "node-1", &bearer).await;
    assert_ne!(status(&service).await.0, json!("converged"));
    let assignment = eventually("the db assignment", || db_assignment(&renewed, &session)).await;
    renewed
        .call(
            name::REPORT_RUNTIME_ASSIGNMENT_STATE,
            wire::ReportRuntimeAssignmentState {
                session: &session,
                assignment: &reference(&assignment["payload"]),
                state: &json!("ready"),
            },
        )
        .await
        .unwrap();
    eventually("converged under the new session", || async {
        (status(&service).await.0 == json!("converged")).then_some(())
    })
    .await;
    service.stop().await;
});

on_both_stores!(an_import_volume_waits_until_the_node_answers_ready, |backend| async move {
    let service = start(backend).await;
    put_db(&service, json!([import_volume("seed", "/srv/seed")]), Value::Null).await;
    assert_eq!(status(&service).await, (json!("waiting"), json!("storage-import-pending")));
    let volumes = NodeVolumes::new();
    let (agent, session) = node_one(&service, &volumes).await;

    let seed = head_state(&service, "seed", "import-required").await;
    assert_eq!(seed["claim"]["initialOwnership"], Value::Null);
    assert_eq!(status(&service).await, (json!("waiting"), json!("storage-import-pending")));
    assert!(db_assignment(&agent, &session).await.is_none());

    // The controller asks again until the node says ready; then the assignment is issued.
    volumes.import_done(seed["claim"]["id"].as_str().unwrap());
    let seed = head_state(&service, "seed", "ready").await;
    assert_eq!(seed["node"]["status"], json!("replay"));
    let assignment = eventually("the db assignment", || db_assignment(&agent, &session)).await;
    assert_eq!(assignment["payload"]["workload"]["storage"], json!([reference(&seed["claim"])]));
    assert_eq!(status(&service).await, (json!("converging"), Value::Null));
    service.stop().await;
});

fn wrong_reference(claim: &Value) -> Value {
    let digest = format!("sha256:{}", "0".repeat(64));
    json!({ "status": "accepted", "state": "ready", "claim": { "id": claim["id"], "generation": claim["generation"], "digest": digest } })
}

fn import_required(claim: &Value) -> Value {
    json!({ "status": "accepted", "state": "import-required", "claim": reference(claim) })
}

fn purged(claim: &Value) -> Value {
    json!({ "status": "accepted", "state": "purged", "claim": reference(claim) })
}

fn historical_older(claim: &Value) -> Value {
    json!({ "status": "historical", "state": "ready", "claim": claim["previous"] })
}

fn not_a_response(_: &Value) -> Value {
    json!({ "status": "accepted" })
}

on_both_stores!(untrusted_answers_are_faults_and_leave_the_state_as_it_was, |backend| async move {
    let service = start(backend).await;
    put_db(&service, json!([empty_volume("data", "/var/lib/db", 1000, 0o750)]), Value::Null).await;
    let volumes = NodeVolumes::new();
    volumes.script([
        ClaimReply::Respond(wrong_reference),
        ClaimReply::Respond(import_required),
        ClaimReply::Respond(purged),
        ClaimReply::Respond(not_a_response),
        ClaimReply::Error,
        ClaimReply::Silent,
    ]);
    let (_agent, _session) = node_one(&service, &volumes).await;
    let data = eventually("five faults", || async {
        let listing = claim_of(&service, "data").await;
        (listing["faults"]["count"] == 5).then_some(listing)
    })
    .await;
    // None was trusted: the generation has no state yet.
    assert_eq!(data["node"], Value::Null);
    assert_eq!(data["faults"]["last"]["fault"], json!("the node answered an error"));
    assert_eq!(status(&service).await, (json!("converging"), Value::Null));
    // The silent push runs out of time; the retry is answered honestly.
    let data = head_state(&service, "data", "ready").await;
    assert_eq!(data["faults"]["count"], json!(5));

    // A historical answer naming an older generation is a fault too.
    volumes.script([ClaimReply::Respond(historical_older), ClaimReply::Silent]);
    put_db(&service, json!([empty_volume("data", "/var/lib/db2", 1000, 0o750)]), json!(1)).await;
    let data = eventually("the generation-2 fault", || async {
        let listing = claim_of(&service, "data").await;
        (listing["claim"]["generation"] == 2 && listing["faults"]["count"] == 1).then_some(listing)
    })
    .await;
    assert_eq!(data["faults"]["last"]["fault"], json!("the answer does not bind to the claim it answers"));
    assert_eq!((data["node"]["generation"].clone(), data["node"]["state"].clone()), (json!(1), json!("ready")));
    let data = head_state(&service, "data", "ready").await;
    assert_eq!(data["claim"]["mount"]["mountPath"], json!("/var/lib/db2"));
    service.stop().await;
});

on_both_stores!(a_push_cut_off_by_a_disconnect_is_pushed_again_on_the_next_session, |backend| async move {
    let service = start(backend).await;
    put_db(&service, json!([empty_volume("data", "/var/lib/db", 1000, 0o750)]), Value::Null).await;
    let volumes = NodeVolumes::new();
    volumes.script([ClaimReply::Silent]);
    let (first, _) = node_one(&service, &volumes).await;
    eventually("the first push", || async { (!volumes.received().is_empty()).then_some(()) }).await;
    drop(first);

    // The node took the claim but its answer never came: the next session gets it again, and
    // the node's replay is accepted.
    let (_second, session) = node_one(&service, &volumes).await;
    let data = head_state(&service, "data", "ready").await;
    assert_eq!(data["node"]["status"], json!("replay"));
    let received = volumes.received();
    assert_eq!(received.len(), 2);
    assert_eq!(received[1]["session"], session);
    assert_eq!(received[1]["claim"], received[0]["claim"]);
    service.stop().await;
});

fn uncertain(claim: &Value) -> Value {
    json!({ "status": "accepted", "state": "uncertain", "claim": reference(claim) })
}

/// Service `db` with volume `data` on node-1, whose node answers its claim `uncertain`: answers
/// the node's volumes, its agent and the claim's listing.
async fn an_uncertain_claim(service: &TestService) -> (Arc<NodeVolumes>, NodeAgent, Value) {
    put_db(service, json!([empty_volume("data", "/var/lib/db", 1000, 0o750)]), Value::Null).await;
    let volumes = NodeVolumes::new();
    volumes.script([ClaimReply::Respond(uncertain)]);
    let (agent, _) = node_one(service, &volumes).await;
    let data = head_state(service, "data", "uncertain").await;
    (volumes, agent, data)
}

on_both_stores!(an_uncertain_claim_stays_until_an_operator_resolves_it, |backend| async move {
    let service = start(backend).await;
    let (volumes, first, data) = an_uncertain_claim(&service).await;
    assert_eq!(status(&service).await, (json!("waiting"), json!("conflict")));

    // Neither mounted nor pushed again, also not to a new session.
    drop(first);
    let (agent, session) = node_one(&service, &volumes).await;
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert_eq!(volumes.received().len(), 1);
    assert_eq!(claim_of(&service, "data").await["node"]["state"], json!("uncertain"));
    assert!(db_assignment(&agent, &session).await.is_none());

    // Decisions name the current uncertain generation.
    let admin = service.admin();
    let mut stale = reference(&data["claim"]);
    stale["generation"] = json!(7);
    let error = service
        .call_as(&admin, "resolveRuntimeLocalStorageClaim", json!({ "claim": stale, "decision": "rebind" }))
        .await
        .unwrap_err();
    assert_eq!(error.data, json!({ "code": "not-found", "what": "storage-claim" }));
    let error = service
        .call_as(
            &admin,
            "resolveRuntimeLocalStorageClaim",
            json!({ "claim": reference(&data["claim"]), "decision": "keep" }),
        )
        .await
        .unwrap_err();
    assert_eq!(error.data["code"], json!("request-invalid"));

    // Rebind: a new bound generation, pushed, answered ready, sealed.
    let resolved = service
        .admin_call(
            "resolveRuntimeLocalStorageClaim",
            json!({ "claim": reference(&data["claim"]), "decision": "rebind" }),
        )
        .await["claim"]
        .clone();
    assert_eq!(resolved["claim"]["generation"], json!(2));
    assert_eq!(resolved["claim"]["previous"], reference(&data["claim"]));
    let data = head_state(&service, "data", "ready").await;
    let assignment = eventually("the db assignment", || db_assignment(&agent, &session)).await;
    assert_eq!(assignment["payload"]["workload"]["storage"], json!([reference(&data["claim"])]));

    // A claim that is not uncertain takes no decision.
    let error = service
        .call_as(
            &admin,
            "resolveRuntimeLocalStorageClaim",
            json!({ "claim": reference(&data["claim"]), "decision": "purge" }),
        )
        .await
        .unwrap_err();
    assert_eq!(error.data["code"], json!("request-invalid"));
    service.stop().await;
});

on_both_stores!(of_two_racing_decisions_on_an_uncertain_claim_one_is_recorded, |backend| async move {
    let service = start(backend).await;
    let (_volumes, _agent, data) = an_uncertain_claim(&service).await;
    let admin = service.admin();
    let decide = |decision: &'static str| {
        service.call_as(
            &admin,
            "resolveRuntimeLocalStorageClaim",
            json!({ "claim": reference(&data["claim"]), "decision": decision }),
        )
    };
    let (rebind, purge) = tokio::join!(decide("rebind"), decide("purge"));
    let refused = match (&rebind, &purge) {
        (Ok(_), Err(refused)) | (Err(refused), Ok(_)) => refused,
        _ => panic!("one decision is recorded, the other refused: {rebind:?} {purge:?}"),
    };
    // The later decision finds the decided generation (request-invalid) or, once the reconcile
    // has followed the first, a newer head (not-found).
    let code = refused.data["code"].clone();
    assert!(code == json!("request-invalid") || code == json!("not-found"), "{code}");
    eventually("a generation after the decided one", || async {
        let generation = claim_of(&service, "data").await["claim"]["generation"].as_u64();
        generation.filter(|generation| *generation > 1)
    })
    .await;
    service.stop().await;
});

on_both_stores!(removing_a_volume_or_the_service_issues_purges_that_end_purged, |backend| async move {
    let service = start(backend).await;
    put_db(
        &service,
        json!([empty_volume("data", "/var/lib/db", 1000, 0o750), empty_volume("logs", "/var/log/db", 0, 0o700)]),
        Value::Null,
    )
    .await;
    let volumes = NodeVolumes::new();
    let (agent, session) = node_one(&service, &volumes).await;
    let logs = head_state(&service, "logs", "ready").await;
    head_state(&service, "data", "ready").await;

    // A refused revision keeps the claims as they are.
    let mut refused = db_spec(json!([empty_volume("data", "/var/lib/db", 1000, 0o750)]));
    refused["replicas"] = json!(2);
    service.admin_call("putServiceRuntimeSpec", json!({ "spec": refused, "expectedRevision": 1 })).await;
    assert_eq!(status(&service).await, (json!("refused"), json!("volume-shared-unsupported")));
    assert!(claims(&service).await.iter().all(|listing| listing["claim"]["generation"] == 1));

    // The volume leaves the spec: its claim's purge generation follows its bound one.
    put_db(&service, json!([empty_volume("data", "/var/lib/db", 1000, 0o750)]), json!(2)).await;
    let purge = head_state(&service, "logs", "purged").await;
    assert_eq!(purge["claim"]["lifecycle"], json!("purge"));
    assert_eq!(purge["claim"]["generation"], json!(2));
    assert_eq!(purge["claim"]["previous"], reference(&logs["claim"]));
    let data = claim_of(&service, "data").await;
    let assignment = eventually("the db assignment without logs", || async {
        db_assignment(&agent, &session)
            .await
            .filter(|assignment| assignment["payload"]["workload"]["storage"] == json!([reference(&data["claim"])]))
    })
    .await;
    assert_eq!(assignment["payload"]["specRevision"], json!(3));

    // The service is deleted: the remaining claim is purged as well.
    service.admin_call("deleteService", json!({ "clusterId": "c1", "serviceId": "db", "expectedRevision": 3 })).await;
    let purge = head_state(&service, "data", "purged").await;
    assert_eq!(purge["claim"]["lifecycle"], json!("purge"));
    assert!(db_assignment(&agent, &session).await.is_none());
    let pushed = volumes.received().len();
    assert_eq!(pushed, 4);

    // Finished claims are not pushed again to a new session.
    drop(agent);
    let (_agent, _) = node_one(&service, &volumes).await;
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert_eq!(volumes.received().len(), pushed);
    service.stop().await;
});

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_lists_claims_and_resolves_an_uncertain_one() {
    let service = start(Backend::Sqlite).await;
    let (_volumes, _agent, data) = an_uncertain_claim(&service).await;
    let claim = data["claim"]["id"].as_str().unwrap().to_owned();

    let scratch = std::env::temp_dir().join(format!("cloudly-volumes-{}", std::process::id()));
    std::fs::create_dir_all(&scratch).unwrap();
    let identity = scratch.join("admin.json");
    std::fs::write(&identity, service.admin().to_string()).unwrap();
    let run = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_cloudly"))
            .args(args)
            .env("CLOUDLY_URL", &service.base_url)
            .env("CLOUDLY_IDENTITY", &identity)
            .output()
            .unwrap()
    };
    let table = tokio::task::block_in_place(|| run(&["volume", "list", "--cluster", "c1"]));
    assert!(table.status.success(), "{}", String::from_utf8_lossy(&table.stderr));
    let table = String::from_utf8(table.stdout).unwrap();
    let lines: Vec<Vec<&str>> = table.lines().map(|line| line.split_whitespace().collect()).collect();
    let header =
        ["CLAIM", "SERVICE", "VOLUME", "NODE", "GENERATION", "LIFECYCLE", "NODE", "STATE", "FAULTS", "ANSWERED", "AT"];
    assert_eq!(lines[0], header);
    assert_eq!(lines[1][..8], [claim.as_str(), "db", "data", "node-1", "1", "bound", "uncertain", "0"], "{table}");
    // Times are RFC 3339, not epoch milliseconds.
    assert!(lines[1][8].starts_with("20") && lines[1][8].ends_with('Z'), "{table}");

    // A generation that is not the current one is refused before anything is sent.
    let stale = tokio::task::block_in_place(|| {
        run(&["volume", "resolve", "--cluster", "c1", "--claim", &claim, "--generation", "5", "--decision", "rebind"])
    });
    assert_eq!(stale.status.code(), Some(2), "{}", String::from_utf8_lossy(&stale.stderr));
    assert_eq!(claim_of(&service, "data").await["claim"]["generation"], json!(1));
    let resolved = tokio::task::block_in_place(|| {
        run(&["volume", "resolve", "--cluster", "c1", "--claim", &claim, "--generation", "1", "--decision", "rebind"])
    });
    assert!(resolved.status.success(), "{}", String::from_utf8_lossy(&resolved.stderr));
    let resolved: Value = serde_json::from_slice(&resolved.stdout).unwrap();
    assert_eq!(resolved["claim"]["claim"]["generation"], json!(2));
    assert_eq!(resolved["claim"]["resolution"], Value::Null, "the decision is recorded on generation 1");
    let listed = tokio::task::block_in_place(|| run(&["volume", "list", "--cluster", "c1", "-o", "json"]));
    let listed: Value = serde_json::from_slice(&listed.stdout).unwrap();
    assert_eq!(listed["claims"][0]["claim"]["generation"], json!(2));
    std::fs::remove_dir_all(&scratch).unwrap();
    service.stop().await;
}
