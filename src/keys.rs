//! The controller's keys, kept in the keys directory (`--keys-dir` / `CLOUDLY_KEYS_DIR`, default
//! `<data dir>/keys/`, [`default_keys_dir`]; files mode 0600 in a 0700 directory), which every
//! function here takes as its `keys_dir`:
//!
//! * `identity.ed25519` — signs administrator identities (EdDSA JWTs);
//! * `signing.ed25519` — signs records that leave for nodes (`ISigned<T>`);
//! * `secret.key` — the 256-bit key that seals secret values at rest (XChaCha20-Poly1305).
//!
//! Each file holds the 32 raw key bytes as lowercase hex and a newline. Nothing here prints or
//! logs key material; `Debug` of [`ControllerKeys`] shows public key ids only.
//!
//! **Keys never change behind the operator's back.** The store records the key id of each key it
//! was written with ([`crate::store::KeyRecordStore`]); [`open_keys_for_store`], run by
//! `cloudly serve` after the migrations, decides:
//!
//! * every key file present and recorded: each must match its record, else the start is refused
//!   naming the file, the recorded key id and the fix;
//! * a key file missing while the store holds data (recorded keys, or any organization or sealed
//!   secret of a store written before keys were recorded): the start is refused naming the file;
//!   nothing is created;
//! * keys are created only for an empty store (the first start), and recorded then; the keys of a
//!   store written before keys were recorded are recorded as they are (the upgrade path).
//!
//! Key files are written before they are recorded, so a record never names a key that no data
//! directory holds; a start that loses the race to record (another controller with other keys
//! recorded first) removes the key files it created and is refused. Only `cloudly keys adopt`
//! ([`adopt_keys_for_store`]) and `cloudly keys rotate` ([`rotate_signing_key`]) replace a store's
//! recorded keys.
//!
//! **Rotating the signing key** ([`rotate_signing_key`]) runs beside running controllers, so a
//! routine rotation needs no downtime (identities and sealed bearers use the other keys): the new
//! key is written to `keys/signing.ed25519.next` (which also keeps a second rotation out), then
//! recorded as the key in use with the old one retired (one compare-and-swap in the store, which
//! keeps the old public key so earlier signatures still verify), then renamed over
//! `keys/signing.ed25519` — the old private key is gone. A rotation interrupted after it recorded
//! the key leaves `signing.ed25519.next` holding the key in use: controllers sign with it from
//! there, and the next `cloudly keys rotate` only finishes the rename. A running controller finds
//! the new key through [`DataDirSigningKeys`] when the store tells it of the rotation.

use crate::contract::signing::key_id;
use crate::store::{KeyRecord, KeyRecordStore, KeyRole, StoreError};
use ed25519_dalek::{SigningKey, VerifyingKey};
use secrecy::{ExposeSecret, SecretBox};
use sha2::{Digest as _, Sha256};
use std::fs;
use std::io::Write as _;
use std::path::{Path, PathBuf};

/// The keys directory of a data directory when `--keys-dir` is not set: `<data_dir>/keys`.
pub fn default_keys_dir(data_dir: &Path) -> PathBuf {
    data_dir.join("keys")
}

/// How a message names the keys directory holding `file`: `keys/` when it is called `keys` (as
/// the default `<data dir>/keys` is), else its whole path.
fn keys_dir_name(file: &Path) -> String {
    match file.parent() {
        Some(dir) if dir.file_name().is_none_or(|name| name == "keys") => "keys/".to_owned(),
        Some(dir) => format!("{}/", dir.display()),
        None => "keys/".to_owned(),
    }
}

/// What the fix is, in every refusal of a keys directory whose keys are not the store's (`file`
/// is the key file refused).
fn restore_keys(file: &Path) -> String {
    let dir = keys_dir_name(file);
    format!(
        "restore {dir} from this deployment's backup, or copy {dir} from a controller running on this store (every \
         controller of one store uses the same keys); only `cloudly keys adopt` replaces a store's keys, and every \
         identity, signature and sealed secret made with the old ones stops working"
    )
}

/// Where an interrupted or running rotation keeps the next signing key, beside `signing.ed25519`.
pub const PENDING_SIGNING_FILE: &str = "signing.ed25519.next";

/// The label hashed before the secret key into its key id ([`secret_key_id`]).
const SECRET_KEY_ID_LABEL: &[u8] = b"cloudly/secret-key-id/v1\n";

/// The three keys of one controller.
pub struct ControllerKeys {
    /// Signs identities.
    pub identity: SigningKey,
    /// Signs node-bound records.
    pub signing: SigningKey,
    /// Seals secret values at rest.
    pub secret: SecretBox<[u8; 32]>,
    /// When the signing key became active (its file's modification time), ms since the epoch.
    pub signing_active_since: u64,
}

impl std::fmt::Debug for ControllerKeys {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("ControllerKeys")
            .field("identity", &key_id(&self.identity.verifying_key()))
            .field("signing", &key_id(&self.signing.verifying_key()))
            .field("secret", &"<redacted>")
            .finish()
    }
}

/// Why the keys could not be loaded, created or matched with the store. Never carries key bytes;
/// key ids are public key hashes and one-way fingerprints.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// Reading or writing a key file failed.
    #[error("key file {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A key file does not hold 32 bytes of lowercase hex.
    #[error("key file {0} is malformed: it must hold 64 lowercase hex characters")]
    Malformed(PathBuf),
    /// A key file that its group or others may read or write: its key may have been copied or
    /// replaced, so it is not used (as ssh refuses such a private key).
    #[error(
        "key file {path} has mode {mode:04o}: a controller key must be readable and writable by its owner only; \
         run `chmod 600 {path}` (and check who could have read it), then start again",
        path = .path.display()
    )]
    Exposed {
        /// The file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// A key file does not exist (and was not to be created).
    #[error(
        "key file {0} does not exist: this data directory has no controller keys; start `cloudly serve` \
         once with this data directory (it creates {dir}), or copy {dir} from the running deployment",
        dir = keys_dir_name(.0)
    )]
    Missing(PathBuf),
    /// A key file is missing and the store holds data: new keys would make it unusable.
    #[error(
        "key file {path} does not exist, but this store holds data written with {written_with}; cloudly creates \
         keys only for an empty store and created none: {restore}",
        restore = restore_keys(.path)
    )]
    MissingForStore {
        /// The first missing file.
        path: PathBuf,
        /// "<role> key <key id>", or how the store was written when it recorded no key.
        written_with: String,
    },
    /// A key file holds another key than the one the store was written with.
    #[error(
        "key file {path} holds {role} key {file_key_id}, but this store was written with {role} key \
         {recorded_key_id}; refusing to start: {restore}",
        restore = restore_keys(.path)
    )]
    Mismatch {
        /// The file.
        path: PathBuf,
        /// Its role.
        role: KeyRole,
        /// The key id of the file's key.
        file_key_id: String,
        /// The key id the store recorded for the role.
        recorded_key_id: String,
    },
    /// Another controller recorded other keys first while this one created its keys for what
    /// was an empty store; the created key files were removed.
    #[error(
        "another controller recorded its keys in this store first: this store's {role} key is {recorded_key_id}, \
         not the one created in {path}; the key files this start created were removed: copy {dir} from the \
         controller running on this store and start again",
        dir = keys_dir_name(.path)
    )]
    RecordedByAnother {
        /// The first created file whose key is not the recorded one.
        path: PathBuf,
        /// Its role.
        role: KeyRole,
        /// The key id the store recorded for the role.
        recorded_key_id: String,
    },
    /// A key file holds a key the store recorded as retired.
    #[error(
        "key file {path} holds {role} key {file_key_id}, which this store retired (`cloudly keys rotate` or \
         `cloudly keys adopt`); refusing to start: copy {dir} from a controller running on this store (after a \
         rotation, the data directory it ran in holds the key in use)",
        dir = keys_dir_name(.path)
    )]
    Retired {
        /// The file.
        path: PathBuf,
        /// Its role.
        role: KeyRole,
        /// The key id of the file's key.
        file_key_id: String,
    },
    /// The store records no controller keys, so there is nothing to rotate.
    #[error("this store records no controller keys: start `cloudly serve` once with this data directory first")]
    NotRecorded,
    /// A rotation's pending key file holds a key the store does not use.
    #[error(
        "key file {path} holds signing key {key_id}, which this store does not use: another `cloudly keys rotate` \
         is running, or one stopped before it recorded the key; if none is running, remove the file and run again"
    )]
    RotationPending {
        /// The pending file.
        path: PathBuf,
        /// The key id of its key.
        key_id: String,
    },
    /// The store's signing key changed while a rotation ran; the rotation changed nothing.
    #[error(
        "the store's signing key changed while this rotation ran (another rotation or `cloudly keys adopt` came \
         first); nothing was changed: run `cloudly keys rotate` again with a data directory holding the key in use"
    )]
    RotatedMeanwhile,
    /// This data directory does not hold the signing key the store uses.
    #[error(
        "key file {path} does not hold signing key {key_id}, which this store uses (after `cloudly keys rotate`): \
         copy {dir}signing.ed25519 from the data directory the rotation ran in; this controller signs nothing \
         until it holds that key",
        dir = keys_dir_name(.path)
    )]
    SigningKeyNotHeld {
        /// The signing key file.
        path: PathBuf,
        /// The key id the store records as in use.
        key_id: String,
    },
    /// The store did not answer while the keys were checked or recorded.
    #[error("the controller keys could not be checked against the store: {0}")]
    Store(#[from] StoreError),
    /// The operating system's random generator failed.
    #[error("the operating system's random generator failed")]
    Randomness,
}

/// Fills `buffer` from the operating system's random generator.
pub fn os_random(buffer: &mut [u8]) -> Result<(), KeyError> {
    getrandom::fill(buffer).map_err(|_| KeyError::Randomness)
}

/// The file under `keys/` that holds the key of `role`.
pub fn key_file_name(role: KeyRole) -> &'static str {
    match role {
        KeyRole::Identity => "identity.ed25519",
        KeyRole::Signing => "signing.ed25519",
        KeyRole::Secret => "secret.key",
    }
}

/// The key id of the secret-sealing key: `fingerprint:` + lowerhex of the first 16 bytes of
/// SHA-256 over a fixed label and the key. One-way: it tells keys apart and reveals nothing of
/// the key.
pub fn secret_key_id(secret: &[u8; 32]) -> String {
    let digest = Sha256::new().chain_update(SECRET_KEY_ID_LABEL).chain_update(secret).finalize();
    format!("fingerprint:{}", encode_hex(&digest[..16]))
}

impl ControllerKeys {
    /// Loads the keys from `<data_dir>/keys/` ([`ControllerKeys::load_from`] its
    /// [`default_keys_dir`]).
    pub fn load(data_dir: &Path) -> Result<ControllerKeys, KeyError> {
        ControllerKeys::load_from(&default_keys_dir(data_dir))
    }

    /// Loads the keys from `keys_dir` and creates nothing: a missing directory or key file is
    /// [`KeyError::Missing`] naming it (for tools that must use a running deployment's keys, such
    /// as `cloudly identity issue`).
    pub fn load_from(keys_dir: &Path) -> Result<ControllerKeys, KeyError> {
        let found = KeyFiles::read(keys_dir)?;
        if let Some(role) = found.first_missing() {
            return Err(KeyError::Missing(found.path(role)));
        }
        Ok(found.keys())
    }

    /// Creates the three keys of a new deployment in `<data_dir>/keys/`, failing when any key
    /// file exists (tests; `cloudly serve` creates keys only through [`open_keys_for_store`]).
    pub fn create(data_dir: &Path) -> Result<ControllerKeys, KeyError> {
        let mut found = KeyFiles::read(&default_keys_dir(data_dir))?;
        if let Some(role) = KeyRole::ALL.into_iter().find(|role| found.key(*role).is_some()) {
            let source = std::io::Error::from(std::io::ErrorKind::AlreadyExists);
            return Err(KeyError::Io { path: found.path(role), source });
        }
        found.create_missing()?;
        Ok(found.keys())
    }

    /// Keys from fixed bytes (tests and benchmarks).
    pub fn from_bytes(identity: [u8; 32], signing: [u8; 32], secret: [u8; 32]) -> ControllerKeys {
        ControllerKeys {
            identity: SigningKey::from_bytes(&identity),
            signing: SigningKey::from_bytes(&signing),
            secret: SecretBox::new(Box::new(secret)),
            signing_active_since: 0,
        }
    }

    /// Fresh random keys (tests).
    pub fn generate() -> Result<ControllerKeys, KeyError> {
        let mut bytes = [[0u8; 32]; 3];
        for key in &mut bytes {
            os_random(key)?;
        }
        Ok(ControllerKeys::from_bytes(bytes[0], bytes[1], bytes[2]))
    }

    /// The secret-sealing key bytes.
    pub fn secret_key(&self) -> &[u8; 32] {
        self.secret.expose_secret()
    }

    /// The key id of the key of `role`: `sha256:…` of an Ed25519 public key
    /// ([`crate::contract::signing::key_id`]), [`secret_key_id`] of the secret key.
    pub fn key_id(&self, role: KeyRole) -> String {
        match role {
            KeyRole::Identity => key_id(&self.identity.verifying_key()),
            KeyRole::Signing => key_id(&self.signing.verifying_key()),
            KeyRole::Secret => secret_key_id(self.secret_key()),
        }
    }

    /// The public key of the key of `role` (`None` for the secret key).
    pub fn public_key(&self, role: KeyRole) -> Option<VerifyingKey> {
        match role {
            KeyRole::Identity => Some(self.identity.verifying_key()),
            KeyRole::Signing => Some(self.signing.verifying_key()),
            KeyRole::Secret => None,
        }
    }

    /// The records of these keys, in use, recorded at `now_ms`, in role order.
    pub fn key_records(&self, now_ms: u64) -> Vec<KeyRecord> {
        KeyRole::ALL
            .into_iter()
            .map(|role| KeyRecord {
                role,
                key_id: self.key_id(role),
                recorded_at_ms: now_ms,
                public_key: self.public_key(role),
                retired_at_ms: None,
            })
            .collect()
    }
}

/// How [`open_keys_for_store`] found the keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeysOpened {
    /// Every key was recorded, and each matches its record.
    Matched,
    /// Every key was recorded and matches its record, the signing key in `pending` (a
    /// `cloudly keys rotate` that recorded it but did not rename it over `signing.ed25519`).
    MatchedUnfinishedRotation {
        /// `keys/signing.ed25519.next`.
        pending: PathBuf,
    },
    /// Keys were recorded now: the store held no data (its first start; `created` names the key
    /// files created for it), or it held data written before keys were recorded
    /// (`store_held_data`: the upgrade path; nothing is created then).
    Recorded {
        /// The key files created by this start.
        created: Vec<PathBuf>,
        /// Whether the store held data written before keys were recorded.
        store_held_data: bool,
    },
}

/// The keys `cloudly serve` runs with on `store` (migrated): those of `keys_dir`,
/// checked against the key ids the store recorded, created and recorded only for an empty store
/// (see the module documentation for every case). `now_ms` is when new records are recorded.
pub async fn open_keys_for_store(
    keys_dir: &Path,
    store: &dyn KeyRecordStore,
    now_ms: u64,
) -> Result<(ControllerKeys, KeysOpened), KeyError> {
    let mut found = KeyFiles::read(keys_dir)?;
    // Asked before the records are read, so that a store holding nothing but key records that
    // another controller wrote meanwhile shows them below, never as a store without records.
    let store_held_data = store.holds_deployment_data().await?;
    let recorded = store.recorded_keys().await?;
    let recorded_id = |role: KeyRole| recorded.iter().find(|record| record.role == role).map(|record| &record.key_id);
    let mut created = Vec::new();
    if let Some(role) = found.first_missing() {
        if store_held_data || !recorded.is_empty() {
            let written_with = match recorded_id(role) {
                Some(recorded) => format!("{role} key {recorded}"),
                None => "keys it does not record (it was written before key ids were recorded)".to_owned(),
            };
            return Err(KeyError::MissingForStore { path: found.path(role), written_with });
        }
        created = found.create_missing()?;
    }
    let mut keys = found.keys();
    // A recorded key that differs refuses the start before anything is written.
    let pending = check_against_records(&found, &mut keys, store, &recorded).await?;
    if KeyRole::ALL.into_iter().all(|role| recorded_id(role).is_some()) {
        record_missing_public_keys(store, &keys, &recorded).await?;
        let opened = match pending {
            Some(pending) => KeysOpened::MatchedUnfinishedRotation { pending },
            None => KeysOpened::Matched,
        };
        return Ok((keys, opened));
    }
    // Insert-if-absent, then compare: of racing controllers, one key set is recorded. A store
    // error leaves created files in place: the commit may have happened with only its answer lost.
    let recorded = store.record_keys_if_absent(&keys.key_records(now_ms)).await?;
    for role in KeyRole::ALL {
        let file_key_id = keys.key_id(role);
        match recorded.iter().find(|record| record.role == role) {
            Some(record) if record.key_id == file_key_id => {}
            Some(record) if !created.is_empty() => {
                found.remove_created(&created);
                return Err(KeyError::RecordedByAnother {
                    path: found.path(role),
                    role,
                    recorded_key_id: record.key_id.clone(),
                });
            }
            Some(record) => {
                return Err(KeyError::Mismatch {
                    path: found.path(role),
                    role,
                    file_key_id,
                    recorded_key_id: record.key_id.clone(),
                });
            }
            // The insert met the key's own record, retired.
            None => return Err(KeyError::Retired { path: found.path(role), role, file_key_id }),
        }
    }
    Ok((keys, KeysOpened::Recorded { created, store_held_data }))
}

/// Refuses keys that are not the recorded ones: a key file holding another key than its role's
/// recorded key in use is [`KeyError::Retired`] when the store retired that key, else
/// [`KeyError::Mismatch`]. A signing key file that holds the retired key while the pending file
/// of an interrupted rotation holds the key in use is not refused: `keys` signs with the pending
/// key, whose path is answered.
async fn check_against_records(
    found: &KeyFiles,
    keys: &mut ControllerKeys,
    store: &dyn KeyRecordStore,
    recorded: &[KeyRecord],
) -> Result<Option<PathBuf>, KeyError> {
    let mut pending = None;
    for role in KeyRole::ALL {
        let Some(record) = recorded.iter().find(|record| record.role == role) else { continue };
        let file_key_id = keys.key_id(role);
        if record.key_id == file_key_id {
            continue;
        }
        if role == KeyRole::Signing
            && let Some(key) = found.pending.map(|bytes| SigningKey::from_bytes(&bytes))
            && key_id(&key.verifying_key()) == record.key_id
        {
            keys.signing = key;
            pending = Some(found.pending_path());
            continue;
        }
        let retired = store.key_history(role).await?.into_iter().any(|history| history.key_id == file_key_id);
        let path = found.path(role);
        return Err(if retired {
            KeyError::Retired { path, role, file_key_id }
        } else {
            KeyError::Mismatch { path, role, file_key_id, recorded_key_id: record.key_id.clone() }
        });
    }
    Ok(pending)
}

/// Records the public key of each recorded Ed25519 key in use that has none yet (recorded before
/// public keys were); `recorded` matches `keys`.
async fn record_missing_public_keys(
    store: &dyn KeyRecordStore,
    keys: &ControllerKeys,
    recorded: &[KeyRecord],
) -> Result<(), KeyError> {
    for record in recorded.iter().filter(|record| record.public_key.is_none()) {
        if let Some(public_key) = keys.public_key(record.role) {
            store.record_public_key(record.role, &record.key_id, &public_key).await?;
        }
    }
    Ok(())
}

/// What `cloudly keys adopt` changed for one role.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdoptedKey {
    /// The role.
    pub role: KeyRole,
    /// The key id now in use.
    pub key_id: String,
    /// The key id it replaced (retired), if another was in use.
    pub replaced: Option<String>,
    /// Whether this command created the key file.
    pub created: bool,
}

/// `cloudly keys adopt`: makes the keys of `keys_dir` the store's keys in use, creating
/// the missing key files and retiring each recorded key they replace. Every identity, signature
/// and sealed secret made with a replaced key stops working; the operator asked for it.
pub async fn adopt_keys_for_store(
    keys_dir: &Path,
    store: &dyn KeyRecordStore,
    now_ms: u64,
) -> Result<Vec<AdoptedKey>, KeyError> {
    let before = store.recorded_keys().await?;
    let mut found = KeyFiles::read(keys_dir)?;
    let created = found.create_missing()?;
    let keys = found.keys();
    store.replace_recorded_keys(&keys.key_records(now_ms), now_ms).await?;
    Ok(KeyRole::ALL
        .into_iter()
        .map(|role| AdoptedKey {
            role,
            key_id: keys.key_id(role),
            replaced: before
                .iter()
                .find(|record| record.role == role && record.key_id != keys.key_id(role))
                .map(|record| record.key_id.clone()),
            created: created.contains(&found.path(role)),
        })
        .collect())
}

/// What `cloudly keys rotate` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SigningKeyRotation {
    /// The signing key in use now.
    pub key_id: String,
    /// When it was recorded, ms since the Unix epoch.
    pub active_since: u64,
    /// The key it replaced and when that was retired; `None` when this run only finished an
    /// interrupted rotation.
    pub retired: Option<(String, u64)>,
}

/// `cloudly keys rotate`: a new signing key in use, the old one retired (see the module
/// documentation), written in `keys_dir`, whose keys must be the store's. Running controllers are told
/// by the caller ([`crate::store::SignalStore::notify_keys_changed`]).
pub async fn rotate_signing_key(
    keys_dir: &Path,
    store: &dyn KeyRecordStore,
    now_ms: u64,
) -> Result<SigningKeyRotation, KeyError> {
    let found = KeyFiles::read(keys_dir)?;
    if let Some(role) = found.first_missing() {
        return Err(KeyError::Missing(found.path(role)));
    }
    let recorded = store.recorded_keys().await?;
    let in_use = recorded.iter().find(|record| record.role == KeyRole::Signing).ok_or(KeyError::NotRecorded)?;
    if let Some(pending) = found.pending.map(|bytes| SigningKey::from_bytes(&bytes)) {
        let pending_id = key_id(&pending.verifying_key());
        if pending_id != in_use.key_id {
            return Err(KeyError::RotationPending { path: found.pending_path(), key_id: pending_id });
        }
        found.finish_rotation()?;
        return Ok(SigningKeyRotation { key_id: pending_id, active_since: in_use.recorded_at_ms, retired: None });
    }
    let mut keys = found.keys();
    check_against_records(&found, &mut keys, store, &recorded).await?;
    let mut bytes = [0u8; 32];
    os_random(&mut bytes)?;
    let next = SigningKey::from_bytes(&bytes);
    let next_id = key_id(&next.verifying_key());
    // The pending file is also the lock: a second rotation finds it and stops.
    if !create_key_file(&found.pending_path(), &bytes)? {
        let held = read_key_file(&found.pending_path())?.map(|bytes| SigningKey::from_bytes(&bytes));
        let key_id = held.map_or_else(String::new, |held| key_id(&held.verifying_key()));
        return Err(KeyError::RotationPending { path: found.pending_path(), key_id });
    }
    sync_directory(&found.dir)?;
    let retiring = KeyRecord { public_key: Some(keys.signing.verifying_key()), ..in_use.clone() };
    let record = KeyRecord {
        role: KeyRole::Signing,
        key_id: next_id.clone(),
        recorded_at_ms: now_ms,
        public_key: Some(next.verifying_key()),
        retired_at_ms: None,
    };
    // A store error keeps the pending file: the commit may have happened with only its answer
    // lost, and the next run finishes the rotation or names the file.
    if !store.rotate_recorded_key(&retiring, &record, now_ms).await? {
        let _ = fs::remove_file(found.pending_path());
        return Err(KeyError::RotatedMeanwhile);
    }
    found.finish_rotation()?;
    Ok(SigningKeyRotation { key_id: next_id, active_since: now_ms, retired: Some((in_use.key_id.clone(), now_ms)) })
}

/// Where a running controller finds the private key of the signing key the store uses after a
/// rotation.
pub trait SigningKeySource: Send + Sync {
    /// The signing key whose key id is `key_id`, or why it is not held.
    fn signing_key(&self, key_id: &str) -> Result<SigningKey, KeyError>;
}

/// The signing keys of a keys directory (`<data dir>/keys` or `--keys-dir`): `signing.ed25519`,
/// then the pending file of a rotation in progress or interrupted (`signing.ed25519.next`).
#[derive(Debug, Clone)]
pub struct DataDirSigningKeys {
    keys_dir: PathBuf,
}

impl DataDirSigningKeys {
    /// The signing keys in `keys_dir`.
    pub fn new(keys_dir: &Path) -> DataDirSigningKeys {
        DataDirSigningKeys { keys_dir: keys_dir.to_owned() }
    }
}

impl SigningKeySource for DataDirSigningKeys {
    fn signing_key(&self, wanted: &str) -> Result<SigningKey, KeyError> {
        for name in [key_file_name(KeyRole::Signing), PENDING_SIGNING_FILE] {
            if let Some(bytes) = read_key_file(&self.keys_dir.join(name))? {
                let key = SigningKey::from_bytes(&bytes);
                if key_id(&key.verifying_key()) == wanted {
                    return Ok(key);
                }
            }
        }
        let path = self.keys_dir.join(key_file_name(KeyRole::Signing));
        Err(KeyError::SigningKeyNotHeld { path, key_id: wanted.to_owned() })
    }
}

/// The key files of a keys directory as found: each role's key, or `None` when its file does
/// not exist.
struct KeyFiles {
    /// The keys directory.
    dir: PathBuf,
    /// Whether `dir` existed when it was read.
    dir_existed: bool,
    /// The keys, in [`KeyRole::ALL`] order.
    keys: [Option<[u8; 32]>; 3],
    /// The next signing key of a rotation in progress or interrupted ([`PENDING_SIGNING_FILE`]).
    pending: Option<[u8; 32]>,
}

impl KeyFiles {
    /// Reads the key files of `keys_dir`; creates nothing. A malformed or unreadable file is an
    /// error naming it.
    fn read(keys_dir: &Path) -> Result<KeyFiles, KeyError> {
        let dir = keys_dir.to_owned();
        let mut keys = [None; 3];
        for (slot, role) in keys.iter_mut().zip(KeyRole::ALL) {
            *slot = read_key_file(&dir.join(key_file_name(role)))?;
        }
        let pending = read_key_file(&dir.join(PENDING_SIGNING_FILE))?;
        Ok(KeyFiles { dir_existed: dir.exists(), dir, keys, pending })
    }

    fn pending_path(&self) -> PathBuf {
        self.dir.join(PENDING_SIGNING_FILE)
    }

    /// Renames the pending signing key over `signing.ed25519` (atomic: a reader finds the old key
    /// or the new one, and the pending file until then) and makes it durable. A pending file
    /// already renamed (by a racing run) is not an error.
    fn finish_rotation(&self) -> Result<(), KeyError> {
        let target = self.path(KeyRole::Signing);
        match fs::rename(self.pending_path(), &target) {
            Ok(()) => {}
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => return Err(KeyError::Io { path: target, source }),
        }
        sync_directory(&self.dir)
    }

    fn index(role: KeyRole) -> usize {
        KeyRole::ALL.iter().position(|each| *each == role).expect("every role is in ALL")
    }

    fn key(&self, role: KeyRole) -> Option<[u8; 32]> {
        self.keys[KeyFiles::index(role)]
    }

    fn path(&self, role: KeyRole) -> PathBuf {
        self.dir.join(key_file_name(role))
    }

    /// The first role, in [`KeyRole::ALL`] order, whose file does not exist.
    fn first_missing(&self) -> Option<KeyRole> {
        KeyRole::ALL.into_iter().find(|role| self.key(*role).is_none())
    }

    /// Creates the key of every role whose file is missing (the directory mode 0700, each file
    /// mode 0600) and answers the files created. A file another process created meanwhile is
    /// read, not replaced.
    fn create_missing(&mut self) -> Result<Vec<PathBuf>, KeyError> {
        let mut created = Vec::new();
        if self.first_missing().is_none() {
            return Ok(created);
        }
        fs::create_dir_all(&self.dir).map_err(|source| KeyError::Io { path: self.dir.clone(), source })?;
        restrict(&self.dir, 0o700)?;
        for role in KeyRole::ALL {
            if self.key(role).is_some() {
                continue;
            }
            let path = self.path(role);
            let mut bytes = [0u8; 32];
            os_random(&mut bytes)?;
            let key = if create_key_file(&path, &bytes)? {
                created.push(path);
                bytes
            } else {
                read_key_file(&path)?.ok_or_else(|| KeyError::Missing(path.clone()))?
            };
            self.keys[KeyFiles::index(role)] = Some(key);
        }
        sync_directory(&self.dir)?;
        Ok(created)
    }

    /// Removes the key files `created` by this process, and the keys directory when this process
    /// created it and it is empty now. Best effort: what cannot be removed is refused at the next
    /// start by the same checks.
    fn remove_created(&self, created: &[PathBuf]) {
        for path in created {
            let _ = fs::remove_file(path);
        }
        if !self.dir_existed {
            let _ = fs::remove_dir(&self.dir);
        }
        let _ = sync_directory(&self.dir);
    }

    /// The keys; every file must have been found or created.
    fn keys(&self) -> ControllerKeys {
        let key = |role| self.key(role).expect("every key file is present");
        let signing_active_since = fs::metadata(self.path(KeyRole::Signing))
            .and_then(|metadata| metadata.modified())
            .ok()
            .and_then(|modified| modified.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |elapsed| elapsed.as_millis() as u64);
        ControllerKeys {
            signing_active_since,
            ..ControllerKeys::from_bytes(key(KeyRole::Identity), key(KeyRole::Signing), key(KeyRole::Secret))
        }
    }
}

/// The key held by `path`, or `None` when the file does not exist. Every key file is read here:
/// one its group or others may read or write is [`KeyError::Exposed`], judged from the file that
/// was opened (not from a second look at the path).
fn read_key_file(path: &Path) -> Result<Option<[u8; 32]>, KeyError> {
    let io = |source| KeyError::Io { path: path.to_owned(), source };
    let mut file = match fs::File::open(path) {
        Ok(file) => file,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(io(source)),
    };
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = file.metadata().map_err(io)?.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            return Err(KeyError::Exposed { path: path.to_owned(), mode });
        }
    }
    let mut text = String::new();
    std::io::Read::read_to_string(&mut file, &mut text).map_err(io)?;
    Ok(Some(decode_hex(text.trim()).ok_or_else(|| KeyError::Malformed(path.to_owned()))?))
}

/// Writes `key` to `path` (mode 0600) unless `path` exists; answers whether it wrote it. The key
/// is written in full to a temporary file first and then linked to `path`, which fails when
/// `path` exists, so a process that finds `path` reads a whole key, never a half-written one.
fn create_key_file(path: &Path, key: &[u8; 32]) -> Result<bool, KeyError> {
    let file_name = path.file_name().and_then(|name| name.to_str()).unwrap_or("key");
    let temporary = path.with_file_name(format!(".{file_name}.{}.tmp", uuid::Uuid::new_v4().simple()));
    write_new_private_file(&temporary, format!("{}\n", encode_hex(key)).as_bytes())?;
    let linked = fs::hard_link(&temporary, path);
    let _ = fs::remove_file(&temporary);
    match linked {
        Ok(()) => Ok(true),
        Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
        Err(source) => Err(KeyError::Io { path: path.to_owned(), source }),
    }
}

/// Makes the entries created in or removed from `dir` durable.
fn sync_directory(dir: &Path) -> Result<(), KeyError> {
    #[cfg(unix)]
    fs::File::open(dir)
        .and_then(|directory| directory.sync_all())
        .map_err(|source| KeyError::Io { path: dir.to_owned(), source })?;
    let _ = dir;
    Ok(())
}

/// Creates `path` with mode 0600 and writes `contents`; fails if it already exists, so two
/// processes starting at once never overwrite each other's key.
pub fn write_new_private_file(path: &Path, contents: &[u8]) -> Result<(), KeyError> {
    let mut options = fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut file = options.open(path).map_err(|source| KeyError::Io { path: path.to_owned(), source })?;
    file.write_all(contents)
        .and_then(|()| file.sync_all())
        .map_err(|source| KeyError::Io { path: path.to_owned(), source })
}

fn restrict(path: &Path, mode: u32) -> Result<(), KeyError> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(path, fs::Permissions::from_mode(mode))
            .map_err(|source| KeyError::Io { path: path.to_owned(), source })?;
    }
    let _ = (path, mode);
    Ok(())
}

fn encode_hex(bytes: &[u8]) -> String {
    hex::encode(bytes)
}

/// 32 bytes as 64 lowercase hex characters (uppercase is refused: a key file has one spelling).
fn decode_hex(text: &str) -> Option<[u8; 32]> {
    if text.bytes().any(|byte| byte.is_ascii_uppercase()) {
        return None;
    }
    let mut bytes = [0u8; 32];
    hex::decode_to_slice(text, &mut bytes).ok()?;
    Some(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch() -> PathBuf {
        std::env::temp_dir().join(format!("cloudly-keys-{}", uuid::Uuid::new_v4()))
    }

    #[test]
    fn created_keys_have_private_modes_read_back_and_are_never_created_twice() {
        let dir = scratch();
        let created = ControllerKeys::create(&dir).unwrap();
        let loaded = ControllerKeys::load(&dir).unwrap();
        assert_eq!(created.identity.to_bytes(), loaded.identity.to_bytes());
        assert_eq!(created.secret_key(), loaded.secret_key());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            for role in KeyRole::ALL {
                let mode = fs::metadata(dir.join("keys").join(key_file_name(role))).unwrap().permissions().mode();
                assert_eq!(mode & 0o777, 0o600, "{role}");
            }
            assert_eq!(fs::metadata(dir.join("keys")).unwrap().permissions().mode() & 0o777, 0o700);
        }
        let names: Vec<_> = fs::read_dir(dir.join("keys")).unwrap().map(|entry| entry.unwrap().file_name()).collect();
        assert_eq!(names.len(), 3, "no temporary file is left behind: {names:?}");
        let error = ControllerKeys::create(&dir).unwrap_err();
        assert!(matches!(&error, KeyError::Io { path, .. } if path.ends_with("keys/identity.ed25519")), "{error}");
        assert_eq!(ControllerKeys::load(&dir).unwrap().secret_key(), created.secret_key(), "nothing was replaced");
        assert!(!format!("{created:?}").contains(&encode_hex(created.secret_key())));
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn load_reads_existing_keys_and_creates_nothing_when_they_are_missing() {
        let dir = scratch();
        let error = ControllerKeys::load(&dir).unwrap_err();
        assert!(matches!(&error, KeyError::Missing(path) if path == &dir.join("keys/identity.ed25519")), "{error}");
        assert!(error.to_string().contains("cloudly serve"), "{error}");
        assert!(!dir.exists(), "load creates nothing");
        ControllerKeys::create(&dir).unwrap();
        fs::remove_file(dir.join("keys/secret.key")).unwrap();
        let error = ControllerKeys::load(&dir).unwrap_err();
        assert!(matches!(&error, KeyError::Missing(path) if path.ends_with("keys/secret.key")), "{error}");
        assert!(!dir.join("keys/secret.key").exists(), "load creates nothing");
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_malformed_key_file_is_named_not_echoed() {
        let dir = scratch();
        fs::create_dir_all(dir.join("keys")).unwrap();
        write_new_private_file(&dir.join("keys/identity.ed25519"), b"not-a-key-SECRETISH").unwrap();
        let error = ControllerKeys::load(&dir).unwrap_err().to_string();
        assert!(error.contains("malformed") && !error.contains("SECRETISH"), "{error}");
        fs::remove_dir_all(dir).unwrap();
    }

    #[cfg(unix)]
    #[test]
    fn a_key_file_its_group_or_others_may_read_is_refused_naming_its_mode_and_the_fix() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = scratch();
        let created = ControllerKeys::create(&dir).unwrap();
        for role in KeyRole::ALL {
            let path = dir.join("keys").join(key_file_name(role));
            for mode in [0o644, 0o640, 0o604, 0o660, 0o602] {
                fs::set_permissions(&path, fs::Permissions::from_mode(mode)).unwrap();
                let error = ControllerKeys::load(&dir).unwrap_err();
                assert!(
                    matches!(&error, KeyError::Exposed { path: named, mode: found } if *named == path && *found == mode)
                );
                let text = error.to_string();
                assert!(
                    text.contains(&format!("mode {mode:04o}"))
                        && text.contains(&format!("chmod 600 {}", path.display()))
                );
                assert!(!text.contains(&encode_hex(created.secret_key())), "{text}");
            }
            // Owner-only modes stand.
            for mode in [0o600, 0o400] {
                fs::set_permissions(&path, fs::Permissions::from_mode(mode)).unwrap();
                ControllerKeys::load(&dir).unwrap();
            }
            fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).unwrap();
        }
        // A running controller does not take a rotated key from an exposed file either.
        let signing = dir.join("keys").join(key_file_name(KeyRole::Signing));
        fs::set_permissions(&signing, fs::Permissions::from_mode(0o644)).unwrap();
        let wanted = key_id(&created.signing.verifying_key());
        assert!(matches!(
            DataDirSigningKeys::new(&dir.join("keys")).signing_key(&wanted),
            Err(KeyError::Exposed { .. })
        ));
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn the_secret_key_id_is_a_fingerprint_that_reveals_nothing_of_the_key() {
        let keys = ControllerKeys::generate().unwrap();
        let id = keys.key_id(KeyRole::Secret);
        assert_eq!(id, secret_key_id(keys.secret_key()), "stable");
        assert!(id.starts_with("fingerprint:") && id.len() == "fingerprint:".len() + 32, "{id}");
        let hex = encode_hex(keys.secret_key());
        assert!((0..=hex.len() - 8).all(|at| !id.contains(&hex[at..at + 8])), "no part of the key shows through");
        // It is not the plain SHA-256 of the key either (the label is hashed first).
        let plain = encode_hex(&Sha256::digest(keys.secret_key())[..16]);
        assert!(!id.ends_with(&plain));
        assert_ne!(id, secret_key_id(ControllerKeys::generate().unwrap().secret_key()));
        assert!(keys.key_id(KeyRole::Identity).starts_with("sha256:"));
        assert_ne!(keys.key_id(KeyRole::Identity), keys.key_id(KeyRole::Signing));
    }
}
