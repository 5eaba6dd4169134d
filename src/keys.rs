//! The controller's keys, kept in `<data dir>/keys/` (files mode 0600, created on first start):
//!
//! * `identity.ed25519` — signs administrator identities (EdDSA JWTs);
//! * `signing.ed25519` — signs records that leave for nodes (`ISigned<T>`);
//! * `secret.key` — the 256-bit key that seals secret values at rest (XChaCha20-Poly1305).
//!
//! Each file holds the 32 raw key bytes as lowercase hex and a newline. Nothing here prints or
//! logs key material; `Debug` of [`ControllerKeys`] shows public key ids only.

use crate::contract::signing::key_id;
use ed25519_dalek::SigningKey;
use secrecy::{ExposeSecret, SecretBox};
use std::fs;
use std::io::Write as _;
use std::path::{Path, PathBuf};

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

/// Why the keys could not be loaded or created. Never carries key bytes.
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
    /// A key file does not exist (and was not to be created).
    #[error(
        "key file {0} does not exist: this data directory has no controller keys; start `cloudly serve` \
         once with this data directory (it creates keys/), or copy keys/ from the running deployment"
    )]
    Missing(PathBuf),
    /// The operating system's random generator failed.
    #[error("the operating system's random generator failed")]
    Randomness,
}

/// Fills `buffer` from the operating system's random generator.
pub fn os_random(buffer: &mut [u8]) -> Result<(), KeyError> {
    getrandom::fill(buffer).map_err(|_| KeyError::Randomness)
}

impl ControllerKeys {
    /// Loads the keys from `<data_dir>/keys/`, creating any that is missing. Answers the keys and
    /// whether any was created.
    pub fn load_or_create(data_dir: &Path) -> Result<(ControllerKeys, bool), KeyError> {
        let dir = data_dir.join("keys");
        fs::create_dir_all(&dir).map_err(|source| KeyError::Io { path: dir.clone(), source })?;
        restrict(&dir, 0o700)?;
        let (identity, created_identity) = load_or_create_bytes(&dir.join("identity.ed25519"))?;
        let (signing, created_signing) = load_or_create_bytes(&dir.join("signing.ed25519"))?;
        let (secret, created_secret) = load_or_create_bytes(&dir.join("secret.key"))?;
        let keys = ControllerKeys::from_files(&dir, identity, signing, secret);
        Ok((keys, created_identity || created_signing || created_secret))
    }

    /// Loads the keys from `<data_dir>/keys/` and creates nothing: a missing directory or key
    /// file is [`KeyError::Missing`] naming it (for tools that must use a running deployment's
    /// keys, such as `cloudly identity issue`).
    pub fn load(data_dir: &Path) -> Result<ControllerKeys, KeyError> {
        let dir = data_dir.join("keys");
        let read = |name: &str| {
            let path = dir.join(name);
            read_key_file(&path)?.ok_or(KeyError::Missing(path))
        };
        let (identity, signing, secret) = (read("identity.ed25519")?, read("signing.ed25519")?, read("secret.key")?);
        Ok(ControllerKeys::from_files(&dir, identity, signing, secret))
    }

    /// The keys read from the files of `dir`; the signing key is active since its file's
    /// modification time.
    fn from_files(dir: &Path, identity: [u8; 32], signing: [u8; 32], secret: [u8; 32]) -> ControllerKeys {
        let signing_active_since = fs::metadata(dir.join("signing.ed25519"))
            .and_then(|metadata| metadata.modified())
            .ok()
            .and_then(|modified| modified.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |elapsed| elapsed.as_millis() as u64);
        ControllerKeys { signing_active_since, ..ControllerKeys::from_bytes(identity, signing, secret) }
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
}

/// The key held by `path`, or `None` when the file does not exist.
fn read_key_file(path: &Path) -> Result<Option<[u8; 32]>, KeyError> {
    match fs::read_to_string(path) {
        Ok(text) => Ok(Some(decode_hex(text.trim()).ok_or_else(|| KeyError::Malformed(path.to_owned()))?)),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(KeyError::Io { path: path.to_owned(), source }),
    }
}

fn load_or_create_bytes(path: &Path) -> Result<([u8; 32], bool), KeyError> {
    if let Some(bytes) = read_key_file(path)? {
        return Ok((bytes, false));
    }
    let mut bytes = [0u8; 32];
    os_random(&mut bytes)?;
    write_new_private_file(path, format!("{}\n", encode_hex(&bytes)).as_bytes())?;
    Ok((bytes, true))
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
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

fn decode_hex(text: &str) -> Option<[u8; 32]> {
    if text.len() != 64 || !text.bytes().all(|byte| byte.is_ascii_digit() || (b'a'..=b'f').contains(&byte)) {
        return None;
    }
    let mut bytes = [0u8; 32];
    for (index, byte) in bytes.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&text[index * 2..index * 2 + 2], 16).ok()?;
    }
    Some(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_created_once_with_private_modes_and_read_back() {
        let dir = std::env::temp_dir().join(format!("cloudly-keys-{}", uuid::Uuid::new_v4()));
        let (first, created) = ControllerKeys::load_or_create(&dir).unwrap();
        assert!(created);
        let (second, created_again) = ControllerKeys::load_or_create(&dir).unwrap();
        assert!(!created_again);
        assert_eq!(first.identity.to_bytes(), second.identity.to_bytes());
        assert_eq!(first.secret_key(), second.secret_key());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = fs::metadata(dir.join("keys/secret.key")).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        assert!(!format!("{first:?}").contains(&encode_hex(first.secret_key())));
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn load_reads_existing_keys_and_creates_nothing_when_they_are_missing() {
        let dir = std::env::temp_dir().join(format!("cloudly-keys-{}", uuid::Uuid::new_v4()));
        let error = ControllerKeys::load(&dir).unwrap_err();
        assert!(matches!(&error, KeyError::Missing(path) if path == &dir.join("keys/identity.ed25519")), "{error}");
        assert!(error.to_string().contains("cloudly serve"), "{error}");
        assert!(!dir.exists(), "load creates nothing");
        let (created, _) = ControllerKeys::load_or_create(&dir).unwrap();
        fs::remove_file(dir.join("keys/secret.key")).unwrap();
        let error = ControllerKeys::load(&dir).unwrap_err();
        assert!(matches!(&error, KeyError::Missing(path) if path.ends_with("keys/secret.key")), "{error}");
        assert!(!dir.join("keys/secret.key").exists(), "load creates nothing");
        let (recreated, _) = ControllerKeys::load_or_create(&dir).unwrap();
        let loaded = ControllerKeys::load(&dir).unwrap();
        assert_eq!(loaded.identity.to_bytes(), created.identity.to_bytes());
        assert_eq!(loaded.secret_key(), recreated.secret_key());
        assert_eq!(loaded.signing_active_since, recreated.signing_active_since);
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_malformed_key_file_is_named_not_echoed() {
        let dir = std::env::temp_dir().join(format!("cloudly-keys-{}", uuid::Uuid::new_v4()));
        fs::create_dir_all(dir.join("keys")).unwrap();
        fs::write(dir.join("keys/identity.ed25519"), "not-a-key-SECRETISH").unwrap();
        let error = ControllerKeys::load_or_create(&dir).unwrap_err().to_string();
        assert!(error.contains("malformed") && !error.contains("SECRETISH"), "{error}");
        fs::remove_dir_all(dir).unwrap();
    }
}
