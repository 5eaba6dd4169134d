//! Golden vectors: canonical bytes (`canonical.json`) and cluster ingress designations
//! (`cluster-ingress-designation.json`), read from the files so a changed vector changes the test.

mod support;

use cloudly::contract::designation::{
    compute_cluster_ingress_designation_digest, snapshot_cluster_ingress_designation,
    snapshot_cluster_ingress_designation_request, validate_cluster_ingress_designation,
};
use cloudly::contract::json::{canonical, canonical_without_digest, parse_record_text};
use cloudly::contract::{DigestedRecord, RecordKind};
use serde_json::Value;

const SCHEMA: &str = "cluster ingress designation must use its exact canonical schema";

#[test]
fn canonical_vectors_reproduce_their_bytes() {
    let vector = support::load_vector("canonical.json");
    let cases = vector.as_array().expect("canonical.json is a list");
    assert!(!cases.is_empty());
    for case in cases {
        let name = case["name"].as_str().unwrap();
        let produced = canonical(&case["value"]).unwrap_or_else(|error| panic!("{name}: {error}"));
        assert_eq!(produced, case["canonical"].as_str().unwrap(), "{name}");
        // The canonical text is itself a valid record text that reads back to the same value.
        assert_eq!(parse_record_text(&produced).unwrap(), case["value"], "{name}: read back");
    }
}

#[test]
fn valid_designations_have_their_canonical_bytes_and_digests() {
    let vector = support::load_vector("cluster-ingress-designation.json");
    assert_eq!(vector["domain"], RecordKind::ClusterIngressDesignation.domain().unwrap());
    let cases = support::cases(&vector, "valid");
    assert_eq!(cases.len(), vector["valid"].as_array().unwrap().len());
    assert!(!cases.is_empty());
    for (name, case) in cases {
        let record = &case["record"];
        assert_eq!(canonical_without_digest(record).unwrap(), case["canonical"].as_str().unwrap(), "{name}");
        let designation =
            snapshot_cluster_ingress_designation(record).unwrap_or_else(|error| panic!("{name}: {error}"));
        assert_eq!(designation.compute_digest().as_str(), case["digest"].as_str().unwrap(), "{name}");
        assert_eq!(compute_cluster_ingress_designation_digest(record).unwrap().as_str(), case["digest"], "{name}");
        assert!(validate_cluster_ingress_designation(record).is_empty(), "{name}");
        assert_eq!(designation.to_value(), *record, "{name}: typed round trip");
    }
}

#[test]
fn the_rotation_links_the_first_generation() {
    let vector = support::load_vector("cluster-ingress-designation.json");
    let valid = vector["valid"].as_array().unwrap();
    let first = snapshot_cluster_ingress_designation(&valid[0]["record"]).unwrap();
    let second = snapshot_cluster_ingress_designation(&valid[1]["record"]).unwrap();
    assert_eq!(second.previous.as_ref(), Some(&first.reference()));
}

#[test]
fn invalid_designations_are_named_exactly() {
    let vector = support::load_vector("cluster-ingress-designation.json");
    let cases = support::cases(&vector, "invalid");
    assert_eq!(cases.len(), vector["invalid"].as_array().unwrap().len());
    assert!(!cases.is_empty());
    for (name, case) in cases {
        let expected: Vec<String> = serde_json::from_value(case["expect"].clone()).unwrap();
        assert_eq!(validate_cluster_ingress_designation(&case["record"]), expected, "{name}");
        if expected[0] == SCHEMA {
            let error = snapshot_cluster_ingress_designation(&case["record"]).unwrap_err();
            assert_eq!(error.to_string(), "Cluster ingress designation contract rejected.", "{name}");
        }
    }
}

#[test]
fn raw_text_breaking_the_number_and_key_rules_is_an_invalid_record() {
    let vector = support::load_vector("cluster-ingress-designation.json");
    let cases = support::cases(&vector, "rawInvalid");
    assert!(!cases.is_empty());
    for (name, case) in cases {
        let error = parse_record_text(case["text"].as_str().unwrap()).unwrap_err();
        assert!(error.is_rule_violation(), "{name}: {error}");
    }
}

#[test]
fn designation_requests_snapshot_or_reject_with_the_seed_message() {
    let vector = support::load_vector("cluster-ingress-designation.json");
    let valid = vector["requests"]["valid"].as_array().unwrap();
    assert!(!valid.is_empty());
    for request in valid {
        let snapshot = snapshot_cluster_ingress_designation_request(request).unwrap();
        assert_eq!(serde_json::to_value(&snapshot).unwrap(), *request);
    }
    let invalid = vector["requests"]["invalid"].as_array().unwrap();
    assert!(!invalid.is_empty());
    for case in invalid {
        let error = snapshot_cluster_ingress_designation_request(&case["request"]).unwrap_err();
        assert_eq!(error.to_string(), "Cluster ingress designation contract rejected.", "{}", case["name"]);
    }
}

#[test]
fn a_snapshot_is_detached_from_its_input() {
    let vector = support::load_vector("cluster-ingress-designation.json");
    let mut record: Value = vector["valid"][0]["record"].clone();
    let snapshot = snapshot_cluster_ingress_designation(&record).unwrap();
    record["actorId"] = Value::String("changed".into());
    assert_eq!(snapshot.actor_id.as_str(), "user-27cd95a0");
}
