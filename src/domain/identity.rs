//! Administrator identities (`02-wire.md`, "Identity"): `IIdentity` carrying an EdDSA JWT signed
//! by the controller's identity key, and the role rules.
//!
//! The JWT library (`jsonwebtoken`) checks the signature; expiry is checked here against the
//! caller's clock (passed in), so tests control time and no leeway hides an expired identity.
//! A token whose signature verified is remembered by its SHA-256 (never the token) with its claims,
//! in a bounded table, so the Ed25519 check runs once per token, not once per request; fields and
//! expiry are still checked on every use.

use crate::contract::Id;
use crate::contract::reader::{self, Record};
use ed25519_dalek::{SigningKey, VerifyingKey};
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest as _, Sha256};
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

/// `IIdentity['role']`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Every administrator method.
    Admin,
    /// Read methods and `designateClusterIngress`.
    Operator,
    /// Read methods only.
    Viewer,
}

impl Role {
    /// Parses `admin`, `operator` or `viewer`.
    pub fn parse(text: &str) -> Option<Role> {
        match text {
            "admin" => Some(Role::Admin),
            "operator" => Some(Role::Operator),
            "viewer" => Some(Role::Viewer),
            _ => None,
        }
    }

    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Admin => "admin",
            Role::Operator => "operator",
            Role::Viewer => "viewer",
        }
    }

    /// True when this role may call a method needing `access`.
    pub fn allows(self, access: Access) -> bool {
        match access {
            Access::Read => true,
            Access::Designate => matches!(self, Role::Admin | Role::Operator),
            Access::Admin => self == Role::Admin,
        }
    }
}

/// What an administrator method needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// `get*` and `list*`: every role.
    Read,
    /// `designateClusterIngress`: `admin` and `operator`.
    Designate,
    /// Every other administrator write: `admin`.
    Admin,
}

/// `IIdentity['type']`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum IdentityType {
    /// A person.
    Human,
    /// A program.
    Machine,
}

impl IdentityType {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            IdentityType::Human => "human",
            IdentityType::Machine => "machine",
        }
    }
}

/// `IIdentity`, as issued and presented. `jwt` is a bearer credential: `Debug` redacts it.
#[derive(Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Identity {
    /// A display name.
    pub name: String,
    /// The user id (`sub`), recorded as a designation's `actorId`.
    pub user_id: Id,
    /// `human` or `machine`.
    #[serde(rename = "type")]
    pub identity_type: IdentityType,
    /// The role.
    pub role: Role,
    /// Milliseconds since the epoch.
    pub expires_at: u64,
    /// The signed token.
    pub jwt: String,
}

impl std::fmt::Debug for Identity {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("Identity")
            .field("name", &self.name)
            .field("user_id", &self.user_id)
            .field("role", &self.role)
            .field("expires_at", &self.expires_at)
            .field("jwt", &"<redacted>")
            .finish()
    }
}

/// A verified caller: who, and with which role. Carries no token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// The user id.
    pub user_id: Id,
    /// The role.
    pub role: Role,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Claims {
    sub: String,
    name: String,
    #[serde(rename = "type")]
    identity_type: IdentityType,
    role: Role,
    exp: u64,
    iat: u64,
    jti: String,
}

/// Why an identity was refused (`identity-refused`). The variants are for logs; the caller sees
/// only the code. None carries the token.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum IdentityRefusal {
    /// No `identity`, or not `IIdentity`'s exact shape.
    #[error("identity missing or malformed")]
    Malformed,
    /// The token's signature does not verify under the controller's identity key.
    #[error("identity token signature or format refused")]
    BadToken,
    /// `expiresAt` has passed.
    #[error("identity expired")]
    Expired,
    /// A field disagrees with its claim.
    #[error("identity fields disagree with the token claims")]
    Mismatch,
}

/// PKCS#8 v1 DER of an Ed25519 private key (RFC 8410): a fixed 16-byte prefix and the seed.
/// `jsonwebtoken` takes this form for EdDSA signing keys.
fn ed25519_pkcs8_der(key: &SigningKey) -> Vec<u8> {
    const PREFIX: [u8; 16] =
        [0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04, 0x20];
    let mut der = PREFIX.to_vec();
    der.extend_from_slice(&key.to_bytes());
    der
}

/// Who an identity is issued to.
#[derive(Debug, Clone)]
pub struct IdentitySubject {
    /// A display name.
    pub name: String,
    /// The user id.
    pub user_id: Id,
    /// `human` or `machine`.
    pub identity_type: IdentityType,
    /// The role.
    pub role: Role,
}

/// Issues an identity for `subject` signed by `key`, valid from `now_ms` for `ttl_ms`. `jti`
/// must be unique.
pub fn issue_identity(
    key: &SigningKey,
    subject: &IdentitySubject,
    now_ms: u64,
    ttl_ms: u64,
    jti: &str,
) -> Result<Identity, jsonwebtoken::errors::Error> {
    let IdentitySubject { name, user_id, identity_type, role } = subject;
    let (identity_type, role) = (*identity_type, *role);
    let expires_at = now_ms + ttl_ms;
    let claims = Claims {
        sub: user_id.as_str().to_owned(),
        name: name.clone(),
        identity_type,
        role,
        exp: expires_at / 1000,
        iat: now_ms / 1000,
        jti: jti.to_owned(),
    };
    let jwt = jsonwebtoken::encode(
        &Header::new(Algorithm::EdDSA),
        &claims,
        &EncodingKey::from_ed_der(&ed25519_pkcs8_der(key)),
    )?;
    Ok(Identity { name: name.clone(), user_id: user_id.clone(), identity_type, role, expires_at, jwt })
}

/// How many verified tokens an [`IdentityVerifier`] remembers.
pub const VERIFIED_TOKEN_CACHE_SIZE: usize = 4096;

/// Tokens whose signature verified, keyed by the SHA-256 of the token (the token itself is not
/// kept), with the claims they carry. Bounded: the oldest entry leaves first.
struct VerifiedTokens {
    capacity: usize,
    claims: HashMap<[u8; 32], Arc<Claims>>,
    order: VecDeque<[u8; 32]>,
}

impl VerifiedTokens {
    fn get(&self, key: &[u8; 32]) -> Option<Arc<Claims>> {
        self.claims.get(key).cloned()
    }

    fn insert(&mut self, key: [u8; 32], claims: Arc<Claims>) {
        if self.capacity == 0 || self.claims.contains_key(&key) {
            return;
        }
        while self.claims.len() >= self.capacity {
            let Some(oldest) = self.order.pop_front() else { break };
            self.claims.remove(&oldest);
        }
        self.claims.insert(key, claims);
        self.order.push_back(key);
    }

    fn remove(&mut self, key: &[u8; 32]) {
        if self.claims.remove(key).is_some() {
            self.order.retain(|entry| entry != key);
        }
    }
}

/// Verifies `request.identity` against the controller's identity key at `now_ms`.
///
/// The Ed25519 signature of a token is checked once: a token that verified is remembered (by its
/// SHA-256, with its claims; at most [`VERIFIED_TOKEN_CACHE_SIZE`]), and its next uses skip only
/// the signature check. The identity's fields are compared with the claims and the expiry with
/// the clock on every use; a token that fails to verify is never remembered.
pub struct IdentityVerifier {
    key: DecodingKey,
    validation: Validation,
    verified: Mutex<VerifiedTokens>,
}

impl IdentityVerifier {
    /// A verifier for identities signed by `public_key`.
    pub fn new(public_key: &VerifyingKey) -> Self {
        Self::with_cache_capacity(public_key, VERIFIED_TOKEN_CACHE_SIZE)
    }

    /// A verifier that remembers at most `capacity` verified tokens (0: none).
    pub fn with_cache_capacity(public_key: &VerifyingKey, capacity: usize) -> Self {
        let mut validation = Validation::new(Algorithm::EdDSA);
        // Expiry is checked against the caller's clock below, without leeway.
        validation.validate_exp = false;
        validation.required_spec_claims.clear();
        IdentityVerifier {
            key: DecodingKey::from_ed_der(public_key.as_bytes()),
            validation,
            verified: Mutex::new(VerifiedTokens { capacity, claims: HashMap::new(), order: VecDeque::new() }),
        }
    }

    fn lock_verified(&self) -> std::sync::MutexGuard<'_, VerifiedTokens> {
        self.verified.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// How many verified tokens are remembered.
    pub fn remembered_tokens(&self) -> usize {
        self.lock_verified().claims.len()
    }

    /// The claims of a token whose signature verifies, from memory or checked now.
    fn verified_claims(&self, jwt: &str) -> Result<(Arc<Claims>, [u8; 32]), IdentityRefusal> {
        let key: [u8; 32] = Sha256::digest(jwt.as_bytes()).into();
        if let Some(claims) = self.lock_verified().get(&key) {
            return Ok((claims, key));
        }
        let claims = Arc::new(
            jsonwebtoken::decode::<Claims>(jwt, &self.key, &self.validation)
                .map_err(|_| IdentityRefusal::BadToken)?
                .claims,
        );
        self.lock_verified().insert(key, claims.clone());
        Ok((claims, key))
    }

    /// The `IIdentity` a token alone stands for (what an operator pastes without the rest): its
    /// claims, once the token's signature verifies. Not a check of expiry or role: the identity
    /// it answers is verified like any other ([`IdentityVerifier::verify`]).
    pub fn identity_of_token(&self, jwt: &str) -> Result<Identity, IdentityRefusal> {
        let (claims, _) = self.verified_claims(jwt)?;
        Ok(Identity {
            name: claims.name.clone(),
            user_id: Id::parse(&claims.sub).ok_or(IdentityRefusal::Malformed)?,
            identity_type: claims.identity_type,
            role: claims.role,
            expires_at: claims.exp.checked_mul(1000).ok_or(IdentityRefusal::Malformed)?,
            jwt: jwt.to_owned(),
        })
    }

    /// Verifies an `IIdentity` value.
    pub fn verify(&self, value: Option<&Value>, now_ms: u64) -> Result<Caller, IdentityRefusal> {
        let value = value.ok_or(IdentityRefusal::Malformed)?;
        let record = Record::exact(value, &["name", "userId", "type", "role", "expiresAt", "jwt"])
            .map_err(|_| IdentityRefusal::Malformed)?;
        let read = |key: &str| record.read(key, reader::string).map_err(|_| IdentityRefusal::Malformed);
        let name = read("name")?;
        let user_id = record.read("userId", reader::id).map_err(|_| IdentityRefusal::Malformed)?;
        let identity_type = read("type")?;
        let role = Role::parse(read("role")?).ok_or(IdentityRefusal::Malformed)?;
        let expires_at = record.read("expiresAt", reader::counter).map_err(|_| IdentityRefusal::Malformed)?;
        let jwt = read("jwt")?;
        let (claims, key) = self.verified_claims(jwt)?;
        if claims.sub != user_id.as_str()
            || claims.name != name
            || claims.identity_type.as_str() != identity_type
            || claims.role != role
            || claims.exp != expires_at / 1000
        {
            return Err(IdentityRefusal::Mismatch);
        }
        if now_ms >= expires_at {
            // It stays refused; remembering it no longer saves anything.
            self.lock_verified().remove(&key);
            return Err(IdentityRefusal::Expired);
        }
        Ok(Caller { user_id, role })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn key(byte: u8) -> SigningKey {
        SigningKey::from_bytes(&[byte; 32])
    }

    fn issued(role: Role) -> Identity {
        let subject = IdentitySubject {
            name: "Ada".to_owned(),
            user_id: Id::parse("user-1").unwrap(),
            identity_type: IdentityType::Human,
            role,
        };
        issue_identity(&key(7), &subject, 1_000_000, 3_600_000, "jti-1").unwrap()
    }

    #[test]
    fn an_issued_identity_verifies_until_it_expires() {
        let identity = issued(Role::Operator);
        let verifier = IdentityVerifier::new(&key(7).verifying_key());
        let value = serde_json::to_value(&identity).unwrap();
        let caller = verifier.verify(Some(&value), 1_000_001).unwrap();
        assert_eq!(caller.role, Role::Operator);
        assert_eq!(verifier.verify(Some(&value), identity.expires_at), Err(IdentityRefusal::Expired));
    }

    #[test]
    fn forged_tampered_and_malformed_identities_are_refused() {
        let identity = issued(Role::Viewer);
        let verifier = IdentityVerifier::new(&key(7).verifying_key());
        let other = IdentityVerifier::new(&key(8).verifying_key());
        let value = serde_json::to_value(&identity).unwrap();
        assert_eq!(other.verify(Some(&value), 1_000_001), Err(IdentityRefusal::BadToken));
        let mut promoted = value.clone();
        promoted["role"] = json!("admin");
        assert_eq!(verifier.verify(Some(&promoted), 1_000_001), Err(IdentityRefusal::Mismatch));
        let mut extra = value.clone();
        extra["extra"] = json!(1);
        assert_eq!(verifier.verify(Some(&extra), 1_000_001), Err(IdentityRefusal::Malformed));
        assert_eq!(verifier.verify(None, 1_000_001), Err(IdentityRefusal::Malformed));
        assert!(!format!("{identity:?}").contains(&identity.jwt));
    }

    #[test]
    fn a_token_alone_stands_for_its_identity_only_when_its_signature_verifies() {
        let identity = issued(Role::Viewer);
        let verifier = IdentityVerifier::new(&key(7).verifying_key());
        let read = verifier.identity_of_token(&identity.jwt).unwrap();
        assert_eq!(serde_json::to_value(&read).unwrap(), serde_json::to_value(&identity).unwrap());
        let other = IdentityVerifier::new(&key(8).verifying_key());
        assert!(matches!(other.identity_of_token(&identity.jwt), Err(IdentityRefusal::BadToken)));
        assert!(verifier.identity_of_token("header.payload.signature").is_err());
    }

    #[test]
    fn a_remembered_token_is_still_refused_once_expired_or_with_other_fields() {
        let identity = issued(Role::Operator);
        let verifier = IdentityVerifier::new(&key(7).verifying_key());
        let value = serde_json::to_value(&identity).unwrap();
        assert!(verifier.verify(Some(&value), 1_000_001).is_ok());
        assert_eq!(verifier.remembered_tokens(), 1);
        assert!(verifier.verify(Some(&value), 1_000_002).is_ok(), "a remembered token verifies");
        assert_eq!(verifier.remembered_tokens(), 1);
        // The fields are compared with the remembered claims on every use.
        for (key, changed) in [
            ("role", json!("admin")),
            ("name", json!("Eve")),
            ("userId", json!("user-2")),
            ("type", json!("machine")),
            ("expiresAt", json!(identity.expires_at + 3_600_000)),
        ] {
            let mut tampered = value.clone();
            tampered[key] = changed;
            assert_eq!(verifier.verify(Some(&tampered), 1_000_002), Err(IdentityRefusal::Mismatch), "{key}");
        }
        // The expiry is checked against the clock on every use, and an expired token is forgotten.
        assert_eq!(verifier.verify(Some(&value), identity.expires_at), Err(IdentityRefusal::Expired));
        assert_eq!(verifier.remembered_tokens(), 0);
        assert_eq!(verifier.verify(Some(&value), identity.expires_at + 1), Err(IdentityRefusal::Expired));
    }

    #[test]
    fn a_token_that_fails_to_verify_is_never_remembered() {
        let identity = issued(Role::Admin);
        let value = serde_json::to_value(&identity).unwrap();
        // Signed by another key.
        let other = IdentityVerifier::new(&key(8).verifying_key());
        for _ in 0..2 {
            assert_eq!(other.verify(Some(&value), 1_000_001), Err(IdentityRefusal::BadToken));
        }
        assert_eq!(other.remembered_tokens(), 0);
        // A remembered token with its signature changed is another token, checked afresh.
        let verifier = IdentityVerifier::new(&key(7).verifying_key());
        assert!(verifier.verify(Some(&value), 1_000_001).is_ok());
        let (unsigned, signature) = identity.jwt.rsplit_once('.').unwrap();
        let flipped = if signature.starts_with('A') { "B" } else { "A" };
        let mut forged = value.clone();
        forged["jwt"] = json!(format!("{unsigned}.{flipped}{}", &signature[1..]));
        assert_eq!(verifier.verify(Some(&forged), 1_000_001), Err(IdentityRefusal::BadToken));
        assert_eq!(verifier.remembered_tokens(), 1);
    }

    #[test]
    fn the_remembered_tokens_are_bounded_and_hold_no_token() {
        let verifier = IdentityVerifier::with_cache_capacity(&key(7).verifying_key(), 3);
        let subject = IdentitySubject {
            name: "Ada".to_owned(),
            user_id: Id::parse("user-1").unwrap(),
            identity_type: IdentityType::Human,
            role: Role::Viewer,
        };
        let identities: Vec<Identity> = (0..5)
            .map(|index| issue_identity(&key(7), &subject, 1_000_000, 3_600_000, &format!("jti-{index}")).unwrap())
            .collect();
        for identity in &identities {
            let value = serde_json::to_value(identity).unwrap();
            assert!(verifier.verify(Some(&value), 1_000_001).is_ok());
            assert!(verifier.remembered_tokens() <= 3);
        }
        assert_eq!(verifier.remembered_tokens(), 3);
        // Forgotten ones verify again (checked afresh).
        let value = serde_json::to_value(&identities[0]).unwrap();
        assert!(verifier.verify(Some(&value), 1_000_001).is_ok());
        let remembered = verifier.lock_verified();
        for identity in &identities {
            for (hash, claims) in &remembered.claims {
                assert!(!format!("{claims:?}").contains(&identity.jwt));
                assert_ne!(hash.as_slice(), identity.jwt.as_bytes());
            }
        }
        drop(remembered);
        // Capacity 0 remembers nothing.
        let forgetful = IdentityVerifier::with_cache_capacity(&key(7).verifying_key(), 0);
        assert!(forgetful.verify(Some(&value), 1_000_001).is_ok());
        assert_eq!(forgetful.remembered_tokens(), 0);
    }

    #[test]
    fn roles_allow_what_the_wire_spec_says() {
        assert!(Role::Viewer.allows(Access::Read) && !Role::Viewer.allows(Access::Designate));
        assert!(Role::Operator.allows(Access::Designate) && !Role::Operator.allows(Access::Admin));
        assert!(Role::Admin.allows(Access::Admin));
    }
}
