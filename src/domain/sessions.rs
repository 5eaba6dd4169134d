//! Node sessions (`04-registration.md`, "Node sessions and assignments"): `openRuntimeSession`,
//! the session check of every node method, and the process's registry of node links — the
//! socket each node's current session is open on, through which the controller sends requests
//! (`pushRuntimeChanged`) and awaits their answers.
//!
//! The registry knows no WebSocket and no JSON: a link is a channel of [`LinkCommand`]s that the
//! transport (`api::socket`) serves, carrying typed [`NodeRequest`]s down and typed
//! [`NodeAnswer`]s back (the transport writes the envelope and reads the answer). The store decides which session is current (several controller
//! processes agree on it); the registry only knows the sockets of this process.

use super::secrets::Bearer;
use super::{Controller, DomainError};
use crate::contract::session::{ControllerKind, ControllerReference, RuntimeSessionReference};
use crate::contract::storage_claim::{ApplyRuntimeLocalStorageClaimRequest, ApplyRuntimeLocalStorageClaimResponse};
use crate::contract::{Id, NodeId};
use crate::store::{ChangeKind, FactScope};
use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

/// How long the controller waits for a node to answer a request sent down its socket.
pub const NODE_REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// The close reason of a socket whose session a newer one superseded.
pub const SUPERSEDED: &str = "session superseded";

/// A request the controller sends a node down its socket.
#[derive(Debug, Clone)]
pub enum NodeRequest {
    /// `pushRuntimeChanged`: which of the node's records changed.
    RuntimeChanged(Vec<ChangeKind>),
    /// `applyRuntimeLocalStorageClaim`: one claim generation under the node's session.
    ApplyClaim(Box<ApplyRuntimeLocalStorageClaimRequest>),
}

/// A node's answer to a [`NodeRequest`], as the transport read it.
#[derive(Debug, Clone)]
pub enum NodeAnswer {
    /// A response to `pushRuntimeChanged` (its members are not read).
    Acknowledged,
    /// A response to `applyRuntimeLocalStorageClaim` that reads as one (not yet bound to the
    /// request it answers: that is the claim pusher's judgement).
    Claim(Box<ApplyRuntimeLocalStorageClaimResponse>),
}

/// What the transport of a link is asked to do.
#[derive(Debug)]
pub enum LinkCommand {
    /// Send a request down the socket and hand the node's answer, read for that request, to
    /// `reply`.
    Request {
        /// The request.
        request: NodeRequest,
        /// Where the answer goes.
        reply: oneshot::Sender<Result<NodeAnswer, LinkError>>,
    },
    /// Close the socket cleanly, saying why (its session was superseded, or the server stops).
    Close {
        /// The close frame's reason.
        reason: &'static str,
    },
}

/// Why a request down a node's socket got no answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LinkError {
    /// The node has no socket with a session in this process.
    #[error("the node is not connected to this controller process")]
    NotConnected,
    /// The socket closed before the answer came.
    #[error("the node's socket closed")]
    Closed,
    /// No answer within the timeout.
    #[error("the node did not answer in time")]
    Timeout,
    /// The node answered with an error envelope.
    #[error("the node answered an error")]
    Refused,
    /// The node's answer does not read as the response of the method asked.
    #[error("the node's answer is not a response of the method asked")]
    Unreadable,
}

struct NodeLink {
    link_id: u64,
    session: RuntimeSessionReference,
    commands: mpsc::UnboundedSender<LinkCommand>,
}

/// The node links of this process: (cluster, node) → the socket of its current session, and
/// every open socket (so a stopping server can close them all).
#[derive(Default)]
pub struct NodeLinks {
    links: Mutex<HashMap<(Id, NodeId), NodeLink>>,
    sockets: Mutex<HashMap<u64, mpsc::UnboundedSender<LinkCommand>>>,
    next_link_id: AtomicU64,
    liveness: Mutex<Option<Liveness>>,
}

/// How often sockets are pinged and how long one may stay silent before it is closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Liveness {
    /// The ping interval.
    pub ping_interval: Duration,
    /// The longest silence.
    pub silence_limit: Duration,
}

impl Default for Liveness {
    /// A ping every 15 s; a socket silent for 45 s is closed.
    fn default() -> Self {
        Liveness { ping_interval: Duration::from_secs(15), silence_limit: Duration::from_secs(45) }
    }
}

impl std::fmt::Debug for NodeLinks {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("NodeLinks").finish_non_exhaustive()
    }
}

impl NodeLinks {
    /// The liveness timing of sockets opened from now on.
    pub fn liveness(&self) -> Liveness {
        self.liveness.lock().unwrap_or_else(std::sync::PoisonError::into_inner).unwrap_or_default()
    }

    /// Changes the liveness timing of sockets opened from now on (tests shorten it).
    pub fn set_liveness(&self, liveness: Liveness) {
        *self.liveness.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(liveness);
    }

    /// Registers a new socket, answering its link id.
    pub fn register(&self, commands: mpsc::UnboundedSender<LinkCommand>) -> u64 {
        let link_id = self.next_link_id.fetch_add(1, Ordering::Relaxed) + 1;
        self.sockets.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(link_id, commands);
        link_id
    }

    /// Forgets an ended socket (and its node link, if it still holds one).
    pub fn unregister(&self, link_id: u64, session: Option<&RuntimeSessionReference>) {
        self.sockets.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(&link_id);
        if let Some(session) = session {
            self.detach(link_id, &session.cluster_id, &session.node_id);
        }
    }

    /// Tells every open socket to close (the server is stopping).
    pub fn close_all(&self) {
        for commands in self.sockets.lock().unwrap_or_else(std::sync::PoisonError::into_inner).values() {
            let _ = commands.send(LinkCommand::Close { reason: "controller stopping" });
        }
    }

    /// Makes the link `link_id` the node's link for `session`. A link of an older session of
    /// the node is told to close; when the registry already holds a newer session of the node,
    /// this link is the stale one and is told to close instead.
    pub fn attach(
        &self,
        link_id: u64,
        session: &RuntimeSessionReference,
        commands: mpsc::UnboundedSender<LinkCommand>,
    ) {
        let key = (session.cluster_id.clone(), session.node_id.clone());
        let mut links = self.links.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(existing) = links.get(&key) {
            if existing.session.generation > session.generation {
                let _ = commands.send(LinkCommand::Close { reason: SUPERSEDED });
                return;
            }
            if existing.link_id != link_id {
                let _ = existing.commands.send(LinkCommand::Close { reason: SUPERSEDED });
            }
        }
        links.insert(key, NodeLink { link_id, session: session.clone(), commands });
    }

    /// Forgets the link `link_id` of the node (its socket ended), unless another link replaced it.
    pub fn detach(&self, link_id: u64, cluster_id: &Id, node_id: &NodeId) {
        let key = (cluster_id.clone(), node_id.clone());
        let mut links = self.links.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if links.get(&key).is_some_and(|link| link.link_id == link_id) {
            links.remove(&key);
        }
    }

    /// The session of the node's link in this process, if it has one.
    pub fn connected_session(&self, cluster_id: &Id, node_id: &NodeId) -> Option<RuntimeSessionReference> {
        let links = self.links.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        links.get(&(cluster_id.clone(), node_id.clone())).map(|link| link.session.clone())
    }

    /// Every (cluster, node) with a link in this process.
    pub fn connected_nodes(&self) -> Vec<(Id, NodeId)> {
        let links = self.links.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        links.keys().cloned().collect()
    }

    /// Sends `request` down the node's socket and awaits the answer.
    pub async fn request(
        &self,
        cluster_id: &Id,
        node_id: &NodeId,
        request: NodeRequest,
        timeout: Duration,
    ) -> Result<NodeAnswer, LinkError> {
        let (reply, answer) = oneshot::channel();
        {
            let links = self.links.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            let link = links.get(&(cluster_id.clone(), node_id.clone())).ok_or(LinkError::NotConnected)?;
            link.commands.send(LinkCommand::Request { request, reply }).map_err(|_| LinkError::Closed)?;
        }
        match tokio::time::timeout(timeout, answer).await {
            Err(_) => Err(LinkError::Timeout),
            Ok(Err(_)) => Err(LinkError::Closed),
            Ok(Ok(answer)) => answer,
        }
    }
}

fn fresh_session_id() -> Id {
    Id::parse(&format!("session-{}", uuid::Uuid::new_v4().simple())).expect("a uuid id is an Id")
}

/// `openRuntimeSession`: `{ clusterId, nodeId, bearer }` (on the node's socket).
#[derive(Debug)]
pub struct OpenRuntimeSessionRequest {
    /// The cluster.
    pub cluster_id: Id,
    /// The node.
    pub node_id: NodeId,
    /// The bearer `putClusterNode` showed.
    pub bearer: Bearer,
}

/// A node's session status for `listClusterNodes`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeSessionStatus {
    /// The node's current session (from the store), if it ever opened one.
    pub session: Option<RuntimeSessionReference>,
    /// True when its socket with that session is open in this process (another process's
    /// sockets are not known here).
    pub connected: bool,
}

impl Controller {
    /// This controller as runtime records name it: `{ kind: "cloudly", id: settings.controller_id }`.
    pub fn controller_reference(&self) -> ControllerReference {
        ControllerReference { kind: ControllerKind::Cloudly, id: self.settings.controller_id.clone() }
    }

    /// `openRuntimeSession` → `{ session }`. The bearer is compared with the node's stored hash
    /// in constant time; an unknown cluster or node and a wrong bearer are the same
    /// `principal-refused`, which never says why. The new session is the node's current one;
    /// attaching it to a socket is the transport's step.
    pub async fn open_runtime_session(
        &self,
        request: OpenRuntimeSessionRequest,
    ) -> Result<RuntimeSessionReference, DomainError> {
        let OpenRuntimeSessionRequest { cluster_id, node_id, bearer } = request;
        let Some(node) = self.store.get_node(&cluster_id, &node_id).await? else {
            tracing::info!(cluster = %cluster_id, node = %node_id, "runtime session refused");
            return Err(DomainError::PrincipalRefused);
        };
        if !bearer.matches_hash(&node.bearer_hash) {
            tracing::info!(cluster = %cluster_id, node = %node_id, "runtime session refused");
            return Err(DomainError::PrincipalRefused);
        }
        // The store opens the session only while the node's bearer hash is still the one checked
        // here, so a bearer rotated out since that read is refused as a wrong one is.
        let opened = self
            .store
            .open_session(
                &cluster_id,
                &node_id,
                &node.bearer_hash,
                &fresh_session_id(),
                &self.controller_reference(),
                self.clock.now_ms(),
            )
            .await?;
        let Some(session) = opened else {
            tracing::info!(cluster = %cluster_id, node = %node_id, "runtime session refused");
            return Err(DomainError::PrincipalRefused);
        };
        tracing::info!(cluster = %cluster_id, node = %node_id, generation = session.generation, "runtime session opened");
        // A new session ends the running of what the node ran under its previous one.
        match self.store.services_on_node(&cluster_id, &node_id).await {
            Ok(services) => self.service_statuses_changed(&cluster_id, &FactScope::Services(services)).await,
            Err(error) => {
                tracing::warn!(cluster = %cluster_id, node = %node_id, %error, "service status refresh failed")
            }
        }
        Ok(session)
    }

    /// For `listClusterNodes`: the node's current session (from the store), and whether it is
    /// connected — its socket with that session is open in this process (another process's
    /// sockets are not known here).
    pub async fn node_session_status(
        &self,
        cluster_id: &Id,
        node_id: &NodeId,
    ) -> Result<NodeSessionStatus, DomainError> {
        let session = self.store.current_session(cluster_id, node_id).await?;
        let connected = session.is_some() && self.links.connected_session(cluster_id, node_id) == session;
        Ok(NodeSessionStatus { session, connected })
    }

    /// The session check of every node method after `openRuntimeSession`: `presented` (the
    /// request's `session`) must equal (all six members) `socket_session`, the session opened on
    /// the socket, and that session must be the node's current one in the store. Otherwise
    /// `principal-refused` with `current` = the current session of the socket's node (`None`
    /// when the socket opened none or the node has none). Answers the checked session, which
    /// the node methods take.
    pub async fn check_node_session(
        &self,
        socket_session: Option<&RuntimeSessionReference>,
        presented: RuntimeSessionReference,
    ) -> Result<RuntimeSessionReference, DomainError> {
        let Some(socket_session) = socket_session else {
            return Err(DomainError::SessionNotCurrent(None));
        };
        let current = self.store.current_session(&socket_session.cluster_id, &socket_session.node_id).await?;
        judge_node_session(socket_session, presented, current)
    }
}

/// [`Controller::check_node_session`]'s judgement, given `current`, the node's current session
/// as the store answered it.
pub(crate) fn judge_node_session(
    socket_session: &RuntimeSessionReference,
    presented: RuntimeSessionReference,
    current: Option<RuntimeSessionReference>,
) -> Result<RuntimeSessionReference, DomainError> {
    if current.as_ref() != Some(socket_session) || presented != *socket_session {
        return Err(DomainError::SessionNotCurrent(current.map(Box::new)));
    }
    Ok(presented)
}
