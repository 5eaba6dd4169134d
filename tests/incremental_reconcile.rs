//! The incremental reconcile, on PostgreSQL and on SQLite: a write plans and writes only what it
//! touches (a put of one service writes no assignment, claim, lease or status of another),
//! concurrent puts of different services in one cluster all commit, puts racing designations
//! leave every answer exact, the second-order effects of a write reach the services they concern
//! (a freed pool, a volume no longer shared, a node that now exists), a write whose client hangs
//! up is reconciled all the same, and the full pass finds nothing to correct after any of it
//! (`TestService::stop` checks that for every story).

#[macro_use]
mod support;

use cloudly::contract::Id;
use cloudly::store::FactScope;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::time::Duration;
use support::service::{Backend, Peer, TestService, designation_request, seed_plan, spec_body};

fn id(text: &str) -> Id {
    Id::parse(text).unwrap()
}

/// Cluster `c1` with nodes `node-1` and `node-2`, the seed's plan, `ingress` (one replica on
/// `node-1`, designated), `web` routed on 443, `db` with a local volume `data` on `node-2`, and
/// `count` more services `svc-<n>` of one replica each.
async fn cluster(backend: Backend, count: usize) -> TestService {
    let service = TestService::start(backend).await;
    service.seed_cluster("c1", "web").await;
    service.admin_call("putRuntimeNetworkAddressPlan", json!({ "plan": seed_plan("c1", 1) })).await;
    let mut web = spec_body("c1", "web");
    web["ports"] = json!([{ "protocol": "tcp", "port": 443 }]);
    service.admin_call("putServiceRuntimeSpec", json!({ "spec": web, "expectedRevision": 1 })).await;
    put(&service, "ingress", one_replica("ingress", "node-1"), None).await;
    put(&service, "db", with_volume(one_replica("db", "node-2"), "data"), None).await;
    for index in 0..count {
        let name = format!("svc-{index}");
        let node = if index % 2 == 0 { "node-1" } else { "node-2" };
        put(&service, &name, one_replica(&name, node), None).await;
    }
    service.admin_call("designateClusterIngress", designation_request("c1", "ingress", "m1", 1, Value::Null)).await;
    service
        .admin_call(
            "putClusterIngressRoute",
            json!({ "clusterId": "c1", "route": { "hostname": "web.example.com", "serviceId": "web", "protocol": "tcp", "port": 443 } }),
        )
        .await;
    service.controller().assignments_settled(&id("c1")).await;
    service
}

/// A spec of `name` with one replica on `node`.
fn one_replica(name: &str, node: &str) -> Value {
    let mut body = spec_body("c1", name);
    body["replicas"] = json!(1);
    body["placement"] = json!({ "nodeIds": [node] });
    body
}

/// `body` with one empty local volume `volume`.
fn with_volume(mut body: Value, volume: &str) -> Value {
    body["volumes"] = json!([{
        "id": volume, "mountPath": format!("/var/lib/{volume}"), "readOnly": false, "driver": "local",
        "driverOptions": [], "mountOptions": [],
        "initialization": { "kind": "empty", "ownership": { "uid": 1000, "gid": 1000, "mode": 493 } },
    }]);
    body
}

async fn put(service: &TestService, name: &str, body: Value, expected: Option<u64>) -> Value {
    let _ = name;
    service.admin_call("putServiceRuntimeSpec", json!({ "spec": body, "expectedRevision": expected })).await["spec"]
        .clone()
}

async fn revision(service: &TestService, name: &str) -> u64 {
    let answer = service.admin_call("getServiceRuntimeSpec", json!({ "clusterId": "c1", "serviceId": name })).await;
    answer["spec"]["revision"].as_u64().unwrap()
}

/// Everything the store keeps of each service's runtime: its assignment heads (id, generation,
/// active), claim heads (id, generation), live leases (id, generation, node) and recorded status
/// (revision, state, reason, changedAt), by service.
async fn runtime_by_service(service: &TestService) -> BTreeMap<Id, Vec<String>> {
    let cluster = id("c1");
    let facts = service.store.assignment_facts(&cluster, &FactScope::Cluster).await.unwrap();
    let mut by_service: BTreeMap<Id, Vec<String>> = BTreeMap::new();
    for head in &facts.heads.readable {
        let payload = &head.signed.payload;
        by_service
            .entry(payload.service_id.clone())
            .or_default()
            .push(format!("assignment {} {} {}", payload.id, payload.generation, head.active));
    }
    for head in &facts.claims.readable {
        let payload = &head.signed.payload;
        by_service
            .entry(payload.service_id.clone())
            .or_default()
            .push(format!("claim {} {}", payload.id, payload.generation));
    }
    for lease in service.store.live_leases(&cluster).await.unwrap() {
        by_service
            .entry(lease.service_id.clone())
            .or_default()
            .push(format!("lease {} {} {}", lease.id, lease.generation, lease.node_id));
    }
    for status in service.store.recorded_statuses(&cluster, &FactScope::Cluster).await.unwrap() {
        by_service.entry(status.service_id.clone()).or_default().push(format!(
            "status {} {} {:?} {}",
            status.spec_revision, status.state, status.reason, status.changed_at
        ));
    }
    by_service
}

/// What `before` and `after` keep of every service but `touched`.
fn untouched(mut map: BTreeMap<Id, Vec<String>>, touched: &[&str]) -> BTreeMap<Id, Vec<String>> {
    for name in touched {
        map.remove(&id(name));
    }
    map
}

on_both_stores!(a_put_writes_no_record_or_head_of_another_service, |backend| async move {
    let service = cluster(backend, 6).await;
    let before = runtime_by_service(&service).await;
    assert!(before.len() >= 9, "every service has runtime records: {before:?}");
    service.clock.0.fetch_add(60_000, std::sync::atomic::Ordering::SeqCst);

    // A new revision of one service, a new service, a deleted service.
    let mut changed = one_replica("svc-1", "node-1");
    changed["image"] = json!("registry.example/app:2");
    put(&service, "svc-1", changed, Some(revision(&service, "svc-1").await)).await;
    put(&service, "fresh", one_replica("fresh", "node-2"), None).await;
    let deleted = revision(&service, "svc-2").await;
    service
        .admin_call("deleteService", json!({ "clusterId": "c1", "serviceId": "svc-2", "expectedRevision": deleted }))
        .await;

    let after = runtime_by_service(&service).await;
    let touched = ["svc-1", "fresh", "svc-2"];
    assert_eq!(untouched(after.clone(), &touched), untouched(before.clone(), &touched));
    // What the writes touched did move.
    assert_ne!(after.get(&id("svc-1")), before.get(&id("svc-1")));
    assert!(after.get(&id("fresh")).is_some_and(|records| records.iter().any(|record| record.starts_with("lease"))));
    assert!(after.get(&id("svc-2")).is_none_or(|records| records.iter().all(|record| !record.starts_with("lease"))));
    service.stop().await;
});

on_both_stores!(concurrent_puts_of_different_services_in_one_cluster_all_commit, |backend| async move {
    let service = cluster(backend, 0).await;
    let peer = Peer::start(&service, Default::default()).await;
    let admin = service.admin();
    let calls = (0..24).map(|index| {
        let client = if index % 2 == 0 { service.client.clone() } else { peer.client.clone() };
        let mut body = one_replica(&format!("par-{index}"), if index % 3 == 0 { "node-1" } else { "node-2" });
        if index % 4 == 0 {
            body = with_volume(body, &format!("vol-{index}"));
        }
        let request = json!({ "identity": admin.clone(), "spec": body, "expectedRevision": null });
        async move { client.call("putServiceRuntimeSpec", request).await }
    });
    for (index, answer) in futures_util::future::join_all(calls).await.into_iter().enumerate() {
        let answer = answer.unwrap_or_else(|error| panic!("put {index} was not committed: {error:?}"));
        assert_eq!(answer["spec"]["revision"], json!(1));
    }
    // Every service runs: an assignment and a lease each, and the shared pool never overlaps.
    let runtime = runtime_by_service(&service).await;
    for index in 0..24 {
        let records = runtime.get(&id(&format!("par-{index}"))).expect("the service has runtime records");
        assert!(records.iter().any(|record| record.starts_with("assignment")), "par-{index}: {records:?}");
        assert!(records.iter().any(|record| record.starts_with("lease")), "par-{index}: {records:?}");
    }
    let leases = service.store.live_leases(&id("c1")).await.unwrap();
    let subnets: std::collections::BTreeSet<String> =
        leases.iter().map(|lease| lease.ipv4.link_subnet().to_string()).collect();
    assert_eq!(subnets.len(), leases.len(), "no two live leases share a link subnet");
    support::service::assert_full_pass_finds_nothing(&peer.controller).await;
    peer.stop().await;
    service.stop().await;
});

on_both_stores!(puts_racing_designations_leave_every_answer_exact, |backend| async move {
    let service = cluster(backend, 2).await;
    let admin = service.admin();
    let current = service.admin_call("getClusterIngressDesignation", json!({ "clusterId": "c1" })).await;
    let expected = support::service::reference_of(&current["designation"]);
    // Eight designations expecting the same head race twelve puts of other services: exactly one
    // designation is accepted, the others are refused naming the winner, every put commits.
    let designations = (0..8).map(|index| {
        let client = service.client.clone();
        let mut request = designation_request("c1", "ingress", &format!("race-{index}"), 1, expected.clone());
        request["identity"] = admin.clone();
        async move { client.call("designateClusterIngress", request).await }
    });
    let puts = (0..12).map(|index| {
        let client = service.client.clone();
        let request =
            json!({ "identity": admin.clone(), "spec": one_replica(&format!("racer-{index}"), "node-2"), "expectedRevision": null });
        async move { client.call("putServiceRuntimeSpec", request).await }
    });
    let (designated, put) =
        tokio::join!(futures_util::future::join_all(designations), futures_util::future::join_all(puts));
    for answer in put {
        answer.expect("every put commits");
    }
    let accepted: Vec<Value> = designated.iter().filter_map(|answer| answer.as_ref().ok().cloned()).collect();
    assert_eq!(accepted.len(), 1, "exactly one designation wins: {designated:?}");
    let winner = support::service::reference_of(&accepted[0]["designation"]);
    for answer in designated.iter().filter_map(|answer| answer.as_ref().err()) {
        let cloudly::client::CallError::Typed(error) = answer else { panic!("{answer:?}") };
        assert_eq!(error.code(), "designation-conflict");
        assert_eq!(error.data["current"], winner, "a refusal names the winner");
    }
    service.controller().assignments_settled(&id("c1")).await;
    // The ingress assignment carries the winner's secret version.
    let facts = service.store.assignment_facts(&id("c1"), &FactScope::Cluster).await.unwrap();
    let secret = &accepted[0]["designation"]["credential"]["secretVersion"];
    let ingress = facts.heads.readable.iter().find(|head| head.signed.payload.service_id == id("ingress")).unwrap();
    let carried = serde_json::to_value(&ingress.signed.payload.workload.environment).unwrap();
    assert!(carried.to_string().contains(secret["secretVersionId"].as_str().unwrap()), "{carried}");
    service.stop().await;
});

on_both_stores!(a_write_reaches_the_services_whose_verdict_it_lifts, |backend| async move {
    let service = TestService::start(backend).await;
    service.seed_cluster("c1", "web").await;
    // A pool of two link subnets: `web` (two replicas) fills it.
    let plan = json!({
        "clusterId": "c1", "revision": 1, "prefixes": ["10.64.0.0/16"],
        "pools": [{ "id": "pool-org", "organizationId": "org", "prefix": "10.64.0.0/29" }],
        "vpn": null, "hubs": [], "platformEndpoints": [],
    });
    service.admin_call("putRuntimeNetworkAddressPlan", json!({ "plan": plan })).await;
    let status = |name: &'static str| {
        let service = &service;
        async move {
            service.admin_call("getServiceRuntimeStatus", json!({ "clusterId": "c1", "serviceId": name })).await
                ["status"]
                .clone()
        }
    };
    put(&service, "api", one_replica("api", "node-1"), None).await;
    assert_eq!(status("api").await["reason"], json!("network-workload-pool-exhausted"));
    // Deleting `web` frees the pool: the same write gives `api` its assignment and lease.
    service.admin_call("deleteService", json!({ "clusterId": "c1", "serviceId": "web", "expectedRevision": 1 })).await;
    let runtime = runtime_by_service(&service).await;
    let api = runtime.get(&id("api")).expect("api runs");
    assert!(api.iter().any(|record| record.starts_with("lease")), "{api:?}");
    assert_ne!(status("api").await["state"], json!("refused"));

    // A larger pool for what follows.
    let mut larger = plan.clone();
    larger["revision"] = json!(2);
    larger["pools"][0]["prefix"] = json!("10.64.0.0/24");
    service.admin_call("putRuntimeNetworkAddressPlan", json!({ "plan": larger })).await;

    // A later declarer of a volume id is refused, its holder runs on; when the holder drops it,
    // the write that dropped it lets the later declarer run.
    put(&service, "one", with_volume(one_replica("one", "node-1"), "shared"), None).await;
    put(&service, "two", with_volume(one_replica("two", "node-2"), "shared"), None).await;
    assert_ne!(status("one").await["state"], json!("refused"));
    assert_eq!(status("two").await["reason"], json!("volume-shared-unsupported"));
    let one = revision(&service, "one").await;
    put(&service, "one", with_volume(one_replica("one", "node-1"), "own"), Some(one)).await;
    assert_ne!(status("one").await["state"], json!("refused"));
    assert_ne!(status("two").await["state"], json!("refused"));

    // A service placed on a node that does not exist runs once the node is written.
    put(&service, "later", one_replica("later", "node-9"), None).await;
    assert_eq!(status("later").await["reason"], json!("no-eligible-node"));
    let node = json!({ "id": "node-9", "runtimeNamespace": "ns-main", "hostAddresses": [] });
    service.admin_call("putClusterNode", json!({ "clusterId": "c1", "node": node, "rotateCredential": false })).await;
    assert_ne!(status("later").await["state"], json!("refused"));
    service.stop().await;
});

on_both_stores!(background_reconciles_sharing_one_place_lose_no_change, |backend| async move {
    // One place for every background run and no interval: designations of six clusters racing
    // each other queue for it, and each cluster's last designation still reaches its assignments.
    let settings = cloudly::domain::ControllerSettings {
        assignment_reconcile_workers: 1,
        assignment_reconcile_interval_ms: 0,
        ..Default::default()
    };
    let service = TestService::start_with_settings(backend, Default::default(), settings).await;
    let clusters: Vec<String> = (1..=6).map(|index| format!("c{index}")).collect();
    for cluster in &clusters {
        service.seed_cluster(cluster, "web").await;
    }
    let chains = clusters.iter().map(|cluster| {
        let service = &service;
        async move {
            let mut expected = Value::Null;
            let mut last = Value::Null;
            for round in 0..8 {
                let request = designation_request(cluster, "web", &format!("{cluster}-{round}"), 1, expected);
                last = service.admin_call("designateClusterIngress", request).await["designation"].clone();
                expected = support::service::reference_of(&last);
            }
            (cluster.clone(), last)
        }
    });
    let last_designations = futures_util::future::join_all(chains).await;
    service.controller().all_assignments_settled().await;
    for (cluster, designation) in last_designations {
        let facts = service.store.assignment_facts(&id(&cluster), &FactScope::Cluster).await.unwrap();
        let secret = designation["credential"]["secretVersion"]["secretVersionId"].as_str().unwrap().to_owned();
        let web: Vec<_> =
            facts.heads.readable.iter().filter(|head| head.signed.payload.service_id == id("web")).collect();
        assert_eq!(web.len(), 2, "{cluster}: one assignment per node");
        for head in web {
            let carried = serde_json::to_value(&head.signed.payload.workload.environment).unwrap().to_string();
            assert!(carried.contains(&secret), "{cluster}: the last designation's secret {secret} in {carried}");
        }
    }
    service.stop().await;
});

/// A client that hangs up after its write committed does not stop what the write calls for: the
/// reconcile that follows still runs, with nobody waiting for it, and the full pass finds nothing
/// left to correct. On PostgreSQL, where the reconcile lock can be held from outside while the
/// write's own lock (the cluster row) is free.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_write_whose_client_hangs_up_is_still_reconciled() {
    use sqlx::Connection as _;
    let service = cluster(Backend::Postgres, 0).await;
    let mut lock = sqlx::PgConnection::connect(&service.database.url).await.unwrap();
    sqlx::query("BEGIN").execute(&mut lock).await.unwrap();
    sqlx::query("SELECT cluster_id FROM cluster_reconcile_locks WHERE cluster_id = 'c1' FOR UPDATE")
        .execute(&mut lock)
        .await
        .unwrap();
    let impatient = cloudly::client::Client::with_timeout(&service.base_url, Duration::from_millis(500)).unwrap();
    let mut request = json!({ "spec": one_replica("late", "node-1"), "expectedRevision": null });
    request["identity"] = service.admin();
    let answer = impatient.call(cloudly::api::methods::name::PUT_SERVICE_RUNTIME_SPEC, request).await;
    assert!(matches!(answer, Err(cloudly::client::CallError::TimedOut { .. })), "{answer:?}");
    // The spec committed; its reconcile waits for the lock, and its client is gone.
    assert_eq!(revision(&service, "late").await, 1);
    tokio::time::sleep(Duration::from_millis(300)).await;
    sqlx::query("COMMIT").execute(&mut lock).await.unwrap();
    let mut runtime = Vec::new();
    for _ in 0..20 {
        runtime = runtime_by_service(&service).await.remove(&id("late")).unwrap_or_default();
        if runtime.iter().any(|entry| entry.starts_with("assignment ")) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        runtime.iter().any(|entry| entry.starts_with("assignment ")),
        "no assignment for the hung-up write: {runtime:?}"
    );
    service.stop().await;
}
