//! `ApiError`: the one place that decides an envelope's `error.text` and `error.data`.

use crate::contract::registration::ProtocolRefusal;
use crate::domain::DomainError;
use serde::Serialize;
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
    /// What the operator should read in the log about this answer (a failure of the store
    /// behind it); never sent. [`ApiError::log_cause`] logs it where the answer is sent.
    cause: Option<Cause>,
}

/// A failure behind an answered error, for the log.
#[derive(Debug, Clone, PartialEq)]
enum Cause {
    StoreUnavailable(String),
    StoreCorrupt(String),
}

impl ApiError {
    /// An error with `text` and `data`.
    pub fn new(text: impl Into<String>, data: Value) -> Self {
        ApiError { text: text.into(), data, cause: None }
    }

    /// An error whose data is its `code` alone.
    fn coded(text: &str, code: &str) -> Self {
        ApiError::new(text, json!({ "code": code }))
    }

    /// An error whose data is its `code` and the `current` value the request did not match.
    fn not_current(text: &str, code: &str, current: impl Serialize) -> Self {
        ApiError::new(text, json!({ "code": code, "current": current }))
    }

    fn caused_by(mut self, cause: Cause) -> Self {
        self.cause = Some(cause);
        self
    }

    /// Logs the failure behind this answer, if any: once per answered call, by the api's
    /// dispatch.
    pub fn log_cause(&self) {
        match &self.cause {
            Some(Cause::StoreUnavailable(detail)) => tracing::warn!(%detail, "store unavailable"),
            Some(Cause::StoreCorrupt(detail)) => tracing::error!(%detail, "stored data is corrupt"),
            None => {}
        }
    }

    /// `unknown-method`.
    pub fn unknown_method() -> Self {
        ApiError::coded(UNKNOWN_METHOD_TEXT, "unknown-method")
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
            DomainError::IdentityRefused => ApiError::coded("identity refused", "identity-refused"),
            DomainError::IdentityForbidden => ApiError::coded("identity forbidden", "identity-forbidden"),
            DomainError::RequestInvalid(violations) => ApiError::request_invalid(violations),
            DomainError::NotFound(what) => {
                ApiError::new(format!("{} not found", what.what()), json!({ "code": "not-found", "what": what.what() }))
            }
            DomainError::MutationConflict => {
                ApiError::coded("the mutation id was already used with other content", "mutation-conflict")
            }
            DomainError::RuntimeMismatch(current) => ApiError::not_current(
                "currentRuntime is not the cluster's current runtime",
                "runtime-mismatch",
                current,
            ),
            DomainError::DesignationKindConflict => {
                ApiError::coded("the cluster holds the other kind of ingress designation", "designation-kind-conflict")
            }
            DomainError::SpecRevisionMismatch(current) => ApiError::not_current(
                "the expected spec revision is not the current one",
                "spec-revision-mismatch",
                current,
            ),
            DomainError::RevisionConflict(current) => {
                ApiError::not_current("the expected revision is not the current one", "revision-conflict", current)
            }
            DomainError::DesignationConflict(current) => ApiError::not_current(
                "expectedDesignation is not the cluster's current designation",
                "designation-conflict",
                current,
            ),
            DomainError::AddressPlanChangeRefused(violations) => ApiError::new(
                "the address plan change is refused",
                json!({ "code": "address-plan-change-refused", "violations": violations }),
            ),
            DomainError::RelayConnectionLost => {
                ApiError::coded("the relay connection is superseded or expired; connect again", "relay-connection-lost")
            }
            DomainError::PrincipalRefused => ApiError::coded("principal refused", "principal-refused"),
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
            DomainError::StoreUnavailable(detail) => ApiError::new(
                "the store did not answer",
                json!({ "code": "store-unavailable", "retryAfterMs": STORE_RETRY_AFTER_MS }),
            )
            .caused_by(Cause::StoreUnavailable(detail)),
            DomainError::StoreCorrupt(detail) => {
                ApiError::coded("internal error", "internal-error").caused_by(Cause::StoreCorrupt(detail))
            }
            DomainError::Internal | DomainError::SigningKeyUnavailable => {
                ApiError::coded("internal error", "internal-error")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    /// The lines `run` logs at any level.
    fn logged(run: impl FnOnce()) -> String {
        let lines = Arc::new(Mutex::new(Vec::new()));
        let writer = {
            let lines = lines.clone();
            move || LogLines(lines.clone())
        };
        let subscriber = tracing_subscriber::fmt().with_writer(writer).with_ansi(false).finish();
        tracing::subscriber::with_default(subscriber, run);
        let bytes = lines.lock().unwrap().clone();
        String::from_utf8(bytes).unwrap()
    }

    struct LogLines(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for LogLines {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_store_failure_is_logged_where_answered_and_never_sent() {
        let cases = [
            (DomainError::StoreUnavailable("pool timed out at db.internal".into()), "store-unavailable", "WARN"),
            (DomainError::StoreCorrupt("a digest does not match at db.internal".into()), "internal-error", "ERROR"),
        ];
        for (domain, code, level) in cases {
            // Converting logs nothing; the answer carries no detail.
            let (error, converting) = {
                let mut error = None;
                let log = logged(|| error = Some(ApiError::from(domain.clone())));
                (error.unwrap(), log)
            };
            assert_eq!(converting, "", "{domain:?}: a conversion logs nothing");
            assert_eq!(error.code(), code);
            let sent = format!("{} {}", error.text, error.data);
            assert!(!sent.contains("db.internal"), "the detail is never sent: {sent}");
            // Answering logs it once, with the detail.
            let answering = logged(|| error.log_cause());
            assert_eq!(answering.lines().count(), 1, "{answering}");
            assert!(answering.contains(level) && answering.contains("db.internal"), "{answering}");
        }
        // An answer without a failure behind it logs nothing.
        assert_eq!(logged(|| ApiError::from(DomainError::MutationConflict).log_cause()), "");
    }
}
