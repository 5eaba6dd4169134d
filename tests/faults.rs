//! Faults, against PostgreSQL and real `cloudly serve` processes:
//!
//! - PostgreSQL stopped (fast, then immediate: a crash) and started again under a load of
//!   designations and registrations: while it is down every answer is `store-unavailable` /
//!   `not-ready` and `/readyz` is 503 `store-unavailable`, never a hang or an HTTP error; the same
//!   process recovers without a restart; afterwards every answer given as accepted is in the store
//!   and every designation chain verifies. A private PostgreSQL server (`support::private_postgres`)
//!   is stopped, never the shared one.
//! - A controller killed with SIGKILL in a burst of designations through two processes: the other
//!   keeps answering, and replaying every mutation through it answers each accepted one's
//!   generation; every mutation ends with at most one generation and every generation has exactly
//!   one mutation.
//! - A graceful stop with requests in flight: route table long polls are answered, the node's
//!   socket gets a close frame, designations in flight are answered (and what was accepted is
//!   stored), and the process exits 0 well within its grace period.

mod support;

use cloudly::api::methods::name;
use cloudly::api::wire;
use cloudly::client::{CallError, Client};
use cloudly::contract::designation::validate_cluster_ingress_designation;
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use support::ingress::{connect_relay_with_bearer_at, registration, run_ingress_replica};
use support::node_agent::NodeAgent;
use support::private_postgres::{PrivatePostgres, StopMode};
use support::process::{Serving, start_with};
use support::service::{Backend, TestDatabase, designation_request, reference_of, spec_body};

/// The request timeout the processes run with (`CLOUDLY_REQUEST_TIMEOUT_SECONDS`).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// How long an answer may take beyond the request timeout before it counts as a hang.
const ANSWER_SLACK: Duration = Duration::from_secs(2);

/// How long a process may take to be ready and accepting again after PostgreSQL is back.
const RECOVERY_BOUND: Duration = Duration::from_secs(15);

/// What one call came to.
#[derive(Debug, Clone)]
enum Answer {
    /// The response.
    Ok(Value),
    /// An answered envelope error: its `data`.
    Refused(Value),
    /// No envelope: the exchange broke or timed out (the call may or may not have happened).
    Unanswered(String),
}

impl Answer {
    fn code(&self) -> &str {
        match self {
            Answer::Refused(data) => data["code"].as_str().unwrap_or(""),
            _ => "",
        }
    }
}

/// Fires one envelope; an HTTP status instead of an envelope fails the test.
async fn fire(client: &Client, method: &str, request: Value, token: Option<&str>) -> Answer {
    match client.envelope(method, request, token).await {
        Ok(envelope) => match envelope.get("error").filter(|error| !error.is_null()) {
            Some(error) => Answer::Refused(error["data"].clone()),
            None => Answer::Ok(envelope["response"].clone()),
        },
        Err(CallError::Http { status, body }) => panic!("{method}: HTTP {status} instead of an envelope: {body}"),
        Err(error) => Answer::Unanswered(error.to_string()),
    }
}

/// Calls `method` as `identity` and expects an answer.
async fn admin(client: &Client, identity: &Value, method: &str, mut request: Value) -> Value {
    request["identity"] = identity.clone();
    client.call(method, request).await.unwrap_or_else(|error| panic!("{method}: {error}"))
}

/// A client whose calls give up well after the server's request timeout, so a hang shows.
fn client_of(serving: &Serving) -> Client {
    Client::with_timeout(&serving.base_url, REQUEST_TIMEOUT + ANSWER_SLACK + Duration::from_secs(3)).unwrap()
}

/// `GET <path>`: the status and the JSON body.
async fn get(base_url: &str, path: &str) -> (u16, Value) {
    let response = reqwest::get(format!("{base_url}{path}")).await.unwrap();
    let status = response.status().as_u16();
    (status, serde_json::from_slice(&response.bytes().await.unwrap()).unwrap())
}

/// One designation request sent, and what became of it.
#[derive(Debug, Clone)]
struct Designated {
    cluster: String,
    mutation: String,
    /// The request without `identity`.
    request: Value,
    answer: Answer,
    sent: Instant,
    answered: Instant,
}

/// One registration sent (its `version` is unique), and what became of it.
#[derive(Debug, Clone)]
struct Registered {
    version: String,
    answer: Answer,
    sent: Instant,
    answered: Instant,
}

/// A load running until `stop`: what it sent, and the clients it sends through (a worker uses
/// `targets[worker % len]`; a test may replace them).
#[derive(Clone)]
struct Load {
    stop: Arc<AtomicBool>,
    targets: Arc<Mutex<Vec<Client>>>,
    designations: Arc<Mutex<Vec<Designated>>>,
    registrations: Arc<Mutex<Vec<Registered>>>,
    workers: Arc<Mutex<Vec<tokio::task::JoinHandle<()>>>>,
}

impl Load {
    fn new(targets: Vec<Client>) -> Load {
        Load {
            stop: Arc::default(),
            targets: Arc::new(Mutex::new(targets)),
            designations: Arc::default(),
            registrations: Arc::default(),
            workers: Arc::default(),
        }
    }

    fn target(&self, worker: usize) -> Client {
        let targets = self.targets.lock().unwrap();
        targets[worker % targets.len()].clone()
    }

    fn designations(&self) -> Vec<Designated> {
        self.designations.lock().unwrap().clone()
    }

    fn registrations(&self) -> Vec<Registered> {
        self.registrations.lock().unwrap().clone()
    }

    /// Designations accepted whose request was sent after `since`, per cluster.
    fn accepted_since(&self, since: Instant) -> BTreeMap<String, usize> {
        let mut counts = BTreeMap::new();
        for designated in self.designations.lock().unwrap().iter() {
            if designated.sent >= since && matches!(designated.answer, Answer::Ok(_)) {
                *counts.entry(designated.cluster.clone()).or_insert(0) += 1;
            }
        }
        counts
    }

    /// Designates `cluster` with a fresh mutation id and records it.
    async fn designate(&self, worker: usize, identity: &Value, cluster: &str, expected: Value) -> Answer {
        let mutation = format!("m-{}", uuid::Uuid::new_v4().simple());
        let request = designation_request(cluster, "ingress", &mutation, 1, expected);
        let mut with_identity = request.clone();
        with_identity["identity"] = identity.clone();
        let sent = Instant::now();
        let client = self.target(worker);
        let answer = fire(&client, "designateClusterIngress", with_identity, None).await;
        let designated = Designated {
            cluster: cluster.to_owned(),
            mutation,
            request,
            answer: answer.clone(),
            sent,
            answered: Instant::now(),
        };
        self.designations.lock().unwrap().push(designated);
        answer
    }

    /// Rotates `cluster`'s designation until stopped, each time with a fresh mutation id against
    /// the designation it last learned (from an acceptance or a `designation-conflict`).
    fn spawn_rotations(&self, worker: usize, identity: Value, cluster: String, mut expected: Value) {
        let load = self.clone();
        let task = tokio::spawn(async move {
            while !load.stop.load(Ordering::SeqCst) {
                let answer = load.designate(worker, &identity, &cluster, expected.clone()).await;
                let pause = match &answer {
                    Answer::Ok(response) => {
                        expected = reference_of(&response["designation"]);
                        10
                    }
                    Answer::Refused(data) if data["code"] == "designation-conflict" => {
                        expected = data["current"].clone();
                        10
                    }
                    _ => 50,
                };
                tokio::time::sleep(Duration::from_millis(pause)).await;
            }
        });
        self.workers.lock().unwrap().push(task);
    }

    /// Registers node-1 of `c1` until stopped, each registration with a version of its own.
    fn spawn_registrations(&self, worker: usize, bearer: String, token: String) {
        let load = self.clone();
        let task = tokio::spawn(async move {
            let mut count = 0;
            while !load.stop.load(Ordering::SeqCst) {
                count += 1;
                let version = format!("1.4.2-w{worker}.r{count}");
                let mut request = registration(&bearer, "node-1");
                request["version"] = json!(version);
                let client = load.target(worker);
                let sent = Instant::now();
                let answer = fire(&client, "registerClusterIngress", request, Some(&token)).await;
                let pause = if matches!(answer, Answer::Ok(_)) { 10 } else { 50 };
                let registered = Registered { version, answer, sent, answered: Instant::now() };
                load.registrations.lock().unwrap().push(registered);
                tokio::time::sleep(Duration::from_millis(pause)).await;
            }
        });
        self.workers.lock().unwrap().push(task);
    }

    /// Stops the load and waits for its last calls to end.
    async fn finish(&self) {
        self.stop.store(true, Ordering::SeqCst);
        let workers = std::mem::take(&mut *self.workers.lock().unwrap());
        for worker in workers {
            worker.await.expect("a load worker failed");
        }
    }
}

/// Creates organization `org` (if `first`) and cluster `cluster` (no relay origin) with service
/// `ingress`, designates it once with a fresh mutation id (recorded in `load`) and answers the
/// designation's reference.
async fn seed_rotation_cluster(load: &Load, client: &Client, identity: &Value, cluster: &str) -> Value {
    admin(client, identity, "putOrganization", json!({ "organization": { "id": "org", "name": "Org" } })).await;
    admin(
        client,
        identity,
        "putCluster",
        json!({ "cluster": { "id": cluster, "organizationId": "org", "runtime": { "phase": "pallet", "generation": 3 },
            "relayOrigin": null, "fleetCutoverIngressDesignation": null }, "expectedRevision": null }),
    )
    .await;
    admin(
        client,
        identity,
        "putServiceRuntimeSpec",
        json!({ "spec": spec_body(cluster, "ingress"), "expectedRevision": null }),
    )
    .await;
    match load.designate(0, identity, cluster, Value::Null).await {
        Answer::Ok(response) => reference_of(&response["designation"]),
        other => panic!("the first designation of {cluster}: {other:?}"),
    }
}

/// Every designation of `cluster`, oldest first (all pages), checked as a chain: generations
/// 1, 2, … of one id, each valid under the contract (its digest is its content's) and linking the
/// one before by reference.
async fn verified_chain(client: &Client, identity: &Value, cluster: &str) -> Vec<Value> {
    let page = ("listClusterIngressDesignations", "designations", "fromGeneration", "nextGeneration");
    let chain = all_pages(client, identity, cluster, page).await;
    for (index, designation) in chain.iter().enumerate() {
        assert!(validate_cluster_ingress_designation(designation).is_empty(), "{cluster}: {designation}");
        assert_eq!(designation["generation"], json!(index + 1), "{cluster}: the chain has a gap");
        assert_eq!(designation["id"], chain[0]["id"], "{cluster}: one designation id");
        let previous = if index == 0 { Value::Null } else { reference_of(&chain[index - 1]) };
        assert_eq!(designation["previous"], previous, "{cluster}: generation {} does not link", index + 1);
    }
    chain
}

/// Replays every designation mutation of `sent` through `client` (the same request, the same
/// mutation id) and checks that each ended with exactly one generation: an accepted one is
/// answered its designation again (`replayed: true`); one whose first answer was lost or
/// `store-unavailable` either committed — its replay and a second replay answer one generation —
/// or never will (`designation-conflict`). Then every cluster's chain verifies, holds every
/// accepted designation as answered, and each of its generations belongs to exactly one mutation.
async fn settle_designations(client: &Client, identity: &Value, sent: &[Designated]) {
    let mut clusters: BTreeMap<String, Vec<Designated>> = BTreeMap::new();
    for designated in sent {
        clusters.entry(designated.cluster.clone()).or_default().push(designated.clone());
    }
    let settled = clusters.into_iter().map(|(cluster, sent)| async move {
        let replay = async |designated: &Designated| {
            let mut request = designated.request.clone();
            request["identity"] = identity.clone();
            fire(client, "designateClusterIngress", request, None).await
        };
        // Generation → the mutation that holds it.
        let mut owners: BTreeMap<u64, String> = BTreeMap::new();
        let mut claim = |generation: u64, mutation: &str| {
            let earlier = owners.insert(generation, mutation.to_owned());
            assert!(
                earlier.is_none(),
                "{cluster}: generation {generation} answered for two mutations: {earlier:?}, {mutation}"
            );
        };
        let mut accepted = Vec::new();
        for designated in &sent {
            match &designated.answer {
                Answer::Ok(response) => {
                    let again = replay(designated).await;
                    let Answer::Ok(again) = again else {
                        panic!(
                            "{cluster}: replay of accepted mutation {} (generation {}): {again:?}",
                            designated.mutation, response["designation"]["generation"]
                        )
                    };
                    assert_eq!(again["replayed"], json!(true), "{cluster}: {again}");
                    assert_eq!(
                        again["designation"], response["designation"],
                        "{cluster}: a replay answers the original"
                    );
                    claim(response["designation"]["generation"].as_u64().unwrap(), &designated.mutation);
                    accepted.push(response["designation"].clone());
                }
                Answer::Refused(data) if data["code"] != "store-unavailable" => {}
                Answer::Refused(_) | Answer::Unanswered(_) => match replay(designated).await {
                    Answer::Ok(first) => {
                        let second = replay(designated).await;
                        let Answer::Ok(second) = second else { panic!("{cluster}: second replay: {second:?}") };
                        assert_eq!(second["replayed"], json!(true));
                        assert_eq!(
                            second["designation"], first["designation"],
                            "{cluster}: one generation per mutation"
                        );
                        claim(first["designation"]["generation"].as_u64().unwrap(), &designated.mutation);
                    }
                    Answer::Refused(data) if data["code"] == "designation-conflict" => {}
                    other => panic!("{cluster}: replay of an unanswered mutation: {other:?}"),
                },
            }
        }
        let chain = verified_chain(client, identity, &cluster).await;
        for designation in &accepted {
            let generation = designation["generation"].as_u64().unwrap() as usize;
            assert_eq!(&chain[generation - 1], designation, "{cluster}: an accepted designation is stored as answered");
        }
        let generations: BTreeSet<u64> = (1..=chain.len() as u64).collect();
        assert_eq!(
            owners.keys().copied().collect::<BTreeSet<_>>(),
            generations,
            "{cluster}: every generation has one mutation"
        );
        (cluster, chain.len(), accepted.len())
    });
    for (cluster, length, accepted) in futures_util::future::join_all(settled).await {
        assert!(accepted > 0 && length >= accepted, "{cluster}: {accepted} accepted, chain of {length}");
    }
}

/// Every entry of a paged list of `cluster`: `page` is (method, list member, the request's cursor
/// member, the answer's next cursor member).
async fn all_pages(client: &Client, identity: &Value, cluster: &str, page: (&str, &str, &str, &str)) -> Vec<Value> {
    let (method, list, cursor, next) = page;
    let mut all: Vec<Value> = Vec::new();
    let mut request = json!({ "clusterId": cluster, "limit": 500 });
    loop {
        let answer = admin(client, identity, method, request.clone()).await;
        all.extend(answer[list].as_array().unwrap().iter().cloned());
        if answer[next].is_null() {
            return all;
        }
        request[cursor] = answer[next].clone();
    }
}

/// Cluster `c1` with a relay origin and its node `node-1`: answers `putClusterNode`'s answer
/// (with the node's bearer).
async fn seed_relay_cluster(client: &Client, identity: &Value) -> Value {
    let cluster = json!({ "cluster": { "id": "c1", "organizationId": "org",
        "runtime": { "phase": "pallet", "generation": 3 }, "relayOrigin": "https://relay.example.net",
        "fleetCutoverIngressDesignation": null }, "expectedRevision": null });
    admin(client, identity, "putCluster", cluster).await;
    let node = json!({ "clusterId": "c1", "rotateCredential": false,
        "node": { "id": "node-1", "runtimeNamespace": "ns-main", "hostAddresses": [] } });
    admin(client, identity, "putClusterNode", node).await
}

/// The world of the PostgreSQL restart test: cluster `c1` whose ingress runs on node-1 (a node
/// agent holds its socket) with a connected relay, and clusters `d1`…`d3` to rotate.
struct World {
    identity: Value,
    agent: NodeAgent,
    ingress_bearer: String,
    relay_token: String,
    secrets: Vec<String>,
    rotations: Vec<(String, Value)>,
}

async fn build_world(serving: &Serving, load: &Load) -> World {
    let client = client_of(serving);
    let identity = serving.admin_identity();
    let call = |method: &'static str, request: Value| admin(&client, &identity, method, request);
    let mut rotations = Vec::new();
    for cluster in ["d1", "d2", "d3"] {
        rotations.push((cluster.to_owned(), seed_rotation_cluster(load, &client, &identity, cluster).await));
    }
    let node = seed_relay_cluster(&client, &identity).await;
    let node_bearer = node["bearer"].as_str().unwrap().to_owned();
    let mut spec = spec_body("c1", "ingress");
    spec["replicas"] = json!(1);
    spec["placement"] = json!({ "nodeIds": ["node-1"] });
    call("putServiceRuntimeSpec", json!({ "spec": spec, "expectedRevision": null })).await;
    call("designateClusterIngress", designation_request("c1", "ingress", "c1-first", 1, Value::Null)).await;

    // node-1 runs the ingress: its assignment's bearer resolved, reported ready.
    let agent = NodeAgent::connect_to(&serving.base_url).await;
    let session = agent.open("c1", "node-1", &node_bearer).await;
    let assignments =
        agent.call(name::GET_RUNTIME_ASSIGNMENTS, wire::GetRuntimeAssignments { session: &session }).await.unwrap();
    let assignment = &assignments["assignments"][0]["payload"];
    let ingress_bearer = run_ingress_replica(&agent, &session, assignment).await.unwrap();
    let relay = call("issueClusterRelayCredential", json!({ "clusterId": "c1", "relayId": "relay-1" })).await;
    let relay_bearer = relay["bearer"].as_str().unwrap().to_owned();
    let relay_token = connect_relay_with_bearer_at(&client, "c1", "relay-1", &relay_bearer).await;
    let secrets = vec![
        node_bearer,
        ingress_bearer.clone(),
        relay_bearer,
        relay_token.clone(),
        identity["jwt"].as_str().unwrap().to_owned(),
    ];
    World { identity, agent, ingress_bearer, relay_token, secrets, rotations }
}

/// Stops the private server with `mode` under the load, checks what the process answers while it
/// is down, starts it again and waits until the process is ready and accepting. Answers the
/// outage window (from the stop's end to the start's beginning) and when the server was back.
async fn outage(
    postgres: &PrivatePostgres,
    mode: StopMode,
    serving: &Serving,
    load: &Load,
) -> ((Instant, Instant), Instant) {
    tokio::task::block_in_place(|| postgres.stop(mode));
    let down = Instant::now();
    // While it is down: not ready, saying why; alive.
    let mut polls = 0;
    while down.elapsed() < Duration::from_secs(2) {
        assert_eq!(
            get(&serving.base_url, "/readyz").await,
            (503, json!({ "ready": false, "reason": "store-unavailable" })),
            "readyz while PostgreSQL is down ({mode:?})"
        );
        assert_eq!(get(&serving.base_url, "/healthz").await.0, 200);
        polls += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(polls >= 5);
    let up = Instant::now();
    tokio::task::block_in_place(|| postgres.start_again());
    let back = Instant::now();
    // The same process recovers: ready, then accepting designations and registrations again.
    loop {
        if get(&serving.base_url, "/readyz").await == (200, json!({ "ready": true })) {
            break;
        }
        assert!(back.elapsed() < RECOVERY_BOUND, "not ready {RECOVERY_BOUND:?} after PostgreSQL came back ({mode:?})");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    loop {
        let designations = load.accepted_since(back);
        let registrations = load
            .registrations()
            .iter()
            .filter(|registered| registered.sent >= back && matches!(registered.answer, Answer::Ok(_)))
            .count();
        if designations.len() == 3 && registrations > 0 {
            break;
        }
        assert!(
            back.elapsed() < RECOVERY_BOUND,
            "nothing accepted {RECOVERY_BOUND:?} after PostgreSQL came back ({mode:?}): {designations:?}, {registrations} registrations"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    ((down, up), back)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_restarted_under_load_answers_unavailable_then_recovers_without_losing_an_accepted_answer() {
    let postgres = tokio::task::block_in_place(PrivatePostgres::start);
    let scratch = support::process::Scratch::new("cloudly-faults");
    let timeout = REQUEST_TIMEOUT.as_secs().to_string();
    let serving =
        start_with(&scratch.join("data"), &postgres.url(), &[("CLOUDLY_REQUEST_TIMEOUT_SECONDS", timeout.as_str())])
            .serving();
    let load = Load::new(vec![client_of(&serving)]);
    let world = build_world(&serving, &load).await;
    let began = Instant::now();
    for (worker, (cluster, expected)) in world.rotations.iter().enumerate() {
        load.spawn_rotations(worker, world.identity.clone(), cluster.clone(), expected.clone());
    }
    for worker in 0..2 {
        load.spawn_registrations(worker, world.ingress_bearer.clone(), world.relay_token.clone());
    }

    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(load.accepted_since(began).len(), 3, "the load runs");
    let (fast, _) = outage(&postgres, StopMode::Fast, &serving, &load).await;
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let (crash, _) = outage(&postgres, StopMode::Immediate, &serving, &load).await;
    tokio::time::sleep(Duration::from_millis(1000)).await;
    load.finish().await;

    // Every call was answered with an envelope, within the request timeout; while PostgreSQL was
    // down, designations were `store-unavailable` and registrations `not-ready`.
    let within =
        |sent: Instant, answered: Instant| [fast, crash].iter().any(|(down, up)| sent >= *down && answered <= *up);
    let designations = load.designations();
    let registrations = load.registrations();
    let (mut down_designations, mut down_registrations) = (0, 0);
    for designated in &designations {
        let elapsed = designated.answered - designated.sent;
        assert!(elapsed <= REQUEST_TIMEOUT + ANSWER_SLACK, "a designation took {elapsed:?}: {:?}", designated.answer);
        match &designated.answer {
            Answer::Unanswered(why) => panic!("a designation got no answer from a running controller: {why}"),
            answer if within(designated.sent, designated.answered) => {
                assert_eq!(answer.code(), "store-unavailable", "a designation while PostgreSQL is down: {answer:?}");
                down_designations += 1;
            }
            Answer::Refused(data) => {
                assert!(["store-unavailable", "designation-conflict"].contains(&answer_code(data)), "{data}")
            }
            Answer::Ok(_) => {}
        }
    }
    for registered in &registrations {
        let elapsed = registered.answered - registered.sent;
        assert!(elapsed <= REQUEST_TIMEOUT + ANSWER_SLACK, "a registration took {elapsed:?}: {:?}", registered.answer);
        match &registered.answer {
            Answer::Unanswered(why) => panic!("a registration got no answer from a running controller: {why}"),
            Answer::Refused(data) => {
                assert_eq!(data["reason"], json!("not-ready"), "{data}");
                down_registrations += usize::from(within(registered.sent, registered.answered));
            }
            Answer::Ok(_) => {
                assert!(!within(registered.sent, registered.answered), "accepted while PostgreSQL was down")
            }
        }
    }
    assert!(
        down_designations >= 10 && down_registrations >= 10,
        "{down_designations} designations, {down_registrations} registrations while down"
    );

    // Every accepted answer is in the store; every lost or unavailable one ended with at most one
    // generation; the chains verify.
    let client = client_of(&serving);
    settle_designations(&client, &world.identity, &designations).await;
    verified_chain(&client, &world.identity, "c1").await;
    let stored = all_pages(
        &client,
        &world.identity,
        "c1",
        ("listClusterIngressRegistrations", "registrations", "before", "nextBefore"),
    )
    .await;
    let stored: Vec<&str> = stored.iter().map(|registration| registration["version"].as_str().unwrap()).collect();
    let stored_set: BTreeSet<&str> = stored.iter().copied().collect();
    assert_eq!(stored_set.len(), stored.len(), "a registration is stored once");
    let accepted: BTreeSet<&str> = registrations
        .iter()
        .filter(|registered| matches!(registered.answer, Answer::Ok(_)))
        .map(|registered| registered.version.as_str())
        .collect();
    let answered_not_ready: BTreeSet<&str> = registrations
        .iter()
        .filter(|registered| !matches!(registered.answer, Answer::Ok(_)))
        .map(|registered| registered.version.as_str())
        .collect();
    assert!(accepted.len() >= 20, "{} registrations accepted", accepted.len());
    let lost: Vec<_> = accepted.difference(&stored_set).collect();
    assert!(lost.is_empty(), "accepted registrations missing from the store: {lost:?}");
    let unexplained: Vec<_> =
        stored_set.difference(&accepted).filter(|version| !answered_not_ready.contains(*version)).collect();
    assert!(unexplained.is_empty(), "stored registrations never sent: {unexplained:?}");

    drop(world.agent);
    let log = serving.terminate();
    for secret in &world.secrets {
        assert!(!log.contains(secret.as_str()), "a log line carries a secret");
    }
    drop(postgres);
}

fn answer_code(data: &Value) -> &str {
    data["code"].as_str().unwrap_or("")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_controller_killed_mid_burst_leaves_every_mutation_with_exactly_one_generation() {
    let database = TestDatabase::create(Backend::Postgres).await;
    let scratch = support::process::Scratch::new("cloudly-faults");
    let timeout = REQUEST_TIMEOUT.as_secs().to_string();
    let environment = [("CLOUDLY_REQUEST_TIMEOUT_SECONDS", timeout.as_str())];
    let survivor = start_with(&scratch.join("a"), &database.url, &environment).serving();
    let victim =
        support::process::start_sharing_keys(&survivor, &scratch.join("b"), &database.url, &environment).serving();
    let identity = survivor.admin_identity();
    let (to_survivor, to_victim) = (client_of(&survivor), client_of(&victim));
    let load = Load::new(vec![to_survivor.clone(), to_victim.clone()]);

    // Two workers per cluster race rotations, one through each process.
    let mut clusters = Vec::new();
    for cluster in ["k1", "k2", "k3"] {
        clusters.push((cluster, seed_rotation_cluster(&load, &to_victim, &identity, cluster).await));
    }
    for (index, (cluster, expected)) in clusters.iter().enumerate() {
        for process in 0..2 {
            load.spawn_rotations(2 * index + process, identity.clone(), (*cluster).to_owned(), expected.clone());
        }
    }
    // Mid-burst: once both processes accepted designations, the second is killed.
    let started = Instant::now();
    loop {
        let accepted = load
            .designations()
            .iter()
            .filter(|designated| designated.sent >= started && matches!(designated.answer, Answer::Ok(_)))
            .count();
        if accepted >= 30 {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(20), "the burst does not run");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    victim.kill_hard();
    let killed = Instant::now();
    // The workers of the killed process learn it from their failing calls; then all use the other.
    tokio::time::sleep(Duration::from_millis(300)).await;
    *load.targets.lock().unwrap() = vec![to_survivor.clone()];
    let switched = Instant::now();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    load.finish().await;

    // The other one kept answering: accepted designations of every cluster after the kill, ready
    // throughout, and nothing it answered was anything but an acceptance or a conflict.
    assert_eq!(load.accepted_since(switched).len(), 3, "{:?}", load.accepted_since(switched));
    assert_eq!(get(&survivor.base_url, "/readyz").await, (200, json!({ "ready": true })));
    let designations = load.designations();
    let unanswered =
        designations.iter().filter(|designated| matches!(designated.answer, Answer::Unanswered(_))).count();
    for designated in &designations {
        if let Answer::Refused(data) = &designated.answer {
            assert_eq!(answer_code(data), "designation-conflict", "{data}");
        }
        if let Answer::Unanswered(why) = &designated.answer {
            assert!(designated.sent < switched, "a call through the surviving process got no answer: {why}");
        }
    }
    assert!(unanswered >= 1, "no call met the killed process ({:?} after the burst began)", killed - started);

    // Replayed through the survivor: each accepted mutation answers its generation; each cut-off
    // one ends with at most one; the chains verify.
    settle_designations(&to_survivor, &identity, &designations).await;
    survivor.terminate();
    database.drop_now().await;
}

/// The grace period of the graceful stop test (`CLOUDLY_SHUTDOWN_GRACE_SECONDS`).
const GRACE: Duration = Duration::from_secs(10);

/// How soon after SIGTERM the requests in flight must be answered and the socket closed.
const DRAIN_BOUND: Duration = Duration::from_secs(3);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_graceful_stop_answers_the_requests_in_flight_and_closes_the_node_socket() {
    let database = TestDatabase::create(Backend::Postgres).await;
    let scratch = support::process::Scratch::new("cloudly-faults");
    let grace = GRACE.as_secs().to_string();
    let data_dir = scratch.join("data");
    let serving = start_with(&data_dir, &database.url, &[("CLOUDLY_SHUTDOWN_GRACE_SECONDS", grace.as_str())]).serving();
    let identity = serving.admin_identity();
    let client = client_of(&serving);
    let load = Load::new(vec![client.clone()]);
    let expected = seed_rotation_cluster(&load, &client, &identity, "d1").await;
    let call = |method: &'static str, request: Value| admin(&client, &identity, method, request);
    let node = seed_relay_cluster(&client, &identity).await;
    let relay = call("issueClusterRelayCredential", json!({ "clusterId": "c1", "relayId": "relay-1" })).await;
    let token = connect_relay_with_bearer_at(&client, "c1", "relay-1", relay["bearer"].as_str().unwrap()).await;

    // In flight when the stop signal arrives: three relays' route table long polls (held up to
    // 25 s, longer than the grace period), a node's socket with an open session, and a burst of
    // designations.
    let polls: Vec<_> = (0..3)
        .map(|_| {
            let client = Client::with_timeout(&serving.base_url, Duration::from_secs(60)).unwrap();
            let token = token.clone();
            tokio::spawn(async move {
                let request = wire::to_request(&wire::GetClusterIngressRouteTable { known_revision: Value::Null });
                let answer = fire(&client, name::GET_CLUSTER_INGRESS_ROUTE_TABLE, request, Some(&token)).await;
                (answer, Instant::now())
            })
        })
        .collect();
    let agent = NodeAgent::connect_to(&serving.base_url).await;
    agent.open("c1", "node-1", node["bearer"].as_str().unwrap()).await;
    for worker in 0..4 {
        load.spawn_rotations(worker, identity.clone(), "d1".to_owned(), expected.clone());
    }
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert!(polls.iter().all(|poll| !poll.is_finished()), "the long polls are held");

    // Taken before the signal is sent: anything that fails after this moment may be the stop's doing.
    let signalled = Instant::now();
    serving.send_terminate();
    // The socket is closed with a close frame (its reason is the frame's), at once.
    assert_eq!(agent.closed(DRAIN_BOUND).await.as_deref(), Some("controller stopping"));
    // The long polls are answered (the current table: none) rather than cut off.
    for poll in polls {
        let (answer, at) = poll.await.unwrap();
        let Answer::Ok(response) = answer else { panic!("a long poll in flight at the stop: {answer:?}") };
        assert_eq!(response, json!({ "table": null }));
        assert!(at - signalled < DRAIN_BOUND, "a long poll was answered {:?} after the stop signal", at - signalled);
    }
    let (exit, log) = serving.wait_exit(GRACE + Duration::from_secs(5)).await;
    let exited = signalled.elapsed();
    assert!(exit.is_some_and(|exit| exit.success()), "exit {exit:?} after SIGTERM:\n{log}");
    assert!(exited < DRAIN_BOUND, "the stop took {exited:?}");
    assert!(log.contains("cloudly stopped") && !log.contains("grace period over"), "{log}");
    load.finish().await;

    // Each designation of the burst was answered, or (sent as the listener closed) never reached
    // it; every accepted one is stored, as a process started again on the store answers.
    let designations = load.designations();
    for designated in &designations {
        match &designated.answer {
            Answer::Ok(_) => {}
            Answer::Refused(data) => assert_eq!(answer_code(data), "designation-conflict", "{data}"),
            // A request written as the server closed an idle keep-alive connection is lost
            // unanswered (HTTP/1.1 has no way to tell); it was never judged, which the replay
            // shows. Before the stop signal nothing fails.
            Answer::Unanswered(why) => {
                assert!(designated.answered >= signalled, "a designation failed before the stop signal: {why}")
            }
        }
    }
    let again = start_with(&data_dir, &database.url, &[]).serving();
    settle_designations(&client_of(&again), &identity, &designations).await;
    again.terminate();
    database.drop_now().await;
}
