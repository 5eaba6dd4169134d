//! `registerClusterIngress` over real HTTP, with a real node agent on `/typedsocket` and a
//! connected relay, on PostgreSQL and on SQLite (`04-registration.md`, "`registerClusterIngress`").
//!
//! Every refusal is reached from a state where every earlier check passes and exactly this one
//! fails; each asserts the exact error text and data, the `retryAfterMs`, that the seed's reader
//! and validator accept the data, and that nothing was recorded.

#[macro_use]
mod support;

use cloudly::client::TypedError;
use cloudly::contract::registration::{
    CLUSTER_INGRESS_REGISTRATION_REFUSAL_PATH, RefusalReason, read_cluster_ingress_registration_refusal,
    read_protocol_refusal, validate_cluster_ingress_registration_refusal,
};
use cloudly::domain::ControllerSettings;
use cloudly::domain::registration::RetryAfterTable;
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use support::ingress::{
    CLUSTER, IngressWorld, NODE, RELAY, SERVICE, assignment_reference, captured_logs, connect_relay, log_text,
    register, registration,
};
use support::node_agent::{NodeAgent, node_bearer};
use support::service::{Backend, Peer, TestService, spec_body};
use tokio::sync::{Notify, oneshot};
use tokio::task::JoinHandle;

/// Asserts the refusal of `reason` with the default `retryAfterMs`.
fn expect_refusal(result: Result<Value, TypedError>, reason: RefusalReason) {
    expect_refusal_after(result, reason, reason.default_retry_after_ms());
}

/// Asserts `result` is exactly the refusal of `reason` with `retry_after_ms`, readable by the
/// seed's reader and passing its validator.
fn expect_refusal_after(result: Result<Value, TypedError>, reason: RefusalReason, retry_after_ms: u64) {
    let error = result.expect_err(&format!("expected {reason}"));
    assert_eq!(error.text, format!("cluster ingress registration refused: {reason}"), "{}", error.data);
    assert_eq!(
        error.data,
        json!({ "code": "cluster-ingress-registration-refused", "reason": reason.as_str(), "retryAfterMs": retry_after_ms })
    );
    assert!((1_000..=300_000).contains(&retry_after_ms));
    let read = read_cluster_ingress_registration_refusal(&error.data).expect("the seed's reader reads the refusal");
    assert_eq!((read.reason(), read.retry_after_ms()), (reason, retry_after_ms));
    assert!(
        validate_cluster_ingress_registration_refusal(&error.data, CLUSTER_INGRESS_REGISTRATION_REFUSAL_PATH)
            .is_empty()
    );
}

fn expect_protocol_refused(result: Result<Value, TypedError>) {
    let error = result.expect_err("expected protocol-refused");
    assert_eq!(error.text, "protocol refused");
    assert_eq!(
        error.data,
        json!({ "code": "protocol-refused", "offer": { "name": "serve.zone/cluster-ingress", "minimum": 1, "maximum": 1 } })
    );
    assert!(read_protocol_refusal(&error.data).is_some());
}

on_both_stores!(the_happy_path_is_accepted_recorded_and_listed, |backend| async move {
    let world = IngressWorld::build(backend).await;
    let accepted =
        world.register(world.registration()).await.unwrap_or_else(|error| panic!("{} {}", error.text, error.data));
    assert_eq!(
        accepted,
        json!({ "accepted": true, "revision": null, "protocol": { "name": "serve.zone/cluster-ingress", "minimum": 1, "maximum": 1 } })
    );
    // Once a route table exists, the answer carries its revision.
    world
        .service
        .admin_call(
            "putClusterIngressRoute",
            json!({ "clusterId": CLUSTER, "route": { "hostname": "app.example.net", "serviceId": SERVICE, "protocol": "tcp", "port": 443 } }),
        )
        .await;
    let mut without_capabilities = world.registration();
    without_capabilities.as_object_mut().unwrap().remove("capabilities");
    // A wider offer that shares version 1 is accepted too.
    without_capabilities["protocol"]["maximum"] = json!(3);
    assert_eq!(world.register(without_capabilities).await.unwrap()["revision"], json!(1));

    let listed = world.registrations().await;
    assert_eq!(listed.len(), 2);
    let (newest, oldest) = (&listed[0], &listed[1]);
    assert!(newest["sequence"].as_u64() > oldest["sequence"].as_u64());
    assert_eq!(oldest["capabilities"], json!(["http2", "websocket"]));
    assert!(newest.get("capabilities").is_none());
    for entry in &listed {
        assert_eq!(entry["clusterId"], json!(CLUSTER));
        assert_eq!(entry["nodeId"], json!(NODE));
        assert_eq!(entry["version"], json!("1.4.2"));
        assert_eq!(entry["protocolVersion"], json!(1));
        assert_eq!(entry["relayConnection"]["relayId"], json!(RELAY));
        assert_eq!(entry["relayConnection"]["epoch"], json!(1));
        assert_eq!(entry["designation"], support::service::reference_of(&world.designation));
        assert_eq!(entry["assignment"], assignment_reference(&world.assignment));
        assert_eq!(entry["session"], json!({ "id": world.session["id"], "generation": world.session["generation"] }));
        assert_eq!(entry["registeredAt"], json!(support::service::T0));
    }
    // Paging, the node filter and a viewer's read.
    let viewer =
        serde_json::to_value(world.service.identity("viewer-1", cloudly::domain::identity::Role::Viewer)).unwrap();
    let page = world
        .service
        .call_as(&viewer, "listClusterIngressRegistrations", json!({ "clusterId": CLUSTER, "limit": 1 }))
        .await
        .unwrap();
    assert_eq!(page["registrations"].as_array().unwrap().len(), 1);
    assert_eq!(page["nextBefore"], newest["sequence"]);
    let rest = world
        .service
        .admin_call("listClusterIngressRegistrations", json!({ "clusterId": CLUSTER, "before": page["nextBefore"] }))
        .await;
    assert_eq!(rest["registrations"], json!([oldest]));
    assert_eq!(rest["nextBefore"], Value::Null);
    let other_node = world
        .service
        .admin_call("listClusterIngressRegistrations", json!({ "clusterId": CLUSTER, "nodeId": "node-2" }))
        .await;
    assert_eq!(other_node["registrations"], json!([]));
    // The CLI lists the same.
    let identity = std::env::temp_dir().join(format!("cloudly-registrations-{}.json", uuid::Uuid::new_v4().simple()));
    std::fs::write(&identity, world.service.admin().to_string()).unwrap();
    let printed = world
        .service
        .cli(&identity, &["ingress", "registrations", "--cluster", CLUSTER, "--node", NODE, "-o", "json"])
        .await;
    assert_eq!(printed["registrations"], json!(listed));
    let printed = world
        .service
        .cli(&identity, &["ingress", "registrations", "--cluster", CLUSTER, "--limit", "1", "-o", "json"])
        .await;
    assert_eq!(printed["nextBefore"], newest["sequence"]);
    let _ = std::fs::remove_file(&identity);
    for (request, code) in [
        (json!({ "clusterId": "nope" }), "not-found"),
        (json!({ "clusterId": CLUSTER, "limit": 0 }), "request-invalid"),
        (json!({ "clusterId": CLUSTER, "limit": 501 }), "request-invalid"),
        (json!({ "clusterId": CLUSTER, "bearer": "x" }), "request-invalid"),
    ] {
        let error = world.service.call_as(&viewer, "listClusterIngressRegistrations", request).await.unwrap_err();
        assert_eq!(error.code(), code);
    }
    world.stop().await;
});

on_both_stores!(the_protocol_is_judged_before_the_shape_and_the_bearer, |backend| async move {
    let world = IngressWorld::build(backend).await;
    let client = &world.service.client;
    let good_protocol = world.registration()["protocol"].clone();
    let mut other_name = world.registration();
    other_name["protocol"]["name"] = json!("serve.zone/other");
    let mut disjoint = world.registration();
    disjoint["protocol"] = json!({ "name": "serve.zone/cluster-ingress", "minimum": 2, "maximum": 3 });
    let mut inverted = world.registration();
    inverted["protocol"] = json!({ "name": "serve.zone/cluster-ingress", "minimum": 1, "maximum": 0 });
    let mut extra_key = world.registration();
    extra_key["protocol"]["extra"] = json!(true);
    let mut missing = world.registration();
    missing.as_object_mut().unwrap().remove("protocol");
    for request in [
        json!("garbage"),
        json!(null),
        json!([good_protocol]),
        json!({ "bearer": 7, "protocol": "serve.zone/cluster-ingress" }),
        other_name,
        disjoint,
        inverted,
        extra_key,
        missing,
    ] {
        // With and without the relay token, with a wrong bearer: the protocol answers first.
        expect_protocol_refused(register(client, request.clone(), None).await);
        expect_protocol_refused(register(client, request, Some(&world.token)).await);
    }
    // A garbage body with a good offer is past the protocol step.
    expect_refusal(
        register(client, json!({ "protocol": good_protocol, "bearer": 7 }), Some(&world.token)).await,
        RefusalReason::RegistrationInvalid,
    );
    assert!(world.registrations().await.is_empty());
    world.stop().await;
});

on_both_stores!(not_ready_while_draining_comes_before_every_other_reason, |backend| async move {
    let world = IngressWorld::build(backend).await;
    world.service.controller().begin_draining();
    expect_refusal(world.register(world.registration()).await, RefusalReason::NotReady);
    // Even for a request that fails every later check.
    expect_refusal(
        register(&world.service.client, json!({ "protocol": world.registration()["protocol"] }), None).await,
        RefusalReason::NotReady,
    );
    assert!(world.registrations().await.is_empty());
    world.stop().await;
});

/// PostgreSQL only: a store that does not answer makes every registration `not-ready`, also one
/// that is invalid or has no relay token (checks that would not ask the store).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn not_ready_when_the_store_does_not_answer() {
    let world = IngressWorld::build(Backend::Postgres).await;
    let name = world.service.database.url.rsplit('/').next().unwrap().to_owned();
    let admin = support::database::pg_admin_url();
    let psql = |sql: String| {
        let status = std::process::Command::new("psql").arg(&admin).args(["-qc", &sql]).status().unwrap();
        assert!(status.success(), "{sql}");
    };
    psql(format!("ALTER DATABASE {name} ALLOW_CONNECTIONS false"));
    psql(format!("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{name}'"));
    let protocol = world.registration()["protocol"].clone();
    for (request, token) in [
        (world.registration(), Some(world.token.as_str())),
        (json!({ "protocol": protocol }), Some(world.token.as_str())),
        (world.registration(), None),
    ] {
        expect_refusal(register(&world.service.client, request, token).await, RefusalReason::NotReady);
    }
    psql(format!("ALTER DATABASE {name} ALLOW_CONNECTIONS true"));
    // The store answers again: so does the judge.
    world.register(world.registration()).await.expect("accepted once the store answers");
    world.stop().await;
}

on_both_stores!(an_invalid_registration_is_refused_before_the_relay_is_judged, |backend| async move {
    let world = IngressWorld::build(backend).await;
    let base = world.registration();
    let with = |key: &str, value: Value| {
        let mut request = base.clone();
        request[key] = value;
        request
    };
    let mut unknown_key = base.clone();
    unknown_key["extra"] = json!(1);
    for request in [
        with("bearer", json!("short")),
        with("bearer", json!(format!("{} ", world.bearer))),
        with("version", json!("1.4")),
        with("nodeId", json!(17)),
        with("capabilities", json!(["websocket", "http2"])),
        with("capabilities", json!(["Upper"])),
        unknown_key,
    ] {
        expect_refusal(world.register(request.clone()).await, RefusalReason::RegistrationInvalid);
        // Without a relay token too: invalid comes first.
        expect_refusal(register(&world.service.client, request, None).await, RefusalReason::RegistrationInvalid);
    }
    assert!(world.registrations().await.is_empty());
    world.stop().await;
});

on_both_stores!(relay_not_connected_without_unknown_superseded_or_lapsed_connections, |backend| async move {
    let world = IngressWorld::build(backend).await;
    let client = &world.service.client;
    expect_refusal(register(client, world.registration(), None).await, RefusalReason::RelayNotConnected);
    expect_refusal(
        register(client, world.registration(), Some("szrc_unknown-token")).await,
        RefusalReason::RelayNotConnected,
    );

    // Superseded: the relay connects again; the old token is refused, the new one accepted.
    let newer = connect_relay(&world.service, client, CLUSTER, RELAY).await;
    expect_refusal(register(client, world.registration(), Some(&world.token)).await, RefusalReason::RelayNotConnected);
    register(client, world.registration(), Some(&newer)).await.expect("the elected connection registers");

    // Lapsed: no heartbeat for the lease (30 s by default).
    world.service.clock.0.fetch_add(30_000, Ordering::SeqCst);
    expect_refusal(register(client, world.registration(), Some(&newer)).await, RefusalReason::RelayNotConnected);
    assert_eq!(world.registrations().await.len(), 1);
    world.stop().await;
});

on_both_stores!(the_election_across_two_controllers_decides_relay_not_connected, |backend| async move {
    let world = IngressWorld::build(backend).await;
    let peer = Peer::start(&world.service, ControllerSettings::default()).await;
    // The connection made through the first controller registers through the second.
    register(&peer.client, world.registration(), Some(&world.token)).await.expect("accepted by the peer");
    // A connect through the peer supersedes it in both.
    let newer = connect_relay(&world.service, &peer.client, CLUSTER, RELAY).await;
    for client in [&world.service.client, &peer.client] {
        expect_refusal(
            register(client, world.registration(), Some(&world.token)).await,
            RefusalReason::RelayNotConnected,
        );
        register(client, world.registration(), Some(&newer)).await.expect("the new connection registers");
    }
    assert_eq!(world.registrations().await.len(), 3);
    peer.stop().await;
    world.stop().await;
});

on_both_stores!(ingress_not_designated_for_a_cluster_without_a_pallet_designation, |backend| async move {
    let service = TestService::start(backend).await;
    service.seed_cluster(CLUSTER, SERVICE).await;
    let token = connect_relay(&service, &service.client, CLUSTER, RELAY).await;
    let some_bearer = "szci_not-a-real-bearer-but-well-formed";
    expect_refusal(
        register(&service.client, registration(some_bearer, NODE), Some(&token)).await,
        RefusalReason::IngressNotDesignated,
    );
    // A cluster holding only a fleet-cutover designation: this controller does not run that flow.
    service
        .admin_call(
            "putCluster",
            json!({ "cluster": {
                "id": CLUSTER, "organizationId": "org", "runtime": { "phase": "pallet", "generation": 3 },
                "relayOrigin": "https://relay.example.net:8443",
                "fleetCutoverIngressDesignation": { "id": "fleet-1", "generation": 2, "digest": format!("sha256:{}", "ab".repeat(32)) },
            }, "expectedRevision": 1 }),
        )
        .await;
    expect_refusal(
        register(&service.client, registration(some_bearer, NODE), Some(&token)).await,
        RefusalReason::IngressNotDesignated,
    );
    service.stop().await;
});

on_both_stores!(node_mismatch_for_nodes_outside_the_current_placement, |backend| async move {
    let world = IngressWorld::build(backend).await;
    // No such node; and a node of the cluster the spec does not place the ingress on.
    expect_refusal(world.register(registration(&world.bearer, "node-9")).await, RefusalReason::NodeMismatch);
    node_bearer(&world.service, CLUSTER, "node-3").await;
    expect_refusal(world.register(registration(&world.bearer, "node-3")).await, RefusalReason::NodeMismatch);
    // The current spec revision moves node-1 out of the placement.
    let mut body = spec_body(CLUSTER, SERVICE);
    body["placement"] = json!({ "nodeIds": ["node-2"] });
    world.service.admin_call("putServiceRuntimeSpec", json!({ "spec": body, "expectedRevision": 1 })).await;
    expect_refusal(world.register(world.registration()).await, RefusalReason::NodeMismatch);
    // A deleted ingress service places nothing.
    world
        .service
        .admin_call("deleteService", json!({ "clusterId": CLUSTER, "serviceId": SERVICE, "expectedRevision": 2 }))
        .await;
    expect_refusal(world.register(world.registration()).await, RefusalReason::NodeMismatch);
    assert!(world.registrations().await.is_empty());
    world.stop().await;
});

on_both_stores!(assignment_not_running_until_ready_under_the_current_session, |backend| async move {
    let mut world = IngressWorld::build(backend).await;
    // Reported, but not ready.
    world.report("starting").await;
    expect_refusal(world.register(world.registration()).await, RefusalReason::AssignmentNotRunning);
    world.report("ready").await;
    world.register(world.registration()).await.expect("running again");

    // The node reconnects: a new session, not running until it reports ready again.
    let renewed = NodeAgent::connect(&world.service).await;
    world.session = renewed.open(CLUSTER, NODE, &world.node_bearer).await;
    world.agent = renewed;
    expect_refusal(world.register(world.registration()).await, RefusalReason::AssignmentNotRunning);
    world.report("ready").await;
    world.register(world.registration()).await.expect("ready under the new session");

    // A rotation: the running assignment carries the previous credential until the node runs
    // the new generation; then the new bearer registers and the previous one is refused.
    let previous_bearer = world.bearer.clone();
    world.rotate("m2").await;
    expect_refusal(world.register(registration(&previous_bearer, NODE)).await, RefusalReason::AssignmentNotRunning);
    world.run_ingress().await;
    assert_ne!(world.bearer, previous_bearer);
    expect_refusal(world.register(registration(&previous_bearer, NODE)).await, RefusalReason::BearerRefused);
    world.register(world.registration()).await.expect("the new credential registers");
    assert_eq!(world.registrations().await.len(), 3);
    world.stop().await;
});

on_both_stores!(bearer_refused_for_any_other_bearer, |backend| async move {
    let world = IngressWorld::build(backend).await;
    for bearer in ["szci_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", &world.node_bearer, &world.token] {
        expect_refusal(world.register(registration(bearer, NODE)).await, RefusalReason::BearerRefused);
    }
    let mut longer = world.bearer.clone();
    longer.push('x');
    expect_refusal(world.register(registration(&longer, NODE)).await, RefusalReason::BearerRefused);
    assert!(world.registrations().await.is_empty());
    world.stop().await;
});

/// A registration of the world's valid request, held at its commit (after every read) by the
/// commit gate: answers its task and the release. The window is deterministic, not a sleep race.
async fn held_at_commit(world: &IngressWorld) -> (JoinHandle<Result<Value, TypedError>>, Arc<Notify>) {
    let (reached, reached_rx) = oneshot::channel();
    let reached = Arc::new(std::sync::Mutex::new(Some(reached)));
    let release = Arc::new(Notify::new());
    let waiting = release.clone();
    world.service.controller().set_registration_commit_gate(Some(Arc::new(move || {
        let reached = reached.lock().unwrap().take();
        let waiting = waiting.clone();
        Box::pin(async move {
            if let Some(reached) = reached {
                let _ = reached.send(());
                waiting.notified().await;
            }
        })
    })));
    let client = world.service.client.clone();
    let (request, token) = (world.registration(), world.token.clone());
    let pending = tokio::spawn(async move { register(&client, request, Some(&token)).await });
    tokio::time::timeout(support::node_agent::WAIT, reached_rx)
        .await
        .expect("the registration reaches its commit")
        .unwrap();
    (pending, release)
}

on_both_stores!(conflict_when_the_facts_change_between_the_reads_and_the_commit, |backend| async move {
    let mut world = IngressWorld::build(backend).await;
    // Nothing changes in the window: accepted.
    let (pending, release) = held_at_commit(&world).await;
    release.notify_one();
    pending.await.unwrap().expect("accepted when nothing changed");

    // The designation rotates in the window.
    let (pending, release) = held_at_commit(&world).await;
    world.rotate("m2").await;
    release.notify_one();
    expect_refusal(pending.await.unwrap(), RefusalReason::Conflict);
    world.run_ingress().await;

    // The node opens a new session in the window.
    let (pending, release) = held_at_commit(&world).await;
    let renewed = NodeAgent::connect(&world.service).await;
    world.session = renewed.open(CLUSTER, NODE, &world.node_bearer).await;
    world.agent = renewed;
    release.notify_one();
    expect_refusal(pending.await.unwrap(), RefusalReason::Conflict);
    world.report("ready").await;

    // The assignment stops being ready in the window.
    let (pending, release) = held_at_commit(&world).await;
    world.report("failed").await;
    release.notify_one();
    expect_refusal(pending.await.unwrap(), RefusalReason::Conflict);
    world.report("ready").await;

    // The relay connects again in the window: the held connection is no longer the elected one.
    let (pending, release) = held_at_commit(&world).await;
    let newer = connect_relay(&world.service, &world.service.client, CLUSTER, RELAY).await;
    release.notify_one();
    expect_refusal(pending.await.unwrap(), RefusalReason::Conflict);
    world.token = newer;

    world.service.controller().set_registration_commit_gate(None);
    world.report("ready").await;
    world.register(world.registration()).await.expect("accepted once the facts hold");
    assert_eq!(world.registrations().await.len(), 2);
    world.stop().await;
});

on_both_stores!(a_request_failing_several_checks_gets_the_earliest, |backend| async move {
    let world = IngressWorld::build(backend).await;
    let wrong_bearer = "szci_BBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBB";
    let mut invalid = registration(wrong_bearer, "node-9");
    invalid["version"] = json!("not-a-version");
    // Invalid, no relay, wrong node, wrong bearer: registration-invalid.
    expect_refusal(register(&world.service.client, invalid, None).await, RefusalReason::RegistrationInvalid);
    // No relay, wrong node, wrong bearer: relay-not-connected.
    expect_refusal(
        register(&world.service.client, registration(wrong_bearer, "node-9"), None).await,
        RefusalReason::RelayNotConnected,
    );
    // Wrong node and wrong bearer: node-mismatch.
    expect_refusal(world.register(registration(wrong_bearer, "node-9")).await, RefusalReason::NodeMismatch);
    // Not running and wrong bearer: assignment-not-running.
    world.report("stopped").await;
    expect_refusal(world.register(registration(wrong_bearer, NODE)).await, RefusalReason::AssignmentNotRunning);
    world.stop().await;
});

on_both_stores!(configured_retry_hints_are_answered, |backend| async move {
    let settings = ControllerSettings {
        registration_retry_after: RetryAfterTable::parse("bearer-refused=45000,registration-invalid=1000").unwrap(),
        ..ControllerSettings::default()
    };
    let world = IngressWorld::build_with(backend, settings).await;
    expect_refusal_after(
        world.register(registration("szci_CCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCC", NODE)).await,
        RefusalReason::BearerRefused,
        45_000,
    );
    expect_refusal_after(
        world.register(json!({ "protocol": world.registration()["protocol"] })).await,
        RefusalReason::RegistrationInvalid,
        1_000,
    );
    expect_refusal(register(&world.service.client, world.registration(), None).await, RefusalReason::RelayNotConnected);
    world.stop().await;
});

on_both_stores!(no_bearer_appears_in_any_answer_or_log_line, |backend| async move {
    captured_logs();
    let world = IngressWorld::build(backend).await;
    let client = &world.service.client;
    let mut answers = Vec::new();
    let mut record = |answer: Value| answers.push(answer.to_string());
    let envelope = |request: Value, token: Option<String>| {
        let client = client.clone();
        async move { client.envelope("registerClusterIngress", request, token.as_deref()).await.unwrap() }
    };
    let token = Some(world.token.clone());
    record(envelope(world.registration(), token.clone()).await);
    record(envelope(registration(&world.node_bearer, NODE), token.clone()).await);
    record(envelope(registration(&world.bearer, "node-9"), token.clone()).await);
    let mut invalid = world.registration();
    invalid["version"] = json!("x");
    record(envelope(invalid, token.clone()).await);
    record(envelope(world.registration(), None).await);
    record(world.service.admin_call("listClusterIngressRegistrations", json!({ "clusterId": CLUSTER })).await);
    let logs = log_text();
    assert!(logs.contains("cluster ingress registered"), "the capture holds the judge's lines");
    assert!(logs.contains("cluster ingress registration refused"));
    record(envelope(registration(&world.relay_bearer, NODE), token.clone()).await);
    for secret in [&world.bearer, &world.node_bearer, &world.token, &world.relay_bearer] {
        for answer in &answers {
            assert!(!answer.contains(secret.as_str()), "an answer carries a secret: {answer}");
        }
        assert!(!logs.contains(secret.as_str()), "a log line carries a secret");
    }
    world.stop().await;
});

// The store's commit guard, clause by clause: a registration whose designation, assignment,
// reported state or session is not the current one writes nothing.
on_both_stores!(the_commit_guard_checks_every_fact, |backend| async move {
    use cloudly::contract::{AuthorityReference, Id, NodeId, Sha256Digest};
    use cloudly::store::registrations::{
        IngressRegistration, RegistrationCommit, RelayConnectionReference, SessionGeneration,
    };
    let world = IngressWorld::build(backend).await;
    let accepted = world.register(world.registration()).await.expect("accepted");
    assert_eq!(accepted["accepted"], json!(true));
    let listed = world.registrations().await;
    let entry = &listed[0];
    let reference = |value: &Value| AuthorityReference {
        id: Id::parse(value["id"].as_str().unwrap()).unwrap(),
        generation: value["generation"].as_u64().unwrap(),
        digest: Sha256Digest::parse(value["digest"].as_str().unwrap()).unwrap(),
    };
    let current = IngressRegistration {
        id: Id::parse("reg-direct").unwrap(),
        cluster_id: Id::parse(CLUSTER).unwrap(),
        node_id: NodeId::parse(NODE).unwrap(),
        version: "1.4.2".to_owned(),
        capabilities: None,
        protocol_version: 1,
        relay: RelayConnectionReference {
            id: Id::parse(entry["relayConnection"]["id"].as_str().unwrap()).unwrap(),
            relay_id: Id::parse(RELAY).unwrap(),
            epoch: 1,
        },
        designation: reference(&entry["designation"]),
        assignment: reference(&entry["assignment"]),
        session: SessionGeneration {
            id: Id::parse(entry["session"]["id"].as_str().unwrap()).unwrap(),
            generation: entry["session"]["generation"].as_u64().unwrap(),
        },
        registered_at: support::service::T0,
    };
    let other_digest = Sha256Digest::parse(&format!("sha256:{}", "0".repeat(64))).unwrap();
    let mut stale = Vec::new();
    let mut changed = current.clone();
    changed.designation.digest = other_digest.clone();
    stale.push(changed);
    let mut changed = current.clone();
    changed.designation.generation += 1;
    stale.push(changed);
    let mut changed = current.clone();
    changed.assignment.digest = other_digest;
    stale.push(changed);
    let mut changed = current.clone();
    changed.assignment.generation += 1;
    stale.push(changed);
    let mut changed = current.clone();
    changed.session.generation += 1;
    stale.push(changed);
    let mut changed = current.clone();
    changed.session.id = Id::parse("other-session").unwrap();
    stale.push(changed);
    let mut changed = current.clone();
    changed.node_id = NodeId::parse("node-2").unwrap();
    stale.push(changed);
    // A relay connection that does not exist (retention deleted it, say).
    let mut changed = current.clone();
    changed.relay.id = Id::parse("rc-gone").unwrap();
    stale.push(changed);
    for (index, mut registration) in stale.into_iter().enumerate() {
        registration.id = Id::parse(&format!("reg-stale-{index}")).unwrap();
        assert_eq!(
            world.service.store.commit_registration(&registration).await.unwrap(),
            RegistrationCommit::Conflict,
            "stale fact {index} must not be recorded"
        );
    }
    let RegistrationCommit::Recorded(sequence) = world.service.store.commit_registration(&current).await.unwrap()
    else {
        panic!("the current facts are recorded");
    };
    assert!(sequence > entry["sequence"].as_u64().unwrap());
    // A state other than ready no longer holds.
    world.report("failed").await;
    let mut again = current.clone();
    again.id = Id::parse("reg-after-failed").unwrap();
    assert_eq!(world.service.store.commit_registration(&again).await.unwrap(), RegistrationCommit::Conflict);
    assert_eq!(world.registrations().await.len(), 2);
    world.stop().await;
});
