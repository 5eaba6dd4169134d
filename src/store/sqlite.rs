//! Opening an embedded SQLite store (one box) for a `sqlite:…` URL. Everything else —
//! statements, transactions, migrations — is the same code for both backends (`sql.rs`,
//! `dialect.rs`).
//!
//! A file database runs in WAL mode (readers never block) with foreign keys on and a busy
//! timeout of [`SQLITE_BUSY_TIMEOUT`]. An in-memory database (`sqlite::memory:`) lives as long as
//! its one connection, so its pool holds exactly one connection that never expires.

use super::StoreError;
use super::sql::Pool;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use std::str::FromStr;
use std::time::Duration;

/// How many connections one process keeps to a SQLite file (readers run in parallel in WAL
/// mode; writers take turns on the database's write lock).
pub const SQLITE_POOL_SIZE: u32 = 8;

/// How long a writer waits for another writer's lock before the statement fails.
pub const SQLITE_BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// Opens `url`: `sqlite://path` (the file is created if missing) or an in-memory database
/// (`sqlite::memory:`, `sqlite://?mode=memory`). No error names the URL.
pub(crate) async fn connect(url: &str) -> Result<Pool, StoreError> {
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
        let options =
            options.create_if_missing(true).journal_mode(SqliteJournalMode::Wal).synchronous(SqliteSynchronous::Normal);
        (options, SqlitePoolOptions::new().max_connections(SQLITE_POOL_SIZE))
    };
    let pool = pool_options
        .acquire_timeout(Duration::from_secs(10))
        .connect_with(options)
        .await
        .map_err(|error| StoreError::Unavailable(format!("cannot open the SQLite database: {error}")))?;
    Ok(Pool::Sqlite(pool))
}
