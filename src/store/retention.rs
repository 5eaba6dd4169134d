//! The store's part for retention (issue "Production", item 6): deleting accepted ingress
//! registrations and superseded relay connections older than an age, in bounded batches
//! (`domain::retention` decides when and how old; this file only deletes what it is told).
//!
//! **What is never deleted**: the newest registration of each (cluster, node), the connection of
//! each cluster with the highest epoch (the only one that can be elected), and a connection a
//! remaining registration names (its foreign key). Each call deletes at most `batch` rows in one
//! statement, so a large backlog never holds a long transaction or lock.

use super::codec::counter_to_sql;
use super::sql::Statement;
use super::{SqlStore, StoreError};
use async_trait::async_trait;

/// Persistence side of retention.
#[async_trait]
pub trait RetentionStore: Send + Sync {
    /// Deletes at most `batch` accepted registrations registered before `before_ms`, never the
    /// newest of a (cluster, node), oldest first; answers how many it deleted.
    async fn prune_registrations(&self, before_ms: u64, batch: u64) -> Result<u64, StoreError>;

    /// Deletes at most `batch` relay connections last seen before `before_ms` that are not their
    /// cluster's highest epoch and that no registration names, oldest first; answers how many.
    async fn prune_relay_connections(&self, before_ms: u64, batch: u64) -> Result<u64, StoreError>;
}

#[async_trait]
impl RetentionStore for SqlStore {
    async fn prune_registrations(&self, before_ms: u64, batch: u64) -> Result<u64, StoreError> {
        Statement::new(
            "DELETE FROM ingress_registrations WHERE sequence IN ( \
               SELECT r.sequence FROM ingress_registrations r \
               WHERE r.registered_at < $1 AND r.sequence < ( \
                 SELECT MAX(n.sequence) FROM ingress_registrations n \
                 WHERE n.cluster_id = r.cluster_id AND n.node_id = r.node_id) \
               ORDER BY r.sequence LIMIT $2)",
        )
        .integer(counter_to_sql(before_ms, "retention cutoff")?)
        .integer(counter_to_sql(batch, "retention batch")?)
        .execute(&mut self.pool.connection().await?)
        .await
    }

    async fn prune_relay_connections(&self, before_ms: u64, batch: u64) -> Result<u64, StoreError> {
        Statement::new(
            "DELETE FROM relay_connections WHERE id IN ( \
               SELECT c.id FROM relay_connections c \
               WHERE c.last_seen_at < $1 \
                 AND c.epoch < (SELECT MAX(e.epoch) FROM relay_connections e WHERE e.cluster_id = c.cluster_id) \
                 AND NOT EXISTS (SELECT 1 FROM ingress_registrations r WHERE r.relay_connection_id = c.id) \
               ORDER BY c.last_seen_at, c.id LIMIT $2)",
        )
        .integer(counter_to_sql(before_ms, "retention cutoff")?)
        .integer(counter_to_sql(batch, "retention batch")?)
        .execute(&mut self.pool.connection().await?)
        .await
    }
}
