//! The cluster ingress registration contract against `tests/vectors/cluster-ingress-registration.json`,
//! plus the controller's own refusals, protocol negotiation and bearer redaction.

mod support;

use cloudly::contract::registration::{
    CLUSTER_INGRESS_ENVIRONMENT_NAMES, CLUSTER_INGRESS_PROTOCOL, CLUSTER_INGRESS_REGISTRATION_CONTRACT,
    CLUSTER_INGRESS_REGISTRATION_PATH, CLUSTER_INGRESS_REGISTRATION_REFUSAL_PATH,
    CLUSTER_INGRESS_ROUTE_TABLE_CHANGE_PATH, ClusterIngressRegistrationRefusal, ClusterIngressRouteTableChange,
    PROTOCOL_REFUSED_TEXT, ProtocolOffer, ProtocolRefusal, RefusalReason, parse_cluster_ingress_registration,
    read_cluster_ingress_registration_refusal, read_cluster_ingress_route_table_change, read_protocol_offer,
    read_protocol_refusal, validate_cluster_ingress_registration, validate_cluster_ingress_registration_at,
    validate_cluster_ingress_registration_refusal, validate_cluster_ingress_route_table_change,
};
use serde_json::{Value, json};

const VECTOR_FILE: &str = "cluster-ingress-registration.json";

/// The list members of the vector file; every one is run, so together they count every case.
const VECTOR_LISTS: [&str; 5] =
    ["registrations", "registrationShapeErrors", "refusals", "refusalReasonsInOrder", "routeTableChanges"];

fn expected_messages(case: &Value) -> Option<Vec<String>> {
    case.get("messages").map(|messages| {
        messages
            .as_array()
            .expect("messages is a list")
            .iter()
            .map(|message| message.as_str().expect("a message is a string").to_owned())
            .collect()
    })
}

fn expected_count(case: &Value) -> usize {
    case["violations"].as_u64().expect("violations is a count") as usize
}

/// Asserts that no message quotes a string found in the input (the bearer included).
fn assert_quotes_no_input(name: &str, value: &Value, messages: &[String]) {
    fn strings<'a>(value: &'a Value, found: &mut Vec<&'a str>) {
        match value {
            Value::String(text) if text.len() >= 3 => found.push(text),
            Value::Array(items) => items.iter().for_each(|item| strings(item, found)),
            Value::Object(members) => members.values().for_each(|member| strings(member, found)),
            _ => {}
        }
    }
    let mut found = Vec::new();
    strings(value, &mut found);
    for message in messages {
        for text in &found {
            // The refusal code and the protocol name are the contract's own words, not input.
            if *text == CLUSTER_INGRESS_REGISTRATION_CONTRACT.refusal_code || *text == CLUSTER_INGRESS_PROTOCOL.name {
                continue;
            }
            assert!(!message.contains(text), "{name}: message {message:?} quotes an input value");
        }
    }
}

fn run_registrations(vector: &Value) -> usize {
    let cases = support::cases(vector, "registrations");
    for (name, case) in &cases {
        let value = &case["value"];
        let violations = validate_cluster_ingress_registration(value);
        assert_eq!(violations.len(), expected_count(case), "{name}: {violations:?}");
        assert!(
            violations.iter().all(|message| message.starts_with("cluster ingress registration ")),
            "{name}: {violations:?}"
        );
        assert!(!violations.iter().any(|message| message.ends_with("must use its exact schema")), "{name}");
        assert_quotes_no_input(name, value, &violations);
        match parse_cluster_ingress_registration(value) {
            Ok(registration) => {
                assert!(violations.is_empty(), "{name}: parsed although invalid");
                assert_eq!(registration.bearer.expose(), value["bearer"].as_str().unwrap(), "{name}");
                assert_eq!(registration.node_id.as_str(), value["nodeId"].as_str().unwrap(), "{name}");
                assert_eq!(registration.version, value["version"].as_str().unwrap(), "{name}");
                assert_eq!(registration.capabilities.is_some(), value.get("capabilities").is_some(), "{name}");
            }
            Err(parse_violations) => assert_eq!(parse_violations, violations, "{name}"),
        }
    }
    cases.len()
}

fn run_registration_shape_errors(vector: &Value) -> usize {
    let cases = support::cases(vector, "registrationShapeErrors");
    for (name, case) in &cases {
        let value = &case["value"];
        assert_eq!(
            validate_cluster_ingress_registration(value),
            ["cluster ingress registration must use its exact schema"],
            "{name}"
        );
        assert_eq!(validate_cluster_ingress_registration_at(value, "body"), ["body must use its exact schema"]);
        assert!(parse_cluster_ingress_registration(value).is_err(), "{name}");
    }
    cases.len()
}

fn run_refusals(vector: &Value) -> usize {
    let cases = support::cases(vector, "refusals");
    for (name, case) in &cases {
        let value = &case["value"];
        let violations =
            validate_cluster_ingress_registration_refusal(value, CLUSTER_INGRESS_REGISTRATION_REFUSAL_PATH);
        assert_eq!(violations.len(), expected_count(case), "{name}: {violations:?}");
        if let Some(messages) = expected_messages(case) {
            assert_eq!(violations, messages, "{name}");
        }
        assert_quotes_no_input(name, value, &violations);
        let read = read_cluster_ingress_registration_refusal(value);
        assert_eq!(read.is_some(), violations.is_empty(), "{name}");
        if let Some(refusal) = read {
            assert_eq!(&refusal.to_value(), value, "{name}: a read refusal serializes back to its input");
        }
    }
    cases.len()
}

fn run_refusal_reasons_in_order(vector: &Value) -> usize {
    let listed: Vec<&str> = vector["refusalReasonsInOrder"]
        .as_array()
        .expect("refusalReasonsInOrder is a list")
        .iter()
        .map(|reason| reason.as_str().expect("a reason is a string"))
        .collect();
    let ours: Vec<&str> = RefusalReason::ALL.iter().map(|reason| reason.as_str()).collect();
    assert_eq!(listed, ours);
    for (index, text) in listed.iter().enumerate() {
        assert_eq!(RefusalReason::parse(text), Some(RefusalReason::ALL[index]));
    }
    listed.len()
}

fn run_route_table_changes(vector: &Value) -> usize {
    let cases = support::cases(vector, "routeTableChanges");
    for (name, case) in &cases {
        let value = &case["value"];
        let messages = expected_messages(case).expect("a route table change case states its messages");
        let violations = validate_cluster_ingress_route_table_change(value, CLUSTER_INGRESS_ROUTE_TABLE_CHANGE_PATH);
        assert_eq!(violations, messages, "{name}");
        let read = read_cluster_ingress_route_table_change(value);
        assert_eq!(read.is_some(), messages.is_empty(), "{name}");
        if let Some(change) = read {
            assert_eq!(&serde_json::to_value(change).unwrap(), value, "{name}");
        }
    }
    cases.len()
}

#[test]
fn every_vector_case_passes_and_none_is_skipped() {
    let vector = support::load_vector(VECTOR_FILE);
    assert_eq!(vector["kind"], "cluster-ingress-registration");
    let members: Vec<&String> = vector.as_object().expect("the vector file is an object").keys().collect();
    for member in &members {
        assert!(
            member.as_str() == "kind" || VECTOR_LISTS.contains(&member.as_str()),
            "vector list {member} is not run by this test"
        );
    }
    let in_file: usize = VECTOR_LISTS
        .iter()
        .map(|list| vector[*list].as_array().unwrap_or_else(|| panic!("vector list {list} missing")).len())
        .sum();
    let run = run_registrations(&vector)
        + run_registration_shape_errors(&vector)
        + run_refusals(&vector)
        + run_refusal_reasons_in_order(&vector)
        + run_route_table_changes(&vector);
    assert_eq!(run, in_file);
    // The file as committed: 10 registrations, 3 shape errors, 8 refusals, 8 reasons, 6 changes.
    assert_eq!(run, 35, "the vector file lost or gained cases");
}

#[test]
fn every_controller_refusal_passes_the_seed_validator_and_round_trips() {
    for reason in RefusalReason::ALL {
        let refusal = ClusterIngressRegistrationRefusal::with_default_retry(reason);
        let value = refusal.to_value();
        let keys: Vec<&String> = value.as_object().unwrap().keys().collect();
        assert_eq!(keys.len(), 3);
        assert_eq!(value["code"], "cluster-ingress-registration-refused");
        assert_eq!(value["reason"], reason.as_str());
        assert_eq!(value["retryAfterMs"], reason.default_retry_after_ms());
        assert!(
            validate_cluster_ingress_registration_refusal(&value, CLUSTER_INGRESS_REGISTRATION_REFUSAL_PATH).is_empty()
        );
        assert_eq!(read_cluster_ingress_registration_refusal(&value), Some(refusal));
        assert_eq!(refusal.error_text(), format!("cluster ingress registration refused: {}", reason.as_str()));
    }
}

#[test]
fn default_retries_follow_the_table() {
    let table: Vec<(RefusalReason, u64)> =
        RefusalReason::ALL.iter().map(|reason| (*reason, reason.default_retry_after_ms())).collect();
    assert_eq!(
        table,
        [
            (RefusalReason::NotReady, 5_000),
            (RefusalReason::RegistrationInvalid, 300_000),
            (RefusalReason::RelayNotConnected, 2_000),
            (RefusalReason::IngressNotDesignated, 60_000),
            (RefusalReason::NodeMismatch, 60_000),
            (RefusalReason::AssignmentNotRunning, 5_000),
            (RefusalReason::BearerRefused, 30_000),
            (RefusalReason::Conflict, 1_000),
        ]
    );
    assert_eq!(RefusalReason::parse("protocol-mismatch"), None);
}

#[test]
fn refusal_retry_is_kept_within_the_contract_range() {
    let reason = RefusalReason::Conflict;
    assert!(ClusterIngressRegistrationRefusal::new(reason, 999).is_err());
    assert!(ClusterIngressRegistrationRefusal::new(reason, 300_001).is_err());
    assert_eq!(ClusterIngressRegistrationRefusal::new(reason, 1_000).unwrap().retry_after_ms(), 1_000);
    assert_eq!(ClusterIngressRegistrationRefusal::new(reason, 300_000).unwrap().retry_after_ms(), 300_000);
    assert_eq!(ClusterIngressRegistrationRefusal::clamped(reason, 0).retry_after_ms(), 1_000);
    assert_eq!(ClusterIngressRegistrationRefusal::clamped(reason, u64::MAX).retry_after_ms(), 300_000);
    assert_eq!(ClusterIngressRegistrationRefusal::clamped(reason, 4_242).retry_after_ms(), 4_242);
}

#[test]
fn refusal_validator_takes_a_path_and_refuses_non_integers() {
    let value = json!({ "code": "cluster-ingress-registration-refused", "reason": "conflict", "retryAfterMs": 1000.0 });
    assert_eq!(
        validate_cluster_ingress_registration_refusal(&value, "errorData"),
        ["errorData retryAfterMs must be an integer from 1000 to 300000"]
    );
    assert_eq!(read_cluster_ingress_registration_refusal(&value), None);
    assert_eq!(read_cluster_ingress_registration_refusal(&json!(null)), None);
    assert_eq!(
        validate_cluster_ingress_registration_refusal(&json!("x"), "errorData"),
        ["errorData must use its exact schema"]
    );
}

fn registration_with_protocol(protocol: Value) -> Value {
    json!({
        "bearer": "szci_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
        "version": "1.4.2",
        "nodeId": "node-7",
        "protocol": protocol,
    })
}

fn assert_protocol_refused(name: &str, request: &Value) {
    let refusal = read_protocol_offer(request).expect_err(name);
    assert_eq!(refusal, ProtocolRefusal::controller(), "{name}");
    assert_eq!(refusal.error_text(), PROTOCOL_REFUSED_TEXT);
    assert_eq!(
        refusal.to_value(),
        json!({ "code": "protocol-refused", "offer": { "name": "serve.zone/cluster-ingress", "minimum": 1, "maximum": 1 } }),
        "{name}"
    );
    assert_eq!(read_protocol_refusal(&refusal.to_value()), Some(refusal), "{name}");
}

#[test]
fn protocol_offers_that_cannot_be_served_are_refused_first() {
    assert_protocol_refused("not an object", &json!(["x"]));
    assert_protocol_refused("null", &json!(null));
    assert_protocol_refused("missing protocol", &json!({ "bearer": "x" }));
    assert_protocol_refused("protocol not an object", &registration_with_protocol(json!("serve.zone/cluster-ingress")));
    assert_protocol_refused(
        "other name",
        &registration_with_protocol(json!({ "name": "serve.zone/other", "minimum": 1, "maximum": 1 })),
    );
    assert_protocol_refused(
        "disjoint range",
        &registration_with_protocol(json!({ "name": "serve.zone/cluster-ingress", "minimum": 2, "maximum": 5 })),
    );
    assert_protocol_refused(
        "inverted range",
        &registration_with_protocol(json!({ "name": "serve.zone/cluster-ingress", "minimum": 1, "maximum": 0 })),
    );
    assert_protocol_refused(
        "extra key in offer",
        &registration_with_protocol(
            json!({ "name": "serve.zone/cluster-ingress", "minimum": 1, "maximum": 1, "x": 1 }),
        ),
    );
    assert_protocol_refused(
        "fractional version",
        &registration_with_protocol(json!({ "name": "serve.zone/cluster-ingress", "minimum": 1, "maximum": 1.5 })),
    );
}

#[test]
fn protocol_is_judged_before_the_shape_and_negotiates_the_highest_shared_version() {
    // The body is otherwise invalid (no bearer, an extra key): step 1 still accepts the offer.
    let request = json!({
        "protocol": { "name": "serve.zone/cluster-ingress", "minimum": 1, "maximum": 3 },
        "extra": true,
    });
    let offer = read_protocol_offer(&request).expect("an overlapping offer is accepted");
    assert_eq!((offer.minimum, offer.maximum), (1, 3));
    assert_eq!(offer.negotiated_version(), Some(1));
    assert_eq!(CLUSTER_INGRESS_PROTOCOL.highest_shared_version(&offer), Some(1));

    let wide = ProtocolOffer { name: "serve.zone/cluster-ingress".into(), minimum: 2, maximum: 7 };
    let narrow = ProtocolOffer { name: "serve.zone/cluster-ingress".into(), minimum: 1, maximum: 4 };
    assert_eq!(wide.highest_shared_version(&narrow), Some(4));
    assert_eq!(narrow.highest_shared_version(&wide), Some(4));
    let other = ProtocolOffer { name: "serve.zone/other".into(), minimum: 1, maximum: 4 };
    assert_eq!(narrow.highest_shared_version(&other), None);
}

#[test]
fn protocol_refusals_are_read_only_when_exact() {
    let offer = json!({ "name": "serve.zone/cluster-ingress", "minimum": 1, "maximum": 2 });
    assert!(read_protocol_refusal(&json!({ "code": "protocol-refused", "offer": offer })).is_some());
    assert_eq!(read_protocol_refusal(&json!({ "code": "protocol-refused" })), None);
    assert_eq!(read_protocol_refusal(&json!({ "code": "other", "offer": offer })), None);
    assert_eq!(read_protocol_refusal(&json!({ "code": "protocol-refused", "offer": offer, "x": 1 })), None);
    assert_eq!(
        read_protocol_refusal(
            &json!({ "code": "cluster-ingress-registration-refused", "reason": "conflict", "retryAfterMs": 1000 })
        ),
        None
    );
}

#[test]
fn registration_counts_one_violation_per_field() {
    let all_wrong = json!({
        "bearer": "short bearer",
        "version": "v1",
        "nodeId": "Node_7",
        "capabilities": ["b", "a"],
        "protocol": { "name": "serve.zone/other", "minimum": 1, "maximum": 1 },
    });
    let violations = validate_cluster_ingress_registration(&all_wrong);
    assert_eq!(violations.len(), 5, "{violations:?}");
    for (violation, field) in violations.iter().zip(["bearer", "version", "nodeId", "capabilities", "protocol"]) {
        assert!(violation.starts_with(&format!("{CLUSTER_INGRESS_REGISTRATION_PATH} {field} ")), "{violation}");
    }
    let null_capabilities = json!({
        "bearer": "szci_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
        "version": "1.4.2",
        "nodeId": "node-7",
        "capabilities": null,
        "protocol": { "name": "serve.zone/cluster-ingress", "minimum": 1, "maximum": 1 },
    });
    assert_eq!(validate_cluster_ingress_registration(&null_capabilities).len(), 1);
    let too_many: Vec<String> = (0..33).map(|index| format!("c{index:02}")).collect();
    let mut many = null_capabilities.clone();
    many["capabilities"] = json!(too_many[..32]);
    assert!(validate_cluster_ingress_registration(&many).is_empty());
    many["capabilities"] = json!(too_many);
    assert_eq!(validate_cluster_ingress_registration(&many).len(), 1);
}

#[test]
fn the_bearer_never_appears_in_debug_output() {
    let bearer = "szci_SECRETSECRETSECRETSECRET";
    let value = json!({
        "bearer": bearer,
        "version": "1.4.2",
        "nodeId": "node-7",
        "protocol": { "name": "serve.zone/cluster-ingress", "minimum": 1, "maximum": 1 },
    });
    let registration = parse_cluster_ingress_registration(&value).expect("valid registration");
    assert_eq!(registration.bearer.expose(), bearer);
    let debug = format!("{registration:?}");
    assert!(!debug.contains(bearer) && !debug.contains("SECRET"), "{debug}");
    let pretty = format!("{:#?}", registration.bearer);
    assert!(!pretty.contains("SECRET"), "{pretty}");
}

#[test]
fn environment_names_and_contract_constants_match_the_seed() {
    assert_eq!(
        CLUSTER_INGRESS_ENVIRONMENT_NAMES.all(),
        ["SERVEZONE_CLUSTER_INGRESS_BEARER", "SERVEZONE_CLUSTER_RELAY_ORIGIN", "SERVEZONE_CLUSTER_NODE_ID"]
    );
    assert_eq!(CLUSTER_INGRESS_ENVIRONMENT_NAMES.bearer, "SERVEZONE_CLUSTER_INGRESS_BEARER");
    assert_eq!(CLUSTER_INGRESS_ENVIRONMENT_NAMES.relay_origin, "SERVEZONE_CLUSTER_RELAY_ORIGIN");
    assert_eq!(CLUSTER_INGRESS_ENVIRONMENT_NAMES.node_id, "SERVEZONE_CLUSTER_NODE_ID");
    assert_eq!(CLUSTER_INGRESS_REGISTRATION_CONTRACT.refusal_code, "cluster-ingress-registration-refused");
    assert_eq!(CLUSTER_INGRESS_REGISTRATION_CONTRACT.minimum_retry_after_ms, 1_000);
    assert_eq!(CLUSTER_INGRESS_REGISTRATION_CONTRACT.maximum_retry_after_ms, 300_000);
    assert_eq!(
        serde_json::to_value(&CLUSTER_INGRESS_PROTOCOL).unwrap(),
        json!({ "name": "serve.zone/cluster-ingress", "minimum": 1, "maximum": 1 })
    );
    assert_eq!(serde_json::to_value(ClusterIngressRouteTableChange { revision: 3 }).unwrap(), json!({ "revision": 3 }));
}
