//! Direct canonical writers for the network records (`01-contract-basics.md`, "Canonical JSON").
//!
//! A projection of 4 096 endpoints is about 4 MB of canonical bytes, and it is canonicalized on
//! every issue and every validation. Going through `serde_json::Value` would allocate a tree of
//! the whole record first; these writers instead emit each typed record's members directly in
//! canonical key order. Every string they write is a contract primitive (`Id`, `NodeId`,
//! `Sha256Digest`, an address, a literal) whose alphabet needs no JSON escape, and every number is
//! a safe integer, so the bytes equal `canonical(to_value(record))` — the tests compare the two.

use crate::contract::primitives::{Id, Ipv4, Ipv4Prefix, Sha256Digest};
use crate::contract::reference::AuthorityReference;
use std::cmp::Ordering;

/// Appends a JSON string whose characters need no escape (every contract primitive's alphabet).
pub(super) fn push_string(out: &mut Vec<u8>, text: &str) {
    debug_assert!(text.bytes().all(|byte| byte >= 0x20 && byte != b'"' && byte != b'\\'));
    out.push(b'"');
    out.extend_from_slice(text.as_bytes());
    out.push(b'"');
}

/// Writes the decimal digits of `value` into the end of `buffer` and answers them.
fn decimal(mut value: u64, buffer: &mut [u8; 20]) -> &[u8] {
    let mut start = buffer.len();
    loop {
        start -= 1;
        buffer[start] = b'0' + (value % 10) as u8;
        value /= 10;
        if value == 0 {
            break;
        }
    }
    &buffer[start..]
}

/// Appends the shortest decimal form of `value`.
pub(super) fn push_u64(out: &mut Vec<u8>, value: u64) {
    let mut buffer = [0u8; 20];
    out.extend_from_slice(decimal(value, &mut buffer));
}

/// Compares two numbers as their canonical decimal texts compare byte-wise (`10000` < `9000`).
/// Inside a canonical object a number is followed by `,` or `}`, both below every digit, so a
/// shorter text that is a prefix of the longer one orders first, as slices do.
pub(super) fn decimal_cmp(left: u64, right: u64) -> Ordering {
    let (mut left_buffer, mut right_buffer) = ([0u8; 20], [0u8; 20]);
    decimal(left, &mut left_buffer).cmp(decimal(right, &mut right_buffer))
}

fn push_octets(out: &mut Vec<u8>, address: u32) {
    for (index, octet) in address.to_be_bytes().into_iter().enumerate() {
        if index > 0 {
            out.push(b'.');
        }
        push_u64(out, u64::from(octet));
    }
}

/// Appends an `Ipv4` as a JSON string.
pub(super) fn push_ipv4(out: &mut Vec<u8>, address: Ipv4) {
    out.push(b'"');
    push_octets(out, address.to_u32());
    out.push(b'"');
}

/// Appends an `Ipv4Prefix` as a JSON string.
pub(super) fn push_prefix(out: &mut Vec<u8>, prefix: Ipv4Prefix) {
    out.push(b'"');
    push_octets(out, prefix.network().to_u32());
    out.push(b'/');
    push_u64(out, u64::from(prefix.length()));
    out.push(b'"');
}

/// Appends an `IRuntimeAuthorityReference`: `{"digest":…,"generation":…,"id":…}`.
pub(super) fn push_reference(out: &mut Vec<u8>, reference: &AuthorityReference) {
    push_reference_members(out, &reference.id, reference.generation, &reference.digest);
    out.push(b'}');
}

/// Appends an object's opening brace and the members of a reference to it, `{"digest":…,
/// "generation":…,"id":…`, for a record that starts with those keys (a reference, or one that
/// carries more members after them).
pub(super) fn push_reference_members(out: &mut Vec<u8>, id: &Id, generation: u64, digest: &Sha256Digest) {
    out.extend_from_slice(b"{\"digest\":");
    push_string(out, digest.as_str());
    out.extend_from_slice(b",\"generation\":");
    push_u64(out, generation);
    out.extend_from_slice(b",\"id\":");
    push_string(out, id.as_str());
}

/// The first eight hex digits of a `Sha256Digest` text (after `sha256:`) as one big-endian
/// number: comparing two heads compares those digits byte-wise, without a `memcmp` call.
pub(super) fn digest_head(digest: &str) -> u64 {
    digest.as_bytes().get(7..15).map_or(0, |head| u64::from_be_bytes(head.try_into().expect("eight bytes")))
}

/// Compares two digest texts byte-wise, deciding on the head when it differs (almost always).
pub(super) fn digest_cmp(left: &str, right: &str) -> Ordering {
    digest_head(left).cmp(&digest_head(right)).then_with(|| left.cmp(right))
}

/// Orders two references by their canonical bytes, `{"digest":…,"generation":…,"id":…}`:
/// digest, then the generation's decimal text, then the id (an id's closing quote sorts before
/// every id character, so plain byte order of the ids). Like `AuthorityReference::canonical_cmp`,
/// without formatting the generations.
pub(super) fn reference_cmp(left: &AuthorityReference, right: &AuthorityReference) -> Ordering {
    digest_cmp(left.digest.as_str(), right.digest.as_str())
        .then_with(|| decimal_cmp(left.generation, right.generation))
        .then_with(|| left.id.as_str().as_bytes().cmp(right.id.as_str().as_bytes()))
}

/// Appends a reference or `null`.
pub(super) fn push_nullable_reference(out: &mut Vec<u8>, reference: Option<&AuthorityReference>) {
    match reference {
        Some(reference) => push_reference(out, reference),
        None => out.extend_from_slice(b"null"),
    }
}

/// Appends `[item,item,…]`, each item written by `write`.
pub(super) fn push_list<T>(out: &mut Vec<u8>, items: &[T], mut write: impl FnMut(&mut Vec<u8>, &T)) {
    out.push(b'[');
    for (index, item) in items.iter().enumerate() {
        if index > 0 {
            out.push(b',');
        }
        write(out, item);
    }
    out.push(b']');
}

/// True when the 32 raw bytes of a SHA-256 output spell the stated digest text, without
/// building the text.
pub(super) fn digest_matches(output: &[u8; 32], stated: &str) -> bool {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let Some(hex) = stated.as_bytes().strip_prefix(b"sha256:") else { return false };
    hex.len() == 64
        && output
            .iter()
            .zip(hex.chunks_exact(2))
            .all(|(byte, pair)| pair[0] == HEX[(byte >> 4) as usize] && pair[1] == HEX[(byte & 0x0f) as usize])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimal_order_is_the_order_of_the_texts() {
        let values = [0u64, 1, 9, 10, 12, 99, 100, 443, 8080, 9000, 10000, 65535, 9_007_199_254_740_991];
        for left in values {
            for right in values {
                assert_eq!(decimal_cmp(left, right), left.to_string().cmp(&right.to_string()), "{left} {right}");
            }
            let mut out = Vec::new();
            push_u64(&mut out, left);
            assert_eq!(out, left.to_string().into_bytes());
        }
    }

    #[test]
    fn reference_order_is_the_order_of_the_canonical_bytes() {
        use crate::contract::json::canonical;
        use crate::contract::primitives::{Id, Sha256Digest};
        let mut references = Vec::new();
        for id in ["a", "a-", "a.b", "ab", "b"] {
            for generation in [1, 2, 9, 10, 12, 100] {
                for byte in [0u8, 1, 0xab] {
                    let digest = Sha256Digest::from_bytes(&[byte; 32]);
                    references.push(AuthorityReference { id: Id::parse(id).unwrap(), generation, digest });
                }
            }
        }
        for left in &references {
            let left_text = canonical(&serde_json::to_value(left).unwrap()).unwrap();
            let mut written = Vec::new();
            push_reference(&mut written, left);
            assert_eq!(written, left_text.as_bytes());
            for right in &references {
                let right_text = canonical(&serde_json::to_value(right).unwrap()).unwrap();
                assert_eq!(reference_cmp(left, right), left_text.cmp(&right_text));
                assert_eq!(reference_cmp(left, right), left.canonical_cmp(right));
            }
        }
    }

    #[test]
    fn addresses_and_prefixes_are_written_as_displayed() {
        for text in ["0.0.0.0", "10.64.0.13", "255.255.255.255", "192.0.2.17"] {
            let mut out = Vec::new();
            push_ipv4(&mut out, Ipv4::parse(text).unwrap());
            assert_eq!(out, format!("\"{text}\"").into_bytes());
        }
        for text in ["0.0.0.0/0", "10.64.0.12/30", "192.0.2.0/28"] {
            let mut out = Vec::new();
            push_prefix(&mut out, Ipv4Prefix::parse(text).unwrap());
            assert_eq!(out, format!("\"{text}\"").into_bytes());
        }
    }
}
