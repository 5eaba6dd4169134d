//! Operability of a real `cloudly serve` process: `/metrics` after some requests has `# HELP` and
//! `# TYPE` for every family, the kind of the table in `src/metrics.rs`, `cloudly_build_info`,
//! the `process_*` figures and the store pool's gauges (both stores); every metric name the code
//! records is in the table; every JSON log line of a request — over HTTP and on a socket — carries
//! its correlation id and principal, and an administrator write logs what it changed;
//! `--log-format human` writes no colour codes to a pipe.

#[macro_use]
mod support;

use cloudly::api::methods::name;
use cloudly::api::wire;
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead as _, BufReader};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use support::database::{Backend, TestDatabase};
use support::node_agent::NodeAgent;
use support::process::{Scratch, Serving, start};

/// `POST /typedrequest` of `envelope` to `serving`, as text; answers the answer envelope.
async fn post(serving: &Serving, envelope: Value) -> Value {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let response = reqwest::Client::new()
        .post(format!("{}/typedrequest", serving.base_url))
        .header("content-type", "application/json")
        .body(envelope.to_string())
        .send()
        .await
        .unwrap();
    serde_json::from_str(&response.text().await.unwrap()).unwrap()
}

async fn get(serving: &Serving, path: &str) -> String {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::get(format!("{}{path}", serving.base_url)).await.unwrap().text().await.unwrap()
}

/// A family of the Prometheus text: its help, its type and its samples (name with labels, value).
#[derive(Debug, Default)]
struct Family {
    help: Option<String>,
    kind: Option<String>,
    samples: Vec<(String, f64)>,
}

/// The families of a Prometheus text, by name. A histogram's `_bucket`, `_sum` and `_count`
/// samples belong to its family.
fn families(text: &str) -> BTreeMap<String, Family> {
    let mut families: BTreeMap<String, Family> = BTreeMap::new();
    for line in text.lines().filter(|line| !line.trim().is_empty()) {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').unwrap();
            families.entry(name.to_owned()).or_default().help = Some(help.to_owned());
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap();
            families.entry(name.to_owned()).or_default().kind = Some(kind.to_owned());
        } else {
            let (sample, value) = line.rsplit_once(' ').unwrap();
            let name = sample.split('{').next().unwrap();
            let family = ["_bucket", "_sum", "_count"]
                .iter()
                .filter_map(|suffix| name.strip_suffix(suffix))
                .find(|base| families.get(*base).is_some_and(|family| family.kind.as_deref() == Some("histogram")))
                .unwrap_or(name);
            families.entry(family.to_owned()).or_default().samples.push((sample.to_owned(), value.parse().unwrap()));
        }
    }
    families
}

/// The value of the sample `sample` (name and labels as rendered).
fn sample(families: &BTreeMap<String, Family>, family: &str, sample: &str) -> f64 {
    let found = families.get(family).unwrap_or_else(|| panic!("no family {family}"));
    found.samples.iter().find(|(name, _)| name == sample).unwrap_or_else(|| panic!("no {sample}: {found:?}")).1
}

fn organization() -> Value {
    json!({ "organization": { "id": "org", "name": "Org" } })
}

fn cluster() -> Value {
    json!({ "cluster": { "id": "c1", "organizationId": "org", "runtime": { "phase": "pallet", "generation": 3 },
        "relayOrigin": null, "fleetCutoverIngressDesignation": null }, "expectedRevision": null })
}

fn node() -> Value {
    json!({ "clusterId": "c1", "node": { "id": "node-1", "runtimeNamespace": "ns-main", "hostAddresses": [] },
            "rotateCredential": false })
}

on_both_stores!(metrics_have_help_and_type_build_info_process_figures_and_pool_gauges, |backend| async move {
    let database = TestDatabase::create(backend).await;
    let scratch = Scratch::new("cloudly-observability");
    let serving = start(&scratch.join("data"), &database.url).serving();
    serving.call_as_admin("putOrganization", organization()).await.unwrap();
    serving.call_as_admin("getOrganization", json!({ "organizationId": "org" })).await.unwrap();
    let refused =
        post(&serving, json!({ "method": "getOrganization", "request": {}, "correlation": { "id": "x" } })).await;
    assert!(refused["error"].is_object(), "{refused}");

    let text = get(&serving, "/metrics").await;
    let families = families(&text);
    for (name, family) in
        families.iter().filter(|(name, _)| name.starts_with("cloudly_") || name.starts_with("process_"))
    {
        let help = family.help.as_deref().unwrap_or_else(|| panic!("{name} has no # HELP:\n{text}"));
        let kind = family.kind.as_deref().unwrap_or_else(|| panic!("{name} has no # TYPE:\n{text}"));
        let metric = cloudly::metrics::find(name).unwrap_or_else(|| panic!("{name} is not in src/metrics.rs"));
        assert_eq!((help, kind), (metric.help, metric.kind.as_str()), "{name}");
        assert!(!family.samples.is_empty(), "{name}");
    }

    let build_info = format!("cloudly_build_info{{version=\"{}\",profile=\"debug\"}}", env!("CARGO_PKG_VERSION"));
    assert_eq!(sample(&families, "cloudly_build_info", &build_info), 1.0);
    assert!(sample(&families, "process_resident_memory_bytes", "process_resident_memory_bytes") > 1_000_000.0);
    assert!(sample(&families, "process_cpu_seconds_total", "process_cpu_seconds_total") > 0.0);
    assert!(sample(&families, "process_open_fds", "process_open_fds") >= 3.0);
    let started = sample(&families, "process_start_time_seconds", "process_start_time_seconds");
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64();
    assert!(started <= now + 1.0 && started > now - 600.0, "started {started}, now {now}");
    let in_use =
        sample(&families, "cloudly_store_pool_connections", "cloudly_store_pool_connections{state=\"in_use\"}");
    let idle = sample(&families, "cloudly_store_pool_connections", "cloudly_store_pool_connections{state=\"idle\"}");
    let max = sample(&families, "cloudly_store_pool_max_connections", "cloudly_store_pool_max_connections");
    assert!(idle >= 1.0 && in_use + idle <= max, "in use {in_use}, idle {idle}, max {max}");
    assert_eq!(sample(&families, "cloudly_store_pool_waiting", "cloudly_store_pool_waiting"), 0.0);
    let operations = &families["cloudly_store_operation_duration_seconds"];
    assert!(
        operations.samples.iter().any(|(name, _)| name.contains("operation=\"insert organizations\"")),
        "{operations:?}"
    );
    let written = "cloudly_requests_total{method=\"putOrganization\",outcome=\"ok\"}";
    assert_eq!(sample(&families, "cloudly_requests_total", written), 1.0);
    serving.terminate();
    database.drop_now().await;
});

on_both_stores!(
    every_family_of_the_table_is_on_the_first_scrape_with_its_zero_or_current_value,
    |backend| async move {
        let database = TestDatabase::create(backend).await;
        let scratch = Scratch::new("cloudly-observability");
        let serving = start(&scratch.join("data"), &database.url).serving();
        // The first request the process answers: nothing has been called yet.
        let text = get(&serving, "/metrics").await;
        let first = families(&text);
        for metric in cloudly::metrics::METRICS {
            let family =
                first.get(metric.name).unwrap_or_else(|| panic!("{} is not on the first scrape:\n{text}", metric.name));
            assert_eq!(family.kind.as_deref(), Some(metric.kind.as_str()), "{}", metric.name);
            assert_eq!(family.help.as_deref(), Some(metric.help), "{}", metric.name);
            assert!(!family.samples.is_empty(), "{} has no sample:\n{text}", metric.name);
        }
        // Zero where nothing happened, not absent.
        assert_eq!(sample(&first, "cloudly_requests_total", "cloudly_requests_total"), 0.0);
        assert_eq!(sample(&first, "cloudly_designations_total", "cloudly_designations_total"), 0.0);
        assert_eq!(sample(&first, "cloudly_request_duration_seconds", "cloudly_request_duration_seconds_count"), 0.0);
        // The current value of what the keys and the store set before the first request: the
        // recorder is installed before the store opens.
        assert_eq!(sample(&first, "cloudly_signing_key_available", "cloudly_signing_key_available"), 1.0, "{text}");
        if backend == Backend::Postgres {
            // The listener connects in the background; its gauge is on the first scrape either way.
            let mut connected =
                sample(&first, "cloudly_signal_listener_connected", "cloudly_signal_listener_connected");
            let deadline = Instant::now() + Duration::from_secs(10);
            while connected != 1.0 && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(50)).await;
                let again = families(&get(&serving, "/metrics").await);
                connected = sample(&again, "cloudly_signal_listener_connected", "cloudly_signal_listener_connected");
            }
            assert_eq!(connected, 1.0);
        }
        serving.terminate();
        database.drop_now().await;
    }
);

on_both_stores!(
    the_controller_version_is_answered_to_anyone_with_the_request_id_of_its_log_lines,
    |backend| async move {
        let database = TestDatabase::create(backend).await;
        let scratch = Scratch::new("cloudly-observability");
        let serving = start(&scratch.join("data"), &database.url).serving();
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::new();
        let id = format!("obs-{}", uuid::Uuid::new_v4().simple());
        let envelope = json!({ "method": "getControllerVersion", "request": {}, "correlation": { "id": id } });
        let response = http
            .post(format!("{}/typedrequest", serving.base_url))
            .header("content-type", "application/json")
            .body(envelope.to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(response.headers()["x-request-id"], id.as_str());
        let answer: Value = serde_json::from_str(&response.text().await.unwrap()).unwrap();
        assert_eq!(
            answer["response"],
            json!({ "version": env!("CARGO_PKG_VERSION"), "profile": "debug", "controllerId": "cloudly" }),
            "{answer}"
        );
        // The id the answer carries is the one of the server's log lines of the request.
        let lines = lines_of(&serving, &id).await;
        assert!(lines.iter().any(|line| line["message"] == "typed request" && line["outcome"] == "ok"), "{lines:?}");
        // A correlation id that cannot be a log id gets a fresh one, the same in the header and the log.
        let envelope = json!({ "method": "getControllerVersion", "request": {}, "correlation": { "id": "has space" } });
        let response = http.post(format!("{}/typedrequest", serving.base_url)).body(envelope.to_string()).send().await;
        let fresh = response.unwrap().headers()["x-request-id"].to_str().unwrap().to_owned();
        assert_ne!(fresh, "has space");
        assert!(!lines_of(&serving, &fresh).await.is_empty(), "{}", serving.log());
        // Every other answer carries one too.
        for path in ["/healthz", "/readyz", "/metrics"] {
            let response = http.get(format!("{}{path}", serving.base_url)).send().await.unwrap();
            assert!(response.headers().get("x-request-id").is_some_and(|id| !id.is_empty()), "{path}");
        }
        serving.terminate();
        database.drop_now().await;
    }
);

/// The metric names recorded by `counter!`, `gauge!` and `histogram!` in `src/`, with the kind.
fn recorded_in_source() -> BTreeSet<(String, &'static str)> {
    fn walk(dir: &std::path::Path, found: &mut BTreeSet<(String, &'static str)>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, found);
            } else if path.extension().is_some_and(|extension| extension == "rs") {
                let text = std::fs::read_to_string(&path).unwrap();
                for (macro_name, kind) in [("counter!(", "counter"), ("gauge!(", "gauge"), ("histogram!(", "histogram")]
                {
                    for (at, _) in text.match_indices(macro_name) {
                        let rest = text[at + macro_name.len()..].trim_start();
                        let name = rest.strip_prefix('"').and_then(|rest| rest.split('"').next());
                        let name =
                            name.unwrap_or_else(|| panic!("{}: a {macro_name} without a literal name", path.display()));
                        found.insert((name.to_owned(), kind));
                    }
                }
            }
        }
    }
    let mut found = BTreeSet::new();
    walk(&std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src"), &mut found);
    found
}

#[test]
fn every_metric_the_code_records_is_in_the_table_with_its_kind() {
    let recorded = recorded_in_source();
    assert!(recorded.len() > 20, "{recorded:?}");
    for (name, kind) in &recorded {
        let metric =
            cloudly::metrics::find(name).unwrap_or_else(|| panic!("{name} is recorded but not in src/metrics.rs"));
        assert_eq!(metric.kind.as_str(), *kind, "{name}");
    }
    let names: BTreeSet<&str> = recorded.iter().map(|(name, _)| name.as_str()).collect();
    for metric in cloudly::metrics::METRICS.iter().filter(|metric| metric.name.starts_with("cloudly_")) {
        assert!(names.contains(metric.name), "{} is in the table but recorded nowhere", metric.name);
    }
}

/// The JSON log lines of `serving` whose span's `request_id` is `id`.
/// The log lines of request `id`. The log reaches the test through a reader thread, possibly
/// after the answer: waits (up to 5 s) for the request's closing line, one with an `outcome`.
async fn lines_of(serving: &Serving, id: &str) -> Vec<Value> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let lines: Vec<Value> = serving
            .log()
            .lines()
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .filter(|event| event["span"]["request_id"] == id)
            .collect();
        if lines.iter().any(|line| !line["outcome"].is_null()) || std::time::Instant::now() > deadline {
            return lines;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_log_line_of_a_request_carries_its_correlation_id_and_principal_and_a_write_what_it_changed() {
    let database = TestDatabase::create(Backend::Sqlite).await;
    let scratch = Scratch::new("cloudly-observability");
    let serving = start(&scratch.join("data"), &database.url).serving();
    let identity = serving.admin_identity();
    let token = identity["jwt"].as_str().unwrap().to_owned();

    let id = format!("obs-{}", uuid::Uuid::new_v4().simple());
    let mut request = organization();
    request["identity"] = identity.clone();
    let answer =
        post(&serving, json!({ "method": "putOrganization", "request": request, "correlation": { "id": id } })).await;
    assert!(answer["response"].is_object(), "{answer}");
    let lines = lines_of(&serving, &id).await;
    assert!(lines.len() >= 2, "{}", serving.log());
    for line in &lines {
        assert_eq!(line["span"]["principal"], "admin:bootstrap-admin", "{line}");
        assert_eq!(line["span"]["method"], "putOrganization", "{line}");
    }
    let written = lines.iter().find(|line| line["message"] == "record written").expect("the write is logged");
    let changed = written["changed"].as_str().unwrap();
    assert!(changed.contains("organization.id=org"), "{written}");
    assert!(lines.iter().any(|line| line["message"] == "typed request" && line["outcome"] == "ok"));

    // A refused identity: the lines carry the correlation id and no principal proven.
    let refused_id = format!("obs-{}", uuid::Uuid::new_v4().simple());
    let refused =
        json!({ "method": "putOrganization", "request": organization(), "correlation": { "id": refused_id } });
    assert!(post(&serving, refused).await["error"].is_object());
    let lines = lines_of(&serving, &refused_id).await;
    assert!(!lines.is_empty() && lines.iter().all(|line| line["span"].get("principal").is_none()), "{lines:?}");
    assert!(!lines.iter().any(|line| line["message"] == "record written"));

    // On a node's socket: the node is the principal.
    serving.call_as_admin("putCluster", cluster()).await.unwrap();
    let bearer = serving.call_as_admin("putClusterNode", node()).await.unwrap()["bearer"].as_str().unwrap().to_owned();
    assert!(serving.log_shows("node.id=node-1", std::time::Duration::from_secs(5)).await, "{}", serving.log());
    let writes: Vec<Value> = serving
        .log()
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|event| event["message"] == "record written")
        .collect();
    let cluster_write = writes.iter().find(|line| line["method"] == "putCluster").expect("putCluster is logged");
    assert!(cluster_write["changed"].as_str().unwrap().contains("cluster.revision=1"), "{cluster_write}");
    let node_write = writes.iter().find(|line| line["method"] == "putClusterNode").expect("putClusterNode is logged");
    assert!(node_write["changed"].as_str().unwrap().contains("node.id=node-1"), "{node_write}");
    let agent = NodeAgent::connect_to(&serving.base_url).await;
    let session = agent.open("c1", "node-1", &bearer).await;
    let socket_id = format!("obs-{}", uuid::Uuid::new_v4().simple());
    let request = wire::to_request(&wire::GetRuntimeAssignments { session: &session });
    let envelope = json!({ "method": name::GET_RUNTIME_ASSIGNMENTS, "request": request, "response": null,
                           "correlation": { "id": socket_id, "phase": "request" } });
    let answer = agent.raw_envelope(&socket_id, envelope.to_string()).await;
    assert!(answer["response"]["assignments"].is_array(), "{answer}");
    let lines = lines_of(&serving, &socket_id).await;
    assert!(lines.iter().any(|line| line["message"] == "socket request"), "{}", serving.log());
    for line in &lines {
        assert_eq!(line["span"]["principal"], "node:c1/node-1", "{line}");
        assert_eq!(line["span"]["kind"], "socket", "{line}");
    }
    drop(agent);
    let log = serving.terminate();
    assert!(!log.contains(&token), "a log line carries the identity token");
    assert!(!log.contains(&bearer), "a log line carries the node bearer");
    database.drop_now().await;
}

#[test]
fn human_logs_on_a_pipe_have_no_colour_codes() {
    let scratch = Scratch::new("cloudly-observability");
    let mut child = Command::new(env!("CARGO_BIN_EXE_cloudly"))
        .args(["serve", "--listen", "127.0.0.1:0", "--log-format", "human"])
        .env("CLOUDLY_DATA_DIR", scratch.join("data"))
        .env_remove("CLOUDLY_DATABASE_URL")
        .env_remove("RUST_LOG")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let log = Arc::new(Mutex::new(String::new()));
    let sink = log.clone();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let mut log = sink.lock().unwrap();
            log.push_str(&line);
            log.push('\n');
        }
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    while !log.lock().unwrap().contains("cloudly serving") {
        assert!(Instant::now() < deadline && child.try_wait().unwrap().is_none(), "{}", log.lock().unwrap());
        std::thread::sleep(Duration::from_millis(25));
    }
    assert!(Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap().success());
    assert!(child.wait().unwrap().success());
    reader.join().unwrap();
    let log = log.lock().unwrap().clone();
    assert!(log.contains(" INFO ") && log.contains("cloudly stopped"), "{log}");
    assert!(!log.contains("\x1b["), "colour codes on a pipe: {log:?}");
}
