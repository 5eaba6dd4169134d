//! Cluster ingress designations (`03-designation.md`): the facts a designation is judged on, the
//! guarded write of an accepted one, the chain, the recorded mutations and the sealed secrets.
//!
//! **A designation commits only while every fact its judge read is unchanged.** The store reads
//! every fact in one statement ([`DesignationStore::designation_snapshot`]: one snapshot) with the
//! cluster's `facts_version`; the domain judges; the store writes with one guarded statement
//! ([`DesignationStore::write_designation`]) that moves the head (the cluster row's
//! `designation_generation`) only while `facts_version` and the head are still as read and, only
//! if it moved, inserts the generation with its mutation record and the sealed secret. **Every
//! write of a fact the judge reads bumps `facts_version`** (`inventory.rs`, and this write), so a
//! fact written after the read always fails the guard: under READ COMMITTED an `UPDATE` that meets
//! a newer version of its row re-checks its condition on that version. The write answers false
//! ("facts moved"), and the domain takes the locked path ([`DesignationStore::lock_designation`]):
//! a write transaction that holds the cluster's lock, the facts read again under it, the judge
//! again, the guarded write and the commit. On PostgreSQL the optimistic path is two round trips
//! and no explicit transaction (the write is one data-modifying `WITH`, its own transaction); on
//! SQLite (no data-modifying `WITH`, no round trips) the write's statements run in a `BEGIN
//! IMMEDIATE` transaction ([`Backend::designation_write_is_one_statement`]).
//!
//! On the locked path the facts statement follows the lock rather than joining it, because a
//! PostgreSQL statement's snapshot is taken when it starts: joined to a lock that waited, the
//! other tables would be read as they were before the lock holder committed. `BEGIN` and the lock
//! are two statements, so a caller cancelled while it waits for the lock leaves a transaction the
//! pool knows of (`postgres/pool.rs` closes such a connection).
//!
//! **A lookup of one generation or one mutation has exactly one usable index**: the current
//! record is a correlated scalar subquery on the primary key `(cluster_id, generation)`, and a
//! mutation is found by its single-column `mutation_key` (`<cluster>/<mutation>`). With two
//! indexes starting with `cluster_id`, a planner whose statistics date from a small table scanned
//! every generation of the cluster (docs/benchmarks.md).

use super::codec::{
    counter_to_sql, mutation_key, read_designation, read_service_spec, record_text, remember_written_designation,
};
use super::dialect::Backend;
use super::inventory::{StoredCluster, cluster_from_row, lock_cluster};
use super::sql::{HoldsConnection, InTransaction, LockedWrite, Row, Statement, Transaction};
use super::{SqlStore, StoreError};
use crate::contract::designation::ClusterIngressDesignation;
use crate::contract::inventory::ServiceRuntimeSpec;
use crate::contract::{DigestedRecord as _, Id};
use async_trait::async_trait;

/// A secret value sealed with AEAD by the caller; the store never sees plaintext.
#[derive(Clone, PartialEq, Eq)]
pub struct SealedSecret {
    /// Stable across versions.
    pub secret_id: Id,
    /// This version.
    pub secret_version_id: Id,
    /// The AEAD nonce.
    pub nonce: Vec<u8>,
    /// The AEAD ciphertext (with tag).
    pub ciphertext: Vec<u8>,
    /// SHA-256 of the plaintext, for constant-time verification.
    pub value_hash: [u8; 32],
}

impl std::fmt::Debug for SealedSecret {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("SealedSecret")
            .field("secret_id", &self.secret_id)
            .field("secret_version_id", &self.secret_version_id)
            .finish_non_exhaustive()
    }
}

/// Every fact a designation of `service_id` in `cluster_id` with `mutation_id` is judged on, as
/// one statement read them (one snapshot).
#[derive(Debug, Clone)]
pub struct DesignationSnapshot {
    /// The cluster the facts were read for.
    pub cluster_id: Id,
    /// The service the facts were read for.
    pub service_id: Id,
    /// The mutation the facts were read for.
    pub mutation_id: Id,
    /// The cluster, if it exists.
    pub cluster: Option<StoredCluster>,
    /// The service's current runtime spec, if the service exists (and is not deleted).
    pub service: Option<ServiceRuntimeSpec>,
    /// The cluster's current Pallet ingress designation.
    pub current: Option<ClusterIngressDesignation>,
    /// True when `mutation_id` is already recorded for the cluster.
    pub mutation_recorded: bool,
    /// The cluster's facts version at the snapshot (0 for a cluster that does not exist): the
    /// guard of [`DesignationStore::write_designation`].
    pub facts_version: i64,
}

/// What an accepted designation writes, atomically.
#[derive(Debug, Clone)]
pub struct DesignationWrite {
    /// The new generation.
    pub designation: ClusterIngressDesignation,
    /// The new bearer, sealed.
    pub secret: SealedSecret,
    /// The mutation id of the request, for replay.
    pub mutation_id: Id,
    /// The request's canonical bytes, for replay comparison.
    pub request_canonical: String,
}

/// A designation mutation recorded for replay.
#[derive(Debug, Clone)]
pub struct RecordedMutation {
    /// The canonical bytes of the request that produced it.
    pub request_canonical: String,
    /// The designation it produced.
    pub designation: ClusterIngressDesignation,
    /// The spec at that designation's `preparedSpecRevision`.
    pub spec: ServiceRuntimeSpec,
}

/// Persistence of designations and their sealed secrets.
#[async_trait]
pub trait DesignationStore: Send + Sync {
    /// Every fact a designation is judged on, in one statement (one snapshot): the cluster and
    /// its facts version, whether `mutation_id` is recorded, the service's current spec and the
    /// current designation.
    async fn designation_snapshot(
        &self,
        cluster_id: &Id,
        service_id: &Id,
        mutation_id: &Id,
    ) -> Result<DesignationSnapshot, StoreError>;

    /// Writes `write`, judged on `snapshot`, with one guarded statement (its own transaction):
    /// true when written; false, with nothing written, when a fact of the snapshot moved (the
    /// cluster's facts version or designation head is no longer as read). A write that breaks a
    /// rule of the chain ([`check_designation_write`]) writes nothing and answers
    /// [`StoreError::Corrupt`] (a bug in the judge).
    async fn write_designation(
        &self,
        snapshot: &DesignationSnapshot,
        write: &DesignationWrite,
    ) -> Result<bool, StoreError>;

    /// A write transaction that holds the cluster's lock (every other writer of the cluster's
    /// facts waits for it, across processes), with the facts read under it.
    async fn lock_designation(
        &self,
        cluster_id: &Id,
        service_id: &Id,
        mutation_id: &Id,
    ) -> Result<Box<dyn LockedDesignation>, StoreError>;

    /// The mutation recorded for `mutation_id` in the cluster, if any.
    async fn find_designation_mutation(
        &self,
        cluster_id: &Id,
        mutation_id: &Id,
    ) -> Result<Option<RecordedMutation>, StoreError>;

    /// The cluster's current Pallet ingress designation.
    async fn current_designation(&self, cluster_id: &Id) -> Result<Option<ClusterIngressDesignation>, StoreError>;

    /// The cluster's current Pallet ingress designation, read together with the cluster's
    /// existence in one query: `None` when the cluster does not exist, `Some(None)` when it holds
    /// no designation.
    async fn cluster_designation(
        &self,
        cluster_id: &Id,
    ) -> Result<Option<Option<ClusterIngressDesignation>>, StoreError>;

    /// The designation chain of a cluster, oldest first, from `from_generation`, at most `limit`.
    async fn list_designations(
        &self,
        cluster_id: &Id,
        from_generation: u64,
        limit: u32,
    ) -> Result<Vec<ClusterIngressDesignation>, StoreError>;

    /// One sealed secret version.
    async fn get_secret(&self, secret_id: &Id, secret_version_id: &Id) -> Result<Option<SealedSecret>, StoreError>;
}

/// A write transaction holding a cluster's lock, with the designation facts read under it
/// ([`DesignationStore::lock_designation`]). It ends with [`LockedWrite::commit`] or
/// [`LockedWrite::rollback`]; dropped before either, it rolls back.
#[async_trait]
pub trait LockedDesignation: LockedWrite {
    /// The facts, read under the lock.
    fn snapshot(&self) -> &DesignationSnapshot;

    /// The guarded write of [`DesignationStore::write_designation`], inside this transaction
    /// (a second guard besides the lock): false when the head is not as read.
    async fn write(&mut self, write: &DesignationWrite) -> Result<bool, StoreError>;
}

/// The record of cluster `c`'s current designation (NULL when it holds none) is a correlated
/// scalar subquery, `(SELECT d.record FROM ingress_designations d WHERE d.cluster_id = c.id AND
/// d.generation = c.designation_generation)`: its lookup is always the primary key's, whatever
/// the planner's statistics say (joined instead, a planner that believes each cluster has one
/// generation may scan all of them).
const CLUSTER_DESIGNATION_SQL: &str = "SELECT (SELECT d.record FROM ingress_designations d \
     WHERE d.cluster_id = c.id AND d.generation = c.designation_generation) AS record FROM clusters c WHERE c.id = $1";

/// Every fact of a designation in one statement (see [`designation_snapshot_from_row`]); `$3` is
/// the mutation key. The current designation is the subquery of [`CLUSTER_DESIGNATION_SQL`].
const DESIGNATION_FACTS_SQL: &str = "SELECT c.record, c.revision, c.facts_version, \
       EXISTS (SELECT 1 FROM ingress_designations m WHERE m.mutation_key = $3) AS recorded, \
       (SELECT r.body FROM service_spec_revisions r WHERE r.cluster_id = s.cluster_id \
          AND r.service_id = s.service_id AND r.revision = s.current_revision) AS spec_body, \
       s.current_revision AS spec_revision, \
       (SELECT d.record FROM ingress_designations d WHERE d.cluster_id = c.id AND d.generation = c.designation_generation) \
       AS designation \
     FROM (SELECT 1 AS one) facts \
     LEFT JOIN clusters c ON c.id = $1 \
     LEFT JOIN services s ON s.cluster_id = $1 AND s.service_id = $2 AND NOT s.deleted";

/// The write of an accepted designation on PostgreSQL, in one statement (so also one transaction
/// of its own): the guarded move of the head in the cluster row and, only when it moved (`FROM
/// head`), the generation with its mutation record and the sealed secret. `$16` is the facts
/// version the facts were read at, `$13` the expected head generation (NULL: none yet).
const DESIGNATION_WRITE_SQL: &str = "WITH head AS (UPDATE clusters \
       SET designation_generation = $2, facts_version = facts_version + 1 \
       WHERE id = $1 AND facts_version = $16 AND designation_generation IS NOT DISTINCT FROM $13 RETURNING id), \
     designation AS (INSERT INTO ingress_designations (cluster_id, generation, designation_id, digest, \
       ingress_service_id, prepared_spec_revision, record, mutation_key, request_canonical) \
       SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9 FROM head), \
     secret AS (INSERT INTO secret_versions (secret_id, secret_version_id, nonce, ciphertext, value_hash) \
       SELECT $10, $11, $12, $14, $15 FROM head) \
     SELECT count(*) AS moved FROM head";

/// Reads the facts of a designation in one statement.
async fn read_snapshot(
    on: &mut impl HoldsConnection,
    cluster_id: &Id,
    service_id: &Id,
    mutation_id: &Id,
) -> Result<DesignationSnapshot, StoreError> {
    let key = mutation_key(cluster_id, mutation_id);
    let row = Statement::new(DESIGNATION_FACTS_SQL)
        .text(cluster_id.as_str())
        .text(service_id.as_str())
        .text(&key)
        .fetch_one(on)
        .await?;
    designation_snapshot_from_row(cluster_id, service_id, mutation_id, &row)
}

/// The cluster's current designation (`Some(None)`: it holds none), or `None` when there is no
/// such cluster.
pub(crate) async fn cluster_designation_on(
    on: &mut impl HoldsConnection,
    cluster_id: &Id,
) -> Result<Option<Option<ClusterIngressDesignation>>, StoreError> {
    Statement::new(CLUSTER_DESIGNATION_SQL)
        .text(cluster_id.as_str())
        .fetch_optional_as(on, |row| optional_designation_from_row(row, "record"))
        .await
}

/// Checks that `write` is the next generation of the snapshot's chain for its service and
/// mutation, prepared against the service's current spec (of the snapshot), with a true digest
/// and the secret it names, for a cluster that exists. The judge is the domain's; a write that
/// breaks these rules is a programming error, refused before anything is written (reported as
/// [`StoreError::Corrupt`], because storing it would corrupt the chain).
fn check_designation_write(snapshot: &DesignationSnapshot, write: &DesignationWrite) -> Result<(), StoreError> {
    let (current, designation) = (snapshot.current.as_ref(), &write.designation);
    let refuse = |rule: &str| Err(StoreError::Corrupt(format!("designation judge broke a store rule: {rule}")));
    if snapshot.cluster.is_none() {
        return refuse("the cluster does not exist");
    }
    if write.mutation_id != snapshot.mutation_id {
        return refuse("the write names another mutation id");
    }
    if designation.cluster_id != snapshot.cluster_id || designation.runtime.id != snapshot.cluster_id {
        return refuse("the designation names another cluster");
    }
    if designation.ingress_service_id != snapshot.service_id {
        return refuse("the designation names another service");
    }
    match current {
        None if designation.generation != 1 || designation.previous.is_some() => {
            return refuse("the first generation must be 1 with no previous");
        }
        Some(current)
            if designation.generation != current.generation + 1
                || designation.id != current.id
                || designation.previous.as_ref() != Some(&current.reference()) =>
        {
            return refuse("the designation does not link the current generation");
        }
        _ => {}
    }
    if snapshot.service.as_ref().map(|spec| spec.revision) != Some(designation.prepared_spec_revision) {
        return refuse("the designation is not prepared against the service's current spec");
    }
    let secret_version = &designation.credential.secret_version;
    if secret_version.secret_id != write.secret.secret_id
        || secret_version.secret_version_id != write.secret.secret_version_id
    {
        return refuse("the credential does not name the sealed secret version");
    }
    if designation.compute_digest() != designation.digest {
        return refuse("the designation digest does not match");
    }
    Ok(())
}

/// The guarded write of a checked designation: one statement on PostgreSQL (atomic anywhere),
/// the statements one by one inside the caller's write transaction on SQLite. True when the head
/// moved and everything was written; false when nothing was.
async fn write_checked(
    on: &mut impl HoldsConnection,
    backend: Backend,
    snapshot: &DesignationSnapshot,
    write: &DesignationWrite,
) -> Result<bool, StoreError> {
    let designation = &write.designation;
    let cluster_id = snapshot.cluster_id.as_str();
    let generation = counter_to_sql(designation.generation, "designation generation")?;
    let current_generation = snapshot
        .current
        .as_ref()
        .map(|current| counter_to_sql(current.generation, "designation generation"))
        .transpose()?;
    let prepared_spec_revision = counter_to_sql(designation.prepared_spec_revision, "prepared spec revision")?;
    let text = record_text(designation, "ingress designation")?;
    let key = mutation_key(&snapshot.cluster_id, &write.mutation_id);
    let secret = &write.secret;
    // A statement whose `$1` to `$9` are the generation's row with its mutation record.
    let with_generation = |sql: &'static str| {
        Statement::new(sql)
            .text(cluster_id)
            .integer(generation)
            .text(designation.id.as_str())
            .text(designation.digest.as_str())
            .text(designation.ingress_service_id.as_str())
            .integer(prepared_spec_revision)
            .text(&text)
            .text(&key)
            .text(&write.request_canonical)
    };
    let moved = if backend.designation_write_is_one_statement() {
        let row = with_generation(DESIGNATION_WRITE_SQL)
            .text(secret.secret_id.as_str())
            .text(secret.secret_version_id.as_str())
            .bytes(&secret.nonce)
            .optional_integer(current_generation)
            .bytes(&secret.ciphertext)
            .bytes(&secret.value_hash)
            .integer(snapshot.facts_version)
            .fetch_one(on)
            .await?;
        row.integer("moved")? == 1
    } else {
        let moved = Statement::new(
            "UPDATE clusters SET designation_generation = $2, facts_version = facts_version + 1 \
             WHERE id = $1 AND facts_version = $4 AND designation_generation IS NOT DISTINCT FROM $3",
        )
        .text(cluster_id)
        .integer(generation)
        .optional_integer(current_generation)
        .integer(snapshot.facts_version)
        .execute(on)
        .await?;
        if moved == 1 {
            with_generation(
                "INSERT INTO ingress_designations (cluster_id, generation, designation_id, digest, ingress_service_id, \
                   prepared_spec_revision, record, mutation_key, request_canonical) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
            )
            .execute(on)
            .await?;
            Statement::new(
                "INSERT INTO secret_versions (secret_id, secret_version_id, nonce, ciphertext, value_hash) \
                 VALUES ($1, $2, $3, $4, $5)",
            )
            .text(secret.secret_id.as_str())
            .text(secret.secret_version_id.as_str())
            .bytes(&secret.nonce)
            .bytes(&secret.ciphertext)
            .bytes(&secret.value_hash)
            .execute(on)
            .await?;
        }
        moved == 1
    };
    if moved {
        remember_written_designation(&text, designation);
    }
    Ok(moved)
}

/// [`LockedDesignation`] on a write transaction of a [`SqlStore`].
struct LockedSqlDesignation {
    transaction: Transaction,
    backend: Backend,
    snapshot: DesignationSnapshot,
}

#[async_trait]
impl LockedDesignation for LockedSqlDesignation {
    fn snapshot(&self) -> &DesignationSnapshot {
        &self.snapshot
    }

    async fn write(&mut self, write: &DesignationWrite) -> Result<bool, StoreError> {
        check_designation_write(&self.snapshot, write)?;
        write_checked(&mut self.transaction, self.backend, &self.snapshot, write).await
    }
}

impl InTransaction for LockedSqlDesignation {
    fn into_transaction(self: Box<Self>) -> Transaction {
        self.transaction
    }
}

#[async_trait]
impl DesignationStore for SqlStore {
    async fn designation_snapshot(
        &self,
        cluster_id: &Id,
        service_id: &Id,
        mutation_id: &Id,
    ) -> Result<DesignationSnapshot, StoreError> {
        read_snapshot(&mut self.pool.connection().await?, cluster_id, service_id, mutation_id).await
    }

    async fn write_designation(
        &self,
        snapshot: &DesignationSnapshot,
        write: &DesignationWrite,
    ) -> Result<bool, StoreError> {
        check_designation_write(snapshot, write)?;
        let backend = self.pool.backend();
        if backend.designation_write_is_one_statement() {
            return write_checked(&mut self.pool.connection().await?, backend, snapshot, write).await;
        }
        let mut transaction = self.pool.begin_write().await?;
        if write_checked(&mut transaction, backend, snapshot, write).await? {
            transaction.commit().await?;
            Ok(true)
        } else {
            transaction.rollback().await?;
            Ok(false)
        }
    }

    async fn lock_designation(
        &self,
        cluster_id: &Id,
        service_id: &Id,
        mutation_id: &Id,
    ) -> Result<Box<dyn LockedDesignation>, StoreError> {
        let backend = self.pool.backend();
        let mut transaction = self.pool.begin_write().await?;
        lock_cluster(&mut transaction, backend, cluster_id).await?;
        let snapshot = read_snapshot(&mut transaction, cluster_id, service_id, mutation_id).await?;
        Ok(Box::new(LockedSqlDesignation { transaction, backend, snapshot }))
    }

    async fn find_designation_mutation(
        &self,
        cluster_id: &Id,
        mutation_id: &Id,
    ) -> Result<Option<RecordedMutation>, StoreError> {
        Statement::new(
            "SELECT d.request_canonical, d.record, r.body, r.revision \
             FROM ingress_designations d \
             LEFT JOIN service_spec_revisions r ON r.cluster_id = d.cluster_id \
               AND r.service_id = d.ingress_service_id AND r.revision = d.prepared_spec_revision \
             WHERE d.mutation_key = $1",
        )
        .text(&mutation_key(cluster_id, mutation_id))
        .fetch_optional_as(&mut self.pool.connection().await?, recorded_mutation_from_row)
        .await
    }

    async fn current_designation(&self, cluster_id: &Id) -> Result<Option<ClusterIngressDesignation>, StoreError> {
        Ok(self.cluster_designation(cluster_id).await?.flatten())
    }

    async fn cluster_designation(
        &self,
        cluster_id: &Id,
    ) -> Result<Option<Option<ClusterIngressDesignation>>, StoreError> {
        cluster_designation_on(&mut self.pool.connection().await?, cluster_id).await
    }

    async fn list_designations(
        &self,
        cluster_id: &Id,
        from_generation: u64,
        limit: u32,
    ) -> Result<Vec<ClusterIngressDesignation>, StoreError> {
        Statement::new(
            "SELECT record FROM ingress_designations WHERE cluster_id = $1 AND generation >= $2 \
             ORDER BY generation LIMIT $3",
        )
        .text(cluster_id.as_str())
        .integer(counter_to_sql(from_generation, "designation generation")?)
        .integer(i64::from(limit))
        .fetch_all(&mut self.pool.connection().await?)
        .await?
        .iter()
        .map(|row| designation_from_row(row, "record"))
        .collect()
    }

    async fn get_secret(&self, secret_id: &Id, secret_version_id: &Id) -> Result<Option<SealedSecret>, StoreError> {
        Statement::new(
            "SELECT nonce, ciphertext, value_hash FROM secret_versions WHERE secret_id = $1 AND secret_version_id = $2",
        )
        .text(secret_id.as_str())
        .text(secret_version_id.as_str())
        .fetch_optional_as(&mut self.pool.connection().await?, |row| {
            sealed_secret_from_row(secret_id, secret_version_id, row)
        })
        .await
    }
}

/// A designation in column `column`.
pub(crate) fn designation_from_row(row: &Row, column: &str) -> Result<ClusterIngressDesignation, StoreError> {
    read_designation(&row.text(column)?)
}

/// A designation in the nullable column `column`.
pub(crate) fn optional_designation_from_row(
    row: &Row,
    column: &str,
) -> Result<Option<ClusterIngressDesignation>, StoreError> {
    row.optional_text(column)?.map(|text| read_designation(&text)).transpose()
}

/// The facts of a designation (see `designations.rs`, `DESIGNATION_FACTS_SQL`): `record` and
/// `revision` of the cluster (NULL: no such cluster), `facts_version`, `recorded`, `spec_body`
/// and `spec_revision` (NULL: no such service), `designation` (NULL: none).
pub(crate) fn designation_snapshot_from_row(
    cluster_id: &Id,
    service_id: &Id,
    mutation_id: &Id,
    row: &Row,
) -> Result<DesignationSnapshot, StoreError> {
    let mut snapshot = DesignationSnapshot {
        cluster_id: cluster_id.clone(),
        service_id: service_id.clone(),
        mutation_id: mutation_id.clone(),
        cluster: None,
        service: None,
        current: None,
        mutation_recorded: false,
        facts_version: 0,
    };
    if row.optional_text("record")?.is_none() {
        return Ok(snapshot);
    }
    snapshot.cluster = Some(cluster_from_row(row)?);
    snapshot.service = match (row.optional_text("spec_body")?, row.optional_integer("spec_revision")?) {
        (Some(body), Some(revision)) => Some(read_service_spec(&body, revision)?),
        _ => None,
    };
    snapshot.current = optional_designation_from_row(row, "designation")?;
    snapshot.mutation_recorded = row.boolean("recorded")?;
    snapshot.facts_version = row.integer("facts_version")?;
    Ok(snapshot)
}

/// A recorded designation mutation: `request_canonical`, `record`, and the spec it was prepared
/// against, `body` and `revision` (NULL when that revision is missing, which is corrupt).
pub(crate) fn recorded_mutation_from_row(row: &Row) -> Result<RecordedMutation, StoreError> {
    let (Some(body), Some(revision)) = (row.optional_text("body")?, row.optional_integer("revision")?) else {
        return Err(StoreError::Corrupt("a recorded designation names a missing spec revision".into()));
    };
    Ok(RecordedMutation {
        request_canonical: row.text("request_canonical")?,
        designation: designation_from_row(row, "record")?,
        spec: read_service_spec(&body, revision)?,
    })
}

/// A sealed secret version: `nonce`, `ciphertext`, `value_hash`.
pub(crate) fn sealed_secret_from_row(
    secret_id: &Id,
    secret_version_id: &Id,
    row: &Row,
) -> Result<SealedSecret, StoreError> {
    Ok(SealedSecret {
        secret_id: secret_id.clone(),
        secret_version_id: secret_version_id.clone(),
        nonce: row.bytes("nonce")?,
        ciphertext: row.bytes("ciphertext")?,
        value_hash: row.hash("value_hash", "secret value hash")?,
    })
}
