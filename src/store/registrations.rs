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

use super::assignments::signed_assignment_from_row;
use super::codec::{counter_from_sql, counter_to_sql, read_service_spec};
use super::designations::optional_designation_from_row;
use super::relays::{RelayConnectionState, relay_connection_state_from_row};
use super::sessions::{ReportedState, reported_state_from_columns, session_from_row};
use super::sql::{PerBackend, Row, Statement};
use super::{SqlStore, StoreError};
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

/// What [`RegistrationStore::registration_facts`] reads: the relay connection a registration came
/// through and the registration's facts in that connection's cluster.
#[derive(Debug, Clone)]
pub struct RelayedFacts {
    /// The connection holding the presented token, with its cluster's highest epoch.
    pub relay: RelayConnectionState,
    /// The facts of the registration in the connection's cluster.
    pub facts: RegistrationFacts,
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

/// Persistence of accepted cluster ingress registrations.
#[async_trait]
pub trait RegistrationStore: Send + Sync {
    /// The relay connection whose token hashes to `token_hash` and the facts of a registration
    /// of `node_id` in its cluster, read in one statement; `None` when no connection holds the
    /// token.
    async fn registration_facts(
        &self,
        token_hash: [u8; 32],
        node_id: &NodeId,
    ) -> Result<Option<RelayedFacts>, StoreError>;

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
fn capabilities_text(capabilities: Option<&Vec<String>>) -> Option<String> {
    capabilities.map(|list| serde_json::to_string(list).expect("strings serialize"))
}

/// The facts of a registration that came through the relay connection holding token hash `$1`,
/// for node `$2` of that connection's cluster, in one statement: the connection and its cluster's
/// highest epoch; the cluster's current designation, the designated service's current spec and
/// the hash of the designation's credential (its secret version, named in the record); whether
/// the node exists, its current session (its highest generation; NULL columns: none) and the
/// route table revision; and, while the node has a session, each active assignment head of the
/// designated service on the node with its record and the state reported for its generation
/// (`state_session_id` and the other state columns NULL when none was). One row per such
/// assignment, the facts repeated on each; one row with NULL assignment columns when there is
/// none; no row when no connection holds the token. `{secret_id}` and `{secret_version_id}` are
/// the backend's reads of the record's secret version ([`Backend::json_text`]).
const REGISTRATION_FACTS_SQL: &str = "SELECT c.id, c.cluster_id, c.relay_id, c.epoch, c.last_seen_at, \
       (SELECT MAX(m.epoch) FROM relay_connections m WHERE m.cluster_id = c.cluster_id) AS highest_epoch, \
       d.record AS designation, r.body AS spec_body, r.revision AS spec_revision, v.value_hash, \
       EXISTS (SELECT 1 FROM cluster_nodes n WHERE n.cluster_id = c.cluster_id AND n.node_id = $2) AS node_exists, \
       (SELECT t.revision FROM ingress_route_tables t WHERE t.cluster_id = c.cluster_id) AS route_revision, \
       rs.generation AS generation, rs.session_id AS session_id, rs.controller_kind AS controller_kind, \
       rs.controller_id AS controller_id, rs.runtime_namespace AS runtime_namespace, \
       h.assignment_id AS head_assignment_id, a.record, a.signature, st.state, \
       st.session_id AS state_session_id, st.session_generation, st.reported_at \
     FROM relay_connections c \
     JOIN clusters k ON k.id = c.cluster_id \
     LEFT JOIN runtime_sessions rs ON rs.cluster_id = c.cluster_id AND rs.node_id = $2 \
       AND rs.generation = (SELECT MAX(g.generation) FROM runtime_sessions g \
                            WHERE g.cluster_id = c.cluster_id AND g.node_id = $2) \
     LEFT JOIN ingress_designations d ON d.cluster_id = c.cluster_id AND d.generation = k.designation_generation \
     LEFT JOIN services s ON s.cluster_id = d.cluster_id AND s.service_id = d.ingress_service_id \
       AND NOT s.deleted \
     LEFT JOIN service_spec_revisions r ON r.cluster_id = s.cluster_id AND r.service_id = s.service_id \
       AND r.revision = s.current_revision \
     LEFT JOIN secret_versions v ON v.secret_id = {secret_id} AND v.secret_version_id = {secret_version_id} \
     LEFT JOIN runtime_assignment_heads h ON rs.session_id IS NOT NULL AND h.cluster_id = c.cluster_id \
       AND h.node_id = $2 AND h.service_id = d.ingress_service_id AND h.active \
     LEFT JOIN runtime_assignments a ON a.cluster_id = h.cluster_id AND a.assignment_id = h.assignment_id \
       AND a.generation = h.generation \
     LEFT JOIN runtime_assignment_states st ON st.cluster_id = h.cluster_id \
       AND st.assignment_id = h.assignment_id AND st.generation = h.generation \
     WHERE c.token_hash = $1";

/// [`REGISTRATION_FACTS_SQL`] in each backend's dialect.
static REGISTRATION_FACTS: PerBackend = PerBackend::new(|backend| {
    let member = |name| backend.json_text("d.record", &["credential", "secretVersion", name]);
    REGISTRATION_FACTS_SQL
        .replace("{secret_id}", &member("secretId"))
        .replace("{secret_version_id}", &member("secretVersionId"))
});

/// The commit's guard: the registration is inserted only while its designation, assignment (head,
/// active, on the node, same digest), `ready` state under its session, that session as the
/// node's current one, and its relay connection as the cluster's newest all hold, in one
/// statement. (The connection's lease is judged at the read: the commit follows within the
/// same request.) (On PostgreSQL the
/// table has no foreign keys: checking them locked rows every registration shares; migration
/// 0016 says why the guard holds what they held.)
const REGISTRATION_COMMIT_SQL: &str = "INSERT INTO ingress_registrations (registration_id, cluster_id, node_id, version, \
       capabilities, protocol_version, relay_connection_id, relay_id, relay_epoch, designation_id, \
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
       AND EXISTS (SELECT 1 FROM relay_connections c WHERE c.id = $7 AND c.cluster_id = $2 AND c.epoch = $9) \
       AND NOT EXISTS (SELECT 1 FROM relay_connections c WHERE c.cluster_id = $2 AND c.epoch > $9) \
     RETURNING sequence";

#[async_trait]
impl RegistrationStore for SqlStore {
    async fn registration_facts(
        &self,
        token_hash: [u8; 32],
        node_id: &NodeId,
    ) -> Result<Option<RelayedFacts>, StoreError> {
        let rows = REGISTRATION_FACTS
            .statement(self.pool.backend())
            .bytes(&token_hash)
            .text(node_id.as_str())
            .fetch_all(&mut self.pool.connection().await?)
            .await?;
        let Some(first) = rows.first() else { return Ok(None) };
        let relay = relay_connection_state_from_row(first)?;
        let mut facts = registration_facts_from_row(&relay.connection.cluster_id, node_id, first)?;
        for row in &rows {
            if row.optional_text("head_assignment_id")?.is_some() {
                let state = reported_state_from_columns(row, "state_session_id")?;
                facts.assignments.push((signed_assignment_from_row(row)?.payload, state));
            }
        }
        facts.assignments.sort_by(|left, right| left.0.id.as_str().cmp(right.0.id.as_str()));
        Ok(Some(RelayedFacts { relay, facts }))
    }

    async fn commit_registration(&self, registration: &IngressRegistration) -> Result<RegistrationCommit, StoreError> {
        let capabilities = capabilities_text(registration.capabilities.as_ref());
        let row = Statement::new(REGISTRATION_COMMIT_SQL)
            .text(registration.id.as_str())
            .text(registration.cluster_id.as_str())
            .text(registration.node_id.as_str())
            .text(&registration.version)
            .optional_text(capabilities.as_deref())
            .integer(counter_to_sql(registration.protocol_version, "protocol version")?)
            .text(registration.relay.id.as_str())
            .text(registration.relay.relay_id.as_str())
            .integer(counter_to_sql(registration.relay.epoch, "relay epoch")?)
            .text(registration.designation.id.as_str())
            .integer(counter_to_sql(registration.designation.generation, "designation generation")?)
            .text(registration.designation.digest.as_str())
            .text(registration.assignment.id.as_str())
            .integer(counter_to_sql(registration.assignment.generation, "assignment generation")?)
            .text(registration.assignment.digest.as_str())
            .text(registration.session.id.as_str())
            .integer(counter_to_sql(registration.session.generation, "session generation")?)
            .integer(counter_to_sql(registration.registered_at, "registration time")?)
            .fetch_optional(&mut self.pool.connection().await?)
            .await?;
        match row {
            Some(row) => Ok(RegistrationCommit::Recorded(row.counter("sequence", "registration sequence")?)),
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
        Statement::new(
            "SELECT sequence, registration_id, cluster_id, node_id, version, capabilities, protocol_version, \
               relay_connection_id, relay_id, relay_epoch, designation_id, designation_generation, \
               designation_digest, assignment_id, assignment_generation, assignment_digest, session_id, \
               session_generation, registered_at \
             FROM ingress_registrations \
             WHERE cluster_id = $1 AND ($2 IS NULL OR node_id = $2) AND ($3 IS NULL OR sequence < $3) \
             ORDER BY sequence DESC LIMIT $4",
        )
        .text(cluster_id.as_str())
        .optional_text(node_id.map(NodeId::as_str))
        .optional_integer(before)
        .integer(i64::from(limit))
        .fetch_all(&mut self.pool.connection().await?)
        .await?
        .iter()
        .map(registration_from_row)
        .collect()
    }
}

/// A recorded ingress registration: the columns of `ingress_registrations`.
pub(crate) fn registration_from_row(row: &Row) -> Result<StoredIngressRegistration, StoreError> {
    let id = |column: &str| row.id(column, &format!("registration {column}"));
    let counter = |column: &str| row.counter(column, column);
    let reference = |prefix: &str| -> Result<AuthorityReference, StoreError> {
        Ok(AuthorityReference {
            id: id(&format!("{prefix}_id"))?,
            generation: counter(&format!("{prefix}_generation"))?,
            digest: row.digest(&format!("{prefix}_digest"), &format!("registration {prefix}_digest"))?,
        })
    };
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
            node_id: row.node_id("node_id", "registration node_id")?,
            version: row.text("version")?,
            capabilities,
            protocol_version: counter("protocol_version")?,
            relay: RelayConnectionReference {
                id: id("relay_connection_id")?,
                relay_id: id("relay_id")?,
                epoch: counter("relay_epoch")?,
            },
            designation: reference("designation")?,
            assignment: reference("assignment")?,
            session: SessionGeneration { id: id("session_id")?, generation: counter("session_generation")? },
            registered_at: counter("registered_at")?,
        },
    })
}

/// The facts of a registration's first row ([`REGISTRATION_FACTS_SQL`]): `designation` (NULL:
/// none) with its credential's `value_hash`, the designated service's current spec `spec_body`
/// and `spec_revision` (NULL: deleted), `node_exists`, `route_revision` (NULL: no table yet), and
/// the node's current session (`generation`, `session_id`, `controller_kind`, `controller_id`,
/// `runtime_namespace`; NULL: none). The assignments, one per row, are read by the caller.
pub(crate) fn registration_facts_from_row(
    cluster_id: &Id,
    node_id: &NodeId,
    row: &Row,
) -> Result<RegistrationFacts, StoreError> {
    let designation = optional_designation_from_row(row, "designation")?;
    let spec = match (&designation, row.optional_text("spec_body")?) {
        (Some(_), Some(body)) => Some(read_service_spec(&body, row.integer("spec_revision")?)?),
        _ => None,
    };
    // Present whenever a designation is: its sealed secret is written with it.
    let credential_hash = match &designation {
        Some(_) => Some(row.optional_hash("value_hash", "secret value hash")?.ok_or_else(|| {
            StoreError::Corrupt("the designation's credential names a missing secret version".into())
        })?),
        None => None,
    };
    let node_exists = row.boolean("node_exists")?;
    // A session is the node's only while the node exists.
    let session = match row.optional_text("session_id")? {
        Some(_) if node_exists => Some(session_from_row(cluster_id, node_id, row)?),
        _ => None,
    };
    Ok(RegistrationFacts {
        designation,
        spec,
        node_exists,
        session,
        assignments: Vec::new(),
        credential_hash,
        route_table_revision: row
            .optional_integer("route_revision")?
            .map(|revision| counter_from_sql(revision, "route table revision"))
            .transpose()?,
    })
}
