//! Runtime network leases (`05-projection.md`, "Leases"), on PostgreSQL and on SQLite: every
//! assignment in a node's set holds one lease (a `/30` link subnet from its organization's pool,
//! its first host address), kept across assignment generations, moved with its assignment to
//! another node as a new lease generation, released when the assignment ends; no plan, no pool or
//! a pool too small allocates nothing and breaks nothing; and racing allocations from two
//! controller processes on one PostgreSQL database never overlap.

#[macro_use]
mod support;

use cloudly::contract::network::RuntimeNetworkLease;
use cloudly::contract::network::lease::validate_runtime_network_lease;
use cloudly::contract::service_status::ServiceRuntimeRefusal;
use cloudly::contract::{DigestedRecord, Id, NodeId};
use cloudly::domain::ControllerSettings;
use cloudly::domain::plan::assignments::assignment_id;
use cloudly::domain::plan::leases::{judge_lease_refusal, leases_held_by_other_services};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use support::service::{Backend, Peer, TestService, spec_body};

fn id(text: &str) -> Id {
    Id::parse(text).unwrap()
}

/// A plan of cluster `c1` whose pool for organization `org` is `pool` (no VPN, no endpoints).
fn plan(revision: u64, pool: &str) -> Value {
    json!({
        "clusterId": "c1", "revision": revision, "prefixes": ["10.64.0.0/16"],
        "pools": [{ "id": "pool-org", "organizationId": "org", "prefix": pool }],
        "vpn": null, "hubs": [], "platformEndpoints": [],
    })
}

async fn put_plan(service: &TestService, plan: Value) {
    service.admin_call("putRuntimeNetworkAddressPlan", json!({ "plan": plan })).await;
}

/// Writes the spec of `service_id` (organization `org` unless `organization` says otherwise)
/// with `replicas` on `nodes`, by compare-and-swap on its current revision.
async fn put_spec(service: &TestService, service_id: &str, replicas: u64, nodes: &[&str], image: &str) -> Value {
    let current = service
        .call_as(&service.admin(), "getServiceRuntimeSpec", json!({ "clusterId": "c1", "serviceId": service_id }))
        .await
        .ok()
        .map(|answer| answer["spec"]["revision"].clone());
    let mut body = spec_body("c1", service_id);
    body["replicas"] = json!(replicas);
    body["placement"] = json!({ "nodeIds": nodes });
    body["image"] = json!(image);
    service.admin_call("putServiceRuntimeSpec", json!({ "spec": body, "expectedRevision": current })).await["spec"]
        .clone()
}

async fn live_leases(service: &TestService) -> Vec<RuntimeNetworkLease> {
    service.store.live_leases(&id("c1")).await.unwrap()
}

/// The live leases of one service, by assignment id.
async fn leases_of(service: &TestService, service_id: &str) -> BTreeMap<Id, RuntimeNetworkLease> {
    live_leases(service)
        .await
        .into_iter()
        .filter(|lease| lease.service_id.as_str() == service_id)
        .map(|lease| (lease.assignment_id.clone(), lease))
        .collect()
}

/// The assignments in the nodes' current sets, by id: `(node, generation)`.
async fn active_assignments(service: &TestService) -> BTreeMap<Id, (NodeId, u64)> {
    let mut active = BTreeMap::new();
    for node in ["node-1", "node-2", "node-3"] {
        for stored in service.store.node_assignments(&id("c1"), &NodeId::parse(node).unwrap()).await.unwrap().readable {
            let payload = stored.signed.payload;
            active.insert(payload.id.clone(), (payload.node_id.clone(), payload.generation));
        }
    }
    active
}

/// Every live lease is valid, a `/30` of `pool` whose address is its first host address, held by
/// an active assignment on its node, and no two overlap; every active assignment holds one.
async fn assert_leases_follow_assignments(service: &TestService, pool: &str) {
    let pool = cloudly::contract::Ipv4Prefix::parse(pool).unwrap();
    let leases = live_leases(service).await;
    let active = active_assignments(service).await;
    let mut subnets = BTreeSet::new();
    for lease in &leases {
        assert_eq!(validate_runtime_network_lease(&lease.to_value()), Vec::<String>::new());
        let subnet = lease.ipv4.link_subnet();
        assert_eq!(subnet.length(), 30);
        assert!(pool.contains_prefix(subnet), "{subnet} lies in {pool}");
        assert_eq!(lease.ipv4.address().to_u32(), subnet.network().to_u32() + 1);
        assert!(subnets.insert(subnet.network().to_u32()), "{subnet} is leased once");
        let (node, _) = active.get(&lease.assignment_id).expect("a live lease's assignment is active");
        assert_eq!(&lease.node_id, node);
        assert_eq!(lease.cluster_id.as_str(), "c1");
    }
    let holders: BTreeSet<&Id> = leases.iter().map(|lease| &lease.assignment_id).collect();
    assert_eq!(holders.len(), leases.len(), "one live lease per assignment");
    assert_eq!(holders, active.keys().collect(), "every active assignment holds a lease");
}

on_both_stores!(every_assignment_leases_a_link_subnet_from_its_organizations_pool, |backend| async move {
    let service = TestService::start(backend).await;
    service.seed_cluster("c1", "web").await;
    assert!(live_leases(&service).await.is_empty(), "no plan, no leases");
    assert_eq!(active_assignments(&service).await.len(), 2, "assignments are issued without a plan");

    // The plan allocates leases for the assignments that exist.
    put_plan(&service, plan(1, "10.64.0.0/20")).await;
    let web = leases_of(&service, "web").await;
    assert_eq!(web.len(), 2);
    let first = &web[&assignment_id(&id("c1"), &id("web"), 0)];
    assert_eq!(first.ipv4.link_subnet().to_string(), "10.64.0.0/30");
    assert_eq!(first.ipv4.address().to_string(), "10.64.0.1");
    assert_eq!((first.generation, first.previous.as_ref(), first.organization_id.as_str()), (1, None, "org"));
    assert_eq!(first.node_id.as_str(), "node-1");
    assert_leases_follow_assignments(&service, "10.64.0.0/20").await;

    // A new service's assignments lease beside them, in the reconcile that issues them.
    put_spec(&service, "api", 3, &["node-1", "node-2"], "registry.example/api:1").await;
    assert_eq!(leases_of(&service, "api").await.len(), 3);
    assert_eq!(leases_of(&service, "web").await, web, "web's leases are untouched");
    assert_leases_follow_assignments(&service, "10.64.0.0/20").await;
    service.stop().await;
});

on_both_stores!(a_lease_is_kept_across_assignment_generations_and_moves_with_its_node, |backend| async move {
    let service = TestService::start(backend).await;
    service.seed_cluster("c1", "web").await;
    put_plan(&service, plan(1, "10.64.0.0/20")).await;
    let before = leases_of(&service, "web").await;

    // A new image: every assignment gets a new generation; the leases do not change at all.
    put_spec(&service, "web", 2, &["node-1", "node-2"], "registry.example/ingress:1.5.0").await;
    let active = active_assignments(&service).await;
    assert!(active.values().all(|(_, generation)| *generation == 2), "{active:?}");
    assert_eq!(leases_of(&service, "web").await, before);

    // Placed on node-2 and node-3, replica 0 moves from node-1 to node-2 and replica 1 from
    // node-2 to node-3: each lease gets generation 2 on its new node, with the same address.
    service
        .admin_call(
            "putClusterNode",
            json!({ "clusterId": "c1", "node": { "id": "node-3", "runtimeNamespace": "ns-main", "hostAddresses": [] }, "rotateCredential": false }),
        )
        .await;
    put_spec(&service, "web", 2, &["node-2", "node-3"], "registry.example/ingress:1.5.0").await;
    let after = leases_of(&service, "web").await;
    for (replica, node) in [(0, "node-2"), (1, "node-3")] {
        let assignment = assignment_id(&id("c1"), &id("web"), replica);
        let (old, new) = (&before[&assignment], &after[&assignment]);
        assert_eq!((new.id.clone(), new.generation), (old.id.clone(), 2));
        assert_eq!(new.previous, Some(old.reference()));
        assert_eq!(new.ipv4, old.ipv4, "a lease keeps its address for its whole life");
        assert_eq!(new.node_id.as_str(), node);
        let generations = service.store.lease_generations(&id("c1"), &old.id).await.unwrap();
        assert_eq!(generations, [old.clone(), new.clone()]);
    }
    assert_leases_follow_assignments(&service, "10.64.0.0/20").await;
    service.stop().await;
});

on_both_stores!(leases_are_released_when_their_assignments_end, |backend| async move {
    let service = TestService::start(backend).await;
    service.seed_cluster("c1", "web").await;
    put_plan(&service, plan(1, "10.64.0.0/20")).await;
    put_spec(&service, "api", 2, &["node-1", "node-2"], "registry.example/api:1").await;
    let web = leases_of(&service, "web").await;
    let api = leases_of(&service, "api").await;

    // Scaled down: the lease of the replica that left is released, the other kept.
    put_spec(&service, "web", 1, &["node-1", "node-2"], "registry.example/ingress:1.4.2").await;
    let kept = leases_of(&service, "web").await;
    let replica_0 = assignment_id(&id("c1"), &id("web"), 0);
    assert_eq!(kept.into_iter().collect::<Vec<_>>(), [(replica_0.clone(), web[&replica_0].clone())]);
    assert_leases_follow_assignments(&service, "10.64.0.0/20").await;

    // Deleted: every lease of the service is released; the other service keeps its own.
    let revision = service.admin_call("getServiceRuntimeSpec", json!({ "clusterId": "c1", "serviceId": "web" })).await
        ["spec"]["revision"]
        .clone();
    service
        .admin_call("deleteService", json!({ "clusterId": "c1", "serviceId": "web", "expectedRevision": revision }))
        .await;
    assert!(leases_of(&service, "web").await.is_empty());
    assert_eq!(leases_of(&service, "api").await, api);
    assert_leases_follow_assignments(&service, "10.64.0.0/20").await;

    // Re-created, its assignments get new leases (new ids) on the lowest free link subnets.
    put_spec(&service, "web", 2, &["node-1", "node-2"], "registry.example/ingress:1.4.2").await;
    let again = leases_of(&service, "web").await;
    assert_eq!(again.len(), 2);
    let old_ids: BTreeSet<&Id> = web.values().map(|lease| &lease.id).collect();
    assert!(again.values().all(|lease| !old_ids.contains(&lease.id)), "lease ids are never reused");
    let old_subnets: BTreeSet<String> = web.values().map(|lease| lease.ipv4.link_subnet().to_string()).collect();
    let new_subnets: BTreeSet<String> = again.values().map(|lease| lease.ipv4.link_subnet().to_string()).collect();
    assert_eq!(new_subnets, old_subnets, "released link subnets are free again");
    assert_leases_follow_assignments(&service, "10.64.0.0/20").await;
    service.stop().await;
});

/// The `reason` of the service's runtime status (`null` when it is not refused or waiting).
async fn status_reason(service: &TestService, service_id: &str) -> Value {
    service.admin_call("getServiceRuntimeStatus", json!({ "clusterId": "c1", "serviceId": service_id })).await["status"]
        ["reason"]
        .clone()
}

on_both_stores!(a_missing_or_exhausted_pool_allocates_nothing_and_breaks_nothing, |backend| async move {
    let service = TestService::start(backend).await;
    service.seed_cluster("c1", "web").await;
    // A /29 holds two link subnets: web's two assignments fill it.
    put_plan(&service, plan(1, "10.64.0.0/29")).await;
    assert_eq!(leases_of(&service, "web").await.len(), 2);

    // Another service of the same organization finds the pool exhausted: it is refused, so it
    // gets no assignment and no lease.
    put_spec(&service, "api", 1, &["node-1"], "registry.example/api:1").await;
    assert_eq!(active_assignments(&service).await.len(), 2);
    assert!(leases_of(&service, "api").await.is_empty());
    assert_eq!(status_reason(&service, "api").await, json!("network-workload-pool-exhausted"));
    assert_eq!(status_reason(&service, "web").await, Value::Null, "web holds its own leases: not refused");
    let stored = service.store.network_plan(&id("c1")).await.unwrap().unwrap();
    let leases = live_leases(&service).await;
    let others = leases_held_by_other_services(Some(&stored.plan), &leases, &id("org"), &id("api"));
    assert_eq!(others, 2);
    assert_eq!(
        judge_lease_refusal(Some(&stored.plan), &id("org"), 1, others),
        Some(ServiceRuntimeRefusal::NetworkWorkloadPoolExhausted)
    );
    let own = leases_held_by_other_services(Some(&stored.plan), &leases, &id("org"), &id("web"));
    assert_eq!(judge_lease_refusal(Some(&stored.plan), &id("org"), 2, own), None, "web holds its own: not refused");

    // A service of an organization without a pool: no lease, and a pool-missing verdict.
    service.admin_call("putOrganization", json!({ "organization": { "id": "org-b", "name": "B" } })).await;
    let mut body = spec_body("c1", "shop");
    body["organizationId"] = json!("org-b");
    service.admin_call("putServiceRuntimeSpec", json!({ "spec": body, "expectedRevision": null })).await;
    assert_eq!(active_assignments(&service).await.len(), 2);
    assert!(leases_of(&service, "shop").await.is_empty());
    assert_eq!(status_reason(&service, "shop").await, json!("network-workload-pool-missing"));
    assert_eq!(
        judge_lease_refusal(Some(&stored.plan), &id("org-b"), 2, 0),
        Some(ServiceRuntimeRefusal::NetworkWorkloadPoolMissing)
    );

    // The pool grown by a plan revision: the waiting assignment gets its lease at once.
    put_plan(&service, plan(2, "10.64.0.0/28")).await;
    assert_eq!(leases_of(&service, "api").await.len(), 1);
    assert_eq!(status_reason(&service, "api").await, Value::Null);
    assert!(leases_of(&service, "shop").await.is_empty());
    // A pool for org-b with one link subnet cannot hold shop's two assignments: none.
    put_plan(
        &service,
        json!({
            "clusterId": "c1", "revision": 3, "prefixes": ["10.64.0.0/16"],
            "pools": [
                { "id": "pool-b", "organizationId": "org-b", "prefix": "10.64.1.0/30" },
                { "id": "pool-org", "organizationId": "org", "prefix": "10.64.0.0/28" },
            ],
            "vpn": null, "hubs": [], "platformEndpoints": [],
        }),
    )
    .await;
    assert!(leases_of(&service, "shop").await.is_empty());
    assert_eq!(status_reason(&service, "shop").await, json!("network-workload-pool-exhausted"));
    // Scaled to one replica, shop fits.
    body["replicas"] = json!(1);
    service.admin_call("putServiceRuntimeSpec", json!({ "spec": body, "expectedRevision": 1 })).await;
    let shop: Vec<String> =
        leases_of(&service, "shop").await.values().map(|lease| lease.ipv4.link_subnet().to_string()).collect();
    assert_eq!(shop, ["10.64.1.0/30"]);
    service.stop().await;
});

/// Racing allocations never hand out overlapping link subnets: two controller processes on one
/// PostgreSQL database write services at once, each reconcile allocating under the cluster's
/// lock, until the pool is exactly full.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_allocations_on_postgres_never_overlap() {
    let service = TestService::start(Backend::Postgres).await;
    service.seed_cluster("c1", "web").await;
    let peer = Peer::start(&service, ControllerSettings::default()).await;
    // A /25 holds 32 link subnets: web's 2 and 15 services of 2 replicas fill it exactly.
    put_plan(&service, plan(1, "10.64.0.0/25")).await;
    let admin = service.admin();
    let writes = (0..15).map(|index| {
        let mut body = spec_body("c1", &format!("svc-{index:02}"));
        body["image"] = json!(format!("registry.example/svc:{index}"));
        let request = json!({ "identity": admin, "spec": body, "expectedRevision": null });
        let client = if index % 2 == 0 { service.client.clone() } else { peer.client.clone() };
        async move { client.call("putServiceRuntimeSpec", request).await }
    });
    for answer in futures_util::future::join_all(writes).await {
        answer.unwrap_or_else(|error| panic!("putServiceRuntimeSpec: {error}"));
    }
    // Each process's reconcile ran in its writer's task; the leases follow every assignment.
    assert_leases_follow_assignments(&service, "10.64.0.0/25").await;
    assert_eq!(live_leases(&service).await.len(), 32);
    peer.stop().await;
    service.stop().await;
}
