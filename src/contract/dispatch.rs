//! One table from [`RecordKind`] to its contract functions, so the CLI, the property tests and
//! other callers judge any kind by name without a match of their own.

use super::kind::{DigestedRecord, RecordKind, Rejected};
use super::primitives::Sha256Digest;
use super::{assignment, designation, network, registration, service_status, storage_claim};
use serde_json::Value;

/// What the table asks of a digested record's snapshot, whatever its kind.
trait Snapshot {
    fn digest(&self) -> Sha256Digest;
    fn to_value(&self) -> Value;
}

impl<T: DigestedRecord> Snapshot for T {
    fn digest(&self) -> Sha256Digest {
        self.compute_digest()
    }

    fn to_value(&self) -> Value {
        DigestedRecord::to_value(self)
    }
}

type SnapshotFn = fn(&Value) -> Result<Box<dyn Snapshot>, Rejected>;

fn snapshot_as<T: DigestedRecord + 'static>(value: &Value) -> Result<Box<dyn Snapshot>, Rejected> {
    Ok(Box::new(T::snapshot(value)?))
}

/// The snapshot of a digested `kind` (`None` for a kind without a digest).
fn snapshot_of(kind: RecordKind) -> Option<SnapshotFn> {
    Some(match kind {
        RecordKind::ClusterIngressDesignation => snapshot_as::<designation::ClusterIngressDesignation>,
        RecordKind::RuntimeLocalStorageClaim => snapshot_as::<storage_claim::RuntimeLocalStorageClaim>,
        RecordKind::RuntimeNetworkProjection => snapshot_as::<network::projection::RuntimeNetworkProjection>,
        RecordKind::RuntimeNetworkLease => snapshot_as::<network::lease::RuntimeNetworkLease>,
        RecordKind::RuntimeNetworkAddressPlan => snapshot_as::<network::address_plan::RuntimeNetworkAddressPlan>,
        RecordKind::RuntimeNetworkProtectedAuthority => {
            snapshot_as::<network::authority::RuntimeNetworkProtectedAuthority>
        }
        RecordKind::RuntimeAssignment => snapshot_as::<assignment::RuntimeAssignment>,
        _ => return None,
    })
}

/// Every violation of `value` as a record of `kind` (empty when valid).
pub fn validate(kind: RecordKind, value: &Value) -> Vec<String> {
    match kind {
        RecordKind::ClusterIngressDesignation => designation::validate_cluster_ingress_designation(value),
        RecordKind::ClusterIngressDesignationRequest => {
            designation::validate_cluster_ingress_designation_request(value)
        }
        RecordKind::RuntimeLocalStorageClaim => storage_claim::validate_runtime_local_storage_claim(value),
        RecordKind::RuntimeNetworkProjection => {
            network::projection::validate_runtime_network_projection_violations(value)
        }
        RecordKind::RuntimeNetworkLease => network::lease::validate_runtime_network_lease(value),
        RecordKind::RuntimeNetworkAddressPlan => network::address_plan::validate_runtime_network_address_plan(value),
        RecordKind::RuntimeNetworkProtectedAuthority => {
            network::authority::validate_runtime_network_protected_authority(value)
        }
        RecordKind::RuntimeAssignment => assignment::validate_runtime_assignment(value),
        RecordKind::ClusterIngressRegistration => registration::validate_cluster_ingress_registration(value),
        RecordKind::ClusterIngressRegistrationRefusal => registration::validate_cluster_ingress_registration_refusal(
            value,
            registration::CLUSTER_INGRESS_REGISTRATION_REFUSAL_PATH,
        ),
        RecordKind::ClusterIngressRouteTableChange => registration::validate_cluster_ingress_route_table_change(
            value,
            registration::CLUSTER_INGRESS_ROUTE_TABLE_CHANGE_PATH,
        ),
        RecordKind::ServiceRuntimeStatus => service_status::validate_service_runtime_status(value),
    }
}

/// The digest of `value` as a record of a digested `kind`: `None` for a kind without a digest,
/// `Some(Err)` when the value fails the kind's snapshot.
pub fn digest(kind: RecordKind, value: &Value) -> Option<Result<Sha256Digest, Rejected>> {
    Some(snapshot_of(kind)?(value).map(|record| record.digest()))
}

/// The snapshot of a digested record, serialized back to wire JSON (`None` for other kinds).
pub fn snapshot_value(kind: RecordKind, value: &Value) -> Option<Result<Value, Rejected>> {
    Some(snapshot_of(kind)?(value).map(|record| record.to_value()))
}
