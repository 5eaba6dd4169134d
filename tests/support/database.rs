//! One throwaway database per test, on either backend: SQLite in a temporary directory, or a
//! fresh PostgreSQL database created on the server named by `CLOUDLY_TEST_PG_ADMIN_URL` (default
//! `postgres://postgres@127.0.0.1:5432/postgres`) and dropped after the test. A PostgreSQL test
//! that cannot reach the server fails; it never skips.

use cloudly::store::{SharedStore, SqlStore};
use sqlx::{AssertSqlSafe, Connection as _};
use std::path::PathBuf;
use std::sync::Arc;

pub use cloudly::store::Backend;

/// The default of `CLOUDLY_TEST_PG_ADMIN_URL`.
pub const DEFAULT_ADMIN_URL: &str = "postgres://postgres@127.0.0.1:5432/postgres";

/// The PostgreSQL server tests create their databases on.
pub fn pg_admin_url() -> String {
    std::env::var("CLOUDLY_TEST_PG_ADMIN_URL").unwrap_or_else(|_| DEFAULT_ADMIN_URL.to_owned())
}

/// `admin_url` with its database replaced by `database` (query parameters kept).
pub fn url_with_database(admin_url: &str, database: &str) -> String {
    let (base, query) = match admin_url.find('?') {
        Some(at) => admin_url.split_at(at),
        None => (admin_url, ""),
    };
    let authority_start = base.find("://").map_or(0, |at| at + 3);
    let server = match base[authority_start..].find('/') {
        Some(slash) => &base[..authority_start + slash],
        None => base,
    };
    format!("{server}/{database}{query}")
}

/// The `host:port` of a PostgreSQL URL.
pub fn server_of(url: &str) -> &str {
    let rest = url.find("://").map_or(url, |at| &url[at + 3..]);
    let authority = &rest[..rest.find(['/', '?']).unwrap_or(rest.len())];
    authority.rsplit_once('@').map_or(authority, |(_, server)| server)
}

/// A connection to the administration database of the test server.
pub async fn admin_connection() -> sqlx::PgConnection {
    sqlx::PgConnection::connect(&pg_admin_url()).await.unwrap_or_else(|error| {
        panic!(
            "PostgreSQL does not answer at CLOUDLY_TEST_PG_ADMIN_URL (default {DEFAULT_ADMIN_URL}): {error}; \
             start it (pg_ctlcluster --skip-systemctl-redirect <version> main start) or run scripts/test.sh — \
             the PostgreSQL tests never skip"
        )
    })
}

/// A database that exists for one test. [`TestDatabase::drop_now`] removes it; a test that
/// panics before leaves none behind either ([`Drop`]).
pub struct TestDatabase {
    /// Its backend.
    pub backend: Backend,
    /// The store URL of the database.
    pub url: String,
    /// The PostgreSQL database's name.
    name: Option<String>,
    /// The SQLite database's directory.
    dir: Option<PathBuf>,
}

impl TestDatabase {
    /// A fresh, empty database of `backend`.
    pub async fn create(backend: Backend) -> TestDatabase {
        let unique = uuid::Uuid::new_v4().simple().to_string();
        match backend {
            Backend::Sqlite => {
                let dir = std::env::temp_dir().join(format!("cloudly-test-{unique}"));
                std::fs::create_dir_all(&dir).unwrap();
                let url = format!("sqlite://{}", dir.join("cloudly.db").display());
                TestDatabase { backend, url, name: None, dir: Some(dir) }
            }
            Backend::Postgres => {
                let name = format!("cloudly_t_{}", &unique[..20]);
                let mut admin = admin_connection().await;
                sqlx::query(AssertSqlSafe(format!("CREATE DATABASE {name}")))
                    .execute(&mut admin)
                    .await
                    .unwrap_or_else(|error| panic!("CREATE DATABASE {name}: {error}"));
                admin.close().await.ok();
                TestDatabase { backend, url: url_with_database(&pg_admin_url(), &name), name: Some(name), dir: None }
            }
        }
    }

    /// The PostgreSQL database's name (`None` on SQLite).
    pub fn postgres_name(&self) -> Option<&str> {
        self.name.as_deref()
    }

    /// A new store (a pool of its own, as another process would have) on this database, not
    /// migrated.
    pub async fn connect(&self) -> SharedStore {
        Arc::new(SqlStore::connect(&self.url).await.expect("open the test database"))
    }

    /// Runs one raw statement beside the store (to damage a row on purpose).
    pub async fn execute(&self, sql: &str) {
        self.run_raw(None, &[sql.to_owned()]).await;
    }

    /// Runs `migrator` (when given) and then `statements` beside the store, through a pool of
    /// their own.
    pub async fn run_raw(&self, migrator: Option<&sqlx::migrate::Migrator>, statements: &[String]) {
        match self.backend {
            Backend::Sqlite => {
                run_raw_on(sqlx::SqliteConnection::connect(&self.url).await.unwrap(), migrator, statements).await
            }
            Backend::Postgres => {
                run_raw_on(sqlx::PgConnection::connect(&self.url).await.unwrap(), migrator, statements).await
            }
        }
    }

    /// Drops the database (PostgreSQL) or removes its directory (SQLite).
    pub async fn drop_now(mut self) {
        if let Some(name) = self.name.take()
            && let Ok(mut admin) = sqlx::PgConnection::connect(&pg_admin_url()).await
        {
            let _ = sqlx::query(AssertSqlSafe(format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")))
                .execute(&mut admin)
                .await;
            admin.close().await.ok();
        }
        if let Some(dir) = self.dir.take() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

impl Drop for TestDatabase {
    /// A test that panicked (or forgot `drop_now`) still leaves no database behind.
    fn drop(&mut self) {
        if let Some(name) = self.name.take() {
            let _ = std::process::Command::new("psql")
                .arg(pg_admin_url())
                .args(["-qc", &format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")])
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .status();
        }
        if let Some(dir) = self.dir.take() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// [`TestDatabase::run_raw`] on one connection of either backend.
async fn run_raw_on<C>(mut connection: C, migrator: Option<&sqlx::migrate::Migrator>, statements: &[String])
where
    C: sqlx::Connection + sqlx::migrate::Migrate,
    for<'c> &'c mut C: sqlx::Executor<'c, Database = C::Database>,
    <C::Database as sqlx::Database>::Arguments: sqlx::IntoArguments<C::Database>,
{
    if let Some(migrator) = migrator {
        migrator.run_direct(None, &mut connection, false).await.unwrap();
    }
    for statement in statements {
        sqlx::query::<C::Database>(AssertSqlSafe(statement.clone())).execute(&mut connection).await.unwrap();
    }
    connection.close().await.ok();
}
