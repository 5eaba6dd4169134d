//! Runtime network records (`05-projection.md`): leases, the address plan, the protected
//! authority and signed per-node projections.
//!
//! * `lease`: `IRuntimeNetworkLease`;
//! * `address_plan`: `IRuntimeNetworkAddressPlan` and `admitRuntimeNetworkAddressPlanChange`;
//! * `authority`: `IRuntimeNetworkProtectedAuthority` and its platform endpoints;
//! * `workload_ingress`: `IRuntimeNetworkWorkloadIngressProjection` and its packet grants;
//! * `projection`: `IRuntimeNetworkProjection`, its validation and admission;
//! * `text`: the projection read straight from JSON text (the validation path at scale).

pub mod address_plan;
pub mod authority;
mod canonical;
pub mod lease;
pub mod projection;
pub mod text;
pub mod workload_ingress;

pub use address_plan::{PlanAdmission, RuntimeNetworkAddressPlan, admit_runtime_network_address_plan_change};
pub use authority::{PlatformEndpoint, RuntimeNetworkProtectedAuthority};
pub use lease::{LeaseIpv4, RuntimeNetworkLease};
pub use projection::{
    AdmissionStatus, ProjectionAdmission, ProjectionEndpoint, RuntimeNetworkProjection, admit_projection,
    admit_projection_after_validated, admit_runtime_network_projection, validate_runtime_network_projection,
};
pub use workload_ingress::{PacketGrant, WorkloadIngressGrant, WorkloadIngressProjection};
