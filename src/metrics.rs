//! Every metric the controller exports, in one table ([`METRICS`]: name, kind, help text). The
//! recorder is installed with every description ([`install`]), so each family `/metrics` renders
//! has its `# HELP` and `# TYPE`; `tests/observability.rs` fails on a `counter!`, `gauge!` or
//! `histogram!` in `src/` whose name is not in the table.
//!
//! At each scrape ([`render`]) the store pool's gauges are set from the pool, and the `process_*`
//! figures are read from `/proc/self` (Linux; elsewhere they are left out) and written after the
//! recorder's text. **Every family of the table is on every scrape, the first one too**: a family
//! nothing has recorded yet is written with its zero (an unlabelled `0`; a histogram's empty
//! buckets), so an absent series always means a scrape that failed, never "nothing happened
//! yet". This reads the table alone: a new row is covered without more code. `cloudly serve`
//! installs the recorder before it opens the store, so what the store and the keys record at
//! start (the signal listener, the signing key) is their current value, not a zero. The
//! `process_*` figures are read by hand, not with `metrics-process`: four small files hold all
//! of them, and the crate's `procfs` dependency tree would be larger than this module. They are
//! written after the recorder's text so that `process_cpu_seconds_total` can be a counter with a
//! fraction (the `metrics` crate's counters are integers); `USER_HZ` is taken as 100, as Linux
//! fixes it for user space.

use crate::store::PoolStatus;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle, PrometheusRecorder};
use std::fmt::Write as _;
use std::sync::OnceLock;

/// What a metric is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Only goes up.
    Counter,
    /// Goes up and down.
    Gauge,
    /// A distribution of observations (seconds).
    Histogram,
}

impl Kind {
    /// The `# TYPE` word.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        }
    }
}

/// One metric family.
#[derive(Debug, Clone, Copy)]
pub struct Metric {
    /// Its name.
    pub name: &'static str,
    /// Its kind.
    pub kind: Kind,
    /// Its `# HELP` text.
    pub help: &'static str,
}

const fn metric(name: &'static str, kind: Kind, help: &'static str) -> Metric {
    Metric { name, kind, help }
}

/// Every metric, sorted by name.
pub const METRICS: &[Metric] = &[
    metric("cloudly_build_info", Kind::Gauge, "Always 1; the labels name this build (version, profile)."),
    metric(
        "cloudly_designations_total",
        Kind::Counter,
        "designateClusterIngress calls by outcome: accepted, replayed, mutation-conflict or the refusal.",
    ),
    metric(
        "cloudly_http_connections_closed_total",
        Kind::Counter,
        "HTTP connections the server closed to protect the others, by reason: peer-cap (answered 503 at its address's cap), shed (made room for a newcomer, having delivered no whole request) or first-head-timeout.",
    ),
    metric("cloudly_http_connections_open", Kind::Gauge, "HTTP connections open now (WebSockets leave this count)."),
    metric(
        "cloudly_ingress_registrations_total",
        Kind::Counter,
        "registerClusterIngress calls by outcome: accepted or the refusal reason.",
    ),
    metric(
        "cloudly_projections_issued_total",
        Kind::Counter,
        "Runtime network projection issues by outcome: issued, unchanged (no node affected) or failed.",
    ),
    metric(
        "cloudly_pruned_total",
        Kind::Counter,
        "Rows deleted by retention, by kind (registration, relay_connection).",
    ),
    metric(
        "cloudly_reconcile_corrections_total",
        Kind::Counter,
        "Changes the full pass made that the incremental reconcile of each write had left undone, by kind: assignments, claims, leases, projections or statuses (each one a bug or a failed reconcile).",
    ),
    metric(
        "cloudly_reconcile_full_pass_duration_seconds",
        Kind::Gauge,
        "How long the last full pass over every cluster took.",
    ),
    metric("cloudly_reconcile_full_passes_total", Kind::Counter, "Full passes over every cluster run by this process."),
    metric("cloudly_request_duration_seconds", Kind::Histogram, "Time to answer a POST /typedrequest, by method."),
    metric(
        "cloudly_requests_shed_total",
        Kind::Counter,
        "Requests answered 503 because their permit pool (requests, long_polls) was exhausted.",
    ),
    metric(
        "cloudly_requests_total",
        Kind::Counter,
        "POST /typedrequest answers by method and outcome (ok or the error code).",
    ),
    metric(
        "cloudly_signal_listener_connected",
        Kind::Gauge,
        "1 while this process listens for other processes' signals on PostgreSQL, else 0.",
    ),
    metric(
        "cloudly_signal_listener_reconnects_total",
        Kind::Counter,
        "Times the PostgreSQL signal listener lost its connection and connected again.",
    ),
    metric(
        "cloudly_signing_key_available",
        Kind::Gauge,
        "1 while this process holds the store's signing key in use, else 0 (it signs nothing then).",
    ),
    metric(
        "cloudly_socket_requests_total",
        Kind::Counter,
        "Requests on /typedsocket by method and outcome (ok or the error code).",
    ),
    metric(
        "cloudly_socket_requests_waited_total",
        Kind::Counter,
        "Requests of node sessions on /typedsocket that waited for a request permit (up to 2 s) instead of being shed at once.",
    ),
    metric("cloudly_sockets_open", Kind::Gauge, "WebSockets on /typedsocket open now."),
    metric("cloudly_sockets_refused_total", Kind::Counter, "WebSocket upgrades refused because every place was taken."),
    metric(
        "cloudly_sockets_session_deadline_total",
        Kind::Counter,
        "WebSockets closed because no node session was opened within the deadline.",
    ),
    metric(
        "cloudly_storage_claim_pushes_total",
        Kind::Counter,
        "applyRuntimeLocalStorageClaim pushes to nodes by outcome.",
    ),
    metric(
        "cloudly_store_errors_total",
        Kind::Counter,
        "Requests answered store-unavailable, and readiness checks the store failed.",
    ),
    metric(
        "cloudly_store_operation_duration_seconds",
        Kind::Histogram,
        "Time of one store statement, by operation (its verb and table).",
    ),
    metric(
        "cloudly_store_pool_acquire_failures_total",
        Kind::Counter,
        "Times no store connection could be had (the pool's wait timed out, it is closed, or connecting failed).",
    ),
    metric(
        "cloudly_store_pool_connections",
        Kind::Gauge,
        "Store connections of this process's pool by state (in_use, idle).",
    ),
    metric("cloudly_store_pool_max_connections", Kind::Gauge, "The most connections this process's store pool opens."),
    metric("cloudly_store_pool_waiting", Kind::Gauge, "Tasks waiting for a store connection now."),
    metric("process_cpu_seconds_total", Kind::Counter, "User and system CPU time this process spent, in seconds."),
    metric("process_max_fds", Kind::Gauge, "The most file descriptors this process may open."),
    metric("process_open_fds", Kind::Gauge, "File descriptors this process holds open."),
    metric("process_resident_memory_bytes", Kind::Gauge, "Resident memory of this process, in bytes."),
    metric("process_start_time_seconds", Kind::Gauge, "When this process started, in seconds since the Unix epoch."),
    metric("process_threads", Kind::Gauge, "Threads of this process."),
    metric("process_virtual_memory_bytes", Kind::Gauge, "Virtual memory of this process, in bytes."),
];

/// The table row of `name`.
pub fn find(name: &str) -> Option<&'static Metric> {
    METRICS.iter().find(|metric| metric.name == name)
}

/// The upper bounds (seconds) of every histogram's buckets.
const BUCKETS: &[f64] = &[0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0];

/// The process-wide Prometheus recorder, installed on first use with every description of
/// [`METRICS`] and `cloudly_build_info` set; answers the handle that renders it.
pub fn install() -> PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let recorder =
                PrometheusBuilder::new().set_buckets(BUCKETS).expect("bucket list is not empty").build_recorder();
            describe(&recorder);
            let handle = recorder.handle();
            // Another recorder may already be installed (a host application); ours still renders.
            let _ = ::metrics::set_global_recorder(recorder);
            use crate::domain::version::{PROFILE, VERSION};
            ::metrics::gauge!("cloudly_build_info", "version" => VERSION, "profile" => PROFILE).set(1.0);
            handle
        })
        .clone()
}

/// Gives `recorder` the help text of every metric it records (the `process_*` figures are
/// written by [`render`] itself).
fn describe(recorder: &PrometheusRecorder) {
    use ::metrics::Recorder as _;
    for metric in METRICS.iter().filter(|metric| !metric.name.starts_with("process_")) {
        let (name, help) = (metric.name.into(), metric.help.into());
        match metric.kind {
            Kind::Counter => recorder.describe_counter(name, None, help),
            Kind::Gauge => recorder.describe_gauge(name, None, help),
            Kind::Histogram => recorder.describe_histogram(name, None, help),
        }
    }
}

/// The text of `/metrics`: the pool's gauges set from `pool`, the recorder's families, the
/// `process_*` figures, then every family of [`METRICS`] still missing, with its zero.
pub fn render(handle: &PrometheusHandle, pool: PoolStatus) -> String {
    ::metrics::gauge!("cloudly_store_pool_connections", "state" => "in_use").set(pool.in_use as f64);
    ::metrics::gauge!("cloudly_store_pool_connections", "state" => "idle").set(pool.idle as f64);
    ::metrics::gauge!("cloudly_store_pool_max_connections").set(pool.max as f64);
    let mut text = handle.render();
    if let Some(figures) = ProcessFigures::read() {
        figures.write(&mut text);
    }
    write_missing_families(&mut text);
    text
}

/// Appends, for each family of [`METRICS`] that `text` does not type yet, its `# HELP`, its
/// `# TYPE` and its zero: `name 0` for a counter or a gauge, every bucket `0` with `_sum 0` and
/// `_count 0` for a histogram.
pub fn write_missing_families(text: &mut String) {
    let typed: std::collections::HashSet<&str> = text
        .lines()
        .filter_map(|line| line.strip_prefix("# TYPE "))
        .filter_map(|rest| rest.split_whitespace().next())
        .collect();
    let missing: Vec<&Metric> = METRICS.iter().filter(|metric| !typed.contains(metric.name)).collect();
    for metric in missing {
        let name = metric.name;
        let _ = writeln!(text, "# HELP {name} {}\n# TYPE {name} {}", metric.help, metric.kind.as_str());
        match metric.kind {
            Kind::Counter | Kind::Gauge => {
                let _ = writeln!(text, "{name} 0");
            }
            Kind::Histogram => {
                for bound in BUCKETS {
                    let _ = writeln!(text, "{name}_bucket{{le=\"{bound}\"}} 0");
                }
                let _ = writeln!(text, "{name}_bucket{{le=\"+Inf\"}} 0\n{name}_sum 0\n{name}_count 0");
            }
        }
        text.push('\n');
    }
}

/// This process's figures as the kernel reports them.
#[derive(Debug, Clone, PartialEq)]
pub struct ProcessFigures {
    /// `process_cpu_seconds_total`.
    pub cpu_seconds: f64,
    /// `process_resident_memory_bytes`.
    pub resident_memory_bytes: u64,
    /// `process_virtual_memory_bytes`.
    pub virtual_memory_bytes: u64,
    /// `process_open_fds`.
    pub open_fds: u64,
    /// `process_max_fds`; `None` when the limit is `unlimited` (written `+Inf`).
    pub max_fds: Option<u64>,
    /// `process_threads`.
    pub threads: u64,
    /// `process_start_time_seconds`.
    pub start_time_seconds: f64,
}

/// Clock ticks per second of `/proc/*/stat` times (`USER_HZ`, which Linux fixes at 100 for user
/// space on the architectures this service is built for).
const TICKS_PER_SECOND: f64 = 100.0;

impl ProcessFigures {
    /// Reads `/proc/self/stat`, `/proc/self/status`, `/proc/self/fd`, `/proc/self/limits` and the
    /// boot time of `/proc/stat`; `None` where there is no `/proc` (not Linux) or it is unreadable.
    pub fn read() -> Option<ProcessFigures> {
        let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
        let status = std::fs::read_to_string("/proc/self/status").ok()?;
        let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
        let boot = std::fs::read_to_string("/proc/stat").ok()?;
        let open_fds = std::fs::read_dir("/proc/self/fd").ok()?.count() as u64;
        ProcessFigures::parse(&stat, &status, &limits, &boot, open_fds)
    }

    /// The figures from the texts of those files (`open_fds` counted by the caller).
    pub fn parse(stat: &str, status: &str, limits: &str, boot: &str, open_fds: u64) -> Option<ProcessFigures> {
        // The command name, in parentheses, may hold spaces: the fields follow its last ')'.
        let fields: Vec<&str> = stat.get(stat.rfind(')')? + 1..)?.split_whitespace().collect();
        // Field n of proc(5) is fields[n - 3]: utime 14, stime 15, num_threads 20, starttime 22,
        // vsize 23.
        let field = |number: usize| fields.get(number - 3)?.parse::<u64>().ok();
        let ticks = field(14)? + field(15)?;
        let kibibytes = |key: &str| {
            let line = status.lines().find(|line| line.starts_with(key))?;
            line[key.len()..].trim().trim_end_matches("kB").trim().parse::<u64>().ok()
        };
        let boot_seconds = boot.lines().find_map(|line| line.strip_prefix("btime "))?.trim().parse::<u64>().ok()?;
        let max_fds = limits
            .lines()
            .find(|line| line.starts_with("Max open files"))
            .and_then(|line| line["Max open files".len()..].split_whitespace().next())
            .and_then(|soft| soft.parse::<u64>().ok());
        Some(ProcessFigures {
            cpu_seconds: ticks as f64 / TICKS_PER_SECOND,
            resident_memory_bytes: kibibytes("VmRSS:").unwrap_or(0) * 1024,
            virtual_memory_bytes: field(23)?,
            open_fds,
            max_fds,
            threads: field(20)?,
            start_time_seconds: boot_seconds as f64 + field(22)? as f64 / TICKS_PER_SECOND,
        })
    }

    /// Writes the figures as Prometheus text, each with its `# HELP` and `# TYPE`.
    pub fn write(&self, text: &mut String) {
        let mut family = |name: &str, value: String| {
            let metric = find(name).expect("every process figure is in METRICS");
            let _ = writeln!(
                text,
                "# HELP {name} {}\n# TYPE {name} {}\n{name} {value}\n",
                metric.help,
                metric.kind.as_str()
            );
        };
        family("process_cpu_seconds_total", self.cpu_seconds.to_string());
        family("process_resident_memory_bytes", self.resident_memory_bytes.to_string());
        family("process_virtual_memory_bytes", self.virtual_memory_bytes.to_string());
        family("process_open_fds", self.open_fds.to_string());
        family("process_max_fds", self.max_fds.map_or_else(|| "+Inf".to_owned(), |max_fds| max_fds.to_string()));
        family("process_threads", self.threads.to_string());
        family("process_start_time_seconds", self.start_time_seconds.to_string());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_is_sorted_unique_and_says_something_of_each_metric() {
        assert!(METRICS.windows(2).all(|pair| pair[0].name < pair[1].name), "sorted by name, no name twice");
        for metric in METRICS {
            assert!(metric.name.starts_with("cloudly_") || metric.name.starts_with("process_"), "{}", metric.name);
            assert!(!metric.help.is_empty() && !metric.help.contains('\n'), "{}", metric.name);
            assert_eq!(metric.kind == Kind::Counter, metric.name.ends_with("_total"), "{}", metric.name);
        }
    }

    #[test]
    fn every_family_of_the_table_is_written_with_its_zero_when_nothing_recorded_it() {
        let mut text =
            "# HELP cloudly_sockets_open x\n# TYPE cloudly_sockets_open gauge\ncloudly_sockets_open 3\n\n".to_owned();
        write_missing_families(&mut text);
        for metric in METRICS {
            let typed = format!("# TYPE {} {}\n", metric.name, metric.kind.as_str());
            assert_eq!(text.matches(&typed).count(), 1, "{}:\n{text}", metric.name);
        }
        assert!(text.contains("cloudly_sockets_open 3\n") && !text.contains("cloudly_sockets_open 0"), "{text}");
        assert!(text.contains("\ncloudly_requests_total 0\n"), "{text}");
        assert!(text.contains("\ncloudly_request_duration_seconds_bucket{le=\"+Inf\"} 0\n"), "{text}");
        assert!(text.contains("\ncloudly_request_duration_seconds_count 0\n"), "{text}");
    }

    #[test]
    fn process_figures_are_read_from_the_proc_texts() {
        let stat = "4242 (cloudly (x) y) S 1 4242 4242 0 -1 4194560 2310 0 0 0 150 75 0 0 20 0 9 0 123400 \
                    1048576000 5000 18446744073709551615";
        let status = "Name:\tcloudly\nVmRSS:\t   20480 kB\nThreads:\t9\n";
        let limits = "Limit                     Soft Limit           Hard Limit           Units\n\
                      Max open files            1024                 524288               files\n";
        let boot = "cpu  1 2 3\nbtime 1767225600\nprocesses 10\n";
        let figures = ProcessFigures::parse(stat, status, limits, boot, 12).unwrap();
        assert_eq!(
            figures,
            ProcessFigures {
                cpu_seconds: 2.25,
                resident_memory_bytes: 20480 * 1024,
                virtual_memory_bytes: 1_048_576_000,
                open_fds: 12,
                max_fds: Some(1024),
                threads: 9,
                start_time_seconds: 1_767_225_600.0 + 1234.0,
            }
        );
        let mut text = String::new();
        figures.write(&mut text);
        assert!(text.contains("# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total 2.25\n"), "{text}");
        assert!(text.contains("# HELP process_open_fds "), "{text}");
        assert!(ProcessFigures::parse("no parenthesis", status, limits, boot, 1).is_none());
    }
}
