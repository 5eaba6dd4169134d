//! The controller's signing key as this process holds it, following rotations
//! (`cloudly keys rotate`), and `getControllerSigningKeys`.
//!
//! **Every process signs with the store's signing key in use, or signs nothing.** The store
//! records which signing key is in use; a process checks it when the store signals that the keys
//! changed (at once on PostgreSQL), after a missed signal, and every
//! `ControllerSettings::signing_key_check_ms` (10 s) in any case. When the key in use is not the
//! one it holds, it takes the new one from its data directory (`keys::DataDirSigningKeys`: the
//! shared `keys/` a rotation wrote); when its data directory does not hold it, the process signs
//! nothing — every reconcile that would issue a record fails with
//! [`DomainError::SigningKeyUnavailable`] — until a later check finds it (no restart needed).
//! Between a rotation and a process's check (at most the interval) the process may still sign
//! with the key just retired; those signatures verify, since retired keys stay listed.
//!
//! **`getControllerSigningKeys` lists what the store records**: every signing key with its public
//! key, in use or retired (`retiredAt` set), sorted by key id, so every process answers the same
//! list, also right after a rotation. A key this process signs with that the store does not
//! record (a controller built over a store without key records, as in tests) is listed too.

use super::{Controller, DomainError};
use crate::contract::signing::key_id;
use crate::keys::SigningKeySource;
use crate::store::KeyRole;
use ed25519_dalek::{SigningKey, VerifyingKey};
use std::sync::{Arc, OnceLock, RwLock};

/// One key of `getControllerSigningKeys`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControllerSigningKey {
    /// The Ed25519 public key.
    pub public_key: VerifyingKey,
    /// Milliseconds since the epoch.
    pub active_since: u64,
    /// Milliseconds since the epoch, `None` while the key signs.
    pub retired_at: Option<u64>,
}

/// The signing key this process holds: the key, or the key id it lacks.
enum Held {
    /// Signs with this key.
    Key(SigningKey),
    /// The store uses this key id, which this process does not hold.
    Missing(String),
}

/// The signing key of this process and where it finds the next one after a rotation.
pub struct SigningKeys {
    held: RwLock<Held>,
    /// When the key this process started with became active (when the store does not record it).
    started_active_since: u64,
    source: OnceLock<Arc<dyn SigningKeySource>>,
}

impl std::fmt::Debug for SigningKeys {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("SigningKeys").field("key_id", &self.key_id().0).finish_non_exhaustive()
    }
}

impl SigningKeys {
    /// Signing with `key` (active since `active_since`), with no source of rotated keys yet.
    pub fn new(key: SigningKey, active_since: u64) -> SigningKeys {
        metrics::gauge!("cloudly_signing_key_available").set(1.0);
        SigningKeys { held: RwLock::new(Held::Key(key)), started_active_since: active_since, source: OnceLock::new() }
    }

    /// Where rotated keys are found (set once, by `cloudly serve`). Without one, a rotation
    /// leaves this process without a key.
    pub fn set_source(&self, source: Arc<dyn SigningKeySource>) {
        let _ = self.source.set(source);
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Held> {
        self.held.read().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The key to sign with now, or [`DomainError::SigningKeyUnavailable`].
    pub fn current(&self) -> Result<SigningKey, DomainError> {
        match &*self.read() {
            Held::Key(key) => Ok(key.clone()),
            Held::Missing(_) => Err(DomainError::SigningKeyUnavailable),
        }
    }

    /// The key id this process signs with (and true), or the one it lacks (and false).
    pub fn key_id(&self) -> (String, bool) {
        match &*self.read() {
            Held::Key(key) => (key_id(&key.verifying_key()), true),
            Held::Missing(key_id) => (key_id.clone(), false),
        }
    }

    fn set(&self, held: Held) {
        metrics::gauge!("cloudly_signing_key_available").set(if matches!(held, Held::Key(_)) { 1.0 } else { 0.0 });
        *self.held.write().unwrap_or_else(std::sync::PoisonError::into_inner) = held;
    }

    /// Follows the store's signing key in use, `in_use`: takes it from the source when it is not
    /// the key held, or marks it missing (logged once per key id).
    fn follow(&self, in_use: &str) {
        let (held_id, holds) = self.key_id();
        if holds && held_id == in_use {
            return;
        }
        let found = match self.source.get() {
            Some(source) => source.signing_key(in_use).map_err(|error| error.to_string()),
            None => Err("this controller has no data directory to take rotated keys from".to_owned()),
        };
        match found {
            Ok(key) => {
                tracing::info!(key_id = in_use, previous = %held_id, "signing with the store's signing key in use");
                self.set(Held::Key(key));
            }
            Err(error) => {
                if holds || held_id != in_use {
                    tracing::error!(key_id = in_use, %error, "signing key unavailable: this controller signs nothing until it holds the store's signing key in use");
                }
                self.set(Held::Missing(in_use.to_owned()));
            }
        }
    }
}

impl Controller {
    /// Checks the store's signing key in use and follows it ([`SigningKeys`]). A store that
    /// records no signing key leaves the key held as it is.
    pub async fn check_signing_key(&self) -> Result<(), DomainError> {
        let recorded = self.store.recorded_keys().await?;
        if let Some(in_use) = recorded.iter().find(|record| record.role == KeyRole::Signing) {
            self.signing.follow(&in_use.key_id);
        }
        Ok(())
    }

    /// `getControllerSigningKeys` (anyone): every signing key the store records with its public
    /// key, in use or retired, and the key this process signs with, sorted by key id.
    pub async fn get_controller_signing_keys(&self) -> Result<Vec<ControllerSigningKey>, DomainError> {
        let mut keys: Vec<ControllerSigningKey> = self
            .store
            .key_history(KeyRole::Signing)
            .await?
            .into_iter()
            .filter_map(|record| {
                Some(ControllerSigningKey {
                    public_key: record.public_key?,
                    active_since: record.recorded_at_ms,
                    retired_at: record.retired_at_ms,
                })
            })
            .collect();
        if let Ok(own) = self.signing.current()
            && !keys.iter().any(|key| key.public_key == own.verifying_key())
        {
            keys.push(ControllerSigningKey {
                public_key: own.verifying_key(),
                active_since: self.signing.started_active_since,
                retired_at: None,
            });
        }
        keys.sort_by_cached_key(|key| key_id(&key.public_key));
        Ok(keys)
    }
}
