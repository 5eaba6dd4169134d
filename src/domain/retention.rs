//! Retention: accepted ingress registrations and superseded relay connections are deleted once
//! they are older than a configured age, so those tables stay bounded (README, "Retention").
//!
//! A run deletes registrations first (never the newest of a (cluster, node)), then relay
//! connections (never a cluster's highest epoch, never one a remaining registration names), each
//! in batches of [`RetentionSettings::batch`] rows, one statement per batch, until a batch deletes
//! fewer. `cloudly serve` runs it every [`RetentionSettings::interval_ms`]; several controllers on
//! one database may run it at once (each delete is idempotent). A pruned connection's token is then
//! unknown (`principal-refused`) rather than `relay-connection-lost`.

use super::{Controller, DomainError};

/// How long records are kept and how retention runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetentionSettings {
    /// Accepted registrations older than this (ms) are deleted, but the newest of each node.
    pub registration_age_ms: u64,
    /// Superseded relay connections last seen longer ago than this (ms) are deleted.
    pub relay_connection_age_ms: u64,
    /// The time between two runs of `cloudly serve` (ms).
    pub interval_ms: u64,
    /// The most rows one statement deletes.
    pub batch: u64,
}

impl Default for RetentionSettings {
    fn default() -> Self {
        RetentionSettings {
            registration_age_ms: 30 * 24 * 3_600_000,
            relay_connection_age_ms: 7 * 24 * 3_600_000,
            interval_ms: 10 * 60_000,
            batch: 1_000,
        }
    }
}

/// What one run deleted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pruned {
    /// Accepted registrations.
    pub registrations: u64,
    /// Relay connections.
    pub relay_connections: u64,
}

/// What a retention run deletes.
#[derive(Debug, Clone, Copy)]
enum Retained {
    Registrations,
    RelayConnections,
}

impl Controller {
    /// Deletes `kind` older than `before_ms`, `batch` rows per statement, until a statement
    /// deletes fewer; answers how many.
    async fn prune_in_batches(&self, kind: Retained, before_ms: u64, batch: u64) -> Result<u64, DomainError> {
        let mut total = 0;
        loop {
            let deleted = match kind {
                Retained::Registrations => self.store.prune_registrations(before_ms, batch).await?,
                Retained::RelayConnections => self.store.prune_relay_connections(before_ms, batch).await?,
            };
            total += deleted;
            if deleted < batch {
                return Ok(total);
            }
            tokio::task::yield_now().await;
        }
    }

    /// Runs retention once, now (by the controller's clock).
    pub async fn prune_retained(&self) -> Result<Pruned, DomainError> {
        let settings = self.settings.retention;
        let now = self.clock.now_ms();
        let batch = settings.batch.max(1);
        let pruned = Pruned {
            registrations: self
                .prune_in_batches(Retained::Registrations, now.saturating_sub(settings.registration_age_ms), batch)
                .await?,
            relay_connections: self
                .prune_in_batches(
                    Retained::RelayConnections,
                    now.saturating_sub(settings.relay_connection_age_ms),
                    batch,
                )
                .await?,
        };
        metrics::counter!("cloudly_pruned_total", "kind" => "registration").increment(pruned.registrations);
        metrics::counter!("cloudly_pruned_total", "kind" => "relay_connection").increment(pruned.relay_connections);
        if pruned != Pruned::default() {
            tracing::info!(
                registrations = pruned.registrations,
                relay_connections = pruned.relay_connections,
                "retention pruned old records"
            );
        }
        Ok(pruned)
    }
}
