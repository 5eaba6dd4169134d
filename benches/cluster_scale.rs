//! One cluster grown to 10 000 services (a benchmark, not a timed test): one command, `cargo bench
//! --bench cluster_scale`, measures how the cost of a write grows with the size of ONE cluster,
//! against a real `cloudly serve` process on PostgreSQL, and rewrites the section between the
//! `cluster-scale` markers of `docs/benchmarks.md`.
//!
//! The cluster `scale` (organization `org`, a `relayOrigin`) has [`Scale::nodes`] nodes and an
//! address plan whose organization pool (`10.64.0.0/14`, 65 536 `/30`s) holds a lease for every
//! replica; the first [`Scale::agents`] nodes each have a test node agent on `/typedsocket` with
//! an open session that answers claim pushes as an honest node does. Service `ingress` (one
//! replica on `node-1`) is put and designated first. Then one admin client, on one keep-alive
//! connection, grows the cluster serially to [`Scale::services`] services `svc-<i>`: one replica
//! each, pinned round-robin to the nodes, port tcp 8080; every [`VOLUME_EVERY`]th has one
//! node-local `empty` volume and is pinned round-robin to the nodes with an agent (so its claim
//! is pushed and answered); each of the first [`ROUTES`] gets an ingress route as soon as it
//! exists (so projections with grants are issued). At each checkpoint ([`CHECKPOINTS`] up to the
//! size, and the size itself) the growth pauses and the bench measures, the cluster keeping its
//! size (every put there is a new revision of an existing service):
//!
//! * **put**: [`SERIAL_PUTS`] new revisions of services without a volume (an environment value
//!   changes), one at a time by the growing client: p50/p99;
//! * **designate**: [`DESIGNATIONS`] accepted rotations of the designation (fresh mutation ids,
//!   each expecting the last), one at a time by a second client, while a third streams revisions
//!   as above: p50/p99 of both;
//! * **projection fetch**: `getRuntimeNetworkProjection { known: null }` over the agents' sessions
//!   by [`FETCH_CLIENTS`] clients for the measured seconds: ops/s, p50/p99;
//! * **claims**: one volume service per agent node (as many as exist) gets a new revision with a
//!   new mount path, by [`CLAIM_CLIENTS`] clients at once, so each issues a new claim generation
//!   for its node; claims pushed and acknowledged per second = claims ÷ (last answer stored − first
//!   put sent), the stored time being the server's `claim answer recorded` log line, as
//!   `benches/claims.rs` measures it;
//! * **full pass**: once the server exposes `cloudly_reconcile_full_passes_total`, the bench waits
//!   until it has advanced by two after the checkpoint's writes (so one whole pass started after
//!   them) and reads `cloudly_reconcile_full_pass_duration_seconds` and the sum of
//!   `cloudly_reconcile_corrections_total`; until then the report says `n/a (not exposed)`;
//! * the cumulative time the growth took so far, and the server's peak RSS so far.
//!
//! At the end, **fan-out**: a new address plan revision adds a platform endpoint, which gives the
//! cluster's protected authority a new generation and so touches every node's projection; each
//! connected agent fetches after its `pushRuntimeChanged { kinds: ["projection"] }` push, and the
//! bench takes the time from the plan put to the last agent holding a projection of the new
//! authority, counting `overloaded` answers (each retried after its `retryAfterMs`).
//!
//! Any refused call, claim fault (a fault counted on a claim, a push answered otherwise than
//! `accepted`/`replay` and `ready`, a `fault` or `no-answer` push outcome), failed projection
//! issue, store error, `ERROR` line in the server's log, closed agent socket or full-pass
//! correction fails the run; a missed target is printed as `MISS` and does not.
//!
//! PostgreSQL: `CLOUDLY_TEST_PG_ADMIN_URL` (default `postgres://postgres@127.0.0.1:5432/postgres`);
//! the bench creates its own database and drops it. `CLOUDLY_BENCH_SERVICES` (default 10 000),
//! `CLOUDLY_BENCH_NODES` (default 1 000) and `CLOUDLY_BENCH_AGENTS` (default 200) size the cluster;
//! `CLOUDLY_BENCH_SECONDS` sets the projection fetch's measured seconds (default 2).

#[path = "../tests/support/mod.rs"]
mod support;

use cloudly::api::methods::name;
use futures_util::StreamExt as _;
use serde_json::{Value, json};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};
use support::bench::{
    Admin, BenchResult, ConnectedNode, SEED_CONCURRENCY, cluster_body, connect_nodes, logged_claim_answers,
    metric_samples, metric_sum, node_body, peak_rss_mib, percentile_ms, results_heading, scrape_metrics, section_main,
    seed_all, unix_micros,
};
use support::database::TestDatabase;
use support::node_agent::NodeAgent;
use support::process::{Scratch, Serving, start_with};
use support::service::reference_of;

/// The cluster sizes (services) at which the growth pauses to measure; those up to
/// [`Scale::services`] are used, and the size itself too.
const CHECKPOINTS: [usize; 3] = [100, 1_000, 10_000];
/// Every this many services, one has a node-local volume.
const VOLUME_EVERY: usize = 10;
/// Services that get an ingress route (the first ones).
const ROUTES: usize = 100;
/// Revisions put one at a time at each checkpoint.
const SERIAL_PUTS: usize = 100;
/// Designations at each checkpoint, one at a time while revisions stream.
const DESIGNATIONS: usize = 50;
/// Clients fetching projections at once.
const FETCH_CLIENTS: usize = 8;
/// Clients putting the claims batch at once (as `benches/claims.rs`'s concurrent phase).
const CLAIM_CLIENTS: usize = 8;
/// The interval of the server's full pass (`CLOUDLY_RECONCILE_FULL_PASS_MS`).
const FULL_PASS_MS: u64 = 10_000;
/// How long the bench waits for a whole full pass after a checkpoint's writes.
const FULL_PASS_DEADLINE: Duration = Duration::from_secs(120);
/// How long the bench waits for claims to be pushed and their answers stored.
const ACK_DEADLINE: Duration = Duration::from_secs(180);
/// How long the bench waits for every agent to hold the new projection after the plan write.
const FAN_OUT_DEADLINE: Duration = Duration::from_secs(60);
/// The cluster.
const CLUSTER: &str = "scale";
/// The designated ingress service (not one of the counted services).
const INGRESS: &str = "ingress";
/// The port every service declares and every route targets.
const PORT: u16 = 8080;
const BEGIN_MARKER: &str = "<!-- cluster-scale:begin -->";
const END_MARKER: &str = "<!-- cluster-scale:end -->";
const HEADING: &str = "## One cluster grown to 10 000 services (`benches/cluster_scale.rs`)";

/// The metrics of the full pass.
const FULL_PASSES: &str = "cloudly_reconcile_full_passes_total";
const FULL_PASS_SECONDS: &str = "cloudly_reconcile_full_pass_duration_seconds";
const CORRECTIONS: &str = "cloudly_reconcile_corrections_total";

// The targets (a miss is reported, not failed).
/// Put p50 at 10 000 services: at most this many times its value at 100 …
const PUT_GROWTH_TARGET: f64 = 2.0;
/// … and under this.
const PUT_P50_TARGET_MS: f64 = 10.0;
/// Designate p99 at 10 000 services while puts run.
const DESIGNATE_P99_TARGET_MS: f64 = 20.0;
/// Growing to 10 000 services serially.
const GROW_TARGET: Duration = Duration::from_secs(180);
/// Claims pushed and acknowledged per second at 200 nodes.
const CLAIMS_TARGET: f64 = 200.0;
/// The server's peak RSS over the run.
const RSS_TARGET_MIB: f64 = 300.0;
/// Every agent holds the new projection within this, with no `overloaded` answer.
const FAN_OUT_TARGET: Duration = Duration::from_secs(2);
/// The size the size-bound targets are read at.
const TARGET_SERVICES: usize = 10_000;

/// The size of the run, from the environment.
#[derive(Clone, Copy, Debug)]
struct Scale {
    /// Services the cluster grows to (`CLOUDLY_BENCH_SERVICES`, default 10 000).
    services: usize,
    /// Nodes of the cluster (`CLOUDLY_BENCH_NODES`, default 1 000).
    nodes: usize,
    /// Nodes with a connected agent (`CLOUDLY_BENCH_AGENTS`, default 200).
    agents: usize,
    /// Measured seconds of the projection fetch (`CLOUDLY_BENCH_SECONDS`, default 2).
    seconds: u64,
}

impl Scale {
    fn from_environment() -> BenchResult<Scale> {
        let read = |name: &str, default: usize| -> BenchResult<usize> {
            match std::env::var(name) {
                Ok(text) => text.parse().map_err(|_| format!("{name}={text} is not a whole number")),
                Err(_) => Ok(default),
            }
        };
        let scale = Scale {
            services: read("CLOUDLY_BENCH_SERVICES", 10_000)?,
            nodes: read("CLOUDLY_BENCH_NODES", 1_000)?,
            agents: read("CLOUDLY_BENCH_AGENTS", 200)?,
            seconds: read("CLOUDLY_BENCH_SECONDS", 2)? as u64,
        };
        // Two services at least: the puts at a checkpoint revise a service without a volume.
        if scale.services < 2 || scale.nodes == 0 || scale.seconds == 0 || !(1..=scale.nodes).contains(&scale.agents) {
            return Err(format!("a run needs 2 services or more, nodes, 1..=nodes agents and seconds: {scale:?}"));
        }
        Ok(scale)
    }

    /// The checkpoints of this run, ascending.
    fn checkpoints(&self) -> Vec<usize> {
        let mut sizes: Vec<usize> = CHECKPOINTS.into_iter().filter(|&size| size <= self.services).collect();
        if !sizes.contains(&self.services) {
            sizes.push(self.services);
        }
        sizes
    }

    /// The node index service `index` is pinned to: a volume service round-robin over the nodes
    /// with an agent, any other round-robin over all nodes.
    fn node_of(&self, index: usize) -> usize {
        if has_volume(index) { (index / VOLUME_EVERY) % self.agents } else { index % self.nodes }
    }
}

fn has_volume(index: usize) -> bool {
    index % VOLUME_EVERY == 0
}

fn node_name(index: usize) -> String {
    format!("node-{}", index + 1)
}

fn service_name(index: usize) -> String {
    format!("svc-{index}")
}

// ---------------------------------------------------------------------------------------------
// The cluster, built over the wire.

/// The address plan at `revision`: the seed's plan with a `/14` pool for `org` (a lease for every
/// replica) inside `10.64.0.0/12`; from revision 2 on one more platform endpoint, `fan-out`.
fn plan_body(revision: u64) -> Value {
    let mut plan = support::service::seed_plan(CLUSTER, revision);
    plan["prefixes"] = json!(["10.64.0.0/12", "192.0.2.16/28"]);
    plan["pools"] = json!([{ "id": "pool-org", "organizationId": "org", "prefix": "10.64.0.0/14" }]);
    if revision > 1 {
        let endpoints = plan["platformEndpoints"].as_array_mut().expect("the seed plan has platform endpoints");
        endpoints.push(json!({ "id": "fan-out", "address": "192.0.2.18", "protocol": "tcp", "port": 9100 }));
        endpoints.sort_by(|left, right| left["id"].as_str().cmp(&right["id"].as_str()));
    }
    json!({ "plan": plan })
}

/// Service `svc-<index>` at `revision` (the environment names it), with its volume's mount path
/// at `mount` when it has one; `expectedRevision` is the one before.
fn service_spec(scale: &Scale, index: usize, revision: u64, mount: u64) -> Value {
    let service = service_name(index);
    let volumes = if has_volume(index) {
        json!([{
            "id": format!("vol-{index}"), "mountPath": format!("/var/lib/{service}/m{mount}"), "readOnly": false,
            "driver": "local", "driverOptions": [], "mountOptions": [],
            "initialization": { "kind": "empty", "ownership": { "uid": 1000, "gid": 1000, "mode": 0o750 } },
        }])
    } else {
        json!([])
    };
    json!({ "spec": {
        "clusterId": CLUSTER, "serviceId": service, "organizationId": "org",
        "image": "registry.example/app:2.1.0", "replicas": 1,
        "placement": { "nodeIds": [node_name(scale.node_of(index))] },
        "ports": [{ "protocol": "tcp", "port": PORT }],
        "environment": [
            { "name": "BENCH_REVISION", "value": revision.to_string() },
            { "name": "LOG_LEVEL", "value": "info" },
        ],
        "volumes": volumes,
    }, "expectedRevision": if revision == 1 { Value::Null } else { json!(revision - 1) } })
}

/// The designated ingress: one replica on `node-1`.
fn ingress_spec() -> Value {
    json!({ "spec": {
        "clusterId": CLUSTER, "serviceId": INGRESS, "organizationId": "org",
        "image": "registry.example/ingress:1.4.2", "replicas": 1,
        "placement": { "nodeIds": [node_name(0)] },
        "ports": [{ "protocol": "tcp", "port": 443 }],
        "environment": [{ "name": "LOG_LEVEL", "value": "info" }],
        "volumes": [],
    }, "expectedRevision": null })
}

/// A designation of [`INGRESS`] (spec revision 1) expecting `expected`.
fn designation_body(mutation: &str, expected: &Value) -> Value {
    json!({ "designation": {
        "mutationId": mutation, "clusterId": CLUSTER, "ingressServiceId": INGRESS,
        "currentRuntime": { "id": CLUSTER, "phase": "pallet", "generation": 3 },
        "expectedSpecRevision": 1, "expectedDesignation": expected,
    } })
}

/// Puts `svc-<index>` at `revision` with mount `mount`; checks the answer names that revision and
/// answers how long the put took, in microseconds.
async fn put_service(admin: &Admin, scale: &Scale, index: usize, revision: u64, mount: u64) -> BenchResult<u64> {
    let started = Instant::now();
    let answer = admin.call(name::PUT_SERVICE_RUNTIME_SPEC, service_spec(scale, index, revision, mount)).await?;
    let took = started.elapsed().as_micros() as u64;
    if answer["spec"]["serviceId"] != json!(service_name(index)) || answer["spec"]["revision"] != json!(revision) {
        return Err(format!("putServiceRuntimeSpec svc-{index}: not revision {revision}: {answer}"));
    }
    Ok(took)
}

/// One designation expecting `expected`; it must be a fresh acceptance. Answers the new
/// designation's reference.
async fn designate(admin: &Admin, mutation: &str, expected: &Value) -> BenchResult<Value> {
    let answer = admin.call(name::DESIGNATE_CLUSTER_INGRESS, designation_body(mutation, expected)).await?;
    if answer["replayed"] != json!(false) || answer["designation"]["clusterId"] != CLUSTER {
        return Err(format!("designateClusterIngress {mutation}: not a fresh acceptance: {answer}"));
    }
    Ok(reference_of(&answer["designation"]))
}

/// What the bench put so far, per service index.
struct Services {
    /// The current spec revision of each service.
    revisions: Vec<u64>,
    /// The mount generation of each service's volume (its claim's generation).
    mounts: Vec<u64>,
    /// The last service given a new revision by [`Services::next_revision`].
    cursor: usize,
}

impl Services {
    /// The next service without a volume (round-robin), its next revision and its mount; the
    /// revision is counted as put.
    fn next_revision(&mut self) -> (usize, u64, u64) {
        loop {
            self.cursor = (self.cursor + 1) % self.revisions.len();
            if !has_volume(self.cursor) {
                break;
            }
        }
        self.revisions[self.cursor] += 1;
        (self.cursor, self.revisions[self.cursor], self.mounts[self.cursor])
    }
}

/// The organization, the cluster, its nodes, the plan (answers its protected authority), the
/// agents of the first nodes, and the designated ingress (answers the designation's reference).
async fn build_cluster(
    admin: &Arc<Admin>,
    base_url: &str,
    scale: &Scale,
) -> BenchResult<(Vec<ConnectedNode>, Value, Value)> {
    admin.call(name::PUT_ORGANIZATION, json!({ "organization": { "id": "org", "name": "Org" } })).await?;
    admin.call(name::PUT_CLUSTER, cluster_body(CLUSTER)).await?;
    let plain =
        (scale.agents..scale.nodes).map(|index| (name::PUT_CLUSTER_NODE, node_body(CLUSTER, &node_name(index), false)));
    seed_all(admin, plain.collect()).await?;
    let nodes = connect_nodes(admin, base_url, CLUSTER, (0..scale.agents).map(node_name)).await?;
    let plan = admin.call(name::PUT_RUNTIME_NETWORK_ADDRESS_PLAN, plan_body(1)).await?;
    let authority = plan["protectedAuthority"].clone();
    if authority["generation"].as_u64().is_none() {
        return Err(format!("putRuntimeNetworkAddressPlan: no protected authority: {plan}"));
    }
    admin.call(name::PUT_SERVICE_RUNTIME_SPEC, ingress_spec()).await?;
    let designation = designate(admin, "designate-initial", &Value::Null).await?;
    Ok((nodes, authority, designation))
}

/// Grows the cluster from `from` to `to` services, one put at a time (and a route to each of the
/// first [`ROUTES`] once it exists); answers how long it took.
async fn grow(
    admin: &Admin,
    scale: &Scale,
    services: &Mutex<Services>,
    from: usize,
    to: usize,
) -> BenchResult<Duration> {
    let started = Instant::now();
    for index in from..to {
        put_service(admin, scale, index, 1, 1).await?;
        {
            let mut services = services.lock().unwrap();
            services.revisions.push(1);
            services.mounts.push(1);
        }
        if index < ROUTES {
            let route = json!({ "hostname": format!("{}.bench.example", service_name(index)),
                                "serviceId": service_name(index), "protocol": "tcp", "port": PORT });
            let answer =
                admin.call(name::PUT_CLUSTER_INGRESS_ROUTE, json!({ "clusterId": CLUSTER, "route": route })).await?;
            if answer["table"].is_null() {
                return Err(format!("putClusterIngressRoute svc-{index}: no table: {answer}"));
            }
        }
    }
    Ok(started.elapsed())
}

// ---------------------------------------------------------------------------------------------
// The measures of one checkpoint.

/// [`SERIAL_PUTS`] revisions one at a time: their sorted microseconds.
async fn serial_puts(admin: &Admin, scale: &Scale, services: &Mutex<Services>) -> BenchResult<Vec<u64>> {
    let mut took = Vec::with_capacity(SERIAL_PUTS);
    for _ in 0..SERIAL_PUTS {
        let (index, revision, mount) = services.lock().unwrap().next_revision();
        took.push(put_service(admin, scale, index, revision, mount).await?);
    }
    took.sort_unstable();
    Ok(took)
}

/// Designations while puts stream.
struct Designations {
    /// Sorted microseconds of the designations.
    designate: Vec<u64>,
    /// Sorted microseconds of the puts streamed meanwhile.
    streamed: Vec<u64>,
}

/// [`DESIGNATIONS`] designations by one client (from `expected` on; it ends as the last one's
/// reference) while another streams revisions.
async fn designate_while_putting(
    server: &Serving,
    identity: &Value,
    scale: &Scale,
    services: &Arc<Mutex<Services>>,
    size: usize,
    expected: &mut Value,
) -> BenchResult<Designations> {
    let stop = Arc::new(AtomicBool::new(false));
    let streamed_count = Arc::new(AtomicUsize::new(0));
    let stream = {
        let (stop, streamed_count, services) = (stop.clone(), streamed_count.clone(), services.clone());
        let (client, scale) = (Admin { client: server.client(), identity: identity.clone() }, *scale);
        tokio::spawn(async move {
            let mut took = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let (index, revision, mount) = services.lock().unwrap().next_revision();
                took.push(put_service(&client, &scale, index, revision, mount).await?);
                streamed_count.fetch_add(1, Ordering::Relaxed);
            }
            Ok::<_, String>(took)
        })
    };
    let designator = Admin { client: server.client(), identity: identity.clone() };
    let designations = async {
        // The stream runs before the first designation.
        while streamed_count.load(Ordering::Relaxed) == 0 && !stream.is_finished() {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let mut took = Vec::with_capacity(DESIGNATIONS);
        for number in 0..DESIGNATIONS {
            let started = Instant::now();
            *expected = designate(&designator, &format!("designate-{size}-{number}"), expected).await?;
            took.push(started.elapsed().as_micros() as u64);
        }
        Ok::<_, String>(took)
    }
    .await;
    stop.store(true, Ordering::Relaxed);
    let streamed = stream.await.map_err(|error| format!("the put stream panicked: {error}"))?;
    let (mut designate, mut streamed) = (designations?, streamed?);
    designate.sort_unstable();
    streamed.sort_unstable();
    Ok(Designations { designate, streamed })
}

/// Projection fetches for the measured seconds.
struct Fetches {
    seconds: f64,
    /// Sorted microseconds.
    took: Vec<u64>,
}

impl Fetches {
    fn per_second(&self) -> f64 {
        self.took.len() as f64 / self.seconds
    }
}

/// `getRuntimeNetworkProjection { known: null }` by [`FETCH_CLIENTS`] clients over the agents'
/// sessions, client `c`'s `n`-th fetch on agent `c + n × clients`, for a 300 ms warm-up and then
/// the measured seconds.
async fn fetch_projections(nodes: &Arc<Vec<ConnectedNode>>, seconds: u64) -> BenchResult<Fetches> {
    let measure_from = Instant::now() + Duration::from_millis(300);
    let stop_at = measure_from + Duration::from_secs(seconds);
    let mut tasks = Vec::new();
    for client in 0..FETCH_CLIENTS {
        let nodes = nodes.clone();
        tasks.push(tokio::spawn(async move {
            let mut took = Vec::new();
            let mut number = 0;
            while Instant::now() < stop_at {
                let index = (client + number * FETCH_CLIENTS) % nodes.len();
                number += 1;
                let node = &nodes[index];
                let sent = Instant::now();
                let answer = node
                    .agent
                    .call(name::GET_RUNTIME_NETWORK_PROJECTION, json!({ "session": node.session, "known": null }))
                    .await
                    .map_err(|error| {
                        format!("getRuntimeNetworkProjection {}: {} {}", node_name(index), error.text, error.data)
                    })?;
                if answer["projection"]["payload"]["id"] != json!(node_name(index)) {
                    return Err(format!(
                        "getRuntimeNetworkProjection {}: not its projection: {answer}",
                        node_name(index)
                    ));
                }
                if sent >= measure_from {
                    took.push(sent.elapsed().as_micros() as u64);
                }
            }
            Ok::<_, String>(took)
        }));
    }
    let mut took = Vec::new();
    for task in tasks {
        took.extend(task.await.map_err(|error| format!("a fetch client panicked: {error}"))??);
    }
    let seconds = Instant::now().duration_since(measure_from).as_secs_f64();
    took.sort_unstable();
    Ok(Fetches { seconds, took })
}

/// A batch of claims pushed and acknowledged.
struct ClaimBatch {
    claims: usize,
    /// First put sent → last answer stored.
    seconds: f64,
    /// Sorted microseconds, put sent → the node's answer stored, per claim.
    put_to_stored: Vec<u64>,
}

impl ClaimBatch {
    fn per_second(&self) -> f64 {
        if self.seconds > 0.0 { self.claims as f64 / self.seconds } else { 0.0 }
    }
}

/// The last volume service of each agent node (of the first `size` services) gets a new revision
/// with a new mount path, by [`CLAIM_CLIENTS`] clients at once; waits until each new claim
/// generation was pushed to its node and its answer stored.
async fn claims_batch(
    server: &Serving,
    identity: &Value,
    scale: &Scale,
    services: &Mutex<Services>,
    nodes: &[ConnectedNode],
    size: usize,
) -> BenchResult<ClaimBatch> {
    let volume_services: Vec<usize> = (0..size).filter(|&index| has_volume(index)).collect();
    // (service index, new revision, new mount), one per agent node at most.
    let batch: Vec<(usize, u64, u64)> = {
        let mut services = services.lock().unwrap();
        volume_services[volume_services.len().saturating_sub(scale.agents)..]
            .iter()
            .map(|&index| {
                services.revisions[index] += 1;
                services.mounts[index] += 1;
                (index, services.revisions[index], services.mounts[index])
            })
            .collect()
    };
    if batch.is_empty() {
        return Ok(ClaimBatch { claims: 0, seconds: 0.0, put_to_stored: Vec::new() });
    }
    let queue = Arc::new(Mutex::new(batch.clone().into_iter().enumerate()));
    let mut tasks = Vec::new();
    for _ in 0..CLAIM_CLIENTS {
        let (queue, scale) = (queue.clone(), *scale);
        let client = Admin { client: server.client(), identity: identity.clone() };
        tasks.push(tokio::spawn(async move {
            let mut sent = Vec::new();
            loop {
                let next = queue.lock().unwrap().next();
                let Some((position, (index, revision, mount))) = next else { return Ok::<_, String>(sent) };
                sent.push((position, unix_micros(SystemTime::now())));
                put_service(&client, &scale, index, revision, mount).await?;
            }
        }));
    }
    let mut sent = Vec::new();
    for task in tasks {
        sent.extend(task.await.map_err(|error| format!("a claim put client panicked: {error}"))??);
    }
    let claims = await_claim_pushes(scale, nodes, &batch).await?;
    let stored = await_stored_answers(server, &claims).await?;
    let first_sent = sent.iter().map(|(_, at)| *at).min().unwrap_or(0);
    let last_stored = stored.iter().copied().max().unwrap_or(0);
    let mut put_to_stored: Vec<u64> = sent.iter().map(|&(position, at)| stored[position].saturating_sub(at)).collect();
    put_to_stored.sort_unstable();
    Ok(ClaimBatch { claims: batch.len(), seconds: last_stored.saturating_sub(first_sent) as f64 / 1e6, put_to_stored })
}

/// Waits until each (service, revision, mount) of `batch` had its claim generation `mount` pushed
/// to its own node; answers (claim id, generation) in batch order.
async fn await_claim_pushes(
    scale: &Scale,
    nodes: &[ConnectedNode],
    batch: &[(usize, u64, u64)],
) -> BenchResult<Vec<(String, u64)>> {
    let deadline = Instant::now() + ACK_DEADLINE;
    loop {
        let mut claims = Vec::with_capacity(batch.len());
        for &(index, _, mount) in batch {
            let node = scale.node_of(index);
            let pushed = nodes[node].volumes.received().into_iter().find(|request| {
                request["claim"]["serviceId"] == json!(service_name(index))
                    && request["claim"]["generation"] == json!(mount)
            });
            let Some(request) = pushed else { break };
            if request["claim"]["nodeId"] != json!(node_name(node)) {
                return Err(format!("the claim of svc-{index} names another node: {request}"));
            }
            let id = request["claim"]["id"].as_str().ok_or_else(|| format!("a pushed claim without id: {request}"))?;
            claims.push((id.to_owned(), mount));
        }
        if claims.len() == batch.len() {
            return Ok(claims);
        }
        if Instant::now() > deadline {
            return Err(format!(
                "{} of {} new claim generations pushed within {ACK_DEADLINE:?}",
                claims.len(),
                batch.len()
            ));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits until the server logged `claim answer recorded` for each (claim id, generation) of
/// `claims`; answers when each was first stored, in microseconds since the Unix epoch.
async fn await_stored_answers(server: &Serving, claims: &[(String, u64)]) -> BenchResult<Vec<u64>> {
    let deadline = Instant::now() + ACK_DEADLINE;
    loop {
        let logged = logged_claim_answers(&server.log())?;
        let stored: Vec<u64> = claims
            .iter()
            .map_while(|(id, generation)| {
                logged.iter().find(|(claim, logged, _)| claim == id && logged == generation).map(|(.., at)| *at)
            })
            .collect();
        if stored.len() == claims.len() {
            return Ok(stored);
        }
        if Instant::now() > deadline {
            return Err(format!("{} of {} claim answers stored within {ACK_DEADLINE:?}", stored.len(), claims.len()));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until `listRuntimeLocalStorageClaims` shows a claim for each volume service of the first
/// `size`, at the generation the bench gave it, bound, with no fault and no decision, and answered
/// by its node `accepted` (or `replay`) / `ready`; anything else fails.
async fn check_claims(admin: &Admin, services: &Mutex<Services>, size: usize) -> BenchResult<()> {
    let expected: Vec<(usize, u64)> = {
        let services = services.lock().unwrap();
        (0..size).filter(|&index| has_volume(index)).map(|index| (index, services.mounts[index])).collect()
    };
    let deadline = Instant::now() + ACK_DEADLINE;
    loop {
        let listed = admin.call(name::LIST_RUNTIME_LOCAL_STORAGE_CLAIMS, json!({ "clusterId": CLUSTER })).await?;
        let listings = listed["claims"].as_array().ok_or_else(|| format!("no claims listed: {listed}"))?;
        if listings.len() != expected.len() {
            return Err(format!("{} claims listed for {} volume services", listings.len(), expected.len()));
        }
        let mut answered = 0;
        for listing in listings {
            let claim = &listing["claim"];
            let index = claim["serviceId"]
                .as_str()
                .and_then(|service| service.strip_prefix("svc-"))
                .and_then(|index| index.parse::<usize>().ok())
                .filter(|&index| index < size && has_volume(index))
                .ok_or_else(|| format!("a claim of an unknown service: {listing}"))?;
            let generation = expected[index / VOLUME_EVERY].1;
            if listing["faults"]["count"] != json!(0) || !listing["resolution"].is_null() {
                return Err(format!("the claim of svc-{index} has a fault or a decision: {listing}"));
            }
            if claim["generation"] != json!(generation) || claim["lifecycle"] != "bound" {
                return Err(format!("the claim of svc-{index} is not bound generation {generation}: {listing}"));
            }
            let node = &listing["node"];
            if node.is_null() || node["generation"].as_u64().is_some_and(|answered| answered < generation) {
                continue;
            }
            if node["generation"] != json!(generation)
                || !(node["status"] == "accepted" || node["status"] == "replay")
                || node["state"] != "ready"
            {
                return Err(format!("the claim of svc-{index} was answered otherwise: {listing}"));
            }
            answered += 1;
        }
        if answered == expected.len() {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!("{answered} of {} claims answered within {ACK_DEADLINE:?}", expected.len()));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Fails on a fault the server counted or logged: a claim push that faulted or went unanswered,
/// a projection issue that failed, a store error, a full-pass correction, an `ERROR` line in its
/// log.
fn check_faults(metrics: &str, log: &str) -> BenchResult<()> {
    let counted = [
        ("cloudly_storage_claim_pushes_total", Some("outcome=\"fault\"")),
        ("cloudly_storage_claim_pushes_total", Some("outcome=\"no-answer\"")),
        ("cloudly_projections_issued_total", Some("outcome=\"failed\"")),
        ("cloudly_store_errors_total", None),
        (CORRECTIONS, None),
    ];
    for (name, label) in counted {
        for (labels, value) in metric_samples(metrics, name) {
            if value > 0.0 && label.is_none_or(|label| labels.contains(label)) {
                return Err(format!("the server counted {name}{labels} {value}"));
            }
        }
    }
    if let Some(line) = log.lines().find(|line| line.contains("\"level\":\"ERROR\"")) {
        return Err(format!("the server logged an error: {line}"));
    }
    Ok(())
}

/// Fails when an agent's socket was closed.
async fn check_connected(nodes: &[ConnectedNode]) -> BenchResult<()> {
    for (index, node) in nodes.iter().enumerate() {
        if let Some(reason) = node.agent.closed(Duration::ZERO).await {
            return Err(format!("the socket of {}'s agent was closed: {reason}", node_name(index)));
        }
    }
    Ok(())
}

/// The full pass at a checkpoint.
enum FullPass {
    /// The server does not expose [`FULL_PASSES`].
    NotExposed,
    /// No whole pass ran within [`FULL_PASS_DEADLINE`] after the checkpoint's writes.
    NotRun,
    /// The duration of the last pass (one that started after the checkpoint's writes) and the
    /// corrections counted so far (any fails the run, so 0).
    Ran { seconds: f64, corrections: f64 },
}

/// Waits up to `appear_within` for the server to show [`FULL_PASSES`] (a counter may show only once
/// it counted), then for a whole full pass after the writes so far (the counter advanced by two)
/// and reads it; fails on any correction.
async fn await_full_pass(base_url: &str, appear_within: Duration) -> BenchResult<FullPass> {
    let appear_by = Instant::now() + appear_within;
    let before = loop {
        if let Some(passes) = metric_sum(&scrape_metrics(base_url).await?, FULL_PASSES) {
            break passes;
        }
        if Instant::now() >= appear_by {
            return Ok(FullPass::NotExposed);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let deadline = Instant::now() + FULL_PASS_DEADLINE;
    let (metrics, ran) = loop {
        let metrics = scrape_metrics(base_url).await?;
        if metric_sum(&metrics, FULL_PASSES).unwrap_or(before) >= before + 2.0 {
            break (metrics, true);
        }
        if Instant::now() > deadline {
            break (metrics, false);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let corrections = metric_sum(&metrics, CORRECTIONS).unwrap_or(0.0);
    if corrections > 0.0 {
        let kinds: Vec<String> = metric_samples(&metrics, CORRECTIONS)
            .into_iter()
            .map(|(labels, value)| format!("{labels} {value}"))
            .collect();
        return Err(format!("the full pass corrected {corrections} things: {}", kinds.join(", ")));
    }
    if !ran {
        return Ok(FullPass::NotRun);
    }
    let seconds = metric_sum(&metrics, FULL_PASS_SECONDS)
        .ok_or_else(|| format!("{FULL_PASSES} is exposed but {FULL_PASS_SECONDS} is not"))?;
    Ok(FullPass::Ran { seconds, corrections })
}

// ---------------------------------------------------------------------------------------------
// The fan-out of a plan change.

/// Every connected agent following a plan change.
struct FanOut {
    agents: usize,
    /// The plan put: sent → answered, microseconds.
    put: u64,
    /// Sorted microseconds, plan put sent → the agent holds a projection of the new authority.
    held: Vec<u64>,
    /// `overloaded` answers to the agents' fetches (each retried).
    overloaded: usize,
}

/// `getRuntimeNetworkProjection` knowing `known`; an `overloaded` answer is counted in
/// `overloaded` and retried after its `retryAfterMs`.
async fn fetch_retrying(
    agent: &NodeAgent,
    session: &Value,
    known: &Value,
    overloaded: &mut usize,
) -> BenchResult<Value> {
    loop {
        match agent.call(name::GET_RUNTIME_NETWORK_PROJECTION, json!({ "session": session, "known": known })).await {
            Ok(answer) => return Ok(answer["projection"].clone()),
            Err(error) if error.code() == "overloaded" => {
                *overloaded += 1;
                let retry_after = error.data["retryAfterMs"].as_u64().unwrap_or(100);
                tokio::time::sleep(Duration::from_millis(retry_after)).await;
            }
            Err(error) => return Err(format!("getRuntimeNetworkProjection: {} {}", error.text, error.data)),
        }
    }
}

/// One agent: fetches after each `projection` push until it holds a projection whose protected
/// authority is generation `authority`; answers when (microseconds after `started`) and its
/// `overloaded` answers.
async fn follow_plan_change(
    mut node: ConnectedNode,
    name: String,
    mut known: Value,
    authority: u64,
    started: Arc<tokio::sync::OnceCell<Instant>>,
) -> BenchResult<(u64, usize)> {
    let mut overloaded = 0;
    let deadline = Instant::now() + FAN_OUT_DEADLINE;
    loop {
        let remaining = deadline.saturating_duration_since(Instant::now());
        let Some(push) = node.agent.next_push(remaining).await else {
            return Err(format!(
                "{name} got no projection of authority generation {authority} within {FAN_OUT_DEADLINE:?}"
            ));
        };
        let kinds = push["request"]["kinds"].as_array().cloned().unwrap_or_default();
        if push["method"] != "pushRuntimeChanged" || !kinds.contains(&json!("projection")) {
            continue;
        }
        let projection = fetch_retrying(&node.agent, &node.session, &known, &mut overloaded)
            .await
            .map_err(|error| format!("{name}: {error}"))?;
        if projection.is_null() {
            continue;
        }
        let payload = &projection["payload"];
        known = reference_of(payload);
        if payload["protectedAuthority"]["generation"] == json!(authority) {
            let started = started.get().copied().ok_or("a projection of the new plan before its put was sent")?;
            return Ok((started.elapsed().as_micros() as u64, overloaded));
        }
    }
}

/// Writes plan revision 2 (one more platform endpoint: the protected authority's next generation,
/// so every node's projection changes) and waits until every agent holds it.
async fn fan_out(admin: &Admin, nodes: Vec<ConnectedNode>, authority: &Value) -> BenchResult<FanOut> {
    let next_authority = authority["generation"].as_u64().ok_or("no authority generation")? + 1;
    // Each agent's current projection, then no pending push.
    let known = futures_util::stream::iter(nodes.iter().enumerate())
        .map(|(index, node)| async move {
            let mut overloaded = 0;
            let projection = fetch_retrying(&node.agent, &node.session, &Value::Null, &mut overloaded)
                .await
                .map_err(|error| format!("{}: {error}", node_name(index)))?;
            if projection["payload"]["protectedAuthority"]["generation"] != authority["generation"] {
                return Err(format!(
                    "{} holds another authority before the plan change: {projection}",
                    node_name(index)
                ));
            }
            Ok(reference_of(&projection["payload"]))
        })
        .buffered(SEED_CONCURRENCY)
        .collect::<Vec<BenchResult<Value>>>()
        .await;
    let started = Arc::new(tokio::sync::OnceCell::new());
    let mut tasks = Vec::new();
    let agents = nodes.len();
    for ((index, mut node), known) in nodes.into_iter().enumerate().zip(known) {
        node.agent.drain_pushes();
        tasks.push(tokio::spawn(follow_plan_change(node, node_name(index), known?, next_authority, started.clone())));
    }
    let sent = Instant::now();
    started.set(sent).map_err(|_| "the fan-out started twice")?;
    let written = admin.call(name::PUT_RUNTIME_NETWORK_ADDRESS_PLAN, plan_body(2)).await?;
    let put = sent.elapsed().as_micros() as u64;
    if written["protectedAuthority"]["generation"] != json!(next_authority) {
        return Err(format!("plan revision 2 did not make authority generation {next_authority}: {written}"));
    }
    let (mut held, mut overloaded) = (Vec::with_capacity(agents), 0);
    for task in tasks {
        let (took, retries) = task.await.map_err(|error| format!("a fan-out agent panicked: {error}"))??;
        held.push(took);
        overloaded += retries;
    }
    held.sort_unstable();
    Ok(FanOut { agents, put, held, overloaded })
}

// ---------------------------------------------------------------------------------------------
// The run.

/// What one checkpoint measured.
struct Checkpoint {
    services: usize,
    /// The growth so far (the measures excluded).
    grown: Duration,
    /// Sorted microseconds of the serial revisions.
    put: Vec<u64>,
    designations: Designations,
    fetches: Fetches,
    claims: ClaimBatch,
    full_pass: FullPass,
    peak_rss_mib: Option<f64>,
}

struct Report {
    scale: Scale,
    checkpoints: Vec<Checkpoint>,
    fan_out: FanOut,
    peak_rss_mib: Option<f64>,
}

async fn run(database: &TestDatabase, scratch: &Scratch) -> BenchResult<Report> {
    let scale = Scale::from_environment()?;
    let full_pass_ms = FULL_PASS_MS.to_string();
    let sockets = (scale.agents + 16).max(256).to_string();
    // The serving line, one line per stored claim answer, and every warning and error.
    let log_filter = "warn,cloudly::server=info,cloudly::domain::runners=info";
    let server = start_with(
        &scratch.join("data"),
        &database.url,
        &[
            ("RUST_LOG", log_filter),
            support::bench::ONE_ADDRESS_FOR_A_FLEET,
            ("CLOUDLY_RECONCILE_FULL_PASS_MS", &full_pass_ms),
            // One socket per agent (the default 256 is enough for the default 200).
            ("CLOUDLY_MAX_SOCKETS", &sockets),
        ],
    )
    .serving();
    let pid = server.pid();
    let identity = server.admin_identity();
    let admin = Arc::new(Admin { client: server.client(), identity: identity.clone() });
    let (nodes, authority, mut designation) = build_cluster(&admin, &server.base_url, &scale).await?;
    let nodes = Arc::new(nodes);
    let services = Arc::new(Mutex::new(Services { revisions: Vec::new(), mounts: Vec::new(), cursor: 0 }));

    let mut checkpoints = Vec::new();
    let (mut size, mut grown) = (0, Duration::ZERO);
    for checkpoint in scale.checkpoints() {
        grown += grow(&admin, &scale, &services, size, checkpoint).await?;
        size = checkpoint;
        let put = serial_puts(&admin, &scale, &services).await?;
        let designations =
            designate_while_putting(&server, &identity, &scale, &services, size, &mut designation).await?;
        let fetches = fetch_projections(&nodes, scale.seconds).await?;
        let claims = claims_batch(&server, &identity, &scale, &services, &nodes, size).await?;
        check_claims(&admin, &services, size).await?;
        // A server that showed no full pass at the first checkpoint, after three intervals, has none.
        let appear_within = match checkpoints.first() {
            Some(Checkpoint { full_pass: FullPass::NotExposed, .. }) => Duration::ZERO,
            _ => 3 * Duration::from_millis(FULL_PASS_MS),
        };
        let full_pass = await_full_pass(&server.base_url, appear_within).await?;
        check_faults(&scrape_metrics(&server.base_url).await?, &server.log())?;
        check_connected(&nodes).await?;
        let peak_rss_mib = peak_rss_mib(pid);
        println!(
            "{size} services: grown in {:.1} s, put p50 {:.1} ms, designate p99 {:.1} ms, {:.0} claims/s",
            grown.as_secs_f64(),
            percentile_ms(&put, 50.0),
            percentile_ms(&designations.designate, 99.0),
            claims.per_second(),
        );
        checkpoints.push(Checkpoint {
            services: size,
            grown,
            put,
            designations,
            fetches,
            claims,
            full_pass,
            peak_rss_mib,
        });
    }
    let nodes = Arc::try_unwrap(nodes).map_err(|_| "the agents are still shared after the checkpoints")?;
    let fan_out = fan_out(&admin, nodes, &authority).await?;
    check_faults(&scrape_metrics(&server.base_url).await?, &server.log())?;
    // `VmHWM` is kept lazily by the kernel (a reading may pass a later one): the largest reading.
    let peak_rss_mib = checkpoints
        .iter()
        .filter_map(|checkpoint| checkpoint.peak_rss_mib)
        .chain(peak_rss_mib(pid))
        .max_by(f64::total_cmp);
    server.terminate();
    Ok(Report { scale, checkpoints, fan_out, peak_rss_mib })
}

// ---------------------------------------------------------------------------------------------
// The report.

fn verdict(pass: bool) -> &'static str {
    if pass { "PASS" } else { "MISS" }
}

fn mib(value: Option<f64>) -> String {
    value.map_or_else(|| "–".to_owned(), |mib| format!("{mib:.1}"))
}

fn full_pass_cells(full_pass: &FullPass) -> (String, String) {
    match full_pass {
        FullPass::NotExposed => ("n/a (not exposed)".to_owned(), "n/a".to_owned()),
        FullPass::NotRun => (format!("no pass within {} s", FULL_PASS_DEADLINE.as_secs()), "0".to_owned()),
        FullPass::Ran { seconds, corrections } => (format!("{seconds:.3}"), format!("{corrections:.0}")),
    }
}

/// The targets, each with what was measured and PASS/MISS (`n/a` where the run did not reach the
/// size a target names).
fn targets(report: &Report) -> Vec<(String, String, &'static str)> {
    let at = |size: usize| report.checkpoints.iter().find(|checkpoint| checkpoint.services == size);
    let not_reached = || format!("n/a (grown to {})", report.scale.services);
    let mut rows = Vec::new();
    match (at(100), at(TARGET_SERVICES)) {
        (Some(small), Some(large)) => {
            let (small, large) = (percentile_ms(&small.put, 50.0), percentile_ms(&large.put, 50.0));
            rows.push((
                format!(
                    "put p50 at 10 000 services ≤ {PUT_GROWTH_TARGET}× its value at 100 and < {PUT_P50_TARGET_MS} ms"
                ),
                format!("{large:.2} ms ({:.2}× {small:.2} ms)", large / small),
                verdict(large <= PUT_GROWTH_TARGET * small && large < PUT_P50_TARGET_MS),
            ));
        }
        _ => rows.push(("put p50 at 10 000 services vs 100".to_owned(), not_reached(), "n/a")),
    }
    match at(TARGET_SERVICES) {
        Some(large) => {
            let p99 = percentile_ms(&large.designations.designate, 99.0);
            rows.push((
                format!("designate p99 at 10 000 services while puts run < {DESIGNATE_P99_TARGET_MS} ms"),
                format!("{p99:.2} ms"),
                verdict(p99 < DESIGNATE_P99_TARGET_MS),
            ));
            rows.push((
                format!("grow to 10 000 services serially < {} min", GROW_TARGET.as_secs() / 60),
                format!("{:.1} s", large.grown.as_secs_f64()),
                verdict(large.grown < GROW_TARGET),
            ));
        }
        None => {
            rows.push(("designate p99 at 10 000 services while puts run".to_owned(), not_reached(), "n/a"));
            rows.push(("grow to 10 000 services serially".to_owned(), not_reached(), "n/a"));
        }
    }
    if let Some(last) = report.checkpoints.last() {
        let per_second = last.claims.per_second();
        rows.push((
            format!("claims pushed + acked ≥ {CLAIMS_TARGET:.0}/s at 200 nodes"),
            format!("{per_second:.1}/s at {} nodes with agents, {} services", report.scale.agents, last.services),
            if report.scale.agents == 200 { verdict(per_second >= CLAIMS_TARGET) } else { "n/a" },
        ));
    }
    rows.push((
        format!("server peak RSS < {RSS_TARGET_MIB:.0} MiB"),
        format!("{} MiB", mib(report.peak_rss_mib)),
        verdict(report.peak_rss_mib.is_some_and(|peak| peak < RSS_TARGET_MIB)),
    ));
    let fan_out = &report.fan_out;
    let last_held = fan_out.held.last().copied().unwrap_or(0);
    rows.push((
        format!("fan-out: every agent holds the new generation < {} s, no `overloaded`", FAN_OUT_TARGET.as_secs()),
        format!("{:.1} ms, {} overloaded", last_held as f64 / 1000.0, fan_out.overloaded),
        verdict(Duration::from_micros(last_held) < FAN_OUT_TARGET && fan_out.overloaded == 0),
    ));
    rows
}

fn render(report: &Report, uptime_before: &str) -> String {
    let scale = &report.scale;
    let mut text = format!(
        "{}. One cluster: {} services (`CLOUDLY_BENCH_SERVICES`), {} nodes (`CLOUDLY_BENCH_NODES`), {} of them \
         with a connected agent (`CLOUDLY_BENCH_AGENTS`), full pass every {FULL_PASS_MS} ms. Puts at a \
         checkpoint are new revisions of existing services; designations run while a second client streams \
         such puts; claims are one new claim generation per agent node (at most), put by {CLAIM_CLIENTS} \
         clients; projection fetches are full (`known: null`) by {FETCH_CLIENTS} clients for {} s.\n\n\
         | services | grown in s (cumulative) | put p50 ms | put p99 ms | designate p50 ms | designate p99 ms | \
         streamed put p50 ms | claims | claims pushed + acked/s | put → ack stored p99 ms |\n\
         | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n",
        results_heading("cluster_scale", uptime_before),
        scale.services,
        scale.nodes,
        scale.agents,
        scale.seconds,
    );
    for checkpoint in &report.checkpoints {
        text.push_str(&format!(
            "| {} | {:.1} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {} | {:.1} | {:.1} |\n",
            checkpoint.services,
            checkpoint.grown.as_secs_f64(),
            percentile_ms(&checkpoint.put, 50.0),
            percentile_ms(&checkpoint.put, 99.0),
            percentile_ms(&checkpoint.designations.designate, 50.0),
            percentile_ms(&checkpoint.designations.designate, 99.0),
            percentile_ms(&checkpoint.designations.streamed, 50.0),
            checkpoint.claims.claims,
            checkpoint.claims.per_second(),
            percentile_ms(&checkpoint.claims.put_to_stored, 99.0),
        ));
    }
    text.push_str(
        "\n| services | projection fetch ops/s | fetch p50 ms | fetch p99 ms | full pass s | corrections | \
         peak RSS MiB so far |\n| ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n",
    );
    for checkpoint in &report.checkpoints {
        let (seconds, corrections) = full_pass_cells(&checkpoint.full_pass);
        text.push_str(&format!(
            "| {} | {:.0} | {:.2} | {:.2} | {seconds} | {corrections} | {} |\n",
            checkpoint.services,
            checkpoint.fetches.per_second(),
            percentile_ms(&checkpoint.fetches.took, 50.0),
            percentile_ms(&checkpoint.fetches.took, 99.0),
            mib(checkpoint.peak_rss_mib),
        ));
    }
    let fan_out = &report.fan_out;
    text.push_str(&format!(
        "\nFan-out of plan revision 2 (one more platform endpoint: every node's projection changes) to {} \
         connected agents: plan put {:.1} ms; the new generation held by p50 {:.1} ms, p99 {:.1} ms, the last \
         at {:.1} ms after the put was sent; {} `overloaded` answers. Server peak RSS over the run: {} MiB.\n\n\
         | target | measured | verdict |\n| --- | --- | --- |\n",
        fan_out.agents,
        fan_out.put as f64 / 1000.0,
        percentile_ms(&fan_out.held, 50.0),
        percentile_ms(&fan_out.held, 99.0),
        percentile_ms(&fan_out.held, 100.0),
        fan_out.overloaded,
        mib(report.peak_rss_mib),
    ));
    for (target, measured, verdict) in targets(report) {
        text.push_str(&format!("| {target} | {measured} | {verdict} |\n"));
    }
    text
}

fn main() -> ExitCode {
    section_main("cluster_scale", (BEGIN_MARKER, END_MARKER, HEADING), run, render)
}
