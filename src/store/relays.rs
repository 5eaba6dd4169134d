//! The store's part for cluster relays: credentials, connections and the election, and the
//! cluster ingress route table (`04-registration.md`, "Relays" and "Route table").
//!
//! **The election lives here**, so several controller processes sharing one database agree on
//! it: a connect takes the cluster's lock (`SELECT … FOR UPDATE` on PostgreSQL, `BEGIN
//! IMMEDIATE` on SQLite) and writes the epoch after the cluster's highest one (a unique
//! `(cluster, epoch)` key guards it besides the lock). The elected connection of a cluster is its
//! highest epoch while `now − last seen < lease`. Bearers and tokens are kept as SHA-256 hashes.

use super::{PutOutcome, StoreError};
use crate::contract::{Id, Protocol};
use async_trait::async_trait;

/// A relay's credential. The bearer is kept only as its SHA-256 hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredRelayCredential {
    /// The cluster.
    pub cluster_id: Id,
    /// The relay.
    pub relay_id: Id,
    /// SHA-256 of the bearer.
    pub bearer_hash: [u8; 32],
    /// Counts up from 1 with every issue or rotation.
    pub generation: u64,
}

/// One relay connection. Its token is kept only as a hash and is not part of this record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredRelayConnection {
    /// The connection's id.
    pub id: Id,
    /// The cluster.
    pub cluster_id: Id,
    /// The relay.
    pub relay_id: Id,
    /// The election epoch: the cluster's previous highest + 1.
    pub epoch: u64,
    /// The last connect or heartbeat, ms since the Unix epoch.
    pub last_seen_ms: u64,
}

impl StoredRelayConnection {
    /// True when this connection is its cluster's elected one: it holds the cluster's highest
    /// epoch (`highest_epoch`) and its last connect or heartbeat is younger than `lease_ms`.
    pub fn is_elected(&self, highest_epoch: u64, now_ms: u64, lease_ms: u64) -> bool {
        self.epoch == highest_epoch && now_ms.saturating_sub(self.last_seen_ms) < lease_ms
    }
}

/// What a connection token names: the connection and its cluster's highest epoch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelayConnectionState {
    /// The connection.
    pub connection: StoredRelayConnection,
    /// The highest epoch of the connection's cluster.
    pub highest_epoch: u64,
}

/// The outcome of [`RelayStore::heartbeat_relay`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RelayHeartbeat {
    /// No connection has this token.
    Unknown,
    /// The connection is superseded or expired; nothing was written.
    Lost(StoredRelayConnection),
    /// The connection is elected; its last-seen time is now.
    Alive(StoredRelayConnection),
}

/// One route of a cluster's ingress route table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IngressRoute {
    /// A lowercase DNS name; unique in the table.
    pub hostname: String,
    /// The target service.
    pub service_id: Id,
    /// The target protocol.
    pub protocol: Protocol,
    /// One of the target service's declared ports with that protocol.
    pub port: u16,
}

/// A cluster's route table at one revision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredRouteTable {
    /// The cluster.
    pub cluster_id: Id,
    /// Counts up from 1 with every change of the routes.
    pub revision: u64,
    /// Sorted by hostname (bytewise).
    pub routes: Vec<IngressRoute>,
}

/// Persistence of cluster relays and the cluster ingress route table. Implemented by both
/// backends (`postgres/relays.rs`, `sqlite/relays.rs`).
#[async_trait]
pub trait RelayStore: Send + Sync {
    /// Creates the relay's credential (generation 1) or rotates it (generation + 1) to
    /// `bearer_hash`. `Missing(Cluster)` when the cluster does not exist.
    async fn put_relay_credential(
        &self,
        cluster_id: &Id,
        relay_id: &Id,
        bearer_hash: [u8; 32],
    ) -> Result<PutOutcome<StoredRelayCredential>, StoreError>;

    /// The relay's credential.
    async fn get_relay_credential(
        &self,
        cluster_id: &Id,
        relay_id: &Id,
    ) -> Result<Option<StoredRelayCredential>, StoreError>;

    /// Creates a connection with the cluster's highest epoch + 1 (the first is 1), elected at
    /// once, and last seen `now_ms` — atomically under the cluster's lock, so racing connects get
    /// distinct epochs across processes. `None` (nothing written) when the relay's credential is
    /// no longer at `credential_generation` (rotated after the caller verified the bearer).
    async fn connect_relay(
        &self,
        cluster_id: &Id,
        relay_id: &Id,
        credential_generation: u64,
        connection_id: &Id,
        token_hash: [u8; 32],
        now_ms: u64,
    ) -> Result<Option<StoredRelayConnection>, StoreError>;

    /// The connection with this token hash and its cluster's highest epoch.
    async fn find_relay_connection(&self, token_hash: [u8; 32]) -> Result<Option<RelayConnectionState>, StoreError>;

    /// Compare-and-swap of a connection's last-seen time: writes `now_ms` only when the
    /// connection is its cluster's highest epoch and `now_ms − last seen < lease_ms`.
    async fn heartbeat_relay(
        &self,
        token_hash: [u8; 32],
        now_ms: u64,
        lease_ms: u64,
    ) -> Result<RelayHeartbeat, StoreError>;

    /// Creates or replaces the route of `route.hostname` and answers the table. The revision
    /// counts up by one when the routes change; a put that changes nothing keeps it.
    /// `Missing(Cluster)` when the cluster does not exist.
    async fn put_ingress_route(
        &self,
        cluster_id: &Id,
        route: &IngressRoute,
    ) -> Result<PutOutcome<StoredRouteTable>, StoreError>;

    /// Deletes the route of `hostname` and answers the table (`None` when the cluster never had
    /// one). Deleting a hostname without a route changes nothing. `Missing(Cluster)` when the
    /// cluster does not exist.
    async fn delete_ingress_route(
        &self,
        cluster_id: &Id,
        hostname: &str,
    ) -> Result<PutOutcome<Option<StoredRouteTable>>, StoreError>;

    /// The cluster's route table, `None` before its first route was written.
    async fn get_route_table(&self, cluster_id: &Id) -> Result<Option<StoredRouteTable>, StoreError>;

    /// Only the revision of the cluster's route table (the long poll's cheap re-check).
    async fn route_table_revision(&self, cluster_id: &Id) -> Result<Option<u64>, StoreError>;
}
