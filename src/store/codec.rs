//! Records as stored text and back: the canonical text a record is stored as, the contract
//! readers a stored text goes through (a text that does not read back is
//! [`StoreError::Corrupt`]), the memo of texts that passed their full read, and counters and
//! hashes as SQL values. No SQL lives here.
//!
//! The memo is a bounded `HashMap` cleared when full rather than an LRU crate: its working set
//! (each cluster's current records) is small, and clearing keeps the bound obvious.

use super::StoreError;
use crate::contract::assignment::{RuntimeAssignment, snapshot_runtime_assignment};
use crate::contract::designation::{ClusterIngressDesignation, RuntimePhase, snapshot_cluster_ingress_designation};
use crate::contract::inventory::{
    ClusterSpec, NodeSpec, Organization, ServiceRuntimeSpec, ServiceSpecBody, parse_cluster, parse_node,
    parse_organization, parse_service_spec_body,
};
use crate::contract::json::{MAX_SAFE_INTEGER, canonical, parse_record_text};
use crate::contract::kind::compute_digest;
use crate::contract::signing::{ALGORITHM, SignatureBlock, Signed};
use crate::contract::{DigestedRecord, Id};
use serde::Serialize;
use serde_json::Value;
use std::collections::HashMap;

/// The columns a cluster row keeps beside its record.
pub(crate) struct ClusterColumns {
    pub(crate) organization_id: String,
    pub(crate) record: String,
    pub(crate) runtime_phase: &'static str,
    pub(crate) runtime_generation: i64,
    pub(crate) relay_origin: Option<String>,
    pub(crate) fleet_id: Option<String>,
    pub(crate) fleet_generation: Option<i64>,
    pub(crate) fleet_digest: Option<String>,
}

impl ClusterColumns {
    /// The columns of `cluster`.
    pub(crate) fn of(cluster: &ClusterSpec) -> Result<Self, StoreError> {
        let fleet = cluster.fleet_cutover_ingress_designation.as_ref();
        Ok(ClusterColumns {
            organization_id: cluster.organization_id.as_str().to_owned(),
            record: record_text(cluster, "cluster")?,
            runtime_phase: match cluster.runtime.phase {
                RuntimePhase::Swarm => "swarm",
                RuntimePhase::Cutover => "cutover",
                RuntimePhase::Pallet => "pallet",
            },
            runtime_generation: counter_to_sql(cluster.runtime.generation, "runtime generation")?,
            relay_origin: cluster.relay_origin.clone(),
            fleet_id: fleet.map(|reference| reference.id.as_str().to_owned()),
            fleet_generation: fleet
                .map(|reference| counter_to_sql(reference.generation, "fleet designation generation"))
                .transpose()?,
            fleet_digest: fleet.map(|reference| reference.digest.as_str().to_owned()),
        })
    }
}

/// A counter as an SQL integer. Counters are at most 2^53 − 1; a larger one is refused.
pub(crate) fn counter_to_sql(value: u64, what: &str) -> Result<i64, StoreError> {
    if value > MAX_SAFE_INTEGER {
        return Err(StoreError::Corrupt(format!("{what} {value} exceeds 2^53 - 1")));
    }
    i64::try_from(value).map_err(|_| StoreError::Corrupt(format!("{what} {value} exceeds 2^53 - 1")))
}

/// An SQL integer read back as a counter.
pub(crate) fn counter_from_sql(value: i64, what: &str) -> Result<u64, StoreError> {
    u64::try_from(value)
        .ok()
        .filter(|counter| *counter <= MAX_SAFE_INTEGER)
        .ok_or_else(|| StoreError::Corrupt(format!("stored {what} {value} is not a counter")))
}

/// The canonical JSON text a record is stored as.
pub(crate) fn record_text<T: Serialize>(record: &T, what: &str) -> Result<String, StoreError> {
    let value = serde_json::to_value(record)
        .map_err(|error| StoreError::Corrupt(format!("{what} does not serialize: {error}")))?;
    canonical(&value).map_err(|_| StoreError::Corrupt(format!("{what} has no canonical form")))
}

fn read_json(text: &str, what: &str) -> Result<Value, StoreError> {
    serde_json::from_str(text).map_err(|_| StoreError::Corrupt(format!("stored {what} is not JSON")))
}

fn not_readable(what: &str, violations: &[String]) -> StoreError {
    StoreError::Corrupt(format!("stored {what} does not read back: {}", violations.join("; ")))
}

/// The stored key of a designation's mutation: `<cluster id>/<mutation id>`. An id never holds
/// `/`, so the key names one mutation of one cluster.
pub(crate) fn mutation_key(cluster_id: &Id, mutation_id: &Id) -> String {
    format!("{cluster_id}/{mutation_id}")
}

/// Reads a stored organization.
pub(crate) fn read_organization(text: &str) -> Result<Organization, StoreError> {
    parse_organization(&read_json(text, "organization")?)
        .map_err(|violations| not_readable("organization", &violations))
}

/// Reads a stored cluster.
pub(crate) fn read_cluster(text: &str) -> Result<ClusterSpec, StoreError> {
    CHECKED_CLUSTERS.read(text, |text| {
        parse_cluster(&read_json(text, "cluster")?).map_err(|violations| not_readable("cluster", &violations))
    })
}

/// Reads a stored node.
pub(crate) fn read_node(text: &str) -> Result<NodeSpec, StoreError> {
    parse_node(&read_json(text, "node")?).map_err(|violations| not_readable("node", &violations))
}

/// Reads a stored service spec body at its revision.
pub(crate) fn read_service_spec(text: &str, revision: i64) -> Result<ServiceRuntimeSpec, StoreError> {
    let body = CHECKED_SPEC_BODIES.read(text, |text| {
        parse_service_spec_body(&read_json(text, "service spec")?)
            .map_err(|violations| not_readable("service spec", &violations))
    })?;
    Ok(ServiceRuntimeSpec { body, revision: counter_from_sql(revision, "service spec revision")? })
}

/// Stored texts that have passed their full read, with what they read as, for the records read
/// on every designation and every `getClusterIngressDesignation` (the cluster, the designated
/// service's spec, the current designation). Reading a record is a pure function of its text, so
/// a text seen before is answered from here; checking a designation's text (strict parse, exact
/// snapshot, canonical bytes, SHA-256) was a tenth of the server's CPU per read. A text that
/// differs in any byte is read in full; a failing text is never remembered. At most
/// [`CheckedTexts::CAPACITY`] texts per kind, none longer than [`CheckedTexts::LONGEST`] bytes;
/// when full, the memo starts over.
struct CheckedTexts<T> {
    entries: std::sync::Mutex<HashMap<Box<str>, T>>,
}

impl<T: Clone> CheckedTexts<T> {
    const CAPACITY: usize = 1024;
    /// Longer texts are always read in full, so the memo stays within about
    /// `CAPACITY × LONGEST × 2` bytes per kind (a spec body may be up to the 1 MiB request limit).
    const LONGEST: usize = 16 * 1024;

    fn new() -> Self {
        CheckedTexts { entries: std::sync::Mutex::new(HashMap::new()) }
    }

    fn entries(&self) -> std::sync::MutexGuard<'_, HashMap<Box<str>, T>> {
        self.entries.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// What `text` reads as: remembered, or `read` in full (and remembered when it passes).
    fn read(&self, text: &str, read: impl FnOnce(&str) -> Result<T, StoreError>) -> Result<T, StoreError> {
        if let Some(value) = self.entries().get(text).cloned() {
            return Ok(value);
        }
        let value = read(text)?;
        self.remember(text, value.clone());
        Ok(value)
    }

    fn remember(&self, text: &str, value: T) {
        if text.len() > Self::LONGEST {
            return;
        }
        let mut entries = self.entries();
        if entries.len() >= Self::CAPACITY {
            entries.clear();
        }
        entries.insert(text.into(), value);
    }
}

static CHECKED_CLUSTERS: std::sync::LazyLock<CheckedTexts<ClusterSpec>> = std::sync::LazyLock::new(CheckedTexts::new);
static CHECKED_SPEC_BODIES: std::sync::LazyLock<CheckedTexts<ServiceSpecBody>> =
    std::sync::LazyLock::new(CheckedTexts::new);
static CHECKED_DESIGNATIONS: std::sync::LazyLock<CheckedTexts<ClusterIngressDesignation>> =
    std::sync::LazyLock::new(CheckedTexts::new);

/// Reads a stored designation under the raw-text rules and checks its digest.
pub(crate) fn read_designation(text: &str) -> Result<ClusterIngressDesignation, StoreError> {
    CHECKED_DESIGNATIONS.read(text, check_designation)
}

/// Remembers the text of a designation this process just wrote ([`record_text`] of a designation
/// whose digest the designation write's check verified), so the next read of the cluster's current
/// designation needs no full check. Test builds check it in full all the same.
pub(crate) fn remember_written_designation(text: &str, designation: &ClusterIngressDesignation) {
    debug_assert_eq!(check_designation(text).ok().as_ref(), Some(designation), "a written designation reads back");
    CHECKED_DESIGNATIONS.remember(text, designation.clone());
}

/// The full check of a stored designation's text.
fn check_designation(text: &str) -> Result<ClusterIngressDesignation, StoreError> {
    let value = parse_record_text(text)
        .map_err(|_| StoreError::Corrupt("stored ingress designation breaks the raw-text rules".into()))?;
    let designation = snapshot_cluster_ingress_designation(&value)
        .map_err(|_| StoreError::Corrupt("stored ingress designation does not read back".into()))?;
    // The snapshot is exact, so the parsed value is the record's one serialization: hash it as read
    // rather than serializing the record again.
    let domain = ClusterIngressDesignation::KIND.domain().expect("a digested record kind has a domain");
    let digest = compute_digest(domain, &value)
        .map_err(|_| StoreError::Corrupt("stored ingress designation has no canonical form".into()))?;
    if digest != designation.digest {
        return Err(StoreError::Corrupt("stored ingress designation digest does not match".into()));
    }
    Ok(designation)
}

/// Reads a stored digested record (an address plan, a protected authority, a lease) under the
/// raw-text rules, through its kind's snapshot, with its digest checked.
pub(crate) fn read_digested<T: DigestedRecord>(text: &str, what: &str) -> Result<T, StoreError> {
    let value =
        parse_record_text(text).map_err(|_| StoreError::Corrupt(format!("stored {what} breaks the raw-text rules")))?;
    let record = T::snapshot(&value).map_err(|_| StoreError::Corrupt(format!("stored {what} does not read back")))?;
    if record.compute_digest() != *record.stated_digest() {
        return Err(StoreError::Corrupt(format!("stored {what} digest does not match")));
    }
    Ok(record)
}

/// A stored 32-byte hash.
pub(crate) fn hash_from_sql(bytes: Vec<u8>, what: &str) -> Result<[u8; 32], StoreError> {
    <[u8; 32]>::try_from(bytes).map_err(|_| StoreError::Corrupt(format!("stored {what} is not 32 bytes")))
}

/// A signed record of kind `T` from its stored `record` text (the payload, read through
/// `snapshot` with its digest checked) and `signature` text (the signature block).
pub(crate) fn read_signed<T: DigestedRecord>(
    record: &str,
    signature: &str,
    kind: &str,
    snapshot: impl FnOnce(&Value) -> Option<T>,
) -> Result<Signed<T>, StoreError> {
    let corrupt = |what: &str| StoreError::Corrupt(format!("stored {kind} {what}"));
    let value = parse_record_text(record).map_err(|_| corrupt("breaks the raw-text rules"))?;
    let payload = snapshot(&value).ok_or_else(|| corrupt("does not read back"))?;
    if payload.compute_digest() != *payload.stated_digest() {
        return Err(corrupt("digest does not match"));
    }
    let block: Value = serde_json::from_str(signature).map_err(|_| corrupt("signature is not JSON"))?;
    let text = |key: &str| block.get(key).and_then(Value::as_str).map(str::to_owned);
    let (Some(key_id), Some(ALGORITHM), Some(value)) = (text("keyId"), text("algorithm").as_deref(), text("value"))
    else {
        return Err(corrupt("signature does not read back"));
    };
    Ok(Signed { payload, signature: SignatureBlock { key_id, algorithm: ALGORITHM, value } })
}

/// A signed assignment generation from its stored `record` and `signature` texts.
pub(crate) fn read_signed_assignment(record: &str, signature: &str) -> Result<Signed<RuntimeAssignment>, StoreError> {
    read_signed(record, signature, "runtime assignment", |value| snapshot_runtime_assignment(value).ok())
}
