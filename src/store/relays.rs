//! The store's part for cluster relays: credentials, connections and the election, and the
//! cluster ingress route table (`04-registration.md`, "Relays" and "Route table").
//!
//! **The epochs live here**, so several controller processes sharing one database agree on the
//! election (whose rule is the domain's, `domain::relays::is_elected`): a connect takes the
//! cluster's lock (`inventory::lock_cluster`) and writes the epoch after the cluster's highest one
//! (a unique `(cluster, epoch)` key guards it besides the lock); a heartbeat is one guarded
//! `UPDATE` that writes only for the cluster's highest epoch within the lease. Every write of a
//! cluster's relays runs under the cluster's lock, so connects and rotations of one cluster
//! serialize across processes; route writes run under its reconcile lock
//! (`inventory::lock_reconcile`), as the projection issues that judge the routes' backends do. Bearers and tokens are kept as SHA-256
//! hashes.
//!
//! A route keeps its backends in one JSON column (`ingress_routes.backends`), since they are
//! always written and read whole; a route that changes forgets them, and the
//! projection issuer judges them again.

use super::codec::counter_to_sql;
use super::dialect::Backend;
use super::sql::{HoldsConnection, Row, Statement};
use super::{MissingKind, PutOutcome, SqlStore, StoreError};
use crate::contract::{Id, Ipv4, Protocol};
use async_trait::async_trait;
use std::collections::{BTreeMap, BTreeSet};

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

/// A cluster's relays as stored: its credentials and their connections, each list capped at the
/// limit [`RelayStore::list_cluster_relays`] was given. Facts only: which connection is elected
/// is the domain's decision (`domain::relays::is_elected`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredClusterRelays {
    /// The cluster's credentials, sorted by relay id (bytewise).
    pub credentials: Vec<StoredRelayCredential>,
    /// The cluster's connections, newest (highest epoch) first.
    pub connections: Vec<StoredRelayConnection>,
    /// The cluster's highest epoch, `None` before its first connect.
    pub highest_epoch: Option<u64>,
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

/// One backend of a route: a target lease, with the route's port, whose workload ingress grant
/// exists in an issued projection.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct RouteBackend {
    /// The route's hostname.
    pub hostname: String,
    /// The target lease.
    pub lease_id: Id,
    /// The lease's address.
    pub address: Ipv4,
    /// The route's port.
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
    /// The backends of every route, sorted by hostname, then lease id.
    pub backends: Vec<RouteBackend>,
}

/// Persistence of cluster relays and the cluster ingress route table.
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

    /// The cluster's relay credentials (sorted by relay id) and connections (newest epoch first),
    /// at most `limit` of each, read in one snapshot. A cluster without relays, or none at all,
    /// answers empty lists.
    async fn list_cluster_relays(&self, cluster_id: &Id, limit: u32) -> Result<StoredClusterRelays, StoreError>;

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

/// The revision of the cluster's route table, `None` before its first route.
async fn table_revision(on: &mut impl HoldsConnection, cluster_id: &Id) -> Result<Option<u64>, StoreError> {
    Statement::new("SELECT revision FROM ingress_route_tables WHERE cluster_id = $1")
        .text(cluster_id.as_str())
        .fetch_optional_as(on, |row| row.counter("revision", "route table revision"))
        .await
}

/// The cluster's route table, its routes sorted by hostname (bytewise).
async fn read_table(
    on: &mut impl HoldsConnection,
    backend: Backend,
    cluster_id: &Id,
) -> Result<Option<StoredRouteTable>, StoreError> {
    let Some(revision) = table_revision(on, cluster_id).await? else {
        return Ok(None);
    };
    let routes = table_routes(on, backend, cluster_id).await?;
    let backends = route_backends(on, cluster_id).await?;
    Ok(Some(StoredRouteTable { cluster_id: cluster_id.clone(), revision, routes, backends }))
}

/// The cluster's routes, sorted by hostname (bytewise).
pub(crate) async fn table_routes(
    on: &mut impl HoldsConnection,
    backend: Backend,
    cluster_id: &Id,
) -> Result<Vec<IngressRoute>, StoreError> {
    Statement::composed(format!(
        "SELECT hostname, service_id, protocol, port FROM ingress_routes WHERE cluster_id = $1 ORDER BY hostname{}",
        backend.bytewise()
    ))
    .text(cluster_id.as_str())
    .fetch_all_as(on, route_from_row)
    .await
}

/// The backends of the cluster's routes, sorted by hostname, then lease id. Each route keeps its
/// backends in one column (`backends`, a JSON array of `[leaseId, address]`); a backend's port is
/// its route's.
pub(crate) async fn route_backends(
    on: &mut impl HoldsConnection,
    cluster_id: &Id,
) -> Result<Vec<RouteBackend>, StoreError> {
    let mut backends = Vec::new();
    for row in Statement::new("SELECT hostname, port, backends FROM ingress_routes WHERE cluster_id = $1")
        .text(cluster_id.as_str())
        .fetch_all(on)
        .await?
    {
        backends.extend(route_backends_from_row(&row)?);
    }
    backends.sort();
    Ok(backends)
}

/// Replaces the backends of the cluster's routes with `backends` (sorted by hostname, each with
/// its route's port), writing only the routes whose backends change; answers whether any did. A
/// backend naming a route that does not exist, or another port than its route's, is refused as
/// corrupt input.
pub(crate) async fn replace_route_backends(
    transaction: &mut impl HoldsConnection,
    cluster_id: &Id,
    backends: &[RouteBackend],
) -> Result<bool, StoreError> {
    let (before, after) = (by_route(&route_backends(transaction, cluster_id).await?), by_route(backends));
    let routes: BTreeSet<&(String, u16)> = before.keys().chain(after.keys()).collect();
    let mut changed = false;
    for route in routes {
        let listed = after.get(route).map_or(&[][..], Vec::as_slice);
        if before.get(route).map_or(&[][..], Vec::as_slice) == listed {
            continue;
        }
        let (hostname, port) = route;
        let written = Statement::new(
            "UPDATE ingress_routes SET backends = $4 WHERE cluster_id = $1 AND hostname = $2 AND port = $3",
        )
        .text(cluster_id.as_str())
        .text(hostname)
        .integer(i64::from(*port))
        .text(&serde_json::to_string(listed).expect("strings serialize"))
        .execute(transaction)
        .await?;
        if written != 1 {
            return Err(StoreError::Corrupt("a route backend names no route with its port".into()));
        }
        changed = true;
    }
    Ok(changed)
}

/// Backends by route (hostname and port) as the `backends` column lists them: `[leaseId, address]`
/// in the order given.
fn by_route(backends: &[RouteBackend]) -> BTreeMap<(String, u16), Vec<(String, String)>> {
    let mut routes: BTreeMap<(String, u16), Vec<(String, String)>> = BTreeMap::new();
    for backend in backends {
        routes
            .entry((backend.hostname.clone(), backend.port))
            .or_default()
            .push((backend.lease_id.as_str().to_owned(), backend.address.to_string()));
    }
    routes
}

/// Counts the table's revision up by one (creating the table at revision 1).
pub(crate) async fn bump_revision(transaction: &mut impl HoldsConnection, cluster_id: &Id) -> Result<(), StoreError> {
    Statement::new(
        "INSERT INTO ingress_route_tables (cluster_id, revision) VALUES ($1, 1) \
         ON CONFLICT (cluster_id) DO UPDATE SET revision = ingress_route_tables.revision + 1",
    )
    .text(cluster_id.as_str())
    .execute(transaction)
    .await?;
    Ok(())
}

/// The connection with this token hash and its cluster's highest epoch.
const RELAY_CONNECTION_SQL: &str = "SELECT c.id, c.cluster_id, c.relay_id, c.epoch, c.last_seen_at, \
       (SELECT MAX(m.epoch) FROM relay_connections m WHERE m.cluster_id = c.cluster_id) AS highest_epoch \
     FROM relay_connections c WHERE c.token_hash = $1";

#[async_trait]
impl RelayStore for SqlStore {
    async fn put_relay_credential(
        &self,
        cluster_id: &Id,
        relay_id: &Id,
        bearer_hash: [u8; 32],
    ) -> Result<PutOutcome<StoredRelayCredential>, StoreError> {
        let Some(mut transaction) = self.lock_existing_cluster(cluster_id).await? else {
            return Ok(PutOutcome::Missing(MissingKind::Cluster));
        };
        let row = Statement::new(
            "INSERT INTO relay_credentials (cluster_id, relay_id, bearer_hash, generation) VALUES ($1, $2, $3, 1) \
             ON CONFLICT (cluster_id, relay_id) DO UPDATE \
               SET bearer_hash = EXCLUDED.bearer_hash, generation = relay_credentials.generation + 1 \
             RETURNING bearer_hash, generation",
        )
        .text(cluster_id.as_str())
        .text(relay_id.as_str())
        .bytes(&bearer_hash)
        .fetch_one(&mut transaction)
        .await?;
        let credential = relay_credential_from_row(cluster_id, relay_id, &row)?;
        transaction.commit().await?;
        Ok(PutOutcome::Written(credential))
    }

    async fn get_relay_credential(
        &self,
        cluster_id: &Id,
        relay_id: &Id,
    ) -> Result<Option<StoredRelayCredential>, StoreError> {
        Statement::new("SELECT bearer_hash, generation FROM relay_credentials WHERE cluster_id = $1 AND relay_id = $2")
            .text(cluster_id.as_str())
            .text(relay_id.as_str())
            .fetch_optional_as(&mut self.pool.connection().await?, |row| {
                relay_credential_from_row(cluster_id, relay_id, row)
            })
            .await
    }

    async fn connect_relay(
        &self,
        cluster_id: &Id,
        relay_id: &Id,
        credential_generation: u64,
        connection_id: &Id,
        token_hash: [u8; 32],
        now_ms: u64,
    ) -> Result<Option<StoredRelayConnection>, StoreError> {
        let Some(mut transaction) = self.lock_existing_cluster(cluster_id).await? else {
            return Ok(None);
        };
        let credential = Statement::new(
            "SELECT bearer_hash, generation FROM relay_credentials WHERE cluster_id = $1 AND relay_id = $2",
        )
        .text(cluster_id.as_str())
        .text(relay_id.as_str())
        .fetch_optional(&mut transaction)
        .await?
        .map(|row| relay_credential_from_row(cluster_id, relay_id, &row))
        .transpose()?;
        if credential.map(|credential| credential.generation) != Some(credential_generation) {
            transaction.rollback().await?;
            return Ok(None);
        }
        let highest = Statement::new(
            "SELECT COALESCE(MAX(epoch), 0) AS highest_epoch FROM relay_connections WHERE cluster_id = $1",
        )
        .text(cluster_id.as_str())
        .fetch_one(&mut transaction)
        .await?;
        let epoch = highest.counter("highest_epoch", "relay connection epoch")? + 1;
        Statement::new(
            "INSERT INTO relay_connections (id, cluster_id, relay_id, epoch, token_hash, connected_at, last_seen_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $6)",
        )
        .text(connection_id.as_str())
        .text(cluster_id.as_str())
        .text(relay_id.as_str())
        .integer(counter_to_sql(epoch, "relay connection epoch")?)
        .bytes(&token_hash)
        .integer(counter_to_sql(now_ms, "relay connection time")?)
        .execute(&mut transaction)
        .await?;
        transaction.commit().await?;
        Ok(Some(StoredRelayConnection {
            id: connection_id.clone(),
            cluster_id: cluster_id.clone(),
            relay_id: relay_id.clone(),
            epoch,
            last_seen_ms: now_ms,
        }))
    }

    async fn find_relay_connection(&self, token_hash: [u8; 32]) -> Result<Option<RelayConnectionState>, StoreError> {
        Statement::new(RELAY_CONNECTION_SQL)
            .bytes(&token_hash)
            .fetch_optional_as(&mut self.pool.connection().await?, relay_connection_state_from_row)
            .await
    }

    async fn list_cluster_relays(&self, cluster_id: &Id, limit: u32) -> Result<StoredClusterRelays, StoreError> {
        // One snapshot, so the connections are those of the credentials listed.
        let mut snapshot = self.pool.begin_snapshot().await?;
        let credentials = Statement::composed(format!(
            "SELECT relay_id, bearer_hash, generation FROM relay_credentials WHERE cluster_id = $1 \
             ORDER BY relay_id{} LIMIT $2",
            self.pool.backend().bytewise()
        ))
        .text(cluster_id.as_str())
        .integer(i64::from(limit))
        .fetch_all(&mut snapshot)
        .await?
        .iter()
        .map(|row| relay_credential_from_row(cluster_id, &row.id("relay_id", "relay credential relay id")?, row))
        .collect::<Result<Vec<_>, _>>()?;
        let connections = Statement::new(
            "SELECT id, cluster_id, relay_id, epoch, last_seen_at FROM relay_connections WHERE cluster_id = $1 \
             ORDER BY epoch DESC LIMIT $2",
        )
        .text(cluster_id.as_str())
        .integer(i64::from(limit))
        .fetch_all(&mut snapshot)
        .await?
        .iter()
        .map(relay_connection_from_row)
        .collect::<Result<Vec<_>, _>>()?;
        snapshot.commit().await?;
        let highest_epoch = connections.first().map(|newest| newest.epoch);
        Ok(StoredClusterRelays { credentials, connections, highest_epoch })
    }

    async fn heartbeat_relay(
        &self,
        token_hash: [u8; 32],
        now_ms: u64,
        lease_ms: u64,
    ) -> Result<RelayHeartbeat, StoreError> {
        // The last-seen time never moves back (`CASE`: PostgreSQL's `GREATEST` and SQLite's
        // two-argument `MAX` in one spelling both accept).
        let row = Statement::new(
            "UPDATE relay_connections \
             SET last_seen_at = CASE WHEN last_seen_at > $2 THEN last_seen_at ELSE $2 END \
             WHERE token_hash = $1 AND $2 - last_seen_at < $3 \
               AND epoch = (SELECT MAX(m.epoch) FROM relay_connections m \
                            WHERE m.cluster_id = relay_connections.cluster_id) \
             RETURNING id, cluster_id, relay_id, epoch, last_seen_at",
        )
        .bytes(&token_hash)
        .integer(counter_to_sql(now_ms, "heartbeat time")?)
        .integer(counter_to_sql(lease_ms, "relay lease")?)
        .fetch_optional(&mut self.pool.connection().await?)
        .await?;
        if let Some(row) = row {
            return Ok(RelayHeartbeat::Alive(relay_connection_from_row(&row)?));
        }
        Ok(match self.find_relay_connection(token_hash).await? {
            None => RelayHeartbeat::Unknown,
            Some(state) => RelayHeartbeat::Lost(state.connection),
        })
    }

    async fn put_ingress_route(
        &self,
        cluster_id: &Id,
        route: &IngressRoute,
    ) -> Result<PutOutcome<StoredRouteTable>, StoreError> {
        let backend = self.pool.backend();
        let Some(mut transaction) = self.lock_existing_reconcile(cluster_id).await? else {
            return Ok(PutOutcome::Missing(MissingKind::Cluster));
        };
        let current = Statement::new(
            "SELECT hostname, service_id, protocol, port FROM ingress_routes WHERE cluster_id = $1 AND hostname = $2",
        )
        .text(cluster_id.as_str())
        .text(&route.hostname)
        .fetch_optional_as(&mut transaction, route_from_row)
        .await?;
        if current.as_ref() != Some(route) {
            bump_revision(&mut transaction, cluster_id).await?;
            // A changed route forgets its backends; the projection issuer judges them again.
            Statement::new(
                "INSERT INTO ingress_routes (cluster_id, hostname, service_id, protocol, port) \
                 VALUES ($1, $2, $3, $4, $5) \
                 ON CONFLICT (cluster_id, hostname) DO UPDATE \
                   SET service_id = EXCLUDED.service_id, protocol = EXCLUDED.protocol, port = EXCLUDED.port, \
                       backends = '[]'",
            )
            .text(cluster_id.as_str())
            .text(&route.hostname)
            .text(route.service_id.as_str())
            .text(route.protocol.as_str())
            .integer(i64::from(route.port))
            .execute(&mut transaction)
            .await?;
        }
        let table = read_table(&mut transaction, backend, cluster_id)
            .await?
            .ok_or_else(|| StoreError::Corrupt("a route table with a route has no head".into()))?;
        transaction.commit().await?;
        Ok(PutOutcome::Written(table))
    }

    async fn delete_ingress_route(
        &self,
        cluster_id: &Id,
        hostname: &str,
    ) -> Result<PutOutcome<Option<StoredRouteTable>>, StoreError> {
        let backend = self.pool.backend();
        let Some(mut transaction) = self.lock_existing_reconcile(cluster_id).await? else {
            return Ok(PutOutcome::Missing(MissingKind::Cluster));
        };
        let deleted = Statement::new("DELETE FROM ingress_routes WHERE cluster_id = $1 AND hostname = $2")
            .text(cluster_id.as_str())
            .text(hostname)
            .execute(&mut transaction)
            .await?;
        if deleted > 0 {
            bump_revision(&mut transaction, cluster_id).await?;
        }
        let table = read_table(&mut transaction, backend, cluster_id).await?;
        transaction.commit().await?;
        Ok(PutOutcome::Written(table))
    }

    async fn get_route_table(&self, cluster_id: &Id) -> Result<Option<StoredRouteTable>, StoreError> {
        // One snapshot, so the revision and the routes are of one moment.
        let mut transaction = self.pool.begin_snapshot().await?;
        let table = read_table(&mut transaction, self.pool.backend(), cluster_id).await?;
        transaction.commit().await?;
        Ok(table)
    }

    async fn route_table_revision(&self, cluster_id: &Id) -> Result<Option<u64>, StoreError> {
        table_revision(&mut self.pool.connection().await?, cluster_id).await
    }
}

/// A relay credential: `bearer_hash`, `generation`.
pub(crate) fn relay_credential_from_row(
    cluster_id: &Id,
    relay_id: &Id,
    row: &Row,
) -> Result<StoredRelayCredential, StoreError> {
    Ok(StoredRelayCredential {
        cluster_id: cluster_id.clone(),
        relay_id: relay_id.clone(),
        bearer_hash: row.hash("bearer_hash", "relay bearer hash")?,
        generation: row.counter("generation", "relay credential generation")?,
    })
}

/// A relay connection: `id`, `cluster_id`, `relay_id`, `epoch`, `last_seen_at`.
pub(crate) fn relay_connection_from_row(row: &Row) -> Result<StoredRelayConnection, StoreError> {
    Ok(StoredRelayConnection {
        id: row.id("id", "relay connection id")?,
        cluster_id: row.id("cluster_id", "relay connection cluster id")?,
        relay_id: row.id("relay_id", "relay connection relay id")?,
        epoch: row.counter("epoch", "relay connection epoch")?,
        last_seen_ms: row.counter("last_seen_at", "relay connection last seen")?,
    })
}

/// A relay connection with its cluster's highest epoch (`highest_epoch`).
pub(crate) fn relay_connection_state_from_row(row: &Row) -> Result<RelayConnectionState, StoreError> {
    Ok(RelayConnectionState {
        connection: relay_connection_from_row(row)?,
        highest_epoch: row.counter("highest_epoch", "relay connection epoch")?,
    })
}

/// A route of a route table: `hostname`, `service_id`, `protocol`, `port`.
pub(crate) fn route_from_row(row: &Row) -> Result<IngressRoute, StoreError> {
    Ok(IngressRoute {
        hostname: row.text("hostname")?,
        service_id: row.id("service_id", "route service id")?,
        protocol: row.protocol("route")?,
        port: row.port("route")?,
    })
}

/// The backends of a route: `hostname`, `port` and `backends`, a JSON array of `[leaseId, address]`.
pub(crate) fn route_backends_from_row(row: &Row) -> Result<Vec<RouteBackend>, StoreError> {
    let corrupt = || StoreError::Corrupt("stored route backends do not read back".into());
    let hostname = row.text("hostname")?;
    let port = row.port("route")?;
    let items: Vec<(String, String)> = serde_json::from_str(&row.text("backends")?).map_err(|_| corrupt())?;
    items
        .into_iter()
        .map(|(lease_id, address)| {
            Ok(RouteBackend {
                hostname: hostname.clone(),
                lease_id: Id::parse(&lease_id).ok_or_else(corrupt)?,
                address: Ipv4::parse(&address).ok_or_else(corrupt)?,
                port,
            })
        })
        .collect()
}
