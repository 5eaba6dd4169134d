//! Helpers of the report benchmarks (`benches/load.rs`, `benches/claims.rs`): percentiles of
//! latencies, pgbench on the bench's own database, the machine's load and facts, and the
//! rewrite of one marked section of `docs/benchmarks.md`.

use super::database::{Backend, TestDatabase};
use super::process::Scratch;
use cloudly::client::Client;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

/// A bench step's outcome: any refused or failed request ends the run with its message.
pub type BenchResult<T> = Result<T, String>;

/// An administrator's client: every call carries the bootstrap identity.
pub struct Admin {
    pub client: Client,
    pub identity: Value,
}

impl Admin {
    /// Calls `method` with `request` and the identity; an error answer is the call's failure.
    pub async fn call(&self, method: &str, mut request: Value) -> BenchResult<Value> {
        request["identity"] = self.identity.clone();
        self.client.call(method, request).await.map_err(|error| format!("{method}: {error:?}"))
    }
}

/// `putCluster` of a new cluster `cluster` of organization `org` (pallet generation 3).
pub fn cluster_body(cluster: &str) -> Value {
    json!({ "cluster": {
        "id": cluster, "organizationId": "org", "runtime": { "phase": "pallet", "generation": 3 },
        "relayOrigin": "https://relay.example.net:8443", "fleetCutoverIngressDesignation": null,
    }, "expectedRevision": null })
}

/// `putClusterNode` of `node` in `cluster` (namespace `ns-main`); `rotate` asks for a new bearer.
pub fn node_body(cluster: &str, node: &str, rotate: bool) -> Value {
    json!({ "clusterId": cluster, "node": { "id": node, "runtimeNamespace": "ns-main", "hostAddresses": [] },
            "rotateCredential": rotate })
}

/// The `percent` percentile (nearest rank) of `sorted_micros`, in milliseconds.
pub fn percentile_ms(sorted_micros: &[u64], percent: f64) -> f64 {
    if sorted_micros.is_empty() {
        return 0.0;
    }
    let rank = ((percent / 100.0) * sorted_micros.len() as f64).ceil() as usize;
    sorted_micros[rank.clamp(1, sorted_micros.len()) - 1] as f64 / 1000.0
}

/// The pgbench table: one row per client (`:client_id`, up to 64 clients).
pub const PGBENCH_TABLE: &str =
    "CREATE TABLE bench_cas (id integer PRIMARY KEY, generation bigint NOT NULL, digest text NOT NULL);
INSERT INTO bench_cas SELECT id, 0, md5(id::text) FROM generate_series(0, 63) AS id;";
/// The floor of a durable write: a single-statement compare-and-swap, a guarded one-row update
/// in autocommit.
pub const PGBENCH_CAS: &str = "UPDATE bench_cas SET generation = generation + 1, digest = md5(generation::text) WHERE id = :client_id AND generation >= 0;\n";

/// What one pgbench run measured.
#[derive(Clone, Debug)]
pub struct PgbenchRun {
    /// Transactions processed.
    pub transactions: usize,
    /// The seconds it ran.
    pub seconds: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
}

impl PgbenchRun {
    pub fn per_second(&self) -> f64 {
        self.transactions as f64 / self.seconds
    }
}

/// Runs `script` with `pgbench -n -M prepared` at `clients` clients (`-j min(clients, 2)`) for
/// `seconds` against `database_url`, in a directory of its own below `scratch` named after
/// `name`; latencies come from pgbench's per-transaction log.
pub fn pgbench(
    database_url: &str,
    scratch: &Path,
    name: &str,
    script: &str,
    clients: usize,
    seconds: u64,
) -> BenchResult<PgbenchRun> {
    let dir = scratch.join(format!("pgbench-{name}-{clients}"));
    std::fs::create_dir_all(&dir).map_err(|error| format!("pgbench dir: {error}"))?;
    let script_path = dir.join("script.sql");
    std::fs::write(&script_path, script).map_err(|error| format!("pgbench script: {error}"))?;
    let output = Command::new("pgbench")
        .current_dir(&dir)
        .args(["-n", "-M", "prepared", "-l", "--log-prefix", "tx"])
        .args(["-c", &clients.to_string(), "-j", &clients.min(2).to_string()])
        .args(["-T", &seconds.to_string(), "-f"])
        .arg(&script_path)
        .arg(database_url)
        .output()
        .map_err(|error| format!("pgbench cannot run (is it installed?): {error}"))?;
    if !output.status.success() {
        return Err(format!("pgbench failed: {}", String::from_utf8_lossy(&output.stderr)));
    }
    let stdout = String::from_utf8_lossy(&output.stdout);
    let transactions = stdout
        .lines()
        .find_map(|line| line.strip_prefix("number of transactions actually processed: "))
        .and_then(|rest| rest.split(['/', ' ']).next()?.parse::<usize>().ok())
        .ok_or_else(|| format!("pgbench printed no transaction count:\n{stdout}"))?;
    // Per-transaction logs: `client transaction latency_us script epoch epoch_us`.
    let mut latencies = Vec::new();
    for entry in std::fs::read_dir(&dir).map_err(|error| format!("pgbench logs: {error}"))? {
        let path = entry.map_err(|error| format!("pgbench logs: {error}"))?.path();
        if path.file_name().and_then(|name| name.to_str()).is_some_and(|name| name.starts_with("tx")) {
            let text = std::fs::read_to_string(&path).map_err(|error| format!("pgbench log: {error}"))?;
            latencies.extend(text.lines().filter_map(|line| line.split_whitespace().nth(2)?.parse::<u64>().ok()));
        }
    }
    latencies.sort_unstable();
    Ok(PgbenchRun {
        transactions,
        seconds: seconds as f64,
        p50_ms: percentile_ms(&latencies, 50.0),
        p99_ms: percentile_ms(&latencies, 99.0),
    })
}

/// Runs `statements` (one or more, `;`-separated) on the database at `url`.
pub async fn database_statements(url: &str, statements: &'static str) -> BenchResult<()> {
    use sqlx::{Connection as _, Executor as _};
    let mut connection = sqlx::PgConnection::connect(url).await.map_err(|error| format!("connect: {error}"))?;
    connection.execute(statements).await.map_err(|error| format!("bench statements: {error}"))?;
    connection.close().await.ok();
    Ok(())
}

/// The trimmed standard output of a command that succeeded, else `unknown`.
pub fn command_line(program: &str, args: &[&str]) -> String {
    Command::new(program)
        .args(args)
        .output()
        .ok()
        .filter(|output| output.status.success())
        .map(|output| String::from_utf8_lossy(&output.stdout).trim().to_owned())
        .unwrap_or_else(|| "unknown".to_owned())
}

/// The three load averages of `/proc/loadavg`.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|text| text.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".to_owned())
}

/// `(commit, " (uncommitted changes)" or "")` of the checkout the bench runs in.
pub fn commit_and_state() -> (String, &'static str) {
    let commit = command_line("git", &["rev-parse", "--short", "HEAD"]);
    let dirty = if command_line("git", &["status", "--porcelain"]).is_empty() { "" } else { " (uncommitted changes)" };
    (commit, dirty)
}

/// Replaces the text between `begin` and `end` of `docs/benchmarks.md` with `section`; when the
/// markers are missing, appends `heading` (a `## …` line) and the marked section.
pub fn write_section(begin: &str, end: &str, heading: &str, section: &str) -> BenchResult<PathBuf> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("docs").join("benchmarks.md");
    let document = std::fs::read_to_string(&path).map_err(|error| format!("read {}: {error}", path.display()))?;
    let block = format!("{begin}\n{section}{end}");
    let updated = match (document.find(begin), document.find(end)) {
        (Some(at_begin), Some(at_end)) if at_begin < at_end => {
            format!("{}{block}{}", &document[..at_begin], &document[at_end + end.len()..])
        }
        _ => format!("{}\n{heading}\n\n{block}\n", document.trim_end()),
    };
    std::fs::write(&path, updated).map_err(|error| format!("write {}: {error}", path.display()))?;
    Ok(path)
}

/// Resets the kernel's peak-RSS mark of `pid` (`clear_refs` value 5), so a phase reads its own peak.
pub fn reset_peak_rss(pid: u32) {
    let _ = std::fs::write(format!("/proc/{pid}/clear_refs"), "5");
}

/// `VmHWM` of `pid` in MiB.
pub fn peak_rss_mib(pid: u32) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|line| line.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

/// The `main` of the report bench `name`: started without `--bench` (as `cargo test --benches`
/// runs bench targets) it only says how to run it. Otherwise it creates a PostgreSQL
/// [`TestDatabase`] and a scratch directory, awaits `run` on them, drops the database, and prints
/// the section `render` makes of the report and hands it to `write`; an error of any step fails.
pub fn report_main<Report>(
    name: &str,
    run: impl AsyncFnOnce(&TestDatabase, &Scratch) -> BenchResult<Report>,
    render: impl FnOnce(&Report) -> String,
    write: impl FnOnce(&str) -> BenchResult<PathBuf>,
) -> ExitCode {
    let scratch_name = format!("cloudly-{name}");
    measure_main(
        name,
        async move || {
            let database = TestDatabase::create(Backend::Postgres).await;
            let scratch = Scratch::new(&scratch_name);
            let outcome = run(&database, &scratch).await;
            database.drop_now().await;
            Ok(render(&outcome?))
        },
        write,
    )
}

/// The `main` of a report bench that sets up its own store: without `--bench` it only says how to
/// run it; otherwise it awaits `measure` on a multi-threaded runtime, prints the section it
/// answers and hands it to `write`; an error of any step fails.
pub fn measure_main(
    name: &str,
    measure: impl AsyncFnOnce() -> BenchResult<String>,
    write: impl FnOnce(&str) -> BenchResult<PathBuf>,
) -> ExitCode {
    if !std::env::args().any(|argument| argument == "--bench") {
        println!("{name} report: run it with `cargo bench --bench {name}`");
        return ExitCode::SUCCESS;
    }
    let outcome = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|error| format!("cannot start the runtime: {error}"))
        .and_then(|runtime| runtime.block_on(measure()))
        .and_then(|section| {
            println!("{section}");
            write(&section)
        });
    match outcome {
        Ok(path) => {
            println!("wrote {}", path.display());
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::FAILURE
        }
    }
}
