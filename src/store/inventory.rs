//! The inventory (`07-inventory.md`): organizations, clusters, nodes and service runtime specs,
//! each written by compare-and-swap on its revision.
//!
//! Every write that judges against a cluster's state runs in a write transaction that first
//! locks the cluster ([`lock_cluster`]): on PostgreSQL the row (`SELECT … FOR UPDATE`; under READ
//! COMMITTED every later statement of the transaction sees what the previous lock holder
//! committed), on SQLite the whole database (`BEGIN IMMEDIATE`). Two controllers sharing one
//! database serialize there. **Every write of a fact the designation judge reads bumps the
//! cluster's `facts_version`** (`put_cluster`, `put_service_spec`, `delete_service`; the
//! designation write itself in `designations.rs`), which guards the optimistic designation write.
//!
//! **A cluster has two locks, both across processes.** Its row ([`lock_cluster`]) is held by the
//! short writes of its facts (the cluster record, specs, nodes, relay credentials and
//! connections) and by the designation's locked path, so a designation waits for those only. Its
//! reconcile lock ([`lock_reconcile`], a row of `cluster_reconcile_locks`) is held by the work
//! that follows the facts: assignment reconciles, projection issues, address plan writes and
//! route writes, each for its own scope's few statements. No lock narrower than the cluster (per
//! service, per pool) exists. On SQLite every write transaction is `BEGIN IMMEDIATE`, so both
//! locks are the database's one write lock.

use super::codec::{read_cluster, read_node, read_organization, read_service_spec};
use super::sql::{HoldsConnection, Row, Statement, Transaction, placeholder_rows};
use super::{ClusterGuard, MissingKind, PutOutcome, SqlStore, StoreError};
use crate::contract::inventory::{ClusterSpec, NodeSpec, Organization, ServiceRuntimeSpec, ServiceSpecBody};
use crate::contract::reader::compare_bytes;
use crate::contract::{Id, NodeId};
use crate::store::codec::{ClusterColumns, counter_to_sql, record_text};
use crate::store::dialect::Backend;
use async_trait::async_trait;
use std::collections::BTreeSet;

/// An organization with its revision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredOrganization {
    /// The record.
    pub organization: Organization,
    /// Counts up from 1 with every write.
    pub revision: u64,
}

/// A cluster with its revision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredCluster {
    /// The record.
    pub cluster: ClusterSpec,
    /// Counts up from 1 with every write.
    pub revision: u64,
}

/// A node of a cluster. The bearer is kept only as its SHA-256 hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredNode {
    /// The cluster.
    pub cluster_id: Id,
    /// The record.
    pub node: NodeSpec,
    /// SHA-256 of the node's bearer.
    pub bearer_hash: [u8; 32],
    /// Counts up from 1 with every write.
    pub revision: u64,
}

/// What [`InventoryStore::put_node`] does with the node's bearer hash, decided under the
/// cluster's lock against the row it finds there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeBearerHash {
    /// Keeps the stored hash; a node that does not exist yet is not created.
    Keep,
    /// Stores the hash only when the write creates the node; an existing node keeps its own.
    IfCreated([u8; 32]),
    /// Stores the hash, replacing the node's.
    Rotate([u8; 32]),
}

/// What [`InventoryStore::put_node`] wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeWritten {
    /// The node as stored.
    pub node: StoredNode,
    /// True when the write created it.
    pub created: bool,
    /// True when the write stored the hash it was given.
    pub bearer_stored: bool,
}

/// Persistence of the inventory.
#[async_trait]
pub trait InventoryStore: Send + Sync {
    /// Creates or replaces an organization.
    async fn put_organization(&self, organization: &Organization) -> Result<StoredOrganization, StoreError>;

    /// One organization.
    async fn get_organization(&self, id: &Id) -> Result<Option<StoredOrganization>, StoreError>;

    /// Creates (`expected_revision = None`) or replaces a cluster by compare-and-swap.
    async fn put_cluster(
        &self,
        cluster: &ClusterSpec,
        expected_revision: Option<u64>,
        guard: ClusterGuard,
    ) -> Result<PutOutcome<StoredCluster>, StoreError>;

    /// One cluster.
    async fn get_cluster(&self, id: &Id) -> Result<Option<StoredCluster>, StoreError>;

    /// Every cluster, sorted by id (bytewise).
    async fn list_clusters(&self) -> Result<Vec<StoredCluster>, StoreError>;

    /// Creates or updates a node, doing with its bearer hash what `bearer_hash` says, under the
    /// cluster's lock. Answers the node, whether it was created and whether the given hash was
    /// stored. `Missing(Cluster)` when the cluster does not exist; creating a node with
    /// [`NodeBearerHash::Keep`] is a programming error, answered as [`StoreError::Corrupt`] with
    /// nothing written.
    async fn put_node(
        &self,
        cluster_id: &Id,
        node: &NodeSpec,
        bearer_hash: NodeBearerHash,
    ) -> Result<PutOutcome<NodeWritten>, StoreError>;

    /// One node.
    async fn get_node(&self, cluster_id: &Id, node_id: &NodeId) -> Result<Option<StoredNode>, StoreError>;

    /// The nodes of a cluster, sorted by id (bytewise).
    async fn list_nodes(&self, cluster_id: &Id) -> Result<Vec<StoredNode>, StoreError>;

    /// Writes a new revision of a service spec by compare-and-swap on the current revision
    /// (`None` to create). Every revision stays readable.
    ///
    /// `Missing(Cluster)` when `body.cluster_id` does not exist. Creating answers revision 1, or
    /// continues the numbering of a deleted service; it is a `RevisionConflict` with the current
    /// revision when the service exists. Replacing a service that does not exist (or is deleted)
    /// is a `RevisionConflict { current: None }`.
    async fn put_service_spec(
        &self,
        body: &ServiceSpecBody,
        expected_revision: Option<u64>,
    ) -> Result<PutOutcome<ServiceRuntimeSpec>, StoreError>;

    /// The current spec of a service (`revision = None`; `None` when the service is deleted) or
    /// that revision (also of a deleted service).
    async fn get_service_spec(
        &self,
        cluster_id: &Id,
        service_id: &Id,
        revision: Option<u64>,
    ) -> Result<Option<ServiceRuntimeSpec>, StoreError>;

    /// Deletes a service by compare-and-swap on its current revision. `Missing(Cluster)` or
    /// `Missing(Service)` (also for a deleted service); `RevisionConflict` with the current one.
    async fn delete_service(
        &self,
        cluster_id: &Id,
        service_id: &Id,
        expected_revision: u64,
    ) -> Result<PutOutcome<()>, StoreError>;
}

/// Inside a write transaction: reads the cluster and holds it against other writers for the rest
/// of the transaction ([`Backend::lock_rows`]); answers the cluster if it exists.
pub(crate) async fn lock_cluster(
    transaction: &mut impl HoldsConnection,
    backend: Backend,
    cluster_id: &Id,
) -> Result<Option<StoredCluster>, StoreError> {
    Statement::composed(format!("SELECT record, revision FROM clusters WHERE id = $1{}", backend.lock_rows()))
        .text(cluster_id.as_str())
        .fetch_optional_as(transaction, cluster_from_row)
        .await
}

/// Inside a write transaction: holds the cluster's reconcile lock for the rest of the transaction
/// (its row of `cluster_reconcile_locks`, [`Backend::lock_rows`]); false when the cluster does not
/// exist. The reconciles, projection issues, address plan writes and route writes of a cluster
/// serialize here, so the cluster's row ([`lock_cluster`]) is held only by the short writes of
/// its facts, which a designation's guarded write waits for.
pub(crate) async fn lock_reconcile(
    transaction: &mut impl HoldsConnection,
    backend: Backend,
    cluster_id: &Id,
) -> Result<bool, StoreError> {
    let lock = format!("SELECT cluster_id FROM cluster_reconcile_locks WHERE cluster_id = $1{}", backend.lock_rows());
    if Statement::composed(lock.clone()).text(cluster_id.as_str()).fetch_optional(transaction).await?.is_some() {
        return Ok(true);
    }
    // A cluster's first reconcile makes its row (the migration made those of older clusters).
    Statement::new(
        "INSERT INTO cluster_reconcile_locks (cluster_id) SELECT id FROM clusters WHERE id = $1 \
         ON CONFLICT (cluster_id) DO NOTHING",
    )
    .text(cluster_id.as_str())
    .execute(transaction)
    .await?;
    Ok(Statement::composed(lock).text(cluster_id.as_str()).fetch_optional(transaction).await?.is_some())
}

impl SqlStore {
    /// A write transaction holding the cluster's reconcile lock ([`lock_reconcile`]); `None`, with
    /// the transaction rolled back, when the cluster does not exist.
    pub(crate) async fn lock_existing_reconcile(&self, cluster_id: &Id) -> Result<Option<Transaction>, StoreError> {
        let mut transaction = self.pool.begin_write().await?;
        if !lock_reconcile(&mut transaction, self.pool.backend(), cluster_id).await? {
            transaction.rollback().await?;
            return Ok(None);
        }
        Ok(Some(transaction))
    }

    /// A write transaction holding the cluster's lock ([`lock_cluster`]); `None`, with the
    /// transaction rolled back, when the cluster does not exist.
    pub(crate) async fn lock_existing_cluster(&self, cluster_id: &Id) -> Result<Option<Transaction>, StoreError> {
        let mut transaction = self.pool.begin_write().await?;
        if lock_cluster(&mut transaction, self.pool.backend(), cluster_id).await?.is_none() {
            transaction.rollback().await?;
            return Ok(None);
        }
        Ok(Some(transaction))
    }
}

/// The nodes of a cluster, sorted by id (bytewise).
pub(crate) async fn cluster_nodes(
    on: &mut impl HoldsConnection,
    backend: Backend,
    cluster_id: &Id,
) -> Result<Vec<StoredNode>, StoreError> {
    Statement::composed(format!(
        "SELECT record, bearer_hash, revision FROM cluster_nodes WHERE cluster_id = $1 ORDER BY node_id{}",
        backend.bytewise()
    ))
    .text(cluster_id.as_str())
    .fetch_all_as(on, |row| node_from_row(cluster_id, row))
    .await
}

/// The nodes of a cluster with these ids (those that exist), sorted by id (bytewise).
pub(crate) async fn nodes_by_ids(
    on: &mut impl HoldsConnection,
    cluster_id: &Id,
    node_ids: &[&str],
) -> Result<Vec<StoredNode>, StoreError> {
    let rows = super::sql::rows_by_ids(
        on,
        cluster_id,
        "SELECT record, bearer_hash, revision FROM cluster_nodes WHERE cluster_id = $1 AND {ids}",
        "node_id",
        node_ids,
    )
    .await?;
    let mut nodes = rows.iter().map(|row| node_from_row(cluster_id, row)).collect::<Result<Vec<_>, _>>()?;
    nodes.sort_by(|left, right| compare_bytes(left.node.id.as_str(), right.node.id.as_str()));
    Ok(nodes)
}

/// The head of a service: its current revision and whether it is deleted.
async fn service_head(
    on: &mut impl HoldsConnection,
    cluster_id: &Id,
    service_id: &Id,
) -> Result<Option<(u64, bool)>, StoreError> {
    Statement::new("SELECT current_revision, deleted FROM services WHERE cluster_id = $1 AND service_id = $2")
        .text(cluster_id.as_str())
        .text(service_id.as_str())
        .fetch_optional_as(on, service_head_from_row)
        .await
}

/// Makes `volume_ids` the volume ids the service's current spec declares (`service_volumes`: none
/// for a deleted service), so the services declaring a volume id are found by key. A volume the
/// service keeps declaring keeps its place in the cluster's order of declarations (`declared`); a
/// newly declared one comes after every declaration of the cluster (the caller holds the
/// cluster's lock).
async fn replace_service_volumes(
    transaction: &mut impl HoldsConnection,
    cluster_id: &Id,
    service_id: &Id,
    volume_ids: &BTreeSet<&str>,
) -> Result<(), StoreError> {
    let kept: BTreeSet<String> =
        Statement::new("SELECT volume_id FROM service_volumes WHERE cluster_id = $1 AND service_id = $2")
            .text(cluster_id.as_str())
            .text(service_id.as_str())
            .fetch_all(transaction)
            .await?
            .iter()
            .map(|row| row.text("volume_id"))
            .collect::<Result<_, _>>()?;
    for dropped in kept.iter().filter(|volume_id| !volume_ids.contains(volume_id.as_str())) {
        Statement::new("DELETE FROM service_volumes WHERE cluster_id = $1 AND service_id = $2 AND volume_id = $3")
            .text(cluster_id.as_str())
            .text(service_id.as_str())
            .text(dropped)
            .execute(transaction)
            .await?;
    }
    let added: Vec<&&str> = volume_ids.iter().filter(|volume_id| !kept.contains(**volume_id)).collect();
    if added.is_empty() {
        return Ok(());
    }
    let mut insert = Statement::composed(format!(
        "INSERT INTO service_volumes (cluster_id, service_id, volume_id, declared) \
         SELECT v.column1, v.column2, v.column3, \
           (SELECT COALESCE(MAX(d.declared), 0) + 1 FROM service_volumes d WHERE d.cluster_id = $1) \
         FROM (VALUES {}) AS v",
        placeholder_rows(added.len(), 2, "$1, ", "")
    ))
    .text(cluster_id.as_str());
    for volume_id in added {
        insert = insert.text(service_id.as_str()).text(volume_id);
    }
    insert.execute(transaction).await?;
    Ok(())
}

/// Counts a write of a fact the designation judge reads (see the module docs).
async fn bump_facts_version(transaction: &mut impl HoldsConnection, cluster_id: &Id) -> Result<(), StoreError> {
    Statement::new("UPDATE clusters SET facts_version = facts_version + 1 WHERE id = $1")
        .text(cluster_id.as_str())
        .execute(transaction)
        .await?;
    Ok(())
}

#[async_trait]
impl InventoryStore for SqlStore {
    async fn put_organization(&self, organization: &Organization) -> Result<StoredOrganization, StoreError> {
        // One statement, atomic on its own (on SQLite a writing statement takes the write lock
        // before it reads).
        let row = Statement::new(
            "INSERT INTO organizations (id, record, revision) VALUES ($1, $2, 1) \
             ON CONFLICT (id) DO UPDATE SET record = EXCLUDED.record, revision = organizations.revision + 1 \
             RETURNING record, revision",
        )
        .text(organization.id.as_str())
        .text(&record_text(organization, "organization")?)
        .fetch_one(&mut self.pool.connection().await?)
        .await?;
        organization_from_row(&row)
    }

    async fn get_organization(&self, id: &Id) -> Result<Option<StoredOrganization>, StoreError> {
        Statement::new("SELECT record, revision FROM organizations WHERE id = $1")
            .text(id.as_str())
            .fetch_optional_as(&mut self.pool.connection().await?, organization_from_row)
            .await
    }

    async fn put_cluster(
        &self,
        cluster: &ClusterSpec,
        expected_revision: Option<u64>,
        guard: ClusterGuard,
    ) -> Result<PutOutcome<StoredCluster>, StoreError> {
        let columns = ClusterColumns::of(cluster)?;
        let backend = self.pool.backend();
        let mut transaction = self.pool.begin_write().await?;
        let organization_exists = Statement::new("SELECT 1 AS present FROM organizations WHERE id = $1")
            .text(cluster.organization_id.as_str())
            .fetch_optional(&mut transaction)
            .await?
            .is_some();
        if !organization_exists {
            transaction.rollback().await?;
            return Ok(PutOutcome::Missing(MissingKind::Organization));
        }
        let current = lock_cluster(&mut transaction, backend, &cluster.id).await?.map(|stored| stored.revision);
        let revision = match (current, expected_revision) {
            (None, None) => {
                let inserted = Statement::new(
                    "INSERT INTO clusters (id, organization_id, record, revision, runtime_phase, runtime_generation, \
                       relay_origin, fleet_designation_id, fleet_designation_generation, fleet_designation_digest) \
                     VALUES ($1, $2, $3, 1, $4, $5, $6, $7, $8, $9) ON CONFLICT (id) DO NOTHING",
                )
                .text(cluster.id.as_str())
                .text(&columns.organization_id)
                .text(&columns.record)
                .text(columns.runtime_phase)
                .integer(columns.runtime_generation)
                .optional_text(columns.relay_origin.as_deref())
                .optional_text(columns.fleet_id.as_deref())
                .optional_integer(columns.fleet_generation)
                .optional_text(columns.fleet_digest.as_deref())
                .execute(&mut transaction)
                .await?;
                if inserted != 1 {
                    // Another transaction created it after our lock found nothing to lock (on
                    // SQLite, which holds the write lock, this cannot happen; it is answered as a
                    // conflict all the same).
                    let current =
                        lock_cluster(&mut transaction, backend, &cluster.id).await?.map(|stored| stored.revision);
                    transaction.rollback().await?;
                    return Ok(PutOutcome::RevisionConflict { current });
                }
                1
            }
            (Some(current), Some(expected)) if current == expected => {
                if guard == ClusterGuard::NoDesignation {
                    let holds_designation = Statement::new(
                        "SELECT 1 AS present FROM clusters WHERE id = $1 AND designation_generation IS NOT NULL",
                    )
                    .text(cluster.id.as_str())
                    .fetch_optional(&mut transaction)
                    .await?
                    .is_some();
                    if holds_designation {
                        transaction.rollback().await?;
                        return Ok(PutOutcome::GuardFailed);
                    }
                }
                let next = current + 1;
                Statement::new(
                    "UPDATE clusters SET organization_id = $2, record = $3, revision = $4, runtime_phase = $5, \
                       runtime_generation = $6, relay_origin = $7, fleet_designation_id = $8, \
                       fleet_designation_generation = $9, fleet_designation_digest = $10, \
                       facts_version = facts_version + 1 \
                     WHERE id = $1 AND revision = $11",
                )
                .text(cluster.id.as_str())
                .text(&columns.organization_id)
                .text(&columns.record)
                .integer(counter_to_sql(next, "cluster revision")?)
                .text(columns.runtime_phase)
                .integer(columns.runtime_generation)
                .optional_text(columns.relay_origin.as_deref())
                .optional_text(columns.fleet_id.as_deref())
                .optional_integer(columns.fleet_generation)
                .optional_text(columns.fleet_digest.as_deref())
                .integer(counter_to_sql(current, "cluster revision")?)
                .execute_one(&mut transaction, "the locked cluster row changed under its lock")
                .await?;
                next
            }
            (current, _) => {
                transaction.rollback().await?;
                return Ok(PutOutcome::RevisionConflict { current });
            }
        };
        transaction.commit().await?;
        Ok(PutOutcome::Written(StoredCluster { cluster: cluster.clone(), revision }))
    }

    async fn get_cluster(&self, id: &Id) -> Result<Option<StoredCluster>, StoreError> {
        Statement::new("SELECT record, revision FROM clusters WHERE id = $1")
            .text(id.as_str())
            .fetch_optional_as(&mut self.pool.connection().await?, cluster_from_row)
            .await
    }

    async fn list_clusters(&self) -> Result<Vec<StoredCluster>, StoreError> {
        Statement::composed(format!(
            "SELECT record, revision FROM clusters ORDER BY id{}",
            self.pool.backend().bytewise()
        ))
        .fetch_all_as(&mut self.pool.connection().await?, cluster_from_row)
        .await
    }

    async fn put_node(
        &self,
        cluster_id: &Id,
        node: &NodeSpec,
        bearer_hash: NodeBearerHash,
    ) -> Result<PutOutcome<NodeWritten>, StoreError> {
        let record = record_text(node, "node")?;
        let Some(mut transaction) = self.lock_existing_cluster(cluster_id).await? else {
            return Ok(PutOutcome::Missing(MissingKind::Cluster));
        };
        let existing =
            Statement::new("SELECT bearer_hash, revision FROM cluster_nodes WHERE cluster_id = $1 AND node_id = $2")
                .text(cluster_id.as_str())
                .text(node.id.as_str())
                .fetch_optional(&mut transaction)
                .await?;
        let (stored_hash, revision, created, bearer_stored) = match existing {
            None => {
                let (NodeBearerHash::IfCreated(bearer_hash) | NodeBearerHash::Rotate(bearer_hash)) = bearer_hash else {
                    transaction.rollback().await?;
                    return Err(StoreError::Corrupt("node bearer hash required to create a node".into()));
                };
                Statement::new(
                    "INSERT INTO cluster_nodes (cluster_id, node_id, record, bearer_hash, revision) \
                     VALUES ($1, $2, $3, $4, 1)",
                )
                .text(cluster_id.as_str())
                .text(node.id.as_str())
                .text(&record)
                .bytes(&bearer_hash)
                .execute(&mut transaction)
                .await?;
                (bearer_hash, 1, true, true)
            }
            Some(row) => {
                let (current_hash, current_revision) = node_credential_from_row(&row)?;
                let (stored_hash, bearer_stored) = match bearer_hash {
                    NodeBearerHash::Rotate(bearer_hash) => (bearer_hash, true),
                    NodeBearerHash::Keep | NodeBearerHash::IfCreated(_) => (current_hash, false),
                };
                let revision = current_revision + 1;
                Statement::new(
                    "UPDATE cluster_nodes SET record = $3, bearer_hash = $4, revision = $5 \
                     WHERE cluster_id = $1 AND node_id = $2",
                )
                .text(cluster_id.as_str())
                .text(node.id.as_str())
                .text(&record)
                .bytes(&stored_hash)
                .integer(counter_to_sql(revision, "node revision")?)
                .execute(&mut transaction)
                .await?;
                (stored_hash, revision, false, bearer_stored)
            }
        };
        transaction.commit().await?;
        let node =
            StoredNode { cluster_id: cluster_id.clone(), node: node.clone(), bearer_hash: stored_hash, revision };
        Ok(PutOutcome::Written(NodeWritten { node, created, bearer_stored }))
    }

    async fn get_node(&self, cluster_id: &Id, node_id: &NodeId) -> Result<Option<StoredNode>, StoreError> {
        Statement::new("SELECT record, bearer_hash, revision FROM cluster_nodes WHERE cluster_id = $1 AND node_id = $2")
            .text(cluster_id.as_str())
            .text(node_id.as_str())
            .fetch_optional_as(&mut self.pool.connection().await?, |row| node_from_row(cluster_id, row))
            .await
    }

    async fn list_nodes(&self, cluster_id: &Id) -> Result<Vec<StoredNode>, StoreError> {
        cluster_nodes(&mut self.pool.connection().await?, self.pool.backend(), cluster_id).await
    }

    async fn put_service_spec(
        &self,
        body: &ServiceSpecBody,
        expected_revision: Option<u64>,
    ) -> Result<PutOutcome<ServiceRuntimeSpec>, StoreError> {
        let text = record_text(body, "service spec")?;
        let (cluster_id, service_id) = (&body.cluster_id, &body.service_id);
        let Some(mut transaction) = self.lock_existing_cluster(cluster_id).await? else {
            return Ok(PutOutcome::Missing(MissingKind::Cluster));
        };
        let head = service_head(&mut transaction, cluster_id, service_id).await?;
        let revision = match (head, expected_revision) {
            (None, None) => {
                Statement::new(
                    "INSERT INTO services (cluster_id, service_id, current_revision, deleted) VALUES ($1, $2, 1, FALSE)",
                )
                .text(cluster_id.as_str())
                .text(service_id.as_str())
                .execute(&mut transaction)
                .await?;
                1
            }
            (Some((current, deleted)), expected)
                if (deleted && expected.is_none()) || (!deleted && expected == Some(current)) =>
            {
                let next = current + 1;
                Statement::new(
                    "UPDATE services SET current_revision = $3, deleted = FALSE \
                     WHERE cluster_id = $1 AND service_id = $2 AND current_revision = $4",
                )
                .text(cluster_id.as_str())
                .text(service_id.as_str())
                .integer(counter_to_sql(next, "service revision")?)
                .integer(counter_to_sql(current, "service revision")?)
                .execute_one(&mut transaction, "the service head changed under the cluster lock")
                .await?;
                next
            }
            (head, _) => {
                transaction.rollback().await?;
                let current = head.and_then(|(current, deleted)| (!deleted).then_some(current));
                return Ok(PutOutcome::RevisionConflict { current });
            }
        };
        Statement::new(
            "INSERT INTO service_spec_revisions (cluster_id, service_id, revision, body) VALUES ($1, $2, $3, $4)",
        )
        .text(cluster_id.as_str())
        .text(service_id.as_str())
        .integer(counter_to_sql(revision, "service revision")?)
        .text(&text)
        .execute(&mut transaction)
        .await?;
        let volume_ids: BTreeSet<&str> = body.volumes.iter().map(|volume| volume.id.as_str()).collect();
        replace_service_volumes(&mut transaction, cluster_id, service_id, &volume_ids).await?;
        bump_facts_version(&mut transaction, cluster_id).await?;
        transaction.commit().await?;
        Ok(PutOutcome::Written(ServiceRuntimeSpec { body: body.clone(), revision }))
    }

    async fn get_service_spec(
        &self,
        cluster_id: &Id,
        service_id: &Id,
        revision: Option<u64>,
    ) -> Result<Option<ServiceRuntimeSpec>, StoreError> {
        let statement = match revision {
            None => Statement::new(
                "SELECT r.body, r.revision FROM services s \
                 JOIN service_spec_revisions r \
                   ON r.cluster_id = s.cluster_id AND r.service_id = s.service_id AND r.revision = s.current_revision \
                 WHERE s.cluster_id = $1 AND s.service_id = $2 AND NOT s.deleted",
            )
            .text(cluster_id.as_str())
            .text(service_id.as_str()),
            // Every revision stays readable, also of a deleted service.
            Some(revision) => Statement::new(
                "SELECT body, revision FROM service_spec_revisions \
                 WHERE cluster_id = $1 AND service_id = $2 AND revision = $3",
            )
            .text(cluster_id.as_str())
            .text(service_id.as_str())
            .integer(counter_to_sql(revision, "service revision")?),
        };
        statement.fetch_optional_as(&mut self.pool.connection().await?, service_spec_from_row).await
    }

    async fn delete_service(
        &self,
        cluster_id: &Id,
        service_id: &Id,
        expected_revision: u64,
    ) -> Result<PutOutcome<()>, StoreError> {
        let Some(mut transaction) = self.lock_existing_cluster(cluster_id).await? else {
            return Ok(PutOutcome::Missing(MissingKind::Cluster));
        };
        let outcome = match service_head(&mut transaction, cluster_id, service_id).await? {
            None | Some((_, true)) => PutOutcome::Missing(MissingKind::Service),
            Some((current, false)) if current != expected_revision => {
                PutOutcome::RevisionConflict { current: Some(current) }
            }
            Some((current, false)) => {
                Statement::new(
                    "UPDATE services SET deleted = TRUE \
                     WHERE cluster_id = $1 AND service_id = $2 AND current_revision = $3 AND NOT deleted",
                )
                .text(cluster_id.as_str())
                .text(service_id.as_str())
                .integer(counter_to_sql(current, "service revision")?)
                .execute(&mut transaction)
                .await?;
                replace_service_volumes(&mut transaction, cluster_id, service_id, &BTreeSet::new()).await?;
                bump_facts_version(&mut transaction, cluster_id).await?;
                transaction.commit().await?;
                return Ok(PutOutcome::Written(()));
            }
        };
        transaction.rollback().await?;
        Ok(outcome)
    }
}

/// An organization: `record`, `revision`.
pub(crate) fn organization_from_row(row: &Row) -> Result<StoredOrganization, StoreError> {
    Ok(StoredOrganization {
        organization: read_organization(&row.text("record")?)?,
        revision: row.counter("revision", "organization revision")?,
    })
}

/// A cluster: `record`, `revision`.
pub(crate) fn cluster_from_row(row: &Row) -> Result<StoredCluster, StoreError> {
    Ok(StoredCluster {
        cluster: read_cluster(&row.text("record")?)?,
        revision: row.counter("revision", "cluster revision")?,
    })
}

/// A node of `cluster_id`: `record`, `bearer_hash`, `revision`.
pub(crate) fn node_from_row(cluster_id: &Id, row: &Row) -> Result<StoredNode, StoreError> {
    Ok(StoredNode {
        cluster_id: cluster_id.clone(),
        node: read_node(&row.text("record")?)?,
        bearer_hash: row.hash("bearer_hash", "node bearer hash")?,
        revision: row.counter("revision", "node revision")?,
    })
}

/// A node's bearer hash and revision: `bearer_hash`, `revision`.
pub(crate) fn node_credential_from_row(row: &Row) -> Result<([u8; 32], u64), StoreError> {
    Ok((row.hash("bearer_hash", "node bearer hash")?, row.counter("revision", "node revision")?))
}

/// The head of a service: `current_revision`, `deleted`.
pub(crate) fn service_head_from_row(row: &Row) -> Result<(u64, bool), StoreError> {
    Ok((row.counter("current_revision", "service revision")?, row.boolean("deleted")?))
}

/// A service spec: `body`, `revision`.
pub(crate) fn service_spec_from_row(row: &Row) -> Result<ServiceRuntimeSpec, StoreError> {
    read_service_spec(&row.text("body")?, row.integer("revision")?)
}

/// A row's `service_id`.
pub(crate) fn service_id_from_row(row: &Row) -> Result<Id, StoreError> {
    row.id("service_id", "service id")
}

/// A row of `service_volumes`: `volume_id`, `service_id`.
pub(crate) fn service_volume_from_row(row: &Row) -> Result<(Id, Id), StoreError> {
    Ok((row.id("volume_id", "volume id")?, row.id("service_id", "service id")?))
}
