//! The embedded SQLite store (one box).
//!
//! **Concurrency.** Every write runs in a transaction opened with `BEGIN IMMEDIATE`, which takes
//! the database's write lock before the first statement: writers (also in other processes that
//! open the same file) serialize there, waiting up to the busy timeout, and a transaction never
//! has to upgrade a read lock to a write lock (which SQLite answers with `SQLITE_BUSY` at once).
//! So the designation judge reads the latest committed facts and nothing can commit between its
//! reading and the write. The designation head moves with a guarded statement whose row count
//! is checked, as on PostgreSQL. Readers never block in WAL mode.
//!
//! A file database runs in WAL mode with foreign keys on and a busy timeout of
//! [`SQLITE_BUSY_TIMEOUT`]. An in-memory database (`sqlite::memory:`) lives as long as its one
//! connection, so its pool holds exactly one connection that never expires.

mod registrations;
mod relays;
mod sessions;

use super::codec::{self, AppliedMigration, EmbeddedMigration, counter_to_sql, record_text};
use super::{Backend, DesignationWrite, StoreError, StoredCluster};
use crate::contract::Id;
use crate::contract::inventory::Organization;
use sqlx::Connection;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteConnection, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};
use std::str::FromStr;
use std::time::Duration;

/// The migrations of this build, embedded in the binary.
const MIGRATIONS: &[EmbeddedMigration] = &[
    EmbeddedMigration {
        version: 1,
        description: "inventory and designations",
        sql: include_str!("../../migrations/sqlite/0001_inventory_and_designations.sql"),
    },
    EmbeddedMigration {
        version: 2,
        description: "relays and routes",
        sql: include_str!("../../migrations/sqlite/0002_relays_and_routes.sql"),
    },
    EmbeddedMigration {
        version: 3,
        description: "sessions and assignments",
        sql: include_str!("../../migrations/sqlite/0003_sessions_and_assignments.sql"),
    },
    EmbeddedMigration {
        version: 4,
        description: "ingress registrations",
        sql: include_str!("../../migrations/sqlite/0004_ingress_registrations.sql"),
    },
    EmbeddedMigration {
        version: 5,
        description: "designation write set",
        sql: include_str!("../../migrations/sqlite/0005_designation_write_set.sql"),
    },
];

/// How many connections one process keeps to a SQLite file (readers run in parallel in WAL
/// mode; writers take turns on the database's write lock).
pub const SQLITE_POOL_SIZE: u32 = 8;

/// How long a writer waits for another writer's lock before the statement fails.
pub const SQLITE_BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// The SQLite implementation of [`Store`].
#[derive(Debug, Clone)]
pub struct SqliteStore {
    pool: SqlitePool,
}

impl SqliteStore {
    /// Opens `url`: `sqlite://path` (the file is created if missing) or an in-memory database
    /// (`sqlite::memory:`, `sqlite://?mode=memory`). Does not migrate. No error names the URL.
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        let in_memory = url.contains(":memory:") || url.contains("mode=memory");
        let options = SqliteConnectOptions::from_str(url)
            .map_err(|_| StoreError::Unavailable("the SQLite store URL does not parse".into()))?
            .foreign_keys(true)
            .busy_timeout(SQLITE_BUSY_TIMEOUT);
        let (options, pool_options) = if in_memory {
            // Every connection to `sqlite::memory:` would otherwise be its own empty database.
            let pool_options =
                SqlitePoolOptions::new().max_connections(1).min_connections(1).idle_timeout(None).max_lifetime(None);
            (options, pool_options)
        } else {
            let options = options
                .create_if_missing(true)
                .journal_mode(SqliteJournalMode::Wal)
                .synchronous(SqliteSynchronous::Normal);
            (options, SqlitePoolOptions::new().max_connections(SQLITE_POOL_SIZE))
        };
        let pool = pool_options
            .acquire_timeout(Duration::from_secs(10))
            .connect_with(options)
            .await
            .map_err(|error| StoreError::Unavailable(format!("cannot open the SQLite database: {error}")))?;
        Ok(SqliteStore { pool })
    }

    /// A store over an existing pool. Does not migrate. The pool's connections must enforce
    /// foreign keys and have a busy timeout.
    pub fn from_pool(pool: SqlitePool) -> Self {
        SqliteStore { pool }
    }

    /// Closes the pool, waiting for connections in use to be returned.
    pub async fn close(&self) {
        self.pool.close().await;
    }
}

/// Reads the cluster inside a `BEGIN IMMEDIATE` transaction, which already holds the write lock.
async fn lock_cluster(connection: &mut SqliteConnection, cluster_id: &Id) -> Result<Option<StoredCluster>, StoreError> {
    let row = sqlx::query("SELECT record, revision FROM clusters WHERE id = $1")
        .bind(cluster_id.as_str())
        .fetch_optional(&mut *connection)
        .await?;
    row.map(|row| cluster_from_row(&row)).transpose()
}

/// Writes an accepted designation after the judge, under the write lock: the guarded move of the
/// head and, only when it moved, the generation, the sealed secret and the mutation record (SQLite
/// has no data-modifying `WITH`; its statements cost no round trip). False (nothing written)
/// when the head is not at `current_generation`.
async fn write_designation(
    connection: &mut SqliteConnection,
    cluster_id: &Id,
    facts_version: i64,
    current_generation: Option<u64>,
    write: &DesignationWrite,
) -> Result<bool, StoreError> {
    let designation = &write.designation;
    let generation = counter_to_sql(designation.generation, "designation generation")?;
    let text = record_text(designation, "ingress designation")?;
    let moved = sqlx::query(
        "UPDATE clusters SET designation_generation = $2, facts_version = facts_version + 1 \
         WHERE id = $1 AND facts_version = $4 AND designation_generation IS NOT DISTINCT FROM $3",
    )
    .bind(cluster_id.as_str())
    .bind(generation)
    .bind(current_generation.map(|current| counter_to_sql(current, "designation generation")).transpose()?)
    .bind(facts_version)
    .execute(&mut *connection)
    .await?;
    if moved.rows_affected() != 1 {
        return Ok(false);
    }
    sqlx::query(
        "INSERT INTO ingress_designations (cluster_id, generation, designation_id, digest, ingress_service_id, \
           prepared_spec_revision, record, mutation_key, request_canonical) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
    )
    .bind(cluster_id.as_str())
    .bind(generation)
    .bind(designation.id.as_str())
    .bind(designation.digest.as_str())
    .bind(designation.ingress_service_id.as_str())
    .bind(counter_to_sql(designation.prepared_spec_revision, "prepared spec revision")?)
    .bind(&text)
    .bind(codec::mutation_key(cluster_id, &write.mutation_id))
    .bind(&write.request_canonical)
    .execute(&mut *connection)
    .await?;
    sqlx::query(
        "INSERT INTO secret_versions (secret_id, secret_version_id, nonce, ciphertext, value_hash) \
         VALUES ($1, $2, $3, $4, $5)",
    )
    .bind(write.secret.secret_id.as_str())
    .bind(write.secret.secret_version_id.as_str())
    .bind(write.secret.nonce.as_slice())
    .bind(write.secret.ciphertext.as_slice())
    .bind(write.secret.value_hash.as_slice())
    .execute(&mut *connection)
    .await?;
    codec::remember_written_designation(&text, designation);
    Ok(true)
}

/// Writes an accepted designation judged on facts read outside a transaction, in a write
/// transaction of its own; false (nothing written) as [`write_designation`].
async fn write_designation_alone(
    connection: &mut SqliteConnection,
    cluster_id: &Id,
    facts_version: i64,
    current_generation: Option<u64>,
    write: &DesignationWrite,
) -> Result<bool, StoreError> {
    let mut transaction = begin_write(connection).await?;
    if write_designation(&mut transaction, cluster_id, facts_version, current_generation, write).await? {
        transaction.commit().await?;
        Ok(true)
    } else {
        transaction.rollback().await?;
        Ok(false)
    }
}

/// Begins a write transaction with `BEGIN IMMEDIATE`, which takes the database's write lock.
async fn begin_write(connection: &mut SqliteConnection) -> Result<sqlx::Transaction<'_, sqlx::Sqlite>, sqlx::Error> {
    connection.begin_with("BEGIN IMMEDIATE").await
}

sql_store! {
    store: SqliteStore,
    connection: SqliteConnection,
    row: sqlx::sqlite::SqliteRow,
    cluster_row_changed: "the cluster row changed under the write lock",
    service_head_changed: "the service head changed under the write lock",
    own_methods: {
        fn backend(&self) -> Backend {
            Backend::Sqlite
        }

        async fn migrate(&self) -> Result<(), StoreError> {
            // sqlx takes no lock on SQLite, so two processes opening one new file at once would both
            // apply the migrations. Holding the write lock (`BEGIN IMMEDIATE`) around the migrator
            // serializes them; the migrator's own transactions become savepoints inside it.
            let mut connection = self.pool.acquire().await?;
            let mut transaction = connection.begin_with("BEGIN IMMEDIATE").await?;
            codec::migrator(MIGRATIONS).run_direct(None, &mut *transaction, false).await.map_err(codec::migrate_error)?;
            transaction.commit().await?;
            Ok(())
        }

        async fn is_ready(&self) -> Result<bool, StoreError> {
            let mut connection = self.pool.acquire().await?;
            let table_exists: bool = sqlx::query_scalar(
                "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = '_sqlx_migrations')",
            )
            .fetch_one(&mut *connection)
            .await?;
            if !table_exists {
                return Ok(false);
            }
            let applied = sqlx::query("SELECT version, success, checksum FROM _sqlx_migrations")
                .fetch_all(&mut *connection)
                .await?
                .iter()
                .map(|row| {
                    Ok(AppliedMigration {
                        version: row.try_get("version")?,
                        success: row.try_get("success")?,
                        checksum: row.try_get("checksum")?,
                    })
                })
                .collect::<Result<Vec<_>, sqlx::Error>>()?;
            Ok(codec::all_applied(MIGRATIONS, &applied))
        }

        async fn put_organization(&self, organization: &Organization) -> Result<StoredOrganization, StoreError> {
            let mut transaction = self.pool.begin_with("BEGIN IMMEDIATE").await?;
            let revision: i64 = sqlx::query_scalar(
                "INSERT INTO organizations (id, record, revision) VALUES ($1, $2, 1) \
                 ON CONFLICT (id) DO UPDATE SET record = EXCLUDED.record, revision = organizations.revision + 1 \
                 RETURNING revision",
            )
            .bind(organization.id.as_str())
            .bind(record_text(organization, "organization")?)
            .fetch_one(&mut *transaction)
            .await?;
            transaction.commit().await?;
            Ok(StoredOrganization {
                organization: organization.clone(),
                revision: counter_from_sql(revision, "organization revision")?,
            })
        }

        async fn list_clusters(&self) -> Result<Vec<StoredCluster>, StoreError> {
            sqlx::query("SELECT record, revision FROM clusters ORDER BY id")
                .fetch_all(&mut *self.pool.acquire().await?)
                .await?
                .iter()
                .map(cluster_from_row)
                .collect()
        }

        async fn list_nodes(&self, cluster_id: &Id) -> Result<Vec<StoredNode>, StoreError> {
            sqlx::query(
                "SELECT record, bearer_hash, revision FROM cluster_nodes WHERE cluster_id = $1 \
                 ORDER BY node_id",
            )
            .bind(cluster_id.as_str())
            .fetch_all(&mut *self.pool.acquire().await?)
            .await?
            .iter()
            .map(|row| node_from_row(cluster_id, row))
            .collect()
        }
    },
}
