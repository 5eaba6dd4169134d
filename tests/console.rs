//! The operator console, driven in-process through `api::router` (`tower::ServiceExt::oneshot`)
//! on both stores: sign-in and its cookie, the security headers, every page of a cluster with a
//! designated ingress, a route and a node following, refusals of bad input, and the live stream.
//! The browser test (`tests/console_browser.rs`) drives the same pages in Chromium.

#[macro_use]
mod support;

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use cloudly::api::methods::name;
use cloudly::api::wire;
use cloudly::api::{AppState, Limits, router};
use cloudly::domain::identity::Role;
use http_body_util::BodyExt as _;
use serde_json::{Value, json};
use std::sync::atomic::Ordering;
use std::time::Duration;
use support::node_agent::node_bearer;
use support::service::{Backend, TestService, designation_request, reference_of, seed_plan, spec_body};
use tower::ServiceExt as _;

/// Cluster `c1`: `node-1` (its host carries `192.0.2.17`) and `node-2`; `web` on both, `ingress`
/// on `node-1`, designated; the seed's plan; a route `a.example.com` to `web` on 443.
async fn world(backend: Backend) -> TestService {
    let service = TestService::start(backend).await;
    service.seed_cluster("c1", "web").await;
    let node = json!({ "id": "node-1", "runtimeNamespace": "ns-main", "hostAddresses": ["192.0.2.17"] });
    service.admin_call("putClusterNode", json!({ "clusterId": "c1", "node": node, "rotateCredential": false })).await;
    let mut ingress = spec_body("c1", "ingress");
    ingress["replicas"] = json!(1);
    ingress["placement"] = json!({ "nodeIds": ["node-1"] });
    service.admin_call("putServiceRuntimeSpec", json!({ "spec": ingress, "expectedRevision": null })).await;
    service.admin_call("putRuntimeNetworkAddressPlan", json!({ "plan": seed_plan("c1", 1) })).await;
    service.admin_call("designateClusterIngress", designation_request("c1", "ingress", "m1", 1, Value::Null)).await;
    let route = json!({ "hostname": "a.example.com", "serviceId": "web", "protocol": "tcp", "port": 443 });
    service.admin_call("putClusterIngressRoute", json!({ "clusterId": "c1", "route": route })).await;
    service.controller().all_assignments_settled().await;
    service
}

/// The console of `service`, in-process.
struct Console {
    app: axum::Router,
}

struct Answer {
    status: StatusCode,
    headers: axum::http::HeaderMap,
    body: String,
}

impl Console {
    fn of(service: &TestService) -> Console {
        Console { app: router(AppState::new(service.controller(), Limits::default())) }
    }

    async fn send(&self, request: Request<Body>) -> Answer {
        let response = self.app.clone().oneshot(request).await.unwrap();
        let status = response.status();
        let headers = response.headers().clone();
        let body = String::from_utf8(response.into_body().collect().await.unwrap().to_bytes().to_vec()).unwrap();
        Answer { status, headers, body }
    }

    async fn get(&self, path: &str, cookie: Option<&str>) -> Answer {
        let mut request = Request::get(path);
        if let Some(cookie) = cookie {
            request = request.header(header::COOKIE, cookie);
        }
        self.send(request.body(Body::empty()).unwrap()).await
    }

    async fn post_form(&self, path: &str, form: &str, cookie: Option<&str>, tls: bool) -> Answer {
        let mut request = Request::post(path).header(header::CONTENT_TYPE, "application/x-www-form-urlencoded");
        if let Some(cookie) = cookie {
            request = request.header(header::COOKIE, cookie);
        }
        if tls {
            request = request.header("x-forwarded-proto", "https");
        }
        self.send(request.body(Body::from(form.to_owned())).unwrap()).await
    }

    /// Signs in with `identity` (pasted as its JSON) and answers the `Cookie` header to send.
    async fn sign_in(&self, identity: &Value) -> String {
        let form = format!("identity={}", urlencode(&identity.to_string()));
        let answer = self.post_form("/console/sign-in", &form, None, false).await;
        assert_eq!(answer.status, StatusCode::SEE_OTHER, "{}", answer.body);
        let set_cookie = answer.headers[header::SET_COOKIE].to_str().unwrap().to_owned();
        set_cookie.split(';').next().unwrap().to_owned()
    }
}

fn urlencode(text: &str) -> String {
    text.bytes()
        .map(|byte| match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (byte as char).to_string(),
            _ => format!("%{byte:02X}"),
        })
        .collect()
}

/// Every console answer carries the strict policy and no caching.
fn assert_secure_headers(answer: &Answer) {
    let policy = answer.headers[header::CONTENT_SECURITY_POLICY].to_str().unwrap();
    assert!(policy.contains("default-src 'none'") && policy.contains("script-src 'self'"), "{policy}");
    assert!(!policy.contains("unsafe-inline") && !policy.contains("unsafe-eval"), "{policy}");
    assert!(policy.contains("frame-ancestors 'none'"));
    assert_eq!(answer.headers[header::CACHE_CONTROL], "no-store");
    assert_eq!(answer.headers[header::X_CONTENT_TYPE_OPTIONS], "nosniff");
}

/// Fetches `path` until its body satisfies `done` (background reconciles and issues may still run).
async fn page_until(console: &Console, path: &str, cookie: &str, done: impl Fn(&str) -> bool) -> String {
    let mut last = String::new();
    for _ in 0..100 {
        let answer = console.get(path, Some(cookie)).await;
        assert_eq!(answer.status, StatusCode::OK, "{path}: {}", answer.body);
        if done(&answer.body) {
            return answer.body;
        }
        last = answer.body;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{path} never showed what was expected:\n{last}")
}

on_both_stores!(an_operator_signs_in_and_reads_every_page, |backend| async move {
    let service = world(backend).await;
    let console = Console::of(&service);
    let admin = service.admin();
    let secret_bearer = node_bearer(&service, "c1", "node-2").await;
    // relay-1 of c1 is issued a credential and connects: the cluster page lists it, elected.
    let relay = json!({ "clusterId": "c1", "relayId": "relay-1" });
    let relay_bearer = service.admin_call("issueClusterRelayCredential", relay.clone()).await["bearer"].clone();
    let connect = wire::ConnectClusterRelay {
        cluster_id: &relay["clusterId"],
        relay_id: &relay["relayId"],
        bearer: &relay_bearer,
    };
    let connected =
        service.client.envelope(name::CONNECT_CLUSTER_RELAY, wire::to_request(&connect), None).await.unwrap();
    let relay_token = connected["response"]["token"].as_str().expect("the relay connects").to_owned();
    let relay_bearer = relay_bearer.as_str().unwrap().to_owned();

    // Signed out: the sign-in page, with the policy; the assets are served from the binary.
    let answer = console.get("/console", None).await;
    assert_eq!(answer.status, StatusCode::UNAUTHORIZED);
    assert!(answer.body.contains("Sign in") && answer.body.contains(r#"name="identity""#));
    assert_secure_headers(&answer);
    let script = console.get("/console/assets/console.js", None).await;
    assert_eq!(script.status, StatusCode::OK);
    assert!(script.headers[header::CONTENT_TYPE].to_str().unwrap().starts_with("text/javascript"));
    assert!(script.body.contains("EventSource"));

    // Signing in sets a session cookie: a random id, HttpOnly and SameSite=Strict, Secure over TLS.
    let form = format!("identity={}", urlencode(&admin.to_string()));
    let signed_in = console.post_form("/console/sign-in", &form, None, false).await;
    assert_eq!(signed_in.status, StatusCode::SEE_OTHER);
    let set_cookie = signed_in.headers[header::SET_COOKIE].to_str().unwrap();
    assert!(set_cookie.starts_with("cloudly_console="), "{set_cookie}");
    assert!(set_cookie.contains("; HttpOnly") && set_cookie.contains("; SameSite=Strict"), "{set_cookie}");
    assert!(set_cookie.contains("; Path=/console") && !set_cookie.contains("Secure"), "{set_cookie}");
    assert!(!set_cookie.contains(admin["jwt"].as_str().unwrap()));
    let over_tls = console.post_form("/console/sign-in", &form, None, true).await;
    assert!(over_tls.headers[header::SET_COOKIE].to_str().unwrap().ends_with("; Secure"));
    let cookie = set_cookie.split(';').next().unwrap().to_owned();

    // Every page reads through the method table with the session's identity.
    let clusters = console.get("/console", Some(&cookie)).await;
    assert_eq!(clusters.status, StatusCode::OK);
    assert_secure_headers(&clusters);
    assert!(clusters.body.contains(r#"href="/console/clusters/c1""#));
    let cluster = console.get("/console/clusters/c1", Some(&cookie)).await.body;
    for expected in ["web", "ingress", "node-1", "node-2", "a.example.com", "Generation", r#"data-live="/clusters/c1""#]
    {
        assert!(cluster.contains(expected), "the cluster page shows {expected}:\n{cluster}");
    }
    let relays = &cluster[cluster.find(r#"<section id="relays">"#).expect("a relays section")..];
    let relays = &relays[..relays.find("</section>").unwrap()];
    for expected in [r#"<tr data-relay="relay-1">"#, "<td>1</td>", "0s ago", ">yes<", "issued (generation 1)"] {
        assert!(relays.contains(expected), "the relays table shows {expected}:\n{relays}");
    }
    let node = page_until(&console, "/console/clusters/c1/nodes/node-1", &cookie, |body| body.contains("<svg")).await;
    assert!(node.contains("tcp/443") && node.contains("corestore"), "grants and host platform endpoints:\n{node}");
    let web = console.get("/console/clusters/c1/services/web", Some(&cookie)).await;
    assert_eq!(web.status, StatusCode::OK);
    assert!(web.body.contains("Service web") && web.body.contains("registry.example/ingress:1.4.2"), "{}", web.body);
    assert!(web.body.contains("tcp/443") && web.body.contains(r#"href="/console/clusters/c1/nodes/node-2""#));
    let volumes = console.get("/console/clusters/c1/volumes", Some(&cookie)).await;
    assert_eq!(volumes.status, StatusCode::OK);

    // No page shows a token or a bearer.
    for page in [&clusters.body, &cluster, &node, &web.body, &volumes.body] {
        assert!(!page.contains(admin["jwt"].as_str().unwrap()), "a page shows the identity token");
        assert!(!page.contains(&secret_bearer), "a page shows a node bearer");
        for relay_secret in [&relay_bearer, &relay_token] {
            assert!(!page.contains(&relay_secret[5..15]), "a page shows a relay bearer or token");
        }
    }

    // Unknown ids and paths: a clear page, nothing else.
    for path in ["/console/clusters/nope", "/console/clusters/c1/nodes/nope", "/console/clusters/c1/services/nope"] {
        let answer = console.get(path, Some(&cookie)).await;
        assert_eq!(answer.status, StatusCode::NOT_FOUND, "{path}: {}", answer.body);
        assert!(answer.body.contains("Not found"));
    }
    assert_eq!(console.get("/console/clusters/c1/elsewhere", Some(&cookie)).await.status, StatusCode::NOT_FOUND);

    // A viewer reads every page (the console writes nothing, so a viewer is refused nothing).
    let viewer = serde_json::to_value(service.identity("viewer-1", Role::Viewer)).unwrap();
    let viewer_cookie = console.sign_in(&viewer).await;
    for path in
        ["/console", "/console/clusters/c1", "/console/clusters/c1/nodes/node-1", "/console/clusters/c1/volumes"]
    {
        assert_eq!(console.get(path, Some(&viewer_cookie)).await.status, StatusCode::OK, "{path}");
    }

    // Signing out ends the session.
    let out = console.post_form("/console/sign-out", "", Some(&cookie), false).await;
    assert_eq!(out.status, StatusCode::SEE_OTHER);
    assert!(out.headers[header::SET_COOKIE].to_str().unwrap().contains("Max-Age=0"));
    assert_eq!(console.get("/console", Some(&cookie)).await.status, StatusCode::UNAUTHORIZED);
    service.stop().await;
});

on_both_stores!(bad_input_gets_a_clear_page_and_changes_nothing, |backend| async move {
    let service = TestService::start(backend).await;
    service.put_pallet_cluster("c1").await;
    let console = Console::of(&service);

    // A forged cookie: the sign-in page, and the cookie is cleared.
    let forged = console.get("/console/clusters/c1", Some(&format!("cloudly_console={}", "ab".repeat(32)))).await;
    assert_eq!(forged.status, StatusCode::UNAUTHORIZED);
    assert!(forged.body.contains("unknown or has expired"));
    assert!(forged.headers[header::SET_COOKIE].to_str().unwrap().contains("Max-Age=0"));

    // An identity another controller signed, a tampered one, a token that is no token.
    let mut tampered = service.admin();
    tampered["role"] = json!("viewer");
    for pasted in [tampered.to_string(), "not an identity".to_owned(), "a.b.c".to_owned()] {
        let answer =
            console.post_form("/console/sign-in", &format!("identity={}", urlencode(&pasted)), None, false).await;
        assert_eq!(answer.status, StatusCode::UNAUTHORIZED, "{pasted}");
        assert!(answer.body.contains("refused") && !answer.headers.contains_key(header::SET_COOKIE));
    }

    // Signing in from a page's address goes on to that page, and only to a console page.
    let deep = console.get("/console/clusters/c1/volumes", None).await;
    assert!(deep.body.contains(r#"name="next" value="/clusters/c1/volumes""#), "{}", deep.body);
    let identity = urlencode(&service.admin().to_string());
    for (next, location) in
        [("%2Fclusters%2Fc1%2Fvolumes", "/console/clusters/c1/volumes"), ("%2F%2Fevil.example", "/console")]
    {
        let answer =
            console.post_form("/console/sign-in", &format!("identity={identity}&next={next}"), None, false).await;
        assert_eq!(answer.status, StatusCode::SEE_OTHER);
        assert_eq!(answer.headers[header::LOCATION], location);
    }

    // The token alone signs in too.
    let admin = service.admin();
    let token_only = console
        .post_form("/console/sign-in", &format!("identity={}", admin["jwt"].as_str().unwrap()), None, false)
        .await;
    assert_eq!(token_only.status, StatusCode::SEE_OTHER, "{}", token_only.body);

    // An oversized form, streamed or declared: a clear page, no session.
    let oversized = format!("identity={}", "a".repeat(64 * 1024));
    let answer = console.post_form("/console/sign-in", &oversized, None, false).await;
    assert_eq!(answer.status, StatusCode::PAYLOAD_TOO_LARGE);
    assert!(answer.body.contains("too large") && !answer.headers.contains_key(header::SET_COOKIE));
    let declared = Request::post("/console/sign-in")
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .header(header::CONTENT_LENGTH, 2 * 1024 * 1024)
        .body(Body::from(oversized.clone()))
        .unwrap();
    let answer = console.send(declared).await;
    assert_eq!(answer.status, StatusCode::PAYLOAD_TOO_LARGE);
    assert!(
        answer.body.contains("too large")
            && answer.headers[header::CONTENT_TYPE].to_str().unwrap().starts_with("text/html")
    );

    // A valid identity posted from another site: refused, no session.
    let cross_site = Request::post("/console/sign-in")
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .header(header::HOST, "127.0.0.1:8080")
        .header(header::ORIGIN, "https://elsewhere.example")
        .body(Body::from(format!("identity={}", urlencode(&admin.to_string()))))
        .unwrap();
    let answer = console.send(cross_site).await;
    assert_eq!(answer.status, StatusCode::FORBIDDEN);
    assert!(answer.body.contains("another site") && !answer.headers.contains_key(header::SET_COOKIE));

    // The session expires with the identity.
    let cookie = console.sign_in(&admin).await;
    assert_eq!(console.get("/console/clusters/c1", Some(&cookie)).await.status, StatusCode::OK);
    service.clock.0.store(admin["expiresAt"].as_u64().unwrap(), Ordering::SeqCst);
    let expired = console.get("/console/clusters/c1", Some(&cookie)).await;
    assert_eq!(expired.status, StatusCode::UNAUTHORIZED);
    assert!(expired.body.contains("Sign in"));

    // Only a signed-in session opens a live stream.
    assert_eq!(console.get("/console/live?page=/clusters/c1", None).await.status, StatusCode::UNAUTHORIZED);
    assert_eq!(console.get("/console/live?page=/clusters/c1", Some(&cookie)).await.status, StatusCode::UNAUTHORIZED);
    service.stop().await;
});

on_both_stores!(a_live_page_shows_a_new_designation_generation, |backend| async move {
    let service = world(backend).await;
    let console = Console::of(&service);
    let cookie = console.sign_in(&service.admin()).await;
    let response = console
        .app
        .clone()
        .oneshot(
            Request::get("/console/live?page=%2Fclusters%2Fc1")
                .header(header::COOKIE, &cookie)
                .body(Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.headers()[header::CONTENT_TYPE], "text/event-stream");
    let mut body = response.into_body();

    // A new designation generation: the stream sends the cluster page's main with it.
    let current =
        service.admin_call("getClusterIngressDesignation", json!({ "clusterId": "c1" })).await["designation"].clone();
    service
        .admin_call("designateClusterIngress", designation_request("c1", "ingress", "m2", 1, reference_of(&current)))
        .await;
    let mut received = String::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while !(received.contains("event: main") && received.contains("<strong class=\"generation\">2</strong>")) {
        let frame = tokio::time::timeout_at(deadline, body.frame()).await.expect("the new generation arrives live");
        if let Some(data) = frame.and_then(Result::ok).and_then(|frame| frame.into_data().ok()) {
            received.push_str(&String::from_utf8_lossy(&data));
        }
    }
    drop(body);

    // A session holds at most four live streams; one that ends makes room.
    let open = || async {
        let request = Request::get("/console/live?page=%2Fclusters%2Fc1").header(header::COOKIE, &cookie);
        console.app.clone().oneshot(request.body(Body::empty()).unwrap()).await.unwrap()
    };
    let mut streams = Vec::new();
    for _ in 0..4 {
        let stream = open().await;
        assert_eq!(stream.status(), StatusCode::OK);
        streams.push(stream);
    }
    assert_eq!(open().await.status(), StatusCode::TOO_MANY_REQUESTS);
    streams.pop();
    assert_eq!(open().await.status(), StatusCode::OK);
    drop(streams);
    service.stop().await;
});

/// A live stream over a real connection ends when the controller stops: it does not hold the
/// graceful shutdown open.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_live_stream_ends_when_the_controller_stops() {
    let service = TestService::start(Backend::Sqlite).await;
    service.put_pallet_cluster("c1").await;
    let client = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    let form = format!("identity={}", urlencode(&service.admin().to_string()));
    let signed_in = client
        .post(format!("{}/console/sign-in", service.base_url))
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(form)
        .send()
        .await
        .unwrap();
    assert_eq!(signed_in.status(), StatusCode::SEE_OTHER);
    let cookie = signed_in.headers()[header::SET_COOKIE].to_str().unwrap().split(';').next().unwrap().to_owned();
    let mut stream = client
        .get(format!("{}/console/live?page=%2Fclusters%2Fc1", service.base_url))
        .header(header::COOKIE, cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(stream.status(), StatusCode::OK);
    tokio::time::timeout(Duration::from_secs(10), service.stop())
        .await
        .expect("the controller stops with a stream open");
    let ended = tokio::time::timeout(Duration::from_secs(5), async { while let Ok(Some(_)) = stream.chunk().await {} });
    ended.await.expect("the stream ended");
}
