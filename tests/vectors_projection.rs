//! Golden vectors of runtime network projections (`runtime-network-projection.json`) and the
//! signed projection of `signatures.json`, read from the files so a changed vector changes the test.

mod support;

use cloudly::contract::json::{canonical, canonical_without_digest, parse_record_text};
use cloudly::contract::kind::compute_digest;
use cloudly::contract::network::lease::{
    RuntimeNetworkLease, snapshot_runtime_network_lease, validate_runtime_network_lease,
};
use cloudly::contract::network::projection::{
    AdmissionStatus, CONTRACT_ERROR, RuntimeNetworkProjection, admit_projection, admit_runtime_network_projection,
    compute_runtime_network_projection_digest, get_runtime_network_projection_workload_ingress_packet_grants,
    snapshot_runtime_network_projection, validate_runtime_network_projection,
    validate_runtime_network_projection_violations,
};
use cloudly::contract::network::text::{
    snapshot_runtime_network_projection_text, validate_runtime_network_projection_text,
};
use cloudly::contract::reader::nullable;
use cloudly::contract::signing::{PublishedKey, decode_public_key, sign, signed_to_value, verify};
use cloudly::contract::{AuthorityReference, DigestedRecord, RecordKind};
use ed25519_dalek::SigningKey;
use serde_json::Value;

fn vector() -> Value {
    support::load_vector("runtime-network-projection.json")
}

/// The cases of `key`, asserting the list is non-empty and that every entry is visited.
fn all_cases<'a>(vector: &'a Value, key: &str) -> Vec<(String, &'a Value)> {
    let cases = support::cases(vector, key);
    assert!(!cases.is_empty(), "{key}: no cases");
    assert_eq!(cases.len(), vector[key].as_array().unwrap().len(), "{key}: every case is read");
    cases
}

#[test]
fn the_vector_file_names_the_projection_and_lease_domains() {
    let vector = vector();
    assert_eq!(vector["domain"], RecordKind::RuntimeNetworkProjection.domain().unwrap());
    assert_eq!(vector["leaseDomain"], RecordKind::RuntimeNetworkLease.domain().unwrap());
}

#[test]
fn valid_projections_have_their_bytes_digests_and_packet_grants() {
    let vector = vector();
    let mut run = 0;
    for (name, case) in all_cases(&vector, "valid") {
        let value = &case["projection"];
        let snapshot = snapshot_runtime_network_projection(value).unwrap_or_else(|error| panic!("{name}: {error}"));
        let canonical_text = canonical_without_digest(value).unwrap();
        assert_eq!(canonical_text, case["canonical"].as_str().unwrap(), "{name}: canonical");
        assert_eq!(snapshot.canonical_without_digest(), canonical_text.as_bytes(), "{name}: typed canonical bytes");
        assert_eq!(snapshot.canonical_len(), canonical(value).unwrap().len(), "{name}: canonical length");
        assert_eq!(snapshot.compute_digest().as_str(), case["digest"].as_str().unwrap(), "{name}: digest");
        assert_eq!(compute_runtime_network_projection_digest(value).unwrap().as_str(), case["digest"], "{name}");
        assert_eq!(value["digest"], case["digest"], "{name}: stated digest");
        let validated = validate_runtime_network_projection(value).unwrap_or_else(|error| panic!("{name}: {error}"));
        assert_eq!(validated, snapshot, "{name}: validation answers the snapshot");
        assert_eq!(snapshot.validate(), Ok(()), "{name}: typed validation");
        assert!(validate_runtime_network_projection_violations(value).is_empty(), "{name}: violations");
        let grants = get_runtime_network_projection_workload_ingress_packet_grants(value)
            .unwrap_or_else(|error| panic!("{name}: {error}"));
        assert_eq!(serde_json::to_value(&grants).unwrap(), case["workloadIngressPacketGrants"], "{name}: grants");
        assert_eq!(snapshot.to_value(), *value, "{name}: typed round trip");
        // The record's text reads back under the raw-text rules to the same projection.
        let text = serde_json::to_string(value).unwrap();
        let reread = parse_record_text(&text).unwrap_or_else(|error| panic!("{name}: {error}"));
        assert_eq!(validate_runtime_network_projection(&reread).as_ref(), Ok(&snapshot), "{name}: from text");
        run += 1;
    }
    assert_eq!(run, vector["valid"].as_array().unwrap().len());
}

#[test]
fn invalid_projections_reject_with_the_fixed_message() {
    let vector = vector();
    let mut run = 0;
    for (name, case) in all_cases(&vector, "invalid") {
        let value = &case["projection"];
        let rejected = validate_runtime_network_projection(value).expect_err(&name);
        assert_eq!(rejected.to_string(), CONTRACT_ERROR, "{name}");
        assert_eq!(validate_runtime_network_projection_violations(value), [CONTRACT_ERROR], "{name}");
        assert!(get_runtime_network_projection_workload_ingress_packet_grants(value).is_err(), "{name}");
        // A typed projection that passes the snapshot fails the typed validation the same way.
        if let Ok(snapshot) = snapshot_runtime_network_projection(value) {
            assert_eq!(
                snapshot.validate().map_err(|error| error.to_string()),
                Err(CONTRACT_ERROR.to_owned()),
                "{name}"
            );
        }
        run += 1;
    }
    assert_eq!(run, vector["invalid"].as_array().unwrap().len());
}

#[test]
fn invalid_projections_reject_for_their_rule_not_their_digest() {
    // With the stated digest recomputed from the content, every invalid case still rejects: the
    // rule it breaks is what rejects it. (The digest mismatch case is the one whose stated digest
    // is not its content's; its changed node also breaks the grant placement rule.)
    let vector = vector();
    let domain = RecordKind::RuntimeNetworkProjection.domain().unwrap();
    for (name, case) in all_cases(&vector, "invalid") {
        let mut value = case["projection"].clone();
        let recomputed = compute_digest(domain, &value).unwrap();
        let stated_matches = value["digest"] == recomputed.as_str();
        value["digest"] = Value::String(recomputed.as_str().to_owned());
        if name == "digest mismatch" {
            assert!(!stated_matches, "{name}");
        } else {
            assert!(stated_matches, "{name}: the vector states its content's digest");
            assert!(validate_runtime_network_projection(&value).is_err(), "{name}");
        }
    }
}

fn applied_of(case: &Value, name: &str) -> Option<AuthorityReference> {
    nullable(&case["applied"], AuthorityReference::read).unwrap_or_else(|_| panic!("{name}: applied is a reference"))
}

#[test]
fn admissions_give_the_expected_status() {
    let vector = vector();
    let mut run = 0;
    for (name, case) in all_cases(&vector, "admissions") {
        let previous = case["previous"].as_object().map(|_| &case["previous"]);
        let applied = applied_of(case, &name);
        let answer = admit_runtime_network_projection(previous, &case["next"], applied.as_ref());
        match case["expect"].as_str().unwrap() {
            "reject" => {
                assert_eq!(
                    answer.map(|admission| admission.status).map_err(|e| e.to_string()),
                    Err(CONTRACT_ERROR.to_owned()),
                    "{name}"
                );
            }
            expected => {
                let admission = answer.unwrap_or_else(|error| panic!("{name}: {error}"));
                let status = serde_json::to_value(admission.status).unwrap();
                assert_eq!(status, expected, "{name}");
                assert_eq!(admission.projection.to_value(), case["next"], "{name}: the admitted projection");
            }
        }
        // The typed admission agrees whenever both projections pass their snapshots.
        let next = snapshot_runtime_network_projection(&case["next"]);
        let typed_previous = previous.map(snapshot_runtime_network_projection).transpose();
        if let (Ok(next), Ok(typed_previous)) = (next, typed_previous) {
            let typed = admit_projection(typed_previous.as_ref(), &next, applied.as_ref());
            let expected = match case["expect"].as_str().unwrap() {
                "accepted" => Some(AdmissionStatus::Accepted),
                "replay" => Some(AdmissionStatus::Replay),
                _ => None,
            };
            assert_eq!(typed.ok(), expected, "{name}: typed admission");
        }
        run += 1;
    }
    assert_eq!(run, vector["admissions"].as_array().unwrap().len());
}

#[test]
fn lease_digests_in_the_vectors_verify_under_the_lease_domain() {
    let vector = vector();
    let mut leases = 0;
    for (name, case) in all_cases(&vector, "valid") {
        for endpoint in case["projection"]["endpoints"].as_array().unwrap() {
            let value = &endpoint["lease"];
            assert!(validate_runtime_network_lease(value).is_empty(), "{name}: {}", value["id"]);
            let lease: RuntimeNetworkLease = snapshot_runtime_network_lease(value).unwrap();
            assert_eq!(lease.compute_digest().as_str(), value["digest"], "{name}: {}", value["id"]);
            assert_eq!(lease.to_value(), *value, "{name}: lease round trip");
            leases += 1;
        }
    }
    assert!(leases > 0);
}

#[test]
fn the_signed_projection_verifies_and_signs_identically() {
    let vector = support::load_vector("signatures.json");
    let key = decode_public_key(vector["publicKey"].as_str().unwrap()).unwrap();
    let keys = [PublishedKey::new(key)];
    assert_eq!(keys[0].key_id, vector["keyId"].as_str().unwrap());
    let seed: [u8; 32] = (0..32)
        .map(|index| {
            u8::from_str_radix(&vector["privateSeedHex"].as_str().unwrap()[index * 2..index * 2 + 2], 16).unwrap()
        })
        .collect::<Vec<_>>()
        .try_into()
        .unwrap();
    let signing_key = SigningKey::from_bytes(&seed);
    let mut projections = 0;
    for case in vector["valid"].as_array().unwrap() {
        if case["domain"] != RecordKind::RuntimeNetworkProjection.domain().unwrap() {
            continue;
        }
        let projection: RuntimeNetworkProjection =
            verify(&case["signed"], &keys).expect("the signed projection verifies");
        validate_runtime_network_projection(&case["signed"]["payload"]).expect("the signed payload is valid");
        // Ed25519 is deterministic: signing the typed payload again gives the same envelope.
        assert_eq!(signed_to_value(&sign(&signing_key, projection)), case["signed"]);
        projections += 1;
    }
    assert_eq!(projections, 1, "signatures.json holds one signed projection");
}

#[test]
fn admission_cases_hold_valid_projections() {
    // Each rejected admission rejects for an admission rule: both of its projections are valid.
    let vector = vector();
    for (name, case) in all_cases(&vector, "admissions") {
        for key in ["previous", "next"] {
            if !case[key].is_null() {
                assert!(validate_runtime_network_projection(&case[key]).is_ok(), "{name}: {key}");
            }
        }
    }
}

#[test]
fn the_text_reader_agrees_with_the_value_path_on_every_vector() {
    let vector = vector();
    let mut run = 0;
    for key in ["valid", "invalid"] {
        for (name, case) in all_cases(&vector, key) {
            let value = &case["projection"];
            let text = serde_json::to_string(value).unwrap();
            let expected = validate_runtime_network_projection(value);
            assert_eq!(validate_runtime_network_projection_text(&text), expected, "{key} {name}");
            assert_eq!(key == "valid", expected.is_ok(), "{key} {name}");
            assert_eq!(
                snapshot_runtime_network_projection_text(&text),
                snapshot_runtime_network_projection(value),
                "{key} {name}: snapshot"
            );
            run += 1;
        }
    }
    assert_eq!(run, vector["valid"].as_array().unwrap().len() + vector["invalid"].as_array().unwrap().len());
}
