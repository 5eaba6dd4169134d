//! Test support for the service: controllers served in-process on a real socket, each over a
//! throwaway database of either backend (`database.rs`).

use cloudly::api::Limits;
use cloudly::client::Client;
use cloudly::contract::Id;
use cloudly::domain::identity::{Identity, IdentitySubject, IdentityType, Role, issue_identity};
use cloudly::domain::{Clock, Controller, ControllerSettings};
use cloudly::keys::ControllerKeys;
use cloudly::server::{RunningServer, spawn};
use cloudly::store::{self, SharedStore};

pub use super::database::{Backend, TestDatabase};
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// A clock the test moves.
#[derive(Debug)]
pub struct TestClock(pub AtomicU64);

impl Clock for TestClock {
    fn now_ms(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
}

/// The start time of every test clock: 2026-01-01T00:00:00Z.
pub const T0: u64 = 1_767_225_600_000;

/// A controller served on 127.0.0.1 with its own keys and database.
pub struct TestService {
    pub database: TestDatabase,
    pub store: SharedStore,
    pub keys: Arc<ControllerKeys>,
    pub clock: Arc<TestClock>,
    pub server: Option<RunningServer>,
    pub client: Client,
    pub base_url: String,
}

impl TestService {
    pub async fn start(backend: Backend) -> TestService {
        Self::start_with(backend, Limits::default()).await
    }

    pub async fn start_with(backend: Backend, limits: Limits) -> TestService {
        Self::start_with_settings(backend, limits, ControllerSettings::default()).await
    }

    pub async fn start_with_settings(backend: Backend, limits: Limits, settings: ControllerSettings) -> TestService {
        let database = TestDatabase::create(backend).await;
        let store = store::open(&database.url).await.expect("open the test store");
        let keys = Arc::new(ControllerKeys::generate().unwrap());
        let clock = Arc::new(TestClock(AtomicU64::new(T0)));
        let controller = Arc::new(Controller::with_settings(store.clone(), keys.clone(), clock.clone(), settings));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let server = spawn(listener, controller, limits).unwrap();
        let base_url = format!("http://{}", server.address);
        TestService { database, store, keys, clock, client: Client::new(&base_url), base_url, server: Some(server) }
    }

    /// The controller this service serves.
    pub fn controller(&self) -> Arc<Controller> {
        self.server.as_ref().expect("the service runs").state.controller.clone()
    }

    /// An identity of `role` signed by this controller, valid for a day of the test clock.
    pub fn identity(&self, user: &str, role: Role) -> Identity {
        let subject = IdentitySubject {
            name: format!("{user} (test)"),
            user_id: Id::parse(user).unwrap(),
            identity_type: IdentityType::Human,
            role,
        };
        issue_identity(
            &self.keys.identity,
            &subject,
            self.clock.now_ms(),
            86_400_000,
            &uuid::Uuid::new_v4().to_string(),
        )
        .unwrap()
    }

    pub fn admin(&self) -> Value {
        serde_json::to_value(self.identity("admin-1", Role::Admin)).unwrap()
    }

    /// Calls `method` with `request` plus `identity`.
    pub async fn call_as(
        &self,
        identity: &Value,
        method: &str,
        mut request: Value,
    ) -> Result<Value, cloudly::client::TypedError> {
        request["identity"] = identity.clone();
        match self.client.call(method, request).await {
            Ok(response) => Ok(response),
            Err(cloudly::client::CallError::Typed(error)) => Err(error),
            Err(other) => panic!("{method}: {other}"),
        }
    }

    /// Calls `method` as administrator and expects success.
    pub async fn admin_call(&self, method: &str, request: Value) -> Value {
        let admin = self.admin();
        self.call_as(&admin, method, request)
            .await
            .unwrap_or_else(|error| panic!("{method}: {} {}", error.text, error.data))
    }

    /// Creates organization `org`, Pallet cluster `cluster` (runtime generation 3, a relay
    /// origin), nodes `node-1` and `node-2`, and service `service` placed on both nodes.
    pub async fn seed_cluster(&self, cluster: &str, service: &str) -> Value {
        self.put_pallet_cluster(cluster).await;
        for node in ["node-1", "node-2"] {
            self.admin_call(
                "putClusterNode",
                json!({ "clusterId": cluster, "node": { "id": node, "runtimeNamespace": "ns-main", "hostAddresses": [] }, "rotateCredential": false }),
            )
            .await;
        }
        self.admin_call(
            "putServiceRuntimeSpec",
            json!({ "spec": spec_body(cluster, service), "expectedRevision": null }),
        )
        .await["spec"]
            .clone()
    }

    /// Creates organization `org` and Pallet cluster `cluster` (runtime generation 3, a relay
    /// origin).
    pub async fn put_pallet_cluster(&self, cluster: &str) {
        self.admin_call("putOrganization", json!({ "organization": { "id": "org", "name": "Org" } })).await;
        self.admin_call(
            "putCluster",
            json!({ "cluster": {
                "id": cluster, "organizationId": "org", "runtime": { "phase": "pallet", "generation": 3 },
                "relayOrigin": "https://relay.example.net:8443", "fleetCutoverIngressDesignation": null,
            }, "expectedRevision": null }),
        )
        .await;
    }

    /// Runs the real `cloudly` binary against this service with the identity file `identity`;
    /// expects success and answers the JSON it printed.
    pub async fn cli(&self, identity: &std::path::Path, args: &[&str]) -> Value {
        serde_json::from_str(&self.cli_text(identity, args).await)
            .unwrap_or_else(|error| panic!("cloudly {args:?} printed no JSON: {error}"))
    }

    /// Runs the real `cloudly` binary as [`TestService::cli`] does and answers what it printed.
    pub async fn cli_text(&self, identity: &std::path::Path, args: &[&str]) -> String {
        let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_cloudly"))
            .args(args)
            .env("CLOUDLY_URL", &self.base_url)
            .env("CLOUDLY_IDENTITY", identity)
            .output()
            .await
            .unwrap();
        assert!(
            output.status.success(),
            "cloudly {args:?} failed: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8(output.stdout).expect("the CLI prints UTF-8")
    }

    /// Ends the story: once every background reconcile has run, a full pass over every cluster
    /// finds nothing to correct (every change was reconciled as it was written); then the server
    /// stops and the database is dropped.
    pub async fn stop(mut self) {
        if let Some(server) = self.server.take() {
            assert_full_pass_finds_nothing(&server.state.controller).await;
            server.stop().await.unwrap();
        }
        self.database.drop_now().await;
    }

    /// Ends a story that breaks the store or the keys on purpose, so a full pass would find what
    /// the story broke: the server stops and the database is dropped.
    pub async fn stop_unchecked(mut self) {
        if let Some(server) = self.server.take() {
            server.stop().await.unwrap();
        }
        self.database.drop_now().await;
    }
}

/// Asserts that a full pass over every cluster of the controller's store would correct nothing.
/// Work still in flight (a background reconcile, a claim answer being recorded) is awaited: the
/// check looks again for up to two seconds, and only the incremental paths can make a finding go
/// away, since the check itself changes nothing.
pub async fn assert_full_pass_finds_nothing(controller: &Controller) {
    let clusters = controller.store.list_clusters().await.expect("list the clusters");
    for cluster in clusters {
        let cluster_id = cluster.cluster.id;
        let mut found = Default::default();
        for _ in 0..20 {
            controller.all_assignments_settled().await;
            found = controller.pending_corrections(&cluster_id).await.expect("a full pass reads the cluster");
            if found == Default::default() {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        assert_eq!(found, Default::default(), "a full pass of cluster {cluster_id} would correct this");
    }
}

/// A second controller process on the same database: its own store pool, server and in-process
/// state, sharing the first one's keys and clock.
pub struct Peer {
    pub server: Option<RunningServer>,
    pub client: Client,
    pub controller: Arc<Controller>,
}

impl Peer {
    pub async fn start(service: &TestService, settings: ControllerSettings) -> Peer {
        Self::start_with(service, settings, Limits::default()).await
    }

    pub async fn start_with(service: &TestService, settings: ControllerSettings, limits: Limits) -> Peer {
        let store: SharedStore = store::open(&service.database.url).await.expect("open the peer store");
        let controller =
            Arc::new(Controller::with_settings(store, service.keys.clone(), service.clock.clone(), settings));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let server = spawn(listener, controller.clone(), limits).unwrap();
        let client = Client::new(&format!("http://{}", server.address));
        Peer { server: Some(server), client, controller }
    }

    pub async fn stop(mut self) {
        if let Some(server) = self.server.take() {
            server.stop().await.unwrap();
        }
    }
}

/// The seed's example address plan of `cluster` at `revision` (without `digest`): `hubPrefix`
/// `192.0.2.0/28`, a hub on `192.0.2.1`, the relay listener and a Corestore on `192.0.2.17`, and a
/// workload pool `10.64.0.0/20` for organization `org`.
pub fn seed_plan(cluster: &str, revision: u64) -> Value {
    json!({
        "clusterId": cluster, "revision": revision,
        "prefixes": ["10.64.0.0/16", "192.0.2.16/28"],
        "pools": [{ "id": "pool-org", "organizationId": "org", "prefix": "10.64.0.0/20" }],
        "vpn": { "prefix": "192.0.2.0/28", "hubPrefix": "192.0.2.0/28" },
        "hubs": [{ "id": "hub-a", "address": "192.0.2.1", "port": 51820 }],
        "platformEndpoints": [
            { "id": "corestore", "address": "192.0.2.17", "protocol": "tcp", "port": 9000 },
            { "id": "relay-listener", "address": "192.0.2.17", "protocol": "tcp", "port": 8443 },
        ],
    })
}

/// A valid service spec body.
pub fn spec_body(cluster: &str, service: &str) -> Value {
    json!({
        "clusterId": cluster, "serviceId": service, "organizationId": "org",
        "image": "registry.example/ingress:1.4.2", "replicas": 2,
        "placement": { "nodeIds": ["node-1", "node-2"] },
        "ports": [{ "protocol": "tcp", "port": 443 }],
        "environment": [{ "name": "LOG_LEVEL", "value": "info" }],
        "volumes": [],
    })
}

/// A designation request against the state `seed_cluster` leaves.
pub fn designation_request(cluster: &str, service: &str, mutation: &str, spec_revision: u64, expected: Value) -> Value {
    json!({ "designation": {
        "mutationId": mutation, "clusterId": cluster, "ingressServiceId": service,
        "currentRuntime": { "id": cluster, "phase": "pallet", "generation": 3 },
        "expectedSpecRevision": spec_revision, "expectedDesignation": expected,
    } })
}

/// `{ id, generation, digest }` of a designation JSON.
pub fn reference_of(designation: &Value) -> Value {
    json!({ "id": designation["id"], "generation": designation["generation"], "digest": designation["digest"] })
}
