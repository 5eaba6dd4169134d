//! Readiness tells the truth about an embedded SQLite store, with the real binary: `/readyz` is
//! 503 while the data directory takes no writes; a graceful stop leaves everything in
//! `cloudly.db` (the WAL checkpointed and truncated), so a copy of that one file is a backup; the
//! database and its `-wal` and `-shm` files are created mode 0600. On PostgreSQL, a store that
//! does not answer is `/readyz` 503 once the last ready outcome is older than `READINESS_REUSE`,
//! each call within `READINESS_TIMEOUT`, not after the pool's timeouts.
//!
//! How the data directory is made read-only: the tests run as root, which writes through file
//! modes (`chmod` changes nothing for it), and a read-only bind mount is not available. The
//! immutable attribute (`chattr +i`, which needs `CAP_LINUX_IMMUTABLE`) binds root too and, unlike
//! a mode, also refuses writes through file descriptors that are already open — as a file system
//! remounted read-only after an error, or a full one, does — so the running process's own pooled
//! connections meet it: every write fails, reads still answer, exactly the operator's situation.

mod support;

use cloudly::api::{READINESS_REUSE, READINESS_TIMEOUT};
use cloudly::client::CallError;
use cloudly::contract::Id;
use cloudly::store::{InventoryStore as _, SqlStore};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};
use support::database::{Backend, TestDatabase};
use support::process::{Scratch, Serving, start};

/// The default store of a data directory: `sqlite://<data dir>/cloudly.db`.
fn sqlite_url(data_dir: &Path) -> String {
    format!("sqlite://{}", data_dir.join("cloudly.db").display())
}

/// `GET <path>`: the status and the JSON body.
async fn get(serving: &Serving, path: &str) -> (u16, Value) {
    // reqwest's TLS needs a process-wide crypto provider, whichever test asks first.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let response = reqwest::get(format!("{}{path}", serving.base_url)).await.unwrap();
    let status = response.status().as_u16();
    (status, serde_json::from_slice(&response.bytes().await.unwrap()).unwrap())
}

/// The immutable attribute on a data directory, its database file and its WAL, removed again when
/// dropped (so that a failing test still leaves a removable directory). Not on the `-shm` file:
/// SQLite maps it into memory, and a store to an immutable mapping kills the process (`SIGBUS`).
struct Immutable(Vec<PathBuf>);

impl Immutable {
    fn set(data_dir: &Path) -> Immutable {
        let paths = vec![data_dir.to_owned(), data_dir.join("cloudly.db"), data_dir.join("cloudly.db-wal")];
        let guard = Immutable(paths.clone());
        let status = Command::new("chattr").arg("+i").args(&paths).status().expect("run chattr");
        assert!(status.success(), "chattr +i failed: the test needs CAP_LINUX_IMMUTABLE and an ext4-like file system");
        guard
    }
}

impl Drop for Immutable {
    fn drop(&mut self) {
        let _ = Command::new("chattr").arg("-i").args(&self.0).status();
    }
}

fn organization(id: &str) -> Value {
    json!({ "organization": { "id": id, "name": "Org" } })
}

/// `cloudly serve` on the default store of `<scratch>/data`, holding the organization `org`.
async fn serving_with_an_organization(scratch: &Scratch) -> (Serving, PathBuf) {
    let data_dir = scratch.join("data");
    let serving = start(&data_dir, &sqlite_url(&data_dir)).serving();
    serving.call_as_admin("putOrganization", organization("org")).await.unwrap();
    (serving, data_dir)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_is_unavailable_while_the_sqlite_data_directory_takes_no_writes() {
    let scratch = Scratch::new("cloudly-ready");
    let (serving, data_dir) = serving_with_an_organization(&scratch).await;
    assert_eq!(get(&serving, "/readyz").await, (200, json!({ "ready": true })));

    let read_only = Immutable::set(&data_dir);
    // Every write fails, as the operator saw it …
    let refused = serving.call_as_admin("putOrganization", organization("other")).await.unwrap_err();
    assert!(matches!(&refused, CallError::Typed(error) if error.code() == "store-unavailable"), "{refused}");
    // … and readiness says so.
    assert_eq!(get(&serving, "/readyz").await, (503, json!({ "ready": false, "reason": "store-unavailable" })));
    assert_eq!(get(&serving, "/healthz").await.0, 200, "the process itself is alive");

    drop(read_only);
    assert_eq!(get(&serving, "/readyz").await, (200, json!({ "ready": true })), "ready again once writes commit");
    let written = serving.call_as_admin("putOrganization", organization("other")).await.unwrap();
    assert_eq!(written["organization"]["id"], "other");
    serving.terminate();
    // Nothing was answered as written that is not stored: the refused write left nothing.
    let store = SqlStore::connect(&sqlite_url(&data_dir)).await.unwrap();
    let other = store.get_organization(&Id::parse("other").unwrap()).await.unwrap().expect("written after recovery");
    assert_eq!(other.revision, 1, "the write refused while read-only was not stored");
    store.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graceful_stop_leaves_everything_in_the_database_file() {
    let scratch = Scratch::new("cloudly-ready");
    let (serving, data_dir) = serving_with_an_organization(&scratch).await;
    serving
        .call_as_admin(
            "putCluster",
            json!({ "cluster": { "id": "c1", "organizationId": "org",
            "runtime": { "phase": "pallet", "generation": 3 }, "relayOrigin": null,
            "fleetCutoverIngressDesignation": null }, "expectedRevision": null }),
        )
        .await
        .unwrap();
    serving.terminate();

    let wal = data_dir.join("cloudly.db-wal");
    let wal_length = std::fs::metadata(&wal).map_or(0, |metadata| metadata.len());
    assert_eq!(wal_length, 0, "the WAL is checkpointed and truncated (or gone) after a graceful stop");
    // A copy of cloudly.db alone holds the data.
    let copy = scratch.join("copy");
    std::fs::create_dir_all(&copy).unwrap();
    std::fs::copy(data_dir.join("cloudly.db"), copy.join("cloudly.db")).unwrap();
    let store = SqlStore::connect(&sqlite_url(&copy)).await.unwrap();
    let cluster = store.get_cluster(&Id::parse("c1").unwrap()).await.unwrap().expect("the cluster is in the copy");
    assert_eq!(cluster.cluster.organization_id.as_str(), "org");
    store.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sqlite_database_and_its_wal_and_shm_files_are_private() {
    use std::os::unix::fs::PermissionsExt;
    let scratch = Scratch::new("cloudly-ready");
    let (serving, data_dir) = serving_with_an_organization(&scratch).await;
    for name in ["cloudly.db", "cloudly.db-wal", "cloudly.db-shm"] {
        let mode = std::fs::metadata(data_dir.join(name)).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{name} has mode {mode:o}");
    }
    serving.terminate();
}

/// The error code of a refused call.
fn refused_code(outcome: Result<Value, CallError>) -> String {
    match outcome {
        Err(CallError::Typed(error)) => error.code().to_owned(),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

/// The database file moved away or replaced under a running controller: the process's open
/// descriptors would go on writing where no restart reads, so every call is refused
/// `store-unavailable`, `/readyz` is 503 and the log names the file and what happened to it. With
/// the file put back, it serves again, and nothing refused was stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_file_removed_or_replaced_under_the_controller_is_refused_not_written() {
    let scratch = Scratch::new("cloudly-ready");
    let (serving, data_dir) = serving_with_an_organization(&scratch).await;
    let (database, aside) = (data_dir.join("cloudly.db"), scratch.join("aside.db"));
    let shown = std::fs::canonicalize(&database).unwrap().display().to_string();
    let unavailable = (503, json!({ "ready": false, "reason": "store-unavailable" }));
    let get_org = || serving.call_as_admin("getOrganization", json!({ "organizationId": "org" }));

    std::fs::rename(&database, &aside).unwrap();
    assert_eq!(
        refused_code(serving.call_as_admin("putOrganization", organization("other")).await),
        "store-unavailable"
    );
    assert_eq!(refused_code(get_org().await), "store-unavailable");
    assert_eq!(get(&serving, "/readyz").await, unavailable, "readiness with the file gone");

    // Another file at the path (a copy of the database) is not the file this process opened.
    std::fs::copy(&aside, &database).unwrap();
    assert_eq!(
        refused_code(serving.call_as_admin("putOrganization", organization("other")).await),
        "store-unavailable"
    );
    assert_eq!(get(&serving, "/readyz").await, unavailable, "readiness with the file replaced");

    std::fs::rename(&aside, &database).unwrap();
    assert_eq!(get(&serving, "/readyz").await, (200, json!({ "ready": true })), "ready with the file back");
    assert_eq!(get_org().await.unwrap()["organization"]["id"], "org");
    serving.call_as_admin("putOrganization", organization("other")).await.unwrap();
    let log = serving.terminate();
    assert!(log.contains(&format!("the SQLite database file {shown} is gone")), "{log}");
    assert!(log.contains(&format!("the SQLite database file {shown} was replaced by another file")), "{log}");

    let store = SqlStore::connect(&sqlite_url(&data_dir)).await.unwrap();
    let other =
        store.get_organization(&Id::parse("other").unwrap()).await.unwrap().expect("written with the file back");
    assert_eq!(other.revision, 1, "the writes refused while the file was away were not stored");
    store.close().await;
}

/// A PostgreSQL store that does not answer — here the heartbeat row locked by another connection,
/// as every statement waits when the database host vanished without a word (a container stopped:
/// its address answers nothing) — is `/readyz` 503 `store-unavailable` once the last ready outcome
/// is older than [`READINESS_REUSE`], each call within [`READINESS_TIMEOUT`], inside a probe's
/// timeout, and ready again once it answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_answers_within_its_bound_while_postgresql_does_not_answer() {
    use sqlx::Connection as _;
    let database = TestDatabase::create(Backend::Postgres).await;
    let scratch = Scratch::new("cloudly-ready-pg");
    let serving = start(&scratch.join("data"), &database.url).serving();
    assert_eq!(get(&serving, "/readyz").await, (200, json!({ "ready": true })));

    let mut holder = sqlx::PgConnection::connect(&database.url).await.unwrap();
    sqlx::raw_sql("BEGIN; LOCK TABLE store_heartbeat IN ACCESS EXCLUSIVE MODE").execute(&mut holder).await.unwrap();
    // The ready outcome above answers for up to `READINESS_REUSE`; every call after it checks.
    tokio::time::sleep(READINESS_REUSE).await;
    for _ in 0..2 {
        let asked = Instant::now();
        let answer = get(&serving, "/readyz").await;
        let took = asked.elapsed();
        assert_eq!(answer, (503, json!({ "ready": false, "reason": "store-unavailable" })));
        assert!(took >= READINESS_TIMEOUT, "answered in {took:?}: the lock did not hold the check");
        assert!(took < READINESS_TIMEOUT + Duration::from_secs(1), "answered only after {took:?}");
    }
    assert_eq!(get(&serving, "/healthz").await.0, 200, "the process itself is alive");

    sqlx::raw_sql("ROLLBACK").execute(&mut holder).await.unwrap();
    let back = Instant::now();
    while get(&serving, "/readyz").await != (200, json!({ "ready": true })) {
        assert!(back.elapsed() < Duration::from_secs(10), "not ready 10 s after the store answers again");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    serving.terminate();
    holder.close().await.ok();
    database.drop_now().await;
}
