//! The PostgreSQL connection pool: `deadpool` over sqlx connections.
//!
//! sqlx's own pool pings every connection when it is returned (a `Sync` round trip per request,
//! `sqlx_core::pool::connection::Floating::return_to_pool`), and there is no setting to turn that
//! off. On this service's hot paths — a designation read is one statement — that ping was half
//! of the database round trips and about a third of the server's CPU (`docs/benchmarks.md`).
//! This pool hands connections back without a round trip and checks them when it has a reason:
//!
//! * **A connection is pinged before it is handed out** when a store statement failed anywhere
//!   in this process since the connection was last handed out (a restarted server, a broken
//!   socket: every connection is suspect then), or when it has been idle for longer than
//!   [`IDLE_CHECK`]. A failing ping discards it and the pool connects a new one.
//! * **A connection dropped inside a transaction is closed, not returned.** The store's
//!   transactions are [`PooledConnection::begin`] … [`PooledConnection::commit`] (or `rollback`)
//!   on the connection itself; from the moment `BEGIN` is sent until `COMMIT` or `ROLLBACK` has
//!   answered, dropping the connection — a request cancelled while it waits for a row lock, an
//!   error returned with `?` — closes its socket, so the server aborts the transaction and frees
//!   its locks at once instead of holding them until the connection's next use.
//! * A connection with unsent output (sqlx queued a message of a cancelled statement) is closed
//!   too. A single statement cut off mid-answer (no transaction) is drained by sqlx before the
//!   connection's next statement; if that statement failed, the next user sees its error once.

use super::super::StoreError;
use deadpool::managed::{self, Metrics, RecycleError, RecycleResult};
use sqlx::Connection as _;
use sqlx::postgres::{PgConnectOptions, PgConnection};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// A connection idle for longer than this is pinged before it is handed out.
pub const IDLE_CHECK: Duration = Duration::from_secs(30);

/// A checked-out connection; derefs to [`PgConnection`]. Dropped, it returns to the pool — or is
/// closed when it is inside a transaction or still has output to send (see the module docs).
pub struct PooledConnection {
    object: Option<managed::Object<Manager>>,
    /// True from the moment a `BEGIN` is sent until its `COMMIT` or `ROLLBACK` has answered.
    in_transaction: bool,
}

impl PooledConnection {
    /// Sends `statement` (a `BEGIN …`, in one round trip). Until [`PooledConnection::commit`] or
    /// [`PooledConnection::rollback`] answers, a drop closes the connection.
    pub async fn begin(&mut self, statement: &'static str) -> Result<(), sqlx::Error> {
        self.in_transaction = true;
        sqlx::raw_sql(statement).execute(&mut **self).await.inspect_err(note_statement_failure)?;
        Ok(())
    }

    /// Commits the transaction [`PooledConnection::begin`] opened.
    pub async fn commit(&mut self) -> Result<(), sqlx::Error> {
        self.finish("COMMIT").await
    }

    /// Rolls back the transaction [`PooledConnection::begin`] opened.
    pub async fn rollback(&mut self) -> Result<(), sqlx::Error> {
        self.finish("ROLLBACK").await
    }

    /// Ends the transaction; the connection may return to the pool once the answer arrived.
    async fn finish(&mut self, statement: &'static str) -> Result<(), sqlx::Error> {
        sqlx::raw_sql(statement).execute(&mut **self).await.inspect_err(note_statement_failure)?;
        self.in_transaction = false;
        Ok(())
    }
}

impl std::ops::Deref for PooledConnection {
    type Target = PgConnection;

    fn deref(&self) -> &PgConnection {
        self.object.as_ref().expect("present until dropped")
    }
}

impl std::ops::DerefMut for PooledConnection {
    fn deref_mut(&mut self) -> &mut PgConnection {
        self.object.as_mut().expect("present until dropped")
    }
}

impl Drop for PooledConnection {
    fn drop(&mut self) {
        if let Some(object) = self.object.take()
            && (self.in_transaction || object.should_flush())
        {
            // Out of the pool and dropped: the socket closes, the server rolls back.
            drop(managed::Object::take(object));
            tracing::info!("closed a PostgreSQL connection left mid-transaction");
        }
    }
}

/// The process's clock base for [`note_store_failure`].
fn base() -> Instant {
    static BASE: OnceLock<Instant> = OnceLock::new();
    *BASE.get_or_init(Instant::now)
}

/// Microseconds after [`base`] of the last failed store statement, plus one (0: none yet).
static LAST_FAILURE: AtomicU64 = AtomicU64::new(0);

/// Remembers that a store statement failed now, so every pooled connection handed out before
/// this moment is pinged at its next checkout.
fn note_store_failure() {
    let micros = u64::try_from(base().elapsed().as_micros()).unwrap_or(u64::MAX - 1) + 1;
    LAST_FAILURE.fetch_max(micros, Ordering::Relaxed);
}

/// [`note_store_failure`] for the error of a statement on a pooled connection (the store's
/// statements call it for every error PostgreSQL or the socket answered).
pub fn note_statement_failure(_error: &sqlx::Error) {
    note_store_failure();
}

/// True when a store statement failed at or after `since`.
fn failed_since(since: Instant) -> bool {
    let last = LAST_FAILURE.load(Ordering::Relaxed);
    if last == 0 {
        return false;
    }
    let failed_at = base() + Duration::from_micros(last - 1);
    failed_at >= since
}

/// Connects and checks PostgreSQL connections for the pool.
#[derive(Debug)]
pub struct Manager {
    options: PgConnectOptions,
}

impl managed::Manager for Manager {
    type Type = PgConnection;
    type Error = sqlx::Error;

    async fn create(&self) -> Result<PgConnection, sqlx::Error> {
        PgConnection::connect_with(&self.options).await
    }

    async fn recycle(&self, connection: &mut PgConnection, metrics: &Metrics) -> RecycleResult<sqlx::Error> {
        let last_checkout = metrics.recycled.unwrap_or(metrics.created);
        if failed_since(last_checkout) || metrics.last_used() > IDLE_CHECK {
            connection.ping().await.map_err(RecycleError::Backend)?;
        }
        Ok(())
    }
}

/// A pool of at most `size` connections.
#[derive(Debug, Clone)]
pub struct Pool {
    pool: managed::Pool<Manager>,
}

impl Pool {
    /// A pool over `options`; connects lazily, waits at most `acquire_timeout` for a connection.
    pub fn new(options: PgConnectOptions, size: usize, acquire_timeout: Duration) -> Result<Pool, StoreError> {
        let pool = managed::Pool::builder(Manager { options })
            .max_size(size)
            .wait_timeout(Some(acquire_timeout))
            .create_timeout(Some(acquire_timeout))
            .recycle_timeout(Some(acquire_timeout))
            .runtime(deadpool::Runtime::Tokio1)
            .build()
            .map_err(|error| StoreError::Unavailable(format!("cannot build the PostgreSQL pool: {error}")))?;
        Ok(Pool { pool })
    }

    /// The options every connection of the pool is opened with.
    pub fn options(&self) -> &PgConnectOptions {
        &self.pool.manager().options
    }

    /// What the pool holds now.
    pub fn status(&self) -> crate::store::PoolStatus {
        let status = self.pool.status();
        crate::store::PoolStatus {
            in_use: status.size.saturating_sub(status.available),
            idle: status.available,
            max: status.max_size,
        }
    }

    /// A connection, new or recycled.
    pub async fn acquire(&self) -> Result<PooledConnection, StoreError> {
        let object = self.pool.get().await.map_err(|error| {
            note_store_failure();
            let reason = match error {
                managed::PoolError::Backend(error) => format!("cannot connect to PostgreSQL: {error}"),
                managed::PoolError::Timeout(_) => "no PostgreSQL connection became free in time".to_owned(),
                managed::PoolError::Closed => "the PostgreSQL pool is closed".to_owned(),
                other => format!("the PostgreSQL pool failed: {other}"),
            };
            StoreError::Unavailable(reason)
        })?;
        Ok(PooledConnection { object: Some(object), in_transaction: false })
    }

    /// Closes the pool: idle connections are closed politely (`Terminate`), connections in use
    /// are closed when they come back.
    pub async fn close(&self) {
        let idle = self.pool.retain(|_, _| false).removed;
        self.pool.close();
        for connection in idle {
            let _ = connection.close().await;
        }
    }
}
