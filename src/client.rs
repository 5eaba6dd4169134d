//! A small TypedRequest client over HTTP/1.1 (`reqwest` with rustls, pooled keep-alive
//! connections), used by the CLI's administrator commands and by the tests. It speaks exactly
//! what the ecosystem's `TypedRequest.fire()` sends, to `http://` and `https://` controllers.
//!
//! Every call has a deadline ([`DEFAULT_TIMEOUT`] unless the client was built with another), so a
//! server that accepts a connection and never answers fails the call instead of hanging it.
//! Server certificates are checked against the operating system's roots (`SSL_CERT_FILE` and
//! `SSL_CERT_DIR` replace them); proxies come from `HTTPS_PROXY`/`HTTP_PROXY`/`NO_PROXY`.

use serde_json::{Value, json};
use std::time::Duration;

/// How long a call may take, from connecting to the last byte of the answer, unless the client
/// was built with [`Client::with_timeout`].
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

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

/// Why a call failed before it was answered as an envelope. No message carries the request (it
/// may hold an identity token); the URL is shown with any password replaced by `***`.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// The server could not be reached or the exchange broke.
    #[error("transport: {0}")]
    Transport(String),
    /// The server did not answer within the client's timeout.
    #[error("transport: {url} did not answer within {} s", .after.as_secs_f64())]
    TimedOut {
        /// The endpoint called (password redacted).
        url: String,
        /// The timeout that ran out.
        after: Duration,
    },
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

/// A client of one controller's `/typedrequest`. Clones share one connection pool.
#[derive(Clone)]
pub struct Client {
    endpoint: reqwest::Url,
    shown_endpoint: String,
    timeout: Duration,
    http: reqwest::Client,
}

impl Client {
    /// A client of the controller at `base_url` (`http://127.0.0.1:8080`) with
    /// [`DEFAULT_TIMEOUT`].
    ///
    /// # Panics
    /// When `base_url` is not an `http://` or `https://` URL, or the TLS backend cannot start;
    /// [`Client::with_timeout`] answers these as errors.
    pub fn new(base_url: &str) -> Client {
        Client::with_timeout(base_url, DEFAULT_TIMEOUT).unwrap_or_else(|error| panic!("{error}"))
    }

    /// A client of the controller at `base_url` whose every call fails with
    /// [`CallError::TimedOut`] after `timeout`.
    pub fn with_timeout(base_url: &str, timeout: Duration) -> Result<Client, CallError> {
        let shown_endpoint = format!("{}/typedrequest", crate::config::redact_url(base_url.trim_end_matches('/')));
        let endpoint = reqwest::Url::parse(&format!("{}/typedrequest", base_url.trim_end_matches('/')))
            .ok()
            .filter(|url| matches!(url.scheme(), "http" | "https") && url.has_host())
            .ok_or_else(|| CallError::Transport(format!("{shown_endpoint} is not an http:// or https:// URL")))?;
        // rustls needs one process-wide cryptography provider; ring is the one this build carries
        // (an already installed provider is kept).
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::builder()
            .timeout(timeout)
            .tcp_nodelay(true)
            .http1_only()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|error| CallError::Transport(format!("cannot start the HTTP client: {}", error_chain(&error))))?;
        Ok(Client { endpoint, shown_endpoint, timeout, http })
    }

    /// The URL calls are posted to, with any password replaced by `***`.
    pub fn endpoint(&self) -> &str {
        &self.shown_endpoint
    }

    /// Posts raw bytes to `/typedrequest` and answers the status and body.
    pub async fn post_raw(&self, body: Vec<u8>) -> Result<(u16, Vec<u8>), CallError> {
        let exchange = async {
            let response = self
                .http
                .post(self.endpoint.clone())
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(body)
                .send()
                .await?;
            let status = response.status().as_u16();
            Ok::<_, reqwest::Error>((status, response.bytes().await?.to_vec()))
        };
        exchange.await.map_err(|error| self.transport_error(&error))
    }

    fn transport_error(&self, error: &reqwest::Error) -> CallError {
        if error.is_timeout() {
            CallError::TimedOut { url: self.shown_endpoint.clone(), after: self.timeout }
        } else {
            CallError::Transport(format!("cannot reach {}: {}", self.shown_endpoint, error_chain(error)))
        }
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
        serde_json::from_slice(&body).map_err(|error| {
            CallError::Transport(format!("the answer of {} is not JSON: {error}", self.shown_endpoint))
        })
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

/// An error and its causes, outermost first, joined by `: ` (reqwest's own message is only
/// "error sending request"; the cause says "connection refused" or which certificate failed).
/// The URL is left out: the caller names it, redacted.
fn error_chain(error: &reqwest::Error) -> String {
    let mut text = error.to_string();
    if let Some(url) = error.url() {
        text = text.replace(&format!(" for url ({url})"), "");
    }
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.ends_with(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}
