//! A small TypedRequest client over HTTP/1.1 (`reqwest` with rustls, pooled keep-alive
//! connections), used by the CLI's administrator commands and by the tests. It speaks exactly
//! what the ecosystem's `TypedRequest.fire()` sends, to `http://` and `https://` controllers.
//!
//! Every call has a deadline ([`DEFAULT_TIMEOUT`] unless the client was built with another), so a
//! server that accepts a connection and never answers fails the call instead of hanging it.
//! Server certificates are checked against the operating system's roots (`SSL_CERT_FILE` and
//! `SSL_CERT_DIR` replace them), or only against the CA certificates of one PEM file
//! ([`Client::with_options`], the CLI's `--ca-cert`); proxies come from
//! `HTTPS_PROXY`/`HTTP_PROXY`/`NO_PROXY`.
//!
//! Every call sends a fresh `correlation.id`, which the controller uses as the id of the call's log
//! lines and answers in the `x-request-id` header: [`Client::call_traced`] answers it, so a caller
//! can show it beside a refusal or a transport error.

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
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
        Client::with_options(base_url, timeout, None)
    }

    /// [`Client::with_timeout`] that trusts, for `https://`, only the CA certificates of the PEM
    /// file `ca_certificates` (when given) instead of the system's roots.
    pub fn with_options(
        base_url: &str,
        timeout: Duration,
        ca_certificates: Option<&std::path::Path>,
    ) -> Result<Client, CallError> {
        let shown_endpoint = format!("{}/typedrequest", crate::config::redact_url(base_url.trim_end_matches('/')));
        let endpoint = reqwest::Url::parse(&format!("{}/typedrequest", base_url.trim_end_matches('/')))
            .ok()
            .filter(|url| matches!(url.scheme(), "http" | "https") && url.has_host())
            .ok_or_else(|| CallError::Transport(format!("{shown_endpoint} is not an http:// or https:// URL")))?;
        // rustls needs one process-wide cryptography provider; ring is the one this build carries
        // (an already installed provider is kept).
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut builder = reqwest::Client::builder()
            .timeout(timeout)
            .tcp_nodelay(true)
            .http1_only()
            .redirect(reqwest::redirect::Policy::none());
        if let Some(path) = ca_certificates {
            let pem = std::fs::read(path).map_err(|error| {
                CallError::Transport(format!("cannot read the CA file {}: {error}", path.display()))
            })?;
            let certificates = reqwest::Certificate::from_pem_bundle(&pem)
                .ok()
                .filter(|certificates| !certificates.is_empty())
                .ok_or_else(|| {
                    CallError::Transport(format!("the CA file {} holds no PEM certificate", path.display()))
                })?;
            builder = builder.tls_certs_only(certificates);
        }
        let http = builder
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
        self.post_answer(body).await.map(|answered| (answered.status, answered.body))
    }

    /// Posts raw bytes to `/typedrequest` and answers the status, the body and the
    /// `x-request-id` header.
    async fn post_answer(&self, body: Vec<u8>) -> Result<Answered, CallError> {
        let request = self.http.post(self.endpoint.clone()).header(reqwest::header::CONTENT_TYPE, "application/json");
        self.exchange(request.body(body), &self.shown_endpoint).await
    }

    async fn exchange(&self, request: reqwest::RequestBuilder, shown_url: &str) -> Result<Answered, CallError> {
        let exchange = async {
            let response = request.send().await?;
            let status = response.status().as_u16();
            let request_id = response.headers().get("x-request-id").and_then(|id| id.to_str().ok()).map(str::to_owned);
            Ok::<_, reqwest::Error>(Answered { status, request_id, body: response.bytes().await?.to_vec() })
        };
        exchange.await.map_err(|error| self.transport_error(&error, shown_url))
    }

    /// `GET <base URL><path>` (`/readyz`): the status and the body as text.
    pub async fn get(&self, path: &str) -> Result<(u16, String), CallError> {
        let mut url = self.endpoint.clone();
        url.set_path(path);
        url.set_query(None);
        let shown_url = format!("{}{path}", self.shown_endpoint.trim_end_matches("/typedrequest"));
        let answered = self.exchange(self.http.get(url), &shown_url).await?;
        Ok((answered.status, String::from_utf8_lossy(&answered.body).into_owned()))
    }

    fn transport_error(&self, error: &reqwest::Error, shown_url: &str) -> CallError {
        if error.is_timeout() {
            return CallError::TimedOut { url: shown_url.to_owned(), after: self.timeout };
        }
        let chain = error_chain(error);
        let https = self.endpoint.scheme() == "https";
        // A TLS client reading a plain HTTP answer sees a record of an unknown content type; a
        // plain client reading a TLS record sees no HTTP at all.
        let hint = if https && (chain.contains("InvalidContentType") || chain.contains("corrupt message")) {
            "; the controller does not speak TLS there: use http:// instead of https://"
        } else if !https && (chain.contains("invalid HTTP") || chain.contains("Parse")) {
            "; the answer is not HTTP: if the controller serves TLS there, use https:// instead of http://"
        } else if !https && chain.contains("connection closed before message completed") {
            "; the connection closed without an answer: if the controller serves TLS there, use https:// instead of \
             http://"
        } else {
            ""
        };
        CallError::Transport(format!("cannot reach {shown_url}: {chain}{hint}"))
    }

    /// Fires `method` with `request` and answers the whole answer envelope.
    pub async fn envelope(
        &self,
        method: &str,
        request: impl Serialize,
        auth_jwt: Option<&str>,
    ) -> Result<Value, CallError> {
        self.envelope_traced(method, request, auth_jwt).await.1
    }

    /// [`Client::envelope`], with the request id: the `x-request-id` the controller answered, or,
    /// when no answer came, the `correlation.id` sent (which the controller logs the call under).
    async fn envelope_traced(
        &self,
        method: &str,
        request: impl Serialize,
        auth_jwt: Option<&str>,
    ) -> (String, Result<Value, CallError>) {
        let correlation_id = uuid::Uuid::new_v4().to_string();
        let envelope = RequestEnvelope {
            auth_info: auth_jwt.map(|jwt| AuthInfo { jwt }),
            correlation: Correlation { id: &correlation_id, phase: "request" },
            method,
            request,
            response: (),
        };
        let body = match serde_json::to_vec(&envelope) {
            Ok(body) => body,
            Err(error) => {
                return (correlation_id, Err(CallError::Transport(format!("the request cannot be sent: {error}"))));
            }
        };
        let answered = match self.post_answer(body).await {
            Ok(answered) => answered,
            Err(error) => return (correlation_id, Err(error)),
        };
        let request_id = answered.request_id.unwrap_or(correlation_id);
        if answered.status != 200 {
            let body = String::from_utf8_lossy(&answered.body).into_owned();
            return (request_id, Err(CallError::Http { status: answered.status, body }));
        }
        let answer = serde_json::from_slice(&answered.body).map_err(|error| {
            CallError::Transport(format!("the answer of {} is not JSON: {error}", self.shown_endpoint))
        });
        (request_id, answer)
    }

    /// Fires `method` and answers `response` as a value, or the typed error.
    pub async fn call(&self, method: &str, request: impl Serialize) -> Result<Value, CallError> {
        self.call_traced(method, request).await.1
    }

    /// [`Client::call`], with the response read as `A` (an answer shape of `api::wire::answers`).
    pub async fn call_as<A: DeserializeOwned>(&self, method: &str, request: impl Serialize) -> Result<A, CallError> {
        self.call_traced(method, request).await.1
    }

    /// [`Client::call`], with the request id of the call (see [`Client::envelope_traced`]): the id
    /// of the controller's log lines of it.
    /// The response is read as `A`: `Value`, or an answer shape of `api::wire::answers`.
    pub async fn call_traced<A: DeserializeOwned>(
        &self,
        method: &str,
        request: impl Serialize,
    ) -> (String, Result<A, CallError>) {
        let (request_id, answer) = self.envelope_traced(method, request, None).await;
        let answered = answer.and_then(|mut answer| match answer.get("error").filter(|error| !error.is_null()) {
            Some(error) => Err(CallError::Typed(TypedError {
                text: error["text"].as_str().unwrap_or("").to_owned(),
                data: error["data"].clone(),
            })),
            None => serde_json::from_value(answer["response"].take())
                .map_err(|error| CallError::Transport(format!("the answer of {method} cannot be read: {error}"))),
        });
        (request_id, answered)
    }
}

/// The request envelope, its members sorted by name.
#[derive(Serialize)]
struct RequestEnvelope<'a, R> {
    #[serde(rename = "authInfo", skip_serializing_if = "Option::is_none")]
    auth_info: Option<AuthInfo<'a>>,
    correlation: Correlation<'a>,
    method: &'a str,
    request: R,
    response: (),
}

#[derive(Serialize)]
struct AuthInfo<'a> {
    jwt: &'a str,
}

#[derive(Serialize)]
struct Correlation<'a> {
    id: &'a str,
    phase: &'static str,
}

/// What came back for one request.
struct Answered {
    status: u16,
    request_id: Option<String>,
    body: Vec<u8>,
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
