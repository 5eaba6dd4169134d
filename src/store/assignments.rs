//! Runtime assignments (`04-registration.md`, "Node sessions and assignments"): every generation
//! kept with its signature, a head per assignment naming its latest generation and whether it is
//! in its node's current set, and the reconcile's facts and locked transaction.
//!
//! The domain plans the changes from facts read under the cluster's reconcile lock
//! ([`AssignmentStore::lock_assignments`], for a [`FactScope`]: the whole cluster, or named
//! services read by key and index), and every change is written by guarded statements (insert of
//! a new primary key, head update where the generation is the expected one; the new generations
//! of one reconcile a batch per statement, guarded by the count of rows written), so two
//! controller processes never write two different generations with one number: the second waits
//! for the lock and re-reads the first's heads.
//!
//! **An assignment record that does not read back affects only itself.** Heads are read as
//! [`AssignmentHeads`]: a head whose record fails its contract reader is an [`UnreadableHead`],
//! described by the head's own columns, and the rest of the cluster reads on.

use super::codec::{counter_to_sql, read_digested, read_signed_assignment, record_text};
use super::designations::optional_designation_from_row;
use super::dialect::Backend;
use super::heads::{Heads, UnreadableHead, head_of_signed_chain, readable_or};
use super::inventory::{
    StoredCluster, StoredNode, cluster_from_row, cluster_nodes, lock_reconcile, nodes_by_ids, service_id_from_row,
    service_spec_from_row, service_volume_from_row,
};
use super::network::{LeaseSet, LeaseWriter, TransactionLeases};
use super::sql::{
    HoldsConnection, InTransaction, LockedWrite, Row, Statement, Transaction, head_record, placeholder_rows,
    rows_by_ids,
};
use super::storage_claims::{ClaimChange, ClaimHeads, apply_claim_changes_on, claim_heads_on, service_claim_heads_on};
use super::{FactScope, SqlStore, StoreError};
use crate::contract::assignment::RuntimeAssignment;
use crate::contract::designation::ClusterIngressDesignation;
use crate::contract::inventory::ServiceRuntimeSpec;
use crate::contract::network::{RuntimeNetworkAddressPlan, RuntimeNetworkProtectedAuthority};
use crate::contract::reader::compare_bytes;
use crate::contract::signing::Signed;
use crate::contract::{DigestedRecord as _, Id, NodeId};
use async_trait::async_trait;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// A stored assignment generation: the signed record and whether it is its node's current one
/// (the head's generation and active).
#[derive(Debug, Clone, PartialEq)]
pub struct StoredAssignment {
    /// The signed record.
    pub signed: Signed<RuntimeAssignment>,
    /// True when this generation is the assignment's head and in its node's current set.
    pub active: bool,
}

/// What an assignment's head row says of an [`UnreadableHead`] besides the common columns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AssignmentHeadExtra {
    /// True when it is in its node's current set.
    pub active: bool,
}

/// Head assignment generations, sorted by id: those whose record reads back, and those whose
/// record does not.
pub type AssignmentHeads = Heads<StoredAssignment, UnreadableHead<AssignmentHeadExtra>>;

head_of_signed_chain!(StoredAssignment);

/// What a reconcile reads about one cluster, for the services of its [`FactScope`].
#[derive(Debug, Clone)]
pub struct AssignmentFacts {
    /// The services these facts cover: `services`, `heads` and `claims` hold theirs only, and
    /// `nodes` the nodes their specs place them on.
    pub scope: FactScope,
    /// The cluster, if it exists.
    pub cluster: Option<StoredCluster>,
    /// The nodes (of the scope's placements, or every node), sorted by id.
    pub nodes: Vec<StoredNode>,
    /// The current spec of every service of the scope that is not deleted, sorted by service id.
    pub services: Vec<ServiceRuntimeSpec>,
    /// For every volume id a spec of `services` declares, the services of the cluster whose
    /// current spec declares it, in the order they came to declare it (`service_volumes`): the
    /// first holds it.
    pub volume_declarers: BTreeMap<Id, Vec<Id>>,
    /// The cluster's current Pallet ingress designation.
    pub designation: Option<ClusterIngressDesignation>,
    /// The head generation of every assignment of the scope's services (active or not), sorted
    /// by id.
    pub heads: AssignmentHeads,
    /// The cluster's current address plan, if it has one.
    pub plan: Option<RuntimeNetworkAddressPlan>,
    /// Every live lease of the cluster (whatever the scope), sorted by id: shared, kept in process
    /// under the cluster's lease set tag.
    pub leases: LeaseSet,
    /// The head generation of every runtime local storage claim of the scope's services, sorted
    /// by id.
    pub claims: ClaimHeads,
}

/// One change a reconcile writes.
#[derive(Debug, Clone, PartialEq)]
pub enum AssignmentChange {
    /// A new generation: 1 with no previous for a new id, else the head's generation + 1 linking
    /// it. It becomes the head, active.
    Issue(Box<Signed<RuntimeAssignment>>),
    /// The head generation `generation` of `id` enters (`true`) or leaves its node's current set.
    SetActive {
        /// The assignment.
        id: Id,
        /// The head generation the change expects.
        generation: u64,
        /// In the current set or not.
        active: bool,
    },
}

/// Persistence of runtime assignments: the reconcile's facts and locked transaction, a node's
/// current set, one generation, and which services a change touches.
#[async_trait]
pub trait AssignmentStore: Send + Sync {
    /// The facts a reconcile of `scope` decides from, read without a lock.
    async fn assignment_facts(&self, cluster_id: &Id, scope: &FactScope) -> Result<AssignmentFacts, StoreError>;

    /// A write transaction that holds the cluster's lock, with the facts of `scope` read under it.
    async fn lock_assignments(
        &self,
        cluster_id: &Id,
        scope: &FactScope,
    ) -> Result<Box<dyn LockedAssignments>, StoreError>;

    /// The services of the cluster whose current spec declares a volume id that one of
    /// `service_ids`' current specs declares (`service_ids` among them when they declare any).
    async fn services_sharing_volumes(
        &self,
        cluster_id: &Id,
        service_ids: &BTreeSet<Id>,
    ) -> Result<BTreeSet<Id>, StoreError>;

    /// The services with an assignment head or a claim head on the node.
    async fn services_on_node(&self, cluster_id: &Id, node_id: &NodeId) -> Result<BTreeSet<Id>, StoreError>;

    /// The node's current assignment set (active heads on the node), sorted by id.
    async fn node_assignments(&self, cluster_id: &Id, node_id: &NodeId) -> Result<AssignmentHeads, StoreError>;

    /// One stored assignment generation.
    async fn get_assignment(
        &self,
        cluster_id: &Id,
        assignment_id: &Id,
        generation: u64,
    ) -> Result<Option<StoredAssignment>, StoreError>;
}

/// A write transaction holding a cluster's lock, with the assignment facts read under it
/// ([`AssignmentStore::lock_assignments`]). It ends with [`LockedWrite::commit`] or
/// [`LockedWrite::rollback`]; dropped before either, it rolls back.
#[async_trait]
pub trait LockedAssignments: LockedWrite {
    /// The facts, read under the lock.
    fn facts(&self) -> &AssignmentFacts;

    /// Writes `changes` with guarded statements. A change that does not fit the heads of
    /// [`LockedAssignments::facts`] ([`check_assignment_changes`]) writes nothing and answers
    /// [`StoreError::Corrupt`] (a bug in the planner); a guard that finds another state answers
    /// [`StoreError::Unavailable`]. Either way the transaction must not be committed.
    async fn apply(&mut self, changes: &[AssignmentChange]) -> Result<(), StoreError>;

    /// The leases of the locked cluster in the same transaction, so leases follow the applied
    /// changes atomically.
    fn leases(&mut self) -> Box<dyn LeaseWriter + '_>;
    /// Writes new claim generations (issued at `issued_at`) with guarded statements, checked
    /// against the claim heads of [`LockedAssignments::facts`] like [`LockedAssignments::apply`].
    async fn apply_claims(&mut self, changes: &[ClaimChange], issued_at: u64) -> Result<(), StoreError>;
}

/// The head generations with their records, as [`assignment_head_from_row`] reads them; a statement
/// adds its `WHERE` and `ORDER BY`.
fn heads(backend: Backend) -> String {
    let record = head_record(backend, "runtime_assignments", "r", "assignment_id", &["record", "signature", "digest"]);
    format!(
        "SELECT {}, h.active, h.assignment_id, h.generation AS head_generation, h.node_id, h.service_id \
         FROM runtime_assignment_heads h {}",
        record.columns, record.join
    )
}

/// What a reconcile's facts read beside the cluster row, in one statement ([`cluster_facts_from_row`]
/// reads it): the cluster's current designation, its current address plan (the highest
/// revision) and protected authority (the highest generation), and whether it has a live lease
/// and a storage claim head. No row: no such cluster.
///
/// It is a statement of its own after the cluster's row is locked, never part of the locking
/// statement: PostgreSQL evaluates a `SELECT … FOR UPDATE`'s other subqueries in the snapshot it
/// took before waiting for the lock, so they would miss what the previous holder wrote.
const CLUSTER_FACTS: &str = "SELECT \
       (SELECT d.record FROM ingress_designations d \
          WHERE d.cluster_id = c.id AND d.generation = c.designation_generation) AS designation, \
       (SELECT p.record FROM runtime_network_address_plans p \
          WHERE p.cluster_id = c.id ORDER BY p.revision DESC LIMIT 1) AS plan, \
       (SELECT a.record FROM runtime_network_protected_authorities a \
          WHERE a.cluster_id = c.id ORDER BY a.generation DESC LIMIT 1) AS authority, \
       EXISTS (SELECT 1 FROM runtime_network_lease_heads l WHERE l.cluster_id = c.id AND l.live) AS live_leases, \
       EXISTS (SELECT 1 FROM runtime_local_storage_claim_heads h WHERE h.cluster_id = c.id) AS claims \
     FROM clusters c WHERE c.id = $1";

/// Reads the facts of a reconcile of `scope`; `lock` takes the cluster's lock first (inside a
/// write transaction). The live leases and the claim heads are read only when the cluster has
/// any. A scope of services reads each by key or index: the services' specs, the nodes their
/// placements name, their heads and claim heads, and the declarers of their volume ids.
async fn read_facts(
    on: &mut impl HoldsConnection,
    backend: Backend,
    cluster_id: &Id,
    scope: &FactScope,
    lock: bool,
) -> Result<AssignmentFacts, StoreError> {
    if lock && !lock_reconcile(on, backend, cluster_id).await? {
        return Ok(AssignmentFacts {
            scope: scope.clone(),
            cluster: None,
            nodes: Vec::new(),
            services: Vec::new(),
            volume_declarers: BTreeMap::new(),
            designation: None,
            heads: AssignmentHeads::default(),
            plan: None,
            leases: LeaseSet::default(),
            claims: ClaimHeads::default(),
        });
    }
    // Read after the lock, in a statement of its own, so it is what the lock's last holder saw.
    let cluster = Statement::new("SELECT record, revision FROM clusters WHERE id = $1")
        .text(cluster_id.as_str())
        .fetch_optional_as(on, cluster_from_row)
        .await?;
    let facts = Statement::new(CLUSTER_FACTS)
        .text(cluster_id.as_str())
        .fetch_optional_as(on, cluster_facts_from_row)
        .await?
        .unwrap_or_default();
    let bytewise = backend.bytewise();
    // Each current spec by one probe of the revisions' key (never a join planned from statistics,
    // `sql::head_record`; its revision is the service row's own).
    let services_sql = "SELECT (SELECT r.body FROM service_spec_revisions r \
                 WHERE r.cluster_id = s.cluster_id AND r.service_id = s.service_id \
                   AND r.revision = s.current_revision) AS body, \
                s.current_revision AS revision \
         FROM services s WHERE s.cluster_id = $1 AND NOT s.deleted";
    let heads_sql = format!("{} WHERE h.cluster_id = $1", heads(backend));
    let (service_rows, head_rows) = match scope {
        FactScope::Cluster => (
            Statement::composed(format!("{services_sql} ORDER BY s.service_id{bytewise}"))
                .text(cluster_id.as_str())
                .fetch_all(on)
                .await?,
            Statement::composed(format!("{heads_sql} ORDER BY h.assignment_id{bytewise}"))
                .text(cluster_id.as_str())
                .fetch_all(on)
                .await?,
        ),
        FactScope::Services(ids) => {
            let ids: Vec<&str> = ids.iter().map(Id::as_str).collect();
            (
                rows_by_ids(on, cluster_id, &format!("{services_sql} AND {{ids}}"), "s.service_id", &ids).await?,
                rows_by_ids(on, cluster_id, &format!("{heads_sql} AND {{ids}}"), "h.service_id", &ids).await?,
            )
        }
    };
    let mut services = service_rows.iter().map(service_spec_from_row).collect::<Result<Vec<_>, _>>()?;
    services.sort_by(|left, right| compare_bytes(left.body.service_id.as_str(), right.body.service_id.as_str()));
    let heads = AssignmentHeads::from_rows(&head_rows, assignment_head_from_row)?;
    let (nodes, declarer_rows) = match scope {
        FactScope::Cluster => (
            cluster_nodes(on, backend, cluster_id).await?,
            Statement::new(
                "SELECT volume_id, service_id FROM service_volumes WHERE cluster_id = $1 \
                 ORDER BY declared, service_id",
            )
            .text(cluster_id.as_str())
            .fetch_all(on)
            .await?,
        ),
        FactScope::Services(_) => {
            let node_ids: BTreeSet<&str> =
                services.iter().flat_map(|spec| spec.body.placement.node_ids.iter().map(NodeId::as_str)).collect();
            let node_ids: Vec<&str> = node_ids.into_iter().collect();
            let volume_ids: BTreeSet<&str> =
                services.iter().flat_map(|spec| spec.body.volumes.iter().map(|volume| volume.id.as_str())).collect();
            let volume_ids: Vec<&str> = volume_ids.into_iter().collect();
            (
                nodes_by_ids(on, cluster_id, &node_ids).await?,
                rows_by_ids(
                    on,
                    cluster_id,
                    "SELECT volume_id, service_id FROM service_volumes WHERE cluster_id = $1 AND {ids} \
                     ORDER BY declared, service_id",
                    "volume_id",
                    &volume_ids,
                )
                .await?,
            )
        }
    };
    let mut volume_declarers: BTreeMap<Id, Vec<Id>> = BTreeMap::new();
    for row in &declarer_rows {
        let (volume_id, service_id) = service_volume_from_row(row)?;
        volume_declarers.entry(volume_id).or_default().push(service_id);
    }
    let leases =
        if facts.live_leases { super::network::live_lease_set_on(on, cluster_id).await? } else { Arc::default() };
    let claims = match (facts.claims, scope) {
        (false, _) => ClaimHeads::default(),
        (true, FactScope::Cluster) => claim_heads_on(on, backend, cluster_id).await?,
        (true, FactScope::Services(ids)) => {
            let ids: Vec<&str> = ids.iter().map(Id::as_str).collect();
            service_claim_heads_on(on, backend, cluster_id, &ids).await?
        }
    };
    let (designation, plan) = (facts.designation, facts.plan);
    Ok(AssignmentFacts {
        scope: scope.clone(),
        cluster,
        nodes,
        services,
        volume_declarers,
        designation,
        heads,
        plan,
        leases,
        claims,
    })
}

/// A cluster's facts beside its row ([`CLUSTER_FACTS`]); all absent for a cluster that does not
/// exist.
#[derive(Debug, Default)]
pub(crate) struct ClusterFacts {
    /// Its current designation.
    pub(crate) designation: Option<ClusterIngressDesignation>,
    /// Its current address plan.
    pub(crate) plan: Option<RuntimeNetworkAddressPlan>,
    /// True when it has a live lease.
    pub(crate) live_leases: bool,
    /// True when it has a storage claim head.
    pub(crate) claims: bool,
}

/// The signature block of a signed assignment as stored text.
fn signature_text(signed: &Signed<RuntimeAssignment>) -> Result<String, StoreError> {
    record_text(&signed.signature, "assignment signature")
}

/// Checks that the planned changes fit the heads they were decided from: an issued generation
/// links its head (or is generation 1 of a new id) in this cluster with a true digest, a
/// `SetActive` names a head generation, and no assignment changes twice in one commit.
fn check_assignment_changes(
    cluster_id: &Id,
    heads: &AssignmentHeads,
    changes: &[AssignmentChange],
) -> Result<(), StoreError> {
    let refuse = |rule: &str| Err(StoreError::Corrupt(format!("assignment judge broke a store rule: {rule}")));
    let head = |id: &Id| heads.reference(id);
    let mut seen = std::collections::HashSet::new();
    for change in changes {
        let id = match change {
            AssignmentChange::Issue(signed) => &signed.payload.id,
            AssignmentChange::SetActive { id, .. } => id,
        };
        if !seen.insert(id.clone()) {
            return refuse("one assignment changes twice");
        }
        match change {
            AssignmentChange::Issue(signed) => {
                let payload = &signed.payload;
                if payload.cluster_id != *cluster_id {
                    return refuse("the assignment names another cluster");
                }
                if payload.compute_digest() != payload.digest {
                    return refuse("the assignment digest does not match");
                }
                match head(&payload.id) {
                    None if payload.generation != 1 || payload.previous.is_some() => {
                        return refuse("the first generation must be 1 with no previous");
                    }
                    Some(current)
                        if payload.generation != current.generation + 1
                            || payload.previous.as_ref() != Some(&current) =>
                    {
                        return refuse("the assignment does not link its head");
                    }
                    _ => {}
                }
            }
            AssignmentChange::SetActive { id, generation, .. } => {
                if head(id).map(|current| current.generation) != Some(*generation) {
                    return refuse("the activation names no head generation");
                }
            }
        }
    }
    Ok(())
}

/// The most new generations one statement of [`apply_changes`] writes.
const ISSUES_PER_STATEMENT: usize = 64;

/// Writes checked changes with guarded statements; false when a guard found another state. New
/// generations are written a batch at a time: their records in one statement, the heads of new
/// ids in one, and the heads that move to them in one, each statement guarded by the count of
/// rows it must write.
async fn apply_changes(
    transaction: &mut impl HoldsConnection,
    cluster_id: &Id,
    changes: &[AssignmentChange],
) -> Result<bool, StoreError> {
    let issued: Vec<&Signed<RuntimeAssignment>> = changes
        .iter()
        .filter_map(|change| match change {
            AssignmentChange::Issue(signed) => Some(&**signed),
            AssignmentChange::SetActive { .. } => None,
        })
        .collect();
    for batch in issued.chunks(ISSUES_PER_STATEMENT) {
        if !issue_generations(transaction, cluster_id, batch).await? {
            return Ok(false);
        }
    }
    for change in changes {
        let AssignmentChange::SetActive { id, generation, active } = change else { continue };
        let updated = Statement::new(
            "UPDATE runtime_assignment_heads SET active = $4 \
             WHERE cluster_id = $1 AND assignment_id = $2 AND generation = $3",
        )
        .text(cluster_id.as_str())
        .text(id.as_str())
        .integer(counter_to_sql(*generation, "assignment generation")?)
        .boolean(*active)
        .execute(transaction)
        .await?;
        if updated != 1 {
            return Ok(false);
        }
    }
    Ok(true)
}

/// One generation's row of `runtime_assignments`, as text ready to bind.
struct GenerationRow<'a> {
    payload: &'a RuntimeAssignment,
    generation: i64,
    previous: Option<i64>,
    record: String,
    signature: String,
}

impl<'a> GenerationRow<'a> {
    /// Binds what a head row says of this generation: assignment id, generation, node, service.
    fn bind_head(&'a self, statement: Statement<'a>) -> Statement<'a> {
        statement
            .text(self.payload.id.as_str())
            .integer(self.generation)
            .text(self.payload.node_id.as_str())
            .text(self.payload.service_id.as_str())
    }
}

/// Runs a batch write of `rows` rows; true when it wrote every one.
async fn wrote_all(
    batch: Statement<'_>,
    transaction: &mut impl HoldsConnection,
    rows: usize,
) -> Result<bool, StoreError> {
    Ok(batch.execute(transaction).await? == rows as u64)
}

/// Writes a batch of new generations (each of its own assignment): the records, then each new
/// id's head (active), then each moved head (from the previous generation, active); false when a
/// record already exists, a new id already has a head, or a head is not at the previous
/// generation.
async fn issue_generations(
    transaction: &mut impl HoldsConnection,
    cluster_id: &Id,
    batch: &[&Signed<RuntimeAssignment>],
) -> Result<bool, StoreError> {
    let rows = batch
        .iter()
        .map(|signed| {
            let payload = &signed.payload;
            Ok(GenerationRow {
                payload,
                generation: counter_to_sql(payload.generation, "assignment generation")?,
                previous: payload
                    .previous
                    .as_ref()
                    .map(|previous| counter_to_sql(previous.generation, "assignment generation"))
                    .transpose()?,
                record: record_text(payload, "runtime assignment")?,
                signature: signature_text(signed)?,
            })
        })
        .collect::<Result<Vec<_>, StoreError>>()?;
    let mut records = Statement::composed(format!(
        "INSERT INTO runtime_assignments \
           (cluster_id, assignment_id, generation, node_id, service_id, digest, record, signature) \
         VALUES {} ON CONFLICT DO NOTHING",
        placeholder_rows(rows.len(), 7, "$1, ", "")
    ))
    .text(cluster_id.as_str());
    for row in &rows {
        records = row.bind_head(records).text(row.payload.digest.as_str()).text(&row.record).text(&row.signature);
    }
    if !wrote_all(records, transaction, rows.len()).await? {
        return Ok(false);
    }
    let (first, moved): (Vec<&GenerationRow>, Vec<&GenerationRow>) =
        rows.iter().partition(|row| row.previous.is_none());
    if !first.is_empty() {
        let mut heads = Statement::composed(format!(
            "INSERT INTO runtime_assignment_heads \
               (cluster_id, assignment_id, generation, node_id, service_id, active) \
             VALUES {} ON CONFLICT DO NOTHING",
            placeholder_rows(first.len(), 4, "$1, ", ", TRUE")
        ))
        .text(cluster_id.as_str());
        for row in &first {
            heads = row.bind_head(heads);
        }
        if !wrote_all(heads, transaction, first.len()).await? {
            return Ok(false);
        }
    }
    if moved.is_empty() {
        return Ok(true);
    }
    // `v.column1` … `v.column5`: assignment id, new generation, node, service, previous
    // generation (the names both backends give the columns of a `VALUES` list).
    let mut heads = Statement::composed(format!(
        "UPDATE runtime_assignment_heads SET generation = v.column2, node_id = v.column3, \
           service_id = v.column4, active = TRUE \
         FROM (VALUES {}) AS v \
         WHERE runtime_assignment_heads.cluster_id = $1 \
           AND runtime_assignment_heads.assignment_id = v.column1 \
           AND runtime_assignment_heads.generation = v.column5",
        placeholder_rows(moved.len(), 5, "", "")
    ))
    .text(cluster_id.as_str());
    for row in &moved {
        heads = row.bind_head(heads).optional_integer(row.previous);
    }
    wrote_all(heads, transaction, moved.len()).await
}

/// [`LockedAssignments`] on a write transaction of a [`SqlStore`].
struct LockedSqlAssignments {
    transaction: Transaction,
    cluster_id: Id,
    facts: AssignmentFacts,
}

#[async_trait]
impl LockedAssignments for LockedSqlAssignments {
    fn facts(&self) -> &AssignmentFacts {
        &self.facts
    }

    async fn apply(&mut self, changes: &[AssignmentChange]) -> Result<(), StoreError> {
        check_assignment_changes(&self.cluster_id, &self.facts.heads, changes)?;
        if !apply_changes(&mut self.transaction, &self.cluster_id, changes).await? {
            return Err(StoreError::Unavailable("an assignment head moved under the cluster lock".into()));
        }
        Ok(())
    }

    fn leases(&mut self) -> Box<dyn LeaseWriter + '_> {
        Box::new(TransactionLeases::new(&mut self.transaction, &self.cluster_id))
    }

    async fn apply_claims(&mut self, changes: &[ClaimChange], issued_at: u64) -> Result<(), StoreError> {
        apply_claim_changes_on(&mut self.transaction, &self.cluster_id, &self.facts.claims, changes, issued_at).await
    }
}

impl InTransaction for LockedSqlAssignments {
    fn into_transaction(self: Box<Self>) -> Transaction {
        self.transaction
    }
}

#[async_trait]
impl AssignmentStore for SqlStore {
    async fn assignment_facts(&self, cluster_id: &Id, scope: &FactScope) -> Result<AssignmentFacts, StoreError> {
        read_facts(&mut self.pool.connection().await?, self.pool.backend(), cluster_id, scope, false).await
    }

    async fn lock_assignments(
        &self,
        cluster_id: &Id,
        scope: &FactScope,
    ) -> Result<Box<dyn LockedAssignments>, StoreError> {
        let mut transaction = self.pool.begin_write().await?;
        let facts = read_facts(&mut transaction, self.pool.backend(), cluster_id, scope, true).await?;
        Ok(Box::new(LockedSqlAssignments { transaction, cluster_id: cluster_id.clone(), facts }))
    }

    async fn services_sharing_volumes(
        &self,
        cluster_id: &Id,
        service_ids: &BTreeSet<Id>,
    ) -> Result<BTreeSet<Id>, StoreError> {
        let ids: Vec<&str> = service_ids.iter().map(Id::as_str).collect();
        let rows = rows_by_ids(
            &mut self.pool.connection().await?,
            cluster_id,
            "SELECT DISTINCT o.service_id FROM service_volumes v \
             JOIN service_volumes o ON o.cluster_id = v.cluster_id AND o.volume_id = v.volume_id \
             WHERE v.cluster_id = $1 AND {ids}",
            "v.service_id",
            &ids,
        )
        .await?;
        rows.iter().map(service_id_from_row).collect()
    }

    async fn services_on_node(&self, cluster_id: &Id, node_id: &NodeId) -> Result<BTreeSet<Id>, StoreError> {
        Statement::new(
            "SELECT service_id FROM runtime_assignment_heads WHERE cluster_id = $1 AND node_id = $2 \
             UNION SELECT service_id FROM runtime_local_storage_claim_heads WHERE cluster_id = $1 AND node_id = $2",
        )
        .text(cluster_id.as_str())
        .text(node_id.as_str())
        .fetch_all_as(&mut self.pool.connection().await?, service_id_from_row)
        .await
    }

    async fn node_assignments(&self, cluster_id: &Id, node_id: &NodeId) -> Result<AssignmentHeads, StoreError> {
        AssignmentHeads::from_rows(
            &Statement::composed(format!(
                "{} WHERE h.cluster_id = $1 AND h.node_id = $2 AND h.active ORDER BY h.assignment_id{}",
                heads(self.pool.backend()),
                self.pool.backend().bytewise()
            ))
            .text(cluster_id.as_str())
            .text(node_id.as_str())
            .fetch_all(&mut self.pool.connection().await?)
            .await?,
            assignment_head_from_row,
        )
    }

    async fn get_assignment(
        &self,
        cluster_id: &Id,
        assignment_id: &Id,
        generation: u64,
    ) -> Result<Option<StoredAssignment>, StoreError> {
        Statement::new(
            "SELECT a.record, a.signature, COALESCE(h.generation = a.generation AND h.active, FALSE) AS active \
             FROM runtime_assignments a \
             LEFT JOIN runtime_assignment_heads h ON h.cluster_id = a.cluster_id AND h.assignment_id = a.assignment_id \
             WHERE a.cluster_id = $1 AND a.assignment_id = $2 AND a.generation = $3",
        )
        .text(cluster_id.as_str())
        .text(assignment_id.as_str())
        .integer(counter_to_sql(generation, "assignment generation")?)
        .fetch_optional_as(&mut self.pool.connection().await?, assignment_from_row)
        .await
    }
}

/// A cluster's facts beside its row (`sessions.rs`, `CLUSTER_FACTS`): `designation` (NULL:
/// none), `plan` and `authority` (NULL: no plan), `live_leases`, `claims`. A plan whose protected
/// authority is missing or does not read back is [`StoreError::Corrupt`].
pub(crate) fn cluster_facts_from_row(row: &Row) -> Result<ClusterFacts, StoreError> {
    let designation = optional_designation_from_row(row, "designation")?;
    let plan = row.optional_text("plan")?.map(|text| read_digested(&text, "address plan")).transpose()?;
    if plan.is_some() {
        let authority = row
            .optional_text("authority")?
            .ok_or_else(|| StoreError::Corrupt("an address plan without a protected authority".into()))?;
        read_digested::<RuntimeNetworkProtectedAuthority>(&authority, "protected authority")?;
    }
    Ok(ClusterFacts { designation, plan, live_leases: row.boolean("live_leases")?, claims: row.boolean("claims")? })
}

/// A signed assignment generation: `record` (the payload, read through the contract's snapshot
/// with its digest checked) and `signature` (the signature block).
pub(crate) fn signed_assignment_from_row(row: &Row) -> Result<Signed<RuntimeAssignment>, StoreError> {
    read_signed_assignment(&row.text("record")?, &row.text("signature")?)
}

/// A stored assignment generation: [`signed_assignment_from_row`]'s columns and `active`.
pub(crate) fn assignment_from_row(row: &Row) -> Result<StoredAssignment, StoreError> {
    Ok(StoredAssignment { signed: signed_assignment_from_row(row)?, active: row.boolean("active")? })
}

/// A head assignment generation: [`assignment_from_row`]'s columns, or, when those do not read back, what
/// the head's own columns say of it (`assignment_id`, `head_generation`, `digest`, `node_id`,
/// `service_id`, `active`), so that one unreadable record affects only itself.
pub(crate) fn assignment_head_from_row(
    row: &Row,
) -> Result<Result<StoredAssignment, UnreadableHead<AssignmentHeadExtra>>, StoreError> {
    readable_or(assignment_from_row(row), |problem| {
        UnreadableHead::from_head_row(
            row,
            "assignment_id",
            "assignment",
            AssignmentHeadExtra { active: row.boolean("active")? },
            problem,
        )
    })
}
