//! Changes reach a node wherever its socket is. A change for some nodes (a reconcile that changed
//! their assignment sets, claims issued for them, a projection) is signalled through the store
//! ([`crate::store::SignalStore`]) to every controller process on it, this one included; each
//! process acts for the nodes whose socket it holds ([`Controller::follow_signals`]):
//!
//! * `assignments`, `projection` → `pushRuntimeChanged { kinds }` down the node's socket (a hint:
//!   the node pulls; a node that misses it converges on its next ask);
//! * `claims` → the node's claim pusher is woken (`runners::ClaimPusher`);
//! * keys changed → the signing key in use is checked (`signing`);
//! * a missed signal (the PostgreSQL listener reconnected, this process fell behind) → every
//!   socket of this process gets `pushRuntimeChanged` with every kind this controller pushes,
//!   every claim pusher of its nodes is woken, and the signing key is checked.
//!
//! The signing key is also checked every `signing_key_check_ms` whatever the signals say.
//!
//! Pushes are paced ([`PushPacer`], at most [`PUSHES_PER_SECOND`] per process): a lone push goes
//! at once, and a change that reaches every node does not make them all fetch at once.

use super::Controller;
use super::sessions::{NODE_REQUEST_TIMEOUT, NodeRequest};
use crate::contract::{Id, NodeId};
use crate::store::{ChangeKind, SharedStore, Signal, SignalSubscription};
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

/// How many `pushRuntimeChanged` requests this process starts per second at most. A change that
/// touches every node (a plan revision, a designation rotation) would otherwise reach a thousand
/// sockets at once, and the fetches they start would meet a full request pool; at this pace the
/// fetches of 1 000 nodes spread over half a second, well within what a controller serves.
pub const PUSHES_PER_SECOND: u32 = 2_000;

/// Spreads this process's pushes over time: each push takes the next free slot, one every
/// `1 / PUSHES_PER_SECOND`, so a lone push goes at once and a burst is paced.
#[derive(Debug)]
pub struct PushPacer {
    next: std::sync::Mutex<tokio::time::Instant>,
    spacing: Duration,
}

impl Default for PushPacer {
    fn default() -> Self {
        PushPacer {
            next: std::sync::Mutex::new(tokio::time::Instant::now()),
            spacing: Duration::from_secs(1) / PUSHES_PER_SECOND,
        }
    }
}

impl PushPacer {
    /// The time the next push may start (now, when the pace allows it).
    pub fn next_slot(&self) -> tokio::time::Instant {
        let mut next = self.next.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let slot = (*next).max(tokio::time::Instant::now());
        *next = slot + self.spacing;
        slot
    }
}

/// The kinds a node is told of after a missed signal: every `pushRuntimeChanged` kind this
/// controller sends.
pub const PUSHED_KINDS: [ChangeKind; 2] = [ChangeKind::Assignments, ChangeKind::Projection];

/// Tells every controller process on the store that `kinds` changed for `nodes` of the cluster.
/// Best effort: a failure is logged (the nodes converge on their next ask).
pub(super) async fn notify_nodes_changed(
    store: &SharedStore,
    cluster_id: &Id,
    nodes: BTreeSet<NodeId>,
    kinds: &[ChangeKind],
) {
    if nodes.is_empty() {
        return;
    }
    let nodes: Vec<NodeId> = nodes.into_iter().collect();
    if let Err(error) = store.notify_nodes_changed(cluster_id, &nodes, kinds).await {
        tracing::warn!(cluster = %cluster_id, nodes = nodes.len(), %error, "a change could not be signalled to other controller processes");
    }
}

impl Controller {
    /// Tells the nodes wherever their sockets are that `kinds` changed for them: each controller
    /// process on the store sends `pushRuntimeChanged { kinds }` (wakes the claim pusher for
    /// `claims`) to those it holds. Best effort.
    pub async fn push_runtime_changed(&self, cluster_id: &Id, nodes: BTreeSet<NodeId>, kinds: &[ChangeKind]) {
        notify_nodes_changed(&self.store, cluster_id, nodes, kinds).await;
    }

    /// Subscribes to the store's signals now and follows them in a task of its own
    /// ([`Controller::follow_signals`]); whoever serves the controller starts it once and aborts
    /// it when the server stops.
    pub fn spawn_signal_follower(self: &Arc<Self>) -> tokio::task::JoinHandle<()> {
        let subscription = self.store.subscribe_signals();
        tokio::spawn(Arc::clone(self).follow_signals(subscription))
    }

    /// Acts on the store's signals and checks the signing key every `signing_key_check_ms`,
    /// until the subscription ends (or the task is aborted, as a stopping server does).
    pub async fn follow_signals(self: Arc<Self>, mut subscription: SignalSubscription) {
        let period = Duration::from_millis(self.settings.signing_key_check_ms.max(100));
        let mut checks = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
        checks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                signal = subscription.next() => match signal {
                    Some(signal) => self.act_on(signal).await,
                    None => return,
                },
                _ = checks.tick() => self.check_signing_key_logged().await,
            }
        }
    }

    async fn act_on(&self, signal: Signal) {
        match signal {
            Signal::NodesChanged { cluster_id, node_ids, kinds } => {
                for node_id in node_ids {
                    self.tell_node(&cluster_id, &node_id, &kinds);
                }
            }
            Signal::KeysChanged => self.check_signing_key_logged().await,
            Signal::Missed => {
                let connected = self.links.connected_nodes();
                tracing::info!(
                    sockets = connected.len(),
                    "signals may have been missed: telling every node connected here"
                );
                let mut kinds = PUSHED_KINDS.to_vec();
                kinds.push(ChangeKind::Claims);
                for (cluster_id, node_id) in connected {
                    self.tell_node(&cluster_id, &node_id, &kinds);
                }
                self.check_signing_key_logged().await;
            }
        }
    }

    async fn check_signing_key_logged(&self) {
        if let Err(error) = self.check_signing_key().await {
            tracing::warn!(%error, "the signing key in use could not be checked");
        }
    }

    /// `pushRuntimeChanged` with the node-visible `kinds` down the node's socket, and a wake of
    /// its claim pusher for `claims`, when this process holds its socket; in the background.
    fn tell_node(&self, cluster_id: &Id, node_id: &NodeId, kinds: &[ChangeKind]) {
        if self.links.connected_session(cluster_id, node_id).is_none() {
            return;
        }
        if kinds.contains(&ChangeKind::Claims) {
            self.claims.wake(cluster_id, node_id);
        }
        let pushed: Vec<ChangeKind> = PUSHED_KINDS.iter().copied().filter(|kind| kinds.contains(kind)).collect();
        if pushed.is_empty() {
            return;
        }
        let links = self.links.clone();
        let (cluster_id, node_id) = (cluster_id.clone(), node_id.clone());
        let slot = self.push_pacer.next_slot();
        tokio::spawn(async move {
            // A change that touches every node is pushed at a pace the fetches it starts can be
            // served at, not to every socket at once.
            tokio::time::sleep_until(slot).await;
            let request = NodeRequest::RuntimeChanged(pushed);
            if let Err(error) = links.request(&cluster_id, &node_id, request, NODE_REQUEST_TIMEOUT).await {
                tracing::info!(cluster = %cluster_id, node = %node_id, %error, "pushRuntimeChanged not answered");
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_lone_push_goes_at_once_and_a_burst_is_paced() {
        let pacer = PushPacer::default();
        let start = tokio::time::Instant::now();
        let slots: Vec<tokio::time::Instant> = (0..4).map(|_| pacer.next_slot()).collect();
        assert!(slots[0] >= start && slots[0] - start < Duration::from_millis(50));
        let spacing = Duration::from_secs(1) / PUSHES_PER_SECOND;
        for pair in slots.windows(2) {
            assert_eq!(pair[1] - pair[0], spacing);
        }
        // Once the burst's slots are past, the next push goes at once again.
        tokio::time::sleep_until(slots[3] + Duration::from_millis(5)).await;
        let now = tokio::time::Instant::now();
        let next = pacer.next_slot();
        assert!(next >= now && next - now < Duration::from_millis(50));
    }
}
