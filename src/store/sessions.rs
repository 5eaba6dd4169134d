//! Node sessions and the states nodes report for their assignments (`04-registration.md`, "Node
//! sessions and assignments").
//!
//! Sessions: every open inserts the next generation of the node's session under a lock on the
//! node row ([`Backend::lock_rows`](super::Backend::lock_rows) inside a write transaction), only
//! while the node's bearer hash is the one the caller checked, so a bearer rotated out refuses;
//! the primary key `(cluster, node, generation)` is the second guard. The current session is the
//! highest. A reported state is kept as the text the domain gives (the schema admits the four
//! states of the spec); a state reported under an older session never replaces one reported
//! under a newer session. Assignments themselves are `assignments`'.

use super::codec::counter_to_sql;
use super::inventory::node_from_row;
use super::sql::{HoldsConnection, Row, Statement};
use super::{SqlStore, StoreError};
use crate::contract::session::{ControllerKind, ControllerReference, RuntimeSessionReference};
use crate::contract::{Id, NodeId};
use async_trait::async_trait;
use subtle::ConstantTimeEq;

/// The latest state reported for one assignment generation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReportedState {
    /// The state, as the domain recorded it (`domain::plan::assignments::AssignmentState` spells it).
    pub state: String,
    /// The id of the session that reported it.
    pub session_id: Id,
    /// That session's generation.
    pub session_generation: u64,
    /// When, ms since the epoch.
    pub reported_at: u64,
}

/// Persistence of node sessions and the states nodes report for their assignments.
#[async_trait]
pub trait SessionStore: Send + Sync {
    /// Opens the node's next session: generation = the highest so far + 1 (or 1), with the
    /// node's runtime namespace, atomically under the node's lock, while the node's bearer hash
    /// is still `bearer_hash` (the one the caller checked the presented bearer against; compared
    /// in constant time). `None`, with nothing written, when the node does not exist or its
    /// bearer hash is another.
    async fn open_session(
        &self,
        cluster_id: &Id,
        node_id: &NodeId,
        bearer_hash: &[u8; 32],
        session_id: &Id,
        controller: &ControllerReference,
        opened_at: u64,
    ) -> Result<Option<RuntimeSessionReference>, StoreError>;

    /// The node's current session (the highest generation), if it ever opened one.
    async fn current_session(
        &self,
        cluster_id: &Id,
        node_id: &NodeId,
    ) -> Result<Option<RuntimeSessionReference>, StoreError>;

    /// Records `state` as the latest reported state of the assignment generation, reported
    /// under `session`, unless the state recorded for it came under a newer session generation
    /// (a late report of an older session changes nothing).
    async fn record_assignment_state(
        &self,
        cluster_id: &Id,
        assignment_id: &Id,
        generation: u64,
        state: &str,
        session: &RuntimeSessionReference,
        reported_at: u64,
    ) -> Result<(), StoreError>;

    /// The latest state reported for the assignment generation.
    async fn assignment_state(
        &self,
        cluster_id: &Id,
        assignment_id: &Id,
        generation: u64,
    ) -> Result<Option<ReportedState>, StoreError>;
}

#[async_trait]
impl SessionStore for SqlStore {
    async fn open_session(
        &self,
        cluster_id: &Id,
        node_id: &NodeId,
        bearer_hash: &[u8; 32],
        session_id: &Id,
        controller: &ControllerReference,
        opened_at: u64,
    ) -> Result<Option<RuntimeSessionReference>, StoreError> {
        let backend = self.pool.backend();
        let mut transaction = self.pool.begin_write().await?;
        let node = Statement::composed(format!(
            "SELECT record, bearer_hash, revision FROM cluster_nodes WHERE cluster_id = $1 AND node_id = $2{}",
            backend.lock_rows()
        ))
        .text(cluster_id.as_str())
        .text(node_id.as_str())
        .fetch_optional(&mut transaction)
        .await?;
        let node = node.map(|row| node_from_row(cluster_id, &row)).transpose()?;
        let Some(node) = node.filter(|node| bool::from(node.bearer_hash.ct_eq(bearer_hash))) else {
            transaction.rollback().await?;
            return Ok(None);
        };
        let highest = Statement::new(
            "SELECT COALESCE(MAX(generation), 0) AS highest FROM runtime_sessions WHERE cluster_id = $1 AND node_id = $2",
        )
        .text(cluster_id.as_str())
        .text(node_id.as_str())
        .fetch_one(&mut transaction)
        .await?;
        let generation = highest.counter("highest", "session generation")? + 1;
        let runtime_namespace = node.node.runtime_namespace;
        Statement::new(
            "INSERT INTO runtime_sessions (cluster_id, node_id, generation, session_id, controller_kind, \
               controller_id, runtime_namespace, opened_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
        )
        .text(cluster_id.as_str())
        .text(node_id.as_str())
        .integer(counter_to_sql(generation, "session generation")?)
        .text(session_id.as_str())
        .text(controller.kind.as_str())
        .text(controller.id.as_str())
        .text(runtime_namespace.as_str())
        .integer(counter_to_sql(opened_at, "session time")?)
        .execute(&mut transaction)
        .await?;
        transaction.commit().await?;
        Ok(Some(RuntimeSessionReference {
            id: session_id.clone(),
            generation,
            controller: controller.clone(),
            cluster_id: cluster_id.clone(),
            node_id: node_id.clone(),
            runtime_namespace,
        }))
    }

    async fn current_session(
        &self,
        cluster_id: &Id,
        node_id: &NodeId,
    ) -> Result<Option<RuntimeSessionReference>, StoreError> {
        current_session_on(&mut self.pool.connection().await?, cluster_id, node_id).await
    }

    async fn record_assignment_state(
        &self,
        cluster_id: &Id,
        assignment_id: &Id,
        generation: u64,
        state: &str,
        session: &RuntimeSessionReference,
        reported_at: u64,
    ) -> Result<(), StoreError> {
        Statement::new(
            "INSERT INTO runtime_assignment_states \
               (cluster_id, assignment_id, generation, state, session_id, session_generation, reported_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7) \
             ON CONFLICT (cluster_id, assignment_id, generation) DO UPDATE SET state = EXCLUDED.state, \
               session_id = EXCLUDED.session_id, session_generation = EXCLUDED.session_generation, \
               reported_at = EXCLUDED.reported_at \
             WHERE runtime_assignment_states.session_generation <= EXCLUDED.session_generation",
        )
        .text(cluster_id.as_str())
        .text(assignment_id.as_str())
        .integer(counter_to_sql(generation, "assignment generation")?)
        .text(state)
        .text(session.id.as_str())
        .integer(counter_to_sql(session.generation, "session generation")?)
        .integer(counter_to_sql(reported_at, "report time")?)
        .execute(&mut self.pool.connection().await?)
        .await?;
        Ok(())
    }

    async fn assignment_state(
        &self,
        cluster_id: &Id,
        assignment_id: &Id,
        generation: u64,
    ) -> Result<Option<ReportedState>, StoreError> {
        let row = Statement::new(
            "SELECT state, session_id, session_generation, reported_at FROM runtime_assignment_states \
             WHERE cluster_id = $1 AND assignment_id = $2 AND generation = $3",
        )
        .text(cluster_id.as_str())
        .text(assignment_id.as_str())
        .integer(counter_to_sql(generation, "assignment generation")?)
        .fetch_optional(&mut self.pool.connection().await?)
        .await?;
        Ok(row.map(|row| reported_state_from_row(&row)).transpose()?.flatten())
    }
}

/// The node's current session (the highest generation), if it ever opened one.
pub(crate) async fn current_session_on(
    on: &mut impl HoldsConnection,
    cluster_id: &Id,
    node_id: &NodeId,
) -> Result<Option<RuntimeSessionReference>, StoreError> {
    Statement::new(
        "SELECT generation, session_id, controller_kind, controller_id, runtime_namespace FROM runtime_sessions \
         WHERE cluster_id = $1 AND node_id = $2 ORDER BY generation DESC LIMIT 1",
    )
    .text(cluster_id.as_str())
    .text(node_id.as_str())
    .fetch_optional(on)
    .await?
    .map(|row| session_from_row(cluster_id, node_id, &row))
    .transpose()
}

/// A node session of `node_id`: `session_id`, `generation`, `controller_kind`, `controller_id`,
/// `runtime_namespace`.
pub(crate) fn session_from_row(
    cluster_id: &Id,
    node_id: &NodeId,
    row: &Row,
) -> Result<RuntimeSessionReference, StoreError> {
    let kind = ControllerKind::parse(&row.text("controller_kind")?)
        .ok_or_else(|| StoreError::Corrupt("stored session controller kind is unknown".into()))?;
    Ok(RuntimeSessionReference {
        id: row.id("session_id", "session id")?,
        generation: row.counter("generation", "session generation")?,
        controller: ControllerReference { kind, id: row.id("controller_id", "controller id")? },
        cluster_id: cluster_id.clone(),
        node_id: node_id.clone(),
        runtime_namespace: row.id("runtime_namespace", "runtime namespace")?,
    })
}

/// A node's current session: `node_id` and [`session_from_row`]'s columns.
pub(crate) fn current_session_from_row(
    cluster_id: &Id,
    row: &Row,
) -> Result<(NodeId, RuntimeSessionReference), StoreError> {
    let node_id = row.node_id("node_id", "session node id")?;
    let session = session_from_row(cluster_id, &node_id, row)?;
    Ok((node_id, session))
}

/// The latest reported state of an assignment generation: `state`, `session_id`,
/// `session_generation`, `reported_at` (all NULL when none was reported).
pub(crate) fn reported_state_from_row(row: &Row) -> Result<Option<ReportedState>, StoreError> {
    reported_state_from_columns(row, "session_id")
}

/// [`reported_state_from_row`] with the state's session id in column `session_id_column`, for a
/// row that also holds a session of its own.
pub(crate) fn reported_state_from_columns(
    row: &Row,
    session_id_column: &str,
) -> Result<Option<ReportedState>, StoreError> {
    let Some(state) = row.optional_text("state")? else { return Ok(None) };
    Ok(Some(ReportedState {
        state,
        session_id: row.id(session_id_column, "state session id")?,
        session_generation: row.counter("session_generation", "session generation")?,
        reported_at: row.counter("reported_at", "report time")?,
    }))
}
