//! The store's part for accepted cluster ingress registrations (`04-registration.md`,
//! "`registerClusterIngress`": "The controller records the accepted registration").
//!
//! **The commit is the registration's `conflict` check.** [`RegistrationStore::commit_registration`]
//! is one guarded `INSERT … SELECT … WHERE` statement: it writes the registration only while the
//! cluster's designation head, the assignment head (active, on the node), the assignment's
//! latest reported state (`ready`, under the session) and the node's current session are still
//! exactly the ones the judge read. A statement is atomic on both backends, so no change of those
//! facts can slip between the check and the write; a registration whose facts changed writes
//! nothing and is answered `conflict`. No lock is taken, so registrations never wait for each other.
//!
//! Every accepted registration is kept (the audit of which ingress build registered where,
//! through which relay connection, against which designation).

use super::StoreError;
use super::sessions::ReportedState;
use crate::contract::assignment::RuntimeAssignment;
use crate::contract::designation::ClusterIngressDesignation;
use crate::contract::inventory::ServiceRuntimeSpec;
use crate::contract::session::RuntimeSessionReference;
use crate::contract::{AuthorityReference, Id, NodeId};
use async_trait::async_trait;

/// The relay connection a registration came through.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelayConnectionReference {
    /// The connection.
    pub id: Id,
    /// The relay.
    pub relay_id: Id,
    /// The connection's election epoch.
    pub epoch: u64,
}

/// The node session a registration was judged under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionGeneration {
    /// The session id.
    pub id: Id,
    /// The session generation.
    pub generation: u64,
}

/// An accepted registration, as the judge decided it. Nothing here is secret: the bearer is
/// neither kept nor derived from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IngressRegistration {
    /// A fresh id.
    pub id: Id,
    /// The relay's cluster.
    pub cluster_id: Id,
    /// The node the ingress runs on.
    pub node_id: NodeId,
    /// The ingress build's version.
    pub version: String,
    /// The capability tokens it announced; `None` when it sent none.
    pub capabilities: Option<Vec<String>>,
    /// The negotiated protocol version.
    pub protocol_version: u64,
    /// The relay connection it came through.
    pub relay: RelayConnectionReference,
    /// The designation generation it was judged against.
    pub designation: AuthorityReference,
    /// The running assignment that carries the designation's credential.
    pub assignment: AuthorityReference,
    /// The node's session the assignment runs under.
    pub session: SessionGeneration,
    /// When it was accepted, ms since the Unix epoch.
    pub registered_at: u64,
}

/// A recorded registration with its place in the record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredIngressRegistration {
    /// Counts up across all registrations of the store; newer ones have higher numbers.
    pub sequence: u64,
    /// The registration.
    pub registration: IngressRegistration,
}

/// What `registerClusterIngress` judges steps 4–7 against, for one node of one cluster, read on
/// one connection without a lock (the commit re-checks what matters).
#[derive(Debug, Clone)]
pub struct RegistrationFacts {
    /// The cluster's current Pallet ingress designation.
    pub designation: Option<ClusterIngressDesignation>,
    /// The designated service's current spec (`None` without a designation, or when the service
    /// is deleted).
    pub spec: Option<ServiceRuntimeSpec>,
    /// True when the node is a node of the cluster.
    pub node_exists: bool,
    /// The node's current session.
    pub session: Option<RuntimeSessionReference>,
    /// The node's current assignments of the designated service, each with the latest state
    /// reported for its generation. Sorted by id.
    pub assignments: Vec<(RuntimeAssignment, Option<ReportedState>)>,
    /// SHA-256 of the designation's current credential (present whenever `designation` is).
    pub credential_hash: Option<[u8; 32]>,
    /// The cluster's route table revision, `None` before the first table.
    pub route_table_revision: Option<u64>,
}

/// The outcome of [`RegistrationStore::commit_registration`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RegistrationCommit {
    /// Written, with its sequence number.
    Recorded(u64),
    /// The designation, the assignment or the session is no longer the one judged; nothing was
    /// written.
    Conflict,
}

/// Persistence of accepted cluster ingress registrations. Implemented by both backends with one
/// body (`registration_store!`), since the SQL is the same.
#[async_trait]
pub trait RegistrationStore: Send + Sync {
    /// The facts of a registration of `node_id` in the cluster, on one connection.
    async fn registration_facts(&self, cluster_id: &Id, node_id: &NodeId) -> Result<RegistrationFacts, StoreError>;

    /// Records `registration` if, at the moment of the write, the cluster's current designation
    /// is `registration.designation`, the assignment head is `registration.assignment` (active,
    /// on the node), its latest reported state is `ready` under `registration.session`, and that
    /// session is the node's current one; else writes nothing and answers `Conflict`.
    async fn commit_registration(&self, registration: &IngressRegistration) -> Result<RegistrationCommit, StoreError>;

    /// The cluster's registrations (of one node, when given), newest first, with a sequence
    /// below `before` when given, at most `limit`.
    async fn list_registrations(
        &self,
        cluster_id: &Id,
        node_id: Option<&NodeId>,
        before: Option<u64>,
        limit: u32,
    ) -> Result<Vec<StoredIngressRegistration>, StoreError>;
}

/// The capability list as stored (JSON text), `None` when absent.
pub(crate) fn capabilities_text(capabilities: Option<&Vec<String>>) -> Option<String> {
    capabilities.map(|list| serde_json::to_string(list).expect("strings serialize"))
}

/// Reads one stored registration from the columns of `ingress_registrations`.
pub(crate) fn read_registration(row: &impl RegistrationRow) -> Result<StoredIngressRegistration, StoreError> {
    use super::codec::counter_from_sql;
    let id = |column: &str| -> Result<Id, StoreError> {
        Id::parse(&row.text(column)?)
            .ok_or_else(|| StoreError::Corrupt(format!("stored registration {column} is not an Id")))
    };
    let counter = |column: &str| -> Result<u64, StoreError> { counter_from_sql(row.integer(column)?, column) };
    let digest = |column: &str| -> Result<crate::contract::Sha256Digest, StoreError> {
        crate::contract::Sha256Digest::parse(&row.text(column)?)
            .ok_or_else(|| StoreError::Corrupt(format!("stored registration {column} is not a digest")))
    };
    let node_id = NodeId::parse(&row.text("node_id")?)
        .ok_or_else(|| StoreError::Corrupt("stored registration node_id is not a NodeId".into()))?;
    let capabilities = match row.optional_text("capabilities")? {
        None => None,
        Some(text) => Some(
            serde_json::from_str::<Vec<String>>(&text)
                .map_err(|_| StoreError::Corrupt("stored registration capabilities do not read back".into()))?,
        ),
    };
    Ok(StoredIngressRegistration {
        sequence: counter("sequence")?,
        registration: IngressRegistration {
            id: id("registration_id")?,
            cluster_id: id("cluster_id")?,
            node_id,
            version: row.text("version")?,
            capabilities,
            protocol_version: counter("protocol_version")?,
            relay: RelayConnectionReference {
                id: id("relay_connection_id")?,
                relay_id: id("relay_id")?,
                epoch: counter("relay_epoch")?,
            },
            designation: AuthorityReference {
                id: id("designation_id")?,
                generation: counter("designation_generation")?,
                digest: digest("designation_digest")?,
            },
            assignment: AuthorityReference {
                id: id("assignment_id")?,
                generation: counter("assignment_generation")?,
                digest: digest("assignment_digest")?,
            },
            session: SessionGeneration { id: id("session_id")?, generation: counter("session_generation")? },
            registered_at: counter("registered_at")?,
        },
    })
}

/// Reads a session reference of `node_id` from `session_id`, `generation`, `controller_kind`,
/// `controller_id`, `runtime_namespace`.
pub(crate) fn read_session(
    row: &impl RegistrationRow,
    cluster_id: &Id,
    node_id: &NodeId,
) -> Result<RuntimeSessionReference, StoreError> {
    use crate::contract::session::{ControllerKind, ControllerReference};
    let id = |column: &str| -> Result<Id, StoreError> {
        Id::parse(&row.text(column)?)
            .ok_or_else(|| StoreError::Corrupt(format!("stored session {column} is not an Id")))
    };
    let kind = ControllerKind::parse(&row.text("controller_kind")?)
        .ok_or_else(|| StoreError::Corrupt("stored session controller kind is unknown".into()))?;
    Ok(RuntimeSessionReference {
        id: id("session_id")?,
        generation: super::codec::counter_from_sql(row.integer("generation")?, "session generation")?,
        controller: ControllerReference { kind, id: id("controller_id")? },
        cluster_id: cluster_id.clone(),
        node_id: node_id.clone(),
        runtime_namespace: id("runtime_namespace")?,
    })
}

/// Reads the latest reported state from `state`, `session_id`, `session_generation`,
/// `reported_at` (all null when none was reported).
pub(crate) fn read_reported_state(row: &impl RegistrationRow) -> Result<Option<ReportedState>, StoreError> {
    use super::codec::counter_from_sql;
    use super::sessions::AssignmentState;
    let Some(state) = row.optional_text("state")? else { return Ok(None) };
    let state = AssignmentState::parse(&state)
        .ok_or_else(|| StoreError::Corrupt("stored assignment state is unknown".into()))?;
    let session_id = Id::parse(&row.text("session_id")?)
        .ok_or_else(|| StoreError::Corrupt("stored state session id is not an Id".into()))?;
    Ok(Some(ReportedState {
        state,
        session_id,
        session_generation: counter_from_sql(row.integer("session_generation")?, "session generation")?,
        reported_at: counter_from_sql(row.integer("reported_at")?, "report time")?,
    }))
}

/// The column reads [`read_registration`] needs, for either backend's row type.
pub(crate) trait RegistrationRow {
    /// A `TEXT NOT NULL` column.
    fn text(&self, column: &str) -> Result<String, StoreError>;
    /// A nullable `TEXT` column.
    fn optional_text(&self, column: &str) -> Result<Option<String>, StoreError>;
    /// A `BIGINT`/`INTEGER` column.
    fn integer(&self, column: &str) -> Result<i64, StoreError>;
}

/// Expands, in a backend's `registrations` module, `RegistrationRow` for the backend's row type
/// and `impl RegistrationStore` for the backend's store (both databases take the same SQL).
macro_rules! registration_store {
    ($store:ident, $row:ty) => {
        use $crate::contract::{Id, NodeId};
        use $crate::store::StoreError;
        use $crate::store::codec::counter_to_sql;
        use $crate::store::registrations::{
            IngressRegistration, RegistrationCommit, RegistrationFacts, RegistrationRow, RegistrationStore,
            StoredIngressRegistration, capabilities_text, read_registration, read_reported_state, read_session,
        };
        use $crate::store::codec::{counter_from_sql, hash_from_sql, read_designation, read_service_spec};
        use $crate::store::sessions::read_signed_assignment;
        use sqlx::Row as _;

        impl RegistrationRow for $row {
            fn text(&self, column: &str) -> Result<String, StoreError> {
                Ok(self.try_get(column)?)
            }
            fn optional_text(&self, column: &str) -> Result<Option<String>, StoreError> {
                Ok(self.try_get(column)?)
            }
            fn integer(&self, column: &str) -> Result<i64, StoreError> {
                Ok(self.try_get(column)?)
            }
        }

        #[async_trait::async_trait]
        impl RegistrationStore for $store {
            async fn registration_facts(&self, cluster_id: &Id, node_id: &NodeId) -> Result<RegistrationFacts, StoreError> {
                let mut connection = self.pool.acquire().await?;
                // The designation, the designated service's current spec, the node, the route table.
                let row = sqlx::query(
                    // The head generation is an uncorrelated subquery, evaluated once, so the
                    // designation's lookup is the primary key's (cluster_id, generation) whatever the
                    // planner's statistics say.
                    "SELECT d.record AS designation, r.body AS spec_body, r.revision AS spec_revision, \
                       EXISTS (SELECT 1 FROM cluster_nodes n WHERE n.cluster_id = $1 AND n.node_id = $2) AS node_exists, \
                       (SELECT t.revision FROM ingress_route_tables t WHERE t.cluster_id = $1) AS route_revision \
                     FROM clusters c \
                     LEFT JOIN ingress_designations d ON d.cluster_id = $1 \
                       AND d.generation = (SELECT h.designation_generation FROM clusters h WHERE h.id = $1) \
                     LEFT JOIN services s ON s.cluster_id = d.cluster_id AND s.service_id = d.ingress_service_id \
                       AND NOT s.deleted \
                     LEFT JOIN service_spec_revisions r ON r.cluster_id = s.cluster_id AND r.service_id = s.service_id \
                       AND r.revision = s.current_revision \
                     WHERE c.id = $1",
                )
                .bind(cluster_id.as_str())
                .bind(node_id.as_str())
                .fetch_optional(&mut *connection)
                .await?;
                let mut facts = RegistrationFacts {
                    designation: None,
                    spec: None,
                    node_exists: false,
                    session: None,
                    assignments: Vec::new(),
                    credential_hash: None,
                    route_table_revision: None,
                };
                let Some(row) = row else { return Ok(facts) };
                facts.node_exists = row.try_get("node_exists")?;
                facts.route_table_revision = row
                    .try_get::<Option<i64>, _>("route_revision")?
                    .map(|revision| counter_from_sql(revision, "route table revision"))
                    .transpose()?;
                let Some(designation) = row.try_get::<Option<String>, _>("designation")? else { return Ok(facts) };
                let designation = read_designation(&designation)?;
                if let Some(body) = row.try_get::<Option<String>, _>("spec_body")? {
                    facts.spec = Some(read_service_spec(&body, row.try_get("spec_revision")?)?);
                }
                let version = &designation.credential.secret_version;
                let hash: Vec<u8> = sqlx::query_scalar(
                    "SELECT value_hash FROM secret_versions WHERE secret_id = $1 AND secret_version_id = $2",
                )
                .bind(version.secret_id.as_str())
                .bind(version.secret_version_id.as_str())
                .fetch_optional(&mut *connection)
                .await?
                .ok_or_else(|| StoreError::Corrupt("the designation's credential names a missing secret version".into()))?;
                facts.credential_hash = Some(hash_from_sql(hash, "secret value hash")?);
                if facts.node_exists {
                    let session = sqlx::query(
                        "SELECT generation, session_id, controller_kind, controller_id, runtime_namespace \
                         FROM runtime_sessions WHERE cluster_id = $1 AND node_id = $2 ORDER BY generation DESC LIMIT 1",
                    )
                    .bind(cluster_id.as_str())
                    .bind(node_id.as_str())
                    .fetch_optional(&mut *connection)
                    .await?;
                    facts.session = session.map(|row| read_session(&row, cluster_id, node_id)).transpose()?;
                }
                if facts.session.is_some() {
                    let rows = sqlx::query(
                        "SELECT a.record, a.signature, s.state, s.session_id, s.session_generation, s.reported_at \
                         FROM runtime_assignment_heads h \
                         JOIN runtime_assignments a ON a.cluster_id = h.cluster_id \
                           AND a.assignment_id = h.assignment_id AND a.generation = h.generation \
                         LEFT JOIN runtime_assignment_states s ON s.cluster_id = h.cluster_id \
                           AND s.assignment_id = h.assignment_id AND s.generation = h.generation \
                         WHERE h.cluster_id = $1 AND h.node_id = $2 AND h.service_id = $3 AND h.active",
                    )
                    .bind(cluster_id.as_str())
                    .bind(node_id.as_str())
                    .bind(designation.ingress_service_id.as_str())
                    .fetch_all(&mut *connection)
                    .await?;
                    for row in &rows {
                        let signed = read_signed_assignment(&row.try_get::<String, _>("record")?, &row.try_get::<String, _>("signature")?)?;
                        facts.assignments.push((signed.payload, read_reported_state(row)?));
                    }
                    facts.assignments.sort_by(|left, right| left.0.id.as_str().cmp(right.0.id.as_str()));
                }
                facts.designation = Some(designation);
                Ok(facts)
            }

            async fn commit_registration(
                &self,
                registration: &IngressRegistration,
            ) -> Result<RegistrationCommit, StoreError> {
                let counter = |value: u64, what: &str| counter_to_sql(value, what);
                let sequence: Option<i64> = sqlx::query_scalar(
                    "INSERT INTO ingress_registrations (registration_id, cluster_id, node_id, version, capabilities, \
                       protocol_version, relay_connection_id, relay_id, relay_epoch, designation_id, \
                       designation_generation, designation_digest, assignment_id, assignment_generation, \
                       assignment_digest, session_id, session_generation, registered_at) \
                     SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18 \
                     WHERE EXISTS (SELECT 1 FROM clusters c \
                                   JOIN ingress_designations d \
                                     ON d.cluster_id = c.id AND d.generation = c.designation_generation \
                                   WHERE c.id = $2 AND d.designation_id = $10 AND d.generation = $11 \
                                     AND d.digest = $12) \
                       AND EXISTS (SELECT 1 FROM runtime_assignment_heads h \
                                   JOIN runtime_assignments a ON a.cluster_id = h.cluster_id \
                                     AND a.assignment_id = h.assignment_id AND a.generation = h.generation \
                                   WHERE h.cluster_id = $2 AND h.assignment_id = $13 AND h.generation = $14 \
                                     AND h.active AND h.node_id = $3 AND a.digest = $15) \
                       AND EXISTS (SELECT 1 FROM runtime_assignment_states s \
                                   WHERE s.cluster_id = $2 AND s.assignment_id = $13 AND s.generation = $14 \
                                     AND s.state = 'ready' AND s.session_id = $16 AND s.session_generation = $17) \
                       AND EXISTS (SELECT 1 FROM runtime_sessions r \
                                   WHERE r.cluster_id = $2 AND r.node_id = $3 AND r.generation = $17 \
                                     AND r.session_id = $16) \
                       AND (SELECT MAX(r.generation) FROM runtime_sessions r \
                            WHERE r.cluster_id = $2 AND r.node_id = $3) = $17 \
                     RETURNING sequence",
                )
                .bind(registration.id.as_str())
                .bind(registration.cluster_id.as_str())
                .bind(registration.node_id.as_str())
                .bind(&registration.version)
                .bind(capabilities_text(registration.capabilities.as_ref()))
                .bind(counter(registration.protocol_version, "protocol version")?)
                .bind(registration.relay.id.as_str())
                .bind(registration.relay.relay_id.as_str())
                .bind(counter(registration.relay.epoch, "relay epoch")?)
                .bind(registration.designation.id.as_str())
                .bind(counter(registration.designation.generation, "designation generation")?)
                .bind(registration.designation.digest.as_str())
                .bind(registration.assignment.id.as_str())
                .bind(counter(registration.assignment.generation, "assignment generation")?)
                .bind(registration.assignment.digest.as_str())
                .bind(registration.session.id.as_str())
                .bind(counter(registration.session.generation, "session generation")?)
                .bind(counter(registration.registered_at, "registration time")?)
                .fetch_optional(&mut *self.pool.acquire().await?)
                .await?;
                match sequence {
                    Some(sequence) => Ok(RegistrationCommit::Recorded(
                        $crate::store::codec::counter_from_sql(sequence, "registration sequence")?,
                    )),
                    None => Ok(RegistrationCommit::Conflict),
                }
            }

            async fn list_registrations(
                &self,
                cluster_id: &Id,
                node_id: Option<&NodeId>,
                before: Option<u64>,
                limit: u32,
            ) -> Result<Vec<StoredIngressRegistration>, StoreError> {
                let before = before.map(|before| counter_to_sql(before, "registration sequence")).transpose()?;
                let rows = sqlx::query(
                    "SELECT sequence, registration_id, cluster_id, node_id, version, capabilities, protocol_version, \
                       relay_connection_id, relay_id, relay_epoch, designation_id, designation_generation, \
                       designation_digest, assignment_id, assignment_generation, assignment_digest, session_id, \
                       session_generation, registered_at \
                     FROM ingress_registrations \
                     WHERE cluster_id = $1 AND ($2 IS NULL OR node_id = $2) AND ($3 IS NULL OR sequence < $3) \
                     ORDER BY sequence DESC LIMIT $4",
                )
                .bind(cluster_id.as_str())
                .bind(node_id.map(NodeId::as_str))
                .bind(before)
                .bind(i64::from(limit))
                .fetch_all(&mut *self.pool.acquire().await?)
                .await?;
                rows.iter().map(read_registration).collect()
            }
        }
    };
}
