//! A real WebSocket node agent for tests: connects to `ws://…/typedsocket`, sends requests with
//! correlation ids and awaits their answers, answers the controller's requests
//! (`pushRuntimeChanged` with `{}`, `applyRuntimeLocalStorageClaim` as its [`NodeVolumes`] say,
//! anything else `unknown-method`) and keeps every request the controller sent, and notices when
//! the controller closes the socket.

use super::service::TestService;
use cloudly::api::methods::name;
use cloudly::api::wire;
use futures_util::{SinkExt as _, StreamExt as _};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};
use tokio::sync::{mpsc, oneshot, watch};
use tokio_tungstenite::tungstenite::Message;

/// How long a test waits for an answer, a push or a close.
pub const WAIT: Duration = Duration::from_secs(10);

type Pending = Arc<Mutex<HashMap<String, oneshot::Sender<Value>>>>;

/// An answered error: `error.text` and `error.data`.
#[derive(Debug, Clone)]
pub struct AgentError {
    pub text: String,
    pub data: Value,
}

impl AgentError {
    pub fn code(&self) -> &str {
        self.data["code"].as_str().unwrap_or("")
    }
}

/// What the test node does with one `applyRuntimeLocalStorageClaim` push.
pub enum ClaimReply {
    /// Answers as an honest node would ([`NodeVolumes`]).
    Honest,
    /// Takes the claim as an honest node would, but answers the response this builds from the
    /// pushed claim instead.
    Respond(fn(&Value) -> Value),
    /// Answers an error.
    Error,
    /// Takes the claim as an honest node would and never answers.
    Silent,
}

/// What a test node holds on its disk: the claims it took (surviving its sockets, so a new
/// agent with the same volumes answers `replay`), the imports that finished, and the replies it
/// is scripted to give before it answers honestly again.
#[derive(Default)]
pub struct NodeVolumes {
    /// Claim id → (generation, digest, state) of the generation held.
    held: Mutex<BTreeMap<String, (u64, String, String)>>,
    imported: Mutex<BTreeSet<String>>,
    script: Mutex<VecDeque<ClaimReply>>,
    received: Mutex<Vec<(SystemTime, Value)>>,
}

impl NodeVolumes {
    pub fn new() -> Arc<Self> {
        Arc::default()
    }

    /// The next pushes get these replies, in order; then honest ones.
    pub fn script(&self, replies: impl IntoIterator<Item = ClaimReply>) {
        self.script.lock().unwrap().extend(replies);
    }

    /// The import of the claim's bytes finished: the next push of it answers `ready`.
    pub fn import_done(&self, claim_id: &str) {
        self.imported.lock().unwrap().insert(claim_id.to_owned());
    }

    /// Every `applyRuntimeLocalStorageClaim` request received, in order.
    pub fn received(&self) -> Vec<Value> {
        self.received.lock().unwrap().iter().map(|(_, request)| request.clone()).collect()
    }

    /// Every `applyRuntimeLocalStorageClaim` request received with the wall-clock time its frame
    /// was read, in order.
    pub fn received_with_times(&self) -> Vec<(SystemTime, Value)> {
        self.received.lock().unwrap().clone()
    }

    /// Takes the pushed claim as an honest node would and answers the honest response: a
    /// newer held generation is `historical`; the held generation again is `replay`; anything
    /// else is `accepted` (a purge `purged`, an import not yet done `import-required`, else
    /// `ready`).
    fn take(&self, claim: &Value) -> Value {
        let id = claim["id"].as_str().unwrap_or("").to_owned();
        let generation = claim["generation"].as_u64().unwrap_or(0);
        let digest = claim["digest"].as_str().unwrap_or("").to_owned();
        let state = if claim["lifecycle"] == "purge" {
            "purged"
        } else if claim["initialization"] == "import" && !self.imported.lock().unwrap().contains(&id) {
            "import-required"
        } else {
            "ready"
        };
        let mut held = self.held.lock().unwrap();
        let status = match held.get(&id) {
            Some((held_generation, held_digest, held_state)) if *held_generation > generation => {
                return json!({ "status": "historical", "state": held_state,
                               "claim": { "id": id, "generation": held_generation, "digest": held_digest } });
            }
            Some((held_generation, held_digest, _)) if *held_generation == generation && *held_digest == digest => {
                "replay"
            }
            _ => "accepted",
        };
        held.insert(id.clone(), (generation, digest.clone(), state.to_owned()));
        json!({ "status": status, "state": state, "claim": { "id": id, "generation": generation, "digest": digest } })
    }

    /// The answer to one push: `Ok(response)`, `Err(())` for an error, `None` for none.
    fn reply(&self, request: &Value) -> Option<Result<Value, ()>> {
        self.received.lock().unwrap().push((SystemTime::now(), request.clone()));
        let claim = &request["claim"];
        let reply = self.script.lock().unwrap().pop_front().unwrap_or(ClaimReply::Honest);
        match reply {
            ClaimReply::Honest => Some(Ok(self.take(claim))),
            ClaimReply::Respond(build) => {
                self.take(claim);
                Some(Ok(build(claim)))
            }
            ClaimReply::Error => Some(Err(())),
            ClaimReply::Silent => {
                self.take(claim);
                None
            }
        }
    }
}

/// One connected node agent.
pub struct NodeAgent {
    outgoing: mpsc::UnboundedSender<Message>,
    pending: Pending,
    pushes: mpsc::UnboundedReceiver<Value>,
    closed: watch::Receiver<Option<String>>,
    next_id: AtomicU64,
}

impl NodeAgent {
    /// Connects to the service's `/typedsocket`.
    pub async fn connect(service: &TestService) -> NodeAgent {
        Self::connect_to(&service.base_url).await
    }

    /// Connects to the service's `/typedsocket` as a node holding `volumes`.
    pub async fn connect_with(service: &TestService, volumes: Arc<NodeVolumes>) -> NodeAgent {
        Self::connect_holding(&service.base_url, volumes).await
    }

    /// Connects to `/typedsocket` of the controller at `base_url` (`http://host:port`).
    pub async fn connect_to(base_url: &str) -> NodeAgent {
        Self::connect_holding(base_url, NodeVolumes::new()).await
    }

    /// Connects to `/typedsocket` of the controller at `base_url` as a node holding `volumes`.
    pub async fn connect_holding(base_url: &str, volumes: Arc<NodeVolumes>) -> NodeAgent {
        let url = format!("{}/typedsocket", base_url.replacen("http://", "ws://", 1));
        // Without Nagle, as a node answering requests runs: an answer is not held back until the
        // controller acknowledges the agent's previous frame.
        let (socket, _) =
            tokio_tungstenite::connect_async_with_config(url, None, true).await.expect("connect the node agent");
        let (mut sink, mut stream) = socket.split();
        let (outgoing, mut outgoing_rx) = mpsc::unbounded_channel::<Message>();
        let pending: Pending = Arc::default();
        let (pushes_tx, pushes) = mpsc::unbounded_channel();
        let (closed_tx, closed) = watch::channel(None);
        tokio::spawn(async move {
            while let Some(message) = outgoing_rx.recv().await {
                if sink.send(message).await.is_err() {
                    break;
                }
            }
        });
        let reader_pending = pending.clone();
        let answers = outgoing.clone();
        tokio::spawn(async move {
            let mut reason = "stream ended".to_owned();
            while let Some(message) = stream.next().await {
                match message {
                    Ok(Message::Text(text)) => {
                        let envelope: Value = serde_json::from_str(text.as_str()).expect("the controller sends JSON");
                        if envelope["correlation"]["phase"] == "response" {
                            let id = envelope["correlation"]["id"].as_str().unwrap_or("").to_owned();
                            if let Some(reply) = reader_pending.lock().unwrap().remove(&id) {
                                let _ = reply.send(envelope);
                            }
                        } else {
                            let mut answer = json!({
                                "method": envelope["method"],
                                "request": null,
                                "correlation": { "id": envelope["correlation"]["id"], "phase": "response" },
                            });
                            if envelope["method"] == "pushRuntimeChanged" {
                                answer["response"] = json!({});
                            } else if envelope["method"] == "applyRuntimeLocalStorageClaim" {
                                match volumes.reply(&envelope["request"]) {
                                    Some(Ok(response)) => answer["response"] = response,
                                    Some(Err(())) => {
                                        answer["response"] = Value::Null;
                                        answer["error"] =
                                            json!({ "text": "refused", "data": { "code": "claim-refused" } });
                                    }
                                    None => {
                                        let _ = pushes_tx.send(envelope);
                                        continue;
                                    }
                                }
                            } else {
                                answer["response"] = Value::Null;
                                answer["error"] = json!({ "text": "unknown", "data": { "code": "unknown-method" } });
                            }
                            let _ = answers.send(Message::Text(answer.to_string().into()));
                            let _ = pushes_tx.send(envelope);
                        }
                    }
                    Ok(Message::Close(frame)) => {
                        reason = frame.map_or_else(|| "closed".to_owned(), |frame| frame.reason.to_string());
                        break;
                    }
                    Ok(_) => {}
                    Err(error) => {
                        reason = error.to_string();
                        break;
                    }
                }
            }
            let _ = closed_tx.send(Some(reason));
        });
        NodeAgent { outgoing, pending, pushes, closed, next_id: AtomicU64::new(1) }
    }

    /// Sends one request envelope and answers the whole answer envelope.
    pub async fn envelope(&self, method: &str, request: Value) -> Value {
        let id = format!("agent-{}", self.next_id.fetch_add(1, Ordering::SeqCst));
        let (reply, answer) = oneshot::channel();
        self.pending.lock().unwrap().insert(id.clone(), reply);
        let envelope = json!({
            "method": method, "request": request, "response": null,
            "correlation": { "id": id, "phase": "request" },
        });
        self.outgoing.send(Message::Text(envelope.to_string().into())).expect("the agent's writer runs");
        let answer = tokio::time::timeout(WAIT, answer)
            .await
            .unwrap_or_else(|_| panic!("{method}: no answer in time"))
            .unwrap_or_else(|_| panic!("{method}: the socket closed before the answer"));
        assert_eq!(answer["correlation"]["id"], json!(id));
        assert_eq!(answer["method"], json!(method));
        answer
    }

    /// Sends one raw text frame whose `correlation.id` is `id` and answers the answer envelope.
    pub async fn raw_envelope(&self, id: &str, text: String) -> Value {
        let (reply, answer) = oneshot::channel();
        self.pending.lock().unwrap().insert(id.to_owned(), reply);
        self.send_raw(text);
        tokio::time::timeout(WAIT, answer)
            .await
            .unwrap_or_else(|_| panic!("{id}: no answer in time"))
            .unwrap_or_else(|_| panic!("{id}: the socket closed before the answer"))
    }

    /// Sends one raw text frame.
    pub fn send_raw(&self, text: String) {
        self.outgoing.send(Message::Text(text.into())).expect("the agent's writer runs");
    }

    /// Calls `method` with `request` (a shape of `api::wire`, or a `Value` for a malformed one):
    /// the response, or the error.
    pub async fn call(&self, method: &str, request: impl serde::Serialize) -> Result<Value, AgentError> {
        let answer = self.envelope(method, wire::to_request(&request)).await;
        match answer.get("error") {
            Some(error) if !error.is_null() => {
                Err(AgentError { text: error["text"].as_str().unwrap_or("").to_owned(), data: error["data"].clone() })
            }
            _ => Ok(answer["response"].clone()),
        }
    }

    /// `openRuntimeSession`, expected to succeed: the session.
    pub async fn open(&self, cluster: &str, node: &str, bearer: &str) -> Value {
        let request = wire::OpenRuntimeSession { cluster_id: cluster, node_id: node, bearer };
        self.call(name::OPEN_RUNTIME_SESSION, request)
            .await
            .unwrap_or_else(|error| panic!("openRuntimeSession: {} {}", error.text, error.data))["session"]
            .clone()
    }

    /// The next request the controller sent, if one comes within `wait`.
    pub async fn next_push(&mut self, wait: Duration) -> Option<Value> {
        tokio::time::timeout(wait, self.pushes.recv()).await.ok().flatten()
    }

    /// Drops every request the controller sent so far.
    pub fn drain_pushes(&mut self) {
        while self.pushes.try_recv().is_ok() {}
    }

    /// The close reason once the controller closed the socket, if it does within `wait`.
    pub async fn closed(&self, wait: Duration) -> Option<String> {
        let mut closed = self.closed.clone();
        tokio::time::timeout(wait, closed.wait_for(Option::is_some)).await.ok()?.ok()?.clone()
    }
}

impl Drop for NodeAgent {
    /// Closes the socket cleanly (the background tasks would otherwise keep it open).
    fn drop(&mut self) {
        let _ = self.outgoing.send(Message::Close(None));
    }
}

/// Rotates the credential of `node` (created by `seed_cluster` or new) and answers its bearer.
pub async fn node_bearer(service: &TestService, cluster: &str, node: &str) -> String {
    let answer = service
        .admin_call(
            "putClusterNode",
            json!({ "clusterId": cluster, "node": { "id": node, "runtimeNamespace": "ns-main", "hostAddresses": [] },
                    "rotateCredential": true }),
        )
        .await;
    answer["bearer"].as_str().expect("a rotated credential answers its bearer").to_owned()
}
