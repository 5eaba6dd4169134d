//! One bad spec cannot take a cluster down (`06-storage-claims.md`, "IServiceRuntimeStatus";
//! `07-inventory.md`): a spec the assignment record cannot hold, or that the controller cannot run,
//! gets no assignment and a `refused` (or `waiting`) status naming the first failing rule in table
//! order, while every other service of the cluster runs on; an assignment record that does not read
//! back affects only itself. On PostgreSQL and on SQLite, over the real server.

#[macro_use]
mod support;

use cloudly::api::methods::name;
use cloudly::api::wire;
use cloudly::contract::Id;
use serde_json::{Value, json};
use std::time::Duration;
use support::node_agent::{NodeAgent, node_bearer};
use support::service::{Backend, TestService, spec_body};

/// A spec of service `service` on `node-1` alone, one replica, changed by `edit`.
fn spec(service: &str, edit: impl FnOnce(&mut Value)) -> Value {
    let mut body = spec_body("c1", service);
    body["replicas"] = json!(1);
    body["placement"] = json!({ "nodeIds": ["node-1"] });
    edit(&mut body);
    body
}

fn volume(edit: impl FnOnce(&mut Value)) -> Value {
    let mut volume = json!({
        "id": "data", "mountPath": "/var/lib/data", "readOnly": false, "driver": "local",
        "driverOptions": [], "mountOptions": [],
        "initialization": { "kind": "empty", "ownership": { "uid": 1000, "gid": 1000, "mode": 488 } },
    });
    edit(&mut volume);
    volume
}

fn tcp_ports(count: u16) -> Value {
    json!((1..=count).map(|port| json!({ "protocol": "tcp", "port": port })).collect::<Vec<_>>())
}

async fn put_spec(service: &TestService, body: Value) -> Value {
    service.admin_call("putServiceRuntimeSpec", json!({ "spec": body, "expectedRevision": null })).await["spec"].clone()
}

async fn status(service: &TestService, service_id: &str) -> Value {
    service.admin_call("getServiceRuntimeStatus", json!({ "clusterId": "c1", "serviceId": service_id })).await["status"]
        .clone()
}

/// The service ids of the assignments node-1's agent is given.
async fn assigned_services(agent: &NodeAgent, session: &Value) -> Vec<String> {
    let answer = agent
        .call(name::GET_RUNTIME_ASSIGNMENTS, wire::GetRuntimeAssignments { session: &session })
        .await
        .unwrap_or_else(|error| panic!("getRuntimeAssignments: {} {}", error.text, error.data));
    let mut services: Vec<String> = answer["assignments"]
        .as_array()
        .unwrap()
        .iter()
        .map(|signed| signed["payload"]["serviceId"].as_str().unwrap().to_owned())
        .collect();
    services.sort();
    services
}

async fn node_one(service: &TestService) -> (NodeAgent, Value) {
    let bearer = node_bearer(service, "c1", "node-1").await;
    let agent = NodeAgent::connect(service).await;
    let session = agent.open("c1", "node-1", &bearer).await;
    (agent, session)
}

on_both_stores!(a_spec_with_more_than_64_ports_is_refused_and_the_cluster_runs_on, |backend| async move {
    let service = TestService::start(backend).await;
    service.seed_cluster("c1", "ingress").await;
    put_spec(&service, spec("wide", |body| body["ports"] = tcp_ports(65))).await;
    put_spec(&service, spec("edge", |body| body["ports"] = tcp_ports(64))).await;
    let (agent, session) = node_one(&service).await;

    // Every node of the cluster gets its assignments; the wide service has none.
    assert_eq!(assigned_services(&agent, &session).await, ["edge", "ingress"]);
    let wide = status(&service, "wide").await;
    assert_eq!((wide["state"].clone(), wide["reason"].clone()), (json!("refused"), json!("ports-too-many")));
    assert_eq!(wide["specRevision"], json!(1));
    assert_eq!(status(&service, "edge").await["state"], json!("converging"));

    // Deleting it leaves the rest as it was; its status is gone with it.
    service.admin_call("deleteService", json!({ "clusterId": "c1", "serviceId": "wide", "expectedRevision": 1 })).await;
    assert_eq!(assigned_services(&agent, &session).await, ["edge", "ingress"]);
    let admin = service.admin();
    let error = service
        .call_as(&admin, "getServiceRuntimeStatus", json!({ "clusterId": "c1", "serviceId": "wide" }))
        .await
        .unwrap_err();
    assert_eq!(error.data["code"], json!("not-found"));
    service.stop().await;
});

on_both_stores!(each_refusal_comes_from_the_rule_it_names_and_the_first_in_table_order_wins, |backend| async move {
    let service = TestService::start(backend).await;
    service.seed_cluster("c1", "ingress").await;
    let big_value = "v".repeat(32 * 1024);
    let cases: Vec<(&str, Value, &str)> = vec![
        (
            "proto",
            spec("proto", |body| body["ports"] = json!([{ "protocol": "sctp", "port": 9 }])),
            "port-protocol-unsupported",
        ),
        ("ports", spec("ports", |body| body["ports"] = tcp_ports(65)), "ports-too-many"),
        (
            "env",
            spec("env", |body| {
                body["environment"] = json!(
                    (0..9)
                        .map(|index| json!({ "name": format!("BIG_{index}"), "value": big_value }))
                        .collect::<Vec<_>>()
                )
            }),
            "environment-too-large",
        ),
        (
            "ghost",
            spec("ghost", |body| body["placement"] = json!({ "nodeIds": ["node-1", "node-9"] })),
            "no-eligible-node",
        ),
        (
            "nfs",
            spec("nfs", |body| body["volumes"] = json!([volume(|volume| volume["driver"] = json!("nfs"))])),
            "volume-driver-unsupported",
        ),
        (
            "opts",
            spec("opts", |body| {
                body["volumes"] = json!([volume(|volume| volume["mountOptions"] = json!(["noatime"]))])
            }),
            "volume-options-unsupported",
        ),
        (
            "twice",
            spec("twice", |body| {
                body["replicas"] = json!(2);
                body["volumes"] = json!([volume(|_| {})]);
            }),
            "volume-shared-unsupported",
        ),
        (
            "roam",
            spec("roam", |body| {
                body["placement"] = json!({ "nodeIds": ["node-1", "node-2"] });
                body["volumes"] = json!([volume(|volume| volume["id"] = json!("roaming"))]);
            }),
            "volume-placement-unsupported",
        ),
        // Several rules fail: the first in the table's order is named.
        (
            "many",
            spec("many", |body| {
                body["ports"] = json!([{ "protocol": "sctp", "port": 9 }, { "protocol": "tcp", "port": 1 }]);
                body["placement"] = json!({ "nodeIds": ["node-9"] });
                body["volumes"] = json!([volume(|volume| volume["driver"] = json!("nfs"))]);
            }),
            "port-protocol-unsupported",
        ),
        (
            "late",
            spec("late", |body| {
                body["placement"] = json!({ "nodeIds": ["node-9"] });
                body["volumes"] = json!([volume(|volume| volume["driver"] = json!("nfs"))]);
            }),
            "no-eligible-node",
        ),
    ];
    for (_, body, _) in &cases {
        put_spec(&service, body.clone()).await;
    }
    let (agent, session) = node_one(&service).await;
    // None of them is assigned; the seeded ingress still is.
    assert_eq!(assigned_services(&agent, &session).await, ["ingress"]);
    for (service_id, _, reason) in &cases {
        let status = status(&service, service_id).await;
        assert_eq!(status["state"], json!("refused"), "{service_id}: {status}");
        assert_eq!(status["reason"], json!(reason), "{service_id}");
    }
    // The list answers every service, sorted, each as getServiceRuntimeStatus does.
    let listed =
        service.admin_call("listServiceRuntimeStatuses", json!({ "clusterId": "c1" })).await["statuses"].clone();
    let ids: Vec<&str> = listed.as_array().unwrap().iter().map(|status| status["id"].as_str().unwrap()).collect();
    let mut expected: Vec<&str> = cases.iter().map(|(id, _, _)| *id).chain(["ingress"]).collect();
    expected.sort_unstable();
    assert_eq!(ids, expected);

    // Fixing a spec lifts its refusal: a new revision, assigned.
    service.admin_call("putServiceRuntimeSpec", json!({ "spec": spec("proto", |_| {}), "expectedRevision": 1 })).await;
    assert_eq!(assigned_services(&agent, &session).await, ["ingress", "proto"]);
    let fixed = status(&service, "proto").await;
    assert_eq!((fixed["specRevision"].clone(), fixed["state"].clone()), (json!(2), json!("converging")));
    service.stop().await;
});

on_both_stores!(a_refused_revision_takes_the_previous_revisions_assignments_away, |backend| async move {
    let service = TestService::start(backend).await;
    service.seed_cluster("c1", "ingress").await;
    put_spec(&service, spec("web", |_| {})).await;
    let (agent, session) = node_one(&service).await;
    assert_eq!(assigned_services(&agent, &session).await, ["ingress", "web"]);
    // The operator asks for what cannot run: the old revision does not keep running as if the
    // new one had been accepted.
    service
        .admin_call(
            "putServiceRuntimeSpec",
            json!({ "spec": spec("web", |body| body["ports"] = tcp_ports(65)), "expectedRevision": 1 }),
        )
        .await;
    assert_eq!(assigned_services(&agent, &session).await, ["ingress"]);
    let web = status(&service, "web").await;
    assert_eq!((web["specRevision"].clone(), web["reason"].clone()), (json!(2), json!("ports-too-many")));
    service.stop().await;
});

on_both_stores!(an_assignment_record_that_does_not_read_back_affects_only_itself, |backend| async move {
    let service = TestService::start(backend).await;
    service.seed_cluster("c1", "ingress").await;
    put_spec(&service, spec("kept", |_| {})).await;
    put_spec(&service, spec("gone", |_| {})).await;
    let (agent, session) = node_one(&service).await;
    assert_eq!(assigned_services(&agent, &session).await, ["gone", "ingress", "kept"]);

    // Both records stop reading back (as a record written by a build with other bounds would).
    service.database.execute("UPDATE runtime_assignments SET record = '{}' WHERE service_id IN ('kept', 'gone')").await;
    service.admin_call("deleteService", json!({ "clusterId": "c1", "serviceId": "gone", "expectedRevision": 1 })).await;
    // The delete touched `gone` only: its unreadable head left the node's set; `kept`'s
    // unreadable head is left out of the set until something reconciles it.
    assert_eq!(assigned_services(&agent, &session).await, ["ingress"]);
    // Damage done behind the store's back is what the full pass is for: it replaces the kept
    // service's head by a new generation linking it, and counts the correction.
    let corrections = service.controller().full_pass(&Id::parse("c1").unwrap(), Duration::ZERO).await.unwrap();
    assert_eq!(corrections.assignments, 1, "{corrections:?}");
    assert_eq!(assigned_services(&agent, &session).await, ["ingress", "kept"]);
    let answer =
        agent.call(name::GET_RUNTIME_ASSIGNMENTS, wire::GetRuntimeAssignments { session: &session }).await.unwrap();
    let kept = answer["assignments"]
        .as_array()
        .unwrap()
        .iter()
        .find(|signed| signed["payload"]["serviceId"] == "kept")
        .unwrap()["payload"]
        .clone();
    assert_eq!(kept["generation"], json!(2));
    assert_eq!(kept["previous"]["generation"], json!(1));
    // node-2 was never affected.
    let bearer = node_bearer(&service, "c1", "node-2").await;
    let other = NodeAgent::connect(&service).await;
    let other_session = other.open("c1", "node-2", &bearer).await;
    assert_eq!(assigned_services(&other, &other_session).await, ["ingress"]);
    service.stop().await;
});

on_both_stores!(
    status_converges_when_every_assignment_runs_and_changed_at_moves_only_with_the_verdict,
    |backend| async move {
        let service = TestService::start(backend).await;
        service.seed_cluster("c1", "ingress").await;
        let first = status(&service, "ingress").await;
        assert_eq!((first["state"].clone(), first["reason"].clone()), (json!("converging"), Value::Null));
        let converging_since = first["changedAt"].clone();
        service.clock.0.fetch_add(1_000, std::sync::atomic::Ordering::SeqCst);
        assert_eq!(
            status(&service, "ingress").await["changedAt"],
            converging_since,
            "an unchanged verdict keeps its time"
        );

        // Both replicas report ready under their node's session.
        let mut sessions = Vec::new();
        for node in ["node-1", "node-2"] {
            let bearer = node_bearer(&service, "c1", node).await;
            let agent = NodeAgent::connect(&service).await;
            let session = agent.open("c1", node, &bearer).await;
            let answer = agent
                .call(name::GET_RUNTIME_ASSIGNMENTS, wire::GetRuntimeAssignments { session: &session })
                .await
                .unwrap();
            for signed in answer["assignments"].as_array().unwrap() {
                let payload = &signed["payload"];
                let reference =
                    json!({ "id": payload["id"], "generation": payload["generation"], "digest": payload["digest"] });
                agent
                    .call(
                        name::REPORT_RUNTIME_ASSIGNMENT_STATE,
                        wire::ReportRuntimeAssignmentState {
                            session: &session,
                            assignment: &reference,
                            state: &json!("ready"),
                        },
                    )
                    .await
                    .unwrap();
            }
            sessions.push((agent, bearer));
        }
        service.clock.0.fetch_add(1_000, std::sync::atomic::Ordering::SeqCst);
        let converged = status(&service, "ingress").await;
        assert_eq!(converged["state"], json!("converged"));
        assert_ne!(converged["changedAt"], converging_since);

        // A node that opens a new session runs nothing yet under it.
        let (_, bearer) = &sessions[0];
        let again = NodeAgent::connect(&service).await;
        again.open("c1", "node-1", bearer).await;
        assert_eq!(status(&service, "ingress").await["state"], json!("converging"));
        service.stop().await;
    }
);

on_both_stores!(a_designated_ingress_without_a_relay_origin_waits_for_its_bindings, |backend| async move {
    let service = TestService::start(backend).await;
    service.seed_cluster("c1", "ingress").await;
    service
        .admin_call(
            "putCluster",
            json!({ "cluster": {
                "id": "c1", "organizationId": "org", "runtime": { "phase": "pallet", "generation": 3 },
                "relayOrigin": null, "fleetCutoverIngressDesignation": null,
            }, "expectedRevision": 1 }),
        )
        .await;
    service
        .admin_call(
            "designateClusterIngress",
            support::service::designation_request("c1", "ingress", "m-1", 1, Value::Null),
        )
        .await;
    service.controller().assignments_settled(&cloudly::contract::Id::parse("c1").unwrap()).await;
    let waiting = status(&service, "ingress").await;
    assert_eq!((waiting["state"].clone(), waiting["reason"].clone()), (json!("waiting"), json!("bindings-pending")));
    let (agent, session) = node_one(&service).await;
    assert!(assigned_services(&agent, &session).await.is_empty());
    service.stop().await;
});

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_shows_statuses_as_a_table_and_as_json() {
    let service = TestService::start(Backend::Sqlite).await;
    service.seed_cluster("c1", "ingress").await;
    put_spec(&service, spec("wide", |body| body["ports"] = tcp_ports(65))).await;
    let scratch = std::env::temp_dir().join(format!("cloudly-status-{}", std::process::id()));
    std::fs::create_dir_all(&scratch).unwrap();
    let identity = scratch.join("admin.json");
    std::fs::write(&identity, service.admin().to_string()).unwrap();
    let run = |args: &[&str]| {
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_cloudly"))
            .args(args)
            .env("CLOUDLY_URL", &service.base_url)
            .env("CLOUDLY_IDENTITY", &identity)
            .output()
            .unwrap();
        assert!(output.status.success(), "cloudly {args:?}: {}", String::from_utf8_lossy(&output.stderr));
        String::from_utf8(output.stdout).unwrap()
    };
    let table = tokio::task::block_in_place(|| run(&["service", "status", "--cluster", "c1"]));
    let lines: Vec<Vec<&str>> = table.lines().map(|line| line.split_whitespace().collect()).collect();
    assert_eq!(lines[0][..4], ["SERVICE", "REVISION", "STATE", "REASON"], "{table}");
    assert_eq!(lines[1][..4], ["ingress", "1", "converging", "-"], "{table}");
    assert_eq!(lines[2][..4], ["wide", "1", "refused", "ports-too-many"], "{table}");
    let one = tokio::task::block_in_place(|| {
        run(&["service", "status", "--cluster", "c1", "--service", "wide", "-o", "json"])
    });
    let answer: Value = serde_json::from_str(&one).unwrap();
    assert_eq!(answer["status"]["reason"], json!("ports-too-many"));
    std::fs::remove_dir_all(&scratch).unwrap();
    service.stop().await;
}
