//! Opening an embedded SQLite store (one box) for a `sqlite:…` URL. Everything else —
//! statements, transactions, migrations — is the same code for both backends (`sql.rs`,
//! `dialect.rs`).
//!
//! A file database runs in WAL mode (readers never block) with foreign keys on and a busy
//! timeout of [`SQLITE_BUSY_TIMEOUT`]. It is created with mode 0600, like the keys beside it;
//! SQLite gives its `-wal` and `-shm` files the database file's mode. When the store closes, the
//! WAL is checkpointed into the database file and truncated ([`checkpoint`]), so after a graceful
//! stop `cloudly.db` alone holds everything (a copy of it is a backup). An in-memory database
//! (`sqlite::memory:`) lives as long as its one connection, so its pool holds exactly one
//! connection that never expires.
//!
//! A file database's path is checked each time a connection is handed out ([`DatabaseFile`]):
//! once it no longer names the file this process opened (removed, or replaced by another file),
//! every statement is refused with [`StoreError::Unavailable`] and `/readyz` says so, because the
//! process's open descriptors would keep writing to a file that no restart finds.

use super::StoreError;
use super::sql::{DatabaseFile, Pool};
use sqlx::Row as _;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous};
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

/// How many connections one process keeps to a SQLite file (readers run in parallel in WAL
/// mode; writers take turns on the database's write lock).
pub const SQLITE_POOL_SIZE: u32 = 8;

/// How long a writer waits for another writer's lock before the statement fails.
pub const SQLITE_BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// Opens `url`: `sqlite://path` (the file is created if missing) or an in-memory database
/// (`sqlite::memory:`, `sqlite://?mode=memory`), with the database file's canonical path (`None`
/// in memory). No error names the URL.
pub(crate) async fn connect(url: &str) -> Result<(Pool, Option<PathBuf>), StoreError> {
    let in_memory = url.contains(":memory:") || url.contains("mode=memory");
    let options = SqliteConnectOptions::from_str(url)
        .map_err(|_| StoreError::Unavailable("the SQLite store URL does not parse".into()))?
        .foreign_keys(true)
        .busy_timeout(SQLITE_BUSY_TIMEOUT);
    let file = (!in_memory).then(|| options.get_filename().to_owned());
    let (options, pool_options) = if in_memory {
        // Every connection to `sqlite::memory:` would otherwise be its own empty database.
        let pool_options =
            SqlitePoolOptions::new().max_connections(1).min_connections(1).idle_timeout(None).max_lifetime(None);
        (options, pool_options)
    } else {
        create_private_database_file(options.get_filename())?;
        let options =
            options.create_if_missing(true).journal_mode(SqliteJournalMode::Wal).synchronous(SqliteSynchronous::Normal);
        (options, SqlitePoolOptions::new().max_connections(SQLITE_POOL_SIZE))
    };
    let pool = pool_options
        .acquire_timeout(Duration::from_secs(10))
        .connect_with(options)
        .await
        .map_err(|error| StoreError::Unavailable(format!("cannot open the SQLite database: {error}")))?;
    // The file exists now; its canonical path names it for the signals of this process.
    let file = file.map(|file| std::fs::canonicalize(&file).unwrap_or(file));
    let opened = match &file {
        Some(path) => Some(Arc::new(DatabaseFile::opened(path)?)),
        None => None,
    };
    Ok((Pool::Sqlite(pool, opened), file))
}

/// Creates the database file `path` empty with mode 0600 unless it exists (an empty file is an
/// empty SQLite database), so that neither it nor the `-wal` and `-shm` files SQLite creates with
/// its mode are readable by others. An existing file keeps the mode its operator gave it.
fn create_private_database_file(path: &Path) -> Result<(), StoreError> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    match options.open(path) {
        Ok(_) => Ok(()),
        Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(error) => Err(StoreError::Unavailable(format!("cannot create the SQLite database file: {error}"))),
    }
}

/// Copies every page of the WAL into the database file and truncates the WAL
/// (`PRAGMA wal_checkpoint(TRUNCATE)`), waiting up to the busy timeout for readers and writers of
/// other connections. Run as the store closes; a failure is logged, since the data is safe in the
/// WAL and SQLite checkpoints it at the next open.
pub(crate) async fn checkpoint(pool: &SqlitePool) {
    let checkpointed = async {
        let mut connection = pool.acquire().await?;
        sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)").fetch_one(&mut *connection).await
    }
    .await;
    match checkpointed {
        // `busy` is 1 when another connection kept the checkpoint from finishing.
        Ok(row) if row.try_get::<i64, _>(0).unwrap_or(1) == 0 => {}
        Ok(_) => {
            tracing::warn!("the SQLite WAL could not be checkpointed completely at close: another connection was busy")
        }
        Err(error) => tracing::warn!(%error, "the SQLite WAL could not be checkpointed at close"),
    }
}
