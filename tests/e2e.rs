//! The end-to-end suite: two controllers, reached only through their public interfaces — HTTP
//! (`/typedrequest`, `/readyz`, `/metrics`), WebSocket (`/typedsocket`) and the `cloudly` CLI —
//! with an administrator identity and nothing else.
//!
//! With `CLOUDLY_E2E_URLS` (two controller base URLs, comma-separated) and `CLOUDLY_E2E_IDENTITY`
//! (the path of an administrator identity JSON file) it runs against those controllers (the
//! compose `e2e` service, `scripts/e2e.sh`). Without them it starts the same topology itself: two
//! `cloudly serve` processes sharing keys on one fresh PostgreSQL database (on the server of
//! `CLOUDLY_TEST_PG_ADMIN_URL`), with the bootstrap administrator identity of the first. Either
//! way the steps are the same, every id carries a random suffix (so the suite reruns against
//! long-lived controllers), and nothing reads or writes the store.
//!
//! The flow: inventory (`cloudly apply`) → address plan (the example plan file) → node-1's
//! session on controller A, node-2's on B → service specs through B, whose assignments reach
//! node-1 on A by push → a storage claim pushed to node-1 and answered `accepted`/`ready` →
//! designation (`cloudly ingress designate`) through B, the ingress bearer resolved over the
//! session → a relay connected through B, the ingress registered through A → routes through A →
//! projections over each node's session, verified against `getControllerSigningKeys`, admitted in
//! sequence, with exactly the expected grants, and the route table's backends → `converged`
//! service status. The refusals: a stale designation (`spec-revision-mismatch`,
//! `designation-conflict`, `mutation-conflict`), identities that are not a valid administrator's
//! (`identity-refused`), an unknown method (`unknown-method`, over HTTP and WebSocket), a wrong
//! node bearer (`principal-refused`), registrations refused in the documented order, and a volume
//! driver `nfs` (`refused` / `volume-driver-unsupported`).

mod support;

use cloudly::api::methods::name;
use cloudly::api::wire;
use cloudly::client::{CallError, Client, TypedError};
use cloudly::contract::assignment::{RuntimeAssignment, snapshot_runtime_assignment};
use cloudly::contract::network::RuntimeNetworkProjection;
use cloudly::contract::network::projection::{
    AdmissionStatus, admit_runtime_network_projection, validate_runtime_network_projection,
};
use cloudly::contract::registration::{
    read_cluster_ingress_registration_refusal, read_protocol_refusal, validate_cluster_ingress_registration_refusal,
};
use cloudly::contract::service_status::validate_service_runtime_status;
use cloudly::contract::signing::{PublishedKey, decode_public_key, verify};
use cloudly::contract::storage_claim::{
    bind_runtime_local_storage_claim_to_assignment, snapshot_runtime_local_storage_claim,
};
use cloudly::contract::{AuthorityReference, Id};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::ingress::{assignment_reference, connect_relay_with_bearer_at, register, registration, relay_call};
use support::node_agent::{NodeAgent, NodeVolumes};
use support::process::{Scratch, Serving, start, start_sharing_keys};
use support::service::{Backend, TestDatabase, reference_of};

/// How long a change made through one controller may take to reach a node's socket.
const PUSH_WAIT: Duration = Duration::from_secs(5);

/// How long the controllers may take to settle (projections issued, statuses converged).
const SETTLE: Duration = Duration::from_secs(20);

/// The default path of the relay's registration refusals (`04-registration.md`).
const REFUSAL_PATH: &str = "cluster ingress registration refusal";

/// The two controllers under test, an administrator identity, and a scratch directory for the
/// files the CLI reads.
struct Topology {
    /// `[A, B]` base URLs.
    urls: [String; 2],
    clients: [Client; 2],
    identity_file: PathBuf,
    identity: Value,
    /// The processes this suite started (none against given controllers).
    owned: Option<Owned>,
    scratch: Scratch,
}

/// Two `cloudly serve` processes on one database, started by the suite.
struct Owned {
    processes: [Serving; 2],
    database: TestDatabase,
}

/// Index of controller A (node-1's socket) and controller B (node-2's socket).
const A: usize = 0;
const B: usize = 1;

impl Topology {
    /// The controllers named by `CLOUDLY_E2E_URLS` / `CLOUDLY_E2E_IDENTITY`, or two processes
    /// started here.
    async fn open() -> Topology {
        let scratch = Scratch::new("cloudly-e2e");
        let urls = std::env::var("CLOUDLY_E2E_URLS").ok().filter(|urls| !urls.trim().is_empty());
        let identity = std::env::var("CLOUDLY_E2E_IDENTITY").ok().filter(|path| !path.trim().is_empty());
        let (urls, identity_file, owned) = match (urls, identity) {
            (Some(urls), Some(identity)) => {
                let urls: Vec<String> =
                    urls.split(',').map(|url| url.trim().trim_end_matches('/').to_owned()).collect();
                assert_eq!(urls.len(), 2, "CLOUDLY_E2E_URLS names exactly two controller base URLs");
                ([urls[0].clone(), urls[1].clone()], PathBuf::from(identity), None)
            }
            (None, None) => {
                let database = TestDatabase::create(Backend::Postgres).await;
                let first = start(&scratch.join("a"), &database.url).serving();
                let second = start_sharing_keys(&first, &scratch.join("b"), &database.url, &[]).serving();
                let identity_file = first.data_dir.join("admin-identity.json");
                let urls = [first.base_url.clone(), second.base_url.clone()];
                (urls, identity_file, Some(Owned { processes: [first, second], database }))
            }
            _ => panic!("set both CLOUDLY_E2E_URLS and CLOUDLY_E2E_IDENTITY, or neither"),
        };
        let text = std::fs::read_to_string(&identity_file)
            .unwrap_or_else(|error| panic!("read the identity {}: {error}", identity_file.display()));
        let identity: Value = serde_json::from_str(&text).expect("the identity file holds JSON");
        let clients = [Client::new(&urls[A]), Client::new(&urls[B])];
        Topology { urls, clients, identity_file, identity, owned, scratch }
    }

    /// Calls `method` through `controller` as the administrator (or with `identity` replaced).
    async fn call_with(&self, controller: usize, identity: Option<&Value>, method: &str, mut request: Value) -> Answer {
        if let Some(identity) = identity.or(Some(&self.identity)).filter(|identity| !identity.is_null()) {
            request["identity"] = identity.clone();
        }
        match self.clients[controller].call(method, request).await {
            Ok(response) => Ok(response),
            Err(CallError::Typed(error)) => Err(error),
            Err(other) => panic!("{method} through {}: {other}", self.urls[controller]),
        }
    }

    /// Calls `method` through `controller` as the administrator; it must succeed.
    async fn admin(&self, controller: usize, method: &str, request: Value) -> Value {
        self.call_with(controller, None, method, request)
            .await
            .unwrap_or_else(|error| panic!("{method}: {} {}", error.text, error.data))
    }

    /// Runs `cloudly <args>` against `controller` with the administrator identity: the exit
    /// code, stdout and stderr.
    async fn cli_output(&self, controller: usize, args: &[&str]) -> (Option<i32>, String, String) {
        let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_cloudly"))
            .args(args)
            .env("CLOUDLY_URL", &self.urls[controller])
            .env("CLOUDLY_IDENTITY", &self.identity_file)
            .env("CLOUDLY_STATE_DIR", self.scratch.join("cli-state"))
            .output()
            .await
            .expect("run the cloudly binary");
        let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
        (output.status.code(), text(&output.stdout), text(&output.stderr))
    }

    /// `cloudly <args>` against `controller`; it must succeed and print JSON.
    async fn cli(&self, controller: usize, args: &[&str]) -> Value {
        let (code, stdout, stderr) = self.cli_output(controller, args).await;
        assert_eq!(code, Some(0), "cloudly {args:?} failed: {stdout}{stderr}");
        serde_json::from_str(&stdout).unwrap_or_else(|error| panic!("cloudly {args:?} printed no JSON: {error}"))
    }

    /// `cloudly <args>` against `controller`; the controller must refuse it (exit 1): the
    /// refusal's `error.data`.
    async fn cli_refused(&self, controller: usize, args: &[&str]) -> Value {
        let (code, stdout, stderr) = self.cli_output(controller, args).await;
        assert_eq!(code, Some(1), "cloudly {args:?} was not refused: {stdout}{stderr}");
        let printed: Value = serde_json::from_str(&stderr).expect("a refusal prints its error as JSON");
        printed["error"]["data"].clone()
    }

    /// Writes `value` as JSON into the scratch directory: its path.
    fn file(&self, name: &str, value: &Value) -> String {
        let path = self.scratch.join(name);
        std::fs::write(&path, serde_json::to_vec_pretty(value).unwrap()).unwrap();
        path.display().to_string()
    }

    /// `GET <controller><path>`: the status and body.
    async fn get(&self, controller: usize, path: &str) -> (u16, String) {
        let response = reqwest::get(format!("{}{path}", self.urls[controller]))
            .await
            .unwrap_or_else(|error| panic!("GET {path}: {error}"));
        (response.status().as_u16(), response.text().await.unwrap())
    }

    /// The published signing keys, read through `controller`.
    async fn signing_keys(&self, controller: usize) -> Vec<PublishedKey> {
        let answer = self.clients[controller].call("getControllerSigningKeys", json!({})).await.unwrap();
        answer["keys"]
            .as_array()
            .expect("keys")
            .iter()
            .map(|key| PublishedKey::new(decode_public_key(key["publicKey"].as_str().unwrap()).expect("a public key")))
            .collect()
    }

    /// Stops the processes this suite started (their logs must hold none of `secrets`) and drops
    /// their database.
    async fn close(self, secrets: &[&str]) {
        if let Some(Owned { processes: [first, second], database }) = self.owned {
            for log in [first.terminate(), second.terminate()] {
                for secret in secrets {
                    assert!(!log.contains(secret), "a controller's log carries a secret");
                }
            }
            database.drop_now().await;
        }
    }
}

type Answer = Result<Value, TypedError>;

/// Asserts that `answer` is refused with `code`; answers the error's `data`.
fn refused(answer: Answer, code: &str, what: &str) -> Value {
    match answer {
        Ok(response) => panic!("{what}: accepted instead of {code}: {response}"),
        Err(error) => {
            assert_eq!(error.code(), code, "{what}: {} {}", error.text, error.data);
            error.data
        }
    }
}

/// Polls `probe` until it answers something, for at most [`SETTLE`].
async fn eventually<T, F: Future<Output = Option<T>>>(what: &str, mut probe: impl FnMut() -> F) -> T {
    let deadline = Instant::now() + SETTLE;
    loop {
        if let Some(found) = probe().await {
            return found;
        }
        assert!(Instant::now() < deadline, "{what}: not within {SETTLE:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// One node: its agent on a controller's `/typedsocket`, its session and what its disk holds.
struct Node {
    id: &'static str,
    agent: NodeAgent,
    session: Value,
    volumes: Arc<NodeVolumes>,
}

impl Node {
    /// Connects to `url`'s `/typedsocket` and opens the node's session with `bearer`.
    async fn connect(url: &str, cluster: &str, id: &'static str, bearer: &str) -> Node {
        let volumes = NodeVolumes::new();
        let agent = NodeAgent::connect_holding(url, volumes.clone()).await;
        let session = agent.open(cluster, id, bearer).await;
        assert_eq!(session["nodeId"], json!(id));
        assert_eq!(session["clusterId"], json!(cluster));
        Node { id, agent, session, volumes }
    }

    /// Calls a node method with `request` (its shape, carrying this node's session); it must
    /// succeed.
    async fn call(&self, method: &str, request: impl serde::Serialize) -> Value {
        self.agent
            .call(method, request)
            .await
            .unwrap_or_else(|error| panic!("{} {method}: {} {}", self.id, error.text, error.data))
    }

    /// Waits for the controller to push `pushRuntimeChanged` naming `kind`.
    async fn pushed_change(&mut self, kind: &str, what: &str) {
        let deadline = Instant::now() + PUSH_WAIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let push = self
                .agent
                .next_push(left)
                .await
                .unwrap_or_else(|| panic!("{} {what}: no `{kind}` push within {PUSH_WAIT:?}", self.id));
            let kinds = push["request"]["kinds"].as_array().cloned().unwrap_or_default();
            if push["method"] == "pushRuntimeChanged" && kinds.contains(&json!(kind)) {
                return;
            }
        }
    }

    /// The node's current assignments, each verified against `keys`: payloads by service id.
    async fn assignments(&self, keys: &[PublishedKey]) -> BTreeMap<String, Value> {
        let answer =
            self.call(name::GET_RUNTIME_ASSIGNMENTS, wire::GetRuntimeAssignments { session: &self.session }).await;
        let mut by_service = BTreeMap::new();
        for signed in answer["assignments"].as_array().expect("assignments") {
            let payload: RuntimeAssignment = verify(signed, keys)
                .unwrap_or_else(|error| panic!("{}: an assignment does not verify: {error}", self.id));
            assert_eq!(payload.node_id.as_str(), self.id);
            let service = signed["payload"]["serviceId"].as_str().unwrap().to_owned();
            assert!(by_service.insert(service, signed["payload"].clone()).is_none(), "one assignment per service");
        }
        by_service
    }

    /// Runs every current assignment as a node agent does: resolves the secret bindings of those
    /// that have some and reports each `ready`. Answers the assignments and the resolved values
    /// by name.
    async fn run_all(&self, keys: &[PublishedKey]) -> (BTreeMap<String, Value>, BTreeMap<String, String>) {
        let assignments = self.assignments(keys).await;
        let mut values = BTreeMap::new();
        for assignment in assignments.values() {
            let reference = assignment_reference(assignment);
            let environment = assignment["workload"]["environment"].as_array().unwrap();
            if environment.iter().any(|entry| entry.get("secret").is_some()) {
                let request = wire::ResolveRuntimeSecretBindings { session: &self.session, assignment: &reference };
                let resolved = self.call(name::RESOLVE_RUNTIME_SECRET_BINDINGS, request).await;
                for value in resolved["values"].as_array().unwrap() {
                    values.insert(
                        value["name"].as_str().unwrap().to_owned(),
                        value["value"].as_str().unwrap().to_owned(),
                    );
                }
            }
            let request = wire::ReportRuntimeAssignmentState {
                session: &self.session,
                assignment: &reference,
                state: &json!("ready"),
            };
            let reported = self.call(name::REPORT_RUNTIME_ASSIGNMENT_STATE, request).await;
            assert_eq!(reported, json!({ "recorded": true }));
        }
        (assignments, values)
    }
}

/// A node following its projection chain. The first projection it sees is verified and
/// validated (a node that joins a chain late starts from it); from then on every generation must
/// verify and be admitted against the one before, with the node's own application.
struct Follower {
    accepted: Option<Value>,
    applied: Option<AuthorityReference>,
    /// Generations admitted against their predecessor.
    admitted: u64,
}

impl Follower {
    fn new() -> Follower {
        Follower { accepted: None, applied: None, admitted: 0 }
    }

    /// Asks for the projection after the last accepted one; a new one must verify and, after the
    /// first, be admitted.
    async fn fetch(&mut self, node: &Node, keys: &[PublishedKey]) {
        let known = self.accepted.as_ref().map_or(Value::Null, reference_of);
        let request = wire::GetRuntimeNetworkProjection { session: &node.session, known: &known };
        let answer = node.call(name::GET_RUNTIME_NETWORK_PROJECTION, request).await;
        let signed = &answer["projection"];
        if signed.is_null() {
            return;
        }
        let projection: RuntimeNetworkProjection =
            verify(signed, keys).unwrap_or_else(|error| panic!("{}: the projection does not verify: {error}", node.id));
        assert!(validate_runtime_network_projection(&signed["payload"]).is_ok());
        if self.accepted.is_some() || projection.generation == 1 {
            let admission =
                admit_runtime_network_projection(self.accepted.as_ref(), &signed["payload"], self.applied.as_ref())
                    .unwrap_or_else(|_| panic!("{}: generation {} is not admitted", node.id, projection.generation));
            assert!(matches!(admission.status, AdmissionStatus::Accepted));
            self.admitted += 1;
        }
        self.accepted = Some(signed["payload"].clone());
    }

    /// Fetches until the projection satisfies `done`.
    async fn until(&mut self, node: &Node, keys: &[PublishedKey], done: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + SETTLE;
        loop {
            self.fetch(node, keys).await;
            if let Some(current) = self.accepted.as_ref().filter(|projection| done(projection)) {
                return current.clone();
            }
            assert!(Instant::now() < deadline, "{}: the projection never settled: {:?}", node.id, self.accepted);
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Reports the last accepted projection applied.
    async fn apply(&mut self, node: &Node) {
        let applied = reference_of(self.accepted.as_ref().expect("a projection to apply"));
        let request = wire::ReportRuntimeNetworkProjectionApplied { session: &node.session, applied: &applied };
        let answer = node.call(name::REPORT_RUNTIME_NETWORK_PROJECTION_APPLIED, request).await;
        assert_eq!(answer, json!({ "recorded": true }));
        self.applied = Some(AuthorityReference::read(&applied).expect("a reference"));
    }
}

/// `(source lease id, destination lease id, protocol, port)` of each grant, in order.
fn grants(projection: &Value) -> Vec<(String, String, String, u64)> {
    let text = |value: &Value| value.as_str().unwrap().to_owned();
    projection["workloadIngress"]["grants"]
        .as_array()
        .map(|grants| {
            grants
                .iter()
                .map(|grant| {
                    (
                        text(&grant["source"]["id"]),
                        text(&grant["destination"]["id"]),
                        text(&grant["protocol"]),
                        grant["port"].as_u64().unwrap(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The lease ids of a projection's endpoints.
fn endpoint_ids(projection: &Value) -> Vec<String> {
    projection["endpoints"].as_array().unwrap().iter().map(|e| e["lease"]["id"].as_str().unwrap().to_owned()).collect()
}

/// The lease of `assignment` among the projection's endpoints.
fn lease_of(projection: &Value, assignment: &Value) -> Value {
    projection["endpoints"]
        .as_array()
        .unwrap()
        .iter()
        .map(|endpoint| &endpoint["lease"])
        .find(|lease| lease["assignmentId"] == assignment["id"])
        .unwrap_or_else(|| panic!("no lease of assignment {} in {projection}", assignment["id"]))
        .clone()
}

/// A service spec of the run's cluster.
fn service(cluster: &str, organization: &str, id: &str, nodes: &[&str], replicas: u64, ports: &[u16]) -> Value {
    let ports: Vec<Value> = ports.iter().map(|port| json!({ "protocol": "tcp", "port": port })).collect();
    json!({
        "clusterId": cluster, "serviceId": id, "organizationId": organization,
        "image": format!("registry.example/e2e/{id}:1.0.0"), "replicas": replicas,
        "placement": { "nodeIds": nodes }, "ports": ports,
        "environment": [{ "name": "LOG_LEVEL", "value": "info" }], "volumes": [],
    })
}

/// A volume of `driver`, initialized empty.
fn volume(id: &str, mount: &str, driver: &str) -> Value {
    json!({
        "id": id, "mountPath": mount, "readOnly": false, "driver": driver, "driverOptions": [], "mountOptions": [],
        "initialization": { "kind": "empty", "ownership": { "uid": 1000, "gid": 1000, "mode": 0o750 } },
    })
}

/// A designation request for the run's cluster.
fn designation_request(cluster: &str, mutation: &str, spec_revision: u64, expected: Value) -> Value {
    json!({ "designation": {
        "mutationId": mutation, "clusterId": cluster, "ingressServiceId": "ingress",
        "currentRuntime": { "id": cluster, "phase": "pallet", "generation": 1 },
        "expectedSpecRevision": spec_revision, "expectedDesignation": expected,
    } })
}

/// The registration refusal in `answer`: its reason, after it passes the contract's validator.
fn registration_refusal(answer: Answer, what: &str) -> String {
    let error = answer.expect_err(what);
    assert_eq!(error.code(), "cluster-ingress-registration-refused", "{what}: {}", error.data);
    assert!(validate_cluster_ingress_registration_refusal(&error.data, REFUSAL_PATH).is_empty(), "{what}");
    let refusal = read_cluster_ingress_registration_refusal(&error.data).expect("a registration refusal");
    assert_eq!(error.text, format!("cluster ingress registration refused: {}", refusal.reason().as_str()));
    refusal.reason().as_str().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_controllers_run_the_whole_flow_through_their_public_interfaces() {
    let topology = Topology::open().await;
    let run = uuid::Uuid::new_v4().simple().to_string()[..10].to_owned();
    let cluster = format!("e2e-{run}");
    let organization = format!("e2e-org-{run}");
    let (c, o) = (cluster.as_str(), organization.as_str());

    // Both controllers are ready.
    for controller in [A, B] {
        let (status, body) = topology.get(controller, "/readyz").await;
        assert_eq!((status, serde_json::from_str::<Value>(&body).unwrap()), (200, json!({ "ready": true })));
    }

    // Inventory through A: the organization, the cluster and two nodes, each bearer printed once.
    let inventory = json!({
        "organizations": [{ "id": o, "name": "End-to-end" }],
        "clusters": [{ "id": c, "organizationId": o, "runtime": { "phase": "pallet", "generation": 1 },
                       "relayOrigin": "https://relay.example.net:8443", "fleetCutoverIngressDesignation": null }],
        "nodes": [
            { "clusterId": c, "node": { "id": "node-1", "runtimeNamespace": "ns-main", "hostAddresses": ["192.0.2.17"] } },
            { "clusterId": c, "node": { "id": "node-2", "runtimeNamespace": "ns-main", "hostAddresses": [] } },
        ],
    });
    let inventory_file = topology.file("inventory.json", &inventory);
    let applied = topology.cli(A, &["apply", "-f", &inventory_file]).await;
    let entries = applied["applied"].as_array().unwrap();
    assert!(entries.iter().all(|entry| entry["result"] == "created"), "{applied}");
    let bearer_of = |node: &str| -> String {
        let entry = entries.iter().find(|entry| entry["node"] == node).expect("the node's entry");
        entry["bearer"].as_str().expect("a created node's bearer").to_owned()
    };
    let (bearer_1, bearer_2) = (bearer_of("node-1"), bearer_of("node-2"));
    // Applying again through B changes nothing and prints no bearer.
    let again = topology.cli(B, &["apply", "-f", &inventory_file]).await;
    assert!(again["applied"].as_array().unwrap().iter().all(|entry| entry["result"] == "unchanged"), "{again}");
    assert!(!again.to_string().contains(&bearer_1) && !again.to_string().contains(&bearer_2));

    // The address plan through B: the example plan file, for this run's cluster and organization.
    let example = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/examples/network-plan.yaml"))
        .expect("the example plan");
    let mut plan: Value = serde_yaml_ng::from_str(&example).expect("the example plan is YAML");
    plan["clusterId"] = json!(c);
    plan["pools"][0]["organizationId"] = json!(o);
    let written = topology.cli(B, &["network", "plan", "put", "-f", &topology.file("plan.json", &plan)]).await;
    assert_eq!(written["plan"]["revision"], json!(1), "{written}");

    // Node sessions: node-1 on A, node-2 on B; each controller sees the same sessions and its own
    // socket.
    let mut node_1 = Node::connect(&topology.urls[A], c, "node-1", &bearer_1).await;
    let mut node_2 = Node::connect(&topology.urls[B], c, "node-2", &bearer_2).await;
    for (controller, connected) in [(A, "node-1"), (B, "node-2")] {
        let listed = topology.admin(controller, "listClusterNodes", json!({ "clusterId": c })).await;
        for entry in listed["nodes"].as_array().unwrap() {
            let session = if entry["id"] == "node-1" { &node_1.session } else { &node_2.session };
            assert_eq!(&entry["session"], session);
            assert_eq!(entry["connected"], json!(entry["id"] == connected), "{listed}");
        }
        assert!(!listed.to_string().contains(&bearer_1), "a node bearer is shown only when issued");
    }
    let keys = topology.signing_keys(B).await;
    assert!(node_1.assignments(&keys).await.is_empty());

    // Service specs through B: the ingress on node-1, a web service on both nodes with two ports,
    // a database on node-1 with an `empty` volume. Node-1's assignments reach it on A by push.
    let mut database = service(c, o, "db", &["node-1"], 1, &[]);
    database["volumes"] = json!([volume("data", "/var/lib/db", "local")]);
    let services = json!({ "services": [
        service(c, o, "ingress", &["node-1"], 1, &[443]),
        service(c, o, "web", &["node-1", "node-2"], 2, &[443, 8080]),
        database,
    ] });
    let applied = topology.cli(B, &["apply", "-f", &topology.file("services.json", &services)]).await;
    assert!(applied["applied"].as_array().unwrap().iter().all(|entry| entry["result"] == "created"), "{applied}");
    node_1.pushed_change("assignments", "specs written through B").await;
    node_2.pushed_change("assignments", "specs written through B").await;

    // The claim of the database's volume is pushed to node-1 (by A, written through B) and
    // answered accepted / ready; the database's assignment seals its reference.
    let listing = eventually("the claim ready", || async {
        let listed = topology.cli(B, &["volume", "list", "--cluster", c, "-o", "json"]).await;
        let listing =
            listed["claims"].as_array().unwrap().iter().find(|listing| listing["claim"]["serviceId"] == "db")?.clone();
        (listing["node"]["state"] == "ready" && listing["node"]["generation"] == listing["claim"]["generation"])
            .then_some(listing)
    })
    .await;
    assert_eq!(listing["node"]["status"], json!("accepted"));
    let pushed = node_1.volumes.received();
    assert!(!pushed.is_empty());
    for request in &pushed {
        assert_eq!((&request["session"], &request["claim"]), (&node_1.session, &listing["claim"]));
    }
    assert!(node_2.volumes.received().is_empty());
    let claim = snapshot_runtime_local_storage_claim(&listing["claim"]).expect("a valid claim");
    assert_eq!(listing["claim"]["initialOwnership"], json!({ "uid": 1000, "gid": 1000, "mode": 0o750 }));

    let on_1 = eventually("node-1's three assignments", || async {
        let assignments = node_1.assignments(&keys).await;
        (assignments.len() == 3 && assignments["db"]["workload"]["storage"].as_array().is_some_and(|s| !s.is_empty()))
            .then_some(assignments)
    })
    .await;
    let on_2 = node_2.assignments(&keys).await;
    assert_eq!(on_2.keys().collect::<Vec<_>>(), ["web"]);
    let db_assignment = snapshot_runtime_assignment(&on_1["db"]).expect("a valid assignment");
    bind_runtime_local_storage_claim_to_assignment(&claim, &db_assignment, &Id::parse(c).unwrap())
        .expect("the claim binds to the database's assignment");
    assert_eq!(
        on_1["web"]["workload"]["ports"],
        json!([{ "protocol": "tcp", "port": 443 }, { "protocol": "tcp", "port": 8080 }])
    );

    // The designation through B (the CLI reads the runtime, spec revision and current designation).
    let mutation = format!("e2e-designate-{run}");
    let designate = ["ingress", "designate", "--cluster", c, "--service", "ingress", "--mutation-id", &mutation];
    let designated = topology.cli(B, &designate).await;
    let designation = designated["designation"].clone();
    assert_eq!((designation["generation"].clone(), designated["replayed"].clone()), (json!(1), json!(false)));
    // The same mutation again (the CLI resends the request it remembered for B) is a replay.
    let replayed = topology.cli(B, &designate).await;
    assert_eq!((&replayed["designation"], &replayed["replayed"]), (&designation, &json!(true)));
    node_1.pushed_change("assignments", "the designation through B").await;

    // Node-1 runs the designated ingress: its bearer is resolved over the session.
    let (ingress_bearer, running) = eventually("the ingress carries its bearer", || async {
        let (assignments, values) = node_1.run_all(&keys).await;
        values.get("SERVEZONE_CLUSTER_INGRESS_BEARER").map(|bearer| (bearer.clone(), assignments))
    })
    .await;
    assert!(running["ingress"]["generation"].as_u64().unwrap() >= 2);
    node_2.run_all(&keys).await;

    // The relay: its credential through the CLI on A, its connection through B, the registration
    // through A.
    let relay = format!("relay-{run}");
    let credential = topology.cli(A, &["relay", "credential", "--cluster", c, "--relay", &relay]).await;
    let relay_bearer = credential["bearer"].as_str().expect("the relay bearer, shown once").to_owned();
    let token = connect_relay_with_bearer_at(&topology.clients[B], c, &relay, &relay_bearer).await;
    let accepted = register(&topology.clients[A], registration(&ingress_bearer, "node-1"), Some(&token))
        .await
        .unwrap_or_else(|error| panic!("registerClusterIngress: {} {}", error.text, error.data));
    assert_eq!(accepted["accepted"], json!(true));
    assert_eq!(accepted["protocol"], json!({ "name": "serve.zone/cluster-ingress", "minimum": 1, "maximum": 1 }));
    let registrations = topology.cli(B, &["ingress", "registrations", "--cluster", c, "-o", "json"]).await;
    let listed = registrations["registrations"].as_array().unwrap();
    assert_eq!(listed.len(), 1, "{registrations}");
    assert_eq!(listed[0]["nodeId"], json!("node-1"));
    assert!(!registrations.to_string().contains(&ingress_bearer));

    // Refused registrations, each in the documented order.
    let mut other_protocol = registration(&ingress_bearer, "node-1");
    other_protocol["protocol"]["name"] = json!("serve.zone/something-else");
    let error = register(&topology.clients[B], other_protocol, Some(&token)).await.expect_err("another protocol");
    assert_eq!(error.text, "protocol refused");
    assert!(read_protocol_refusal(&error.data).is_some(), "{}", error.data);
    let mut invalid = registration(&ingress_bearer, "node-1");
    invalid["version"] = json!("one");
    let reason = registration_refusal(register(&topology.clients[A], invalid, None).await, "invalid, no relay");
    assert_eq!(reason, "registration-invalid", "the shape is judged before the relay");
    let reason = registration_refusal(
        register(&topology.clients[B], registration("szib_not-the-bearer-0000", "node-1"), None).await,
        "no relay",
    );
    assert_eq!(reason, "relay-not-connected", "the relay is judged before the bearer");
    let wrong_node =
        register(&topology.clients[A], registration("szib_not-the-bearer-0000", "node-2"), Some(&token)).await;
    assert_eq!(registration_refusal(wrong_node, "node-2"), "node-mismatch", "the node is judged before the bearer");
    let wrong_bearer =
        register(&topology.clients[B], registration("szib_not-the-bearer-0000", "node-1"), Some(&token)).await;
    assert_eq!(registration_refusal(wrong_bearer, "a wrong bearer"), "bearer-refused");

    // Projections over each node's session, verified against the published keys: first the
    // leases alone (node-1: its three; node-2: its web lease).
    let keys = topology.signing_keys(A).await;
    let (mut follow_1, mut follow_2) = (Follower::new(), Follower::new());
    follow_1.until(&node_1, &keys, |projection| endpoint_ids(projection).len() == 3).await;
    follow_2.until(&node_2, &keys, |projection| endpoint_ids(projection).len() == 1).await;

    // Routes through A, one at a time: each reaches node-2 on B as a projection push, and each
    // node admits the next generation against the one it holds.
    for (host, port, grants_1, grants_2) in [("a", "443", 2, 1), ("b", "8080", 4, 2)] {
        node_2.agent.drain_pushes();
        let hostname = format!("{host}-{run}.e2e.example.com");
        let put = ["route", "put", "--cluster", c, "--hostname", &hostname, "--service", "web", "--port", port];
        topology.cli(A, &put).await;
        node_2.pushed_change("projection", "a route written through A").await;
        follow_1.until(&node_1, &keys, |projection| grants(projection).len() == grants_1).await;
        follow_2.until(&node_2, &keys, |projection| grants(projection).len() == grants_2).await;
        follow_1.apply(&node_1).await;
        follow_2.apply(&node_2).await;
    }
    assert!(follow_1.admitted >= 2 && follow_2.admitted >= 2, "each route change is admitted in sequence");
    let (first, second) = (follow_1.accepted.clone().unwrap(), follow_2.accepted.clone().unwrap());

    // Exactly the grants from the ingress lease to each web lease on both ports (on node-2 those
    // whose target is there), authorized by the designation.
    let ingress_lease = lease_of(&first, &running["ingress"]);
    let web_1 = lease_of(&first, &running["web"]);
    let web_2 = lease_of(&second, &on_2["web"]);
    let id = |lease: &Value| lease["id"].as_str().unwrap().to_owned();
    let grant = |destination: &Value, port: u64| (id(&ingress_lease), id(destination), "tcp".to_owned(), port);
    let mut expected_1 = vec![grant(&web_1, 443), grant(&web_1, 8080), grant(&web_2, 443), grant(&web_2, 8080)];
    expected_1.sort_by(|left, right| (&left.0, &left.1, left.3).cmp(&(&right.0, &right.1, right.3)));
    assert_eq!(grants(&first), expected_1);
    assert_eq!(grants(&second), vec![grant(&web_2, 443), grant(&web_2, 8080)]);
    for projection in [&first, &second] {
        let authorizations =
            projection["workloadIngress"]["grants"].as_array().unwrap().iter().map(|g| &g["authorization"]);
        assert!(authorizations.into_iter().all(|authorization| *authorization == reference_of(&designation)));
        assert_eq!(projection["clusterId"], json!(c));
    }
    let mut expected_endpoints_2 = vec![id(&ingress_lease), id(&web_2)];
    expected_endpoints_2.sort();
    assert_eq!(endpoint_ids(&second), expected_endpoints_2);
    assert_eq!(endpoint_ids(&first).len(), 4, "node-1's three leases and the web lease on node-2");
    assert_eq!(first["hostPlatformEndpointIds"], json!(["corestore", "relay-listener"]));
    assert!(second.get("hostPlatformEndpointIds").is_none());
    let platform: Vec<&str> = first["protectedAuthority"]["platformEndpoints"]
        .as_array()
        .unwrap()
        .iter()
        .map(|endpoint| endpoint["id"].as_str().unwrap())
        .collect();
    assert_eq!(platform, ["corestore", "hub-a", "relay-listener"]);

    // The CLI verifies node-2's projection through A; the route table's backends follow the grants.
    let verified = topology.cli(A, &["network", "projection", "--cluster", c, "--node", "node-2", "--verify"]).await;
    assert!(verified["keyId"].as_str().is_some_and(|key| keys.iter().any(|published| published.key_id == key)));
    assert_eq!(verified["applied"], reference_of(&second));
    let mut web_leases = vec![id(&web_1), id(&web_2)];
    web_leases.sort();
    let table = eventually("the route table's backends", || async {
        let answer = relay_call(
            &topology.clients[B],
            name::GET_CLUSTER_INGRESS_ROUTE_TABLE,
            wire::to_request(&wire::GetClusterIngressRouteTable { known_revision: Value::Null }),
            Some(&token),
        )
        .await
        .unwrap_or_else(|error| panic!("getClusterIngressRouteTable: {} {}", error.text, error.data));
        let table = answer["table"].clone();
        let complete = table["routes"].as_array().is_some_and(|routes| {
            routes.len() == 2 && routes.iter().all(|route| route["backends"].as_array().is_some_and(|b| b.len() == 2))
        });
        complete.then_some(table)
    })
    .await;
    for (route, (host, port)) in table["routes"].as_array().unwrap().iter().zip([("a", 443), ("b", 8080)]) {
        assert_eq!(route["hostname"], json!(format!("{host}-{run}.e2e.example.com")));
        assert_eq!((&route["serviceId"], &route["port"]), (&json!("web"), &json!(port)));
        let backends: Vec<String> =
            route["backends"].as_array().unwrap().iter().map(|b| id(&json!({ "id": b["leaseId"] }))).collect();
        assert_eq!(backends, web_leases);
        assert!(route["backends"].as_array().unwrap().iter().all(|backend| backend["port"] == json!(port)));
    }

    // A volume driver `nfs` is refused in the status, and no claim is issued for it.
    let mut files = service(c, o, "files", &["node-2"], 1, &[]);
    files["volumes"] = json!([volume("share", "/srv/share", "nfs")]);
    topology.cli(A, &["service", "put", "-f", &topology.file("files.json", &files)]).await;
    let status = topology.cli(B, &["service", "status", "--cluster", c, "--service", "files", "-o", "json"]).await;
    assert_eq!(
        (&status["status"]["state"], &status["status"]["reason"]),
        (&json!("refused"), &json!("volume-driver-unsupported"))
    );
    let listed = topology.cli(A, &["volume", "list", "--cluster", c, "-o", "json"]).await;
    assert!(listed["claims"].as_array().unwrap().iter().all(|listing| listing["claim"]["serviceId"] != "files"));

    // Every other service converges once each node runs what it was assigned.
    let statuses = eventually("every service converged", || async {
        node_1.run_all(&keys).await;
        node_2.run_all(&keys).await;
        let listed = topology.cli(A, &["service", "status", "--cluster", c, "-o", "json"]).await;
        let statuses = listed["statuses"].as_array().unwrap().clone();
        let converged =
            statuses.iter().filter(|status| status["id"] != "files").all(|status| status["state"] == "converged");
        (statuses.len() == 4 && converged).then_some(statuses)
    })
    .await;
    for status in &statuses {
        assert!(validate_service_runtime_status(status).is_empty(), "{status}");
    }
    // The readable form through B says the same.
    let (code, table, _) = topology.cli_output(B, &["service", "status", "--cluster", c]).await;
    assert_eq!(code, Some(0));
    for name in ["ingress", "web", "db"] {
        let line = table.lines().find(|line| line.split_whitespace().next() == Some(name)).expect("a line per service");
        assert!(line.contains("converged"), "{table}");
    }
    assert!(table.contains("volume-driver-unsupported"), "{table}");

    // Refusals. A stale designation: through the CLI's raw call, a wrong spec revision; over HTTP,
    // a stale expected designation and a reused mutation id.
    let current = reference_of(&designation);
    let stale_revision = designation_request(c, &format!("e2e-stale-{run}"), 7, current.clone());
    let data = topology
        .cli_refused(A, &["call", "designateClusterIngress", "-f", &topology.file("stale.json", &stale_revision)])
        .await;
    assert_eq!((&data["code"], &data["current"]), (&json!("spec-revision-mismatch"), &json!(1)));
    let stale_designation = designation_request(c, &format!("e2e-stale-2-{run}"), 1, Value::Null);
    let data = refused(
        topology.call_with(B, None, "designateClusterIngress", stale_designation).await,
        "designation-conflict",
        "stale",
    );
    assert_eq!(data["current"], current);
    let reused = designation_request(c, &mutation, 1, current.clone());
    refused(
        topology.call_with(A, None, "designateClusterIngress", reused).await,
        "mutation-conflict",
        "a reused mutation id",
    );

    // Identities that are not a valid administrator's: a broken signature, fields that disagree
    // with the token, none at all; and an unknown method, over HTTP and over the node's socket.
    let mut tampered = topology.identity.clone();
    let jwt = tampered["jwt"].as_str().unwrap().to_owned();
    let (signed_part, signature) = jwt.rsplit_once('.').unwrap();
    let mut signature: Vec<char> = signature.chars().collect();
    signature[10] = if signature[10] == 'A' { 'B' } else { 'A' };
    tampered["jwt"] = json!(format!("{signed_part}.{}", signature.into_iter().collect::<String>()));
    let mut disagreeing = topology.identity.clone();
    disagreeing["role"] = json!("viewer");
    let write = json!({ "organization": { "id": format!("e2e-intruder-{run}"), "name": "Intruder" } });
    for (controller, identity) in [(A, &tampered), (B, &disagreeing), (A, &Value::Null)] {
        let answer = topology.call_with(controller, Some(identity), "putOrganization", write.clone()).await;
        refused(answer, "identity-refused", "an identity that is not the administrator's");
    }
    refused(
        topology
            .call_with(B, None, "getOrganization", json!({ "organizationId": format!("e2e-intruder-{run}") }))
            .await,
        "not-found",
        "the intruder's write",
    );
    let answer = topology.clients[A].envelope("dropAllTables", json!({}), None).await.unwrap();
    assert_eq!(answer["error"]["data"], json!({ "code": "unknown-method" }));
    let answer = node_2.agent.call("dropAllTables", json!({ "session": node_2.session })).await.expect_err("unknown");
    assert_eq!(answer.code(), "unknown-method");
    let stranger = NodeAgent::connect_to(&topology.urls[B]).await;
    let answer = stranger
        .call(
            name::OPEN_RUNTIME_SESSION,
            wire::OpenRuntimeSession { cluster_id: json!(c), node_id: json!("node-1"), bearer: json!(&bearer_2) },
        )
        .await;
    assert_eq!(answer.expect_err("node-2's bearer opens no session of node-1").code(), "principal-refused");
    drop(stranger);

    // The metrics count what happened: the registrations through A, the sockets on both.
    let (status, metrics) = topology.get(A, "/metrics").await;
    assert_eq!(status, 200);
    let counted = |metrics: &str, series: &str| series_value(metrics, series).is_some_and(|count| count >= 1.0);
    assert!(counted(&metrics, "cloudly_ingress_registrations_total{outcome=\"accepted\"}"), "{metrics}");
    for (controller, written) in [(A, "putClusterIngressRoute"), (B, "designateClusterIngress")] {
        let metrics = topology.get(controller, "/metrics").await.1;
        let series = format!("cloudly_requests_total{{method=\"{written}\",outcome=\"ok\"}}");
        assert!(counted(&metrics, &series), "{metrics}");
        let socket = "cloudly_socket_requests_total{method=\"getRuntimeAssignments\",outcome=\"ok\"}";
        assert!(counted(&metrics, socket), "{metrics}");
    }
    assert!(!metrics.contains(&ingress_bearer) && !metrics.contains(&token));

    drop(node_1);
    drop(node_2);
    let jwt = topology.identity["jwt"].as_str().unwrap().to_owned();
    topology.close(&[&bearer_1, &bearer_2, &ingress_bearer, &relay_bearer, &token, &jwt]).await;
}

/// The value of the series `series` (name and labels as rendered) in a Prometheus text, if it is
/// there. Every family is on every scrape (zero until counted), so a check reads the count.
fn series_value(metrics: &str, series: &str) -> Option<f64> {
    metrics.lines().find_map(|line| line.strip_prefix(series)?.strip_prefix(' ')?.trim().parse().ok())
}
