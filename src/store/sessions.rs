//! The store's part for node sessions, runtime assignments and their reported states (`04-registration.md`, "Node sessions and assignments").
//!
//! Sessions: every open inserts the next generation of the node's session under a lock on the
//! node row (PostgreSQL `SELECT … FOR UPDATE`, SQLite `BEGIN IMMEDIATE`); the primary key
//! `(cluster, node, generation)` is the second guard. The current session is the highest.
//!
//! Assignments: every generation is kept with its signature. A head per assignment names its
//! latest generation and whether it is in its node's current set. The domain's reconcile decides
//! the changes from facts read under the cluster's lock ([`SessionStore::commit_assignments`]),
//! and each change is a guarded statement (insert of a new primary key, head update where the
//! generation is the expected one), so two controller processes never write two different
//! generations with one number: the second waits for the lock and re-reads the first's heads.

use super::{StoreError, StoredCluster, StoredNode};
use crate::contract::assignment::RuntimeAssignment;
use crate::contract::designation::ClusterIngressDesignation;
use crate::contract::inventory::ServiceRuntimeSpec;
use crate::contract::session::{ControllerReference, RuntimeSessionReference};
use crate::contract::signing::Signed;
use crate::contract::{Id, NodeId};
use async_trait::async_trait;

/// A stored assignment generation: the signed record and whether it is its node's current one
/// (the head's generation and active).
#[derive(Debug, Clone, PartialEq)]
pub struct StoredAssignment {
    /// The signed record.
    pub signed: Signed<RuntimeAssignment>,
    /// True when this generation is the assignment's head and in its node's current set.
    pub active: bool,
}

/// What a reconcile reads about one cluster.
#[derive(Debug, Clone)]
pub struct AssignmentFacts {
    /// The cluster, if it exists.
    pub cluster: Option<StoredCluster>,
    /// Its nodes, sorted by id.
    pub nodes: Vec<StoredNode>,
    /// The current spec of every service that is not deleted, sorted by service id.
    pub services: Vec<ServiceRuntimeSpec>,
    /// The cluster's current Pallet ingress designation.
    pub designation: Option<ClusterIngressDesignation>,
    /// The head generation of every assignment of the cluster (active or not), sorted by id.
    pub heads: Vec<StoredAssignment>,
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

/// The reconcile's decision from the facts, inside the store's transaction.
pub type AssignmentJudge<'a> = dyn Fn(&AssignmentFacts) -> Vec<AssignmentChange> + Send + Sync + 'a;

/// A state a node reports for an assignment generation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AssignmentState {
    /// `starting`.
    Starting,
    /// `ready`.
    Ready,
    /// `failed`.
    Failed,
    /// `stopped`.
    Stopped,
}

impl AssignmentState {
    /// Parses the wire spelling.
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "starting" => Some(AssignmentState::Starting),
            "ready" => Some(AssignmentState::Ready),
            "failed" => Some(AssignmentState::Failed),
            "stopped" => Some(AssignmentState::Stopped),
            _ => None,
        }
    }

    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            AssignmentState::Starting => "starting",
            AssignmentState::Ready => "ready",
            AssignmentState::Failed => "failed",
            AssignmentState::Stopped => "stopped",
        }
    }
}

/// The latest state reported for one assignment generation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReportedState {
    /// The state.
    pub state: AssignmentState,
    /// The id of the session that reported it.
    pub session_id: Id,
    /// That session's generation.
    pub session_generation: u64,
    /// When, ms since the epoch.
    pub reported_at: u64,
}

/// Persistence of node sessions, runtime assignments and their reported states (`04-registration.md`, "Node sessions and assignments"). Implemented by both backends (`postgres/sessions.rs`, `sqlite/sessions.rs`).
#[async_trait]
pub trait SessionStore: Send + Sync {
    /// Opens the node's next session: generation = the highest so far + 1 (or 1), with the
    /// node's runtime namespace, atomically under the node's lock. `None` when the node does not
    /// exist.
    async fn open_session(
        &self,
        cluster_id: &Id,
        node_id: &NodeId,
        session_id: &Id,
        controller: &ControllerReference,
        opened_at: u64,
    ) -> Result<Option<RuntimeSessionReference>, StoreError>;

    /// The node's current session (the highest generation), if it ever opened one.
    async fn current_session(
        &self,
        cluster_id: &Id,
        node_id: &NodeId,
    ) -> Result<Option<RuntimeSessionReference>, StoreError>;

    /// The facts a reconcile of the cluster decides from, read without a lock.
    async fn assignment_facts(&self, cluster_id: &Id) -> Result<AssignmentFacts, StoreError>;

    /// In one transaction under the cluster's lock: reads the facts, lets `judge` decide, and
    /// writes its changes with guarded statements. Answers the changes written (none for an
    /// unknown cluster). A change that does not fit the heads it was decided from writes nothing
    /// and answers [`StoreError::Corrupt`] (a bug in the judge).
    async fn commit_assignments(
        &self,
        cluster_id: &Id,
        judge: &AssignmentJudge<'_>,
    ) -> Result<Vec<AssignmentChange>, StoreError>;

    /// The node's current assignment set (active heads on the node), sorted by id.
    async fn node_assignments(&self, cluster_id: &Id, node_id: &NodeId) -> Result<Vec<StoredAssignment>, StoreError>;

    /// One stored assignment generation.
    async fn get_assignment(
        &self,
        cluster_id: &Id,
        assignment_id: &Id,
        generation: u64,
    ) -> Result<Option<StoredAssignment>, StoreError>;

    /// Records `state` as the latest reported state of the assignment generation, reported
    /// under `session`.
    async fn record_assignment_state(
        &self,
        cluster_id: &Id,
        assignment_id: &Id,
        generation: u64,
        state: AssignmentState,
        session: &RuntimeSessionReference,
        reported_at: u64,
    ) -> Result<(), StoreError>;

    /// The latest state reported for the assignment generation.
    async fn assignment_state(
        &self,
        cluster_id: &Id,
        assignment_id: &Id,
        generation: u64,
    ) -> Result<Option<ReportedState>, StoreError>;
}

/// The signature block of a signed assignment as stored text.
pub(crate) fn signature_text(signed: &Signed<RuntimeAssignment>) -> Result<String, StoreError> {
    super::codec::record_text(&signed.signature, "assignment signature")
}

/// Reads a stored assignment generation back: the payload through the contract's snapshot with
/// its digest checked, and the signature block.
pub(crate) fn read_signed_assignment(record: &str, signature: &str) -> Result<Signed<RuntimeAssignment>, StoreError> {
    use crate::contract::DigestedRecord as _;
    use crate::contract::assignment::snapshot_runtime_assignment;
    use crate::contract::signing::{ALGORITHM, SignatureBlock};
    let corrupt = |what: &str| StoreError::Corrupt(format!("stored runtime assignment {what}"));
    let value = crate::contract::json::parse_record_text(record).map_err(|_| corrupt("breaks the raw-text rules"))?;
    let payload = snapshot_runtime_assignment(&value).map_err(|_| corrupt("does not read back"))?;
    if payload.compute_digest() != payload.digest {
        return Err(corrupt("digest does not match"));
    }
    let block: serde_json::Value = serde_json::from_str(signature).map_err(|_| corrupt("signature is not JSON"))?;
    let text = |key: &str| block.get(key).and_then(serde_json::Value::as_str).map(str::to_owned);
    let (Some(key_id), Some(ALGORITHM), Some(value)) = (text("keyId"), text("algorithm").as_deref(), text("value"))
    else {
        return Err(corrupt("signature does not read back"));
    };
    Ok(Signed { payload, signature: SignatureBlock { key_id, algorithm: ALGORITHM, value } })
}

/// Checks that the judge's changes fit the heads they were decided from: an issued generation
/// links its head (or is generation 1 of a new id) in this cluster with a true digest, a
/// `SetActive` names a head generation, and no assignment changes twice in one commit.
pub(crate) fn check_assignment_changes(
    cluster_id: &Id,
    heads: &[StoredAssignment],
    changes: &[AssignmentChange],
) -> Result<(), StoreError> {
    use crate::contract::DigestedRecord as _;
    let refuse = |rule: &str| Err(StoreError::Corrupt(format!("assignment judge broke a store rule: {rule}")));
    let head = |id: &Id| heads.iter().find(|head| head.signed.payload.id == *id).map(|head| &head.signed.payload);
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
                            || payload.previous.as_ref() != Some(&current.reference()) =>
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
