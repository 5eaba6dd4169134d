//! Keys never change behind the operator's back: the store records the key ids it was written
//! with, and `cloudly serve` (the real binary, on SQLite and PostgreSQL) refuses a data directory
//! whose keys are missing or are not the store's, creating nothing; keys are created and
//! recorded only for an empty store; racing first starts record one key set and the loser leaves
//! no key file behind; `cloudly keys adopt` is the one way to new keys. The decisions of
//! `open_keys_for_store` are also run directly against a store, including a lost race made
//! deterministic. `cloudly keys rotate` beside a serving controller: both keys listed by
//! `getControllerSigningKeys`, what the old key signed still verifies, what follows is signed
//! with the new key, and a start with the retired key is refused; an interrupted rotation is
//! signed from its pending file and finished by the next `keys rotate`.

#[macro_use]
mod support;

use async_trait::async_trait;
use cloudly::api::methods::name;
use cloudly::api::wire;
use cloudly::contract::Id;
use cloudly::contract::assignment::RuntimeAssignment;
use cloudly::contract::inventory::Organization;
use cloudly::contract::signing::{PublishedKey, SignatureError, decode_public_key, signed_to_value, verify};
use cloudly::contract::storage_claim::RuntimeLocalStorageClaim;
use cloudly::keys::{
    ControllerKeys, DataDirSigningKeys, KeyError, KeysOpened, PENDING_SIGNING_FILE, SigningKeySource,
    adopt_keys_for_store, key_file_name, open_keys_for_store, rotate_signing_key,
};
use cloudly::store::{KeyRecord, KeyRecordStore, KeyRole, SharedStore, SqlStore, StorageClaimStore, StoreError};
use serde_json::{Value, json};
use sha2::{Digest as _, Sha256};
use std::collections::BTreeMap;
use std::path::Path;
use support::database::{Backend, TestDatabase};
use support::node_agent::{NodeAgent, WAIT};
use support::process::{Scratch, Serving, start, start_with};

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

on_both_stores!(a_key_file_others_may_read_refuses_every_command_that_reads_keys, |backend| async move {
    use std::os::unix::fs::PermissionsExt as _;
    let database = TestDatabase::create(backend).await;
    let scratch = Scratch::new("cloudly-key-modes");
    let data_dir = scratch.join("data");
    start(&data_dir, &database.url).serving().terminate();
    let recorded = recorded_key_ids(&database).await;

    for role in KeyRole::ALL {
        let path = data_dir.join("keys").join(key_file_name(role));
        for mode in [0o644, 0o640] {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
            let named = |text: &str| {
                text.contains(&format!("key file {} has mode {mode:04o}", path.display()))
                    && text.contains(&format!("chmod 600 {}", path.display()))
            };
            let (status, log) = start(&data_dir, &database.url).refused();
            assert!(!status.success(), "{status:?}");
            assert!(named(log.lines().last().unwrap_or_default()), "{log}");
            let issue = ["identity", "issue", "--name", "Ada", "--user-id", "ada", "--role", "viewer"];
            for args in [&issue[..], &["keys", "rotate"], &["keys", "adopt", "--i-understand-old-keys-stop-working"]] {
                let refused = cloudly(&data_dir, &database.url, args);
                assert!(!refused.status.success(), "{args:?}");
                assert!(
                    named(&String::from_utf8_lossy(&refused.stderr)),
                    "{args:?}: {}",
                    String::from_utf8_lossy(&refused.stderr)
                );
            }
        }
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    assert_eq!(recorded_key_ids(&database).await, recorded, "no refused command recorded or rotated a key");
    assert_eq!(key_files(&data_dir).len(), 3, "nothing was created: {:?}", key_files(&data_dir));
    start(&data_dir, &database.url).serving().terminate();
    drop(scratch);
    database.drop_now().await;
});

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

/// Runs `cloudly` with `args` and `environment` only (no data directory or store of a test's own).
fn cloudly_with(args: &[&str], environment: &[(&str, &Path)]) -> std::process::Output {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_cloudly"));
    command.args(args).env_remove("CLOUDLY_DATA_DIR").env_remove("CLOUDLY_KEYS_DIR");
    for (name, value) in environment {
        command.env(name, value);
    }
    command.output().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_controllers_with_their_own_data_directories_and_one_keys_directory_serve_the_same_keys() {
    let database = TestDatabase::create(Backend::Postgres).await;
    let scratch = Scratch::new("cloudly-keys");
    let (first_dir, second_dir, keys_dir) = (scratch.join("first"), scratch.join("second"), scratch.join("secret"));
    let shared = [("CLOUDLY_KEYS_DIR", keys_dir.to_str().unwrap())];
    let first = start_with(&first_dir, &database.url, &shared).serving();
    assert!(first.log().contains("controller keys created and recorded for an empty store"), "{}", first.log());
    assert!(first.log().contains(&keys_dir.display().to_string()), "the log names the keys directory");
    let second = start_with(&second_dir, &database.url, &shared).serving();
    assert!(second.log().contains("controller keys match the store's"), "{}", second.log());
    for data_dir in [&first_dir, &second_dir] {
        assert!(key_files(data_dir).is_empty(), "a data directory got keys/: {:?}", key_files(data_dir));
        assert!(data_dir.join("admin-identity.json").exists(), "each data directory holds its bootstrap identity");
    }
    let keys = ControllerKeys::load_from(&keys_dir).unwrap();
    assert_eq!(recorded_key_ids(&database).await, documented_key_ids(&keys), "the store records the shared keys");
    let (first_keys, second_keys) = (published_keys(&first).await.0, published_keys(&second).await.0);
    assert_eq!(first_keys, second_keys);
    assert_eq!(first_keys.len(), 1);
    assert_eq!(first_keys[0]["keyId"], json!(documented_key_ids(&keys)["signing"]));

    // `cloudly config` and `cloudly identity issue` take the keys directory from the same variable;
    // an identity signed with the shared identity key is accepted by both controllers.
    let tool_dir = scratch.join("tool");
    let environment = [("CLOUDLY_DATA_DIR", tool_dir.as_path()), ("CLOUDLY_KEYS_DIR", keys_dir.as_path())];
    let config: Value = serde_json::from_slice(&cloudly_with(&["config"], &environment).stdout).unwrap();
    assert_eq!(config["keys"], json!(keys_dir.display().to_string()));
    let issued =
        cloudly_with(&["identity", "issue", "--name", "Ops", "--user-id", "ops", "--role", "admin"], &environment);
    assert!(issued.status.success(), "{}", String::from_utf8_lossy(&issued.stderr));
    let identity: Value = serde_json::from_slice(&issued.stdout).unwrap();
    first
        .client()
        .call("putOrganization", json!({ "organization": organization()["organization"], "identity": identity }))
        .await
        .unwrap();
    second
        .client()
        .call("putCluster", json!({ "cluster": cluster()["cluster"], "expectedRevision": null, "identity": identity }))
        .await
        .unwrap();
    assert!(!tool_dir.join("keys").exists(), "identity issue creates nothing");

    // A rotation run where the keys directory is writable reaches both controllers.
    let rotated = std::process::Command::new(env!("CARGO_BIN_EXE_cloudly"))
        .args(["keys", "rotate", "--keys-dir", keys_dir.to_str().unwrap()])
        .env("CLOUDLY_DATA_DIR", &tool_dir)
        .env("CLOUDLY_DATABASE_URL", &database.url)
        .env_remove("CLOUDLY_KEYS_DIR")
        .output()
        .unwrap();
    assert!(rotated.status.success(), "{}", String::from_utf8_lossy(&rotated.stderr));
    let rotated: Value = serde_json::from_slice(&rotated.stdout).unwrap();
    assert_eq!(rotated["retired"]["keyId"], first_keys[0]["keyId"]);
    assert_eq!(ControllerKeys::load_from(&keys_dir).unwrap().key_id(KeyRole::Signing), rotated["signing"]["keyId"]);
    for serving in [&first, &second] {
        assert!(serving.log_shows("signing with the store's signing key in use", WAIT).await, "{}", serving.log());
        assert_eq!(published_keys(serving).await.0.len(), 2);
    }
    first.terminate();
    second.terminate();

    // Without the shared keys directory, a data directory of its own holds no keys: refused.
    let (status, log) = start(&second_dir, &database.url).refused();
    assert!(!status.success());
    let missing = second_dir.join("keys/identity.ed25519");
    assert!(log.contains(&format!("key file {} does not exist", missing.display())), "{log}");
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
    let (keys, opened) = open_keys_for_store(&data_dir.join("keys"), store.as_ref(), NOW).await.unwrap();
    let KeysOpened::Recorded { created, store_held_data: false } = opened else { panic!("{opened:?}") };
    assert_eq!(created.len(), 3);
    assert_eq!(store.recorded_keys().await.unwrap(), keys.key_records(NOW));
    let (again, opened) = open_keys_for_store(&data_dir.join("keys"), store.as_ref(), NOW + 1).await.unwrap();
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

    async fn key_history(&self, role: KeyRole) -> Result<Vec<KeyRecord>, StoreError> {
        self.store.key_history(role).await
    }

    async fn record_public_key(
        &self,
        role: KeyRole,
        key_id: &str,
        public_key: &ed25519_dalek::VerifyingKey,
    ) -> Result<(), StoreError> {
        self.store.record_public_key(role, key_id, public_key).await
    }

    async fn rotate_recorded_key(
        &self,
        retiring: &KeyRecord,
        next: &KeyRecord,
        now_ms: u64,
    ) -> Result<bool, StoreError> {
        self.store.rotate_recorded_key(retiring, next, now_ms).await
    }
}

on_both_stores!(losing_the_race_to_record_removes_the_key_files_it_created, |backend| async move {
    let (store, database) = migrated(backend).await;
    let scratch = Scratch::new("cloudly-keys");
    let winner = ControllerKeys::generate().unwrap();
    let racing = RecordedMeanwhile { store: store.clone(), other: winner.key_records(NOW) };
    let data_dir = scratch.join("loser");
    let error = open_keys_for_store(&data_dir.join("keys"), &racing, NOW).await.unwrap_err();
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
    let error = open_keys_for_store(&prepared.join("keys"), &racing, NOW).await.unwrap_err();
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
    let error = open_keys_for_store(&data_dir.join("keys"), store.as_ref(), NOW).await.unwrap_err();
    assert!(matches!(&error, KeyError::MissingForStore { path, .. } if path.ends_with("keys/signing.ed25519")));
    assert!(error.to_string().contains("written before key ids were recorded"), "{error}");
    assert!(!data_dir.join("keys/signing.ed25519").exists(), "nothing was created");
    assert!(store.recorded_keys().await.unwrap().is_empty(), "nothing was recorded");
    std::fs::rename(scratch.join("signing"), data_dir.join("keys/signing.ed25519")).unwrap();
    let (_, opened) = open_keys_for_store(&data_dir.join("keys"), store.as_ref(), NOW).await.unwrap();
    assert_eq!(opened, KeysOpened::Recorded { created: Vec::new(), store_held_data: true });
    assert_eq!(store.recorded_keys().await.unwrap(), keys.key_records(NOW));
    assert_eq!(open_keys_for_store(&data_dir.join("keys"), store.as_ref(), NOW).await.unwrap().1, KeysOpened::Matched);
    drop(scratch);
    database.drop_now().await;
});

on_both_stores!(adopting_keys_retires_the_recorded_ones, |backend| async move {
    let (store, database) = migrated(backend).await;
    let scratch = Scratch::new("cloudly-keys");
    let (old_dir, new_dir) = (scratch.join("old"), scratch.join("new"));
    let (old, _) = open_keys_for_store(&old_dir.join("keys"), store.as_ref(), NOW).await.unwrap();
    let adopted = adopt_keys_for_store(&new_dir.join("keys"), store.as_ref(), NOW + 1).await.unwrap();
    let new = ControllerKeys::load(&new_dir).unwrap();
    for (key, role) in adopted.iter().zip(KeyRole::ALL) {
        assert_eq!((key.role, &key.key_id, key.created), (role, &new.key_id(role), true));
        assert_eq!(key.replaced, Some(old.key_id(role)));
    }
    assert_eq!(store.recorded_keys().await.unwrap(), new.key_records(NOW + 1));
    // The replaced signing key stays listed with its public key, retired.
    let replaced = KeyRecord { retired_at_ms: Some(NOW + 1), ..old.key_records(NOW)[1].clone() };
    assert_eq!(store.key_history(KeyRole::Signing).await.unwrap(), [replaced, new.key_records(NOW + 1)[1].clone()]);
    assert_eq!(open_keys_for_store(&new_dir.join("keys"), store.as_ref(), NOW).await.unwrap().1, KeysOpened::Matched);
    let error = open_keys_for_store(&old_dir.join("keys"), store.as_ref(), NOW).await.unwrap_err();
    assert!(matches!(error, KeyError::Retired { role: KeyRole::Identity, .. }), "{error}");
    // Adopting a retired key again brings it back into use.
    adopt_keys_for_store(&old_dir.join("keys"), store.as_ref(), NOW + 2).await.unwrap();
    assert_eq!(open_keys_for_store(&old_dir.join("keys"), store.as_ref(), NOW).await.unwrap().1, KeysOpened::Matched);
    drop(scratch);
    database.drop_now().await;
});

// ---------------------------------------------------------------------------------------------
// Rotating the signing key.

/// `getControllerSigningKeys` of `serving`: the listed keys, and each as a verification key
/// (checking that its key id is the SHA-256 of its public key).
async fn published_keys(serving: &Serving) -> (Vec<Value>, Vec<PublishedKey>) {
    let answer = serving.client().call("getControllerSigningKeys", json!({})).await.unwrap();
    let listed = answer["keys"].as_array().unwrap().clone();
    let published = listed
        .iter()
        .map(|key| {
            let published = PublishedKey::new(decode_public_key(key["publicKey"].as_str().unwrap()).unwrap());
            assert_eq!(key["keyId"], published.key_id, "{key}");
            published
        })
        .collect();
    (listed, published)
}

/// A volume for the claim the spec below issues.
fn volume(mount: &str) -> Value {
    json!({ "id": "data", "mountPath": mount, "readOnly": false, "driver": "local", "driverOptions": [],
            "mountOptions": [], "initialization": { "kind": "empty", "ownership": { "uid": 1, "gid": 1, "mode": 448 } } })
}

/// Service `db` on node-1 with `image` and one volume mounted at `mount`.
fn db_spec(image: &str, mount: &str, expected: Value) -> Value {
    json!({ "spec": { "clusterId": "c1", "serviceId": "db", "organizationId": "org", "image": image, "replicas": 1,
        "placement": { "nodeIds": ["node-1"] }, "ports": [], "environment": [], "volumes": [volume(mount)] },
        "expectedRevision": expected })
}

/// The node's one assignment, signed, as the node gets it.
async fn signed_assignment(agent: &NodeAgent, session: &Value) -> Value {
    let answer =
        agent.call(name::GET_RUNTIME_ASSIGNMENTS, wire::GetRuntimeAssignments { session: &session }).await.unwrap();
    assert_eq!(answer["assignments"].as_array().unwrap().len(), 1, "{answer}");
    answer["assignments"][0].clone()
}

/// The cluster's one claim head, signed, as the store keeps it.
async fn signed_claim(database: &TestDatabase) -> Value {
    let store = SqlStore::connect(&database.url).await.unwrap();
    let heads = store.claim_heads(&Id::parse("c1").unwrap()).await.unwrap();
    store.close().await;
    assert_eq!(heads.readable.len(), 1);
    signed_to_value(&heads.readable[0].signed)
}

on_both_stores!(
    a_rotated_signing_key_signs_what_follows_and_what_the_old_one_signed_still_verifies,
    |backend| async move {
        let database = TestDatabase::create(backend).await;
        let scratch = Scratch::new("cloudly-keys");
        let data_dir = scratch.join("data");
        let serving = start_with(&data_dir, &database.url, &[("CLOUDLY_SIGNING_KEY_CHECK_MS", "200")]).serving();
        let admin = async |method: &str, request: Value| {
            serving.call_as_admin(method, request).await.unwrap_or_else(|error| panic!("{method}: {error}"))
        };
        admin("putOrganization", organization()).await;
        admin("putCluster", cluster()).await;
        let node = admin(
            "putClusterNode",
            json!({ "clusterId": "c1",
        "node": { "id": "node-1", "runtimeNamespace": "ns-main", "hostAddresses": [] }, "rotateCredential": false }),
        )
        .await;
        let bearer = node["bearer"].as_str().unwrap().to_owned();
        admin("putServiceRuntimeSpec", db_spec("registry.example/db:1", "/data", Value::Null)).await;
        let agent = NodeAgent::connect_to(&serving.base_url).await;
        let session = agent.open("c1", "node-1", &bearer).await;
        let before = signed_assignment(&agent, &session).await;
        let claim_before = signed_claim(&database).await;
        let old_id = documented_key_ids(&ControllerKeys::load(&data_dir).unwrap())["signing"].clone();
        let (listed, _) = published_keys(&serving).await;
        assert_eq!(listed.len(), 1);
        assert_eq!((&listed[0]["keyId"], &listed[0]["retiredAt"]), (&json!(old_id), &Value::Null));
        assert_eq!(before["signature"]["keyId"], json!(old_id));
        assert_eq!(claim_before["signature"]["keyId"], json!(old_id));
        std::fs::copy(data_dir.join("keys/signing.ed25519"), scratch.join("old-signing")).unwrap();

        // The rotation runs beside the serving controller.
        let rotated = cloudly(&data_dir, &database.url, &["keys", "rotate"]);
        assert!(rotated.status.success(), "{}", String::from_utf8_lossy(&rotated.stderr));
        let rotated: Value = serde_json::from_slice(&rotated.stdout).unwrap();
        let new_id = rotated["signing"]["keyId"].as_str().unwrap().to_owned();
        assert_eq!(rotated["retired"]["keyId"], json!(old_id));
        assert_ne!(new_id, old_id);
        assert_eq!(documented_key_ids(&ControllerKeys::load(&data_dir).unwrap())["signing"], new_id);
        assert_eq!(
            key_files(&data_dir),
            ["identity.ed25519", "secret.key", "signing.ed25519"],
            "no pending file is left"
        );
        let recorded = recorded_key_ids(&database).await;
        assert_eq!(recorded["signing"], new_id);
        assert_eq!(recorded["identity"], documented_key_ids(&ControllerKeys::load(&data_dir).unwrap())["identity"]);

        // Both keys are listed, sorted by key id, the old one retired; what it signed still verifies.
        let (listed, published) = published_keys(&serving).await;
        let ids: Vec<&str> = listed.iter().map(|key| key["keyId"].as_str().unwrap()).collect();
        let mut sorted = ids.clone();
        sorted.sort_unstable();
        assert_eq!((ids.len(), &ids), (2, &sorted), "sorted by keyId");
        let listed_key = |id: &str| listed.iter().find(|key| key["keyId"] == id).unwrap().clone();
        assert_eq!(listed_key(&old_id)["retiredAt"], rotated["retired"]["retiredAt"]);
        assert_eq!(listed_key(&new_id)["retiredAt"], Value::Null);
        assert_eq!(listed_key(&new_id)["activeSince"], rotated["signing"]["activeSince"]);
        verify::<RuntimeAssignment>(&before, &published).expect("an assignment signed before the rotation verifies");
        verify::<RuntimeLocalStorageClaim>(&claim_before, &published)
            .expect("a claim signed before the rotation verifies");
        assert_eq!(
            verify::<RuntimeAssignment>(&before, &published[..0]).unwrap_err(),
            SignatureError::UnknownKey,
            "verification needs the published list"
        );

        // The controller signs with the new key once it saw the rotation (told at once on
        // PostgreSQL, within its check interval on SQLite).
        assert!(serving.log_shows("signing with the store's signing key in use", WAIT).await, "{}", serving.log());
        admin("putServiceRuntimeSpec", db_spec("registry.example/db:2", "/srv/data", json!(1))).await;
        let after = signed_assignment(&agent, &session).await;
        assert_eq!(after["payload"]["generation"], json!(2));
        assert_eq!(after["signature"]["keyId"], json!(new_id));
        verify::<RuntimeAssignment>(&after, &published).unwrap();
        let claim_after = signed_claim(&database).await;
        assert_eq!(
            (&claim_after["payload"]["generation"], &claim_after["signature"]["keyId"]),
            (&json!(2), &json!(new_id))
        );
        verify::<RuntimeLocalStorageClaim>(&claim_after, &published).unwrap();
        drop(agent);
        serving.terminate();

        // A restart with the rotated keys starts and lists both keys.
        let again = start(&data_dir, &database.url).serving();
        assert!(again.log().contains("controller keys match the store's"), "{}", again.log());
        assert_eq!(published_keys(&again).await.0, listed);
        again.terminate();
        // One with the key from before the rotation is refused, naming the file and the retired key.
        let signing = data_dir.join("keys/signing.ed25519");
        std::fs::rename(&signing, scratch.join("new-signing")).unwrap();
        std::fs::copy(scratch.join("old-signing"), &signing).unwrap();
        let (status, log) = start(&data_dir, &database.url).refused();
        assert!(!status.success());
        let expected = format!("key file {} holds signing key {old_id}, which this store retired", signing.display());
        assert!(log.contains(&expected), "{log}");
        std::fs::rename(scratch.join("new-signing"), &signing).unwrap();
        start(&data_dir, &database.url).serving().terminate();
        drop(scratch);
        database.drop_now().await;
    }
);

on_both_stores!(
    an_interrupted_rotation_signs_from_its_pending_file_until_the_next_rotate_finishes_it,
    |backend| async move {
        let (store, database) = migrated(backend).await;
        let scratch = Scratch::new("cloudly-keys");
        let data_dir = scratch.join("data");
        let (old, _) = open_keys_for_store(&data_dir.join("keys"), store.as_ref(), NOW).await.unwrap();
        let pending = data_dir.join("keys").join(PENDING_SIGNING_FILE);

        // A pending file holding a key the store does not use keeps every rotation out.
        let stray = ControllerKeys::generate().unwrap();
        cloudly::keys::write_new_private_file(&pending, format!("{}\n", hex(&stray.signing.to_bytes())).as_bytes())
            .unwrap();
        let error = rotate_signing_key(&data_dir.join("keys"), store.as_ref(), NOW + 1).await.unwrap_err();
        assert!(matches!(&error, KeyError::RotationPending { path, .. } if path == &pending), "{error}");
        assert!(error.to_string().contains(&stray.key_id(KeyRole::Signing)), "{error}");
        assert_eq!(store.recorded_keys().await.unwrap(), old.key_records(NOW), "nothing was recorded");
        assert_eq!(
            open_keys_for_store(&data_dir.join("keys"), store.as_ref(), NOW).await.unwrap().1,
            KeysOpened::Matched
        );

        // A rotation that recorded its key and stopped before the rename: the store uses the
        // pending key, which controllers sign with from there.
        let in_use = store.recorded_keys().await.unwrap()[1].clone();
        let next = KeyRecord {
            key_id: stray.key_id(KeyRole::Signing),
            public_key: stray.public_key(KeyRole::Signing),
            recorded_at_ms: NOW + 2,
            ..in_use.clone()
        };
        assert!(store.rotate_recorded_key(&in_use, &next, NOW + 2).await.unwrap());
        let (keys, opened) = open_keys_for_store(&data_dir.join("keys"), store.as_ref(), NOW).await.unwrap();
        assert_eq!(opened, KeysOpened::MatchedUnfinishedRotation { pending: pending.clone() });
        assert_eq!(keys.key_id(KeyRole::Signing), stray.key_id(KeyRole::Signing));
        let source = DataDirSigningKeys::new(&data_dir.join("keys"));
        assert_eq!(source.signing_key(&stray.key_id(KeyRole::Signing)).unwrap().to_bytes(), stray.signing.to_bytes());
        let unknown = source.signing_key("sha256:unknown").unwrap_err();
        assert!(matches!(unknown, KeyError::SigningKeyNotHeld { .. }), "{unknown}");

        // The next `keys rotate` only finishes it; the one after rotates.
        let finished = rotate_signing_key(&data_dir.join("keys"), store.as_ref(), NOW + 3).await.unwrap();
        assert_eq!(finished.key_id, stray.key_id(KeyRole::Signing));
        assert_eq!((finished.active_since, finished.retired), (NOW + 2, None));
        assert!(!pending.exists());
        assert_eq!(ControllerKeys::load(&data_dir).unwrap().key_id(KeyRole::Signing), stray.key_id(KeyRole::Signing));
        assert_eq!(
            open_keys_for_store(&data_dir.join("keys"), store.as_ref(), NOW).await.unwrap().1,
            KeysOpened::Matched
        );
        let rotated = rotate_signing_key(&data_dir.join("keys"), store.as_ref(), NOW + 4).await.unwrap();
        assert_eq!(rotated.retired, Some((stray.key_id(KeyRole::Signing), NOW + 4)));
        let history = store.key_history(KeyRole::Signing).await.unwrap();
        let retired: Vec<_> = history.iter().map(|record| (record.key_id.clone(), record.retired_at_ms)).collect();
        assert_eq!(
            retired,
            [
                (old.key_id(KeyRole::Signing), Some(NOW + 2)),
                (stray.key_id(KeyRole::Signing), Some(NOW + 4)),
                (rotated.key_id.clone(), None)
            ]
        );
        assert!(history.iter().all(|record| record.public_key.is_some()), "every signing key keeps its public key");

        // A data directory that is not the store's rotates nothing.
        let other = scratch.join("other");
        ControllerKeys::create(&other).unwrap();
        let error = rotate_signing_key(&other.join("keys"), store.as_ref(), NOW + 5).await.unwrap_err();
        assert!(matches!(error, KeyError::Mismatch { role: KeyRole::Identity, .. }), "{error}");
        assert!(!other.join("keys").join(PENDING_SIGNING_FILE).exists());
        assert_eq!(store.recorded_keys().await.unwrap()[1].key_id, rotated.key_id);
        // A stale read of the key in use writes nothing.
        let stale = KeyRecord { key_id: stray.key_id(KeyRole::Signing), ..in_use };
        let fresh = ControllerKeys::generate().unwrap();
        let fresh = KeyRecord {
            key_id: fresh.key_id(KeyRole::Signing),
            public_key: fresh.public_key(KeyRole::Signing),
            ..next
        };
        assert!(!store.rotate_recorded_key(&stale, &fresh, NOW + 6).await.unwrap());
        assert_eq!(store.key_history(KeyRole::Signing).await.unwrap(), history);
        drop(scratch);
        database.drop_now().await;
    }
);

on_both_stores!(keys_recorded_before_public_keys_were_get_them_at_the_next_start, |backend| async move {
    let (store, database) = migrated(backend).await;
    let scratch = Scratch::new("cloudly-keys");
    let data_dir = scratch.join("data");
    let (keys, _) = open_keys_for_store(&data_dir.join("keys"), store.as_ref(), NOW).await.unwrap();
    database.execute("UPDATE controller_keys SET public_key = NULL").await;
    assert!(store.recorded_keys().await.unwrap().iter().all(|record| record.public_key.is_none()));
    assert_eq!(open_keys_for_store(&data_dir.join("keys"), store.as_ref(), NOW).await.unwrap().1, KeysOpened::Matched);
    assert_eq!(store.recorded_keys().await.unwrap(), keys.key_records(NOW));
    // A stored public key that is not the recorded key's does not read back.
    let other = ControllerKeys::generate().unwrap();
    let text = cloudly::contract::signing::encode_public_key(&other.signing.verifying_key());
    database.execute(&format!("UPDATE controller_keys SET public_key = '{text}' WHERE role = 'signing'")).await;
    assert!(matches!(store.recorded_keys().await, Err(StoreError::Corrupt(_))));
    drop(scratch);
    database.drop_now().await;
});
