//! Cluster relays and the cluster ingress route table (`04-registration.md`, "Relays" and
//! "Route table"; principals in `02-wire.md`).
//!
//! - `issueClusterRelayCredential` (admin) creates or rotates a relay's bearer (`szrl_…`), shown
//!   once and stored only as a SHA-256 hash.
//! - `connectClusterRelay` (the relay, by bearer) opens a connection: a token (`szrc_…`, stored
//!   only hashed) and the next epoch of the cluster's election, elected at once.
//! - `heartbeatClusterRelay` and `getClusterIngressRouteTable` (the relay, `authInfo.jwt` = the
//!   token): a missing or unknown token is `principal-refused`, a known token whose connection is
//!   superseded or expired `relay-connection-lost`.
//! - `listClusterRelays` (every role) lists a cluster's relay credentials and their connections,
//!   each connection with whether it is elected ([`is_elected`]); never a bearer, token or hash.
//! - `putClusterIngressRoute`, `deleteClusterIngressRoute` (admin) and `getClusterIngressRoutes`
//!   (every role) write and read the route table. A route's backends are judged by the
//!   projection issuer (`projections`): a target lease is one once an issued projection grants
//!   to it on the route's protocol and port.
//!
//! The long poll of `getClusterIngressRouteTable` wakes on writes made in this process (a watch
//! channel per cluster) and re-checks the store every [`ROUTE_TABLE_RECHECK`], so writes made by
//! another controller process on the same database are seen too.

use super::identity::Caller;
use super::secrets::{Bearer, hash_value};
use super::{ClusterRequest, Controller, DomainError};
/// The hostname rule of a route, the contract's (also the host rule of a canonical origin).
pub use crate::contract::inventory::is_lowercase_dns_name;
use crate::contract::{Id, Protocol};
use crate::store::relays::{
    IngressRoute, RelayConnectionState, RelayHeartbeat, StoredRelayConnection, StoredRouteTable,
};
use crate::store::{MissingKind, PutOutcome};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;
use tokio::sync::watch;

/// The prefix of relay bearers (`szrl_` + 256 random bits).
pub const RELAY_BEARER_PREFIX: &str = "szrl_";

/// The prefix of relay connection tokens (`szrc_` + 256 random bits).
pub const RELAY_TOKEN_PREFIX: &str = "szrc_";

/// How often a held `getClusterIngressRouteTable` re-reads the revision from the store, to see
/// writes made by other controller processes.
pub const ROUTE_TABLE_RECHECK: Duration = Duration::from_millis(250);

/// How many relay credentials, and how many relay connections (the newest), `listClusterRelays`
/// answers at most; beyond, its answer says `truncated`.
pub const RELAY_LIST_LIMIT: u32 = 100;

/// `IClusterRelay`: `{ clusterId, relayId, origin }`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterRelay {
    /// The cluster.
    pub cluster_id: Id,
    /// The relay.
    pub relay_id: Id,
    /// The cluster's `relayOrigin`.
    pub origin: String,
}

/// The answer of `issueClusterRelayCredential`. The bearer is shown once, in this answer.
#[derive(Debug)]
pub struct RelayCredentialIssued {
    /// The relay.
    pub relay: ClusterRelay,
    /// The new bearer.
    pub bearer: Bearer,
}

/// The answer of `connectClusterRelay`. The token is shown once, in this answer.
#[derive(Debug)]
pub struct RelayConnected {
    /// The new, elected connection.
    pub connection: StoredRelayConnection,
    /// The connection token (`authInfo.jwt` of the relay's later calls).
    pub token: Bearer,
    /// How long the connection stays elected without a heartbeat.
    pub lease_ms: u64,
}

/// The answer of `heartbeatClusterRelay`.
#[derive(Debug, Clone)]
pub struct RelayHeartbeatAnswer {
    /// The connection, with its new `last_seen_ms`.
    pub connection: StoredRelayConnection,
    /// How long the connection stays elected without another heartbeat.
    pub lease_ms: u64,
}

/// One relay of `listClusterRelays`: its credential's stored facts and its connections. Holds no
/// bearer, token or hash of either.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelayListing {
    /// The relay.
    pub relay_id: Id,
    /// Its credential's generation: 1 when issued, + 1 with each rotation. It is all the store
    /// keeps of the credential besides the bearer's hash: no issue time, and no revocation (a
    /// rotation replaces the bearer; the previous one connects no more).
    pub credential_generation: u64,
    /// Its connections, newest first.
    pub connections: Vec<RelayConnectionListing>,
}

/// One relay connection of `listClusterRelays`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelayConnectionListing {
    /// The connection's id.
    pub id: Id,
    /// Its election epoch.
    pub epoch: u64,
    /// Its last connect or heartbeat, ms since the Unix epoch.
    pub last_seen_ms: u64,
    /// True while it is its cluster's elected connection ([`is_elected`], now).
    pub elected: bool,
}

/// The answer of `listClusterRelays`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterRelays {
    /// The cluster's relays, sorted by relay id: at most [`RELAY_LIST_LIMIT`], with their
    /// connections among the cluster's newest [`RELAY_LIST_LIMIT`].
    pub relays: Vec<RelayListing>,
    /// True when the cluster has more relays or connections than were listed.
    pub truncated: bool,
}

/// The relay principal of `heartbeatClusterRelay` and `getClusterIngressRouteTable`: the
/// connection that `authInfo.jwt` names, elected when it was checked
/// ([`Controller::relay_principal`], the only way to get one). Carries the token's hash, never
/// the token, and `Debug` shows neither.
#[derive(Clone)]
pub struct RelayPrincipal {
    connection: StoredRelayConnection,
    token_hash: [u8; 32],
}

impl std::fmt::Debug for RelayPrincipal {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("RelayPrincipal").field("connection", &self.connection).finish_non_exhaustive()
    }
}

/// `issueClusterRelayCredential`: `{ identity, clusterId, relayId }`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IssueClusterRelayCredentialRequest {
    /// The cluster.
    pub cluster_id: Id,
    /// The relay.
    pub relay_id: Id,
}

/// `connectClusterRelay`: `{ clusterId, relayId, bearer }` (no identity: the bearer is the
/// relay's principal, checked after the members).
#[derive(Debug)]
pub struct ConnectClusterRelayRequest {
    /// The cluster.
    pub cluster_id: Id,
    /// The relay.
    pub relay_id: Id,
    /// The bearer `issueClusterRelayCredential` showed.
    pub bearer: Bearer,
}

/// `getClusterIngressRouteTable`: `{ knownRevision }` (the relay principal checked first).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GetClusterIngressRouteTableRequest {
    /// The revision the relay holds, `None` for none.
    pub known_revision: Option<u64>,
}

/// `putClusterIngressRoute`: `{ identity, clusterId, route }`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PutClusterIngressRouteRequest {
    /// The cluster.
    pub cluster_id: Id,
    /// The route (its hostname a lowercase DNS name, see [`is_lowercase_dns_name`]).
    pub route: IngressRoute,
}

/// `deleteClusterIngressRoute`: `{ identity, clusterId, hostname }`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeleteClusterIngressRouteRequest {
    /// The cluster.
    pub cluster_id: Id,
    /// The route's hostname, a lowercase DNS name ([`is_lowercase_dns_name`]).
    pub hostname: String,
}

/// In-process wake-ups of route table long polls: one watch channel per cluster, bumped after
/// every route write this process commits.
#[derive(Debug, Default)]
pub struct RouteTableWatch {
    channels: Mutex<HashMap<Id, watch::Sender<u64>>>,
}

impl RouteTableWatch {
    fn sender(&self, cluster_id: &Id) -> watch::Sender<u64> {
        let mut channels = self.channels.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        channels.entry(cluster_id.clone()).or_insert_with(|| watch::channel(0).0).clone()
    }

    /// A receiver that sees every later [`RouteTableWatch::changed`] of the cluster.
    pub fn subscribe(&self, cluster_id: &Id) -> watch::Receiver<u64> {
        self.sender(cluster_id).subscribe()
    }

    /// Wakes the cluster's held long polls.
    pub fn changed(&self, cluster_id: &Id) {
        self.sender(cluster_id).send_modify(|version| *version = version.wrapping_add(1));
    }
}

/// The election rule: a relay connection is its cluster's elected one while it holds the
/// cluster's highest epoch (`highest_epoch`, which the store keeps, so every controller process
/// sharing the database agrees) and its last connect or heartbeat is younger than `lease_ms`.
pub fn is_elected(connection: &StoredRelayConnection, highest_epoch: u64, now_ms: u64, lease_ms: u64) -> bool {
    connection.epoch == highest_epoch && now_ms.saturating_sub(connection.last_seen_ms) < lease_ms
}

fn invalid(violation: &str) -> DomainError {
    DomainError::RequestInvalid(vec![violation.to_owned()])
}

fn protocol_name(protocol: Protocol) -> &'static str {
    protocol.as_str()
}

impl Controller {
    /// The principal of the relay methods: the relay connection `auth_jwt` (the envelope's
    /// `authInfo.jwt`) names, if it is its cluster's elected one; `principal-refused` without a
    /// token or for an unknown one, `relay-connection-lost` for a superseded or expired
    /// connection. Checked before the request's members.
    pub async fn relay_principal(&self, auth_jwt: Option<&str>) -> Result<RelayPrincipal, DomainError> {
        let token = auth_jwt.ok_or(DomainError::PrincipalRefused)?;
        let token_hash = hash_value(token);
        let state = self.store.find_relay_connection(token_hash).await?.ok_or(DomainError::PrincipalRefused)?;
        if self.is_elected_now(&state) {
            Ok(RelayPrincipal { connection: state.connection, token_hash })
        } else {
            Err(DomainError::RelayConnectionLost)
        }
    }

    /// The connection `token` names when it is its cluster's elected, unexpired connection;
    /// `None` for an unknown token or a superseded or expired connection: the election the
    /// registration judge applies to the connection it reads with its facts, for tests.
    #[cfg(feature = "testing")]
    pub async fn elected_relay_connection(&self, token: &str) -> Result<Option<StoredRelayConnection>, DomainError> {
        let Some(state) = self.store.find_relay_connection(hash_value(token)).await? else {
            return Ok(None);
        };
        Ok(self.is_elected_now(&state).then_some(state.connection))
    }

    /// True when the connection is its cluster's elected one, within its lease, now.
    pub(crate) fn is_elected_now(&self, state: &RelayConnectionState) -> bool {
        is_elected(&state.connection, state.highest_epoch, self.clock.now_ms(), self.settings.relay_lease_ms)
    }

    /// `issueClusterRelayCredential` (admin) → `{ relay, bearer }`.
    pub async fn issue_cluster_relay_credential(
        &self,
        request: IssueClusterRelayCredentialRequest,
    ) -> Result<RelayCredentialIssued, DomainError> {
        let IssueClusterRelayCredentialRequest { cluster_id, relay_id } = request;
        let cluster = self.existing_cluster(&cluster_id).await?;
        let Some(origin) = cluster.cluster.relay_origin else {
            return Err(invalid("the cluster has no relayOrigin, so it cannot have a relay"));
        };
        let bearer = Bearer::generate(RELAY_BEARER_PREFIX).map_err(|_| DomainError::Internal)?;
        match self.store.put_relay_credential(&cluster_id, &relay_id, bearer.hash()).await? {
            PutOutcome::Written(credential) => {
                tracing::info!(
                    cluster = %cluster_id, relay = %relay_id, generation = credential.generation,
                    "relay credential issued"
                );
                Ok(RelayCredentialIssued { relay: ClusterRelay { cluster_id, relay_id, origin }, bearer })
            }
            PutOutcome::Missing(what) => Err(DomainError::NotFound(what)),
            PutOutcome::RevisionConflict { .. } | PutOutcome::GuardFailed => Err(DomainError::Internal),
        }
    }

    /// `connectClusterRelay` (the relay, by bearer) → `{ connection, token, leaseMs }`. An
    /// unknown cluster or relay and a wrong bearer are all `principal-refused`.
    pub async fn connect_cluster_relay(
        &self,
        request: ConnectClusterRelayRequest,
    ) -> Result<RelayConnected, DomainError> {
        let ConnectClusterRelayRequest { cluster_id, relay_id, bearer: presented } = request;
        let credential = self.store.get_relay_credential(&cluster_id, &relay_id).await?;
        // Compare against a hash in every case, so an unknown relay costs what a wrong bearer does.
        let expected = credential.as_ref().map_or([0u8; 32], |credential| credential.bearer_hash);
        let Some(credential) = credential.filter(|_| presented.matches_hash(&expected)) else {
            tracing::info!(cluster = %cluster_id, relay = %relay_id, "relay connect refused");
            return Err(DomainError::PrincipalRefused);
        };
        let token = Bearer::generate(RELAY_TOKEN_PREFIX).map_err(|_| DomainError::Internal)?;
        let connection_id =
            Id::parse(&format!("relay-conn-{}", uuid::Uuid::new_v4().simple())).expect("a uuid id is an Id");
        let connected = self
            .store
            .connect_relay(
                &cluster_id,
                &relay_id,
                credential.generation,
                &connection_id,
                token.hash(),
                self.clock.now_ms(),
            )
            .await?;
        let Some(connection) = connected else {
            tracing::info!(cluster = %cluster_id, relay = %relay_id, "relay credential rotated during connect");
            return Err(DomainError::PrincipalRefused);
        };
        tracing::info!(cluster = %cluster_id, relay = %relay_id, epoch = connection.epoch, "relay connected");
        Ok(RelayConnected { connection, token, lease_ms: self.settings.relay_lease_ms })
    }

    /// `heartbeatClusterRelay` (the relay principal): `{}` → `{ connection, leaseMs }`.
    pub async fn heartbeat_cluster_relay(
        &self,
        principal: &RelayPrincipal,
    ) -> Result<RelayHeartbeatAnswer, DomainError> {
        let now = self.clock.now_ms();
        match self.store.heartbeat_relay(principal.token_hash, now, self.settings.relay_lease_ms).await? {
            RelayHeartbeat::Alive(connection) => {
                Ok(RelayHeartbeatAnswer { connection, lease_ms: self.settings.relay_lease_ms })
            }
            RelayHeartbeat::Lost(_) => Err(DomainError::RelayConnectionLost),
            RelayHeartbeat::Unknown => Err(DomainError::PrincipalRefused),
        }
    }

    /// `getClusterIngressRouteTable` (the relay principal): `{ knownRevision }` → `{ table }` of
    /// the connection's cluster. When `knownRevision` is the current revision (`null` and no
    /// table count as equal), the call is held up to `route_table_long_poll_ms` and answers as
    /// soon as the revision differs, else the current table; a draining controller answers the
    /// current table within [`ROUTE_TABLE_RECHECK`].
    pub async fn get_cluster_ingress_route_table(
        &self,
        principal: &RelayPrincipal,
        request: GetClusterIngressRouteTableRequest,
    ) -> Result<Option<StoredRouteTable>, DomainError> {
        let known = request.known_revision;
        let cluster_id = &principal.connection.cluster_id;
        let mut changes = self.route_tables.subscribe(cluster_id);
        let deadline = tokio::time::Instant::now() + Duration::from_millis(self.settings.route_table_long_poll_ms);
        loop {
            let revision = self.store.route_table_revision(cluster_id).await?;
            let now = tokio::time::Instant::now();
            // A stopping process answers at once (within one recheck) rather than holding the
            // poll past its grace period.
            if revision != known || now >= deadline || self.is_draining() {
                break;
            }
            let recheck = tokio::time::sleep_until(deadline.min(now + ROUTE_TABLE_RECHECK));
            tokio::select! {
                _ = changes.changed() => {}
                () = recheck => {}
            }
        }
        Ok(self.store.get_route_table(cluster_id).await?)
    }

    /// `listClusterRelays` (every role): `{ identity, clusterId }` → `{ relays, truncated }`.
    /// `caller` is the proof that the reader was authorized to read ([`Controller::authorize`]
    /// with `Access::Read`), the check of every read of the method table. An unknown cluster is
    /// `not-found`.
    pub async fn list_cluster_relays(
        &self,
        _caller: &Caller,
        request: ClusterRequest,
    ) -> Result<ClusterRelays, DomainError> {
        let ClusterRequest { cluster_id } = request;
        self.existing_cluster(&cluster_id).await?;
        // One more than listed tells whether more exist.
        let stored = self.store.list_cluster_relays(&cluster_id, RELAY_LIST_LIMIT + 1).await?;
        let limit = RELAY_LIST_LIMIT as usize;
        let truncated = stored.credentials.len() > limit || stored.connections.len() > limit;
        let (now_ms, lease_ms) = (self.clock.now_ms(), self.settings.relay_lease_ms);
        let highest_epoch = stored.highest_epoch.unwrap_or(0);
        let connections = &stored.connections[..stored.connections.len().min(limit)];
        let relays = stored
            .credentials
            .into_iter()
            .take(limit)
            .map(|credential| RelayListing {
                connections: connections
                    .iter()
                    .filter(|connection| connection.relay_id == credential.relay_id)
                    .map(|connection| RelayConnectionListing {
                        id: connection.id.clone(),
                        epoch: connection.epoch,
                        last_seen_ms: connection.last_seen_ms,
                        elected: is_elected(connection, highest_epoch, now_ms, lease_ms),
                    })
                    .collect(),
                relay_id: credential.relay_id,
                credential_generation: credential.generation,
            })
            .collect();
        Ok(ClusterRelays { relays, truncated })
    }

    /// `putClusterIngressRoute` (admin) → `{ table }`.
    pub async fn put_cluster_ingress_route(
        &self,
        request: PutClusterIngressRouteRequest,
    ) -> Result<StoredRouteTable, DomainError> {
        let PutClusterIngressRouteRequest { cluster_id, route } = request;
        self.existing_cluster(&cluster_id).await?;
        let spec = self
            .store
            .get_service_spec(&cluster_id, &route.service_id, None)
            .await?
            .ok_or(DomainError::NotFound(MissingKind::Service))?;
        if !spec
            .body
            .ports
            .iter()
            .any(|port| port.protocol.runnable() == Some(route.protocol) && port.port == route.port)
        {
            return Err(invalid(&format!(
                "request route port must be one of the service's declared {} ports",
                protocol_name(route.protocol)
            )));
        }
        let outcome = self.store.put_ingress_route(&cluster_id, &route).await?;
        let table = self.route_written(&cluster_id, outcome).await?;
        tracing::info!(cluster = %cluster_id, hostname = %route.hostname, revision = table.revision, "ingress route put");
        Ok(table)
    }

    /// `deleteClusterIngressRoute` (admin) → `{ table }` (`null` when the cluster never had a
    /// table). Deleting a hostname without a route changes nothing.
    pub async fn delete_cluster_ingress_route(
        &self,
        request: DeleteClusterIngressRouteRequest,
    ) -> Result<Option<StoredRouteTable>, DomainError> {
        let DeleteClusterIngressRouteRequest { cluster_id, hostname } = request;
        let outcome = self.store.delete_ingress_route(&cluster_id, &hostname).await?;
        let table = self.route_written(&cluster_id, outcome).await?;
        tracing::info!(cluster = %cluster_id, %hostname, "ingress route deleted");
        Ok(table)
    }

    /// What follows a route put or delete, whatever its outcome: the cluster's route table
    /// watchers are woken and its projections issued. Answers the written table, `not-found`
    /// when the store misses what the route names, and an internal error for a revision or
    /// designation-kind conflict, which a route write is not expected to meet.
    async fn route_written<T>(&self, cluster_id: &Id, outcome: PutOutcome<T>) -> Result<T, DomainError> {
        self.route_tables.changed(cluster_id);
        self.routes_changed(cluster_id).await;
        match outcome {
            PutOutcome::Written(table) => Ok(table),
            PutOutcome::Missing(what) => Err(DomainError::NotFound(what)),
            PutOutcome::RevisionConflict { .. } | PutOutcome::GuardFailed => Err(DomainError::Internal),
        }
    }

    /// `getClusterIngressRoutes` (every role): `{ identity, clusterId }` → `{ table }`.
    pub async fn get_cluster_ingress_routes(
        &self,
        request: ClusterRequest,
    ) -> Result<Option<StoredRouteTable>, DomainError> {
        let ClusterRequest { cluster_id } = request;
        self.existing_cluster(&cluster_id).await?;
        Ok(self.store.get_route_table(&cluster_id).await?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dns_names_are_lowercase_labels() {
        for good in ["example.net", "a", "a-b.c1.example", "xn--bcher-kva.example"] {
            assert!(is_lowercase_dns_name(good), "{good}");
        }
        for bad in ["", "Example.net", "a..b", "-a.b", "a-.b", "a.b.", "a_b.c", "*.example.net", &"a".repeat(64)] {
            assert!(!is_lowercase_dns_name(bad), "{bad}");
        }
        assert!(!is_lowercase_dns_name(&format!("{}.b", vec!["a".repeat(63); 4].join("."))));
    }

    #[test]
    fn a_connection_is_elected_only_at_the_highest_epoch_within_its_lease() {
        let connection = StoredRelayConnection {
            id: Id::parse("c").unwrap(),
            cluster_id: Id::parse("k").unwrap(),
            relay_id: Id::parse("r").unwrap(),
            epoch: 3,
            last_seen_ms: 1_000,
        };
        assert!(is_elected(&connection, 3, 1_000, 30_000));
        assert!(is_elected(&connection, 3, 30_999, 30_000));
        assert!(!is_elected(&connection, 3, 31_000, 30_000));
        assert!(!is_elected(&connection, 4, 1_000, 30_000));
    }
}
