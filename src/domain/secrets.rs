//! Managed bearer credentials: generation from the operating system's random generator, sealing
//! at rest with XChaCha20-Poly1305 under the controller's secret key, and SHA-256 hashes for
//! constant-time verification.
//!
//! **Architecture invariant: a bearer value exists in plaintext only here and, later, on the
//! node session that resolves it.** [`Bearer`] redacts `Debug` and has no `Display` or
//! `Serialize`, so a stray `{:?}` or a response body cannot carry it.

use crate::contract::Id;
use crate::keys::{KeyError, os_random};
use crate::store::SealedSecret;
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use secrecy::{ExposeSecret, SecretString};
use sha2::{Digest as _, Sha256};
use subtle::ConstantTimeEq;

/// A bearer credential value. `Debug` prints `Bearer(<redacted>)`.
pub struct Bearer(SecretString);

impl std::fmt::Debug for Bearer {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str("Bearer(<redacted>)")
    }
}

impl Bearer {
    /// A fresh bearer: `prefix` + unpadded base64url of 32 bytes (256 bits) from the OS generator.
    pub fn generate(prefix: &str) -> Result<Bearer, KeyError> {
        let mut bytes = [0u8; 32];
        os_random(&mut bytes)?;
        Ok(Bearer(SecretString::from(format!("{prefix}{}", URL_SAFE_NO_PAD.encode(bytes)))))
    }

    /// Wraps a presented value.
    pub fn from_presented(value: &str) -> Bearer {
        Bearer(SecretString::from(value.to_owned()))
    }

    /// The plaintext, for the one place that must hand it over (a response that shows a new
    /// credential once, or a node session resolving its secret binding).
    pub fn expose(&self) -> &str {
        self.0.expose_secret()
    }

    /// SHA-256 of the value.
    pub fn hash(&self) -> [u8; 32] {
        hash_value(self.expose())
    }

    /// Compares this value's hash with `expected_hash` in constant time.
    pub fn matches_hash(&self, expected_hash: &[u8; 32]) -> bool {
        self.hash().ct_eq(expected_hash).into()
    }
}

/// SHA-256 of a secret value.
pub fn hash_value(value: &str) -> [u8; 32] {
    Sha256::digest(value.as_bytes()).into()
}

/// Why a sealed secret could not be opened. Carries no secret material.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SealError {
    /// The OS generator failed.
    #[error("the operating system's random generator failed")]
    Randomness,
    /// The ciphertext, nonce or associated data does not authenticate under this key.
    #[error("sealed secret does not authenticate under the controller's secret key")]
    Unauthentic,
}

fn associated_data(secret_id: &Id, secret_version_id: &Id) -> Vec<u8> {
    let mut aad = b"serve.zone/cloudly/secret/v1\0".to_vec();
    aad.extend_from_slice(secret_id.as_str().as_bytes());
    aad.push(0);
    aad.extend_from_slice(secret_version_id.as_str().as_bytes());
    aad
}

/// A fresh 192-bit nonce from the OS generator.
pub fn fresh_nonce() -> Result<[u8; 24], SealError> {
    let mut nonce = [0u8; 24];
    os_random(&mut nonce).map_err(|_| SealError::Randomness)?;
    Ok(nonce)
}

/// Seals `bearer` for the secret version with a fresh nonce.
pub fn seal(
    key: &[u8; 32],
    secret_id: &Id,
    secret_version_id: &Id,
    bearer: &Bearer,
) -> Result<SealedSecret, SealError> {
    Ok(seal_with_nonce(key, secret_id, secret_version_id, bearer, fresh_nonce()?))
}

/// Seals `bearer` for the secret version under `nonce` (which must never repeat under one key),
/// binding the ids as associated data so a ciphertext cannot be moved to another version.
pub fn seal_with_nonce(
    key: &[u8; 32],
    secret_id: &Id,
    secret_version_id: &Id,
    bearer: &Bearer,
    nonce: [u8; 24],
) -> SealedSecret {
    let cipher = XChaCha20Poly1305::new(key.into());
    let aad = associated_data(secret_id, secret_version_id);
    // XChaCha20-Poly1305 fails only for messages longer than 256 GiB; a bearer is 48 bytes.
    let ciphertext = cipher
        .encrypt(&XNonce::from(nonce), Payload { msg: bearer.expose().as_bytes(), aad: &aad })
        .expect("a bearer is far below the AEAD's message limit");
    SealedSecret {
        secret_id: secret_id.clone(),
        secret_version_id: secret_version_id.clone(),
        nonce: nonce.to_vec(),
        ciphertext,
        value_hash: bearer.hash(),
    }
}

/// Opens a sealed secret.
pub fn open(key: &[u8; 32], sealed: &SealedSecret) -> Result<Bearer, SealError> {
    let cipher = XChaCha20Poly1305::new(key.into());
    let nonce: [u8; 24] = sealed.nonce.as_slice().try_into().map_err(|_| SealError::Unauthentic)?;
    let aad = associated_data(&sealed.secret_id, &sealed.secret_version_id);
    let plaintext = cipher
        .decrypt(&XNonce::from(nonce), Payload { msg: &sealed.ciphertext, aad: &aad })
        .map_err(|_| SealError::Unauthentic)?;
    let value = String::from_utf8(plaintext).map_err(|_| SealError::Unauthentic)?;
    Ok(Bearer(SecretString::from(value)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids() -> (Id, Id) {
        (Id::parse("secret-1").unwrap(), Id::parse("sv-1").unwrap())
    }

    #[test]
    fn a_sealed_bearer_opens_only_under_its_key_and_ids() {
        let (secret_id, version_id) = ids();
        let bearer = Bearer::generate("szci_").unwrap();
        assert_eq!(bearer.expose().len(), 5 + 43);
        let sealed = seal(&[1; 32], &secret_id, &version_id, &bearer).unwrap();
        assert!(!sealed.ciphertext.windows(8).any(|window| bearer.expose().as_bytes().windows(8).any(|b| b == window)));
        assert_eq!(open(&[1; 32], &sealed).unwrap().expose(), bearer.expose());
        assert_eq!(open(&[2; 32], &sealed).unwrap_err(), SealError::Unauthentic);
        let mut moved = sealed.clone();
        moved.secret_version_id = Id::parse("sv-2").unwrap();
        assert_eq!(open(&[1; 32], &moved).unwrap_err(), SealError::Unauthentic);
        assert!(bearer.matches_hash(&sealed.value_hash));
        assert!(!Bearer::from_presented("szci_other").matches_hash(&sealed.value_hash));
    }

    #[test]
    fn debug_never_prints_the_value() {
        let bearer = Bearer::generate("szci_").unwrap();
        assert_eq!(format!("{bearer:?}"), "Bearer(<redacted>)");
        let (secret_id, version_id) = ids();
        let sealed = seal(&[1; 32], &secret_id, &version_id, &bearer).unwrap();
        assert!(!format!("{sealed:?}").contains("ciphertext"));
    }

    #[test]
    fn fresh_bearers_differ() {
        assert_ne!(Bearer::generate("x").unwrap().expose(), Bearer::generate("x").unwrap().expose());
    }
}
