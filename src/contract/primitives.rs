//! The primitives of `01-contract-basics.md`: `Id`, `NodeId`, `Sha256Digest`, `Protocol`,
//! `Ipv4`, `Ipv4Prefix`, and the counter bounds. Each newtype is built only by its parser, so a
//! value of the type is valid by construction ("parse, don't validate").

use serde::{Serialize, Serializer};
use std::cmp::Ordering;
use std::fmt;

pub use super::json::MAX_SAFE_INTEGER;

/// The largest `Port`.
pub const MAX_PORT: u64 = 65_535;

macro_rules! string_newtype {
    ($(#[$meta:meta])* $name:ident, $check:expr) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(String);

        impl $name {
            /// Parses the text, or `None` when it breaks the primitive's rule.
            pub fn parse(text: &str) -> Option<Self> {
                let check: fn(&str) -> bool = $check;
                check(text).then(|| Self(text.to_owned()))
            }

            /// The text of the value.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
                formatter.write_str(&self.0)
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(&self.0)
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }
    };
}

string_newtype!(
    /// `Id`: 1 to 128 bytes, `^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`.
    Id,
    is_id
);
string_newtype!(
    /// `NodeId` (cluster node id): a DNS label, `^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`.
    NodeId,
    is_node_id
);
string_newtype!(
    /// `TSha256Digest`: `^sha256:[0-9a-f]{64}$`, lowercase hex only.
    Sha256Digest,
    is_sha256_digest
);

impl Sha256Digest {
    /// Builds the digest text from the 32 raw bytes of a SHA-256 output.
    pub fn from_bytes(bytes: &[u8; 32]) -> Self {
        let mut text = String::with_capacity(71);
        text.push_str("sha256:");
        text.push_str(&hex::encode(bytes));
        Self(text)
    }
}

/// True when `text` is an `Id`.
pub fn is_id(text: &str) -> bool {
    let bytes = text.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 128
        && bytes[0].is_ascii_alphanumeric()
        && bytes[1..].iter().all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'.' | b'_' | b'-'))
}

/// True when `text` is a cluster `NodeId` (a DNS label).
pub fn is_node_id(text: &str) -> bool {
    let bytes = text.as_bytes();
    let allowed_end = |byte: &u8| byte.is_ascii_lowercase() || byte.is_ascii_digit();
    !bytes.is_empty()
        && bytes.len() <= 63
        && allowed_end(&bytes[0])
        && allowed_end(&bytes[bytes.len() - 1])
        && bytes.iter().all(|byte| allowed_end(byte) || *byte == b'-')
}

/// True when `text` is a `TSha256Digest`.
pub fn is_sha256_digest(text: &str) -> bool {
    text.len() == 71
        && text.starts_with("sha256:")
        && text.as_bytes()[7..].iter().all(|byte| byte.is_ascii_digit() || (b'a'..=b'f').contains(byte))
}

/// True when `value` is a `Counter` (0 ≤ n ≤ 2^53 − 1).
pub fn is_counter(value: u64) -> bool {
    value <= MAX_SAFE_INTEGER
}

/// `Protocol`: `"tcp"` or `"udp"`. `tcp` orders before `udp`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    /// `"tcp"`.
    Tcp,
    /// `"udp"`.
    Udp,
}

impl Protocol {
    /// Parses `"tcp"` or `"udp"`.
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "tcp" => Some(Protocol::Tcp),
            "udp" => Some(Protocol::Udp),
            _ => None,
        }
    }

    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Tcp => "tcp",
            Protocol::Udp => "udp",
        }
    }
}

/// `Ipv4`: a dotted quad of four decimal octets without leading zeros. Orders numerically.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Ipv4(u32);

impl Ipv4 {
    /// Parses `10.0.0.1`; refuses `010.0.0.1`, `1.2.3`, `256.0.0.1`.
    pub fn parse(text: &str) -> Option<Self> {
        let mut address: u32 = 0;
        let mut octets = 0;
        for part in text.split('.') {
            octets += 1;
            if octets > 4 || part.is_empty() || part.len() > 3 || !part.bytes().all(|byte| byte.is_ascii_digit()) {
                return None;
            }
            if part.len() > 1 && part.starts_with('0') {
                return None;
            }
            let octet: u32 = part.parse().ok()?;
            if octet > 255 {
                return None;
            }
            address = (address << 8) | octet;
        }
        (octets == 4).then_some(Ipv4(address))
    }

    /// Builds the address from its 32-bit value.
    pub fn from_u32(value: u32) -> Self {
        Ipv4(value)
    }

    /// The address as an unsigned 32-bit value.
    pub fn to_u32(self) -> u32 {
        self.0
    }
}

impl fmt::Display for Ipv4 {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        let [a, b, c, d] = self.0.to_be_bytes();
        write!(formatter, "{a}.{b}.{c}.{d}")
    }
}

impl Serialize for Ipv4 {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// `Ipv4Prefix`: `Ipv4/len` with no host bits set. Orders by network address, then length.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ipv4Prefix {
    network: Ipv4,
    length: u8,
}

impl Ipv4Prefix {
    /// Parses `10.0.0.0/8`; refuses `10.0.0.1/8` (host bits), `/33`, `/08`.
    pub fn parse(text: &str) -> Option<Self> {
        let (address, length) = text.split_once('/')?;
        let network = Ipv4::parse(address)?;
        if length.is_empty() || length.len() > 2 || !length.bytes().all(|byte| byte.is_ascii_digit()) {
            return None;
        }
        if length.len() > 1 && length.starts_with('0') {
            return None;
        }
        let length: u8 = length.parse().ok()?;
        let prefix = Ipv4Prefix::new(network, length)?;
        (prefix.network == network).then_some(prefix)
    }

    /// The prefix of `length` bits containing `address`, or `None` for a length above 32 or
    /// an address with host bits set.
    pub fn new(network: Ipv4, length: u8) -> Option<Self> {
        if length > 32 {
            return None;
        }
        let prefix = Ipv4Prefix { network, length };
        (network.0 & !prefix.mask() == 0).then_some(prefix)
    }

    /// The network address.
    pub fn network(self) -> Ipv4 {
        self.network
    }

    /// The prefix length.
    pub fn length(self) -> u8 {
        self.length
    }

    fn mask(self) -> u32 {
        if self.length == 0 { 0 } else { u32::MAX << (32 - u32::from(self.length)) }
    }

    /// The last address of the prefix.
    pub fn last(self) -> Ipv4 {
        Ipv4(self.network.0 | !self.mask())
    }

    /// True when `address` lies inside the prefix.
    pub fn contains(self, address: Ipv4) -> bool {
        address.0 & self.mask() == self.network.0
    }

    /// True when `inner` lies wholly inside `self`.
    pub fn contains_prefix(self, inner: Ipv4Prefix) -> bool {
        inner.length >= self.length && self.contains(inner.network)
    }

    /// True when the two prefixes share an address.
    pub fn overlaps(self, other: Ipv4Prefix) -> bool {
        self.contains_prefix(other) || other.contains_prefix(self)
    }
}

impl Ord for Ipv4Prefix {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.network, self.length).cmp(&(other.network, other.length))
    }
}

impl PartialOrd for Ipv4Prefix {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl fmt::Display for Ipv4Prefix {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(formatter, "{}/{}", self.network, self.length)
    }
}

impl Serialize for Ipv4Prefix {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn primitives_follow_their_rules() {
        assert!(is_id("a") && is_id("A.b_c-9") && !is_id("") && !is_id("-a") && !is_id("a/b"));
        assert!(is_id(&"a".repeat(128)) && !is_id(&"a".repeat(129)));
        assert!(is_node_id("node-7") && !is_node_id("Node_7") && !is_node_id("-") && !is_node_id("a-"));
        assert!(is_node_id(&"a".repeat(63)) && !is_node_id(&"a".repeat(64)));
        assert!(Ipv4::parse("10.0.0.1").is_some() && Ipv4::parse("010.0.0.1").is_none());
        assert!(
            Ipv4::parse("1.2.3").is_none() && Ipv4::parse("1.2.3.4.5").is_none() && Ipv4::parse("256.1.1.1").is_none()
        );
        assert!(Ipv4::parse("10.0.0.9") < Ipv4::parse("10.0.0.10"));
        assert!(Ipv4Prefix::parse("10.0.0.0/8").is_some() && Ipv4Prefix::parse("10.0.0.1/8").is_none());
        assert!(Ipv4Prefix::parse("0.0.0.0/0").is_some() && Ipv4Prefix::parse("10.0.0.0/33").is_none());
        assert!(Ipv4Prefix::parse("10.0.0.0/08").is_none());
        let wide = Ipv4Prefix::parse("10.0.0.0/8").unwrap();
        let narrow = Ipv4Prefix::parse("10.1.0.0/16").unwrap();
        assert!(wide.contains_prefix(narrow) && !narrow.contains_prefix(wide) && wide.overlaps(narrow));
        assert!(wide < narrow);
        assert_eq!(narrow.last().to_string(), "10.1.255.255");
    }
}
