//! Record kinds, their digest domains and fixed rejection messages, and the digest rule.

use super::json::{NotCanonical, canonical_without_digest};
use super::primitives::Sha256Digest;
use serde::Serialize;
use serde_json::Value;
use sha2::{Digest as _, Sha256};

/// Every record kind the contract layer reads. The CLI's `--kind` takes [`RecordKind::name`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RecordKind {
    /// `IClusterIngressDesignation`.
    ClusterIngressDesignation,
    /// `IClusterIngressDesignationRequest`.
    ClusterIngressDesignationRequest,
    /// `IRuntimeLocalStorageClaim`.
    RuntimeLocalStorageClaim,
    /// `IRuntimeNetworkProjection` (this project's profile, `05-projection.md`).
    RuntimeNetworkProjection,
    /// `IRuntimeNetworkLease`.
    RuntimeNetworkLease,
    /// `IRuntimeNetworkAddressPlan`.
    RuntimeNetworkAddressPlan,
    /// `IRuntimeNetworkProtectedAuthority`.
    RuntimeNetworkProtectedAuthority,
    /// `IRuntimeAssignment`.
    RuntimeAssignment,
    /// `IClusterIngressRegistration` (plain data).
    ClusterIngressRegistration,
    /// `IClusterIngressRegistrationRefusal` (plain data).
    ClusterIngressRegistrationRefusal,
    /// `IClusterIngressRouteTableChange` (plain data).
    ClusterIngressRouteTableChange,
    /// `IServiceRuntimeStatus` (plain data).
    ServiceRuntimeStatus,
}

impl RecordKind {
    /// Every kind, in the order the CLI lists them.
    pub const ALL: [RecordKind; 12] = [
        RecordKind::ClusterIngressDesignation,
        RecordKind::ClusterIngressDesignationRequest,
        RecordKind::RuntimeLocalStorageClaim,
        RecordKind::RuntimeNetworkProjection,
        RecordKind::RuntimeNetworkLease,
        RecordKind::RuntimeNetworkAddressPlan,
        RecordKind::RuntimeNetworkProtectedAuthority,
        RecordKind::RuntimeAssignment,
        RecordKind::ClusterIngressRegistration,
        RecordKind::ClusterIngressRegistrationRefusal,
        RecordKind::ClusterIngressRouteTableChange,
        RecordKind::ServiceRuntimeStatus,
    ];

    /// The kebab-case name used by the CLI and the vector files.
    pub fn name(self) -> &'static str {
        match self {
            RecordKind::ClusterIngressDesignation => "cluster-ingress-designation",
            RecordKind::ClusterIngressDesignationRequest => "cluster-ingress-designation-request",
            RecordKind::RuntimeLocalStorageClaim => "runtime-local-storage-claim",
            RecordKind::RuntimeNetworkProjection => "runtime-network-projection",
            RecordKind::RuntimeNetworkLease => "runtime-network-lease",
            RecordKind::RuntimeNetworkAddressPlan => "runtime-network-address-plan",
            RecordKind::RuntimeNetworkProtectedAuthority => "runtime-network-protected-authority",
            RecordKind::RuntimeAssignment => "runtime-assignment",
            RecordKind::ClusterIngressRegistration => "cluster-ingress-registration",
            RecordKind::ClusterIngressRegistrationRefusal => "cluster-ingress-registration-refusal",
            RecordKind::ClusterIngressRouteTableChange => "cluster-ingress-route-table-change",
            RecordKind::ServiceRuntimeStatus => "service-runtime-status",
        }
    }

    /// The kind named `name`, if any.
    pub fn from_name(name: &str) -> Option<RecordKind> {
        RecordKind::ALL.into_iter().find(|kind| kind.name() == name)
    }

    /// The lowercase words validators use in their messages (`<label> digest does not match`).
    pub fn label(self) -> &'static str {
        match self {
            RecordKind::ClusterIngressDesignation => "cluster ingress designation",
            RecordKind::ClusterIngressDesignationRequest => "cluster ingress designation request",
            RecordKind::RuntimeLocalStorageClaim => "runtime local storage claim",
            RecordKind::RuntimeNetworkProjection => "runtime network projection",
            RecordKind::RuntimeNetworkLease => "runtime network lease",
            RecordKind::RuntimeNetworkAddressPlan => "runtime network address plan",
            RecordKind::RuntimeNetworkProtectedAuthority => "runtime network protected authority",
            RecordKind::RuntimeAssignment => "runtime assignment",
            RecordKind::ClusterIngressRegistration => "cluster ingress registration",
            RecordKind::ClusterIngressRegistrationRefusal => "cluster ingress registration refusal",
            RecordKind::ClusterIngressRouteTableChange => "cluster ingress route table change",
            RecordKind::ServiceRuntimeStatus => "service runtime status",
        }
    }

    /// The digest domain of a digested record kind (`01-contract-basics.md`, "Digest").
    pub fn domain(self) -> Option<&'static str> {
        match self {
            RecordKind::ClusterIngressDesignation => Some("serve.zone/cluster-ingress-designation"),
            RecordKind::RuntimeLocalStorageClaim => Some("serve.zone/runtime-local-storage-claim"),
            RecordKind::RuntimeNetworkProjection => Some("serve.zone/runtime-network-projection"),
            RecordKind::RuntimeNetworkLease => Some("serve.zone/runtime-network-lease"),
            RecordKind::RuntimeNetworkAddressPlan => Some("serve.zone/runtime-network-address-plan"),
            RecordKind::RuntimeNetworkProtectedAuthority => Some("serve.zone/runtime-network-protected-authority"),
            RecordKind::RuntimeAssignment => Some("serve.zone/runtime-assignment"),
            _ => None,
        }
    }

    /// True for records that arrive as JSON text under the raw-text rules (digested records and
    /// the designation request); false for plain data judged on the parsed value.
    pub fn is_raw_text_record(self) -> bool {
        self.domain().is_some() || self == RecordKind::ClusterIngressDesignationRequest
    }

    /// The one fixed message a snapshot of this kind rejects with; it never echoes the input.
    pub fn rejection_message(self) -> &'static str {
        match self {
            RecordKind::ClusterIngressDesignation | RecordKind::ClusterIngressDesignationRequest => {
                "Cluster ingress designation contract rejected."
            }
            RecordKind::RuntimeLocalStorageClaim => "Runtime local storage claim contract rejected.",
            RecordKind::RuntimeNetworkProjection => "Runtime network projection contract rejected.",
            RecordKind::RuntimeNetworkLease => "Runtime network lease contract rejected.",
            RecordKind::RuntimeNetworkAddressPlan => "Runtime network address plan contract rejected.",
            RecordKind::RuntimeNetworkProtectedAuthority => "Runtime network protected authority contract rejected.",
            RecordKind::RuntimeAssignment => "Runtime assignment contract rejected.",
            RecordKind::ClusterIngressRegistration => "Cluster ingress registration contract rejected.",
            RecordKind::ClusterIngressRegistrationRefusal => "Cluster ingress registration refusal contract rejected.",
            RecordKind::ClusterIngressRouteTableChange => "Cluster ingress route table change contract rejected.",
            RecordKind::ServiceRuntimeStatus => "Service runtime status contract rejected.",
        }
    }
}

/// A snapshot or contract check refused a value of `kind`; displays the kind's fixed message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{}", kind.rejection_message())]
pub struct Rejected {
    /// The record kind whose contract refused the value.
    pub kind: RecordKind,
}

impl Rejected {
    /// A rejection of `kind`.
    pub const fn of(kind: RecordKind) -> Self {
        Rejected { kind }
    }
}

/// `digest(domain, record)`: `sha256:` + lowerhex(SHA-256(domain ‖ 0x00 ‖ canonical(record
/// without its top-level `digest`))).
pub fn compute_digest(domain: &str, record: &Value) -> Result<Sha256Digest, NotCanonical> {
    let canonical = canonical_without_digest(record)?;
    Ok(digest_canonical_bytes(domain, canonical.as_bytes()))
}

/// The digest of already-canonical bytes under `domain`.
pub fn digest_canonical_bytes(domain: &str, canonical: &[u8]) -> Sha256Digest {
    let mut hasher = Sha256::new();
    hasher.update(domain.as_bytes());
    hasher.update([0u8]);
    hasher.update(canonical);
    let output: [u8; 32] = hasher.finalize().into();
    Sha256Digest::from_bytes(&output)
}

/// A digested record: read by an exact-schema snapshot, hashed under its kind's domain.
pub trait DigestedRecord: Serialize + Sized {
    /// The record kind (fixes the domain and the rejection message).
    const KIND: RecordKind;

    /// The detached exact-schema snapshot (the digest is a separate check).
    fn snapshot(value: &Value) -> Result<Self, Rejected>;

    /// The stated digest.
    fn stated_digest(&self) -> &Sha256Digest;

    /// The record as wire JSON (camelCase keys, absent optional members absent).
    fn to_value(&self) -> Value {
        serde_json::to_value(self).expect("contract records serialize to JSON")
    }

    /// The digest recomputed from the record's content.
    fn compute_digest(&self) -> Sha256Digest {
        let domain = Self::KIND.domain().expect("a digested record kind has a domain");
        compute_digest(domain, &self.to_value()).expect("contract records hold only safe integers")
    }
}

/// Implements [`DigestedRecord`] for `$record` of kind `$kind`, read by `$snapshot`, whose stated
/// digest is its `digest` member. Items after those (a faster `compute_digest`) go into the impl
/// as written. A `revised` record (one with `id`, `generation` and `previous`) also gets its
/// `reference`.
macro_rules! digested_record {
    (revised $record:ty, $($rest:tt)*) => {
        $crate::contract::kind::digested_record!($record, $($rest)*);

        impl $record {
            /// `getReference(record)`: `{ id, generation, digest }`, the reference that names
            /// this generation (the next generation's `previous`, or another record's link to it).
            pub fn reference(&self) -> $crate::contract::reference::AuthorityReference {
                $crate::contract::reference::AuthorityReference {
                    id: self.id.clone(),
                    generation: self.generation,
                    digest: self.digest.clone(),
                }
            }
        }
    };
    ($record:ty, $kind:expr, $snapshot:path $(, $item:item)* $(,)?) => {
        impl $crate::contract::kind::DigestedRecord for $record {
            const KIND: $crate::contract::kind::RecordKind = $kind;

            fn snapshot(value: &::serde_json::Value) -> Result<Self, $crate::contract::kind::Rejected> {
                $snapshot(value)
            }

            fn stated_digest(&self) -> &$crate::contract::primitives::Sha256Digest {
                &self.digest
            }

            $($item)*
        }
    };
}
pub(crate) use digested_record;

/// The generic `validate*` of a digested record: the schema, then the digest
/// (`<label> must use its exact canonical schema` or `<label> digest does not match`).
pub fn validate_digested<T: DigestedRecord>(value: &Value) -> Vec<String> {
    match T::snapshot(value) {
        Err(_) => vec![format!("{} must use its exact canonical schema", T::KIND.label())],
        Ok(record) if record.compute_digest() != *record.stated_digest() => {
            vec![format!("{} digest does not match", T::KIND.label())]
        }
        Ok(_) => Vec::new(),
    }
}
