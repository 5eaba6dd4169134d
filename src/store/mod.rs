//! The store: what the domain keeps, one trait per feature ([`InventoryStore`],
//! [`DesignationStore`], [`RelayStore`], [`SessionStore`], [`AssignmentStore`], [`RegistrationStore`],
//! [`ServiceStatusStore`], [`StorageClaimStore`], [`RetentionStore`], [`KeyRecordStore`],
//! [`NetworkStore`], [`ProjectionStore`], [`SignalStore`]) joined in [`Store`], implemented once by
//! [`SqlStore`] for PostgreSQL (production) and an embedded SQLite (one box).
//!
//! **Architecture invariant: only this module knows SQL.** Queries are runtime queries, so no
//! build needs a live database. Every statement is written once for both backends (`sql.rs`);
//! where the dialects differ, a statement asks its [`Backend`] (`dialect.rs`). Every record's row
//! reader (`*_from_row`) is next to the feature that owns the record; a statement that answers one plain column (a flag, a count, a tag)
//! reads it where it runs. Both backends pass one conformance suite (`tests/store_conformance.rs`).
//!
//! **Architecture invariant: the store stores; it does not judge.** It reads facts and writes
//! what the domain decided, with guarded statements that write nothing when the facts moved. It
//! never calls into the domain; where a decision must be taken under a lock, it hands the domain a
//! locked transaction ([`LockedDesignation`], [`LockedAssignments`]), or it takes the domain's
//! guard and writes only while it holds ([`ClusterGuard`]).
//!
//! **Architecture invariant: no secret value leaves the store except sealed.** The store keeps
//! bearer values only as AEAD ciphertext plus a SHA-256 hash; it never sees plaintext.

use async_trait::async_trait;
use std::sync::Arc;

pub mod assignments;
mod codec;
mod designations;
mod dialect;
pub mod heads;
mod inventory;
mod key_records;
mod migrations;
pub mod network;
mod postgres;
pub mod projections;
pub mod registrations;
pub mod relays;
mod retention;
pub mod service_status;
pub mod sessions;
pub mod signals;
mod sql;
mod sqlite;
pub mod storage_claims;

pub use assignments::{AssignmentStore, LockedAssignments};
pub use designations::{
    DesignationSnapshot, DesignationStore, DesignationWrite, LockedDesignation, RecordedMutation, SealedSecret,
};
pub use dialect::Backend;
pub use inventory::{InventoryStore, NodeBearerHash, NodeWritten, StoredCluster, StoredNode, StoredOrganization};
pub use key_records::{KeyRecord, KeyRecordStore, KeyRole};
pub use network::{LeaseWriter, LockedNetwork, NetworkStore, StoredNetworkPlan};
pub use postgres::POSTGRES_POOL_SIZE;
pub use projections::ProjectionStore;
pub use registrations::RegistrationStore;
pub use relays::RelayStore;
pub use retention::RetentionStore;
pub use service_status::ServiceStatusStore;
pub use sessions::SessionStore;
pub use signals::{ChangeKind, Signal, SignalStore, SignalSubscription};
pub use sql::LockedWrite;
pub use sqlite::{SQLITE_BUSY_TIMEOUT, SQLITE_POOL_SIZE};
pub use storage_claims::StorageClaimStore;

/// Why the store could not answer. The detail is for the log, never for a caller.
/// How many connections a pool holds now and may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PoolStatus {
    /// Connections checked out (a statement or a transaction runs on them).
    pub in_use: usize,
    /// Open connections waiting in the pool.
    pub idle: usize,
    /// The most connections the pool opens.
    pub max: usize,
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database did not answer or failed the statement.
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// A stored row does not read back as the record it must be, or a write breaks a rule of the
    /// store (a bug in the caller).
    #[error("stored data is corrupt: {0}")]
    Corrupt(String),
}

impl From<sqlx::Error> for StoreError {
    fn from(error: sqlx::Error) -> Self {
        StoreError::Unavailable(error.to_string())
    }
}

/// The outcome of a compare-and-swap write of a record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PutOutcome<T> {
    /// Written at the new revision.
    Written(T),
    /// `expectedRevision` is not the current revision (`None` when the record does not exist).
    RevisionConflict {
        /// The current revision, or `None` when there is no record.
        current: Option<u64>,
    },
    /// A record this one names (organization, cluster) does not exist.
    Missing(MissingKind),
    /// The write's guard besides the revision did not hold ([`ClusterGuard`]); nothing written.
    GuardFailed,
}

/// What must hold of a stored cluster, besides its revision, for `put_cluster` to write it; read
/// under the cluster's lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClusterGuard {
    /// Nothing more.
    Revision,
    /// The cluster holds no ingress designation.
    NoDesignation,
}

/// The services a reconcile reads and decides for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FactScope {
    /// Every service of the cluster (the full pass, a plan write).
    Cluster,
    /// These services only (what a write touches), with the nodes their specs place them on.
    Services(std::collections::BTreeSet<crate::contract::Id>),
}

impl FactScope {
    /// True when the scope covers `service_id`.
    pub fn covers(&self, service_id: &crate::contract::Id) -> bool {
        match self {
            FactScope::Cluster => true,
            FactScope::Services(services) => services.contains(service_id),
        }
    }
}

/// Which named record is missing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MissingKind {
    /// `what: "organization"`.
    Organization,
    /// `what: "cluster"`.
    Cluster,
    /// `what: "service"`.
    Service,
    /// `what: "node"`.
    Node,
    /// `what: "storage-claim"`.
    StorageClaim,
    /// `what: "projection"`.
    Projection,
}

impl MissingKind {
    /// The `what` of a `not-found` answer.
    pub fn what(self) -> &'static str {
        match self {
            MissingKind::Organization => "organization",
            MissingKind::Cluster => "cluster",
            MissingKind::Service => "service",
            MissingKind::Node => "node",
            MissingKind::StorageClaim => "storage-claim",
            MissingKind::Projection => "projection",
        }
    }
}

/// The store, as the domain sees it: every feature's trait, plus the database's own lifecycle.
/// Methods name domain operations, not tables.
#[async_trait]
pub trait Store:
    InventoryStore
    + DesignationStore
    + RelayStore
    + SessionStore
    + AssignmentStore
    + RegistrationStore
    + ServiceStatusStore
    + RetentionStore
    + StorageClaimStore
    + KeyRecordStore
    + NetworkStore
    + ProjectionStore
    + SignalStore
    + Send
    + Sync
    + 'static
{
    /// Which backend this is.
    fn backend(&self) -> Backend;

    /// How many connections the store's pool holds now (the gauges of `/metrics`).
    fn pool_status(&self) -> PoolStatus;

    /// Applies every pending migration.
    async fn migrate(&self) -> Result<(), StoreError>;

    /// True when the database answers, every migration of this build is applied and the store
    /// takes a write (a one-row heartbeat update that nothing reads); an error when it does not
    /// answer or does not take the write.
    async fn is_ready(&self) -> Result<bool, StoreError>;

    /// Closes the store ([`SqlStore::close`]): after a graceful stop a SQLite database file holds
    /// everything, its WAL checkpointed and truncated.
    async fn close(&self);
}

/// A shared store handle.
pub type SharedStore = Arc<dyn Store>;

/// The one implementation of [`Store`]: a pool of either backend. Every feature's statements run
/// on both (`sql.rs`); the feature traits are implemented in their own files.
#[derive(Debug, Clone)]
pub struct SqlStore {
    pool: sql::Pool,
    /// This store's end of the signals between controller processes (`signals.rs`).
    signals: Arc<signals::SignalHub>,
}

impl SqlStore {
    /// Opens a pool for `url` without migrating: PostgreSQL for `postgres://…` and
    /// `postgresql://…` (checking that one connection opens), embedded SQLite for `sqlite:…`
    /// (`sqlite://path`, created if missing, or `sqlite::memory:`). No error names the URL, which
    /// may hold a password.
    pub async fn connect(url: &str) -> Result<SqlStore, StoreError> {
        SqlStore::connect_with(url, OpenOptions::default()).await
    }

    /// [`SqlStore::connect`] with explicit [`OpenOptions`].
    pub async fn connect_with(url: &str, options: OpenOptions) -> Result<SqlStore, StoreError> {
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            let pool = postgres::connect(url, options.postgres_max_connections).await?;
            Ok(SqlStore { pool, signals: signals::SignalHub::for_postgres() })
        } else if url.starts_with("sqlite:") {
            let (pool, file) = sqlite::connect(url).await?;
            Ok(SqlStore { pool, signals: signals::SignalHub::for_sqlite_file(file) })
        } else {
            Err(StoreError::Unavailable("the store URL must start with postgres://, postgresql:// or sqlite:".into()))
        }
    }

    /// A store over an existing SQLite pool. Does not migrate. The pool's connections must
    /// enforce foreign keys and have a busy timeout. Its signals reach the subscribers of this
    /// store only.
    pub fn from_sqlite_pool(pool: sqlx::SqlitePool) -> SqlStore {
        SqlStore { pool: sql::Pool::Sqlite(pool, None), signals: signals::SignalHub::for_sqlite_file(None) }
    }

    /// Closes the pool: idle connections now, connections in use when they are returned. A SQLite
    /// file database first checkpoints its WAL into the database file and truncates it, so the
    /// database file alone holds everything once the store is closed. The signal listener stops.
    pub async fn close(&self) {
        self.signals.stop();
        if let sql::Pool::Sqlite(pool, _) = &self.pool {
            sqlite::checkpoint(pool).await;
        }
        self.pool.close().await;
    }
}

#[async_trait]
impl Store for SqlStore {
    fn backend(&self) -> Backend {
        self.pool.backend()
    }

    fn pool_status(&self) -> PoolStatus {
        self.pool.status()
    }

    async fn migrate(&self) -> Result<(), StoreError> {
        migrations::migrate(&self.pool).await
    }

    async fn is_ready(&self) -> Result<bool, StoreError> {
        migrations::is_ready(&self.pool).await
    }

    async fn close(&self) {
        SqlStore::close(self).await;
    }
}

/// How a store is opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenOptions {
    /// The most connections the process keeps to PostgreSQL (ignored by SQLite).
    pub postgres_max_connections: u32,
}

impl Default for OpenOptions {
    fn default() -> Self {
        OpenOptions { postgres_max_connections: POSTGRES_POOL_SIZE }
    }
}

/// Opens the store named by `url` ([`SqlStore::connect`]) and applies every pending migration.
pub async fn open(url: &str) -> Result<SharedStore, StoreError> {
    open_with(url, OpenOptions::default()).await
}

/// [`open`] with explicit [`OpenOptions`].
pub async fn open_with(url: &str, options: OpenOptions) -> Result<SharedStore, StoreError> {
    let store: SharedStore = Arc::new(SqlStore::connect_with(url, options).await?);
    store.migrate().await?;
    Ok(store)
}
