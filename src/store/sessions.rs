//! The store's part for node sessions, runtime assignments and their reported states (`04-registration.md`, "Node sessions and assignments").

use async_trait::async_trait;

/// Persistence of node sessions, runtime assignments and their reported states (`04-registration.md`, "Node sessions and assignments"). Implemented by both backends (`postgres/sessions.rs`, `sqlite/sessions.rs`).
#[async_trait]
pub trait SessionStore: Send + Sync {}
