//! A small TypedRequest client over HTTP/1.1 (hyper), used by the CLI's administrator commands
//! and by the tests. It speaks exactly what the ecosystem's `TypedRequest.fire()` sends.

use http_body_util::{BodyExt as _, Full};
use hyper::body::Bytes;
use hyper_util::client::legacy::Client as HyperClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::{Value, json};

/// An answered error: the envelope's `error`.
#[derive(Debug, Clone, PartialEq)]
pub struct TypedError {
    /// `error.text`.
    pub text: String,
    /// `error.data`.
    pub data: Value,
}

impl TypedError {
    /// `error.data.code`.
    pub fn code(&self) -> &str {
        self.data["code"].as_str().unwrap_or("")
    }
}

/// Why a call failed before it was answered as an envelope.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// The server could not be reached or the exchange broke.
    #[error("transport: {0}")]
    Transport(String),
    /// The server answered with a non-envelope HTTP status.
    #[error("HTTP {status}: {body}")]
    Http {
        /// The status.
        status: u16,
        /// The body text.
        body: String,
    },
    /// The server answered the envelope with an error.
    #[error("{}: {}", .0.text, .0.data)]
    Typed(TypedError),
}

/// A client of one controller's `/typedrequest`.
#[derive(Clone)]
pub struct Client {
    endpoint: String,
    http: HyperClient<HttpConnector, Full<Bytes>>,
}

impl Client {
    /// A client of the controller at `base_url` (`http://127.0.0.1:8080`).
    pub fn new(base_url: &str) -> Client {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        Client {
            endpoint: format!("{}/typedrequest", base_url.trim_end_matches('/')),
            http: HyperClient::builder(TokioExecutor::new()).build(connector),
        }
    }

    /// Posts raw bytes to `/typedrequest` and answers the status and body.
    pub async fn post_raw(&self, body: Vec<u8>) -> Result<(u16, Vec<u8>), CallError> {
        let request = hyper::Request::post(&self.endpoint)
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body)))
            .map_err(|error| CallError::Transport(error.to_string()))?;
        let response = self.http.request(request).await.map_err(|error| CallError::Transport(error.to_string()))?;
        let status = response.status().as_u16();
        let body = response.into_body().collect().await.map_err(|error| CallError::Transport(error.to_string()))?;
        Ok((status, body.to_bytes().to_vec()))
    }

    /// Fires `method` with `request` and answers the whole answer envelope.
    pub async fn envelope(&self, method: &str, request: Value, auth_jwt: Option<&str>) -> Result<Value, CallError> {
        let mut envelope = json!({
            "method": method,
            "request": request,
            "response": null,
            "correlation": { "id": uuid::Uuid::new_v4().to_string(), "phase": "request" },
        });
        if let Some(jwt) = auth_jwt {
            envelope["authInfo"] = json!({ "jwt": jwt });
        }
        let (status, body) = self.post_raw(serde_json::to_vec(&envelope).expect("JSON serializes")).await?;
        if status != 200 {
            return Err(CallError::Http { status, body: String::from_utf8_lossy(&body).into_owned() });
        }
        serde_json::from_slice(&body).map_err(|error| CallError::Transport(format!("answer is not JSON: {error}")))
    }

    /// Fires `method` and answers `response`, or the typed error.
    pub async fn call(&self, method: &str, request: Value) -> Result<Value, CallError> {
        let answer = self.envelope(method, request, None).await?;
        if let Some(error) = answer.get("error").filter(|error| !error.is_null()) {
            return Err(CallError::Typed(TypedError {
                text: error["text"].as_str().unwrap_or("").to_owned(),
                data: error["data"].clone(),
            }));
        }
        Ok(answer["response"].clone())
    }
}
