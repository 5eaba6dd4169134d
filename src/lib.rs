//! Cloudly: the serve.zone cluster controller.
//!
//! Layers call only downward: `cli`/`server` → `api` → `domain` → `store` → `contract`.
//! See ARCHITECTURE.md for the code map and the invariants.
#![forbid(unsafe_code)]

pub mod api;
pub mod cli;
pub mod client;
pub mod config;
pub mod contract;
pub mod domain;
pub mod keys;
pub mod metrics;
pub mod server;
pub mod store;
