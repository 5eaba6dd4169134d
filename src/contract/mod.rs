//! The pure contract of `@serve.zone/interfaces` 32.22.0 as this controller implements it.
//!
//! **Architecture invariant: this module does no IO, reads no clock, draws no randomness and is
//! not async.** Callers pass time, ids and keys in. `tests/contract_purity.rs` enforces it.
//!
//! Every public item's doc comment names its TypeScript counterpart in the seed, so a reader can
//! map `snapshot_cluster_ingress_designation` back to `snapshotClusterIngressDesignation`.

pub mod assignment;
pub mod designation;
pub mod dispatch;
pub mod inventory;
pub mod json;
pub mod kind;
pub mod network;
pub mod primitives;
pub mod reader;
pub mod reference;
pub mod registration;
pub mod service_status;
pub mod session;
pub mod signing;
pub mod storage_claim;

pub use kind::{DigestedRecord, RecordKind, Rejected};
pub use primitives::{Id, Ipv4, Ipv4Prefix, NodeId, Protocol, Sha256Digest};
pub use reference::AuthorityReference;
