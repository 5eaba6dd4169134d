//! Signed runtime network projections over the wire, on PostgreSQL and on SQLite
//! (`05-projection.md`, "Projection", "Admission", "Issuing"; `04-registration.md`, "Route
//! table"): a node agent follows a cluster through route, designation and plan changes, and every
//! projection it receives verifies against `getControllerSigningKeys`, passes
//! `validateRuntimeNetworkProjection` and is admitted by the node-side
//! `admitRuntimeNetworkProjection` against the one before; withdrawals stay until the node reports
//! applying the generation that carried them; the route table's backends follow the grants; and
//! the scale case is issued and signed.

#[macro_use]
mod support;

use cloudly::api::Limits;
use cloudly::api::methods::name;
use cloudly::api::wire;
use cloudly::contract::network::RuntimeNetworkLease;
use cloudly::contract::network::projection::{
    ProjectionController, RuntimeNetworkProjection, admit_runtime_network_projection,
    compute_runtime_network_projection_digest, validate_runtime_network_projection,
};
use cloudly::contract::network::workload_ingress::WorkloadIngressGrant;
use cloudly::contract::session::ControllerKind;
use cloudly::contract::signing::{PublishedKey, SignatureError, decode_public_key, sign, signed_to_value, verify};
use cloudly::contract::{AuthorityReference, Id, NodeId, Protocol, Sha256Digest};
use cloudly::domain::ControllerSettings;
use cloudly::domain::projections::testing::{self, lease};
use cloudly::domain::projections::{NodeInputs, next_projection};
use cloudly::store::projections::StoredProjection;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::time::Duration;
use support::node_agent::NodeAgent;
use support::service::{Backend, TestService, designation_request, reference_of, spec_body};

/// The seed's example plan of cluster `c1` at `revision`, with `extra` platform endpoints.
fn plan(revision: u64, extra: Value) -> Value {
    let mut plan = support::service::seed_plan("c1", revision);
    let endpoints = plan["platformEndpoints"].as_array_mut().unwrap();
    endpoints.extend(extra.as_array().cloned().unwrap_or_default());
    endpoints.sort_by(|left, right| left["id"].as_str().cmp(&right["id"].as_str()));
    json!({ "plan": plan })
}

fn route(hostname: &str, port: u16) -> Value {
    json!({ "clusterId": "c1", "route": { "hostname": hostname, "serviceId": "web", "protocol": "tcp", "port": port } })
}

/// A node agent following its projection chain as a node would: every generation it receives is
/// verified, validated and admitted against the one before with its own application.
struct Follower {
    agent: NodeAgent,
    session: Value,
    keys: Vec<PublishedKey>,
    accepted: Option<Value>,
    applied: Option<Value>,
    generations: u64,
}

impl Follower {
    async fn connect(service: &TestService, node: &str) -> Follower {
        let agent = NodeAgent::connect(service).await;
        // A new bearer for the node, keeping the host addresses `world` gave it.
        let addresses = if node == "node-1" { json!(["192.0.2.17"]) } else { json!([]) };
        let node_spec = json!({ "id": node, "runtimeNamespace": "ns-main", "hostAddresses": addresses });
        let put = json!({ "clusterId": "c1", "node": node_spec, "rotateCredential": true });
        let bearer = service.admin_call("putClusterNode", put).await["bearer"].as_str().unwrap().to_owned();
        let session = agent.open("c1", node, &bearer).await;
        Follower { agent, session, keys: published_keys(service).await, accepted: None, applied: None, generations: 0 }
    }

    /// Asks for the current projection (`known` = the last accepted one); a new one must verify
    /// and be admitted. Answers the payload when one came.
    async fn fetch(&mut self) -> Option<Value> {
        let known = self.accepted.as_ref().map(reference_of).unwrap_or(Value::Null);
        let answer = self
            .agent
            .call(
                name::GET_RUNTIME_NETWORK_PROJECTION,
                wire::GetRuntimeNetworkProjection { session: &self.session, known: &known },
            )
            .await
            .unwrap_or_else(|error| panic!("getRuntimeNetworkProjection: {error:?}"));
        let signed = answer["projection"].clone();
        if signed.is_null() {
            return None;
        }
        let payload: RuntimeNetworkProjection =
            verify(&signed, &self.keys).unwrap_or_else(|error| panic!("the projection verifies: {error}"));
        assert!(validate_runtime_network_projection(&signed["payload"]).is_ok());
        let applied = self
            .applied
            .as_ref()
            .map(|applied| serde_json::from_value::<AuthorityReferenceJson>(applied.clone()).unwrap().0);
        // A node that joins a chain late starts from a validated projection; from then on every
        // generation must be admitted against the one before.
        if self.accepted.is_some() || payload.generation == 1 {
            let admission =
                admit_runtime_network_projection(self.accepted.as_ref(), &signed["payload"], applied.as_ref())
                    .unwrap_or_else(|_| panic!("the node admits generation {}", payload.generation));
            assert_eq!(serde_json::to_value(admission.status).unwrap(), json!("accepted"));
        }
        self.accepted = Some(signed["payload"].clone());
        self.generations += 1;
        Some(signed["payload"].clone())
    }

    /// Reports the last accepted projection applied.
    async fn apply(&mut self) {
        let applied = reference_of(self.accepted.as_ref().expect("a projection to apply"));
        let answer = self
            .agent
            .call(
                name::REPORT_RUNTIME_NETWORK_PROJECTION_APPLIED,
                wire::ReportRuntimeNetworkProjectionApplied { session: &self.session, applied: &applied },
            )
            .await
            .unwrap_or_else(|error| panic!("reportRuntimeNetworkProjectionApplied: {error:?}"));
        assert_eq!(answer, json!({ "recorded": true }));
        self.applied = Some(applied);
    }

    fn current(&self) -> &Value {
        self.accepted.as_ref().expect("a projection")
    }
}

/// An `IRuntimeAuthorityReference` read from JSON through the contract's reader.
struct AuthorityReferenceJson(AuthorityReference);

impl<'de> serde::Deserialize<'de> for AuthorityReferenceJson {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = Value::deserialize(deserializer)?;
        AuthorityReference::read(&value)
            .map(AuthorityReferenceJson)
            .map_err(|_| serde::de::Error::custom("a reference"))
    }
}

async fn published_keys(service: &TestService) -> Vec<PublishedKey> {
    let answer = service.admin_call("getControllerSigningKeys", json!({})).await;
    answer["keys"]
        .as_array()
        .expect("keys")
        .iter()
        .map(|key| PublishedKey::new(decode_public_key(key["publicKey"].as_str().unwrap()).expect("a public key")))
        .collect()
}

/// `(source lease id, destination lease id, port)` of each grant, in order.
fn grant_ids(projection: &Value) -> Vec<(String, String, u64)> {
    projection["workloadIngress"]["grants"]
        .as_array()
        .map(|grants| {
            grants
                .iter()
                .map(|grant| {
                    (
                        grant["source"]["id"].as_str().unwrap().to_owned(),
                        grant["destination"]["id"].as_str().unwrap().to_owned(),
                        grant["port"].as_u64().unwrap(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The live leases of the cluster by service: read from the node projections' endpoints.
fn leases_by_service(projections: &[&Value]) -> BTreeMap<String, Vec<(String, String)>> {
    let mut by_service: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
    for projection in projections {
        for endpoint in projection["endpoints"].as_array().unwrap() {
            let lease = &endpoint["lease"];
            let entry = by_service.entry(lease["serviceId"].as_str().unwrap().to_owned()).or_default();
            let pair = (lease["id"].as_str().unwrap().to_owned(), lease["nodeId"].as_str().unwrap().to_owned());
            if !entry.contains(&pair) {
                entry.push(pair);
            }
        }
    }
    by_service
}

/// Cluster `c1`: nodes `node-1` (its host carries `192.0.2.17`) and `node-2`; service `web` on
/// both nodes with ports 443 and 8080; service `ingress` on `node-1`, designated; the seed's plan;
/// routes to `web` on both ports.
async fn world(backend: Backend) -> TestService {
    world_with(backend, ControllerSettings::default()).await
}

/// [`world`] served with `settings`.
async fn world_with(backend: Backend, settings: ControllerSettings) -> TestService {
    let service = TestService::start_with_settings(backend, Limits::default(), settings).await;
    service.seed_cluster("c1", "web").await;
    let node = json!({ "id": "node-1", "runtimeNamespace": "ns-main", "hostAddresses": ["192.0.2.17"] });
    service.admin_call("putClusterNode", json!({ "clusterId": "c1", "node": node, "rotateCredential": false })).await;
    let mut web = spec_body("c1", "web");
    web["ports"] = json!([{ "protocol": "tcp", "port": 443 }, { "protocol": "tcp", "port": 8080 }]);
    service.admin_call("putServiceRuntimeSpec", json!({ "spec": web, "expectedRevision": 1 })).await;
    let mut ingress = spec_body("c1", "ingress");
    ingress["replicas"] = json!(1);
    ingress["placement"] = json!({ "nodeIds": ["node-1"] });
    service.admin_call("putServiceRuntimeSpec", json!({ "spec": ingress, "expectedRevision": null })).await;
    service.admin_call("putRuntimeNetworkAddressPlan", plan(1, json!([]))).await;
    service.admin_call("designateClusterIngress", designation_request("c1", "ingress", "m1", 1, Value::Null)).await;
    service.admin_call("putClusterIngressRoute", route("a.example.com", 443)).await;
    service.admin_call("putClusterIngressRoute", route("b.example.com", 8080)).await;
    service
}

async fn current_designation(service: &TestService) -> Value {
    service.admin_call("getClusterIngressDesignation", json!({ "clusterId": "c1" })).await["designation"].clone()
}

/// Fetches until a projection arrives (background reconciles may still be running).
async fn fetch_new(follower: &mut Follower) -> Value {
    for _ in 0..200 {
        if let Some(projection) = follower.fetch().await {
            return projection;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("no new projection arrived")
}

/// The world with `node-1` following, once its projection grants all four routes and every
/// background reconcile has settled.
async fn settled_world(backend: Backend) -> (TestService, Follower) {
    let service = world(backend).await;
    let mut one = Follower::connect(&service, "node-1").await;
    fetch_until(&mut one, |projection| grant_ids(projection).len() == 4).await;
    service.controller().all_assignments_settled().await;
    fetch_until(&mut one, |projection| grant_ids(projection).len() == 4).await;
    (service, one)
}

/// Fetches until the projection satisfies `done` (each generation received is admitted).
async fn fetch_until(follower: &mut Follower, done: impl Fn(&Value) -> bool) -> Value {
    for _ in 0..200 {
        follower.fetch().await;
        if follower.accepted.as_ref().is_some_and(&done) {
            return follower.current().clone();
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the projection never reached the expected state: {}", follower.current())
}

on_both_stores!(a_node_agent_follows_the_cluster_and_admits_every_projection, |backend| async move {
    let service = world(backend).await;
    let mut one = Follower::connect(&service, "node-1").await;
    let mut two = Follower::connect(&service, "node-2").await;
    let designation = current_designation(&service).await;
    let authorized = |projection: &Value, designation: &Value| {
        projection["workloadIngress"]["grants"]
            .as_array()
            .is_some_and(|grants| grants.iter().all(|grant| grant["authorization"] == reference_of(designation)))
    };
    let first = fetch_until(&mut one, |projection| grant_ids(projection).len() == 4).await;
    let second = fetch_until(&mut two, |projection| grant_ids(projection).len() == 2).await;
    assert!(authorized(&first, &designation) && authorized(&second, &designation));

    // Exactly the expected grants: from the ingress lease to each web lease, on both ports; on
    // node-2 only those whose target is on node-2.
    let leases = leases_by_service(&[&first, &second]);
    let ingress = &leases["ingress"];
    assert_eq!(ingress.len(), 1, "one ingress lease");
    let (ingress_lease, ingress_node) = &ingress[0];
    assert_eq!(ingress_node, "node-1");
    let web = &leases["web"];
    assert_eq!(web.len(), 2, "two web leases");
    let mut expected_one: Vec<(String, String, u64)> = web
        .iter()
        .flat_map(|(lease, _)| [443, 8080].map(|port| (ingress_lease.clone(), lease.clone(), port)))
        .collect();
    expected_one.sort();
    assert_eq!(grant_ids(&first), expected_one);
    let web_on_two = &web.iter().find(|(_, node)| node == "node-2").unwrap().0;
    assert_eq!(
        grant_ids(&second),
        vec![(ingress_lease.clone(), web_on_two.clone(), 443), (ingress_lease.clone(), web_on_two.clone(), 8080)]
    );
    let endpoint_ids = |projection: &Value| -> Vec<String> {
        projection["endpoints"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["lease"]["id"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(endpoint_ids(&first).len(), 3, "its own two leases and the web lease on node-2");
    let mut expected_two = vec![ingress_lease.clone(), web_on_two.clone()];
    expected_two.sort();
    assert_eq!(endpoint_ids(&second), expected_two);

    // hostPlatformEndpointIds: node-1's host carries 192.0.2.17; node-2's carries nothing.
    assert_eq!(first["hostPlatformEndpointIds"], json!(["corestore", "relay-listener"]));
    assert!(second.get("hostPlatformEndpointIds").is_none());
    assert_eq!(first["protectedAuthority"]["id"], json!("c1"));

    // The route table's backends follow the grants.
    let table = service.admin_call("getClusterIngressRoutes", json!({ "clusterId": "c1" })).await["table"].clone();
    let mut web_leases: Vec<&String> = web.iter().map(|(lease, _)| lease).collect();
    web_leases.sort();
    for (index, port) in [(0, 443), (1, 8080)] {
        let backends: Vec<&str> = table["routes"][index]["backends"]
            .as_array()
            .unwrap()
            .iter()
            .inspect(|backend| assert_eq!(backend["port"], json!(port)))
            .map(|backend| backend["leaseId"].as_str().unwrap())
            .collect();
        assert_eq!(backends, web_leases.iter().map(|lease| lease.as_str()).collect::<Vec<_>>());
    }
    let revision_with_backends = table["revision"].as_u64().unwrap();

    // Deleting a route withdraws its grants; the withdrawals stay until the node reports applying
    // the generation that carried them.
    one.apply().await;
    two.apply().await;
    service.admin_call("deleteClusterIngressRoute", json!({ "clusterId": "c1", "hostname": "b.example.com" })).await;
    let withdrawn = fetch_new(&mut one).await;
    assert_eq!(grant_ids(&withdrawn).len(), 2, "only port 443 is granted");
    let withdrawals = withdrawn["workloadIngress"]["withdrawals"].as_array().unwrap().clone();
    assert_eq!(withdrawals.len(), 2, "the two port-8080 grants are withdrawn");
    assert!(withdrawals.iter().all(|withdrawal| withdrawal["destination"]["port"] == json!(8080)));
    let withdrawn_two = fetch_new(&mut two).await;
    assert_eq!(withdrawn_two["workloadIngress"]["withdrawals"].as_array().unwrap().len(), 1);
    assert!(one.fetch().await.is_none(), "nothing changes until the node reports");
    one.apply().await;
    let dropped = fetch_new(&mut one).await;
    assert!(dropped["workloadIngress"]["withdrawals"].as_array().unwrap().is_empty(), "{dropped}");
    assert_eq!(grant_ids(&dropped).len(), 2);
    let table = service.admin_call("getClusterIngressRoutes", json!({ "clusterId": "c1" })).await["table"].clone();
    assert!(table["revision"].as_u64().unwrap() > revision_with_backends);
    assert_eq!(table["routes"].as_array().unwrap().len(), 1);

    // Rotating the designation changes every grant's authorization and withdraws nothing.
    two.apply().await;
    let dropped_two = fetch_new(&mut two).await;
    assert!(dropped_two.get("workloadIngress").unwrap()["withdrawals"].as_array().unwrap().is_empty());
    one.apply().await;
    two.apply().await;
    service
        .admin_call(
            "designateClusterIngress",
            designation_request("c1", "ingress", "m2", 1, reference_of(&designation)),
        )
        .await;
    let rotated = current_designation(&service).await;
    assert_ne!(rotated["digest"], designation["digest"]);
    let after = fetch_until(&mut one, |projection| authorized(projection, &rotated)).await;
    assert_eq!(grant_ids(&after), grant_ids(&dropped), "the same grants");
    assert!(after["workloadIngress"]["withdrawals"].as_array().unwrap().is_empty(), "nothing withdrawn");
    let after_two = fetch_until(&mut two, |projection| authorized(projection, &rotated)).await;
    assert!(after_two["workloadIngress"]["withdrawals"].as_array().unwrap().is_empty());

    // A plan revision that changes the platform endpoints makes a new authority generation, and
    // every node's projection carries it.
    one.apply().await;
    let extra = json!([{ "id": "metrics", "address": "192.0.2.18", "protocol": "tcp", "port": 9100 }]);
    service.admin_call("putRuntimeNetworkAddressPlan", plan(2, extra)).await;
    let replanned =
        fetch_until(&mut one, |projection| projection["protectedAuthority"]["generation"] == json!(2)).await;
    assert_eq!(replanned["protectedAuthority"]["platformEndpoints"].as_array().unwrap().len(), 4);
    assert_eq!(replanned["hostPlatformEndpointIds"], json!(["corestore", "relay-listener"]));
    fetch_until(&mut two, |projection| projection["protectedAuthority"]["generation"] == json!(2)).await;

    // Deleting the last route: node-2's projection has neither new member, and its bytes are
    // those of a projection built before the members existed.
    two.apply().await;
    service.admin_call("deleteClusterIngressRoute", json!({ "clusterId": "c1", "hostname": "a.example.com" })).await;
    let bare = fetch_until(&mut two, |projection| grant_ids(projection).is_empty()).await;
    two.apply().await;
    let bare = if bare.get("workloadIngress").is_some() { fetch_new(&mut two).await } else { bare };
    assert!(bare.get("workloadIngress").is_none() && bare.get("hostPlatformEndpointIds").is_none(), "{bare}");
    assert_eq!(compute_runtime_network_projection_digest(&bare).unwrap().as_str(), bare["digest"].as_str().unwrap());
    let canonical = cloudly::contract::json::canonical(&bare).unwrap();
    assert!(!canonical.contains("workloadIngress") && !canonical.contains("hostPlatformEndpointIds"));

    // An administrator reads each node's projection with its reported application.
    let for_node = service
        .admin_call("getRuntimeNetworkProjectionForNode", json!({ "clusterId": "c1", "nodeId": "node-2" }))
        .await;
    assert_eq!(for_node["projection"]["payload"], bare);
    assert_eq!(Some(&for_node["applied"]), two.applied.as_ref(), "the generation node-2 reported applying");
    assert!(one.generations >= 5 && two.generations >= 5, "{} {}", one.generations, two.generations);
    service.stop().await;
});

/// A route deleted through the store alone: the write of a process stopped before its issue ran.
async fn delete_route_without_issuing(service: &TestService, hostname: &str) {
    service.store.delete_ingress_route(&Id::parse("c1").unwrap(), hostname).await.expect("the route is deleted");
}

on_both_stores!(reads_answer_the_stored_head_and_the_sweep_repairs_a_missed_issue, |backend| async move {
    let (service, mut one) = settled_world(backend).await;

    // A read answers the stored head: it does not issue what a write left unissued.
    delete_route_without_issuing(&service, "b.example.com").await;
    assert!(one.fetch().await.is_none(), "the node's known head is still current");
    let for_node = service
        .admin_call("getRuntimeNetworkProjectionForNode", json!({ "clusterId": "c1", "nodeId": "node-1" }))
        .await;
    assert_eq!(grant_ids(&for_node["projection"]["payload"]).len(), 4);

    // The sweep issues every cluster: the route's grants are withdrawn.
    service.controller().sweep_projections().await;
    let repaired = fetch_new(&mut one).await;
    assert_eq!(grant_ids(&repaired).len(), 2, "only port 443 is granted");
    assert_eq!(repaired["workloadIngress"]["withdrawals"].as_array().unwrap().len(), 2);
    service.stop().await;
});

on_both_stores!(a_current_known_is_answered_from_the_head_without_reading_the_record, |backend| async move {
    let (service, mut one) = settled_world(backend).await;
    // The stored record made unreadable behind the store's back: a node whose `known` is current
    // is still answered (nothing new), since only the head is read for it.
    service.database.execute("UPDATE runtime_network_projections SET record = '{}' WHERE node_id = 'node-1'").await;
    assert!(one.fetch().await.is_none(), "a current known is answered from the head");
    // A node without a known needs the record: the unreadable row is an error, not a projection.
    let whole = wire::GetRuntimeNetworkProjection { session: &one.session, known: &Value::Null };
    let whole = one.agent.call(name::GET_RUNTIME_NETWORK_PROJECTION, whole).await;
    assert!(whole.is_err(), "an unreadable record was answered: {whole:?}");
    // The poll with a current known still checks the session in the same read. A node session
    // opened through another controller process (a newer generation written to the store; this
    // process keeps the old socket open) ends the socket's session, and another node's session
    // is not this socket's.
    let known = reference_of(one.current());
    let asked = wire::GetRuntimeNetworkProjection { session: one.session.clone(), known: known.clone() };
    assert!(one.agent.call(name::GET_RUNTIME_NETWORK_PROJECTION, &asked).await.unwrap()["projection"].is_null());
    service
        .database
        .execute(
            "INSERT INTO runtime_sessions (cluster_id, node_id, generation, session_id, controller_kind, \
               controller_id, runtime_namespace, opened_at) \
             SELECT cluster_id, node_id, generation + 1, 'elsewhere', controller_kind, 'other-process', \
               runtime_namespace, opened_at FROM runtime_sessions \
             WHERE cluster_id = 'c1' AND node_id = 'node-1' ORDER BY generation DESC LIMIT 1",
        )
        .await;
    let error = one.agent.call(name::GET_RUNTIME_NETWORK_PROJECTION, asked).await.expect_err("a superseded session");
    assert_eq!(error.code(), "principal-refused");
    assert_eq!(error.data["current"]["id"], json!("elsewhere"));
    let two = Follower::connect(&service, "node-2").await;
    let foreign = wire::GetRuntimeNetworkProjection { session: &two.session, known: &known };
    let error =
        one.agent.call(name::GET_RUNTIME_NETWORK_PROJECTION, foreign).await.expect_err("another node's session");
    assert_eq!(error.code(), "principal-refused");
    service.stop_unchecked().await;
});

on_both_stores!(the_server_sweeps_projections_every_interval, |backend| async move {
    let settings = ControllerSettings { projection_sweep_ms: 1_000, ..ControllerSettings::default() };
    let service = world_with(backend, settings).await;
    let mut one = Follower::connect(&service, "node-1").await;
    fetch_until(&mut one, |projection| grant_ids(projection).len() == 4).await;
    delete_route_without_issuing(&service, "b.example.com").await;
    // `fetch_until` gives up after about 4 s: several sweeps of 1 s.
    fetch_until(&mut one, |projection| grant_ids(projection).len() == 2).await;
    service.stop().await;
});

on_both_stores!(tampered_or_unknown_key_projections_fail_verification, |backend| async move {
    let service = world(backend).await;
    let mut one = Follower::connect(&service, "node-1").await;
    fetch_until(&mut one, |projection| grant_ids(projection).len() == 4).await;
    let signed = service
        .admin_call("getRuntimeNetworkProjectionForNode", json!({ "clusterId": "c1", "nodeId": "node-1" }))
        .await["projection"]
        .clone();
    let keys = published_keys(&service).await;
    assert!(verify::<RuntimeNetworkProjection>(&signed, &keys).is_ok());
    let mut tampered = signed.clone();
    tampered["payload"]["runtimeNamespace"] = json!("ns-other");
    assert_eq!(verify::<RuntimeNetworkProjection>(&tampered, &keys).unwrap_err(), SignatureError::PayloadDigest);
    let mut resealed = tampered.clone();
    resealed["payload"]["digest"] =
        json!(compute_runtime_network_projection_digest(&tampered["payload"]).unwrap().as_str());
    assert_eq!(verify::<RuntimeNetworkProjection>(&resealed, &keys).unwrap_err(), SignatureError::BadSignature);
    let mut unknown = signed.clone();
    unknown["signature"]["keyId"] = json!(format!("sha256:{}", "0".repeat(64)));
    assert_eq!(verify::<RuntimeNetworkProjection>(&unknown, &keys).unwrap_err(), SignatureError::UnknownKey);

    // The CLI prints the payload and, with --verify, the key that signed it.
    let directory = std::env::temp_dir().join(format!("cloudly-projection-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&directory).unwrap();
    let identity = directory.join("admin.json");
    std::fs::write(&identity, service.admin().to_string()).unwrap();
    let args = ["network", "projection", "--cluster", "c1", "--node", "node-1", "--verify"];
    let printed = service.cli(&identity, &args).await;
    let current = service
        .admin_call("getRuntimeNetworkProjectionForNode", json!({ "clusterId": "c1", "nodeId": "node-1" }))
        .await;
    assert_eq!(printed["projection"], current["projection"]["payload"]);
    assert_eq!(printed["keyId"], current["projection"]["signature"]["keyId"]);
    service.stop().await;
});

on_both_stores!(an_unknown_application_report_is_not_found_and_changes_nothing, |backend| async move {
    let service = world(backend).await;
    let mut one = Follower::connect(&service, "node-1").await;
    let projection = fetch_new(&mut one).await;
    let mut unknown = reference_of(&projection);
    unknown["digest"] = json!(format!("sha256:{}", "1".repeat(64)));
    let error = one
        .agent
        .call(
            name::REPORT_RUNTIME_NETWORK_PROJECTION_APPLIED,
            wire::ReportRuntimeNetworkProjectionApplied { session: &one.session, applied: &unknown },
        )
        .await
        .expect_err("an unknown generation");
    assert_eq!(error.code(), "not-found");
    let for_node = service
        .admin_call("getRuntimeNetworkProjectionForNode", json!({ "clusterId": "c1", "nodeId": "node-1" }))
        .await;
    assert_eq!(for_node["applied"], Value::Null);
    service.stop().await;
});

fn id(text: &str) -> Id {
    Id::parse(text).unwrap()
}

/// The scale case (`05-projection.md`): 4 096 endpoints, 1 024 grants and 4 096 retained
/// withdrawals issued, admitted and signed through the issuer's own builder, one generation after
/// another without the node applying any.
#[test]
fn the_maximal_projection_is_issued_admitted_and_signed() {
    let node = NodeId::parse("node-1").unwrap();
    let ingress = lease(0, "ingress", "node-1");
    let targets: Vec<RuntimeNetworkLease> = (1..4096).map(|index| lease(index, "web", "node-1")).collect();
    let mut endpoints = vec![ingress.clone()];
    endpoints.extend(targets.iter().cloned());
    endpoints.sort_by(|left, right| left.id.as_str().cmp(right.id.as_str()));
    let authorization = AuthorityReference { id: id("c1"), generation: 1, digest: Sha256Digest::from_bytes(&[7; 32]) };
    let authority = testing::authority();
    let controller = testing::controller();
    let signing = ed25519_dalek::SigningKey::from_bytes(&[5; 32]);
    let keys = [PublishedKey::new(signing.verifying_key())];
    let mut previous: Option<StoredProjection> = None;
    for round in 0..5u16 {
        let mut grants: Vec<WorkloadIngressGrant> = targets[..1024]
            .iter()
            .map(|target| WorkloadIngressGrant {
                source: ingress.reference(),
                destination: target.reference(),
                protocol: Protocol::Tcp,
                port: 1000 + round,
                authorization: authorization.clone(),
            })
            .collect();
        grants.sort_by(WorkloadIngressGrant::order_cmp);
        let inputs = NodeInputs {
            node_id: node.clone(),
            runtime_namespace: id("ns-main"),
            endpoints: endpoints.clone(),
            grants,
            host_platform_endpoint_ids: Vec::new(),
        };
        let next = next_projection(&inputs, &authority, &id("c1"), &controller, previous.as_ref())
            .unwrap_or_else(|deferred| panic!("round {round}: {deferred:?}"))
            .expect("new content");
        assert_eq!(next.endpoints.len(), 4096);
        assert_eq!(next.workload_ingress.as_ref().unwrap().grants.len(), 1024);
        assert_eq!(next.withdrawals().len(), 1024 * usize::from(round));
        assert_eq!(next.controller, ProjectionController { kind: ControllerKind::Cloudly, id: id("cloudly") });
        let signed = sign(&signing, next);
        let verified: RuntimeNetworkProjection = verify(&signed_to_value(&signed), &keys).expect("it verifies");
        assert_eq!(verified, signed.payload);
        previous = Some(StoredProjection { signed, applied: None });
    }
    assert_eq!(previous.unwrap().signed.payload.withdrawals().len(), 4096);
}
