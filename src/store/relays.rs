//! The store's part for cluster relays: credentials, connections and the election (`04-registration.md`, "Relays").

use async_trait::async_trait;

/// Persistence of cluster relays: credentials, connections and the election (`04-registration.md`, "Relays"). Implemented by both backends (`postgres/relays.rs`, `sqlite/relays.rs`).
#[async_trait]
pub trait RelayStore: Send + Sync {}
