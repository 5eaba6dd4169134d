//! `getControllerVersion` (anyone): what build of the controller answers, for `cloudly version`
//! and for operators telling the controllers of one store apart during an upgrade (controllers of
//! two versions do not share a store; see ARCHITECTURE.md, "A migration"). This project's method,
//! beside the spec's; the same facts as the `cloudly_build_info` metric.

use super::Controller;
use crate::contract::Id;

/// `getControllerVersion`'s request: `{}` (an identity a client attaches to every call is
/// ignored).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GetControllerVersionRequest;

/// What build of the controller answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControllerVersion {
    /// The crate version (`Cargo.toml`), as `cloudly --version` prints it.
    pub version: &'static str,
    /// `release` or `debug`.
    pub profile: &'static str,
    /// The controller id (`--controller-id`), shared by the controllers of one store.
    pub controller_id: Id,
}

/// This build's version.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// This build's profile: `release` or `debug`.
pub const PROFILE: &str = if cfg!(debug_assertions) { "debug" } else { "release" };

impl Controller {
    /// `getControllerVersion`: this build's version and profile and the controller id. Reads
    /// nothing from the store, so it answers while the store does not.
    pub fn get_controller_version(&self, _request: GetControllerVersionRequest) -> ControllerVersion {
        ControllerVersion { version: VERSION, profile: PROFILE, controller_id: self.settings.controller_id.clone() }
    }
}
