//! `GET /typedsocket` (`02-wire.md`, "Transports"; `04-registration.md`, "Node sessions and
//! assignments"): a WebSocket on which every text frame is one TypedRequest envelope, both ways.
//!
//! Incoming `phase: "request"` envelopes are dispatched: the node methods here (the socket is
//! their principal), every other method as on `POST /typedrequest`. Incoming `phase: "response"`
//! envelopes complete the controller's own requests (sent through the socket's link in the
//! [`NodeLinks`](crate::domain::sessions::NodeLinks) registry) by `correlation.id`.
//!
//! Liveness ([`Liveness`](crate::domain::sessions::Liveness)): a ping every 15 s; a socket silent
//! (no frame at all, pongs included) for 45 s is closed. Frames and messages are at most [`MAX_FRAME_BYTES`]. A
//! socket whose session is superseded by a newer open, and every socket when the server stops,
//! is closed with a close frame.

use super::error::ApiError;
use super::{AppState, answer_envelope, methods};
use crate::contract::session::RuntimeSessionReference;
use crate::contract::signing::signed_to_value;
use crate::domain::DomainError;
use crate::domain::sessions::LinkCommand;
use axum::extract::State;
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade, close_code};
use axum::response::Response;
use serde_json::{Map, Value, json};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tokio::sync::{mpsc, oneshot};

/// The largest frame and message, both ways (16 MiB).
pub const MAX_FRAME_BYTES: usize = 16 * 1024 * 1024;

/// What the dispatch tasks of one socket share.
struct SocketContext {
    state: AppState,
    link_id: u64,
    commands: mpsc::UnboundedSender<LinkCommand>,
    session: Mutex<Option<RuntimeSessionReference>>,
}

impl SocketContext {
    fn session(&self) -> Option<RuntimeSessionReference> {
        self.session.lock().expect("the socket session lock is never poisoned").clone()
    }
}

/// `GET /typedsocket`: upgrades to a WebSocket served by [`serve_socket`].
pub async fn typed_socket(State(state): State<AppState>, upgrade: WebSocketUpgrade) -> Response {
    let Some(slot) = super::limits::take_socket_slot(&state) else {
        return super::limits::overloaded_response();
    };
    upgrade
        .max_frame_size(MAX_FRAME_BYTES)
        .max_message_size(MAX_FRAME_BYTES)
        .on_upgrade(move |socket| slot.hold_while(serve_socket(socket, state)))
}

fn text_frame(value: &Value) -> Message {
    Message::Text(value.to_string().into())
}

fn malformed_frame() -> Message {
    text_frame(&json!({ "error": { "text": "malformed typed request", "data": { "code": "malformed-envelope" } } }))
}

fn close_frame(code: u16, reason: &'static str) -> Message {
    Message::Close(Some(CloseFrame { code, reason: reason.into() }))
}

/// Serves one socket until it closes, its session is superseded, it falls silent, or the
/// server stops.
pub async fn serve_socket(mut socket: WebSocket, state: AppState) {
    let (commands_tx, mut commands) = mpsc::unbounded_channel();
    let link_id = state.controller.links.register(commands_tx.clone());
    let (frames_tx, mut frames) = mpsc::unbounded_channel::<Message>();
    let context =
        Arc::new(SocketContext { state: state.clone(), link_id, commands: commands_tx, session: Mutex::new(None) });
    let mut pending: HashMap<String, oneshot::Sender<Result<Value, Value>>> = HashMap::new();
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
                    _ => break,
                };
                last_seen = Instant::now();
                match message {
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
                LinkCommand::Request { method, request, reply } => {
                    let id = uuid::Uuid::new_v4().simple().to_string();
                    let envelope = json!({
                        "method": method,
                        "request": request,
                        "response": null,
                        "correlation": { "id": id, "phase": "request" },
                    });
                    if socket.send(text_frame(&envelope)).await.is_err() {
                        break;
                    }
                    pending.insert(id, reply);
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
                pending.retain(|_, reply| !reply.is_closed());
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

/// Handles one text frame: completes a pending controller request, or dispatches a request in
/// its own task (its answer comes back through `frames`). Answers a frame to send at once (the
/// refusal of a malformed envelope), if any.
fn receive_text(
    context: &Arc<SocketContext>,
    frames: &mpsc::UnboundedSender<Message>,
    pending: &mut HashMap<String, oneshot::Sender<Result<Value, Value>>>,
    text: &str,
) -> Option<Message> {
    let Ok(Value::Object(envelope)) = serde_json::from_str::<Value>(text) else {
        return Some(malformed_frame());
    };
    let correlation = envelope.get("correlation");
    if correlation.and_then(|correlation| correlation.get("phase")).and_then(Value::as_str) == Some("response") {
        let id = correlation.and_then(|correlation| correlation.get("id")).and_then(Value::as_str);
        if let Some(reply) = id.and_then(|id| pending.remove(id)) {
            let answer = match envelope.get("error") {
                Some(error) if !error.is_null() => Err(error.clone()),
                _ => Ok(envelope.get("response").cloned().unwrap_or(Value::Null)),
            };
            let _ = reply.send(answer);
        }
        return None;
    }
    let (Some(method), Some(_)) = (envelope.get("method").and_then(Value::as_str), envelope.get("request")) else {
        return Some(malformed_frame());
    };
    let permit = match super::limits::admit_socket_request(&context.state, method, &envelope) {
        Ok(permit) => permit,
        Err(shed) => return Some(shed),
    };
    let method = method.to_owned();
    let context = context.clone();
    let frames = frames.clone();
    tokio::spawn(async move {
        let _permit = permit;
        let request = &envelope["request"];
        let timeout = context.state.limits.request_timeout;
        let outcome = match tokio::time::timeout(timeout, dispatch(&context, &method, request)).await {
            Ok(outcome) => outcome,
            Err(_) => {
                tracing::warn!(method = %method, "socket request timed out");
                Err(ApiError::from(DomainError::StoreUnavailable))
            }
        };
        let code = outcome.as_ref().map_or_else(|error| error.code().to_owned(), |_| "ok".to_owned());
        // Metric labels are bounded: an unknown method is counted as "unknown".
        let label = if methods::is_known(&method) { method.clone() } else { "unknown".to_owned() };
        metrics::counter!("cloudly_socket_requests_total", "method" => label, "outcome" => code.clone()).increment(1);
        tracing::info!(method = %method, outcome = %code, "socket request");
        let _ = frames.send(text_frame(&answer_envelope(&method, &envelope, outcome)));
    });
    None
}

fn request_object(request: &Value) -> Result<&Map<String, Value>, ApiError> {
    request.as_object().ok_or_else(|| ApiError::request_invalid(vec!["request must be an object".to_owned()]))
}

/// Answers one request received on the socket.
async fn dispatch(context: &SocketContext, method: &str, request: &Value) -> Result<Value, ApiError> {
    let controller = &context.state.controller;
    let response = match method {
        "openRuntimeSession" => {
            let session = controller.open_runtime_session(request_object(request)?).await?;
            let previous =
                context.session.lock().expect("the socket session lock is never poisoned").replace(session.clone());
            if let Some(previous) = previous {
                controller.links.detach(context.link_id, &previous.cluster_id, &previous.node_id);
            }
            controller.links.attach(context.link_id, &session, context.commands.clone());
            json!({ "session": session.to_value() })
        }
        "getRuntimeAssignments" => {
            let assignments =
                controller.get_runtime_assignments(context.session().as_ref(), request_object(request)?).await?;
            let assignments: Vec<Value> = assignments.iter().map(signed_to_value).collect();
            json!({ "assignments": assignments })
        }
        "resolveRuntimeSecretBindings" => {
            let values = controller
                .resolve_runtime_secret_bindings(context.session().as_ref(), request_object(request)?)
                .await?;
            // The one answer that carries secret values: to the node's current session only.
            let values: Vec<Value> =
                values.iter().map(|(name, value)| json!({ "name": name, "value": value.expose() })).collect();
            json!({ "values": values })
        }
        "reportRuntimeAssignmentState" => {
            controller.report_runtime_assignment_state(context.session().as_ref(), request_object(request)?).await?;
            json!({ "recorded": true })
        }
        _ => return methods::call(controller, method, request).await,
    };
    Ok(response)
}
