//! Storage claims report (a benchmark, not a timed test): one command, `cargo bench --bench
//! claims`, measures a real `cloudly serve` process on PostgreSQL issuing runtime local storage
//! claims from service specs and pushing them with `applyRuntimeLocalStorageClaim` to [`NODES`]
//! connected test node agents, and rewrites the section between the `claims-report` markers of
//! `docs/benchmarks.md`.
//!
//! One cluster has [`NODES`] nodes, each with a node agent on `/typedsocket` whose session is
//! open and which answers claim pushes as an honest node does (`accepted` / `ready` for the
//! `empty` volumes put here). Services are then put by admin clients, each service with one
//! replica pinned to one node and one node-local volume of its own id, round-robin over the
//! nodes: first [`SERIAL_SERVICES`] by one client, then [`claim_count`] by [`PUT_CLIENTS`]
//! concurrent clients, then [`SERIAL_SERVICES`] more by one client (the cost of one put in the
//! fuller cluster). Per claim the bench takes the time the put was sent and answered, the
//! claim's `issuedAt` and the node's `answeredAt` from `listRuntimeLocalStorageClaims`, the time
//! the node agent read the push, and the time of the server's `claim answer recorded` log line
//! (written once the answer is stored); it reports claims pushed and acknowledged per second and
//! p50/p99 of each stretch. `pgbench -M prepared` runs a guarded one-row update at the same client
//! count on the same server in the same run, as a floor.
//!
//! Every put must be accepted, every claim pushed exactly once to its own node, answered
//! `accepted` / `ready` and recorded with no fault; anything else fails the run. PostgreSQL:
//! `CLOUDLY_TEST_PG_ADMIN_URL` (default `postgres://postgres@127.0.0.1:5432/postgres`); the bench
//! creates its own database and drops it. `CLOUDLY_BENCH_CLAIMS` sets the concurrent phase's
//! claims (default 400), `CLOUDLY_BENCH_SECONDS` pgbench's seconds (default 4).

#[path = "../tests/support/mod.rs"]
mod support;

use cloudly::api::methods::name;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};
use support::bench::{
    Admin, BenchResult, ConnectedNode, PGBENCH_CAS, PGBENCH_TABLE, PgbenchRun, cluster_body, connect_nodes,
    database_statements, logged_claim_answers, peak_rss_mib, percentile_ms, pgbench, reset_peak_rss, results_heading,
    section_main, unix_micros,
};
use support::database::TestDatabase;
use support::process::{Scratch, Serving, start_with};

/// Nodes of the cluster, each with a connected node agent.
const NODES: usize = 200;
/// Admin clients putting services at once in the concurrent phase.
const PUT_CLIENTS: usize = 8;
/// Services put one at a time before and after the concurrent phase.
const SERIAL_SERVICES: usize = 40;
/// The cluster.
const CLUSTER: &str = "claims";
/// How long the bench waits for every claim of a phase to be pushed and its answer recorded.
const ACK_DEADLINE: Duration = Duration::from_secs(180);
const BEGIN_MARKER: &str = "<!-- claims-report:begin -->";
const END_MARKER: &str = "<!-- claims-report:end -->";
const HEADING: &str = "## Storage claims pushed to 200 nodes (`benches/claims.rs`)";

/// Claims of the concurrent phase.
fn claim_count() -> usize {
    std::env::var("CLOUDLY_BENCH_CLAIMS").ok().and_then(|text| text.parse().ok()).unwrap_or(400)
}

fn pgbench_seconds() -> u64 {
    std::env::var("CLOUDLY_BENCH_SECONDS").ok().and_then(|text| text.parse().ok()).unwrap_or(4)
}

// ---------------------------------------------------------------------------------------------
// The cluster, built over the wire.

fn node_name(index: usize) -> String {
    format!("node-{}", index + 1)
}

/// One node: its agent (kept so the socket stays open) and what it received.
type Node = ConnectedNode;

/// Creates the organization, the cluster and its [`NODES`] nodes, and connects an agent for each
/// with an open session.
async fn build_cluster(admin: &Arc<Admin>, base_url: &str) -> BenchResult<Vec<Node>> {
    admin.call(name::PUT_ORGANIZATION, json!({ "organization": { "id": "org", "name": "Org" } })).await?;
    admin.call(name::PUT_CLUSTER, cluster_body(CLUSTER)).await?;
    connect_nodes(admin, base_url, CLUSTER, (0..NODES).map(node_name)).await
}

/// Service `svc-<index>`: one replica on node `index mod NODES`, one empty node-local volume
/// `vol-<index>`.
fn service_spec(index: usize) -> Value {
    json!({ "spec": {
        "clusterId": CLUSTER, "serviceId": format!("svc-{index}"), "organizationId": "org",
        "image": "registry.example/db:16.4", "replicas": 1,
        "placement": { "nodeIds": [node_name(index % NODES)] },
        "ports": [{ "protocol": "tcp", "port": 5432 }],
        "environment": [{ "name": "LOG_LEVEL", "value": "info" }],
        "volumes": [{
            "id": format!("vol-{index}"), "mountPath": format!("/var/lib/svc-{index}"), "readOnly": false,
            "driver": "local", "driverOptions": [], "mountOptions": [],
            "initialization": { "kind": "empty", "ownership": { "uid": 1000, "gid": 1000, "mode": 0o750 } },
        }],
    }, "expectedRevision": null })
}

// ---------------------------------------------------------------------------------------------
// One phase: puts, then every claim pushed and its answer recorded.

/// One put: when it was sent and how long its answer took.
struct Put {
    sent_micros: u64,
    took_micros: u64,
}

/// What one phase measured, per stretch sorted microseconds.
struct Phase {
    clients: usize,
    claims: usize,
    /// First put sent → last answer stored.
    seconds: f64,
    /// Put sent → put answered.
    put: Vec<u64>,
    put_to_stored: Vec<u64>,
    put_to_issued: Vec<u64>,
    issued_to_received: Vec<u64>,
    received_to_answered: Vec<u64>,
    received_to_stored: Vec<u64>,
    peak_rss_mib: Option<f64>,
}

impl Phase {
    fn per_second(&self) -> f64 {
        self.claims as f64 / self.seconds
    }
}

/// Puts services `from..to` with `clients` concurrent admin clients (each a client of its own),
/// waits until each claim is pushed and its answer recorded, and measures.
async fn run_phase(
    admin: &Arc<Admin>,
    server: &Serving,
    nodes: &[Node],
    (from, to): (usize, usize),
    clients: usize,
    server_pid: u32,
) -> BenchResult<Phase> {
    reset_peak_rss(server_pid);
    let next = Arc::new(AtomicUsize::new(from));
    let puts = Arc::new(Mutex::new(HashMap::new()));
    let mut tasks = Vec::new();
    for _ in 0..clients {
        let (next, puts) = (next.clone(), puts.clone());
        let client = Admin { client: server.client(), identity: admin.identity.clone() };
        tasks.push(tokio::spawn(async move {
            loop {
                let index = next.fetch_add(1, Ordering::Relaxed);
                if index >= to {
                    return Ok::<_, String>(());
                }
                let sent = SystemTime::now();
                let started = Instant::now();
                let answer = client.call(name::PUT_SERVICE_RUNTIME_SPEC, service_spec(index)).await?;
                let took_micros = started.elapsed().as_micros() as u64;
                if answer["spec"]["serviceId"] != json!(format!("svc-{index}"))
                    || answer["spec"]["revision"] != json!(1)
                {
                    return Err(format!("putServiceRuntimeSpec svc-{index}: not a first revision: {answer}"));
                }
                puts.lock().unwrap().insert(index, Put { sent_micros: unix_micros(sent), took_micros });
            }
        }));
    }
    for task in tasks {
        task.await.map_err(|error| format!("a put client panicked: {error}"))??;
    }
    let puts = std::mem::take(&mut *puts.lock().unwrap());
    let received = await_pushes(nodes, to).await?;
    let answers = await_answers(admin, to).await?;
    let stored = await_stored(server, to).await?;
    let peak_rss_mib = peak_rss_mib(server_pid);

    let mut phase = Phase {
        clients,
        claims: to - from,
        seconds: 0.0,
        put: Vec::new(),
        put_to_stored: Vec::new(),
        put_to_issued: Vec::new(),
        issued_to_received: Vec::new(),
        received_to_answered: Vec::new(),
        received_to_stored: Vec::new(),
        peak_rss_mib,
    };
    let (mut first_sent, mut last_stored) = (u64::MAX, 0);
    for index in from..to {
        let put = &puts[&index];
        let (claim_id, received_micros) = &received[&index];
        let (issued_micros, answered_micros) = answers[&index];
        let stored_micros = *stored.get(claim_id).ok_or_else(|| format!("no stored answer of svc-{index}"))?;
        if stored_micros < answered_micros || stored_micros < *received_micros {
            return Err(format!("svc-{index}: the answer was stored before it was taken; the clocks disagree"));
        }
        first_sent = first_sent.min(put.sent_micros);
        last_stored = last_stored.max(stored_micros);
        phase.put.push(put.took_micros);
        phase.put_to_stored.push(stored_micros - put.sent_micros);
        // `issuedAt` and `answeredAt` are whole milliseconds (rounded down): a stretch that starts
        // or ends on one reads up to 1 ms off, never less than zero.
        phase.put_to_issued.push(issued_micros.saturating_sub(put.sent_micros));
        phase.issued_to_received.push(received_micros.saturating_sub(issued_micros));
        phase.received_to_answered.push(answered_micros.saturating_sub(*received_micros));
        phase.received_to_stored.push(stored_micros - received_micros);
    }
    phase.seconds = last_stored.saturating_sub(first_sent) as f64 / 1e6;
    for stretch in [
        &mut phase.put,
        &mut phase.put_to_stored,
        &mut phase.put_to_issued,
        &mut phase.issued_to_received,
        &mut phase.received_to_answered,
        &mut phase.received_to_stored,
    ] {
        stretch.sort_unstable();
    }
    Ok(phase)
}

/// The service index of a pushed or listed claim (`serviceId` `svc-<index>`).
fn service_index(claim: &Value) -> BenchResult<usize> {
    claim["serviceId"]
        .as_str()
        .and_then(|service| service.strip_prefix("svc-"))
        .and_then(|index| index.parse().ok())
        .ok_or_else(|| format!("a claim of an unknown service: {claim}"))
}

/// Waits until the nodes together received `total` pushes; checks each went to its own node
/// once, and answers service index → (claim id, microseconds when the node read the push).
async fn await_pushes(nodes: &[Node], total: usize) -> BenchResult<HashMap<usize, (String, u64)>> {
    let deadline = Instant::now() + ACK_DEADLINE;
    loop {
        let count: usize = nodes.iter().map(|node| node.volumes.received_with_times().len()).sum();
        if count > total {
            return Err(format!("{count} claim pushes for {total} claims: a claim was pushed again"));
        }
        if count == total {
            break;
        }
        if Instant::now() > deadline {
            return Err(format!("{count} of {total} claims pushed within {ACK_DEADLINE:?}"));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut received = HashMap::new();
    for (node_index, node) in nodes.iter().enumerate() {
        for (at, request) in node.volumes.received_with_times() {
            let claim = &request["claim"];
            let index = service_index(claim)?;
            if index % NODES != node_index || claim["nodeId"] != json!(node_name(node_index)) {
                return Err(format!("the claim of svc-{index} was pushed to {}", node_name(node_index)));
            }
            let claim_id = claim["id"].as_str().ok_or_else(|| format!("a pushed claim without id: {claim}"))?;
            if received.insert(index, (claim_id.to_owned(), unix_micros(at))).is_some() {
                return Err(format!("the claim of svc-{index} was pushed twice"));
            }
        }
    }
    Ok(received)
}

/// Waits until `listRuntimeLocalStorageClaims` shows the first `total` services' claims, each
/// generation 1 answered `accepted` / `ready` with no fault; answers service index →
/// (`issuedAt`, `answeredAt`) in microseconds.
async fn await_answers(admin: &Admin, total: usize) -> BenchResult<HashMap<usize, (u64, u64)>> {
    let deadline = Instant::now() + ACK_DEADLINE;
    loop {
        let listed = admin.call(name::LIST_RUNTIME_LOCAL_STORAGE_CLAIMS, json!({ "clusterId": CLUSTER })).await?;
        let listings = listed["claims"].as_array().ok_or_else(|| format!("no claims listed: {listed}"))?;
        let mut answers = HashMap::new();
        for listing in listings {
            let claim = &listing["claim"];
            let index = service_index(claim)?;
            if listing["faults"]["count"] != json!(0) || !listing["resolution"].is_null() {
                return Err(format!("the claim of svc-{index} has a fault or a decision: {listing}"));
            }
            if claim["generation"] != json!(1) || claim["lifecycle"] != "bound" {
                return Err(format!("the claim of svc-{index} is not a first bound generation: {listing}"));
            }
            let node = &listing["node"];
            if node.is_null() {
                continue;
            }
            if node["generation"] != json!(1) || node["status"] != "accepted" || node["state"] != "ready" {
                return Err(format!("the claim of svc-{index} was answered otherwise: {listing}"));
            }
            let stamp = |value: &Value| value.as_u64().map(|millis| millis * 1000);
            let (Some(issued), Some(answered)) = (stamp(&listing["issuedAt"]), stamp(&node["answeredAt"])) else {
                return Err(format!("the claim of svc-{index} has no issue or answer time: {listing}"));
            };
            answers.insert(index, (issued, answered));
        }
        if listings.len() > total {
            return Err(format!("{} claims listed for {total} services", listings.len()));
        }
        if answers.len() == total {
            return Ok(answers);
        }
        if Instant::now() > deadline {
            return Err(format!("{} of {total} claim answers recorded within {ACK_DEADLINE:?}", answers.len()));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until the server's log holds `total` `claim answer recorded` lines (each written once
/// its answer is stored); answers claim id → the line's time in microseconds.
async fn await_stored(server: &Serving, total: usize) -> BenchResult<HashMap<String, u64>> {
    let deadline = Instant::now() + ACK_DEADLINE;
    loop {
        let mut stored = HashMap::new();
        for (claim, _generation, at) in logged_claim_answers(&server.log())? {
            if stored.insert(claim.clone(), at).is_some() {
                return Err(format!("the answer of claim {claim} was recorded twice"));
            }
        }
        if stored.len() >= total {
            return Ok(stored);
        }
        if Instant::now() > deadline {
            return Err(format!("{} of {total} stored claim answers logged within {ACK_DEADLINE:?}", stored.len()));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

// ---------------------------------------------------------------------------------------------
// The run and the report.

struct Report {
    /// Each phase's name and what it measured.
    phases: Vec<(String, Phase)>,
    cas: PgbenchRun,
}

async fn run(database: &TestDatabase, scratch: &Scratch) -> BenchResult<Report> {
    // The serving line, and one line per stored claim answer.
    let log_filter = "warn,cloudly::server=info,cloudly::domain::runners=info";
    let server = start_with(
        &scratch.join("data"),
        &database.url,
        &[("RUST_LOG", log_filter), support::bench::ONE_ADDRESS_FOR_A_FLEET],
    )
    .serving();
    let pid = server.pid();
    let admin = Arc::new(Admin { client: server.client(), identity: server.admin_identity() });
    database_statements(&database.url, PGBENCH_TABLE).await?;
    let nodes = build_cluster(&admin, &server.base_url).await?;
    // The reconciles and status refreshes the session opens scheduled settle first.
    tokio::time::sleep(Duration::from_secs(2)).await;

    let concurrent_end = SERIAL_SERVICES + claim_count();
    let mut phases = Vec::new();
    for (from, to, clients) in [
        (0, SERIAL_SERVICES, 1),
        (SERIAL_SERVICES, concurrent_end, PUT_CLIENTS),
        (concurrent_end, concurrent_end + SERIAL_SERVICES, 1),
    ] {
        let kind = if clients == 1 { "serial" } else { "concurrent" };
        let name = format!("{kind}, services {}–{to}", from + 1);
        phases.push((name, run_phase(&admin, &server, &nodes, (from, to), clients, pid).await?));
    }
    let cas = pgbench(&database.url, &scratch.0, "cas", PGBENCH_CAS, PUT_CLIENTS, pgbench_seconds())?;
    drop(nodes);
    server.terminate();
    Ok(Report { phases, cas })
}

fn stretch(name: &str, sorted_micros: &[u64]) -> String {
    format!(
        "| {name} | {:.1} | {:.1} | {:.1} |\n",
        percentile_ms(sorted_micros, 50.0),
        percentile_ms(sorted_micros, 99.0),
        percentile_ms(sorted_micros, 100.0),
    )
}

fn render(report: &Report, uptime_before: &str) -> String {
    let cas = &report.cas;
    let mut text = format!(
        "{}. Claims/s = claims of the phase ÷ (last ack stored − first put sent); ratio = claims/s ÷ pgbench \
         cas tps at {PUT_CLIENTS} clients ({:.0} tps, p50 {:.2} ms, p99 {:.2} ms, {} s).\n\n\
         | phase | put clients | claims | claims pushed + acked/s | ratio to pgbench cas | peak RSS MiB |\n\
         | --- | ---: | ---: | ---: | ---: | ---: |\n",
        results_heading("claims", uptime_before),
        cas.per_second(),
        cas.p50_ms,
        cas.p99_ms,
        pgbench_seconds(),
    );
    for (name, phase) in &report.phases {
        text.push_str(&format!(
            "| {name} | {} | {} | {:.1} | {:.4} | {} |\n",
            phase.clients,
            phase.claims,
            phase.per_second(),
            phase.per_second() / cas.per_second(),
            phase.peak_rss_mib.map_or_else(|| "–".to_owned(), |mib| format!("{mib:.1}")),
        ));
    }
    for (name, phase) in &report.phases {
        text.push_str(&format!(
            "\nLatencies of phase {name} ({} claims, {} put client{}):\n\n\
             | stretch | p50 ms | p99 ms | max ms |\n| --- | ---: | ---: | ---: |\n",
            phase.claims,
            phase.clients,
            if phase.clients == 1 { "" } else { "s" },
        ));
        text.push_str(&stretch("put sent → put answered", &phase.put));
        text.push_str(&stretch("**put sent → node's ack stored**", &phase.put_to_stored));
        text.push_str(&stretch("put sent → claim issued (`issuedAt`)", &phase.put_to_issued));
        text.push_str(&stretch("claim issued → push read by the node", &phase.issued_to_received));
        text.push_str(&stretch("push read by the node → ack taken (`answeredAt`)", &phase.received_to_answered));
        text.push_str(&stretch("**push read by the node → ack stored**", &phase.received_to_stored));
    }
    text
}

fn main() -> ExitCode {
    section_main("claims", (BEGIN_MARKER, END_MARKER, HEADING), run, render)
}
