//! Signed runtime network projections (`05-projection.md`, "Projection", "Issuing") and the
//! route table's backends (`04-registration.md`, "Route table").
//!
//! Every node has one chain of projection generations. The head row names the current one, the
//! digest of the inputs it was built from (so the issuer rebuilds only the nodes whose inputs
//! moved), whether it retains withdrawals or retired leases, and the generation the node last
//! reported applying. The head also keeps the grants of the node's current projection by
//! destination lease, protocol and port (`granted`, one JSON column: they are always written and
//! read whole), which is what the route table's backends are judged from.
//!
//! Issuing runs in a write transaction that holds the cluster's reconcile lock ([`lock_reconcile`]), so two
//! processes never issue two generations with one number; each head update is guarded by the
//! generation the issuer read. The head and the generation before it are kept (the node may
//! still be applying it); older generations are pruned as a new one is written.
//!
//! **A record is not copied into another record.** A generation keeps its endpoint leases as
//! `[leaseId, generation]` references (`endpoint_leases`; every lease generation is kept) and its
//! record is stored without them; the reader puts the leases back from the live lease set, or
//! from the kept generations of a lease that moved on ([`referenced_leases_on`]), and checks the
//! record's digest.

use super::codec::{counter_from_sql, counter_to_sql, record_text};
use super::designations::cluster_designation_on;
use super::inventory::{cluster_nodes, lock_reconcile, nodes_by_ids};
use super::network::{LeaseSet, StoredNetworkPlan, current_plan, lease_by_id, live_lease_set_on, referenced_leases_on};
use super::relays::{IngressRoute, RouteBackend, replace_route_backends, table_routes};
use super::sessions::session_from_row;
use super::sql::{HoldsConnection, InTransaction, LockedWrite, Row, Statement, Transaction, rows_by_ids};
use super::{Backend, SqlStore, StoreError};
use crate::contract::designation::ClusterIngressDesignation;
use crate::contract::inventory::NodeSpec;
use crate::contract::network::{ProjectionEndpoint, RuntimeNetworkLease, RuntimeNetworkProjection};
use crate::contract::reader::compare_bytes;
use crate::contract::session::RuntimeSessionReference;
use crate::contract::signing::Signed;
use crate::contract::{AuthorityReference, DigestedRecord as _, Id, NodeId, Protocol, Sha256Digest};
use async_trait::async_trait;
use std::collections::BTreeSet;

/// The head of one node's projection chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProjectionHead {
    /// The node.
    pub node_id: NodeId,
    /// The current generation's reference.
    pub reference: AuthorityReference,
    /// The digest of the inputs the current generation was built from.
    pub inputs: String,
    /// Whether the current generation carries withdrawals or retired leases.
    pub retains: bool,
    /// The generation the node last reported applying.
    pub applied: Option<AuthorityReference>,
    /// The grants of the current generation, by destination lease, protocol and port.
    pub granted: BTreeSet<GrantedDestination>,
}

/// Everything a projection is built from, read in one transaction.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProjectionFacts {
    /// The cluster's plan and protected authority, if it has a plan.
    pub plan: Option<StoredNetworkPlan>,
    /// The nodes read (every node of the cluster, or the ones asked for that exist), sorted by id.
    pub nodes: Vec<NodeSpec>,
    /// The head generation of every live lease of the cluster, sorted by lease id (shared: the
    /// store keeps the parsed set while the cluster's leases do not change).
    pub leases: LeaseSet,
    /// The ingress routes, sorted by hostname.
    pub routes: Vec<IngressRoute>,
    /// The cluster's current ingress designation.
    pub designation: Option<ClusterIngressDesignation>,
    /// The head of the projection chain of every node read, sorted by node id.
    pub heads: Vec<ProjectionHead>,
}

/// What [`ProjectionStore::projection_poll`] reads of a node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProjectionPoll {
    /// The node's current session (its highest generation), `None` when it never opened one.
    pub session: Option<RuntimeSessionReference>,
    /// The reference of its current projection, `None` when none was issued (or it has no
    /// session).
    pub reference: Option<AuthorityReference>,
}

/// A node's current projection with the generation it last reported applying.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredProjection {
    /// The signed current generation.
    pub signed: Signed<RuntimeNetworkProjection>,
    /// The generation the node last reported applying.
    pub applied: Option<AuthorityReference>,
}

/// One grant of a projection as the route table sees it: the destination lease, protocol, port.
pub type GrantedDestination = (Id, Protocol, u16);

/// A new generation of one node's projection, decided and signed by the domain.
#[derive(Debug, Clone, PartialEq)]
pub struct IssuedProjection {
    /// The signed generation; its `previous` is the head the issuer read (or none).
    pub signed: Signed<RuntimeNetworkProjection>,
    /// The digest of the inputs it was built from.
    pub inputs: String,
    /// Its grants' destinations, unique.
    pub granted: BTreeSet<GrantedDestination>,
    /// When it was issued, ms since the Unix epoch.
    pub issued_at: u64,
}

/// What an application report changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AppliedOutcome {
    /// Recorded (or already recorded, or older than the one recorded).
    Recorded,
    /// The reference is not a kept generation of the node's chain.
    Unknown,
}

/// A write transaction holding a cluster's lock, with the projection facts read under it
/// ([`ProjectionStore::lock_projections`]). Ends with commit or rollback; dropped before either,
/// it rolls back.
#[async_trait]
pub trait LockedProjections: LockedWrite {
    /// The facts read under the lock.
    fn facts(&self) -> &ProjectionFacts;

    /// The current projection of each of `node_ids` that has one.
    async fn current(&mut self, node_ids: &[NodeId]) -> Result<Vec<StoredProjection>, StoreError>;

    /// Writes each generation as its node's head (guarded by the head generation the facts
    /// hold), replaces its node's granted destinations and prunes generations before its
    /// previous one. A head that moved answers [`StoreError::Unavailable`]; the transaction must
    /// then not be committed.
    async fn write(&mut self, issued: &[IssuedProjection]) -> Result<(), StoreError>;

    /// The granted destinations of every node's current projection (after [`Self::write`]).
    async fn granted(&mut self) -> Result<BTreeSet<GrantedDestination>, StoreError>;

    /// Replaces the backends of the cluster's routes (sorted) when they differ from the stored
    /// ones, and then counts the route table's revision up; answers whether they differed.
    async fn replace_backends(&mut self, backends: &[RouteBackend]) -> Result<bool, StoreError>;
}

/// Persistence of signed runtime network projections.
#[async_trait]
pub trait ProjectionStore: Send + Sync {
    /// The projection facts of the cluster, read in one snapshot without a lock: of every node,
    /// or of the nodes of `nodes` (by key).
    async fn projection_facts(
        &self,
        cluster_id: &Id,
        nodes: Option<&BTreeSet<NodeId>>,
    ) -> Result<ProjectionFacts, StoreError>;

    /// A write transaction holding the cluster's lock with the facts (of every node, or of
    /// `nodes`) read under it; `None` when the cluster does not exist.
    async fn lock_projections(
        &self,
        cluster_id: &Id,
        nodes: Option<&BTreeSet<NodeId>>,
    ) -> Result<Option<Box<dyn LockedProjections>>, StoreError>;

    /// The node's current projection, if one was issued.
    async fn node_projection(&self, cluster_id: &Id, node_id: &NodeId) -> Result<Option<StoredProjection>, StoreError>;

    /// The node's current session and the reference of its current projection (read from the
    /// head alone), in one statement: what a node's poll with a `known` reference needs.
    async fn projection_poll(&self, cluster_id: &Id, node_id: &NodeId) -> Result<ProjectionPoll, StoreError>;

    /// Records that the node applied `applied`, a kept generation of its chain; a report older
    /// than the recorded one changes nothing.
    async fn record_projection_applied(
        &self,
        cluster_id: &Id,
        node_id: &NodeId,
        applied: &AuthorityReference,
    ) -> Result<AppliedOutcome, StoreError>;
}

/// Reads the projection facts of a cluster on one connection or transaction: of every node, or
/// of the nodes of `nodes` (their rows and heads by key).
async fn projection_facts_on(
    on: &mut impl HoldsConnection,
    backend: Backend,
    cluster_id: &Id,
    nodes: Option<&BTreeSet<NodeId>>,
) -> Result<ProjectionFacts, StoreError> {
    let plan = current_plan(on, cluster_id).await?;
    if plan.is_none() {
        // Without a plan there is no protected authority, so no projection is issued.
        return Ok(ProjectionFacts::default());
    }
    let heads_sql = "SELECT node_id, generation, digest, inputs, retains, applied_generation, applied_digest, granted \
         FROM runtime_network_projection_heads WHERE cluster_id = $1";
    let (node_rows, head_rows) = match nodes {
        None => (
            cluster_nodes(on, backend, cluster_id).await?,
            Statement::new(heads_sql).text(cluster_id.as_str()).fetch_all(on).await?,
        ),
        Some(nodes) => {
            let ids: Vec<&str> = nodes.iter().map(NodeId::as_str).collect();
            (
                nodes_by_ids(on, cluster_id, &ids).await?,
                rows_by_ids(on, cluster_id, &format!("{heads_sql} AND {{ids}}"), "node_id", &ids).await?,
            )
        }
    };
    let nodes = node_rows.into_iter().map(|stored| stored.node).collect();
    let leases = live_lease_set_on(on, cluster_id).await?;
    let routes = table_routes(on, backend, cluster_id).await?;
    let designation = cluster_designation_on(on, cluster_id).await?.flatten();
    let mut heads = head_rows.iter().map(projection_head_from_row).collect::<Result<Vec<_>, _>>()?;
    heads.sort_by(|left, right| compare_bytes(left.node_id.as_str(), right.node_id.as_str()));
    Ok(ProjectionFacts { plan, nodes, leases, routes, designation, heads })
}

/// The current projection of one node, its endpoint leases put back when its row keeps them by
/// reference.
async fn node_projection_on(
    on: &mut impl HoldsConnection,
    cluster_id: &Id,
    node_id: &NodeId,
) -> Result<Option<StoredProjection>, StoreError> {
    let Some(row) = Statement::new(
        "SELECT p.record, p.signature, p.endpoint_leases, h.node_id, h.applied_generation, h.applied_digest \
         FROM runtime_network_projection_heads h \
         JOIN runtime_network_projections p \
           ON p.cluster_id = h.cluster_id AND p.node_id = h.node_id AND p.generation = h.generation \
         WHERE h.cluster_id = $1 AND h.node_id = $2",
    )
    .text(cluster_id.as_str())
    .text(node_id.as_str())
    .fetch_optional(on)
    .await?
    else {
        return Ok(None);
    };
    let endpoints = match endpoint_references_from_row(&row)? {
        Some(references) => Some(referenced_leases_on(on, cluster_id, &references).await?),
        None => None,
    };
    stored_projection_from_row(&row, endpoints).map(Some)
}

/// Writes one issued generation as its node's head.
async fn write_issued(
    transaction: &mut Transaction,
    cluster_id: &Id,
    facts: &ProjectionFacts,
    issued: &IssuedProjection,
) -> Result<(), StoreError> {
    let projection = &issued.signed.payload;
    if projection.cluster_id != *cluster_id {
        return Err(StoreError::Corrupt("an issued projection names another cluster".into()));
    }
    // The endpoint leases are stored by reference: each must be a live lease as read under the
    // lock (so its generation is kept, with this content), or the record could not be read back.
    if !projection
        .endpoints
        .iter()
        .all(|endpoint| lease_by_id(&facts.leases, &endpoint.lease.id).map(AsRef::as_ref) == Some(&endpoint.lease))
    {
        return Err(StoreError::Corrupt("an issued projection names a lease that is not live".into()));
    }
    let node_id = projection.node_id.as_str();
    let head = facts.heads.iter().find(|head| head.node_id == projection.node_id);
    if projection.previous.as_ref() != head.map(|head| &head.reference) {
        return Err(StoreError::Corrupt("an issued projection does not link its node's head".into()));
    }
    let generation = counter_to_sql(projection.generation, "projection generation")?;
    let signature = record_text(&issued.signed.signature, "projection signature")?;
    Statement::new(
        "INSERT INTO runtime_network_projections \
           (cluster_id, node_id, generation, digest, record, endpoint_leases, signature, issued_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
    )
    .text(cluster_id.as_str())
    .text(node_id)
    .integer(generation)
    .text(projection.digest.as_str())
    .text(&projection.canonical_without_endpoints())
    .text(&endpoint_references_text(projection))
    .text(&signature)
    .integer(counter_to_sql(issued.issued_at, "projection issue time")?)
    .execute(transaction)
    .await?;
    let retains = !projection.retired_leases.is_empty() || !projection.withdrawals().is_empty();
    // A first generation inserts the head; a later one updates the head it was built against.
    // Either way exactly one row moves, or the head moved under the issuer.
    Statement::new(
        "INSERT INTO runtime_network_projection_heads \
           (cluster_id, node_id, generation, digest, inputs, retains, granted) \
         VALUES ($1, $2, $3, $4, $5, $6, $7) \
         ON CONFLICT (cluster_id, node_id) DO UPDATE \
           SET generation = EXCLUDED.generation, digest = EXCLUDED.digest, inputs = EXCLUDED.inputs, \
               retains = EXCLUDED.retains, granted = EXCLUDED.granted \
           WHERE runtime_network_projection_heads.generation = $8",
    )
    .text(cluster_id.as_str())
    .text(node_id)
    .integer(generation)
    .text(projection.digest.as_str())
    .text(&issued.inputs)
    .boolean(retains)
    .text(&granted_text(&issued.granted))
    .optional_integer(head.map(|head| counter_to_sql(head.reference.generation, "projection generation")).transpose()?)
    .execute_one(transaction, "a node's projection head moved while it was issued")
    .await?;
    // The node may still be applying the previous generation; older ones are not needed.
    Statement::new(
        "DELETE FROM runtime_network_projections WHERE cluster_id = $1 AND node_id = $2 AND generation < $3",
    )
    .text(cluster_id.as_str())
    .text(node_id)
    .integer(generation - 1)
    .execute(transaction)
    .await?;
    Ok(())
}

/// The `endpoint_leases` column: the id and generation of each endpoint lease (every generation
/// of every lease is kept), a JSON array of `[leaseId, generation]` in endpoint order.
fn endpoint_references_text(projection: &RuntimeNetworkProjection) -> String {
    let items: Vec<(&str, u64)> =
        projection.endpoints.iter().map(|endpoint| (endpoint.lease.id.as_str(), endpoint.lease.generation)).collect();
    serde_json::to_string(&items).expect("strings and integers serialize")
}

/// The `granted` column: a JSON array of `[leaseId, protocol, port]`.
fn granted_text(granted: &BTreeSet<GrantedDestination>) -> String {
    let items: Vec<(&str, &str, u16)> =
        granted.iter().map(|(lease_id, protocol, port)| (lease_id.as_str(), protocol.as_str(), *port)).collect();
    serde_json::to_string(&items).expect("strings and integers serialize")
}

struct SqlLockedProjections {
    transaction: Transaction,
    cluster_id: Id,
    facts: ProjectionFacts,
}

#[async_trait]
impl LockedProjections for SqlLockedProjections {
    fn facts(&self) -> &ProjectionFacts {
        &self.facts
    }

    async fn current(&mut self, node_ids: &[NodeId]) -> Result<Vec<StoredProjection>, StoreError> {
        let mut current = Vec::with_capacity(node_ids.len());
        for node_id in node_ids {
            if let Some(stored) = node_projection_on(&mut self.transaction, &self.cluster_id, node_id).await? {
                current.push(stored);
            }
        }
        Ok(current)
    }

    async fn write(&mut self, issued: &[IssuedProjection]) -> Result<(), StoreError> {
        for projection in issued {
            write_issued(&mut self.transaction, &self.cluster_id, &self.facts, projection).await?;
        }
        Ok(())
    }

    async fn granted(&mut self) -> Result<BTreeSet<GrantedDestination>, StoreError> {
        let mut granted = BTreeSet::new();
        for row in Statement::new("SELECT granted FROM runtime_network_projection_heads WHERE cluster_id = $1")
            .text(self.cluster_id.as_str())
            .fetch_all(&mut self.transaction)
            .await?
        {
            granted.extend(granted_destinations_from_row(&row)?);
        }
        Ok(granted)
    }

    async fn replace_backends(&mut self, backends: &[RouteBackend]) -> Result<bool, StoreError> {
        let changed = replace_route_backends(&mut self.transaction, &self.cluster_id, backends).await?;
        if changed {
            super::relays::bump_revision(&mut self.transaction, &self.cluster_id).await?;
        }
        Ok(changed)
    }
}

impl InTransaction for SqlLockedProjections {
    fn into_transaction(self: Box<Self>) -> Transaction {
        self.transaction
    }
}

#[async_trait]
impl ProjectionStore for SqlStore {
    async fn projection_facts(
        &self,
        cluster_id: &Id,
        nodes: Option<&BTreeSet<NodeId>>,
    ) -> Result<ProjectionFacts, StoreError> {
        let backend = self.pool.backend();
        let mut snapshot = self.pool.begin_snapshot().await?;
        let facts = projection_facts_on(&mut snapshot, backend, cluster_id, nodes).await?;
        snapshot.rollback().await?;
        Ok(facts)
    }

    async fn lock_projections(
        &self,
        cluster_id: &Id,
        nodes: Option<&BTreeSet<NodeId>>,
    ) -> Result<Option<Box<dyn LockedProjections>>, StoreError> {
        let backend = self.pool.backend();
        let mut transaction = self.pool.begin_write().await?;
        if !lock_reconcile(&mut transaction, backend, cluster_id).await? {
            transaction.rollback().await?;
            return Ok(None);
        }
        let facts = projection_facts_on(&mut transaction, backend, cluster_id, nodes).await?;
        Ok(Some(Box::new(SqlLockedProjections { transaction, cluster_id: cluster_id.clone(), facts })))
    }

    async fn node_projection(&self, cluster_id: &Id, node_id: &NodeId) -> Result<Option<StoredProjection>, StoreError> {
        node_projection_on(&mut self.pool.connection().await?, cluster_id, node_id).await
    }

    async fn projection_poll(&self, cluster_id: &Id, node_id: &NodeId) -> Result<ProjectionPoll, StoreError> {
        let row = Statement::new(
            "SELECT s.generation, s.session_id, s.controller_kind, s.controller_id, s.runtime_namespace, \
               h.node_id AS projection_node_id, h.generation AS projection_generation, \
               h.digest AS projection_digest \
             FROM runtime_sessions s \
             LEFT JOIN runtime_network_projection_heads h ON h.cluster_id = $1 AND h.node_id = $2 \
             WHERE s.cluster_id = $1 AND s.node_id = $2 ORDER BY s.generation DESC LIMIT 1",
        )
        .text(cluster_id.as_str())
        .text(node_id.as_str())
        .fetch_optional(&mut self.pool.connection().await?)
        .await?;
        let Some(row) = row else { return Ok(ProjectionPoll { session: None, reference: None }) };
        let reference = match row.optional_text("projection_digest")? {
            Some(_) => Some(AuthorityReference {
                id: row.id("projection_node_id", "projection node id")?,
                generation: row.counter("projection_generation", "projection generation")?,
                digest: row.digest("projection_digest", "projection digest")?,
            }),
            None => None,
        };
        Ok(ProjectionPoll { session: Some(session_from_row(cluster_id, node_id, &row)?), reference })
    }

    async fn record_projection_applied(
        &self,
        cluster_id: &Id,
        node_id: &NodeId,
        applied: &AuthorityReference,
    ) -> Result<AppliedOutcome, StoreError> {
        if applied.id.as_str() != node_id.as_str() {
            return Ok(AppliedOutcome::Unknown);
        }
        let generation = counter_to_sql(applied.generation, "projection generation")?;
        // One statement: the reference must be a kept generation of the node's chain; a report
        // older than the recorded one changes nothing.
        let kept = Statement::new(
            "SELECT 1 AS kept FROM runtime_network_projections \
             WHERE cluster_id = $1 AND node_id = $2 AND generation = $3 AND digest = $4",
        )
        .text(cluster_id.as_str())
        .text(node_id.as_str())
        .integer(generation)
        .text(applied.digest.as_str())
        .fetch_optional(&mut self.pool.connection().await?)
        .await?
        .is_some();
        if !kept {
            return Ok(AppliedOutcome::Unknown);
        }
        Statement::new(
            "UPDATE runtime_network_projection_heads SET applied_generation = $3, applied_digest = $4 \
             WHERE cluster_id = $1 AND node_id = $2 \
               AND (applied_generation IS NULL OR applied_generation < $3) \
               AND EXISTS (SELECT 1 FROM runtime_network_projections p \
                           WHERE p.cluster_id = $1 AND p.node_id = $2 AND p.generation = $3 AND p.digest = $4)",
        )
        .text(cluster_id.as_str())
        .text(node_id.as_str())
        .integer(generation)
        .text(applied.digest.as_str())
        .execute(&mut self.pool.connection().await?)
        .await?;
        Ok(AppliedOutcome::Recorded)
    }
}

/// The `granted` column of a projection head: a JSON array of `[leaseId, protocol, port]`.
pub(crate) fn granted_destinations_from_row(row: &Row) -> Result<Vec<GrantedDestination>, StoreError> {
    let corrupt = || StoreError::Corrupt("stored projection grants do not read back".into());
    let items: Vec<(String, String, u16)> = serde_json::from_str(&row.text("granted")?).map_err(|_| corrupt())?;
    items
        .into_iter()
        .map(|(lease_id, protocol, port)| {
            Ok((
                Id::parse(&lease_id).ok_or_else(corrupt)?,
                Protocol::parse(&protocol).ok_or_else(corrupt)?,
                Some(port).filter(|port| *port >= 1).ok_or_else(corrupt)?,
            ))
        })
        .collect()
}

/// `applied_generation`, `applied_digest` of a projection head, with its node as the id.
fn applied_projection_from_row(row: &Row, node_id: &NodeId) -> Result<Option<AuthorityReference>, StoreError> {
    match (row.optional_integer("applied_generation")?, row.optional_text("applied_digest")?) {
        (Some(generation), Some(digest)) => Ok(Some(AuthorityReference {
            id: Id::parse(node_id.as_str())
                .ok_or_else(|| StoreError::Corrupt("stored projection node id is not an id".into()))?,
            generation: counter_from_sql(generation, "applied projection generation")?,
            digest: Sha256Digest::parse(&digest)
                .ok_or_else(|| StoreError::Corrupt("stored applied projection digest is not a digest".into()))?,
        })),
        (None, None) => Ok(None),
        _ => Err(StoreError::Corrupt("stored applied projection is half a reference".into())),
    }
}

/// The reference of a node's current projection from its head's `node_id` (a projection's id is
/// its node's), `generation` and `digest`.
pub(crate) fn projection_reference_from_row(row: &Row) -> Result<AuthorityReference, StoreError> {
    Ok(AuthorityReference {
        id: row.id("node_id", "projection node id")?,
        generation: row.counter("generation", "projection generation")?,
        digest: row.digest("digest", "projection digest")?,
    })
}

/// The head of a node's projection chain: `node_id`, `generation`, `digest`, `inputs`,
/// `retains`, `applied_generation`, `applied_digest`.
pub(crate) fn projection_head_from_row(row: &Row) -> Result<ProjectionHead, StoreError> {
    let node_id = row.node_id("node_id", "projection node id")?;
    Ok(ProjectionHead {
        reference: projection_reference_from_row(row)?,
        inputs: row.text("inputs")?,
        retains: row.boolean("retains")?,
        applied: applied_projection_from_row(row, &node_id)?,
        granted: granted_destinations_from_row(row)?.into_iter().collect(),
        node_id,
    })
}

/// A node's current projection: `record`, `signature` (a signed projection) and its head's
/// `node_id`, `applied_generation`, `applied_digest`. `endpoints` are the endpoint leases of a row
/// that keeps them by reference ([`endpoint_references_from_row`]), put in before the digest is checked.
pub(crate) fn stored_projection_from_row(
    row: &Row,
    endpoints: Option<Vec<RuntimeNetworkLease>>,
) -> Result<StoredProjection, StoreError> {
    let node_id = row.node_id("node_id", "projection node id")?;
    Ok(StoredProjection {
        signed: row.signed("runtime network projection", |value| {
            let mut projection = RuntimeNetworkProjection::snapshot(value).ok()?;
            if let Some(leases) = endpoints {
                if !projection.endpoints.is_empty() {
                    return None;
                }
                projection.endpoints = leases.into_iter().map(|lease| ProjectionEndpoint { lease }).collect();
            }
            Some(projection)
        })?,
        applied: applied_projection_from_row(row, &node_id)?,
    })
}

/// `endpoint_leases` of a projection generation: the id and generation of each endpoint lease in
/// endpoint order (a JSON array of `[leaseId, generation]`), or `None` when the row's record holds
/// its endpoints whole.
pub(crate) fn endpoint_references_from_row(row: &Row) -> Result<Option<Vec<(Id, u64)>>, StoreError> {
    let corrupt = || StoreError::Corrupt("stored projection endpoint references do not read back".into());
    let Some(text) = row.optional_text("endpoint_leases")? else { return Ok(None) };
    let items: Vec<(String, u64)> = serde_json::from_str(&text).map_err(|_| corrupt())?;
    items
        .into_iter()
        .map(|(id, generation)| Ok((Id::parse(&id).ok_or_else(corrupt)?, generation)))
        .collect::<Result<Vec<_>, _>>()
        .map(Some)
}
