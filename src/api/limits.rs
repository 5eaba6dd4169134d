//! Admission and deadlines: what one client, authenticated or not, can hold of the server.
//!
//! - **Connections** ([`super::connections`]): at most [`Limits::max_connections`] open, at most
//!   [`Limits::max_connections_per_peer`] from one address, the first request head within
//!   [`Limits::first_head_timeout`] and every later one (and a keep-alive connection's idle time)
//!   within [`Limits::header_read_timeout`]; at the cap the oldest connection that has not
//!   delivered a whole request makes room for a new one.
//! - **Bodies**: `POST /typedrequest` answers 413 at once for a declared `Content-Length` over
//!   [`Limits::body_bytes`] (without reading it), reads the whole body within
//!   [`Limits::body_read_timeout`] (else 408 `body-timeout`, and the connection is closed), and only
//!   then asks for a permit, so a slow or stalled body holds no permit.
//! - **Permits**: a request takes a permit from one of two pools, chosen by its envelope's method:
//!   the long poll `getClusterIngressRouteTable` from the long-poll pool
//!   ([`Limits::concurrent_long_polls`]), every other request (and every body that is not an
//!   envelope) from the request pool ([`Limits::concurrent_requests`]). A full pool answers 503
//!   with `Retry-After` at once. A request on `/typedsocket` takes a permit from the request pool
//!   too; when none is free, a request on a socket with an open node session waits up to
//!   [`SESSION_REQUEST_WAIT`] (at most [`SESSION_REQUESTS_WAITING`] per socket), and any other is
//!   answered at once with the envelope error `overloaded` and `retryAfterMs`
//!   (`registerClusterIngress`: its `not-ready` refusal), so no unauthenticated client holds a
//!   place in that queue. A socket without a session has at most
//!   [`SESSIONLESS_REQUESTS_IN_FLIGHT`] requests in flight; more are answered `overloaded` at once.
//! - **Sockets**: at most [`Limits::max_sockets`] are open; over it the upgrade is answered 503.
//!   Of them at most half ([`sessionless_cap`]) have not opened a node session, at most a sixteenth
//!   ([`sessionless_per_peer_cap`], at least one) from one peer address; over either the upgrade is
//!   answered 503 too, so the other half stays for sockets that open a session.
//!   A socket that has not opened a node session within [`Limits::socket_session_deadline`] is
//!   closed with code 1008 (policy violation). Until its session opens, a socket's messages are at
//!   most [`Limits::body_bytes`] (`api::socket`).
//!
//! Health, readiness and metrics take no permit; they share only the connection bound. Readiness
//! checks the store once at a time and answers with a ready outcome for up to
//! [`READINESS_REUSE`](super::READINESS_REUSE), so probes take at most one pool connection.

use super::envelope::RequestEnvelope;
use super::error::ApiError;
use super::methods::{Principal, Timeout};
use super::{AppState, answer_envelope};
use axum::body::{Body, Bytes};
use axum::extract::ws::{CloseFrame, Message, close_code};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http_body_util::{BodyExt as _, LengthLimitError, Limited};
use serde_json::{Value, json};
use std::borrow::Cow;
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// How long a caller is told to wait after a shed request, in ms (`Retry-After` in seconds).
pub const OVERLOADED_RETRY_AFTER_MS: u64 = 1_000;

/// [`OVERLOADED_RETRY_AFTER_MS`] as the `Retry-After` header's whole seconds (at least 1).
pub(crate) const OVERLOADED_RETRY_AFTER_SECONDS: u64 =
    if OVERLOADED_RETRY_AFTER_MS < 1000 { 1 } else { OVERLOADED_RETRY_AFTER_MS / 1000 };

/// Limits of the HTTP and WebSocket surface (`02-wire.md`, "Limits").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest accepted request body, bytes.
    pub body_bytes: usize,
    /// Requests handled at once (HTTP and socket requests together, long polls apart); more are
    /// answered 503 with `Retry-After` (on a socket: `overloaded`).
    pub concurrent_requests: usize,
    /// Longest a request may take before it is answered `store-unavailable`.
    pub request_timeout: Duration,
    /// Longest a request body may take to arrive in full, counted from its headers; then 408.
    pub body_read_timeout: Duration,
    /// Longest a connection may take to send a request's headers (also the longest a keep-alive
    /// connection stays idle); then it is closed.
    pub header_read_timeout: Duration,
    /// Longest a new connection may take to send its first request head; then it is closed.
    pub first_head_timeout: Duration,
    /// HTTP connections open at once; at the cap a new one takes the place of the oldest that has
    /// not delivered a whole request, or waits in the listener's queue when every one has.
    pub max_connections: usize,
    /// HTTP connections open at once from one peer address; more are answered 503 and closed.
    pub max_connections_per_peer: usize,
    /// `getClusterIngressRouteTable` calls handled at once, apart from `concurrent_requests`;
    /// more are answered 503 with `Retry-After`.
    pub concurrent_long_polls: usize,
    /// WebSockets open at once; more upgrades are answered 503 with `Retry-After`.
    pub max_sockets: usize,
    /// Longest a socket may stay open without a node session; then it is closed (code 1008).
    pub socket_session_deadline: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            body_bytes: 1024 * 1024,
            concurrent_requests: 256,
            request_timeout: Duration::from_secs(10),
            body_read_timeout: Duration::from_secs(5),
            header_read_timeout: Duration::from_secs(10),
            first_head_timeout: Duration::from_secs(2),
            max_connections: 512,
            max_connections_per_peer: 64,
            concurrent_long_polls: 64,
            max_sockets: 256,
            socket_session_deadline: Duration::from_secs(10),
        }
    }
}

/// The permit pools of one server.
#[derive(Clone)]
pub(crate) struct Admission {
    requests: Arc<Semaphore>,
    long_polls: Arc<Semaphore>,
    sockets: Arc<Semaphore>,
    sessionless: Arc<Mutex<SessionlessCounts>>,
}

/// The open sockets without a node session: in all and by peer address.
#[derive(Default)]
struct SessionlessCounts {
    total: usize,
    by_peer: HashMap<IpAddr, usize>,
}

impl Admission {
    /// Pools sized by `limits`.
    pub(crate) fn new(limits: &Limits) -> Self {
        Admission {
            requests: Arc::new(Semaphore::new(limits.concurrent_requests)),
            long_polls: Arc::new(Semaphore::new(limits.concurrent_long_polls)),
            sockets: Arc::new(Semaphore::new(limits.max_sockets)),
            sessionless: Arc::default(),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Answers.

fn json_answer(status: StatusCode, text: &str, data: Value) -> Response {
    (status, axum::Json(json!({ "error": { "text": text, "data": data } }))).into_response()
}

/// 503 with `Retry-After`: a pool (or the socket bound) is full.
pub(crate) fn overloaded_response() -> Response {
    let mut response = json_answer(
        StatusCode::SERVICE_UNAVAILABLE,
        "overloaded",
        json!({ "code": "overloaded", "retryAfterMs": OVERLOADED_RETRY_AFTER_MS }),
    );
    response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(OVERLOADED_RETRY_AFTER_SECONDS));
    response
}

fn body_too_large() -> Response {
    metrics::counter!("cloudly_requests_total", "method" => "-", "outcome" => "body-too-large").increment(1);
    json_answer(StatusCode::PAYLOAD_TOO_LARGE, "request body too large", json!({ "code": "body-too-large" }))
}

fn body_timeout(limits: &Limits) -> Response {
    metrics::counter!("cloudly_requests_total", "method" => "-", "outcome" => "body-timeout").increment(1);
    tracing::debug!(deadline_ms = limits.body_read_timeout.as_millis() as u64, "request body not received in time");
    json_answer(
        StatusCode::REQUEST_TIMEOUT,
        "request body not received in time",
        json!({ "code": "body-timeout", "deadlineMs": limits.body_read_timeout.as_millis() as u64 }),
    )
}

// ---------------------------------------------------------------------------------------------
// `POST /typedrequest`: the body first, then a permit.

/// Which pool a request takes its permit from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pool {
    Requests,
    LongPolls,
}

impl Pool {
    /// The pool of a method's calls: its own for a long poll ([`Timeout::RouteTableLongPoll`]).
    fn of_method(method: Option<&str>) -> Pool {
        match method.and_then(super::methods::find) {
            Some(method) if method.timeout == Timeout::RouteTableLongPoll => Pool::LongPolls,
            _ => Pool::Requests,
        }
    }

    fn label(self) -> &'static str {
        match self {
            Pool::Requests => "requests",
            Pool::LongPolls => "long-polls",
        }
    }

    fn take(self, admission: &Admission) -> Option<OwnedSemaphorePermit> {
        let semaphore = match self {
            Pool::Requests => &admission.requests,
            Pool::LongPolls => &admission.long_polls,
        };
        let permit = semaphore.clone().try_acquire_owned().ok();
        if permit.is_none() {
            metrics::counter!("cloudly_requests_shed_total", "pool" => self.label()).increment(1);
        }
        permit
    }
}

/// The `Content-Length` a request declares, if it declares one that reads as a number.
fn declared_length(headers: &HeaderMap) -> Option<u64> {
    headers.get(header::CONTENT_LENGTH)?.to_str().ok()?.trim().parse().ok()
}

/// The envelope's `method`, read without building the envelope (the handler parses it in full).
fn envelope_method(body: &[u8]) -> Option<Cow<'_, str>> {
    #[derive(serde::Deserialize)]
    struct MethodOnly<'a> {
        #[serde(borrow, default)]
        method: Option<Cow<'a, str>>,
    }
    serde_json::from_slice::<MethodOnly<'_>>(body).ok()?.method
}

/// Middleware of `POST /typedrequest`: 413 at once for a declared length over the limit, the whole
/// body within the body deadline (else 408, over the limit while reading 413), then a permit of
/// the method's pool (else 503 with `Retry-After`), held until the answer is ready.
pub(crate) async fn admit_typed_request(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let limits = &state.limits;
    if declared_length(request.headers()).is_some_and(|length| length > limits.body_bytes as u64) {
        return body_too_large();
    }
    let (parts, body) = request.into_parts();
    let collected = tokio::time::timeout(limits.body_read_timeout, Limited::new(body, limits.body_bytes).collect());
    let body: Bytes = match collected.await {
        Ok(Ok(collected)) => collected.to_bytes(),
        Ok(Err(error)) if error.is::<LengthLimitError>() => return body_too_large(),
        // The client broke off the body: nobody reads this answer, but it is the envelope's.
        Ok(Err(_)) => return super::malformed(),
        Err(_) => return body_timeout(limits),
    };
    if let Some(super::connections::ConnectionMark(connection)) = parts.extensions.get() {
        connection.delivered();
    }
    let pool = Pool::of_method(envelope_method(&body).as_deref());
    let Some(permit) = pool.take(&state.admission) else {
        return overloaded_response();
    };
    let response = next.run(Request::from_parts(parts, Body::from(body))).await;
    drop(permit);
    response
}

// ---------------------------------------------------------------------------------------------
// `/typedsocket`.

/// One of the [`Limits::max_sockets`] socket places, held for as long as the socket is served.
pub(crate) struct SocketSlot(#[allow(dead_code)] OwnedSemaphorePermit);

impl SocketSlot {
    /// Runs `serving` (a socket's whole life) holding this place.
    pub(crate) async fn hold_while(self, serving: impl Future<Output = ()>) {
        serving.await;
        drop(self);
    }
}

/// A socket's place among those without a node session, given back when it is dropped (the
/// socket opened its session, or ended).
pub(crate) struct SessionlessPlace {
    counts: Arc<Mutex<SessionlessCounts>>,
    peer: IpAddr,
}

impl Drop for SessionlessPlace {
    fn drop(&mut self) {
        let mut counts = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        counts.total -= 1;
        if let Some(held) = counts.by_peer.get_mut(&self.peer) {
            *held -= 1;
            if *held == 0 {
                counts.by_peer.remove(&self.peer);
            }
        }
    }
}

/// How many sockets without a node session are open at once: half of [`Limits::max_sockets`]
/// (at least one).
pub(crate) fn sessionless_cap(limits: &Limits) -> usize {
    (limits.max_sockets / 2).max(1)
}

/// How many sockets without a node session one peer address holds at once: a sixteenth of
/// [`Limits::max_sockets`] (at least one).
pub(crate) fn sessionless_per_peer_cap(limits: &Limits) -> usize {
    (limits.max_sockets / 16).max(1)
}

/// A socket place for a new socket of `peer` and its place among the sockets without a session,
/// or `None` when all socket places, all places without a session or `peer`'s are taken (the
/// upgrade is then refused with [`overloaded_response`]).
pub(crate) fn take_socket_slot(state: &AppState, peer: IpAddr) -> Option<(SocketSlot, SessionlessPlace)> {
    let limits = &state.limits;
    let mut counts = state.admission.sessionless.lock().unwrap_or_else(PoisonError::into_inner);
    let of_peer = counts.by_peer.get(&peer).copied().unwrap_or(0);
    let permit = if counts.total >= sessionless_cap(limits) || of_peer >= sessionless_per_peer_cap(limits) {
        None
    } else {
        state.admission.sockets.clone().try_acquire_owned().ok()
    };
    let Some(permit) = permit else {
        metrics::counter!("cloudly_sockets_refused_total").increment(1);
        tracing::debug!(max_sockets = limits.max_sockets, "typed socket refused: too many open");
        return None;
    };
    counts.total += 1;
    *counts.by_peer.entry(peer).or_default() += 1;
    Some((SocketSlot(permit), SessionlessPlace { counts: state.admission.sessionless.clone(), peer }))
}

/// How long a request on a socket with an open node session waits for a permit of the request
/// pool before it is shed: a change that reaches every node makes them all fetch at once, and a
/// short wait serves them in order where shedding would make each retry a second later.
pub const SESSION_REQUEST_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// How many requests of one socket wait for a permit at once; more are shed at once. A socket
/// without a node session never waits.
pub const SESSION_REQUESTS_WAITING: usize = 4;

/// How many requests a socket without a node session has in flight at once; more are answered
/// `overloaded` at once, so such a socket holds at most this many permits of the request pool.
pub const SESSIONLESS_REQUESTS_IN_FLIGHT: usize = 2;

/// What a socket request gets from the request pool.
pub(crate) enum SocketAdmission {
    /// A permit, now.
    Admitted(OwnedSemaphorePermit),
    /// None free now: the request may wait up to [`SESSION_REQUEST_WAIT`] on this pool.
    Wait(Arc<Semaphore>),
    /// Shed: the answer frame.
    Shed(Message),
}

/// A permit of the request pool for one socket request; when none is free, the pool to wait on
/// if `may_wait` (a node session's request, within [`SESSION_REQUESTS_WAITING`]), else the answer
/// frame that sheds it ([`shed_socket_request`]).
pub(crate) fn admit_socket_request(state: &AppState, envelope: &RequestEnvelope, may_wait: bool) -> SocketAdmission {
    if let Ok(permit) = state.admission.requests.clone().try_acquire_owned() {
        return SocketAdmission::Admitted(permit);
    }
    if may_wait {
        metrics::counter!("cloudly_socket_requests_waited_total").increment(1);
        return SocketAdmission::Wait(state.admission.requests.clone());
    }
    metrics::counter!("cloudly_requests_shed_total", "pool" => Pool::Requests.label()).increment(1);
    SocketAdmission::Shed(shed_socket_request(state, envelope))
}

/// The answer frame that sheds a socket request: `overloaded` with `retryAfterMs`
/// (`registerClusterIngress`: its `not-ready` refusal, since its errors are its own).
pub(crate) fn shed_socket_request(state: &AppState, envelope: &RequestEnvelope) -> Message {
    let method = super::methods::find(&envelope.method);
    let error = match method {
        Some(method) if matches!(method.principal, Principal::Registration(_)) => method.timed_out(&state.controller),
        _ => ApiError::new("overloaded", json!({ "code": "overloaded", "retryAfterMs": OVERLOADED_RETRY_AFTER_MS })),
    };
    let label = method.map_or("unknown", |method| method.name);
    metrics::counter!("cloudly_socket_requests_total", "method" => label, "outcome" => error.code().to_owned())
        .increment(1);
    let answer = answer_envelope(&envelope.method, envelope.correlation.clone(), Err(error));
    Message::Text(answer.to_string().into())
}

/// Resolves when a socket opened now has had [`Limits::socket_session_deadline`] to open its node
/// session.
pub(crate) fn session_deadline(limits: &Limits) -> tokio::time::Sleep {
    tokio::time::sleep(limits.socket_session_deadline)
}

/// The close frame of a socket without a session at its deadline: 1008 (policy violation).
pub(crate) fn session_deadline_close(limits: &Limits) -> Message {
    let deadline_ms = limits.socket_session_deadline.as_millis() as u64;
    metrics::counter!("cloudly_sockets_session_deadline_total").increment(1);
    tracing::info!(deadline_ms, "typed socket opened no session in time; closing");
    Message::Close(Some(CloseFrame {
        code: close_code::POLICY,
        reason: format!("no session opened within {deadline_ms} ms").into(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_long_poll_alone_takes_the_long_poll_pool() {
        assert_eq!(
            Pool::of_method(envelope_method(br#"{"method":"getClusterIngressRouteTable"}"#).as_deref()),
            Pool::LongPolls
        );
        assert_eq!(
            Pool::of_method(
                envelope_method(br#"{"request":{},"method":"getClusterIngress\u0052outeTable"}"#).as_deref()
            ),
            Pool::LongPolls
        );
        for body in [&br#"{"method":"listClusters"}"#[..], b"{}", b"[]", b"not json", br#"{"method":7}"#] {
            assert_eq!(Pool::of_method(envelope_method(body).as_deref()), Pool::Requests, "{body:?}");
        }
    }

    #[test]
    fn a_declared_length_is_read_only_when_it_is_a_number() {
        let mut headers = HeaderMap::new();
        assert_eq!(declared_length(&headers), None);
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from_static("104857600"));
        assert_eq!(declared_length(&headers), Some(104_857_600));
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from_static("lots"));
        assert_eq!(declared_length(&headers), None);
    }
}
