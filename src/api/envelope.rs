//! Reading a TypedRequest envelope from its text (`02-wire.md`, "TypedRequest"), the same for
//! `POST /typedrequest` and every `/typedsocket` frame.
//!
//! The text is read once, with the contract's strict reader ([`parse_record_text`]): a request
//! is a record, so a duplicate key in any object, a number with a fraction or an exponent, `-0`,
//! or a number outside ±(2^53−1) anywhere in the envelope breaks a raw-text rule
//! (`01-contract-basics.md`, "Raw JSON text"). Such an envelope is still answered when it is
//! otherwise one (an object with a string `method` and a `request`): its text is read a second
//! time, leniently and only for the envelope's own members, and its request is the rule it
//! breaks ([`TextRule`]), which the method table answers `request-invalid`.
//!
//! `registerClusterIngress` carries plain data (`IClusterIngressRegistration`, whose validator
//! judges the parsed value: `1.5` there is a value that is not an integer, named by its field).
//! Its envelope is read again as plain data ([`parse_plain_text`]): numbers are kept as written,
//! and only a text that has no single JSON value (a duplicate key, or a number no JSON value
//! holds, such as `1e400`) leaves its request unreadable.
//!
//! Not an envelope at all (not JSON, not an object, no string `method`, no `request`, a
//! `correlation.id` that is not a string): [`Malformed`].

use super::methods;
use crate::contract::json::{TextError, parse_plain_text, parse_record_text};
use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};
use std::fmt;

/// The text is not a TypedRequest envelope: `malformed-envelope`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Malformed;

/// A raw-text rule of `01-contract-basics.md` that an envelope's text breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TextRule {
    /// An object repeats a key.
    DuplicateKey,
    /// A number with a fraction or an exponent, `-0`, or a number outside ±(2^53−1).
    NumberNotSafeInteger,
}

impl TextRule {
    /// The `request-invalid` violation naming the rule.
    pub fn violation(self) -> &'static str {
        match self {
            TextRule::DuplicateKey => "the envelope's JSON text must not repeat a key in one object",
            TextRule::NumberNotSafeInteger => {
                "the envelope's JSON text must write every number as an integer from -(2^53-1) to 2^53-1, \
                 without fraction, exponent or -0"
            }
        }
    }

    fn of(error: &TextError) -> Option<TextRule> {
        match error {
            TextError::NotJson(_) => None,
            TextError::DuplicateKey => Some(TextRule::DuplicateKey),
            TextError::NumberNotSafeInteger => Some(TextRule::NumberNotSafeInteger),
        }
    }
}

/// A request envelope. `Debug` prints the method and correlation, the raw-text rule a request
/// breaks, and neither the request (it may carry an identity token or a bearer) nor `authInfo.jwt`.
pub struct RequestEnvelope {
    /// `method`.
    pub method: String,
    /// `request`, or the raw-text rule the envelope's text breaks (its request then has no
    /// reading to judge).
    pub request: Result<Value, TextRule>,
    /// `correlation`, echoed in the answer (an empty object when the envelope has none).
    pub correlation: Map<String, Value>,
    /// `authInfo.jwt`.
    pub auth_jwt: Option<String>,
}

impl fmt::Debug for RequestEnvelope {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        let request: Result<&str, &TextRule> = self.request.as_ref().map(|_| "<redacted>");
        formatter
            .debug_struct("RequestEnvelope")
            .field("method", &self.method)
            .field("request", &request)
            .field("correlation", &self.correlation)
            .field("auth_jwt", &self.auth_jwt.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

/// A socket frame: a request, or the answer to one of the controller's own requests.
#[derive(Debug)]
pub enum Frame {
    /// `phase` other than `response`.
    Request(RequestEnvelope),
    /// `phase: "response"`: `correlation.id` (when a string) and `Ok(response)` or `Err(error)`.
    Response {
        /// The id of the controller's request it answers.
        id: Option<String>,
        /// The answer.
        answer: Result<Value, Value>,
    },
}

/// Reads the envelope of `POST /typedrequest` (its `correlation.phase` is not looked at).
pub fn read_request(text: &str) -> Result<RequestEnvelope, Malformed> {
    match read(text)? {
        Read::Exact(envelope) => request_of(envelope),
        Read::BreaksRule(head, rule) => head.request(rule),
    }
}

/// Reads one `/typedsocket` text frame.
pub fn read_frame(text: &str) -> Result<Frame, Malformed> {
    match read(text)? {
        Read::Exact(envelope) => {
            let correlation = envelope.get("correlation");
            if correlation.and_then(|correlation| correlation.get("phase")).and_then(Value::as_str) == Some("response")
            {
                let id = correlation.and_then(|correlation| correlation.get("id")).and_then(Value::as_str);
                let answer = match envelope.get("error") {
                    Some(error) if !error.is_null() => Err(error.clone()),
                    _ => Ok(envelope.get("response").cloned().unwrap_or(Value::Null)),
                };
                return Ok(Frame::Response { id: id.map(str::to_owned), answer });
            }
            request_of(envelope).map(Frame::Request)
        }
        Read::BreaksRule(head, rule) if head.phase.as_deref() == Some("response") => {
            // An answer without a single reading is an error answer to the request it names.
            let error = json!({ "text": "invalid answer", "data": { "code": "request-invalid", "violations": [rule.violation()] } });
            Ok(Frame::Response { id: head.id, answer: Err(error) })
        }
        Read::BreaksRule(head, rule) => head.request(rule).map(Frame::Request),
    }
}

enum Read<'a> {
    /// The envelope object, read under every rule that applies to it.
    Exact(Map<String, Value>),
    /// JSON whose text breaks a raw-text rule: the envelope's own members, read leniently.
    BreaksRule(Head<'a>, TextRule),
}

fn read(text: &str) -> Result<Read<'_>, Malformed> {
    let rule = match parse_record_text(text) {
        Ok(Value::Object(envelope)) => return Ok(Read::Exact(envelope)),
        Ok(_) => return Err(Malformed),
        Err(error) => TextRule::of(&error).ok_or(Malformed)?,
    };
    let head = Head::read(text)?;
    if head.method.as_deref().and_then(methods::find).is_some_and(methods::Method::reads_plain_data) {
        if let Ok(Value::Object(envelope)) = parse_plain_text(text) {
            return Ok(Read::Exact(envelope));
        }
    }
    Ok(Read::BreaksRule(head, rule))
}

fn request_of(mut envelope: Map<String, Value>) -> Result<RequestEnvelope, Malformed> {
    let Some(Value::String(method)) = envelope.remove("method") else { return Err(Malformed) };
    let request = envelope.remove("request").ok_or(Malformed)?;
    let correlation = match envelope.remove("correlation") {
        Some(Value::Object(correlation)) => correlation,
        _ => Map::new(),
    };
    if correlation.get("id").is_some_and(|id| !id.is_string()) {
        return Err(Malformed);
    }
    let auth_jwt = envelope.get("authInfo").and_then(|auth| auth.get("jwt")).and_then(Value::as_str).map(str::to_owned);
    Ok(RequestEnvelope { method, request: Ok(request), correlation, auth_jwt })
}

/// The envelope members of a text that breaks a raw-text rule, read without judging any value
/// they do not need: the last of repeated keys counts, as in every JSON reader that accepts them.
struct Head<'a> {
    /// `method` when it is a string.
    method: Option<String>,
    /// True when the envelope has a `request` member.
    has_request: bool,
    /// `correlation`, as far as it reads as a JSON object.
    correlation: Option<&'a RawValue>,
    /// `correlation.id` when it is a string.
    id: Option<String>,
    /// True when `correlation.id` is present and not a string.
    id_not_string: bool,
    /// `correlation.phase` when it is a string.
    phase: Option<String>,
}

impl<'a> Head<'a> {
    fn read(text: &'a str) -> Result<Self, Malformed> {
        let envelope = RawMembers::read(text).ok_or(Malformed)?;
        let correlation = envelope.last("correlation").filter(|raw| raw.get().starts_with('{'));
        let members = correlation.and_then(|raw| RawMembers::read(raw.get()));
        let member = |key: &str| members.as_ref().and_then(|members| members.last(key));
        Ok(Head {
            method: envelope.last("method").and_then(string),
            has_request: envelope.last("request").is_some(),
            correlation,
            id: member("id").and_then(string),
            id_not_string: member("id").is_some_and(|raw| string(raw).is_none()),
            phase: member("phase").and_then(string),
        })
    }

    fn request(self, rule: TextRule) -> Result<RequestEnvelope, Malformed> {
        let (Some(method), true, false) = (self.method, self.has_request, self.id_not_string) else {
            return Err(Malformed);
        };
        // The correlation is echoed as far as it has a JSON value, else its id alone.
        let correlation = self
            .correlation
            .and_then(|raw| serde_json::from_str::<Map<String, Value>>(raw.get()).ok())
            .unwrap_or_else(|| self.id.into_iter().map(|id| ("id".to_owned(), Value::String(id))).collect());
        Ok(RequestEnvelope { method, request: Err(rule), correlation, auth_jwt: None })
    }
}

fn string(raw: &RawValue) -> Option<String> {
    serde_json::from_str(raw.get()).ok()
}

/// A JSON object's members as raw JSON texts, in order, repeated keys kept. Reading a raw value
/// checks its syntax without reading its numbers, so no number stops it.
struct RawMembers<'a>(Vec<(String, &'a RawValue)>);

impl<'a> RawMembers<'a> {
    fn read(text: &'a str) -> Option<Self> {
        serde_json::from_str(text).ok()
    }

    fn last(&self, key: &str) -> Option<&'a RawValue> {
        self.0.iter().rev().find(|(member, _)| member == key).map(|(_, value)| *value)
    }
}

impl<'de> Deserialize<'de> for RawMembers<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct MembersVisitor;

        impl<'de> Visitor<'de> for MembersVisitor {
            type Value = RawMembers<'de>;

            fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
                formatter.write_str("a JSON object")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawMembers<'de>, A::Error> {
                let mut members = Vec::new();
                while let Some(member) = map.next_entry::<String, &'de RawValue>()? {
                    members.push(member);
                }
                Ok(RawMembers(members))
            }
        }

        deserializer.deserialize_map(MembersVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(text: &str) -> Result<Value, TextRule> {
        read_request(text).expect("an envelope").request
    }

    #[test]
    fn every_raw_text_rule_leaves_the_request_unread() {
        for (text, rule) in [
            (r#"{"method":"m","request":{"a":1,"a":2}}"#, TextRule::DuplicateKey),
            (r#"{"method":"m","request":{},"request":{}}"#, TextRule::DuplicateKey),
            (r#"{"method":"m","request":{},"localData":{"x":{"y":1,"y":1}}}"#, TextRule::DuplicateKey),
            (r#"{"method":"m","request":{"a":1.5}}"#, TextRule::NumberNotSafeInteger),
            (r#"{"method":"m","request":{"a":1e3}}"#, TextRule::NumberNotSafeInteger),
            (r#"{"method":"m","request":{"a":-0}}"#, TextRule::NumberNotSafeInteger),
            (r#"{"method":"m","request":{"a":9007199254740992}}"#, TextRule::NumberNotSafeInteger),
            (r#"{"method":"m","request":{"a":1e400}}"#, TextRule::NumberNotSafeInteger),
            (r#"{"method":"m","request":{},"correlation":{"id":"c","n":1e400}}"#, TextRule::NumberNotSafeInteger),
        ] {
            assert_eq!(request(text), Err(rule), "{text}");
        }
        let envelope = read_request(r#"{"method":"m","request":{},"correlation":{"id":"c","n":1e400}}"#).unwrap();
        assert_eq!(Value::Object(envelope.correlation), json!({ "id": "c" }));
        let envelope = read_request(r#"{"method":"m","request":{},"correlation":{"id":"c","n":1.5}}"#).unwrap();
        assert_eq!(Value::Object(envelope.correlation), json!({ "id": "c", "n": 1.5 }));
    }

    #[test]
    fn what_is_no_envelope_is_malformed_even_when_it_breaks_a_rule() {
        for text in [
            "not json",
            "[1,1.5]",
            r#"{"request":{"a":1,"a":2}}"#,
            r#"{"method":5,"request":{"a":1.5}}"#,
            r#"{"method":"m","a":1,"a":2}"#,
            r#"{"method":"m","request":{"a":1,"a":2}"#,
            r#"{"method":"m","request":{"a":1,"a":2}} x"#,
            r#"{"method":"m","request":{},"correlation":{"id":5}}"#,
            r#"{"method":"m","request":{"a":1.5},"correlation":{"id":null}}"#,
        ] {
            assert_eq!(read_request(text).map(drop), Err(Malformed), "{text}");
        }
    }

    #[test]
    fn a_registration_is_read_as_plain_data() {
        let text =
            r#"{"method":"registerClusterIngress","request":{"protocol":{"minimum":1.5}},"authInfo":{"jwt":"t"}}"#;
        let envelope = read_request(text).unwrap();
        assert_eq!(envelope.request, Ok(json!({ "protocol": { "minimum": 1.5 } })));
        assert_eq!(envelope.auth_jwt.as_deref(), Some("t"));
        let text = r#"{"method":"registerClusterIngress","request":{"bearer":"a","bearer":"b"}}"#;
        assert_eq!(request(text), Err(TextRule::DuplicateKey));
    }

    #[test]
    fn debug_of_an_envelope_shows_no_token_or_bearer() {
        let text = r#"{"method":"listClusters","authInfo":{"jwt":"auth-token-1"},
            "request":{"identity":{"jwt":"identity-token-2"},"bearer":"szrn_bearer-3"},"correlation":{"id":"c"}}"#;
        let printed = [format!("{:?}", read_request(text).unwrap()), format!("{:?}", read_frame(text).unwrap())];
        for printed in printed {
            for secret in ["auth-token-1", "identity-token-2", "szrn_bearer-3"] {
                assert!(!printed.contains(secret), "{printed}");
            }
            assert!(printed.contains("listClusters") && printed.contains("<redacted>"), "{printed}");
        }
    }

    #[test]
    fn a_response_frame_that_breaks_a_rule_is_an_error_answer() {
        let Ok(Frame::Response { id, answer }) =
            read_frame(r#"{"method":"m","response":{"a":1,"a":1},"correlation":{"id":"x","phase":"response"}}"#)
        else {
            panic!("a response frame");
        };
        assert_eq!(id.as_deref(), Some("x"));
        assert_eq!(answer.unwrap_err()["data"]["code"], json!("request-invalid"));
    }
}
