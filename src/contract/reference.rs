//! `IRuntimeAuthorityReference` and revised records (`01-contract-basics.md`).

use super::primitives::{Id, Sha256Digest};
use super::reader::{Invalid, Parsed, Record, digest, generation, id, nullable, require};
use serde::Serialize;
use serde_json::Value;
use std::cmp::Ordering;

/// `IRuntimeAuthorityReference`: `{ id, generation, digest }`, exact keys.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct AuthorityReference {
    /// The record id.
    pub id: Id,
    /// The record generation (≥ 1).
    pub generation: u64,
    /// The record digest.
    pub digest: Sha256Digest,
}

impl AuthorityReference {
    /// Reads a reference with exactly the keys `id`, `generation`, `digest`.
    pub fn read(value: &Value) -> Parsed<Self> {
        let record = Record::exact(value, &["id", "generation", "digest"])?;
        Ok(AuthorityReference {
            id: record.read("id", id)?,
            generation: record.read("generation", generation)?,
            digest: record.read("digest", digest)?,
        })
    }

    /// Orders references by their canonical bytes: `digest`, then `generation`, then `id`
    /// (the keys' canonical order). Equal to comparing `canonical(reference)` byte-wise, because
    /// every digest has the same length and the shared prefix `{"digest":"` ends before it.
    pub fn canonical_cmp(&self, other: &Self) -> Ordering {
        self.digest
            .as_str()
            .cmp(other.digest.as_str())
            .then_with(|| self.generation.to_string().cmp(&other.generation.to_string()))
            .then_with(|| canonical_string_cmp(self.id.as_str(), other.id.as_str()))
    }
}

/// Compares two ids as their canonical JSON strings compare byte-wise (`"a"` < `"a-"`: the
/// closing quote sorts before every id character, so this equals plain byte order of the ids).
fn canonical_string_cmp(left: &str, right: &str) -> Ordering {
    left.as_bytes().cmp(right.as_bytes())
}

/// The members every revised record has besides its own: the revision members and `digest`.
pub const REVISED_RECORD_KEYS: [&str; 4] = ["id", "generation", "previous", "digest"];

/// The revision members of a revised record: `id`, `generation`, `previous`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Revision {
    /// The record id, kept across generations.
    pub id: Id,
    /// The generation, ≥ 1.
    pub generation: u64,
    /// `null` exactly when `generation` is 1; otherwise the previous generation's reference.
    pub previous: Option<AuthorityReference>,
}

impl Revision {
    /// Reads and checks `id`, `generation`, `previous` of a revised record.
    pub fn read(record: &Record<'_>) -> Parsed<Self> {
        let id = record.read("id", id)?;
        let generation = record.read("generation", generation)?;
        let previous = record.read("previous", |value| nullable(value, AuthorityReference::read))?;
        match &previous {
            None => require(generation == 1)?,
            Some(previous) => {
                require(generation > 1 && previous.id == id && previous.generation == generation - 1)?;
            }
        }
        Ok(Revision { id, generation, previous })
    }
}

/// Fails unless `previous` links `generation` of `id` as the revision rule demands.
pub fn check_revision(id: &Id, generation: u64, previous: Option<&AuthorityReference>) -> Parsed<()> {
    match previous {
        None if generation == 1 => Ok(()),
        Some(previous) if generation > 1 && previous.id == *id && previous.generation == generation - 1 => Ok(()),
        _ => Err(Invalid),
    }
}
