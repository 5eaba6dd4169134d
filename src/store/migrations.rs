//! The migrations of this build, embedded in the binary (one table for both backends: a version
//! has one file under `migrations/postgres/` and one under `migrations/sqlite/`), applied at
//! start-up and by `cloudly migrate`, and the readiness check: every one of them is applied and
//! the store takes a write.
//!
//! Two processes starting at once on one new database apply them once: on PostgreSQL sqlx's
//! migrator takes an advisory lock; on SQLite (where sqlx takes none) the migrator runs inside a
//! `BEGIN IMMEDIATE` transaction, which holds the database's write lock.

use super::StoreError;
use super::dialect::Backend;
use super::sql::{Pool, Row, Statement};
use sqlx::SqlSafeStr as _;
use sqlx::migrate::{Migration, MigrationType, Migrator};

/// One migration: its version, description and the SQL of each backend, embedded with
/// `include_str!` so the binary works from any directory.
struct EmbeddedMigration {
    /// The version (the files' number).
    version: i64,
    /// The description (the files' name after the number).
    description: &'static str,
    /// The file under `migrations/postgres/`.
    postgres: &'static str,
    /// The file under `migrations/sqlite/`.
    sqlite: &'static str,
}

/// Every migration of this build, oldest first.
const MIGRATIONS: &[EmbeddedMigration] = &[
    EmbeddedMigration {
        version: 1,
        description: "inventory and designations",
        postgres: include_str!("../../migrations/postgres/0001_inventory_and_designations.sql"),
        sqlite: include_str!("../../migrations/sqlite/0001_inventory_and_designations.sql"),
    },
    EmbeddedMigration {
        version: 2,
        description: "relays and routes",
        postgres: include_str!("../../migrations/postgres/0002_relays_and_routes.sql"),
        sqlite: include_str!("../../migrations/sqlite/0002_relays_and_routes.sql"),
    },
    EmbeddedMigration {
        version: 3,
        description: "sessions and assignments",
        postgres: include_str!("../../migrations/postgres/0003_sessions_and_assignments.sql"),
        sqlite: include_str!("../../migrations/sqlite/0003_sessions_and_assignments.sql"),
    },
    EmbeddedMigration {
        version: 4,
        description: "ingress registrations",
        postgres: include_str!("../../migrations/postgres/0004_ingress_registrations.sql"),
        sqlite: include_str!("../../migrations/sqlite/0004_ingress_registrations.sql"),
    },
    EmbeddedMigration {
        version: 5,
        description: "designation write set",
        postgres: include_str!("../../migrations/postgres/0005_designation_write_set.sql"),
        sqlite: include_str!("../../migrations/sqlite/0005_designation_write_set.sql"),
    },
    EmbeddedMigration {
        version: 6,
        description: "controller keys and readiness",
        postgres: include_str!("../../migrations/postgres/0006_controller_keys_and_readiness.sql"),
        sqlite: include_str!("../../migrations/sqlite/0006_controller_keys_and_readiness.sql"),
    },
    EmbeddedMigration {
        version: 7,
        description: "network",
        postgres: include_str!("../../migrations/postgres/0007_network.sql"),
        sqlite: include_str!("../../migrations/sqlite/0007_network.sql"),
    },
    EmbeddedMigration {
        version: 8,
        description: "service runtime status",
        postgres: include_str!("../../migrations/postgres/0008_service_runtime_status.sql"),
        sqlite: include_str!("../../migrations/sqlite/0008_service_runtime_status.sql"),
    },
    EmbeddedMigration {
        version: 9,
        description: "runtime local storage claims",
        postgres: include_str!("../../migrations/postgres/0009_runtime_local_storage_claims.sql"),
        sqlite: include_str!("../../migrations/sqlite/0009_runtime_local_storage_claims.sql"),
    },
    EmbeddedMigration {
        version: 10,
        description: "retention",
        postgres: include_str!("../../migrations/postgres/0010_retention.sql"),
        sqlite: include_str!("../../migrations/sqlite/0010_retention.sql"),
    },
    EmbeddedMigration {
        version: 11,
        description: "network projections",
        postgres: include_str!("../../migrations/postgres/0011_network_projections.sql"),
        sqlite: include_str!("../../migrations/sqlite/0011_network_projections.sql"),
    },
    EmbeddedMigration {
        version: 12,
        description: "controller key public keys",
        postgres: include_str!("../../migrations/postgres/0012_controller_key_public_keys.sql"),
        sqlite: include_str!("../../migrations/sqlite/0012_controller_key_public_keys.sql"),
    },
    EmbeddedMigration {
        version: 13,
        description: "projection store shape",
        postgres: include_str!("../../migrations/postgres/0013_projection_store_shape.sql"),
        sqlite: include_str!("../../migrations/sqlite/0013_projection_store_shape.sql"),
    },
    EmbeddedMigration {
        version: 14,
        description: "projection endpoint references",
        postgres: include_str!("../../migrations/postgres/0014_projection_endpoint_references.sql"),
        sqlite: include_str!("../../migrations/sqlite/0014_projection_endpoint_references.sql"),
    },
    EmbeddedMigration {
        version: 15,
        description: "incremental reconcile",
        postgres: include_str!("../../migrations/postgres/0015_incremental_reconcile.sql"),
        sqlite: include_str!("../../migrations/sqlite/0015_incremental_reconcile.sql"),
    },
    EmbeddedMigration {
        version: 16,
        description: "registration write set",
        postgres: include_str!("../../migrations/postgres/0016_registration_write_set.sql"),
        sqlite: include_str!("../../migrations/sqlite/0016_registration_write_set.sql"),
    },
];

/// One row of sqlx's `_sqlx_migrations` bookkeeping table.
pub(crate) struct AppliedMigration {
    /// The applied version.
    pub(crate) version: i64,
    /// Whether it finished.
    pub(crate) success: bool,
    /// The checksum of the SQL that was applied.
    pub(crate) checksum: Vec<u8>,
}

/// The migrations of `backend` as sqlx's (the same checksums as the files).
fn migrations(backend: Backend) -> Vec<Migration> {
    MIGRATIONS
        .iter()
        .map(|embedded| {
            let sql = match backend {
                Backend::Postgres => embedded.postgres,
                Backend::Sqlite => embedded.sqlite,
            };
            Migration::new(
                embedded.version,
                embedded.description.into(),
                MigrationType::Simple,
                sql.into_sql_str(),
                false,
            )
        })
        .collect()
}

/// A migration failure, without any connection detail.
fn migrate_error(error: sqlx::migrate::MigrateError) -> StoreError {
    StoreError::Unavailable(format!("migration failed: {error}"))
}

/// Applies every pending migration. sqlx's `migrate!` needs the `macros` feature, so the files
/// are handed to [`Migrator::with_migrations`].
pub(crate) async fn migrate(pool: &Pool) -> Result<(), StoreError> {
    let migrator = Migrator::with_migrations(migrations(pool.backend()));
    match pool {
        Pool::Postgres(pool) => {
            // The migrator takes an `Acquire` it can hold across its own awaits; a one-connection
            // sqlx pool of the same options is the simplest such thing (migrations run rarely).
            let single =
                sqlx::postgres::PgPoolOptions::new().max_connections(1).connect_with(pool.options().clone()).await?;
            let applied = migrator.run(&single).await.map_err(migrate_error);
            single.close().await;
            applied
        }
        Pool::Sqlite(pool, _) => {
            // Holding the write lock around the migrator serializes processes; the migrator's own
            // transactions become savepoints inside it.
            let mut transaction = pool.begin_with(Backend::Sqlite.begin_write()).await?;
            migrator.run_direct(None, &mut *transaction, false).await.map_err(migrate_error)?;
            transaction.commit().await?;
            Ok(())
        }
    }
}

/// True when the database answers, every migration of this build is applied, finished, and
/// applied with the same SQL, and the store takes a write: one autocommitted `UPDATE` of the
/// one-row `store_heartbeat` table (nothing else reads it), so a database that answers reads but
/// no longer commits — a SQLite data directory that became read-only or full, a PostgreSQL server
/// that turned read-only — is an error, as every write of a request would be. On PostgreSQL the
/// update of one row is a heap-only tuple update and one round trip, cheap enough to be polled.
pub(crate) async fn is_ready(pool: &Pool) -> Result<bool, StoreError> {
    let mut connection = pool.connection().await?;
    let table = Statement::new(pool.backend().migrations_table_exists()).fetch_one(&mut connection).await?;
    if !table.boolean("present")? {
        return Ok(false);
    }
    let applied: Vec<AppliedMigration> = Statement::new("SELECT version, success, checksum FROM _sqlx_migrations")
        .fetch_all_as(&mut connection, applied_migration_from_row)
        .await?;
    let all_applied = migrations(pool.backend()).iter().all(|expected| {
        applied
            .iter()
            .any(|row| row.version == expected.version && row.success && row.checksum.as_slice() == &*expected.checksum)
    });
    if !all_applied {
        return Ok(false);
    }
    let written =
        Statement::new("UPDATE store_heartbeat SET checks = checks + 1 WHERE id = 1").execute(&mut connection).await?;
    if written != 1 {
        return Err(StoreError::Corrupt("the store_heartbeat row is missing".into()));
    }
    Ok(true)
}

/// One row of sqlx's `_sqlx_migrations`: `version`, `success`, `checksum`.
pub(crate) fn applied_migration_from_row(row: &Row) -> Result<AppliedMigration, StoreError> {
    Ok(AppliedMigration {
        version: row.integer("version")?,
        success: row.boolean("success")?,
        checksum: row.bytes("checksum")?,
    })
}
