//! The wire (`02-wire.md`): malformed envelopes, unknown methods, bad requests, oversize bodies —
//! each gets its named error and changes nothing — plus health, readiness, metrics, the
//! concurrency limit and graceful shutdown.

mod support;

use cloudly::api::Limits;
use serde_json::{Value, json};
use sqlx::Connection as _;
use std::time::Duration;
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
    assert!(metrics.contains("cloudly_requests_total"), "{metrics}");
    assert!(metrics.contains(r#"method="listClusters""#), "{metrics}");
    assert!(metrics.contains("cloudly_request_duration_seconds_bucket"), "{metrics}");
    service.stop().await;
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
