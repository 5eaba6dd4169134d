//! The heads of a signed generation chain per id — runtime assignments and runtime local storage
//! claims are both read this way: the heads whose record reads back through its contract reader,
//! and those whose record does not, each described by its head row's own columns so it affects
//! only itself. Both lists are sorted by id, so a head is found by binary search.

use super::StoreError;
use super::sql::Row;
use crate::contract::reader::compare_bytes;
use crate::contract::{AuthorityReference, Id, NodeId};

/// A head of a chain: its id and the `{ id, generation, digest }` of its generation.
pub trait Head {
    /// The chain's id.
    fn id(&self) -> &Id;
    /// The head generation's reference.
    fn reference(&self) -> AuthorityReference;
}

/// [`Head`] for `$readable`, a stored generation of a signed chain whose `signed.payload` reads
/// back.
macro_rules! head_of_signed_chain {
    ($readable:ty) => {
        impl $crate::store::heads::Head for $readable {
            fn id(&self) -> &$crate::contract::Id {
                &self.signed.payload.id
            }

            fn reference(&self) -> $crate::contract::AuthorityReference {
                self.signed.payload.reference()
            }
        }
    };
}
pub(crate) use head_of_signed_chain;

/// A head generation whose stored record does not read back, as the head row's own columns
/// describe it: enough to take it out of its node's set or to link a new generation to it.
/// `Extra` is what the chain's head row says besides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnreadableHead<Extra> {
    /// `{ id, generation, digest }` of the head generation.
    pub reference: AuthorityReference,
    /// The node it was issued to.
    pub node_id: NodeId,
    /// Its service.
    pub service_id: Id,
    /// What else the chain's head row says of it.
    pub extra: Extra,
    /// What is wrong with the record (for the log).
    pub problem: String,
}

impl<Extra> Head for UnreadableHead<Extra> {
    fn id(&self) -> &Id {
        &self.reference.id
    }

    fn reference(&self) -> AuthorityReference {
        self.reference.clone()
    }
}

/// The heads of a kind, sorted by id: those whose records read back, and those whose records do
/// not.
#[derive(Debug, Clone, PartialEq)]
pub struct Heads<Readable, Unreadable> {
    /// The heads whose records read back.
    pub readable: Vec<Readable>,
    /// The heads whose records do not.
    pub unreadable: Vec<Unreadable>,
}

impl<Readable, Unreadable> Default for Heads<Readable, Unreadable> {
    fn default() -> Self {
        Heads { readable: Vec::new(), unreadable: Vec::new() }
    }
}

impl<Readable: Head, Unreadable: Head> Heads<Readable, Unreadable> {
    /// The heads of `rows`, each read by `read` (an unreadable record is `Err` of the head row's
    /// description; a row that does not read at all is the store's error), sorted by id.
    pub(crate) fn from_rows(
        rows: &[Row],
        read: impl Fn(&Row) -> Result<Result<Readable, Unreadable>, StoreError>,
    ) -> Result<Self, StoreError> {
        let mut heads = Heads::default();
        for row in rows {
            match read(row)? {
                Ok(readable) => heads.readable.push(readable),
                Err(unreadable) => heads.unreadable.push(unreadable),
            }
        }
        heads.readable.sort_by(|left, right| compare_bytes(left.id().as_str(), right.id().as_str()));
        heads.unreadable.sort_by(|left, right| compare_bytes(left.id().as_str(), right.id().as_str()));
        Ok(heads)
    }

    /// The readable head of `id`.
    pub fn get(&self, id: &Id) -> Option<&Readable> {
        let index = self.readable.binary_search_by(|head| compare_bytes(head.id().as_str(), id.as_str())).ok()?;
        Some(&self.readable[index])
    }

    /// The unreadable head of `id`.
    pub fn get_unreadable(&self, id: &Id) -> Option<&Unreadable> {
        let index = self.unreadable.binary_search_by(|head| compare_bytes(head.id().as_str(), id.as_str())).ok()?;
        Some(&self.unreadable[index])
    }

    /// The `{ id, generation, digest }` of the head of `id`, readable or not.
    pub fn reference(&self, id: &Id) -> Option<AuthorityReference> {
        self.get(id).map(Head::reference).or_else(|| self.get_unreadable(id).map(Head::reference))
    }
}

/// A head row read as `read` reads its record, or — when that record does not read back (a
/// corrupt record, whose problem `unreadable` is given) — as the head row's own columns describe
/// it; any other error is the store's.
pub(crate) fn readable_or<Readable, Unreadable>(
    read: Result<Readable, StoreError>,
    unreadable: impl FnOnce(String) -> Result<Unreadable, StoreError>,
) -> Result<Result<Readable, Unreadable>, StoreError> {
    match read {
        Ok(readable) => Ok(Ok(readable)),
        Err(StoreError::Corrupt(problem)) => unreadable(problem).map(Err),
        Err(error) => Err(error),
    }
}

impl<Extra> UnreadableHead<Extra> {
    /// What a head row's own columns say of a generation whose record does not read back:
    /// `<key>`, `head_generation`, `digest`, `node_id` and `service_id`, with the chain's `extra`;
    /// `what` names the record in a corruption error.
    pub(crate) fn from_head_row(
        row: &Row,
        key: &str,
        what: &str,
        extra: Extra,
        problem: String,
    ) -> Result<Self, StoreError> {
        Ok(UnreadableHead {
            reference: AuthorityReference {
                id: row.id(key, &format!("{what} id"))?,
                generation: row.counter("head_generation", &format!("{what} generation"))?,
                digest: row.digest("digest", &format!("{what} digest"))?,
            },
            node_id: row.node_id("node_id", &format!("{what} node id"))?,
            service_id: row.id("service_id", &format!("{what} service id"))?,
            extra,
            problem,
        })
    }
}
