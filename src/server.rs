//! Wiring of `cloudly serve`: keys, store, bootstrap identity, router, graceful shutdown.

use crate::api::{self, AppState, Limits};
use crate::config::{LogFormat, ServeConfig, StoreConfig};
use crate::contract::Id;
use crate::domain::identity::{IdentitySubject, IdentityType, Role, issue_identity};
use crate::domain::{Clock, Controller, ControllerSettings, SystemClock};
use crate::keys::{DataDirSigningKeys, KeysOpened, open_keys_for_store, write_new_private_file};
use crate::store::SharedStore;
use anyhow::Context as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::net::TcpListener;

/// Installs the `tracing` subscriber (human or JSON lines on stderr; `RUST_LOG` filters). Human
/// lines are coloured only when stderr is a terminal. Each event inside a request's span carries
/// the span's `request_id` and `principal` (JSON: `span` and `spans`).
pub fn init_tracing(format: LogFormat) {
    use std::io::IsTerminal as _;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,sqlx=warn"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    let _ = match format {
        LogFormat::Human => builder.try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
}

/// Opens the store (applying migrations) and then the keys directory's keys, checked against the
/// key ids the store recorded ([`open_keys_for_store`]: created and recorded only for an empty
/// store; a data directory whose keys are missing or are not the store's is refused, and nothing
/// is created). Answers the controller and how the keys were found.
pub async fn open_controller(
    config: &StoreConfig,
    settings: ControllerSettings,
) -> anyhow::Result<(Arc<Controller>, KeysOpened)> {
    std::fs::create_dir_all(&config.data_dir)
        .with_context(|| format!("create data directory {}", config.data_dir.display()))?;
    let store: SharedStore = config.open_store().await.context("open the store")?;
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let keys_dir = config.keys_dir();
    let opened = open_keys_for_store(&keys_dir, store.as_ref(), clock.now_ms()).await;
    let (keys, opened) = match opened {
        Ok(opened) => opened,
        Err(error) => {
            store.close().await;
            return Err(error.into());
        }
    };
    match &opened {
        KeysOpened::Matched => tracing::info!(keys = %keys_dir.display(), "controller keys match the store's"),
        KeysOpened::MatchedUnfinishedRotation { pending } => tracing::warn!(
            keys = %keys_dir.display(),
            pending = %pending.display(),
            "controller keys match the store's, the signing key in the file of an unfinished rotation: \
             run `cloudly keys rotate` again to finish it (it rotates nothing else)"
        ),
        KeysOpened::Recorded { store_held_data: true, .. } => tracing::warn!(
            keys = %keys_dir.display(),
            "controller keys recorded for a store written before key ids were recorded: \
             from now on only these keys start on this store"
        ),
        KeysOpened::Recorded { created, .. } if !created.is_empty() => {
            tracing::info!(keys = %keys_dir.display(), "controller keys created and recorded for an empty store")
        }
        KeysOpened::Recorded { .. } => {
            tracing::info!(keys = %keys_dir.display(), "controller keys recorded for an empty store")
        }
    }
    let controller = Controller::with_settings(store, Arc::new(keys), clock, settings);
    controller.signing.set_source(Arc::new(DataDirSigningKeys::new(&keys_dir)));
    Ok((Arc::new(controller), opened))
}

/// Writes `<data dir>/admin-identity.json` (mode 0600) unless it exists. Answers its path and
/// whether it was written now.
pub fn ensure_bootstrap_identity(
    data_dir: &Path,
    controller: &Controller,
    ttl: Duration,
) -> anyhow::Result<(PathBuf, bool)> {
    let path = data_dir.join("admin-identity.json");
    if path.exists() {
        return Ok((path, false));
    }
    let subject = IdentitySubject {
        name: "bootstrap administrator".to_owned(),
        user_id: Id::parse("bootstrap-admin").expect("a valid id"),
        identity_type: IdentityType::Human,
        role: Role::Admin,
    };
    let identity = issue_identity(
        &controller.keys.identity,
        &subject,
        controller.clock.now_ms(),
        ttl.as_millis() as u64,
        &uuid::Uuid::new_v4().to_string(),
    )?;
    let text = serde_json::to_string_pretty(&identity)? + "\n";
    match write_new_private_file(&path, text.as_bytes()) {
        Ok(()) => Ok((path, true)),
        // Another process wrote it first: theirs stands.
        Err(_) if path.exists() => Ok((path, false)),
        Err(error) => Err(error.into()),
    }
}

/// A running server: its address, its state, and the handle that stops it.
pub struct RunningServer {
    /// The bound address.
    pub address: std::net::SocketAddr,
    /// The shared state (for tests).
    pub state: AppState,
    stop: tokio::sync::watch::Sender<bool>,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl RunningServer {
    /// Stops accepting, lets in-flight requests and background assignment reconciles finish, and
    /// waits for the server to end.
    pub async fn stop(self) -> std::io::Result<()> {
        let _ = self.stop.send(true);
        self.task.await.unwrap_or(Ok(()))
    }
}

/// Serves `controller` on `listener` within `limits` (connections: [`api::connections`]; body
/// deadlines, permit pools, sockets: [`api::limits`]) until [`RunningServer::stop`].
pub fn spawn(listener: TcpListener, controller: Arc<Controller>, limits: Limits) -> anyhow::Result<RunningServer> {
    let address = listener.local_addr()?;
    let state = AppState::new(controller, limits);
    let (stop, mut stopped) = tokio::sync::watch::channel(false);
    let accepting = state.accepting.clone();
    let controller = state.controller.clone();
    let draining = controller.clone();
    let app = api::router(state.clone());
    // Subscribed before the first request, so no signal of this server's own writes is lost.
    let signals = controller.spawn_signal_follower();
    let sweeps = tokio::spawn(run_projection_sweeps(controller.clone()));
    let full_passes = tokio::spawn(run_full_passes(controller.clone()));
    let task = tokio::spawn(async move {
        let shutdown = async move {
            let _ = stopped.wait_for(|stop| *stop).await;
            accepting.store(false, Ordering::SeqCst);
            draining.begin_draining();
            draining.links.close_all();
        };
        let served = api::connections::serve(listener, app, limits, shutdown).await;
        // The background assignment reconciles of the last requests finish too.
        controller.all_assignments_settled().await;
        signals.abort();
        sweeps.abort();
        full_passes.abort();
        served
    });
    Ok(RunningServer { address, state, stop, task })
}

/// How long a stopping server waits for the store to close.
const STORE_CLOSE_TIMEOUT: Duration = Duration::from_secs(5);

/// `cloudly serve`: runs until SIGTERM or SIGINT, then drains and closes the store.
pub async fn serve(config: ServeConfig) -> anyhow::Result<()> {
    init_tracing(config.log_format);
    crate::metrics::install(); // before the store opens: what the store and the keys record at start is kept
    let limits = config.limits()?;
    let (controller, _) = open_controller(&config.store, config.controller_settings()?).await?;
    let (identity_path, written) = ensure_bootstrap_identity(
        &config.store.data_dir,
        &controller,
        Duration::from_secs(config.bootstrap_identity_ttl_hours * 3600),
    )?;
    if written {
        tracing::info!(path = %identity_path.display(), "bootstrap administrator identity written");
    } else {
        tracing::info!(path = %identity_path.display(), "bootstrap administrator identity exists");
    }
    let stop_signal = shutdown_signal().context("install the stop signal handlers")?;
    let listener = TcpListener::bind(config.listen).await.with_context(|| format!("listen on {}", config.listen))?;
    let retention = tokio::spawn(run_retention(controller.clone()));
    let server = spawn(listener, controller, limits)?;
    tracing::info!(
        address = %server.address,
        store = %crate::config::redact_url(&config.store.database_url()),
        "cloudly serving"
    );
    stop_signal.await;
    retention.abort();
    tracing::info!(grace_seconds = config.shutdown_grace_seconds, "stop signal: draining in-flight requests");
    let store = server.state.controller.store.clone();
    match tokio::time::timeout(Duration::from_secs(config.shutdown_grace_seconds), server.stop()).await {
        Ok(result) => result?,
        Err(_) => tracing::warn!("grace period over; exiting with requests still in flight"),
    }
    // Closing the store checkpoints a SQLite WAL into the database file; connections still held by
    // requests cut off by the grace period are not waited for long.
    if tokio::time::timeout(STORE_CLOSE_TIMEOUT, store.close()).await.is_err() {
        tracing::warn!("the store did not close in time; exiting with connections still open");
    }
    tracing::info!("cloudly stopped");
    Ok(())
}

/// Runs `run` every `interval_ms` (at least a second), the first run one interval after the
/// start, each after the previous one ended (a late tick is delayed, never bunched).
async fn every<Run: Future<Output = ()>>(interval_ms: u64, mut run: impl FnMut() -> Run) {
    let interval = Duration::from_millis(interval_ms.max(1_000));
    let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        run().await;
    }
}

/// Runs retention (`domain::retention`) every `settings.retention.interval_ms`; a failed run is
/// logged and the next one tries again.
async fn run_retention(controller: Arc<Controller>) {
    every(controller.settings.retention.interval_ms, || async {
        if let Err(error) = controller.prune_retained().await {
            tracing::warn!(%error, "retention run failed");
        }
    })
    .await;
}

/// Issues every cluster's network projections every `settings.projection_sweep_ms`
/// (`Controller::sweep_projections`).
async fn run_projection_sweeps(controller: Arc<Controller>) {
    every(controller.settings.projection_sweep_ms, || controller.sweep_projections()).await;
}

/// How long the full pass waits before it corrects what it found, so a write whose own reconcile
/// is still in flight is not corrected (and counted) by it.
const FULL_PASS_GRACE: Duration = Duration::from_secs(1);

/// Runs the full pass over every cluster every `settings.reconcile_full_pass_ms`
/// (`Controller::full_pass_all`), one cluster after the other: at most one pass at a time, off
/// every request's path.
async fn run_full_passes(controller: Arc<Controller>) {
    every(controller.settings.reconcile_full_pass_ms, || controller.full_pass_all(FULL_PASS_GRACE)).await;
}

/// Registers the stop signals (SIGTERM, SIGINT) at once, so that a signal arriving any time after
/// the call — also right after "cloudly serving" is logged — stops the server gracefully rather
/// than killing it, and answers a future that ends at the first of them.
fn shutdown_signal() -> std::io::Result<impl Future<Output = ()>> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let mut terminate = signal(SignalKind::terminate())?;
        let mut interrupt = signal(SignalKind::interrupt())?;
        Ok(async move {
            tokio::select! {
                _ = terminate.recv() => {},
                _ = interrupt.recv() => {},
            }
        })
    }
    #[cfg(not(unix))]
    Ok(async {
        let _ = tokio::signal::ctrl_c().await;
    })
}
