//! Reading a TypedRequest envelope from its text (`02-wire.md`, "TypedRequest"), the same for
//! `POST /typedrequest` and every `/typedsocket` frame.
//!
//! Not an envelope at all (not JSON, not an object, no string `method`, no `request`):
//! [`Malformed`].

use serde_json::{Map, Value};

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
}

/// A request envelope.
#[derive(Debug)]
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
    request_of(read(text)?)
}

/// Reads one `/typedsocket` text frame.
pub fn read_frame(text: &str) -> Result<Frame, Malformed> {
    let envelope = read(text)?;
    let correlation = envelope.get("correlation");
    if correlation.and_then(|correlation| correlation.get("phase")).and_then(Value::as_str) == Some("response") {
        let id = correlation.and_then(|correlation| correlation.get("id")).and_then(Value::as_str);
        let answer = match envelope.get("error") {
            Some(error) if !error.is_null() => Err(error.clone()),
            _ => Ok(envelope.get("response").cloned().unwrap_or(Value::Null)),
        };
        return Ok(Frame::Response { id: id.map(str::to_owned), answer });
    }
    request_of(envelope).map(Frame::Request)
}

fn read(text: &str) -> Result<Map<String, Value>, Malformed> {
    match serde_json::from_str(text) {
        Ok(Value::Object(envelope)) => Ok(envelope),
        _ => Err(Malformed),
    }
}

fn request_of(mut envelope: Map<String, Value>) -> Result<RequestEnvelope, Malformed> {
    let Some(Value::String(method)) = envelope.remove("method") else { return Err(Malformed) };
    let request = envelope.remove("request").ok_or(Malformed)?;
    let correlation = match envelope.remove("correlation") {
        Some(Value::Object(correlation)) => correlation,
        _ => Map::new(),
    };
    let auth_jwt = envelope.get("authInfo").and_then(|auth| auth.get("jwt")).and_then(Value::as_str).map(str::to_owned);
    Ok(RequestEnvelope { method, request: Ok(request), correlation, auth_jwt })
}
