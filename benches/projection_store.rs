//! The projection issuer over a real store (`05-projection.md`, "Issuing"; issue 11 item 7), on
//! PostgreSQL and on SQLite: everything `benches/projection.rs` measures in memory, plus the
//! store's statements (the facts read, the locked re-read, the generation, head and grant writes,
//! the route backends).
//!
//! * (a) **The maximal projection**: one node holding 4 096 leases (the ingress, `web` with 1 024
//!   replicas, 3 071 more), a route to `web` whose port moves four times without the node
//!   applying any generation, so the fourth move issues 4 096 endpoints, 1 024 grants and 4 096
//!   retained withdrawals. Timed: `putClusterIngressRoute` in the domain, which writes the route
//!   and issues (facts read, lock, build, admit, sign, store, backends, commit). Between rounds the
//!   node reports applying its head, which drops the withdrawals. Target: under 50 ms.
//! * (b) **One route change on a 1 000-node cluster**: a lease on every node, the ingress on
//!   `node-0000`, a route to `app` on `node-0500` whose port moves. Timed the same way; the nodes
//!   given a new generation are counted (exactly 2 expected). Target: under 1 s.
//! * (c) **A read with nothing to issue** on the same 1 000-node cluster:
//!   `getRuntimeNetworkProjectionForNode`, which answers a stored head.
//!
//! The store is the test harness's (`tests/support`): a fresh PostgreSQL database created on
//! `CLOUDLY_TEST_PG_ADMIN_URL` (default `postgres://postgres@127.0.0.1:5432/postgres`) and dropped,
//! and a fresh SQLite file (`CLOUDLY_BENCH_STORES=postgres` or `=sqlite` runs one of them). Run
//! with `cargo bench --bench projection_store`; it rewrites the section between the
//! `projection-store` markers of `docs/benchmarks.md`, with the store's statements during (a)
//! (`cloudly_store_operation_duration_seconds`).

#[path = "../tests/support/mod.rs"]
mod support;

use cloudly::api::methods::name;
use cloudly::contract::{Id, NodeId, Protocol};
use cloudly::domain::projections::NodeProjectionRequest;
use cloudly::domain::relays::PutClusterIngressRouteRequest;
use cloudly::store::relays::IngressRoute;
use metrics_exporter_prometheus::PrometheusHandle;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::process::ExitCode;
use std::time::{Duration, Instant};
use support::bench;
use support::database::Backend;
use support::node_agent::{NodeAgent, node_bearer};
use support::service::{TestService, designation_request, reference_of};

/// The binary's allocator (`src/main.rs`), so the domain runs here as it runs in the server.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Measured rounds of (a); each ends with the maximal generation.
const ROUNDS: usize = 5;
/// Measured route changes and reads of (b) and (c).
const CHANGES: u16 = 10;
/// Nodes of the wide cluster of (b) and (c).
const NODES: usize = 1_000;
/// The heading and markers of this report's section of `docs/benchmarks.md`.
const HEADING: &str = "## The projection issuer over a real store (`benches/projection_store.rs`)";
const BEGIN_MARKER: &str = "<!-- projection-store:begin -->";
const END_MARKER: &str = "<!-- projection-store:end -->";

type BenchResult<T> = Result<T, String>;

fn id(text: &str) -> Id {
    Id::parse(text).expect("a bench id")
}

fn node_id(text: &str) -> NodeId {
    NodeId::parse(text).expect("a bench node id")
}

fn milliseconds(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1_000.0
}

/// Median and worst of the samples, in ms.
fn median_and_max(samples: &mut [Duration]) -> (f64, f64) {
    samples.sort();
    (milliseconds(samples[samples.len() / 2]), milliseconds(samples[samples.len() - 1]))
}

/// Organization `org`, Pallet cluster `cluster`, its nodes, and the seed's plan with a pool for
/// `org` of 4 096 link subnets.
async fn seed_cluster(service: &TestService, cluster: &str, nodes: &[String]) {
    service.put_pallet_cluster(cluster).await;
    for node in nodes {
        let body = json!({ "id": node, "runtimeNamespace": "ns-main", "hostAddresses": [] });
        service
            .admin_call(
                name::PUT_CLUSTER_NODE,
                json!({ "clusterId": cluster, "node": body, "rotateCredential": false }),
            )
            .await;
    }
    // The seed's plan with a pool of 4 096 link subnets.
    let mut plan = support::service::seed_plan(cluster, 1);
    plan["pools"][0]["prefix"] = json!("10.64.0.0/16");
    service.admin_call(name::PUT_RUNTIME_NETWORK_ADDRESS_PLAN, json!({ "plan": plan })).await;
}

/// Puts service `service` with `replicas` replicas over `nodes` and the target ports `ports`.
async fn put_service(
    service: &TestService,
    cluster: &str,
    name: &str,
    replicas: usize,
    nodes: &[String],
    ports: &[u16],
) {
    let ports: Vec<Value> = ports.iter().map(|port| json!({ "protocol": "tcp", "port": port })).collect();
    let spec = json!({
        "clusterId": cluster, "serviceId": name, "organizationId": "org",
        "image": "registry.example/app:1.0.0", "replicas": replicas,
        "placement": { "nodeIds": nodes }, "ports": ports, "environment": [], "volumes": [],
    });
    service.admin_call(name::PUT_SERVICE_RUNTIME_SPEC, json!({ "spec": spec, "expectedRevision": null })).await;
}

/// Waits until the cluster holds `count` live leases (the background reconcile allocates them).
async fn wait_for_leases(service: &TestService, cluster: &str, count: usize) -> BenchResult<()> {
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let live = service.store.live_leases(&id(cluster)).await.map_err(|error| error.to_string())?.len();
        if live == count {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!("{cluster}: {live} live leases after 10 minutes, {count} expected"));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Puts the route `hostname` → `target` on `port` through the domain; answers how long it took.
async fn put_route(
    service: &TestService,
    cluster: &str,
    hostname: &str,
    target: &str,
    port: u16,
) -> BenchResult<Duration> {
    let request = PutClusterIngressRouteRequest {
        cluster_id: id(cluster),
        route: IngressRoute { hostname: hostname.to_owned(), service_id: id(target), protocol: Protocol::Tcp, port },
    };
    let controller = service.controller();
    let started = Instant::now();
    controller.put_cluster_ingress_route(request).await.map_err(|error| format!("putClusterIngressRoute: {error}"))?;
    Ok(started.elapsed())
}

/// The node's current projection payload as JSON.
async fn projection_of(service: &TestService, cluster: &str, node: &str) -> BenchResult<Value> {
    let stored = service
        .store
        .node_projection(&id(cluster), &node_id(node))
        .await
        .map_err(|error| error.to_string())?
        .ok_or_else(|| format!("{node} has no projection"))?;
    serde_json::to_value(&stored.signed.payload).map_err(|error| error.to_string())
}

/// The head generation of every node of the cluster.
async fn head_generations(service: &TestService, cluster: &str) -> BenchResult<Vec<(NodeId, u64)>> {
    let facts = service.store.projection_facts(&id(cluster), None).await.map_err(|error| error.to_string())?;
    Ok(facts.heads.iter().map(|head| (head.node_id.clone(), head.reference.generation)).collect())
}

struct Maximal {
    /// Per withdrawal count (1 024, 2 048, 3 072, 4 096): the timed route changes.
    by_withdrawals: Vec<(usize, Vec<Duration>)>,
    /// The maximal projection's JSON size, bytes (what a node receives; the store keeps its
    /// endpoint leases by reference).
    record_bytes: usize,
    /// The store's statements during the timed route changes: operation, total ms, count.
    statements: Vec<(String, f64, u64)>,
}

/// Total seconds and count of each store operation so far
/// (`cloudly_store_operation_duration_seconds`).
fn statement_totals(handle: &PrometheusHandle) -> BTreeMap<String, (f64, u64)> {
    let mut totals: BTreeMap<String, (f64, u64)> = BTreeMap::new();
    for line in handle.render().lines() {
        let Some(rest) = line.strip_prefix("cloudly_store_operation_duration_seconds_") else { continue };
        let Some((kind, rest)) = rest.split_once("{operation=\"") else { continue };
        let Some((operation, value)) = rest.split_once("\"} ") else { continue };
        let Ok(value) = value.trim().parse::<f64>() else { continue };
        let entry = totals.entry(operation.to_owned()).or_default();
        match kind {
            "sum" => entry.0 = value,
            "count" => entry.1 = value as u64,
            _ => {}
        }
    }
    totals
}

/// What each operation added between two [`statement_totals`], the costliest first.
fn statement_delta(
    before: &BTreeMap<String, (f64, u64)>,
    after: &BTreeMap<String, (f64, u64)>,
) -> Vec<(String, f64, u64)> {
    let mut delta: Vec<(String, f64, u64)> = after
        .iter()
        .map(|(operation, (seconds, count))| {
            let (earlier_seconds, earlier_count) = before.get(operation).copied().unwrap_or_default();
            (operation.clone(), (seconds - earlier_seconds) * 1_000.0, count - earlier_count)
        })
        .filter(|(_, _, count)| *count > 0)
        .collect();
    delta.sort_by(|left, right| right.1.total_cmp(&left.1));
    delta
}

/// (a): see the module documentation.
async fn maximal(service: &TestService) -> BenchResult<Maximal> {
    let nodes = vec!["node-1".to_owned()];
    seed_cluster(service, "c1", &nodes).await;
    put_service(service, "c1", "ingress", 1, &nodes, &[443]).await;
    put_service(service, "c1", "web", 1024, &nodes, &[1000, 1001, 1002, 1003, 1004]).await;
    put_service(service, "c1", "bulk-1", 1024, &nodes, &[9000]).await;
    put_service(service, "c1", "bulk-2", 1024, &nodes, &[9000]).await;
    put_service(service, "c1", "bulk-3", 1023, &nodes, &[9000]).await;
    service
        .admin_call(name::DESIGNATE_CLUSTER_INGRESS, designation_request("c1", "ingress", "m1", 1, Value::Null))
        .await;
    wait_for_leases(service, "c1", 4096).await?;
    put_route(service, "c1", "web.example.net", "web", 1000).await?;
    let agent = NodeAgent::connect(service).await;
    let bearer = node_bearer(service, "c1", "node-1").await;
    let session = agent.open("c1", "node-1", &bearer).await;
    let mut by_withdrawals: Vec<(usize, Vec<Duration>)> = (1..=4).map(|step| (step * 1024, Vec::new())).collect();
    let mut port = 1000;
    let mut record_bytes = 0;
    let handle = cloudly::metrics::install();
    let before = statement_totals(&handle);
    for _ in 0..ROUNDS {
        // The node applies its head: the next generation retains nothing.
        let head = projection_of(service, "c1", "node-1").await?;
        agent
            .call(
                name::REPORT_RUNTIME_NETWORK_PROJECTION_APPLIED,
                json!({ "session": session, "applied": reference_of(&head) }),
            )
            .await
            .map_err(|error| format!("reportRuntimeNetworkProjectionApplied: {error:?}"))?;
        for (withdrawals, samples) in &mut by_withdrawals {
            port = if port == 1004 { 1000 } else { port + 1 };
            samples.push(put_route(service, "c1", "web.example.net", "web", port).await?);
            let projection = projection_of(service, "c1", "node-1").await?;
            let grants = projection["workloadIngress"]["grants"].as_array().map_or(0, Vec::len);
            let withdrawn = projection["workloadIngress"]["withdrawals"].as_array().map_or(0, Vec::len);
            let endpoints = projection["endpoints"].as_array().map_or(0, Vec::len);
            if (grants, withdrawn, endpoints) != (1024, *withdrawals, 4096) {
                return Err(format!(
                    "port {port}: {grants} grants, {withdrawn} withdrawals, {endpoints} endpoints; \
                     1024, {withdrawals}, 4096 expected"
                ));
            }
            record_bytes = serde_json::to_string(&projection).map_err(|error| error.to_string())?.len();
        }
    }
    let statements = statement_delta(&before, &statement_totals(&handle));
    Ok(Maximal { by_withdrawals, record_bytes, statements })
}

struct Wide {
    changes: Vec<Duration>,
    reads: Vec<Duration>,
}

/// (b) and (c): see the module documentation.
async fn wide(service: &TestService) -> BenchResult<Wide> {
    let nodes: Vec<String> = (0..NODES).map(|index| format!("node-{index:04}")).collect();
    seed_cluster(service, "c2", &nodes).await;
    // A spec places its replicas on at most 256 nodes.
    for (index, chunk) in nodes.chunks(250).enumerate() {
        put_service(service, "c2", &format!("bulk-{index}"), chunk.len(), chunk, &[9000]).await;
    }
    put_service(service, "c2", "ingress", 1, &nodes[..1], &[443]).await;
    let ports: Vec<u16> = (1000..1000 + CHANGES + 1).collect();
    put_service(service, "c2", "app", 1, &nodes[500..501], &ports).await;
    service
        .admin_call(name::DESIGNATE_CLUSTER_INGRESS, designation_request("c2", "ingress", "m2", 1, Value::Null))
        .await;
    wait_for_leases(service, "c2", NODES + 2).await?;
    put_route(service, "c2", "app.example.net", "app", ports[0]).await?;
    let mut changes = Vec::new();
    for port in &ports[1..] {
        let before = head_generations(service, "c2").await?;
        changes.push(put_route(service, "c2", "app.example.net", "app", *port).await?);
        let after = head_generations(service, "c2").await?;
        let rebuilt: Vec<&NodeId> = after.iter().filter(|head| !before.contains(head)).map(|(node, _)| node).collect();
        let expected = [node_id("node-0000"), node_id("node-0500")];
        if rebuilt.len() != 2 || !expected.iter().all(|node| rebuilt.contains(&node)) {
            return Err(format!("port {port}: rebuilt {rebuilt:?}, node-0000 and node-0500 expected"));
        }
    }
    let controller = service.controller();
    let mut reads = Vec::new();
    for index in 0..CHANGES {
        let node = &nodes[usize::from(index) * 97 % NODES];
        let request = NodeProjectionRequest { cluster_id: id("c2"), node_id: node_id(node) };
        let started = Instant::now();
        let answer = controller
            .get_runtime_network_projection_for_node(request)
            .await
            .map_err(|error| format!("getRuntimeNetworkProjectionForNode: {error}"))?;
        reads.push(started.elapsed());
        if answer.projection.is_none() {
            return Err(format!("{node} has no projection"));
        }
    }
    Ok(Wide { changes, reads })
}

struct StoreReport {
    backend: &'static str,
    maximal: Maximal,
    wide: Wide,
}

async fn run(backend: Backend, name: &'static str) -> BenchResult<StoreReport> {
    let service = TestService::start(backend).await;
    let outcome = async {
        let maximal = maximal(&service).await?;
        for (withdrawals, samples) in &maximal.by_withdrawals {
            println!("{name}: (a) {withdrawals} withdrawals: {samples:?}");
        }
        let wide = wide(&service).await?;
        println!("{name}: (b) {:?}\n{name}: (c) {:?}", wide.changes, wide.reads);
        Ok::<_, String>((maximal, wide))
    }
    .await;
    service.stop().await;
    let (maximal, wide) = outcome?;
    Ok(StoreReport { backend: name, maximal, wide })
}

fn verdict(value: f64, target: f64) -> &'static str {
    if value < target { "PASS" } else { "MISS" }
}

fn render(reports: &mut [StoreReport], load_before: &str) -> String {
    let mut out = String::new();
    out.push_str(&format!(
        "### Results — {} (written by `cargo bench --bench projection_store`)\n\n\
         Load average before the run: {load_before}. Median and worst of the samples, in ms.\n\n\
         | store | case | samples | median | worst | target |\n| --- | --- | --- | --- | --- | --- |\n",
        bench::command_line("date", &["-u", "+%Y-%m-%d %H:%M UTC"])
    ));
    for report in reports.iter_mut() {
        for (withdrawals, samples) in &mut report.maximal.by_withdrawals {
            let (median, worst) = median_and_max(samples);
            let target =
                if *withdrawals == 4096 { format!("50 ms: {}", verdict(median, 50.0)) } else { "—".to_owned() };
            out.push_str(&format!(
                "| {} | (a) 4 096 endpoints, 1 024 grants, {withdrawals} withdrawals ({} bytes at 4 096) | {} | {median:.1} | {worst:.1} | {target} |\n",
                report.backend,
                report.maximal.record_bytes,
                samples.len()
            ));
        }
        let (median, worst) = median_and_max(&mut report.wide.changes);
        out.push_str(&format!(
            "| {} | (b) one route change, {NODES} nodes, 2 rebuilt | {} | {median:.1} | {worst:.1} | 1 000 ms: {} |\n",
            report.backend,
            report.wide.changes.len(),
            verdict(median, 1000.0)
        ));
        let (median, worst) = median_and_max(&mut report.wide.reads);
        out.push_str(&format!(
            "| {} | (c) administrator read, {NODES} nodes, nothing to issue | {} | {median:.1} | {worst:.1} | — |\n",
            report.backend,
            report.wide.reads.len()
        ));
    }
    for report in reports.iter() {
        let changes: usize = report.maximal.by_withdrawals.iter().map(|(_, samples)| samples.len()).sum();
        out.push_str(&format!(
            "\n{}: the store's statements during the {changes} timed changes of (a) (also the reports \
             applied between rounds), costliest first:\n\n| operation | count | total ms |\n| --- | --- | --- |\n",
            report.backend
        ));
        for (operation, milliseconds, count) in report.maximal.statements.iter().take(8) {
            out.push_str(&format!("| `{operation}` | {count} | {milliseconds:.0} |\n"));
        }
    }
    out
}

fn main() -> ExitCode {
    let load_before = bench::load_average();
    let measure = async move || {
        let mut reports = Vec::new();
        let stores = std::env::var("CLOUDLY_BENCH_STORES").unwrap_or_else(|_| "postgres,sqlite".to_owned());
        for (backend, key, name) in
            [(Backend::Postgres, "postgres", "PostgreSQL"), (Backend::Sqlite, "sqlite", "SQLite")]
        {
            if !stores.split(',').any(|store| store.trim() == key) {
                continue;
            }
            let started = Instant::now();
            reports.push(run(backend, name).await?);
            println!("{name}: measured in {:.0} s", started.elapsed().as_secs_f64());
        }
        Ok(render(&mut reports, &load_before))
    };
    bench::measure_main("projection_store", measure, |section| {
        bench::write_section(BEGIN_MARKER, END_MARKER, HEADING, &format!("{section}\n"))
    })
}
