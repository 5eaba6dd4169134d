//! The wire shape of each request a client sends (an administrator's, a relay's, a node's), written
//! once: its member names, and which are required and which optional. A shape is a struct generic
//! over its member type `M`:
//!
//! - the api reads a request into `Shape<Member<'_>>` ([`Shape::members`], after
//!   `requests::shaped` or `requests::shaped_exactly` checked the member set against
//!   [`Shape::REQUIRED`] and [`Shape::OPTIONAL`]), each member a borrowed value that knows its wire
//!   name, so the parsers of `requests.rs` name no member themselves and nothing is copied;
//! - the CLI and the tests write a request as `Shape<&str>`, `Shape<Value>` or any
//!   `M: Serialize` (the derived `Serialize` writes each required member, and each optional one
//!   that is `Some`).
//!
//! A member renamed here is renamed for the reader and the writer at once; `requests.rs`'s
//! round-trip test writes every shape and reads it back through the api's parser.
//! `registerClusterIngress` has no shape: its request is read as plain data whose protocol offer
//! is judged before its member set (`contract::registration`), an order a shape's member-set check
//! first cannot keep.
//! The contract records a request carries (a cluster, a node, a designation request…) keep their
//! own readers in `contract`; the few the CLI assembles from answers have a writer shape here
//! ([`DesignationRequest`], [`RuntimeReference`], [`Reference`]), held to the contract's reader by
//! the same test. The answers' shapes are in [`answers`].

pub mod answers;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// One member of a request as the api reads it: its wire name and its value (`null` when a
/// required member is absent, which the member-set check has already named).
#[derive(Debug, Clone, Copy)]
pub struct Member<'a> {
    /// The member's wire name.
    pub key: &'static str,
    /// The member's value.
    pub value: &'a Value,
}

impl<'a> Member<'a> {
    fn required(object: &'a Map<String, Value>, key: &'static str) -> Self {
        Member { key, value: object.get(key).unwrap_or(&Value::Null) }
    }

    fn optional(object: &'a Map<String, Value>, key: &'static str) -> Option<Self> {
        object.get(key).map(|value| Member { key, value })
    }
}

/// A request shape read from a request object.
pub trait Shape<'a>: Sized {
    /// The members a request must have, in the order a missing one is named.
    const REQUIRED: &'static [&'static str];
    /// The members a request may have.
    const OPTIONAL: &'static [&'static str];
    /// The members of `object`, unchecked (see `requests::shaped`).
    fn members(object: &'a Map<String, Value>) -> Self;
}

/// `shapes! { Name { field: "wireName", … } optional { field: "wireName", … }; … }`: for each
/// shape, the struct, its writer (`Serialize`) and its reader ([`Shape`]).
macro_rules! shapes {
    ($(
        $(#[$doc:meta])*
        $name:ident { $($field:ident: $key:literal),* $(,)? }
        $(optional { $($optional_field:ident: $optional_key:literal),* $(,)? })?;
    )*) => {
        $(shapes!(@one $(#[$doc])* $name { $($field: $key),* } $(optional { $($optional_field: $optional_key),* })?);)*
    };
    (
        @one
        $(#[$doc:meta])*
        $name:ident { $($field:ident: $key:literal),* $(,)? }
        $(optional { $($optional_field:ident: $optional_key:literal),* $(,)? })?
    ) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
        pub struct $name<M> {
            $(
                #[doc = concat!("`", $key, "`.")]
                #[serde(rename = $key)]
                pub $field: M,
            )*
            $($(
                #[doc = concat!("`", $optional_key, "`, absent when `None`.")]
                #[serde(rename = $optional_key, skip_serializing_if = "Option::is_none")]
                pub $optional_field: Option<M>,
            )*)?
        }

        impl<'a> Shape<'a> for $name<Member<'a>> {
            const REQUIRED: &'static [&'static str] = &[$($key),*];
            const OPTIONAL: &'static [&'static str] = &[$($($optional_key),*)?];

            fn members(object: &'a Map<String, Value>) -> Self {
                $name {
                    $($field: Member::required(object, $key),)*
                    $($($optional_field: Member::optional(object, $optional_key),)*)?
                }
            }
        }
    };
}

/// A request with no members besides `identity`: `listClusters`, `getControllerSigningKeys`,
/// `getControllerVersion`; and `heartbeatClusterRelay`, which has no `identity` either. It writes
/// `{}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct NoMembers {}

impl Shape<'_> for NoMembers {
    const REQUIRED: &'static [&'static str] = &[];
    const OPTIONAL: &'static [&'static str] = &[];

    fn members(_: &Map<String, Value>) -> Self {
        NoMembers {}
    }
}

shapes! {
    /// The methods that name only a cluster (`getCluster`, `listClusterNodes`, …).
    OfCluster { cluster_id: "clusterId" };

    /// `putOrganization`.
    PutOrganization { organization: "organization" };

    /// `getOrganization`.
    GetOrganization { organization_id: "organizationId" };

    /// `putCluster`: `expectedRevision` is `null` to create.
    PutCluster { cluster: "cluster", expected_revision: "expectedRevision" };

    /// `putClusterNode`.
    PutClusterNode { cluster_id: "clusterId", node: "node", rotate_credential: "rotateCredential" };

    /// `getClusterNode` and `getRuntimeNetworkProjectionForNode`.
    GetClusterNode { cluster_id: "clusterId", node_id: "nodeId" };

    /// `putServiceRuntimeSpec`: `expectedRevision` is `null` to create.
    PutServiceRuntimeSpec { spec: "spec", expected_revision: "expectedRevision" };

    /// `getServiceRuntimeSpec`: the current spec, or the one of `revision`.
    GetServiceRuntimeSpec { cluster_id: "clusterId", service_id: "serviceId" }
    optional { revision: "revision" };

    /// `getServiceRuntimeStatus`.
    GetServiceRuntimeStatus { cluster_id: "clusterId", service_id: "serviceId" };

    /// `deleteService`.
    DeleteService { cluster_id: "clusterId", service_id: "serviceId", expected_revision: "expectedRevision" };

    /// `resolveRuntimeLocalStorageClaim`: `claim` is a [`Reference`], `decision` `purge` or
    /// `rebind`.
    ResolveRuntimeLocalStorageClaim { claim: "claim", decision: "decision" };

    /// `putRuntimeNetworkAddressPlan`: the plan without `digest`.
    PutRuntimeNetworkAddressPlan { plan: "plan" };

    /// `designateClusterIngress`: `designation` is a [`DesignationRequest`]. It is optional in the
    /// member set: a missing one fails the contract's snapshot like any malformed designation.
    DesignateClusterIngress {}
    optional { designation: "designation" };

    /// `listClusterIngressDesignations`.
    ListClusterIngressDesignations { cluster_id: "clusterId" }
    optional { from_generation: "fromGeneration", limit: "limit" };

    /// `listClusterIngressRegistrations`.
    ListClusterIngressRegistrations { cluster_id: "clusterId" }
    optional { node_id: "nodeId", before: "before", limit: "limit" };

    /// `issueClusterRelayCredential`.
    IssueClusterRelayCredential { cluster_id: "clusterId", relay_id: "relayId" };

    /// `putClusterIngressRoute`: `route` is an [`IngressRoute`].
    PutClusterIngressRoute { cluster_id: "clusterId", route: "route" };

    /// The `route` of `putClusterIngressRoute`. Its reader names every violation at once, a
    /// missing member as one that is not what it must be.
    IngressRoute { hostname: "hostname", service_id: "serviceId", protocol: "protocol", port: "port" };

    /// `deleteClusterIngressRoute`.
    DeleteClusterIngressRoute { cluster_id: "clusterId", hostname: "hostname" };

    /// `connectClusterRelay`: a relay's request, with no `identity`.
    ConnectClusterRelay { cluster_id: "clusterId", relay_id: "relayId", bearer: "bearer" };

    /// `getClusterIngressRouteTable`: a relay's request, with no `identity`; `knownRevision` is
    /// the revision the relay holds, or `null` for none.
    GetClusterIngressRouteTable { known_revision: "knownRevision" };

    /// `openRuntimeSession`: a node's request on `/typedsocket`.
    OpenRuntimeSession { cluster_id: "clusterId", node_id: "nodeId", bearer: "bearer" };

    /// `getRuntimeAssignments`: `session` is an `IRuntimeSessionReference`, as in every node
    /// request below.
    GetRuntimeAssignments { session: "session" };

    /// `resolveRuntimeSecretBindings`: `assignment` is a [`Reference`].
    ResolveRuntimeSecretBindings { session: "session", assignment: "assignment" };

    /// `reportRuntimeAssignmentState`: `state` is `starting`, `ready`, `failed` or `stopped`.
    ReportRuntimeAssignmentState { session: "session", assignment: "assignment", state: "state" };

    /// `getRuntimeNetworkProjection`: `known` is a [`Reference`] or `null`.
    GetRuntimeNetworkProjection { session: "session", known: "known" };

    /// `reportRuntimeNetworkProjectionApplied`: `applied` is a [`Reference`].
    ReportRuntimeNetworkProjectionApplied { session: "session", applied: "applied" };

    /// `IOrganization`, as the CLI writes it from its flags (read by `parse_organization`).
    Organization { id: "id", name: "name" };

    /// `IRuntimeAuthorityReference`, as the CLI writes it from a listed record (read by
    /// `AuthorityReference::read`).
    Reference { id: "id", generation: "generation", digest: "digest" };

    /// `IClusterRuntimeReference`, as the CLI writes it from a cluster's answer.
    RuntimeReference { id: "id", phase: "phase", generation: "generation" };

    /// `IClusterIngressDesignationRequest`, as the CLI writes it from the controller's answers
    /// (read by `snapshot_cluster_ingress_designation_request`).
    DesignationRequest {
        mutation_id: "mutationId",
        cluster_id: "clusterId",
        ingress_service_id: "ingressServiceId",
        current_runtime: "currentRuntime",
        expected_spec_revision: "expectedSpecRevision",
        expected_designation: "expectedDesignation",
    };
}

/// An administrator request with its `identity` beside its members.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WithIdentity<R, I> {
    /// The request's members.
    #[serde(flatten)]
    pub request: R,
    /// `identity`.
    pub identity: I,
}

/// A request as the JSON value it is sent as.
///
/// # Panics
/// Never for a shape of this module, whose members are `Serialize` values with string keys.
pub fn to_request(request: &impl Serialize) -> Value {
    serde_json::to_value(request).expect("a request shape serializes")
}
