//! Runtime network address plans, protected authorities and leases (`05-projection.md`,
//! "Address plan", "Leases").
//!
//! Plans: every revision is kept; the current one is the highest. Authorities: every generation
//! is kept with the plan revision that made it; the current one is the highest. Leases: every
//! generation is kept, and a head per lease names its latest generation, the assignment holding
//! it, its link subnet and whether it is live.
//!
//! Every write runs in a write transaction that holds the cluster's reconcile lock ([`lock_reconcile`]):
//! a plan write in [`NetworkStore::lock_network`]'s, lease changes also in the assignment
//! reconcile's ([`LockedAssignments::leases`](super::LockedAssignments::leases)), so leases follow
//! assignments atomically. The domain decides every change from facts read under that lock, and
//! each change is a guarded statement (an insert of a new primary key, a head update where the
//! generation is the expected one). Beneath the lock, the database itself refuses overlapping
//! live leases: every link subnet is a `/30` on a `/30` boundary, so two overlap only when equal,
//! and a partial unique index holds one live lease per link subnet (and one per assignment).
//!
//! **Every change of a cluster's lease heads writes a new tag for its live lease set**
//! ([`apply_leases_on`], the only writer of lease heads), in the same transaction. A tag is a
//! fresh random value, so it names one content for good: [`live_leases_on`] keeps the leases it
//! parsed under their tag ([`LeaseSets`]) and, while the tag holds, reads only the tag instead of
//! every lease record (4 096 records and their digests per read in a large cluster). A write of
//! this process keeps the set it made under its new tag, so only another process's write makes
//! a reader parse the records again.

use super::codec::{counter_to_sql, read_digested, read_signed_assignment, record_text};
use super::inventory::lock_reconcile;
use super::sql::{
    HoldsConnection, InTransaction, LockedWrite, Row, Statement, Transaction, backend_of, head_record, placeholder_rows,
};
use super::{FactScope, SqlStore, StoreError};
use crate::contract::network::{RuntimeNetworkAddressPlan, RuntimeNetworkLease, RuntimeNetworkProtectedAuthority};
use crate::contract::reader::compare_bytes;
use crate::contract::{DigestedRecord as _, Id, NodeId};
use async_trait::async_trait;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, LazyLock, Mutex};

/// A cluster's current address plan with the protected authority its platform endpoints make.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredNetworkPlan {
    /// The plan, digest included.
    pub plan: RuntimeNetworkAddressPlan,
    /// The cluster's current protected authority.
    pub authority: RuntimeNetworkProtectedAuthority,
}

/// An assignment in its node's current set, as lease allocation sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseHolder {
    /// The assignment.
    pub assignment_id: Id,
    /// The organization of its service's spec (whose pool the lease comes from).
    pub organization_id: Id,
    /// Its service.
    pub service_id: Id,
    /// The node it is placed on.
    pub node_id: NodeId,
}

/// What a lease reconcile decides from, read under the cluster's lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseFacts {
    /// The services whose leases follow their assignments; the other leases stay as they are.
    pub scope: FactScope,
    /// The cluster's current address plan, if it has one.
    pub plan: Option<RuntimeNetworkAddressPlan>,
    /// Every assignment of the scope's services in its node's current set, sorted by assignment
    /// id. Left empty when the cluster has neither a plan nor a live lease (nothing to allocate or
    /// release).
    pub holders: Vec<LeaseHolder>,
    /// The head generation of every live lease of the cluster (whatever the scope), sorted by
    /// lease id; shared, kept in process under the cluster's lease set tag.
    pub leases: LeaseSet,
}

/// One change of a lease reconcile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseChange {
    /// A new generation: 1 with no previous for a new lease, else the live head's generation + 1
    /// linking it (same address). It becomes the lease's head, live.
    Issue(Box<RuntimeNetworkLease>),
    /// The live head generation `generation` of lease `id` is released.
    Release {
        /// The lease.
        id: Id,
        /// The head generation the change expects.
        generation: u64,
    },
}

/// The lease part of a write transaction that holds a cluster's lock.
#[async_trait]
pub trait LeaseWriter: Send {
    /// The lease facts of the locked cluster for the services of `scope`, read in the
    /// transaction (so after its earlier writes).
    async fn lease_facts(&mut self, scope: &FactScope) -> Result<LeaseFacts, StoreError>;

    /// Writes `changes` in order with guarded statements. A change that breaks a rule of the
    /// store (a digest that is not the content's, another cluster, a chain that does not link,
    /// one lease changed twice) writes nothing and answers [`StoreError::Corrupt`] (a bug in the
    /// planner); a guard that finds another state, or a live lease overlapping another, answers
    /// [`StoreError::Unavailable`]. Either way the transaction must not be committed.
    async fn apply_leases(&mut self, changes: &[LeaseChange]) -> Result<(), StoreError>;
}

/// A write transaction holding a cluster's lock, with its current plan read under it
/// ([`NetworkStore::lock_network`]). It ends with [`LockedWrite::commit`] or
/// [`LockedWrite::rollback`]; dropped before either, it rolls back.
#[async_trait]
pub trait LockedNetwork: LeaseWriter + LockedWrite {
    /// The cluster's current plan and authority, read under the lock.
    fn current(&self) -> Option<&StoredNetworkPlan>;

    /// Writes `plan` as the next revision (the current one + 1, or 1) and, when given,
    /// `authority` as the authority's next generation (made by this revision). A revision or
    /// generation that does not follow the current one writes nothing and answers
    /// [`StoreError::Corrupt`].
    async fn write_plan(
        &mut self,
        plan: &RuntimeNetworkAddressPlan,
        authority: Option<&RuntimeNetworkProtectedAuthority>,
    ) -> Result<(), StoreError>;
}

/// Persistence of address plans, protected authorities and leases.
#[async_trait]
pub trait NetworkStore: Send + Sync {
    /// The cluster's current address plan and protected authority, if it has a plan.
    async fn network_plan(&self, cluster_id: &Id) -> Result<Option<StoredNetworkPlan>, StoreError>;

    /// The head generation of every live lease of the cluster, sorted by lease id.
    async fn live_leases(&self, cluster_id: &Id) -> Result<Vec<RuntimeNetworkLease>, StoreError>;

    /// Every generation of one lease, oldest first (empty for an unknown lease).
    async fn lease_generations(&self, cluster_id: &Id, lease_id: &Id) -> Result<Vec<RuntimeNetworkLease>, StoreError>;

    /// A write transaction that holds the cluster's lock, with its current plan read under it;
    /// `None` when the cluster does not exist.
    async fn lock_network(&self, cluster_id: &Id) -> Result<Option<Box<dyn LockedNetwork>>, StoreError>;
}

/// The cluster's current plan and authority.
pub(crate) async fn current_plan(
    on: &mut impl HoldsConnection,
    cluster_id: &Id,
) -> Result<Option<StoredNetworkPlan>, StoreError> {
    let plan = Statement::new(
        "SELECT record FROM runtime_network_address_plans WHERE cluster_id = $1 ORDER BY revision DESC LIMIT 1",
    )
    .text(cluster_id.as_str())
    .fetch_optional_as(on, address_plan_from_row)
    .await?;
    let Some(plan) = plan else { return Ok(None) };
    let authority = Statement::new(
        "SELECT record FROM runtime_network_protected_authorities WHERE cluster_id = $1 \
         ORDER BY generation DESC LIMIT 1",
    )
    .text(cluster_id.as_str())
    .fetch_optional_as(on, protected_authority_from_row)
    .await?
    .ok_or_else(|| StoreError::Corrupt("an address plan without a protected authority".into()))?;
    Ok(Some(StoredNetworkPlan { plan, authority }))
}

/// Every live lease of a cluster, sorted by lease id (bytewise): shared, and each lease behind an
/// `Arc` of its own, so the set after a change is made from the set before it without copying
/// its leases.
pub type LeaseSet = Arc<Vec<Arc<RuntimeNetworkLease>>>;

/// The most leases [`LeaseSets`] holds over all clusters (a parsed lease is some 600 bytes).
const LEASE_SETS_CAPACITY: usize = 131_072;

/// How many sets [`LeaseSets`] keeps per cluster: the one a write replaced stays beside the one
/// it made, so readers that read the tag just before the write's commit still find theirs.
const SETS_PER_CLUSTER: usize = 2;

/// The parsed live leases of clusters, each under the tag of its lease set, up to
/// [`SETS_PER_CLUSTER`] per cluster and [`LEASE_SETS_CAPACITY`] leases in all. One for the
/// process: a tag is random and written once, so an entry is right for any store that shows that
/// tag. A set is kept when it is read, and when this process writes a change of a set it holds
/// ([`apply_leases_on`]: the set after the change, under the new tag), so a write does not read
/// every lease again.
#[derive(Default)]
struct LeaseSets {
    /// Per cluster, the sets kept, oldest first.
    sets: HashMap<Id, Vec<(String, LeaseSet)>>,
    held: usize,
}

static LEASE_SETS: LazyLock<Mutex<LeaseSets>> = LazyLock::new(Mutex::default);

impl LeaseSets {
    fn lock() -> std::sync::MutexGuard<'static, LeaseSets> {
        LEASE_SETS.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The cluster's live leases when `tag` is a tag they were kept under.
    fn get(&self, cluster_id: &Id, tag: &str) -> Option<LeaseSet> {
        self.sets.get(cluster_id)?.iter().find(|(kept, _)| kept == tag).map(|(_, leases)| leases.clone())
    }

    /// Keeps `leases` as the cluster's live leases under `tag` (dropping the cluster's oldest set
    /// beyond [`SETS_PER_CLUSTER`]), making room by dropping other clusters' sets.
    fn put(&mut self, cluster_id: &Id, tag: String, leases: LeaseSet) {
        if leases.len() > LEASE_SETS_CAPACITY || self.get(cluster_id, &tag).is_some() {
            return;
        }
        let kept = self.sets.entry(cluster_id.clone()).or_default();
        kept.push((tag, leases.clone()));
        let mut freed = 0;
        while kept.len() > SETS_PER_CLUSTER {
            freed += kept.remove(0).1.len();
        }
        self.held = self.held + leases.len() - freed;
        while self.held > LEASE_SETS_CAPACITY {
            let Some(victim) = self.sets.keys().find(|victim| *victim != cluster_id).cloned() else { break };
            if let Some(sets) = self.sets.remove(&victim) {
                self.held -= sets.iter().map(|(_, leases)| leases.len()).sum::<usize>();
            }
        }
    }
}

/// The head generation of every live lease of the cluster, sorted by lease id (bytewise).
pub(crate) async fn live_leases_on(
    on: &mut impl HoldsConnection,
    cluster_id: &Id,
) -> Result<Vec<RuntimeNetworkLease>, StoreError> {
    Ok(live_lease_set_on(on, cluster_id).await?.iter().map(|lease| lease.as_ref().clone()).collect())
}

/// The tag of the cluster's live lease set, `None` before its first lease.
async fn lease_set_tag(on: &mut impl HoldsConnection, cluster_id: &Id) -> Result<Option<String>, StoreError> {
    Statement::new("SELECT tag FROM runtime_network_lease_sets WHERE cluster_id = $1")
        .text(cluster_id.as_str())
        .fetch_optional_as(on, |row| row.text("tag"))
        .await
}

/// [`live_leases_on`], shared: the parsed set kept under the cluster's lease set tag when it
/// still holds, else every record, read with the tag in one statement (so the set kept under a
/// tag is the one that tag names).
pub(crate) async fn live_lease_set_on(on: &mut impl HoldsConnection, cluster_id: &Id) -> Result<LeaseSet, StoreError> {
    let tag = lease_set_tag(on, cluster_id).await?;
    let Some(tag) = tag else { return Ok(LeaseSet::default()) };
    if let Some(leases) = LeaseSets::lock().get(cluster_id, &tag) {
        return Ok(leases);
    }
    let record = head_record(backend_of(on), "runtime_network_leases", "r", "lease_id", &["record"]);
    let rows = Statement::composed(format!(
        "SELECT {}, (SELECT s.tag FROM runtime_network_lease_sets s WHERE s.cluster_id = h.cluster_id) AS tag \
         FROM runtime_network_lease_heads h {} WHERE h.cluster_id = $1 AND h.live",
        record.columns, record.join
    ))
    .text(cluster_id.as_str())
    .fetch_all(on)
    .await?;
    let mut leases = rows.iter().map(|row| network_lease_from_row(row).map(Arc::new)).collect::<Result<Vec<_>, _>>()?;
    leases.sort_by(|left, right| compare_bytes(left.id.as_str(), right.id.as_str()));
    let leases = Arc::new(leases);
    if let Some(row) = rows.first()
        && let Some(tag) = row.optional_text("tag")?
    {
        LeaseSets::lock().put(cluster_id, tag, leases.clone());
    }
    Ok(leases)
}

/// `leases` after `changes` (checked, each lease changed once): a new generation replaces its
/// lease or joins the set, a release leaves it. One merge of two sorted lists.
pub fn changed_lease_set(leases: &[Arc<RuntimeNetworkLease>], changes: &[LeaseChange]) -> LeaseSet {
    let mut changed: Vec<(&str, Option<&RuntimeNetworkLease>)> = changes
        .iter()
        .map(|change| match change {
            LeaseChange::Issue(lease) => (lease.id.as_str(), Some(lease.as_ref())),
            LeaseChange::Release { id, .. } => (id.as_str(), None),
        })
        .collect();
    changed.sort_by(|left, right| compare_bytes(left.0, right.0));
    let mut merged = Vec::with_capacity(leases.len() + changed.len());
    let mut changed = changed.into_iter().peekable();
    for lease in leases {
        while let Some((id, next)) = changed.next_if(|(id, _)| compare_bytes(id, lease.id.as_str()).is_lt()) {
            let _ = id;
            merged.extend(next.map(|next| Arc::new(next.clone())));
        }
        match changed.next_if(|(id, _)| *id == lease.id.as_str()) {
            Some((_, next)) => merged.extend(next.map(|next| Arc::new(next.clone()))),
            None => merged.push(lease.clone()),
        }
    }
    merged.extend(changed.filter_map(|(_, next)| next.map(|next| Arc::new(next.clone()))));
    Arc::new(merged)
}

/// The lease with this id in `leases` (a set sorted by id, as [`live_lease_set_on`] answers it).
pub(crate) fn lease_by_id<'a>(
    leases: &'a [Arc<RuntimeNetworkLease>],
    lease_id: &Id,
) -> Option<&'a Arc<RuntimeNetworkLease>> {
    leases
        .binary_search_by(|lease| compare_bytes(lease.id.as_str(), lease_id.as_str()))
        .ok()
        .map(|index| &leases[index])
}

/// Lease generations per statement of [`referenced_leases_on`] (two parameters each; SQLite
/// builds before 3.32 take at most 999).
const REFERENCED_LEASES_PER_STATEMENT: usize = 256;

/// The lease generations `references` name (lease id, generation), in their order: from the
/// cluster's live lease set, and one the set does not hold (a lease since moved on or released)
/// from the kept generations. A generation the store does not keep is [`StoreError::Corrupt`].
pub(crate) async fn referenced_leases_on(
    on: &mut impl HoldsConnection,
    cluster_id: &Id,
    references: &[(Id, u64)],
) -> Result<Vec<RuntimeNetworkLease>, StoreError> {
    if references.is_empty() {
        return Ok(Vec::new());
    }
    let live = live_lease_set_on(on, cluster_id).await?;
    let mut found: Vec<Option<RuntimeNetworkLease>> = references
        .iter()
        .map(|(lease_id, generation)| {
            lease_by_id(&live, lease_id)
                .filter(|lease| lease.generation == *generation)
                .map(|lease| lease.as_ref().clone())
        })
        .collect();
    let missing: Vec<usize> = (0..references.len()).filter(|index| found[*index].is_none()).collect();
    for chunk in missing.chunks(REFERENCED_LEASES_PER_STATEMENT) {
        let mut statement = Statement::composed(format!(
            "SELECT record FROM runtime_network_leases \
             WHERE cluster_id = $1 AND (lease_id, generation) IN (VALUES {})",
            placeholder_rows(chunk.len(), 2, "", "")
        ))
        .text(cluster_id.as_str());
        for index in chunk {
            let (lease_id, generation) = &references[*index];
            statement = statement.text(lease_id.as_str()).integer(counter_to_sql(*generation, "lease generation")?);
        }
        let mut kept: HashMap<(Id, u64), RuntimeNetworkLease> = HashMap::new();
        for row in statement.fetch_all(on).await? {
            let lease = network_lease_from_row(&row)?;
            kept.insert((lease.id.clone(), lease.generation), lease);
        }
        for index in chunk {
            found[*index] = kept.remove(&references[*index]);
        }
    }
    found
        .into_iter()
        .map(|lease| {
            lease.ok_or_else(|| {
                StoreError::Corrupt("a projection names a lease generation the store does not keep".into())
            })
        })
        .collect()
}

/// Reads the lease facts of `scope` for a cluster whose lock the transaction holds: the holders
/// are the active heads of the scope's services (by the heads' service index), the leases every
/// live lease of the cluster.
async fn lease_facts_on(
    on: &mut impl HoldsConnection,
    cluster_id: &Id,
    scope: &FactScope,
) -> Result<LeaseFacts, StoreError> {
    let plan = current_plan(on, cluster_id).await?.map(|stored| stored.plan);
    let leases = live_lease_set_on(on, cluster_id).await?;
    if plan.is_none() && leases.is_empty() {
        return Ok(LeaseFacts { scope: scope.clone(), plan, holders: Vec::new(), leases });
    }
    let record = head_record(backend_of(on), "runtime_assignments", "r", "assignment_id", &["record", "signature"]);
    let heads_sql = format!(
        "SELECT {}, h.active FROM runtime_assignment_heads h {} WHERE h.cluster_id = $1 AND h.active",
        record.columns, record.join
    );
    let rows = match scope {
        FactScope::Cluster => Statement::composed(heads_sql).text(cluster_id.as_str()).fetch_all(on).await?,
        FactScope::Services(ids) => {
            let ids: Vec<&str> = ids.iter().map(Id::as_str).collect();
            super::sql::rows_by_ids(on, cluster_id, &format!("{heads_sql} AND {{ids}}"), "h.service_id", &ids).await?
        }
    };
    let mut holders = rows
        .iter()
        .map(|row| {
            let assignment = read_signed_assignment(&row.text("record")?, &row.text("signature")?)?.payload;
            Ok(LeaseHolder {
                assignment_id: assignment.id,
                organization_id: assignment.organization_id,
                service_id: assignment.service_id,
                node_id: assignment.node_id,
            })
        })
        .collect::<Result<Vec<_>, StoreError>>()?;
    holders.sort_by(|left, right| compare_bytes(left.assignment_id.as_str(), right.assignment_id.as_str()));
    Ok(LeaseFacts { scope: scope.clone(), plan, holders, leases })
}

/// The rules a lease change must keep whatever the planner decided: a true digest, this
/// cluster, a revision chain that links (checked against the heads by the guarded statements),
/// and one change per lease.
fn check_lease_changes(cluster_id: &Id, changes: &[LeaseChange]) -> Result<(), StoreError> {
    let refuse = |rule: &str| Err(StoreError::Corrupt(format!("lease judge broke a store rule: {rule}")));
    let mut seen = HashSet::new();
    for change in changes {
        let id = match change {
            LeaseChange::Issue(lease) => &lease.id,
            LeaseChange::Release { id, .. } => id,
        };
        if !seen.insert(id.clone()) {
            return refuse("one lease changes twice");
        }
        if let LeaseChange::Issue(lease) = change {
            if lease.cluster_id != *cluster_id {
                return refuse("the lease names another cluster");
            }
            if lease.compute_digest() != lease.digest {
                return refuse("the lease digest does not match");
            }
            let links = match &lease.previous {
                None => lease.generation == 1,
                Some(previous) => previous.id == lease.id && previous.generation + 1 == lease.generation,
            };
            if !links {
                return refuse("the lease generation does not follow its previous one");
            }
        }
    }
    Ok(())
}

/// The `/30`'s network address of a lease as stored (`link_subnet`).
fn link_subnet_column(lease: &RuntimeNetworkLease) -> i64 {
    i64::from(lease.ipv4.link_subnet().network().to_u32())
}

/// Writes one checked change with guarded statements; false when a guard found another state.
async fn apply_lease_change(
    transaction: &mut impl HoldsConnection,
    cluster_id: &Id,
    change: &LeaseChange,
) -> Result<bool, StoreError> {
    match change {
        LeaseChange::Issue(lease) => {
            let generation = counter_to_sql(lease.generation, "lease generation")?;
            let inserted = Statement::new(
                "INSERT INTO runtime_network_leases (cluster_id, lease_id, generation, digest, record) \
                 VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING",
            )
            .text(cluster_id.as_str())
            .text(lease.id.as_str())
            .integer(generation)
            .text(lease.digest.as_str())
            .text(&record_text(lease.as_ref(), "runtime network lease")?)
            .execute(transaction)
            .await?;
            if inserted != 1 {
                return Ok(false);
            }
            let moved = match &lease.previous {
                // A new lease on a link subnet or an assignment that a live lease holds violates a
                // unique index: an error, and the transaction is not committed.
                None => {
                    Statement::new(
                        "INSERT INTO runtime_network_lease_heads \
                           (cluster_id, lease_id, generation, assignment_id, link_subnet, live) \
                         VALUES ($1, $2, $3, $4, $5, TRUE) ON CONFLICT (cluster_id, lease_id) DO NOTHING",
                    )
                    .text(cluster_id.as_str())
                    .text(lease.id.as_str())
                    .integer(generation)
                    .text(lease.assignment_id.as_str())
                    .integer(link_subnet_column(lease))
                    .execute(transaction)
                    .await?
                }
                // The next generation of a live head with that digest, on the same link subnet.
                Some(previous) => {
                    Statement::new(
                        "UPDATE runtime_network_lease_heads SET generation = $3, assignment_id = $4 \
                         WHERE cluster_id = $1 AND lease_id = $2 AND generation = $5 AND live AND link_subnet = $6 \
                           AND EXISTS (SELECT 1 FROM runtime_network_leases l \
                             WHERE l.cluster_id = $1 AND l.lease_id = $2 AND l.generation = $5 AND l.digest = $7)",
                    )
                    .text(cluster_id.as_str())
                    .text(lease.id.as_str())
                    .integer(generation)
                    .text(lease.assignment_id.as_str())
                    .integer(counter_to_sql(previous.generation, "lease generation")?)
                    .integer(link_subnet_column(lease))
                    .text(previous.digest.as_str())
                    .execute(transaction)
                    .await?
                }
            };
            Ok(moved == 1)
        }
        LeaseChange::Release { id, generation } => {
            let released = Statement::new(
                "UPDATE runtime_network_lease_heads SET live = FALSE \
                 WHERE cluster_id = $1 AND lease_id = $2 AND generation = $3 AND live",
            )
            .text(cluster_id.as_str())
            .text(id.as_str())
            .integer(counter_to_sql(*generation, "lease generation")?)
            .execute(transaction)
            .await?;
            Ok(released == 1)
        }
    }
}

/// Checks and writes `changes` in order on a transaction that holds the cluster's lock.
async fn apply_leases_on(
    transaction: &mut impl HoldsConnection,
    cluster_id: &Id,
    changes: &[LeaseChange],
) -> Result<(), StoreError> {
    check_lease_changes(cluster_id, changes)?;
    if changes.is_empty() {
        return Ok(());
    }
    let before = lease_set_tag(transaction, cluster_id).await?;
    for change in changes {
        if !apply_lease_change(transaction, cluster_id, change).await? {
            return Err(StoreError::Unavailable("a lease head moved under the cluster lock".into()));
        }
    }
    let tag = uuid::Uuid::new_v4().simple().to_string();
    Statement::new(
        "INSERT INTO runtime_network_lease_sets (cluster_id, tag) VALUES ($1, $2) \
         ON CONFLICT (cluster_id) DO UPDATE SET tag = EXCLUDED.tag",
    )
    .text(cluster_id.as_str())
    .text(&tag)
    .execute(transaction)
    .await?;
    // The set the changes were made to is the one its tag names (the cluster's lock is held), so
    // the set after them is kept under the new tag. Should the transaction not commit, the new tag
    // never shows and the set is never used.
    let previous = match &before {
        Some(before) => LeaseSets::lock().get(cluster_id, before),
        None => Some(LeaseSet::default()),
    };
    if let Some(previous) = previous {
        let after = changed_lease_set(&previous, changes);
        LeaseSets::lock().put(cluster_id, tag, after);
    }
    Ok(())
}

/// [`LeaseWriter`] over a transaction someone else holds (the assignment reconcile's).
pub(crate) struct TransactionLeases<'a> {
    transaction: &'a mut Transaction,
    cluster_id: &'a Id,
}

impl<'a> TransactionLeases<'a> {
    /// The lease part of `transaction`, which holds the lock of `cluster_id`.
    pub(crate) fn new(transaction: &'a mut Transaction, cluster_id: &'a Id) -> Self {
        TransactionLeases { transaction, cluster_id }
    }
}

#[async_trait]
impl LeaseWriter for TransactionLeases<'_> {
    async fn lease_facts(&mut self, scope: &FactScope) -> Result<LeaseFacts, StoreError> {
        lease_facts_on(&mut *self.transaction, self.cluster_id, scope).await
    }

    async fn apply_leases(&mut self, changes: &[LeaseChange]) -> Result<(), StoreError> {
        apply_leases_on(&mut *self.transaction, self.cluster_id, changes).await
    }
}

/// [`LockedNetwork`] on a write transaction of a [`SqlStore`].
struct LockedSqlNetwork {
    transaction: Transaction,
    cluster_id: Id,
    current: Option<StoredNetworkPlan>,
}

#[async_trait]
impl LeaseWriter for LockedSqlNetwork {
    async fn lease_facts(&mut self, scope: &FactScope) -> Result<LeaseFacts, StoreError> {
        lease_facts_on(&mut self.transaction, &self.cluster_id, scope).await
    }

    async fn apply_leases(&mut self, changes: &[LeaseChange]) -> Result<(), StoreError> {
        apply_leases_on(&mut self.transaction, &self.cluster_id, changes).await
    }
}

#[async_trait]
impl LockedNetwork for LockedSqlNetwork {
    fn current(&self) -> Option<&StoredNetworkPlan> {
        self.current.as_ref()
    }

    async fn write_plan(
        &mut self,
        plan: &RuntimeNetworkAddressPlan,
        authority: Option<&RuntimeNetworkProtectedAuthority>,
    ) -> Result<(), StoreError> {
        let refuse = |rule: &str| Err(StoreError::Corrupt(format!("address plan judge broke a store rule: {rule}")));
        let current = self.current.as_ref();
        if plan.cluster_id != self.cluster_id || plan.compute_digest() != plan.digest {
            return refuse("the plan names another cluster or its digest does not match");
        }
        if plan.revision != current.map_or(1, |current| current.plan.revision + 1) {
            return refuse("the plan revision does not follow the current one");
        }
        match (authority, current) {
            (None, None) => return refuse("a first plan needs an authority"),
            (Some(authority), current) => {
                let follows = match current {
                    None => authority.generation == 1 && authority.previous.is_none(),
                    Some(current) => {
                        authority.generation == current.authority.generation + 1
                            && authority.previous.as_ref() == Some(&current.authority.reference())
                    }
                };
                if !follows || authority.compute_digest() != authority.digest {
                    return refuse("the authority does not follow the current one");
                }
            }
            (None, Some(_)) => {}
        }
        let revision = counter_to_sql(plan.revision, "address plan revision")?;
        Statement::new(
            "INSERT INTO runtime_network_address_plans (cluster_id, revision, digest, record) \
             VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING",
        )
        .text(self.cluster_id.as_str())
        .integer(revision)
        .text(plan.digest.as_str())
        .text(&record_text(plan, "address plan")?)
        .execute_one(&mut self.transaction, "an address plan revision was written under the cluster lock")
        .await?;
        if let Some(authority) = authority {
            Statement::new(
                "INSERT INTO runtime_network_protected_authorities \
                   (cluster_id, generation, plan_revision, digest, record) \
                 VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING",
            )
            .text(self.cluster_id.as_str())
            .integer(counter_to_sql(authority.generation, "protected authority generation")?)
            .integer(revision)
            .text(authority.digest.as_str())
            .text(&record_text(authority, "protected authority")?)
            .execute_one(&mut self.transaction, "a protected authority generation was written under the cluster lock")
            .await?;
        }
        let authority = authority.cloned().or_else(|| current.map(|current| current.authority.clone()));
        self.current =
            Some(StoredNetworkPlan { plan: plan.clone(), authority: authority.expect("checked above: one exists") });
        Ok(())
    }
}

impl InTransaction for LockedSqlNetwork {
    fn into_transaction(self: Box<Self>) -> Transaction {
        self.transaction
    }
}

#[async_trait]
impl NetworkStore for SqlStore {
    async fn network_plan(&self, cluster_id: &Id) -> Result<Option<StoredNetworkPlan>, StoreError> {
        // Two statements that must see one state: a snapshot transaction.
        let mut transaction = self.pool.begin_snapshot().await?;
        let current = current_plan(&mut transaction, cluster_id).await?;
        transaction.commit().await?;
        Ok(current)
    }

    async fn live_leases(&self, cluster_id: &Id) -> Result<Vec<RuntimeNetworkLease>, StoreError> {
        live_leases_on(&mut self.pool.connection().await?, cluster_id).await
    }

    async fn lease_generations(&self, cluster_id: &Id, lease_id: &Id) -> Result<Vec<RuntimeNetworkLease>, StoreError> {
        Statement::new(
            "SELECT record FROM runtime_network_leases WHERE cluster_id = $1 AND lease_id = $2 ORDER BY generation",
        )
        .text(cluster_id.as_str())
        .text(lease_id.as_str())
        .fetch_all_as(&mut self.pool.connection().await?, network_lease_from_row)
        .await
    }

    async fn lock_network(&self, cluster_id: &Id) -> Result<Option<Box<dyn LockedNetwork>>, StoreError> {
        let mut transaction = self.pool.begin_write().await?;
        if !lock_reconcile(&mut transaction, self.pool.backend(), cluster_id).await? {
            transaction.rollback().await?;
            return Ok(None);
        }
        let current = current_plan(&mut transaction, cluster_id).await?;
        Ok(Some(Box::new(LockedSqlNetwork { transaction, cluster_id: cluster_id.clone(), current })))
    }
}

/// An address plan revision: `record`.
pub(crate) fn address_plan_from_row(row: &Row) -> Result<RuntimeNetworkAddressPlan, StoreError> {
    read_digested(&row.text("record")?, "address plan")
}

/// A protected authority generation: `record`.
pub(crate) fn protected_authority_from_row(row: &Row) -> Result<RuntimeNetworkProtectedAuthority, StoreError> {
    read_digested(&row.text("record")?, "protected authority")
}

/// A lease generation: `record`.
pub(crate) fn network_lease_from_row(row: &Row) -> Result<RuntimeNetworkLease, StoreError> {
    read_digested(&row.text("record")?, "runtime network lease")
}
