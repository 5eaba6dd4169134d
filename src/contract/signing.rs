//! Ed25519 signatures over digested records: `ISigned<T>` (`01-contract-basics.md`, "Signatures").
//!
//! ```text
//! message   = utf8("serve.zone/signature/v1") || 0x00 || utf8(domain) || 0x00 || utf8(record.digest)
//! signature = Ed25519(controllerKey, message)
//! ```

use super::kind::{DigestedRecord, RecordKind};
use super::primitives::Sha256Digest;
use super::reader::{Record, literal, string};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ed25519_dalek::{Signer as _, SigningKey, VerifyingKey};
use serde::Serialize;
use serde_json::{Value, json};
use sha2::{Digest as _, Sha256};

/// The signature context prefix.
pub const SIGNATURE_CONTEXT: &str = "serve.zone/signature/v1";

/// The only signature algorithm.
pub const ALGORITHM: &str = "ed25519";

/// `keyId` = `sha256:` + lowerhex(SHA-256(raw 32-byte public key)).
pub fn key_id(public_key: &VerifyingKey) -> String {
    let output: [u8; 32] = Sha256::digest(public_key.as_bytes()).into();
    Sha256Digest::from_bytes(&output).as_str().to_owned()
}

/// Unpadded base64url of the raw 32 public key bytes, as `getControllerSigningKeys` publishes it.
pub fn encode_public_key(public_key: &VerifyingKey) -> String {
    URL_SAFE_NO_PAD.encode(public_key.as_bytes())
}

/// Reads an unpadded base64url public key of exactly 32 bytes.
pub fn decode_public_key(text: &str) -> Option<VerifyingKey> {
    let bytes: [u8; 32] = URL_SAFE_NO_PAD.decode(text).ok()?.try_into().ok()?;
    VerifyingKey::from_bytes(&bytes).ok()
}

/// The signed message for a record of `domain` with `digest`.
pub fn signature_message(domain: &str, digest: &Sha256Digest) -> Vec<u8> {
    let mut message = Vec::with_capacity(SIGNATURE_CONTEXT.len() + domain.len() + 73);
    message.extend_from_slice(SIGNATURE_CONTEXT.as_bytes());
    message.push(0);
    message.extend_from_slice(domain.as_bytes());
    message.push(0);
    message.extend_from_slice(digest.as_str().as_bytes());
    message
}

/// `ISigned<T>['signature']`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SignatureBlock {
    /// The signing key's id.
    pub key_id: String,
    /// Always `"ed25519"`.
    pub algorithm: &'static str,
    /// Unpadded base64url of the 64-byte signature.
    pub value: String,
}

/// `ISigned<T>`: a payload and its controller signature.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Signed<T> {
    /// The signed record.
    pub payload: T,
    /// The signature over its digest.
    pub signature: SignatureBlock,
}

/// Signs `record` (whose stated digest the caller has computed) with `key`.
pub fn sign<T: DigestedRecord>(key: &SigningKey, record: T) -> Signed<T> {
    let domain = T::KIND.domain().expect("a digested record kind has a domain");
    let signature = key.sign(&signature_message(domain, record.stated_digest()));
    Signed {
        signature: SignatureBlock {
            key_id: key_id(&key.verifying_key()),
            algorithm: ALGORITHM,
            value: URL_SAFE_NO_PAD.encode(signature.to_bytes()),
        },
        payload: record,
    }
}

/// A published verification key (`getControllerSigningKeys`).
#[derive(Debug, Clone)]
pub struct PublishedKey {
    /// Its key id.
    pub key_id: String,
    /// The key.
    pub public_key: VerifyingKey,
}

impl PublishedKey {
    /// Publishes `public_key` under its derived key id.
    pub fn new(public_key: VerifyingKey) -> Self {
        PublishedKey { key_id: key_id(&public_key), public_key }
    }
}

/// Why a signed envelope did not verify. No variant carries input text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    /// The envelope or its signature block lacks its exact keys.
    #[error("signed envelope must use its exact schema")]
    EnvelopeSchema,
    /// `algorithm` is not `"ed25519"`.
    #[error("signature algorithm must be ed25519")]
    Algorithm,
    /// `value` is not unpadded base64url of exactly 64 bytes.
    #[error("signature value must be unpadded base64url of 64 bytes")]
    Encoding,
    /// The payload fails the snapshot of its record kind.
    #[error("signed payload fails its record schema")]
    PayloadSchema,
    /// The payload's stated digest is not its content's digest.
    #[error("signed payload digest does not match")]
    PayloadDigest,
    /// No published key has this key id.
    #[error("signature key id is not a published controller key")]
    UnknownKey,
    /// The signature does not verify over the message.
    #[error("signature does not verify")]
    BadSignature,
}

/// Verifies `ISigned<T>` strictly against the published keys and answers the payload.
pub fn verify<T: DigestedRecord>(envelope: &Value, keys: &[PublishedKey]) -> Result<T, SignatureError> {
    let envelope = Record::exact(envelope, &["payload", "signature"]).map_err(|_| SignatureError::EnvelopeSchema)?;
    let block = envelope
        .read("signature", |value| Record::exact(value, &["keyId", "algorithm", "value"]))
        .map_err(|_| SignatureError::EnvelopeSchema)?;
    let key_id = block.read("keyId", string).map_err(|_| SignatureError::EnvelopeSchema)?;
    block.read("algorithm", |value| literal(value, ALGORITHM)).map_err(|_| SignatureError::Algorithm)?;
    let value = block.read("value", string).map_err(|_| SignatureError::Encoding)?;
    let signature_bytes: [u8; 64] =
        URL_SAFE_NO_PAD.decode(value).ok().and_then(|bytes| bytes.try_into().ok()).ok_or(SignatureError::Encoding)?;
    let payload = T::snapshot(envelope.get("payload").map_err(|_| SignatureError::EnvelopeSchema)?)
        .map_err(|_| SignatureError::PayloadSchema)?;
    if payload.compute_digest() != *payload.stated_digest() {
        return Err(SignatureError::PayloadDigest);
    }
    let key = keys.iter().find(|key| key.key_id == key_id).ok_or(SignatureError::UnknownKey)?;
    let domain = T::KIND.domain().expect("a digested record kind has a domain");
    let signature = ed25519_dalek::Signature::from_bytes(&signature_bytes);
    key.public_key
        .verify_strict(&signature_message(domain, payload.stated_digest()), &signature)
        .map_err(|_| SignatureError::BadSignature)?;
    Ok(payload)
}

/// Serializes a signed record to its wire JSON.
pub fn signed_to_value<T: DigestedRecord>(signed: &Signed<T>) -> Value {
    json!({ "payload": signed.payload.to_value(), "signature": signed.signature })
}

/// The kinds that travel signed to nodes.
pub const SIGNED_KINDS: [RecordKind; 3] =
    [RecordKind::RuntimeNetworkProjection, RecordKind::RuntimeLocalStorageClaim, RecordKind::RuntimeAssignment];
