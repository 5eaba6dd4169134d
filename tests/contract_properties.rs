//! Property tests of the contract layer (proptest):
//! canonical output reads back to the same value; a snapshot of a record's canonical text
//! round-trips; changing any single field of a valid record changes its digest; no snapshot or
//! validator panics on arbitrary JSON, nor on valid records with one subtree replaced.

mod support;

use cloudly::contract::RecordKind;
use cloudly::contract::dispatch;
use cloudly::contract::json::{canonical, parse_record_text};
use cloudly::contract::kind::compute_digest;
use proptest::prelude::*;
use serde_json::{Map, Value};

fn json_string() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-zA-Z0-9._-]{0,12}",
        any::<String>(),
        prop::collection::vec(
            prop_oneof![
                Just('\u{0}'),
                Just('\u{1f}'),
                Just('"'),
                Just('\\'),
                Just('\u{2028}'),
                Just('😀'),
                Just('\u{fffd}'),
                Just('é')
            ],
            0..6
        )
        .prop_map(|chars| chars.into_iter().collect()),
    ]
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        (-9_007_199_254_740_991i64..=9_007_199_254_740_991i64).prop_map(|n| Value::Number(n.into())),
        json_string().prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec((json_string(), inner), 0..6)
                .prop_map(|members| Value::Object(members.into_iter().collect::<Map<String, Value>>())),
        ]
    })
}

/// Every valid digested record of the vectors, with its kind.
fn valid_records() -> Vec<(RecordKind, Value)> {
    let mut records = Vec::new();
    let designations = support::load_vector("cluster-ingress-designation.json");
    for case in designations["valid"].as_array().unwrap() {
        records.push((RecordKind::ClusterIngressDesignation, case["record"].clone()));
    }
    let claims = support::load_vector("runtime-local-storage-claim.json");
    for case in claims["valid"].as_array().unwrap() {
        records.push((RecordKind::RuntimeLocalStorageClaim, case["record"].clone()));
    }
    let projections = support::load_vector("runtime-network-projection.json");
    for case in projections["valid"].as_array().unwrap() {
        records.push((RecordKind::RuntimeNetworkProjection, case["projection"].clone()));
        for endpoint in case["projection"]["endpoints"].as_array().unwrap() {
            records.push((RecordKind::RuntimeNetworkLease, endpoint["lease"].clone()));
        }
    }
    records
}

/// Paths of every leaf of `value` (object keys and list indexes), skipping the top-level digest.
fn leaf_paths(value: &Value, path: &mut Vec<Value>, found: &mut Vec<Vec<Value>>) {
    match value {
        Value::Object(members) => {
            for (key, member) in members {
                if path.is_empty() && key == "digest" {
                    continue;
                }
                path.push(Value::String(key.clone()));
                leaf_paths(member, path, found);
                path.pop();
            }
        }
        Value::Array(items) => {
            for (index, item) in items.iter().enumerate() {
                path.push(Value::from(index));
                leaf_paths(item, path, found);
                path.pop();
            }
        }
        _ => found.push(path.clone()),
    }
}

fn at_path<'a>(value: &'a mut Value, path: &[Value]) -> &'a mut Value {
    path.iter().fold(value, |current, step| match step {
        Value::String(key) => current.get_mut(key.as_str()).unwrap(),
        index => current.get_mut(index.as_u64().unwrap() as usize).unwrap(),
    })
}

fn changed(leaf: &Value) -> Value {
    match leaf {
        Value::Null => Value::Bool(false),
        Value::Bool(flag) => Value::Bool(!flag),
        Value::Number(number) => Value::from(number.as_u64().map_or(0, |n| n + 1)),
        Value::String(text) => Value::String(format!("{text}x")),
        other => other.clone(),
    }
}

#[test]
fn changing_any_single_field_of_a_valid_record_changes_its_digest() {
    let records = valid_records();
    assert!(records.len() >= 10, "vectors not loaded");
    let mut checked = 0;
    for (kind, record) in records {
        let domain = kind.domain().unwrap();
        let original = compute_digest(domain, &record).unwrap();
        assert_eq!(original.as_str(), record["digest"].as_str().unwrap(), "{}", kind.name());
        let mut paths = Vec::new();
        leaf_paths(&record, &mut Vec::new(), &mut paths);
        for path in paths {
            let mut mutated = record.clone();
            let leaf = at_path(&mut mutated, &path);
            *leaf = changed(leaf);
            assert_ne!(compute_digest(domain, &mutated).unwrap(), original, "{} {path:?}", kind.name());
            // The stated digest no longer matches, so the record no longer validates.
            assert!(!dispatch::validate(kind, &mutated).is_empty(), "{} {path:?} still validates", kind.name());
            checked += 1;
        }
    }
    assert!(checked > 100);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn canonical_output_reads_back_to_the_same_value(value in json_value()) {
        let text = canonical(&value).unwrap();
        prop_assert_eq!(parse_record_text(&text).unwrap(), value.clone());
        // Canonical form is a fixed point.
        prop_assert_eq!(canonical(&parse_record_text(&text).unwrap()).unwrap(), text);
    }

    #[test]
    fn no_validator_panics_on_arbitrary_json(value in json_value()) {
        for kind in RecordKind::ALL {
            let _ = dispatch::validate(kind, &value);
            let _ = dispatch::digest(kind, &value);
        }
    }

    #[test]
    fn no_validator_panics_on_a_record_with_one_subtree_replaced(
        pick in any::<prop::sample::Index>(),
        leaf in any::<prop::sample::Index>(),
        replacement in json_value(),
    ) {
        let records = valid_records();
        let (kind, record) = &records[pick.index(records.len())];
        let mut paths = Vec::new();
        leaf_paths(record, &mut Vec::new(), &mut paths);
        let path = &paths[leaf.index(paths.len())];
        // Replace the leaf or one of its ancestors.
        let depth = leaf.index(path.len() + 1);
        let mut mutated = record.clone();
        *at_path(&mut mutated, &path[..depth]) = replacement;
        for kind in RecordKind::ALL {
            let _ = dispatch::validate(kind, &mutated);
        }
        let _ = kind;
    }
}

#[test]
fn snapshots_of_canonical_text_round_trip() {
    for (kind, record) in valid_records() {
        let text = canonical(&record).unwrap();
        let read = parse_record_text(&text).unwrap();
        let snapshot = dispatch::snapshot_value(kind, &read)
            .expect("a digested kind")
            .unwrap_or_else(|error| panic!("{}: {error}", kind.name()));
        assert_eq!(snapshot, record, "{}", kind.name());
        assert_eq!(canonical(&snapshot).unwrap(), canonical(&record).unwrap(), "{}", kind.name());
    }
}

fn id_strategy() -> impl Strategy<Value = String> {
    "[A-Za-z0-9][A-Za-z0-9._-]{0,40}"
}

fn counter_strategy() -> impl Strategy<Value = u64> {
    prop_oneof![0u64..10, 0u64..=9_007_199_254_740_991u64]
}

prop_compose! {
    fn generated_designation()(
        id in id_strategy(), cluster in id_strategy(), service in id_strategy(), actor in id_strategy(),
        credential in id_strategy(), secret in id_strategy(), version in id_strategy(),
        generation in 1u64..1_000, runtime_generation in 1u64..1_000, revision in counter_strategy(),
        credential_generation in counter_strategy(), accepted_at in counter_strategy(), previous_digest in "[0-9a-f]{64}",
    ) -> Value {
        let previous = if generation == 1 {
            Value::Null
        } else {
            serde_json::json!({ "id": id, "generation": generation - 1, "digest": format!("sha256:{previous_digest}") })
        };
        let mut record = serde_json::json!({
            "id": id, "generation": generation, "previous": previous, "clusterId": cluster,
            "runtime": { "id": cluster, "phase": "pallet", "generation": runtime_generation },
            "ingressServiceId": service, "preparedSpecRevision": revision,
            "credential": { "credentialId": credential, "generation": credential_generation,
                            "secretVersion": { "secretId": secret, "secretVersionId": version } },
            "actorId": actor, "acceptedAt": accepted_at,
        });
        let digest = compute_digest("serve.zone/cluster-ingress-designation", &record).unwrap();
        record["digest"] = Value::String(digest.as_str().to_owned());
        record
    }
}

proptest! {
    #[test]
    fn a_generated_designation_round_trips_through_its_canonical_text(record in generated_designation()) {
        let text = canonical(&record).unwrap();
        let read = parse_record_text(&text).unwrap();
        prop_assert!(dispatch::validate(RecordKind::ClusterIngressDesignation, &read).is_empty());
        let snapshot = dispatch::snapshot_value(RecordKind::ClusterIngressDesignation, &read).unwrap().unwrap();
        prop_assert_eq!(snapshot, record);
    }
}
