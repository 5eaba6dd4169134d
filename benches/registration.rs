//! Registration benchmark (not a timed test): `registerClusterIngress` judged through one relay
//! connection against PostgreSQL, with 200 concurrent ingress registrations, mixed accepted and
//! refused.
//!
//! The world is built over the real wire (an in-process controller on a real socket, PostgreSQL
//! in a throwaway database): a designated ingress service with one replica on each of
//! [`NODES`] nodes, each node's agent on `/typedsocket` with its assignment's bearer resolved
//! and reported `ready`, one connected relay. Every registration goes through that relay's
//! connection token. The mix, by request number: half accepted (a running node, the right
//! bearer), a quarter `bearer-refused`, a quarter `node-mismatch`. Any other answer fails the run.
//!
//! Phases:
//! * **burst**: 200 registrations sent at once, [`BURSTS`] times; latency of each.
//! * **closed loop**: 200 clients, each sending its next registration when the last is answered,
//!   for the measured seconds: the judge's throughput; latency is 200 / throughput by Little's law.
//! * **open loop**: 200 ingresses registering on their own schedules at a fixed total rate —
//!   each once a second (200/s), then half the closed-loop throughput: latency at loads the
//!   controller keeps up with.
//!
//! * **raw floor**: what any implementation pays per registration on this machine — one
//!   single-row read and one durable insert issued directly with sqlx, 200 clients in a closed
//!   loop — so the closed-loop and burst latencies can be read against what PostgreSQL alone gives.
//!
//! The target of the issue (p99 under 20 ms with 200 concurrent ingress registrations) is printed
//! PASS/MISS for the burst and for each open loop; a miss does not fail the run.
//!
//! Run with `cargo bench --bench registration`. PostgreSQL: `CLOUDLY_TEST_PG_ADMIN_URL` (default
//! `postgres://postgres@127.0.0.1:5432/postgres`). `CLOUDLY_BENCH_SECONDS` sets the measured
//! seconds of the loop phases (default 5).

#[path = "../tests/support/mod.rs"]
mod support;

use cloudly::api::methods::name;
use cloudly::client::Client;
use serde_json::{Value, json};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::ingress::{CLUSTER, SERVICE, connect_relay, register, registration, run_ingress_replica};
use support::node_agent::{NodeAgent, node_bearer};
use support::service::{Backend, TestService, designation_request, spec_body};

/// Concurrent registrations.
const CONCURRENCY: usize = 200;
/// Nodes running an ingress replica.
const NODES: usize = 8;
/// Bursts of the burst phase.
const BURSTS: usize = 20;
/// The p99 target of the burst phase.
const TARGET_P99_MS: f64 = 20.0;

type BenchResult<T> = Result<T, String>;

/// What one registration sends and must be answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Case {
    Accepted,
    BearerRefused,
    NodeMismatch,
}

impl Case {
    fn of(number: usize) -> Case {
        match number % 4 {
            0 | 1 => Case::Accepted,
            2 => Case::BearerRefused,
            _ => Case::NodeMismatch,
        }
    }
}

struct World {
    service: TestService,
    _agents: Vec<NodeAgent>,
    bearer: String,
    token: String,
}

impl World {
    fn request(&self, number: usize) -> (Value, Case) {
        let case = Case::of(number);
        let node = format!("node-{}", 1 + number % NODES);
        let request = match case {
            Case::Accepted => registration(&self.bearer, &node),
            Case::BearerRefused => registration("szci_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", &node),
            Case::NodeMismatch => registration(&self.bearer, "node-outside"),
        };
        (request, case)
    }
}

async fn build_world() -> BenchResult<World> {
    let service = TestService::start(Backend::Postgres).await;
    service.seed_cluster(CLUSTER, SERVICE).await;
    let nodes: Vec<String> = (1..=NODES).map(|index| format!("node-{index}")).collect();
    let mut bearers = Vec::new();
    for node in nodes.iter().chain([&"node-outside".to_owned()]) {
        bearers.push(node_bearer(&service, CLUSTER, node).await);
    }
    let mut body = spec_body(CLUSTER, SERVICE);
    body["replicas"] = json!(NODES);
    body["placement"] = json!({ "nodeIds": nodes });
    service.admin_call(name::PUT_SERVICE_RUNTIME_SPEC, json!({ "spec": body, "expectedRevision": 1 })).await;
    service
        .admin_call(name::DESIGNATE_CLUSTER_INGRESS, designation_request(CLUSTER, SERVICE, "m1", 2, Value::Null))
        .await;
    let mut agents = Vec::new();
    let mut bearer = String::new();
    for (node, node_bearer) in nodes.iter().zip(&bearers) {
        let agent = NodeAgent::connect(&service).await;
        let session = agent.open(CLUSTER, node, node_bearer).await;
        let assignments = agent
            .call(name::GET_RUNTIME_ASSIGNMENTS, json!({ "session": session }))
            .await
            .map_err(|error| error.text)?;
        let assignment = assignments["assignments"]
            .as_array()
            .and_then(|list| {
                list.iter().map(|signed| &signed["payload"]).find(|payload| payload["serviceId"] == SERVICE)
            })
            .cloned()
            .ok_or_else(|| format!("{node} runs no ingress replica"))?;
        bearer = run_ingress_replica(&agent, &session, &assignment).await?;
        agents.push(agent);
    }
    let token = connect_relay(&service, &service.client, CLUSTER, "relay-1").await;
    Ok(World { service, _agents: agents, bearer, token })
}

/// Sends registration `number` and checks its answer; the latency in microseconds.
async fn one(client: &Client, world: &World, number: usize) -> BenchResult<u64> {
    let (request, case) = world.request(number);
    let started = Instant::now();
    let answer = register(client, request, Some(&world.token)).await;
    let elapsed = started.elapsed().as_micros() as u64;
    let outcome = match &answer {
        Ok(response) if response["accepted"] == json!(true) => Case::Accepted,
        Err(error) if error.data["reason"] == "bearer-refused" => Case::BearerRefused,
        Err(error) if error.data["reason"] == "node-mismatch" => Case::NodeMismatch,
        Ok(response) => return Err(format!("unexpected answer {response}")),
        Err(error) => return Err(format!("unexpected refusal {} {}", error.text, error.data)),
    };
    if outcome != case {
        return Err(format!("registration {number}: expected {case:?}, answered {outcome:?}"));
    }
    Ok(elapsed)
}

struct Phase {
    name: &'static str,
    latencies: Vec<u64>,
    elapsed: Duration,
}

impl Phase {
    fn percentile_ms(&self, percent: f64) -> f64 {
        let mut sorted = self.latencies.clone();
        sorted.sort_unstable();
        if sorted.is_empty() {
            return 0.0;
        }
        let index = ((percent / 100.0) * (sorted.len() - 1) as f64).round() as usize;
        sorted[index] as f64 / 1000.0
    }

    fn per_second(&self) -> f64 {
        self.latencies.len() as f64 / self.elapsed.as_secs_f64()
    }

    fn print(&self) {
        println!(
            "{:<12} {:>7} registrations {:>8.0}/s  p50 {:>7.2} ms  p99 {:>7.2} ms  max {:>7.2} ms",
            self.name,
            self.latencies.len(),
            self.per_second(),
            self.percentile_ms(50.0),
            self.percentile_ms(99.0),
            self.percentile_ms(100.0),
        );
    }
}

async fn burst_phase(world: &Arc<World>) -> BenchResult<Phase> {
    let mut latencies = Vec::new();
    let mut busy = Duration::ZERO;
    for burst in 0..BURSTS {
        let started = Instant::now();
        let tasks: Vec<_> = (0..CONCURRENCY)
            .map(|index| {
                let world = world.clone();
                let client = world.service.client.clone();
                tokio::spawn(async move { one(&client, &world, burst * CONCURRENCY + index).await })
            })
            .collect();
        for task in tasks {
            latencies.push(task.await.map_err(|error| error.to_string())??);
        }
        busy += started.elapsed();
    }
    Ok(Phase { name: "burst", latencies, elapsed: busy })
}

async fn loop_phase(world: &Arc<World>, seconds: u64, interval: Option<Duration>) -> BenchResult<Phase> {
    let started = Instant::now();
    let stop_at = started + Duration::from_secs(seconds);
    let tasks: Vec<_> = (0..CONCURRENCY)
        .map(|index| {
            let world = world.clone();
            let client = world.service.client.clone();
            tokio::spawn(async move {
                let mut latencies = Vec::new();
                // Spread the open-loop schedules evenly over one interval.
                let offset = interval.map_or(Duration::ZERO, |interval| interval * index as u32 / CONCURRENCY as u32);
                let mut next = Instant::now() + offset;
                let mut number = index;
                while Instant::now() < stop_at {
                    if let Some(interval) = interval {
                        tokio::time::sleep_until(next.into()).await;
                        next += interval;
                    }
                    latencies.push(one(&client, &world, number).await?);
                    number += CONCURRENCY;
                }
                Ok::<_, String>(latencies)
            })
        })
        .collect();
    let mut latencies = Vec::new();
    for task in tasks {
        latencies.extend(task.await.map_err(|error| error.to_string())??);
    }
    let name = if interval.is_some() { "open loop" } else { "closed loop" };
    Ok(Phase { name, latencies, elapsed: started.elapsed() })
}

/// The floor any implementation pays on this machine: per registration one single-row read and
/// one durable single-row insert (the record the spec requires), issued directly with sqlx on a
/// pool the size of the server's, by 200 concurrent clients in a closed loop.
async fn raw_floor_phase(url: &str, seconds: u64) -> BenchResult<Phase> {
    use sqlx::postgres::PgPoolOptions;
    let pool = PgPoolOptions::new()
        .max_connections(cloudly::store::POSTGRES_POOL_SIZE)
        .connect(url)
        .await
        .map_err(|error| format!("raw pool: {error}"))?;
    sqlx::query("CREATE TABLE bench_raw_records (sequence BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY, cluster_id TEXT NOT NULL, payload TEXT NOT NULL)")
        .execute(&pool)
        .await
        .map_err(|error| format!("raw table: {error}"))?;
    let started = Instant::now();
    let stop_at = started + Duration::from_secs(seconds);
    let tasks: Vec<_> = (0..CONCURRENCY)
        .map(|_| {
            let pool = pool.clone();
            tokio::spawn(async move {
                let mut latencies = Vec::new();
                while Instant::now() < stop_at {
                    let begun = Instant::now();
                    let record: Option<String> = sqlx::query_scalar("SELECT record FROM clusters WHERE id = $1")
                        .bind(CLUSTER)
                        .fetch_optional(&pool)
                        .await
                        .map_err(|error| error.to_string())?;
                    sqlx::query("INSERT INTO bench_raw_records (cluster_id, payload) VALUES ($1, $2)")
                        .bind(CLUSTER)
                        .bind(record.unwrap_or_default())
                        .execute(&pool)
                        .await
                        .map_err(|error| error.to_string())?;
                    latencies.push(begun.elapsed().as_micros() as u64);
                }
                Ok::<_, String>(latencies)
            })
        })
        .collect();
    let mut latencies = Vec::new();
    for task in tasks {
        latencies.extend(task.await.map_err(|error| error.to_string())??);
    }
    let elapsed = started.elapsed();
    pool.close().await;
    Ok(Phase { name: "raw floor", latencies, elapsed })
}

async fn run() -> BenchResult<()> {
    let seconds: u64 = std::env::var("CLOUDLY_BENCH_SECONDS").ok().and_then(|text| text.parse().ok()).unwrap_or(5);
    let world = Arc::new(build_world().await?);
    // Warm the connection pools and code paths.
    for number in 0..CONCURRENCY {
        one(&world.service.client, &world, number).await?;
    }
    println!(
        "registerClusterIngress through one relay, PostgreSQL, {CONCURRENCY} concurrent, {NODES} nodes running the ingress; \
         mix: 1/2 accepted, 1/4 bearer-refused, 1/4 node-mismatch"
    );
    let burst = burst_phase(&world).await?;
    burst.print();
    let closed = loop_phase(&world, seconds, None).await?;
    closed.print();
    // Open loops: every ingress once a second (200/s in all), then at half the closed-loop throughput.
    let mut open_p99 = Vec::new();
    for rate in [CONCURRENCY as f64, (closed.per_second() / 2.0).max(1.0)] {
        let interval = Duration::from_secs_f64(CONCURRENCY as f64 / rate);
        let open = loop_phase(&world, seconds, Some(interval)).await?;
        open.print();
        println!(
            "             offered {rate:.0} registrations/s ({CONCURRENCY} ingresses, each every {:.0} ms)",
            interval.as_secs_f64() * 1000.0
        );
        open_p99.push((rate, open.percentile_ms(99.0)));
    }
    let floor = raw_floor_phase(&world.service.database.url, seconds).await?;
    floor.print();
    println!("             raw sqlx, no controller: one single-row read + one durable insert per operation");
    let verdict = |p99: f64| if p99 < TARGET_P99_MS { "PASS" } else { "MISS" };
    let p99 = burst.percentile_ms(99.0);
    println!("target p99 < {TARGET_P99_MS} ms with {CONCURRENCY} concurrent ingresses:");
    println!("  all {CONCURRENCY} registering at once (burst):     p99 {p99:>7.2} ms {}", verdict(p99));
    for (rate, p99) in open_p99 {
        println!("  registering at {rate:>5.0}/s in all (open loop): p99 {p99:>7.2} ms {}", verdict(p99));
    }
    println!(
        "  for reference, 200 in flight of the raw floor:  p99 {:>7.2} ms {}",
        floor.percentile_ms(99.0),
        verdict(floor.percentile_ms(99.0))
    );
    let recorded = world
        .service
        .admin_call(name::LIST_CLUSTER_INGRESS_REGISTRATIONS, json!({ "clusterId": CLUSTER, "limit": 1 }))
        .await;
    if recorded["registrations"].as_array().is_none_or(Vec::is_empty) {
        return Err("no registration was recorded".into());
    }
    match Arc::try_unwrap(world) {
        Ok(world) => world.service.stop().await,
        Err(_) => return Err("the world is still shared".into()),
    }
    Ok(())
}

fn main() -> ExitCode {
    // `cargo test --all-targets` builds benches and runs them with `--bench` absent: only
    // `cargo bench` runs this one.
    if !std::env::args().any(|argument| argument == "--bench") {
        println!("registration benchmark: run it with `cargo bench --bench registration`");
        return ExitCode::SUCCESS;
    }
    // The server logs as in production (JSON lines at info), into a sink: formatting is paid for.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new("info,sqlx=warn"))
        .json()
        .with_writer(std::io::sink)
        .try_init();
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("a tokio runtime");
    match runtime.block_on(run()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("registration benchmark failed: {error}");
            ExitCode::FAILURE
        }
    }
}
