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
            IngressRegistration, RegistrationCommit, RegistrationRow, RegistrationStore,
            StoredIngressRegistration, capabilities_text, read_registration,
        };
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
                     WHERE EXISTS (SELECT 1 FROM ingress_designation_heads h \
                                   JOIN ingress_designations d \
                                     ON d.cluster_id = h.cluster_id AND d.generation = h.generation \
                                   WHERE h.cluster_id = $2 AND d.designation_id = $10 AND d.generation = $11 \
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
                .fetch_optional(&self.pool)
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
                .fetch_all(&self.pool)
                .await?;
                rows.iter().map(read_registration).collect()
            }
        }
    };
}
