//! PostgreSQL over TLS (`sslmode=require`, rustls) and the configurable pool size, against the
//! local server (which runs with `ssl=on`).

mod support;

use cloudly::store::{self, OpenOptions};
use sqlx::Connection as _;
use std::time::{Duration, Instant};
use support::database::{Backend, TestDatabase, pg_admin_url};

/// `url` with `parameters` added to its query.
fn with_parameters(url: &str, parameters: &str) -> String {
    let separator = if url.contains('?') { '&' } else { '?' };
    format!("{url}{separator}{parameters}")
}

/// The `ssl` column of `pg_stat_ssl` for every backend whose `application_name` is `application`.
async fn ssl_of_backends(admin: &mut sqlx::PgConnection, application: &str) -> Vec<bool> {
    sqlx::query_scalar(
        "SELECT s.ssl FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) WHERE a.application_name = $1",
    )
    .bind(application)
    .fetch_all(admin)
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_connects_with_sslmode_require_over_tls() {
    let database = TestDatabase::create(Backend::Postgres).await;
    // A connection of this build, in SQL: its own backend is encrypted.
    let mut own = sqlx::PgConnection::connect(&with_parameters(&database.url, "sslmode=require")).await.unwrap();
    let own_backend_ssl: bool = sqlx::query_scalar("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
        .fetch_one(&mut own)
        .await
        .unwrap();
    assert!(own_backend_ssl, "sslmode=require encrypts the connection");
    own.close().await.unwrap();
    // The store's own pool, opened (and migrated) through `sslmode=require`.
    let application = format!("cloudly_tls_{}", &uuid::Uuid::new_v4().simple().to_string()[..12]);
    let url = with_parameters(&database.url, &format!("sslmode=require&application_name={application}"));
    let store = store::open(&url).await.expect("open the store with sslmode=require");
    assert!(store.is_ready().await.unwrap());
    assert_eq!(store.list_clusters().await.unwrap(), Vec::new());
    let mut admin = sqlx::PgConnection::connect(&pg_admin_url()).await.unwrap();
    let backends = ssl_of_backends(&mut admin, &application).await;
    assert!(!backends.is_empty() && backends.iter().all(|ssl| *ssl), "every store connection uses TLS: {backends:?}");
    // The same check sees an unencrypted store connection as such.
    let plain_application = format!("{application}_plain");
    let plain_url = with_parameters(&database.url, &format!("sslmode=disable&application_name={plain_application}"));
    let plain_store = store::open(&plain_url).await.unwrap();
    assert!(plain_store.is_ready().await.unwrap());
    let plain_backends = ssl_of_backends(&mut admin, &plain_application).await;
    assert!(!plain_backends.is_empty() && plain_backends.iter().all(|ssl| !*ssl), "{plain_backends:?}");
    drop((store, plain_store));
    admin.close().await.unwrap();
    database.drop_now().await;
}

/// How many backends of `application` wait for a lock.
async fn backends_waiting_for_a_lock(observer: &mut sqlx::PgConnection, application: &str) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock'")
        .bind(application)
        .fetch_one(observer)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_postgres_pool_keeps_at_most_its_configured_connections() {
    let database = TestDatabase::create(Backend::Postgres).await;
    store::open(&database.url).await.unwrap();
    let application = format!("cloudly_pool_{}", &uuid::Uuid::new_v4().simple().to_string()[..12]);
    let url = with_parameters(&database.url, &format!("application_name={application}"));
    let store = store::open_with(&url, OpenOptions { postgres_max_connections: 2 }).await.unwrap();
    // Six reads wait behind a lock on the clusters table: each holds a pool connection while it
    // waits, so the pool's size is the number of backends that wait.
    let mut admin = sqlx::PgConnection::connect(&database.url).await.unwrap();
    sqlx::query("BEGIN").execute(&mut admin).await.unwrap();
    sqlx::query("LOCK TABLE clusters IN ACCESS EXCLUSIVE MODE").execute(&mut admin).await.unwrap();
    let readers: Vec<_> = (0..6)
        .map(|_| {
            let store = store.clone();
            tokio::spawn(async move { store.list_clusters().await })
        })
        .collect();
    let mut observer = sqlx::PgConnection::connect(&pg_admin_url()).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while backends_waiting_for_a_lock(&mut observer, &application).await < 2 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Give any further connection time to open and queue behind the lock.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        backends_waiting_for_a_lock(&mut observer, &application).await,
        2,
        "the pool opened exactly its two connections"
    );
    sqlx::query("COMMIT").execute(&mut admin).await.unwrap();
    for reader in readers {
        assert_eq!(reader.await.unwrap().unwrap(), Vec::new());
    }
    drop(store);
    admin.close().await.unwrap();
    observer.close().await.unwrap();
    database.drop_now().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cloudly_migrate_reaches_postgres_with_sslmode_require_and_config_shows_the_pool_size() {
    let database = TestDatabase::create(Backend::Postgres).await;
    let url = with_parameters(&database.url, "sslmode=require");
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_cloudly"))
        .args(["migrate", "--database-max-connections", "4"])
        .env("CLOUDLY_DATABASE_URL", &url)
        .env("CLOUDLY_DATA_DIR", std::env::temp_dir().join("cloudly-unused-data-dir"))
        .output()
        .await
        .unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    assert!(String::from_utf8_lossy(&output.stdout).contains("migrations applied"));
    let config = |arguments: &[&str], variable: Option<&str>| {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_cloudly"));
        command.arg("config").args(arguments).env_remove("CLOUDLY_DATABASE_MAX_CONNECTIONS");
        if let Some(value) = variable {
            command.env("CLOUDLY_DATABASE_MAX_CONNECTIONS", value);
        }
        command.output().unwrap()
    };
    let shown = |output: std::process::Output| -> serde_json::Value {
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
        serde_json::from_slice::<serde_json::Value>(&output.stdout).unwrap()["databaseMaxConnections"].clone()
    };
    assert_eq!(shown(config(&[], None)), 16);
    assert_eq!(shown(config(&["--database-max-connections", "4"], None)), 4);
    assert_eq!(shown(config(&[], Some("32"))), 32);
    assert_eq!(config(&["--database-max-connections", "0"], None).status.code(), Some(2));
    database.drop_now().await;
}
