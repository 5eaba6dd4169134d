//! Configuration of `cloudly serve` and `cloudly migrate`, from flags and `CLOUDLY_*` variables.
//! Defaults make a first run work with nothing set: SQLite under `./cloudly-data`, keys created
//! there, a bootstrap administrator identity written beside them.

use clap::{Args, ValueEnum};
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Human,
    /// One JSON object per line.
    Json,
}

/// Where the controller keeps its state.
#[derive(Debug, Clone, Args)]
pub struct StoreConfig {
    /// The data directory: keys, the bootstrap identity, and the default SQLite database.
    #[arg(long, env = "CLOUDLY_DATA_DIR", default_value = "./cloudly-data")]
    pub data_dir: PathBuf,
    /// The controller keys directory (`identity.ed25519`, `signing.ed25519`, `secret.key`);
    /// default `<data dir>/keys`. Controllers sharing a store may share one (a mounted secret)
    /// while each has its own data directory.
    #[arg(long, env = "CLOUDLY_KEYS_DIR")]
    pub keys_dir: Option<PathBuf>,
    /// The database: `postgres://…` for PostgreSQL; default `sqlite://<data dir>/cloudly.db`.
    #[arg(long, env = "CLOUDLY_DATABASE_URL")]
    pub database_url: Option<String>,
    /// The most connections this process keeps to PostgreSQL (SQLite ignores it).
    #[arg(
        long,
        env = "CLOUDLY_DATABASE_MAX_CONNECTIONS",
        default_value_t = crate::store::POSTGRES_POOL_SIZE,
        value_parser = clap::value_parser!(u32).range(1..=10_000)
    )]
    pub database_max_connections: u32,
}

impl StoreConfig {
    /// The database URL in force.
    pub fn database_url(&self) -> String {
        self.database_url.clone().unwrap_or_else(|| format!("sqlite://{}", self.data_dir.join("cloudly.db").display()))
    }

    /// The keys directory in force: `--keys-dir`, else `<data dir>/keys`.
    pub fn keys_dir(&self) -> PathBuf {
        self.keys_dir.clone().unwrap_or_else(|| crate::keys::default_keys_dir(&self.data_dir))
    }

    /// How the store is opened.
    pub fn open_options(&self) -> crate::store::OpenOptions {
        crate::store::OpenOptions { postgres_max_connections: self.database_max_connections }
    }

    /// Opens the store in force with these options and applies pending migrations.
    pub async fn open_store(&self) -> Result<crate::store::SharedStore, crate::store::StoreError> {
        crate::store::open_with(&self.database_url(), self.open_options()).await
    }
}

/// `cloudly serve` settings.
#[derive(Debug, Clone, Args)]
pub struct ServeConfig {
    /// The address to listen on.
    #[arg(long, env = "CLOUDLY_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    /// Store settings.
    #[command(flatten)]
    pub store: StoreConfig,
    /// Log format.
    #[arg(long, env = "CLOUDLY_LOG_FORMAT", value_enum, default_value = "human")]
    pub log_format: LogFormat,
    /// Largest accepted request body in bytes.
    #[arg(long, env = "CLOUDLY_BODY_LIMIT_BYTES", default_value_t = 1024 * 1024)]
    pub body_limit_bytes: usize,
    /// Requests handled at once; more are answered 503 with Retry-After.
    #[arg(long, env = "CLOUDLY_MAX_CONCURRENT_REQUESTS", default_value_t = 256)]
    pub max_concurrent_requests: usize,
    /// Seconds a request may take before it is answered store-unavailable.
    #[arg(long, env = "CLOUDLY_REQUEST_TIMEOUT_SECONDS", default_value_t = 10)]
    pub request_timeout_seconds: u64,
    /// Milliseconds a request body may take to arrive in full (before it takes a permit); then
    /// 408 and the connection is closed.
    #[arg(long, env = "CLOUDLY_BODY_READ_TIMEOUT_MS", default_value_t = 5_000)]
    pub body_read_timeout_ms: u64,
    /// Milliseconds a connection may take to send a request's headers, and may stay idle between
    /// requests; then it is closed.
    #[arg(long, env = "CLOUDLY_HEADER_READ_TIMEOUT_MS", default_value_t = 10_000)]
    pub header_read_timeout_ms: u64,
    /// Milliseconds a new connection may take to send its first request head; then it is closed.
    #[arg(long, env = "CLOUDLY_FIRST_HEAD_TIMEOUT_MS", default_value_t = 2_000)]
    pub first_head_timeout_ms: u64,
    /// HTTP connections open at once; at the cap a new one takes the place of the oldest that has
    /// not delivered a whole request, or waits in the listen queue when every one has.
    #[arg(long, env = "CLOUDLY_MAX_CONNECTIONS", default_value_t = 512)]
    pub max_connections: usize,
    /// HTTP connections open at once from one peer address; more are answered 503 and closed.
    /// Behind a proxy every client shares its address: raise it to --max-connections there.
    #[arg(long, env = "CLOUDLY_MAX_CONNECTIONS_PER_PEER", default_value_t = 64)]
    pub max_connections_per_peer: usize,
    /// `getClusterIngressRouteTable` long polls handled at once, apart from the other requests;
    /// more are answered 503 with Retry-After.
    #[arg(long, env = "CLOUDLY_MAX_CONCURRENT_LONG_POLLS", default_value_t = 64)]
    pub max_concurrent_long_polls: usize,
    /// WebSockets (`/typedsocket`) open at once; more upgrades are answered 503 with Retry-After.
    #[arg(long, env = "CLOUDLY_MAX_SOCKETS", default_value_t = 256)]
    pub max_sockets: usize,
    /// Milliseconds a WebSocket may stay open without opening a node session; then it is closed
    /// with code 1008.
    #[arg(long, env = "CLOUDLY_SOCKET_SESSION_DEADLINE_MS", default_value_t = 10_000)]
    pub socket_session_deadline_ms: u64,
    /// Seconds in-flight requests get to finish after SIGTERM/SIGINT.
    #[arg(long, env = "CLOUDLY_SHUTDOWN_GRACE_SECONDS", default_value_t = 20)]
    pub shutdown_grace_seconds: u64,
    /// This controller's id (`controller.id` of what it issues); controllers sharing one
    /// database use the same id.
    #[arg(long, env = "CLOUDLY_CONTROLLER_ID", default_value = "cloudly")]
    pub controller_id: String,
    /// How long a relay connection stays elected without a connect or heartbeat, in ms.
    #[arg(long, env = "CLOUDLY_RELAY_LEASE_MS", default_value_t = 30_000)]
    pub relay_lease_ms: u64,
    /// The shortest time between two background assignment re-issues of one cluster after
    /// designations, in ms (a burst of designations is re-issued about once per interval).
    #[arg(long, env = "CLOUDLY_ASSIGNMENT_RECONCILE_INTERVAL_MS", default_value_t = 100)]
    pub assignment_reconcile_interval_ms: u64,
    /// The most background assignment reconciles this process runs at once, over all clusters;
    /// a cluster waiting for a place gathers its changes into one run.
    #[arg(long, env = "CLOUDLY_ASSIGNMENT_RECONCILE_WORKERS", default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..))]
    pub assignment_reconcile_workers: u16,
    /// How often this process checks the store's signing key in use without being told (after
    /// `cloudly keys rotate` on SQLite, or a missed PostgreSQL notification), in ms.
    #[arg(long, env = "CLOUDLY_SIGNING_KEY_CHECK_MS", default_value_t = 10_000)]
    pub signing_key_check_ms: u64,
    /// How often this process issues every cluster's network projections without being told, in
    /// ms: the bound on how long a failed or interrupted issue stays unrepaired.
    #[arg(long, env = "CLOUDLY_PROJECTION_SWEEP_MS", default_value_t = 60_000)]
    pub projection_sweep_ms: u64,
    /// How often this process runs the full pass over every cluster (anti-entropy: what the
    /// incremental reconcile of each write left undone is corrected and counted), in ms.
    #[arg(long, env = "CLOUDLY_RECONCILE_FULL_PASS_MS", default_value_t = 300_000)]
    pub reconcile_full_pass_ms: u64,
    /// Overrides of the `retryAfterMs` of `registerClusterIngress` refusals, as `reason=ms` pairs
    /// separated by commas (`not-ready=10000,conflict=2000`), each from 1000 to 300000; reasons
    /// not named keep the spec's defaults.
    #[arg(long, env = "CLOUDLY_REGISTRATION_RETRY_AFTER_MS", default_value = "")]
    pub registration_retry_after_ms: String,
    /// Accepted ingress registrations older than this are deleted (the newest of each node is
    /// kept), in hours.
    #[arg(long, env = "CLOUDLY_REGISTRATION_RETENTION_HOURS", default_value_t = 30 * 24)]
    pub registration_retention_hours: u64,
    /// Superseded relay connections last seen longer ago than this are deleted (a cluster's
    /// newest connection, and one a kept registration names, are kept), in hours.
    #[arg(long, env = "CLOUDLY_RELAY_CONNECTION_RETENTION_HOURS", default_value_t = 7 * 24)]
    pub relay_connection_retention_hours: u64,
    /// The time between two retention runs, in seconds.
    #[arg(long, env = "CLOUDLY_RETENTION_INTERVAL_SECONDS", default_value_t = 600)]
    pub retention_interval_seconds: u64,
    /// Lifetime of the bootstrap administrator identity written on first start, in hours.
    #[arg(long, env = "CLOUDLY_BOOTSTRAP_IDENTITY_TTL_HOURS", default_value_t = 24 * 90)]
    pub bootstrap_identity_ttl_hours: u64,
}

/// Fails unless `value`, given as `flag`, is from `minimum` to `maximum` (both included), with
/// a message naming the flag and the range.
fn ensure_within(flag: &str, value: u64, minimum: u64, maximum: u64) -> anyhow::Result<()> {
    anyhow::ensure!((minimum..=maximum).contains(&value), "{flag} must be from {minimum} to {maximum}");
    Ok(())
}

impl ServeConfig {
    /// The HTTP and WebSocket limits, or which one is out of range.
    pub fn limits(&self) -> anyhow::Result<crate::api::Limits> {
        let bounded = [
            ("--max-connections", self.max_connections as u64, 1, 1_000_000),
            ("--max-connections-per-peer", self.max_connections_per_peer as u64, 1, 1_000_000),
            ("--max-concurrent-long-polls", self.max_concurrent_long_polls as u64, 1, 1_000_000),
            ("--max-sockets", self.max_sockets as u64, 1, 1_000_000),
            ("--body-read-timeout-ms", self.body_read_timeout_ms, 10, 3_600_000),
            ("--header-read-timeout-ms", self.header_read_timeout_ms, 10, 3_600_000),
            ("--first-head-timeout-ms", self.first_head_timeout_ms, 10, 3_600_000),
            ("--socket-session-deadline-ms", self.socket_session_deadline_ms, 10, 3_600_000),
        ];
        for (flag, value, minimum, maximum) in bounded {
            ensure_within(flag, value, minimum, maximum)?;
        }
        Ok(crate::api::Limits {
            body_bytes: self.body_limit_bytes,
            concurrent_requests: self.max_concurrent_requests.max(1),
            request_timeout: Duration::from_secs(self.request_timeout_seconds.max(1)),
            body_read_timeout: Duration::from_millis(self.body_read_timeout_ms),
            header_read_timeout: Duration::from_millis(self.header_read_timeout_ms),
            first_head_timeout: Duration::from_millis(self.first_head_timeout_ms),
            max_connections: self.max_connections,
            max_connections_per_peer: self.max_connections_per_peer,
            concurrent_long_polls: self.max_concurrent_long_polls,
            max_sockets: self.max_sockets,
            socket_session_deadline: Duration::from_millis(self.socket_session_deadline_ms),
        })
    }

    /// The decision settings, or why the configuration is wrong.
    pub fn controller_settings(&self) -> anyhow::Result<crate::domain::ControllerSettings> {
        let controller_id = crate::contract::Id::parse(&self.controller_id)
            .ok_or_else(|| anyhow::anyhow!("--controller-id must be an Id (^[A-Za-z0-9][A-Za-z0-9._-]{{0,127}}$)"))?;
        // At most the least relay connection retention (1 hour), so a connection a registration
        // was judged through is never one retention deletes.
        ensure_within("--relay-lease-ms", self.relay_lease_ms, 1_000, 3_600_000)?;
        ensure_within("--signing-key-check-ms", self.signing_key_check_ms, 100, 3_600_000)?;
        ensure_within("--projection-sweep-ms", self.projection_sweep_ms, 1_000, 3_600_000)?;
        ensure_within("--reconcile-full-pass-ms", self.reconcile_full_pass_ms, 1_000, 86_400_000)?;
        let registration_retry_after =
            crate::domain::registration::RetryAfterTable::parse(&self.registration_retry_after_ms)
                .map_err(|error| anyhow::anyhow!("--registration-retry-after-ms: {error}"))?;
        ensure_within("--registration-retention-hours", self.registration_retention_hours, 1, 100 * 365 * 24)?;
        ensure_within("--relay-connection-retention-hours", self.relay_connection_retention_hours, 1, 100 * 365 * 24)?;
        ensure_within("--retention-interval-seconds", self.retention_interval_seconds, 1, 86_400)?;
        let retention = crate::domain::retention::RetentionSettings {
            registration_age_ms: self.registration_retention_hours * 3_600_000,
            relay_connection_age_ms: self.relay_connection_retention_hours * 3_600_000,
            interval_ms: self.retention_interval_seconds * 1_000,
            ..crate::domain::retention::RetentionSettings::default()
        };
        Ok(crate::domain::ControllerSettings {
            controller_id,
            relay_lease_ms: self.relay_lease_ms,
            registration_retry_after,
            assignment_reconcile_interval_ms: self.assignment_reconcile_interval_ms,
            assignment_reconcile_workers: usize::from(self.assignment_reconcile_workers),
            signing_key_check_ms: self.signing_key_check_ms,
            projection_sweep_ms: self.projection_sweep_ms,
            reconcile_full_pass_ms: self.reconcile_full_pass_ms,
            retention,
            ..crate::domain::ControllerSettings::default()
        })
    }

    /// The configuration as JSON with secrets redacted (`cloudly config`).
    pub fn redacted(&self) -> Value {
        json!({
            "listen": self.listen.to_string(),
            "dataDir": self.store.data_dir.display().to_string(),
            "databaseUrl": redact_url(&self.store.database_url()),
            "databaseMaxConnections": self.store.database_max_connections,
            "logFormat": format!("{:?}", self.log_format).to_lowercase(),
            "bodyLimitBytes": self.body_limit_bytes,
            "maxConcurrentRequests": self.max_concurrent_requests,
            "requestTimeoutSeconds": self.request_timeout_seconds,
            "bodyReadTimeoutMs": self.body_read_timeout_ms,
            "headerReadTimeoutMs": self.header_read_timeout_ms,
            "firstHeadTimeoutMs": self.first_head_timeout_ms,
            "maxConnections": self.max_connections,
            "maxConnectionsPerPeer": self.max_connections_per_peer,
            "maxConcurrentLongPolls": self.max_concurrent_long_polls,
            "maxSockets": self.max_sockets,
            "socketSessionDeadlineMs": self.socket_session_deadline_ms,
            "shutdownGraceSeconds": self.shutdown_grace_seconds,
            "bootstrapIdentityTtlHours": self.bootstrap_identity_ttl_hours,
            "registrationRetentionHours": self.registration_retention_hours,
            "relayConnectionRetentionHours": self.relay_connection_retention_hours,
            "retentionIntervalSeconds": self.retention_interval_seconds,
            "controllerId": self.controller_id,
            "relayLeaseMs": self.relay_lease_ms,
            "assignmentReconcileIntervalMs": self.assignment_reconcile_interval_ms,
            "assignmentReconcileWorkers": self.assignment_reconcile_workers,
            "signingKeyCheckMs": self.signing_key_check_ms,
            "projectionSweepMs": self.projection_sweep_ms,
            "reconcileFullPassMs": self.reconcile_full_pass_ms,
            "registrationRetryAfterMs": crate::domain::registration::RetryAfterTable::parse(&self.registration_retry_after_ms)
                .map_or_else(|error| format!("invalid: {error}"), |table| table.to_text()),
            "keys": self.store.keys_dir().display().to_string(),
        })
    }
}

/// A database URL with any password (in the authority or the query) replaced by `***`.
pub fn redact_url(url: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((base, _)) => (base, "?***"),
        None => (url, ""),
    };
    let redacted_base = match base.split_once("://") {
        Some((scheme, rest)) => {
            let (authority, path) = rest.find('/').map_or((rest, ""), |index| rest.split_at(index));
            match authority.rsplit_once('@') {
                Some((credentials, host)) if credentials.contains(':') => {
                    let user = credentials.split(':').next().unwrap_or("");
                    format!("{scheme}://{user}:***@{host}{path}")
                }
                _ => base.to_owned(),
            }
        }
        None => base.to_owned(),
    };
    format!("{redacted_base}{query}")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `cloudly serve`'s flags alone, parsed as the command line would be.
    #[derive(clap::Parser)]
    struct ServeFlags {
        #[command(flatten)]
        serve: ServeConfig,
    }

    fn serve_flags(arguments: &[&str]) -> ServeConfig {
        use clap::Parser as _;
        ServeFlags::try_parse_from(std::iter::once("cloudly").chain(arguments.iter().copied())).unwrap().serve
    }

    #[test]
    fn the_limit_flags_default_to_the_limits_defaults_and_refuse_out_of_range_values() {
        assert_eq!(serve_flags(&[]).limits().unwrap(), crate::api::Limits::default());
        let limits = serve_flags(&["--max-sockets", "3", "--socket-session-deadline-ms", "250"]).limits().unwrap();
        assert_eq!((limits.max_sockets, limits.socket_session_deadline), (3, Duration::from_millis(250)));
        for (flag, value) in [
            ("--max-connections", "0"),
            ("--max-concurrent-long-polls", "0"),
            ("--max-sockets", "0"),
            ("--body-read-timeout-ms", "0"),
            ("--header-read-timeout-ms", "9"),
            ("--socket-session-deadline-ms", "3600001"),
        ] {
            let error = serve_flags(&[flag, value]).limits().expect_err(flag).to_string();
            assert!(error.starts_with(flag), "{flag}: {error}");
        }
        let printed = serve_flags(&[]).redacted();
        for key in [
            "bodyReadTimeoutMs",
            "headerReadTimeoutMs",
            "maxConnections",
            "maxConcurrentLongPolls",
            "maxSockets",
            "socketSessionDeadlineMs",
        ] {
            assert!(printed[key].is_u64(), "cloudly config prints {key}: {printed}");
        }
    }

    #[test]
    fn the_relay_lease_is_from_a_second_to_an_hour() {
        assert_eq!(
            serve_flags(&["--relay-lease-ms", "3600000"]).controller_settings().unwrap().relay_lease_ms,
            3_600_000
        );
        for value in ["999", "3600001"] {
            let error = serve_flags(&["--relay-lease-ms", value]).controller_settings().expect_err(value).to_string();
            assert_eq!(error, "--relay-lease-ms must be from 1000 to 3600000");
        }
    }

    #[test]
    fn passwords_never_survive_redaction() {
        assert_eq!(redact_url("postgres://cloudly:hunter2@db:5432/cloudly"), "postgres://cloudly:***@db:5432/cloudly");
        assert_eq!(redact_url("postgres://u:p@h/d?password=x"), "postgres://u:***@h/d?***");
        assert_eq!(redact_url("postgres://postgres@127.0.0.1:5432/x"), "postgres://postgres@127.0.0.1:5432/x");
        assert_eq!(redact_url("sqlite://./cloudly-data/cloudly.db"), "sqlite://./cloudly-data/cloudly.db");
        assert_eq!(redact_url("postgres://h/d?password=x"), "postgres://h/d?***");
    }
}
