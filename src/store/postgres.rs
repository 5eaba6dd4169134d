//! The PostgreSQL store (production).
//!
//! **Concurrency.** Every write that judges against a cluster's state runs in one transaction
//! that first locks the cluster row (`SELECT … FOR UPDATE`). Under READ COMMITTED every later
//! statement of the transaction sees what the previous lock holder committed, so the judge reads
//! the latest facts, and two controllers sharing one database serialize on the row lock. The
//! designation head moves with a guarded statement (`UPDATE … WHERE generation = expected`, or
//! `INSERT … ON CONFLICT DO NOTHING` for the first generation) whose row count is checked: a
//! second guard besides the lock. Migrations take sqlx's advisory lock, so two processes starting
//! at once apply them once.

pub(crate) mod pool;
mod registrations;
mod relays;
mod sessions;

use super::codec::{self, AppliedMigration, EmbeddedMigration, counter_to_sql, record_text};
use super::{Backend, DesignationWrite, StoreError, StoredCluster};
use crate::contract::Id;
use crate::contract::inventory::Organization;
use sqlx::Connection as _;
use sqlx::Row as _;
use sqlx::postgres::{PgConnectOptions, PgConnection};
use std::str::FromStr;
use std::time::Duration;

/// The migrations of this build, embedded in the binary.
const MIGRATIONS: &[EmbeddedMigration] = &[
    EmbeddedMigration {
        version: 1,
        description: "inventory and designations",
        sql: include_str!("../../migrations/postgres/0001_inventory_and_designations.sql"),
    },
    EmbeddedMigration {
        version: 2,
        description: "relays and routes",
        sql: include_str!("../../migrations/postgres/0002_relays_and_routes.sql"),
    },
    EmbeddedMigration {
        version: 3,
        description: "sessions and assignments",
        sql: include_str!("../../migrations/postgres/0003_sessions_and_assignments.sql"),
    },
    EmbeddedMigration {
        version: 4,
        description: "ingress registrations",
        sql: include_str!("../../migrations/postgres/0004_ingress_registrations.sql"),
    },
    EmbeddedMigration {
        version: 5,
        description: "designation write set",
        sql: include_str!("../../migrations/postgres/0005_designation_write_set.sql"),
    },
];

/// How many connections one controller process keeps to PostgreSQL.
pub const POSTGRES_POOL_SIZE: u32 = 16;

/// The PostgreSQL implementation of [`Store`].
#[derive(Debug, Clone)]
pub struct PostgresStore {
    pool: pool::Pool,
}

impl PostgresStore {
    /// Connects a pool of [`POSTGRES_POOL_SIZE`] connections to `url` (`postgres://…` or
    /// `postgresql://…`). Does not migrate. No error names the URL, which may hold a password.
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        Self::connect_with_pool_size(url, POSTGRES_POOL_SIZE).await
    }

    /// [`PostgresStore::connect`] with a pool of `pool_size` connections.
    pub async fn connect_with_pool_size(url: &str, pool_size: u32) -> Result<Self, StoreError> {
        let options = PgConnectOptions::from_str(url)
            .map_err(|_| StoreError::Unavailable("the PostgreSQL store URL does not parse".into()))?;
        Self::connect_with_options(options, pool_size).await
    }

    /// Connects a pool with explicit connect options and checks that one connection opens. Does
    /// not migrate.
    pub async fn connect_with(options: PgConnectOptions) -> Result<Self, StoreError> {
        Self::connect_with_options(options, POSTGRES_POOL_SIZE).await
    }

    async fn connect_with_options(options: PgConnectOptions, pool_size: u32) -> Result<Self, StoreError> {
        let pool = pool::Pool::new(options, pool_size.max(1) as usize, Duration::from_secs(10))?;
        drop(pool.acquire().await?);
        Ok(PostgresStore { pool })
    }

    /// Closes the pool: idle connections now, connections in use when they are returned.
    pub async fn close(&self) {
        self.pool.close().await;
    }
}

/// Locks the cluster row for the rest of the transaction; answers the cluster if it exists.
async fn lock_cluster(connection: &mut PgConnection, cluster_id: &Id) -> Result<Option<StoredCluster>, StoreError> {
    let row = sqlx::query("SELECT record, revision FROM clusters WHERE id = $1 FOR UPDATE")
        .bind(cluster_id.as_str())
        .fetch_optional(&mut *connection)
        .await?;
    row.map(|row| cluster_from_row(&row)).transpose()
}

/// The write of an accepted designation, in one statement (so also one transaction of its own):
/// the guarded move of the head in the cluster row and, only when it moved (`FROM head`), the
/// generation with its mutation record and the sealed secret. `$16` is the facts version the
/// judge's facts were read at, `$13` the expected head generation (NULL: none yet). Under READ
/// COMMITTED an `UPDATE` that meets a newer version of the row re-checks its condition on that
/// version, so a fact written after the read always fails the guard.
const DESIGNATION_WRITE_SQL: &str = "WITH head AS (UPDATE clusters \
       SET designation_generation = $2, facts_version = facts_version + 1 \
       WHERE id = $1 AND facts_version = $16 AND designation_generation IS NOT DISTINCT FROM $13 RETURNING id), \
     designation AS (INSERT INTO ingress_designations (cluster_id, generation, designation_id, digest, \
       ingress_service_id, prepared_spec_revision, record, mutation_key, request_canonical) \
       SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9 FROM head), \
     secret AS (INSERT INTO secret_versions (secret_id, secret_version_id, nonce, ciphertext, value_hash) \
       SELECT $10, $11, $12, $14, $15 FROM head) \
     SELECT count(*) FROM head";

/// Writes an accepted designation; false (nothing written) when the cluster's facts are no longer
/// at `facts_version` or the head is not at `current_generation`. Atomic on its own (one
/// statement), inside a transaction or not.
async fn write_designation(
    connection: &mut PgConnection,
    cluster_id: &Id,
    facts_version: i64,
    current_generation: Option<u64>,
    write: &DesignationWrite,
) -> Result<bool, StoreError> {
    let designation = &write.designation;
    let current_generation =
        current_generation.map(|current| counter_to_sql(current, "designation generation")).transpose()?;
    let text = record_text(designation, "ingress designation")?;
    let moved: i64 = sqlx::query(DESIGNATION_WRITE_SQL)
        .bind(cluster_id.as_str())
        .bind(counter_to_sql(designation.generation, "designation generation")?)
        .bind(designation.id.as_str())
        .bind(designation.digest.as_str())
        .bind(designation.ingress_service_id.as_str())
        .bind(counter_to_sql(designation.prepared_spec_revision, "prepared spec revision")?)
        .bind(&text)
        .bind(codec::mutation_key(cluster_id, &write.mutation_id))
        .bind(&write.request_canonical)
        .bind(write.secret.secret_id.as_str())
        .bind(write.secret.secret_version_id.as_str())
        .bind(write.secret.nonce.as_slice())
        .bind(current_generation)
        .bind(write.secret.ciphertext.as_slice())
        .bind(write.secret.value_hash.as_slice())
        .bind(facts_version)
        .fetch_one(&mut *connection)
        .await?
        .try_get(0)?;
    if moved == 1 {
        codec::remember_written_designation(&text, designation);
    }
    Ok(moved == 1)
}

// A designation judged on facts read outside a transaction is written by the same one statement,
// which is its own transaction.
use write_designation as write_designation_alone;

/// Begins a write transaction; its first statement locks the cluster row ([`lock_cluster`]).
async fn begin_write(connection: &mut PgConnection) -> Result<sqlx::Transaction<'_, sqlx::Postgres>, sqlx::Error> {
    connection.begin().await
}

sql_store! {
    store: PostgresStore,
    connection: PgConnection,
    row: sqlx::postgres::PgRow,
    cluster_row_changed: "the locked cluster row changed under its lock",
    service_head_changed: "the service head changed under the cluster lock",
    own_methods: {
        fn backend(&self) -> Backend {
            Backend::Postgres
        }

        async fn migrate(&self) -> Result<(), StoreError> {
            // sqlx's migrator takes an `Acquire` it can hold across its own awaits; a one-connection
            // sqlx pool of the same options is the simplest such thing (migrations run rarely).
            let pool = sqlx::postgres::PgPoolOptions::new()
                .max_connections(1)
                .connect_with(self.pool.options().clone())
                .await?;
            let applied = codec::migrator(MIGRATIONS).run(&pool).await.map_err(codec::migrate_error);
            pool.close().await;
            applied
        }

        async fn is_ready(&self) -> Result<bool, StoreError> {
            let mut connection = self.pool.acquire().await?;
            let table_exists: bool = sqlx::query_scalar("SELECT to_regclass('_sqlx_migrations') IS NOT NULL")
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
            let revision: i64 = sqlx::query_scalar(
                "INSERT INTO organizations (id, record, revision) VALUES ($1, $2, 1) \
                 ON CONFLICT (id) DO UPDATE SET record = EXCLUDED.record, revision = organizations.revision + 1 \
                 RETURNING revision",
            )
            .bind(organization.id.as_str())
            .bind(record_text(organization, "organization")?)
            .fetch_one(&mut *self.pool.acquire().await?)
            .await?;
            Ok(StoredOrganization {
                organization: organization.clone(),
                revision: counter_from_sql(revision, "organization revision")?,
            })
        }

        async fn list_clusters(&self) -> Result<Vec<StoredCluster>, StoreError> {
            sqlx::query("SELECT record, revision FROM clusters ORDER BY id COLLATE \"C\"")
                .fetch_all(&mut *self.pool.acquire().await?)
                .await?
                .iter()
                .map(cluster_from_row)
                .collect()
        }

        async fn list_nodes(&self, cluster_id: &Id) -> Result<Vec<StoredNode>, StoreError> {
            sqlx::query(
                "SELECT record, bearer_hash, revision FROM cluster_nodes WHERE cluster_id = $1 \
                 ORDER BY node_id COLLATE \"C\"",
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
