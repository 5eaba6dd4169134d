//! HTTP: the TypedRequest endpoint, health, readiness, metrics and the operator console
//! (`console`). Every answer carries an `x-request-id` header ([`REQUEST_ID_HEADER`]).
//!
//! Each request, over HTTP or a socket, runs in one span ([`request_span`]) carrying its
//! `request_id` (the correlation id) and, once proven, its `principal`, so every log line of the
//! request carries both. A successful administrator write logs `record written` with the ids,
//! revisions and generations of its answer, never a bearer. The answer envelope does not echo
//! `request`, which may carry an identity token.
//!
//! **Architecture invariant: only this module knows HTTP.** `router(state)` is split from `main`
//! (axum's `examples/testing` habit) so tests drive it in-process and over a real socket.

pub mod answers;
pub mod connections;
mod console;
pub mod envelope;
pub mod error;
pub mod limits;
pub mod methods;
pub mod requests;
pub mod socket;
pub mod wire;

use crate::domain::{Controller, DomainError};
use crate::store::StoreError;
use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use error::ApiError;
use metrics_exporter_prometheus::PrometheusHandle;
use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;
use tracing::Instrument as _;

pub use limits::Limits;

/// Everything a request handler needs.
#[derive(Clone)]
pub struct AppState {
    /// The decisions.
    pub controller: Arc<Controller>,
    /// The limits.
    pub limits: Limits,
    /// Admission to the handlers and to sockets.
    admission: limits::Admission,
    /// False while starting and once draining after a stop signal.
    pub accepting: Arc<AtomicBool>,
    /// The store's readiness check of `/readyz`.
    readiness: Arc<Readiness>,
    metrics: PrometheusHandle,
}

impl AppState {
    /// State over `controller` with `limits`.
    pub fn new(controller: Arc<Controller>, limits: Limits) -> Self {
        AppState {
            controller,
            limits,
            admission: limits::Admission::new(&limits),
            accepting: Arc::new(AtomicBool::new(true)),
            readiness: Arc::new(Readiness::default()),
            metrics: metrics_handle(),
        }
    }
}

/// The process-wide Prometheus recorder, installed on first use ([`crate::metrics::install`]).
pub fn metrics_handle() -> PrometheusHandle {
    crate::metrics::install()
}

/// The correlation id of a request's log lines: the envelope's `correlation.id` when it is a
/// short printable string (up to 128 characters), else a fresh one.
pub fn request_id(correlation: &Map<String, Value>) -> String {
    match correlation.get("id").and_then(Value::as_str) {
        Some(id) if !id.is_empty() && id.len() <= 128 && id.chars().all(|character| character.is_ascii_graphic()) => {
            id.to_owned()
        }
        _ => uuid::Uuid::new_v4().simple().to_string(),
    }
}

/// The response header that carries the request id: on `/typedrequest` the id every log line of
/// the request carries ([`request_id`]), on every other answer a fresh one. A client shows it, so
/// an operator can find the server's log lines of a failed call.
pub const REQUEST_ID_HEADER: &str = "x-request-id";

/// Sets the `x-request-id` header of `response` to `id` (an id [`request_id`] made: printable
/// ASCII).
fn set_request_id(response: &mut Response, id: &str) {
    if let Ok(value) = HeaderValue::from_str(id) {
        response.headers_mut().insert(REQUEST_ID_HEADER, value);
    }
}

/// Gives an answer that carries no request id yet (health, readiness, metrics, the socket's
/// upgrade, a refusal before the envelope was read) a fresh one.
async fn with_request_id(mut response: Response) -> Response {
    if !response.headers().contains_key(REQUEST_ID_HEADER) {
        set_request_id(&mut response, &uuid::Uuid::new_v4().simple().to_string());
    }
    response
}

/// The span every log line of one request is written in: `request_id` (the correlation id) and
/// `principal`, absent until the method proved who calls (`admin:<user>`, `relay`,
/// `node:<cluster>/<node>`; see `methods::Method::call`). A field is recorded once: the human
/// format would print a second value beside the first.
pub fn request_span(kind: &'static str, request_id: &str, principal: Option<&str>, method: &str) -> tracing::Span {
    let span = tracing::info_span!("request", kind, request_id = %request_id, principal = tracing::field::Empty, method = %method);
    if let Some(principal) = principal {
        span.record("principal", principal);
    }
    span
}

/// Logs what a successful administrator write changed: the method and, of its answer, the
/// members that name records and their new revisions or generations (ids, revision,
/// generation; never a bearer or another member).
fn log_write(method: &methods::Method, response: &RawValue) {
    use crate::domain::identity::Access;
    if !matches!(method.principal, methods::Principal::Administrator(Access::Admin | Access::Designate, _))
        || !tracing::enabled!(tracing::Level::INFO)
    {
        return;
    }
    if let Some(changed) = naming_members(response.get()) {
        tracing::info!(method = method.name, changed = %changed.join(" "), "record written");
    }
}

/// The `path=value` of every naming member of an answer's text ([`NamingMembers`]).
fn naming_members(answer: &str) -> Option<Vec<String>> {
    let mut changed = Vec::new();
    let members = NamingMembers { name: String::new(), naming: false, depth: 0, changed: &mut changed };
    serde::de::DeserializeSeed::deserialize(members, &mut serde_json::Deserializer::from_str(answer)).ok()?;
    Some(changed)
}

/// The members of an answer that [`log_write`] names: scalars under one of these keys, in the
/// answer and in its objects two levels down.
const NAMING: [&str; 10] = [
    "id",
    "clusterId",
    "organizationId",
    "serviceId",
    "nodeId",
    "hostname",
    "revision",
    "generation",
    "replayed",
    "deleted",
];

/// One member of an answer's text as [`log_write`] reads it: a naming scalar is kept as
/// `path=value`, an object within reach is read member by member, and everything else is
/// skipped as it is parsed, so no tree of the answer is built.
struct NamingMembers<'a> {
    /// The member's dotted path (empty for the answer itself).
    name: String,
    /// Whether its key is one of [`NAMING`].
    naming: bool,
    /// How deep its members stand (the answer's own members stand at 0).
    depth: usize,
    changed: &'a mut Vec<String>,
}

impl NamingMembers<'_> {
    fn keep(self, value: impl std::fmt::Display) {
        if self.naming {
            self.changed.push(format!("{}={value}", self.name));
        }
    }
}

impl<'de> serde::de::DeserializeSeed<'de> for NamingMembers<'_> {
    type Value = ();

    fn deserialize<D: serde::Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

/// The [`NamingMembers`] visit of a scalar: kept when its key is a naming one.
macro_rules! keep {
    ($($visit:ident($value:ty)),*) => {$(
        fn $visit<E>(self, value: $value) -> Result<(), E> {
            self.keep(value);
            Ok(())
        }
    )*};
}

impl<'de> serde::de::Visitor<'de> for NamingMembers<'_> {
    type Value = ();

    fn expecting(&self, formatter: &mut std::fmt::Formatter) -> std::fmt::Result {
        formatter.write_str("a JSON value")
    }

    keep!(visit_str(&str), visit_u64(u64), visit_i64(i64), visit_f64(f64), visit_bool(bool));

    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut items: A) -> Result<(), A::Error> {
        while items.next_element::<serde::de::IgnoredAny>()?.is_some() {}
        Ok(())
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut members: A) -> Result<(), A::Error> {
        if self.depth > 2 {
            while members.next_entry::<serde::de::IgnoredAny, serde::de::IgnoredAny>()?.is_some() {}
            return Ok(());
        }
        while let Some(key) = members.next_key::<std::borrow::Cow<'de, str>>()? {
            let name = if self.name.is_empty() { key.to_string() } else { format!("{}.{key}", self.name) };
            let naming = NAMING.contains(&key.as_ref());
            let member = NamingMembers { name, naming, depth: self.depth + 1, changed: &mut *self.changed };
            members.next_value_seed(member)?;
        }
        Ok(())
    }
}

/// The application: every route; the body limit and the concurrency limit on `/typedrequest`.
pub fn router(state: AppState) -> Router {
    // Load shedding guards the API only: health, readiness and metrics must answer under load.
    let typed_request = post(typed_request)
        .layer(DefaultBodyLimit::max(state.limits.body_bytes))
        .layer(middleware::from_fn_with_state(state.clone(), limits::admit_typed_request));
    Router::new()
        .route("/typedrequest", typed_request)
        .route("/typedsocket", get(socket::typed_socket))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics_text))
        .merge(console::routes(&state))
        .layer(middleware::map_response(with_request_id))
        .with_state(state)
}

async fn healthz() -> impl IntoResponse {
    axum::Json(json!({ "status": "ok" }))
}

/// How long `/readyz` waits for the store's readiness check: a store that does not answer within
/// it (a database host that vanished without a word, a lock held on the heartbeat) is
/// `store-unavailable`, answered well inside a probe's timeout instead of after the pool's.
pub const READINESS_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// How long a ready outcome of the store's readiness check answers later `/readyz` calls: a store
/// that stops answering or committing is seen within it (at once after a request was answered
/// `store-unavailable`), and the store is checked at most about once a second however many probes
/// ask.
pub const READINESS_REUSE: std::time::Duration = std::time::Duration::from_secs(1);

/// The store's readiness check as `/readyz` runs it (it takes a pool connection and writes the
/// heartbeat row): one at a time. Its outcome answers every call that waited for it; a ready
/// outcome also answers every call within [`READINESS_REUSE`] of the check's start, unless a
/// request met `store-unavailable` since ([`Readiness::forget`]). Any other outcome answers no
/// later call, so a store that answers again is seen at once.
#[derive(Default)]
struct Readiness {
    last: tokio::sync::Mutex<Option<ReadinessCheck>>,
    /// Set when a request met `store-unavailable`: the last ready outcome answers no later call.
    forgotten: AtomicBool,
}

/// One run of the store's readiness check.
#[derive(Clone, Copy)]
struct ReadinessCheck {
    started: Instant,
    finished: Instant,
    ready: Result<(), &'static str>,
}

impl Readiness {
    /// The store is ready, or the reason it is not (`migrations-pending`, `store-unavailable`).
    async fn check(&self, controller: &Controller) -> Result<(), &'static str> {
        let arrived = Instant::now();
        let mut last = self.last.lock().await;
        if let Some(check) = *last {
            let reusable = check.ready.is_ok()
                && check.started.elapsed() < READINESS_REUSE
                && !self.forgotten.load(Ordering::SeqCst);
            if check.finished > arrived || reusable {
                return check.ready;
            }
        }
        self.forgotten.store(false, Ordering::SeqCst);
        let started = Instant::now();
        let checked = tokio::time::timeout(READINESS_TIMEOUT, controller.store.is_ready()).await;
        let checked =
            checked.unwrap_or_else(|_| Err(StoreError::Unavailable("the readiness check took too long".into())));
        let ready = match checked {
            Ok(true) => Ok(()),
            Ok(false) => Err("migrations-pending"),
            Err(error) => {
                tracing::warn!(%error, "readiness: store does not answer");
                metrics::counter!("cloudly_store_errors_total").increment(1);
                Err("store-unavailable")
            }
        };
        *last = Some(ReadinessCheck { started, finished: Instant::now(), ready });
        ready
    }

    /// A request met `store-unavailable`: the next call checks the store again.
    fn forget(&self) {
        self.forgotten.store(true, Ordering::SeqCst);
    }
}

async fn readyz(State(state): State<AppState>) -> Response {
    if !state.accepting.load(Ordering::SeqCst) {
        return (StatusCode::SERVICE_UNAVAILABLE, axum::Json(json!({ "ready": false, "reason": "draining" })))
            .into_response();
    }
    match state.readiness.check(&state.controller).await {
        Ok(()) => axum::Json(json!({ "ready": true })).into_response(),
        Err(reason) => {
            (StatusCode::SERVICE_UNAVAILABLE, axum::Json(json!({ "ready": false, "reason": reason }))).into_response()
        }
    }
}

async fn metrics_text(State(state): State<AppState>) -> Response {
    let mut response = crate::metrics::render(&state.metrics, state.controller.store.pool_status()).into_response();
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"));
    response
}

fn malformed() -> Response {
    metrics::counter!("cloudly_requests_total", "method" => "-", "outcome" => "malformed-envelope").increment(1);
    (
        StatusCode::BAD_REQUEST,
        axum::Json(json!({ "error": { "text": "malformed typed request", "data": { "code": "malformed-envelope" } } })),
    )
        .into_response()
}

/// `POST /typedrequest`: one envelope in, one envelope out (`02-wire.md`).
async fn typed_request(
    State(state): State<AppState>,
    connection: Option<axum::Extension<connections::ConnectionMark>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let body = match body {
        Ok(body) => body,
        Err(rejection) if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE => {
            metrics::counter!("cloudly_requests_total", "method" => "-", "outcome" => "body-too-large").increment(1);
            return (
                StatusCode::PAYLOAD_TOO_LARGE,
                axum::Json(
                    json!({ "error": { "text": "request body too large", "data": { "code": "body-too-large" } } }),
                ),
            )
                .into_response();
        }
        Err(_) => return malformed(),
    };
    let Ok(text) = std::str::from_utf8(&body) else { return malformed() };
    let Ok(envelope) = envelope::read_request(text) else { return malformed() };
    let method = methods::find(&envelope.method);
    // Metric labels are bounded: an unknown method is counted as "unknown".
    let method_label = method.map_or("unknown", |method| method.name);
    let request_id = request_id(&envelope.correlation);
    let span = request_span("http", &request_id, None, method_label);
    let (mut response, proven) = answer_typed_request(&state, envelope, method).instrument(span).await;
    if proven && let Some(axum::Extension(connections::ConnectionMark(connection))) = connection {
        connection.trusted();
    }
    set_request_id(&mut response, &request_id);
    response
}

/// Answers a read envelope inside its request span, and whether the request proved a principal
/// (a method that asks for one answered it).
async fn answer_typed_request(
    state: &AppState,
    envelope: envelope::RequestEnvelope,
    method: Option<&'static methods::Method>,
) -> (Response, bool) {
    let method_label = method.map_or("unknown", |method| method.name);
    let started = Instant::now();
    let controller = &state.controller;
    let timeout = method.map_or(state.limits.request_timeout, |method| method.time_limit(&state.limits, controller));
    let call = async {
        let method = method.ok_or_else(ApiError::unknown_method)?;
        let request = envelope.request.as_ref().map_err(|rule| *rule);
        method.call(controller, methods::Transport::Http, request, envelope.auth_jwt.as_deref()).await
    };
    let outcome = match tokio::time::timeout(timeout, call).await {
        Ok(outcome) => outcome,
        Err(_) => {
            tracing::warn!(method = %method_label, "request timed out");
            Err(method.map_or_else(
                || DomainError::StoreUnavailable("the call ran out of time".to_owned()).into(),
                |method| method.timed_out(controller),
            ))
        }
    };
    let code = match &outcome {
        Ok(response) => {
            if let Some(method) = method {
                log_write(method, response);
            }
            "ok".to_owned()
        }
        Err(error) => error.code().to_owned(),
    };
    if code == "store-unavailable" {
        metrics::counter!("cloudly_store_errors_total").increment(1);
        state.readiness.forget();
    }
    metrics::counter!("cloudly_requests_total", "method" => method_label, "outcome" => code.clone()).increment(1);
    if method.is_some_and(methods::Method::reads_plain_data) {
        // `registerClusterIngress`: the reason is one of eight fixed words; never anything the
        // caller sent.
        let outcome = match &outcome {
            Ok(_) => "accepted",
            Err(error) => error.data["reason"].as_str().unwrap_or(error.code()),
        };
        metrics::counter!("cloudly_ingress_registrations_total", "outcome" => outcome.to_owned()).increment(1);
    }
    metrics::histogram!("cloudly_request_duration_seconds", "method" => method_label)
        .record(started.elapsed().as_secs_f64());
    tracing::info!(method = %method_label, outcome = %code, elapsed_ms = started.elapsed().as_millis() as u64, "typed request");
    let proven =
        outcome.is_ok() && method.is_some_and(|method| !matches!(method.principal, methods::Principal::Anyone(_)));
    (axum::Json(answer_envelope(&envelope.method, envelope.correlation, outcome)).into_response(), proven)
}

/// The answer envelope: the method, the correlation with `phase: "response"`, and either the
/// response or the error, its members sorted by name as the wire has them. The request is not
/// echoed: it may carry an identity token, and no answer carries a token. Unknown envelope keys
/// are not echoed either.
#[derive(Serialize)]
pub struct AnswerEnvelope<'a> {
    correlation: Map<String, Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<EnvelopeError>,
    method: &'a str,
    request: (),
    response: Option<Box<RawValue>>,
}

/// The `error` of an [`AnswerEnvelope`].
#[derive(Serialize)]
struct EnvelopeError {
    data: Value,
    text: String,
}

impl std::fmt::Display for AnswerEnvelope<'_> {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str(&serde_json::to_string(self).map_err(|_| std::fmt::Error)?)
    }
}

/// The [`AnswerEnvelope`] of `outcome`.
pub fn answer_envelope(
    method: &str,
    mut correlation: Map<String, Value>,
    outcome: Result<Box<RawValue>, ApiError>,
) -> AnswerEnvelope<'_> {
    correlation.insert("phase".to_owned(), Value::String("response".to_owned()));
    let (response, error) = match outcome {
        Ok(response) => (Some(response), None),
        Err(error) => (None, Some(EnvelopeError { data: error.data, text: error.text })),
    };
    AnswerEnvelope { correlation, error, method, request: (), response }
}

#[cfg(test)]
mod tests {
    use super::naming_members;

    #[test]
    fn a_write_is_logged_by_the_members_that_name_what_it_changed_and_nothing_else() {
        let answer = r#"{"bearer":"secret","replayed":false,"node":{"id":"n1","hostAddresses":["192.0.2.1"],
            "runtime":{"generation":3,"deep":{"id":"too-deep","more":{"id":"x"}}}},"table":{"revision":7,
            "routes":[{"hostname":"in-a-list"}]},"deleted":null,"esc\u0061ped":{"clusterId":"c\"1"}}"#;
        let changed = naming_members(answer).expect("an object");
        assert_eq!(
            changed,
            ["replayed=false", "node.id=n1", "node.runtime.generation=3", "table.revision=7", "escaped.clusterId=c\"1",]
        );
        assert_eq!(naming_members("{\"id\":"), None, "a truncated answer is not logged");
    }
}
