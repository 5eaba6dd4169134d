//! Signals between the controller processes of one store: "what `kinds` name changed for these
//! nodes of a cluster" (so every process pushes `pushRuntimeChanged` down the sockets it holds,
//! wherever the change was written) and "the controller keys changed" (a rotation).
//!
//! **Every process on the store receives every signal, its own included**: a writer signals, and
//! the process that holds the node's socket (the writer or another) acts on it. On PostgreSQL a
//! signal is a `NOTIFY` on the channel [`SIGNAL_CHANNEL`] (delivered when it commits, to every
//! session that `LISTEN`s there), and each process's subscription listens on a connection of its
//! own (`postgres/listener.rs`), which reconnects after the server restarts or the connection
//! breaks. On SQLite (one process per database file) a signal is an in-process broadcast shared
//! by every store of this process on that file.
//!
//! **A subscriber may miss signals and is told so** ([`Signal::Missed`]): after the listener
//! (re)connects — notifications sent while it was away are not delivered — when a subscriber fell
//! more than [`SIGNAL_BUFFER`] signals behind, or when a payload does not read back. A signal is a
//! hint: what it names is in the store, and a process that hears it missed something acts on
//! everything it holds.
//!
//! A `NOTIFY` payload is limited to 8 000 bytes: a long node list is sent as several signals of
//! at most [`MAX_PAYLOAD_BYTES`] each.

use super::dialect::Backend;
use super::postgres::listener::{Heard, listen};
use super::sql::{Pool, Statement};
use super::{SqlStore, StoreError};
use crate::contract::{Id, NodeId};
use async_trait::async_trait;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock, Weak};
use tokio::sync::broadcast;

/// The PostgreSQL channel every signal is sent on.
pub const SIGNAL_CHANNEL: &str = "cloudly_signals";

/// The longest payload one signal carries (PostgreSQL refuses payloads of 8 000 bytes or more).
pub const MAX_PAYLOAD_BYTES: usize = 7_000;

/// How many signals a subscriber may fall behind before it is told it missed some.
pub const SIGNAL_BUFFER: usize = 1_024;

/// What changed for a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ChangeKind {
    /// Its assignment set (`pushRuntimeChanged` kind `assignments`).
    Assignments,
    /// Its network projection (`pushRuntimeChanged` kind `projection`).
    Projection,
    /// Its runtime local storage claims (pushed to the node by the claim pusher, which the
    /// signal wakes).
    Claims,
}

impl ChangeKind {
    /// Every kind.
    pub const ALL: [ChangeKind; 3] = [ChangeKind::Assignments, ChangeKind::Projection, ChangeKind::Claims];

    /// The kind as a signal carries it (`assignments`, `projection`, `claims`).
    pub fn as_str(self) -> &'static str {
        match self {
            ChangeKind::Assignments => "assignments",
            ChangeKind::Projection => "projection",
            ChangeKind::Claims => "claims",
        }
    }

    /// The kind a signal names.
    pub fn parse(text: &str) -> Option<ChangeKind> {
        ChangeKind::ALL.into_iter().find(|kind| kind.as_str() == text)
    }
}

/// One signal, as a subscriber receives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Signal {
    /// What `kinds` name changed for `node_ids` of `cluster_id`.
    NodesChanged {
        /// The cluster.
        cluster_id: Id,
        /// The nodes.
        node_ids: Vec<NodeId>,
        /// What changed for them.
        kinds: Vec<ChangeKind>,
    },
    /// The controller keys the store records changed (`cloudly keys rotate`).
    KeysChanged,
    /// Signals may have been missed since the last one received.
    Missed,
}

impl Signal {
    /// The signal a payload carries; [`Signal::Missed`] for one that does not read back.
    pub(crate) fn read(payload: &str) -> Signal {
        let Ok(value) = serde_json::from_str::<Value>(payload) else { return Signal::Missed };
        let read_nodes = || -> Option<Signal> {
            let cluster_id = Id::parse(value.get("clusterId")?.as_str()?)?;
            let node_ids = value.get("nodeIds")?.as_array()?.iter().map(|node| NodeId::parse(node.as_str()?));
            let kinds = value.get("kinds")?.as_array()?.iter().map(|kind| ChangeKind::parse(kind.as_str()?));
            Some(Signal::NodesChanged {
                cluster_id,
                node_ids: node_ids.collect::<Option<_>>()?,
                kinds: kinds.collect::<Option<_>>()?,
            })
        };
        match value.get("signal").and_then(Value::as_str) {
            Some("keys") => Signal::KeysChanged,
            Some("nodes") => read_nodes().unwrap_or(Signal::Missed),
            _ => Signal::Missed,
        }
    }
}

/// The payloads of one "nodes changed" signal: the node list cut so that each payload stays
/// within [`MAX_PAYLOAD_BYTES`].
pub fn nodes_changed_payloads(cluster_id: &Id, node_ids: &[NodeId], kinds: &[ChangeKind]) -> Vec<String> {
    let kinds: Vec<&str> = kinds.iter().map(|kind| kind.as_str()).collect();
    let payload = |nodes: &[&NodeId]| {
        json!({ "signal": "nodes", "clusterId": cluster_id, "kinds": kinds, "nodeIds": nodes }).to_string()
    };
    let fixed = payload(&[]).len();
    let mut payloads = Vec::new();
    let mut chunk: Vec<&NodeId> = Vec::new();
    let mut length = fixed;
    for node_id in node_ids {
        // The node's text, its quotes and a comma.
        let added = node_id.as_str().len() + 3;
        if !chunk.is_empty() && length + added > MAX_PAYLOAD_BYTES {
            payloads.push(payload(&chunk));
            chunk.clear();
            length = fixed;
        }
        chunk.push(node_id);
        length += added;
    }
    if !chunk.is_empty() {
        payloads.push(payload(&chunk));
    }
    payloads
}

/// The payload of a "keys changed" signal.
fn keys_changed_payload() -> String {
    json!({ "signal": "keys" }).to_string()
}

/// The signals one subscriber receives, in the order they were sent (per sender).
pub struct SignalSubscription {
    receiver: broadcast::Receiver<Signal>,
}

impl SignalSubscription {
    /// The next signal; `None` once the store is closed. A subscriber that fell behind gets
    /// [`Signal::Missed`] for the signals it lost.
    pub async fn next(&mut self) -> Option<Signal> {
        match self.receiver.recv().await {
            Ok(signal) => Some(signal),
            Err(broadcast::error::RecvError::Lagged(_)) => Some(Signal::Missed),
            Err(broadcast::error::RecvError::Closed) => None,
        }
    }
}

/// Signals between the controller processes of one store.
#[async_trait]
pub trait SignalStore: Send + Sync {
    /// Tells every controller process on the store (this one included) that what `kinds` name
    /// changed for `node_ids` of `cluster_id`. Nothing is sent for no nodes or no kinds.
    async fn notify_nodes_changed(
        &self,
        cluster_id: &Id,
        node_ids: &[NodeId],
        kinds: &[ChangeKind],
    ) -> Result<(), StoreError>;

    /// Tells every controller process on the store that the recorded controller keys changed.
    async fn notify_keys_changed(&self) -> Result<(), StoreError>;

    /// The signals sent from now on, by any process on the store. On PostgreSQL the first
    /// subscription starts this store's listener (it must be called inside a Tokio runtime).
    fn subscribe_signals(&self) -> SignalSubscription;
}

/// A store's end of the signals: the broadcast its subscribers receive from, and on PostgreSQL
/// the listener task that feeds it.
#[derive(Debug)]
pub(crate) struct SignalHub {
    sender: broadcast::Sender<Signal>,
    listener: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl SignalHub {
    fn new() -> Arc<SignalHub> {
        Arc::new(SignalHub { sender: broadcast::channel(SIGNAL_BUFFER).0, listener: Mutex::default() })
    }

    /// The hub of a SQLite database file: one per file in this process, so that every store of
    /// the process on that file hears the others (`None`: an in-memory database, a hub of its
    /// own).
    pub(crate) fn for_sqlite_file(file: Option<PathBuf>) -> Arc<SignalHub> {
        static HUBS: OnceLock<Mutex<HashMap<PathBuf, Weak<SignalHub>>>> = OnceLock::new();
        let Some(file) = file else { return SignalHub::new() };
        let mut hubs = HUBS.get_or_init(Mutex::default).lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        hubs.retain(|_, hub| hub.strong_count() > 0);
        if let Some(hub) = hubs.get(&file).and_then(Weak::upgrade) {
            return hub;
        }
        let hub = SignalHub::new();
        hubs.insert(file, Arc::downgrade(&hub));
        hub
    }

    /// The hub of a PostgreSQL store (its listener starts with the first subscription).
    pub(crate) fn for_postgres() -> Arc<SignalHub> {
        SignalHub::new()
    }

    /// Hands `signal` to this process's subscribers (none listening is not an error).
    fn broadcast(&self, signal: Signal) {
        let _ = self.sender.send(signal);
    }

    /// Stops the listener, if one runs.
    pub(crate) fn stop(&self) {
        if let Some(listener) = self.listener.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take() {
            listener.abort();
        }
    }
}

impl Drop for SignalHub {
    fn drop(&mut self) {
        self.stop();
    }
}

impl SqlStore {
    /// Sends `payloads` as signals: `NOTIFY` on PostgreSQL (received back by this process's own
    /// listener); a broadcast of `signals` in this process on SQLite. When a `NOTIFY` fails, the
    /// signals are still broadcast here, so this process's own sockets hear them.
    async fn send_signals(&self, payloads: Vec<String>, signals: Vec<Signal>) -> Result<(), StoreError> {
        let sent = match self.pool.backend() {
            Backend::Postgres => self.notify_all(&payloads).await,
            Backend::Sqlite => Ok(false),
        };
        if !matches!(sent, Ok(true)) {
            for signal in signals {
                self.signals.broadcast(signal);
            }
        }
        sent.map(|_| ())
    }

    /// `NOTIFY`s every payload on one connection; answers true once all are sent.
    async fn notify_all(&self, payloads: &[String]) -> Result<bool, StoreError> {
        let mut connection = self.pool.connection().await?;
        for payload in payloads {
            Statement::new("SELECT pg_notify($1, $2)")
                .text(SIGNAL_CHANNEL)
                .text(payload)
                .execute(&mut connection)
                .await?;
        }
        Ok(true)
    }
}

#[async_trait]
impl SignalStore for SqlStore {
    async fn notify_nodes_changed(
        &self,
        cluster_id: &Id,
        node_ids: &[NodeId],
        kinds: &[ChangeKind],
    ) -> Result<(), StoreError> {
        if node_ids.is_empty() || kinds.is_empty() {
            return Ok(());
        }
        let payloads = nodes_changed_payloads(cluster_id, node_ids, kinds);
        let signals = payloads.iter().map(|payload| Signal::read(payload)).collect();
        self.send_signals(payloads, signals).await
    }

    async fn notify_keys_changed(&self) -> Result<(), StoreError> {
        self.send_signals(vec![keys_changed_payload()], vec![Signal::KeysChanged]).await
    }

    fn subscribe_signals(&self) -> SignalSubscription {
        let receiver = self.signals.sender.subscribe();
        if let Pool::Postgres(pool) = &self.pool {
            let mut listener = self.signals.listener.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if listener.as_ref().is_none_or(tokio::task::JoinHandle::is_finished)
                && let Ok(runtime) = tokio::runtime::Handle::try_current()
            {
                let options = pool.options().clone();
                let sender = self.signals.sender.clone();
                let hand_on = move |heard: Heard<'_>| {
                    let _ = sender.send(match heard {
                        Heard::Payload(payload) => Signal::read(payload),
                        Heard::Reconnected => Signal::Missed,
                    });
                };
                *listener = Some(runtime.spawn(listen(options, SIGNAL_CHANNEL, hand_on)));
            }
        }
        SignalSubscription { receiver }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(index: usize) -> NodeId {
        NodeId::parse(&format!("node-{index:0>50}")).unwrap()
    }

    #[test]
    fn long_node_lists_are_cut_into_payloads_within_the_limit_and_read_back() {
        let cluster = Id::parse(&"c".repeat(128)).unwrap();
        let nodes: Vec<NodeId> = (0..1_000).map(node).collect();
        let kinds = [ChangeKind::Assignments, ChangeKind::Claims];
        let payloads = nodes_changed_payloads(&cluster, &nodes, &kinds);
        assert!(payloads.len() > 1);
        let mut received = Vec::new();
        for payload in &payloads {
            assert!(payload.len() <= MAX_PAYLOAD_BYTES, "{}", payload.len());
            let Signal::NodesChanged { cluster_id, node_ids, kinds: read } = Signal::read(payload) else {
                panic!("{payload}")
            };
            assert_eq!((&cluster_id, read.as_slice()), (&cluster, &kinds[..]));
            received.extend(node_ids);
        }
        assert_eq!(received, nodes);
        assert_eq!(nodes_changed_payloads(&cluster, &nodes[..1], &kinds).len(), 1);
    }

    #[test]
    fn a_payload_that_does_not_read_back_is_a_missed_signal() {
        assert_eq!(Signal::read(&keys_changed_payload()), Signal::KeysChanged);
        for payload in [
            "",
            "{}",
            r#"{"signal":"nodes","clusterId":"c1","nodeIds":["Not A Label"],"kinds":["assignments"]}"#,
            r#"{"signal":"nodes","clusterId":"c1","nodeIds":["n1"],"kinds":["everything"]}"#,
            r#"{"signal":"other"}"#,
        ] {
            assert_eq!(Signal::read(payload), Signal::Missed, "{payload}");
        }
    }
}
