//! Bad input, automated, below the wire: a bounded, seeded fuzz run (proptest on stable) of the
//! envelope reader (`api::envelope::read_request` / `read_frame`, over the contract's strict and
//! plain JSON text readers) and every snapshot and reader of the contract, fed with mutations of
//! the documents in `tests/vectors/` (and a few built here for the record kinds the vectors do
//! not carry: assignment, address plan, protected authority, service status, inventory).
//!
//! A case is one seed document with one structural mutation (a key repeated in one object, one
//! value replaced by an edge number or another raw token, a value nested hundreds deep, a huge
//! string, a member dropped) and up to three byte mutations (a byte or bit flipped, a cut, a
//! deletion, an insertion). Each case must not panic, and:
//! - the envelope reader agrees with the strict reader: JSON that is no object is malformed; an
//!   object with a string `method` and a `request` (and no non-string `correlation.id`) is an
//!   envelope whose request is exactly the text's `request`; a text that breaks a raw-text rule is
//!   malformed or carries the rule (or, for `registerClusterIngress`, its plain reading);
//! - a projection read from text (`snapshot_runtime_network_projection_text`) is the snapshot of
//!   the text's strict reading, and one is refused exactly when the other is;
//! - whatever a snapshot or reader accepts serializes back to exactly the value it read (one
//!   record, one serialization), and that serialization's canonical text reads back to the same
//!   record: re-snapshotting is stable.
//!
//! Four groups (records, envelopes, plain data, signed records) run 25 000 cases each from a
//! fixed seed, so every run tries the same 100 000 inputs; each prints its count.

mod support;

use cloudly::api::envelope::{Frame, read_frame, read_request};
use cloudly::contract::assignment::snapshot_runtime_assignment;
use cloudly::contract::designation::{
    snapshot_cluster_ingress_designation, snapshot_cluster_ingress_designation_request,
};
use cloudly::contract::dispatch;
use cloudly::contract::inventory::{parse_cluster, parse_node, parse_organization, parse_service_spec_body};
use cloudly::contract::json::{TextError, canonical, parse_plain_text, parse_record_text};
use cloudly::contract::network::address_plan::{
    seal_runtime_network_address_plan, snapshot_runtime_network_address_plan,
};
use cloudly::contract::network::authority::{
    compose_runtime_network_protected_authority, snapshot_runtime_network_protected_authority,
};
use cloudly::contract::network::lease::snapshot_runtime_network_lease;
use cloudly::contract::network::projection::{
    RuntimeNetworkProjection, admit_runtime_network_projection,
    get_runtime_network_projection_workload_ingress_packet_grants, snapshot_runtime_network_projection,
};
use cloudly::contract::network::text::snapshot_runtime_network_projection_text;
use cloudly::contract::registration::{
    ProtocolRefusal, parse_cluster_ingress_registration, read_cluster_ingress_registration_refusal,
    read_cluster_ingress_route_table_change, read_protocol_offer, read_protocol_refusal,
};
use cloudly::contract::service_status::snapshot_service_runtime_status;
use cloudly::contract::session::RuntimeSessionReference;
use cloudly::contract::signing::{PublishedKey, decode_public_key, verify};
use cloudly::contract::storage_claim::{
    ApplyRuntimeLocalStorageClaimRequest, ApplyRuntimeLocalStorageClaimResponse, RuntimeLocalStorageClaim,
    snapshot_runtime_local_storage_claim,
};
use cloudly::contract::{DigestedRecord, Id, RecordKind};
use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::{Config, RngSeed, TestCaseError, TestRunner};
use serde_json::{Value, json};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

/// The run's seed: every run tries the same inputs.
const SEED: u64 = 20_261_204;
/// Cases of each of the four groups.
const CASES_PER_GROUP: u32 = 25_000;

// ---------------------------------------------------------------------------------------------
// The readers under test.

/// A snapshot or reader: the value it accepted, serialized back, or `None` when it refused.
type Reader = fn(&Value) -> Option<Value>;

/// Every snapshot and reader of a value, by its seed name, and whether what it accepts is a record
/// whose canonical text reads back through the strict reader (plain data may hold `1.5`).
const READERS: &[(&str, Reader, bool)] = &[
    ("snapshotClusterIngressDesignation", |v| snapshot_cluster_ingress_designation(v).ok().map(|r| r.to_value()), true),
    (
        "snapshotClusterIngressDesignationRequest",
        |v| snapshot_cluster_ingress_designation_request(v).ok().map(|r| serde_json::to_value(r).unwrap()),
        true,
    ),
    ("snapshotRuntimeLocalStorageClaim", |v| snapshot_runtime_local_storage_claim(v).ok().map(|r| r.to_value()), true),
    ("snapshotRuntimeNetworkProjection", |v| snapshot_runtime_network_projection(v).ok().map(|r| r.to_value()), true),
    ("snapshotRuntimeNetworkLease", |v| snapshot_runtime_network_lease(v).ok().map(|r| r.to_value()), true),
    (
        "snapshotRuntimeNetworkAddressPlan",
        |v| snapshot_runtime_network_address_plan(v).ok().map(|r| r.to_value()),
        true,
    ),
    (
        "snapshotRuntimeNetworkProtectedAuthority",
        |v| snapshot_runtime_network_protected_authority(v).ok().map(|r| r.to_value()),
        true,
    ),
    ("snapshotRuntimeAssignment", |v| snapshot_runtime_assignment(v).ok().map(|r| r.to_value()), true),
    ("snapshotServiceRuntimeStatus", |v| snapshot_service_runtime_status(v).ok().map(|r| r.to_value()), true),
    (
        "ApplyRuntimeLocalStorageClaimRequest",
        |v| ApplyRuntimeLocalStorageClaimRequest::read(v).ok().map(|r| r.to_value()),
        true,
    ),
    (
        "ApplyRuntimeLocalStorageClaimResponse",
        |v| ApplyRuntimeLocalStorageClaimResponse::read(v).ok().map(|r| r.to_value()),
        true,
    ),
    ("readProtocolRefusal", |v| read_protocol_refusal(v).map(|r| r.to_value()), true),
    (
        "readClusterIngressRegistrationRefusal",
        |v| read_cluster_ingress_registration_refusal(v).map(|r| r.to_value()),
        true,
    ),
    (
        "readClusterIngressRouteTableChange",
        |v| read_cluster_ingress_route_table_change(v).map(|r| serde_json::to_value(r).unwrap()),
        true,
    ),
    ("RuntimeSessionReference", |v| RuntimeSessionReference::read(v).ok().map(|r| r.to_value()), true),
    ("parseOrganization", |v| parse_organization(v).ok().map(|r| serde_json::to_value(r).unwrap()), true),
    ("parseCluster", |v| parse_cluster(v).ok().map(|r| serde_json::to_value(r).unwrap()), true),
    ("parseNode", |v| parse_node(v).ok().map(|r| serde_json::to_value(r).unwrap()), true),
    ("parseServiceSpecBody", |v| parse_service_spec_body(v).ok().map(|r| serde_json::to_value(r).unwrap()), true),
];

/// How many times a reader accepted, over the whole run (a run in which none accepts tried
/// nothing but refusals).
static ACCEPTED: AtomicU64 = AtomicU64::new(0);

fn published_keys() -> &'static [PublishedKey] {
    static KEYS: OnceLock<Vec<PublishedKey>> = OnceLock::new();
    KEYS.get_or_init(|| {
        let vector = support::load_vector("signatures.json");
        vec![PublishedKey::new(decode_public_key(vector["publicKey"].as_str().unwrap()).unwrap())]
    })
}

/// Every reader on `value`; what one accepts serializes back to exactly `value`, and its
/// canonical text reads back to the same record.
fn exercise_readers(value: &Value) -> Result<(), TestCaseError> {
    for (name, read, record) in READERS {
        let Some(written) = read(value) else { continue };
        ACCEPTED.fetch_add(1, Ordering::Relaxed);
        prop_assert_eq!(&written, value, "{} accepted a value it does not write back", name);
        if *record {
            let text = canonical(&written).map_err(|error| TestCaseError::fail(format!("{name}: {error}")))?;
            let reread = parse_record_text(&text).map_err(|error| TestCaseError::fail(format!("{name}: {error}")))?;
            prop_assert_eq!(read(&reread), Some(written), "{} is not stable over its canonical text", name);
        }
    }
    Ok(())
}

/// [`exercise_readers`], the validators, the projection's admission and grants, and the signed
/// record verification on `value`.
fn exercise_value(value: &Value) -> Result<(), TestCaseError> {
    exercise_readers(value)?;
    // The validators (the snapshots above are what `dispatch::digest` and `snapshot_value` run).
    for kind in RecordKind::ALL {
        let _ = dispatch::validate(kind, value);
    }
    let _ = parse_cluster_ingress_registration(value);
    let _ = read_protocol_offer(value);
    let _ = get_runtime_network_projection_workload_ingress_packet_grants(value);
    let _ = admit_runtime_network_projection(None, value, None);
    if let Ok(payload) = verify::<RuntimeNetworkProjection>(value, published_keys()) {
        prop_assert_eq!(&payload.to_value(), &value["payload"]);
    }
    if let Ok(payload) = verify::<RuntimeLocalStorageClaim>(value, published_keys()) {
        prop_assert_eq!(&payload.to_value(), &value["payload"]);
    }
    Ok(())
}

/// [`exercise_value`] on `value`, and the readers on the objects inside it where a record may
/// be found: its members (an envelope's `request`) and theirs (a request's record).
fn exercise_value_and_members(value: &Value) -> Result<(), TestCaseError> {
    exercise_value(value)?;
    if let Value::Object(members) = value {
        for member in members.values().filter(|member| member.is_object()) {
            exercise_readers(member)?;
            for inner in member.as_object().into_iter().flat_map(|inner| inner.values()) {
                if inner.is_object() {
                    exercise_readers(inner)?;
                }
            }
        }
    }
    Ok(())
}

/// Every reader of a text.
fn exercise_text(text: &str) -> Result<(), TestCaseError> {
    let strict = parse_record_text(text);
    let plain = parse_plain_text(text);
    // The plain reader refuses exactly what no JSON value holds (and every text the strict one
    // refuses as not JSON).
    if let Err(TextError::NotJson(_)) = strict {
        prop_assert!(matches!(plain, Err(TextError::NotJson(_))), "plain reads what strict finds no JSON");
    }
    if let Ok(value) = &strict {
        prop_assert_eq!(plain.as_ref().ok(), Some(value), "plain and strict read a record differently");
    }

    // The projection's text reader is the snapshot of the strict reading.
    let from_text = snapshot_runtime_network_projection_text(text).ok().map(|projection| projection.to_value());
    let from_value = strict.as_ref().ok().and_then(|value| snapshot_runtime_network_projection(value).ok());
    prop_assert_eq!(
        from_text,
        from_value.map(|projection| projection.to_value()),
        "projection text and value disagree"
    );

    check_envelope(text, &strict)?;
    if let Ok(Frame::Response { answer, .. }) = read_frame(text) {
        let (Ok(value) | Err(value)) = answer;
        exercise_value(&value)?;
    }

    match (&strict, &plain) {
        (Ok(value), _) => exercise_value_and_members(value)?,
        (Err(_), Ok(value)) => exercise_value_and_members(value)?,
        _ => {}
    }
    Ok(())
}

/// The envelope reader against the strict reader.
fn check_envelope(text: &str, strict: &Result<Value, TextError>) -> Result<(), TestCaseError> {
    let envelope = read_request(text);
    match strict {
        Err(TextError::NotJson(_)) => prop_assert!(envelope.is_err(), "an envelope read from no JSON"),
        Ok(Value::Object(members)) => {
            let id_not_string = members
                .get("correlation")
                .and_then(|correlation| correlation.get("id"))
                .is_some_and(|id| !id.is_string());
            let is_envelope = members.get("method").is_some_and(Value::is_string)
                && members.contains_key("request")
                && !id_not_string;
            match envelope {
                Ok(envelope) => {
                    prop_assert!(is_envelope, "an envelope read from a text that is none");
                    prop_assert_eq!(Some(&Value::String(envelope.method)), members.get("method"));
                    prop_assert_eq!(envelope.request.as_ref().ok(), members.get("request"));
                }
                Err(_) => prop_assert!(!is_envelope, "an envelope refused as malformed"),
            }
        }
        Ok(_) => prop_assert!(envelope.is_err(), "an envelope read from JSON that is no object"),
        Err(rule) => {
            if let Ok(envelope) = envelope {
                match envelope.request {
                    Err(read_rule) => prop_assert_eq!(
                        format!("{read_rule:?}"),
                        format!("{rule:?}"),
                        "the envelope carries another rule than the text breaks"
                    ),
                    Ok(request) => {
                        prop_assert_eq!(envelope.method.as_str(), "registerClusterIngress");
                        exercise_value(&request)?;
                    }
                }
            }
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Seeds.

/// The seed documents of one group, as JSON values.
fn record_seeds() -> Vec<Value> {
    let mut seeds = Vec::new();
    let designations = support::load_vector("cluster-ingress-designation.json");
    for key in ["valid", "invalid"] {
        seeds.extend(designations[key].as_array().unwrap().iter().map(|case| case["record"].clone()));
    }
    let claims = support::load_vector("runtime-local-storage-claim.json");
    for key in ["valid", "invalid"] {
        seeds.extend(claims[key].as_array().unwrap().iter().map(|case| case["record"].clone()));
    }
    let projections = support::load_vector("runtime-network-projection.json");
    for key in ["valid", "invalid"] {
        for case in projections[key].as_array().unwrap() {
            seeds.push(case["projection"].clone());
            let endpoints = case["projection"]["endpoints"].as_array().into_iter().flatten();
            seeds.extend(endpoints.map(|endpoint| endpoint["lease"].clone()));
        }
    }
    for case in projections["admissions"].as_array().unwrap() {
        seeds.push(case["next"].clone());
    }
    seeds.extend(built_records());
    seeds
}

/// Valid records of the kinds the vectors do not carry.
fn built_records() -> Vec<Value> {
    let plan = seal_runtime_network_address_plan(&json!({
        "clusterId": "c1", "revision": 3, "prefixes": ["10.64.0.0/16", "192.0.2.16/28"],
        "pools": [{ "id": "pool-org", "organizationId": "org", "prefix": "10.64.0.0/20" }],
        "vpn": null, "hubs": [],
        "platformEndpoints": [{ "id": "corestore", "address": "192.0.2.17", "protocol": "tcp", "port": 9000 }],
    }))
    .unwrap();
    let typed_plan = snapshot_runtime_network_address_plan(&plan).unwrap();
    let authority =
        compose_runtime_network_protected_authority(&Id::parse("c1").unwrap(), None, &typed_plan).unwrap().to_value();
    let mut assignment = json!({
        "id": "asg-1", "generation": 2,
        "previous": { "id": "asg-1", "generation": 1, "digest": format!("sha256:{}", "a".repeat(64)) },
        "controller": { "kind": "cloudly", "id": "ctl-1" },
        "organizationId": "org-1", "clusterId": "c1", "nodeId": "node-1", "runtimeNamespace": "ns-1",
        "serviceId": "svc-1", "specRevision": 4,
        "workload": {
            "image": "registry.example/app:1",
            "environment": [{ "name": "A", "value": "1" }],
            "ports": [],
            "storage": [{ "id": "lsc-1", "generation": 1, "digest": format!("sha256:{}", "b".repeat(64)) }],
        },
        "digest": format!("sha256:{}", "0".repeat(64)),
    });
    let digest = snapshot_runtime_assignment(&assignment).unwrap().compute_digest();
    assignment["digest"] = json!(digest.as_str());
    let status = json!({ "id": "svc-1", "specRevision": 4, "state": "waiting", "reason": "conflict", "changedAt": 1 });
    let claims = support::load_vector("runtime-local-storage-claim.json");
    let claim = &claims["valid"][0]["record"];
    let apply_claim = json!({
        "session": { "id": "session-1", "generation": 1, "controller": claim["controller"], "clusterId": claim["clusterId"],
                     "nodeId": claim["nodeId"], "runtimeNamespace": claim["runtimeNamespace"] },
        "claim": claim,
    });
    let session = apply_claim["session"].clone();
    vec![plan, authority, assignment, status, apply_claim, session]
}

fn identity() -> Value {
    json!({ "name": "n", "userId": "u", "type": "human", "role": "admin", "expiresAt": 1, "jwt": "a.b.c" })
}

/// Plain data and inventory: registrations, refusals, route table changes, statuses, designation
/// requests, canonical-form vectors, inventory records.
fn plain_seeds() -> Vec<Value> {
    let mut seeds = Vec::new();
    let registrations = support::load_vector("cluster-ingress-registration.json");
    for key in ["registrations", "registrationShapeErrors", "refusals", "routeTableChanges"] {
        seeds.extend(registrations[key].as_array().unwrap().iter().map(|case| case["value"].clone()));
    }
    let designations = support::load_vector("cluster-ingress-designation.json");
    for key in ["valid", "invalid"] {
        let requests = designations["requests"][key].as_array().unwrap();
        seeds.extend(requests.iter().map(|case| case.get("request").unwrap_or(case).clone()));
    }
    let canonical = support::load_vector("canonical.json");
    seeds.extend(canonical.as_array().unwrap().iter().map(|case| case["value"].clone()));
    seeds.extend([
        json!({ "id": "org", "name": "Org" }),
        json!({ "id": "c1", "organizationId": "org", "runtime": { "phase": "pallet", "generation": 3 },
                "relayOrigin": null, "fleetCutoverIngressDesignation": null }),
        json!({ "id": "node-1", "runtimeNamespace": "ns-1", "hostAddresses": ["10.0.0.9", "10.0.0.10"] }),
        support::service::spec_body("c1", "svc-1"),
        ProtocolRefusal::controller().to_value(),
        json!({ "status": "accepted", "state": "ready",
                "claim": { "id": "lsc-1", "generation": 1, "digest": format!("sha256:{}", "b".repeat(64)) } }),
    ]);
    seeds
}

/// Envelopes: requests over every kind of member, answer frames, a registration.
fn envelope_seeds() -> Vec<Value> {
    let mut seeds = vec![
        json!({ "method": "listClusters", "request": { "identity": identity() },
                "correlation": { "id": "c-1", "phase": "request" } }),
        json!({ "method": "getControllerSigningKeys", "request": null, "response": null,
                "correlation": { "id": "c-2", "phase": "request" }, "localData": {}, "retry": { "n": 1 } }),
        json!({ "method": "heartbeatClusterRelay", "request": {}, "authInfo": { "jwt": "token" } }),
        json!({ "method": "noSuchMethod", "request": { "a": [1, 2, { "b": null }] } }),
        json!({ "method": "applyRuntimeLocalStorageClaim", "request": null,
                "response": { "status": "replay", "state": "ready",
                              "claim": { "id": "lsc-1", "generation": 1, "digest": format!("sha256:{}", "b".repeat(64)) } },
                "correlation": { "id": "srv-1", "phase": "response" } }),
        json!({ "method": "pushRuntimeChanged", "request": null,
                "error": { "text": "x", "data": { "code": "request-invalid", "violations": ["v"] } },
                "correlation": { "id": "srv-2", "phase": "response" } }),
    ];
    let registrations = support::load_vector("cluster-ingress-registration.json");
    for case in registrations["registrations"].as_array().unwrap().iter().take(3) {
        seeds.push(json!({ "method": "registerClusterIngress", "request": case["value"],
                           "authInfo": { "jwt": "relay-token" }, "correlation": { "id": "r-1" } }));
    }
    // Every record and plain document as the request of an envelope.
    for (index, seed) in record_seeds().into_iter().chain(plain_seeds()).enumerate() {
        let method =
            ["putCluster", "designateClusterIngress", "registerClusterIngress", "reportRuntimeAssignmentState"]
                [index % 4];
        seeds.push(json!({ "method": method, "request": seed, "correlation": { "id": format!("e-{index}") } }));
    }
    seeds
}

/// The signed records of the signature vectors.
fn signed_seeds() -> Vec<Value> {
    let vector = support::load_vector("signatures.json");
    ["valid", "invalid"]
        .iter()
        .flat_map(|key| vector[*key].as_array().unwrap().iter().map(|case| case["signed"].clone()))
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Mutations.

/// Raw tokens written in place of one value: number edges and other values a reader must judge.
const TOKENS: &[&str] = &[
    "-0",
    "0",
    "-1",
    "1.0",
    "1.5",
    "1e3",
    "1E400",
    "-1e400",
    "1e-400",
    "9007199254740991",
    "9007199254740992",
    "-9007199254740991",
    "-9007199254740992",
    "18446744073709551615",
    "18446744073709551616",
    "123456789012345678901234567890",
    "0.0",
    "-0.0",
    "00",
    "01",
    "1.",
    ".5",
    "+1",
    "NaN",
    "Infinity",
    "null",
    "true",
    "false",
    "\"\"",
    "{}",
    "[]",
    "[null]",
    "\"\\u0000\"",
    "\"\\ud800\"",
    "\"\\udc00\\ud800\"",
    "\"\\u00e9\"",
    "\"e\\u0301\"",
    "\"\u{2028}\"",
    "\"😀\"",
    "\"a\\\"b\"",
    "\"sha256:\"",
    "\"sha256:0000000000000000000000000000000000000000000000000000000000000000\"",
    "\"10.0.0.1\"",
    "\"010.0.0.1\"",
    "\"0.0.0.0/0\"",
    "\"255.255.255.255/32\"",
    "\"10.0.0.1/33\"",
    "\"-\"",
    "\"A\"",
    "\"tcp\"",
];

/// Bytes inserted into a text.
const INSERTS: &[&str] = &["{", "}", "[", "]", ",", ":", "\"", "\\", "-", "0", "e", ".", " ", "\u{feff}", "\u{0}", "é"];

/// One structural mutation, applied while the seed is written as text.
#[derive(Debug, Clone)]
enum Structural {
    None,
    /// Repeat one member of the `node`-th object (same value, or `null`).
    DuplicateKey {
        node: Index,
        member: Index,
        same: bool,
    },
    /// Write a raw token in place of the `node`-th value.
    Token {
        node: Index,
        token: Index,
    },
    /// Drop one member of the `node`-th object.
    DropMember {
        node: Index,
        member: Index,
    },
    /// Nest the `node`-th value `depth` arrays or objects deep.
    Nest {
        node: Index,
        depth: usize,
        object: bool,
    },
    /// A string of `length` copies of `unit` in place of the `node`-th value.
    HugeString {
        node: Index,
        length: usize,
        unit: char,
    },
}

/// One byte-level mutation of the written text.
#[derive(Debug, Clone)]
enum Bytes {
    Flip { at: Index, byte: u8 },
    FlipBit { at: Index, bit: u8 },
    Cut { at: Index },
    Delete { at: Index, length: u8 },
    Insert { at: Index, insert: Index },
}

/// A structural mutation (none, or one) with the byte mutations after it: at least one mutation.
fn mutations() -> impl Strategy<Value = (Structural, Vec<Bytes>)> {
    prop_oneof![
        1 => (Just(Structural::None), prop::collection::vec(bytes(), 1..=3)),
        6 => (structural(), prop::collection::vec(bytes(), 0..=3)),
    ]
}

fn structural() -> impl Strategy<Value = Structural> {
    prop_oneof![
        3 => (any::<Index>(), any::<Index>(), any::<bool>())
            .prop_map(|(node, member, same)| Structural::DuplicateKey { node, member, same }),
        5 => (any::<Index>(), any::<Index>()).prop_map(|(node, token)| Structural::Token { node, token }),
        2 => (any::<Index>(), any::<Index>()).prop_map(|(node, member)| Structural::DropMember { node, member }),
        1 => (any::<Index>(), prop_oneof![1usize..8, 100usize..140, 126usize..130, 1_000usize..2_000], any::<bool>())
            .prop_map(|(node, depth, object)| Structural::Nest { node, depth, object }),
        1 => (any::<Index>(), prop_oneof![200usize..300, 4_000usize..5_000, 60_000usize..70_000],
              prop_oneof![Just('a'), Just('é'), Just('😀'), Just('"'), Just('\u{0}')])
            .prop_map(|(node, length, unit)| Structural::HugeString { node, length, unit }),
    ]
}

fn bytes() -> impl Strategy<Value = Bytes> {
    prop_oneof![
        (any::<Index>(), any::<u8>()).prop_map(|(at, byte)| Bytes::Flip { at, byte }),
        (any::<Index>(), 0u8..8).prop_map(|(at, bit)| Bytes::FlipBit { at, bit }),
        any::<Index>().prop_map(|at| Bytes::Cut { at }),
        (any::<Index>(), 1u8..16).prop_map(|(at, length)| Bytes::Delete { at, length }),
        (any::<Index>(), any::<Index>()).prop_map(|(at, insert)| Bytes::Insert { at, insert }),
    ]
}

/// The number of values in `value` (itself included), in the order [`write`] visits them.
fn count_values(value: &Value) -> usize {
    1 + match value {
        Value::Object(members) => members.values().map(count_values).sum(),
        Value::Array(items) => items.iter().map(count_values).sum(),
        _ => 0,
    }
}

/// Writes `value` as JSON text, applying `mutation` at its target value (`target` counts the
/// values visited so far).
fn write(value: &Value, mutation: &Structural, target: usize, visited: &mut usize, out: &mut String) {
    let here = *visited == target;
    *visited += 1;
    if here {
        match mutation {
            Structural::Token { token, .. } => {
                out.push_str(TOKENS[token.index(TOKENS.len())]);
                *visited += count_values(value) - 1;
                return;
            }
            Structural::HugeString { length, unit, .. } => {
                let text: String = std::iter::repeat_n(*unit, *length).collect();
                out.push_str(&serde_json::to_string(&text).unwrap());
                *visited += count_values(value) - 1;
                return;
            }
            Structural::Nest { depth, object, .. } => {
                let (open, close) = if *object { ("{\"a\":", "}") } else { ("[", "]") };
                out.push_str(&open.repeat(*depth));
                write(value, &Structural::None, usize::MAX, visited, out);
                out.push_str(&close.repeat(*depth));
                return;
            }
            _ => {}
        }
    }
    match value {
        Value::Object(members) => {
            let entries: Vec<(&String, &Value)> = members.iter().collect();
            let dropped = match mutation {
                Structural::DropMember { member, .. } if here && !entries.is_empty() => {
                    Some(member.index(entries.len()))
                }
                _ => None,
            };
            out.push('{');
            let mut first = true;
            for (position, (key, member)) in entries.iter().enumerate() {
                if dropped == Some(position) {
                    *visited += count_values(member);
                    continue;
                }
                if !first {
                    out.push(',');
                }
                first = false;
                out.push_str(&serde_json::to_string(key).unwrap());
                out.push(':');
                write(member, mutation, target, visited, out);
            }
            if let Structural::DuplicateKey { member, same, .. } = mutation
                && here
                && !entries.is_empty()
            {
                let (key, repeated) = entries[member.index(entries.len())];
                if !first {
                    out.push(',');
                }
                out.push_str(&serde_json::to_string(key).unwrap());
                out.push(':');
                out.push_str(&if *same { serde_json::to_string(repeated).unwrap() } else { "null".to_owned() });
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (position, item) in items.iter().enumerate() {
                if position > 0 {
                    out.push(',');
                }
                write(item, mutation, target, visited, out);
            }
            out.push(']');
        }
        leaf => out.push_str(&serde_json::to_string(leaf).unwrap()),
    }
}

/// The text of `seed` after its mutations.
fn mutated_text(seed: &Value, structural: &Structural, byte_mutations: &[Bytes]) -> String {
    let target = match structural {
        Structural::None => usize::MAX,
        Structural::DuplicateKey { node, .. }
        | Structural::Token { node, .. }
        | Structural::DropMember { node, .. }
        | Structural::Nest { node, .. }
        | Structural::HugeString { node, .. } => node.index(count_values(seed)),
    };
    let mut text = String::new();
    write(seed, structural, target, &mut 0, &mut text);
    if byte_mutations.is_empty() {
        return text;
    }
    let mut bytes = text.into_bytes();
    for mutation in byte_mutations {
        let position = |at: &Index| at.index(bytes.len() + 1);
        match mutation {
            Bytes::Flip { at, byte } if !bytes.is_empty() => {
                let at = at.index(bytes.len());
                bytes[at] = *byte;
            }
            Bytes::FlipBit { at, bit } if !bytes.is_empty() => {
                let at = at.index(bytes.len());
                bytes[at] ^= 1 << bit;
            }
            Bytes::Cut { at } => bytes.truncate(position(at)),
            Bytes::Delete { at, length } => {
                let start = position(at).min(bytes.len());
                let end = (start + usize::from(*length)).min(bytes.len());
                bytes.drain(start..end);
            }
            Bytes::Insert { at, insert } => {
                let at = position(at);
                let insert = INSERTS[insert.index(INSERTS.len())].as_bytes();
                bytes.splice(at..at, insert.iter().copied());
            }
            _ => {}
        }
    }
    // The HTTP endpoint answers a body that is not UTF-8 `malformed-envelope` before any reader;
    // the readers take text.
    String::from_utf8_lossy(&bytes).into_owned()
}

// ---------------------------------------------------------------------------------------------
// The runs.

/// Runs `CASES_PER_GROUP` mutated cases of `seeds` through every reader; answers the count.
fn run_group(group: &str, group_seed: u64, seeds: Vec<Value>) -> u64 {
    assert!(seeds.len() >= 5, "{group}: the vectors gave only {} seeds", seeds.len());
    // The unmutated seeds pass every check too.
    for seed in &seeds {
        let text = serde_json::to_string(seed).unwrap();
        exercise_text(&text).unwrap_or_else(|error| panic!("{group}: seed {text}: {error}"));
    }
    let config = Config {
        cases: CASES_PER_GROUP,
        rng_seed: RngSeed::Fixed(SEED ^ group_seed),
        failure_persistence: None,
        max_shrink_iters: 2_000,
        ..Config::default()
    };
    let mut runner = TestRunner::new(config);
    let count = AtomicU64::new(0);
    let strategy = (0..seeds.len(), mutations());
    let outcome = runner.run(&strategy, |(seed, (structural, byte_mutations))| {
        count.fetch_add(1, Ordering::Relaxed);
        exercise_text(&mutated_text(&seeds[seed], &structural, &byte_mutations))
    });
    if let Err(failure) = outcome {
        panic!("{group}: {failure}");
    }
    let count = count.load(Ordering::Relaxed);
    println!("fuzz {group}: {count} cases over {} seeds", seeds.len());
    assert!(count >= u64::from(CASES_PER_GROUP), "{group}: only {count} cases ran");
    count
}

/// Every reader accepts some unmutated seed, so the write-back check runs for each of them.
#[test]
fn every_reader_accepts_a_seed() {
    let seeds: Vec<Value> = record_seeds().into_iter().chain(plain_seeds()).chain(envelope_seeds()).collect();
    for (name, read, _) in READERS {
        let accepted = seeds.iter().filter(|seed| read(seed).is_some()).count();
        assert!(accepted > 0, "{name} accepts no seed");
    }
    let keys = published_keys();
    let signed = signed_seeds();
    assert!(signed.iter().any(|seed| verify::<RuntimeNetworkProjection>(seed, keys).is_ok()), "a signed projection");
    assert!(signed.iter().any(|seed| verify::<RuntimeLocalStorageClaim>(seed, keys).is_ok()), "a signed claim");
}

#[test]
fn mutated_records_never_panic_and_what_is_read_is_stable() {
    run_group("records", 1, record_seeds());
    assert!(ACCEPTED.load(Ordering::Relaxed) > 0, "no reader accepted anything");
}

#[test]
fn mutated_envelopes_read_as_the_strict_reader_says() {
    run_group("envelopes", 2, envelope_seeds());
}

#[test]
fn mutated_plain_data_and_inventory_never_panic() {
    run_group("plain data", 3, plain_seeds());
}

#[test]
fn mutated_signed_records_never_panic() {
    run_group("signed records", 4, signed_seeds());
}
