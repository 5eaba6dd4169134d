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

mod registrations;
mod relays;
mod sessions;

use super::codec::{self, AppliedMigration, EmbeddedMigration, counter_to_sql, record_text};
use super::{Backend, DesignationWrite, StoreError, StoredCluster};
use crate::contract::Id;
use crate::contract::inventory::Organization;
use sqlx::Row as _;
use sqlx::postgres::{PgConnectOptions, PgConnection, PgPool, PgPoolOptions};
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
];

/// How many connections one controller process keeps to PostgreSQL.
pub const POSTGRES_POOL_SIZE: u32 = 16;

/// The PostgreSQL implementation of [`Store`].
#[derive(Debug, Clone)]
pub struct PostgresStore {
    pool: PgPool,
}

impl PostgresStore {
    /// Connects a pool of [`POSTGRES_POOL_SIZE`] connections to `url` (`postgres://…` or
    /// `postgresql://…`). Does not migrate. No error names the URL, which may hold a password.
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        let options = PgConnectOptions::from_str(url)
            .map_err(|_| StoreError::Unavailable("the PostgreSQL store URL does not parse".into()))?;
        Self::connect_with(options).await
    }

    /// Connects a pool with explicit connect options. Does not migrate.
    pub async fn connect_with(options: PgConnectOptions) -> Result<Self, StoreError> {
        // No ping before every acquire (`test_before_acquire`): it is a round trip per request,
        // and sqlx already pings every connection when it returns to the pool, closing a broken
        // one there. A connection that breaks while idle fails its next statement, which answers
        // `store-unavailable` for that one request; sqlx then discards the connection.
        let pool = PgPoolOptions::new()
            .max_connections(POSTGRES_POOL_SIZE)
            .test_before_acquire(false)
            .acquire_timeout(Duration::from_secs(10))
            .connect_with(options)
            .await
            .map_err(|error| StoreError::Unavailable(format!("cannot connect to PostgreSQL: {error}")))?;
        Ok(PostgresStore { pool })
    }

    /// A store over an existing pool. Does not migrate.
    pub fn from_pool(pool: PgPool) -> Self {
        PostgresStore { pool }
    }

    /// Closes the pool, waiting for connections in use to be returned.
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

/// The write of an accepted designation, in one statement: the guarded move of the head and,
/// only when it moved (`FROM head`), the generation, the sealed secret and the mutation record.
/// `$15` is the expected head generation of a rotation.
macro_rules! designation_write_sql {
    ($head:literal) => {
        concat!(
            "WITH head AS (",
            $head,
            " RETURNING cluster_id), \
             designation AS (INSERT INTO ingress_designations (cluster_id, generation, designation_id, digest, \
               ingress_service_id, prepared_spec_revision, record) SELECT $1, $2, $3, $4, $5, $6, $7 FROM head), \
             secret AS (INSERT INTO secret_versions (secret_id, secret_version_id, nonce, ciphertext, value_hash) \
               SELECT $8, $9, $10, $11, $12 FROM head), \
             mutation AS (INSERT INTO ingress_designation_mutations (cluster_id, mutation_id, request_canonical, \
               generation) SELECT $1, $13, $14, $2 FROM head) \
             SELECT count(*) FROM head"
        )
    };
}

/// Writes an accepted designation after the judge, under the cluster's lock; false (nothing
/// written) when the head is not at `current_generation`.
async fn write_designation(
    connection: &mut PgConnection,
    cluster_id: &Id,
    current_generation: Option<u64>,
    write: &DesignationWrite,
) -> Result<bool, StoreError> {
    let sql = match current_generation {
        None => designation_write_sql!(
            "INSERT INTO ingress_designation_heads (cluster_id, generation) VALUES ($1, $2) \
             ON CONFLICT (cluster_id) DO NOTHING"
        ),
        Some(_) => designation_write_sql!(
            "UPDATE ingress_designation_heads SET generation = $2 WHERE cluster_id = $1 AND generation = $15"
        ),
    };
    let designation = &write.designation;
    let query = sqlx::query(sql)
        .bind(cluster_id.as_str())
        .bind(counter_to_sql(designation.generation, "designation generation")?)
        .bind(designation.id.as_str())
        .bind(designation.digest.as_str())
        .bind(designation.ingress_service_id.as_str())
        .bind(counter_to_sql(designation.prepared_spec_revision, "prepared spec revision")?)
        .bind(record_text(designation, "ingress designation")?)
        .bind(write.secret.secret_id.as_str())
        .bind(write.secret.secret_version_id.as_str())
        .bind(write.secret.nonce.as_slice())
        .bind(write.secret.ciphertext.as_slice())
        .bind(write.secret.value_hash.as_slice())
        .bind(write.mutation_id.as_str())
        .bind(&write.request_canonical);
    let query = match current_generation {
        None => query,
        Some(current) => query.bind(counter_to_sql(current, "designation generation")?),
    };
    let moved: i64 = query.fetch_one(&mut *connection).await?.try_get(0)?;
    Ok(moved == 1)
}

/// Begins a write transaction; its first statement locks the cluster row ([`lock_cluster`]).
async fn begin_write(pool: &PgPool) -> Result<sqlx::Transaction<'static, sqlx::Postgres>, sqlx::Error> {
    pool.begin().await
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
            codec::migrator(MIGRATIONS).run(&self.pool).await.map_err(codec::migrate_error)
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
            .fetch_one(&self.pool)
            .await?;
            Ok(StoredOrganization {
                organization: organization.clone(),
                revision: counter_from_sql(revision, "organization revision")?,
            })
        }

        async fn list_clusters(&self) -> Result<Vec<StoredCluster>, StoreError> {
            sqlx::query("SELECT record, revision FROM clusters ORDER BY id COLLATE \"C\"")
                .fetch_all(&self.pool)
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
            .fetch_all(&self.pool)
            .await?
            .iter()
            .map(|row| node_from_row(cluster_id, row))
            .collect()
        }
    },
}
