//! Opening a PostgreSQL store: the pool of connections (default [`POSTGRES_POOL_SIZE`] (`pool.rs`:
//! `deadpool` over sqlx connections) for a `postgres://…` URL. Everything else — statements,
//! transactions, migrations — is the same code for both backends (`sql.rs`, `dialect.rs`).

pub(crate) mod listener;
pub(crate) mod pool;

use super::StoreError;
use super::sql::Pool;
use sqlx::postgres::PgConnectOptions;
use std::str::FromStr;
use std::time::Duration;

/// How many connections one controller process keeps to PostgreSQL.
pub const POSTGRES_POOL_SIZE: u32 = 16;

/// Connects a pool of `pool_size` connections (at least one) to `url` (`postgres://…` or
/// `postgresql://…`) and checks that one connection opens. No error names the URL, which may hold
/// a password.
pub(crate) async fn connect(url: &str, pool_size: u32) -> Result<Pool, StoreError> {
    let options = PgConnectOptions::from_str(url)
        .map_err(|_| StoreError::Unavailable("the PostgreSQL store URL does not parse".into()))?;
    let pool = pool::Pool::new(options, pool_size.max(1) as usize, Duration::from_secs(10))?;
    drop(pool.acquire().await?);
    Ok(Pool::Postgres(pool))
}
