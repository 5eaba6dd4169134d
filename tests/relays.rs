//! Cluster relays (credentials, connections, the election) and the cluster ingress route table,
//! over real HTTP, on PostgreSQL and on SQLite (`04-registration.md`, "Relays" and "Route
//! table"; relay principals in `02-wire.md`).

#[macro_use]
mod support;

use cloudly::api::Limits;
use cloudly::api::methods::name;
use cloudly::api::wire;
use cloudly::client::{CallError, Client, TypedError};
use cloudly::domain::identity::Role;
use cloudly::domain::{Controller, ControllerSettings};
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use support::service::{Backend, Peer, TestService, spec_body};

/// Calls `method` with `request` and, when given, `authInfo.jwt = token` (no identity added).
async fn relay_call(client: &Client, method: &str, request: Value, token: Option<&str>) -> Result<Value, TypedError> {
    let answer = client.envelope(method, request, token).await.unwrap_or_else(|error| panic!("{method}: {error}"));
    match answer.get("error").filter(|error| !error.is_null()) {
        Some(error) => {
            Err(TypedError { text: error["text"].as_str().unwrap_or("").to_owned(), data: error["data"].clone() })
        }
        None => Ok(answer["response"].clone()),
    }
}

fn expect_code(result: Result<Value, TypedError>, code: &str) -> TypedError {
    let error = result.expect_err(&format!("expected {code}"));
    assert_eq!(error.code(), code, "{} {}", error.text, error.data);
    error
}

/// Issues (or rotates) relay `relay`'s credential of `cluster` and answers the bearer.
async fn issue(service: &TestService, cluster: &str, relay: &str) -> String {
    let answer =
        service.admin_call("issueClusterRelayCredential", json!({ "clusterId": cluster, "relayId": relay })).await;
    answer["bearer"].as_str().expect("a bearer").to_owned()
}

/// Connects and answers the whole answer.
async fn connect(client: &Client, cluster: &str, relay: &str, bearer: &str) -> Result<Value, TypedError> {
    let request = wire::ConnectClusterRelay { cluster_id: cluster, relay_id: relay, bearer };
    relay_call(client, name::CONNECT_CLUSTER_RELAY, wire::to_request(&request), None).await
}

async fn connect_ok(client: &Client, cluster: &str, relay: &str, bearer: &str) -> (Value, String) {
    let answer =
        connect(client, cluster, relay, bearer).await.unwrap_or_else(|error| panic!("connect: {}", error.data));
    let token = answer["token"].as_str().expect("a token").to_owned();
    (answer["connection"].clone(), token)
}

async fn heartbeat(client: &Client, token: Option<&str>) -> Result<Value, TypedError> {
    relay_call(client, name::HEARTBEAT_CLUSTER_RELAY, wire::to_request(&wire::NoMembers {}), token).await
}

async fn route_table(client: &Client, token: &str, known: Value) -> Result<Value, TypedError> {
    let request = wire::GetClusterIngressRouteTable { known_revision: known };
    relay_call(client, name::GET_CLUSTER_INGRESS_ROUTE_TABLE, wire::to_request(&request), Some(token)).await
}

/// Organization, cluster `c1` with a relay origin, service `web` with ports tcp 80, tcp 443 and
/// udp 443, and cluster `bare` without a relay origin.
async fn seed(service: &TestService) {
    service.seed_cluster("c1", "ingress").await;
    let mut web = spec_body("c1", "web");
    web["ports"] = json!([{ "protocol": "tcp", "port": 80 }, { "protocol": "tcp", "port": 443 }, { "protocol": "udp", "port": 443 }]);
    service.admin_call("putServiceRuntimeSpec", json!({ "spec": web, "expectedRevision": null })).await;
    service
        .admin_call(
            "putCluster",
            json!({ "cluster": {
                "id": "bare", "organizationId": "org", "runtime": { "phase": "pallet", "generation": 1 },
                "relayOrigin": null, "fleetCutoverIngressDesignation": null,
            }, "expectedRevision": null }),
        )
        .await;
}

fn route(hostname: &str, service: &str, protocol: &str, port: u64) -> Value {
    json!({ "hostname": hostname, "serviceId": service, "protocol": protocol, "port": port })
}

async fn put_route(service: &TestService, route: Value) -> Value {
    service.admin_call("putClusterIngressRoute", json!({ "clusterId": "c1", "route": route })).await["table"].clone()
}

on_both_stores!(a_credential_is_issued_once_and_rotation_refuses_the_old_bearer, |backend| async move {
    let service = TestService::start(backend).await;
    seed(&service).await;
    let answer =
        service.admin_call("issueClusterRelayCredential", json!({ "clusterId": "c1", "relayId": "relay-1" })).await;
    assert_eq!(
        answer["relay"],
        json!({ "clusterId": "c1", "relayId": "relay-1", "origin": "https://relay.example.net:8443" })
    );
    let first = answer["bearer"].as_str().unwrap().to_owned();
    assert!(first.starts_with("szrl_") && first.len() == 5 + 43, "{first}");
    assert_eq!(answer.as_object().unwrap().len(), 2);

    connect_ok(&service.client, "c1", "relay-1", &first).await;
    let second = issue(&service, "c1", "relay-1").await;
    assert_ne!(first, second);
    expect_code(connect(&service.client, "c1", "relay-1", &first).await, "principal-refused");
    let (connection, _) = connect_ok(&service.client, "c1", "relay-1", &second).await;
    assert_eq!(connection["epoch"], json!(2));

    // Unknown cluster, a cluster without a relay origin, a forbidden role, an unknown member.
    let admin = service.admin();
    let refused = service
        .call_as(&admin, "issueClusterRelayCredential", json!({ "clusterId": "nope", "relayId": "relay-1" }))
        .await;
    assert_eq!(expect_code(refused, "not-found").data["what"], json!("cluster"));
    let refused = service
        .call_as(&admin, "issueClusterRelayCredential", json!({ "clusterId": "bare", "relayId": "relay-1" }))
        .await;
    expect_code(refused, "request-invalid");
    let viewer = serde_json::to_value(service.identity("viewer-1", Role::Viewer)).unwrap();
    let refused = service
        .call_as(&viewer, "issueClusterRelayCredential", json!({ "clusterId": "c1", "relayId": "relay-1" }))
        .await;
    expect_code(refused, "identity-forbidden");
    let refused = service
        .call_as(&admin, "issueClusterRelayCredential", json!({ "clusterId": "c1", "relayId": "relay-1", "zz": 1 }))
        .await;
    assert_eq!(
        expect_code(refused, "request-invalid").data["violations"],
        json!(["request has an unknown member \"zz\""])
    );
    service.stop().await;
});

on_both_stores!(connect_and_heartbeat_keep_a_connection_elected, |backend| async move {
    let service = TestService::start(backend).await;
    seed(&service).await;
    let bearer = issue(&service, "c1", "relay-1").await;
    let answer = connect(&service.client, "c1", "relay-1", &bearer).await.unwrap();
    assert_eq!(answer["leaseMs"], json!(30_000));
    let connection = answer["connection"].clone();
    assert_eq!(connection["clusterId"], json!("c1"));
    assert_eq!(connection["relayId"], json!("relay-1"));
    assert_eq!(connection["epoch"], json!(1));
    assert_eq!(connection.as_object().unwrap().len(), 4);
    let token = answer["token"].as_str().unwrap().to_owned();
    assert!(token.starts_with("szrc_") && token != bearer);

    let beat = heartbeat(&service.client, Some(&token)).await.unwrap();
    assert_eq!(beat, json!({ "connection": connection, "leaseMs": 30_000 }));
    // Each heartbeat renews the lease: 20 s, 20 s, 20 s is 60 s after the connect.
    for _ in 0..3 {
        service.clock.0.fetch_add(20_000, Ordering::SeqCst);
        assert_eq!(heartbeat(&service.client, Some(&token)).await.unwrap()["connection"], connection);
    }
    let controller = Controller::new(service.store.clone(), service.keys.clone(), service.clock.clone());
    let elected = controller.elected_relay_connection(&token).await.unwrap().expect("elected");
    assert_eq!(elected.epoch, 1);
    assert_eq!(controller.elected_relay_connection("szrc_unknown").await.unwrap(), None);

    // An exact shape: nothing but `{}`.
    let refused = relay_call(&service.client, "heartbeatClusterRelay", json!({ "zz": 1 }), Some(&token)).await;
    assert_eq!(
        expect_code(refused, "request-invalid").data["violations"],
        json!(["request has an unknown member \"zz\""])
    );
    service.stop().await;
});

on_both_stores!(a_missing_or_unknown_token_and_a_wrong_bearer_are_refused_alike, |backend| async move {
    let service = TestService::start(backend).await;
    seed(&service).await;
    let bearer = issue(&service, "c1", "relay-1").await;
    let refusals = [
        expect_code(heartbeat(&service.client, None).await, "principal-refused"),
        expect_code(heartbeat(&service.client, Some("szrc_not-a-token")).await, "principal-refused"),
        expect_code(
            relay_call(
                &service.client,
                name::GET_CLUSTER_INGRESS_ROUTE_TABLE,
                wire::to_request(&wire::GetClusterIngressRouteTable { known_revision: Value::Null }),
                None,
            )
            .await,
            "principal-refused",
        ),
        expect_code(route_table(&service.client, "szrc_not-a-token", Value::Null).await, "principal-refused"),
        expect_code(connect(&service.client, "c1", "relay-1", "szrl_wrong").await, "principal-refused"),
        expect_code(connect(&service.client, "c1", "relay-2", &bearer).await, "principal-refused"),
        expect_code(connect(&service.client, "nope", "relay-1", &bearer).await, "principal-refused"),
    ];
    // Never saying which.
    let distinct: BTreeSet<String> = refusals.iter().map(|error| format!("{} {}", error.text, error.data)).collect();
    assert_eq!(distinct.len(), 1, "{distinct:?}");

    let refused = relay_call(
        &service.client,
        "connectClusterRelay",
        json!({ "clusterId": "c1", "relayId": "relay-1", "bearer": bearer, "identity": {} }),
        None,
    )
    .await;
    assert_eq!(
        expect_code(refused, "request-invalid").data["violations"],
        json!(["request has an unknown member \"identity\""])
    );
    let refused =
        relay_call(&service.client, "connectClusterRelay", json!({ "clusterId": "c1", "relayId": "relay-1" }), None)
            .await;
    assert_eq!(expect_code(refused, "request-invalid").data["violations"], json!(["request bearer is required"]));
    service.stop().await;
});

on_both_stores!(a_superseded_or_expired_connection_is_lost, |backend| async move {
    let service = TestService::start(backend).await;
    seed(&service).await;
    let bearer = issue(&service, "c1", "relay-1").await;
    let other = issue(&service, "c1", "relay-2").await;
    let (_, first) = connect_ok(&service.client, "c1", "relay-1", &bearer).await;
    let (second_connection, second) = connect_ok(&service.client, "c1", "relay-2", &other).await;
    assert_eq!(second_connection["epoch"], json!(2));
    expect_code(heartbeat(&service.client, Some(&first)).await, "relay-connection-lost");
    expect_code(route_table(&service.client, &first, json!(0)).await, "relay-connection-lost");
    heartbeat(&service.client, Some(&second)).await.unwrap();
    route_table(&service.client, &second, json!(0)).await.unwrap();
    let controller = Controller::new(service.store.clone(), service.keys.clone(), service.clock.clone());
    assert_eq!(controller.elected_relay_connection(&first).await.unwrap(), None);

    // Expired: the lease passes without a heartbeat; a later heartbeat cannot revive it.
    service.clock.0.fetch_add(29_999, Ordering::SeqCst);
    heartbeat(&service.client, Some(&second)).await.unwrap();
    service.clock.0.fetch_add(30_000, Ordering::SeqCst);
    expect_code(heartbeat(&service.client, Some(&second)).await, "relay-connection-lost");
    expect_code(route_table(&service.client, &second, json!(0)).await, "relay-connection-lost");
    assert_eq!(controller.elected_relay_connection(&second).await.unwrap(), None);
    // Connecting again is the way back.
    let (third, token) = connect_ok(&service.client, "c1", "relay-1", &bearer).await;
    assert_eq!(third["epoch"], json!(3));
    heartbeat(&service.client, Some(&token)).await.unwrap();
    service.stop().await;
});

on_both_stores!(racing_connects_get_distinct_epochs_and_the_highest_is_elected, |backend| async move {
    let service = TestService::start(backend).await;
    seed(&service).await;
    let bearer = issue(&service, "c1", "relay-1").await;
    let connects = (0..16).map(|_| {
        let client = service.client.clone();
        let bearer = bearer.clone();
        tokio::spawn(async move { connect_ok(&client, "c1", "relay-1", &bearer).await })
    });
    let mut connections = Vec::new();
    for connect in connects.collect::<Vec<_>>() {
        connections.push(connect.await.unwrap());
    }
    let epochs: BTreeSet<u64> =
        connections.iter().map(|(connection, _)| connection["epoch"].as_u64().unwrap()).collect();
    assert_eq!(epochs, (1..=16).collect::<BTreeSet<u64>>());
    let mut elected = Vec::new();
    for (connection, token) in &connections {
        match heartbeat(&service.client, Some(token)).await {
            Ok(_) => elected.push(connection["epoch"].clone()),
            Err(error) => assert_eq!(error.code(), "relay-connection-lost"),
        }
    }
    assert_eq!(elected, vec![json!(16)]);
    service.stop().await;
});

on_both_stores!(two_controllers_on_one_database_agree_on_the_election, |backend| async move {
    let service = TestService::start(backend).await;
    seed(&service).await;
    let peer = Peer::start(&service, ControllerSettings::default()).await;
    let bearer = issue(&service, "c1", "relay-1").await;
    let (connection, first) = connect_ok(&service.client, "c1", "relay-1", &bearer).await;
    assert_eq!(heartbeat(&peer.client, Some(&first)).await.unwrap()["connection"], connection);
    let elected = peer.controller.elected_relay_connection(&first).await.unwrap().expect("elected");
    assert_eq!(json!(elected.id), connection["id"]);

    let (superseding, second) = connect_ok(&peer.client, "c1", "relay-1", &bearer).await;
    assert_eq!(superseding["epoch"], json!(2));
    expect_code(heartbeat(&service.client, Some(&first)).await, "relay-connection-lost");
    expect_code(heartbeat(&peer.client, Some(&first)).await, "relay-connection-lost");
    heartbeat(&service.client, Some(&second)).await.unwrap();

    // Racing connects through both controllers still get distinct epochs.
    let racers = (0..8).map(|index| {
        let client = if index % 2 == 0 { service.client.clone() } else { peer.client.clone() };
        let bearer = bearer.clone();
        tokio::spawn(async move { connect_ok(&client, "c1", "relay-1", &bearer).await.0["epoch"].as_u64().unwrap() })
    });
    let mut epochs = BTreeSet::new();
    for racer in racers.collect::<Vec<_>>() {
        epochs.insert(racer.await.unwrap());
    }
    assert_eq!(epochs, (3..=10).collect::<BTreeSet<u64>>());
    peer.stop().await;
    service.stop().await;
});

on_both_stores!(the_route_table_revision_counts_content_changes, |backend| async move {
    let service = TestService::start(backend).await;
    seed(&service).await;
    let bearer = issue(&service, "c1", "relay-1").await;
    let (_, token) = connect_ok(&service.client, "c1", "relay-1", &bearer).await;
    // No route ever written: no table (a fact, not an empty table).
    assert_eq!(
        service.admin_call("getClusterIngressRoutes", json!({ "clusterId": "c1" })).await,
        json!({ "table": null })
    );
    assert_eq!(route_table(&service.client, &token, json!(0)).await.unwrap(), json!({ "table": null }));

    let table = put_route(&service, route("www.example.net", "web", "tcp", 443)).await;
    assert_eq!(
        table,
        json!({ "clusterId": "c1", "revision": 1, "routes": [
            { "hostname": "www.example.net", "serviceId": "web", "protocol": "tcp", "port": 443, "backends": [] },
        ] })
    );
    assert_eq!(put_route(&service, route("www.example.net", "web", "tcp", 443)).await["revision"], json!(1));
    assert_eq!(put_route(&service, route("www.example.net", "web", "tcp", 80)).await["revision"], json!(2));
    let table = put_route(&service, route("api.example.net", "web", "udp", 443)).await;
    assert_eq!(table["revision"], json!(3));
    let hostnames: Vec<&Value> = table["routes"].as_array().unwrap().iter().map(|route| &route["hostname"]).collect();
    assert_eq!(hostnames, [&json!("api.example.net"), &json!("www.example.net")]);

    let deleted = service
        .admin_call("deleteClusterIngressRoute", json!({ "clusterId": "c1", "hostname": "api.example.net" }))
        .await;
    assert_eq!(deleted["table"]["revision"], json!(4));
    assert_eq!(deleted["table"]["routes"].as_array().unwrap().len(), 1);
    let again = service
        .admin_call("deleteClusterIngressRoute", json!({ "clusterId": "c1", "hostname": "api.example.net" }))
        .await;
    assert_eq!(again, deleted);
    let relay_view = route_table(&service.client, &token, json!(3)).await.unwrap();
    assert_eq!(relay_view, deleted);
    let viewer = serde_json::to_value(service.identity("viewer-1", Role::Viewer)).unwrap();
    let admin_view = service.call_as(&viewer, "getClusterIngressRoutes", json!({ "clusterId": "c1" })).await.unwrap();
    assert_eq!(admin_view, deleted);
    // Deleting every route leaves an empty table, not none.
    let empty = service
        .admin_call("deleteClusterIngressRoute", json!({ "clusterId": "c1", "hostname": "www.example.net" }))
        .await;
    assert_eq!(empty, json!({ "table": { "clusterId": "c1", "revision": 5, "routes": [] } }));
    // A table of another cluster is its own.
    let bare = service
        .admin_call("deleteClusterIngressRoute", json!({ "clusterId": "bare", "hostname": "www.example.net" }))
        .await;
    assert_eq!(bare, json!({ "table": null }));
    service.stop().await;
});

on_both_stores!(route_writes_are_validated, |backend| async move {
    let service = TestService::start(backend).await;
    seed(&service).await;
    let admin = service.admin();
    let put = |cluster: &str, route: Value| json!({ "clusterId": cluster, "route": route });
    for (request, violations) in [
        (
            put("c1", route("WWW.example.net", "web", "tcp", 443)),
            json!(["request route hostname must be a lowercase DNS name"]),
        ),
        (
            put("c1", route("www..example.net", "web", "tcp", 443)),
            json!(["request route hostname must be a lowercase DNS name"]),
        ),
        (
            put("c1", route("www.example.net", "web", "sctp", 0)),
            json!([
                "request route protocol must be tcp or udp",
                "request route port must be an integer from 1 to 65535",
            ]),
        ),
        (
            put(
                "c1",
                json!({ "hostname": "www.example.net", "serviceId": "web", "protocol": "tcp", "port": 443, "zz": 1 }),
            ),
            json!(["request route has an unknown member \"zz\""]),
        ),
        (
            put("c1", route("www.example.net", "web", "tcp", 8080)),
            json!(["request route port must be one of the service's declared tcp ports"]),
        ),
        (
            put("c1", route("www.example.net", "web", "udp", 80)),
            json!(["request route port must be one of the service's declared udp ports"]),
        ),
    ] {
        let refused = service.call_as(&admin, "putClusterIngressRoute", request.clone()).await;
        assert_eq!(expect_code(refused, "request-invalid").data["violations"], violations, "{request}");
    }
    let refused = service
        .call_as(&admin, "putClusterIngressRoute", put("c1", route("www.example.net", "nope", "tcp", 443)))
        .await;
    assert_eq!(expect_code(refused, "not-found").data["what"], json!("service"));
    let refused = service
        .call_as(&admin, "putClusterIngressRoute", put("nope", route("www.example.net", "web", "tcp", 443)))
        .await;
    assert_eq!(expect_code(refused, "not-found").data["what"], json!("cluster"));
    let refused = service.call_as(&admin, "getClusterIngressRoutes", json!({ "clusterId": "nope" })).await;
    assert_eq!(expect_code(refused, "not-found").data["what"], json!("cluster"));
    let refused = service
        .call_as(&admin, "deleteClusterIngressRoute", json!({ "clusterId": "c1", "hostname": "Bad_Name" }))
        .await;
    expect_code(refused, "request-invalid");
    let viewer = serde_json::to_value(service.identity("viewer-1", Role::Viewer)).unwrap();
    let refused = service
        .call_as(&viewer, "putClusterIngressRoute", put("c1", route("www.example.net", "web", "tcp", 443)))
        .await;
    expect_code(refused, "identity-forbidden");
    // Nothing was written.
    assert_eq!(
        service.admin_call("getClusterIngressRoutes", json!({ "clusterId": "c1" })).await,
        json!({ "table": null })
    );
    service.stop().await;
});

on_both_stores!(the_long_poll_answers_as_soon_as_the_table_changes, |backend| async move {
    let service = TestService::start(backend).await;
    seed(&service).await;
    let peer = Peer::start(&service, ControllerSettings::default()).await;
    let bearer = issue(&service, "c1", "relay-1").await;
    let (_, token) = connect_ok(&service.client, "c1", "relay-1", &bearer).await;
    put_route(&service, route("www.example.net", "web", "tcp", 443)).await;

    // In this process: woken by the write.
    let started = Instant::now();
    let client = service.client.clone();
    let held = token.clone();
    let poll = tokio::spawn(async move { route_table(&client, &held, json!(1)).await });
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(!poll.is_finished(), "the poll answered before the table changed");
    put_route(&service, route("www.example.net", "web", "tcp", 80)).await;
    let answer = poll.await.unwrap().unwrap();
    assert_eq!(answer["table"]["revision"], json!(2));
    assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());

    // Held by another controller process: the write is seen by its store re-check.
    let started = Instant::now();
    let client = peer.client.clone();
    let held = token.clone();
    let poll = tokio::spawn(async move { route_table(&client, &held, json!(2)).await });
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(!poll.is_finished(), "the poll answered before the table changed");
    put_route(&service, route("api.example.net", "web", "tcp", 80)).await;
    let answer = poll.await.unwrap().unwrap();
    assert_eq!(answer["table"]["revision"], json!(3));
    assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());

    // A known revision that is not the current one answers at once.
    let started = Instant::now();
    assert_eq!(route_table(&service.client, &token, json!(1)).await.unwrap()["table"]["revision"], json!(3));
    assert!(started.elapsed() < Duration::from_secs(2));
    peer.stop().await;
    service.stop().await;
});

on_both_stores!(a_held_poll_times_out_with_the_current_table, |backend| async move {
    let service = TestService::start(backend).await;
    seed(&service).await;
    let settings = ControllerSettings { route_table_long_poll_ms: 600, ..ControllerSettings::default() };
    let peer = Peer::start(&service, settings).await;
    let bearer = issue(&service, "c1", "relay-1").await;
    let (_, token) = connect_ok(&peer.client, "c1", "relay-1", &bearer).await;
    // No table yet is a revision too: `null` is held until the first table or the timeout.
    let started = Instant::now();
    assert_eq!(route_table(&peer.client, &token, Value::Null).await.unwrap(), json!({ "table": null }));
    assert!(started.elapsed() >= Duration::from_millis(600), "{:?}", started.elapsed());

    let table = put_route(&service, route("www.example.net", "web", "tcp", 443)).await;
    let started = Instant::now();
    let answer = route_table(&peer.client, &token, json!(1)).await.unwrap();
    let elapsed = started.elapsed();
    assert_eq!(answer, json!({ "table": table }));
    assert!(elapsed >= Duration::from_millis(600) && elapsed < Duration::from_secs(5), "{elapsed:?}");
    peer.stop().await;
    service.stop().await;
});

on_both_stores!(no_bearer_or_token_appears_outside_the_answer_that_issues_it, |backend| async move {
    let service = TestService::start(backend).await;
    seed(&service).await;
    let mut answers: Vec<String> = Vec::new();
    let text = |result: &Result<Value, TypedError>| match result {
        Ok(value) => value.to_string(),
        Err(error) => format!("{} {}", error.text, error.data),
    };
    let first = issue(&service, "c1", "relay-1").await;
    let second = issue(&service, "c1", "relay-1").await;
    let mut secrets = vec![first.clone(), second.clone()];
    let (connection, token) = connect_ok(&service.client, "c1", "relay-1", &second).await;
    answers.push(connection.to_string());
    let (_, newer) = connect_ok(&service.client, "c1", "relay-1", &second).await;
    secrets.extend([token.clone(), newer.clone()]);
    for result in [
        connect(&service.client, "c1", "relay-1", &first).await,
        heartbeat(&service.client, Some(&token)).await,
        heartbeat(&service.client, Some(&newer)).await,
        heartbeat(&service.client, Some(&first)).await,
        route_table(&service.client, &newer, json!(0)).await,
        route_table(&service.client, &token, json!(0)).await,
        relay_call(
            &service.client,
            "connectClusterRelay",
            json!({ "clusterId": "c1", "relayId": "relay-1", "bearer": second, "zz": token }),
            None,
        )
        .await,
        relay_call(&service.client, "heartbeatClusterRelay", json!({ "token": newer }), Some(&newer)).await,
        relay_call(
            &service.client,
            name::GET_CLUSTER_INGRESS_ROUTE_TABLE,
            wire::to_request(&wire::GetClusterIngressRouteTable { known_revision: &newer }),
            Some(&newer),
        )
        .await,
    ] {
        answers.push(text(&result));
    }
    answers.push(service.admin_call("getClusterIngressRoutes", json!({ "clusterId": "c1" })).await.to_string());
    for answer in &answers {
        for secret in &secrets {
            assert!(!answer.contains(secret.as_str()), "an answer quotes a bearer or token: {answer}");
            assert!(!answer.contains(&secret[5..15]), "an answer quotes part of a bearer or token: {answer}");
        }
    }
    // Wrong-typed secrets are named, not echoed.
    match service
        .client
        .envelope(
            name::CONNECT_CLUSTER_RELAY,
            wire::to_request(&wire::ConnectClusterRelay {
                cluster_id: json!("c1"),
                relay_id: json!("relay-1"),
                bearer: json!(7),
            }),
            None,
        )
        .await
    {
        Ok(answer) => assert_eq!(answer["error"]["data"]["violations"], json!(["request bearer must be a string"])),
        Err(CallError::Http { status, .. }) => panic!("HTTP {status}"),
        Err(other) => panic!("{other}"),
    }
    service.stop().await;
});

on_both_stores!(the_request_timeout_does_not_cut_the_long_poll, |backend| async move {
    let service = TestService::start(backend).await;
    seed(&service).await;
    let settings = ControllerSettings { route_table_long_poll_ms: 2_500, ..ControllerSettings::default() };
    let limits = Limits { request_timeout: Duration::from_secs(1), ..Limits::default() };
    let peer = Peer::start_with(&service, settings, limits).await;
    let bearer = issue(&service, "c1", "relay-1").await;
    let (_, token) = connect_ok(&peer.client, "c1", "relay-1", &bearer).await;
    let table = put_route(&service, route("www.example.net", "web", "tcp", 443)).await;
    let started = Instant::now();
    let answer = route_table(&peer.client, &token, json!(1)).await.expect("held, not timed out");
    assert_eq!(answer, json!({ "table": table }));
    assert!(started.elapsed() >= Duration::from_millis(2_500), "{:?}", started.elapsed());
    peer.stop().await;
    service.stop().await;
});

on_both_stores!(the_cli_issues_credentials_and_edits_routes, |backend| async move {
    let service = TestService::start(backend).await;
    seed(&service).await;
    let identity = std::env::temp_dir().join(format!("cloudly-relay-cli-{}.json", uuid::Uuid::new_v4().simple()));
    std::fs::write(&identity, service.admin().to_string()).unwrap();
    let issued = service.cli(&identity, &["relay", "credential", "--cluster", "c1", "--relay", "relay-1"]).await;
    assert_eq!(issued["relay"]["origin"], json!("https://relay.example.net:8443"));
    let bearer = issued["bearer"].as_str().unwrap().to_owned();
    connect_ok(&service.client, "c1", "relay-1", &bearer).await;
    assert_eq!(
        service.cli(&identity, &["route", "list", "--cluster", "c1", "-o", "json"]).await,
        json!({ "table": null })
    );
    let put = service
        .cli(
            &identity,
            &[
                "route",
                "put",
                "--cluster",
                "c1",
                "--hostname",
                "www.example.net",
                "--service",
                "web",
                "--protocol",
                "tcp",
                "--port",
                "443",
            ],
        )
        .await;
    assert_eq!(put["table"]["revision"], json!(1));
    let udp = service
        .cli(
            &identity,
            &[
                "route",
                "put",
                "--cluster",
                "c1",
                "--hostname",
                "dns.example.net",
                "--service",
                "web",
                "--protocol",
                "udp",
                "--port",
                "443",
            ],
        )
        .await;
    assert_eq!(udp["table"]["routes"][0]["protocol"], json!("udp"));
    let listed = service.cli(&identity, &["route", "list", "--cluster", "c1", "-o", "json"]).await;
    assert_eq!(listed, udp);
    let deleted =
        service.cli(&identity, &["route", "delete", "--cluster", "c1", "--hostname", "dns.example.net"]).await;
    assert_eq!(deleted["table"]["revision"], json!(3));
    std::fs::remove_file(identity).unwrap();
    service.stop().await;
});

on_both_stores!(the_store_guards_the_election_and_the_table, |backend| async move {
    use cloudly::contract::{Id, Protocol};
    use cloudly::store::PutOutcome;
    use cloudly::store::relays::{IngressRoute, RelayHeartbeat};
    let service = TestService::start(backend).await;
    seed(&service).await;
    let store = service.store.clone();
    let id = |text: &str| Id::parse(text).unwrap();
    let (c1, relay) = (id("c1"), id("relay-1"));
    assert!(matches!(
        store.put_relay_credential(&id("nope"), &relay, [1; 32]).await.unwrap(),
        PutOutcome::Missing(cloudly::store::MissingKind::Cluster)
    ));
    let PutOutcome::Written(first) = store.put_relay_credential(&c1, &relay, [1; 32]).await.unwrap() else {
        panic!("written")
    };
    assert_eq!(first.generation, 1);
    let PutOutcome::Written(rotated) = store.put_relay_credential(&c1, &relay, [2; 32]).await.unwrap() else {
        panic!("written")
    };
    assert_eq!((rotated.generation, rotated.bearer_hash), (2, [2; 32]));
    assert_eq!(store.get_relay_credential(&c1, &relay).await.unwrap(), Some(rotated));
    // A connect that verified an older credential writes nothing.
    assert_eq!(store.connect_relay(&c1, &relay, 1, &id("conn-0"), [9; 32], 1_000).await.unwrap(), None);
    assert_eq!(store.connect_relay(&id("nope"), &relay, 2, &id("conn-0"), [9; 32], 1_000).await.unwrap(), None);
    let one = store.connect_relay(&c1, &relay, 2, &id("conn-1"), [11; 32], 1_000).await.unwrap().unwrap();
    assert_eq!((one.epoch, one.last_seen_ms), (1, 1_000));
    assert_eq!(
        store.heartbeat_relay([11; 32], 5_000, 30_000).await.unwrap(),
        RelayHeartbeat::Alive(cloudly::store::relays::StoredRelayConnection { last_seen_ms: 5_000, ..one.clone() })
    );
    assert_eq!(store.heartbeat_relay([12; 32], 5_000, 30_000).await.unwrap(), RelayHeartbeat::Unknown);
    // Expired: nothing is written.
    assert!(matches!(store.heartbeat_relay([11; 32], 35_000, 30_000).await.unwrap(), RelayHeartbeat::Lost(_)));
    let state = store.find_relay_connection([11; 32]).await.unwrap().unwrap();
    assert_eq!((state.connection.last_seen_ms, state.highest_epoch), (5_000, 1));
    let two = store.connect_relay(&c1, &relay, 2, &id("conn-2"), [22; 32], 6_000).await.unwrap().unwrap();
    assert_eq!(two.epoch, 2);
    assert!(matches!(store.heartbeat_relay([11; 32], 6_000, 30_000).await.unwrap(), RelayHeartbeat::Lost(_)));
    assert_eq!(store.find_relay_connection([11; 32]).await.unwrap().unwrap().highest_epoch, 2);

    let route = IngressRoute { hostname: "a.example".into(), service_id: id("web"), protocol: Protocol::Tcp, port: 80 };
    assert_eq!(store.get_route_table(&c1).await.unwrap(), None);
    assert_eq!(store.route_table_revision(&c1).await.unwrap(), None);
    assert!(matches!(store.delete_ingress_route(&c1, "a.example").await.unwrap(), PutOutcome::Written(None)));
    assert!(matches!(
        store.put_ingress_route(&id("nope"), &route).await.unwrap(),
        PutOutcome::Missing(cloudly::store::MissingKind::Cluster)
    ));
    let PutOutcome::Written(table) = store.put_ingress_route(&c1, &route).await.unwrap() else { panic!("written") };
    assert_eq!((table.revision, table.routes.clone()), (1, vec![route.clone()]));
    let PutOutcome::Written(same) = store.put_ingress_route(&c1, &route).await.unwrap() else { panic!("written") };
    assert_eq!(same, table);
    assert_eq!(store.route_table_revision(&c1).await.unwrap(), Some(1));
    assert_eq!(store.get_route_table(&c1).await.unwrap(), Some(table));
    service.stop().await;
});

on_both_stores!(every_role_lists_the_relays_bounded_with_their_election_and_no_secret, |backend| async move {
    use cloudly::contract::Id;
    use cloudly::domain::relays::RELAY_LIST_LIMIT;
    let service = TestService::start(backend).await;
    seed(&service).await;
    let viewer = serde_json::to_value(service.identity("viewer-1", Role::Viewer)).unwrap();
    let list = |cluster: &str| json!({ "clusterId": cluster });

    // No relay yet: an empty list, for a cluster with a relay origin and one without.
    for cluster in ["c1", "bare"] {
        let listed = service.call_as(&viewer, "listClusterRelays", list(cluster)).await.unwrap();
        assert_eq!(listed, json!({ "relays": [], "truncated": false }), "{cluster}");
    }

    // relay-1: issued, rotated, connected twice (the second supersedes the first); relay-2:
    // issued, never connected.
    let first_bearer = issue(&service, "c1", "relay-1").await;
    let bearer = issue(&service, "c1", "relay-1").await;
    let other_bearer = issue(&service, "c1", "relay-2").await;
    let connected_at = service.clock.0.load(Ordering::SeqCst);
    let (first, first_token) = connect_ok(&service.client, "c1", "relay-1", &bearer).await;
    service.clock.0.fetch_add(5_000, Ordering::SeqCst);
    let (second, second_token) = connect_ok(&service.client, "c1", "relay-1", &bearer).await;
    service.clock.0.fetch_add(5_000, Ordering::SeqCst);
    heartbeat(&service.client, Some(&second_token)).await.unwrap();
    let beat_at = service.clock.0.load(Ordering::SeqCst);

    let expected = json!({ "relays": [
        { "relayId": "relay-1", "credential": { "generation": 2 }, "connections": [
            { "id": second["id"], "epoch": 2, "lastSeenAt": beat_at, "elected": true },
            { "id": first["id"], "epoch": 1, "lastSeenAt": connected_at, "elected": false },
        ] },
        { "relayId": "relay-2", "credential": { "generation": 1 }, "connections": [] },
    ], "truncated": false });
    let mut answers = Vec::new();
    for role in [Role::Viewer, Role::Operator, Role::Admin] {
        let identity = serde_json::to_value(service.identity("reader-1", role)).unwrap();
        let listed = service.call_as(&identity, "listClusterRelays", list("c1")).await.unwrap();
        assert_eq!(listed, expected, "{role:?}");
        answers.push(listed.to_string());
    }

    // The lease passes without a heartbeat: nothing is elected any more.
    service.clock.0.fetch_add(30_000, Ordering::SeqCst);
    let lapsed = service.call_as(&viewer, "listClusterRelays", list("c1")).await.unwrap();
    assert_eq!(lapsed["relays"][0]["connections"][0]["elected"], json!(false));
    answers.push(lapsed.to_string());

    // Refusals: an unknown cluster is named, an invalid request and a missing identity refused.
    let missing = service.call_as(&viewer, "listClusterRelays", list("nope")).await;
    assert_eq!(expect_code(missing, "not-found").data["what"], json!("cluster"));
    for (invalid, violation) in [
        (json!({ "clusterId": "c1", "zz": 1 }), "request has an unknown member \"zz\""),
        (json!({}), "request clusterId is required"),
        (json!({ "clusterId": 7 }), "request clusterId must be an Id"),
    ] {
        let refused = service.call_as(&viewer, "listClusterRelays", invalid).await;
        assert_eq!(expect_code(refused, "request-invalid").data["violations"], json!([violation]));
    }
    let anonymous = relay_call(&service.client, "listClusterRelays", list("c1"), None).await;
    expect_code(anonymous, "identity-refused");
    // A read changes nothing: the same relays, the same election.
    assert_eq!(service.call_as(&viewer, "listClusterRelays", list("c1")).await.unwrap(), lapsed);

    // The CLI: a table by default, the answer as JSON or YAML.
    let identity = std::env::temp_dir().join(format!("cloudly-relay-list-{}.json", uuid::Uuid::new_v4().simple()));
    std::fs::write(&identity, viewer.to_string()).unwrap();
    let table = service.cli_text(&identity, &["relay", "list", "--cluster", "c1"]).await;
    let rows: Vec<Vec<&str>> = table.lines().map(|line| line.split_whitespace().collect()).collect();
    assert_eq!(rows[0], ["RELAY", "CREDENTIAL", "GENERATION", "CONNECTIONS", "EPOCH", "LAST", "SEEN", "AT", "ELECTED"]);
    assert_eq!((rows[1][0], rows[1][1], rows[1][2], rows[1][3], rows[1][5]), ("relay-1", "2", "2", "2", "no"));
    assert_eq!(rows[2], ["relay-2", "1", "0", "-", "-", "no"]);
    let as_json = service.cli_text(&identity, &["relay", "list", "--cluster", "c1", "-o", "json"]).await;
    assert_eq!(serde_json::from_str::<Value>(&as_json).unwrap(), lapsed);
    let as_yaml = service.cli_text(&identity, &["relay", "list", "--cluster", "c1", "-o", "yaml"]).await;
    assert!(as_yaml.contains("relayId: relay-1") && as_yaml.contains("elected: false"), "{as_yaml}");
    std::fs::remove_file(identity).unwrap();

    // No bearer, token or hash of either, whole or in part, in any answer or output.
    answers.extend([table, as_json, as_yaml]);
    for secret in [&first_bearer, &bearer, &other_bearer, &first_token, &second_token] {
        let hash = cloudly::domain::secrets::hash_value(secret);
        let hex: String = hash.iter().map(|byte| format!("{byte:02x}")).collect();
        for answer in &answers {
            assert!(!answer.contains(&secret[5..15]), "an answer quotes a bearer or token: {answer}");
            assert!(!answer.to_lowercase().contains(&hex[..16]), "an answer quotes a hash: {answer}");
        }
    }

    // Bounded: the store answers at most `limit` credentials (by relay id) and connections
    // (newest first); the method at most RELAY_LIST_LIMIT relays, and says when there are more.
    let (c1, store) = (Id::parse("c1").unwrap(), service.store.clone());
    let one = store.list_cluster_relays(&c1, 1).await.unwrap();
    assert_eq!(one.credentials.iter().map(|credential| credential.relay_id.as_str()).collect::<Vec<_>>(), ["relay-1"]);
    assert_eq!((one.connections.len(), one.connections[0].epoch, one.highest_epoch), (1, 2, Some(2)));
    for index in 0..RELAY_LIST_LIMIT - 1 {
        let relay = Id::parse(&format!("relay-x{index:03}")).unwrap();
        store.put_relay_credential(&c1, &relay, [2; 32]).await.unwrap();
    }
    let listed = service.call_as(&viewer, "listClusterRelays", list("c1")).await.unwrap();
    let relays = listed["relays"].as_array().unwrap();
    assert_eq!((relays.len(), &listed["truncated"]), (RELAY_LIST_LIMIT as usize, &json!(true)));
    assert_eq!((&relays[0], &relays[1]["relayId"]), (&lapsed["relays"][0], &json!("relay-2")));
    assert!(!listed.to_string().contains("relay-x098"), "the 101st relay by id is left out");
    service.stop().await;
});
