//! Golden vectors of runtime local storage claims (`runtime-local-storage-claim.json`), read from
//! the file so a changed vector changes the test.

mod support;

use cloudly::contract::json::canonical_without_digest;
use cloudly::contract::storage_claim::{
    CONTRACT_ERROR, compute_runtime_local_storage_claim_digest, get_runtime_local_storage_claim_reference,
    snapshot_runtime_local_storage_claim, validate_runtime_local_storage_claim,
};
use cloudly::contract::{DigestedRecord, RecordKind};
use serde_json::Value;

const SCHEMA: &str = "runtime local storage claim must use its exact canonical schema";
const DIGEST: &str = "runtime local storage claim digest does not match";

#[test]
fn the_vector_file_names_its_kind_and_domain() {
    let vector = support::load_vector("runtime-local-storage-claim.json");
    assert_eq!(vector["kind"], RecordKind::RuntimeLocalStorageClaim.name());
    assert_eq!(vector["domain"], RecordKind::RuntimeLocalStorageClaim.domain().unwrap());
}

#[test]
fn valid_claims_have_their_canonical_bytes_and_digests() {
    let vector = support::load_vector("runtime-local-storage-claim.json");
    let cases = support::cases(&vector, "valid");
    assert_eq!(cases.len(), vector["valid"].as_array().unwrap().len());
    assert_eq!(cases.len(), 8);
    for (name, case) in cases {
        let record = &case["record"];
        let claim = snapshot_runtime_local_storage_claim(record).unwrap_or_else(|error| panic!("{name}: {error}"));
        assert_eq!(canonical_without_digest(record).unwrap(), case["canonical"].as_str().unwrap(), "{name}");
        assert_eq!(canonical_without_digest(&claim.to_value()).unwrap(), case["canonical"].as_str().unwrap(), "{name}");
        assert_eq!(claim.compute_digest().as_str(), case["digest"].as_str().unwrap(), "{name}");
        assert_eq!(compute_runtime_local_storage_claim_digest(record).unwrap().as_str(), case["digest"], "{name}");
        assert_eq!(claim.digest.as_str(), case["digest"], "{name}: stated digest");
        assert!(validate_runtime_local_storage_claim(record).is_empty(), "{name}");
        assert_eq!(claim.to_value(), *record, "{name}: typed round trip");
        let reference = get_runtime_local_storage_claim_reference(&claim);
        assert_eq!(
            serde_json::to_value(&reference).unwrap(),
            serde_json::json!({ "id": record["id"], "generation": record["generation"], "digest": record["digest"] }),
            "{name}: reference"
        );
    }
}

#[test]
fn invalid_claims_are_refused() {
    let vector = support::load_vector("runtime-local-storage-claim.json");
    let cases = support::cases(&vector, "invalid");
    assert_eq!(cases.len(), vector["invalid"].as_array().unwrap().len());
    assert_eq!(cases.len(), 21);
    for (name, case) in cases {
        let record = &case["record"];
        let violations = validate_runtime_local_storage_claim(record);
        assert_eq!(violations.len(), 1, "{name}: {violations:?}");
        if name == "digest mismatch" {
            assert_eq!(violations, vec![DIGEST], "{name}");
        } else {
            assert_eq!(violations, vec![SCHEMA], "{name}");
            let error = snapshot_runtime_local_storage_claim(record).unwrap_err();
            assert_eq!(error.to_string(), CONTRACT_ERROR, "{name}");
            assert_eq!(compute_runtime_local_storage_claim_digest(record).unwrap_err().to_string(), CONTRACT_ERROR);
        }
    }
}

#[test]
fn a_snapshot_is_detached_from_its_input() {
    let vector = support::load_vector("runtime-local-storage-claim.json");
    let mut record: Value = vector["valid"][0]["record"].clone();
    let snapshot = snapshot_runtime_local_storage_claim(&record).unwrap();
    let volume = record["volumeId"].as_str().unwrap().to_owned();
    record["volumeId"] = Value::String("changed".into());
    assert_eq!(snapshot.volume_id.as_str(), volume);
}

#[test]
fn a_null_where_no_null_is_allowed_is_refused() {
    let vector = support::load_vector("runtime-local-storage-claim.json");
    for key in ["controller", "source", "mount", "accessMode", "lifecycle", "digest", "volumeId"] {
        let mut record: Value = vector["valid"][0]["record"].clone();
        record[key] = Value::Null;
        assert_eq!(validate_runtime_local_storage_claim(&record), vec![SCHEMA], "{key}");
    }
}
