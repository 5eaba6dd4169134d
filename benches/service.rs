//! Service benchmark (not a timed test): the controller against raw PostgreSQL, in one run, on
//! one machine, on one PostgreSQL server.
//!
//! * (a) raw single-row compare-and-swap transactions issued directly with sqlx (`BEGIN`;
//!   `SELECT … FOR UPDATE`; `UPDATE … WHERE generation = expected`; `COMMIT`), one row per
//!   client, and the same with every client on ONE row (contended);
//! * (b) `designateClusterIngress` over HTTP: each client rotates its own cluster's designation,
//!   every request expecting the previous answer's reference, so every answer is an acceptance;
//! * (c) raw single-row select by primary key;
//! * (d) `getClusterIngressDesignation` over HTTP.
//!
//! It prints throughput and p50/p99 for each phase, the ratios b/a and d/c against their targets
//! (b/a ≥ 0.4, d/c ≥ 0.5 at 16 concurrent clients) and the server's peak RSS under that load
//! (target < 100 MiB). The server runs as a separate `cloudly serve` process so its memory is its
//! own. A missed target is reported, not fatal; a refused or failed request fails the run.
//!
//! The phases are interleaved: each phase's measured time is split into [`ROUNDS`] slices, and
//! every round runs one slice of each phase in the order above. Whatever drifts during a run —
//! a checkpoint, autovacuum after the designation writes, another program — then falls on every
//! phase alike instead of on whichever phase it happened to meet.
//!
//! Run with `cargo bench --bench service`. PostgreSQL: `CLOUDLY_TEST_PG_ADMIN_URL` (default
//! `postgres://postgres@127.0.0.1:5432/postgres`); a throwaway database is created and dropped.
//! `CLOUDLY_BENCH_SECONDS` overrides the measured seconds per phase (default 5).

use cloudly::api::methods::name;
use cloudly::client::{CallError, Client};
use cloudly::store::POSTGRES_POOL_SIZE;
use serde_json::{Value, json};
use sqlx::Connection as _;
use sqlx::postgres::{PgPool, PgPoolOptions};
use std::collections::VecDeque;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::AsyncBufReadExt as _;

/// Concurrent clients in every phase.
const CLIENTS: usize = 16;
/// Unmeasured time before a phase's first slice.
const WARM_UP: Duration = Duration::from_secs(1);
/// Unmeasured time before each later slice of a phase.
const SLICE_WARM_UP: Duration = Duration::from_millis(200);
/// Slices per phase (the rounds of the interleaving).
const ROUNDS: u32 = 5;
/// Measured time of every phase unless `CLOUDLY_BENCH_SECONDS` says otherwise.
const DEFAULT_MEASURE_SECONDS: u64 = 5;
/// A bound on the operations of one client in one phase, whatever the clock says.
const MAX_OPS_PER_CLIENT: u64 = 1_000_000;
/// How long past its planned end a phase may run before the run is abandoned.
const PHASE_OVERRUN: Duration = Duration::from_secs(60);
/// Replicas of each seeded `ingress` spec: every background reconcile after a designation issues
/// one assignment generation per replica.
const REPLICAS: u64 = 2;
/// Targets of the issue.
const TARGET_DESIGNATE_RATIO: f64 = 0.4;
const TARGET_GET_RATIO: f64 = 0.5;
const TARGET_RSS_MIB: f64 = 100.0;

type BenchResult<T> = Result<T, String>;

fn fail<E: std::fmt::Display>(context: &str) -> impl FnOnce(E) -> String + '_ {
    move |error| format!("{context}: {error}")
}

// ---------------------------------------------------------------------------------------------
// The throwaway database.

fn pg_admin_url() -> String {
    std::env::var("CLOUDLY_TEST_PG_ADMIN_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_owned())
}

struct BenchDatabase {
    admin_url: String,
    name: String,
    url: String,
}

impl BenchDatabase {
    async fn create() -> BenchResult<BenchDatabase> {
        let admin_url = pg_admin_url();
        let name = format!("cloudly_bench_{}", &uuid::Uuid::new_v4().simple().to_string()[..20]);
        let mut connection = sqlx::PgConnection::connect(&admin_url).await.map_err(fail(
            "PostgreSQL does not answer at CLOUDLY_TEST_PG_ADMIN_URL (start it, e.g. scripts/test.sh does)",
        ))?;
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .execute(&mut connection)
            .await
            .map_err(fail("create the bench database"))?;
        let _ = connection.close().await;
        let base = admin_url.rsplit_once('/').map_or(admin_url.as_str(), |(base, _)| base).to_owned();
        Ok(BenchDatabase { url: format!("{base}/{name}"), admin_url, name })
    }

    async fn drop_now(self) {
        match sqlx::PgConnection::connect(&self.admin_url).await {
            Ok(mut connection) => {
                if let Err(error) =
                    sqlx::query(sqlx::AssertSqlSafe(format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name)))
                        .execute(&mut connection)
                        .await
                {
                    eprintln!("warning: could not drop the bench database {}: {error}", self.name);
                }
            }
            Err(error) => eprintln!("warning: could not drop the bench database {}: {error}", self.name),
        }
    }
}

/// A temporary directory removed when dropped (also while unwinding).
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

// ---------------------------------------------------------------------------------------------
// The server process.

/// `cloudly` built by this cargo invocation, else `target/release/cloudly` (built if missing).
fn server_binary() -> BenchResult<PathBuf> {
    if let Some(path) = option_env!("CARGO_BIN_EXE_cloudly").map(PathBuf::from)
        && path.exists()
    {
        return Ok(path);
    }
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| manifest.join("target"), PathBuf::from);
    let target = if target.is_absolute() { target } else { manifest.join(target) };
    let path = target.join("release").join("cloudly");
    if !path.exists() {
        println!("{} is missing: running `cargo build --release --bin cloudly` first", path.display());
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let status = std::process::Command::new(cargo)
            .args(["build", "--release", "--bin", "cloudly"])
            .current_dir(manifest)
            .status()
            .map_err(fail("run cargo build"))?;
        if !status.success() || !path.exists() {
            return Err(format!("cargo build --release --bin cloudly failed ({status})"));
        }
    }
    Ok(path)
}

struct ServerProcess {
    child: tokio::process::Child,
    pid: u32,
    base_url: String,
    log_tail: Arc<Mutex<VecDeque<String>>>,
}

const LOG_TAIL_LINES: usize = 40;

impl ServerProcess {
    async fn start(binary: &Path, data_dir: &Path, database_url: &str) -> BenchResult<ServerProcess> {
        let mut command = tokio::process::Command::new(binary);
        for (name, _) in std::env::vars_os() {
            if name.to_string_lossy().starts_with("CLOUDLY_") {
                command.env_remove(name);
            }
        }
        let mut child = command
            .args(["serve", "--listen", "127.0.0.1:0", "--log-format", "json"])
            .env("CLOUDLY_DATA_DIR", data_dir)
            .env("CLOUDLY_DATABASE_URL", database_url)
            // Every simulated node and client connects from 127.0.0.1; in a fleet each has an
            // address of its own, so the per-address cap would measure this harness, not the server.
            .env("CLOUDLY_MAX_CONNECTIONS_PER_PEER", "1000000")
            // warn for everything, but the serving line (info) names the bound address.
            .env("RUST_LOG", "warn,cloudly::server=info")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(fail("start cloudly serve"))?;
        let pid = child.id().ok_or("cloudly serve exited at once")?;
        let stderr = child.stderr.take().ok_or("no stderr pipe")?;
        let log_tail = Arc::new(Mutex::new(VecDeque::new()));
        let (address_sender, address) = tokio::sync::oneshot::channel::<String>();
        let sink = log_tail.clone();
        // Drains stderr for the server's whole life, so a chatty server never blocks on the pipe.
        tokio::spawn(async move {
            let mut address_sender = Some(address_sender);
            let mut lines = tokio::io::BufReader::new(stderr).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                if let Ok(event) = serde_json::from_str::<Value>(&line)
                    && event["message"] == "cloudly serving"
                    && let Some(sender) = address_sender.take()
                {
                    let _ = sender.send(event["address"].as_str().unwrap_or_default().to_owned());
                }
                let mut tail = sink.lock().expect("log lock");
                if tail.len() == LOG_TAIL_LINES {
                    tail.pop_front();
                }
                tail.push_back(line);
            }
        });
        let mut server = ServerProcess { child, pid, base_url: String::new(), log_tail };
        match tokio::time::timeout(Duration::from_secs(60), address).await {
            Ok(Ok(address)) if !address.is_empty() => {
                server.base_url = format!("http://{address}");
                Ok(server)
            }
            _ => Err(format!("cloudly serve printed no serving line; its log:\n{}", server.log())),
        }
    }

    fn log(&self) -> String {
        self.log_tail.lock().expect("log lock").iter().cloned().collect::<Vec<_>>().join("\n")
    }

    /// `VmHWM` and `VmRSS` of the server, in KiB.
    fn memory_kib(&self) -> BenchResult<(u64, u64)> {
        let status =
            std::fs::read_to_string(format!("/proc/{}/status", self.pid)).map_err(fail("read /proc/<pid>/status"))?;
        let field = |name: &str| {
            status
                .lines()
                .find_map(|line| line.strip_prefix(name))
                .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
                .ok_or_else(|| format!("no {name} in /proc/{}/status", self.pid))
        };
        Ok((field("VmHWM:")?, field("VmRSS:")?))
    }

    /// SIGTERM, then up to 30 s for the drain; SIGKILL after that.
    async fn stop(mut self) -> BenchResult<()> {
        let sent = std::process::Command::new("kill").args(["-TERM", &self.pid.to_string()]).status();
        if !matches!(sent, Ok(status) if status.success()) {
            let _ = self.child.start_kill();
            return Err("could not send SIGTERM to cloudly serve; killed it".into());
        }
        match tokio::time::timeout(Duration::from_secs(30), self.child.wait()).await {
            Ok(Ok(status)) if status.success() => Ok(()),
            Ok(Ok(status)) => {
                Err(format!("cloudly serve exited with {status} after SIGTERM; its log:\n{}", self.log()))
            }
            Ok(Err(error)) => Err(format!("waiting for cloudly serve: {error}")),
            Err(_) => {
                let _ = self.child.start_kill();
                Err("cloudly serve did not stop within 30 s of SIGTERM; killed it".into())
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// CPU accounting, for the diagnosis: where the machine's CPU goes during a phase.

fn clock_ticks_per_second() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|output| String::from_utf8(output.stdout).ok())
        .and_then(|text| text.trim().parse::<f64>().ok())
        .unwrap_or(100.0)
}

/// utime + stime of a process, in ticks.
fn process_ticks(pid: &str) -> u64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return 0 };
    let Some((_, rest)) = stat.rsplit_once(')') else { return 0 };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After the command: state is field 3, utime field 14, stime field 15.
    let parse = |index: usize| fields.get(index).and_then(|field| field.parse::<u64>().ok()).unwrap_or(0);
    parse(11) + parse(12)
}

/// Busy ticks of the whole machine (every CPU, not idle, not iowait).
fn machine_busy_ticks() -> u64 {
    let Ok(stat) = std::fs::read_to_string("/proc/stat") else { return 0 };
    let Some(line) = stat.lines().next() else { return 0 };
    let values: Vec<u64> = line.split_whitespace().skip(1).filter_map(|field| field.parse().ok()).collect();
    // user nice system idle iowait irq softirq steal guest guest_nice; guest time is in user.
    let total: u64 = values.iter().take(8).sum();
    total - values.get(3).copied().unwrap_or(0) - values.get(4).copied().unwrap_or(0)
}

#[derive(Clone, Copy)]
struct CpuSnapshot {
    machine: u64,
    bench: u64,
    server: u64,
    postgres: u64,
}

fn cpu_snapshot(server_pid: &str, postgres_pids: &[String]) -> CpuSnapshot {
    CpuSnapshot {
        machine: machine_busy_ticks(),
        bench: process_ticks("self"),
        server: process_ticks(server_pid),
        postgres: postgres_pids.iter().map(|pid| process_ticks(pid)).sum(),
    }
}

/// CPU seconds spent in the window by: the bench process, the server process, the PostgreSQL
/// processes serving the bench database (plus PostgreSQL's WAL writer), and everything else on the
/// machine (other PostgreSQL work, other programs).
#[derive(Clone, Copy)]
struct CpuSpent {
    bench: f64,
    server: f64,
    postgres: f64,
    other: f64,
}

fn cpu_spent(before: CpuSnapshot, after: CpuSnapshot, ticks: f64) -> CpuSpent {
    let bench = after.bench.saturating_sub(before.bench) as f64 / ticks;
    let server = after.server.saturating_sub(before.server) as f64 / ticks;
    let postgres = after.postgres.saturating_sub(before.postgres) as f64 / ticks;
    let machine = after.machine.saturating_sub(before.machine) as f64 / ticks;
    CpuSpent { bench, server, postgres, other: (machine - bench - server - postgres).max(0.0) }
}

/// The PostgreSQL backends connected to the bench database, and the WAL writer, on this machine.
async fn postgres_pids(pool: &PgPool) -> Vec<String> {
    let pids: Vec<i32> = sqlx::query_scalar(
        "SELECT pid FROM pg_stat_activity \
         WHERE datname = current_database() OR backend_type = 'walwriter'",
    )
    .fetch_all(pool)
    .await
    .unwrap_or_default();
    pids.into_iter().map(|pid| pid.to_string()).filter(|pid| Path::new(&format!("/proc/{pid}")).exists()).collect()
}

// ---------------------------------------------------------------------------------------------
// Phases.

/// One client of a phase: one operation per call, an error for anything but success.
trait Worker: Send + 'static {
    fn operate(&mut self) -> impl Future<Output = BenchResult<()>> + Send;
}

struct ClientRun {
    latencies_us: Vec<u32>,
    last_finish: Instant,
}

/// Runs one client until `stop_at`; hands the worker back, so the next slice continues its state.
async fn drive<W: Worker>(mut worker: W, measure_from: Instant, stop_at: Instant) -> BenchResult<(W, ClientRun)> {
    let mut latencies_us = Vec::with_capacity(16 * 1024);
    let mut last_finish = Instant::now();
    for _ in 0..MAX_OPS_PER_CLIENT {
        let started = Instant::now();
        if started >= stop_at {
            break;
        }
        worker.operate().await?;
        last_finish = Instant::now();
        if started >= measure_from {
            latencies_us.push(u32::try_from((last_finish - started).as_micros()).unwrap_or(u32::MAX));
        }
    }
    Ok((worker, ClientRun { latencies_us, last_finish }))
}

struct PhaseResult {
    label: &'static str,
    operations: usize,
    throughput: f64,
    p50_ms: f64,
    p99_ms: f64,
    max_ms: f64,
    /// CPU milliseconds per operation: bench process, server process, PostgreSQL (bench database).
    cpu_ms_per_op: (f64, f64, f64),
    /// Fraction of the machine's CPUs used by others (not this bench, its server or its database).
    other_busy: f64,
    /// Busy fraction of the machine's CPUs over the measured window.
    machine_busy: f64,
}

fn percentile_ms(sorted: &[u32], percent: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((percent / 100.0) * sorted.len() as f64).ceil() as usize;
    f64::from(sorted[rank.clamp(1, sorted.len()) - 1]) / 1000.0
}

struct PhaseContext {
    server_pid: String,
    ticks: f64,
    cpus: f64,
}

/// One phase's measurements, added up over its slices.
struct PhaseTotals {
    label: &'static str,
    latencies_us: Vec<u32>,
    window_seconds: f64,
    spent: CpuSpent,
}

impl PhaseTotals {
    fn new(label: &'static str) -> Self {
        PhaseTotals {
            label,
            latencies_us: Vec::new(),
            window_seconds: 0.0,
            spent: CpuSpent { bench: 0.0, server: 0.0, postgres: 0.0, other: 0.0 },
        }
    }

    fn result(mut self, context: &PhaseContext) -> BenchResult<PhaseResult> {
        let label = self.label;
        self.latencies_us.sort_unstable();
        let operations = self.latencies_us.len();
        if operations == 0 {
            return Err(format!("{label}: no operation completed in the measured window"));
        }
        let spent = &self.spent;
        let per_op = |seconds: f64| seconds * 1000.0 / operations as f64;
        let window = self.window_seconds;
        Ok(PhaseResult {
            label,
            operations,
            throughput: operations as f64 / window,
            p50_ms: percentile_ms(&self.latencies_us, 50.0),
            p99_ms: percentile_ms(&self.latencies_us, 99.0),
            max_ms: f64::from(*self.latencies_us.last().expect("not empty")) / 1000.0,
            cpu_ms_per_op: (per_op(spent.bench), per_op(spent.server), per_op(spent.postgres)),
            other_busy: spent.other / (window * context.cpus),
            machine_busy: (spent.bench + spent.server + spent.postgres + spent.other) / (window * context.cpus),
        })
    }
}

/// Runs one slice of a phase — `warm_up` unmeasured, then `measure` measured — adds it to
/// `totals`, and hands the workers back for the next slice.
async fn run_slice<W: Worker>(
    context: &PhaseContext,
    pool: &PgPool,
    warm_up: Duration,
    measure: Duration,
    workers: Vec<W>,
    totals: &mut PhaseTotals,
) -> BenchResult<Vec<W>> {
    let label = totals.label;
    let start = Instant::now();
    let measure_from = start + warm_up;
    let stop_at = measure_from + measure;
    let tasks: Vec<_> = workers.into_iter().map(|worker| tokio::spawn(drive(worker, measure_from, stop_at))).collect();
    tokio::time::sleep_until(measure_from.into()).await;
    let postgres = postgres_pids(pool).await;
    let cpu_before = cpu_snapshot(&context.server_pid, &postgres);
    let joined = tokio::time::timeout_at((stop_at + PHASE_OVERRUN).into(), async {
        let mut runs = Vec::with_capacity(tasks.len());
        for task in tasks {
            runs.push(task.await.map_err(fail("a client task panicked"))?);
        }
        Ok::<_, String>(runs)
    })
    .await
    .map_err(|_| format!("{label}: clients still running {PHASE_OVERRUN:?} after the phase's end"))??;
    let cpu_after = cpu_snapshot(&context.server_pid, &postgres);
    let mut workers = Vec::with_capacity(joined.len());
    let mut last_finish = stop_at;
    for run in joined {
        let (worker, run) = run.map_err(|error| format!("{label}: {error}"))?;
        totals.latencies_us.extend_from_slice(&run.latencies_us);
        last_finish = last_finish.max(run.last_finish);
        workers.push(worker);
    }
    totals.window_seconds += (last_finish - measure_from).as_secs_f64();
    let spent = cpu_spent(cpu_before, cpu_after, context.ticks);
    totals.spent.bench += spent.bench;
    totals.spent.server += spent.server;
    totals.spent.postgres += spent.postgres;
    totals.spent.other += spent.other;
    Ok(workers)
}

// (a) raw compare-and-swap.
struct RawCas {
    pool: PgPool,
    row: String,
}

impl Worker for RawCas {
    async fn operate(&mut self) -> BenchResult<()> {
        let mut transaction = self.pool.begin().await.map_err(fail("BEGIN"))?;
        let (generation, _digest): (i64, String) =
            sqlx::query_as("SELECT generation, digest FROM bench_cas WHERE id = $1 FOR UPDATE")
                .bind(&self.row)
                .fetch_one(&mut *transaction)
                .await
                .map_err(fail("SELECT … FOR UPDATE"))?;
        let next = generation + 1;
        let swapped =
            sqlx::query("UPDATE bench_cas SET generation = $2, digest = $3 WHERE id = $1 AND generation = $4")
                .bind(&self.row)
                .bind(next)
                .bind(format!("sha256:{next:064x}"))
                .bind(generation)
                .execute(&mut *transaction)
                .await
                .map_err(fail("UPDATE … WHERE generation = expected"))?;
        if swapped.rows_affected() != 1 {
            return Err(format!("raw CAS on {} moved {} rows", self.row, swapped.rows_affected()));
        }
        transaction.commit().await.map_err(fail("COMMIT"))
    }
}

// (c) raw select.
struct RawSelect {
    pool: PgPool,
    row: String,
}

impl Worker for RawSelect {
    async fn operate(&mut self) -> BenchResult<()> {
        let (id, _generation, _digest): (String, i64, String) =
            sqlx::query_as("SELECT id, generation, digest FROM bench_cas WHERE id = $1")
                .bind(&self.row)
                .fetch_one(&self.pool)
                .await
                .map_err(fail("SELECT by primary key"))?;
        if id != self.row {
            return Err(format!("selected {id}, asked for {}", self.row));
        }
        Ok(())
    }
}

fn call_error(method: &str, error: CallError) -> String {
    match error {
        CallError::Typed(typed) => format!("{method} refused: {} {} {}", typed.code(), typed.text, typed.data),
        other => format!("{method} failed: {other}"),
    }
}

// (b) designateClusterIngress: a chain of accepted rotations of one cluster per client.
struct Designate {
    client: Client,
    identity: Value,
    client_index: usize,
    cluster: String,
    expected: Value,
    generation: u64,
}

impl Worker for Designate {
    async fn operate(&mut self) -> BenchResult<()> {
        let request = json!({
            "identity": self.identity,
            "designation": {
                "mutationId": format!("bench-{}-{}", self.client_index, self.generation + 1),
                "clusterId": self.cluster, "ingressServiceId": "ingress",
                "currentRuntime": { "id": self.cluster, "phase": "pallet", "generation": 3 },
                "expectedSpecRevision": 1, "expectedDesignation": self.expected,
            },
        });
        let answer = self
            .client
            .call(name::DESIGNATE_CLUSTER_INGRESS, request)
            .await
            .map_err(|error| call_error(name::DESIGNATE_CLUSTER_INGRESS, error))?;
        let designation = &answer["designation"];
        if answer["replayed"] != json!(false) || designation["generation"] != json!(self.generation + 1) {
            return Err(format!(
                "designateClusterIngress: not a fresh acceptance of generation {}: {answer}",
                self.generation + 1
            ));
        }
        self.generation += 1;
        self.expected = json!({ "id": designation["id"], "generation": designation["generation"], "digest": designation["digest"] });
        Ok(())
    }
}

// (d) getClusterIngressDesignation.
struct GetDesignation {
    client: Client,
    identity: Value,
    cluster: String,
}

impl Worker for GetDesignation {
    async fn operate(&mut self) -> BenchResult<()> {
        let answer = self
            .client
            .call(
                name::GET_CLUSTER_INGRESS_DESIGNATION,
                json!({ "identity": self.identity, "clusterId": self.cluster }),
            )
            .await
            .map_err(|error| call_error(name::GET_CLUSTER_INGRESS_DESIGNATION, error))?;
        if answer["designation"]["clusterId"] != json!(self.cluster) {
            return Err(format!("getClusterIngressDesignation answered another designation: {answer}"));
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// The run.

fn cluster_name(index: usize) -> String {
    format!("c{index}")
}

async fn admin_call(client: &Client, identity: &Value, method: &str, mut request: Value) -> BenchResult<Value> {
    request["identity"] = identity.clone();
    client.call(method, request).await.map_err(|error| call_error(method, error))
}

/// Organization `org`; per client a Pallet cluster `c<i>` (runtime generation 3, a relay origin)
/// with nodes `node-1`, `node-2` and service `ingress` at spec revision 1.
async fn seed(client: &Client, identity: &Value) -> BenchResult<()> {
    admin_call(client, identity, name::PUT_ORGANIZATION, json!({ "organization": { "id": "org", "name": "Org" } }))
        .await?;
    for index in 0..CLIENTS {
        let cluster = cluster_name(index);
        admin_call(
            client,
            identity,
            name::PUT_CLUSTER,
            json!({ "cluster": {
                "id": cluster, "organizationId": "org", "runtime": { "phase": "pallet", "generation": 3 },
                "relayOrigin": "https://relay.example.net:8443", "fleetCutoverIngressDesignation": null,
            }, "expectedRevision": null }),
        )
        .await?;
        for node in ["node-1", "node-2"] {
            admin_call(
                client,
                identity,
                name::PUT_CLUSTER_NODE,
                json!({ "clusterId": cluster, "node": { "id": node, "runtimeNamespace": "ns-main", "hostAddresses": [] }, "rotateCredential": false }),
            )
            .await?;
        }
        let spec = admin_call(
            client,
            identity,
            name::PUT_SERVICE_RUNTIME_SPEC,
            json!({ "spec": {
                "clusterId": cluster, "serviceId": "ingress", "organizationId": "org",
                "image": "registry.example/ingress:1.4.2", "replicas": REPLICAS,
                "placement": { "nodeIds": ["node-1", "node-2"] },
                "ports": [{ "protocol": "tcp", "port": 443 }],
                "environment": [{ "name": "LOG_LEVEL", "value": "info" }],
                "volumes": [],
            }, "expectedRevision": null }),
        )
        .await?;
        if spec["spec"]["revision"] != json!(1) {
            return Err(format!("seeded spec of {cluster} is not revision 1: {spec}"));
        }
    }
    Ok(())
}

struct Report {
    binary: PathBuf,
    measured: Measured,
    measure: Duration,
}

async fn run(database_url: String) -> BenchResult<Report> {
    let binary = server_binary()?;
    let data_dir = TempDir(std::env::temp_dir().join(format!("cloudly-bench-{}", uuid::Uuid::new_v4().simple())));
    std::fs::create_dir_all(&data_dir.0).map_err(fail("create the data directory"))?;
    let measure = Duration::from_secs(
        std::env::var("CLOUDLY_BENCH_SECONDS")
            .ok()
            .and_then(|text| text.parse().ok())
            .unwrap_or(DEFAULT_MEASURE_SECONDS)
            .clamp(1, 120),
    );

    // The server first: it migrates the bench database.
    let server = ServerProcess::start(&binary, &data_dir.0, &database_url).await?;
    let outcome = measure_all(&server, &data_dir.0, &database_url, measure).await;
    let stopped = server.stop().await;
    let measured = outcome?;
    stopped?;
    Ok(Report { binary, measured, measure })
}

struct Measured {
    phases: Vec<PhaseResult>,
    rss_idle_kib: u64,
    rss_after_designate_kib: u64,
    hwm_kib: u64,
    rss_end_kib: u64,
    /// Designations accepted and assignment generations issued (by the background reconciles
    /// they start) from the start of the first (b) slice to the end of the last, warm-ups included.
    reissue: (u64, u64),
}

/// Designation generations and assignment generations stored so far.
async fn stored_generations(pool: &PgPool) -> BenchResult<(u64, u64)> {
    let (designations, assignments): (i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM ingress_designations), (SELECT count(*) FROM runtime_assignments)",
    )
    .fetch_one(pool)
    .await
    .map_err(fail("count the stored generations"))?;
    Ok((designations.unsigned_abs(), assignments.unsigned_abs()))
}

async fn measure_all(
    server: &ServerProcess,
    data_dir: &Path,
    database_url: &str,
    measure: Duration,
) -> BenchResult<Measured> {
    let identity: Value = serde_json::from_str(
        &std::fs::read_to_string(data_dir.join("admin-identity.json")).map_err(fail("read the bootstrap identity"))?,
    )
    .map_err(fail("parse the bootstrap identity"))?;
    let client = Client::new(&server.base_url);
    seed(&client, &identity).await?;
    let (_, rss_idle_kib) = server.memory_kib()?;

    // The raw side: a pool sized like the server's, on the same database.
    let pool = PgPoolOptions::new()
        .max_connections(POSTGRES_POOL_SIZE)
        .min_connections(POSTGRES_POOL_SIZE)
        .acquire_timeout(Duration::from_secs(30))
        .connect(database_url)
        .await
        .map_err(fail("connect the raw pool"))?;
    sqlx::query("CREATE TABLE bench_cas (id TEXT PRIMARY KEY, generation BIGINT NOT NULL, digest TEXT NOT NULL)")
        .execute(&pool)
        .await
        .map_err(fail("create bench_cas"))?;
    for row in (0..CLIENTS).map(|index| format!("r{index}")).chain(["shared".to_owned()]) {
        sqlx::query("INSERT INTO bench_cas (id, generation, digest) VALUES ($1, 0, $2)")
            .bind(&row)
            .bind(format!("sha256:{:064x}", 0))
            .execute(&pool)
            .await
            .map_err(fail("seed bench_cas"))?;
    }

    let context = PhaseContext {
        server_pid: server.pid.to_string(),
        ticks: clock_ticks_per_second(),
        cpus: std::thread::available_parallelism().map_or(1.0, |cpus| cpus.get() as f64),
    };
    let raw_cas = |one_row: bool| -> Vec<RawCas> {
        (0..CLIENTS)
            .map(|index| RawCas {
                pool: pool.clone(),
                row: if one_row { "shared".to_owned() } else { format!("r{index}") },
            })
            .collect()
    };
    let mut cas = raw_cas(false);
    let mut cas_one_row = raw_cas(true);
    let mut designators: Vec<Designate> = (0..CLIENTS)
        .map(|index| Designate {
            client: client.clone(),
            identity: identity.clone(),
            client_index: index,
            cluster: cluster_name(index),
            expected: Value::Null,
            generation: 0,
        })
        .collect();
    let mut selects: Vec<RawSelect> =
        (0..CLIENTS).map(|index| RawSelect { pool: pool.clone(), row: format!("r{index}") }).collect();
    let mut getters: Vec<GetDesignation> = (0..CLIENTS)
        .map(|index| GetDesignation {
            client: client.clone(),
            identity: identity.clone(),
            cluster: cluster_name(index),
        })
        .collect();
    let mut totals = [
        PhaseTotals::new("(a) raw CAS, own row"),
        PhaseTotals::new("(a') raw CAS, one row (contended)"),
        PhaseTotals::new("(b) designateClusterIngress"),
        PhaseTotals::new("(c) raw select by key"),
        PhaseTotals::new("(d) getClusterIngressDesignation"),
    ];
    let slice = measure / ROUNDS;
    let mut rss_after_designate_kib = 0;
    let mut reissue = (0, 0);
    for round in 0..ROUNDS {
        let warm_up = if round == 0 { WARM_UP } else { SLICE_WARM_UP };
        let [a, a_one_row, b, c, d] = &mut totals;
        cas = run_slice(&context, &pool, warm_up, slice, cas, a).await?;
        cas_one_row = run_slice(&context, &pool, warm_up, slice, cas_one_row, a_one_row).await?;
        // Every later phase of the round reads the designations this one wrote.
        let before = stored_generations(&pool).await?;
        designators = run_slice(&context, &pool, warm_up, slice, designators, b).await?;
        let after = stored_generations(&pool).await?;
        reissue = (reissue.0 + after.0 - before.0, reissue.1 + after.1 - before.1);
        rss_after_designate_kib = server.memory_kib()?.1;
        selects = run_slice(&context, &pool, warm_up, slice, selects, c).await?;
        getters = run_slice(&context, &pool, warm_up, slice, getters, d).await?;
    }
    let phases = totals.into_iter().map(|totals| totals.result(&context)).collect::<BenchResult<Vec<_>>>()?;
    let (hwm_kib, rss_end_kib) = server.memory_kib()?;
    pool.close().await;
    Ok(Measured { phases, rss_idle_kib, rss_after_designate_kib, hwm_kib, rss_end_kib, reissue })
}

fn verdict(pass: bool) -> &'static str {
    if pass { "PASS" } else { "MISS" }
}

fn print_report(report: &Report) {
    let measured = &report.measured;
    let mib = |kib: u64| kib as f64 / 1024.0;
    println!();
    println!(
        "cloudly service benchmark: {CLIENTS} concurrent clients, {:?} measured per phase in {ROUNDS} interleaved \
         slices (warm-up {WARM_UP:?} before a phase's first slice, {SLICE_WARM_UP:?} before the others)",
        report.measure
    );
    println!(
        "server: {} (separate process), PostgreSQL pools: {POSTGRES_POOL_SIZE} connections each",
        report.binary.display()
    );
    println!();
    println!(
        "{:<38} {:>8} {:>8} {:>8} {:>8} {:>8}   {:>23} {:>5} {:>6}",
        "phase", "ops", "ops/s", "p50 ms", "p99 ms", "max ms", "CPU ms/op bench/srv/pg", "busy", "others"
    );
    for phase in &measured.phases {
        let (bench, server, rest) = phase.cpu_ms_per_op;
        println!(
            "{:<38} {:>8} {:>8.0} {:>8.2} {:>8.2} {:>8.2}   {:>6.3} / {:>5.3} / {:>5.3} {:>4.0}% {:>5.0}%",
            phase.label,
            phase.operations,
            phase.throughput,
            phase.p50_ms,
            phase.p99_ms,
            phase.max_ms,
            bench,
            server,
            rest,
            phase.machine_busy * 100.0,
            phase.other_busy * 100.0
        );
    }
    let throughput = |prefix: &str| {
        measured.phases.iter().find(|phase| phase.label.starts_with(prefix)).map_or(f64::NAN, |phase| phase.throughput)
    };
    let designate_ratio = throughput("(b)") / throughput("(a)");
    let get_ratio = throughput("(d)") / throughput("(c)");
    // The same ratios from CPU time per operation (bench + server + PostgreSQL): what the
    // throughput ratio would be on a machine where this workload alone is CPU-bound, and far less
    // sensitive to other programs than the throughput.
    let cpu_cost = |prefix: &str| {
        measured.phases.iter().find(|phase| phase.label.starts_with(prefix)).map_or(f64::NAN, |phase| {
            let (bench, server, postgres) = phase.cpu_ms_per_op;
            bench + server + postgres
        })
    };
    let hwm = mib(measured.hwm_kib);
    println!();
    println!(
        "b/a (designate / raw CAS, own row)  = {designate_ratio:.3}   target >= {TARGET_DESIGNATE_RATIO}   {}",
        verdict(designate_ratio >= TARGET_DESIGNATE_RATIO)
    );
    println!(
        "d/c (get / raw select)              = {get_ratio:.3}   target >= {TARGET_GET_RATIO}   {}",
        verdict(get_ratio >= TARGET_GET_RATIO)
    );
    println!(
        "CPU-cost ratios (CPU ms/op of a / b, of c / d): b/a = {:.3}, d/c = {:.3}",
        cpu_cost("(a)") / cpu_cost("(b)"),
        cpu_cost("(c)") / cpu_cost("(d)")
    );
    println!(
        "server peak RSS (VmHWM)             = {hwm:.1} MiB   target < {TARGET_RSS_MIB} MiB   {}",
        verdict(hwm < TARGET_RSS_MIB)
    );
    println!(
        "server RSS: {:.1} MiB after seeding, {:.1} MiB after the last (b) slice, {:.1} MiB at the end",
        mib(measured.rss_idle_kib),
        mib(measured.rss_after_designate_kib),
        mib(measured.rss_end_kib)
    );
    let (designations, generations) = measured.reissue;
    println!(
        "(b) background re-issue: {generations} assignment generations for {designations} designations: about {:.2} \
         reconciles per designation ({REPLICAS} generations each)",
        generations as f64 / REPLICAS as f64 / designations.max(1) as f64
    );
    println!(
        "CPU ms/op: CPU time per operation of the bench process / the server process / the PostgreSQL backends of the"
    );
    println!(
        "bench database and the WAL writer. busy: the machine's CPUs in use; others: the share used by anything else."
    );
    if measured.phases.iter().any(|phase| phase.other_busy > 0.10) {
        println!("WARNING: other programs used more than 10% of the CPUs during a phase; the numbers are disturbed.");
    }
}

fn main() -> ExitCode {
    // `cargo bench` passes `--bench`. `cargo test --all-targets` runs bench targets without it:
    // the benchmark (a release build of the server and half a minute of load) is not a test.
    if !std::env::args().any(|argument| argument == "--bench") {
        println!("service benchmark: run it with `cargo bench --bench service`");
        return ExitCode::SUCCESS;
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: cannot start the runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(async {
        let database = match BenchDatabase::create().await {
            Ok(database) => database,
            Err(error) => {
                eprintln!("error: {error}");
                return ExitCode::FAILURE;
            }
        };
        // A panic inside the run ends its task, not this function: the database is dropped anyway.
        let outcome = tokio::spawn(run(database.url.clone())).await;
        database.drop_now().await;
        match outcome {
            Ok(Ok(report)) => {
                print_report(&report);
                ExitCode::SUCCESS
            }
            Ok(Err(error)) => {
                eprintln!("error: {error}");
                ExitCode::FAILURE
            }
            Err(panic) => {
                eprintln!("error: the benchmark panicked: {panic}");
                ExitCode::FAILURE
            }
        }
    })
}
