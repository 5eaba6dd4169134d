//! `openapi/openapi.yaml` checked against the code, so it cannot drift (`02-wire.md`, "OpenAPI").
//!
//! The document is written in the JSON subset of YAML 1.2 (no YAML parser is in the lock file),
//! so it is read here with `serde_json`. A small JSON Schema checker (below) holds the real
//! requests and answers of an in-process controller against the document's schemas; every schema
//! keyword it does not check is either an annotation or refused by
//! `the_document_is_an_openapi_3_1_document_the_checker_understands`.
//!
//! What is checked against the code:
//! - the methods (`x-methods`, the per-method schemas, the envelope `oneOf`s) are exactly the
//!   rows of the code's method table ([`METHODS`]);
//! - the error codes are exactly those the code can answer: every [`DomainError`] variant (an
//!   exhaustive `match`, so a new variant breaks this file's compilation), `unknown-method`, and
//!   the HTTP-level codes read from real router answers; every `error.data` fits `ErrorData`;
//! - the paths are exactly `/typedrequest`, `/typedsocket`, `/healthz`, `/readyz`, `/metrics`, and
//!   each documented status is answered by the router with the documented body (`101` of
//!   `/typedsocket` by a real upgrade over TCP, whose frames are envelopes that fit the document);
//! - `POST /typedrequest` answers every envelope, a refusal too, with 200, and its four other
//!   statuses with bodies that are no envelope, one code each, as its description says; the
//!   envelope members the reader does not judge (`response`, a `correlation` or `authInfo` that is
//!   no object) are documented without a type;
//! - for each method, the documented required request members are the domain's (a request with
//!   no member but `identity` and one unknown member is refused naming exactly those), the
//!   documented optional members are accepted, and `x-roles` is each row's principal
//!   ([`methods::Principal::roles`]) and what the code allows (`relay`:
//!   no identity, an exact request, the connection token as `authInfo.jwt` when the envelope
//!   requires it; `node`: exactly the socket-only rows, refused over HTTP with
//!   `principal-refused`, their required members checked on the socket). `registerClusterIngress`
//!   is a relay method judged in its own order (the protocol offer first, then its named
//!   refusals, which replace the generic codes): its members are checked by leaving each out of a
//!   valid registration (`registration_members_match_the_domain`);
//! - `registerClusterIngress`'s two refusal shapes are the code's: the controller's offer, the
//!   reasons in judgement order, the `retryAfterMs` bounds, each `error.text` with its data;
//! - a scripted flow calls every method successfully: the node methods on `/typedsocket` (a node
//!   session whose ingress assignment resolved its bearer and reported `ready`), every other
//!   method over the router (`registerClusterIngress` through the elected relay connection), and
//!   every request envelope, answer envelope, response object and error data it sees fits the
//!   document, including protocol and registration refusals, and a request timeout.

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, Request, StatusCode, header};
use cloudly::api::error::{ApiError, UNKNOWN_METHOD_TEXT};
use cloudly::api::methods::{self, METHODS};
use cloudly::api::wire;
use cloudly::api::{AppState, Limits, router};
use cloudly::contract::designation::{ClusterRuntimeReference, RuntimePhase};
use cloudly::contract::registration::{
    CLUSTER_INGRESS_PROTOCOL, CLUSTER_INGRESS_REGISTRATION_CONTRACT, ClusterIngressRegistrationRefusal,
    ProtocolRefusal, RefusalReason,
};
use cloudly::contract::session::{ControllerKind, ControllerReference, RuntimeSessionReference};
use cloudly::contract::{AuthorityReference, Id, NodeId, Sha256Digest};
use cloudly::domain::identity::{IdentitySubject, IdentityType, Role, issue_identity};
use cloudly::domain::{Clock, Controller, DomainError, SystemClock};
use cloudly::keys::ControllerKeys;
use cloudly::store::{self, MissingKind, SharedStore, SqlStore, Store};
use futures_util::{SinkExt as _, StreamExt as _};
use serde_json::{Map, Value, json};
use sqlx::sqlite::{SqliteConnectOptions, SqlitePoolOptions};
use std::collections::BTreeSet;
use std::str::FromStr as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};
use tokio_tungstenite::tungstenite::Message;
use tower::ServiceExt;

// ---------------------------------------------------------------------------------------------
// The document and a small JSON Schema (2020-12 subset) checker.

const DOCUMENT: &str = include_str!("../openapi/openapi.yaml");

fn document() -> &'static Value {
    static PARSED: OnceLock<Value> = OnceLock::new();
    PARSED.get_or_init(|| {
        serde_json::from_str(DOCUMENT)
            .expect("openapi/openapi.yaml must be written in the JSON subset of YAML (it is read with serde_json)")
    })
}

fn schemas() -> &'static Map<String, Value> {
    document()["components"]["schemas"].as_object().expect("components.schemas is an object")
}

fn schema(name: &str) -> &'static Value {
    schemas().get(name).unwrap_or_else(|| panic!("the document has no schema {name}"))
}

fn schema_ref(name: &str) -> Value {
    json!({ "$ref": format!("#/components/schemas/{name}") })
}

fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .unwrap_or_else(|| panic!("expected an array of strings, got {value}"))
        .iter()
        .map(|item| item.as_str().unwrap_or_else(|| panic!("expected a string, got {item}")).to_owned())
        .collect()
}

fn string_set(value: &Value) -> BTreeSet<String> {
    strings(value).into_iter().collect()
}

/// The method names of the code's one method table.
fn method_names() -> Vec<&'static str> {
    METHODS.iter().map(|method| method.name).collect()
}

/// The node methods: the rows served only on `/typedsocket`.
fn node_methods() -> Vec<&'static str> {
    METHODS.iter().filter(|method| method.principal.socket_only()).map(|method| method.name).collect()
}

fn method_set() -> BTreeSet<String> {
    method_names().into_iter().map(str::to_owned).collect()
}

/// Keywords the checker enforces.
const CHECKED_KEYWORDS: &[&str] = &[
    "$ref",
    "type",
    "const",
    "enum",
    "minLength",
    "maxLength",
    "minimum",
    "maximum",
    "minItems",
    "maxItems",
    "uniqueItems",
    "items",
    "required",
    "properties",
    "additionalProperties",
    "allOf",
    "anyOf",
    "oneOf",
    "not",
];

/// Keywords that are annotations for this checker. `pattern` is documentation for clients: the
/// code's own parsers (not regular expressions) are the authority, and no regex crate is a
/// dependency. `discriminator` is checked separately for consistency with its `oneOf`.
const ANNOTATION_KEYWORDS: &[&str] = &["description", "title", "discriminator", "pattern", "format", "examples"];

fn resolve(reference: &str) -> &'static Value {
    let pointer = reference.strip_prefix('#').unwrap_or_else(|| panic!("only local references are used: {reference}"));
    document().pointer(pointer).unwrap_or_else(|| panic!("dangling reference {reference}"))
}

fn has_type(value: &Value, name: &str) -> bool {
    match name {
        "null" => value.is_null(),
        "boolean" => value.is_boolean(),
        "object" => value.is_object(),
        "array" => value.is_array(),
        "string" => value.is_string(),
        "number" => value.is_number(),
        "integer" => value.as_u64().is_some() || value.as_i64().is_some(),
        other => panic!("unknown JSON Schema type {other}"),
    }
}

/// The violations of `value` against `schema`, each with the JSON path it was found at.
fn violations(schema: &Value, value: &Value) -> Vec<String> {
    let mut found = Vec::new();
    walk(schema, value, "$", &mut found);
    found
}

fn walk(schema: &Value, value: &Value, at: &str, found: &mut Vec<String>) {
    let schema = match schema {
        Value::Bool(true) => return,
        Value::Bool(false) => {
            found.push(format!("{at}: no value is allowed here"));
            return;
        }
        Value::Object(schema) => schema,
        other => panic!("a schema must be an object or a boolean, got {other}"),
    };
    if let Some(reference) = schema.get("$ref") {
        walk(resolve(reference.as_str().expect("$ref is a string")), value, at, found);
    }
    if let Some(types) = schema.get("type") {
        let names = match types {
            Value::String(name) => vec![name.clone()],
            other => strings(other),
        };
        if !names.iter().any(|name| has_type(value, name)) {
            found.push(format!("{at}: {value} is not of type {types}"));
            return;
        }
    }
    if let Some(expected) = schema.get("const")
        && value != expected
    {
        found.push(format!("{at}: {value} is not {expected}"));
    }
    if let Some(allowed) = schema.get("enum")
        && !allowed.as_array().expect("enum is an array").contains(value)
    {
        found.push(format!("{at}: {value} is not one of {allowed}"));
    }
    let bound = |key: &str| schema.get(key).map(|bound| bound.as_f64().expect("bounds are numbers"));
    if let Value::String(text) = value {
        let length = text.chars().count() as f64;
        if bound("minLength").is_some_and(|minimum| length < minimum)
            || bound("maxLength").is_some_and(|maximum| length > maximum)
        {
            found.push(format!("{at}: the length of {value} is out of bounds"));
        }
    }
    if let Value::Number(number) = value {
        let number = number.as_f64().expect("numbers are finite");
        if bound("minimum").is_some_and(|minimum| number < minimum)
            || bound("maximum").is_some_and(|maximum| number > maximum)
        {
            found.push(format!("{at}: {value} is out of bounds"));
        }
    }
    if let Value::Array(items) = value {
        let count = items.len() as f64;
        if bound("minItems").is_some_and(|minimum| count < minimum)
            || bound("maxItems").is_some_and(|maximum| count > maximum)
        {
            found.push(format!("{at}: {} items are out of bounds", items.len()));
        }
        if schema.get("uniqueItems") == Some(&Value::Bool(true))
            && (1..items.len()).any(|index| items[..index].contains(&items[index]))
        {
            found.push(format!("{at}: the items are not unique"));
        }
        if let Some(item_schema) = schema.get("items") {
            for (index, item) in items.iter().enumerate() {
                walk(item_schema, item, &format!("{at}[{index}]"), found);
            }
        }
    }
    if let Value::Object(members) = value {
        if let Some(required) = schema.get("required") {
            for key in strings(required) {
                if !members.contains_key(&key) {
                    found.push(format!("{at}: member {key} is required"));
                }
            }
        }
        let properties = schema.get("properties").and_then(Value::as_object);
        for (key, member) in members {
            let path = format!("{at}.{key}");
            match properties.and_then(|properties| properties.get(key)) {
                Some(member_schema) => walk(member_schema, member, &path, found),
                None => {
                    if let Some(additional) = schema.get("additionalProperties") {
                        walk(additional, member, &path, found);
                    }
                }
            }
        }
    }
    if let Some(all) = schema.get("allOf") {
        for branch in all.as_array().expect("allOf is an array") {
            walk(branch, value, at, found);
        }
    }
    let matching = |key: &str| {
        schema.get(key).map(|branches| {
            branches
                .as_array()
                .expect("anyOf/oneOf is an array")
                .iter()
                .filter(|branch| violations(branch, value).is_empty())
                .count()
        })
    };
    if matching("anyOf") == Some(0) {
        found.push(format!("{at}: {value} matches no branch of anyOf"));
    }
    if let Some(count) = matching("oneOf")
        && count != 1
    {
        found.push(format!("{at}: {value} matches {count} branches of oneOf, not exactly one"));
    }
    if let Some(negated) = schema.get("not")
        && violations(negated, value).is_empty()
    {
        found.push(format!("{at}: {value} matches a schema it must not match"));
    }
}

#[track_caller]
fn assert_fits(schema: &Value, value: &Value, what: &str) {
    let found = violations(schema, value);
    assert!(found.is_empty(), "{what} does not fit the document:\n  {}\nvalue: {value}", found.join("\n  "));
}

#[track_caller]
fn assert_fits_named(name: &str, value: &Value) {
    assert_fits(&schema_ref(name), value, name);
}

/// Calls `visit` on every schema reachable in place (not through `$ref`) from `schema`.
fn each_subschema<'a>(schema: &'a Value, at: String, visit: &mut impl FnMut(&'a Value, &str)) {
    let Value::Object(members) = schema else { return };
    visit(schema, &at);
    if let Some(Value::Object(properties)) = members.get("properties") {
        for (key, property) in properties {
            each_subschema(property, format!("{at}.properties.{key}"), visit);
        }
    }
    for key in ["items", "additionalProperties", "not"] {
        if let Some(inner) = members.get(key) {
            each_subschema(inner, format!("{at}.{key}"), visit);
        }
    }
    for key in ["allOf", "anyOf", "oneOf"] {
        if let Some(Value::Array(branches)) = members.get(key) {
            for (index, branch) in branches.iter().enumerate() {
                each_subschema(branch, format!("{at}.{key}[{index}]"), visit);
            }
        }
    }
}

/// Every schema of the document: the components and every media type schema of the paths and
/// shared responses.
fn every_root_schema() -> Vec<(String, &'static Value)> {
    let mut roots: Vec<(String, &Value)> =
        schemas().iter().map(|(name, schema)| (format!("#/components/schemas/{name}"), schema)).collect();
    let mut media = Vec::new();
    for (path, item) in document()["paths"].as_object().expect("paths") {
        for (operation, body) in item.as_object().expect("path item") {
            if let Some(content) = body.pointer("/requestBody/content").and_then(Value::as_object) {
                media.extend(content.iter().map(|(kind, media)| (format!("{path} {operation} request {kind}"), media)));
            }
            for (status, response) in body["responses"].as_object().expect("responses") {
                if let Some(content) = response.get("content").and_then(Value::as_object) {
                    media.extend(
                        content.iter().map(|(kind, media)| (format!("{path} {operation} {status} {kind}"), media)),
                    );
                }
            }
        }
    }
    for (name, response) in document()["components"]["responses"].as_object().expect("components.responses") {
        for (kind, content) in response["content"].as_object().expect("content") {
            media.push((format!("#/components/responses/{name} {kind}"), content));
        }
    }
    roots.extend(media.into_iter().map(|(at, media)| (at, &media["schema"])));
    roots
}

// ---------------------------------------------------------------------------------------------
// An in-process controller.

fn fresh_keys() -> Arc<ControllerKeys> {
    Arc::new(ControllerKeys::generate().expect("the OS has randomness"))
}

async fn memory_store() -> SharedStore {
    store::open("sqlite::memory:").await.expect("an in-memory SQLite store opens and migrates")
}

fn identity(keys: &ControllerKeys, role: Role) -> Value {
    static JTI: AtomicU64 = AtomicU64::new(0);
    let subject = IdentitySubject {
        name: format!("{} (openapi test)", role.as_str()),
        user_id: Id::parse(&format!("{}-1", role.as_str())).expect("an Id"),
        identity_type: IdentityType::Machine,
        role,
    };
    let jti = format!("openapi-{}", JTI.fetch_add(1, Ordering::SeqCst));
    let issued = issue_identity(&keys.identity, &subject, SystemClock.now_ms(), 3_600_000, &jti).expect("issue");
    serde_json::to_value(issued).expect("identities serialize")
}

const ROLES: [Role; 3] = [Role::Admin, Role::Operator, Role::Viewer];

struct Answer {
    status: StatusCode,
    headers: HeaderMap,
    body: Vec<u8>,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|_| panic!("a JSON body: {}", String::from_utf8_lossy(&self.body)))
    }
}

async fn send(app: &Router, method: &str, path: &str, body: Vec<u8>) -> Answer {
    let request = Request::builder()
        .method(method)
        .uri(path)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(body))
        .expect("a request");
    let response = app.clone().oneshot(request).await.expect("the router is infallible");
    let status = response.status();
    let headers = response.headers().clone();
    let body = axum::body::to_bytes(response.into_body(), usize::MAX).await.expect("a body").to_vec();
    Answer { status, headers, body }
}

fn app_over(store: SharedStore, keys: Arc<ControllerKeys>, limits: Limits) -> (Router, AppState) {
    let controller = Arc::new(Controller::new(store, keys, Arc::new(SystemClock)));
    // As `server::spawn` does: pushes and claim wakes travel as the store's signals.
    controller.spawn_signal_follower();
    let state = AppState::new(controller, limits);
    (router(state.clone()), state)
}

// ---------------------------------------------------------------------------------------------
// The error codes the code can answer.

/// Every `DomainError` variant, by index. No wildcard: a new variant breaks the compilation of
/// this test until it is sampled in [`domain_error_samples`] (and so checked against the
/// document).
fn variant_index(error: &DomainError) -> usize {
    match error {
        DomainError::IdentityRefused => 0,
        DomainError::IdentityForbidden => 1,
        DomainError::RequestInvalid(_) => 2,
        DomainError::NotFound(_) => 3,
        DomainError::MutationConflict => 4,
        DomainError::RuntimeMismatch(_) => 5,
        DomainError::DesignationKindConflict => 6,
        DomainError::SpecRevisionMismatch(_) => 7,
        DomainError::RevisionConflict(_) => 8,
        DomainError::DesignationConflict(_) => 9,
        DomainError::StoreUnavailable(_) => 10,
        DomainError::StoreCorrupt(_) => 20,
        DomainError::Internal => 11,
        DomainError::RelayConnectionLost => 12,
        DomainError::PrincipalRefused => 13,
        DomainError::SessionNotCurrent(_) => 14,
        DomainError::AssignmentNotFound => 15,
        DomainError::ProtocolRefused => 16,
        DomainError::RegistrationRefused(_) => 17,
        DomainError::AddressPlanChangeRefused(_) => 18,
        DomainError::SigningKeyUnavailable => 19,
    }
}
const DOMAIN_ERROR_VARIANTS: usize = 21;

/// Every `MissingKind`, exhaustively (a new kind breaks compilation here).
fn missing_kinds() -> Vec<MissingKind> {
    let all = vec![
        MissingKind::Organization,
        MissingKind::Cluster,
        MissingKind::Service,
        MissingKind::Node,
        MissingKind::StorageClaim,
        MissingKind::Projection,
    ];
    for kind in &all {
        match kind {
            MissingKind::Organization
            | MissingKind::Cluster
            | MissingKind::Service
            | MissingKind::Node
            | MissingKind::StorageClaim
            | MissingKind::Projection => {}
        }
    }
    all
}

/// Every variant of `DomainError`, each payload in each of its shapes (`Some`/`None`).
fn domain_error_samples() -> Vec<DomainError> {
    let reference = AuthorityReference {
        id: Id::parse("designation-1").expect("an Id"),
        generation: 2,
        digest: Sha256Digest::from_bytes(&[7; 32]),
    };
    let runtime =
        ClusterRuntimeReference { id: Id::parse("c1").expect("an Id"), phase: RuntimePhase::Pallet, generation: 3 };
    let session = RuntimeSessionReference {
        id: Id::parse("session-1").expect("an Id"),
        generation: 2,
        controller: ControllerReference { kind: ControllerKind::Cloudly, id: Id::parse("ctl-1").expect("an Id") },
        cluster_id: Id::parse("c1").expect("an Id"),
        node_id: NodeId::parse("node-1").expect("a NodeId"),
        runtime_namespace: Id::parse("ns-main").expect("an Id"),
    };
    let mut samples = vec![
        DomainError::RelayConnectionLost,
        DomainError::PrincipalRefused,
        DomainError::SessionNotCurrent(Some(Box::new(session))),
        DomainError::SessionNotCurrent(None),
        DomainError::AssignmentNotFound,
        DomainError::IdentityRefused,
        DomainError::IdentityForbidden,
        DomainError::RequestInvalid(vec!["request clusterId is required".to_owned()]),
        DomainError::MutationConflict,
        DomainError::RuntimeMismatch(runtime),
        DomainError::DesignationKindConflict,
        DomainError::SpecRevisionMismatch(Some(4)),
        DomainError::SpecRevisionMismatch(None),
        DomainError::RevisionConflict(Some(2)),
        DomainError::RevisionConflict(None),
        DomainError::DesignationConflict(Some(reference)),
        DomainError::DesignationConflict(None),
        DomainError::AddressPlanChangeRefused(vec!["a pool of the previous revision is missing".to_owned()]),
        DomainError::StoreUnavailable("connection refused".to_owned()),
        DomainError::StoreCorrupt("a digest does not match".to_owned()),
        DomainError::Internal,
        DomainError::SigningKeyUnavailable,
    ];
    samples.extend(missing_kinds().into_iter().map(DomainError::NotFound));
    // `registerClusterIngress`: the protocol refusal, and every reason with its default
    // `retryAfterMs` and at both ends of the contract's range.
    samples.push(DomainError::ProtocolRefused);
    let contract = CLUSTER_INGRESS_REGISTRATION_CONTRACT;
    for reason in RefusalReason::ALL {
        for retry_after_ms in
            [reason.default_retry_after_ms(), contract.minimum_retry_after_ms, contract.maximum_retry_after_ms]
        {
            let refusal = ClusterIngressRegistrationRefusal::new(reason, retry_after_ms).expect("within the range");
            samples.push(DomainError::RegistrationRefused(refusal));
        }
    }
    let sampled: BTreeSet<usize> = samples.iter().map(variant_index).collect();
    assert_eq!(sampled, (0..DOMAIN_ERROR_VARIANTS).collect(), "every DomainError variant is sampled");
    samples
}

/// The HTTP-level error codes, read from real router answers: malformed envelopes (400), a body
/// over the limit (413) and load shedding (503).
async fn http_level_errors() -> Vec<(StatusCode, Value, HeaderMap)> {
    let keys = fresh_keys();
    let store = memory_store().await;
    let (app, _) = app_over(store.clone(), keys.clone(), Limits::default());
    let mut answers = Vec::new();
    for body in [
        &b"not json"[..],
        b"[]",
        b"{\"request\":{}}",
        b"{\"method\":7,\"request\":{}}",
        b"{\"method\":\"listClusters\"}",
    ] {
        let answer = send(&app, "POST", "/typedrequest", body.to_vec()).await;
        answers.push((answer.status, answer.json(), answer.headers));
    }
    let (small, _) = app_over(store.clone(), keys.clone(), Limits { body_bytes: 64, ..Limits::default() });
    let large =
        serde_json::to_vec(&json!({ "method": "listClusters", "request": { "padding": "x".repeat(256) } })).unwrap();
    let answer = send(&small, "POST", "/typedrequest", large).await;
    answers.push((answer.status, answer.json(), answer.headers));
    let (shedding, _) = app_over(store.clone(), keys.clone(), Limits { concurrent_requests: 0, ..Limits::default() });
    let answer = send(&shedding, "POST", "/typedrequest", b"{}".to_vec()).await;
    answers.push((answer.status, answer.json(), answer.headers));
    // A body that never arrives: 408 once the body deadline passed.
    let limits = Limits { body_read_timeout: Duration::from_millis(50), ..Limits::default() };
    let (impatient, _) = app_over(store, keys, limits);
    let never = futures_util::stream::pending::<Result<Vec<u8>, std::io::Error>>();
    let request = Request::post("/typedrequest").body(Body::from_stream(never)).expect("a request");
    let response = impatient.oneshot(request).await.expect("the router is infallible");
    let (status, headers) = (response.status(), response.headers().clone());
    let body = axum::body::to_bytes(response.into_body(), usize::MAX).await.expect("a body");
    answers.push((status, serde_json::from_slice(&body).expect("a JSON body"), headers));
    answers
}

#[tokio::test]
async fn every_error_code_the_code_can_answer_is_documented_and_nothing_else() {
    let documented = string_set(&schema("ErrorCode")["enum"]);
    let mut produced = BTreeSet::new();
    for error in domain_error_samples() {
        let registration = matches!(error, DomainError::ProtocolRefused | DomainError::RegistrationRefused(_));
        let answered = ApiError::from(error.clone());
        assert_fits_named("ErrorData", &answered.data);
        let whole = json!({ "text": answered.text, "data": answered.data });
        assert_fits_named("Error", &whole);
        // The refusals of `registerClusterIngress` are its only errors, each with its text; its
        // error schema refuses every other code.
        let own = violations(&schema_ref("ClusterIngressRegistrationError"), &whole);
        assert_eq!(own.is_empty(), registration, "{error:?}: {whole} against ClusterIngressRegistrationError: {own:?}");
        if let DomainError::RegistrationRefused(refusal) = &error {
            assert_fits_named("ClusterIngressRegistrationRefusal", &answered.data);
            assert_eq!(answered.text, format!("cluster ingress registration refused: {}", refusal.reason()));
        }
        if let DomainError::ProtocolRefused = &error {
            assert_fits_named("ProtocolRefusal", &answered.data);
            assert_eq!(answered.data, ProtocolRefusal::controller().to_value());
            assert_eq!(answered.text, "protocol refused");
        }
        produced.insert(answered.code().to_owned());
    }
    let unknown = ApiError::unknown_method();
    assert_fits_named("ErrorData", &unknown.data);
    assert_eq!(
        schema("UnknownMethodAnswerEnvelope")["properties"]["error"]["properties"]["text"]["const"],
        json!(UNKNOWN_METHOD_TEXT)
    );
    produced.insert(unknown.code().to_owned());
    for (status, body, _) in http_level_errors().await {
        assert_fits_named("Error", &body["error"]);
        let code = body["error"]["data"]["code"].as_str().expect("a code").to_owned();
        assert!(status.is_client_error() || status.is_server_error(), "{code} answered {status}");
        produced.insert(code);
    }
    assert_eq!(produced, documented, "ErrorCode must list exactly the codes the code answers");

    // `not-found`'s `what` lists every kind, and `assignment` (`DomainError::AssignmentNotFound`).
    let mut kinds: BTreeSet<String> = missing_kinds().into_iter().map(|kind| kind.what().to_owned()).collect();
    kinds.insert(ApiError::from(DomainError::AssignmentNotFound).data["what"].as_str().expect("a what").to_owned());
    assert_eq!(string_set(&schema("ErrorDataNotFound")["properties"]["what"]["enum"]), kinds);

    // `ErrorData` has one branch per code, and every method's `x-errors` names documented codes.
    let branches: BTreeSet<String> =
        schema("ErrorData")["discriminator"]["mapping"].as_object().expect("a mapping").keys().cloned().collect();
    assert_eq!(branches, documented);
    for method in &method_names() {
        let listed = string_set(&schema(&format!("{method}Request"))["x-errors"]);
        assert!(listed.is_subset(&documented), "{method}: x-errors {listed:?} names an undocumented code");
    }

    // `registerClusterIngress`'s refusals replace the generic codes: it lists exactly its two, and
    // no other method lists either.
    let refusals: BTreeSet<String> =
        ["cluster-ingress-registration-refused", "protocol-refused"].iter().map(|code| (*code).to_owned()).collect();
    for method in &method_names() {
        let listed = string_set(&schema(&format!("{method}Request"))["x-errors"]);
        if *method == "registerClusterIngress" {
            assert_eq!(listed, refusals, "{method}: x-errors");
        } else {
            assert!(listed.is_disjoint(&refusals), "{method}: x-errors {listed:?} names a registration refusal");
        }
    }
    // The controller's offer, the reasons in judgement order, and the `retryAfterMs` range.
    let offer = schema("ClusterIngressControllerOffer");
    let documented_offer: Map<String, Value> = offer["properties"]
        .as_object()
        .expect("properties")
        .iter()
        .map(|(key, member)| (key.clone(), member["const"].clone()))
        .collect();
    assert_eq!(Value::Object(documented_offer), json!(CLUSTER_INGRESS_PROTOCOL), "the controller's offer");
    let reasons: Vec<String> = RefusalReason::ALL.iter().map(|reason| reason.as_str().to_owned()).collect();
    assert_eq!(strings(&schema("ClusterIngressRegistrationRefusalReason")["enum"]), reasons, "judgement order");
    let retry = &schema("ClusterIngressRegistrationRefusal")["properties"]["retryAfterMs"];
    let contract = CLUSTER_INGRESS_REGISTRATION_CONTRACT;
    assert_eq!(retry["minimum"], json!(contract.minimum_retry_after_ms));
    assert_eq!(retry["maximum"], json!(contract.maximum_retry_after_ms));
    for outside in [contract.minimum_retry_after_ms - 1, contract.maximum_retry_after_ms + 1] {
        assert!(ClusterIngressRegistrationRefusal::new(RefusalReason::Conflict, outside).is_err(), "{outside}");
        let data =
            json!({ "code": "cluster-ingress-registration-refused", "reason": "conflict", "retryAfterMs": outside });
        assert!(!violations(&schema_ref("ClusterIngressRegistrationRefusal"), &data).is_empty(), "{outside}");
    }
}

// ---------------------------------------------------------------------------------------------
// The document itself.

/// The members of records (not method requests) that the code leaves out rather than answering
/// `null`: a recorded registration's `capabilities` is absent when the ingress sent none
/// (`api::answers`). The scripted flow sees both shapes.
const OPTIONAL_RECORD_MEMBERS: &[(&str, &str)] = &[
    ("#/components/schemas/IClusterIngressRegistrationRecord", "capabilities"),
    ("#/components/schemas/IRuntimeNetworkProjection", "workloadIngress"),
    ("#/components/schemas/IRuntimeNetworkProjection", "hostPlatformEndpointIds"),
];

#[test]
fn the_document_is_an_openapi_3_1_document_the_checker_understands() {
    let doc = document();
    assert!(doc["openapi"].as_str().is_some_and(|version| version.starts_with("3.1.")), "OpenAPI 3.1");
    for (record, member) in OPTIONAL_RECORD_MEMBERS {
        assert!(resolve(record)["properties"].get(*member).is_some(), "{record} documents {member}");
    }
    for (at, root) in every_root_schema() {
        each_subschema(root, at, &mut |subschema, at| {
            for key in subschema.as_object().expect("a schema object").keys() {
                assert!(
                    CHECKED_KEYWORDS.contains(&key.as_str())
                        || ANNOTATION_KEYWORDS.contains(&key.as_str())
                        || key.starts_with("x-"),
                    "{at}: keyword {key} is neither checked by this test nor an annotation"
                );
            }
            if let Some(reference) = subschema.get("$ref") {
                resolve(reference.as_str().expect("$ref is a string"));
            }
            // A discriminator maps each value to exactly the `oneOf` branch whose member is that value.
            if let Some(discriminator) = subschema.get("discriminator") {
                let property = discriminator["propertyName"].as_str().expect("propertyName");
                let mapping = discriminator["mapping"].as_object().expect("an explicit mapping");
                let branches: BTreeSet<String> = subschema["oneOf"]
                    .as_array()
                    .expect("a discriminator sits beside oneOf")
                    .iter()
                    .map(|branch| branch["$ref"].as_str().expect("branches are references").to_owned())
                    .collect();
                let targets: BTreeSet<String> =
                    mapping.values().map(|target| target.as_str().expect("a reference").to_owned()).collect();
                assert_eq!(branches, targets, "{at}: discriminator mapping and oneOf differ");
                for (value, target) in mapping {
                    let branch = resolve(target.as_str().unwrap());
                    assert_eq!(branch["properties"][property]["const"], json!(value), "{at}: mapping {value}");
                    assert!(string_set(&branch["required"]).contains(property), "{at}: {value} requires {property}");
                }
            }
            // Records are exact: a closed object requires every member (nullable, never optional).
            // Only the method requests (optional members, checked against the code below), the
            // answer envelopes (`error`) and [`OPTIONAL_RECORD_MEMBERS`] have optional members.
            let method_level = at.strip_prefix("#/components/schemas/").is_some_and(|name| {
                method_names()
                    .iter()
                    .any(|method| name == format!("{method}Request") || name == format!("{method}AnswerEnvelope"))
            });
            if subschema.get("additionalProperties") == Some(&json!(false)) && !method_level {
                let properties: BTreeSet<String> =
                    subschema["properties"].as_object().expect("properties").keys().cloned().collect();
                let required = string_set(&subschema["required"]);
                let optional: BTreeSet<String> = OPTIONAL_RECORD_MEMBERS
                    .iter()
                    .filter(|(record, _)| *record == at)
                    .map(|(_, member)| (*member).to_owned())
                    .collect();
                assert!(required.is_disjoint(&optional), "{at}: {optional:?} are optional");
                assert_eq!(
                    required.union(&optional).cloned().collect::<BTreeSet<_>>(),
                    properties,
                    "{at}: a closed record requires every member"
                );
            }
        });
    }
}

#[test]
fn the_methods_are_exactly_the_code_methods() {
    let methods = method_set();
    let listed = strings(&document()["x-methods"]);
    assert_eq!(listed.iter().cloned().collect::<BTreeSet<_>>(), methods, "x-methods");
    assert_eq!(listed.len(), METHODS.len(), "x-methods lists each method once");
    let marked: BTreeSet<String> = schemas()
        .values()
        .filter_map(|schema| schema.get("x-method"))
        .map(|method| method.as_str().unwrap().to_owned())
        .collect();
    assert_eq!(marked, methods, "the schemas marked x-method");
    for method in &method_names() {
        assert_eq!(schema(&format!("{method}Request"))["x-method"], json!(method));
        for suffix in ["Response", "RequestEnvelope", "AnswerEnvelope"] {
            schema(&format!("{method}{suffix}"));
        }
        assert_eq!(schema(&format!("{method}RequestEnvelope"))["properties"]["method"]["const"], json!(method));
        assert_eq!(schema(&format!("{method}AnswerEnvelope"))["properties"]["method"]["const"], json!(method));
    }
    // Method-level schemas (lowercase names) belong to a method of the code: no stale leftovers.
    for name in schemas().keys().filter(|name| name.starts_with(|first: char| first.is_ascii_lowercase())) {
        let owned = ["Request", "Response", "RequestEnvelope", "AnswerEnvelope"]
            .iter()
            .any(|suffix| name.strip_suffix(suffix).is_some_and(methods::is_known));
        assert!(owned, "schema {name} belongs to no method of METHODS");
    }
    let requests: BTreeSet<String> = schema("TypedRequestEnvelope")["discriminator"]["mapping"]
        .as_object()
        .expect("a mapping")
        .keys()
        .cloned()
        .collect();
    assert_eq!(requests, methods, "TypedRequestEnvelope's discriminator");
    let answers: BTreeSet<String> = schema("TypedAnswerEnvelope")["oneOf"]
        .as_array()
        .expect("oneOf")
        .iter()
        .map(|branch| branch["$ref"].as_str().unwrap().trim_start_matches("#/components/schemas/").to_owned())
        .collect();
    let mut expected: BTreeSet<String> =
        method_names().iter().map(|method| format!("{method}AnswerEnvelope")).collect();
    expected.insert("UnknownMethodAnswerEnvelope".to_owned());
    assert_eq!(answers, expected, "TypedAnswerEnvelope's branches");
    assert_eq!(
        string_set(&schema("UnknownMethodAnswerEnvelope")["properties"]["method"]["not"]["enum"]),
        methods,
        "an unknown method is any but these"
    );
}

// ---------------------------------------------------------------------------------------------
// The paths.

#[tokio::test]
async fn the_paths_are_exactly_the_routes_and_answer_as_documented() {
    let doc = document();
    let paths = doc["paths"].as_object().expect("paths");
    let operations: BTreeSet<(String, String)> = paths
        .iter()
        .flat_map(|(path, item)| {
            item.as_object().expect("a path item").keys().map(move |op| (path.clone(), op.clone()))
        })
        .collect();
    let expected: BTreeSet<(String, String)> = [
        ("/typedrequest", "post"),
        ("/typedsocket", "get"),
        ("/healthz", "get"),
        ("/readyz", "get"),
        ("/metrics", "get"),
    ]
    .iter()
    .map(|(path, op)| ((*path).to_owned(), (*op).to_owned()))
    .collect();
    assert_eq!(operations, expected, "the documented operations");

    let keys = fresh_keys();
    let store = memory_store().await;
    let (app, state) = app_over(store.clone(), keys.clone(), Limits::default());
    let (shedding, _) = app_over(store.clone(), keys.clone(), Limits { concurrent_requests: 0, ..Limits::default() });
    let unmigrated: SharedStore = Arc::new(SqlStore::connect("sqlite::memory:").await.expect("open"));
    let (pending, _) = app_over(unmigrated, keys.clone(), Limits::default());
    let closed = SqlStore::connect("sqlite::memory:").await.expect("open");
    closed.migrate().await.expect("migrate");
    closed.close().await;
    let (down, _) = app_over(Arc::new(closed), keys.clone(), Limits::default());

    // What each documented response promises, looked up by path and status.
    let documented = |path: &str, status: StatusCode| -> (&'static str, &'static Value, &'static Value) {
        let operation = paths[path].as_object().unwrap().values().next().unwrap();
        let mut response = operation["responses"]
            .get(status.as_str())
            .unwrap_or_else(|| panic!("{path} answered {status}, which is not documented"));
        if let Some(reference) = response.get("$ref") {
            response = resolve(reference.as_str().unwrap());
        }
        let (kind, media) = response["content"].as_object().expect("content").iter().next().expect("a media type");
        (kind.as_str(), &media["schema"], response)
    };
    let mut seen: BTreeSet<(String, String)> = BTreeSet::new();
    let mut reasons = BTreeSet::new();
    let mut observe = |path: &str, answer: &Answer| {
        let (kind, body_schema, response) = documented(path, answer.status);
        let content_type = answer.headers.get(header::CONTENT_TYPE).expect("a content type").to_str().unwrap();
        if kind == "application/json" {
            assert_eq!(content_type, "application/json", "{path} {}", answer.status);
            assert_fits(body_schema, &answer.json(), &format!("{path} {}", answer.status));
            if let Some(reason) = answer.json().get("reason") {
                reasons.insert(reason.as_str().unwrap().to_owned());
            }
        } else {
            assert_eq!(content_type, kind, "{path} {}", answer.status);
            assert!(String::from_utf8(answer.body.clone()).is_ok(), "{path}: text");
        }
        if let Some(headers) = response.get("headers").and_then(Value::as_object) {
            for (name, declared) in headers {
                if declared["required"] == json!(true) {
                    let value = answer.headers.get(name.as_str()).unwrap_or_else(|| panic!("{path}: header {name}"));
                    let value: Value = serde_json::from_str(value.to_str().unwrap()).expect("a JSON scalar");
                    assert_fits(&declared["schema"], &value, name);
                }
            }
        }
        seen.insert((path.to_owned(), answer.status.as_str().to_owned()));
    };

    let ok = serde_json::to_vec(&json!({ "method": "getControllerSigningKeys", "request": {} })).unwrap();
    observe("/typedrequest", &send(&app, "POST", "/typedrequest", ok).await);
    for (status, body, headers) in http_level_errors().await {
        observe("/typedrequest", &Answer { status, headers, body: serde_json::to_vec(&body).unwrap() });
    }
    for path in ["/healthz", "/readyz", "/metrics"] {
        observe(path, &send(&app, "GET", path, Vec::new()).await);
        // Load shedding guards the API only: probes and metrics answer under load.
        let answer = send(&shedding, "GET", path, Vec::new()).await;
        assert_eq!(answer.status, StatusCode::OK, "{path} is never shed");
        observe(path, &answer);
    }
    observe("/readyz", &send(&pending, "GET", "/readyz", Vec::new()).await);
    observe("/readyz", &send(&down, "GET", "/readyz", Vec::new()).await);
    // An HTTP GET without the upgrade headers is refused by axum's `WebSocketUpgrade` extractor.
    let plain = send(&app, "GET", "/typedsocket", Vec::new()).await;
    assert!(plain.status.is_client_error(), "a GET that is no upgrade: {}", plain.status);
    observe("/typedsocket", &plain);
    state.accepting.store(false, Ordering::SeqCst);
    observe("/readyz", &send(&app, "GET", "/readyz", Vec::new()).await);

    // Over the socket bound, an upgrade is refused with 503.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("a port");
    let address = listener.local_addr().expect("an address");
    let (full, _) = app_over(store.clone(), keys.clone(), Limits { max_sockets: 0, ..Limits::default() });
    let server = tokio::spawn(async move { axum::serve(listener, full).await });
    match tokio_tungstenite::connect_async(format!("ws://{address}/typedsocket")).await {
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
            let (parts, body) = response.into_parts();
            let refused = Answer { status: parts.status, headers: parts.headers, body: body.unwrap_or_default() };
            assert_eq!(refused.status, StatusCode::SERVICE_UNAVAILABLE);
            observe("/typedsocket", &refused);
        }
        other => panic!("an upgrade over the socket bound: {:?}", other.map(|(_, response)| response.status())),
    }
    server.abort();

    // A real upgrade over TCP answers 101, and its frames are envelopes that fit the document.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("a port");
    let address = listener.local_addr().expect("an address");
    let (socket_app, _) = app_over(store.clone(), keys.clone(), Limits::default());
    let server = tokio::spawn(async move { axum::serve(listener, socket_app).await });
    let (mut socket, upgraded) =
        tokio_tungstenite::connect_async(format!("ws://{address}/typedsocket")).await.expect("the socket upgrades");
    assert_eq!(upgraded.status().as_u16(), StatusCode::SWITCHING_PROTOCOLS.as_u16());
    assert!(paths["/typedsocket"]["get"]["responses"].get("101").is_some(), "101 is documented");
    seen.insert(("/typedsocket".to_owned(), "101".to_owned()));
    let envelope = json!({
        "method": "openRuntimeSession",
        "request": { "clusterId": "c1", "nodeId": "node-1", "bearer": "szrn_wrong" },
        "response": null,
        "correlation": { "id": "socket-1", "phase": "request" },
    });
    assert_fits_named("TypedRequestEnvelope", &envelope);
    socket.send(Message::text(envelope.to_string())).await.expect("a frame");
    let answered = loop {
        let frame = socket.next().await.expect("an answer").expect("a frame");
        if frame.is_text() {
            break serde_json::from_str::<Value>(frame.to_text().expect("text")).expect("a JSON frame");
        }
    };
    assert_fits_named("TypedAnswerEnvelope", &answered);
    assert_fits_named("openRuntimeSessionAnswerEnvelope", &answered);
    assert_eq!(answered["error"]["data"], json!({ "code": "principal-refused" }), "an unknown node: {answered}");
    assert_eq!(answered["correlation"], json!({ "id": "socket-1", "phase": "response" }));
    // On the socket, the node methods' documented required members are the domain's.
    for (index, method) in node_methods().iter().enumerate() {
        let id = format!("socket-members-{index}");
        let envelope = json!({
            "method": method, "request": { "zz": 1 }, "response": null,
            "correlation": { "id": id, "phase": "request" },
        });
        socket.send(Message::text(envelope.to_string())).await.expect("a frame");
        let answered = loop {
            let frame = socket.next().await.expect("an answer").expect("a frame");
            if frame.is_text() {
                break serde_json::from_str::<Value>(frame.to_text().expect("text")).expect("a JSON frame");
            }
        };
        assert_fits_named(&format!("{method}AnswerEnvelope"), &answered);
        assert_eq!(answered["correlation"]["id"], json!(id));
        let data = &answered["error"]["data"];
        assert_eq!(data["code"], json!("request-invalid"), "{method}: {answered}");
        let mut wanted: BTreeSet<String> = strings(&schema(&format!("{method}Request"))["required"])
            .iter()
            .map(|key| format!("request {key} is required"))
            .collect();
        wanted.insert(unknown_member_violation("zz"));
        assert_eq!(
            string_set(&data["violations"]),
            wanted,
            "{method}: the document's members differ from the domain's"
        );
    }
    let _ = socket.close(None).await;
    server.abort();

    let documented_statuses: BTreeSet<(String, String)> = paths
        .iter()
        .flat_map(|(path, item)| {
            item.as_object()
                .unwrap()
                .values()
                .flat_map(|operation| operation["responses"].as_object().unwrap().keys())
                .map(move |status| (path.clone(), status.clone()))
        })
        .collect();
    assert_eq!(seen, documented_statuses, "every documented status is answered");
    assert_eq!(reasons, string_set(&schema("NotReadyBody")["properties"]["reason"]["enum"]), "readiness reasons");
}

/// `POST /typedrequest` as a generic tool reads it: every answered envelope, a refusal too, is
/// documented as 200, and every other status is documented as a body that is no envelope. The
/// document says so in words, and real answers agree.
#[tokio::test]
async fn every_answered_envelope_is_200_and_every_other_status_is_no_envelope() {
    let operation = &document()["paths"]["/typedrequest"]["post"];
    let responses = operation["responses"].as_object().expect("responses");
    let statuses: BTreeSet<&str> = responses.keys().map(String::as_str).collect();
    assert_eq!(statuses, BTreeSet::from(["200", "400", "408", "413", "503"]), "the statuses of /typedrequest");

    // 200 is the answer envelope, and each of its branches can carry `error`: refusals are 200.
    assert_eq!(responses["200"]["content"]["application/json"]["schema"], schema_ref("TypedAnswerEnvelope"));
    for branch in schema("TypedAnswerEnvelope")["oneOf"].as_array().expect("oneOf") {
        let branch = resolve(branch["$ref"].as_str().expect("a reference"));
        assert!(branch["properties"].get("error").is_some(), "{branch}: an answer envelope can carry error");
    }

    // Every other status answers `{ error }` alone, with the one code of that status.
    let description = operation["description"].as_str().expect("the operation says what its statuses mean");
    assert!(description.contains("is HTTP 200, a success or a refusal alike"), "{description}");
    let mut code_of_status = Vec::new();
    for (status, response) in responses.iter().filter(|(status, _)| *status != "200") {
        let response = resolve(response["$ref"].as_str().expect("a shared response"));
        let body = resolve(response["content"]["application/json"]["schema"]["$ref"].as_str().expect("a body schema"));
        let members: BTreeSet<&str> =
            body["properties"].as_object().expect("properties").keys().map(String::as_str).collect();
        assert_eq!(members, BTreeSet::from(["error"]), "{status}: no envelope member");
        assert_eq!(body["additionalProperties"], json!(false), "{status}: no envelope member");
        let data = resolve(body["properties"]["error"]["properties"]["data"]["$ref"].as_str().expect("error data"));
        let code = data["properties"]["code"]["const"].as_str().expect("one code").to_owned();
        assert!(description.contains(&format!("{status} `{code}`")), "the description names {status} {code}");
        code_of_status.push((status.clone(), code));
    }

    // Real answers: the HTTP-level errors are exactly the non-200 statuses with their codes, and
    // none is an envelope.
    let mut answered: Vec<(String, String)> = Vec::new();
    for (status, body, _) in http_level_errors().await {
        assert!(body.get("method").is_none() && body.get("correlation").is_none(), "{status}: {body}");
        let code = body["error"]["data"]["code"].as_str().expect("a code").to_owned();
        answered.push((status.as_str().to_owned(), code));
    }
    answered.sort();
    answered.dedup();
    code_of_status.sort();
    assert_eq!(answered, code_of_status, "the non-200 answers of /typedrequest");

    // Refusals of every stage are 200 envelopes with `error`: an unknown method, a raw-text rule,
    // a request that is not an object, a missing identity, a lenient `correlation` / `authInfo` /
    // `response` that are not read.
    let (app, _) = app_over(memory_store().await, fresh_keys(), Limits::default());
    for (body, code) in [
        (r#"{"method":"noSuchMethod","request":{}}"#, "unknown-method"),
        (r#"{"method":"listClusters","request":{"a":1,"a":2}}"#, "request-invalid"),
        (r#"{"method":"listClusters","request":{"a":1.5}}"#, "request-invalid"),
        (r#"{"method":"listClusters","request":7}"#, "request-invalid"),
        (r#"{"method":"listClusters","request":{}}"#, "identity-refused"),
        (r#"{"method":"listClusters","request":{},"correlation":7,"authInfo":[],"response":{}}"#, "identity-refused"),
    ] {
        let answer = send(&app, "POST", "/typedrequest", body.as_bytes().to_vec()).await;
        assert_eq!(answer.status, StatusCode::OK, "{body}");
        let envelope = answer.json();
        assert_eq!(envelope["error"]["data"]["code"], json!(code), "{body}: {envelope}");
        assert_fits_named("TypedAnswerEnvelope", &envelope);
    }
    // What is not read is documented as not read: a request envelope with such members fits.
    let lenient = json!({ "method": "listClusters", "request": { "identity": null }, "correlation": 7,
                          "authInfo": [], "response": {} });
    assert!(
        violations(&schema_ref("listClustersRequestEnvelope"), &lenient)
            .iter()
            .all(|found| found.contains(".identity"))
    );
}

// ---------------------------------------------------------------------------------------------
// Request members and roles against the domain.

fn unknown_member_violation(key: &str) -> String {
    format!("request has an unknown member {key:?}")
}

#[tokio::test]
async fn required_members_optional_members_and_roles_match_the_domain() {
    let keys = fresh_keys();
    let mut controller = Controller::new(memory_store().await, keys.clone(), Arc::new(SystemClock));
    // `getClusterIngressRouteTable` answers at once instead of holding a current `knownRevision`.
    controller.settings.route_table_long_poll_ms = 0;
    // A relay connection token, for the relay methods whose principal is `authInfo.jwt`.
    let admin = identity(&keys, Role::Admin);
    let setup = [
        ("putOrganization", json!({ "identity": admin, "organization": { "id": "org", "name": "Org" } })),
        (
            "putCluster",
            json!({ "identity": admin, "expectedRevision": null,
                    "cluster": cluster("c1", "pallet", json!("https://relay.example.net"), Value::Null) }),
        ),
        ("issueClusterRelayCredential", json!({ "identity": admin, "clusterId": "c1", "relayId": "relay-1" })),
    ];
    let mut issued = Value::Null;
    for (method, request) in setup {
        issued =
            methods::call(&controller, method, &request).await.unwrap_or_else(|error| panic!("{method}: {error:?}"));
    }
    let connect = wire::to_request(&wire::ConnectClusterRelay {
        cluster_id: &json!("c1"),
        relay_id: &json!("relay-1"),
        bearer: &issued["bearer"],
    });
    let connected =
        methods::call(&controller, methods::name::CONNECT_CLUSTER_RELAY, &connect).await.expect("the relay connects");
    let token = connected["token"].as_str().expect("a token").to_owned();

    for method in &method_names() {
        let request_schema = schema(&format!("{method}Request"));
        let roles = strings(&request_schema["x-roles"]);
        let properties = request_schema["properties"].as_object().expect("properties");
        assert_eq!(request_schema["additionalProperties"], json!(false), "{method}: unknown members are refused");
        let principal = &methods::find(method).expect("a row").principal;
        assert_eq!(roles, principal.roles(), "{method}: x-roles are the principal of its row");
        assert_eq!(roles == ["node"], principal.socket_only(), "{method}: x-roles node");

        if roles == ["node"] {
            // Served only on `/typedsocket`: over HTTP every request is refused, without detail.
            assert!(!properties.contains_key("identity"), "{method}: a node presents no identity");
            let documented: Map<String, Value> = properties.keys().map(|key| (key.clone(), Value::Null)).collect();
            for request in [json!({}), json!({ "identity": identity(&keys, Role::Admin), "zz": 1 }), json!(documented)]
            {
                let refused = methods::call(&controller, method, &request).await.expect_err("socket only");
                assert_eq!(refused.data, json!({ "code": "principal-refused" }), "{method} over HTTP");
                assert_fits_named("ErrorData", &refused.data);
            }
            continue;
        }

        if *method == "registerClusterIngress" {
            registration_members_match_the_domain(&controller, &keys, &token).await;
            continue;
        }

        if roles == ["relay"] {
            // No identity: the relay bearer is a member (`connectClusterRelay`), or the connection
            // token is the envelope's `authInfo.jwt`. The request is exact: every member required,
            // `identity` unknown.
            assert!(!properties.contains_key("identity"), "{method}: a relay presents no identity");
            let required: BTreeSet<String> = request_schema.get("required").map(string_set).unwrap_or_default();
            let documented: BTreeSet<String> = properties.keys().cloned().collect();
            assert_eq!(required, documented, "{method}: every member of a relay request is required");
            let envelope = schema(&format!("{method}RequestEnvelope"));
            let by_token = string_set(&envelope["required"]).contains("authInfo");
            let auth = if by_token {
                for jwt in [None, Some("szrc_unknown")] {
                    let refused =
                        methods::call_with_auth(&controller, method, &json!({}), jwt).await.expect_err("no principal");
                    assert_eq!(refused.data, json!({ "code": "principal-refused" }), "{method} with {jwt:?}");
                }
                Some(token.as_str())
            } else {
                None
            };
            let request = json!({ "identity": identity(&keys, Role::Admin), "zz": 1 });
            let refused = methods::call_with_auth(&controller, method, &request, auth).await.expect_err("refused");
            assert_eq!(refused.code(), "request-invalid", "{method}: {}", refused.data);
            let got: Vec<String> = strings(&refused.data["violations"]);
            let mut wanted: BTreeSet<String> =
                required.iter().map(|key| format!("request {key} is required")).collect();
            wanted.insert(unknown_member_violation("identity"));
            wanted.insert(unknown_member_violation("zz"));
            assert_eq!(
                got.iter().cloned().collect::<BTreeSet<_>>(),
                wanted,
                "{method}: the document's members differ from the domain's"
            );
            assert_eq!(got.len(), wanted.len(), "{method}: each violation once");
            let request: Map<String, Value> = properties.keys().map(|key| (key.clone(), Value::Null)).collect();
            if let Err(refused) = methods::call_with_auth(&controller, method, &Value::Object(request), auth).await {
                for violation in refused.data.get("violations").map(strings).unwrap_or_default() {
                    assert!(
                        !violation.ends_with(" is required") && !violation.starts_with("request has an unknown member"),
                        "{method}: the document's members are not the domain's: {violation}"
                    );
                }
            }
            continue;
        }

        if roles == ["anyone"] {
            // No identity, no member: `{}` (or `null`) answers, anything else is refused.
            assert!(properties.is_empty() && request_schema.get("required").is_none(), "{method} takes {{}}");
            for request in [json!({}), Value::Null] {
                let response = methods::call(&controller, method, &request).await.expect("anyone may call it");
                assert_fits_named(&format!("{method}Response"), &response);
            }
            let refused = methods::call(&controller, method, &json!({ "zz": 1 })).await.expect_err("refused");
            assert_eq!(refused.code(), "request-invalid");
            assert_fits_named("ErrorData", &refused.data);
            continue;
        }

        assert!(
            !roles.is_empty() && roles.iter().all(|role| Role::parse(role).is_some()),
            "{method}: x-roles are identity roles: {roles:?}"
        );
        assert_eq!(properties.get("identity"), Some(&schema_ref("IIdentity")), "{method}: identity");
        let required: Vec<String> = strings(&request_schema["required"]);
        assert!(required.contains(&"identity".to_owned()), "{method}: identity is required");
        let members: Vec<&String> = required.iter().filter(|key| *key != "identity").collect();

        // No identity at all.
        let refused = methods::call(&controller, method, &json!({})).await.expect_err("no identity");
        assert_eq!(refused.code(), "identity-refused", "{method} without identity");

        for role in ROLES {
            let request = json!({ "identity": identity(&keys, role), "zz": 1 });
            let refused = methods::call(&controller, method, &request).await.expect_err("refused");
            if roles.iter().any(|allowed| allowed == role.as_str()) {
                assert_eq!(refused.code(), "request-invalid", "{method} as {}: {}", role.as_str(), refused.data);
                let got: Vec<String> = strings(&refused.data["violations"]);
                // `designateClusterIngress` names a missing `designation` through the seed's
                // snapshot (`03-designation.md` step 2), checked below; other members by name.
                let mut wanted: BTreeSet<String> = members
                    .iter()
                    .filter(|key| !(*method == "designateClusterIngress" && key.as_str() == "designation"))
                    .map(|key| format!("request {key} is required"))
                    .collect();
                wanted.insert(unknown_member_violation("zz"));
                assert_eq!(
                    got.iter().cloned().collect::<BTreeSet<_>>(),
                    wanted,
                    "{method}: the document's required members differ from the domain's"
                );
                assert_eq!(got.len(), wanted.len(), "{method}: each violation once");
            } else {
                assert_eq!(refused.code(), "identity-forbidden", "{method} as {} (x-roles {roles:?})", role.as_str());
            }
        }

        if *method == "designateClusterIngress" {
            let request = json!({ "identity": identity(&keys, Role::Admin) });
            let refused = methods::call(&controller, method, &request).await.expect_err("no designation");
            assert_eq!(refused.data["violations"], json!(["Cluster ingress designation contract rejected."]));
        }

        // Every documented member is known to the domain: with all of them present (as `null`),
        // nothing is missing and nothing is unknown.
        let admin = identity(&keys, Role::Admin);
        let mut request: Map<String, Value> = properties.keys().map(|key| (key.clone(), Value::Null)).collect();
        request.insert("identity".to_owned(), admin);
        if let Err(refused) = methods::call(&controller, method, &Value::Object(request)).await {
            for violation in refused.data.get("violations").map(strings).unwrap_or_default() {
                assert!(
                    !violation.ends_with(" is required") && !violation.starts_with("request has an unknown member"),
                    "{method}: the document's members are not the domain's: {violation}"
                );
            }
        }
    }
}

/// The answer of a `registerClusterIngress` refusal: `protocol-refused`, or the refusal's reason.
/// Either fits the method's error schema, text and data together.
#[track_caller]
fn registration_outcome(answered: Result<Value, ApiError>) -> String {
    let refused = answered.expect_err("registerClusterIngress refuses here");
    assert_fits_named("ClusterIngressRegistrationError", &json!({ "text": refused.text, "data": refused.data }));
    assert_fits_named("ErrorData", &refused.data);
    match refused.code() {
        "protocol-refused" => {
            assert_eq!(refused.data, ProtocolRefusal::controller().to_value());
            "protocol-refused".to_owned()
        }
        code => {
            assert_eq!(code, "cluster-ingress-registration-refused", "{}", refused.data);
            refused.data["reason"].as_str().expect("a reason").to_owned()
        }
    }
}

/// `registerClusterIngress` on `controller`, with `jwt` as the envelope's `authInfo.jwt`.
async fn register(controller: &Controller, request: &Value, jwt: Option<&str>) -> Result<Value, ApiError> {
    methods::call_with_auth(controller, "registerClusterIngress", request, jwt).await
}

/// `registerClusterIngress` against the domain: a relay method (no identity, the connection
/// token as `authInfo.jwt`), but a special case of the member checks above. Its protocol offer
/// is judged before anything else, and every later failure is a
/// `ClusterIngressRegistrationRefusal`, never `request-invalid` or `principal-refused`. So the
/// probe of every other method (`{ identity, zz }` answered `request-invalid` naming exactly the
/// missing members) cannot apply: without an offer it is `protocol-refused`, and with a valid
/// offer and an unknown member it is `registration-invalid`, whose data names no member (the
/// validator's violations are logged, not answered). The document's members are held against
/// the domain instead by leaving each one out of a registration the domain finds valid. The
/// controller's cluster holds no designation, so a valid registration with the relay's token gets
/// past `registration-invalid` and `relay-not-connected` to `ingress-not-designated`.
async fn registration_members_match_the_domain(controller: &Controller, keys: &ControllerKeys, token: &str) {
    let method = "registerClusterIngress";
    let request_schema = schema("registerClusterIngressRequest");
    assert_eq!(strings(&request_schema["x-roles"]), ["relay"], "{method}: x-roles");
    let properties = request_schema["properties"].as_object().expect("properties");
    assert!(!properties.contains_key("identity"), "{method}: a relay presents no identity");
    let envelope = schema("registerClusterIngressRequestEnvelope");
    assert!(string_set(&envelope["required"]).contains("authInfo"), "{method}: the token is authInfo.jwt");
    let required = string_set(&request_schema["required"]);

    // Step 1 comes first: any `request` without a readable, matching offer, with or without a
    // token, is the protocol refusal (a non-object `request` included).
    let admin = identity(keys, Role::Admin);
    for request in [Value::Null, json!(7), json!("x"), json!([]), json!({}), json!({ "identity": admin, "zz": 1 })] {
        for jwt in [None, Some(token)] {
            assert_eq!(
                registration_outcome(register(controller, &request, jwt).await),
                "protocol-refused",
                "{request} {jwt:?}"
            );
        }
    }
    // A valid offer with an unknown member: `registration-invalid`, not `request-invalid`.
    let offer = json!(CLUSTER_INGRESS_PROTOCOL);
    let request = json!({ "protocol": offer, "identity": admin, "zz": 1 });
    assert_eq!(registration_outcome(register(controller, &request, Some(token)).await), "registration-invalid");

    // One valid value per documented member (a newly documented member needs one here).
    let valid: Map<String, Value> = [
        ("bearer", json!("szci_0123456789abcdef0123456789")),
        ("version", json!("1.4.2")),
        ("nodeId", json!("node-1")),
        ("capabilities", json!(["http2", "websocket"])),
        ("protocol", offer),
    ]
    .into_iter()
    .map(|(key, value)| (key.to_owned(), value))
    .collect();
    let keys_of = |members: &Map<String, Value>| members.keys().cloned().collect::<BTreeSet<String>>();
    assert_eq!(keys_of(&valid), keys_of(properties), "{method}: a sample value for each documented member");
    assert_fits_named("registerClusterIngressRequest", &Value::Object(valid.clone()));
    // Every documented member is known to the domain, and valid as documented.
    assert_eq!(
        registration_outcome(register(controller, &Value::Object(valid.clone()), Some(token)).await),
        "ingress-not-designated"
    );
    // A missing token is the refusal `relay-not-connected`, not `principal-refused`.
    for jwt in [None, Some("szrc_unknown")] {
        let outcome = registration_outcome(register(controller, &Value::Object(valid.clone()), jwt).await);
        assert_eq!(outcome, "relay-not-connected", "{method} with {jwt:?}");
    }
    // The request is exact: an identity or an unknown member is `registration-invalid`.
    for (key, value) in [("identity", admin), ("zz", json!(1))] {
        let mut request = valid.clone();
        request.insert(key.to_owned(), value);
        assert_eq!(
            registration_outcome(register(controller, &Value::Object(request), Some(token)).await),
            "registration-invalid"
        );
    }
    // Each required member is required by the domain, each optional one is optional.
    for key in properties.keys() {
        let mut request = valid.clone();
        request.remove(key);
        let outcome = registration_outcome(register(controller, &Value::Object(request), Some(token)).await);
        let expected = match key.as_str() {
            // Without an offer, step 1 answers.
            "protocol" => "protocol-refused",
            _ if required.contains(key) => "registration-invalid",
            _ => "ingress-not-designated",
        };
        assert_eq!(outcome, expected, "{method} without {key}: the document's members differ from the domain's");
    }
    assert!(required.contains("protocol"), "{method}: the offer is required");
}

// ---------------------------------------------------------------------------------------------
// A scripted flow over the router: every shape on the wire fits the document.

type NodeSocket = tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

struct Flow {
    app: Router,
    keys: Arc<ControllerKeys>,
    correlation: u64,
    /// The methods answered successfully over `POST /typedrequest`.
    succeeded: BTreeSet<String>,
    /// The methods answered successfully on the node socket.
    succeeded_on_socket: BTreeSet<String>,
    codes: BTreeSet<String>,
    /// The node's `/typedsocket`, once opened.
    socket: Option<NodeSocket>,
    /// The `error` of the last refused call.
    last_error: Value,
}

impl Flow {
    fn new(app: Router, keys: Arc<ControllerKeys>) -> Flow {
        Flow {
            app,
            keys,
            correlation: 0,
            succeeded: BTreeSet::new(),
            succeeded_on_socket: BTreeSet::new(),
            codes: BTreeSet::new(),
            socket: None,
            last_error: Value::Null,
        }
    }

    fn identity(&self, role: Role) -> Value {
        identity(&self.keys, role)
    }

    /// Sends `request` (with `identity`, when given) as `method`, checks the envelope both ways
    /// against the document, and answers the response or the error data. A request the code
    /// answers must fit the document.
    async fn call(&mut self, method: &str, identity: Option<&Value>, request: Value) -> Result<Value, Value> {
        self.call_with(method, identity, None, request).await
    }

    /// [`Flow::call`] with the envelope's `authInfo.jwt` (a relay connection token), when given.
    async fn call_with(
        &mut self,
        method: &str,
        identity: Option<&Value>,
        jwt: Option<&str>,
        mut request: Value,
    ) -> Result<Value, Value> {
        if let Some(identity) = identity {
            request["identity"] = identity.clone();
        }
        self.correlation += 1;
        let id = format!("openapi-{}", self.correlation);
        let mut envelope = json!({
            "method": method, "request": request, "response": null,
            "correlation": { "id": id, "phase": "request" },
        });
        if let Some(jwt) = jwt {
            envelope["authInfo"] = json!({ "jwt": jwt });
        }
        let answer = send(&self.app, "POST", "/typedrequest", serde_json::to_vec(&envelope).unwrap()).await;
        assert_eq!(answer.status, StatusCode::OK, "{method}: every answered envelope is 200");
        self.check_answer(method, &envelope, answer.json(), false)
    }

    /// Sends `request` as `method` on the node socket, answering the controller's own requests
    /// (`pushRuntimeChanged`, a hint) with `{}` on the way, and checks both envelopes against the
    /// document as [`Flow::call`] does.
    async fn node(&mut self, method: &str, request: Value) -> Result<Value, Value> {
        self.correlation += 1;
        let id = format!("openapi-{}", self.correlation);
        let envelope = json!({
            "method": method, "request": request, "response": null,
            "correlation": { "id": id, "phase": "request" },
        });
        let socket = self.socket.as_mut().expect("the node socket is open");
        socket.send(Message::text(envelope.to_string())).await.expect("a frame");
        let answered = loop {
            let frame = socket.next().await.expect("an answer").expect("a frame");
            if !frame.is_text() {
                continue;
            }
            let incoming: Value = serde_json::from_str(frame.to_text().expect("text")).expect("a JSON frame");
            if incoming["correlation"]["phase"] == json!("response") {
                break incoming;
            }
            // The controller's requests: `pushRuntimeChanged`, answered `{}`, and
            // `applyRuntimeLocalStorageClaim`, whose claim this node is unsure of.
            let response = match incoming["method"].as_str() {
                Some("pushRuntimeChanged") => json!({}),
                Some("applyRuntimeLocalStorageClaim") => {
                    let claim = &incoming["request"]["claim"];
                    assert_fits_named("IRuntimeSessionReference", &incoming["request"]["session"]);
                    assert_fits_named("IRuntimeLocalStorageClaim", claim);
                    json!({ "status": "accepted", "state": "uncertain", "claim": reference_of(claim) })
                }
                _ => panic!("the controller sent an undocumented request: {incoming}"),
            };
            let answer = json!({
                "method": incoming["method"], "request": null, "response": response,
                "correlation": { "id": incoming["correlation"]["id"], "phase": "response" },
            });
            socket.send(Message::text(answer.to_string())).await.expect("a frame");
        };
        self.check_answer(method, &envelope, answered, true)
    }

    async fn node_ok(&mut self, method: &str, request: Value) -> Value {
        self.node(method, request).await.unwrap_or_else(|data| panic!("{method} on the socket: {data}"))
    }

    /// Checks the answer `answered` to `envelope` against the document: the response or the error data.
    fn check_answer(
        &mut self,
        method: &str,
        envelope: &Value,
        answered: Value,
        on_socket: bool,
    ) -> Result<Value, Value> {
        let id = envelope["correlation"]["id"].clone();
        assert_fits_named("TypedAnswerEnvelope", &answered);
        let known = methods::is_known(method);
        let branch = if known { format!("{method}AnswerEnvelope") } else { "UnknownMethodAnswerEnvelope".to_owned() };
        assert_fits_named(&branch, &answered);
        assert_eq!(answered["correlation"], json!({ "id": id, "phase": "response" }), "{method}: correlation");
        match answered.get("error") {
            None => {
                assert_fits_named("TypedRequestEnvelope", envelope);
                assert_fits_named(&format!("{method}Request"), &envelope["request"]);
                assert_fits_named(&format!("{method}Response"), &answered["response"]);
                if on_socket {
                    self.succeeded_on_socket.insert(method.to_owned());
                } else {
                    self.succeeded.insert(method.to_owned());
                }
                Ok(answered["response"].clone())
            }
            Some(error) => {
                self.last_error = error.clone();
                let data = error["data"].clone();
                assert_fits_named("ErrorData", &data);
                let code = data["code"].as_str().unwrap().to_owned();
                if known {
                    let listed = string_set(&schema(&format!("{method}Request"))["x-errors"]);
                    assert!(listed.contains(&code), "{method} answered {code}, which its x-errors do not list");
                }
                self.codes.insert(code);
                Err(data)
            }
        }
    }

    async fn ok(&mut self, method: &str, identity: Option<&Value>, request: Value) -> Value {
        self.call(method, identity, request).await.unwrap_or_else(|data| panic!("{method}: {data}"))
    }

    async fn refused(&mut self, method: &str, identity: Option<&Value>, request: Value, code: &str) -> Value {
        let data = self.call(method, identity, request).await.expect_err(code);
        assert_eq!(data["code"], json!(code), "{method}: {data}");
        data
    }

    /// A relay call with its connection token as `authInfo.jwt`.
    async fn relay(&mut self, method: &str, jwt: Option<&str>, request: Value) -> Result<Value, Value> {
        self.call_with(method, None, jwt, request).await
    }

    /// `registerClusterIngress` through `jwt`, refused for `reason` with its default
    /// `retryAfterMs`: exactly a `ClusterIngressRegistrationRefusal`, with the text naming it.
    async fn registration_refused(&mut self, jwt: Option<&str>, request: Value, reason: RefusalReason) {
        let refused = self.relay("registerClusterIngress", jwt, request).await.expect_err(reason.as_str());
        assert_fits_named("ClusterIngressRegistrationRefusal", &refused);
        assert_eq!(
            refused,
            json!({ "code": "cluster-ingress-registration-refused", "reason": reason.as_str(),
                    "retryAfterMs": reason.default_retry_after_ms() }),
        );
        assert_eq!(self.last_error["text"], json!(format!("cluster ingress registration refused: {reason}")));
        assert_fits_named("ClusterIngressRegistrationError", &self.last_error);
    }

    /// `registerClusterIngress` answered with the protocol refusal.
    async fn protocol_refused(&mut self, jwt: Option<&str>, request: Value) {
        let refused = self.relay("registerClusterIngress", jwt, request).await.expect_err("protocol refused");
        assert_fits_named("ProtocolRefusal", &refused);
        assert_eq!(
            refused,
            json!({ "code": "protocol-refused",
                    "offer": { "name": "serve.zone/cluster-ingress", "minimum": 1, "maximum": 1 } }),
        );
        assert_eq!(self.last_error["text"], json!("protocol refused"));
        assert_fits_named("ClusterIngressRegistrationError", &self.last_error);
    }
}

/// A valid cluster ingress registration of `node` with `bearer`.
fn ingress_registration(bearer: &str, node: &str) -> Value {
    json!({
        "bearer": bearer, "version": "1.4.2", "nodeId": node, "capabilities": ["http2", "websocket"],
        "protocol": { "name": "serve.zone/cluster-ingress", "minimum": 1, "maximum": 1 },
    })
}

/// [`spec_body`] without its volumes, so the controller runs it.
fn runnable_spec_body(cluster: &str, service: &str) -> Value {
    let mut body = spec_body(cluster, service);
    body["volumes"] = json!([]);
    body
}

fn spec_body(cluster: &str, service: &str) -> Value {
    json!({
        "clusterId": cluster, "serviceId": service, "organizationId": "org",
        "image": "registry.example/ingress:1.4.2", "replicas": 2,
        "placement": { "nodeIds": ["node-1", "node-2"] },
        "ports": [{ "protocol": "tcp", "port": 443 }, { "protocol": "udp", "port": 443 }],
        "environment": [{ "name": "LOG_LEVEL", "value": "info" }],
        "volumes": [
            { "id": "cache", "mountPath": "/var/cache/app", "readOnly": false, "driver": "local",
              "driverOptions": [], "mountOptions": [], "initialization": { "kind": "import" } },
            { "id": "data", "mountPath": "/var/lib/data", "readOnly": true, "driver": "local",
              "driverOptions": [{ "name": "size", "value": "1G" }], "mountOptions": ["noatime"],
              "initialization": { "kind": "empty", "ownership": { "uid": 1000, "gid": 1000, "mode": 493 } } },
        ],
    })
}

fn designation(mutation: &str, runtime_generation: u64, spec_revision: u64, expected: Value) -> Value {
    json!({ "designation": {
        "mutationId": mutation, "clusterId": "c1", "ingressServiceId": "ingress",
        "currentRuntime": { "id": "c1", "phase": "pallet", "generation": runtime_generation },
        "expectedSpecRevision": spec_revision, "expectedDesignation": expected,
    } })
}

fn reference_of(designation: &Value) -> Value {
    json!({ "id": designation["id"], "generation": designation["generation"], "digest": designation["digest"] })
}

fn cluster(id: &str, phase: &str, relay: Value, fleet: Value) -> Value {
    json!({ "id": id, "organizationId": "org", "runtime": { "phase": phase, "generation": 3 },
            "relayOrigin": relay, "fleetCutoverIngressDesignation": fleet })
}

#[tokio::test]
async fn every_method_answers_in_the_documented_shapes() {
    let keys = fresh_keys();
    let (app, state) = app_over(memory_store().await, keys.clone(), Limits::default());
    let mut flow = Flow::new(app, keys.clone());
    let admin = flow.identity(Role::Admin);
    let operator = flow.identity(Role::Operator);
    let viewer = flow.identity(Role::Viewer);
    let fleet = json!({ "id": "fleet-1", "generation": 1, "digest": format!("sha256:{}", "0".repeat(64)) });

    flow.ok("getControllerSigningKeys", None, json!({})).await;
    flow.ok("getControllerSigningKeys", None, Value::Null).await;
    let version = flow.ok("getControllerVersion", None, json!({})).await;
    assert_eq!(version["version"], env!("CARGO_PKG_VERSION"));
    flow.ok("getControllerVersion", None, Value::Null).await;
    flow.ok("putOrganization", Some(&admin), json!({ "organization": { "id": "org", "name": "Org" } })).await;
    let organization = flow.ok("getOrganization", Some(&viewer), json!({ "organizationId": "org" })).await;
    assert_eq!(organization, json!({ "organization": { "id": "org", "name": "Org" } }));
    let relay = json!("https://relay.example.net:8443");
    flow.ok(
        "putCluster",
        Some(&admin),
        json!({ "cluster": cluster("c1", "pallet", relay.clone(), Value::Null), "expectedRevision": null }),
    )
    .await;
    flow.ok(
        "putCluster",
        Some(&admin),
        json!({ "cluster": cluster("c2", "swarm", Value::Null, fleet.clone()), "expectedRevision": null }),
    )
    .await;
    flow.ok("getCluster", Some(&viewer), json!({ "clusterId": "c1" })).await;
    let clusters = flow.ok("listClusters", Some(&viewer), json!({})).await;
    assert_eq!(clusters["clusters"].as_array().map(Vec::len), Some(2));
    let node = |id: &str, addresses: Value, rotate: bool| json!({ "clusterId": "c1", "node": { "id": id, "runtimeNamespace": "ns-main", "hostAddresses": addresses }, "rotateCredential": rotate });
    let created =
        flow.ok("putClusterNode", Some(&admin), node("node-1", json!(["10.0.0.9", "10.0.0.10"]), false)).await;
    assert!(created["bearer"].is_string(), "a new node gets a bearer");
    let kept = flow.ok("putClusterNode", Some(&admin), node("node-1", json!(["10.0.0.9", "10.0.0.10"]), false)).await;
    assert!(kept["bearer"].is_null(), "an unrotated node gets none");
    flow.ok("putClusterNode", Some(&admin), node("node-2", json!([]), true)).await;
    flow.ok("listClusterNodes", Some(&operator), json!({ "clusterId": "c1" })).await;
    let read = flow.ok("getClusterNode", Some(&viewer), json!({ "clusterId": "c1", "nodeId": "node-1" })).await;
    assert_eq!(read["node"]["hostAddresses"], json!(["10.0.0.9", "10.0.0.10"]));
    flow.ok(
        "putServiceRuntimeSpec",
        Some(&admin),
        json!({ "spec": runnable_spec_body("c1", "ingress"), "expectedRevision": null }),
    )
    .await;
    flow.ok("getServiceRuntimeSpec", Some(&viewer), json!({ "clusterId": "c1", "serviceId": "ingress" })).await;
    flow.ok(
        "getServiceRuntimeSpec",
        Some(&viewer),
        json!({ "clusterId": "c1", "serviceId": "ingress", "revision": 1 }),
    )
    .await;
    // The address plan: none yet, the seed's example accepted (its organization's pool leases the
    // ingress's assignment), a change that would strand the lease refused.
    flow.ok("getRuntimeNetworkAddressPlan", Some(&viewer), json!({ "clusterId": "c1" })).await;
    let plan = |revision: u64, pools: Value| {
        json!({ "plan": {
            "clusterId": "c1", "revision": revision, "prefixes": ["10.64.0.0/16", "192.0.2.16/28"], "pools": pools,
            "vpn": { "prefix": "192.0.2.0/28", "hubPrefix": "192.0.2.0/28" },
            "hubs": [{ "id": "hub-a", "address": "192.0.2.1", "port": 51820 }],
            "platformEndpoints": [
                { "id": "corestore", "address": "192.0.2.17", "protocol": "tcp", "port": 9000 },
                { "id": "relay-listener", "address": "192.0.2.17", "protocol": "tcp", "port": 8443 },
            ],
        } })
    };
    let pools = json!([{ "id": "pool-org", "organizationId": "org", "prefix": "10.64.0.0/20" }]);
    flow.ok("putRuntimeNetworkAddressPlan", Some(&admin), plan(1, pools)).await;
    flow.ok("getRuntimeNetworkAddressPlan", Some(&operator), json!({ "clusterId": "c1" })).await;
    flow.refused("putRuntimeNetworkAddressPlan", Some(&admin), plan(2, json!([])), "address-plan-change-refused").await;

    let first = flow.ok("designateClusterIngress", Some(&operator), designation("m1", 3, 1, Value::Null)).await;
    let replay = flow.ok("designateClusterIngress", Some(&operator), designation("m1", 3, 1, Value::Null)).await;
    assert_eq!(replay["replayed"], json!(true));
    let second = flow
        .ok("designateClusterIngress", Some(&admin), designation("m2", 3, 1, reference_of(&first["designation"])))
        .await;
    assert!(second["designation"]["previous"].is_object(), "generation 2 links generation 1");
    flow.ok("getClusterIngressDesignation", Some(&viewer), json!({ "clusterId": "c1" })).await;
    let none = flow.ok("getClusterIngressDesignation", Some(&viewer), json!({ "clusterId": "c2" })).await;
    assert!(none["designation"].is_null());
    let page = flow.ok("listClusterIngressDesignations", Some(&viewer), json!({ "clusterId": "c1", "limit": 1 })).await;
    assert_eq!(page["nextGeneration"], json!(2));
    flow.ok("listClusterIngressDesignations", Some(&viewer), json!({ "clusterId": "c1", "fromGeneration": 2 })).await;
    flow.ok("putServiceRuntimeSpec", Some(&admin), json!({ "spec": spec_body("c1", "web"), "expectedRevision": null }))
        .await;
    // Its volumes carry options and its two replicas would share them: refused, naming the first
    // failing rule in table order.
    let web = flow.ok("getServiceRuntimeStatus", Some(&viewer), json!({ "clusterId": "c1", "serviceId": "web" })).await;
    assert_eq!(web["status"]["reason"], json!("volume-options-unsupported"));
    let statuses = flow.ok("listServiceRuntimeStatuses", Some(&viewer), json!({ "clusterId": "c1" })).await;
    assert_eq!(statuses["statuses"].as_array().map(Vec::len), Some(2));
    flow.ok("deleteService", Some(&admin), json!({ "clusterId": "c1", "serviceId": "web", "expectedRevision": 1 }))
        .await;

    // Relays and the route table: c1 has a relayOrigin.
    let routes = flow.ok("getClusterIngressRoutes", Some(&viewer), json!({ "clusterId": "c1" })).await;
    assert!(routes["table"].is_null(), "no route yet");
    let issued =
        flow.ok("issueClusterRelayCredential", Some(&admin), json!({ "clusterId": "c1", "relayId": "relay-1" })).await;
    let connect = wire::to_request(&wire::ConnectClusterRelay {
        cluster_id: &json!("c1"),
        relay_id: &json!("relay-1"),
        bearer: &issued["bearer"],
    });
    let first_token = flow.ok(methods::name::CONNECT_CLUSTER_RELAY, None, connect.clone()).await["token"].clone();
    let relays = flow.ok("listClusterRelays", Some(&viewer), json!({ "clusterId": "c1" })).await;
    assert_eq!(relays["relays"][0]["connections"][0]["elected"], json!(true));
    assert!(!relays.to_string().contains(first_token.as_str().unwrap()), "no token in the relay list");
    let route = json!({ "hostname": "app.example.net", "serviceId": "ingress", "protocol": "tcp", "port": 443 });
    let put = flow.ok("putClusterIngressRoute", Some(&admin), json!({ "clusterId": "c1", "route": route })).await;
    assert_eq!(put["table"]["routes"].as_array().map(Vec::len), Some(1));
    let route = json!({ "hostname": "quic.example.net", "serviceId": "ingress", "protocol": "udp", "port": 443 });
    flow.ok("putClusterIngressRoute", Some(&admin), json!({ "clusterId": "c1", "route": route })).await;
    let routes = flow.ok("getClusterIngressRoutes", Some(&operator), json!({ "clusterId": "c1" })).await;
    let first = first_token.as_str();
    // The table's revision differs from `knownRevision: null`, so the long poll answers at once.
    let any_revision = wire::GetClusterIngressRouteTable { known_revision: Value::Null };
    let table = flow
        .relay(methods::name::GET_CLUSTER_INGRESS_ROUTE_TABLE, first, wire::to_request(&any_revision))
        .await
        .unwrap_or_else(|data| panic!("getClusterIngressRouteTable: {data}"));
    assert!(table["table"]["revision"].as_u64() >= Some(2), "two route writes (and backends as grants appear)");
    assert_eq!(table["table"], routes["table"]);
    flow.relay("heartbeatClusterRelay", first, json!({})).await.unwrap_or_else(|data| panic!("heartbeat: {data}"));
    flow.ok("deleteClusterIngressRoute", Some(&admin), json!({ "clusterId": "c1", "hostname": "quic.example.net" }))
        .await;
    let gone = flow
        .ok("deleteClusterIngressRoute", Some(&admin), json!({ "clusterId": "c2", "hostname": "app.example.net" }))
        .await;
    assert!(gone["table"].is_null(), "c2 never had a table");

    // Refusals: every error data fits the document and is listed in the method's x-errors.
    let current = reference_of(&second["designation"]);
    flow.refused("noSuchMethod", None, json!({}), "unknown-method").await;
    flow.refused("getCluster", None, json!({ "clusterId": "c1" }), "identity-refused").await;
    flow.refused(
        "putOrganization",
        Some(&viewer),
        json!({ "organization": { "id": "org", "name": "Org" } }),
        "identity-forbidden",
    )
    .await;
    flow.refused("getCluster", Some(&viewer), json!({ "clusterId": 7 }), "request-invalid").await;
    flow.refused("listClusters", None, Value::Null, "request-invalid").await;
    let missing = flow.refused("getCluster", Some(&viewer), json!({ "clusterId": "nope" }), "not-found").await;
    assert_eq!(missing["what"], json!("cluster"));
    let missing =
        flow.refused("getOrganization", Some(&viewer), json!({ "organizationId": "nope" }), "not-found").await;
    assert_eq!(missing["what"], json!("organization"));
    let missing = json!({ "clusterId": "c1", "nodeId": "node-9" });
    let missing = flow.refused("getClusterNode", Some(&viewer), missing, "not-found").await;
    assert_eq!(missing["what"], json!("node"));
    flow.refused("designateClusterIngress", Some(&admin), designation("m1", 3, 2, Value::Null), "mutation-conflict")
        .await;
    flow.refused("designateClusterIngress", Some(&admin), designation("m3", 4, 1, current.clone()), "runtime-mismatch")
        .await;
    flow.refused(
        "designateClusterIngress",
        Some(&admin),
        designation("m4", 3, 9, current.clone()),
        "spec-revision-mismatch",
    )
    .await;
    flow.refused("designateClusterIngress", Some(&admin), designation("m5", 3, 1, Value::Null), "designation-conflict")
        .await;
    flow.refused(
        "putCluster",
        Some(&admin),
        json!({ "cluster": cluster("c1", "pallet", relay.clone(), Value::Null), "expectedRevision": 99 }),
        "revision-conflict",
    )
    .await;
    flow.refused(
        "putCluster",
        Some(&admin),
        json!({ "cluster": cluster("c1", "pallet", relay, fleet), "expectedRevision": 1 }),
        "designation-kind-conflict",
    )
    .await;

    // Relay and node principals.
    let reconnected = flow.ok(methods::name::CONNECT_CLUSTER_RELAY, None, connect.clone()).await;
    let second_token = reconnected["token"].clone();
    let heartbeat = wire::to_request(&wire::NoMembers {});
    let beat = flow.relay(methods::name::HEARTBEAT_CLUSTER_RELAY, second_token.as_str(), heartbeat.clone()).await;
    beat.expect("the new connection");
    let lost = flow.relay(methods::name::HEARTBEAT_CLUSTER_RELAY, first_token.as_str(), heartbeat).await;
    let lost = lost.expect_err("superseded");
    assert_eq!(lost["code"], json!("relay-connection-lost"));
    let lost = flow
        .relay(methods::name::GET_CLUSTER_INGRESS_ROUTE_TABLE, first_token.as_str(), wire::to_request(&any_revision))
        .await
        .expect_err("superseded");
    assert_eq!(lost["code"], json!("relay-connection-lost"));
    let refused = flow.relay("heartbeatClusterRelay", None, json!({})).await.expect_err("no token");
    assert_eq!(refused, json!({ "code": "principal-refused" }));
    let mut wrong = connect;
    wrong["bearer"] = json!("szrl_wrong");
    flow.refused("connectClusterRelay", None, wrong, "principal-refused").await;
    let relay_member = flow
        .refused(
            "connectClusterRelay",
            Some(&admin),
            json!({ "clusterId": "c1", "relayId": "relay-1" }),
            "request-invalid",
        )
        .await;
    assert!(strings(&relay_member["violations"]).contains(&unknown_member_violation("identity")));
    flow.refused(
        "issueClusterRelayCredential",
        Some(&admin),
        json!({ "clusterId": "c2", "relayId": "relay-1" }),
        "request-invalid",
    )
    .await;
    let missing =
        flow.refused("getClusterIngressRoutes", Some(&viewer), json!({ "clusterId": "nope" }), "not-found").await;
    assert_eq!(missing["what"], json!("cluster"));
    let missing = flow.refused("listClusterRelays", Some(&viewer), json!({ "clusterId": "nope" }), "not-found").await;
    assert_eq!(missing["what"], json!("cluster"));
    for method in &node_methods() {
        let session = json!({ "session": { "id": "session-1", "generation": 1,
            "controller": { "kind": "cloudly", "id": "ctl-1" }, "clusterId": "c1", "nodeId": "node-1",
            "runtimeNamespace": "ns-main" } });
        let request = if *method == methods::name::OPEN_RUNTIME_SESSION {
            let node = (&json!("c1"), &json!("node-1"));
            wire::to_request(&wire::OpenRuntimeSession {
                cluster_id: node.0,
                node_id: node.1,
                bearer: &created["bearer"],
            })
        } else {
            session
        };
        let refused = flow.refused(method, None, request, "principal-refused").await;
        assert_eq!(refused, json!({ "code": "principal-refused" }), "{method} over HTTP");
    }

    // Cluster ingress registration. The accepting state, built over the wire as
    // `tests/support/ingress.rs` does: c1's current designation (generation 2), node-1's session
    // on `/typedsocket` (the same router, served over TCP) whose ingress assignment resolved its
    // bearer and reported `ready`, and the cluster's elected relay connection (`reconnected`). The node
    // methods answer successfully here, on the socket.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("a port");
    let address = listener.local_addr().expect("an address");
    let served = flow.app.clone();
    let server = tokio::spawn(async move { axum::serve(listener, served).await });
    let (socket, _) =
        tokio_tungstenite::connect_async(format!("ws://{address}/typedsocket")).await.expect("the socket upgrades");
    flow.socket = Some(socket);
    let node = (&json!("c1"), &json!("node-1"));
    let opened =
        wire::to_request(&wire::OpenRuntimeSession { cluster_id: node.0, node_id: node.1, bearer: &created["bearer"] });
    let session = flow.node_ok(methods::name::OPEN_RUNTIME_SESSION, opened).await["session"].clone();
    let of_session = wire::to_request(&wire::GetRuntimeAssignments { session: &session });
    let assignments = flow.node_ok(methods::name::GET_RUNTIME_ASSIGNMENTS, of_session.clone()).await;
    let assignment = assignments["assignments"]
        .as_array()
        .expect("assignments")
        .iter()
        .map(|signed| signed["payload"].clone())
        .find(|payload| payload["serviceId"] == json!("ingress"))
        .expect("node-1 runs an ingress replica");
    let assignment = reference_of(&assignment);
    let resolve = wire::to_request(&wire::ResolveRuntimeSecretBindings { session: &session, assignment: &assignment });
    let values = flow.node_ok(methods::name::RESOLVE_RUNTIME_SECRET_BINDINGS, resolve).await;
    let bearer = values["values"]
        .as_array()
        .expect("values")
        .iter()
        .find(|value| value["name"] == json!("SERVEZONE_CLUSTER_INGRESS_BEARER"))
        .and_then(|value| value["value"].as_str())
        .expect("the ingress bearer")
        .to_owned();
    let ready =
        wire::ReportRuntimeAssignmentState { session: &session, assignment: &assignment, state: &json!("ready") };
    flow.node_ok(methods::name::REPORT_RUNTIME_ASSIGNMENT_STATE, wire::to_request(&ready)).await;
    // The node's signed projection: fetched, reported applied, then current (`null` for a known
    // reference); an administrator reads it with its application; an unknown generation is
    // `not-found`.
    let fetch = wire::to_request(&wire::GetRuntimeNetworkProjection { session: &session, known: &Value::Null });
    let fetched = flow.node_ok(methods::name::GET_RUNTIME_NETWORK_PROJECTION, fetch).await;
    let projection = fetched["projection"]["payload"].clone();
    assert_eq!(projection["nodeId"], json!("node-1"), "{fetched}");
    let applied = reference_of(&projection);
    let report =
        wire::to_request(&wire::ReportRuntimeNetworkProjectionApplied { session: &session, applied: &applied });
    let recorded = flow.node_ok(methods::name::REPORT_RUNTIME_NETWORK_PROJECTION_APPLIED, report).await;
    assert_eq!(recorded, json!({ "recorded": true }));
    // Background reconciles of earlier writes may still issue newer generations; once the node
    // knows the current one, the answer is `null`.
    let mut known = applied.clone();
    let mut answered_null = false;
    for _ in 0..50 {
        let asked = wire::to_request(&wire::GetRuntimeNetworkProjection { session: &session, known: &known });
        let answer = flow.node_ok(methods::name::GET_RUNTIME_NETWORK_PROJECTION, asked).await;
        if answer == json!({ "projection": null }) {
            answered_null = true;
            break;
        }
        known = reference_of(&answer["projection"]["payload"]);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(answered_null, "a known current projection is answered with null");
    let for_node = json!({ "clusterId": "c1", "nodeId": "node-1" });
    let for_node = flow.ok("getRuntimeNetworkProjectionForNode", Some(&viewer), for_node).await;
    assert_eq!(for_node["applied"], applied);
    let mut unknown = applied.clone();
    unknown["generation"] = json!(9);
    let unknown =
        wire::to_request(&wire::ReportRuntimeNetworkProjectionApplied { session: &session, applied: &unknown });
    let missing = flow.node(methods::name::REPORT_RUNTIME_NETWORK_PROJECTION_APPLIED, unknown).await;
    let missing = missing.expect_err("an unknown generation");
    assert_eq!(missing["what"], json!("projection"));

    let elected = second_token.as_str();
    let table = flow.ok("getClusterIngressRoutes", Some(&viewer), json!({ "clusterId": "c1" })).await["table"].clone();
    let accepted = flow
        .relay("registerClusterIngress", elected, ingress_registration(&bearer, "node-1"))
        .await
        .unwrap_or_else(|data| panic!("registerClusterIngress: {data}"));
    assert_eq!(
        accepted,
        json!({ "accepted": true, "revision": table["revision"], "protocol": CLUSTER_INGRESS_PROTOCOL }),
        "the route table revision and the controller's offer"
    );
    // Without capabilities, and offering more versions than the controller speaks: the shared
    // version is negotiated.
    let mut bare = ingress_registration(&bearer, "node-1");
    bare.as_object_mut().expect("an object").remove("capabilities");
    bare["protocol"]["maximum"] = json!(3);
    flow.relay("registerClusterIngress", elected, bare).await.unwrap_or_else(|data| panic!("without: {data}"));

    let listed = flow.ok("listClusterIngressRegistrations", Some(&viewer), json!({ "clusterId": "c1" })).await;
    assert!(listed["nextBefore"].is_null(), "one page");
    let registrations = listed["registrations"].as_array().expect("registrations").clone();
    assert_eq!(registrations.len(), 2, "both accepted registrations are recorded");
    let (newest, oldest) = (&registrations[0], &registrations[1]);
    assert!(newest["sequence"].as_u64() > oldest["sequence"].as_u64(), "newest first");
    assert!(newest.get("capabilities").is_none(), "absent when the ingress sent none: {newest}");
    assert_eq!(oldest["capabilities"], json!(["http2", "websocket"]));
    for registration in &registrations {
        assert_eq!(registration["clusterId"], json!("c1"));
        assert_eq!(registration["nodeId"], json!("node-1"));
        assert_eq!(registration["version"], json!("1.4.2"));
        assert_eq!(registration["protocolVersion"], json!(1));
        let connection = &reconnected["connection"];
        assert_eq!(
            registration["relayConnection"],
            json!({ "id": connection["id"], "relayId": connection["relayId"], "epoch": connection["epoch"] })
        );
        assert_eq!(registration["designation"], current);
        assert_eq!(registration["assignment"], assignment);
        assert_eq!(registration["session"], json!({ "id": session["id"], "generation": session["generation"] }));
    }
    let page = json!({ "clusterId": "c1", "nodeId": "node-1", "limit": 1 });
    let page = flow.ok("listClusterIngressRegistrations", Some(&operator), page).await;
    assert_eq!(page["registrations"], json!([newest]));
    assert_eq!(page["nextBefore"], newest["sequence"]);
    let page = json!({ "clusterId": "c1", "before": page["nextBefore"], "limit": 500 });
    let page = flow.ok("listClusterIngressRegistrations", Some(&admin), page).await;
    assert_eq!(page, json!({ "registrations": [oldest], "nextBefore": null }));
    let none = json!({ "clusterId": "c1", "nodeId": "node-2" });
    let none = flow.ok("listClusterIngressRegistrations", Some(&viewer), none).await;
    assert_eq!(none, json!({ "registrations": [], "nextBefore": null }));
    let missing = json!({ "clusterId": "nope" });
    let missing = flow.refused("listClusterIngressRegistrations", Some(&viewer), missing, "not-found").await;
    assert_eq!(missing["what"], json!("cluster"));
    let invalid = json!({ "clusterId": "c1", "limit": 501 });
    flow.refused("listClusterIngressRegistrations", Some(&viewer), invalid, "request-invalid").await;

    // A runtime local storage claim: pushed down node-1's socket, answered `uncertain` there, and
    // resolved by an administrator.
    let mut db = runnable_spec_body("c1", "db");
    db["replicas"] = json!(1);
    db["placement"] = json!({ "nodeIds": ["node-1"] });
    db["volumes"] = json!([{ "id": "data", "mountPath": "/var/lib/db", "readOnly": false, "driver": "local",
        "driverOptions": [], "mountOptions": [],
        "initialization": { "kind": "empty", "ownership": { "uid": 1000, "gid": 1000, "mode": 488 } } }]);
    flow.ok("putServiceRuntimeSpec", Some(&admin), json!({ "spec": db, "expectedRevision": null })).await;
    let mut uncertain = None;
    for _ in 0..200 {
        flow.node_ok(methods::name::GET_RUNTIME_ASSIGNMENTS, of_session.clone()).await;
        let listed = flow.ok("listRuntimeLocalStorageClaims", Some(&viewer), json!({ "clusterId": "c1" })).await;
        let claim = listed["claims"][0].clone();
        if claim["node"]["state"] == json!("uncertain") {
            uncertain = Some(claim);
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let uncertain = uncertain.expect("node-1 answered the claim push");
    let decided = json!({ "claim": reference_of(&uncertain["claim"]), "decision": "rebind" });
    let resolved = flow.ok("resolveRuntimeLocalStorageClaim", Some(&admin), decided.clone()).await;
    assert_eq!(resolved["claim"]["claim"]["generation"], json!(2));
    let missing = flow.refused("resolveRuntimeLocalStorageClaim", Some(&admin), decided, "not-found").await;
    assert_eq!(missing["what"], json!("storage-claim"));
    flow.refused("listRuntimeLocalStorageClaims", Some(&viewer), json!({ "clusterId": "nope" }), "not-found").await;
    flow.refused("listClusterIngressRegistrations", None, json!({ "clusterId": "c1" }), "identity-refused").await;

    // The protocol is judged before anything else: any `request` value, with or without a token.
    flow.protocol_refused(elected, Value::Null).await;
    flow.protocol_refused(None, json!("registration")).await;
    flow.protocol_refused(None, json!({ "identity": admin, "zz": 1 })).await;
    let mut newer = ingress_registration(&bearer, "node-1");
    newer["protocol"] = json!({ "name": "serve.zone/cluster-ingress", "minimum": 2, "maximum": 3 });
    flow.protocol_refused(elected, newer).await;
    let mut other = ingress_registration(&bearer, "node-1");
    other["protocol"]["name"] = json!("serve.zone/other");
    flow.protocol_refused(elected, other).await;
    // Then the named refusals, each reached with every earlier check passing, and the earliest of
    // several failing checks answering.
    let mut unknown = ingress_registration(&bearer, "node-1");
    unknown["zz"] = json!(1);
    flow.registration_refused(elected, unknown.clone(), RefusalReason::RegistrationInvalid).await;
    flow.registration_refused(None, unknown, RefusalReason::RegistrationInvalid).await;
    let mut with_identity = ingress_registration(&bearer, "node-1");
    with_identity["identity"] = admin.clone();
    flow.registration_refused(elected, with_identity, RefusalReason::RegistrationInvalid).await;
    for jwt in [None, first_token.as_str(), Some("szrc_unknown")] {
        flow.registration_refused(jwt, ingress_registration(&bearer, "node-1"), RefusalReason::RelayNotConnected).await;
    }
    flow.registration_refused(elected, ingress_registration(&bearer, "node-9"), RefusalReason::NodeMismatch).await;
    let not_running = ingress_registration(&bearer, "node-2");
    flow.registration_refused(elected, not_running, RefusalReason::AssignmentNotRunning).await;
    let wrong = ingress_registration("szci_not-the-designated-bearer", "node-1");
    flow.registration_refused(elected, wrong, RefusalReason::BearerRefused).await;
    // A cluster with a relay and no designation.
    let c3 = json!({ "cluster": cluster("c3", "pallet", json!("https://relay3.example.net"), Value::Null),
                     "expectedRevision": null });
    flow.ok("putCluster", Some(&admin), c3).await;
    let relay3 = json!({ "clusterId": "c3", "relayId": "relay-3" });
    let issued3 = flow.ok("issueClusterRelayCredential", Some(&admin), relay3).await;
    let connect3 =
        wire::ConnectClusterRelay { cluster_id: &json!("c3"), relay_id: &json!("relay-3"), bearer: &issued3["bearer"] };
    let token3 =
        flow.ok(methods::name::CONNECT_CLUSTER_RELAY, None, wire::to_request(&connect3)).await["token"].clone();
    let undesignated = ingress_registration(&bearer, "node-1");
    flow.registration_refused(token3.as_str(), undesignated, RefusalReason::IngressNotDesignated).await;
    // `conflict`: the designation rotates between the judge's reads and its commit.
    let controller = state.controller.clone();
    let revision = second["designation"]["preparedSpecRevision"].as_u64().expect("a spec revision");
    let mut rotation = designation("m6", 3, revision, current.clone());
    rotation["identity"] = admin.clone();
    let rotation = Arc::new(Mutex::new(Some(rotation)));
    let gated = controller.clone();
    controller.set_registration_commit_gate(Some(Arc::new(move || {
        let controller = gated.clone();
        let rotation = rotation.lock().expect("not poisoned").take();
        Box::pin(async move {
            if let Some(rotation) = rotation {
                methods::call(&controller, "designateClusterIngress", &rotation)
                    .await
                    .expect("the designation rotates");
            }
        })
    })));
    flow.registration_refused(elected, ingress_registration(&bearer, "node-1"), RefusalReason::Conflict).await;
    controller.set_registration_commit_gate(None);
    let listed = flow.ok("listClusterIngressRegistrations", Some(&viewer), json!({ "clusterId": "c1" })).await;
    assert_eq!(listed["registrations"].as_array().map(Vec::len), Some(2), "no refusal is recorded");
    if let Some(mut socket) = flow.socket.take() {
        let _ = socket.close(None).await;
    }
    server.abort();

    let mut succeeded = method_set();
    for method in node_methods() {
        succeeded.remove(method);
    }
    assert_eq!(flow.succeeded, succeeded, "every method but the node methods answered successfully over HTTP");
    let on_socket: BTreeSet<String> = node_methods().into_iter().map(str::to_owned).collect();
    assert_eq!(flow.succeeded_on_socket, on_socket, "the node methods answered successfully on the socket");

    // A store that does not answer: `registerClusterIngress` cannot judge, `not-ready` (before
    // `relay-not-connected`), where every other method answers `store-unavailable`.
    let closed = SqlStore::connect("sqlite::memory:").await.expect("open");
    closed.migrate().await.expect("migrate");
    closed.close().await;
    let (down, _) = app_over(Arc::new(closed), keys.clone(), Limits::default());
    let mut unavailable = Flow::new(down, keys.clone());
    unavailable.refused("listClusters", Some(&admin), json!({}), "store-unavailable").await;
    unavailable.registration_refused(None, ingress_registration(&bearer, "node-1"), RefusalReason::NotReady).await;
    flow.codes.extend(unavailable.codes);

    // A store that holds every request past its time limit (its one connection is taken): a
    // timed-out `registerClusterIngress` answers `not-ready`, every other method
    // `store-unavailable`. A draining controller answers `not-ready` without asking the store,
    // and the protocol is still judged first.
    let options = SqliteConnectOptions::from_str("sqlite::memory:").expect("a SQLite URL").foreign_keys(true);
    let pool = SqlitePoolOptions::new()
        .max_connections(1)
        .min_connections(1)
        .idle_timeout(None)
        .max_lifetime(None)
        .acquire_timeout(Duration::from_secs(120))
        .connect_with(options)
        .await
        .expect("open");
    let held_store = SqlStore::from_sqlite_pool(pool.clone());
    held_store.migrate().await.expect("migrate");
    let held = pool.acquire().await.expect("the store's one connection");
    let request_timeout = Duration::from_millis(200);
    let limits = Limits { request_timeout, ..Limits::default() };
    let (stuck, stuck_state) = app_over(Arc::new(held_store), keys.clone(), limits);
    let mut timing_out = Flow::new(stuck, keys);
    timing_out.refused("listClusters", Some(&admin), json!({}), "store-unavailable").await;
    let started = Instant::now();
    timing_out.registration_refused(elected, ingress_registration(&bearer, "node-1"), RefusalReason::NotReady).await;
    assert!(started.elapsed() >= request_timeout, "answered by the request timeout");
    stuck_state.controller.begin_draining();
    let started = Instant::now();
    timing_out.registration_refused(elected, ingress_registration(&bearer, "node-1"), RefusalReason::NotReady).await;
    assert!(started.elapsed() < request_timeout, "a draining controller does not ask the store");
    timing_out.protocol_refused(elected, json!({})).await;
    drop(held);
    flow.codes.extend(timing_out.codes);

    // Every documented code is seen on the wire here or in the paths test, except
    // `internal-error`, which no request can provoke (it is checked from `DomainError`).
    let mut expected = string_set(&schema("ErrorCode")["enum"]);
    for elsewhere in ["internal-error", "malformed-envelope", "body-too-large", "body-timeout", "overloaded"] {
        expected.remove(elsewhere);
    }
    assert_eq!(flow.codes, expected, "the codes seen on the wire");
}

/// The answer-envelope schemas are strict enough to tell a success from an error.
#[test]
fn an_answer_is_either_a_response_or_an_error() {
    let success = json!({ "method": "listClusters", "request": null, "response": { "clusters": [] }, "correlation": { "phase": "response" } });
    assert_fits_named("listClustersAnswerEnvelope", &success);
    let mut both = success.clone();
    both["error"] = json!({ "text": "x", "data": { "code": "internal-error" } });
    assert!(!violations(&schema_ref("listClustersAnswerEnvelope"), &both).is_empty(), "an error with a response");
    let mut neither = success.clone();
    neither["response"] = Value::Null;
    assert!(!violations(&schema_ref("listClustersAnswerEnvelope"), &neither).is_empty(), "no response and no error");
    let mut echoed = success;
    echoed["request"] = json!({});
    assert!(!violations(&schema_ref("TypedAnswerEnvelope"), &echoed).is_empty(), "a request is never echoed");
    // `registerClusterIngress` answers only its own refusals, each text with its data.
    let refused = |error: Value| {
        json!({ "method": "registerClusterIngress", "request": null, "response": null, "error": error,
                "correlation": { "phase": "response" } })
    };
    let refusal = json!({ "code": "cluster-ingress-registration-refused", "reason": "conflict", "retryAfterMs": 1000 });
    let named = refused(json!({ "text": "cluster ingress registration refused: conflict", "data": refusal }));
    assert_fits_named("registerClusterIngressAnswerEnvelope", &named);
    for wrong in [
        json!({ "text": "store unavailable", "data": { "code": "store-unavailable", "retryAfterMs": 1000 } }),
        json!({ "text": "request invalid", "data": { "code": "request-invalid", "violations": ["x"] } }),
        json!({ "text": "principal refused", "data": { "code": "principal-refused" } }),
        json!({ "text": "protocol refused", "data": refusal }),
        json!({ "text": "cluster ingress registration refused: conflict",
                "data": ProtocolRefusal::controller().to_value() }),
    ] {
        let answer = refused(wrong.clone());
        assert!(!violations(&schema_ref("registerClusterIngressAnswerEnvelope"), &answer).is_empty(), "{wrong}");
    }
    // The checker itself refuses what it should.
    assert!(!violations(&schema_ref("IngressCapabilities"), &json!(["http2", "http2"])).is_empty());
    assert!(violations(&schema_ref("IngressCapabilities"), &json!(["http2", "websocket"])).is_empty());
    assert!(!violations(&schema_ref("Id"), &json!("")).is_empty());
    assert!(
        !violations(&schema_ref("IRuntimeAuthorityReference"), &json!({ "id": "a", "generation": 0, "digest": "d" }))
            .is_empty()
    );
}
