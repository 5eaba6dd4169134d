//! The world a cluster ingress registers in, built through the real wire: a designated ingress
//! service, a node agent on `/typedsocket` whose ingress assignment resolved its bearer and
//! reported `ready`, and a connected relay. Plus a relay-side caller of `registerClusterIngress`
//! and a capture of every log line this test binary writes.

use super::node_agent::{NodeAgent, node_bearer};
use super::service::{Backend, TestService, designation_request, reference_of};
use cloudly::api::methods::name;
use cloudly::api::wire;
use cloudly::client::{Client, TypedError};
use cloudly::domain::ControllerSettings;
use serde_json::{Value, json};
use std::io::Write;
use std::sync::{Arc, Mutex, OnceLock};

/// The cluster, ingress service, node and relay of the world.
pub const CLUSTER: &str = "c1";
pub const SERVICE: &str = "ingress";
pub const NODE: &str = "node-1";
pub const RELAY: &str = "relay-1";

/// Calls `registerClusterIngress` as the relay: `authInfo.jwt = token` when given.
pub async fn register(client: &Client, request: Value, token: Option<&str>) -> Result<Value, TypedError> {
    relay_call(client, "registerClusterIngress", request, token).await
}

/// Calls a relay method with `authInfo.jwt = token` when given (no identity).
pub async fn relay_call(
    client: &Client,
    method: &str,
    request: Value,
    token: Option<&str>,
) -> Result<Value, TypedError> {
    let answer = client.envelope(method, request, token).await.unwrap_or_else(|error| panic!("{method}: {error}"));
    match answer.get("error").filter(|error| !error.is_null()) {
        Some(error) => {
            Err(TypedError { text: error["text"].as_str().unwrap_or("").to_owned(), data: error["data"].clone() })
        }
        None => Ok(answer["response"].clone()),
    }
}

/// Issues relay `relay`'s credential and connects it through `client`: the connection token.
pub async fn connect_relay(service: &TestService, client: &Client, cluster: &str, relay: &str) -> String {
    connect_relay_with_bearer(service, client, cluster, relay).await.1
}

/// Like [`connect_relay`], answering the relay's bearer and the connection token.
pub async fn connect_relay_with_bearer(
    service: &TestService,
    client: &Client,
    cluster: &str,
    relay: &str,
) -> (String, String) {
    let bearer = service
        .admin_call("issueClusterRelayCredential", json!({ "clusterId": cluster, "relayId": relay }))
        .await["bearer"]
        .as_str()
        .expect("a relay bearer")
        .to_owned();
    let token = connect_relay_with_bearer_at(client, cluster, relay, &bearer).await;
    (bearer, token)
}

/// Connects relay `relay` with its `bearer` through `client`: the connection token.
pub async fn connect_relay_with_bearer_at(client: &Client, cluster: &str, relay: &str, bearer: &str) -> String {
    let request = wire::ConnectClusterRelay { cluster_id: cluster, relay_id: relay, bearer };
    let connected = relay_call(client, name::CONNECT_CLUSTER_RELAY, wire::to_request(&request), None)
        .await
        .unwrap_or_else(|error| panic!("connectClusterRelay: {} {}", error.text, error.data));
    connected["token"].as_str().expect("a connection token").to_owned()
}

/// A valid registration of `node` with `bearer`.
pub fn registration(bearer: &str, node: &str) -> Value {
    json!({
        "bearer": bearer, "version": "1.4.2", "nodeId": node, "capabilities": ["http2", "websocket"],
        "protocol": { "name": "serve.zone/cluster-ingress", "minimum": 1, "maximum": 1 },
    })
}

/// The `{ id, generation, digest }` of an assignment payload.
pub fn assignment_reference(assignment: &Value) -> Value {
    json!({ "id": assignment["id"], "generation": assignment["generation"], "digest": assignment["digest"] })
}

/// Runs the ingress replica `assignment` (a payload) on the node of `session` as a node agent
/// starting the workload does: resolves its secret bindings and reports it `ready`. Answers the
/// designation's bearer it resolved.
pub async fn run_ingress_replica(agent: &NodeAgent, session: &Value, assignment: &Value) -> Result<String, String> {
    let reference = assignment_reference(assignment);
    let request = wire::ResolveRuntimeSecretBindings { session, assignment: &reference };
    let values = agent
        .call(name::RESOLVE_RUNTIME_SECRET_BINDINGS, request)
        .await
        .map_err(|error| format!("resolveRuntimeSecretBindings: {} {}", error.text, error.data))?;
    if values["values"][0]["name"] != json!("SERVEZONE_CLUSTER_INGRESS_BEARER") {
        return Err(format!("no ingress bearer among the resolved bindings: {values}"));
    }
    let bearer = values["values"][0]["value"].as_str().ok_or("the ingress bearer is not a string")?.to_owned();
    let request = wire::ReportRuntimeAssignmentState { session, assignment: &reference, state: &json!("ready") };
    agent
        .call(name::REPORT_RUNTIME_ASSIGNMENT_STATE, request)
        .await
        .map_err(|error| format!("reportRuntimeAssignmentState: {} {}", error.text, error.data))?;
    Ok(bearer)
}

/// The world: everything `registerClusterIngress` judges, in the accepting state.
pub struct IngressWorld {
    pub service: TestService,
    pub agent: NodeAgent,
    pub node_bearer: String,
    pub session: Value,
    pub designation: Value,
    /// The running ingress assignment of node-1.
    pub assignment: Value,
    /// The designation's bearer, as node-1 resolved it over its session.
    pub bearer: String,
    /// The relay connection token.
    pub token: String,
    /// The relay's credential bearer.
    pub relay_bearer: String,
}

impl IngressWorld {
    pub async fn build(backend: Backend) -> IngressWorld {
        Self::build_with(backend, ControllerSettings::default()).await
    }

    pub async fn build_with(backend: Backend, settings: ControllerSettings) -> IngressWorld {
        let service = TestService::start_with_settings(backend, cloudly::api::Limits::default(), settings).await;
        service.seed_cluster(CLUSTER, SERVICE).await;
        let node_bearer = node_bearer(&service, CLUSTER, NODE).await;
        let designation = service
            .admin_call("designateClusterIngress", designation_request(CLUSTER, SERVICE, "m1", 1, Value::Null))
            .await["designation"]
            .clone();
        let agent = NodeAgent::connect(&service).await;
        let session = agent.open(CLUSTER, NODE, &node_bearer).await;
        let (relay_bearer, token) = connect_relay_with_bearer(&service, &service.client, CLUSTER, RELAY).await;
        let mut world = IngressWorld {
            service,
            agent,
            node_bearer,
            session,
            designation,
            assignment: Value::Null,
            bearer: String::new(),
            token,
            relay_bearer,
        };
        world.run_ingress().await;
        world
    }

    /// node-1's current ingress assignment (reconciled by the ask).
    pub async fn ingress_assignment(&self) -> Value {
        let answer = self
            .agent
            .call(name::GET_RUNTIME_ASSIGNMENTS, wire::GetRuntimeAssignments { session: &self.session })
            .await
            .unwrap_or_else(|error| panic!("getRuntimeAssignments: {} {}", error.text, error.data));
        answer["assignments"]
            .as_array()
            .unwrap()
            .iter()
            .map(|signed| signed["payload"].clone())
            .find(|assignment| assignment["serviceId"] == SERVICE)
            .expect("node-1 runs an ingress replica")
    }

    /// Pulls node-1's ingress assignment, resolves its bearer and reports it `ready`, as a node
    /// agent starting the ingress workload does.
    pub async fn run_ingress(&mut self) {
        self.assignment = self.ingress_assignment().await;
        self.bearer = run_ingress_replica(&self.agent, &self.session, &self.assignment)
            .await
            .unwrap_or_else(|error| panic!("{error}"));
    }

    /// Reports `state` for the current ingress assignment under the current session.
    pub async fn report(&self, state: &str) {
        let assignment = assignment_reference(&self.assignment);
        let request = wire::ReportRuntimeAssignmentState {
            session: &self.session,
            assignment: &assignment,
            state: &json!(state),
        };
        self.agent
            .call(name::REPORT_RUNTIME_ASSIGNMENT_STATE, request)
            .await
            .unwrap_or_else(|error| panic!("reportRuntimeAssignmentState: {} {}", error.text, error.data));
    }

    /// Rotates the designation (a new generation with a new credential) and answers it.
    pub async fn rotate(&mut self, mutation: &str) -> Value {
        let revision = self.designation["preparedSpecRevision"].as_u64().unwrap();
        let request = designation_request(CLUSTER, SERVICE, mutation, revision, reference_of(&self.designation));
        self.designation = self.service.admin_call("designateClusterIngress", request).await["designation"].clone();
        self.designation.clone()
    }

    /// The valid registration of node-1 with the current bearer.
    pub fn registration(&self) -> Value {
        registration(&self.bearer, NODE)
    }

    /// Registers `request` through the world's relay connection.
    pub async fn register(&self, request: Value) -> Result<Value, TypedError> {
        register(&self.service.client, request, Some(&self.token)).await
    }

    /// The cluster's recorded registrations, newest first.
    pub async fn registrations(&self) -> Vec<Value> {
        self.service.admin_call("listClusterIngressRegistrations", json!({ "clusterId": CLUSTER })).await["registrations"]
            .as_array()
            .unwrap()
            .clone()
    }

    pub async fn stop(self) {
        drop(self.agent);
        self.service.stop().await;
    }
}

/// Every log line this test binary wrote so far (the subscriber is installed on first call,
/// at `debug` for the crate, so later lines of every test land here).
pub fn captured_logs() -> Arc<Mutex<Vec<u8>>> {
    static LOGS: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();
    LOGS.get_or_init(|| {
        let buffer = Arc::new(Mutex::new(Vec::new()));
        let sink = buffer.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(
                "debug,sqlx=warn,hyper=info,tokio_tungstenite=info,tungstenite=info",
            ))
            .json()
            .with_writer(move || LogWriter(sink.clone()))
            .finish();
        tracing::subscriber::set_global_default(subscriber).expect("no other subscriber in this test binary");
        buffer
    })
    .clone()
}

struct LogWriter(Arc<Mutex<Vec<u8>>>);

impl Write for LogWriter {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The captured log as text.
pub fn log_text() -> String {
    String::from_utf8_lossy(&captured_logs().lock().unwrap()).into_owned()
}
