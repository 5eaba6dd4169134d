//! `GET /typedsocket` (`02-wire.md`, "Transports"; `04-registration.md`, "Node sessions and
//! assignments"): a WebSocket on which every text frame is one TypedRequest envelope, both ways.
//!
//! Incoming `phase: "request"` envelopes are read like `POST /typedrequest` bodies
//! (`api::envelope`) and answered by the method table (`api::methods`): the node methods only
//! here (the socket is their principal), every other method as over HTTP but without
//! `authInfo`. Incoming `phase: "response"` envelopes complete the controller's own requests
//! (sent through the socket's link in the [`NodeLinks`](crate::domain::sessions::NodeLinks)
//! registry) by `correlation.id`.
//!
//! Liveness ([`Liveness`](crate::domain::sessions::Liveness)): a ping every 15 s; a socket silent
//! (no frame at all, pongs included) for 45 s is closed. Frames and messages are at most
//! [`MAX_FRAME_BYTES`] once the socket's node session opened; before, at most
//! [`Limits::body_bytes`](super::Limits::body_bytes), as a `POST /typedrequest` body: a longer
//! text message closes the socket with 1009 (message too big), and the connection reads at most
//! that bound plus [`PRE_SESSION_READ_SLACK`] of a message before the server takes it, so a socket
//! without a session makes the server buffer no more. A socket whose session is superseded by a
//! newer open, and every socket when the server stops, is closed with a close frame; so is a socket
//! that sends a text frame that is not UTF-8 (1007).

use super::connections::{ConnectionMark, OverReadLimit, ReadLimit};
use super::envelope::{self, Frame};
use super::error::ApiError;
use super::limits::{SessionlessPlace, SocketAdmission};
use super::methods::{self, Transport};
use super::{AppState, answer_envelope};
use crate::contract::session::RuntimeSessionReference;
use crate::contract::storage_claim::{APPLY_RUNTIME_LOCAL_STORAGE_CLAIM_METHOD, ApplyRuntimeLocalStorageClaimResponse};
use crate::domain::sessions::{LinkCommand, LinkError, NodeAnswer, NodeRequest};
use crate::domain::{Controller, DomainError};
use axum::Extension;
use axum::extract::State;
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade, close_code};
use axum::response::Response;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tokio::sync::{mpsc, oneshot};
use tracing::Instrument as _;

/// The largest frame and message, both ways, once a node session opened on the socket (16 MiB).
pub const MAX_FRAME_BYTES: usize = 16 * 1024 * 1024;

/// What a connection without a node session may read beyond `body_bytes` before the server takes
/// a message: one read of the WebSocket reader (its 128 KiB buffer), which may hold the start of
/// the next message.
pub const PRE_SESSION_READ_SLACK: usize = 128 * 1024;

/// One node socket, as the node methods see it: the session opened on it, and its link in the
/// controller's registry. Shared by the dispatch tasks of the socket.
pub struct NodeSocket {
    state: AppState,
    link_id: u64,
    commands: mpsc::UnboundedSender<LinkCommand>,
    session: Mutex<Option<RuntimeSessionReference>>,
    /// The connection's read bound, lifted once a session opened (none when served in-process).
    read_limit: Option<ReadLimit>,
    /// Its place among the sockets without a session, given back once a session opened.
    sessionless: Mutex<Option<SessionlessPlace>>,
    /// Requests of this socket waiting for a permit now (`limits::SESSION_REQUESTS_WAITING`).
    waiting: std::sync::atomic::AtomicUsize,
    /// Requests of this socket admitted and not yet answered
    /// (`limits::SESSIONLESS_REQUESTS_IN_FLIGHT`).
    in_flight: std::sync::atomic::AtomicUsize,
}

/// One admitted request of a socket, counted in its `in_flight` until dropped.
struct InFlight(Arc<NodeSocket>);

impl InFlight {
    fn enter(context: &Arc<NodeSocket>) -> Self {
        context.in_flight.fetch_add(1, Ordering::SeqCst);
        InFlight(context.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

impl NodeSocket {
    /// The session opened on this socket, if any.
    pub fn session(&self) -> Option<RuntimeSessionReference> {
        self.session.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    /// Makes `session` (just opened) this socket's session and the socket its node's link,
    /// replacing the link of a session this socket opened before.
    pub fn attach(&self, controller: &Controller, session: &RuntimeSessionReference) {
        let previous = self.session.lock().unwrap_or_else(std::sync::PoisonError::into_inner).replace(session.clone());
        if let Some(previous) = previous {
            controller.links.detach(self.link_id, &previous.cluster_id, &previous.node_id);
        }
        controller.links.attach(self.link_id, session, self.commands.clone());
        if let Some(read_limit) = &self.read_limit {
            read_limit.lift();
        }
        drop(self.sessionless.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take());
    }
}

/// `GET /typedsocket`: upgrades to a WebSocket served by [`serve_socket`].
pub(crate) async fn typed_socket(
    State(state): State<AppState>,
    read_limit: Option<Extension<ReadLimit>>,
    connection: Option<Extension<ConnectionMark>>,
    upgrade: WebSocketUpgrade,
) -> Response {
    // Served in-process (tests), a request has no connection: its peer is the unspecified address.
    let peer = connection.map_or(std::net::Ipv4Addr::UNSPECIFIED.into(), |Extension(mark)| mark.0.peer());
    let Some((slot, sessionless)) = super::limits::take_socket_slot(&state, peer) else {
        return super::limits::overloaded_response();
    };
    let read_limit = read_limit.map(|Extension(read_limit)| read_limit);
    upgrade
        .max_frame_size(MAX_FRAME_BYTES)
        .max_message_size(MAX_FRAME_BYTES)
        .on_upgrade(move |socket| slot.hold_while(serve_socket(socket, state, read_limit, sessionless)))
}

fn text_frame(value: &impl std::fmt::Display) -> Message {
    Message::Text(value.to_string().into())
}

fn malformed_frame() -> Message {
    text_frame(&json!({ "error": { "text": "malformed typed request", "data": { "code": "malformed-envelope" } } }))
}

fn close_frame(code: u16, reason: &'static str) -> Message {
    Message::Close(Some(CloseFrame { code, reason: reason.into() }))
}

/// The close frame of a receive that failed because a text message is not UTF-8 (RFC 6455 §8.1:
/// 1007) or a socket without a session sent more than its read bound (1009), if it failed so.
fn refusal_of(error: axum::Error) -> Option<Message> {
    match error.into_inner().downcast_ref::<tungstenite::Error>()? {
        tungstenite::Error::Utf8(_) => Some(close_frame(close_code::INVALID, "text frame is not UTF-8")),
        tungstenite::Error::Io(error) if error.get_ref().is_some_and(|inner| inner.is::<OverReadLimit>()) => {
            Some(message_too_big())
        }
        _ => None,
    }
}

/// The close frame of a socket without a session that sent a message over `body_bytes`: 1009.
fn message_too_big() -> Message {
    close_frame(close_code::SIZE, "message over the body limit before a session")
}

/// Serves one socket until it closes, its session is superseded, it falls silent, or the
/// server stops.
async fn serve_socket(
    mut socket: WebSocket,
    state: AppState,
    read_limit: Option<ReadLimit>,
    sessionless: SessionlessPlace,
) {
    if let Some(read_limit) = &read_limit {
        read_limit.bound(state.limits.body_bytes.saturating_add(PRE_SESSION_READ_SLACK));
    }
    let (commands_tx, mut commands) = mpsc::unbounded_channel();
    let link_id = state.controller.links.register(commands_tx.clone());
    let (frames_tx, mut frames) = mpsc::unbounded_channel::<Message>();
    let context = Arc::new(NodeSocket {
        state: state.clone(),
        link_id,
        commands: commands_tx,
        session: Mutex::new(None),
        read_limit,
        sessionless: Mutex::new(Some(sessionless)),
        waiting: std::sync::atomic::AtomicUsize::new(0),
        in_flight: std::sync::atomic::AtomicUsize::new(0),
    });
    let mut pending: HashMap<String, Pending> = HashMap::new();
    let liveness = state.controller.links.liveness();
    let mut ping =
        tokio::time::interval_at(tokio::time::Instant::now() + liveness.ping_interval, liveness.ping_interval);
    let mut last_seen = Instant::now();
    let mut session_deadline = std::pin::pin!(super::limits::session_deadline(&state.limits));
    metrics::gauge!("cloudly_sockets_open").increment(1.0);
    tracing::debug!(link = link_id, "typed socket opened");
    loop {
        tokio::select! {
            incoming = socket.recv() => {
                let message = match incoming {
                    Some(Ok(message)) => message,
                    Some(Err(error)) => {
                        if let Some(refusal) = refusal_of(error) {
                            let _ = socket.send(refusal).await;
                        }
                        break;
                    }
                    None => break,
                };
                last_seen = Instant::now();
                if let Some(read_limit) = &context.read_limit {
                    read_limit.took_message();
                }
                match message {
                    Message::Text(text) if text.len() > state.limits.body_bytes && context.session().is_none() => {
                        let _ = socket.send(message_too_big()).await;
                        break;
                    }
                    Message::Text(text) => {
                        if let Some(frame) = receive_text(&context, &frames_tx, &mut pending, text.as_str()) {
                            if socket.send(frame).await.is_err() {
                                break;
                            }
                        }
                    }
                    Message::Binary(_) => {
                        if socket.send(malformed_frame()).await.is_err() {
                            break;
                        }
                    }
                    Message::Ping(_) | Message::Pong(_) => {}
                    Message::Close(_) => break,
                }
            }
            Some(frame) = frames.recv() => {
                if socket.send(frame).await.is_err() {
                    break;
                }
            }
            Some(command) = commands.recv() => match command {
                LinkCommand::Request { request, reply } => {
                    let id = uuid::Uuid::new_v4().simple().to_string();
                    let (method, request, read) = node_request(&request);
                    let envelope = json!({
                        "method": method,
                        "request": request,
                        "response": null,
                        "correlation": { "id": id, "phase": "request" },
                    });
                    if socket.send(text_frame(&envelope)).await.is_err() {
                        break;
                    }
                    pending.insert(id, Pending { read, reply });
                }
                LinkCommand::Close { reason } => {
                    tracing::info!(link = link_id, reason, "typed socket closed by the controller");
                    let _ = socket.send(close_frame(close_code::NORMAL, reason)).await;
                    break;
                }
            },
            () = &mut session_deadline, if context.session().is_none() => {
                let _ = socket.send(super::limits::session_deadline_close(&state.limits)).await;
                break;
            }
            _ = ping.tick() => {
                pending.retain(|_, pending| !pending.reply.is_closed());
                if last_seen.elapsed() >= liveness.silence_limit {
                    tracing::info!(link = link_id, "typed socket silent too long; closing");
                    let _ = socket.send(close_frame(close_code::AWAY, "silent too long")).await;
                    break;
                }
                if socket.send(Message::Ping(axum::body::Bytes::from_static(b"cloudly"))).await.is_err() {
                    break;
                }
            }
        }
    }
    state.controller.links.unregister(link_id, context.session().as_ref());
    metrics::gauge!("cloudly_sockets_open").decrement(1.0);
    tracing::debug!(link = link_id, "typed socket ended");
}

/// A request of the controller's awaiting the node's answer on this socket.
struct Pending {
    /// How the answer of the method asked is read.
    read: ReadAnswer,
    reply: oneshot::Sender<Result<NodeAnswer, LinkError>>,
}

/// Reads a node's response object as the answer of the method asked, or
/// [`LinkError::Unreadable`].
type ReadAnswer = fn(&Value) -> Result<NodeAnswer, LinkError>;

/// The method the controller tells a node with that its records changed.
const PUSH_RUNTIME_CHANGED_METHOD: &str = "pushRuntimeChanged";

/// The wire method and request object of a request the controller sends a node, and how its
/// answer is read.
fn node_request(request: &NodeRequest) -> (&'static str, Value, ReadAnswer) {
    match request {
        NodeRequest::RuntimeChanged(kinds) => {
            let kinds: Vec<&str> = kinds.iter().map(|kind| kind.as_str()).collect();
            (PUSH_RUNTIME_CHANGED_METHOD, json!({ "kinds": kinds }), |_| Ok(NodeAnswer::Acknowledged))
        }
        NodeRequest::ApplyClaim(request) => {
            (APPLY_RUNTIME_LOCAL_STORAGE_CLAIM_METHOD, request.to_value(), |response| {
                ApplyRuntimeLocalStorageClaimResponse::read(response)
                    .map(|response| NodeAnswer::Claim(Box::new(response)))
                    .map_err(|_| LinkError::Unreadable)
            })
        }
    }
}

/// Handles one text frame: completes a pending controller request, or dispatches a request in
/// its own task (its answer comes back through `frames`). Answers a frame to send at once (the
/// refusal of a malformed envelope), if any.
fn receive_text(
    context: &Arc<NodeSocket>,
    frames: &mpsc::UnboundedSender<Message>,
    pending: &mut HashMap<String, Pending>,
    text: &str,
) -> Option<Message> {
    let envelope = match envelope::read_frame(text) {
        Ok(Frame::Request(envelope)) => envelope,
        Ok(Frame::Response { id, answer }) => {
            if let Some(Pending { read, reply }) = id.and_then(|id| pending.remove(&id)) {
                // An error envelope is a refusal; a response is read as the method's answer.
                let _ = reply.send(answer.map_err(|_| LinkError::Refused).and_then(|response| read(&response)));
            }
            return None;
        }
        Err(envelope::Malformed) => return Some(malformed_frame()),
    };
    // A socket without a session has at most a few requests in flight; more are shed at once.
    if context.session().is_none()
        && context.in_flight.load(Ordering::SeqCst) >= super::limits::SESSIONLESS_REQUESTS_IN_FLIGHT
    {
        return Some(super::limits::shed_socket_request(&context.state, &envelope));
    }
    // A node session's request may wait a little for a permit (a fan-out makes every node fetch
    // at once); a socket without a session, or with enough requests waiting, is shed at once.
    let may_wait =
        context.session().is_some() && context.waiting.load(Ordering::SeqCst) < super::limits::SESSION_REQUESTS_WAITING;
    let permit = match super::limits::admit_socket_request(&context.state, &envelope, may_wait) {
        SocketAdmission::Admitted(permit) => Ok(permit),
        SocketAdmission::Wait(pool) => {
            context.waiting.fetch_add(1, Ordering::SeqCst);
            Err(pool)
        }
        SocketAdmission::Shed(shed) => return Some(shed),
    };
    let in_flight = InFlight::enter(context);
    let context = context.clone();
    let frames = frames.clone();
    // The socket's node once it opened a session: every request on it is that node's.
    let principal = context.session().map(|session| format!("node:{}/{}", session.cluster_id, session.node_id));
    // Metric labels and log fields are bounded: an unknown method is "unknown", never its name.
    let label = methods::find(&envelope.method).map_or("unknown", |method| method.name);
    let span = super::request_span("socket", &super::request_id(&envelope.correlation), principal.as_deref(), label);
    let answer = async move {
        let _in_flight = in_flight;
        let _permit = match permit {
            Ok(permit) => permit,
            Err(pool) => {
                let waited = tokio::time::timeout(super::limits::SESSION_REQUEST_WAIT, pool.acquire_owned()).await;
                context.waiting.fetch_sub(1, Ordering::SeqCst);
                match waited {
                    Ok(Ok(permit)) => permit,
                    _ => {
                        let _ = frames.send(super::limits::shed_socket_request(&context.state, &envelope));
                        return;
                    }
                }
            }
        };
        let controller = &context.state.controller;
        let method = methods::find(&envelope.method);
        let timeout = method.map_or(context.state.limits.request_timeout, |method| {
            method.time_limit(&context.state.limits, controller)
        });
        // The relay principal (`authInfo.jwt`) is not taken on a node's socket.
        let call = async {
            let method = method.ok_or_else(ApiError::unknown_method)?;
            method
                .call(controller, Transport::Socket(&context), envelope.request.as_ref().map_err(|rule| *rule), None)
                .await
        };
        let outcome = match tokio::time::timeout(timeout, call).await {
            Ok(outcome) => outcome,
            Err(_) => {
                tracing::warn!(method = label, "socket request timed out");
                Err(method.map_or_else(
                    || DomainError::StoreUnavailable("the call ran out of time".to_owned()).into(),
                    |method| method.timed_out(controller),
                ))
            }
        };
        let code = outcome.as_ref().map_or_else(|error| error.code().to_owned(), |_| "ok".to_owned());
        if code == "store-unavailable" {
            context.state.readiness.forget();
        }
        metrics::counter!("cloudly_socket_requests_total", "method" => label, "outcome" => code.clone()).increment(1);
        tracing::info!(method = label, outcome = %code, "socket request");
        let _ = frames.send(text_frame(&answer_envelope(&envelope.method, envelope.correlation, outcome)));
    };
    tokio::spawn(answer.instrument(span));
    None
}
