//! Runtime local storage claims (`06-storage-claims.md`): every generation of every claim with
//! its signature, each claim's head, and what the node answered to each generation.
//!
//! The domain decides every generation (`domain::storage_claims`); the store keeps them. New
//! generations are written inside the assignment reconcile's locked transaction
//! ([`LockedAssignments::apply_claims`](super::sessions::LockedAssignments::apply_claims)), under
//! the cluster's lock, with the same guards as assignments: a new primary key, and a head update
//! only where the head is the generation the change links. The node's answers are recorded per
//! generation: the last trusted answer (status, state, the session it came under; an answer under
//! an older session never replaces one under a newer session), the count and last text of
//! untrusted answers (protocol faults, which never touch the state), and an operator's decision
//! on an `uncertain` generation. States are kept as the text the domain gives (the schema admits
//! the spec's spellings).
//!
//! **A claim record that does not read back affects only itself.** Heads are read as
//! [`ClaimHeads`]: a head whose record fails its contract reader is an [`UnreadableHead`],
//! described by the head's own columns, and the rest of the cluster reads on.

use super::codec::{counter_from_sql, counter_to_sql, record_text};
use super::dialect::Backend;
use super::heads::{Heads, UnreadableHead, head_of_signed_chain, readable_or};
use super::sql::{HoldsConnection, Row, Statement, head_record};
use super::{SqlStore, StoreError};
use crate::contract::signing::Signed;
use crate::contract::storage_claim::{RuntimeLocalStorageClaim, snapshot_runtime_local_storage_claim};
use crate::contract::{Id, NodeId};
use async_trait::async_trait;

/// The node's last answer to one claim generation that passed
/// `bindApplyRuntimeLocalStorageClaimResponse`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimAnswer {
    /// `accepted`, `replay` or `historical`, as the domain spells it.
    pub status: String,
    /// `ready`, `import-required`, `purged` or `uncertain`, as the domain spells it.
    pub state: String,
    /// The id of the session the answer came under.
    pub session_id: Id,
    /// That session's generation.
    pub session_generation: u64,
    /// When it was recorded, ms since the Unix epoch.
    pub answered_at: u64,
}

/// A protocol fault: an answer that did not pass the bind, never trusted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimFault {
    /// What was wrong with it (a fixed text of the domain's; never the answer itself).
    pub fault: String,
    /// When, ms since the Unix epoch.
    pub at: u64,
}

/// An operator's decision on an `uncertain` generation (`resolveRuntimeLocalStorageClaim`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimResolution {
    /// `purge` or `rebind`, as the domain spells it.
    pub decision: String,
    /// When, ms since the Unix epoch.
    pub at: u64,
}

/// One stored claim generation with what its node answered.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredClaim {
    /// The signed record.
    pub signed: Signed<RuntimeLocalStorageClaim>,
    /// When it was issued, ms since the Unix epoch.
    pub issued_at: u64,
    /// The node's last trusted answer to this generation.
    pub answer: Option<ClaimAnswer>,
    /// How many answers to this generation were protocol faults.
    pub fault_count: u64,
    /// The last of them.
    pub last_fault: Option<ClaimFault>,
    /// An operator's decision on it, once `uncertain`.
    pub resolution: Option<ClaimResolution>,
}

/// What a claim's head row says of an [`UnreadableHead`] besides the common columns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimHeadExtra {
    /// Its volume.
    pub volume_id: Id,
}

/// Head claim generations, sorted by claim id: those whose record reads back, and those whose
/// record does not.
pub type ClaimHeads = Heads<StoredClaim, UnreadableHead<ClaimHeadExtra>>;

head_of_signed_chain!(StoredClaim);

/// One change a claim reconcile writes: a new generation (1 with no previous for a new id, else
/// the head's generation + 1 linking it), which becomes the head.
#[derive(Debug, Clone, PartialEq)]
pub enum ClaimChange {
    /// The new generation, signed.
    Issue(Box<Signed<RuntimeLocalStorageClaim>>),
}

/// The latest answered generation of one claim (for the operator's list).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LastClaimAnswer {
    /// The claim.
    pub claim_id: Id,
    /// The generation the answer is about.
    pub generation: u64,
    /// The answer.
    pub answer: ClaimAnswer,
}

/// Persistence of runtime local storage claims and the node's answers.
#[async_trait]
pub trait StorageClaimStore: Send + Sync {
    /// Every claim head of the cluster, sorted by claim id.
    async fn claim_heads(&self, cluster_id: &Id) -> Result<ClaimHeads, StoreError>;

    /// The claim heads issued to one node, sorted by claim id.
    async fn node_claim_heads(&self, cluster_id: &Id, node_id: &NodeId) -> Result<ClaimHeads, StoreError>;

    /// The cluster whose claim `claim_id` is (claim ids are unique across clusters, since they
    /// are derived from the cluster id; the first cluster by id if a store holds two).
    async fn claim_cluster(&self, claim_id: &Id) -> Result<Option<Id>, StoreError>;

    /// One stored claim generation.
    async fn get_claim(
        &self,
        cluster_id: &Id,
        claim_id: &Id,
        generation: u64,
    ) -> Result<Option<StoredClaim>, StoreError>;

    /// Records `answer` as the node's last trusted answer to the generation, unless its answer
    /// came under a newer session generation than `answer`'s; false when the generation does not
    /// exist or keeps that newer answer. An `uncertain` answer to a generation whose answer a
    /// decision forgot (an uncertain purge decided `purge`, pushed again) clears that decision:
    /// the claim is held for an operator again.
    async fn record_claim_answer(
        &self,
        cluster_id: &Id,
        claim_id: &Id,
        generation: u64,
        answer: &ClaimAnswer,
    ) -> Result<bool, StoreError>;

    /// Counts a protocol fault against the generation; its answer stays as it was.
    async fn record_claim_fault(
        &self,
        cluster_id: &Id,
        claim_id: &Id,
        generation: u64,
        fault: &ClaimFault,
    ) -> Result<(), StoreError>;

    /// Records an operator's decision on the head generation `generation` of the claim, only
    /// while it is the head, its last trusted answer says `uncertain` and no decision on it is
    /// recorded (false otherwise: of two decisions on one generation, one is recorded).
    /// `forget_answer` also clears that answer, so the generation is pushed again.
    async fn record_claim_resolution(
        &self,
        cluster_id: &Id,
        claim_id: &Id,
        generation: u64,
        resolution: &ClaimResolution,
        forget_answer: bool,
    ) -> Result<bool, StoreError>;

    /// For every claim of the cluster that has one, its latest answered generation with the
    /// answer, sorted by claim id.
    async fn last_claim_answers(&self, cluster_id: &Id) -> Result<Vec<LastClaimAnswer>, StoreError>;
}

/// The head generations with their records, as [`claim_head_from_row`] reads them; a statement adds
/// its `WHERE` and `ORDER BY`.
fn heads(backend: Backend) -> String {
    let columns = [
        "record",
        "signature",
        "digest",
        "issued_at",
        "answer_status",
        "node_state",
        "answered_session_id",
        "answered_session_generation",
        "answered_at",
        "fault_count",
        "last_fault",
        "last_fault_at",
        "resolution",
        "resolved_at",
    ];
    let record = head_record(backend, "runtime_local_storage_claims", "r", "claim_id", &columns);
    format!(
        "SELECT {}, h.claim_id, h.generation AS head_generation, h.node_id, h.service_id, h.volume_id \
         FROM runtime_local_storage_claim_heads h {}",
        record.columns, record.join
    )
}

/// Every claim head of the cluster, on `on` (the reconcile's facts read them in its transaction).
pub(crate) async fn claim_heads_on(
    on: &mut impl HoldsConnection,
    backend: Backend,
    cluster_id: &Id,
) -> Result<ClaimHeads, StoreError> {
    ClaimHeads::from_rows(
        &Statement::composed(format!(
            "{} WHERE h.cluster_id = $1 ORDER BY h.claim_id{}",
            heads(backend),
            backend.bytewise()
        ))
        .text(cluster_id.as_str())
        .fetch_all(on)
        .await?,
        claim_head_from_row,
    )
}

/// The claim heads of these services, on `on`, sorted by claim id.
pub(crate) async fn service_claim_heads_on(
    on: &mut impl HoldsConnection,
    backend: Backend,
    cluster_id: &Id,
    service_ids: &[&str],
) -> Result<ClaimHeads, StoreError> {
    let rows = super::sql::rows_by_ids(
        on,
        cluster_id,
        &format!("{} WHERE h.cluster_id = $1 AND {{ids}}", heads(backend)),
        "h.service_id",
        service_ids,
    )
    .await?;
    ClaimHeads::from_rows(&rows, claim_head_from_row)
}

/// Checks that the changes fit the heads they were decided from: a new generation links its
/// head (or is generation 1 of a new id) in this cluster with a true digest, and no claim changes
/// twice in one commit.
fn check_claim_changes(cluster_id: &Id, heads: &ClaimHeads, changes: &[ClaimChange]) -> Result<(), StoreError> {
    let refuse = |rule: &str| Err(StoreError::Corrupt(format!("claim judge broke a store rule: {rule}")));
    let mut seen = std::collections::HashSet::new();
    for ClaimChange::Issue(signed) in changes {
        let payload = &signed.payload;
        if !seen.insert(payload.id.clone()) {
            return refuse("one claim changes twice");
        }
        if payload.cluster_id != *cluster_id {
            return refuse("the claim names another cluster");
        }
        if !payload.digest_matches() {
            return refuse("the claim digest does not match");
        }
        match heads.reference(&payload.id) {
            None if payload.generation != 1 || payload.previous.is_some() => {
                return refuse("the first generation must be 1 with no previous");
            }
            Some(current)
                if payload.generation != current.generation + 1 || payload.previous.as_ref() != Some(&current) =>
            {
                return refuse("the claim does not link its head");
            }
            _ => {}
        }
    }
    Ok(())
}

/// Writes checked claim changes with guarded statements inside the caller's transaction.
/// A guard that finds another state answers [`StoreError::Unavailable`]: the transaction must
/// not be committed.
pub(crate) async fn apply_claim_changes_on(
    transaction: &mut impl HoldsConnection,
    cluster_id: &Id,
    heads: &ClaimHeads,
    changes: &[ClaimChange],
    issued_at: u64,
) -> Result<(), StoreError> {
    check_claim_changes(cluster_id, heads, changes)?;
    let issued_at = counter_to_sql(issued_at, "claim issue time")?;
    for ClaimChange::Issue(signed) in changes {
        let payload = &signed.payload;
        let generation = counter_to_sql(payload.generation, "claim generation")?;
        let inserted = Statement::new(
            "INSERT INTO runtime_local_storage_claims \
               (cluster_id, claim_id, generation, node_id, service_id, volume_id, digest, record, signature, issued_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) ON CONFLICT DO NOTHING",
        )
        .text(cluster_id.as_str())
        .text(payload.id.as_str())
        .integer(generation)
        .text(payload.node_id.as_str())
        .text(payload.service_id.as_str())
        .text(payload.volume_id.as_str())
        .text(payload.digest.as_str())
        .text(&record_text(payload, "runtime local storage claim")?)
        .text(&record_text(&signed.signature, "claim signature")?)
        .integer(issued_at)
        .execute(transaction)
        .await?;
        let moved = match (inserted, &payload.previous) {
            (1, None) => {
                Statement::new(
                    "INSERT INTO runtime_local_storage_claim_heads \
                       (cluster_id, claim_id, generation, node_id, service_id, volume_id) \
                     VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING",
                )
                .text(cluster_id.as_str())
                .text(payload.id.as_str())
                .integer(generation)
                .text(payload.node_id.as_str())
                .text(payload.service_id.as_str())
                .text(payload.volume_id.as_str())
                .execute(transaction)
                .await?
            }
            (1, Some(previous)) => {
                Statement::new(
                    "UPDATE runtime_local_storage_claim_heads SET generation = $3, node_id = $4, service_id = $5, \
                       volume_id = $6 \
                     WHERE cluster_id = $1 AND claim_id = $2 AND generation = $7",
                )
                .text(cluster_id.as_str())
                .text(payload.id.as_str())
                .integer(generation)
                .text(payload.node_id.as_str())
                .text(payload.service_id.as_str())
                .text(payload.volume_id.as_str())
                .integer(counter_to_sql(previous.generation, "claim generation")?)
                .execute(transaction)
                .await?
            }
            _ => 0,
        };
        if moved != 1 {
            return Err(StoreError::Unavailable("a claim head moved under the cluster lock".into()));
        }
    }
    Ok(())
}

/// `sql`, a statement about one claim generation (`$1` cluster, `$2` claim, `$3` generation),
/// with those arguments bound.
fn on_generation<'a>(
    sql: &'static str,
    cluster_id: &'a Id,
    claim_id: &'a Id,
    generation: u64,
) -> Result<Statement<'a>, StoreError> {
    Ok(Statement::new(sql)
        .text(cluster_id.as_str())
        .text(claim_id.as_str())
        .integer(counter_to_sql(generation, "claim generation")?))
}

#[async_trait]
impl StorageClaimStore for SqlStore {
    async fn claim_heads(&self, cluster_id: &Id) -> Result<ClaimHeads, StoreError> {
        claim_heads_on(&mut self.pool.connection().await?, self.pool.backend(), cluster_id).await
    }

    async fn node_claim_heads(&self, cluster_id: &Id, node_id: &NodeId) -> Result<ClaimHeads, StoreError> {
        ClaimHeads::from_rows(
            &Statement::composed(format!(
                "{} WHERE h.cluster_id = $1 AND h.node_id = $2 ORDER BY h.claim_id{}",
                heads(self.pool.backend()),
                self.pool.backend().bytewise()
            ))
            .text(cluster_id.as_str())
            .text(node_id.as_str())
            .fetch_all(&mut self.pool.connection().await?)
            .await?,
            claim_head_from_row,
        )
    }

    async fn claim_cluster(&self, claim_id: &Id) -> Result<Option<Id>, StoreError> {
        Statement::composed(format!(
            "SELECT cluster_id FROM runtime_local_storage_claim_heads WHERE claim_id = $1 ORDER BY cluster_id{} LIMIT 1",
            self.pool.backend().bytewise()
        ))
        .text(claim_id.as_str())
        .fetch_optional_as(&mut self.pool.connection().await?, claim_cluster_from_row)
        .await
    }

    async fn get_claim(
        &self,
        cluster_id: &Id,
        claim_id: &Id,
        generation: u64,
    ) -> Result<Option<StoredClaim>, StoreError> {
        on_generation(
            "SELECT record, signature, issued_at, answer_status, node_state, answered_session_id, \
               answered_session_generation, answered_at, fault_count, last_fault, last_fault_at, resolution, \
               resolved_at \
             FROM runtime_local_storage_claims WHERE cluster_id = $1 AND claim_id = $2 AND generation = $3",
            cluster_id,
            claim_id,
            generation,
        )?
        .fetch_optional_as(&mut self.pool.connection().await?, stored_claim_from_row)
        .await
    }

    async fn record_claim_answer(
        &self,
        cluster_id: &Id,
        claim_id: &Id,
        generation: u64,
        answer: &ClaimAnswer,
    ) -> Result<bool, StoreError> {
        let updated = on_generation(
            "UPDATE runtime_local_storage_claims SET answer_status = $4, node_state = $5, answered_session_id = $6, \
               answered_session_generation = $7, answered_at = $8, \
               resolution = CASE WHEN answer_status IS NULL AND $5 = 'uncertain' THEN NULL ELSE resolution END, \
               resolved_at = CASE WHEN answer_status IS NULL AND $5 = 'uncertain' THEN NULL ELSE resolved_at END \
             WHERE cluster_id = $1 AND claim_id = $2 AND generation = $3 \
               AND (answered_session_generation IS NULL OR answered_session_generation <= $7)",
            cluster_id,
            claim_id,
            generation,
        )?
        .text(&answer.status)
        .text(&answer.state)
        .text(answer.session_id.as_str())
        .integer(counter_to_sql(answer.session_generation, "session generation")?)
        .integer(counter_to_sql(answer.answered_at, "answer time")?)
        .execute(&mut self.pool.connection().await?)
        .await?;
        Ok(updated == 1)
    }

    async fn record_claim_fault(
        &self,
        cluster_id: &Id,
        claim_id: &Id,
        generation: u64,
        fault: &ClaimFault,
    ) -> Result<(), StoreError> {
        on_generation(
            "UPDATE runtime_local_storage_claims SET fault_count = fault_count + 1, last_fault = $4, \
               last_fault_at = $5 \
             WHERE cluster_id = $1 AND claim_id = $2 AND generation = $3",
            cluster_id,
            claim_id,
            generation,
        )?
        .text(&fault.fault)
        .integer(counter_to_sql(fault.at, "fault time")?)
        .execute(&mut self.pool.connection().await?)
        .await?;
        Ok(())
    }

    async fn record_claim_resolution(
        &self,
        cluster_id: &Id,
        claim_id: &Id,
        generation: u64,
        resolution: &ClaimResolution,
        forget_answer: bool,
    ) -> Result<bool, StoreError> {
        let updated = on_generation(
            "UPDATE runtime_local_storage_claims SET resolution = $4, resolved_at = $5, \
               answer_status = CASE WHEN $6 THEN NULL ELSE answer_status END, \
               node_state = CASE WHEN $6 THEN NULL ELSE node_state END, \
               answered_session_id = CASE WHEN $6 THEN NULL ELSE answered_session_id END, \
               answered_session_generation = CASE WHEN $6 THEN NULL ELSE answered_session_generation END, \
               answered_at = CASE WHEN $6 THEN NULL ELSE answered_at END \
             WHERE cluster_id = $1 AND claim_id = $2 AND generation = $3 AND node_state = 'uncertain' \
               AND resolution IS NULL \
               AND generation = (SELECT h.generation FROM runtime_local_storage_claim_heads h \
                                 WHERE h.cluster_id = $1 AND h.claim_id = $2)",
            cluster_id,
            claim_id,
            generation,
        )?
        .text(&resolution.decision)
        .integer(counter_to_sql(resolution.at, "resolution time")?)
        .boolean(forget_answer)
        .execute(&mut self.pool.connection().await?)
        .await?;
        Ok(updated == 1)
    }

    async fn last_claim_answers(&self, cluster_id: &Id) -> Result<Vec<LastClaimAnswer>, StoreError> {
        Statement::composed(format!(
            "SELECT claim_id, generation, answer_status, node_state, answered_session_id, \
               answered_session_generation, answered_at \
             FROM runtime_local_storage_claims c WHERE cluster_id = $1 AND node_state IS NOT NULL AND generation = \
               (SELECT MAX(generation) FROM runtime_local_storage_claims d \
                WHERE d.cluster_id = c.cluster_id AND d.claim_id = c.claim_id AND d.node_state IS NOT NULL) \
             ORDER BY claim_id{}",
            self.pool.backend().bytewise()
        ))
        .text(cluster_id.as_str())
        .fetch_all_as(&mut self.pool.connection().await?, last_claim_answer_from_row)
        .await
    }
}

/// A claim generation: [`signed_record`]'s columns, `issued_at`, the answer columns
/// (`answer_status`, `node_state`, `answered_session_id`, `answered_session_generation`,
/// `answered_at`), `fault_count`, `last_fault`, `last_fault_at`, `resolution`, `resolved_at`.
pub(crate) fn stored_claim_from_row(row: &Row) -> Result<StoredClaim, StoreError> {
    let signed: Signed<RuntimeLocalStorageClaim> =
        row.signed("runtime local storage claim", |value| snapshot_runtime_local_storage_claim(value).ok())?;
    let time =
        |column: &str, what: &str| row.optional_integer(column)?.map(|value| counter_from_sql(value, what)).transpose();
    let last_fault = match (row.optional_text("last_fault")?, time("last_fault_at", "fault time")?) {
        (Some(fault), Some(at)) => Some(ClaimFault { fault, at }),
        _ => None,
    };
    let resolution = match (row.optional_text("resolution")?, time("resolved_at", "resolution time")?) {
        (Some(decision), Some(at)) => Some(ClaimResolution { decision, at }),
        _ => None,
    };
    Ok(StoredClaim {
        signed,
        issued_at: row.counter("issued_at", "claim issue time")?,
        answer: claim_answer_from_row(row)?,
        fault_count: row.counter("fault_count", "claim fault count")?,
        last_fault,
        resolution,
    })
}

/// The answer columns of a claim generation, `None` when it has no answer.
fn claim_answer_from_row(row: &Row) -> Result<Option<ClaimAnswer>, StoreError> {
    let (Some(status), Some(state)) = (row.optional_text("answer_status")?, row.optional_text("node_state")?) else {
        return Ok(None);
    };
    Ok(Some(ClaimAnswer {
        status,
        state,
        session_id: row.id("answered_session_id", "answer session id")?,
        session_generation: row.counter("answered_session_generation", "answer session generation")?,
        answered_at: row.counter("answered_at", "answer time")?,
    }))
}

/// A head claim generation: [`stored_claim_from_row`]'s columns, or, when the record does not read back,
/// what the head's own columns say of it (`claim_id`, `head_generation`, `digest`, `node_id`,
/// `service_id`, `volume_id`), so that one unreadable record affects only itself.
pub(crate) fn claim_head_from_row(
    row: &Row,
) -> Result<Result<StoredClaim, UnreadableHead<ClaimHeadExtra>>, StoreError> {
    readable_or(stored_claim_from_row(row), |problem| {
        UnreadableHead::from_head_row(
            row,
            "claim_id",
            "claim",
            ClaimHeadExtra { volume_id: row.id("volume_id", "claim volume id")? },
            problem,
        )
    })
}

/// The latest answered generation of a claim: `claim_id`, `generation` and the answer columns.
pub(crate) fn last_claim_answer_from_row(row: &Row) -> Result<LastClaimAnswer, StoreError> {
    Ok(LastClaimAnswer {
        claim_id: row.id("claim_id", "claim id")?,
        generation: row.counter("generation", "claim generation")?,
        answer: claim_answer_from_row(row)?
            .ok_or_else(|| StoreError::Corrupt("a listed claim answer is NULL".into()))?,
    })
}

/// The cluster of a claim: `cluster_id`.
pub(crate) fn claim_cluster_from_row(row: &Row) -> Result<Id, StoreError> {
    row.id("cluster_id", "claim cluster id")
}
