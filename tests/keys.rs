//! Keys never change behind the operator's back: the store records the key ids it was written
//! with, and `cloudly serve` (the real binary, on SQLite and PostgreSQL) refuses a data directory
//! whose keys are missing or are not the store's, creating nothing; keys are created and
//! recorded only for an empty store; racing first starts record one key set and the loser leaves
//! no key file behind; `cloudly keys adopt` is the one way to new keys. The decisions of
//! `open_keys_for_store` are also run directly against a store, including a lost race made
//! deterministic.

#[macro_use]
mod support;

use async_trait::async_trait;
use cloudly::contract::Id;
use cloudly::contract::inventory::Organization;
use cloudly::keys::{ControllerKeys, KeyError, KeysOpened, adopt_keys_for_store, key_file_name, open_keys_for_store};
use cloudly::store::{KeyRecord, KeyRecordStore, KeyRole, SharedStore, SqlStore, StoreError};
use serde_json::{Value, json};
use sha2::{Digest as _, Sha256};
use std::collections::BTreeMap;
use std::path::Path;
use support::database::{Backend, TestDatabase};
use support::process::{Scratch, start};

const NOW: u64 = 1_767_225_600_000;

/// The key ids the store records as in use, by role.
async fn recorded_key_ids(database: &TestDatabase) -> BTreeMap<&'static str, String> {
    let store = SqlStore::connect(&database.url).await.unwrap();
    let recorded = store.recorded_keys().await.unwrap();
    store.close().await;
    recorded.into_iter().map(|record| (record.role.as_str(), record.key_id)).collect()
}

/// The key ids of `keys` as the documentation defines them: `sha256:` + lowerhex(SHA-256) of
/// each Ed25519 public key; for the secret key `fingerprint:` + lowerhex of the first 16 bytes of
/// SHA-256 over the label `cloudly/secret-key-id/v1\n` and the key.
fn documented_key_ids(keys: &ControllerKeys) -> BTreeMap<&'static str, String> {
    let public = |key: &ed25519_dalek::SigningKey| {
        let digest = Sha256::digest(key.verifying_key().as_bytes());
        format!("sha256:{}", hex(&digest))
    };
    let secret = Sha256::new().chain_update(b"cloudly/secret-key-id/v1\n").chain_update(keys.secret_key()).finalize();
    BTreeMap::from([
        ("identity", public(&keys.identity)),
        ("signing", public(&keys.signing)),
        ("secret", format!("fingerprint:{}", hex(&secret[..16]))),
    ])
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// The names of the files in `<data_dir>/keys` (none when it does not exist).
fn key_files(data_dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(data_dir.join("keys"))
        .map(|entries| entries.map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default();
    names.sort();
    names
}

fn organization() -> Value {
    json!({ "organization": { "id": "org", "name": "Org" } })
}

fn cluster() -> Value {
    json!({ "cluster": { "id": "c1", "organizationId": "org", "runtime": { "phase": "pallet", "generation": 3 },
        "relayOrigin": null, "fleetCutoverIngressDesignation": null }, "expectedRevision": null })
}

/// Runs `cloudly` with `args`, the data directory and the store given; answers its output.
fn cloudly(data_dir: &Path, database_url: &str, args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_cloudly"))
        .args(args)
        .env("CLOUDLY_DATA_DIR", data_dir)
        .env("CLOUDLY_DATABASE_URL", database_url)
        .output()
        .unwrap()
}

// ---------------------------------------------------------------------------------------------
// The real binary.

on_both_stores!(deleting_any_key_file_of_a_populated_deployment_refuses_to_start, |backend| async move {
    let database = TestDatabase::create(backend).await;
    let scratch = Scratch::new("cloudly-keys");
    let data_dir = scratch.join("data");

    // The first start on an empty store creates the keys and records them.
    let first = start(&data_dir, &database.url).serving();
    assert!(first.log().contains("controller keys created and recorded for an empty store"), "{}", first.log());
    first.call_as_admin("putOrganization", organization()).await.unwrap();
    first.call_as_admin("putCluster", cluster()).await.unwrap();
    first.terminate();
    let keys = ControllerKeys::load(&data_dir).unwrap();
    let recorded = recorded_key_ids(&database).await;
    assert_eq!(recorded, documented_key_ids(&keys), "the store records the key ids of the files");

    for role in KeyRole::ALL {
        let path = data_dir.join("keys").join(key_file_name(role));
        let aside = scratch.join(key_file_name(role));
        std::fs::rename(&path, &aside).unwrap();
        let (status, log) = start(&data_dir, &database.url).refused();
        assert!(!status.success(), "{status:?}");
        let error = log.lines().last().unwrap_or_default();
        assert!(error.starts_with("error: ") && error.contains(&format!("key file {} does not exist", path.display())));
        assert!(error.contains(&format!("{role} key {}", recorded[role.as_str()])), "{error}");
        assert!(error.contains("restore keys/ from") && error.contains("copy keys/ from"), "{error}");
        assert!(!path.exists(), "no key file was created");
        assert_eq!(key_files(&data_dir).len(), 2, "nothing else was created: {:?}", key_files(&data_dir));
        std::fs::rename(&aside, &path).unwrap();
    }

    // A key file holding another key is refused, naming the file and both key ids.
    let signing = data_dir.join("keys/signing.ed25519");
    let original = std::fs::read(&signing).unwrap();
    std::fs::write(&signing, format!("{}\n", hex(&[7u8; 32]))).unwrap();
    let (status, log) = start(&data_dir, &database.url).refused();
    assert!(!status.success());
    assert!(log.contains(&format!("key file {} holds signing key sha256:", signing.display())), "{log}");
    assert!(log.contains(&format!("written with signing key {}", recorded["signing"])), "{log}");
    std::fs::write(&signing, original).unwrap();

    // A restart with the same keys starts, and the data is there.
    let again = start(&data_dir, &database.url).serving();
    assert!(again.log().contains("controller keys match the store's"), "{}", again.log());
    let answer = again.call_as_admin("getCluster", json!({ "clusterId": "c1" })).await.unwrap();
    assert_eq!(answer["cluster"]["organizationId"], "org", "{answer}");
    again.terminate();

    // `cloudly keys adopt` replaces a lost key only when told that the old one stops working.
    let secret = data_dir.join("keys/secret.key");
    std::fs::remove_file(&secret).unwrap();
    let refused = cloudly(&data_dir, &database.url, &["keys", "adopt"]);
    assert_eq!(refused.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("--i-understand-old-keys-stop-working"));
    assert!(!secret.exists(), "nothing was created");
    assert_eq!(recorded_key_ids(&database).await, recorded, "nothing was recorded");
    let adopted = cloudly(&data_dir, &database.url, &["keys", "adopt", "--i-understand-old-keys-stop-working"]);
    assert!(adopted.status.success(), "{}", String::from_utf8_lossy(&adopted.stderr));
    let adopted: Value = serde_json::from_slice(&adopted.stdout).unwrap();
    let new_ids = documented_key_ids(&ControllerKeys::load(&data_dir).unwrap());
    assert_eq!(
        adopted["keys"],
        json!([
            { "role": "identity", "keyId": recorded["identity"], "replaced": null, "created": false },
            { "role": "signing", "keyId": recorded["signing"], "replaced": null, "created": false },
            { "role": "secret", "keyId": new_ids["secret"], "replaced": recorded["secret"], "created": true },
        ])
    );
    assert_eq!(recorded_key_ids(&database).await, new_ids);
    start(&data_dir, &database.url).serving().terminate();
    drop(scratch);
    database.drop_now().await;
});

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_second_controller_with_its_own_data_directory_refuses_to_start_on_the_same_postgres() {
    let database = TestDatabase::create(Backend::Postgres).await;
    let scratch = Scratch::new("cloudly-keys");
    let (first_dir, second_dir) = (scratch.join("first"), scratch.join("second"));
    let first = start(&first_dir, &database.url).serving();
    let recorded = recorded_key_ids(&database).await;

    // Without keys: refused, nothing created.
    let (status, log) = start(&second_dir, &database.url).refused();
    assert!(!status.success());
    let identity = second_dir.join("keys/identity.ed25519");
    assert!(log.contains(&format!("key file {} does not exist", identity.display())), "{log}");
    assert!(log.contains(&recorded["identity"]) && log.contains("copy keys/ from"), "{log}");
    assert!(key_files(&second_dir).is_empty(), "no key file was created: {:?}", key_files(&second_dir));

    // With keys of its own: refused, naming its file and the recorded key id.
    let own = ControllerKeys::create(&second_dir).unwrap();
    let (status, log) = start(&second_dir, &database.url).refused();
    assert!(!status.success());
    assert!(log.contains(&format!("key file {} holds identity key {}", identity.display(), own_id(&own))), "{log}");
    assert!(log.contains(&format!("written with identity key {}", recorded["identity"])), "{log}");
    assert_eq!(recorded_key_ids(&database).await, recorded, "the recorded keys did not change");

    // With the first controller's keys it starts.
    for role in KeyRole::ALL {
        let name = key_file_name(role);
        std::fs::copy(first_dir.join("keys").join(name), second_dir.join("keys").join(name)).unwrap();
    }
    let second = start(&second_dir, &database.url).serving();
    second.terminate();
    first.terminate();
    drop(scratch);
    database.drop_now().await;
}

fn own_id(keys: &ControllerKeys) -> String {
    documented_key_ids(keys)["identity"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_controllers_starting_at_once_on_an_empty_postgres_record_one_key_set() {
    for _round in 0..3 {
        let database = TestDatabase::create(Backend::Postgres).await;
        let scratch = Scratch::new("cloudly-keys");
        let dirs = [scratch.join("a"), scratch.join("b")];
        let starts: Vec<_> = dirs
            .iter()
            .map(|dir| {
                let (dir, url) = (dir.clone(), database.url.clone());
                std::thread::spawn(move || start(&dir, &url))
            })
            .collect();
        let (mut serving, mut refused) = (Vec::new(), Vec::new());
        for (index, started) in starts.into_iter().enumerate() {
            match started.join().unwrap() {
                support::process::Started::Serving(process) => serving.push((index, process)),
                support::process::Started::Exited(status, log) => refused.push((index, status, log)),
            }
        }
        assert_eq!((serving.len(), refused.len()), (1, 1), "exactly one of two racing first starts serves");
        let (winner, process) = serving.pop().unwrap();
        let (loser, status, log) = refused.pop().unwrap();
        assert!(!status.success());
        let recorded = recorded_key_ids(&database).await;
        assert_eq!(recorded, documented_key_ids(&ControllerKeys::load(&dirs[winner]).unwrap()));
        assert!(key_files(&dirs[loser]).is_empty(), "the loser left key files: {:?}", key_files(&dirs[loser]));
        let loser_identity = dirs[loser].join("keys/identity.ed25519").display().to_string();
        assert!(log.contains(&loser_identity) && log.contains(&recorded["identity"]), "{log}");
        assert!(log.contains("copy keys/ from"), "{log}");
        process.terminate();
        drop(scratch);
        database.drop_now().await;
    }
}

// ---------------------------------------------------------------------------------------------
// The decisions, against a store.

/// A fresh migrated store of `backend`, with its database.
async fn migrated(backend: Backend) -> (SharedStore, TestDatabase) {
    let database = TestDatabase::create(backend).await;
    let store = database.connect().await;
    store.migrate().await.unwrap();
    (store, database)
}

on_both_stores!(keys_are_created_and_recorded_only_for_an_empty_store, |backend| async move {
    let (store, database) = migrated(backend).await;
    let scratch = Scratch::new("cloudly-keys");
    let data_dir = scratch.join("data");
    let (keys, opened) = open_keys_for_store(&data_dir, store.as_ref(), NOW).await.unwrap();
    let KeysOpened::Recorded { created, store_held_data: false } = opened else { panic!("{opened:?}") };
    assert_eq!(created.len(), 3);
    assert_eq!(store.recorded_keys().await.unwrap(), keys.key_records(NOW));
    let (again, opened) = open_keys_for_store(&data_dir, store.as_ref(), NOW + 1).await.unwrap();
    assert_eq!(opened, KeysOpened::Matched);
    assert_eq!(again.secret_key(), keys.secret_key());
    // Recording the same keys again changes nothing; other keys are not recorded over them.
    let other = ControllerKeys::generate().unwrap();
    assert_eq!(store.record_keys_if_absent(&other.key_records(NOW + 2)).await.unwrap(), keys.key_records(NOW));
    drop(scratch);
    database.drop_now().await;
});

/// A store on which another controller records its keys just before this one does.
struct RecordedMeanwhile {
    store: SharedStore,
    other: Vec<KeyRecord>,
}

#[async_trait]
impl KeyRecordStore for RecordedMeanwhile {
    async fn recorded_keys(&self) -> Result<Vec<KeyRecord>, StoreError> {
        self.store.recorded_keys().await
    }

    async fn holds_deployment_data(&self) -> Result<bool, StoreError> {
        self.store.holds_deployment_data().await
    }

    async fn record_keys_if_absent(&self, keys: &[KeyRecord]) -> Result<Vec<KeyRecord>, StoreError> {
        self.store.record_keys_if_absent(&self.other).await?;
        self.store.record_keys_if_absent(keys).await
    }

    async fn replace_recorded_keys(&self, keys: &[KeyRecord], now_ms: u64) -> Result<Vec<KeyRecord>, StoreError> {
        self.store.replace_recorded_keys(keys, now_ms).await
    }
}

on_both_stores!(losing_the_race_to_record_removes_the_key_files_it_created, |backend| async move {
    let (store, database) = migrated(backend).await;
    let scratch = Scratch::new("cloudly-keys");
    let winner = ControllerKeys::generate().unwrap();
    let racing = RecordedMeanwhile { store: store.clone(), other: winner.key_records(NOW) };
    let data_dir = scratch.join("loser");
    let error = open_keys_for_store(&data_dir, &racing, NOW).await.unwrap_err();
    let KeyError::RecordedByAnother { path, role: KeyRole::Identity, recorded_key_id } = &error else {
        panic!("{error}")
    };
    assert_eq!(path, &data_dir.join("keys/identity.ed25519"));
    assert_eq!(recorded_key_id, &winner.key_id(KeyRole::Identity));
    assert!(error.to_string().contains("copy keys/ from"), "{error}");
    assert!(!data_dir.join("keys").exists(), "the created key files and directory were removed");
    assert_eq!(store.recorded_keys().await.unwrap(), winner.key_records(NOW), "exactly the winner's set");

    // Key files that were there before are the operator's: a lost race removes none of them.
    let prepared = scratch.join("prepared");
    ControllerKeys::create(&prepared).unwrap();
    std::fs::remove_file(prepared.join("keys/secret.key")).unwrap();
    let empty = migrated(backend).await;
    let racing = RecordedMeanwhile { store: empty.0.clone(), other: winner.key_records(NOW) };
    let error = open_keys_for_store(&prepared, &racing, NOW).await.unwrap_err();
    assert!(matches!(error, KeyError::RecordedByAnother { .. }), "{error}");
    assert_eq!(key_files(&prepared), ["identity.ed25519", "signing.ed25519"]);
    empty.1.drop_now().await;
    drop(scratch);
    database.drop_now().await;
});

on_both_stores!(a_store_written_before_key_records_keeps_its_keys, |backend| async move {
    let (store, database) = migrated(backend).await;
    let scratch = Scratch::new("cloudly-keys");
    let data_dir = scratch.join("data");
    let keys = ControllerKeys::create(&data_dir).unwrap();
    // Data without key records: a store written before migration 6.
    let organization = Organization { id: Id::parse("org").unwrap(), name: "Org".to_owned() };
    store.put_organization(&organization).await.unwrap();
    assert!(store.holds_deployment_data().await.unwrap());
    std::fs::rename(data_dir.join("keys/signing.ed25519"), scratch.join("signing")).unwrap();
    let error = open_keys_for_store(&data_dir, store.as_ref(), NOW).await.unwrap_err();
    assert!(matches!(&error, KeyError::MissingForStore { path, .. } if path.ends_with("keys/signing.ed25519")));
    assert!(error.to_string().contains("written before key ids were recorded"), "{error}");
    assert!(!data_dir.join("keys/signing.ed25519").exists(), "nothing was created");
    assert!(store.recorded_keys().await.unwrap().is_empty(), "nothing was recorded");
    std::fs::rename(scratch.join("signing"), data_dir.join("keys/signing.ed25519")).unwrap();
    let (_, opened) = open_keys_for_store(&data_dir, store.as_ref(), NOW).await.unwrap();
    assert_eq!(opened, KeysOpened::Recorded { created: Vec::new(), store_held_data: true });
    assert_eq!(store.recorded_keys().await.unwrap(), keys.key_records(NOW));
    assert_eq!(open_keys_for_store(&data_dir, store.as_ref(), NOW).await.unwrap().1, KeysOpened::Matched);
    drop(scratch);
    database.drop_now().await;
});

on_both_stores!(adopting_keys_retires_the_recorded_ones, |backend| async move {
    let (store, database) = migrated(backend).await;
    let scratch = Scratch::new("cloudly-keys");
    let (old_dir, new_dir) = (scratch.join("old"), scratch.join("new"));
    let (old, _) = open_keys_for_store(&old_dir, store.as_ref(), NOW).await.unwrap();
    let adopted = adopt_keys_for_store(&new_dir, store.as_ref(), NOW + 1).await.unwrap();
    let new = ControllerKeys::load(&new_dir).unwrap();
    for (key, role) in adopted.iter().zip(KeyRole::ALL) {
        assert_eq!((key.role, &key.key_id, key.created), (role, &new.key_id(role), true));
        assert_eq!(key.replaced, Some(old.key_id(role)));
    }
    assert_eq!(store.recorded_keys().await.unwrap(), new.key_records(NOW + 1));
    assert_eq!(open_keys_for_store(&new_dir, store.as_ref(), NOW).await.unwrap().1, KeysOpened::Matched);
    let error = open_keys_for_store(&old_dir, store.as_ref(), NOW).await.unwrap_err();
    assert!(matches!(error, KeyError::Mismatch { role: KeyRole::Identity, .. }), "{error}");
    // Adopting a retired key again brings it back into use.
    adopt_keys_for_store(&old_dir, store.as_ref(), NOW + 2).await.unwrap();
    assert_eq!(open_keys_for_store(&old_dir, store.as_ref(), NOW).await.unwrap().1, KeysOpened::Matched);
    drop(scratch);
    database.drop_now().await;
});
