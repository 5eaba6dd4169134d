//! The store's part for service runtime statuses (`06-storage-claims.md`, "IServiceRuntimeStatus"):
//! the facts a verdict needs beyond [`AssignmentFacts`](super::sessions::AssignmentFacts) (the
//! latest reported state of every head assignment, every node's current session) and the last
//! verdict of every service (`domain::service_status` judges; this file only reads and records).
//!
//! **`changedAt` moves only when the verdict changes.** [`ServiceStatusStore::record_statuses`]
//! upserts each verdict with a guarded `ON CONFLICT … DO UPDATE … WHERE` that rewrites a row only
//! when its spec revision, state or reason differ, so recording an unchanged verdict keeps its
//! time. Two processes recording at once each write a verdict they judged from committed facts;
//! the next recomputation (every read recomputes) settles on the current one.

use super::codec::counter_to_sql;
use super::sessions::ReportedState;
use super::sql::{HoldsConnection, Statement};
use super::{SqlStore, StoreError, rows};
use crate::contract::session::RuntimeSessionReference;
use crate::contract::{Id, NodeId};
use async_trait::async_trait;

/// The latest reported state of one head assignment generation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeadState {
    /// The assignment.
    pub assignment_id: Id,
    /// Its head generation.
    pub generation: u64,
    /// What the node reported for it.
    pub reported: ReportedState,
}

/// One service's recorded verdict, in the stored spelling (`domain::service_status` reads it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedStatus {
    /// The service.
    pub service_id: Id,
    /// The spec revision judged.
    pub spec_revision: u64,
    /// `converged`, `converging`, `waiting` or `refused`.
    pub state: String,
    /// The reason, `None` for `converged` and `converging`.
    pub reason: Option<String>,
    /// When the verdict last changed, ms since the Unix epoch.
    pub changed_at: u64,
}

/// What a status recomputation reads besides the assignment facts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StatusFacts {
    /// The reported state of every head generation that has one, sorted by assignment id.
    pub head_states: Vec<HeadState>,
    /// Every node's current session (the highest generation), sorted by node id.
    pub sessions: Vec<(NodeId, RuntimeSessionReference)>,
}

/// Persistence of service runtime statuses.
#[async_trait]
pub trait ServiceStatusStore: Send + Sync {
    /// The reported head states and current sessions of the cluster's nodes.
    async fn status_facts(&self, cluster_id: &Id) -> Result<StatusFacts, StoreError>;

    /// Records `verdicts` where they differ from the stored ones (their `changed_at` is then the
    /// time of the change; an unchanged verdict keeps its stored time), forgets the statuses of services not among them (deleted), and answers every
    /// recorded status of the cluster, sorted by service id.
    async fn record_statuses(
        &self,
        cluster_id: &Id,
        verdicts: &[RecordedStatus],
    ) -> Result<Vec<RecordedStatus>, StoreError>;
}

/// The recorded statuses of the cluster, sorted by service id.
async fn recorded_statuses(
    on: &mut impl HoldsConnection,
    bytewise: &str,
    cluster_id: &Id,
) -> Result<Vec<RecordedStatus>, StoreError> {
    Statement::composed(format!(
        "SELECT service_id, spec_revision, state, reason, changed_at FROM service_runtime_statuses \
         WHERE cluster_id = $1 ORDER BY service_id{bytewise}"
    ))
    .text(cluster_id.as_str())
    .fetch_all(on)
    .await?
    .iter()
    .map(rows::recorded_status)
    .collect()
}

#[async_trait]
impl ServiceStatusStore for SqlStore {
    async fn status_facts(&self, cluster_id: &Id) -> Result<StatusFacts, StoreError> {
        let bytewise = self.pool.backend().bytewise();
        let mut connection = self.pool.connection().await?;
        let head_states = Statement::composed(format!(
            // The head's state by a probe of the heads' key per state row, never a plain join
            // (see `sql::head_record`).
            "SELECT s.assignment_id, s.generation, s.state, s.session_id, s.session_generation, s.reported_at \
             FROM runtime_assignment_states s \
             WHERE s.cluster_id = $1 AND s.generation = (SELECT h.generation FROM runtime_assignment_heads h \
               WHERE h.cluster_id = s.cluster_id AND h.assignment_id = s.assignment_id) \
             ORDER BY s.assignment_id{bytewise}"
        ))
        .text(cluster_id.as_str())
        .fetch_all(&mut connection)
        .await?
        .iter()
        .map(rows::head_state)
        .collect::<Result<Vec<_>, _>>()?;
        let sessions = Statement::composed(format!(
            "SELECT node_id, generation, session_id, controller_kind, controller_id, runtime_namespace \
             FROM runtime_sessions s WHERE cluster_id = $1 AND generation = \
               (SELECT MAX(generation) FROM runtime_sessions c WHERE c.cluster_id = s.cluster_id AND c.node_id = s.node_id) \
             ORDER BY node_id{bytewise}"
        ))
        .text(cluster_id.as_str())
        .fetch_all(&mut connection)
        .await?
        .iter()
        .map(|row| rows::current_session(cluster_id, row))
        .collect::<Result<Vec<_>, _>>()?;
        Ok(StatusFacts { head_states, sessions })
    }

    async fn record_statuses(
        &self,
        cluster_id: &Id,
        verdicts: &[RecordedStatus],
    ) -> Result<Vec<RecordedStatus>, StoreError> {
        let bytewise = self.pool.backend().bytewise();
        let before = recorded_statuses(&mut self.pool.connection().await?, bytewise, cluster_id).await?;
        let changed: Vec<&RecordedStatus> =
            verdicts.iter().filter(|verdict| !before.iter().any(|recorded| same_verdict(recorded, verdict))).collect();
        let forgotten: Vec<&RecordedStatus> = before
            .iter()
            .filter(|recorded| !verdicts.iter().any(|verdict| verdict.service_id == recorded.service_id))
            .collect();
        if changed.is_empty() && forgotten.is_empty() {
            // The usual case: nothing to write, so no write transaction either.
            return Ok(before);
        }
        let mut transaction = self.pool.begin_write().await?;
        for verdict in changed {
            Statement::new(
                "INSERT INTO service_runtime_statuses \
                   (cluster_id, service_id, spec_revision, state, reason, changed_at) VALUES ($1, $2, $3, $4, $5, $6) \
                 ON CONFLICT (cluster_id, service_id) DO UPDATE SET spec_revision = excluded.spec_revision, \
                   state = excluded.state, reason = excluded.reason, changed_at = excluded.changed_at \
                 WHERE service_runtime_statuses.spec_revision <> excluded.spec_revision \
                    OR service_runtime_statuses.state <> excluded.state \
                    OR COALESCE(service_runtime_statuses.reason, '') <> COALESCE(excluded.reason, '')",
            )
            .text(cluster_id.as_str())
            .text(verdict.service_id.as_str())
            .integer(counter_to_sql(verdict.spec_revision, "status spec revision")?)
            .text(&verdict.state)
            .optional_text(verdict.reason.as_deref())
            .integer(counter_to_sql(verdict.changed_at, "status change time")?)
            .execute(&mut transaction)
            .await?;
        }
        for recorded in forgotten {
            Statement::new("DELETE FROM service_runtime_statuses WHERE cluster_id = $1 AND service_id = $2")
                .text(cluster_id.as_str())
                .text(recorded.service_id.as_str())
                .execute(&mut transaction)
                .await?;
        }
        let after = recorded_statuses(&mut transaction, bytewise, cluster_id).await?;
        transaction.commit().await?;
        Ok(after)
    }
}

/// True when two records carry one verdict (the time aside).
fn same_verdict(left: &RecordedStatus, right: &RecordedStatus) -> bool {
    left.service_id == right.service_id
        && left.spec_revision == right.spec_revision
        && left.state == right.state
        && left.reason == right.reason
}
