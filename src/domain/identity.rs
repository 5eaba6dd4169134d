//! Administrator identities (`02-wire.md`, "Identity"): `IIdentity` carrying an EdDSA JWT signed
//! by the controller's identity key, and the role rules.
//!
//! The JWT library (`jsonwebtoken`) checks the signature; expiry is checked here against the
//! caller's clock (passed in), so tests control time and no leeway hides an expired identity.

use crate::contract::Id;
use crate::contract::reader::{self, Record};
use ed25519_dalek::{SigningKey, VerifyingKey};
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

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

#[derive(Debug, Serialize, Deserialize)]
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

/// Verifies `request.identity` against the controller's identity key at `now_ms`.
pub struct IdentityVerifier {
    key: DecodingKey,
    validation: Validation,
}

impl IdentityVerifier {
    /// A verifier for identities signed by `public_key`.
    pub fn new(public_key: &VerifyingKey) -> Self {
        let mut validation = Validation::new(Algorithm::EdDSA);
        // Expiry is checked against the caller's clock below, without leeway.
        validation.validate_exp = false;
        validation.required_spec_claims.clear();
        IdentityVerifier { key: DecodingKey::from_ed_der(public_key.as_bytes()), validation }
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
        let claims = jsonwebtoken::decode::<Claims>(jwt, &self.key, &self.validation)
            .map_err(|_| IdentityRefusal::BadToken)?
            .claims;
        if claims.sub != user_id.as_str()
            || claims.name != name
            || json!(claims.identity_type) != json!(identity_type)
            || claims.role != role
            || claims.exp != expires_at / 1000
        {
            return Err(IdentityRefusal::Mismatch);
        }
        if now_ms >= expires_at {
            return Err(IdentityRefusal::Expired);
        }
        Ok(Caller { user_id, role })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn roles_allow_what_the_wire_spec_says() {
        assert!(Role::Viewer.allows(Access::Read) && !Role::Viewer.allows(Access::Designate));
        assert!(Role::Operator.allows(Access::Designate) && !Role::Operator.allows(Access::Admin));
        assert!(Role::Admin.allows(Access::Admin));
    }
}
