//! Exact-schema reading helpers shared by every snapshot function.
//!
//! Each helper answers `Parsed<T>`: the parsed value or [`Invalid`], a marker without detail.
//! A snapshot function turns `Invalid` into its record kind's one fixed message, so no snapshot
//! ever echoes its input (`01-contract-basics.md`, "Exact schema").

use super::primitives::{Id, Ipv4, Ipv4Prefix, MAX_PORT, MAX_SAFE_INTEGER, NodeId, Protocol, Sha256Digest};
use serde_json::{Map, Value};
use std::cmp::Ordering;

/// A value broke the schema; the caller decides the message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Invalid;

/// The result of reading one part of a record.
pub type Parsed<T> = Result<T, Invalid>;

/// Fails with [`Invalid`] unless `condition` holds.
pub fn require(condition: bool) -> Parsed<()> {
    if condition { Ok(()) } else { Err(Invalid) }
}

/// An object with exactly the `required` keys plus any of the `optional` keys, and no other.
pub struct Record<'a> {
    members: &'a Map<String, Value>,
}

impl<'a> Record<'a> {
    /// Reads `value` as an object with exactly these keys.
    pub fn exact(value: &'a Value, required: &[&str]) -> Parsed<Self> {
        Self::with_optional(value, required, &[])
    }

    /// Reads `value` as an object with every `required` key, any of the `optional` keys, and
    /// no other key.
    pub fn with_optional(value: &'a Value, required: &[&str], optional: &[&str]) -> Parsed<Self> {
        Self::with_parts(value, &[required], optional)
    }

    /// Reads `value` as an object with every key of the `required` parts (a record's members
    /// shared with other records, then its own), any of the `optional` keys, and no other key.
    pub fn with_parts(value: &'a Value, required: &[&[&str]], optional: &[&str]) -> Parsed<Self> {
        let members = value.as_object().ok_or(Invalid)?;
        require(required.iter().flat_map(|part| part.iter()).all(|key| members.contains_key(*key)))?;
        let required_count: usize = required.iter().map(|part| part.len()).sum();
        let optional_present = optional.iter().filter(|key| members.contains_key(**key)).count();
        require(members.len() == required_count + optional_present)?;
        Ok(Record { members })
    }

    /// The member named `key` (present by construction for required keys).
    pub fn get(&self, key: &str) -> Parsed<&'a Value> {
        self.members.get(key).ok_or(Invalid)
    }

    /// The optional member named `key`, `None` when absent. A present `null` is returned as is;
    /// the member's own reader refuses it unless its type allows `null`.
    pub fn optional(&self, key: &str) -> Option<&'a Value> {
        self.members.get(key)
    }

    /// Reads the member `key` with `read`.
    pub fn read<T>(&self, key: &str, read: impl FnOnce(&'a Value) -> Parsed<T>) -> Parsed<T> {
        read(self.get(key)?)
    }

    /// Reads the optional member `key` with `read` when it is present.
    pub fn read_optional<T>(&self, key: &str, read: impl FnOnce(&'a Value) -> Parsed<T>) -> Parsed<Option<T>> {
        self.optional(key).map(read).transpose()
    }
}

/// A string.
pub fn string(value: &Value) -> Parsed<&str> {
    value.as_str().ok_or(Invalid)
}

/// A boolean.
pub fn boolean(value: &Value) -> Parsed<bool> {
    value.as_bool().ok_or(Invalid)
}

/// An exact string literal.
pub fn literal(value: &Value, expected: &str) -> Parsed<()> {
    require(value.as_str() == Some(expected))
}

/// A string parsed by `parse`.
pub fn parsed<T>(value: &Value, parse: impl FnOnce(&str) -> Option<T>) -> Parsed<T> {
    parse(string(value)?).ok_or(Invalid)
}

/// Defines a reader per contract type written as a string: the string, parsed by the type's own
/// `parse`.
macro_rules! string_readers {
    ($($(#[$doc:meta])* $reader:ident -> $type:ident;)+) => {
        $(
            $(#[$doc])*
            pub fn $reader(value: &Value) -> Parsed<$type> {
                parsed(value, $type::parse)
            }
        )+
    };
}

string_readers! {
    /// An `Id`.
    id -> Id;
    /// A `NodeId`.
    node_id -> NodeId;
    /// A `TSha256Digest`.
    digest -> Sha256Digest;
    /// A `Protocol`.
    protocol -> Protocol;
    /// An `Ipv4`.
    ipv4 -> Ipv4;
    /// An `Ipv4Prefix`.
    ipv4_prefix -> Ipv4Prefix;
}

/// A `Counter`: an integer 0 ≤ n ≤ 2^53 − 1. Floats (even `1.0`) are refused.
pub fn counter(value: &Value) -> Parsed<u64> {
    match value {
        Value::Number(number) => number.as_u64().filter(|n| *n <= MAX_SAFE_INTEGER).ok_or(Invalid),
        _ => Err(Invalid),
    }
}

/// A `Generation`: a `Counter` ≥ 1.
pub fn generation(value: &Value) -> Parsed<u64> {
    counter(value).and_then(|n| if n >= 1 { Ok(n) } else { Err(Invalid) })
}

/// A `Counter` within `minimum..=maximum`.
pub fn counter_in(value: &Value, minimum: u64, maximum: u64) -> Parsed<u64> {
    counter(value).and_then(|n| if (minimum..=maximum).contains(&n) { Ok(n) } else { Err(Invalid) })
}

/// A `Port`: 1 ≤ n ≤ 65535.
pub fn port(value: &Value) -> Parsed<u16> {
    counter_in(value, 1, MAX_PORT).map(|n| n as u16)
}

/// `null` or a value read by `read`.
pub fn nullable<'a, T>(value: &'a Value, read: impl FnOnce(&'a Value) -> Parsed<T>) -> Parsed<Option<T>> {
    if value.is_null() { Ok(None) } else { read(value).map(Some) }
}

/// A list of at most `maximum` items, each read by `read`.
pub fn list<'a, T>(value: &'a Value, maximum: usize, mut read: impl FnMut(&'a Value) -> Parsed<T>) -> Parsed<Vec<T>> {
    let items = value.as_array().ok_or(Invalid)?;
    require(items.len() <= maximum)?;
    items.iter().map(&mut read).collect()
}

/// Fails unless the items are strictly ascending by `compare` (which also makes them unique).
/// A snapshot never re-sorts: one record has exactly one valid serialization.
pub fn strictly_ascending<T>(items: &[T], mut compare: impl FnMut(&T, &T) -> Ordering) -> Parsed<()> {
    require(items.windows(2).all(|pair| compare(&pair[0], &pair[1]) == Ordering::Less))
}

/// Compares two strings byte-wise over their UTF-8 bytes (the contract's string order).
pub fn compare_bytes(left: &str, right: &str) -> Ordering {
    left.as_bytes().cmp(right.as_bytes())
}
