//! `ApiError`: the one place that decides an envelope's `error.text` and `error.data`.

use crate::contract::registration::ProtocolRefusal;
use crate::domain::DomainError;
use serde_json::{Value, json};

/// The text the TypedRequest router answers for an unknown method.
pub const UNKNOWN_METHOD_TEXT: &str = "There is no available method for this call on the server side";

/// How long a caller waits after `store-unavailable`.
pub const STORE_RETRY_AFTER_MS: u64 = 1_000;

/// An answered error: `error: { text, data }` with `data.code`.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    /// `error.text`.
    pub text: String,
    /// `error.data`, always an object with a string `code`.
    pub data: Value,
}

impl ApiError {
    /// An error with `text` and `data`.
    pub fn new(text: impl Into<String>, data: Value) -> Self {
        ApiError { text: text.into(), data }
    }

    /// `unknown-method`.
    pub fn unknown_method() -> Self {
        ApiError::new(UNKNOWN_METHOD_TEXT, json!({ "code": "unknown-method" }))
    }

    /// `request-invalid` with the violations.
    pub fn request_invalid(violations: Vec<String>) -> Self {
        ApiError::new("request invalid", json!({ "code": "request-invalid", "violations": violations }))
    }

    /// The `code` of the data.
    pub fn code(&self) -> &str {
        self.data["code"].as_str().unwrap_or("unknown")
    }
}

impl From<DomainError> for ApiError {
    fn from(error: DomainError) -> Self {
        match error {
            DomainError::IdentityRefused => ApiError::new("identity refused", json!({ "code": "identity-refused" })),
            DomainError::IdentityForbidden => {
                ApiError::new("identity forbidden", json!({ "code": "identity-forbidden" }))
            }
            DomainError::RequestInvalid(violations) => ApiError::request_invalid(violations),
            DomainError::NotFound(what) => {
                ApiError::new(format!("{} not found", what.what()), json!({ "code": "not-found", "what": what.what() }))
            }
            DomainError::MutationConflict => ApiError::new(
                "the mutation id was already used with other content",
                json!({ "code": "mutation-conflict" }),
            ),
            DomainError::RuntimeMismatch(current) => ApiError::new(
                "currentRuntime is not the cluster's current runtime",
                json!({ "code": "runtime-mismatch", "current": current }),
            ),
            DomainError::DesignationKindConflict => ApiError::new(
                "the cluster holds the other kind of ingress designation",
                json!({ "code": "designation-kind-conflict" }),
            ),
            DomainError::SpecRevisionMismatch(current) => ApiError::new(
                "the expected spec revision is not the current one",
                json!({ "code": "spec-revision-mismatch", "current": current }),
            ),
            DomainError::RevisionConflict(current) => ApiError::new(
                "the expected revision is not the current one",
                json!({ "code": "revision-conflict", "current": current }),
            ),
            DomainError::DesignationConflict(current) => ApiError::new(
                "expectedDesignation is not the cluster's current designation",
                json!({ "code": "designation-conflict", "current": current }),
            ),
            DomainError::AddressPlanChangeRefused(violations) => ApiError::new(
                "the address plan change is refused",
                json!({ "code": "address-plan-change-refused", "violations": violations }),
            ),
            DomainError::RelayConnectionLost => ApiError::new(
                "the relay connection is superseded or expired; connect again",
                json!({ "code": "relay-connection-lost" }),
            ),
            DomainError::PrincipalRefused => ApiError::new("principal refused", json!({ "code": "principal-refused" })),
            DomainError::SessionNotCurrent(current) => ApiError::new(
                "the session is not the current session of this socket",
                json!({ "code": "principal-refused", "current": current.as_ref().map(|session| session.to_value()) }),
            ),
            DomainError::AssignmentNotFound => {
                ApiError::new("assignment not found", json!({ "code": "not-found", "what": "assignment" }))
            }
            DomainError::ProtocolRefused => {
                let refusal = ProtocolRefusal::controller();
                ApiError::new(refusal.error_text(), refusal.to_value())
            }
            DomainError::RegistrationRefused(refusal) => ApiError::new(refusal.error_text(), refusal.to_value()),
            DomainError::StoreUnavailable => ApiError::new(
                "the store did not answer",
                json!({ "code": "store-unavailable", "retryAfterMs": STORE_RETRY_AFTER_MS }),
            ),
            DomainError::Internal | DomainError::SigningKeyUnavailable => {
                ApiError::new("internal error", json!({ "code": "internal-error" }))
            }
        }
    }
}
