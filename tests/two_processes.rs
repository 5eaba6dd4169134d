//! Two `cloudly serve` processes on one PostgreSQL database: racing designations across them
//! accept exactly one; an ingress registers through one with a relay connected through the other,
//! and the relay election both agree on decides `relay-not-connected`; a change made through one
//! reaches a node connected to the other (`pushRuntimeChanged`, claim pushes), also after the
//! listener's connection was cut; after `cloudly keys rotate` both sign with the new key, the one
//! whose keys/ lacks it only once it is copied there; both drain and exit cleanly on SIGTERM; no
//! bearer or token appears in either process's log.

mod support;

use cloudly::api::methods::name;
use cloudly::api::wire;
use cloudly::client::{CallError, Client};
use cloudly::contract::designation::snapshot_cluster_ingress_designation;
use cloudly::keys::ControllerKeys;
use serde_json::{Value, json};
use support::process::{Serving, start_with};
use support::service::{Backend, TestDatabase, designation_request, spec_body};

/// Two processes on one database, the second sharing the first one's keys (as controllers of one
/// cluster do), with a client of each and the bootstrap administrator identity.
struct Pair {
    first: Serving,
    second: Serving,
    clients: [Client; 2],
    identity: Value,
    first_dir: std::path::PathBuf,
    second_dir: std::path::PathBuf,
    root: std::path::PathBuf,
}

fn start_two(database: &TestDatabase) -> Pair {
    start_two_with(database, &[])
}

/// [`start_two`] with more environment variables for both processes.
fn start_two_with(database: &TestDatabase, environment: &[(&str, &str)]) -> Pair {
    let root = std::env::temp_dir().join(format!("cloudly-two-{}", uuid::Uuid::new_v4().simple()));
    let (first_dir, second_dir) = (root.join("a"), root.join("b"));
    let first = start_with(&first_dir, &database.url, environment).serving();
    std::fs::create_dir_all(second_dir.join("keys")).unwrap();
    for key in ["identity.ed25519", "signing.ed25519", "secret.key"] {
        std::fs::copy(first_dir.join("keys").join(key), second_dir.join("keys").join(key)).unwrap();
    }
    let second = start_with(&second_dir, &database.url, environment).serving();
    let identity: Value =
        serde_json::from_str(&std::fs::read_to_string(first_dir.join("admin-identity.json")).unwrap()).unwrap();
    let clients = [Client::new(&first.base_url), Client::new(&second.base_url)];
    Pair { first, second, clients, identity, first_dir, second_dir, root }
}

impl Pair {
    /// Calls `method` as the administrator through `client`.
    fn call(
        &self,
        client: usize,
        method: &'static str,
        mut request: Value,
    ) -> impl Future<Output = Result<Value, CallError>> + use<> {
        request["identity"] = self.identity.clone();
        let client = self.clients[client].clone();
        async move { client.call(method, request).await }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_controller_processes_on_one_database_accept_exactly_one_of_32_racers() {
    let database = TestDatabase::create(Backend::Postgres).await;
    let pair = start_two(&database);
    let call = |client: usize, method: &'static str, request: Value| pair.call(client, method, request);
    call(0, "putOrganization", json!({ "organization": { "id": "org", "name": "Org" } })).await.unwrap();
    call(1, "putCluster", json!({ "cluster": {
        "id": "c1", "organizationId": "org", "runtime": { "phase": "pallet", "generation": 3 },
        "relayOrigin": "https://relay.example.net", "fleetCutoverIngressDesignation": null }, "expectedRevision": null }))
        .await
        .unwrap();
    call(0, "putServiceRuntimeSpec", json!({ "spec": spec_body("c1", "ingress"), "expectedRevision": null }))
        .await
        .unwrap();
    let node = call(1, "putClusterNode", json!({ "clusterId": "c1",
        "node": { "id": "node-1", "runtimeNamespace": "ns-main", "hostAddresses": ["192.0.2.17"] }, "rotateCredential": false }))
        .await
        .unwrap();
    let node_bearer = node["bearer"].as_str().expect("a new node's bearer is shown once").to_owned();
    let listed = call(0, "listClusterNodes", json!({ "clusterId": "c1" })).await.unwrap();
    assert!(!listed.to_string().contains(&node_bearer), "a node bearer is shown only when issued");

    let mut racers = Vec::new();
    for index in 0..32 {
        let racer = call(
            index % 2,
            "designateClusterIngress",
            designation_request("c1", "ingress", &format!("race-{index}"), 1, Value::Null),
        );
        racers.push(tokio::spawn(racer));
    }
    let (mut accepted, mut conflicts) = (Vec::new(), 0);
    for racer in racers {
        match racer.await.unwrap() {
            Ok(answer) => accepted.push(answer),
            Err(CallError::Typed(error)) if error.code() == "designation-conflict" => conflicts += 1,
            Err(other) => panic!("unexpected answer: {other}"),
        }
    }
    assert_eq!((accepted.len(), conflicts), (1, 31));
    // Both processes answer the same current designation.
    for client in 0..2 {
        let current = call(client, "getClusterIngressDesignation", json!({ "clusterId": "c1" })).await.unwrap();
        assert_eq!(current["designation"], accepted[0]["designation"]);
    }

    // The bearer exists (sealed in the store) and appears in no log line of either process.
    let designation = snapshot_cluster_ingress_designation(&accepted[0]["designation"]).unwrap();
    let store = cloudly::store::open(&database.url).await.unwrap();
    let version = &designation.credential.secret_version;
    let sealed = store.get_secret(&version.secret_id, &version.secret_version_id).await.unwrap().unwrap();
    let keys = ControllerKeys::load(&pair.first_dir).unwrap();
    let bearer = cloudly::domain::secrets::open(keys.secret_key(), &sealed).unwrap();
    let token = pair.identity["jwt"].as_str().unwrap().to_owned();
    let logs = [pair.first.terminate(), pair.second.terminate()];
    for log in &logs {
        assert!(log.contains("cluster ingress designation accepted") || log.contains("typed request"), "{log}");
        assert!(!log.contains(bearer.expose()), "a log line carries the ingress bearer");
        assert!(!log.contains(&token), "a log line carries the identity token");
        assert!(!log.contains(&node_bearer), "a log line carries the node bearer");
    }
    drop(store);
    let _ = std::fs::remove_dir_all(pair.root);
    database.drop_now().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_ingress_registers_across_two_controller_processes_that_agree_on_the_relay_election() {
    use cloudly::contract::registration::read_cluster_ingress_registration_refusal;
    use support::ingress::{connect_relay_with_bearer_at, register, registration, run_ingress_replica};
    use support::node_agent::NodeAgent;

    let database = TestDatabase::create(Backend::Postgres).await;
    let pair = start_two(&database);
    let call = |client: usize, method: &'static str, request: Value| {
        let answer = pair.call(client, method, request);
        async move { answer.await.unwrap_or_else(|error| panic!("{method}: {error}")) }
    };
    call(0, "putOrganization", json!({ "organization": { "id": "org", "name": "Org" } })).await;
    call(1, "putCluster", json!({ "cluster": {
        "id": "c1", "organizationId": "org", "runtime": { "phase": "pallet", "generation": 3 },
        "relayOrigin": "https://relay.example.net", "fleetCutoverIngressDesignation": null }, "expectedRevision": null }))
        .await;
    let node = call(
        0,
        "putClusterNode",
        json!({ "clusterId": "c1",
        "node": { "id": "node-1", "runtimeNamespace": "ns-main", "hostAddresses": [] }, "rotateCredential": false }),
    )
    .await;
    let node_bearer = node["bearer"].as_str().unwrap().to_owned();
    let mut body = spec_body("c1", "ingress");
    body["replicas"] = json!(1);
    body["placement"] = json!({ "nodeIds": ["node-1"] });
    call(1, "putServiceRuntimeSpec", json!({ "spec": body, "expectedRevision": null })).await;
    call(0, "designateClusterIngress", designation_request("c1", "ingress", "m1", 1, Value::Null)).await;

    // The node's socket is on the first process; it runs the ingress.
    let agent = NodeAgent::connect_to(&pair.first.base_url).await;
    let session = agent.open("c1", "node-1", &node_bearer).await;
    let assignments =
        agent.call(name::GET_RUNTIME_ASSIGNMENTS, wire::GetRuntimeAssignments { session: &session }).await.unwrap();
    let assignment = assignments["assignments"][0]["payload"].clone();
    let bearer = run_ingress_replica(&agent, &session, &assignment).await.unwrap();

    // The relay connects through the second process; the ingress registers through the first.
    let admin = |method: &'static str, request: Value| call(0, method, request);
    let issued = admin("issueClusterRelayCredential", json!({ "clusterId": "c1", "relayId": "relay-1" })).await;
    let relay_bearer = issued["bearer"].as_str().unwrap().to_owned();
    let old_token = connect_relay_with_bearer_at(&pair.clients[1], "c1", "relay-1", &relay_bearer).await;
    let accepted = register(&pair.clients[0], registration(&bearer, "node-1"), Some(&old_token)).await.unwrap();
    assert_eq!(accepted["accepted"], json!(true));
    // A new connection through the first process supersedes it in both.
    let new_token = connect_relay_with_bearer_at(&pair.clients[0], "c1", "relay-1", &relay_bearer).await;
    for client in &pair.clients {
        let refused = register(client, registration(&bearer, "node-1"), Some(&old_token)).await.unwrap_err();
        let refusal = read_cluster_ingress_registration_refusal(&refused.data).expect("a registration refusal");
        assert_eq!(refusal.reason().as_str(), "relay-not-connected");
        register(client, registration(&bearer, "node-1"), Some(&new_token)).await.unwrap();
    }
    let listed = call(1, "listClusterIngressRegistrations", json!({ "clusterId": "c1" })).await;
    assert_eq!(listed["registrations"].as_array().unwrap().len(), 3);

    drop(agent);
    let logs = [pair.first.terminate(), pair.second.terminate()];
    for log in &logs {
        assert!(log.contains("cluster ingress registered") || log.contains("typed request"), "{log}");
        for secret in [&bearer, &node_bearer, &relay_bearer, &old_token, &new_token] {
            assert!(!log.contains(secret.as_str()), "a log line carries a secret");
        }
    }
    let _ = std::fs::remove_dir_all(pair.root);
    database.drop_now().await;
}

/// How long a change made through one process may take to reach a node connected to the other.
const PUSH_BOUND: std::time::Duration = std::time::Duration::from_secs(3);

/// Organization `org`, cluster `c1`, node `node-1` (answering its bearer) and service `db` on it,
/// written through the second process.
async fn seed(pair: &Pair, volumes: Value) -> String {
    let call = |method: &'static str, request: Value| {
        let answer = pair.call(1, method, request);
        async move { answer.await.unwrap_or_else(|error| panic!("{method}: {error}")) }
    };
    call("putOrganization", json!({ "organization": { "id": "org", "name": "Org" } })).await;
    call(
        "putCluster",
        json!({ "cluster": {
        "id": "c1", "organizationId": "org", "runtime": { "phase": "pallet", "generation": 3 },
        "relayOrigin": null, "fleetCutoverIngressDesignation": null }, "expectedRevision": null }),
    )
    .await;
    let node = call(
        "putClusterNode",
        json!({ "clusterId": "c1",
        "node": { "id": "node-1", "runtimeNamespace": "ns-main", "hostAddresses": [] }, "rotateCredential": false }),
    )
    .await;
    call("putServiceRuntimeSpec", db_spec("registry.example/db:1", volumes, Value::Null)).await;
    node["bearer"].as_str().unwrap().to_owned()
}

/// `putServiceRuntimeSpec` of service `db`, one replica on node-1.
fn db_spec(image: &str, volumes: Value, expected: Value) -> Value {
    json!({ "spec": { "clusterId": "c1", "serviceId": "db", "organizationId": "org", "image": image, "replicas": 1,
        "placement": { "nodeIds": ["node-1"] }, "ports": [], "environment": [], "volumes": volumes },
        "expectedRevision": expected })
}

/// The next request the controller sent down the agent's socket, within the bound.
async fn pushed_within_bound(agent: &mut support::node_agent::NodeAgent, what: &str) -> Value {
    let started = std::time::Instant::now();
    let push =
        agent.next_push(PUSH_BOUND).await.unwrap_or_else(|| panic!("{what}: nothing pushed within {PUSH_BOUND:?}"));
    assert!(started.elapsed() <= PUSH_BOUND);
    push
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_change_made_through_one_process_reaches_a_node_connected_to_the_other() {
    use support::node_agent::{NodeAgent, NodeVolumes};

    let database = TestDatabase::create(Backend::Postgres).await;
    let pair = start_two(&database);
    let bearer = seed(&pair, json!([])).await;
    // The node's socket is on the first process.
    let volumes = NodeVolumes::new();
    let mut agent = NodeAgent::connect_holding(&pair.first.base_url, volumes.clone()).await;
    let session = agent.open("c1", "node-1", &bearer).await;
    let assignments =
        agent.call(name::GET_RUNTIME_ASSIGNMENTS, wire::GetRuntimeAssignments { session: &session }).await.unwrap();
    assert_eq!(assignments["assignments"][0]["payload"]["workload"]["image"], json!("registry.example/db:1"));
    agent.drain_pushes();

    // A spec change through the second process: the node on the first is told.
    pair.call(1, "putServiceRuntimeSpec", db_spec("registry.example/db:2", json!([]), json!(1))).await.unwrap();
    let push = pushed_within_bound(&mut agent, "a spec change through the other process").await;
    assert_eq!(push["method"], json!("pushRuntimeChanged"));
    assert_eq!(push["request"], json!({ "kinds": ["assignments"] }));
    let assignments =
        agent.call(name::GET_RUNTIME_ASSIGNMENTS, wire::GetRuntimeAssignments { session: &session }).await.unwrap();
    assert_eq!(assignments["assignments"][0]["payload"]["workload"]["image"], json!("registry.example/db:2"));

    // A claim issued through the second process is pushed by the first at once (not at its
    // 30 s sweep).
    let volume = json!({ "id": "data", "mountPath": "/data", "readOnly": false, "driver": "local",
        "driverOptions": [], "mountOptions": [],
        "initialization": { "kind": "empty", "ownership": { "uid": 1, "gid": 1, "mode": 448 } } });
    pair.call(1, "putServiceRuntimeSpec", db_spec("registry.example/db:2", json!([volume]), json!(2))).await.unwrap();
    // The claim's push and the assignment set's push are independent: wait for both, in
    // whichever order they come, so neither is left to be read as a later push.
    let (mut claimed, mut assigned) = (false, false);
    while !(claimed && assigned) {
        let push = pushed_within_bound(&mut agent, "a claim issued through the other process").await;
        claimed |= push["method"] == json!("applyRuntimeLocalStorageClaim");
        assigned |= push["method"] == json!("pushRuntimeChanged")
            && push["request"]["kinds"].as_array().is_some_and(|kinds| kinds.contains(&json!("assignments")));
    }
    assert_eq!(volumes.received().len(), 1);

    // The first process's listener loses its connection: it reconnects and tells its nodes, and
    // the next change through the second process reaches the node again.
    agent.drain_pushes();
    let mut admin = support::database::admin_connection().await;
    let name = database.postgres_name().unwrap();
    let terminated: Vec<bool> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{name}' AND application_name = 'cloudly-signals'"
    )))
    .fetch_all(&mut admin)
    .await
    .unwrap();
    sqlx::Connection::close(admin).await.ok();
    assert_eq!(terminated, [true, true], "each process listens on a connection of its own");
    let push = pushed_within_bound(&mut agent, "the push after a reconnect").await;
    assert_eq!(push["request"], json!({ "kinds": ["assignments", "projection"] }));
    agent.drain_pushes();
    pair.call(1, "putServiceRuntimeSpec", db_spec("registry.example/db:3", json!([volume]), json!(3))).await.unwrap();
    let push = pushed_within_bound(&mut agent, "a spec change after the reconnect").await;
    assert_eq!(push["request"], json!({ "kinds": ["assignments"] }));

    drop(agent);
    let logs = [pair.first.terminate(), pair.second.terminate()];
    assert!(logs.iter().all(|log| log.contains("the signal listener lost its PostgreSQL connection")), "{logs:?}");
    for log in &logs {
        assert!(!log.contains(&bearer), "a log line carries the node bearer");
    }
    let _ = std::fs::remove_dir_all(pair.root);
    database.drop_now().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn after_a_rotation_both_processes_sign_with_the_new_key_once_their_keys_hold_it() {
    use cloudly::contract::{Id, NodeId};
    use support::node_agent::WAIT;

    let database = TestDatabase::create(Backend::Postgres).await;
    let pair = start_two_with(&database, &[("CLOUDLY_SIGNING_KEY_CHECK_MS", "200")]);
    seed(&pair, json!([])).await;
    let store = cloudly::store::open(&database.url).await.unwrap();
    // The head of the one assignment: its generation and the key id it is signed with.
    let head = async || {
        let heads = store.node_assignments(&Id::parse("c1").unwrap(), &NodeId::parse("node-1").unwrap()).await.unwrap();
        let signed = &heads.readable[0].signed;
        (signed.payload.generation, signed.signature.key_id.clone())
    };
    let old_id = head().await.1;

    // Rotated in the first process's data directory, beside both.
    let rotated = std::process::Command::new(env!("CARGO_BIN_EXE_cloudly"))
        .args(["keys", "rotate"])
        .env("CLOUDLY_DATA_DIR", &pair.first_dir)
        .env("CLOUDLY_DATABASE_URL", &database.url)
        .output()
        .unwrap();
    assert!(rotated.status.success(), "{}", String::from_utf8_lossy(&rotated.stderr));
    let rotated: Value = serde_json::from_slice(&rotated.stdout).unwrap();
    let new_id = rotated["signing"]["keyId"].as_str().unwrap().to_owned();
    assert_eq!(rotated["retired"]["keyId"], json!(old_id));

    // The first holds the new key and signs with it; the second, whose keys/ is a copy made
    // before, signs nothing and says why.
    assert!(pair.first.log_shows("signing with the store's signing key in use", WAIT).await, "{}", pair.first.log());
    assert!(pair.second.log_shows("signing key unavailable", WAIT).await, "{}", pair.second.log());
    pair.call(1, "putServiceRuntimeSpec", db_spec("registry.example/db:2", json!([]), json!(1))).await.unwrap();
    assert_eq!(head().await, (1, old_id.clone()), "nothing is issued without the key in use");

    // Its keys/ gets the new key: it signs with it within its check interval, without a restart.
    let copy = pair.second_dir.join("keys/signing.ed25519.copy");
    std::fs::copy(pair.first_dir.join("keys/signing.ed25519"), &copy).unwrap();
    std::fs::rename(&copy, pair.second_dir.join("keys/signing.ed25519")).unwrap();
    assert!(pair.second.log_shows("signing with the store's signing key in use", WAIT).await, "{}", pair.second.log());
    pair.call(1, "putServiceRuntimeSpec", db_spec("registry.example/db:3", json!([]), json!(2))).await.unwrap();
    assert_eq!(head().await, (2, new_id.clone()));
    pair.call(0, "putServiceRuntimeSpec", db_spec("registry.example/db:4", json!([]), json!(3))).await.unwrap();
    assert_eq!(head().await, (3, new_id.clone()));

    // Both list the same two keys.
    let mut lists = Vec::new();
    for client in &pair.clients {
        lists.push(client.call("getControllerSigningKeys", json!({})).await.unwrap());
    }
    assert_eq!(lists[0], lists[1]);
    assert_eq!(lists[0]["keys"].as_array().unwrap().len(), 2);
    store.close().await;
    pair.first.terminate();
    pair.second.terminate();
    let _ = std::fs::remove_dir_all(pair.root);
    database.drop_now().await;
}

/// Cluster `c1`'s address plan at `revision` with one platform endpoint on port `port`.
fn address_plan(revision: u64, port: u16) -> Value {
    json!({ "plan": { "clusterId": "c1", "revision": revision, "prefixes": ["10.64.0.0/16", "192.0.2.16/28"],
        "pools": [{ "id": "pool-org", "organizationId": "org", "prefix": "10.64.0.0/20" }],
        "vpn": null, "hubs": [],
        "platformEndpoints": [{ "id": "corestore", "address": "192.0.2.17", "protocol": "tcp", "port": port }] } })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_projection_issued_through_one_process_reaches_a_node_connected_to_the_other() {
    use cloudly::contract::network::projection::admit_runtime_network_projection;
    use support::node_agent::NodeAgent;

    let database = TestDatabase::create(Backend::Postgres).await;
    let pair = start_two(&database);
    let bearer = seed(&pair, json!([])).await;
    pair.call(1, "putRuntimeNetworkAddressPlan", address_plan(1, 9000)).await.unwrap();
    let mut agent = NodeAgent::connect_holding(&pair.first.base_url, support::node_agent::NodeVolumes::new()).await;
    let session = agent.open("c1", "node-1", &bearer).await;
    let first = agent
        .call(
            name::GET_RUNTIME_NETWORK_PROJECTION,
            wire::GetRuntimeNetworkProjection { session: &session, known: &Value::Null },
        )
        .await
        .unwrap();
    let first = first["projection"]["payload"].clone();
    assert_eq!(first["endpoints"].as_array().map(Vec::len), Some(1), "the db lease: {first}");
    agent.drain_pushes();

    // A plan change through the second process: the node on the first hears of its projection.
    pair.call(1, "putRuntimeNetworkAddressPlan", address_plan(2, 9001)).await.unwrap();
    let push = pushed_within_bound(&mut agent, "a projection issued through the other process").await;
    assert_eq!(push["method"], json!("pushRuntimeChanged"));
    assert_eq!(push["request"], json!({ "kinds": ["projection"] }));
    let reference = json!({ "id": first["id"], "generation": first["generation"], "digest": first["digest"] });
    let asked = wire::GetRuntimeNetworkProjection { session: &session, known: &reference };
    let next = agent.call(name::GET_RUNTIME_NETWORK_PROJECTION, asked).await.unwrap();
    let next = next["projection"]["payload"].clone();
    assert_eq!(next["protectedAuthority"]["platformEndpoints"][0]["port"], json!(9001));
    admit_runtime_network_projection(Some(&first), &next, None).expect("the node admits it");

    drop(agent);
    pair.first.terminate();
    pair.second.terminate();
    let _ = std::fs::remove_dir_all(pair.root);
    database.drop_now().await;
}
