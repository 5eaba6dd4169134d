//! JSON text rules and canonical bytes (`01-contract-basics.md`, "Raw JSON text" and "Canonical JSON").
//!
//! Two readers exist on purpose:
//!
//! * [`parse_record_text`] reads the text of a *digested* record and applies the raw-text rules:
//!   a duplicate key anywhere, a number with a fraction or exponent, `-0`, or an integer outside
//!   ±(2^53−1) makes the text an invalid record.
//! * [`parse_plain_text`] reads plain data (registrations, refusals, statuses): numbers such as
//!   `1.5` survive so that the validator of the field names them; only duplicate keys are refused,
//!   because a value with two answers for one key has no single meaning, and numbers no JSON
//!   value holds (`1e400`, [`TextError::NumberNotSafeInteger`] in both readers).
//!
//! [`canonical`] writes RFC 8785 (JCS) restricted to the contract's values. It is hand-written
//! because the contract needs exactly the restricted form (integers only, UTF-16 key order) and
//! must reject what the crates on crates.io silently accept (floats); it is about sixty lines.

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};
use std::cmp::Ordering;
use std::fmt;

/// The largest integer a contract number may hold: 2^53 − 1 (`Number.MAX_SAFE_INTEGER`).
pub const MAX_SAFE_INTEGER: u64 = 9_007_199_254_740_991;

/// Why a JSON text was refused before any schema looked at it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TextError {
    /// The bytes are not JSON at all.
    #[error("not JSON: {0}")]
    NotJson(String),
    /// An object repeats a key.
    #[error("JSON text repeats a key in one object")]
    DuplicateKey,
    /// A number has a fraction, an exponent, is `-0`, or lies outside ±(2^53−1).
    #[error("JSON text holds a number that is not a safe integer literal")]
    NumberNotSafeInteger,
}

impl TextError {
    /// True when the text is JSON but breaks a raw-text rule (an invalid record, not a broken file).
    pub fn is_rule_violation(&self) -> bool {
        !matches!(self, TextError::NotJson(_))
    }
}

/// Reads the text of a digested record under the raw-text rules.
pub fn parse_record_text(text: &str) -> Result<Value, TextError> {
    parse_with(text, Mode::Record)
}

/// Reads plain data: duplicate keys are refused, every other number is kept as it is.
pub fn parse_plain_text(text: &str) -> Result<Value, TextError> {
    parse_with(text, Mode::Plain)
}

#[derive(Clone, Copy)]
enum Mode {
    Record,
    Plain,
}

fn parse_with(text: &str, mode: Mode) -> Result<Value, TextError> {
    let mut deserializer = serde_json::Deserializer::from_str(text);
    let value = StrictSeed { mode }.deserialize(&mut deserializer).map_err(classify)?;
    deserializer.end().map_err(|error| TextError::NotJson(error.to_string()))?;
    Ok(value)
}

const DUPLICATE_MARK: &str = "contract: duplicate key";
const NUMBER_MARK: &str = "contract: number is not a safe integer";
/// serde_json's own refusal of a number no `f64` holds (`1e400`), raised before any visitor sees
/// the number: such a number lies outside ±(2^53−1) too.
const OUT_OF_RANGE_MARK: &str = "number out of range";

fn classify(error: serde_json::Error) -> TextError {
    let text = error.to_string();
    if text.starts_with(DUPLICATE_MARK) {
        TextError::DuplicateKey
    } else if text.starts_with(NUMBER_MARK) || text.starts_with(OUT_OF_RANGE_MARK) {
        TextError::NumberNotSafeInteger
    } else {
        TextError::NotJson(text)
    }
}

struct StrictSeed {
    mode: Mode,
}

impl<'de> DeserializeSeed<'de> for StrictSeed {
    type Value = Value;

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(StrictVisitor { mode: self.mode })
    }
}

struct StrictVisitor {
    mode: Mode,
}

impl<'de> Visitor<'de> for StrictVisitor {
    type Value = Value;

    fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        formatter.write_str("a JSON value")
    }

    fn visit_bool<E>(self, value: bool) -> Result<Value, E> {
        Ok(Value::Bool(value))
    }

    fn visit_i64<E: de::Error>(self, value: i64) -> Result<Value, E> {
        if matches!(self.mode, Mode::Record) && value.unsigned_abs() > MAX_SAFE_INTEGER {
            return Err(E::custom(NUMBER_MARK));
        }
        Ok(Value::Number(value.into()))
    }

    fn visit_u64<E: de::Error>(self, value: u64) -> Result<Value, E> {
        if matches!(self.mode, Mode::Record) && value > MAX_SAFE_INTEGER {
            return Err(E::custom(NUMBER_MARK));
        }
        Ok(Value::Number(value.into()))
    }

    /// serde_json hands every literal with a fraction or an exponent, `-0`, and every integer too
    /// large for 64 bits to `visit_f64`, so the record mode refuses them all here.
    fn visit_f64<E: de::Error>(self, value: f64) -> Result<Value, E> {
        match self.mode {
            Mode::Record => Err(E::custom(NUMBER_MARK)),
            Mode::Plain => Ok(Number::from_f64(value).map_or(Value::Null, Value::Number)),
        }
    }

    fn visit_str<E>(self, value: &str) -> Result<Value, E> {
        Ok(Value::String(value.to_owned()))
    }

    fn visit_string<E>(self, value: String) -> Result<Value, E> {
        Ok(Value::String(value))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0));
        while let Some(item) = seq.next_element_seed(StrictSeed { mode: self.mode })? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut members = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            let value = map.next_value_seed(StrictSeed { mode: self.mode })?;
            if members.insert(key, value).is_some() {
                return Err(de::Error::custom(DUPLICATE_MARK));
            }
        }
        Ok(Value::Object(members))
    }
}

/// Why a value has no canonical form.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("value holds a number that is not a safe integer")]
pub struct NotCanonical;

/// `canonical(value)`: RFC 8785 restricted to the contract's values (integers only).
pub fn canonical(value: &Value) -> Result<String, NotCanonical> {
    let mut out = String::with_capacity(256);
    write_canonical(value, &mut out)?;
    Ok(out)
}

/// Appends the canonical form of `value` to `out`.
pub fn write_canonical(value: &Value, out: &mut String) -> Result<(), NotCanonical> {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(true) => out.push_str("true"),
        Value::Bool(false) => out.push_str("false"),
        Value::Number(number) => write_integer(number, out)?,
        Value::String(text) => write_string(text, out),
        Value::Array(items) => {
            out.push('[');
            for (index, item) in items.iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                write_canonical(item, out)?;
            }
            out.push(']');
        }
        Value::Object(members) => write_object(members, None, out)?,
    }
    Ok(())
}

/// The canonical bytes of `record` without its top-level `digest` member, as the digest
/// rule of `01-contract-basics.md` hashes them. Nested `digest` members stay.
pub fn canonical_without_digest(record: &Value) -> Result<String, NotCanonical> {
    match record {
        Value::Object(members) => {
            let mut out = String::with_capacity(256);
            write_object(members, Some("digest"), &mut out)?;
            Ok(out)
        }
        other => canonical(other),
    }
}

fn write_object(members: &Map<String, Value>, skip: Option<&str>, out: &mut String) -> Result<(), NotCanonical> {
    let mut entries: Vec<(&String, &Value)> = members.iter().filter(|(key, _)| Some(key.as_str()) != skip).collect();
    // Sorted here rather than trusting the map's iteration order, which is UTF-8 byte order by
    // default and insertion order when a dependency enables serde_json's `preserve_order`.
    entries.sort_unstable_by(|left, right| compare_keys(left.0, right.0));
    out.push('{');
    for (index, (key, item)) in entries.into_iter().enumerate() {
        if index > 0 {
            out.push(',');
        }
        write_string(key, out);
        out.push(':');
        write_canonical(item, out)?;
    }
    out.push('}');
    Ok(())
}

fn write_integer(number: &Number, out: &mut String) -> Result<(), NotCanonical> {
    use std::fmt::Write;
    if let Some(unsigned) = number.as_u64() {
        if unsigned > MAX_SAFE_INTEGER {
            return Err(NotCanonical);
        }
        let _ = write!(out, "{unsigned}");
    } else if let Some(signed) = number.as_i64() {
        if signed.unsigned_abs() > MAX_SAFE_INTEGER {
            return Err(NotCanonical);
        }
        let _ = write!(out, "{signed}");
    } else {
        return Err(NotCanonical);
    }
    Ok(())
}

fn write_string(text: &str, out: &mut String) {
    out.push('"');
    let mut start = 0;
    for (index, byte) in text.bytes().enumerate() {
        let escape: Option<&str> = match byte {
            b'"' => Some("\\\""),
            b'\\' => Some("\\\\"),
            0x08 => Some("\\b"),
            0x09 => Some("\\t"),
            0x0a => Some("\\n"),
            0x0c => Some("\\f"),
            0x0d => Some("\\r"),
            0x00..=0x1f => None,
            _ => continue,
        };
        out.push_str(&text[start..index]);
        match escape {
            Some(escape) => out.push_str(escape),
            None => {
                const HEX: &[u8; 16] = b"0123456789abcdef";
                out.push_str("\\u00");
                out.push(HEX[(byte >> 4) as usize] as char);
                out.push(HEX[(byte & 0x0f) as usize] as char);
            }
        }
        start = index + 1;
    }
    out.push_str(&text[start..]);
    out.push('"');
}

fn compare_keys(left: &str, right: &str) -> Ordering {
    if left.is_ascii() && right.is_ascii() { left.as_bytes().cmp(right.as_bytes()) } else { compare_utf16(left, right) }
}

/// Compares two strings as sequences of UTF-16 code units (the JCS key order).
pub fn compare_utf16(left: &str, right: &str) -> Ordering {
    left.encode_utf16().cmp(right.encode_utf16())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_text_refuses_each_raw_rule() {
        assert_eq!(parse_record_text(r#"{"a":1,"a":2}"#), Err(TextError::DuplicateKey));
        assert_eq!(parse_record_text(r#"{"a":{"b":1,"b":1}}"#), Err(TextError::DuplicateKey));
        assert_eq!(parse_record_text(r#"{"a":1.0}"#), Err(TextError::NumberNotSafeInteger));
        assert_eq!(parse_record_text(r#"{"a":1e3}"#), Err(TextError::NumberNotSafeInteger));
        assert_eq!(parse_record_text(r#"{"a":-0}"#), Err(TextError::NumberNotSafeInteger));
        assert_eq!(parse_record_text("[9007199254740992]"), Err(TextError::NumberNotSafeInteger));
        assert_eq!(parse_record_text("[-9007199254740992]"), Err(TextError::NumberNotSafeInteger));
        assert_eq!(parse_record_text("[123456789012345678901234567890]"), Err(TextError::NumberNotSafeInteger));
        assert_eq!(parse_record_text(r#"{"a":1e400}"#), Err(TextError::NumberNotSafeInteger));
        assert_eq!(parse_record_text(&format!("[-1{}]", "0".repeat(400))), Err(TextError::NumberNotSafeInteger));
        assert!(parse_record_text("[9007199254740991, -9007199254740991, -1, 0]").is_ok());
        assert!(matches!(parse_record_text("{"), Err(TextError::NotJson(_))));
        assert!(matches!(parse_record_text("{} x"), Err(TextError::NotJson(_))));
    }

    #[test]
    fn plain_text_keeps_fractions_but_refuses_duplicates() {
        assert_eq!(parse_plain_text(r#"{"a":1.5}"#).unwrap()["a"], serde_json::json!(1.5));
        assert_eq!(parse_plain_text(r#"{"a":1,"a":1}"#), Err(TextError::DuplicateKey));
        // A number no JSON value holds has no value to judge.
        assert_eq!(parse_plain_text(r#"{"a":1e400}"#), Err(TextError::NumberNotSafeInteger));
    }

    #[test]
    fn canonical_refuses_fractions() {
        assert_eq!(canonical(&serde_json::json!({"a": 1.5})), Err(NotCanonical));
        assert_eq!(canonical(&serde_json::json!([9007199254740992u64])), Err(NotCanonical));
        assert_eq!(canonical(&serde_json::json!([-3])).unwrap(), "[-3]");
    }
}
