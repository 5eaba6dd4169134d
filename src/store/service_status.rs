//! The store's part for service runtime statuses (`06-storage-claims.md`, "IServiceRuntimeStatus"):
//! the facts a verdict needs beyond [`AssignmentFacts`](super::assignments::AssignmentFacts) (the
//! latest reported state of every head assignment, every node's current session) and the last
//! verdict of every service (`domain::service_status` judges; this file only reads and records).
//!
//! **`changedAt` moves only when the verdict changes.** [`ServiceStatusStore::record_statuses`]
//! upserts each verdict with a guarded `ON CONFLICT … DO UPDATE … WHERE` that rewrites a row only
//! when its spec revision, state or reason differ, so recording an unchanged verdict keeps its
//! time. Two processes recording at once each write a verdict they judged from committed facts;
//! the next recomputation (every read recomputes) settles on the current one.

use super::codec::counter_to_sql;
use super::inventory::service_id_from_row;
use super::sessions::{ReportedState, current_session_from_row, reported_state_from_row};
use super::sql::{HoldsConnection, Row, Statement, rows_by_ids};
use super::{FactScope, SqlStore, StoreError};
use crate::contract::reader::compare_bytes;
use crate::contract::session::RuntimeSessionReference;
use crate::contract::{Id, NodeId};
use async_trait::async_trait;
use std::collections::BTreeSet;

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
    /// The reported states of the head assignments of the scope's services, and the current
    /// sessions of the nodes those heads are on (every node for the whole cluster).
    async fn status_facts(&self, cluster_id: &Id, scope: &FactScope) -> Result<StatusFacts, StoreError>;

    /// Records `verdicts` (of services of `scope`) where they differ from the stored ones (their
    /// `changed_at` is then the time of the change; an unchanged verdict keeps its stored time),
    /// forgets the statuses of the scope's services not among them (deleted), and answers every
    /// recorded status of the scope, sorted by service id.
    async fn record_statuses(
        &self,
        cluster_id: &Id,
        scope: &FactScope,
        verdicts: &[RecordedStatus],
    ) -> Result<Vec<RecordedStatus>, StoreError>;

    /// The recorded statuses of the scope's services, sorted by service id.
    async fn recorded_statuses(&self, cluster_id: &Id, scope: &FactScope) -> Result<Vec<RecordedStatus>, StoreError>;

    /// The services of the cluster whose recorded verdict names one of `reasons`.
    async fn services_with_reasons(&self, cluster_id: &Id, reasons: &[&str]) -> Result<BTreeSet<Id>, StoreError>;
}

/// The recorded statuses of the scope's services, sorted by service id.
async fn recorded_statuses(
    on: &mut impl HoldsConnection,
    cluster_id: &Id,
    scope: &FactScope,
) -> Result<Vec<RecordedStatus>, StoreError> {
    let sql = "SELECT service_id, spec_revision, state, reason, changed_at FROM service_runtime_statuses \
               WHERE cluster_id = $1";
    let rows = match scope {
        FactScope::Cluster => Statement::new(sql).text(cluster_id.as_str()).fetch_all(on).await?,
        FactScope::Services(ids) => {
            let ids: Vec<&str> = ids.iter().map(Id::as_str).collect();
            rows_by_ids(on, cluster_id, &format!("{sql} AND {{ids}}"), "service_id", &ids).await?
        }
    };
    let mut recorded = rows.iter().map(recorded_status_from_row).collect::<Result<Vec<_>, _>>()?;
    recorded.sort_by(|left, right| compare_bytes(left.service_id.as_str(), right.service_id.as_str()));
    Ok(recorded)
}

#[async_trait]
impl ServiceStatusStore for SqlStore {
    async fn status_facts(&self, cluster_id: &Id, scope: &FactScope) -> Result<StatusFacts, StoreError> {
        let mut connection = self.pool.connection().await?;
        // The head's state by a probe of the heads' key per state row, never a plain join
        // (see `sql::head_record`).
        let states_sql = "SELECT s.assignment_id, s.generation, s.state, s.session_id, s.session_generation, \
                 s.reported_at \
             FROM runtime_assignment_states s \
             WHERE s.cluster_id = $1 AND s.generation = (SELECT h.generation FROM runtime_assignment_heads h \
               WHERE h.cluster_id = s.cluster_id AND h.assignment_id = s.assignment_id)";
        let sessions_sql = "SELECT node_id, generation, session_id, controller_kind, controller_id, runtime_namespace \
             FROM runtime_sessions s WHERE cluster_id = $1 AND generation = \
               (SELECT MAX(generation) FROM runtime_sessions c WHERE c.cluster_id = s.cluster_id AND c.node_id = s.node_id)";
        let (state_rows, session_rows) = match scope {
            FactScope::Cluster => (
                Statement::new(states_sql).text(cluster_id.as_str()).fetch_all(&mut connection).await?,
                Statement::new(sessions_sql).text(cluster_id.as_str()).fetch_all(&mut connection).await?,
            ),
            FactScope::Services(ids) => {
                let ids: Vec<&str> = ids.iter().map(Id::as_str).collect();
                // The rows of `sql` whose `column` is that of a head of the scope's services.
                let mut of_scope = async |sql: &str, column: &str| {
                    let sql = format!(
                        "{sql} AND s.{column} IN (SELECT h.{column} FROM runtime_assignment_heads h \
                           WHERE h.cluster_id = $1 AND {{ids}})"
                    );
                    rows_by_ids(&mut connection, cluster_id, &sql, "h.service_id", &ids).await
                };
                (of_scope(states_sql, "assignment_id").await?, of_scope(sessions_sql, "node_id").await?)
            }
        };
        let mut head_states = state_rows.iter().map(head_state_from_row).collect::<Result<Vec<_>, _>>()?;
        head_states.sort_by(|left: &HeadState, right| {
            compare_bytes(left.assignment_id.as_str(), right.assignment_id.as_str())
        });
        head_states.dedup_by(|later, earlier| later.assignment_id == earlier.assignment_id);
        let mut sessions =
            session_rows.iter().map(|row| current_session_from_row(cluster_id, row)).collect::<Result<Vec<_>, _>>()?;
        sessions.sort_by(|left, right| compare_bytes(left.0.as_str(), right.0.as_str()));
        sessions.dedup_by(|later, earlier| later.0 == earlier.0);
        Ok(StatusFacts { head_states, sessions })
    }

    async fn record_statuses(
        &self,
        cluster_id: &Id,
        scope: &FactScope,
        verdicts: &[RecordedStatus],
    ) -> Result<Vec<RecordedStatus>, StoreError> {
        let before = recorded_statuses(&mut self.pool.connection().await?, cluster_id, scope).await?;
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
        let after = recorded_statuses(&mut transaction, cluster_id, scope).await?;
        transaction.commit().await?;
        Ok(after)
    }

    async fn recorded_statuses(&self, cluster_id: &Id, scope: &FactScope) -> Result<Vec<RecordedStatus>, StoreError> {
        recorded_statuses(&mut self.pool.connection().await?, cluster_id, scope).await
    }

    async fn services_with_reasons(&self, cluster_id: &Id, reasons: &[&str]) -> Result<BTreeSet<Id>, StoreError> {
        let rows = rows_by_ids(
            &mut self.pool.connection().await?,
            cluster_id,
            "SELECT service_id FROM service_runtime_statuses WHERE cluster_id = $1 AND {ids}",
            "reason",
            reasons,
        )
        .await?;
        rows.iter().map(service_id_from_row).collect()
    }
}

/// True when two records carry one verdict (the time aside).
fn same_verdict(left: &RecordedStatus, right: &RecordedStatus) -> bool {
    left.service_id == right.service_id
        && left.spec_revision == right.spec_revision
        && left.state == right.state
        && left.reason == right.reason
}

/// The reported state of a head generation: `assignment_id`, `generation` and
/// [`reported_state_from_row`]'s columns.
pub(crate) fn head_state_from_row(row: &Row) -> Result<HeadState, StoreError> {
    Ok(HeadState {
        assignment_id: row.id("assignment_id", "assignment id")?,
        generation: row.counter("generation", "assignment generation")?,
        reported: reported_state_from_row(row)?
            .ok_or_else(|| StoreError::Corrupt("a reported state without its state".into()))?,
    })
}

/// A recorded service status: `service_id`, `spec_revision`, `state`, `reason`, `changed_at`.
pub(crate) fn recorded_status_from_row(row: &Row) -> Result<RecordedStatus, StoreError> {
    Ok(RecordedStatus {
        service_id: row.id("service_id", "status service id")?,
        spec_revision: row.counter("spec_revision", "status spec revision")?,
        state: row.text("state")?,
        reason: row.optional_text("reason")?,
        changed_at: row.counter("changed_at", "status change time")?,
    })
}
