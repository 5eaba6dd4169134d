//! Load and scale report (a benchmark, not a timed test): one command, `cargo bench --bench load`,
//! measures a real `cloudly serve` process on PostgreSQL and rewrites the section between the
//! `load-report` markers of `docs/benchmarks.md`.
//!
//! * **Load**: throughput, p50/p99 latency and the server's peak RSS for `designateClusterIngress`
//!   (a chain of accepted rotations per client, each on a cluster of its own),
//!   `getClusterIngressDesignation`, `registerClusterIngress` (accepted, through one relay) and
//!   `getRuntimeNetworkProjection` (a full fetch over a node session, and an unchanged one: `known`
//!   current, answered `null`) at 1, 16 and 64 clients, next
//!   to `pgbench -M prepared` on the same server in the same run: a single-statement
//!   compare-and-swap (a guarded one-row update, autocommit) and a single-row select, at the same
//!   client counts. The ratio is the operation's throughput over pgbench's.
//! * **Clusters**: designate and get at [`SCALE_CLIENTS`] clients while the store holds 10, 1 000
//!   and 10 000 clusters (the first 72 with two nodes and a service, the rest the cluster record).
//! * **Nodes**: register, projection fetch and one designation at a time (the rotation re-issues
//!   the cluster's assignments) in a cluster of 10 and of 1 000 nodes.
//!
//! The server and the bench share the machine; `uptime`'s load before the run is printed with the
//! numbers. PostgreSQL: `CLOUDLY_TEST_PG_ADMIN_URL` (default
//! `postgres://postgres@127.0.0.1:5432/postgres`); the bench creates its own database and drops it.
//! `CLOUDLY_BENCH_SECONDS` sets the measured seconds per phase (default 4). Any refused or failed
//! request fails the run.

#[path = "../tests/support/mod.rs"]
mod support;

use cloudly::api::methods::name;
use cloudly::client::Client;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::bench::{
    Admin, BenchResult, CpuSample, PGBENCH_CAS, PGBENCH_SELECT, PGBENCH_TABLE, PGBENCH_TRANSACTION, cluster_body,
    command_line, commit_and_state, database_statements, load_average, node_body, peak_rss_mib, percentile_ms,
    report_main, reset_peak_rss, seed_all,
};
use support::database::{TestDatabase, pg_admin_url};
use support::ingress::{connect_relay_with_bearer_at, register, registration, run_ingress_replica};
use support::node_agent::NodeAgent;
use support::process::{Scratch, start_with};

/// Client counts of the load table.
const CLIENT_COUNTS: [usize; 3] = [1, 16, 64];
/// Clients of the scale tables.
const SCALE_CLIENTS: usize = 8;
/// Cluster counts of the clusters table.
const CLUSTER_COUNTS: [usize; 3] = [10, 1_000, 10_000];
/// Node counts of the nodes table.
const NODE_COUNTS: [usize; 2] = [10, 1_000];
/// Nodes of the wide cluster running an ingress replica (each with a connected node agent).
const INGRESS_NODES: usize = 8;
/// The wide cluster (registrations, projections, the nodes table).
const WIDE: &str = "wide";
/// The cluster of the nodes table's designations (as many nodes as `wide`).
const DEEP: &str = "deep";
const BEGIN_MARKER: &str = "<!-- load-report:begin -->";
const END_MARKER: &str = "<!-- load-report:end -->";

fn measured_seconds() -> u64 {
    std::env::var("CLOUDLY_BENCH_SECONDS").ok().and_then(|text| text.parse().ok()).unwrap_or(4)
}

// ---------------------------------------------------------------------------------------------
// Measuring.

/// What one phase measured.
#[derive(Clone, Debug)]
struct Phase {
    operations: usize,
    seconds: f64,
    p50_ms: f64,
    p99_ms: f64,
    peak_rss_mib: Option<f64>,
    /// CPU milliseconds per operation: the server's, PostgreSQL's and the clients'.
    cpu: CpuSample,
    /// The server's store statements per operation, by `operation` label.
    statements: Vec<(String, f64)>,
}

impl Phase {
    fn per_second(&self) -> f64 {
        self.operations as f64 / self.seconds
    }
}

/// One kind of operation, sent by `clients` concurrent clients; `operate(client, n)` performs the
/// client's `n`-th operation and checks its answer.
trait Operation: Send + Sync + 'static {
    fn operate(&self, client: usize, number: u64) -> impl Future<Output = BenchResult<()>> + Send;
}

/// Runs `operation` with `clients` clients for a warm-up and the measured seconds.
/// The server a phase measures: its process (CPU, RSS) and its `/metrics` (statements run).
struct Meter {
    pid: u32,
    base_url: String,
}

/// The store statements the server has run so far, by `operation` label
/// (`cloudly_store_operation_duration_seconds_count`; BEGIN and COMMIT are not statements here).
async fn statements_run(meter: &Meter) -> BenchResult<Vec<(String, f64)>> {
    let text = support::bench::scrape_metrics(&meter.base_url).await?;
    Ok(support::bench::metric_samples(&text, "cloudly_store_operation_duration_seconds_count"))
}

/// Statements per operation by label, between two [`statements_run`] readings.
fn statements_per_operation(
    before: &[(String, f64)],
    after: &[(String, f64)],
    operations: usize,
) -> Vec<(String, f64)> {
    after
        .iter()
        .filter_map(|(label, count)| {
            let earlier = before.iter().find(|(other, _)| other == label).map_or(0.0, |(_, count)| *count);
            let per = (count - earlier) / operations.max(1) as f64;
            (per > 0.0).then(|| (label.trim_start_matches("{operation=\"").trim_end_matches("\"}").to_owned(), per))
        })
        .collect()
}

async fn run_phase<O: Operation>(operation: &Arc<O>, clients: usize, meter: &Meter) -> BenchResult<Phase> {
    let server_pid = meter.pid;
    let warm_up = Duration::from_millis(500);
    let measured = Duration::from_secs(measured_seconds());
    let start = Instant::now();
    let measure_from = start + warm_up;
    let stop_at = measure_from + measured;
    reset_peak_rss(server_pid);
    let mut tasks = Vec::new();
    for client in 0..clients {
        let operation = operation.clone();
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            let mut number = 0u64;
            while Instant::now() < stop_at {
                let sent = Instant::now();
                operation.operate(client, number).await?;
                number += 1;
                if sent >= measure_from {
                    latencies.push(sent.elapsed().as_micros() as u64);
                }
            }
            Ok::<_, String>(latencies)
        }));
    }
    tokio::time::sleep_until(measure_from.into()).await;
    let cpu_before = CpuSample::now(server_pid);
    let statements_before = statements_run(meter).await?;
    let mut latencies = Vec::new();
    for task in tasks {
        latencies.extend(task.await.map_err(|error| format!("a client panicked: {error}"))??);
    }
    let cpu_after = CpuSample::now(server_pid);
    let statements_after = statements_run(meter).await?;
    let seconds = (Instant::now().min(stop_at + Duration::from_secs(60)) - measure_from).as_secs_f64();
    latencies.sort_unstable();
    Ok(Phase {
        operations: latencies.len(),
        seconds: seconds.max(measured.as_secs_f64()),
        p50_ms: percentile_ms(&latencies, 50.0),
        p99_ms: percentile_ms(&latencies, 99.0),
        peak_rss_mib: peak_rss_mib(server_pid),
        cpu: cpu_before.per_operation(&cpu_after, latencies.len()),
        statements: statements_per_operation(&statements_before, &statements_after, latencies.len()),
    })
}

// ---------------------------------------------------------------------------------------------
// pgbench on the same server.

/// The floors: pgbench scripts on the bench's database, by name.
const FLOORS: [(&str, &str); 3] =
    [("cas", PGBENCH_CAS), ("transaction", PGBENCH_TRANSACTION), ("select", PGBENCH_SELECT)];

/// Runs `script` with pgbench at `clients` clients against `database_url` for the measured seconds
/// (the server idle meanwhile; its CPU is measured to show it).
fn pgbench(
    database_url: &str,
    scratch: &Path,
    name: &str,
    script: &str,
    clients: usize,
    server_pid: u32,
) -> BenchResult<Phase> {
    let before = CpuSample::now(server_pid);
    let run = support::bench::pgbench(database_url, scratch, name, script, clients, measured_seconds())?;
    let after = CpuSample::now(server_pid);
    Ok(Phase {
        operations: run.transactions,
        seconds: run.seconds,
        p50_ms: run.p50_ms,
        p99_ms: run.p99_ms,
        peak_rss_mib: None,
        cpu: before.per_operation(&after, run.transactions),
        statements: Vec::new(),
    })
}

/// Rounds of the load table (`CLOUDLY_BENCH_ROUNDS`, default 1): each round runs every floor and
/// operation at every client count, so the rounds interleave; a figure is the median round's.
fn rounds() -> usize {
    std::env::var("CLOUDLY_BENCH_ROUNDS").ok().and_then(|text| text.parse().ok()).unwrap_or(1).max(1)
}

/// `CLOUDLY_BENCH_TABLES=load` (or [`operation_wanted`]'s filter) runs the load table alone and
/// prints it without rewriting docs/benchmarks.md; by default every table runs.
fn load_table_only() -> bool {
    std::env::var("CLOUDLY_BENCH_TABLES").is_ok_and(|tables| tables == "load")
        || std::env::var_os("CLOUDLY_BENCH_OPERATIONS").is_some()
}

/// `CLOUDLY_BENCH_OPERATIONS=designate,get` measures only those operations of the load table
/// (a profiler's run); by default all of them.
fn operation_wanted(name: &str) -> bool {
    std::env::var("CLOUDLY_BENCH_OPERATIONS").map_or(true, |names| names.split(',').any(|wanted| wanted.trim() == name))
}

/// The phase of median throughput among `phases`.
fn median(mut phases: Vec<Phase>) -> Phase {
    phases.sort_by(|a, b| a.per_second().total_cmp(&b.per_second()));
    phases.swap_remove(phases.len() / 2)
}

// ---------------------------------------------------------------------------------------------
// The world, built over the wire.

fn ingress_spec(cluster: &str, nodes: &[String]) -> Value {
    json!({ "spec": {
        "clusterId": cluster, "serviceId": "ingress", "organizationId": "org",
        "image": "registry.example/ingress:1.4.2", "replicas": nodes.len(),
        "placement": { "nodeIds": nodes },
        "ports": [{ "protocol": "tcp", "port": 443 }],
        "environment": [{ "name": "LOG_LEVEL", "value": "info" }],
        "volumes": [],
    }, "expectedRevision": null })
}

fn plan_body(cluster: &str) -> Value {
    json!({ "plan": support::service::seed_plan(cluster, 1) })
}

/// Clusters `c<from>`..`c<to - 1>`; `with_service` adds nodes `node-1`, `node-2` and a service
/// `ingress` placed on them (the clusters the designate clients rotate), otherwise the cluster
/// record alone.
async fn seed_clusters(admin: &Arc<Admin>, from: usize, to: usize, with_service: bool) -> BenchResult<()> {
    let clusters: Vec<String> = (from..to).map(|index| format!("c{index}")).collect();
    seed_all(admin, clusters.iter().map(|cluster| (name::PUT_CLUSTER, cluster_body(cluster))).collect()).await?;
    if !with_service {
        return Ok(());
    }
    let nodes = ["node-1".to_owned(), "node-2".to_owned()];
    let puts = clusters.iter().flat_map(|cluster| nodes.iter().map(move |node| (cluster, node)));
    seed_all(admin, puts.map(|(cluster, node)| (name::PUT_CLUSTER_NODE, node_body(cluster, node, false))).collect())
        .await?;
    seed_all(
        admin,
        clusters.iter().map(|cluster| (name::PUT_SERVICE_RUNTIME_SPEC, ingress_spec(cluster, &nodes))).collect(),
    )
    .await
}

/// Nodes `node-<from>`..`node-<to - 1>` (1-based names) of `cluster`.
async fn seed_nodes(admin: &Arc<Admin>, cluster: &str, from: usize, to: usize) -> BenchResult<()> {
    let puts = (from..to).map(|index| (name::PUT_CLUSTER_NODE, node_body(cluster, &format!("node-{index}"), false)));
    seed_all(admin, puts.collect()).await
}

/// The wide cluster's running ingress: [`INGRESS_NODES`] node agents with sessions whose ingress
/// assignment reported `ready`, a plan (so every node has a projection), and a connected relay.
struct Wide {
    agents: Vec<(NodeAgent, Value)>,
    bearer: String,
    relay_token: String,
    designation: Value,
}

async fn build_wide(admin: &Arc<Admin>, base_url: &str) -> BenchResult<Wide> {
    admin.call(name::PUT_CLUSTER, cluster_body(WIDE)).await?;
    seed_nodes(admin, WIDE, 1, NODE_COUNTS[0] + 1).await?;
    let ingress_nodes: Vec<String> = (1..=INGRESS_NODES).map(|index| format!("node-{index}")).collect();
    admin.call(name::PUT_SERVICE_RUNTIME_SPEC, ingress_spec(WIDE, &ingress_nodes)).await?;
    admin.call(name::PUT_RUNTIME_NETWORK_ADDRESS_PLAN, plan_body(WIDE)).await?;
    let designation = admin
        .call(
            name::DESIGNATE_CLUSTER_INGRESS,
            json!({ "designation": {
                "mutationId": "wide-1", "clusterId": WIDE, "ingressServiceId": "ingress",
                "currentRuntime": { "id": WIDE, "phase": "pallet", "generation": 3 },
                "expectedSpecRevision": 1, "expectedDesignation": null,
            } }),
        )
        .await?["designation"]
        .clone();
    let mut agents = Vec::new();
    let mut bearer = String::new();
    for node in &ingress_nodes {
        let node_bearer = admin.call(name::PUT_CLUSTER_NODE, node_body(WIDE, node, true)).await?["bearer"]
            .as_str()
            .ok_or("a rotated node credential answers its bearer")?
            .to_owned();
        let agent = NodeAgent::connect_to(base_url).await;
        let session = agent.open(WIDE, node, &node_bearer).await;
        let assignment = wait_for_ingress_assignment(&agent, &session, node).await?;
        bearer = run_ingress_replica(&agent, &session, &assignment).await?;
        agents.push((agent, session));
    }
    let relay_bearer = admin
        .call(name::ISSUE_CLUSTER_RELAY_CREDENTIAL, json!({ "clusterId": WIDE, "relayId": "relay-1" }))
        .await?["bearer"]
        .as_str()
        .ok_or("a relay bearer")?
        .to_owned();
    let relay_token = connect_relay_with_bearer_at(&admin.client, WIDE, "relay-1", &relay_bearer).await;
    Ok(Wide { agents, bearer, relay_token, designation })
}

/// The node's ingress assignment payload, once the controller issued it (up to 10 s).
async fn wait_for_ingress_assignment(agent: &NodeAgent, session: &Value, node: &str) -> BenchResult<Value> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let answer = agent
            .call(name::GET_RUNTIME_ASSIGNMENTS, json!({ "session": session }))
            .await
            .map_err(|error| format!("getRuntimeAssignments: {}", error.text))?;
        let found = answer["assignments"].as_array().and_then(|list| {
            list.iter().map(|signed| &signed["payload"]).find(|payload| payload["serviceId"] == "ingress").cloned()
        });
        match found {
            Some(assignment) => return Ok(assignment),
            None if Instant::now() > deadline => return Err(format!("{node} got no ingress assignment")),
            None => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The operations.

/// Accepted rotations: client `i` keeps the chain of cluster `clusters[i]`.
struct Designate {
    admin: Arc<Admin>,
    chains: Vec<tokio::sync::Mutex<(String, Value)>>,
    run: String,
    /// Mutation ids are unique across the phases that reuse this operation.
    sequence: std::sync::atomic::AtomicU64,
}

impl Designate {
    async fn new(admin: &Arc<Admin>, clusters: Vec<String>, run: &str) -> BenchResult<Arc<Designate>> {
        let mut chains = Vec::new();
        for cluster in clusters {
            let current = admin.call(name::GET_CLUSTER_INGRESS_DESIGNATION, json!({ "clusterId": cluster })).await?;
            chains.push(tokio::sync::Mutex::new((cluster, reference(&current["designation"]))));
        }
        Ok(Arc::new(Designate { admin: admin.clone(), chains, run: run.to_owned(), sequence: Default::default() }))
    }
}

fn reference(designation: &Value) -> Value {
    if designation.is_null() {
        return Value::Null;
    }
    json!({ "id": designation["id"], "generation": designation["generation"], "digest": designation["digest"] })
}

impl Operation for Designate {
    async fn operate(&self, client: usize, _number: u64) -> BenchResult<()> {
        let mut chain = self.chains[client % self.chains.len()].lock().await;
        let number = self.sequence.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let (cluster, expected) = &*chain;
        let answer = self
            .admin
            .call(
                name::DESIGNATE_CLUSTER_INGRESS,
                json!({ "designation": {
                    "mutationId": format!("{}-{client}-{number}", self.run), "clusterId": cluster,
                    "ingressServiceId": "ingress",
                    "currentRuntime": { "id": cluster, "phase": "pallet", "generation": 3 },
                    "expectedSpecRevision": 1, "expectedDesignation": expected,
                } }),
            )
            .await?;
        if answer["replayed"] != json!(false) {
            return Err(format!("designateClusterIngress: not a fresh acceptance: {answer}"));
        }
        chain.1 = reference(&answer["designation"]);
        Ok(())
    }
}

struct GetDesignation {
    admin: Arc<Admin>,
    clusters: Vec<String>,
}

impl Operation for GetDesignation {
    async fn operate(&self, client: usize, _number: u64) -> BenchResult<()> {
        let cluster = &self.clusters[client % self.clusters.len()];
        let answer = self.admin.call(name::GET_CLUSTER_INGRESS_DESIGNATION, json!({ "clusterId": cluster })).await?;
        if answer["designation"]["clusterId"] != json!(cluster) {
            return Err(format!("getClusterIngressDesignation answered another designation: {answer}"));
        }
        Ok(())
    }
}

/// Accepted registrations of the wide cluster's ingress nodes, through the relay.
struct Register {
    client: Client,
    bearer: String,
    token: String,
}

impl Operation for Register {
    async fn operate(&self, client: usize, number: u64) -> BenchResult<()> {
        let node = format!("node-{}", 1 + (client + number as usize) % INGRESS_NODES);
        let answer = register(&self.client, registration(&self.bearer, &node), Some(&self.token))
            .await
            .map_err(|error| format!("registerClusterIngress refused: {} {}", error.text, error.data))?;
        if answer["accepted"] != json!(true) {
            return Err(format!("registerClusterIngress: not accepted: {answer}"));
        }
        Ok(())
    }
}

/// Full projection fetches (`known: null`) over the ingress nodes' sessions.
struct FetchProjection {
    wide: Arc<Wide>,
}

impl Operation for FetchProjection {
    async fn operate(&self, client: usize, _number: u64) -> BenchResult<()> {
        let (agent, session) = &self.wide.agents[client % self.wide.agents.len()];
        let answer = agent
            .call(name::GET_RUNTIME_NETWORK_PROJECTION, json!({ "session": session, "known": null }))
            .await
            .map_err(|error| format!("getRuntimeNetworkProjection: {} {}", error.text, error.data))?;
        if answer["projection"]["payload"].is_null() {
            return Err(format!("getRuntimeNetworkProjection answered no projection: {answer}"));
        }
        Ok(())
    }
}

/// Unchanged projection fetches (`known` = the node's current reference, answered `null`) over
/// the ingress nodes' sessions: what a node agent's poll costs when nothing moved.
struct FetchUnchanged {
    wide: Arc<Wide>,
    /// Each agent's current reference, read once before the phase.
    known: Vec<Value>,
}

impl FetchUnchanged {
    async fn new(wide: Arc<Wide>) -> BenchResult<Self> {
        let mut known = Vec::new();
        for (agent, session) in &wide.agents {
            let answer = agent
                .call(name::GET_RUNTIME_NETWORK_PROJECTION, json!({ "session": session, "known": null }))
                .await
                .map_err(|error| format!("getRuntimeNetworkProjection: {} {}", error.text, error.data))?;
            let payload = &answer["projection"]["payload"];
            known
                .push(json!({ "id": payload["id"], "generation": payload["generation"], "digest": payload["digest"] }));
        }
        Ok(FetchUnchanged { wide, known })
    }
}

impl Operation for FetchUnchanged {
    async fn operate(&self, client: usize, _number: u64) -> BenchResult<()> {
        let index = client % self.wide.agents.len();
        let (agent, session) = &self.wide.agents[index];
        let answer = agent
            .call(name::GET_RUNTIME_NETWORK_PROJECTION, json!({ "session": session, "known": self.known[index] }))
            .await
            .map_err(|error| format!("getRuntimeNetworkProjection: {} {}", error.text, error.data))?;
        if !answer["projection"].is_null() {
            return Err(format!("an unchanged getRuntimeNetworkProjection answered a projection: {answer}"));
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// The run and the report.

/// The load table's operations: name, the floor its ratio is taken against, and the least ratio
/// at 16 clients it aims for (issue 25), if any.
const OPERATIONS: [(&str, &str, Option<f64>); 5] = [
    ("designate", "transaction", Some(1.0)),
    ("get", "select", Some(0.5)),
    ("register", "transaction", Some(0.5)),
    ("projection fetch", "select", None),
    ("unchanged fetch", "select", Some(0.5)),
];

/// The client count the targets are set at.
const TARGET_CLIENTS: usize = 16;

struct Report {
    /// `(floor, clients, phase)`, medians over the rounds.
    floors: Vec<(&'static str, usize, Phase)>,
    /// `(operation, clients, phase)`, medians over the rounds.
    load: Vec<(&'static str, usize, Phase)>,
    clusters: Vec<(usize, Phase, Phase)>,
    nodes: Vec<(usize, Phase, Phase, Phase)>,
}

async fn run(database: &TestDatabase, scratch: &Scratch) -> BenchResult<Report> {
    let server = start_with(
        &scratch.join("data"),
        &database.url,
        &[
            ("RUST_LOG", "warn,cloudly::server=info"),
            support::bench::ONE_ADDRESS_FOR_A_FLEET,
            // The relay connects once and then only registers: its lease (the longest allowed, an
            // hour) outlasts the run.
            ("CLOUDLY_RELAY_LEASE_MS", "3600000"),
        ],
    )
    .serving();
    let meter = Meter { pid: server.pid(), base_url: server.base_url.clone() };
    let pid = &meter;
    let admin = Arc::new(Admin { client: server.client(), identity: server.admin_identity() });
    admin.call(name::PUT_ORGANIZATION, json!({ "organization": { "id": "org", "name": "Org" } })).await?;
    database_statements(&database.url, PGBENCH_TABLE).await?;

    let scale_clusters = || (0..SCALE_CLIENTS).map(|index| format!("c{index}")).collect::<Vec<_>>();
    seed_clusters(&admin, 0, CLUSTER_COUNTS[0], true).await?;
    let wide = Arc::new(build_wide(&admin, &server.base_url).await?);
    let mut report = Report { floors: Vec::new(), load: Vec::new(), clusters: Vec::new(), nodes: Vec::new() };
    let designate_scale = Designate::new(&admin, scale_clusters(), "scale").await?;
    let get_scale = Arc::new(GetDesignation { admin: admin.clone(), clusters: scale_clusters() });

    // Clusters: 10.
    if !load_table_only() {
        report.clusters.push(clusters_row(&designate_scale, &get_scale, CLUSTER_COUNTS[0], pid).await?);
    }
    // The load table: 64 designating clusters of their own (`c8`..`c71`; the scale clients keep
    // `c0`..`c7`), 1 000 in the store.
    seed_clusters(&admin, CLUSTER_COUNTS[0], SCALE_CLIENTS + 64, true).await?;
    seed_clusters(&admin, SCALE_CLIENTS + 64, CLUSTER_COUNTS[1], false).await?;
    let load_clusters = || (SCALE_CLIENTS..SCALE_CLIENTS + 64).map(|index| format!("c{index}")).collect::<Vec<_>>();
    let designate = Designate::new(&admin, load_clusters(), "load").await?;
    let get = Arc::new(GetDesignation { admin: admin.clone(), clusters: load_clusters() });
    let register_operation =
        Arc::new(Register { client: server.client(), bearer: wide.bearer.clone(), token: wide.relay_token.clone() });
    let fetch = Arc::new(FetchProjection { wide: wide.clone() });
    let unchanged = Arc::new(FetchUnchanged::new(wide.clone()).await?);
    let mut floors: Vec<(&'static str, usize, Vec<Phase>)> = Vec::new();
    let mut load: Vec<(&'static str, usize, Vec<Phase>)> = Vec::new();
    for round in 0..rounds() {
        for clients in CLIENT_COUNTS {
            let mut measured = Vec::new();
            for (floor, script) in FLOORS {
                measured.push((floor, pgbench(&database.url, &scratch.0, floor, script, clients, pid.pid)?));
            }
            let [designate_name, get_name, register_name, fetch_name, unchanged_name] =
                OPERATIONS.map(|(name, ..)| name);
            if operation_wanted(designate_name) {
                measured.push((designate_name, run_phase(&designate, clients, pid).await?));
            }
            if operation_wanted(get_name) {
                measured.push((get_name, run_phase(&get, clients, pid).await?));
            }
            if operation_wanted(register_name) {
                measured.push((register_name, run_phase(&register_operation, clients, pid).await?));
            }
            if operation_wanted(fetch_name) {
                measured.push((fetch_name, run_phase(&fetch, clients, pid).await?));
            }
            if operation_wanted(unchanged_name) {
                measured.push((unchanged_name, run_phase(&unchanged, clients, pid).await?));
            }
            for (index, (name, phase)) in measured.into_iter().enumerate() {
                let rows = if index < FLOORS.len() { &mut floors } else { &mut load };
                match rows.iter_mut().find(|(row, count, _)| *row == name && *count == clients) {
                    Some((_, _, phases)) => phases.push(phase),
                    None if round == 0 => rows.push((name, clients, vec![phase])),
                    None => return Err(format!("round {round} measured {name} at {clients} clients first")),
                }
            }
        }
    }
    report.floors = floors.into_iter().map(|(name, clients, phases)| (name, clients, median(phases))).collect();
    report.load = load.into_iter().map(|(name, clients, phases)| (name, clients, median(phases))).collect();
    if load_table_only() {
        drop(wide);
        server.terminate();
        return Ok(report);
    }
    // Clusters: 1 000, then 10 000.
    report.clusters.push(clusters_row(&designate_scale, &get_scale, CLUSTER_COUNTS[1], pid).await?);
    seed_clusters(&admin, CLUSTER_COUNTS[1], CLUSTER_COUNTS[2], false).await?;
    report.clusters.push(clusters_row(&designate_scale, &get_scale, CLUSTER_COUNTS[2], pid).await?);

    // Nodes: the wide cluster at 10, then 1 000 nodes.
    // Designations rotate the ingress bearer: they run on a cluster of their own (`deep`, the
    // same node counts, the ingress on two nodes), so the wide ingress keeps registering.
    admin.call(name::PUT_CLUSTER, cluster_body(DEEP)).await?;
    seed_nodes(&admin, DEEP, 1, NODE_COUNTS[0] + 1).await?;
    admin.call(name::PUT_SERVICE_RUNTIME_SPEC, ingress_spec(DEEP, &["node-1".to_owned(), "node-2".to_owned()])).await?;
    let designate_wide = Designate::new(&admin, vec![DEEP.to_owned()], "deep").await?;
    let _ = &wide.designation;
    for (index, &count) in NODE_COUNTS.iter().enumerate() {
        if index > 0 {
            seed_nodes(&admin, WIDE, NODE_COUNTS[index - 1] + 1, count + 1).await?;
            seed_nodes(&admin, DEEP, NODE_COUNTS[index - 1] + 1, count + 1).await?;
        }
        report.nodes.push((
            count,
            run_phase(&register_operation, SCALE_CLIENTS, pid).await?,
            run_phase(&fetch, SCALE_CLIENTS, pid).await?,
            run_phase(&designate_wide, 1, pid).await?,
        ));
    }
    drop(wide);
    server.terminate();
    Ok(report)
}

async fn clusters_row(
    designate: &Arc<Designate>,
    get: &Arc<GetDesignation>,
    count: usize,
    pid: &Meter,
) -> BenchResult<(usize, Phase, Phase)> {
    Ok((count, run_phase(designate, SCALE_CLIENTS, pid).await?, run_phase(get, SCALE_CLIENTS, pid).await?))
}

fn rss(phase: &Phase) -> String {
    phase.peak_rss_mib.map_or_else(|| "–".to_owned(), |mib| format!("{mib:.1}"))
}

fn render(report: &Report, load_before: &str) -> String {
    let mut text = String::new();
    let (commit, dirty) = commit_and_state();
    let postgres = command_line("psql", &[&pg_admin_url(), "-Atqc", "show server_version"]);
    text.push_str(&format!(
        "### Results — {} (commit `{commit}`{dirty})\n\nGenerated by `cargo bench --bench load` ({} s per phase, \
         {} interleaved round(s), each figure the median round's; PostgreSQL {postgres} on this machine, {} CPUs; \
         load average before the run: {load_before}). Ratio = the operation's throughput ÷ its floor's at the \
         same client count (designate and register also ÷ cas); CPU = CPU time per operation of the server \
         process, of every PostgreSQL process and of the bench's clients; RSS = the server's peak during the \
         phase.\n\n",
        command_line("date", &["-u", "+%Y-%m-%d %H:%M UTC"]),
        measured_seconds(),
        rounds(),
        std::thread::available_parallelism().map_or(0, |cores| cores.get()),
    ));
    let floor = |name: &str, clients: usize| {
        report.floors.iter().find(|(floor, count, _)| *floor == name && *count == clients).map(|(_, _, phase)| phase)
    };
    let ratio = |phase: &Phase, name: &str, clients: usize| {
        floor(name, clients).map(|floor| phase.per_second() / floor.per_second())
    };
    let figure = |ratio: Option<f64>| ratio.map_or_else(|| "–".to_owned(), |ratio| format!("{ratio:.2}"));
    text.push_str(
        "| operation | clients | ops/s | p50 ms | p99 ms | CPU ms/op server | CPU ms/op PostgreSQL | CPU ms/op clients | peak RSS MiB | floor | ratio | ratio to cas | target |\n\
         | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | --- |\n",
    );
    for (name, clients, phase) in &report.load {
        let (_, floor_name, least) =
            OPERATIONS.iter().find(|(operation, ..)| operation == name).copied().unwrap_or_default();
        let measured = ratio(phase, floor_name, *clients);
        let at_target = report.load.iter().find(|(other, count, _)| other == name && *count == TARGET_CLIENTS);
        let target = match least {
            Some(least) if *clients == TARGET_CLIENTS => {
                let met = measured.is_some_and(|measured| measured >= least);
                format!("≥ {least} × {floor_name}: {}", if met { "met" } else { "not met" })
            }
            Some(_) if *clients > TARGET_CLIENTS => match at_target {
                Some((_, _, sixteen)) => {
                    let met = phase.per_second() >= sixteen.per_second();
                    format!("≥ {TARGET_CLIENTS} clients' ops/s: {}", if met { "met" } else { "not met" })
                }
                None => "–".to_owned(),
            },
            _ => "–".to_owned(),
        };
        let cas = if floor_name == "transaction" { figure(ratio(phase, "cas", *clients)) } else { "–".to_owned() };
        text.push_str(&format!(
            "| {name} | {clients} | {:.0} | {:.2} | {:.2} | {:.3} | {:.3} | {:.3} | {} | {floor_name} | {} | {cas} | {target} |\n",
            phase.per_second(),
            phase.p50_ms,
            phase.p99_ms,
            phase.cpu.server,
            phase.cpu.postgres,
            phase.cpu.client,
            rss(phase),
            figure(measured),
        ));
    }
    text.push_str(
        "\nThe floors: `pgbench -n -M prepared` on the same PostgreSQL and database, in the same rounds \
         (CPU of PostgreSQL and of pgbench itself per transaction):\n\n\
         | pgbench | clients | tps | p50 ms | p99 ms | CPU ms/op PostgreSQL | CPU ms/op pgbench |\n\
         | --- | ---: | ---: | ---: | ---: | ---: | ---: |\n",
    );
    for (name, clients, phase) in &report.floors {
        text.push_str(&format!(
            "| {name} | {clients} | {:.0} | {:.2} | {:.2} | {:.3} | {:.3} |\n",
            phase.per_second(),
            phase.p50_ms,
            phase.p99_ms,
            phase.cpu.postgres,
            phase.cpu.client,
        ));
    }
    text.push_str(&format!(
        "\nStore statements per operation at {TARGET_CLIENTS} clients (the server's \
         `cloudly_store_operation_duration_seconds_count` by `operation` label over the phase, background \
         work included; BEGIN, COMMIT and ROLLBACK are not counted):\n\n\
         | operation | statements | by label |\n| --- | ---: | --- |\n"
    ));
    for (name, clients, phase) in &report.load {
        if *clients != TARGET_CLIENTS {
            continue;
        }
        let mut labels = phase.statements.clone();
        labels.sort_by(|a, b| b.1.total_cmp(&a.1));
        let total: f64 = labels.iter().map(|(_, count)| count).sum();
        let by_label = labels
            .iter()
            .filter(|(_, count)| *count >= 0.005)
            .map(|(label, count)| format!("{label} {count:.2}"))
            .collect::<Vec<_>>()
            .join(", ");
        text.push_str(&format!("| {name} | {total:.2} | {by_label} |\n"));
    }
    if report.clusters.is_empty() {
        return text;
    }
    text.push_str(&format!(
        "\nClusters in the store ({SCALE_CLIENTS} clients, each rotating or reading its own cluster):\n\n\
         | clusters | designate ops/s | designate p99 ms | get ops/s | get p99 ms | peak RSS MiB |\n\
         | ---: | ---: | ---: | ---: | ---: | ---: |\n"
    ));
    for (count, designate, get) in &report.clusters {
        text.push_str(&format!(
            "| {count} | {:.0} | {:.2} | {:.0} | {:.2} | {} |\n",
            designate.per_second(),
            designate.p99_ms,
            get.per_second(),
            get.p99_ms,
            rss(get),
        ));
    }
    text.push_str(&format!(
        "\nNodes in one cluster (register and projection fetch at {SCALE_CLIENTS} clients over {INGRESS_NODES} \
         ingress nodes of `wide`; designate at 1 client on cluster `deep` with the same node count, each rotation re-issuing its assignments):\n\n\
         | nodes | register ops/s | register p99 ms | projection fetch ops/s | fetch p99 ms | designate ops/s | designate p99 ms |\n\
         | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n"
    ));
    for (count, register, fetch, designate) in &report.nodes {
        text.push_str(&format!(
            "| {count} | {:.0} | {:.2} | {:.0} | {:.2} | {:.0} | {:.2} |\n",
            register.per_second(),
            register.p99_ms,
            fetch.per_second(),
            fetch.p99_ms,
            designate.per_second(),
            designate.p99_ms,
        ));
    }
    text
}

fn write_section(section: &str) -> BenchResult<PathBuf> {
    if load_table_only() {
        return Ok(PathBuf::from("(nowhere: CLOUDLY_BENCH_TABLES=load runs a part of the report)"));
    }
    support::bench::write_section(BEGIN_MARKER, END_MARKER, "## Load and scale report (`benches/load.rs`)", section)
}

fn main() -> ExitCode {
    let load_before = load_average();
    report_main("load", run, |report| render(report, &load_before), write_section)
}
