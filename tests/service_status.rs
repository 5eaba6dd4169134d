//! `IServiceRuntimeStatus` (`06-storage-claims.md`): the state/reason table, the validator that
//! names every violation, the typed verdict and the table-order rule. The seed ships no status
//! vectors, so the cases are written here.

mod support;

use cloudly::contract::json::parse_plain_text;
use cloudly::contract::service_status::{
    ServiceRuntimeRefusal, ServiceRuntimeState, ServiceRuntimeStatus, ServiceRuntimeVerdict,
    ServiceRuntimeWaitingReason, first_refusal, first_waiting, snapshot_service_runtime_status,
    validate_service_runtime_status,
};
use cloudly::contract::{Id, RecordKind, Rejected};
use serde_json::{Value, json};

const SCHEMA: &str = "service runtime status must use its exact schema";

fn status(state: &str, reason: Value) -> Value {
    json!({ "id": "svc-1", "specRevision": 3, "state": state, "reason": reason, "changedAt": 1_700_000_000_000u64 })
}

const WAITING: [&str; 5] =
    ["node-network-pending", "conflict", "failure-backoff", "storage-import-pending", "bindings-pending"];

const REFUSED: [&str; 21] = [
    "cluster-runtime-missing",
    "organization-missing",
    "image-plan-missing",
    "platform-unsupported",
    "secrets-unsupported",
    "volumes-unsupported",
    "port-protocol-unsupported",
    "ports-too-many",
    "readiness-target-undeclared",
    "environment-too-large",
    "no-eligible-node",
    "replica-limit",
    "node-authority-unsupported",
    "network-policy-missing",
    "network-policy-mismatch",
    "network-workload-pool-missing",
    "network-workload-pool-exhausted",
    "volume-driver-unsupported",
    "volume-options-unsupported",
    "volume-shared-unsupported",
    "volume-placement-unsupported",
];

/// Every (state, reason) pair of the table.
fn table() -> Vec<(&'static str, Value)> {
    let mut rows = vec![("converged", Value::Null), ("converging", Value::Null)];
    rows.extend(WAITING.iter().map(|reason| ("waiting", json!(reason))));
    rows.extend(REFUSED.iter().map(|reason| ("refused", json!(reason))));
    rows
}

#[test]
fn the_enums_list_the_table_in_order() {
    let waiting: Vec<&str> = ServiceRuntimeWaitingReason::ALL.iter().map(|reason| reason.as_str()).collect();
    assert_eq!(waiting, WAITING);
    let refused: Vec<&str> = ServiceRuntimeRefusal::ALL.iter().map(|reason| reason.as_str()).collect();
    assert_eq!(refused, REFUSED);
    for (index, reason) in ServiceRuntimeRefusal::ALL.iter().enumerate() {
        assert_eq!(reason.index(), index);
        assert_eq!(ServiceRuntimeRefusal::parse(reason.as_str()), Some(*reason));
    }
    assert!(ServiceRuntimeRefusal::ALL.windows(2).all(|pair| pair[0] < pair[1]));
    assert!(ServiceRuntimeWaitingReason::ALL.windows(2).all(|pair| pair[0] < pair[1]));
}

#[test]
fn every_reason_is_valid_in_its_own_state_and_in_no_other() {
    let rows = table();
    assert_eq!(rows.len(), 2 + 5 + 21);
    for (state, reason) in &rows {
        let value = status(state, reason.clone());
        assert!(validate_service_runtime_status(&value).is_empty(), "{state} {reason}");
        let typed = snapshot_service_runtime_status(&value).unwrap();
        assert_eq!(typed.verdict.state().as_str(), *state);
        assert_eq!(typed.to_value(), value, "{state} {reason}: round trip");
        // `null` belongs to both `converged` and `converging`; every other reason to one state.
        let own = |other: &&str| other == state || (reason.is_null() && matches!(*other, "converged" | "converging"));
        for other in ServiceRuntimeState::ALL.iter().map(|other| other.as_str()).filter(|other| !own(other)) {
            let value = status(other, reason.clone());
            let violations = validate_service_runtime_status(&value);
            assert_eq!(violations.len(), 1, "{other} {reason}: {violations:?}");
            assert!(violations[0].starts_with("service runtime status reason "), "{other} {reason}: {violations:?}");
            assert_eq!(
                snapshot_service_runtime_status(&value),
                Err(Rejected::of(RecordKind::ServiceRuntimeStatus)),
                "{other} {reason}"
            );
        }
    }
}

#[test]
fn unknown_reasons_and_wrong_types_are_violations_of_reason() {
    for (state, reason) in [
        ("waiting", Value::Null),
        ("waiting", json!("no-such-reason")),
        ("refused", Value::Null),
        ("refused", json!("Ports-Too-Many")),
        ("refused", json!(7)),
        ("converged", json!("")),
        ("converging", json!(false)),
    ] {
        let violations = validate_service_runtime_status(&status(state, reason.clone()));
        assert_eq!(violations.len(), 1, "{state} {reason}");
        assert!(violations[0].contains(" reason "), "{state} {reason}");
    }
}

#[test]
fn each_failing_field_is_named_once() {
    let mut all_wrong = status("stuck", json!("nonsense"));
    all_wrong["id"] = json!("-bad id");
    all_wrong["specRevision"] = json!(-1);
    all_wrong["changedAt"] = json!("yesterday");
    assert_eq!(
        validate_service_runtime_status(&all_wrong),
        vec![
            "service runtime status id must be an id",
            "service runtime status specRevision must be a non-negative safe integer",
            "service runtime status state must be converged, converging, waiting or refused",
            "service runtime status reason must be null or a service runtime reason",
            "service runtime status changedAt must be a non-negative safe integer",
        ]
    );
    // An unknown state with a known reason or null: only the state is named.
    assert_eq!(validate_service_runtime_status(&status("stuck", json!("conflict"))).len(), 1);
    assert_eq!(validate_service_runtime_status(&status("stuck", Value::Null)).len(), 1);
    // A float from plain text is a value that is not an integer, named by its field.
    let text = r#"{"id":"svc-1","specRevision":1.5,"state":"converged","reason":null,"changedAt":9007199254740992}"#;
    let parsed = parse_plain_text(text).unwrap();
    assert_eq!(
        validate_service_runtime_status(&parsed),
        vec![
            "service runtime status specRevision must be a non-negative safe integer",
            "service runtime status changedAt must be a non-negative safe integer",
        ]
    );
}

#[test]
fn a_value_without_exactly_the_keys_is_one_schema_violation() {
    let mut extra = status("converged", Value::Null);
    extra["extra"] = json!(1);
    let mut missing = status("stuck", json!("nonsense"));
    missing.as_object_mut().unwrap().remove("reason");
    for value in [extra, missing, json!(null), json!([]), json!("converged"), json!({})] {
        assert_eq!(validate_service_runtime_status(&value), vec![SCHEMA], "{value}");
        assert!(snapshot_service_runtime_status(&value).is_err());
    }
}

#[test]
fn the_first_reason_in_table_order_wins() {
    use ServiceRuntimeRefusal as R;
    use ServiceRuntimeWaitingReason as W;
    assert_eq!(
        first_refusal([R::VolumePlacementUnsupported, R::PortsTooMany, R::VolumeDriverUnsupported]),
        Some(R::PortsTooMany)
    );
    assert_eq!(
        first_refusal([R::VolumeSharedUnsupported, R::VolumeOptionsUnsupported]),
        Some(R::VolumeOptionsUnsupported)
    );
    assert_eq!(first_refusal(R::ALL.iter().rev().copied()), Some(R::ClusterRuntimeMissing));
    assert_eq!(first_refusal([]), None);
    assert_eq!(first_waiting([W::BindingsPending, W::StorageImportPending]), Some(W::StorageImportPending));
    assert_eq!(first_waiting([W::BindingsPending, W::NodeNetworkPending]), Some(W::NodeNetworkPending));
    assert_eq!(first_waiting([]), None);
}

#[test]
fn the_typed_status_writes_the_wire_shape() {
    let typed = ServiceRuntimeStatus {
        id: Id::parse("svc-1").unwrap(),
        spec_revision: 3,
        verdict: ServiceRuntimeVerdict::Refused(ServiceRuntimeRefusal::VolumeSharedUnsupported),
        changed_at: 1_700_000_000_000,
    };
    let value = typed.to_value();
    assert_eq!(value, status("refused", json!("volume-shared-unsupported")));
    assert!(validate_service_runtime_status(&value).is_empty());
    assert_eq!(snapshot_service_runtime_status(&value).unwrap(), typed);
    let converging = ServiceRuntimeStatus { verdict: ServiceRuntimeVerdict::Converging, ..typed };
    assert_eq!(converging.to_value()["reason"], Value::Null);
    assert_eq!(
        ServiceRuntimeVerdict::from_parts(ServiceRuntimeState::Waiting, Some("storage-import-pending")),
        Some(ServiceRuntimeVerdict::Waiting(ServiceRuntimeWaitingReason::StorageImportPending))
    );
    assert_eq!(ServiceRuntimeVerdict::from_parts(ServiceRuntimeState::Converged, Some("conflict")), None);
    assert_eq!(ServiceRuntimeVerdict::from_parts(ServiceRuntimeState::Refused, Some("conflict")), None);
}
