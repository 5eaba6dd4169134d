//! [`RelayStore`](crate::store::relays::RelayStore) for [`PostgresStore`](super::PostgresStore).
//!
//! Every write locks the cluster row first (`SELECT … FOR UPDATE`), so connects, rotations and
//! route writes of one cluster serialize across controller processes; the unique
//! `(cluster_id, epoch)` key is a second guard of the election.

use super::{PostgresStore, lock_cluster};
use crate::contract::{Id, Protocol};
use crate::store::codec::{counter_from_sql, counter_to_sql, hash_from_sql};
use crate::store::relays::{
    IngressRoute, RelayConnectionState, RelayHeartbeat, RelayStore, StoredRelayConnection, StoredRelayCredential,
    StoredRouteTable,
};
use crate::store::{MissingKind, PutOutcome, StoreError};
use async_trait::async_trait;
use sqlx::postgres::{PgConnection, PgRow};
use sqlx::{Connection as _, Row};

fn stored_id(text: String, what: &str) -> Result<Id, StoreError> {
    Id::parse(&text).ok_or_else(|| StoreError::Corrupt(format!("stored {what} is not an Id")))
}

fn connection_from_row(row: &PgRow) -> Result<StoredRelayConnection, StoreError> {
    Ok(StoredRelayConnection {
        id: stored_id(row.try_get("id")?, "relay connection id")?,
        cluster_id: stored_id(row.try_get("cluster_id")?, "relay connection cluster id")?,
        relay_id: stored_id(row.try_get("relay_id")?, "relay connection relay id")?,
        epoch: counter_from_sql(row.try_get("epoch")?, "relay connection epoch")?,
        last_seen_ms: counter_from_sql(row.try_get("last_seen_at")?, "relay connection last seen")?,
    })
}

fn route_from_row(row: &PgRow) -> Result<IngressRoute, StoreError> {
    let protocol: String = row.try_get("protocol")?;
    let port: i32 = row.try_get("port")?;
    Ok(IngressRoute {
        hostname: row.try_get("hostname")?,
        service_id: stored_id(row.try_get("service_id")?, "route service id")?,
        protocol: Protocol::parse(&protocol)
            .ok_or_else(|| StoreError::Corrupt("stored route protocol is not tcp or udp".into()))?,
        port: u16::try_from(port)
            .ok()
            .filter(|port| *port >= 1)
            .ok_or_else(|| StoreError::Corrupt("stored route port is not a port".into()))?,
    })
}

async fn table_revision(connection: &mut PgConnection, cluster_id: &Id) -> Result<Option<u64>, StoreError> {
    let revision: Option<i64> = sqlx::query_scalar("SELECT revision FROM ingress_route_tables WHERE cluster_id = $1")
        .bind(cluster_id.as_str())
        .fetch_optional(&mut *connection)
        .await?;
    revision.map(|revision| counter_from_sql(revision, "route table revision")).transpose()
}

async fn read_table(connection: &mut PgConnection, cluster_id: &Id) -> Result<Option<StoredRouteTable>, StoreError> {
    let Some(revision) = table_revision(connection, cluster_id).await? else {
        return Ok(None);
    };
    let routes = sqlx::query(
        "SELECT hostname, service_id, protocol, port FROM ingress_routes WHERE cluster_id = $1 \
         ORDER BY hostname COLLATE \"C\"",
    )
    .bind(cluster_id.as_str())
    .fetch_all(&mut *connection)
    .await?
    .iter()
    .map(route_from_row)
    .collect::<Result<Vec<_>, _>>()?;
    Ok(Some(StoredRouteTable { cluster_id: cluster_id.clone(), revision, routes }))
}

/// Counts the table's revision up by one (creating the table at revision 1).
async fn bump_revision(connection: &mut PgConnection, cluster_id: &Id) -> Result<(), StoreError> {
    sqlx::query(
        "INSERT INTO ingress_route_tables (cluster_id, revision) VALUES ($1, 1) \
         ON CONFLICT (cluster_id) DO UPDATE SET revision = ingress_route_tables.revision + 1",
    )
    .bind(cluster_id.as_str())
    .execute(&mut *connection)
    .await?;
    Ok(())
}

#[async_trait]
impl RelayStore for PostgresStore {
    async fn put_relay_credential(
        &self,
        cluster_id: &Id,
        relay_id: &Id,
        bearer_hash: [u8; 32],
    ) -> Result<PutOutcome<StoredRelayCredential>, StoreError> {
        let mut pooled = self.pool.acquire().await?;
        let mut transaction = pooled.begin().await?;
        if lock_cluster(&mut transaction, cluster_id).await?.is_none() {
            transaction.rollback().await?;
            return Ok(PutOutcome::Missing(MissingKind::Cluster));
        }
        let generation: i64 = sqlx::query_scalar(
            "INSERT INTO relay_credentials (cluster_id, relay_id, bearer_hash, generation) VALUES ($1, $2, $3, 1) \
             ON CONFLICT (cluster_id, relay_id) DO UPDATE \
               SET bearer_hash = EXCLUDED.bearer_hash, generation = relay_credentials.generation + 1 \
             RETURNING generation",
        )
        .bind(cluster_id.as_str())
        .bind(relay_id.as_str())
        .bind(bearer_hash.as_slice())
        .fetch_one(&mut *transaction)
        .await?;
        transaction.commit().await?;
        Ok(PutOutcome::Written(StoredRelayCredential {
            cluster_id: cluster_id.clone(),
            relay_id: relay_id.clone(),
            bearer_hash,
            generation: counter_from_sql(generation, "relay credential generation")?,
        }))
    }

    async fn get_relay_credential(
        &self,
        cluster_id: &Id,
        relay_id: &Id,
    ) -> Result<Option<StoredRelayCredential>, StoreError> {
        let row = sqlx::query(
            "SELECT bearer_hash, generation FROM relay_credentials WHERE cluster_id = $1 AND relay_id = $2",
        )
        .bind(cluster_id.as_str())
        .bind(relay_id.as_str())
        .fetch_optional(&mut *self.pool.acquire().await?)
        .await?;
        row.map(|row| {
            Ok(StoredRelayCredential {
                cluster_id: cluster_id.clone(),
                relay_id: relay_id.clone(),
                bearer_hash: hash_from_sql(row.try_get("bearer_hash")?, "relay bearer hash")?,
                generation: counter_from_sql(row.try_get("generation")?, "relay credential generation")?,
            })
        })
        .transpose()
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
        let mut pooled = self.pool.acquire().await?;
        let mut transaction = pooled.begin().await?;
        if lock_cluster(&mut transaction, cluster_id).await?.is_none() {
            transaction.rollback().await?;
            return Ok(None);
        }
        let generation: Option<i64> =
            sqlx::query_scalar("SELECT generation FROM relay_credentials WHERE cluster_id = $1 AND relay_id = $2")
                .bind(cluster_id.as_str())
                .bind(relay_id.as_str())
                .fetch_optional(&mut *transaction)
                .await?;
        if generation != Some(counter_to_sql(credential_generation, "relay credential generation")?) {
            transaction.rollback().await?;
            return Ok(None);
        }
        let highest: i64 =
            sqlx::query_scalar("SELECT COALESCE(MAX(epoch), 0) FROM relay_connections WHERE cluster_id = $1")
                .bind(cluster_id.as_str())
                .fetch_one(&mut *transaction)
                .await?;
        let epoch = counter_from_sql(highest, "relay connection epoch")? + 1;
        let now = counter_to_sql(now_ms, "relay connection time")?;
        sqlx::query(
            "INSERT INTO relay_connections (id, cluster_id, relay_id, epoch, token_hash, connected_at, last_seen_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $6)",
        )
        .bind(connection_id.as_str())
        .bind(cluster_id.as_str())
        .bind(relay_id.as_str())
        .bind(counter_to_sql(epoch, "relay connection epoch")?)
        .bind(token_hash.as_slice())
        .bind(now)
        .execute(&mut *transaction)
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
        let row = sqlx::query(
            "SELECT c.id, c.cluster_id, c.relay_id, c.epoch, c.last_seen_at, \
               (SELECT MAX(m.epoch) FROM relay_connections m WHERE m.cluster_id = c.cluster_id) AS highest_epoch \
             FROM relay_connections c WHERE c.token_hash = $1",
        )
        .bind(token_hash.as_slice())
        .fetch_optional(&mut *self.pool.acquire().await?)
        .await?;
        row.map(|row| {
            Ok(RelayConnectionState {
                connection: connection_from_row(&row)?,
                highest_epoch: counter_from_sql(row.try_get("highest_epoch")?, "relay connection epoch")?,
            })
        })
        .transpose()
    }

    async fn heartbeat_relay(
        &self,
        token_hash: [u8; 32],
        now_ms: u64,
        lease_ms: u64,
    ) -> Result<RelayHeartbeat, StoreError> {
        let row = sqlx::query(
            "UPDATE relay_connections c SET last_seen_at = GREATEST(c.last_seen_at, $2) \
             WHERE c.token_hash = $1 AND $2 - c.last_seen_at < $3 \
               AND c.epoch = (SELECT MAX(m.epoch) FROM relay_connections m WHERE m.cluster_id = c.cluster_id) \
             RETURNING c.id, c.cluster_id, c.relay_id, c.epoch, c.last_seen_at",
        )
        .bind(token_hash.as_slice())
        .bind(counter_to_sql(now_ms, "heartbeat time")?)
        .bind(counter_to_sql(lease_ms, "relay lease")?)
        .fetch_optional(&mut *self.pool.acquire().await?)
        .await?;
        if let Some(row) = row {
            return Ok(RelayHeartbeat::Alive(connection_from_row(&row)?));
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
        let mut pooled = self.pool.acquire().await?;
        let mut transaction = pooled.begin().await?;
        if lock_cluster(&mut transaction, cluster_id).await?.is_none() {
            transaction.rollback().await?;
            return Ok(PutOutcome::Missing(MissingKind::Cluster));
        }
        let current = sqlx::query(
            "SELECT hostname, service_id, protocol, port FROM ingress_routes WHERE cluster_id = $1 AND hostname = $2",
        )
        .bind(cluster_id.as_str())
        .bind(&route.hostname)
        .fetch_optional(&mut *transaction)
        .await?
        .map(|row| route_from_row(&row))
        .transpose()?;
        if current.as_ref() != Some(route) {
            bump_revision(&mut transaction, cluster_id).await?;
            sqlx::query(
                "INSERT INTO ingress_routes (cluster_id, hostname, service_id, protocol, port) \
                 VALUES ($1, $2, $3, $4, $5) \
                 ON CONFLICT (cluster_id, hostname) DO UPDATE \
                   SET service_id = EXCLUDED.service_id, protocol = EXCLUDED.protocol, port = EXCLUDED.port",
            )
            .bind(cluster_id.as_str())
            .bind(&route.hostname)
            .bind(route.service_id.as_str())
            .bind(route.protocol.as_str())
            .bind(i32::from(route.port))
            .execute(&mut *transaction)
            .await?;
        }
        let table = read_table(&mut transaction, cluster_id)
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
        let mut pooled = self.pool.acquire().await?;
        let mut transaction = pooled.begin().await?;
        if lock_cluster(&mut transaction, cluster_id).await?.is_none() {
            transaction.rollback().await?;
            return Ok(PutOutcome::Missing(MissingKind::Cluster));
        }
        let deleted = sqlx::query("DELETE FROM ingress_routes WHERE cluster_id = $1 AND hostname = $2")
            .bind(cluster_id.as_str())
            .bind(hostname)
            .execute(&mut *transaction)
            .await?;
        if deleted.rows_affected() > 0 {
            bump_revision(&mut transaction, cluster_id).await?;
        }
        let table = read_table(&mut transaction, cluster_id).await?;
        transaction.commit().await?;
        Ok(PutOutcome::Written(table))
    }

    async fn get_route_table(&self, cluster_id: &Id) -> Result<Option<StoredRouteTable>, StoreError> {
        // One transaction, so the revision and the routes are of one moment.
        let mut pooled = self.pool.acquire().await?;
        let mut transaction = pooled.begin().await?;
        sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY").execute(&mut *transaction).await?;
        let table = read_table(&mut transaction, cluster_id).await?;
        transaction.commit().await?;
        Ok(table)
    }

    async fn route_table_revision(&self, cluster_id: &Id) -> Result<Option<u64>, StoreError> {
        let mut connection = self.pool.acquire().await?;
        table_revision(&mut connection, cluster_id).await
    }
}
