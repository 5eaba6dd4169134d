//! What a cluster should look like: the plan, pure. From the facts the store read for a scope of
//! services (`store::assignments::AssignmentFacts`), it decides each spec's verdict ([`verdicts`]),
//! what to issue — the assignments and claims the specs call for, as changes to what is issued
//! ([`issue`]) — each service's status ([`status`]), and the lease changes that make the live
//! leases follow the assignments ([`leases`]). The floors, each using only those below it:
//! [`leases`]; [`lookups`] and [`assignments`] (ids, content, states); [`claims`] (ids, content,
//! what keeps a volume waiting); [`verdicts`]; [`issue`]; [`status`]. It does no IO, reads no clock and draws no randomness but what its
//! caller passes in (a signing key, new lease ids), so every rule is tested without tokio or a
//! store. Who runs it, and when, is `domain::runners`.

pub mod assignments;
pub mod claims;
pub mod issue;
pub mod leases;
pub mod lookups;
pub mod status;
pub mod verdicts;

pub use lookups::Lookups;
