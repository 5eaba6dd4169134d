//! HTTP: the TypedRequest endpoint, health, readiness and metrics.
//!
//! **Architecture invariant: only this module knows HTTP.** `router(state)` is split from `main`
//! (axum's `examples/testing` habit) so tests drive it in-process and over a real socket.

pub mod answers;
pub mod envelope;
pub mod error;
pub mod limits;
pub mod methods;
pub mod requests;
pub mod socket;

use crate::domain::{Controller, DomainError};
use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use error::ApiError;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use serde_json::{Map, Value, json};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

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
            metrics: metrics_handle(),
        }
    }
}

/// The process-wide Prometheus recorder, installed on first use.
pub fn metrics_handle() -> PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let recorder = PrometheusBuilder::new()
                .set_buckets(&[0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0])
                .expect("bucket list is not empty")
                .build_recorder();
            let handle = recorder.handle();
            // Another recorder may already be installed (a host application); ours still renders.
            let _ = metrics::set_global_recorder(recorder);
            handle
        })
        .clone()
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
        .with_state(state)
}

async fn healthz() -> impl IntoResponse {
    axum::Json(json!({ "status": "ok" }))
}

async fn readyz(State(state): State<AppState>) -> Response {
    if !state.accepting.load(Ordering::SeqCst) {
        return (StatusCode::SERVICE_UNAVAILABLE, axum::Json(json!({ "ready": false, "reason": "draining" })))
            .into_response();
    }
    match state.controller.store.is_ready().await {
        Ok(true) => axum::Json(json!({ "ready": true })).into_response(),
        Ok(false) => {
            (StatusCode::SERVICE_UNAVAILABLE, axum::Json(json!({ "ready": false, "reason": "migrations-pending" })))
                .into_response()
        }
        Err(error) => {
            tracing::warn!(%error, "readiness: store does not answer");
            metrics::counter!("cloudly_store_errors_total").increment(1);
            (StatusCode::SERVICE_UNAVAILABLE, axum::Json(json!({ "ready": false, "reason": "store-unavailable" })))
                .into_response()
        }
    }
}

async fn metrics_text(State(state): State<AppState>) -> Response {
    let mut response = state.metrics.render().into_response();
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
async fn typed_request(State(state): State<AppState>, body: Result<Bytes, BytesRejection>) -> Response {
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
            Err(method.map_or_else(|| DomainError::StoreUnavailable.into(), |method| method.timed_out(controller)))
        }
    };
    let code = match &outcome {
        Ok(_) => "ok".to_owned(),
        Err(error) => error.code().to_owned(),
    };
    if code == "store-unavailable" {
        metrics::counter!("cloudly_store_errors_total").increment(1);
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
    axum::Json(answer_envelope(&envelope.method, envelope.correlation, outcome)).into_response()
}

/// The answer envelope: the method, the correlation with `phase: "response"`, and either the
/// response or the error. The request is not echoed: it may carry an identity token, and no
/// answer carries a token. Unknown envelope keys are not echoed either.
pub fn answer_envelope(method: &str, mut correlation: Map<String, Value>, outcome: Result<Value, ApiError>) -> Value {
    correlation.insert("phase".to_owned(), Value::String("response".to_owned()));
    match outcome {
        Ok(response) => json!({
            "method": method,
            "request": null,
            "response": response,
            "correlation": correlation,
        }),
        Err(error) => json!({
            "method": method,
            "request": null,
            "response": null,
            "error": { "text": error.text, "data": error.data },
            "correlation": correlation,
        }),
    }
}
