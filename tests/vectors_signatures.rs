//! Golden signature vectors (`signatures.json`): the key derived from the seed, every valid signed
//! record verifies and re-signs to the same bytes (Ed25519 is deterministic), every invalid one is
//! refused.
//!
//! Projections are checked without the network module's snapshot (it is built separately): the
//! digest is recomputed from the payload with `kind::compute_digest` and the signature is checked
//! over `signature_message`. Claims go through the full `signing::verify`.

mod support;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use cloudly::contract::kind::compute_digest;
use cloudly::contract::primitives::Sha256Digest;
use cloudly::contract::signing::{
    PublishedKey, SignatureError, decode_public_key, encode_public_key, key_id, sign, signature_message,
    signed_to_value, verify,
};
use cloudly::contract::storage_claim::RuntimeLocalStorageClaim;
use cloudly::contract::{DigestedRecord, RecordKind};
use ed25519_dalek::{Signature, Signer as _, SigningKey};
use serde_json::Value;

fn seed_key(vector: &Value) -> SigningKey {
    let hex = vector["privateSeedHex"].as_str().unwrap();
    assert_eq!(hex.len(), 64);
    let bytes: Vec<u8> = (0..32).map(|index| u8::from_str_radix(&hex[2 * index..2 * index + 2], 16).unwrap()).collect();
    SigningKey::from_bytes(&bytes.try_into().unwrap())
}

fn published(vector: &Value) -> Vec<PublishedKey> {
    let public_key = decode_public_key(vector["publicKey"].as_str().unwrap()).expect("publicKey decodes");
    vec![PublishedKey::new(public_key)]
}

/// Verifies a signed record of any digested kind without its schema: exact envelope keys, the
/// algorithm, the signature encoding, the stated digest against the recomputed one, the key id,
/// and the strict Ed25519 signature over the message.
fn verify_without_schema(signed: &Value, domain: &str, keys: &[PublishedKey]) -> Result<(), &'static str> {
    let envelope = signed.as_object().ok_or("envelope")?;
    if envelope.len() != 2 || !envelope.contains_key("payload") || !envelope.contains_key("signature") {
        return Err("envelope");
    }
    let block = envelope["signature"].as_object().ok_or("envelope")?;
    if block.len() != 3 || ["keyId", "algorithm", "value"].iter().any(|key| !block.contains_key(*key)) {
        return Err("envelope");
    }
    if block["algorithm"] != "ed25519" {
        return Err("algorithm");
    }
    let value = block["value"].as_str().ok_or("encoding")?;
    let bytes: [u8; 64] =
        URL_SAFE_NO_PAD.decode(value).ok().and_then(|bytes| bytes.try_into().ok()).ok_or("encoding")?;
    let payload = &envelope["payload"];
    let stated = payload["digest"].as_str().and_then(Sha256Digest::parse).ok_or("digest")?;
    if compute_digest(domain, payload).map_err(|_| "digest")? != stated {
        return Err("digest");
    }
    let key = keys.iter().find(|key| Some(key.key_id.as_str()) == block["keyId"].as_str()).ok_or("key")?;
    key.public_key
        .verify_strict(&signature_message(domain, &stated), &Signature::from_bytes(&bytes))
        .map_err(|_| "signature")
}

#[test]
fn the_seed_gives_the_published_key_and_key_id() {
    let vector = support::load_vector("signatures.json");
    let key = seed_key(&vector);
    assert_eq!(encode_public_key(&key.verifying_key()), vector["publicKey"].as_str().unwrap());
    assert_eq!(key_id(&key.verifying_key()), vector["keyId"].as_str().unwrap());
    assert_eq!(published(&vector)[0].key_id, vector["keyId"].as_str().unwrap());
}

#[test]
fn valid_signed_records_verify_and_resign_to_the_same_bytes() {
    let vector = support::load_vector("signatures.json");
    let key = seed_key(&vector);
    let keys = published(&vector);
    let cases = support::cases(&vector, "valid");
    assert_eq!(cases.len(), vector["valid"].as_array().unwrap().len());
    assert_eq!(cases.len(), 2);
    let mut claims = 0;
    for (name, case) in cases {
        let kind = RecordKind::from_name(case["kind"].as_str().unwrap()).expect("known kind");
        let domain = case["domain"].as_str().unwrap();
        assert_eq!(kind.domain(), Some(domain), "{name}");
        let signed = &case["signed"];
        assert_eq!(signed["signature"]["keyId"], vector["keyId"], "{name}");
        verify_without_schema(signed, domain, &keys).unwrap_or_else(|error| panic!("{name}: {error}"));
        let stated = Sha256Digest::parse(signed["payload"]["digest"].as_str().unwrap()).unwrap();
        let again = URL_SAFE_NO_PAD.encode(key.sign(&signature_message(domain, &stated)).to_bytes());
        assert_eq!(again, signed["signature"]["value"].as_str().unwrap(), "{name}: deterministic signature");
        match kind {
            RecordKind::RuntimeLocalStorageClaim => {
                claims += 1;
                let claim: RuntimeLocalStorageClaim =
                    verify(signed, &keys).unwrap_or_else(|error| panic!("{name}: {error}"));
                assert_eq!(claim.to_value(), signed["payload"], "{name}");
                assert_eq!(signed_to_value(&sign(&key, claim)), *signed, "{name}: re-signed envelope");
            }
            RecordKind::RuntimeNetworkProjection => {}
            other => panic!("{name}: unexpected kind {other:?}"),
        }
    }
    assert_eq!(claims, 1);
}

#[test]
fn invalid_signed_records_are_refused() {
    let vector = support::load_vector("signatures.json");
    let keys = published(&vector);
    let cases = support::cases(&vector, "invalid");
    assert_eq!(cases.len(), vector["invalid"].as_array().unwrap().len());
    assert_eq!(cases.len(), 6);
    for (name, case) in cases {
        let signed = &case["signed"];
        let kind = RecordKind::from_name(case["kind"].as_str().unwrap()).expect("known kind");
        assert_eq!(kind.domain(), case["domain"].as_str(), "{name}");
        match kind {
            RecordKind::RuntimeLocalStorageClaim => {
                let error = verify::<RuntimeLocalStorageClaim>(signed, &keys).unwrap_err();
                let expected = match name.as_str() {
                    "payload changed and re-digested, old signature" => Some(SignatureError::BadSignature),
                    "algorithm is not ed25519" => Some(SignatureError::Algorithm),
                    "padded signature value" => Some(SignatureError::Encoding),
                    "extra key in signature" => Some(SignatureError::EnvelopeSchema),
                    "unknown key id" => Some(SignatureError::UnknownKey),
                    "validly signed payload that breaks the claim schema" => Some(SignatureError::PayloadSchema),
                    _ => None,
                };
                if let Some(expected) = expected {
                    assert_eq!(error, expected, "{name}");
                }
            }
            _ => assert!(verify_without_schema(signed, case["domain"].as_str().unwrap(), &keys).is_err(), "{name}"),
        }
    }
}

#[test]
fn a_valid_claim_under_another_domain_or_key_is_refused() {
    let vector = support::load_vector("signatures.json");
    let keys = published(&vector);
    let claim_case = vector["valid"]
        .as_array()
        .unwrap()
        .iter()
        .find(|case| case["kind"] == RecordKind::RuntimeLocalStorageClaim.name())
        .unwrap();
    let signed = &claim_case["signed"];
    // The claim's signature does not verify as a projection's: the domain is in the message.
    let projection_domain = RecordKind::RuntimeNetworkProjection.domain().unwrap();
    let stated = Sha256Digest::parse(signed["payload"]["digest"].as_str().unwrap()).unwrap();
    let bytes: [u8; 64] =
        URL_SAFE_NO_PAD.decode(signed["signature"]["value"].as_str().unwrap()).unwrap().try_into().unwrap();
    assert!(
        keys[0]
            .public_key
            .verify_strict(&signature_message(projection_domain, &stated), &Signature::from_bytes(&bytes))
            .is_err()
    );
    // Another key published under the vector's key id does not verify it either.
    let other = SigningKey::from_bytes(&[7u8; 32]);
    let impostor = vec![PublishedKey { key_id: keys[0].key_id.clone(), public_key: other.verifying_key() }];
    assert_eq!(verify::<RuntimeLocalStorageClaim>(signed, &impostor).unwrap_err(), SignatureError::BadSignature);
}
