//! Helpers of the report benchmarks (`benches/load.rs`, `benches/claims.rs`,
//! `benches/cluster_scale.rs`): seeding over the wire, node agents with open sessions, percentiles
//! of latencies, pgbench on the bench's own database, the server's log and `/metrics`, the
//! machine's load and facts, and the rewrite of one marked section of `docs/benchmarks.md`.

use super::database::{Backend, TestDatabase};
use super::node_agent::{NodeAgent, NodeVolumes};
use super::process::Scratch;
use cloudly::api::methods::name;
use cloudly::api::wire;
use cloudly::client::Client;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

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

/// The setting of a benchmark's `cloudly serve`: every simulated node and client connects from
/// 127.0.0.1, where a fleet's each have an address of their own, so the per-address connection
/// cap would measure this harness, not the server.
pub const ONE_ADDRESS_FOR_A_FLEET: (&str, &str) = ("CLOUDLY_MAX_CONNECTIONS_PER_PEER", "1000000");

/// Requests in flight while a bench seeds its world ([`seed_all`], connecting nodes).
pub const SEED_CONCURRENCY: usize = 16;

/// Sends `requests` (method, request) with [`SEED_CONCURRENCY`] in flight; any refusal fails.
pub async fn seed_all(admin: &Arc<Admin>, requests: Vec<(&'static str, Value)>) -> BenchResult<()> {
    let queue = Arc::new(Mutex::new(requests.into_iter()));
    let mut tasks = Vec::new();
    for _ in 0..SEED_CONCURRENCY {
        let (admin, queue) = (admin.clone(), queue.clone());
        tasks.push(tokio::spawn(async move {
            loop {
                let next = queue.lock().unwrap().next();
                let Some((method, request)) = next else { return Ok::<_, String>(()) };
                admin.call(method, request).await?;
            }
        }));
    }
    for task in tasks {
        task.await.map_err(|error| format!("a seeding task panicked: {error}"))??;
    }
    Ok(())
}

/// A node with a connected test agent (kept so its socket stays open), what the agent holds and
/// received, and the node's open session.
pub struct ConnectedNode {
    pub agent: NodeAgent,
    pub volumes: Arc<NodeVolumes>,
    pub session: Value,
}

/// Creates (or updates) `node` of `cluster` with a fresh credential, connects an agent to the
/// controller at `base_url` that answers claim pushes as an honest node does, and opens its session.
pub async fn connect_node(admin: &Admin, base_url: &str, cluster: &str, node: &str) -> BenchResult<ConnectedNode> {
    let created = admin.call("putClusterNode", node_body(cluster, node, true)).await?;
    let bearer = created["bearer"].as_str().ok_or_else(|| format!("putClusterNode {node}: no bearer: {created}"))?;
    let volumes = NodeVolumes::new();
    let agent = NodeAgent::connect_holding(base_url, volumes.clone()).await;
    let opened = agent
        .call(name::OPEN_RUNTIME_SESSION, wire::OpenRuntimeSession { cluster_id: cluster, node_id: node, bearer })
        .await
        .map_err(|error| format!("openRuntimeSession {node}: {} {}", error.text, error.data))?;
    Ok(ConnectedNode { agent, volumes, session: opened["session"].clone() })
}

/// [`connect_node`] for each of `nodes` of `cluster`, [`SEED_CONCURRENCY`] at a time; answers them
/// in the order of `nodes`.
pub async fn connect_nodes(
    admin: &Arc<Admin>,
    base_url: &str,
    cluster: &str,
    nodes: impl IntoIterator<Item = String>,
) -> BenchResult<Vec<ConnectedNode>> {
    use futures_util::StreamExt as _;
    let connected = futures_util::stream::iter(nodes)
        .map(|node| {
            let (admin, base_url, cluster) = (admin.clone(), base_url.to_owned(), cluster.to_owned());
            async move { connect_node(&admin, &base_url, &cluster, &node).await }
        })
        .buffered(SEED_CONCURRENCY)
        .collect::<Vec<_>>()
        .await;
    connected.into_iter().collect()
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

/// The pgbench tables: one row per client (`:client_id`, up to 64 clients), and a log the
/// 3-statement transaction appends to.
pub const PGBENCH_TABLE: &str =
    "CREATE TABLE bench_cas (id integer PRIMARY KEY, generation bigint NOT NULL, digest text NOT NULL);
INSERT INTO bench_cas SELECT id, 0, md5(id::text) FROM generate_series(0, 63) AS id;
CREATE TABLE bench_log (id bigserial PRIMARY KEY, client integer NOT NULL, generation bigint NOT NULL, digest text NOT NULL);";
/// The floor of a durable write: a single-statement compare-and-swap, a guarded one-row update
/// in autocommit.
pub const PGBENCH_CAS: &str = "UPDATE bench_cas SET generation = generation + 1, digest = md5(generation::text) WHERE id = :client_id AND generation >= 0;\n";

/// The floor of a transactional write: lock the row, update it, append to a log, in one
/// transaction (what a guarded write with an audit record costs PostgreSQL at least).
pub const PGBENCH_TRANSACTION: &str = "BEGIN;
SELECT generation FROM bench_cas WHERE id = :client_id FOR UPDATE;
UPDATE bench_cas SET generation = generation + 1, digest = md5(generation::text) WHERE id = :client_id;
INSERT INTO bench_log (client, generation, digest) VALUES (:client_id, 1, md5(:client_id::text));
END;
";

/// A single-row select by primary key of the pgbench table.
pub const PGBENCH_SELECT: &str = "SELECT generation, digest FROM bench_cas WHERE id = :client_id;\n";

/// CPU seconds spent so far: by the server process, by PostgreSQL (every `postgres` process,
/// and the backends its postmaster has reaped: connections closed since it started) and by this
/// process (its own threads, and the children it has waited for: pgbench).
#[derive(Clone, Copy, Debug, Default)]
pub struct CpuSample {
    pub server: f64,
    pub postgres: f64,
    pub client: f64,
}

impl CpuSample {
    /// Reads the counters of `/proc` now. PostgreSQL must run on this machine (its processes are
    /// found by name); a server that is gone counts zero.
    pub fn now(server_pid: u32) -> CpuSample {
        let ticks = clock_ticks_per_second();
        let seconds = |ticks_used: u64| ticks_used as f64 / ticks;
        let server = ProcStat::read(&format!("/proc/{server_pid}/stat")).map_or(0, |stat| stat.own);
        let client = ProcStat::read("/proc/self/stat").map_or(0, |stat| stat.own + stat.children);
        let mut postgres = 0;
        let processes: Vec<(u32, ProcStat)> = std::fs::read_dir("/proc")
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|entry| {
                let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
                Some((pid, ProcStat::read(&format!("/proc/{pid}/stat"))?))
            })
            .filter(|(_, stat)| stat.name == "postgres")
            .collect();
        for (_, stat) in &processes {
            postgres += stat.own;
            // The postmaster (a postgres process whose parent is not one) holds its reaped children.
            if !processes.iter().any(|(pid, _)| *pid == stat.parent) {
                postgres += stat.children;
            }
        }
        CpuSample { server: seconds(server), postgres: seconds(postgres), client: seconds(client) }
    }

    /// CPU milliseconds per operation spent between `self` and `later`.
    pub fn per_operation(&self, later: &CpuSample, operations: usize) -> CpuSample {
        let per = |before: f64, after: f64| (after - before) * 1000.0 / operations.max(1) as f64;
        CpuSample {
            server: per(self.server, later.server),
            postgres: per(self.postgres, later.postgres),
            client: per(self.client, later.client),
        }
    }
}

/// The fields of `/proc/<pid>/stat` the CPU meter reads, in clock ticks.
struct ProcStat {
    name: String,
    parent: u32,
    /// utime + stime.
    own: u64,
    /// cutime + cstime: the children waited for.
    children: u64,
}

impl ProcStat {
    fn read(path: &str) -> Option<ProcStat> {
        let text = std::fs::read_to_string(path).ok()?;
        // `pid (comm) state ppid …`: comm may hold spaces and parentheses, so split at the last `)`.
        let (head, rest) = text.rsplit_once(')')?;
        let name = head.split_once('(')?.1.to_owned();
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let number = |index: usize| fields.get(index).and_then(|field| field.parse::<u64>().ok());
        Some(ProcStat {
            name,
            parent: number(1)? as u32,
            own: number(11)? + number(12)?,
            children: number(13)? + number(14)?,
        })
    }
}

fn clock_ticks_per_second() -> f64 {
    static TICKS: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    *TICKS.get_or_init(|| command_line("getconf", &["CLK_TCK"]).parse().unwrap_or(100.0))
}

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

/// Microseconds since the Unix epoch (the server stamps `issuedAt` and `answeredAt` with the same
/// clock, in milliseconds).
pub fn unix_micros(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH).map_or(0, |elapsed| elapsed.as_micros() as u64)
}

/// Microseconds since the Unix epoch of a UTC RFC 3339 time (`2026-12-04T15:18:48.123456Z`).
pub fn rfc3339_micros(text: &str) -> Option<u64> {
    let (date, time) = text.strip_suffix('Z')?.split_once('T')?;
    let mut date = date.splitn(3, '-').map(|part| part.parse::<i64>().ok());
    let (year, month, day) = (date.next()??, date.next()??, date.next()??);
    let (clock, fraction) = time.split_once('.').unwrap_or((time, ""));
    let mut clock = clock.splitn(3, ':').map(|part| part.parse::<i64>().ok());
    let (hour, minute, second) = (clock.next()??, clock.next()??, clock.next()??);
    let digits: String = fraction.chars().chain(std::iter::repeat('0')).take(6).collect();
    let micros: i64 = digits.parse().ok()?;
    // Days since 1970-01-01 of a proleptic Gregorian date (years counted from March).
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let day_of_year = (153 * ((month + 9) % 12) + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    let days = era * 146_097 + day_of_era - 719_468;
    let seconds = days * 86_400 + hour * 3_600 + minute * 60 + second;
    u64::try_from(seconds * 1_000_000 + micros).ok()
}

/// Every `claim answer recorded` line of a JSON server log (the server writes one once a node's
/// answer is stored; it needs `cloudly::domain::runners=info`), in order: (claim id,
/// generation, the line's time in microseconds since the Unix epoch).
pub fn logged_claim_answers(log: &str) -> BenchResult<Vec<(String, u64, u64)>> {
    let mut answers = Vec::new();
    for line in log.lines() {
        let Ok(event) = serde_json::from_str::<Value>(line) else { continue };
        if event["message"] != "claim answer recorded" {
            continue;
        }
        let (Some(claim), Some(generation), Some(at)) =
            (event["claim"].as_str(), event["generation"].as_u64(), event["timestamp"].as_str())
        else {
            return Err(format!("a claim answer log line without claim, generation or time: {line}"));
        };
        let at = rfc3339_micros(at).ok_or_else(|| format!("a log time that does not read: {line}"))?;
        answers.push((claim.to_owned(), generation, at));
    }
    Ok(answers)
}

/// `GET /metrics` of the server at `base_url`: the Prometheus text.
pub async fn scrape_metrics(base_url: &str) -> BenchResult<String> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let response =
        reqwest::get(format!("{base_url}/metrics")).await.map_err(|error| format!("GET /metrics: {error}"))?;
    if !response.status().is_success() {
        return Err(format!("GET /metrics answered {}", response.status()));
    }
    response.text().await.map_err(|error| format!("GET /metrics: {error}"))
}

/// The samples of the metric `name` in a Prometheus text: (labels as rendered, `{…}` or empty,
/// value); none when the server does not expose it (or has recorded nothing of it yet).
pub fn metric_samples(text: &str, name: &str) -> Vec<(String, f64)> {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| {
            let (sample, value) = line.rsplit_once(' ')?;
            let labels = sample.strip_prefix(name)?;
            (labels.is_empty() || labels.starts_with('{')).then(|| Some((labels.to_owned(), value.parse().ok()?)))?
        })
        .collect()
}

/// The sum of the samples of the metric `name`, `None` when it has none.
pub fn metric_sum(text: &str, name: &str) -> Option<f64> {
    let samples = metric_samples(text, name);
    (!samples.is_empty()).then(|| samples.iter().map(|(_, value)| value).sum())
}

/// The first lines of a report section: `### Results — <date> (commit …)`, then `Generated by
/// `cargo bench --bench <name>` (PostgreSQL <version> on this machine, <n> CPUs; `uptime` before
/// the run: `…`)`, without a full stop (the caller goes on).
pub fn results_heading(name: &str, uptime_before: &str) -> String {
    let (commit, dirty) = commit_and_state();
    let postgres = command_line("psql", &[&super::database::pg_admin_url(), "-Atqc", "show server_version"]);
    format!(
        "### Results — {} (commit `{commit}`{dirty})\n\nGenerated by `cargo bench --bench {name}` (PostgreSQL \
         {postgres} on this machine, {} CPUs; `uptime` before the run: `{uptime_before}`)",
        command_line("date", &["-u", "+%Y-%m-%d %H:%M UTC"]),
        std::thread::available_parallelism().map_or(0, |cores| cores.get()),
    )
}

/// The `main` of the report bench `name` whose section stands between the markers `begin` and
/// `end` of `docs/benchmarks.md` (appended under `heading` when they are missing): [`report_main`],
/// with `render` given the report and `uptime` as it was before the run.
pub fn section_main<Report>(
    name: &str,
    (begin, end, heading): (&str, &str, &str),
    run: impl AsyncFnOnce(&TestDatabase, &Scratch) -> BenchResult<Report>,
    render: impl FnOnce(&Report, &str) -> String,
) -> ExitCode {
    let uptime_before = command_line("uptime", &[]);
    report_main(
        name,
        run,
        |report| render(report, &uptime_before),
        |section| write_section(begin, end, heading, section),
    )
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
