//! `designateClusterIngress`, `getClusterIngressDesignation` and `listClusterIngressDesignations`
//! over real HTTP, on PostgreSQL and on SQLite: every refusal of the judgement order from a state
//! where every earlier check passes, replay, the race, the chain, and nothing secret in answers.

#[macro_use]
mod support;

use cloudly::contract::designation::{snapshot_cluster_ingress_designation, validate_cluster_ingress_designation};
use cloudly::contract::{DigestedRecord, Id};
use cloudly::domain::identity::Role;
use serde_json::{Value, json};
use support::service::{Backend, T0, TestService, designation_request, reference_of};

/// Everything a refusal must leave untouched: the current designation and the whole chain.
async fn designation_state(service: &TestService, cluster: &str) -> (Value, Value) {
    let current = service.admin_call("getClusterIngressDesignation", json!({ "clusterId": cluster })).await;
    let chain = service.admin_call("listClusterIngressDesignations", json!({ "clusterId": cluster })).await;
    (current, chain)
}

async fn expect_refusal(service: &TestService, identity: &Value, request: Value, code: &str) -> Value {
    let before = designation_state(service, "c1").await;
    let error =
        service.call_as(identity, "designateClusterIngress", request).await.expect_err(&format!("expected {code}"));
    assert_eq!(error.code(), code, "{} {}", error.text, error.data);
    assert_eq!(designation_state(service, "c1").await, before, "a refusal ({code}) changed the store");
    error.data
}

on_both_stores!(first_designation_is_accepted_and_answered, |backend| async move {
    let service = TestService::start(backend).await;
    let spec = service.seed_cluster("c1", "ingress").await;
    let operator = serde_json::to_value(service.identity("operator-7", Role::Operator)).unwrap();
    let answer = service
        .call_as(&operator, "designateClusterIngress", designation_request("c1", "ingress", "m1", 1, Value::Null))
        .await
        .unwrap();
    assert_eq!(answer["replayed"], json!(false));
    assert_eq!(answer["spec"], spec);
    let designation = &answer["designation"];
    assert!(validate_cluster_ingress_designation(designation).is_empty(), "{designation}");
    assert_eq!(designation["generation"], json!(1));
    assert_eq!(designation["previous"], Value::Null);
    assert_eq!(designation["actorId"], json!("operator-7"));
    assert_eq!(designation["acceptedAt"], json!(T0));
    assert_eq!(designation["preparedSpecRevision"], json!(1));
    assert_eq!(designation["runtime"], json!({ "id": "c1", "phase": "pallet", "generation": 3 }));
    assert_eq!(designation["credential"]["generation"], json!(1));
    let viewer = serde_json::to_value(service.identity("viewer-1", Role::Viewer)).unwrap();
    let current = service.call_as(&viewer, "getClusterIngressDesignation", json!({ "clusterId": "c1" })).await.unwrap();
    assert_eq!(current["designation"], *designation);
    service.stop().await;
});

on_both_stores!(every_refusal_of_the_judgement_order_is_named_and_changes_nothing, |backend| async move {
    let service = TestService::start(backend).await;
    service.seed_cluster("c1", "ingress").await;
    let admin = service.admin();
    let first =
        service.admin_call("designateClusterIngress", designation_request("c1", "ingress", "m1", 1, Value::Null)).await;
    let current = reference_of(&first["designation"]);
    let valid = |mutation: &str| designation_request("c1", "ingress", mutation, 1, current.clone());

    // 1. identity: missing, forged, expired; then a viewer is forbidden.
    let mut no_identity = valid("m2");
    no_identity.as_object_mut().unwrap().remove("identity");
    let before = designation_state(&service, "c1").await;
    let error = service.client.call("designateClusterIngress", no_identity).await.unwrap_err();
    assert!(matches!(error, cloudly::client::CallError::Typed(ref typed) if typed.code() == "identity-refused"));
    assert_eq!(designation_state(&service, "c1").await, before);
    let mut forged = admin.clone();
    forged["role"] = json!("admin");
    forged["userId"] = json!("someone-else");
    expect_refusal(&service, &forged, valid("m2"), "identity-refused").await;
    let viewer = serde_json::to_value(service.identity("viewer-1", Role::Viewer)).unwrap();
    expect_refusal(&service, &viewer, valid("m2"), "identity-forbidden").await;

    // 2. the request's exact schema.
    let mut extra = valid("m2");
    extra["designation"]["force"] = json!(true);
    let data = expect_refusal(&service, &admin, extra, "request-invalid").await;
    assert_eq!(data["violations"], json!(["Cluster ingress designation contract rejected."]));

    // 3. replay: the same mutation id with other content.
    expect_refusal(
        &service,
        &admin,
        designation_request("c1", "ingress", "m1", 1, current.clone()),
        "mutation-conflict",
    )
    .await;

    // 4. no such cluster (a valid request naming another cluster).
    let mut other_cluster = designation_request("c9", "ingress", "m2", 1, current.clone());
    other_cluster["designation"]["currentRuntime"]["id"] = json!("c9");
    let data = expect_refusal(&service, &admin, other_cluster, "not-found").await;
    assert_eq!(data["what"], json!("cluster"));

    // 5. runtime mismatch: another generation.
    let mut stale_runtime = valid("m2");
    stale_runtime["designation"]["currentRuntime"]["generation"] = json!(2);
    let data = expect_refusal(&service, &admin, stale_runtime, "runtime-mismatch").await;
    assert_eq!(data["current"], json!({ "id": "c1", "phase": "pallet", "generation": 3 }));

    // 7. no such service.
    let data =
        expect_refusal(&service, &admin, designation_request("c1", "nothing", "m2", 1, current.clone()), "not-found")
            .await;
    assert_eq!(data["what"], json!("service"));

    // 8. spec revision mismatch.
    let data = expect_refusal(
        &service,
        &admin,
        designation_request("c1", "ingress", "m2", 7, current.clone()),
        "spec-revision-mismatch",
    )
    .await;
    assert_eq!(data["current"], json!(1));

    // 9. designation conflict: expecting none while one exists.
    let data = expect_refusal(
        &service,
        &admin,
        designation_request("c1", "ingress", "m2", 1, Value::Null),
        "designation-conflict",
    )
    .await;
    assert_eq!(data["current"], current);

    // 6. designation kind: a cluster holding a fleet-cutover designation (and never a Pallet one).
    service
        .admin_call(
            "putCluster",
            json!({ "cluster": {
                "id": "c2", "organizationId": "org", "runtime": { "phase": "pallet", "generation": 1 },
                "relayOrigin": null,
                "fleetCutoverIngressDesignation": { "id": "fleet-1", "generation": 1, "digest": format!("sha256:{}", "ab".repeat(32)) },
            }, "expectedRevision": null }),
        )
        .await;
    let mut kind_conflict = designation_request("c2", "ingress", "m3", 1, Value::Null);
    kind_conflict["designation"]["currentRuntime"] = json!({ "id": "c2", "phase": "pallet", "generation": 1 });
    let error = service.call_as(&admin, "designateClusterIngress", kind_conflict).await.unwrap_err();
    assert_eq!(error.code(), "designation-kind-conflict");
    // … and the reverse: a fleet-cutover designation on a cluster holding a Pallet one.
    let stored = service.admin_call("getCluster", json!({ "clusterId": "c1" })).await;
    let mut cluster = stored["cluster"].clone();
    let revision = cluster.as_object_mut().unwrap().remove("revision").unwrap();
    cluster["fleetCutoverIngressDesignation"] =
        json!({ "id": "fleet-1", "generation": 1, "digest": format!("sha256:{}", "ab".repeat(32)) });
    let error = service
        .call_as(&admin, "putCluster", json!({ "cluster": cluster, "expectedRevision": revision }))
        .await
        .unwrap_err();
    assert_eq!(error.code(), "designation-kind-conflict");
    service.stop().await;
});

on_both_stores!(a_replay_after_a_lost_answer_returns_the_original_result, |backend| async move {
    let service = TestService::start(backend).await;
    service.seed_cluster("c1", "ingress").await;
    let request = designation_request("c1", "ingress", "m1", 1, Value::Null);
    let original = service.admin_call("designateClusterIngress", request.clone()).await;
    service.clock.0.fetch_add(60_000, std::sync::atomic::Ordering::SeqCst);
    // A later rotation supersedes it …
    let rotation = designation_request("c1", "ingress", "m2", 1, reference_of(&original["designation"]));
    let rotated = service.admin_call("designateClusterIngress", rotation).await;
    assert_eq!(rotated["designation"]["generation"], json!(2));
    // … and the retried first request still gets its own answer.
    let replay = service.admin_call("designateClusterIngress", request).await;
    assert_eq!(replay["replayed"], json!(true));
    assert_eq!(replay["designation"], original["designation"]);
    assert_eq!(replay["spec"], original["spec"]);
    service.stop().await;
});

on_both_stores!(racing_designations_accept_exactly_one, |backend| async move {
    let service = std::sync::Arc::new(TestService::start(backend).await);
    service.seed_cluster("c1", "ingress").await;
    let admin = service.admin();
    let mut racers = Vec::new();
    for index in 0..32 {
        let service = service.clone();
        let admin = admin.clone();
        racers.push(tokio::spawn(async move {
            let request = designation_request("c1", "ingress", &format!("race-{index}"), 1, Value::Null);
            service.call_as(&admin, "designateClusterIngress", request).await
        }));
    }
    let mut accepted = 0;
    let mut conflicts = 0;
    for racer in racers {
        match racer.await.unwrap() {
            Ok(answer) => {
                assert_eq!(answer["replayed"], json!(false));
                accepted += 1;
            }
            Err(error) if error.code() == "designation-conflict" => conflicts += 1,
            Err(error) => panic!("unexpected refusal {} {}", error.text, error.data),
        }
    }
    assert_eq!((accepted, conflicts), (1, 31));
    let chain = service.admin_call("listClusterIngressDesignations", json!({ "clusterId": "c1" })).await;
    assert_eq!(chain["designations"].as_array().unwrap().len(), 1);
    std::sync::Arc::into_inner(service).expect("racers finished").stop().await;
});

on_both_stores!(the_chain_verifies_link_by_link, |backend| async move {
    let service = TestService::start(backend).await;
    service.seed_cluster("c1", "ingress").await;
    let mut expected = Value::Null;
    for generation in 1..=5u64 {
        service.clock.0.fetch_add(1_000, std::sync::atomic::Ordering::SeqCst);
        let answer = service
            .admin_call(
                "designateClusterIngress",
                designation_request("c1", "ingress", &format!("m{generation}"), 1, expected),
            )
            .await;
        expected = reference_of(&answer["designation"]);
    }
    let first_page =
        service.admin_call("listClusterIngressDesignations", json!({ "clusterId": "c1", "limit": 3 })).await;
    assert_eq!(first_page["nextGeneration"], json!(4));
    let second_page = service
        .admin_call("listClusterIngressDesignations", json!({ "clusterId": "c1", "fromGeneration": 4, "limit": 3 }))
        .await;
    assert_eq!(second_page["nextGeneration"], Value::Null);
    let chain: Vec<Value> = first_page["designations"]
        .as_array()
        .unwrap()
        .iter()
        .chain(second_page["designations"].as_array().unwrap())
        .cloned()
        .collect();
    assert_eq!(chain.len(), 5);
    let mut previous = None;
    let mut secret_versions = std::collections::BTreeSet::new();
    for record in &chain {
        assert!(validate_cluster_ingress_designation(record).is_empty(), "{record}");
        let designation = snapshot_cluster_ingress_designation(record).unwrap();
        assert_eq!(designation.compute_digest(), designation.digest);
        assert_eq!(designation.previous, previous);
        assert_eq!(designation.id, snapshot_cluster_ingress_designation(&chain[0]).unwrap().id, "one id per chain");
        assert_eq!(designation.credential.generation, designation.generation);
        assert!(secret_versions.insert(designation.credential.secret_version.secret_version_id.clone()), "new version");
        previous = Some(designation.reference());
    }
    service.stop().await;
});

on_both_stores!(no_bearer_value_appears_in_any_answer, |backend| async move {
    let service = TestService::start(backend).await;
    service.seed_cluster("c1", "ingress").await;
    let answer =
        service.admin_call("designateClusterIngress", designation_request("c1", "ingress", "m1", 1, Value::Null)).await;
    let designation = snapshot_cluster_ingress_designation(&answer["designation"]).unwrap();
    let version = &designation.credential.secret_version;
    let sealed =
        service.store.get_secret(&version.secret_id, &version.secret_version_id).await.unwrap().expect("stored");
    let bearer = cloudly::domain::secrets::open(service.keys.secret_key(), &sealed).unwrap();
    assert!(bearer.expose().starts_with("szci_") && bearer.expose().len() >= 48);
    let everything = [
        answer.to_string(),
        service.admin_call("getClusterIngressDesignation", json!({ "clusterId": "c1" })).await.to_string(),
        service.admin_call("listClusterIngressDesignations", json!({ "clusterId": "c1" })).await.to_string(),
        service
            .admin_call("designateClusterIngress", designation_request("c1", "ingress", "m1", 1, Value::Null))
            .await
            .to_string(),
    ];
    for text in everything {
        assert!(!text.contains(bearer.expose()), "an answer carries the bearer");
    }
    // The store holds ciphertext, not the value.
    assert!(!String::from_utf8_lossy(&sealed.ciphertext).contains(bearer.expose()));
    let _ = Id::parse("x");
    service.stop().await;
});
