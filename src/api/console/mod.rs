//! The operator console at `/console`: the cluster at a glance in a browser, read-only, served by
//! the same router and listener as the API and behind the same admission (every console request
//! takes a permit of the request pool, as `POST /typedrequest` does).
//!
//! - **Pages** are rendered on the server (`pages`, with `maud`); the stylesheet, the one
//!   script and the icon are embedded in the binary (`assets/`). Nothing is fetched from elsewhere.
//! - **Sign-in**: the operator pastes an identity (the file `cloudly serve` writes, or its token
//!   alone) or picks the file; it is verified as an API call verifies it, kept here in a session
//!   ([`sessions`]) that expires with the identity, and the browser gets only the session's random
//!   id, in an `HttpOnly; SameSite=Strict` cookie (`Secure` when the request came over TLS, as a
//!   proxy in front says with `X-Forwarded-Proto: https`). Every role may read; nothing here
//!   writes. Sessions live in the process that signed the operator in: several controllers
//!   behind one address need a proxy that keeps a browser on one of them.
//! - **Reads** go through the method table with the session's identity (`reads`): no second
//!   authorization path, so an expired, rotated-out or forged identity is refused as the API
//!   refuses it.
//! - **Live**: a page names itself in `main[data-live]`; the script opens
//!   `/console/live?page=…`, a server-sent event stream that renders the page's `main` again on
//!   every store signal and at least every [`LIVE_POLL`] (less often when a render is costly),
//!   and sends it when it changed. Only a
//!   signed-in session may open one: at most [`MAX_STREAMS`] in all and
//!   [`sessions::STREAMS_PER_SESSION`] per session, so unauthenticated clients cannot use up what
//!   operators need.
//! - **Headers**: every answer carries a strict `Content-Security-Policy` (no inline script or
//!   style, nothing from another origin, no framing), `no-store`, `nosniff`, and a referrer only
//!   to the console itself (`same-origin`; with `no-referrer` a browser sends `Origin: null`).
//! - **Bad input** (a path that names no page, an unknown id, a forged or expired cookie, an
//!   oversized form, a form posted from another site) gets a page that says so and changes
//!   nothing.

mod pages;
mod reads;
mod sessions;

use super::AppState;
use super::error::ApiError;
use crate::domain::identity::Access;
use axum::extract::rejection::{FormRejection, QueryRejection};
use axum::extract::{DefaultBodyLimit, Extension, Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Form, Router, middleware};
use maud::Markup;
use reads::Page;
use serde::Deserialize;
use serde_json::Value;
use sessions::{Session, Sessions};
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The session cookie's name.
pub const COOKIE: &str = "cloudly_console";

/// The `Content-Security-Policy` of every console answer.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
     connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// The largest sign-in form accepted, in bytes (an identity file is about 1 KiB).
pub const SIGN_IN_BODY_BYTES: usize = 16 * 1024;

/// How many live streams the process serves at once.
pub const MAX_STREAMS: usize = 32;

/// The longest a live page goes without being rendered again.
pub const LIVE_POLL: Duration = Duration::from_millis(500);

/// A live page waits at least this many times as long as its last render took before the next:
/// its reads take at most a fifth of the time of one worker.
const RENDER_SHARE: u32 = 4;

/// How long a live page waits after a signal before rendering, so a burst is rendered once.
const LIVE_SETTLE: Duration = Duration::from_millis(50);

const STYLESHEET: &str = include_str!("assets/console.css");
const SCRIPT: &str = include_str!("assets/console.js");
const ICON: &str = include_str!("assets/favicon.svg");

/// What the console keeps: its sessions and its live stream places.
struct Console {
    sessions: Sessions,
    streams: Arc<Semaphore>,
}

/// The console's routes, behind the API's admission.
pub(super) fn routes(state: &AppState) -> Router<AppState> {
    let console = Arc::new(Console { sessions: Sessions::default(), streams: Arc::new(Semaphore::new(MAX_STREAMS)) });
    Router::new()
        .route("/console", get(page_root))
        .route("/console/", get(page_root))
        .route("/console/{*path}", get(page))
        .route("/console/sign-in", get(sign_in_page).post(sign_in).layer(DefaultBodyLimit::max(SIGN_IN_BODY_BYTES)))
        .route("/console/sign-out", post(sign_out))
        .route("/console/live", get(live))
        .route("/console/assets/console.css", get(|| async { asset("text/css; charset=utf-8", STYLESHEET) }))
        .route("/console/assets/console.js", get(|| async { asset("text/javascript; charset=utf-8", SCRIPT) }))
        .route("/console/assets/favicon.svg", get(|| async { asset("image/svg+xml", ICON) }))
        .layer(middleware::from_fn_with_state(state.clone(), super::limits::admit_typed_request))
        .layer(middleware::from_fn(refuse_large_bodies))
        .layer(middleware::map_response(security_headers))
        .layer(Extension(console))
}

/// A body declared larger than any console form gets a page at once, before it is read.
async fn refuse_large_bodies(request: axum::extract::Request, next: middleware::Next) -> Response {
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.parse::<u64>().ok());
    if declared.is_some_and(|length| length > SIGN_IN_BODY_BYTES as u64) {
        return too_large(request.headers());
    }
    next.run(request).await
}

fn too_large(headers: &HeaderMap) -> Response {
    let message = "That is too large to be an identity: paste the identity file or its token.";
    signed_out(StatusCode::PAYLOAD_TOO_LARGE, Some(message), None, headers)
}

/// True when a form post came from another site: `Sec-Fetch-Site` says so, or, from a browser
/// that does not send it, `Origin` names another host than `Host`. A console form is only ever
/// sent from a console page.
fn cross_site(headers: &HeaderMap) -> bool {
    let header = |name: header::HeaderName| headers.get(name).and_then(|value| value.to_str().ok());
    if let Some(site) = header(header::HeaderName::from_static("sec-fetch-site")) {
        return !matches!(site, "same-origin" | "none");
    }
    match (header(header::ORIGIN), header(header::HOST)) {
        (Some(origin), Some(host)) => origin.split_once("://").is_none_or(|(_, origin_host)| origin_host != host),
        (Some(_), None) => true,
        (None, _) => false,
    }
}

fn cross_site_refused() -> Response {
    let problem = pages::problem("Refused", "This form was sent from another site; nothing changed.");
    html(StatusCode::FORBIDDEN, pages::layout("Refused", None, None, problem))
}

async fn security_headers(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CONTENT_SECURITY_POLICY));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("same-origin"));
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    ([(header::CONTENT_TYPE, content_type)], body).into_response()
}

fn html(status: StatusCode, markup: Markup) -> Response {
    (status, [(header::CONTENT_TYPE, "text/html; charset=utf-8")], markup.into_string()).into_response()
}

/// The session id the request's cookie carries, if any.
fn cookie_id(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .map(|(_, value)| value)
}

/// The signed-in session of the request, or `None` (no cookie, a forged or unknown one, or an
/// expired identity).
fn session_of(console: &Console, state: &AppState, headers: &HeaderMap) -> Option<Session> {
    console.sessions.get(cookie_id(headers)?, state.controller.clock.now_ms())
}

/// True when the request came over TLS, as the proxy in front of the controller says.
fn over_tls(headers: &HeaderMap) -> bool {
    headers
        .get("x-forwarded-proto")
        .and_then(|value| value.to_str().ok())
        .is_some_and(|proto| proto.trim().eq_ignore_ascii_case("https"))
}

fn cookie(value: &str, max_age_seconds: u64, secure: bool) -> HeaderValue {
    let secure = if secure { "; Secure" } else { "" };
    HeaderValue::from_str(&format!(
        "{COOKIE}={value}; Path=/console; Max-Age={max_age_seconds}; HttpOnly; SameSite=Strict{secure}"
    ))
    .expect("a cookie of hex digits is a header value")
}

/// The sign-in page with `status` and `message`, clearing a cookie the request carried; a
/// sign-in from it goes on to `next`.
fn signed_out(status: StatusCode, message: Option<&str>, next: Option<&Page>, headers: &HeaderMap) -> Response {
    let next = next.map(Page::path);
    let sign_in = pages::sign_in(message, next.as_deref());
    let mut response = html(status, pages::layout("Sign in", None, None, sign_in));
    if cookie_id(headers).is_some() {
        response.headers_mut().insert(header::SET_COOKIE, cookie("", 0, over_tls(headers)));
    }
    response
}

async fn page_root(
    State(state): State<AppState>,
    Extension(console): Extension<Arc<Console>>,
    headers: HeaderMap,
) -> Response {
    show(&state, &console, &headers, "").await
}

async fn page(
    State(state): State<AppState>,
    Extension(console): Extension<Arc<Console>>,
    Path(path): Path<String>,
    headers: HeaderMap,
) -> Response {
    show(&state, &console, &headers, &path).await
}

async fn show(state: &AppState, console: &Console, headers: &HeaderMap, path: &str) -> Response {
    let Some(session) = session_of(console, state, headers) else {
        let message = if cookie_id(headers).is_some() {
            "Your session is unknown or has expired: sign in again."
        } else {
            "Sign in to see the clusters."
        };
        return signed_out(StatusCode::UNAUTHORIZED, Some(message), Page::parse(path).as_ref(), headers);
    };
    let operator = pages::Operator { name: &session.name, role: session.role.as_str() };
    let Some(page) = Page::parse(path) else {
        let problem = pages::problem("Not found", "No console page has this address.");
        return html(StatusCode::NOT_FOUND, pages::layout("Not found", Some(&operator), None, problem));
    };
    match reads::render(&state.controller, &session, &page).await {
        Ok((title, main)) => html(StatusCode::OK, pages::layout(&title, Some(&operator), Some(&page.path()), main)),
        Err(error) => refused(console, headers, &operator, &error),
    }
}

/// The page for a read the method table refused.
fn refused(console: &Console, headers: &HeaderMap, operator: &pages::Operator<'_>, error: &ApiError) -> Response {
    let (status, heading, detail) = match error.code() {
        "identity-refused" => {
            // The identity no longer verifies (expired, or the identity key changed).
            if let Some(id) = cookie_id(headers) {
                console.sessions.remove(id);
            }
            return signed_out(
                StatusCode::UNAUTHORIZED,
                Some("Your identity is no longer valid: sign in again."),
                None,
                headers,
            );
        }
        "identity-forbidden" => (StatusCode::FORBIDDEN, "Forbidden", "Your role may not read this."),
        "not-found" | "request-invalid" => {
            (StatusCode::NOT_FOUND, "Not found", "Nothing with this id exists in this cluster.")
        }
        _ => (
            StatusCode::SERVICE_UNAVAILABLE,
            "Unavailable",
            "The controller could not read this now (its store may be unavailable); the page will try again.",
        ),
    };
    html(status, pages::layout(heading, Some(operator), None, pages::problem(heading, detail)))
}

async fn sign_in_page(
    State(state): State<AppState>,
    Extension(console): Extension<Arc<Console>>,
    headers: HeaderMap,
) -> Response {
    if session_of(&console, &state, &headers).is_some() {
        return Redirect::to("/console").into_response();
    }
    html(StatusCode::OK, pages::layout("Sign in", None, None, pages::sign_in(None, None)))
}

#[derive(Deserialize)]
struct SignInForm {
    identity: String,
    /// The page to go on to (a console path under `/console`); anything else is the clusters.
    #[serde(default)]
    next: String,
}

/// The identity an operator pasted: the `IIdentity` JSON as `cloudly serve` writes it, or its
/// token alone, which stands for the identity its verified claims name
/// ([`crate::domain::Controller::identity_of_token`]).
fn pasted_identity(controller: &crate::domain::Controller, text: &str) -> Option<Value> {
    let text = text.trim();
    if text.starts_with('{') {
        return serde_json::from_str(text).ok();
    }
    controller.identity_of_token(text)
}

async fn sign_in(
    State(state): State<AppState>,
    Extension(console): Extension<Arc<Console>>,
    headers: HeaderMap,
    form: Result<Form<SignInForm>, FormRejection>,
) -> Response {
    if cross_site(&headers) {
        return cross_site_refused();
    }
    let form = match form {
        Ok(Form(form)) => form,
        Err(rejection) if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE => return too_large(&headers),
        Err(_) => return signed_out(StatusCode::BAD_REQUEST, Some("The form was not understood."), None, &headers),
    };
    // Only a console page: never a redirect elsewhere.
    let next = Page::parse(&form.next);
    let refused = "This identity was refused: it is not one this controller signed, or it has expired.";
    let Some(identity) = pasted_identity(&state.controller, &form.identity) else {
        return signed_out(StatusCode::UNAUTHORIZED, Some(refused), next.as_ref(), &headers);
    };
    let Ok(caller) = state.controller.authorize(Some(&identity), Access::Read) else {
        return signed_out(StatusCode::UNAUTHORIZED, Some(refused), next.as_ref(), &headers);
    };
    let now_ms = state.controller.clock.now_ms();
    let expires_at = identity["expiresAt"].as_u64().unwrap_or(now_ms);
    let session = Session {
        name: identity["name"].as_str().unwrap_or_default().to_owned(),
        role: caller.role,
        expires_at,
        identity,
        streams: Arc::new(Semaphore::new(sessions::STREAMS_PER_SESSION)),
    };
    let Some(id) = console.sessions.create(session, now_ms) else {
        let problem = pages::problem("Unavailable", "No session could be made now; try again.");
        return html(StatusCode::SERVICE_UNAVAILABLE, pages::layout("Unavailable", None, None, problem));
    };
    tracing::info!(principal = %format!("{}:{}", caller.role.as_str(), caller.user_id), "console sign-in");
    let location = match next {
        None | Some(Page::Clusters) => "/console".to_owned(),
        Some(page) => format!("/console{}", page.path()),
    };
    let mut response = Redirect::to(&location).into_response();
    let max_age = expires_at.saturating_sub(now_ms) / 1000;
    response.headers_mut().insert(header::SET_COOKIE, cookie(&id, max_age, over_tls(&headers)));
    response
}

async fn sign_out(Extension(console): Extension<Arc<Console>>, headers: HeaderMap) -> Response {
    if cross_site(&headers) {
        return cross_site_refused();
    }
    if let Some(id) = cookie_id(&headers) {
        console.sessions.remove(id);
    }
    let mut response = Redirect::to("/console/sign-in").into_response();
    response.headers_mut().insert(header::SET_COOKIE, cookie("", 0, over_tls(&headers)));
    response
}

#[derive(Deserialize)]
struct LiveQuery {
    page: String,
}

/// One live stream: what it follows, and the places it holds while it runs.
struct Live {
    state: AppState,
    console: Arc<Console>,
    cookie: String,
    page: Page,
    last: u64,
    signals: crate::store::signals::SignalSubscription,
    signals_open: bool,
    /// When the page was last rendered, and what that render took: the next one waits at least
    /// [`RENDER_SHARE`] times as long, so a page that is costly to read (a very large cluster)
    /// is followed less often instead of keeping the store busy.
    rendered: (tokio::time::Instant, Duration),
    _places: (OwnedSemaphorePermit, OwnedSemaphorePermit),
}

fn digest_of(text: &str) -> u64 {
    use std::hash::{Hash as _, Hasher as _};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    text.hash(&mut hasher);
    hasher.finish()
}

impl Live {
    /// The next event: `main` with the page's new content once it changed, or `signed-out` when
    /// the session ended (after which the stream ends). `None` ends the stream.
    async fn next(&mut self) -> Option<Event> {
        loop {
            let (rendered_at, cost) = self.rendered;
            tokio::select! {
                signal = self.signals.next(), if self.signals_open => self.signals_open = signal.is_some(),
                () = tokio::time::sleep_until(rendered_at + LIVE_POLL.max(cost * RENDER_SHARE)) => {}
            }
            // A burst of signals is rendered once, and never sooner than the last render's cost
            // allows.
            let now = tokio::time::Instant::now();
            tokio::time::sleep_until((now + LIVE_SETTLE).max(rendered_at + cost * RENDER_SHARE)).await;
            if self.state.controller.is_draining() {
                return None;
            }
            let now_ms = self.state.controller.clock.now_ms();
            let Some(session) = self.console.sessions.get(&self.cookie, now_ms) else {
                return Some(Event::default().event("signed-out").data("signed out"));
            };
            let started = tokio::time::Instant::now();
            let rendered = reads::render(&self.state.controller, &session, &self.page).await;
            self.rendered = (tokio::time::Instant::now(), started.elapsed());
            let main = match rendered {
                Ok((_, main)) => main.into_string(),
                Err(error) if error.code() == "identity-refused" => {
                    self.console.sessions.remove(&self.cookie);
                    return Some(Event::default().event("signed-out").data("signed out"));
                }
                // A failed read is tried again at the next signal or poll.
                Err(_) => continue,
            };
            let digest = digest_of(&main);
            if digest != self.last {
                self.last = digest;
                return Some(Event::default().event("main").data(main));
            }
        }
    }
}

/// `GET /console/live?page=…`: the page's `main`, sent again whenever it changes.
async fn live(
    State(state): State<AppState>,
    Extension(console): Extension<Arc<Console>>,
    connection: Option<Extension<super::connections::ConnectionMark>>,
    headers: HeaderMap,
    query: Result<Query<LiveQuery>, QueryRejection>,
) -> Response {
    let Some(session) = session_of(&console, &state, &headers) else {
        return (StatusCode::UNAUTHORIZED, "sign in first").into_response();
    };
    // A signed-in operator's stream is never shed to make room for other connections.
    if let Some(Extension(super::connections::ConnectionMark(connection))) = connection {
        connection.trusted();
    }
    let Some(page) = query.ok().and_then(|Query(query)| Page::parse(&query.page)) else {
        return (StatusCode::NOT_FOUND, "no such page").into_response();
    };
    let Ok(session_place) = session.streams.clone().try_acquire_owned() else {
        return (StatusCode::TOO_MANY_REQUESTS, "too many live pages open in this session").into_response();
    };
    let Ok(place) = console.streams.clone().try_acquire_owned() else {
        return super::limits::overloaded_response();
    };
    // The page as first served: only a change is sent.
    let started = tokio::time::Instant::now();
    let last = match reads::render(&state.controller, &session, &page).await {
        Ok((_, main)) => digest_of(&main.into_string()),
        Err(_) => 0,
    };
    let rendered = (tokio::time::Instant::now(), started.elapsed());
    let live = Live {
        signals: state.controller.store.subscribe_signals(),
        signals_open: true,
        cookie: cookie_id(&headers).unwrap_or_default().to_owned(),
        state,
        console,
        page,
        last,
        rendered,
        _places: (session_place, place),
    };
    let events = futures_util::stream::unfold(live, |mut live| async move {
        let event = live.next().await?;
        Some((Ok::<_, Infallible>(event), live))
    });
    Sse::new(events).keep_alive(KeepAlive::default()).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cookie_is_http_only_and_strict_and_secure_over_tls() {
        let plain = cookie("ab", 60, false);
        assert_eq!(plain, "cloudly_console=ab; Path=/console; Max-Age=60; HttpOnly; SameSite=Strict");
        assert!(cookie("ab", 60, true).to_str().unwrap().ends_with("; Secure"));
        let mut headers = HeaderMap::new();
        headers.insert(header::COOKIE, HeaderValue::from_static("other=1; cloudly_console=abc"));
        assert_eq!(cookie_id(&headers), Some("abc"));
        headers.insert("x-forwarded-proto", HeaderValue::from_static("https"));
        assert!(over_tls(&headers));
    }

    #[test]
    fn a_form_from_another_site_is_told_apart() {
        let headers = |pairs: &[(&'static str, &'static str)]| {
            let mut headers = HeaderMap::new();
            for (name, value) in pairs {
                headers.insert(*name, HeaderValue::from_static(value));
            }
            headers
        };
        assert!(!cross_site(&headers(&[])), "a client that sends neither header");
        assert!(!cross_site(&headers(&[("host", "127.0.0.1:8080"), ("origin", "http://127.0.0.1:8080")])));
        assert!(!cross_site(&headers(&[("sec-fetch-site", "same-origin")])));
        assert!(cross_site(&headers(&[("host", "127.0.0.1:8080"), ("origin", "https://evil.example")])));
        assert!(cross_site(&headers(&[("host", "127.0.0.1:8080"), ("origin", "null")])));
        assert!(cross_site(&headers(&[("sec-fetch-site", "cross-site")])));
        let same_origin_without_referrer = [("sec-fetch-site", "same-origin"), ("origin", "null")];
        assert!(!cross_site(&headers(&same_origin_without_referrer)), "Sec-Fetch-Site decides when sent");
    }
}
