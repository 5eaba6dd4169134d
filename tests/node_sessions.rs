//! Node sessions and runtime assignments over a real WebSocket (`/typedsocket`), on PostgreSQL
//! and on SQLite: opening and superseding sessions (racing creates of a node answer one bearer),
//! the session check of every node method, signed and placed assignments, the ingress environment
//! with its secret binding, rotation with `pushRuntimeChanged`, reported states and
//! `running_assignments`, the node methods refused over HTTP, a change made through another
//! controller reaching the node connected here, and the administrators' reads of nodes
//! (`listClusterNodes`, `getClusterNode`) and of one organization (`getOrganization`).

#[macro_use]
mod support;

use cloudly::api::methods::name;
use cloudly::api::wire;
use cloudly::api::{Limits, methods, requests};
use cloudly::contract::assignment::RuntimeAssignment;
use cloudly::contract::signing::{PublishedKey, verify};
use cloudly::contract::{DigestedRecord, Id, NodeId};
use cloudly::domain::Controller;
use cloudly::domain::identity::Role;
use cloudly::domain::plan::assignments::assignment_id;
use serde_json::{Value, json};
use std::sync::Arc;
use support::node_agent::{NodeAgent, WAIT, node_bearer};
use support::service::{Backend, Peer, TestService, designation_request, reference_of, spec_body};

fn id(text: &str) -> Id {
    Id::parse(text).unwrap()
}

fn node(text: &str) -> NodeId {
    NodeId::parse(text).unwrap()
}

fn controller(service: &TestService) -> Arc<Controller> {
    service.server.as_ref().unwrap().state.controller.clone()
}

/// Seeds cluster `c1` with service `ingress` on node-1 and node-2 and answers both node bearers.
async fn seeded(backend: Backend) -> (TestService, String, String) {
    let service = TestService::start(backend).await;
    service.seed_cluster("c1", "ingress").await;
    let first = node_bearer(&service, "c1", "node-1").await;
    let second = node_bearer(&service, "c1", "node-2").await;
    (service, first, second)
}

/// The node's assignments, each verified against the controller's signing key.
async fn assignments(service: &TestService, agent: &NodeAgent, session: &Value) -> Vec<Value> {
    let answer = agent
        .call(name::GET_RUNTIME_ASSIGNMENTS, wire::GetRuntimeAssignments { session: &session })
        .await
        .unwrap_or_else(|error| panic!("getRuntimeAssignments: {} {}", error.text, error.data));
    let keys = [PublishedKey::new(service.keys.signing.verifying_key())];
    let list = answer["assignments"].as_array().unwrap().clone();
    for signed in &list {
        verify::<RuntimeAssignment>(signed, &keys).unwrap_or_else(|error| panic!("{error}: {signed}"));
    }
    let ids: Vec<&str> = list.iter().map(|signed| signed["payload"]["id"].as_str().unwrap()).collect();
    let mut sorted = ids.clone();
    sorted.sort_unstable();
    assert_eq!(ids, sorted, "assignments are sorted by payload.id");
    list.into_iter().map(|signed| signed["payload"].clone()).collect()
}

fn of_service<'a>(list: &'a [Value], service_id: &str) -> Vec<&'a Value> {
    list.iter().filter(|assignment| assignment["serviceId"] == service_id).collect()
}

fn reference(assignment: &Value) -> Value {
    json!({ "id": assignment["id"], "generation": assignment["generation"], "digest": assignment["digest"] })
}

fn environment(assignment: &Value, name: &str) -> Value {
    assignment["workload"]["environment"]
        .as_array()
        .unwrap()
        .iter()
        .find(|entry| entry["name"] == name)
        .cloned()
        .unwrap_or(Value::Null)
}

on_both_stores!(a_session_opens_only_with_the_node_bearer_and_a_new_one_supersedes_it, |backend| async move {
    let (service, bearer, _) = seeded(backend).await;
    let first = NodeAgent::connect(&service).await;
    for (node_id, presented) in [("node-1", "sznb_wrong"), ("node-9", bearer.as_str())] {
        let error = first
            .call(
                name::OPEN_RUNTIME_SESSION,
                wire::OpenRuntimeSession { cluster_id: json!("c1"), node_id: json!(node_id), bearer: json!(presented) },
            )
            .await
            .unwrap_err();
        assert_eq!(error.data, json!({ "code": "principal-refused" }), "{node_id}");
    }
    let session = first.open("c1", "node-1", &bearer).await;
    assert_eq!(session["generation"], json!(1));
    assert_eq!(session["controller"], json!({ "kind": "cloudly", "id": "cloudly" }));
    assert_eq!(session["clusterId"], json!("c1"));
    assert_eq!(session["nodeId"], json!("node-1"));
    assert_eq!(session["runtimeNamespace"], json!("ns-main"));

    let second = NodeAgent::connect(&service).await;
    let newer = second.open("c1", "node-1", &bearer).await;
    assert_eq!(newer["generation"], json!(2));
    assert_ne!(newer["id"], session["id"]);
    assert_eq!(first.closed(WAIT).await.as_deref(), Some("session superseded"));

    // The superseded session presented on the current socket is refused, naming the current one.
    let error = second
        .call(name::GET_RUNTIME_ASSIGNMENTS, wire::GetRuntimeAssignments { session: &session })
        .await
        .unwrap_err();
    assert_eq!(error.code(), "principal-refused");
    assert_eq!(error.data["current"], newer);
    assert!(second.call(name::GET_RUNTIME_ASSIGNMENTS, wire::GetRuntimeAssignments { session: &newer }).await.is_ok());
    service.stop().await;
});

on_both_stores!(racing_creates_of_a_node_answer_one_bearer_and_it_opens_a_session, |backend| async move {
    let service = TestService::start(backend).await;
    service.put_pallet_cluster("c1").await;
    let create = || {
        service.admin_call(
            "putClusterNode",
            json!({ "clusterId": "c1", "node": { "id": "node-3", "runtimeNamespace": "ns-main", "hostAddresses": [] },
                    "rotateCredential": false }),
        )
    };
    let answers = futures_util::future::join_all((0..4).map(|_| create())).await;
    let bearers: Vec<&str> = answers.iter().filter_map(|answer| answer["bearer"].as_str()).collect();
    assert_eq!(bearers.len(), 1, "one create answers a bearer, the others null");
    assert!(answers.iter().all(|answer| answer["bearer"].is_string() || answer["bearer"].is_null()));
    let agent = NodeAgent::connect(&service).await;
    assert_eq!(agent.open("c1", "node-3", bearers[0]).await["generation"], json!(1));
    service.stop().await;
});

on_both_stores!(a_stale_or_foreign_session_is_refused, |backend| async move {
    let (service, first_bearer, second_bearer) = seeded(backend).await;
    let first = NodeAgent::connect(&service).await;
    let second = NodeAgent::connect(&service).await;
    let first_session = first.open("c1", "node-1", &first_bearer).await;
    let second_session = second.open("c1", "node-2", &second_bearer).await;

    // Another node's session on this socket.
    let error = first
        .call(name::GET_RUNTIME_ASSIGNMENTS, wire::GetRuntimeAssignments { session: &second_session })
        .await
        .unwrap_err();
    assert_eq!(error.code(), "principal-refused");
    assert_eq!(error.data["current"], first_session);
    // Each member must match.
    for (key, value) in [
        ("generation", json!(2)),
        ("id", json!("session-forged")),
        ("runtimeNamespace", json!("ns-other")),
        ("controller", json!({ "kind": "onebox", "id": "cloudly" })),
    ] {
        let mut forged = first_session.clone();
        forged[key] = value;
        let error = first
            .call(name::GET_RUNTIME_ASSIGNMENTS, wire::GetRuntimeAssignments { session: &forged })
            .await
            .unwrap_err();
        assert_eq!(error.code(), "principal-refused", "{key}");
    }
    // A socket that opened no session.
    let anonymous = NodeAgent::connect(&service).await;
    for (method, request) in [
        (name::GET_RUNTIME_ASSIGNMENTS, wire::to_request(&wire::GetRuntimeAssignments { session: &first_session })),
        (
            name::REPORT_RUNTIME_ASSIGNMENT_STATE,
            wire::to_request(&wire::ReportRuntimeAssignmentState {
                session: first_session.clone(),
                assignment: json!({ "id": "a", "generation": 1, "digest": format!("sha256:{}", "0".repeat(64)) }),
                state: json!("ready"),
            }),
        ),
    ] {
        let error = anonymous.call(method, request).await.unwrap_err();
        assert_eq!(error.data, json!({ "code": "principal-refused", "current": null }), "{method}");
    }
    // A malformed session is a request error, not a principal.
    let malformed = wire::GetRuntimeAssignments { session: json!({ "id": "x" }) };
    let error = first.call(name::GET_RUNTIME_ASSIGNMENTS, malformed).await.unwrap_err();
    assert_eq!(error.code(), "request-invalid");
    service.stop().await;
});

on_both_stores!(two_controller_processes_agree_on_the_current_session, |backend| async move {
    let (service, bearer, _) = seeded(backend).await;
    // A second controller process over the same database, keys and controller id.
    let store = cloudly::store::open(&service.database.url).await.unwrap();
    let other = Arc::new(Controller::new(store, service.keys.clone(), service.clock.clone()));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let other_server = cloudly::server::spawn(listener, other, Limits::default()).unwrap();
    let other_url = format!("http://{}", other_server.address);

    let here = NodeAgent::connect(&service).await;
    let there = NodeAgent::connect_to(&other_url).await;
    let old = here.open("c1", "node-1", &bearer).await;
    let current = there.open("c1", "node-1", &bearer).await;
    assert_eq!(current["generation"], json!(2));
    let error =
        here.call(name::GET_RUNTIME_ASSIGNMENTS, wire::GetRuntimeAssignments { session: &old }).await.unwrap_err();
    assert_eq!(error.code(), "principal-refused");
    assert_eq!(error.data["current"], current);
    assert_eq!(assignments(&service, &there, &current).await.len(), 1);

    // Opens racing in both processes get distinct generations.
    let open = json!({ "clusterId": "c1", "nodeId": "node-1", "bearer": bearer });
    let open = open.as_object().unwrap();
    let (this, that) = (controller(&service), other_server.state.controller.clone());
    let opened = futures_util::future::join_all([&this, &that, &this, &that].into_iter().map(|controller| {
        controller.open_runtime_session(requests::open_runtime_session(open).expect("a valid request"))
    }))
    .await;
    let mut generations: Vec<u64> = opened.into_iter().map(|session| session.unwrap().generation).collect();
    generations.sort_unstable();
    assert_eq!(generations, vec![3, 4, 5, 6]);
    other_server.stop().await.unwrap();
    service.stop().await;
});

on_both_stores!(a_change_made_through_another_controller_reaches_the_node_connected_here, |backend| async move {
    let (service, bearer, _) = seeded(backend).await;
    // Another controller on the database (on SQLite: another store of this process on the file).
    let peer = Peer::start(&service, cloudly::domain::ControllerSettings::default()).await;
    let mut agent = NodeAgent::connect(&service).await;
    let session = agent.open("c1", "node-1", &bearer).await;
    assignments(&service, &agent, &session).await;
    agent.drain_pushes();
    let mut body = spec_body("c1", "ingress");
    body["image"] = json!("registry.example/ingress:2");
    let mut request = json!({ "spec": body, "expectedRevision": 1 });
    request["identity"] = service.admin();
    peer.client.call("putServiceRuntimeSpec", request).await.unwrap();
    let push = agent.next_push(std::time::Duration::from_secs(3)).await.expect("the node is told, within 3 s");
    assert_eq!(push["request"], json!({ "kinds": ["assignments"] }));
    let list = assignments(&service, &agent, &session).await;
    assert_eq!(of_service(&list, "ingress")[0]["workload"]["image"], json!("registry.example/ingress:2"));
    peer.stop().await;
    service.stop().await;
});

on_both_stores!(assignments_are_signed_sorted_placed_and_reissued_only_on_change, |backend| async move {
    let (service, bearer, second_bearer) = seeded(backend).await;
    let mut api = spec_body("c1", "api");
    api["replicas"] = json!(3);
    api["image"] = json!("registry.example/api:2");
    service.admin_call("putServiceRuntimeSpec", json!({ "spec": api, "expectedRevision": null })).await;
    let mut lost = spec_body("c1", "lost");
    lost["placement"] = json!({ "nodeIds": ["node-9"] });
    service.admin_call("putServiceRuntimeSpec", json!({ "spec": lost, "expectedRevision": null })).await;

    let agent = NodeAgent::connect(&service).await;
    let session = agent.open("c1", "node-1", &bearer).await;
    let list = assignments(&service, &agent, &session).await;
    // node-1 runs replicas 0 and 2 of `api` and replica 0 of `ingress`; `lost` has no node.
    let expected_ids = {
        let mut ids = vec![
            assignment_id(&id("c1"), &id("api"), 0),
            assignment_id(&id("c1"), &id("api"), 2),
            assignment_id(&id("c1"), &id("ingress"), 0),
        ];
        ids.sort();
        ids.into_iter().map(|id| json!(id.as_str())).collect::<Vec<_>>()
    };
    assert_eq!(list.iter().map(|assignment| assignment["id"].clone()).collect::<Vec<_>>(), expected_ids);
    for assignment in &list {
        assert_eq!(assignment["nodeId"], json!("node-1"));
        assert_eq!(assignment["runtimeNamespace"], json!("ns-main"));
        assert_eq!(assignment["generation"], json!(1));
        assert_eq!(assignment["previous"], Value::Null);
        assert_eq!(assignment["controller"], json!({ "kind": "cloudly", "id": "cloudly" }));
        assert_eq!(assignment["specRevision"], json!(1));
        assert_eq!(assignment["workload"]["environment"], json!([{ "name": "LOG_LEVEL", "value": "info" }]));
        assert_eq!(assignment["workload"]["ports"], json!([{ "protocol": "tcp", "port": 443 }]));
        assert_eq!(assignment["workload"]["storage"], json!([]));
    }
    assert_eq!(of_service(&list, "api")[0]["workload"]["image"], json!("registry.example/api:2"));
    let second = NodeAgent::connect(&service).await;
    let second_session = second.open("c1", "node-2", &second_bearer).await;
    let on_second = assignments(&service, &second, &second_session).await;
    assert_eq!(on_second.len(), 2);
    assert_eq!(of_service(&on_second, "api")[0]["id"], json!(assignment_id(&id("c1"), &id("api"), 1).as_str()));

    // Asking again issues nothing new.
    assert_eq!(assignments(&service, &agent, &session).await, list);

    // A new spec revision issues the next generation of the changed service only, linking it.
    let mut api = spec_body("c1", "api");
    api["replicas"] = json!(1);
    api["image"] = json!("registry.example/api:3");
    service.admin_call("putServiceRuntimeSpec", json!({ "spec": api, "expectedRevision": 1 })).await;
    let after = assignments(&service, &agent, &session).await;
    let api_now = of_service(&after, "api");
    assert_eq!(api_now.len(), 1, "replica 2 left the set");
    let api_before = list.iter().find(|assignment| assignment["id"] == api_now[0]["id"]).unwrap();
    assert_eq!(api_now[0]["generation"], json!(2));
    assert_eq!(api_now[0]["previous"], reference(api_before));
    assert_eq!(api_now[0]["specRevision"], json!(2));
    assert_eq!(of_service(&after, "ingress"), of_service(&list, "ingress"));
    assert!(of_service(&assignments(&service, &second, &second_session).await, "api").is_empty());

    // Deleting a service stops its assignments.
    service.admin_call("deleteService", json!({ "clusterId": "c1", "serviceId": "api", "expectedRevision": 2 })).await;
    assert!(of_service(&assignments(&service, &agent, &session).await, "api").is_empty());
    service.stop().await;
});

on_both_stores!(the_designated_ingress_carries_the_ingress_environment_as_a_secret_binding, |backend| async move {
    let (service, bearer, second_bearer) = seeded(backend).await;
    let designation = service
        .admin_call("designateClusterIngress", designation_request("c1", "ingress", "m1", 1, Value::Null))
        .await["designation"]
        .clone();
    let agent = NodeAgent::connect(&service).await;
    let session = agent.open("c1", "node-1", &bearer).await;
    let list = assignments(&service, &agent, &session).await;
    let ingress = of_service(&list, "ingress")[0].clone();
    assert_eq!(ingress["generation"], json!(2), "the designation re-issued the assignment");
    assert_eq!(
        ingress["workload"]["environment"],
        json!([
            { "name": "LOG_LEVEL", "value": "info" },
            { "name": "SERVEZONE_CLUSTER_INGRESS_BEARER", "secret": designation["credential"]["secretVersion"] },
            { "name": "SERVEZONE_CLUSTER_NODE_ID", "value": "node-1" },
            { "name": "SERVEZONE_CLUSTER_RELAY_ORIGIN", "value": "https://relay.example.net:8443" },
        ])
    );

    // The bearer is never in the record, and resolves only on the node's current session.
    let version = &designation["credential"]["secretVersion"];
    let sealed = service
        .store
        .get_secret(&id(version["secretId"].as_str().unwrap()), &id(version["secretVersionId"].as_str().unwrap()))
        .await
        .unwrap()
        .unwrap();
    let ingress_bearer = cloudly::domain::secrets::open(service.keys.secret_key(), &sealed).unwrap();
    let request = wire::to_request(&wire::GetRuntimeAssignments { session: &session });
    let raw = agent.envelope(name::GET_RUNTIME_ASSIGNMENTS, request).await.to_string();
    assert!(!raw.contains(ingress_bearer.expose()));
    let resolved = agent
        .call(
            name::RESOLVE_RUNTIME_SECRET_BINDINGS,
            wire::ResolveRuntimeSecretBindings { session: &session, assignment: &reference(&ingress) },
        )
        .await
        .unwrap();
    assert_eq!(
        resolved,
        json!({ "values": [{ "name": "SERVEZONE_CLUSTER_INGRESS_BEARER", "value": ingress_bearer.expose() }] })
    );
    // Another node's session, a stale generation of the assignment, and another node's
    // assignment are refused.
    let second = NodeAgent::connect(&service).await;
    let second_session = second.open("c1", "node-2", &second_bearer).await;
    let error = second
        .call(
            name::RESOLVE_RUNTIME_SECRET_BINDINGS,
            wire::ResolveRuntimeSecretBindings { session: &session, assignment: &reference(&ingress) },
        )
        .await
        .unwrap_err();
    assert_eq!(error.code(), "principal-refused");
    assert!(!error.data.to_string().contains(ingress_bearer.expose()));
    let error = second
        .call(
            name::RESOLVE_RUNTIME_SECRET_BINDINGS,
            wire::ResolveRuntimeSecretBindings { session: &second_session, assignment: &reference(&ingress) },
        )
        .await
        .unwrap_err();
    assert_eq!(error.data, json!({ "code": "not-found", "what": "assignment" }));
    let mut stale = reference(&ingress);
    stale["generation"] = json!(1);
    let stale = wire::ResolveRuntimeSecretBindings { session: &session, assignment: &stale };
    let error = agent.call(name::RESOLVE_RUNTIME_SECRET_BINDINGS, stale).await.unwrap_err();
    assert_eq!(error.code(), "not-found");
    // A newer session of node-1 makes the old one resolve nothing.
    let newer_agent = NodeAgent::connect(&service).await;
    newer_agent.open("c1", "node-1", &bearer).await;
    let error = newer_agent
        .call(
            name::RESOLVE_RUNTIME_SECRET_BINDINGS,
            wire::ResolveRuntimeSecretBindings { session: &session, assignment: &reference(&ingress) },
        )
        .await
        .unwrap_err();
    assert_eq!(error.code(), "principal-refused");
    service.stop().await;
});

on_both_stores!(a_rotation_issues_a_new_generation_and_pushes_the_node, |backend| async move {
    let (service, bearer, _) = seeded(backend).await;
    let first = service
        .admin_call("designateClusterIngress", designation_request("c1", "ingress", "m1", 1, Value::Null))
        .await["designation"]
        .clone();
    let mut agent = NodeAgent::connect(&service).await;
    let session = agent.open("c1", "node-1", &bearer).await;
    let before = of_service(&assignments(&service, &agent, &session).await, "ingress")[0].clone();
    agent.drain_pushes();

    let second = service
        .admin_call("designateClusterIngress", designation_request("c1", "ingress", "m2", 1, reference_of(&first)))
        .await["designation"]
        .clone();
    let push = agent.next_push(WAIT).await.expect("the node is told its assignments changed");
    assert_eq!(push["method"], json!("pushRuntimeChanged"));
    assert_eq!(push["request"], json!({ "kinds": ["assignments"] }));
    assert_eq!(push["correlation"]["phase"], json!("request"));

    let after = of_service(&assignments(&service, &agent, &session).await, "ingress")[0].clone();
    assert_eq!(after["id"], before["id"]);
    assert_eq!(after["generation"], json!(before["generation"].as_u64().unwrap() + 1));
    assert_eq!(after["previous"], reference(&before));
    let binding = environment(&after, "SERVEZONE_CLUSTER_INGRESS_BEARER");
    assert_eq!(binding["secret"], second["credential"]["secretVersion"]);
    assert_ne!(binding["secret"], first["credential"]["secretVersion"]);
    let values = agent
        .call(
            name::RESOLVE_RUNTIME_SECRET_BINDINGS,
            wire::ResolveRuntimeSecretBindings { session: &session, assignment: &reference(&after) },
        )
        .await
        .unwrap();
    let version = &second["credential"]["secretVersion"];
    let sealed = service
        .store
        .get_secret(&id(version["secretId"].as_str().unwrap()), &id(version["secretVersionId"].as_str().unwrap()))
        .await
        .unwrap()
        .unwrap();
    let rotated = cloudly::domain::secrets::open(service.keys.secret_key(), &sealed).unwrap();
    assert_eq!(values["values"][0]["value"], json!(rotated.expose()));
    // The previous generation is no longer in the node's set.
    let error = agent
        .call(
            name::RESOLVE_RUNTIME_SECRET_BINDINGS,
            wire::ResolveRuntimeSecretBindings { session: &session, assignment: &reference(&before) },
        )
        .await
        .unwrap_err();
    assert_eq!(error.code(), "not-found");
    service.stop().await;
});

on_both_stores!(a_designation_reissues_the_assignments_in_the_background, |backend| async move {
    let (service, bearer, _) = seeded(backend).await;
    let controller = controller(&service);
    let mut agent = NodeAgent::connect(&service).await;
    let session = agent.open("c1", "node-1", &bearer).await;
    let before = of_service(&assignments(&service, &agent, &session).await, "ingress")[0].clone();
    agent.drain_pushes();
    let stored_ingress = || async {
        let stored = service.store.node_assignments(&id("c1"), &node("node-1")).await.unwrap();
        let ingress: Vec<_> = stored
            .readable
            .into_iter()
            .map(|stored| stored.signed.payload)
            .filter(|a| a.service_id == id("ingress"))
            .collect();
        assert_eq!(ingress.len(), 1);
        DigestedRecord::to_value(&ingress[0])
    };

    // Once the background reconcile has settled, the stored set (read past the domain, so no
    // ask reconciled it) carries the designation's credential, and the node was told.
    let first = service
        .admin_call("designateClusterIngress", designation_request("c1", "ingress", "m1", 1, Value::Null))
        .await["designation"]
        .clone();
    controller.assignments_settled(&id("c1")).await;
    let after = stored_ingress().await;
    assert_eq!(after["generation"], json!(before["generation"].as_u64().unwrap() + 1));
    assert_eq!(environment(&after, "SERVEZONE_CLUSTER_INGRESS_BEARER")["secret"], first["credential"]["secretVersion"]);
    let push = agent.next_push(WAIT).await.expect("the node is told its assignments changed");
    assert_eq!(push["request"], json!({ "kinds": ["assignments"] }));

    // A burst of rotations coalesces; once settled, the set carries the last credential.
    let mut current = first;
    for index in 2..=6 {
        let mutation = format!("m{index}");
        current = service
            .admin_call(
                "designateClusterIngress",
                designation_request("c1", "ingress", &mutation, 1, reference_of(&current)),
            )
            .await["designation"]
            .clone();
    }
    controller.assignments_settled(&id("c1")).await;
    let last = stored_ingress().await;
    assert_eq!(
        environment(&last, "SERVEZONE_CLUSTER_INGRESS_BEARER")["secret"],
        current["credential"]["secretVersion"]
    );
    assert!(last["generation"].as_u64().unwrap() > after["generation"].as_u64().unwrap());
    // The node's ask finds nothing left to do.
    assert_eq!(of_service(&assignments(&service, &agent, &session).await, "ingress")[0], &last);
    // Nothing is pending any more: awaiting again returns at once.
    controller.assignments_settled(&id("c1")).await;
    controller.all_assignments_settled().await;
    service.stop().await;
});

on_both_stores!(a_burst_of_designations_is_reissued_once_per_interval, |backend| async move {
    let (service, _, _) = seeded(backend).await;
    // A controller over the same store whose background runs of one cluster start at least 2 s
    // apart: a burst within that time is one run at once and one re-run after the interval.
    let settings = cloudly::domain::ControllerSettings {
        assignment_reconcile_interval_ms: 2_000,
        ..cloudly::domain::ControllerSettings::default()
    };
    let other = Controller::with_settings(service.store.clone(), service.keys.clone(), service.clock.clone(), settings);
    let ingress = assignment_id(&id("c1"), &id("ingress"), 0);
    let generation = || async {
        let heads = service.store.node_assignments(&id("c1"), &node("node-1")).await.unwrap();
        heads.readable.into_iter().find(|stored| stored.signed.payload.id == ingress).unwrap().signed.payload.generation
    };
    let before = generation().await;
    let admin = service.admin();
    let started = std::time::Instant::now();
    let mut current = Value::Null;
    for index in 1..=5 {
        let mut request = designation_request("c1", "ingress", &format!("m{index}"), 1, current.clone());
        request["identity"] = admin.clone();
        let answer = methods::call(&other, "designateClusterIngress", &request).await.unwrap();
        current = reference_of(&answer["designation"]);
    }
    assert!(started.elapsed() < std::time::Duration::from_millis(1_500), "the burst took too long to test this");
    other.assignments_settled(&id("c1")).await;
    assert!(started.elapsed() >= std::time::Duration::from_millis(2_000), "the re-run waited for the interval");
    let after = generation().await;
    assert!((before + 1..=before + 2).contains(&after), "5 designations, {} reconciles", after - before);
    let stored = service.store.get_assignment(&id("c1"), &ingress, after).await.unwrap().unwrap();
    let designation = service.store.current_designation(&id("c1")).await.unwrap().unwrap();
    let carries = stored.signed.payload.workload.environment.iter().any(|entry| {
        matches!(&entry.source, cloudly::contract::assignment::EnvironmentSource::Secret(version)
            if *version == designation.credential.secret_version)
    });
    assert!(carries, "the last run carries the last designation's credential");
    service.stop().await;
});

on_both_stores!(a_cluster_without_relay_origin_gives_the_designated_ingress_no_assignment, |backend| async move {
    let (service, bearer, _) = seeded(backend).await;
    let cluster = |origin: Value| {
        json!({ "id": "c1", "organizationId": "org", "runtime": { "phase": "pallet", "generation": 3 },
                "relayOrigin": origin, "fleetCutoverIngressDesignation": null })
    };
    service.admin_call("putCluster", json!({ "cluster": cluster(Value::Null), "expectedRevision": 1 })).await;
    service.admin_call("designateClusterIngress", designation_request("c1", "ingress", "m1", 1, Value::Null)).await;
    let agent = NodeAgent::connect(&service).await;
    let session = agent.open("c1", "node-1", &bearer).await;
    assert!(assignments(&service, &agent, &session).await.is_empty());
    service
        .admin_call(
            "putCluster",
            json!({ "cluster": cluster(json!("https://relay.example.net")), "expectedRevision": 2 }),
        )
        .await;
    let list = assignments(&service, &agent, &session).await;
    assert_eq!(environment(&list[0], "SERVEZONE_CLUSTER_RELAY_ORIGIN")["value"], json!("https://relay.example.net"));
    service.stop().await;
});

on_both_stores!(a_ready_report_makes_an_assignment_running_until_a_new_session, |backend| async move {
    let (service, bearer, second_bearer) = seeded(backend).await;
    let controller = controller(&service);
    let (cluster, ingress, node_1) = (id("c1"), id("ingress"), node("node-1"));
    let running = || async { controller.running_assignments(&cluster, &ingress, &node_1).await.unwrap() };
    let agent = NodeAgent::connect(&service).await;
    let session = agent.open("c1", "node-1", &bearer).await;
    let assignment = of_service(&assignments(&service, &agent, &session).await, "ingress")[0].clone();
    assert!(running().await.is_empty());
    let report = |state: &str| wire::ReportRuntimeAssignmentState {
        session: session.clone(),
        assignment: reference(&assignment),
        state: json!(state),
    };

    assert_eq!(
        agent.call(name::REPORT_RUNTIME_ASSIGNMENT_STATE, report("starting")).await.unwrap(),
        json!({ "recorded": true })
    );
    assert!(running().await.is_empty());
    agent.call(name::REPORT_RUNTIME_ASSIGNMENT_STATE, report("ready")).await.unwrap();
    let now = running().await;
    assert_eq!(now.len(), 1);
    assert_eq!(DigestedRecord::to_value(&now[0]), assignment);
    agent.call(name::REPORT_RUNTIME_ASSIGNMENT_STATE, report("failed")).await.unwrap();
    assert!(running().await.is_empty());
    agent.call(name::REPORT_RUNTIME_ASSIGNMENT_STATE, report("ready")).await.unwrap();
    assert_eq!(running().await.len(), 1);

    // A bad state and another node's assignment are refused.
    let error = agent.call(name::REPORT_RUNTIME_ASSIGNMENT_STATE, report("running")).await.unwrap_err();
    assert_eq!(error.code(), "request-invalid");
    let second = NodeAgent::connect(&service).await;
    let second_session = second.open("c1", "node-2", &second_bearer).await;
    let theirs = of_service(&assignments(&service, &second, &second_session).await, "ingress")[0].clone();
    let error = agent
        .call(
            name::REPORT_RUNTIME_ASSIGNMENT_STATE,
            wire::ReportRuntimeAssignmentState {
                session: &session,
                assignment: &reference(&theirs),
                state: &json!("ready"),
            },
        )
        .await
        .unwrap_err();
    assert_eq!(error.data, json!({ "code": "not-found", "what": "assignment" }));

    // A new session of node-1: not running until it reports again.
    let renewed = NodeAgent::connect(&service).await;
    let new_session = renewed.open("c1", "node-1", &bearer).await;
    assert!(running().await.is_empty());
    renewed
        .call(
            name::REPORT_RUNTIME_ASSIGNMENT_STATE,
            wire::ReportRuntimeAssignmentState {
                session: &new_session,
                assignment: &reference(&assignment),
                state: &json!("ready"),
            },
        )
        .await
        .unwrap();
    assert_eq!(running().await.len(), 1);
    // A new generation (the designation) is not running until reported. The designation
    // re-issues the assignments in the background; wait for that reconcile.
    service.admin_call("designateClusterIngress", designation_request("c1", "ingress", "m1", 1, Value::Null)).await;
    controller.assignments_settled(&cluster).await;
    assert!(running().await.is_empty());
    service.stop().await;
});

on_both_stores!(node_methods_over_http_are_principal_refused, |backend| async move {
    let (service, bearer, _) = seeded(backend).await;
    let agent = NodeAgent::connect(&service).await;
    let session = agent.open("c1", "node-1", &bearer).await;
    for (method, request) in [
        (
            name::OPEN_RUNTIME_SESSION,
            wire::to_request(&wire::OpenRuntimeSession { cluster_id: "c1", node_id: "node-1", bearer: &bearer }),
        ),
        (name::GET_RUNTIME_ASSIGNMENTS, wire::to_request(&wire::GetRuntimeAssignments { session: &session })),
        (
            name::RESOLVE_RUNTIME_SECRET_BINDINGS,
            wire::to_request(&wire::ResolveRuntimeSecretBindings { session: &session, assignment: &Value::Null }),
        ),
        (
            name::REPORT_RUNTIME_ASSIGNMENT_STATE,
            wire::to_request(&wire::ReportRuntimeAssignmentState {
                session: &session,
                assignment: &Value::Null,
                state: &json!("ready"),
            }),
        ),
    ] {
        match service.client.call(method, request).await {
            Err(cloudly::client::CallError::Typed(error)) => {
                assert_eq!(error.data, json!({ "code": "principal-refused" }), "{method}");
            }
            other => panic!("{method}: {other:?}"),
        }
    }
    // Administrator methods also answer on the socket.
    let mut request = json!({ "clusterId": "c1" });
    request["identity"] = service.admin();
    let nodes = agent.call("listClusterNodes", request).await.unwrap();
    assert_eq!(nodes["nodes"].as_array().unwrap().len(), 2);
    // An unknown method is answered as over HTTP.
    let error = agent.call("noSuchMethod", json!({})).await.unwrap_err();
    assert_eq!(error.code(), "unknown-method");
    service.stop().await;
});

on_both_stores!(concurrent_reconciles_in_two_processes_issue_one_generation, |backend| async move {
    let (service, _, _) = seeded(backend).await;
    let store = cloudly::store::open(&service.database.url).await.unwrap();
    let other = Arc::new(Controller::new(store, service.keys.clone(), service.clock.clone()));
    let this = controller(&service);
    // A new spec revision written past the domain, so no reconcile ran yet.
    let mut body = spec_body("c1", "ingress");
    body["image"] = json!("registry.example/ingress:2");
    let body = cloudly::contract::inventory::parse_service_spec_body(&body).unwrap();
    let written = service.store.put_service_spec(&body, Some(1)).await.unwrap();
    assert!(matches!(written, cloudly::store::PutOutcome::Written(_)));

    let cluster = id("c1");
    let reconciles = futures_util::future::join_all(
        [&this, &other, &this, &other, &this, &other]
            .into_iter()
            .map(|controller| controller.reconcile_assignments(&cluster, &cloudly::store::FactScope::Cluster)),
    )
    .await;
    let mut touched = std::collections::BTreeSet::new();
    for outcome in reconciles {
        touched.extend(outcome.unwrap().nodes);
    }
    assert_eq!(touched, [node("node-1"), node("node-2")].into_iter().collect());
    for index in 0..2 {
        let assignment = assignment_id(&id("c1"), &id("ingress"), index);
        let second = service.store.get_assignment(&id("c1"), &assignment, 2).await.unwrap().expect("generation 2");
        assert!(second.active);
        assert_eq!(second.signed.payload.spec_revision, 2);
        assert!(service.store.get_assignment(&id("c1"), &assignment, 3).await.unwrap().is_none());
        let first = service.store.get_assignment(&id("c1"), &assignment, 1).await.unwrap().expect("generation 1 kept");
        assert!(!first.active);
        assert_eq!(second.signed.payload.previous, Some(first.signed.payload.reference()));
    }
    // The spec was written past the domain, so no status was judged for it: judge them before
    // the story ends (its full pass check would count the stale verdict).
    this.refresh_service_statuses(&cluster, &cloudly::store::FactScope::Cluster).await.unwrap();
    service.stop().await;
});

on_both_stores!(list_cluster_nodes_names_the_session_and_the_connection, |backend| async move {
    let (service, bearer, _) = seeded(backend).await;
    let nodes =
        || async { service.admin_call("listClusterNodes", json!({ "clusterId": "c1" })).await["nodes"].clone() };
    assert_eq!(nodes().await[0]["session"], Value::Null);
    assert_eq!(nodes().await[0]["connected"], json!(false));
    let agent = NodeAgent::connect(&service).await;
    let session = agent.open("c1", "node-1", &bearer).await;
    let listed = nodes().await;
    assert_eq!(listed[0]["session"], session);
    assert_eq!(listed[0]["connected"], json!(true));
    assert_eq!(listed[1]["connected"], json!(false));
    drop(agent);
    for _ in 0..100 {
        if nodes().await[0]["connected"] == json!(false) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let listed = nodes().await;
    assert_eq!(listed[0]["connected"], json!(false), "a closed socket is not connected");
    assert_eq!(listed[0]["session"], session, "the session stays current until a newer one opens");
    service.stop().await;
});

on_both_stores!(get_cluster_node_and_get_organization_read_one_record_for_every_role, |backend| async move {
    let (service, bearer, _) = seeded(backend).await;
    let viewer = serde_json::to_value(service.identity("viewer-1", Role::Viewer)).unwrap();
    let read = async |method: &str, request: Value| service.call_as(&viewer, method, request).await;
    let node_1 = json!({ "clusterId": "c1", "nodeId": "node-1" });
    let answer = read("getClusterNode", node_1.clone()).await.unwrap();
    assert_eq!(
        answer,
        json!({ "node": { "id": "node-1", "runtimeNamespace": "ns-main", "hostAddresses": [],
                          "session": null, "connected": false } })
    );
    let agent = NodeAgent::connect(&service).await;
    let session = agent.open("c1", "node-1", &bearer).await;
    let answer = read("getClusterNode", node_1.clone()).await.unwrap();
    assert_eq!((&answer["node"]["session"], &answer["node"]["connected"]), (&session, &json!(true)));
    // What `listClusterNodes` lists for the node, plus its runtime namespace; never the bearer
    // or its hash.
    let listed = read("listClusterNodes", json!({ "clusterId": "c1" })).await.unwrap()["nodes"][0].clone();
    let mut summary = answer["node"].clone();
    summary.as_object_mut().unwrap().remove("runtimeNamespace");
    assert_eq!(summary, listed);
    let stored = service.store.get_node(&id("c1"), &node("node-1")).await.unwrap().unwrap();
    let hash: String = stored.bearer_hash.iter().map(|byte| format!("{byte:02x}")).collect();
    let text = answer.to_string();
    assert!(!text.contains(&bearer) && !text.contains(&hash), "{text}");

    let organization = read("getOrganization", json!({ "organizationId": "org" })).await.unwrap();
    assert_eq!(organization, json!({ "organization": { "id": "org", "name": "Org" } }));

    // A missing record is named; a malformed member is `request-invalid`.
    for (method, request, what) in [
        ("getClusterNode", json!({ "clusterId": "c9", "nodeId": "node-1" }), "cluster"),
        ("getClusterNode", json!({ "clusterId": "c1", "nodeId": "node-9" }), "node"),
        ("getOrganization", json!({ "organizationId": "org-9" }), "organization"),
    ] {
        let error = read(method, request).await.unwrap_err();
        assert_eq!(error.data, json!({ "code": "not-found", "what": what }), "{method}");
    }
    let error = read("getClusterNode", json!({ "clusterId": "c1", "nodeId": "Node 1" })).await.unwrap_err();
    assert_eq!(error.data["violations"], json!(["request nodeId must be a NodeId"]));
    let error = read("getOrganization", json!({ "organizationId": "org", "zz": 1 })).await.unwrap_err();
    assert_eq!(error.code(), "request-invalid");
    service.stop().await;
});

on_both_stores!(frames_up_to_sixteen_mebibytes_are_read_and_larger_ones_close_the_socket, |backend| async move {
    let (service, bearer, _) = seeded(backend).await;
    let agent = NodeAgent::connect(&service).await;
    let session = agent.open("c1", "node-1", &bearer).await;
    // Larger than the HTTP body limit, within the frame limit: answered (its extra member named).
    let padding = "x".repeat(2 * 1024 * 1024);
    let error =
        agent.call(name::GET_RUNTIME_ASSIGNMENTS, json!({ "session": session, "padding": padding })).await.unwrap_err();
    assert_eq!(error.code(), "request-invalid");
    assert!(agent.closed(std::time::Duration::from_millis(100)).await.is_none());
    // Beyond 16 MiB: the controller drops the socket.
    let huge = "x".repeat(17 * 1024 * 1024);
    agent.send_raw(json!({ "method": "getRuntimeAssignments", "request": { "padding": huge } }).to_string());
    assert!(agent.closed(WAIT).await.is_some());
    service.stop().await;
});

on_both_stores!(a_silent_socket_is_closed_and_a_ponging_one_stays, |backend| async move {
    let (service, bearer, _) = seeded(backend).await;
    controller(&service).links.set_liveness(cloudly::domain::sessions::Liveness {
        ping_interval: std::time::Duration::from_millis(100),
        silence_limit: std::time::Duration::from_millis(400),
    });
    // The agent reads all the time, so its WebSocket library answers every ping.
    let agent = NodeAgent::connect(&service).await;
    let session = agent.open("c1", "node-1", &bearer).await;
    // A client that never reads sends no pong.
    let url = format!("{}/typedsocket", service.base_url.replacen("http://", "ws://", 1));
    let (mut silent, _) = tokio_tungstenite::connect_async(url).await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    assert!(agent.closed(std::time::Duration::from_millis(10)).await.is_none(), "the ponging socket stays open");
    assert!(agent.call(name::GET_RUNTIME_ASSIGNMENTS, wire::GetRuntimeAssignments { session: &session }).await.is_ok());
    use futures_util::StreamExt as _;
    // The controller closed it: a close frame, or (when the client's queued pongs hit the closed
    // connection first) an error or the end of the stream.
    let ended = async {
        loop {
            match silent.next().await {
                Some(Ok(tokio_tungstenite::tungstenite::Message::Close(frame))) => {
                    return frame.map(|frame| frame.reason.to_string());
                }
                Some(Ok(_)) => continue,
                Some(Err(error)) => return Some(format!("error: {error}")),
                None => return Some("ended".to_owned()),
            }
        }
    };
    let ended = tokio::time::timeout(WAIT, ended).await.expect("the silent socket is closed");
    assert!(ended.is_some());
    service.stop().await;
});
