//! Operator safety, on PostgreSQL and on SQLite: a write never takes a running service down. Every
//! rule that relates two services refuses the service being written and leaves what runs
//! untouched — a volume id another service holds, a workload pool another service fills — and the
//! running service stays `converged` with its assignment and lease unchanged. (Placement relates
//! no two services here: a node has no capacity this controller counts.)

#[macro_use]
mod support;

use cloudly::api::Limits;
use cloudly::api::methods::name;
use cloudly::api::wire;
use cloudly::domain::ControllerSettings;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;
use support::node_agent::{NodeAgent, NodeVolumes, node_bearer};
use support::service::{Backend, TestService, spec_body};

/// Pushes retried quickly, so claim answers settle within a test.
fn settings() -> ControllerSettings {
    ControllerSettings {
        storage_claim_retry_ms: 50,
        storage_claim_retry_max_ms: 200,
        storage_claim_push_timeout_ms: 1_000,
        storage_claim_sweep_ms: 300,
        ..ControllerSettings::default()
    }
}

/// Cluster `c1` with a plan whose pool for `org` is `pool`.
async fn cluster(backend: Backend, pool: &str) -> TestService {
    let service = TestService::start_with_settings(backend, Limits::default(), settings()).await;
    service.seed_cluster("c1", "web").await;
    service.admin_call("deleteService", json!({ "clusterId": "c1", "serviceId": "web", "expectedRevision": 1 })).await;
    let plan = json!({
        "clusterId": "c1", "revision": 1, "prefixes": ["10.64.0.0/16"],
        "pools": [{ "id": "pool-org", "organizationId": "org", "prefix": pool }],
        "vpn": null, "hubs": [], "platformEndpoints": [],
    });
    service.admin_call("putRuntimeNetworkAddressPlan", json!({ "plan": plan })).await;
    service
}

/// `name`, one replica on node-1, with an empty local volume `volume` when given.
fn spec(name: &str, volume: Option<&str>) -> Value {
    let mut body = spec_body("c1", name);
    body["replicas"] = json!(1);
    body["placement"] = json!({ "nodeIds": ["node-1"] });
    if let Some(volume) = volume {
        body["volumes"] = json!([{
            "id": volume, "mountPath": format!("/var/lib/{volume}"), "readOnly": false, "driver": "local",
            "driverOptions": [], "mountOptions": [],
            "initialization": { "kind": "empty", "ownership": { "uid": 1000, "gid": 1000, "mode": 493 } },
        }]);
    }
    body
}

async fn status(service: &TestService, name: &str) -> (Value, Value) {
    let status =
        service.admin_call("getServiceRuntimeStatus", json!({ "clusterId": "c1", "serviceId": name })).await["status"]
            .clone();
    (status["state"].clone(), status["reason"].clone())
}

/// Waits until `probe` answers something (10 s at most).
async fn eventually<T, F: std::future::Future<Output = Option<T>>>(what: &str, mut probe: impl FnMut() -> F) -> T {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(found) = probe().await {
            return found;
        }
        assert!(tokio::time::Instant::now() < deadline, "{what} did not happen in time");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Service `db` running on node-1: put, its claim (if any) answered `ready`, its assignment
/// reported `ready` under the node's session, `converged`. Answers the node's agent (kept so its
/// session stays open) and db's (assignment head, live lease) as read once it converged.
async fn running_db(service: &TestService, volume: Option<&str>) -> (NodeAgent, Value) {
    service.admin_call("putServiceRuntimeSpec", json!({ "spec": spec("db", volume), "expectedRevision": null })).await;
    let bearer = node_bearer(service, "c1", "node-1").await;
    let agent = NodeAgent::connect_with(service, Arc::new(NodeVolumes::default())).await;
    let session = agent.open("c1", "node-1", &bearer).await;
    let assignment = eventually("db's assignment", || async {
        let answer =
            agent.call(name::GET_RUNTIME_ASSIGNMENTS, wire::GetRuntimeAssignments { session: &session }).await.unwrap();
        answer["assignments"].as_array().unwrap().iter().find(|signed| signed["payload"]["serviceId"] == "db").cloned()
    })
    .await;
    let payload = &assignment["payload"];
    let reference = json!({ "id": payload["id"], "generation": payload["generation"], "digest": payload["digest"] });
    agent
        .call(
            name::REPORT_RUNTIME_ASSIGNMENT_STATE,
            wire::ReportRuntimeAssignmentState { session: &session, assignment: &reference, state: &json!("ready") },
        )
        .await
        .unwrap();
    eventually("db converged", || async { (status(service, "db").await.0 == json!("converged")).then_some(()) }).await;
    (agent, runtime_of_db(service).await)
}

/// db's assignment head (as node-1 gets it) and its live lease.
async fn runtime_of_db(service: &TestService) -> Value {
    let leases = service.store.live_leases(&cloudly::contract::Id::parse("c1").unwrap()).await.unwrap();
    let lease: Vec<String> = leases
        .iter()
        .filter(|lease| lease.service_id.as_str() == "db")
        .map(|lease| format!("{} {} {}", lease.id, lease.generation, lease.ipv4.link_subnet()))
        .collect();
    let heads = service
        .store
        .node_assignments(
            &cloudly::contract::Id::parse("c1").unwrap(),
            &cloudly::contract::NodeId::parse("node-1").unwrap(),
        )
        .await
        .unwrap();
    let assignment: Vec<String> = heads
        .readable
        .iter()
        .filter(|head| head.signed.payload.service_id.as_str() == "db")
        .map(|head| {
            format!("{} {} {}", head.signed.payload.id, head.signed.payload.generation, head.signed.payload.digest)
        })
        .collect();
    json!({ "assignment": assignment, "lease": lease })
}

on_both_stores!(
    a_later_declarer_of_a_running_services_volume_id_is_refused_and_the_service_runs_on,
    |backend| async move {
        let service = cluster(backend, "10.64.0.0/24").await;
        let (agent, before) = running_db(&service, Some("data")).await;
        assert_eq!(before["lease"].as_array().map(Vec::len), Some(1), "{before}");

        // Another service declares the same volume id: it alone is refused.
        service
            .admin_call("putServiceRuntimeSpec", json!({ "spec": spec("api", Some("data")), "expectedRevision": null }))
            .await;
        assert_eq!(status(&service, "api").await, (json!("refused"), json!("volume-shared-unsupported")));
        assert_eq!(status(&service, "db").await, (json!("converged"), Value::Null));
        assert_eq!(runtime_of_db(&service).await, before, "db's assignment and lease are untouched");
        drop(agent);
        service.stop().await;
    }
);

on_both_stores!(
    a_service_that_does_not_fit_a_pool_another_service_fills_is_refused_and_the_other_runs_on,
    |backend| async move {
        // One /30: room for one lease.
        let service = cluster(backend, "10.64.0.0/30").await;
        let (agent, before) = running_db(&service, None).await;
        assert_eq!(before["lease"].as_array().map(Vec::len), Some(1), "{before}");

        service
            .admin_call("putServiceRuntimeSpec", json!({ "spec": spec("api", None), "expectedRevision": null }))
            .await;
        assert_eq!(status(&service, "api").await, (json!("refused"), json!("network-workload-pool-exhausted")));
        assert_eq!(status(&service, "db").await, (json!("converged"), Value::Null));
        assert_eq!(runtime_of_db(&service).await, before, "db's assignment and lease are untouched");
        drop(agent);
        service.stop().await;
    }
);
