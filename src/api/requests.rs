//! Typed requests, parsed at the edge: one function per method reads the envelope's `request`
//! object into the domain's request struct (validated contract types), naming every failure as
//! `request-invalid` (`01-contract-basics.md`, "Exact schema"). Violations name members, never
//! their values.
//!
//! [`shaped`] (and [`shaped_exactly`] for a relay's request) is the one exact-schema reader: the
//! member set first (each missing required member, then each unknown one), then each member by
//! its reader, the first failing member answering. A request's members are its shape in
//! `wire.rs`, the one the CLI and the tests write; each member read here is a [`Member`] of that
//! shape, which carries its wire name. `registerClusterIngress` alone is read as plain data, by
//! the contract's readers. The method table (`methods.rs`) verifies the principal before it calls
//! these functions, so an identity is judged before the members it travels with.

use super::error::ApiError;
use super::wire::{self, Member, Shape};
use crate::contract::designation::{ClusterIngressDesignationRequest, snapshot_cluster_ingress_designation_request};
use crate::contract::inventory::{parse_cluster, parse_node, parse_organization, parse_service_spec_body};
use crate::contract::network::address_plan::{
    MEMBERS_WITHOUT_DIGEST, seal_runtime_network_address_plan, snapshot_runtime_network_address_plan,
    validate_runtime_network_address_plan,
};
use crate::contract::reader::{self, Parsed};
use crate::contract::registration::{parse_cluster_ingress_registration, read_protocol_offer};
use crate::contract::session::RuntimeSessionReference;
use crate::contract::{AuthorityReference, Id};
use crate::domain::ClusterRequest;
use crate::domain::assignments::{ReportRuntimeAssignmentStateRequest, ResolveRuntimeSecretBindingsRequest};
use crate::domain::designation::{ListClusterIngressDesignationsRequest, MAX_DESIGNATION_PAGE};
use crate::domain::inventory::{
    DeleteServiceRequest, GetClusterNodeRequest, GetOrganizationRequest, GetServiceRuntimeSpecRequest,
    PutClusterNodeRequest, PutClusterRequest, PutOrganizationRequest, PutServiceRuntimeSpecRequest,
};
use crate::domain::network::PutRuntimeNetworkAddressPlanRequest;
use crate::domain::plan::assignments::AssignmentState;
use crate::domain::plan::claims::ClaimDecision;
use crate::domain::projections::NodeProjectionRequest;
use crate::domain::registration::{
    ListClusterIngressRegistrationsRequest, MAX_REGISTRATION_PAGE, RegisterClusterIngressRequest,
};
use crate::domain::relays::{
    ConnectClusterRelayRequest, DeleteClusterIngressRouteRequest, GetClusterIngressRouteTableRequest,
    IssueClusterRelayCredentialRequest, PutClusterIngressRouteRequest, is_lowercase_dns_name,
};
use crate::domain::secrets::Bearer;
use crate::domain::service_status::GetServiceRuntimeStatusRequest;
use crate::domain::storage_claims::ResolveRuntimeLocalStorageClaimRequest;
use crate::store::relays::IngressRoute;
use serde_json::{Map, Value};

/// A request object: the envelope's `request` member.
pub type Request = Map<String, Value>;

fn invalid(violation: impl Into<String>) -> ApiError {
    ApiError::request_invalid(vec![violation.into()])
}

/// A member key as a violation names it: at most 64 characters, quoted.
fn unknown_member(path: &str, key: &str) -> String {
    let key: String = key.chars().take(64).collect();
    format!("{path} has an unknown member {key:?}")
}

/// The exact-schema check of the object at `path`: every `required` member present, any of the
/// `optional` ones, and no other besides the `ignored` ones; each missing member named, then each
/// unknown one.
fn member_set(
    path: &str,
    object: &Map<String, Value>,
    required: &[&str],
    optional: &[&str],
    ignored: &[&str],
) -> Result<(), ApiError> {
    let mut violations: Vec<String> = required
        .iter()
        .filter(|key| !object.contains_key(**key))
        .map(|key| format!("{path} {key} is required"))
        .collect();
    violations.extend(
        object
            .keys()
            .map(String::as_str)
            .filter(|key| !ignored.contains(key) && !required.contains(key) && !optional.contains(key))
            .map(|key| unknown_member(path, key)),
    );
    if violations.is_empty() { Ok(()) } else { Err(ApiError::request_invalid(violations)) }
}

/// The members of `request` as the shape `S`: every required member present, any of the optional
/// ones, and no other besides `identity` (an administrator's, verified before the members; ignored
/// on node methods).
pub fn shaped<'a, S: Shape<'a>>(request: &'a Request) -> Result<S, ApiError> {
    member_set("request", request, S::REQUIRED, S::OPTIONAL, &["identity"])?;
    Ok(S::members(request))
}

/// The members of a relay's `request` as the shape `S`, as [`shaped`] but with `identity` unknown
/// too.
pub fn shaped_exactly<'a, S: Shape<'a>>(request: &'a Request) -> Result<S, ApiError> {
    member_set("request", request, S::REQUIRED, S::OPTIONAL, &[])?;
    Ok(S::members(request))
}

impl<'a> Member<'a> {
    /// Reads the member with `read`, or names it: `request <key> must be <what>`.
    pub fn read<T>(self, read: impl FnOnce(&'a Value) -> Parsed<T>, what: &str) -> Result<T, ApiError> {
        read(self.value).map_err(|_| invalid(format!("request {} must be {what}", self.key)))
    }

    /// Reads the member with a contract parser that names every violation itself.
    pub fn parse<T>(self, parse: impl FnOnce(&'a Value) -> Result<T, Vec<String>>) -> Result<T, ApiError> {
        parse(self.value).map_err(ApiError::request_invalid)
    }

    fn id(self) -> Result<Id, ApiError> {
        self.read(reader::id, "an Id")
    }
}

/// Reads an optional member with `read` when it is present, or names it.
fn read_optional<'a, T>(
    member: Option<Member<'a>>,
    read: impl FnOnce(&'a Value) -> Parsed<T>,
    what: &str,
) -> Result<Option<T>, ApiError> {
    member.map(|member| member.read(read, what)).transpose()
}

/// The request of the methods that name only a cluster: [`wire::OfCluster`].
pub fn cluster(request: &Request) -> Result<ClusterRequest, ApiError> {
    let wire::OfCluster { cluster_id } = shaped(request)?;
    Ok(ClusterRequest { cluster_id: cluster_id.id()? })
}

/// `listClusters`: [`wire::NoMembers`].
pub fn list_clusters(request: &Request) -> Result<(), ApiError> {
    shaped::<wire::NoMembers>(request).map(drop)
}

/// `putOrganization`: [`wire::PutOrganization`].
pub fn put_organization(request: &Request) -> Result<PutOrganizationRequest, ApiError> {
    let wire::PutOrganization { organization } = shaped(request)?;
    Ok(PutOrganizationRequest { organization: organization.parse(parse_organization)? })
}

/// `getOrganization`: [`wire::GetOrganization`].
pub fn get_organization(request: &Request) -> Result<GetOrganizationRequest, ApiError> {
    let wire::GetOrganization { organization_id } = shaped(request)?;
    Ok(GetOrganizationRequest { organization_id: organization_id.id()? })
}

fn expected_revision(member: Member<'_>) -> Result<Option<u64>, ApiError> {
    member.read(|value| reader::nullable(value, reader::counter), "null or a counter")
}

/// `putCluster`: [`wire::PutCluster`].
pub fn put_cluster(request: &Request) -> Result<PutClusterRequest, ApiError> {
    let wire::PutCluster { cluster, expected_revision: revision } = shaped(request)?;
    let cluster = cluster.parse(parse_cluster)?;
    Ok(PutClusterRequest { cluster, expected_revision: expected_revision(revision)? })
}

/// `putClusterNode`: [`wire::PutClusterNode`].
pub fn put_cluster_node(request: &Request) -> Result<PutClusterNodeRequest, ApiError> {
    let wire::PutClusterNode { cluster_id, node, rotate_credential } = shaped(request)?;
    Ok(PutClusterNodeRequest {
        cluster_id: cluster_id.id()?,
        node: node.parse(parse_node)?,
        rotate_credential: rotate_credential.read(reader::boolean, "a boolean")?,
    })
}

/// `getClusterNode`: [`wire::GetClusterNode`].
pub fn get_cluster_node(request: &Request) -> Result<GetClusterNodeRequest, ApiError> {
    let wire::GetClusterNode { cluster_id, node_id } = shaped(request)?;
    Ok(GetClusterNodeRequest { cluster_id: cluster_id.id()?, node_id: node_id.read(reader::node_id, "a NodeId")? })
}

/// `putServiceRuntimeSpec`: [`wire::PutServiceRuntimeSpec`].
pub fn put_service_runtime_spec(request: &Request) -> Result<PutServiceRuntimeSpecRequest, ApiError> {
    let wire::PutServiceRuntimeSpec { spec, expected_revision: revision } = shaped(request)?;
    let spec = spec.parse(parse_service_spec_body)?;
    Ok(PutServiceRuntimeSpecRequest { spec, expected_revision: expected_revision(revision)? })
}

/// `getServiceRuntimeSpec`: [`wire::GetServiceRuntimeSpec`].
pub fn get_service_runtime_spec(request: &Request) -> Result<GetServiceRuntimeSpecRequest, ApiError> {
    let wire::GetServiceRuntimeSpec { cluster_id, service_id, revision } = shaped(request)?;
    Ok(GetServiceRuntimeSpecRequest {
        cluster_id: cluster_id.id()?,
        service_id: service_id.id()?,
        revision: read_optional(revision, reader::counter, "a counter")?,
    })
}

/// `getServiceRuntimeStatus`: [`wire::GetServiceRuntimeStatus`].
pub fn get_service_runtime_status(request: &Request) -> Result<GetServiceRuntimeStatusRequest, ApiError> {
    let wire::GetServiceRuntimeStatus { cluster_id, service_id } = shaped(request)?;
    Ok(GetServiceRuntimeStatusRequest { cluster_id: cluster_id.id()?, service_id: service_id.id()? })
}

/// `resolveRuntimeLocalStorageClaim`: [`wire::ResolveRuntimeLocalStorageClaim`].
pub fn resolve_runtime_local_storage_claim(
    request: &Request,
) -> Result<ResolveRuntimeLocalStorageClaimRequest, ApiError> {
    let wire::ResolveRuntimeLocalStorageClaim { claim, decision } = shaped(request)?;
    Ok(ResolveRuntimeLocalStorageClaimRequest {
        claim: claim.read(AuthorityReference::read, "an IRuntimeAuthorityReference")?,
        decision: decision
            .read(|value| ClaimDecision::parse(reader::string(value)?).ok_or(reader::Invalid), "purge or rebind")?,
    })
}

/// `deleteService`: [`wire::DeleteService`].
pub fn delete_service(request: &Request) -> Result<DeleteServiceRequest, ApiError> {
    let wire::DeleteService { cluster_id, service_id, expected_revision } = shaped(request)?;
    Ok(DeleteServiceRequest {
        cluster_id: cluster_id.id()?,
        service_id: service_id.id()?,
        expected_revision: expected_revision.read(reader::counter, "a counter")?,
    })
}

/// `putRuntimeNetworkAddressPlan`: [`wire::PutRuntimeNetworkAddressPlan`], the plan without
/// `digest` (the controller computes it). The plan's members are named first (each missing one, then each unknown one,
/// `digest` among them), then every violation of its rules (`validateRuntimeNetworkAddressPlan`,
/// at most one per field); the plan answered is sealed with its digest.
pub fn put_runtime_network_address_plan(request: &Request) -> Result<PutRuntimeNetworkAddressPlanRequest, ApiError> {
    let wire::PutRuntimeNetworkAddressPlan { plan: member } = shaped(request)?;
    let Value::Object(plan) = member.value else {
        return Err(invalid("request plan must be an object"));
    };
    member_set("request plan", plan, &MEMBERS_WITHOUT_DIGEST, &[], &[])?;
    let sealed = seal_runtime_network_address_plan(member.value).map_err(|rejected| invalid(rejected.to_string()))?;
    let violations = validate_runtime_network_address_plan(&sealed);
    if !violations.is_empty() {
        return Err(ApiError::request_invalid(violations));
    }
    let plan = snapshot_runtime_network_address_plan(&sealed).map_err(|rejected| invalid(rejected.to_string()))?;
    Ok(PutRuntimeNetworkAddressPlanRequest { plan })
}

/// `designateClusterIngress`: [`wire::DesignateClusterIngress`], the designation read by the seed's
/// snapshot. A missing `designation` fails the snapshot like any other malformed request
/// (`request-invalid` with its one message), so it is not named as a missing member.
pub fn designate_cluster_ingress(request: &Request) -> Result<ClusterIngressDesignationRequest, ApiError> {
    let wire::DesignateClusterIngress { designation } = shaped(request)?;
    snapshot_cluster_ingress_designation_request(designation.map_or(&Value::Null, |designation| designation.value))
        .map_err(|rejected| invalid(rejected.to_string()))
}

/// `listClusterIngressDesignations`: [`wire::ListClusterIngressDesignations`]; a bad
/// `fromGeneration` and a bad `limit` are named together.
pub fn list_cluster_ingress_designations(request: &Request) -> Result<ListClusterIngressDesignationsRequest, ApiError> {
    let wire::ListClusterIngressDesignations { cluster_id, from_generation, limit } = shaped(request)?;
    let cluster_id = cluster_id.id()?;
    let mut violations = Vec::new();
    let mut named = |member: Option<Member<'_>>, read: &dyn Fn(&Value) -> Parsed<u64>, what: &str| {
        member.map(|member| read(member.value).map_err(|_| member.key)).transpose().unwrap_or_else(|key| {
            violations.push(format!("request {key} must be {what}"));
            None
        })
    };
    let from_generation = named(from_generation, &reader::generation, "a generation (an integer ≥ 1)");
    let limit = named(
        limit,
        &|value| reader::counter_in(value, 1, MAX_DESIGNATION_PAGE),
        &format!("an integer from 1 to {MAX_DESIGNATION_PAGE}"),
    );
    if violations.is_empty() {
        Ok(ListClusterIngressDesignationsRequest { cluster_id, from_generation, limit })
    } else {
        Err(ApiError::request_invalid(violations))
    }
}

/// `listClusterIngressRegistrations`: [`wire::ListClusterIngressRegistrations`].
pub fn list_cluster_ingress_registrations(
    request: &Request,
) -> Result<ListClusterIngressRegistrationsRequest, ApiError> {
    let wire::ListClusterIngressRegistrations { cluster_id, node_id, before, limit } = shaped(request)?;
    Ok(ListClusterIngressRegistrationsRequest {
        cluster_id: cluster_id.id()?,
        node_id: read_optional(node_id, reader::node_id, "a NodeId")?,
        before: read_optional(before, reader::counter, "a counter")?,
        limit: read_optional(
            limit,
            |value| reader::counter_in(value, 1, u64::from(MAX_REGISTRATION_PAGE)),
            &format!("an integer from 1 to {MAX_REGISTRATION_PAGE}"),
        )?
        .map(|limit| limit as u32),
    })
}

/// `registerClusterIngress`: `request` is the envelope's `request` member as sent (any JSON), or
/// `None` when the envelope's text has no single reading (a duplicate key, or a number no JSON
/// value holds): its offer is then unreadable, the spec's first refusal. Both the offer and the
/// registration are read here; the domain judges them in the spec's order.
pub fn register_cluster_ingress(request: Option<&Value>, relay_token: Option<&str>) -> RegisterClusterIngressRequest {
    let request = request.unwrap_or(&Value::Null);
    RegisterClusterIngressRequest {
        protocol: read_protocol_offer(request),
        registration: parse_cluster_ingress_registration(request),
        relay_token: relay_token.map(Bearer::from_presented),
    }
}

/// `issueClusterRelayCredential`: [`wire::IssueClusterRelayCredential`].
pub fn issue_cluster_relay_credential(request: &Request) -> Result<IssueClusterRelayCredentialRequest, ApiError> {
    let wire::IssueClusterRelayCredential { cluster_id, relay_id } = shaped(request)?;
    Ok(IssueClusterRelayCredentialRequest { cluster_id: cluster_id.id()?, relay_id: relay_id.id()? })
}

/// `connectClusterRelay`: exactly [`wire::ConnectClusterRelay`].
pub fn connect_cluster_relay(request: &Request) -> Result<ConnectClusterRelayRequest, ApiError> {
    let wire::ConnectClusterRelay { cluster_id, relay_id, bearer } = shaped_exactly(request)?;
    Ok(ConnectClusterRelayRequest {
        cluster_id: cluster_id.id()?,
        relay_id: relay_id.id()?,
        bearer: Bearer::from_presented(bearer.read(reader::string, "a string")?),
    })
}

/// `heartbeatClusterRelay`: exactly [`wire::NoMembers`].
pub fn heartbeat_cluster_relay(request: &Request) -> Result<(), ApiError> {
    shaped_exactly::<wire::NoMembers>(request).map(drop)
}

/// `getClusterIngressRouteTable`: exactly [`wire::GetClusterIngressRouteTable`].
pub fn get_cluster_ingress_route_table(request: &Request) -> Result<GetClusterIngressRouteTableRequest, ApiError> {
    let wire::GetClusterIngressRouteTable { known_revision } = shaped_exactly(request)?;
    Ok(GetClusterIngressRouteTableRequest { known_revision: expected_revision(known_revision)? })
}

fn hostname(value: &Value) -> Parsed<String> {
    let hostname = reader::string(value)?;
    reader::require(is_lowercase_dns_name(hostname))?;
    Ok(hostname.to_owned())
}

/// Reads `route` ([`wire::IngressRoute`]), naming every violation.
fn route(value: &Value) -> Result<IngressRoute, ApiError> {
    type Route<'a> = wire::IngressRoute<Member<'a>>;
    let Value::Object(route) = value else {
        return Err(invalid("request route must be an object"));
    };
    let mut violations: Vec<String> = route
        .keys()
        .filter(|key| !Route::REQUIRED.contains(&key.as_str()))
        .map(|key| unknown_member("request route", key))
        .collect();
    let wire::IngressRoute { hostname: host, service_id, protocol, port } = Route::members(route);
    let mut read = |member: Member<'_>, what: &str| {
        violations.push(format!("request route {} must be {what}", member.key));
    };
    let hostname = hostname(host.value).map_err(|_| read(host, "a lowercase DNS name")).ok();
    let service_id = reader::id(service_id.value).map_err(|_| read(service_id, "an Id")).ok();
    let protocol = reader::protocol(protocol.value).map_err(|_| read(protocol, "tcp or udp")).ok();
    let port = reader::port(port.value).map_err(|_| read(port, "an integer from 1 to 65535")).ok();
    match (hostname, service_id, protocol, port) {
        (Some(hostname), Some(service_id), Some(protocol), Some(port)) if violations.is_empty() => {
            Ok(IngressRoute { hostname, service_id, protocol, port })
        }
        _ => Err(ApiError::request_invalid(violations)),
    }
}

/// `putClusterIngressRoute`: [`wire::PutClusterIngressRoute`].
pub fn put_cluster_ingress_route(request: &Request) -> Result<PutClusterIngressRouteRequest, ApiError> {
    let wire::PutClusterIngressRoute { cluster_id, route: member } = shaped(request)?;
    let cluster_id = cluster_id.id()?;
    Ok(PutClusterIngressRouteRequest { cluster_id, route: route(member.value)? })
}

/// `deleteClusterIngressRoute`: [`wire::DeleteClusterIngressRoute`].
pub fn delete_cluster_ingress_route(request: &Request) -> Result<DeleteClusterIngressRouteRequest, ApiError> {
    let wire::DeleteClusterIngressRoute { cluster_id, hostname: host } = shaped(request)?;
    Ok(DeleteClusterIngressRouteRequest {
        cluster_id: cluster_id.id()?,
        hostname: host.read(hostname, "a lowercase DNS name")?,
    })
}

/// `getControllerSigningKeys`: `{}` (an identity a client attaches to every call is ignored);
/// the first unknown member is named.
pub fn get_controller_signing_keys(request: &Request) -> Result<(), ApiError> {
    no_members_besides_identity(request)
}

/// `getControllerVersion`: `{}`, as `getControllerSigningKeys`.
pub fn get_controller_version(
    request: &Request,
) -> Result<crate::domain::version::GetControllerVersionRequest, ApiError> {
    no_members_besides_identity(request).map(|()| crate::domain::version::GetControllerVersionRequest)
}

/// A request with no members but an ignored `identity`; the first other member is named.
fn no_members_besides_identity(request: &Request) -> Result<(), ApiError> {
    match request.keys().find(|key| *key != "identity") {
        Some(key) => Err(invalid(unknown_member("request", key))),
        None => Ok(()),
    }
}

/// `openRuntimeSession`: [`wire::OpenRuntimeSession`].
pub fn open_runtime_session(request: &Request) -> Result<crate::domain::sessions::OpenRuntimeSessionRequest, ApiError> {
    let wire::OpenRuntimeSession { cluster_id, node_id, bearer } = shaped(request)?;
    Ok(crate::domain::sessions::OpenRuntimeSessionRequest {
        cluster_id: cluster_id.id()?,
        node_id: node_id.read(reader::node_id, "a NodeId")?,
        bearer: Bearer::from_presented(bearer.read(reader::string, "a string")?),
    })
}

/// How a node method reads the members after `session`.
type Rest<'a, T> = Box<dyn Fn() -> Result<T, ApiError> + Send + Sync + 'a>;

/// A node method's request read up to its `session`: the member set checked and the session
/// read. The session is checked against the socket
/// ([`Controller::check_node_session`](crate::domain::Controller::check_node_session)) before
/// [`SessionRequest::rest`] reads the other members.
pub struct SessionRequest<'a, T> {
    /// The session the request presents.
    pub session: RuntimeSessionReference,
    rest: Rest<'a, T>,
}

impl<T> SessionRequest<'_, T> {
    /// The members after `session`.
    pub fn rest(&self) -> Result<T, ApiError> {
        (self.rest)()
    }
}

/// Reads `session`, keeping `rest` for the members after it.
fn session_request<'a, T>(
    session: Member<'a>,
    rest: impl Fn() -> Result<T, ApiError> + Send + Sync + 'a,
) -> Result<SessionRequest<'a, T>, ApiError> {
    let session = session.read(RuntimeSessionReference::read, "an IRuntimeSessionReference")?;
    Ok(SessionRequest { session, rest: Box::new(rest) })
}

fn authority_reference(member: Member<'_>) -> Result<AuthorityReference, ApiError> {
    member.read(AuthorityReference::read, "an IRuntimeAuthorityReference")
}

/// `getRuntimeAssignments`: [`wire::GetRuntimeAssignments`] (no member after `session`).
pub fn get_runtime_assignments(request: &Request) -> Result<SessionRequest<'_, ()>, ApiError> {
    let wire::GetRuntimeAssignments { session } = shaped(request)?;
    session_request(session, || Ok(()))
}

/// `resolveRuntimeSecretBindings`: [`wire::ResolveRuntimeSecretBindings`].
pub fn resolve_runtime_secret_bindings(
    request: &Request,
) -> Result<SessionRequest<'_, ResolveRuntimeSecretBindingsRequest>, ApiError> {
    let wire::ResolveRuntimeSecretBindings { session, assignment } = shaped(request)?;
    session_request(session, move || {
        Ok(ResolveRuntimeSecretBindingsRequest { assignment: authority_reference(assignment)? })
    })
}

/// `reportRuntimeAssignmentState`: [`wire::ReportRuntimeAssignmentState`].
pub fn report_runtime_assignment_state(
    request: &Request,
) -> Result<SessionRequest<'_, ReportRuntimeAssignmentStateRequest>, ApiError> {
    let wire::ReportRuntimeAssignmentState { session, assignment, state } = shaped(request)?;
    session_request(session, move || {
        let assignment = authority_reference(assignment)?;
        let state = AssignmentState::parse(state.read(reader::string, "a string")?)
            .ok_or_else(|| invalid("request state must be starting, ready, failed or stopped"))?;
        Ok(ReportRuntimeAssignmentStateRequest { assignment, state })
    })
}

/// `getRuntimeNetworkProjection`: [`wire::GetRuntimeNetworkProjection`], `known` an
/// `IRuntimeAuthorityReference` or `null`.
pub fn get_runtime_network_projection(
    request: &Request,
) -> Result<SessionRequest<'_, Option<AuthorityReference>>, ApiError> {
    let wire::GetRuntimeNetworkProjection { session, known } = shaped(request)?;
    session_request(session, move || {
        known.read(
            |value| if value.is_null() { Ok(None) } else { AuthorityReference::read(value).map(Some) },
            "an IRuntimeAuthorityReference or null",
        )
    })
}

/// `reportRuntimeNetworkProjectionApplied`: [`wire::ReportRuntimeNetworkProjectionApplied`].
pub fn report_runtime_network_projection_applied(
    request: &Request,
) -> Result<SessionRequest<'_, AuthorityReference>, ApiError> {
    let wire::ReportRuntimeNetworkProjectionApplied { session, applied } = shaped(request)?;
    session_request(session, move || authority_reference(applied))
}

/// `getRuntimeNetworkProjectionForNode`: [`wire::GetClusterNode`].
pub fn get_runtime_network_projection_for_node(request: &Request) -> Result<NodeProjectionRequest, ApiError> {
    let GetClusterNodeRequest { cluster_id, node_id } = get_cluster_node(request)?;
    Ok(NodeProjectionRequest { cluster_id, node_id })
}

#[cfg(test)]
pub(crate) mod tests {
    //! Every request the CLI sends, and every relay's and node's request, written through its
    //! shape in `wire.rs` as the CLI and the tests write it and read back through this module's
    //! parser: a member the api reads that the writer does not write (or writes under another
    //! name) fails here. `id`, `example` and `digest` serve `wire::answers`'s round trip too.

    use super::*;
    use crate::api::methods::name;
    use crate::contract::inventory::{ClusterRuntime, ClusterSpec};
    use crate::contract::{NodeId, Protocol, Sha256Digest};
    use crate::domain::inventory::GetServiceRuntimeSpecRequest;
    use serde::Serialize;
    use serde_json::json;
    use wire::NoMembers;

    /// A request as the CLI sends it: its shape written, and the identity it adds.
    fn sent(shape: impl Serialize) -> Request {
        let mut request = wire::to_request(&shape);
        request["identity"] = json!({ "name": "any identity; verified before the members" });
        let Value::Object(members) = request else { panic!("a shape writes an object") };
        members
    }

    pub(crate) fn id(text: &str) -> Id {
        Id::parse(text).expect("an Id")
    }

    fn node_id(text: &str) -> NodeId {
        NodeId::parse(text).expect("a NodeId")
    }

    /// A document of `deploy/examples`.
    pub(crate) fn example(file: &str) -> Value {
        let path = format!("{}/deploy/examples/{file}", env!("CARGO_MANIFEST_DIR"));
        let text = std::fs::read_to_string(&path).expect("an example file");
        serde_yaml_ng::from_str(&text).expect("an example document")
    }

    pub(crate) fn digest() -> Sha256Digest {
        Sha256Digest::parse(&format!("sha256:{}", "ab".repeat(32))).expect("a digest")
    }

    /// The methods the round trip below covers, each written and read back.
    fn round_trips() -> Vec<&'static str> {
        let mut covered = Vec::new();
        let mut covers = |method: &'static str| covered.push(method);

        list_clusters(&sent(NoMembers {})).expect("listClusters");
        covers(name::LIST_CLUSTERS);
        get_controller_signing_keys(&sent(NoMembers {})).expect("getControllerSigningKeys");
        covers(name::GET_CONTROLLER_SIGNING_KEYS);
        get_controller_version(&sent(NoMembers {})).expect("getControllerVersion");
        covers(name::GET_CONTROLLER_VERSION);

        for method in [
            name::GET_CLUSTER,
            name::GET_CLUSTER_INGRESS_DESIGNATION,
            name::GET_CLUSTER_INGRESS_ROUTES,
            name::GET_RUNTIME_NETWORK_ADDRESS_PLAN,
            name::LIST_CLUSTER_NODES,
            name::LIST_CLUSTER_RELAYS,
            name::LIST_RUNTIME_LOCAL_STORAGE_CLAIMS,
            name::LIST_SERVICE_RUNTIME_STATUSES,
        ] {
            let read = cluster(&sent(wire::OfCluster { cluster_id: "c1" })).expect(method);
            assert_eq!(read, ClusterRequest { cluster_id: id("c1") });
            covers(method);
        }

        let organization = wire::Organization { id: "org", name: "Example Org" };
        let read = put_organization(&sent(wire::PutOrganization { organization })).expect("putOrganization");
        assert_eq!(read.organization, parse_organization(&json!({ "id": "org", "name": "Example Org" })).unwrap());
        covers(name::PUT_ORGANIZATION);

        let read = get_organization(&sent(wire::GetOrganization { organization_id: "org" })).expect("getOrganization");
        assert_eq!(read, GetOrganizationRequest { organization_id: id("org") });
        covers(name::GET_ORGANIZATION);

        let cluster_record = example("cluster.json");
        for expected_revision in [None, Some(4)] {
            let request =
                wire::PutCluster { cluster: cluster_record.clone(), expected_revision: json!(expected_revision) };
            let read = put_cluster(&sent(request)).expect("putCluster");
            let ClusterSpec { id: cluster_id, runtime: ClusterRuntime { generation, .. }, .. } = &read.cluster;
            assert_eq!((cluster_id.as_str(), *generation, read.expected_revision), ("c1", 1, expected_revision));
        }
        covers(name::PUT_CLUSTER);

        let node = example("node.json");
        let request =
            wire::PutClusterNode { cluster_id: json!("c1"), node: node.clone(), rotate_credential: json!(true) };
        let read = put_cluster_node(&sent(request)).expect("putClusterNode");
        let expected =
            PutClusterNodeRequest { cluster_id: id("c1"), node: parse_node(&node).unwrap(), rotate_credential: true };
        assert_eq!(read, expected);
        covers(name::PUT_CLUSTER_NODE);

        for method in [name::GET_CLUSTER_NODE, name::GET_RUNTIME_NETWORK_PROJECTION_FOR_NODE] {
            let request = wire::GetClusterNode { cluster_id: "c1", node_id: "node-1" };
            let read = get_runtime_network_projection_for_node(&sent(&request)).expect(method);
            assert_eq!(read, NodeProjectionRequest { cluster_id: id("c1"), node_id: node_id("node-1") });
            let read = get_cluster_node(&sent(&request)).expect(method);
            assert_eq!(read, GetClusterNodeRequest { cluster_id: id("c1"), node_id: node_id("node-1") });
            covers(method);
        }

        let spec = example("web-spec.json");
        let request = wire::PutServiceRuntimeSpec { spec: spec.clone(), expected_revision: json!(2) };
        let read = put_service_runtime_spec(&sent(request)).expect("putServiceRuntimeSpec");
        let expected =
            PutServiceRuntimeSpecRequest { spec: parse_service_spec_body(&spec).unwrap(), expected_revision: Some(2) };
        assert_eq!(read, expected);
        covers(name::PUT_SERVICE_RUNTIME_SPEC);

        for revision in [None, Some(3)] {
            let request = wire::GetServiceRuntimeSpec {
                cluster_id: json!("c1"),
                service_id: json!("web"),
                revision: revision.map(Value::from),
            };
            let read = get_service_runtime_spec(&sent(request)).expect("getServiceRuntimeSpec");
            assert_eq!(read, GetServiceRuntimeSpecRequest { cluster_id: id("c1"), service_id: id("web"), revision });
        }
        covers(name::GET_SERVICE_RUNTIME_SPEC);

        let request = wire::GetServiceRuntimeStatus { cluster_id: "c1", service_id: "web" };
        let read = get_service_runtime_status(&sent(request)).expect("getServiceRuntimeStatus");
        assert_eq!(read, GetServiceRuntimeStatusRequest { cluster_id: id("c1"), service_id: id("web") });
        covers(name::GET_SERVICE_RUNTIME_STATUS);

        let request =
            wire::DeleteService { cluster_id: json!("c1"), service_id: json!("web"), expected_revision: json!(7) };
        let read = delete_service(&sent(request)).expect("deleteService");
        assert_eq!(read, DeleteServiceRequest { cluster_id: id("c1"), service_id: id("web"), expected_revision: 7 });
        covers(name::DELETE_SERVICE);

        let reference = wire::Reference { id: json!("claim-1"), generation: json!(2), digest: json!(digest()) };
        let claim = AuthorityReference { id: id("claim-1"), generation: 2, digest: digest() };
        for decision in [ClaimDecision::Purge, ClaimDecision::Rebind] {
            let request = wire::ResolveRuntimeLocalStorageClaim {
                claim: wire::to_request(&reference),
                decision: json!(decision.as_str()),
            };
            let read = resolve_runtime_local_storage_claim(&sent(request)).expect("resolveRuntimeLocalStorageClaim");
            assert_eq!(read, ResolveRuntimeLocalStorageClaimRequest { claim: claim.clone(), decision });
        }
        covers(name::RESOLVE_RUNTIME_LOCAL_STORAGE_CLAIM);

        let request = wire::IssueClusterRelayCredential { cluster_id: "c1", relay_id: "relay-a" };
        let read = issue_cluster_relay_credential(&sent(request)).expect("issueClusterRelayCredential");
        assert_eq!(read, IssueClusterRelayCredentialRequest { cluster_id: id("c1"), relay_id: id("relay-a") });
        covers(name::ISSUE_CLUSTER_RELAY_CREDENTIAL);

        let route = wire::IngressRoute {
            hostname: json!("www.example.net"),
            service_id: json!("web"),
            protocol: json!(Protocol::Tcp.as_str()),
            port: json!(443),
        };
        let request = wire::PutClusterIngressRoute { cluster_id: json!("c1"), route: wire::to_request(&route) };
        let read = put_cluster_ingress_route(&sent(request)).expect("putClusterIngressRoute");
        let route = IngressRoute {
            hostname: "www.example.net".to_owned(),
            service_id: id("web"),
            protocol: Protocol::Tcp,
            port: 443,
        };
        assert_eq!(read, PutClusterIngressRouteRequest { cluster_id: id("c1"), route });
        covers(name::PUT_CLUSTER_INGRESS_ROUTE);

        let request = wire::DeleteClusterIngressRoute { cluster_id: "c1", hostname: "www.example.net" };
        let read = delete_cluster_ingress_route(&sent(request)).expect("deleteClusterIngressRoute");
        let expected =
            DeleteClusterIngressRouteRequest { cluster_id: id("c1"), hostname: "www.example.net".to_owned() };
        assert_eq!(read, expected);
        covers(name::DELETE_CLUSTER_INGRESS_ROUTE);

        let mut plan = example("network-plan.yaml");
        plan["revision"] = json!(1);
        let read = put_runtime_network_address_plan(&sent(wire::PutRuntimeNetworkAddressPlan { plan }))
            .expect("putRuntimeNetworkAddressPlan");
        assert_eq!((read.plan.cluster_id.as_str(), read.plan.revision), ("c1", 1));
        covers(name::PUT_RUNTIME_NETWORK_ADDRESS_PLAN);

        for expected_designation in [Value::Null, wire::to_request(&reference)] {
            let current_runtime =
                wire::RuntimeReference { id: json!("c1"), phase: json!("pallet"), generation: json!(3) };
            let designation = wire::DesignationRequest {
                mutation_id: json!("mut-1"),
                cluster_id: json!("c1"),
                ingress_service_id: json!("ingress"),
                current_runtime: wire::to_request(&current_runtime),
                expected_spec_revision: json!(5),
                expected_designation: expected_designation.clone(),
            };
            let request = wire::DesignateClusterIngress { designation: Some(designation) };
            let read = designate_cluster_ingress(&sent(request)).expect("designateClusterIngress");
            assert_eq!(
                (read.mutation_id.as_str(), read.cluster_id.as_str(), read.ingress_service_id.as_str()),
                ("mut-1", "c1", "ingress")
            );
            assert_eq!((read.current_runtime.generation, read.expected_spec_revision), (3, 5));
            assert_eq!(read.expected_designation.is_some(), !expected_designation.is_null());
        }
        covers(name::DESIGNATE_CLUSTER_INGRESS);

        for (from_generation, limit) in [(None, None), (Some(2), Some(5))] {
            let request = wire::ListClusterIngressDesignations {
                cluster_id: json!("c1"),
                from_generation: from_generation.map(Value::from),
                limit: limit.map(Value::from),
            };
            let read = list_cluster_ingress_designations(&sent(request)).expect("listClusterIngressDesignations");
            assert_eq!(read, ListClusterIngressDesignationsRequest { cluster_id: id("c1"), from_generation, limit });
        }
        covers(name::LIST_CLUSTER_INGRESS_DESIGNATIONS);

        for (node, before, limit) in [(None, None, None), (Some("node-1"), Some(9), Some(20))] {
            let request = wire::ListClusterIngressRegistrations {
                cluster_id: json!("c1"),
                node_id: node.map(Value::from),
                before: before.map(Value::from),
                limit: limit.map(Value::from),
            };
            let read = list_cluster_ingress_registrations(&sent(request)).expect("listClusterIngressRegistrations");
            let expected = ListClusterIngressRegistrationsRequest {
                cluster_id: id("c1"),
                node_id: node.map(node_id),
                before,
                limit: limit.map(|limit: u64| limit as u32),
            };
            assert_eq!(read, expected);
        }
        covers(name::LIST_CLUSTER_INGRESS_REGISTRATIONS);

        covered.extend(relay_and_node_round_trips());
        covered
    }

    /// A request as a relay sends it: its shape written, nothing added.
    fn sent_by_relay(shape: impl Serialize) -> Request {
        let Value::Object(members) = wire::to_request(&shape) else { panic!("a shape writes an object") };
        members
    }

    /// The relays' and the nodes' requests, written through their shapes as the tests' relay and
    /// node agent write them, and read back.
    fn relay_and_node_round_trips() -> Vec<&'static str> {
        let request = wire::ConnectClusterRelay { cluster_id: "c1", relay_id: "relay-a", bearer: "secret" };
        let read = connect_cluster_relay(&sent_by_relay(request)).expect("connectClusterRelay");
        assert_eq!((read.cluster_id, read.relay_id, read.bearer.expose()), (id("c1"), id("relay-a"), "secret"));

        heartbeat_cluster_relay(&sent_by_relay(NoMembers {})).expect("heartbeatClusterRelay");

        for known_revision in [None, Some(4)] {
            let request = wire::GetClusterIngressRouteTable { known_revision: json!(known_revision) };
            let read = get_cluster_ingress_route_table(&sent_by_relay(request)).expect("getClusterIngressRouteTable");
            assert_eq!(read, GetClusterIngressRouteTableRequest { known_revision });
        }

        let request = wire::OpenRuntimeSession { cluster_id: "c1", node_id: "node-1", bearer: "secret" };
        let read = open_runtime_session(&sent(request)).expect("openRuntimeSession");
        assert_eq!((read.cluster_id, read.node_id, read.bearer.expose()), (id("c1"), node_id("node-1"), "secret"));

        let session = json!({
            "id": "s1", "generation": 2, "controller": { "kind": "cloudly", "id": "ctl" },
            "clusterId": "c1", "nodeId": "node-1", "runtimeNamespace": "ns-main",
        });
        let expected_session = RuntimeSessionReference::read(&session).expect("a session");
        let reference =
            wire::to_request(&wire::Reference { id: json!("a1"), generation: json!(2), digest: json!(digest()) });
        let expected_reference = AuthorityReference { id: id("a1"), generation: 2, digest: digest() };

        let request = sent(wire::GetRuntimeAssignments { session: session.clone() });
        let read = get_runtime_assignments(&request).expect("getRuntimeAssignments");
        assert_eq!((&read.session, read.rest().expect("nothing after session")), (&expected_session, ()));

        let request = wire::ResolveRuntimeSecretBindings { session: session.clone(), assignment: reference.clone() };
        let request = sent(request);
        let read = resolve_runtime_secret_bindings(&request).expect("resolveRuntimeSecretBindings");
        assert_eq!(read.session, expected_session);
        assert_eq!(read.rest().expect("the assignment").assignment, expected_reference);

        let request = wire::ReportRuntimeAssignmentState {
            session: session.clone(),
            assignment: reference.clone(),
            state: json!(AssignmentState::Ready.as_str()),
        };
        let request = sent(request);
        let read = report_runtime_assignment_state(&request).expect("reportRuntimeAssignmentState");
        let expected = ReportRuntimeAssignmentStateRequest {
            assignment: expected_reference.clone(),
            state: AssignmentState::Ready,
        };
        assert_eq!((&read.session, read.rest().expect("the report")), (&expected_session, expected));

        for known in [Value::Null, reference.clone()] {
            let request = wire::GetRuntimeNetworkProjection { session: session.clone(), known: known.clone() };
            let request = sent(request);
            let read = get_runtime_network_projection(&request).expect("getRuntimeNetworkProjection");
            let expected = (!known.is_null()).then(|| expected_reference.clone());
            assert_eq!((&read.session, read.rest().expect("known")), (&expected_session, expected));
        }

        let request = wire::ReportRuntimeNetworkProjectionApplied { session, applied: reference };
        let request = sent(request);
        let read = report_runtime_network_projection_applied(&request).expect("reportRuntimeNetworkProjectionApplied");
        assert_eq!((&read.session, read.rest().expect("applied")), (&expected_session, expected_reference));

        vec![
            name::CONNECT_CLUSTER_RELAY,
            name::HEARTBEAT_CLUSTER_RELAY,
            name::GET_CLUSTER_INGRESS_ROUTE_TABLE,
            name::OPEN_RUNTIME_SESSION,
            name::GET_RUNTIME_ASSIGNMENTS,
            name::RESOLVE_RUNTIME_SECRET_BINDINGS,
            name::REPORT_RUNTIME_ASSIGNMENT_STATE,
            name::GET_RUNTIME_NETWORK_PROJECTION,
            name::REPORT_RUNTIME_NETWORK_PROJECTION_APPLIED,
        ]
    }

    #[test]
    fn a_relay_request_with_an_identity_is_refused() {
        let refused = heartbeat_cluster_relay(&sent(NoMembers {})).expect_err("identity is unknown to a relay");
        assert_eq!(refused.data["violations"], json!(["request has an unknown member \"identity\""]));
    }

    #[test]
    fn every_request_the_cli_writes_reads_back_through_its_parser() {
        assert!(!round_trips().is_empty());
    }

    /// `GET_CLUSTER` for `getCluster`.
    fn constant_name(method: &str) -> String {
        method.chars().flat_map(|c| c.is_uppercase().then_some('_').into_iter().chain(c.to_uppercase())).collect()
    }

    #[test]
    fn every_method_the_cli_calls_has_a_round_trip() {
        let covered: Vec<String> = round_trips().into_iter().map(constant_name).collect();
        let cli = include_str!("../cli/admin.rs");
        let called: Vec<&str> = cli
            .split("name::")
            .skip(1)
            .map(|rest| rest.split(|c: char| !(c.is_ascii_uppercase() || c == '_')).next().unwrap_or(""))
            .filter(|constant| !constant.is_empty())
            .collect();
        assert!(called.len() > 20, "the CLI names its methods through methods::name");
        let missing: Vec<&&str> = called.iter().filter(|constant| !covered.iter().any(|c| c == *constant)).collect();
        assert!(missing.is_empty(), "methods the CLI calls without a round trip here: {missing:?}");
    }

    #[test]
    fn a_member_renamed_on_one_side_is_refused() {
        // What the round trip guards against: a writer that spells a member differently.
        let mut request = sent(wire::GetClusterNode { cluster_id: "c1", node_id: "node-1" });
        let node = request.remove("nodeId").expect("written");
        request.insert("node".to_owned(), node);
        let refused = get_cluster_node(&request).expect_err("a renamed member is refused");
        let violations = json!(["request nodeId is required", "request has an unknown member \"node\""]);
        assert_eq!(refused.data["violations"], violations);
    }
}
