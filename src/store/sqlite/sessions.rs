//! [`SessionStore`](crate::store::sessions::SessionStore) for [`SqliteStore`](super::SqliteStore).
//!
//! Sessions open and assignments commit in `BEGIN IMMEDIATE` transactions, which hold the
//! database's write lock, with guarded statements checked by their row counts.

use super::{SqliteStore, cluster_from_row, head_designation, lock_cluster, node_from_row};
use crate::contract::inventory::ServiceRuntimeSpec;
use crate::contract::session::{ControllerKind, ControllerReference, RuntimeSessionReference};
use crate::contract::{Id, NodeId};
use crate::store::codec::{counter_from_sql, counter_to_sql, read_node, read_service_spec, record_text};
use crate::store::sessions::{
    AssignmentChange, AssignmentFacts, AssignmentJudge, AssignmentState, ReportedState, SessionStore, StoredAssignment,
    check_assignment_changes, read_signed_assignment, signature_text,
};
use crate::store::{StoreError, StoredNode};
use async_trait::async_trait;
use sqlx::Row;
use sqlx::sqlite::{SqliteConnection, SqliteRow};

fn id_from_sql(text: String, what: &str) -> Result<Id, StoreError> {
    Id::parse(&text).ok_or_else(|| StoreError::Corrupt(format!("stored {what} is not an Id")))
}

fn session_from_row(cluster_id: &Id, node_id: &NodeId, row: &SqliteRow) -> Result<RuntimeSessionReference, StoreError> {
    let kind = ControllerKind::parse(&row.try_get::<String, _>("controller_kind")?)
        .ok_or_else(|| StoreError::Corrupt("stored session controller kind is unknown".into()))?;
    Ok(RuntimeSessionReference {
        id: id_from_sql(row.try_get("session_id")?, "session id")?,
        generation: counter_from_sql(row.try_get("generation")?, "session generation")?,
        controller: ControllerReference { kind, id: id_from_sql(row.try_get("controller_id")?, "controller id")? },
        cluster_id: cluster_id.clone(),
        node_id: node_id.clone(),
        runtime_namespace: id_from_sql(row.try_get("runtime_namespace")?, "runtime namespace")?,
    })
}

fn assignment_from_row(row: &SqliteRow) -> Result<StoredAssignment, StoreError> {
    Ok(StoredAssignment {
        signed: read_signed_assignment(&row.try_get::<String, _>("record")?, &row.try_get::<String, _>("signature")?)?,
        active: row.try_get("active")?,
    })
}

/// Reads the facts of a reconcile; `lock` takes the cluster row's lock first.
async fn read_facts(
    connection: &mut SqliteConnection,
    cluster_id: &Id,
    lock: bool,
) -> Result<AssignmentFacts, StoreError> {
    let cluster = if lock {
        lock_cluster(connection, cluster_id).await?
    } else {
        sqlx::query("SELECT record, revision FROM clusters WHERE id = $1")
            .bind(cluster_id.as_str())
            .fetch_optional(&mut *connection)
            .await?
            .map(|row| cluster_from_row(&row))
            .transpose()?
    };
    let nodes =
        sqlx::query("SELECT record, bearer_hash, revision FROM cluster_nodes WHERE cluster_id = $1 ORDER BY node_id")
            .bind(cluster_id.as_str())
            .fetch_all(&mut *connection)
            .await?
            .iter()
            .map(|row| node_from_row(cluster_id, row))
            .collect::<Result<Vec<StoredNode>, StoreError>>()?;
    let services = sqlx::query(
        "SELECT r.body, r.revision FROM services s \
         JOIN service_spec_revisions r \
           ON r.cluster_id = s.cluster_id AND r.service_id = s.service_id AND r.revision = s.current_revision \
         WHERE s.cluster_id = $1 AND NOT s.deleted ORDER BY s.service_id",
    )
    .bind(cluster_id.as_str())
    .fetch_all(&mut *connection)
    .await?
    .iter()
    .map(|row| read_service_spec(&row.try_get::<String, _>("body")?, row.try_get("revision")?))
    .collect::<Result<Vec<ServiceRuntimeSpec>, StoreError>>()?;
    let designation = head_designation(connection, cluster_id).await?;
    let heads = sqlx::query(
        "SELECT a.record, a.signature, h.active FROM runtime_assignment_heads h \
         JOIN runtime_assignments a \
           ON a.cluster_id = h.cluster_id AND a.assignment_id = h.assignment_id AND a.generation = h.generation \
         WHERE h.cluster_id = $1 ORDER BY h.assignment_id",
    )
    .bind(cluster_id.as_str())
    .fetch_all(&mut *connection)
    .await?
    .iter()
    .map(assignment_from_row)
    .collect::<Result<Vec<StoredAssignment>, StoreError>>()?;
    Ok(AssignmentFacts { cluster, nodes, services, designation, heads })
}

/// Writes one checked change with guarded statements; false when a guard found another state.
async fn apply_change(
    connection: &mut SqliteConnection,
    cluster_id: &Id,
    change: &AssignmentChange,
) -> Result<bool, StoreError> {
    match change {
        AssignmentChange::Issue(signed) => {
            let payload = &signed.payload;
            let generation = counter_to_sql(payload.generation, "assignment generation")?;
            let inserted = sqlx::query(
                "INSERT INTO runtime_assignments \
                   (cluster_id, assignment_id, generation, node_id, service_id, digest, record, signature) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT DO NOTHING",
            )
            .bind(cluster_id.as_str())
            .bind(payload.id.as_str())
            .bind(generation)
            .bind(payload.node_id.as_str())
            .bind(payload.service_id.as_str())
            .bind(payload.digest.as_str())
            .bind(record_text(payload, "runtime assignment")?)
            .bind(signature_text(signed)?)
            .execute(&mut *connection)
            .await?;
            if inserted.rows_affected() != 1 {
                return Ok(false);
            }
            let moved = match &payload.previous {
                None => {
                    sqlx::query(
                        "INSERT INTO runtime_assignment_heads \
                           (cluster_id, assignment_id, generation, node_id, service_id, active) \
                         VALUES ($1, $2, $3, $4, $5, TRUE) ON CONFLICT DO NOTHING",
                    )
                    .bind(cluster_id.as_str())
                    .bind(payload.id.as_str())
                    .bind(generation)
                    .bind(payload.node_id.as_str())
                    .bind(payload.service_id.as_str())
                    .execute(&mut *connection)
                    .await?
                }
                Some(previous) => {
                    sqlx::query(
                        "UPDATE runtime_assignment_heads SET generation = $3, node_id = $4, service_id = $5, \
                           active = TRUE \
                         WHERE cluster_id = $1 AND assignment_id = $2 AND generation = $6",
                    )
                    .bind(cluster_id.as_str())
                    .bind(payload.id.as_str())
                    .bind(generation)
                    .bind(payload.node_id.as_str())
                    .bind(payload.service_id.as_str())
                    .bind(counter_to_sql(previous.generation, "assignment generation")?)
                    .execute(&mut *connection)
                    .await?
                }
            };
            Ok(moved.rows_affected() == 1)
        }
        AssignmentChange::SetActive { id, generation, active } => {
            let updated = sqlx::query(
                "UPDATE runtime_assignment_heads SET active = $4 \
                 WHERE cluster_id = $1 AND assignment_id = $2 AND generation = $3",
            )
            .bind(cluster_id.as_str())
            .bind(id.as_str())
            .bind(counter_to_sql(*generation, "assignment generation")?)
            .bind(*active)
            .execute(&mut *connection)
            .await?;
            Ok(updated.rows_affected() == 1)
        }
    }
}

#[async_trait]
impl SessionStore for SqliteStore {
    async fn open_session(
        &self,
        cluster_id: &Id,
        node_id: &NodeId,
        session_id: &Id,
        controller: &ControllerReference,
        opened_at: u64,
    ) -> Result<Option<RuntimeSessionReference>, StoreError> {
        let mut transaction = self.pool.begin_with("BEGIN IMMEDIATE").await?;
        let Some(row) = sqlx::query("SELECT record FROM cluster_nodes WHERE cluster_id = $1 AND node_id = $2")
            .bind(cluster_id.as_str())
            .bind(node_id.as_str())
            .fetch_optional(&mut *transaction)
            .await?
        else {
            transaction.rollback().await?;
            return Ok(None);
        };
        let node = read_node(&row.try_get::<String, _>("record")?)?;
        let highest: i64 = sqlx::query_scalar(
            "SELECT COALESCE(MAX(generation), 0) FROM runtime_sessions WHERE cluster_id = $1 AND node_id = $2",
        )
        .bind(cluster_id.as_str())
        .bind(node_id.as_str())
        .fetch_one(&mut *transaction)
        .await?;
        let generation = counter_from_sql(highest, "session generation")? + 1;
        sqlx::query(
            "INSERT INTO runtime_sessions (cluster_id, node_id, generation, session_id, controller_kind, \
               controller_id, runtime_namespace, opened_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
        )
        .bind(cluster_id.as_str())
        .bind(node_id.as_str())
        .bind(counter_to_sql(generation, "session generation")?)
        .bind(session_id.as_str())
        .bind(controller.kind.as_str())
        .bind(controller.id.as_str())
        .bind(node.runtime_namespace.as_str())
        .bind(counter_to_sql(opened_at, "session time")?)
        .execute(&mut *transaction)
        .await?;
        transaction.commit().await?;
        Ok(Some(RuntimeSessionReference {
            id: session_id.clone(),
            generation,
            controller: controller.clone(),
            cluster_id: cluster_id.clone(),
            node_id: node_id.clone(),
            runtime_namespace: node.runtime_namespace,
        }))
    }

    async fn current_session(
        &self,
        cluster_id: &Id,
        node_id: &NodeId,
    ) -> Result<Option<RuntimeSessionReference>, StoreError> {
        let row = sqlx::query(
            "SELECT generation, session_id, controller_kind, controller_id, runtime_namespace FROM runtime_sessions \
             WHERE cluster_id = $1 AND node_id = $2 ORDER BY generation DESC LIMIT 1",
        )
        .bind(cluster_id.as_str())
        .bind(node_id.as_str())
        .fetch_optional(&mut *self.pool.acquire().await?)
        .await?;
        row.map(|row| session_from_row(cluster_id, node_id, &row)).transpose()
    }

    async fn assignment_facts(&self, cluster_id: &Id) -> Result<AssignmentFacts, StoreError> {
        let mut connection = self.pool.acquire().await?;
        read_facts(&mut connection, cluster_id, false).await
    }

    async fn commit_assignments(
        &self,
        cluster_id: &Id,
        judge: &AssignmentJudge<'_>,
    ) -> Result<Vec<AssignmentChange>, StoreError> {
        let mut transaction = self.pool.begin_with("BEGIN IMMEDIATE").await?;
        let facts = read_facts(&mut transaction, cluster_id, true).await?;
        if facts.cluster.is_none() {
            transaction.rollback().await?;
            return Ok(Vec::new());
        }
        let changes = judge(&facts);
        if changes.is_empty() {
            transaction.rollback().await?;
            return Ok(changes);
        }
        check_assignment_changes(cluster_id, &facts.heads, &changes)?;
        for change in &changes {
            if !apply_change(&mut transaction, cluster_id, change).await? {
                transaction.rollback().await?;
                return Err(StoreError::Unavailable("an assignment head moved under the cluster lock".into()));
            }
        }
        transaction.commit().await?;
        Ok(changes)
    }

    async fn node_assignments(&self, cluster_id: &Id, node_id: &NodeId) -> Result<Vec<StoredAssignment>, StoreError> {
        sqlx::query(
            "SELECT a.record, a.signature, h.active FROM runtime_assignment_heads h \
             JOIN runtime_assignments a \
               ON a.cluster_id = h.cluster_id AND a.assignment_id = h.assignment_id AND a.generation = h.generation \
             WHERE h.cluster_id = $1 AND h.node_id = $2 AND h.active ORDER BY h.assignment_id",
        )
        .bind(cluster_id.as_str())
        .bind(node_id.as_str())
        .fetch_all(&mut *self.pool.acquire().await?)
        .await?
        .iter()
        .map(assignment_from_row)
        .collect()
    }

    async fn get_assignment(
        &self,
        cluster_id: &Id,
        assignment_id: &Id,
        generation: u64,
    ) -> Result<Option<StoredAssignment>, StoreError> {
        let row = sqlx::query(
            "SELECT a.record, a.signature, COALESCE(h.generation = a.generation AND h.active, FALSE) AS active \
             FROM runtime_assignments a \
             LEFT JOIN runtime_assignment_heads h ON h.cluster_id = a.cluster_id AND h.assignment_id = a.assignment_id \
             WHERE a.cluster_id = $1 AND a.assignment_id = $2 AND a.generation = $3",
        )
        .bind(cluster_id.as_str())
        .bind(assignment_id.as_str())
        .bind(counter_to_sql(generation, "assignment generation")?)
        .fetch_optional(&mut *self.pool.acquire().await?)
        .await?;
        row.map(|row| assignment_from_row(&row)).transpose()
    }

    async fn record_assignment_state(
        &self,
        cluster_id: &Id,
        assignment_id: &Id,
        generation: u64,
        state: AssignmentState,
        session: &RuntimeSessionReference,
        reported_at: u64,
    ) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO runtime_assignment_states \
               (cluster_id, assignment_id, generation, state, session_id, session_generation, reported_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7) \
             ON CONFLICT (cluster_id, assignment_id, generation) DO UPDATE SET state = EXCLUDED.state, \
               session_id = EXCLUDED.session_id, session_generation = EXCLUDED.session_generation, \
               reported_at = EXCLUDED.reported_at",
        )
        .bind(cluster_id.as_str())
        .bind(assignment_id.as_str())
        .bind(counter_to_sql(generation, "assignment generation")?)
        .bind(state.as_str())
        .bind(session.id.as_str())
        .bind(counter_to_sql(session.generation, "session generation")?)
        .bind(counter_to_sql(reported_at, "report time")?)
        .execute(&mut *self.pool.acquire().await?)
        .await?;
        Ok(())
    }

    async fn assignment_state(
        &self,
        cluster_id: &Id,
        assignment_id: &Id,
        generation: u64,
    ) -> Result<Option<ReportedState>, StoreError> {
        let row = sqlx::query(
            "SELECT state, session_id, session_generation, reported_at FROM runtime_assignment_states \
             WHERE cluster_id = $1 AND assignment_id = $2 AND generation = $3",
        )
        .bind(cluster_id.as_str())
        .bind(assignment_id.as_str())
        .bind(counter_to_sql(generation, "assignment generation")?)
        .fetch_optional(&mut *self.pool.acquire().await?)
        .await?;
        row.map(|row| {
            Ok(ReportedState {
                state: AssignmentState::parse(&row.try_get::<String, _>("state")?)
                    .ok_or_else(|| StoreError::Corrupt("stored assignment state is unknown".into()))?,
                session_id: id_from_sql(row.try_get("session_id")?, "session id")?,
                session_generation: counter_from_sql(row.try_get("session_generation")?, "session generation")?,
                reported_at: counter_from_sql(row.try_get("reported_at")?, "report time")?,
            })
        })
        .transpose()
    }
}
