//! The wire (`02-wire.md`): malformed envelopes, unknown methods, bad requests, oversize bodies,
//! envelopes whose text breaks a raw-text rule (`01-contract-basics.md`) — each gets its named
//! error and changes nothing — plus health, readiness, metrics, the concurrency limit and
//! graceful shutdown.

#[macro_use]
mod support;

use cloudly::api::Limits;
use cloudly::api::methods::name;
use cloudly::api::wire;
use cloudly::contract::registration::ProtocolRefusal;
use cloudly::contract::{Id, NodeId};
use serde_json::{Value, json};
use sqlx::Connection as _;
use std::time::Duration;
use support::ingress::IngressWorld;
use support::node_agent::{NodeAgent, node_bearer};
use support::service::{Backend, TestService, designation_request};

async fn raw(service: &TestService, body: &[u8]) -> (u16, Value) {
    let (status, body) = service.client.post_raw(body.to_vec()).await.unwrap();
    (status, serde_json::from_slice(&body).unwrap_or(Value::Null))
}

async fn snapshot(service: &TestService) -> Value {
    json!({
        "clusters": service.admin_call("listClusters", json!({})).await,
        "nodes": service.admin_call("listClusterNodes", json!({ "clusterId": "c1" })).await,
        "designation": service.admin_call("getClusterIngressDesignation", json!({ "clusterId": "c1" })).await,
        "spec": service.admin_call("getServiceRuntimeSpec", json!({ "clusterId": "c1", "serviceId": "ingress" })).await,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_envelopes_get_400_and_change_nothing() {
    let service = TestService::start(Backend::Sqlite).await;
    service.seed_cluster("c1", "ingress").await;
    let before = snapshot(&service).await;
    let malformed = json!({ "error": { "text": "malformed typed request", "data": { "code": "malformed-envelope" } } });
    for body in [
        &b"not json"[..],
        b"",
        b"[1,2]",
        b"\"designateClusterIngress\"",
        br#"{"request":{}}"#,
        br#"{"method":5,"request":{}}"#,
        br#"{"method":"listClusters"}"#,
        br#"{"method":"listClusters","request":{}"#,
    ] {
        let (status, answer) = raw(&service, body).await;
        assert_eq!((status, &answer), (400, &malformed), "{}", String::from_utf8_lossy(body));
    }
    assert_eq!(snapshot(&service).await, before);
    service.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_method_is_named_with_the_routers_text() {
    let service = TestService::start(Backend::Sqlite).await;
    let envelope = json!({
        "method": "dropAllTables", "request": {}, "response": null,
        "correlation": { "id": "corr-1", "phase": "request" }, "localData": { "x": 1 },
    });
    let (status, answer) = raw(&service, envelope.to_string().as_bytes()).await;
    assert_eq!(status, 200);
    assert_eq!(answer["error"]["text"], json!("There is no available method for this call on the server side"));
    assert_eq!(answer["error"]["data"], json!({ "code": "unknown-method" }));
    assert_eq!(answer["correlation"], json!({ "id": "corr-1", "phase": "response" }));
    assert_eq!(answer["method"], json!("dropAllTables"));
    assert!(answer.get("localData").is_none(), "unknown envelope keys are never echoed");
    service.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_are_named_and_change_nothing() {
    let service = TestService::start(Backend::Sqlite).await;
    service.seed_cluster("c1", "ingress").await;
    let admin = service.admin();
    let before = snapshot(&service).await;
    let cases: Vec<(&str, Value, &str)> = vec![
        ("putCluster", json!("not an object"), "request-invalid"),
        ("designateClusterIngress", json!([1]), "request-invalid"),
        ("getClusterIngressDesignation", json!({ "identity": admin, "clusterId": 5 }), "request-invalid"),
        (
            "getClusterIngressDesignation",
            json!({ "identity": admin, "clusterId": "c1", "extra": true }),
            "request-invalid",
        ),
        (
            "putServiceRuntimeSpec",
            json!({ "identity": admin, "spec": { "image": 7 }, "expectedRevision": 1 }),
            "request-invalid",
        ),
        (
            "putClusterNode",
            json!({ "identity": admin, "clusterId": "c1", "node": { "id": "Node_1", "runtimeNamespace": "ns", "hostAddresses": [] }, "rotateCredential": true }),
            "request-invalid",
        ),
        (
            "putCluster",
            json!({ "identity": admin, "cluster": { "id": "c1" }, "expectedRevision": 1 }),
            "request-invalid",
        ),
        (
            "listClusterIngressDesignations",
            json!({ "identity": admin, "clusterId": "c1", "limit": 501 }),
            "request-invalid",
        ),
        (
            "deleteService",
            json!({ "identity": admin, "clusterId": "c1", "serviceId": "ingress", "expectedRevision": 1.5 }),
            "request-invalid",
        ),
        ("designateClusterIngress", json!({ "identity": { "jwt": "x" } }), "identity-refused"),
    ];
    for (method, request, code) in cases {
        let envelope = json!({ "method": method, "request": request, "response": null, "correlation": { "id": "c", "phase": "request" } });
        let (status, answer) = raw(&service, envelope.to_string().as_bytes()).await;
        assert_eq!(status, 200, "{method}");
        assert_eq!(answer["error"]["data"]["code"], json!(code), "{method}: {answer}");
        assert_eq!(answer["response"], Value::Null);
    }
    // An unknown member is named, its value never echoed.
    let mut request = designation_request("c1", "ingress", "m1", 1, Value::Null);
    request["identity"] = admin.clone();
    request["sneaky"] = json!("SECRET-VALUE-123");
    let envelope = json!({ "method": "designateClusterIngress", "request": request, "response": null, "correlation": { "id": "c", "phase": "request" } });
    let (_, answer) = raw(&service, envelope.to_string().as_bytes()).await;
    assert_eq!(answer["error"]["data"]["code"], json!("request-invalid"));
    assert!(answer["error"]["data"]["violations"][0].as_str().unwrap().contains("sneaky"));
    assert!(!answer.to_string().contains("SECRET-VALUE-123"));
    assert_eq!(snapshot(&service).await, before);
    service.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversize_body_gets_413_and_changes_nothing() {
    let limits = Limits { body_bytes: 4 * 1024, ..Limits::default() };
    let service = TestService::start_with(Backend::Sqlite, limits).await;
    service.seed_cluster("c1", "ingress").await;
    let before = snapshot(&service).await;
    let mut spec = support::service::spec_body("c1", "ingress");
    spec["image"] = json!("x".repeat(8 * 1024));
    let envelope = json!({ "method": "putServiceRuntimeSpec", "request": { "identity": service.admin(), "spec": spec, "expectedRevision": 1 }, "response": null, "correlation": { "id": "c", "phase": "request" } });
    let (status, answer) = raw(&service, envelope.to_string().as_bytes()).await;
    assert_eq!(status, 413);
    assert_eq!(answer["error"]["data"]["code"], json!("body-too-large"));
    assert_eq!(snapshot(&service).await, before);
    service.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_readiness_and_metrics_answer() {
    let service = TestService::start(Backend::Postgres).await;
    service.admin_call("listClusters", json!({})).await;
    let http = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<http_body_util::Empty<hyper::body::Bytes>>();
    let get = |path: &str| {
        let uri: hyper::Uri = format!("{}{path}", service.base_url).parse().unwrap();
        let http = http.clone();
        async move {
            let response = http.get(uri).await.unwrap();
            let status = response.status().as_u16();
            let body = http_body_util::BodyExt::collect(response.into_body()).await.unwrap().to_bytes();
            (status, String::from_utf8(body.to_vec()).unwrap())
        }
    };
    assert_eq!(get("/healthz").await.0, 200);
    let (status, body) = get("/readyz").await;
    assert_eq!((status, body.as_str()), (200, r#"{"ready":true}"#));
    let (status, metrics) = get("/metrics").await;
    assert_eq!(status, 200);
    let listed = series_value(&metrics, r#"cloudly_requests_total{method="listClusters",outcome="ok"}"#);
    assert!(listed.is_some_and(|count| count >= 1.0), "{metrics}");
    let timed = series_value(&metrics, r#"cloudly_request_duration_seconds_count{method="listClusters"}"#);
    assert!(timed.is_some_and(|count| count >= 1.0), "{metrics}");
    service.stop().await;
}

/// The value of the series `series` (name and labels as rendered) in a Prometheus text, if it is
/// there. Every family is on every scrape (zero until counted), so a check reads the count.
fn series_value(metrics: &str, series: &str) -> Option<f64> {
    metrics.lines().find_map(|line| line.strip_prefix(series)?.strip_prefix(' ')?.trim().parse().ok())
}

/// Holds the cluster row's lock from another connection, so a designation waits inside the store.
async fn hold_cluster_lock(service: &TestService) -> sqlx::PgConnection {
    let mut connection = sqlx::PgConnection::connect(&service.database.url).await.unwrap();
    sqlx::query("BEGIN").execute(&mut connection).await.unwrap();
    sqlx::query("SELECT id FROM clusters WHERE id = 'c1' FOR UPDATE").execute(&mut connection).await.unwrap();
    connection
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn over_the_concurrency_limit_requests_get_503_with_retry_after() {
    let limits = Limits { concurrent_requests: 1, ..Limits::default() };
    let service = std::sync::Arc::new(TestService::start_with(Backend::Postgres, limits).await);
    service.seed_cluster("c1", "ingress").await;
    let mut lock = hold_cluster_lock(&service).await;
    let blocked = {
        let service = service.clone();
        tokio::spawn(async move {
            service
                .admin_call("designateClusterIngress", designation_request("c1", "ingress", "m1", 1, Value::Null))
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (status, body) = service.client.post_raw(br#"{"method":"listClusters","request":{}}"#.to_vec()).await.unwrap();
    assert_eq!(status, 503);
    assert_eq!(serde_json::from_slice::<Value>(&body).unwrap()["error"]["data"]["code"], json!("overloaded"));
    sqlx::query("ROLLBACK").execute(&mut lock).await.unwrap();
    let answer = blocked.await.unwrap();
    assert_eq!(answer["replayed"], json!(false));
    std::sync::Arc::into_inner(service).unwrap().stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn graceful_shutdown_finishes_in_flight_requests() {
    let mut service = TestService::start(Backend::Postgres).await;
    service.seed_cluster("c1", "ingress").await;
    let mut lock = hold_cluster_lock(&service).await;
    let client = service.client.clone();
    let admin = service.admin();
    let in_flight = tokio::spawn(async move {
        let mut request = designation_request("c1", "ingress", "m1", 1, Value::Null);
        request["identity"] = admin;
        client.call("designateClusterIngress", request).await
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let server = service.server.take().unwrap();
    let stopping = tokio::spawn(server.stop());
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!stopping.is_finished(), "the server waits for the in-flight request");
    sqlx::query("ROLLBACK").execute(&mut lock).await.unwrap();
    let answer = in_flight.await.unwrap().expect("the in-flight request completes");
    assert_eq!(answer["designation"]["generation"], json!(1));
    stopping.await.unwrap().unwrap();
    assert!(service.client.post_raw(b"{}".to_vec()).await.is_err(), "no new connections after the stop");
    service.stop().await;
}

/// The violation of a duplicate key anywhere in an envelope.
const DUPLICATE_KEY: &str = "the envelope's JSON text must not repeat a key in one object";

/// The violation of a fraction, an exponent, `-0` or a number outside ±(2^53−1) anywhere in an
/// envelope.
const NUMBER: &str = "the envelope's JSON text must write every number as an integer from -(2^53-1) to \
                                  2^53-1, without fraction, exponent or -0";

/// The compact text of an envelope of `method` with `request` and correlation id `c`, and
/// `authInfo.jwt` when given; tests edit the text to break a raw-text rule.
fn envelope_text(method: &str, request: &Value, jwt: Option<&str>) -> String {
    let mut envelope = json!({
        "method": method, "request": request, "response": null,
        "correlation": { "id": "c", "phase": "request" },
    });
    if let Some(jwt) = jwt {
        envelope["authInfo"] = json!({ "jwt": jwt });
    }
    envelope.to_string()
}

/// `text` with the first `from` replaced by `to`; `from` must occur.
fn edited(text: &str, from: &str, to: &str) -> String {
    // The texts carry identities and bearers: messages name the edit only.
    assert!(text.contains(from), "{from} is not in the envelope");
    text.replacen(from, to, 1)
}

on_both_stores!(an_envelope_breaking_a_raw_text_rule_is_request_invalid_and_changes_nothing, |backend| async move {
    let service = TestService::start(backend).await;
    service.seed_cluster("c1", "ingress").await;
    let before = snapshot(&service).await;
    let admin = service.admin();
    let mut designation = designation_request("c1", "ingress", "m1", 1, Value::Null);
    designation["identity"] = admin.clone();
    let designate = envelope_text("designateClusterIngress", &designation, None);
    let list = envelope_text("listClusters", &json!({ "identity": admin }), None);
    let get = envelope_text("getCluster", &json!({ "identity": admin, "clusterId": "c1" }), None);
    let keys = envelope_text("getControllerSigningKeys", &json!({}), None);
    let heartbeat =
        envelope_text(name::HEARTBEAT_CLUSTER_RELAY, &wire::to_request(&wire::NoMembers {}), Some("szrc_unknown"));
    // (method, envelope, the text to edit, its replacement, the rule broken)
    let cases = [
        // Two `mutationId` members: a designation whose request has no single reading.
        (
            "designateClusterIngress",
            &designate,
            r#""mutationId":"m1""#,
            r#""mutationId":"m1","mutationId":"m2""#,
            DUPLICATE_KEY,
        ),
        (
            "designateClusterIngress",
            &designate,
            r#""clusterId":"c1""#,
            r#""clusterId":"c1","clusterId":"c1""#,
            DUPLICATE_KEY,
        ),
        ("designateClusterIngress", &designate, r#""expectedSpecRevision":1"#, r#""expectedSpecRevision":1.0"#, NUMBER),
        ("designateClusterIngress", &designate, r#""expectedSpecRevision":1"#, r#""expectedSpecRevision":1e0"#, NUMBER),
        ("designateClusterIngress", &designate, r#""generation":3"#, r#""generation":3E+0"#, NUMBER),
        ("designateClusterIngress", &designate, r#""generation":3"#, r#""generation":1e400"#, NUMBER),
        ("designateClusterIngress", &designate, r#""generation":3"#, r#""generation":9007199254740993"#, NUMBER),
        // Outside the request: the envelope's own members, and members it ignores.
        ("listClusters", &list, r#""request":{"#, r#""request":{},"request":{"#, DUPLICATE_KEY),
        ("listClusters", &list, r#""phase":"request""#, r#""phase":"request","attempt":-0"#, NUMBER),
        ("getCluster", &get, r#""response":null"#, r#""localData":{"x":1,"x":1}"#, DUPLICATE_KEY),
        ("getCluster", &get, r#""response":null"#, r#""localData":{"x":-1e400}"#, NUMBER),
        // Before any principal: anyone, and a relay with an unknown token.
        ("getControllerSigningKeys", &keys, r#""request":{}"#, r#""request":{"a":0.5}"#, NUMBER),
        ("heartbeatClusterRelay", &heartbeat, r#""request":{}"#, r#""request":{"a":1,"a":1}"#, DUPLICATE_KEY),
    ];
    for (method, envelope, from, to, violation) in cases {
        let text = edited(envelope, from, to);
        let (status, answer) = raw(&service, text.as_bytes()).await;
        assert_eq!(status, 200, "{method}: {to}");
        assert_eq!(
            answer["error"]["data"],
            json!({ "code": "request-invalid", "violations": [violation] }),
            "{method}: {to}"
        );
        assert_eq!(answer["error"]["text"], json!("request invalid"), "{method}: {to}");
        assert_eq!((&answer["method"], &answer["response"]), (&json!(method), &Value::Null), "{method}: {to}");
        assert_eq!(answer["correlation"]["id"], json!("c"), "{method}: {to}");
        assert_eq!(answer["correlation"]["phase"], json!("response"), "{method}: {to}");
    }
    assert_eq!(snapshot(&service).await, before);
    // The same designation without the broken rule is accepted.
    let (status, answer) = raw(&service, designate.as_bytes()).await;
    assert_eq!((status, &answer["response"]["replayed"]), (200, &json!(false)), "{answer}");
    service.stop().await;
});

on_both_stores!(a_correlation_id_that_is_not_a_string_is_a_malformed_envelope, |backend| async move {
    let service = TestService::start(backend).await;
    service.seed_cluster("c1", "ingress").await;
    let before = snapshot(&service).await;
    let malformed = json!({ "error": { "text": "malformed typed request", "data": { "code": "malformed-envelope" } } });
    let list = envelope_text("listClusters", &json!({ "identity": service.admin() }), None);
    for id in ["5", "null", "{}", "[\"c\"]", "1.5", "1e400"] {
        let text = edited(&list, r#""id":"c""#, &format!(r#""id":{id}"#));
        let (status, answer) = raw(&service, text.as_bytes()).await;
        assert_eq!((status, &answer), (400, &malformed), "correlation.id {id}");
    }
    assert_eq!(snapshot(&service).await, before);
    service.stop().await;
});

on_both_stores!(a_socket_frame_breaking_a_raw_text_rule_is_request_invalid, |backend| async move {
    let service = TestService::start(backend).await;
    service.seed_cluster("c1", "ingress").await;
    let bearer = node_bearer(&service, "c1", "node-1").await;
    let agent = NodeAgent::connect(&service).await;
    let open = wire::to_request(&wire::OpenRuntimeSession { cluster_id: "c1", node_id: "node-1", bearer: &bearer });
    let open = envelope_text(name::OPEN_RUNTIME_SESSION, &open, None);
    for (id, text, violation) in [
        ("dup", edited(&open, r#""nodeId":"node-1""#, r#""nodeId":"node-1","nodeId":"node-1""#), DUPLICATE_KEY),
        ("fraction", edited(&open, r#""phase":"request""#, r#""phase":"request","attempt":2.5"#), NUMBER),
        ("range", edited(&open, r#""response":null"#, r#""response":1e400"#), NUMBER),
    ] {
        let answer = agent.raw_envelope(id, edited(&text, r#""id":"c""#, &format!(r#""id":"{id}""#))).await;
        assert_eq!(answer["error"]["data"], json!({ "code": "request-invalid", "violations": [violation] }), "{id}");
        assert_eq!(answer["method"], json!("openRuntimeSession"));
    }
    let (cluster, node) = (Id::parse("c1").unwrap(), NodeId::parse("node-1").unwrap());
    let current = service.store.current_session(&cluster, &node).await.unwrap();
    assert_eq!(current, None, "no session was opened");
    // The same open without the broken rule succeeds.
    let answer = agent.raw_envelope("plain", edited(&open, r#""id":"c""#, r#""id":"plain""#)).await;
    assert_eq!(answer["response"]["session"]["generation"], json!(1), "{answer}");
    service.stop().await;
});

on_both_stores!(a_registration_without_a_single_reading_is_refused_by_its_protocol_check, |backend| async move {
    let world = IngressWorld::build(backend).await;
    let registration = envelope_text("registerClusterIngress", &world.registration(), Some(&world.token));
    let bearer = format!(r#""bearer":"{}""#, world.bearer);
    let refused = json!({ "text": "protocol refused", "data": ProtocolRefusal::controller().to_value() });
    // The ingress protocol reads its offer before anything else; a text without a single JSON
    // value has no offer to read.
    for (case, text) in [
        ("two bearers", edited(&registration, &bearer, &format!("{bearer},{bearer}"))),
        ("two maximums", edited(&registration, r#""maximum":1"#, r#""maximum":1,"maximum":1"#)),
        (
            "a duplicate outside the request",
            edited(&registration, r#""response":null"#, r#""localData":{"x":1,"x":2}"#),
        ),
        ("1e400", edited(&registration, r#""version":"1.4.2""#, r#""version":"1.4.2","build":1e400"#)),
    ] {
        let (status, answer) = raw(&world.service, text.as_bytes()).await;
        assert_eq!((status, &answer["error"]), (200, &refused), "{case}");
    }
    // Plain data keeps its numbers: a fraction is judged where it stands, as the validator names it.
    let fraction = edited(&registration, r#""maximum":1"#, r#""maximum":1.0"#);
    let (_, answer) = raw(&world.service, fraction.as_bytes()).await;
    assert_eq!(answer["error"], refused);
    let version = edited(&registration, r#""version":"1.4.2""#, r#""version":1.5"#);
    let (_, answer) = raw(&world.service, version.as_bytes()).await;
    assert_eq!(answer["error"]["data"]["reason"], json!("registration-invalid"), "{answer}");
    let outside = edited(&registration, r#""response":null"#, r#""localData":{"x":1.5}"#);
    let (_, answer) = raw(&world.service, outside.as_bytes()).await;
    assert_eq!(answer["response"]["accepted"], json!(true), "{answer}");
    assert_eq!(world.registrations().await.len(), 1, "only the readable registration is recorded");
    world.stop().await;
});
