//! The service runtime status (seed `data.IServiceRuntimeStatus`, `06-storage-claims.md`): the
//! controller's verdict on one spec revision of a service. Each reason belongs to exactly one
//! state, so the typed form [`ServiceRuntimeVerdict`] cannot pair a reason with the wrong state.
//!
//! The reason enums list their variants in the table order of the spec; their derived `Ord`
//! follows that order, so "the first reason in table order" is the minimum.

use super::kind::{RecordKind, Rejected};
use super::primitives::{Id, is_id};
use super::reader::{Invalid, Parsed, Record, counter, id};
use serde::ser::SerializeStruct;
use serde::{Serialize, Serializer};
use serde_json::Value;

/// The default path of `validateServiceRuntimeStatus`, which starts every violation it names.
pub const PATH: &str = "service runtime status";

/// `IServiceRuntimeStatus['state']`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ServiceRuntimeState {
    /// `"converged"`: every assignment of the revision is running.
    Converged,
    /// `"converging"`: assignments are issued, not all running yet.
    Converging,
    /// `"waiting"`: something outside the spec has to happen first.
    Waiting,
    /// `"refused"`: the controller cannot run this revision as specified.
    Refused,
}

impl ServiceRuntimeState {
    /// Every state, in table order.
    pub const ALL: [ServiceRuntimeState; 4] = [
        ServiceRuntimeState::Converged,
        ServiceRuntimeState::Converging,
        ServiceRuntimeState::Waiting,
        ServiceRuntimeState::Refused,
    ];

    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            ServiceRuntimeState::Converged => "converged",
            ServiceRuntimeState::Converging => "converging",
            ServiceRuntimeState::Waiting => "waiting",
            ServiceRuntimeState::Refused => "refused",
        }
    }

    /// Parses the wire spelling.
    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|state| state.as_str() == text)
    }
}

macro_rules! reason_enum {
    ($(#[$meta:meta])* $name:ident { $($(#[$variant_meta:meta])* $variant:ident => $text:literal,)+ }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name {
            $($(#[$variant_meta])* $variant,)+
        }

        impl $name {
            /// Every reason, in the spec's table order.
            pub const ALL: &'static [$name] = &[$($name::$variant,)+];

            /// The wire spelling.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text,)+
                }
            }

            /// Parses the wire spelling.
            pub fn parse(text: &str) -> Option<Self> {
                match text {
                    $($text => Some($name::$variant),)+
                    _ => None,
                }
            }

            /// The reason's position in the table (0 is judged first).
            pub fn index(self) -> usize {
                self as usize
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(self.as_str())
            }
        }
    };
}

reason_enum!(
    /// `TServiceRuntimeWaitingReason`: the reasons of `waiting`, in table order.
    ServiceRuntimeWaitingReason {
        /// `node-network-pending`: a node's network projection is not applied yet.
        NodeNetworkPending => "node-network-pending",
        /// `conflict`: a concurrent change; judged again.
        Conflict => "conflict",
        /// `failure-backoff`: waiting out a backoff after failures.
        FailureBackoff => "failure-backoff",
        /// `storage-import-pending`: an `import` local storage claim whose bytes have not arrived.
        StorageImportPending => "storage-import-pending",
        /// `bindings-pending`: the secret manifest does not cover every enabled binding yet.
        BindingsPending => "bindings-pending",
    }
);

reason_enum!(
    /// `TServiceRuntimeRefusal`: the reasons of `refused`, in table order (`cluster-runtime-missing`
    /// first, `volume-placement-unsupported` last).
    ServiceRuntimeRefusal {
        /// `cluster-runtime-missing`.
        ClusterRuntimeMissing => "cluster-runtime-missing",
        /// `organization-missing`.
        OrganizationMissing => "organization-missing",
        /// `image-plan-missing`.
        ImagePlanMissing => "image-plan-missing",
        /// `platform-unsupported`.
        PlatformUnsupported => "platform-unsupported",
        /// `secrets-unsupported`.
        SecretsUnsupported => "secrets-unsupported",
        /// `volumes-unsupported`: a node or controller kind that cannot hold volumes at all.
        VolumesUnsupported => "volumes-unsupported",
        /// `port-protocol-unsupported`: one port's protocol.
        PortProtocolUnsupported => "port-protocol-unsupported",
        /// `ports-too-many`: more than `runtimeConfigContract.maximumTargetPorts` (64) target ports.
        PortsTooMany => "ports-too-many",
        /// `readiness-target-undeclared`.
        ReadinessTargetUndeclared => "readiness-target-undeclared",
        /// `environment-too-large`.
        EnvironmentTooLarge => "environment-too-large",
        /// `no-eligible-node`: e.g. a placement node that does not exist.
        NoEligibleNode => "no-eligible-node",
        /// `replica-limit`.
        ReplicaLimit => "replica-limit",
        /// `node-authority-unsupported`.
        NodeAuthorityUnsupported => "node-authority-unsupported",
        /// `network-policy-missing`.
        NetworkPolicyMissing => "network-policy-missing",
        /// `network-policy-mismatch`.
        NetworkPolicyMismatch => "network-policy-mismatch",
        /// `network-workload-pool-missing`.
        NetworkWorkloadPoolMissing => "network-workload-pool-missing",
        /// `network-workload-pool-exhausted`.
        NetworkWorkloadPoolExhausted => "network-workload-pool-exhausted",
        /// `volume-driver-unsupported`: a volume driver other than `local`.
        VolumeDriverUnsupported => "volume-driver-unsupported",
        /// `volume-options-unsupported`: driver or mount options.
        VolumeOptionsUnsupported => "volume-options-unsupported",
        /// `volume-shared-unsupported`: one volume mounted by more than one replica or service.
        VolumeSharedUnsupported => "volume-shared-unsupported",
        /// `volume-placement-unsupported`: a placement that does not pin the volume to one node.
        VolumePlacementUnsupported => "volume-placement-unsupported",
    }
);

/// The first `TServiceRuntimeWaitingReason` in table order among `reasons`, if any (the one a
/// `waiting` status names when several apply).
pub fn first_waiting(
    reasons: impl IntoIterator<Item = ServiceRuntimeWaitingReason>,
) -> Option<ServiceRuntimeWaitingReason> {
    reasons.into_iter().min()
}

/// The first `TServiceRuntimeRefusal` in table order among `refusals`, if any (the one a `refused`
/// status names when several apply).
pub fn first_refusal(refusals: impl IntoIterator<Item = ServiceRuntimeRefusal>) -> Option<ServiceRuntimeRefusal> {
    refusals.into_iter().min()
}

/// `IServiceRuntimeStatus['state']` and `['reason']` as one value, so a reason can only appear
/// with its own state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ServiceRuntimeVerdict {
    /// `{ state: "converged", reason: null }`.
    Converged,
    /// `{ state: "converging", reason: null }`.
    Converging,
    /// `{ state: "waiting", reason: TServiceRuntimeWaitingReason }`.
    Waiting(ServiceRuntimeWaitingReason),
    /// `{ state: "refused", reason: TServiceRuntimeRefusal }`.
    Refused(ServiceRuntimeRefusal),
}

impl ServiceRuntimeVerdict {
    /// The verdict's state.
    pub fn state(self) -> ServiceRuntimeState {
        match self {
            ServiceRuntimeVerdict::Converged => ServiceRuntimeState::Converged,
            ServiceRuntimeVerdict::Converging => ServiceRuntimeState::Converging,
            ServiceRuntimeVerdict::Waiting(_) => ServiceRuntimeState::Waiting,
            ServiceRuntimeVerdict::Refused(_) => ServiceRuntimeState::Refused,
        }
    }

    /// The verdict's reason as written on the wire (`None` is `null`).
    pub fn reason(self) -> Option<&'static str> {
        match self {
            ServiceRuntimeVerdict::Converged | ServiceRuntimeVerdict::Converging => None,
            ServiceRuntimeVerdict::Waiting(reason) => Some(reason.as_str()),
            ServiceRuntimeVerdict::Refused(refusal) => Some(refusal.as_str()),
        }
    }

    /// The verdict of `state` with `reason` (`None` for `null`), or `None` when the reason does
    /// not belong to the state.
    pub fn from_parts(state: ServiceRuntimeState, reason: Option<&str>) -> Option<Self> {
        match (state, reason) {
            (ServiceRuntimeState::Converged, None) => Some(ServiceRuntimeVerdict::Converged),
            (ServiceRuntimeState::Converging, None) => Some(ServiceRuntimeVerdict::Converging),
            (ServiceRuntimeState::Waiting, Some(text)) => {
                ServiceRuntimeWaitingReason::parse(text).map(ServiceRuntimeVerdict::Waiting)
            }
            (ServiceRuntimeState::Refused, Some(text)) => {
                ServiceRuntimeRefusal::parse(text).map(ServiceRuntimeVerdict::Refused)
            }
            _ => None,
        }
    }
}

/// `IServiceRuntimeStatus`: `{ id, specRevision, state, reason, changedAt }`, the controller's
/// verdict on one spec revision of a service.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ServiceRuntimeStatus {
    /// The service id.
    pub id: Id,
    /// The spec revision judged.
    pub spec_revision: u64,
    /// `state` and `reason`.
    pub verdict: ServiceRuntimeVerdict,
    /// When the verdict last changed, milliseconds since the Unix epoch.
    pub changed_at: u64,
}

impl Serialize for ServiceRuntimeStatus {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut state = serializer.serialize_struct("ServiceRuntimeStatus", 5)?;
        state.serialize_field("id", &self.id)?;
        state.serialize_field("specRevision", &self.spec_revision)?;
        state.serialize_field("state", &self.verdict.state())?;
        state.serialize_field("reason", &self.verdict.reason())?;
        state.serialize_field("changedAt", &self.changed_at)?;
        state.end()
    }
}

impl ServiceRuntimeStatus {
    /// The status as wire JSON.
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).expect("a status serializes to JSON")
    }
}

const KEYS: [&str; 5] = ["id", "specRevision", "state", "reason", "changedAt"];

/// `validateServiceRuntimeStatus`: names every violation, one per failing top-level field, at
/// most one per field; a value that is not an object with exactly the five keys is the single
/// violation `service runtime status must use its exact schema`. A reason paired with the wrong
/// state is a violation of `reason`; when `state` itself is unknown, `reason` is judged only as
/// "`null` or some known reason".
pub fn validate_service_runtime_status(value: &Value) -> Vec<String> {
    let Ok(record) = Record::exact(value, &KEYS) else {
        return vec![format!("{PATH} must use its exact schema")];
    };
    let member = |key: &str| record.get(key).expect("exact keys are present");
    let mut violations = Vec::new();
    if !member("id").as_str().is_some_and(is_id) {
        violations.push(format!("{PATH} id must be an id"));
    }
    if counter(member("specRevision")).is_err() {
        violations.push(format!("{PATH} specRevision must be a non-negative safe integer"));
    }
    let state = member("state").as_str().and_then(ServiceRuntimeState::parse);
    if state.is_none() {
        violations.push(format!("{PATH} state must be converged, converging, waiting or refused"));
    }
    if let Some(message) = reason_violation(state, member("reason")) {
        violations.push(format!("{PATH} reason {message}"));
    }
    if counter(member("changedAt")).is_err() {
        violations.push(format!("{PATH} changedAt must be a non-negative safe integer"));
    }
    violations
}

fn reason_violation(state: Option<ServiceRuntimeState>, reason: &Value) -> Option<&'static str> {
    let text = reason.as_str();
    match state {
        Some(ServiceRuntimeState::Converged) => (!reason.is_null()).then_some("must be null when state is converged"),
        Some(ServiceRuntimeState::Converging) => (!reason.is_null()).then_some("must be null when state is converging"),
        Some(ServiceRuntimeState::Waiting) => text
            .and_then(ServiceRuntimeWaitingReason::parse)
            .is_none()
            .then_some("must be a service runtime waiting reason when state is waiting"),
        Some(ServiceRuntimeState::Refused) => text
            .and_then(ServiceRuntimeRefusal::parse)
            .is_none()
            .then_some("must be a service runtime refusal when state is refused"),
        None => {
            let known = reason.is_null()
                || text.is_some_and(|text| {
                    ServiceRuntimeWaitingReason::parse(text).is_some() || ServiceRuntimeRefusal::parse(text).is_some()
                });
            (!known).then_some("must be null or a service runtime reason")
        }
    }
}

/// Reads a typed `IServiceRuntimeStatus` (the seed shows no snapshot for it; this is the typed
/// reader beside `validateServiceRuntimeStatus`): the status when
/// [`validate_service_runtime_status`] names no violation, else
/// `Service runtime status contract rejected.`
pub fn snapshot_service_runtime_status(value: &Value) -> Result<ServiceRuntimeStatus, Rejected> {
    read_status(value).map_err(|_| Rejected::of(RecordKind::ServiceRuntimeStatus))
}

fn read_status(value: &Value) -> Parsed<ServiceRuntimeStatus> {
    let record = Record::exact(value, &KEYS)?;
    let state = record.read("state", |value| value.as_str().and_then(ServiceRuntimeState::parse).ok_or(Invalid))?;
    let reason = record.get("reason")?;
    let reason = if reason.is_null() { None } else { Some(reason.as_str().ok_or(Invalid)?) };
    Ok(ServiceRuntimeStatus {
        id: record.read("id", id)?,
        spec_revision: record.read("specRevision", counter)?,
        verdict: ServiceRuntimeVerdict::from_parts(state, reason).ok_or(Invalid)?,
        changed_at: record.read("changedAt", counter)?,
    })
}
