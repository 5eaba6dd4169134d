//! Typed requests, parsed at the edge: one function per method reads the envelope's `request`
//! object into the domain's request struct (validated contract types), naming every failure as
//! `request-invalid` (`01-contract-basics.md`, "Exact schema"). Violations name members, never
//! their values.
//!
//! [`Members`] is the one exact-schema reader: the member set first (each missing required
//! member, then each unknown one), then each member by its reader, the first failing member
//! answering. The method table (`methods.rs`) verifies the principal before it calls these
//! functions, so an identity is judged before the members it travels with.

use super::error::ApiError;
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

/// The members of a request object, checked against its method's exact schema.
pub struct Members<'a> {
    members: &'a Request,
}

impl<'a> Members<'a> {
    /// Every `required` member present, any of the `optional` ones, and no other besides
    /// `identity` (an administrator's, verified before the members; ignored on node methods).
    pub fn besides_identity(request: &'a Request, required: &[&str], optional: &[&str]) -> Result<Self, ApiError> {
        Self::checked(request, required, optional, &["identity"])
    }

    /// Exactly the `required` members: relay requests, where `identity` is unknown too.
    pub fn exactly(request: &'a Request, required: &[&str]) -> Result<Self, ApiError> {
        Self::checked(request, required, &[], &[])
    }

    fn checked(request: &'a Request, required: &[&str], optional: &[&str], ignored: &[&str]) -> Result<Self, ApiError> {
        let mut violations: Vec<String> = required
            .iter()
            .filter(|key| !request.contains_key(**key))
            .map(|key| format!("request {key} is required"))
            .collect();
        violations.extend(
            request
                .keys()
                .map(String::as_str)
                .filter(|key| !ignored.contains(key) && !required.contains(key) && !optional.contains(key))
                .map(|key| unknown_member("request", key)),
        );
        if violations.is_empty() {
            Ok(Members { members: request })
        } else {
            Err(ApiError::request_invalid(violations))
        }
    }

    /// The optional member `key`, `None` when absent.
    pub fn optional(&self, key: &str) -> Option<&'a Value> {
        self.members.get(key)
    }

    /// The member `key` (`null` when absent).
    pub fn get(&self, key: &str) -> &'a Value {
        self.members.get(key).unwrap_or(&Value::Null)
    }

    /// Reads the member `key` with `read`, or names it: `request <key> must be <what>`.
    pub fn read<T>(&self, key: &str, read: impl FnOnce(&'a Value) -> Parsed<T>, what: &str) -> Result<T, ApiError> {
        read(self.get(key)).map_err(|_| invalid(format!("request {key} must be {what}")))
    }

    /// Reads the optional member `key` with `read` when it is present, or names it.
    pub fn read_optional<T>(
        &self,
        key: &str,
        read: impl FnOnce(&'a Value) -> Parsed<T>,
        what: &str,
    ) -> Result<Option<T>, ApiError> {
        self.optional(key).map(|_| self.read(key, read, what)).transpose()
    }

    /// Reads the member `key` with a contract parser that names every violation itself.
    pub fn parse<T>(&self, key: &str, parse: impl FnOnce(&'a Value) -> Result<T, Vec<String>>) -> Result<T, ApiError> {
        parse(self.get(key)).map_err(ApiError::request_invalid)
    }

    fn id(&self, key: &str) -> Result<Id, ApiError> {
        self.read(key, reader::id, "an Id")
    }
}

/// The request of the methods that name only a cluster: `{ identity, clusterId }`.
pub fn cluster(request: &Request) -> Result<ClusterRequest, ApiError> {
    let members = Members::besides_identity(request, &["clusterId"], &[])?;
    Ok(ClusterRequest { cluster_id: members.id("clusterId")? })
}

/// `listClusters`: `{ identity }`.
pub fn list_clusters(request: &Request) -> Result<(), ApiError> {
    Members::besides_identity(request, &[], &[]).map(drop)
}

/// `putOrganization`: `{ identity, organization }`.
pub fn put_organization(request: &Request) -> Result<PutOrganizationRequest, ApiError> {
    let members = Members::besides_identity(request, &["organization"], &[])?;
    Ok(PutOrganizationRequest { organization: members.parse("organization", parse_organization)? })
}

/// `getOrganization`: `{ identity, organizationId }`.
pub fn get_organization(request: &Request) -> Result<GetOrganizationRequest, ApiError> {
    let members = Members::besides_identity(request, &["organizationId"], &[])?;
    Ok(GetOrganizationRequest { organization_id: members.id("organizationId")? })
}

fn expected_revision(members: &Members<'_>) -> Result<Option<u64>, ApiError> {
    members.read("expectedRevision", |value| reader::nullable(value, reader::counter), "null or a counter")
}

/// `putCluster`: `{ identity, cluster, expectedRevision }`.
pub fn put_cluster(request: &Request) -> Result<PutClusterRequest, ApiError> {
    let members = Members::besides_identity(request, &["cluster", "expectedRevision"], &[])?;
    let cluster = members.parse("cluster", parse_cluster)?;
    Ok(PutClusterRequest { cluster, expected_revision: expected_revision(&members)? })
}

/// `putClusterNode`: `{ identity, clusterId, node, rotateCredential }`.
pub fn put_cluster_node(request: &Request) -> Result<PutClusterNodeRequest, ApiError> {
    let members = Members::besides_identity(request, &["clusterId", "node", "rotateCredential"], &[])?;
    Ok(PutClusterNodeRequest {
        cluster_id: members.id("clusterId")?,
        node: members.parse("node", parse_node)?,
        rotate_credential: members.read("rotateCredential", reader::boolean, "a boolean")?,
    })
}

/// `getClusterNode`: `{ identity, clusterId, nodeId }`.
pub fn get_cluster_node(request: &Request) -> Result<GetClusterNodeRequest, ApiError> {
    let members = Members::besides_identity(request, &["clusterId", "nodeId"], &[])?;
    Ok(GetClusterNodeRequest {
        cluster_id: members.id("clusterId")?,
        node_id: members.read("nodeId", reader::node_id, "a NodeId")?,
    })
}

/// `putServiceRuntimeSpec`: `{ identity, spec, expectedRevision }`.
pub fn put_service_runtime_spec(request: &Request) -> Result<PutServiceRuntimeSpecRequest, ApiError> {
    let members = Members::besides_identity(request, &["spec", "expectedRevision"], &[])?;
    let spec = members.parse("spec", parse_service_spec_body)?;
    Ok(PutServiceRuntimeSpecRequest { spec, expected_revision: expected_revision(&members)? })
}

/// `getServiceRuntimeSpec`: `{ identity, clusterId, serviceId, revision? }`.
pub fn get_service_runtime_spec(request: &Request) -> Result<GetServiceRuntimeSpecRequest, ApiError> {
    let members = Members::besides_identity(request, &["clusterId", "serviceId"], &["revision"])?;
    Ok(GetServiceRuntimeSpecRequest {
        cluster_id: members.id("clusterId")?,
        service_id: members.id("serviceId")?,
        revision: members.read_optional("revision", reader::counter, "a counter")?,
    })
}

/// `getServiceRuntimeStatus`: `{ identity, clusterId, serviceId }`.
pub fn get_service_runtime_status(request: &Request) -> Result<GetServiceRuntimeStatusRequest, ApiError> {
    let members = Members::besides_identity(request, &["clusterId", "serviceId"], &[])?;
    Ok(GetServiceRuntimeStatusRequest { cluster_id: members.id("clusterId")?, service_id: members.id("serviceId")? })
}

/// `resolveRuntimeLocalStorageClaim`: `{ identity, claim, decision }`.
pub fn resolve_runtime_local_storage_claim(
    request: &Request,
) -> Result<ResolveRuntimeLocalStorageClaimRequest, ApiError> {
    let members = Members::besides_identity(request, &["claim", "decision"], &[])?;
    Ok(ResolveRuntimeLocalStorageClaimRequest {
        claim: members.read("claim", AuthorityReference::read, "an IRuntimeAuthorityReference")?,
        decision: members.read(
            "decision",
            |value| ClaimDecision::parse(reader::string(value)?).ok_or(reader::Invalid),
            "purge or rebind",
        )?,
    })
}

/// `deleteService`: `{ identity, clusterId, serviceId, expectedRevision }`.
pub fn delete_service(request: &Request) -> Result<DeleteServiceRequest, ApiError> {
    let members = Members::besides_identity(request, &["clusterId", "serviceId", "expectedRevision"], &[])?;
    Ok(DeleteServiceRequest {
        cluster_id: members.id("clusterId")?,
        service_id: members.id("serviceId")?,
        expected_revision: members.read("expectedRevision", reader::counter, "a counter")?,
    })
}

/// `putRuntimeNetworkAddressPlan`: `{ identity, plan }`, the plan without `digest` (the controller
/// computes it). The plan's members are named first (each missing one, then each unknown one,
/// `digest` among them), then every violation of its rules (`validateRuntimeNetworkAddressPlan`,
/// at most one per field); the plan answered is sealed with its digest.
pub fn put_runtime_network_address_plan(request: &Request) -> Result<PutRuntimeNetworkAddressPlanRequest, ApiError> {
    let members = Members::besides_identity(request, &["plan"], &[])?;
    let Value::Object(plan) = members.get("plan") else {
        return Err(invalid("request plan must be an object"));
    };
    let mut violations: Vec<String> = MEMBERS_WITHOUT_DIGEST
        .iter()
        .filter(|key| !plan.contains_key(**key))
        .map(|key| format!("request plan {key} is required"))
        .collect();
    violations.extend(
        plan.keys()
            .filter(|key| !MEMBERS_WITHOUT_DIGEST.contains(&key.as_str()))
            .map(|key| unknown_member("request plan", key)),
    );
    if !violations.is_empty() {
        return Err(ApiError::request_invalid(violations));
    }
    let sealed =
        seal_runtime_network_address_plan(members.get("plan")).map_err(|rejected| invalid(rejected.to_string()))?;
    let violations = validate_runtime_network_address_plan(&sealed);
    if !violations.is_empty() {
        return Err(ApiError::request_invalid(violations));
    }
    let plan = snapshot_runtime_network_address_plan(&sealed).map_err(|rejected| invalid(rejected.to_string()))?;
    Ok(PutRuntimeNetworkAddressPlanRequest { plan })
}

/// `designateClusterIngress`: `{ identity, designation }`, the designation read by the seed's
/// snapshot. A missing `designation` fails the snapshot like any other malformed request
/// (`request-invalid` with its one message), so it is not named as a missing member.
pub fn designate_cluster_ingress(request: &Request) -> Result<ClusterIngressDesignationRequest, ApiError> {
    let members = Members::besides_identity(request, &[], &["designation"])?;
    snapshot_cluster_ingress_designation_request(members.get("designation"))
        .map_err(|rejected| invalid(rejected.to_string()))
}

/// `listClusterIngressDesignations`: `{ identity, clusterId, fromGeneration?, limit? }`; a bad
/// `fromGeneration` and a bad `limit` are named together.
pub fn list_cluster_ingress_designations(request: &Request) -> Result<ListClusterIngressDesignationsRequest, ApiError> {
    let members = Members::besides_identity(request, &["clusterId"], &["fromGeneration", "limit"])?;
    let cluster_id = members.id("clusterId")?;
    let mut violations = Vec::new();
    let mut named = |key: &str, read: &dyn Fn(&Value) -> Parsed<u64>, violation: String| {
        members.optional(key).map(read).transpose().unwrap_or_else(|_| {
            violations.push(violation);
            None
        })
    };
    let from_generation = named(
        "fromGeneration",
        &reader::generation,
        "request fromGeneration must be a generation (an integer ≥ 1)".to_owned(),
    );
    let limit = named(
        "limit",
        &|value| reader::counter_in(value, 1, MAX_DESIGNATION_PAGE),
        format!("request limit must be an integer from 1 to {MAX_DESIGNATION_PAGE}"),
    );
    if violations.is_empty() {
        Ok(ListClusterIngressDesignationsRequest { cluster_id, from_generation, limit })
    } else {
        Err(ApiError::request_invalid(violations))
    }
}

/// `listClusterIngressRegistrations`: `{ identity, clusterId, nodeId?, before?, limit? }`.
pub fn list_cluster_ingress_registrations(
    request: &Request,
) -> Result<ListClusterIngressRegistrationsRequest, ApiError> {
    let members = Members::besides_identity(request, &["clusterId"], &["nodeId", "before", "limit"])?;
    Ok(ListClusterIngressRegistrationsRequest {
        cluster_id: members.id("clusterId")?,
        node_id: members.read_optional("nodeId", reader::node_id, "a NodeId")?,
        before: members.read_optional("before", reader::counter, "a counter")?,
        limit: members
            .read_optional(
                "limit",
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

/// `issueClusterRelayCredential`: `{ identity, clusterId, relayId }`.
pub fn issue_cluster_relay_credential(request: &Request) -> Result<IssueClusterRelayCredentialRequest, ApiError> {
    let members = Members::besides_identity(request, &["clusterId", "relayId"], &[])?;
    Ok(IssueClusterRelayCredentialRequest { cluster_id: members.id("clusterId")?, relay_id: members.id("relayId")? })
}

/// `connectClusterRelay`: exactly `{ clusterId, relayId, bearer }`.
pub fn connect_cluster_relay(request: &Request) -> Result<ConnectClusterRelayRequest, ApiError> {
    let members = Members::exactly(request, &["clusterId", "relayId", "bearer"])?;
    Ok(ConnectClusterRelayRequest {
        cluster_id: members.id("clusterId")?,
        relay_id: members.id("relayId")?,
        bearer: Bearer::from_presented(members.read("bearer", reader::string, "a string")?),
    })
}

/// `heartbeatClusterRelay`: exactly `{}`.
pub fn heartbeat_cluster_relay(request: &Request) -> Result<(), ApiError> {
    Members::exactly(request, &[]).map(drop)
}

/// `getClusterIngressRouteTable`: exactly `{ knownRevision }`.
pub fn get_cluster_ingress_route_table(request: &Request) -> Result<GetClusterIngressRouteTableRequest, ApiError> {
    let members = Members::exactly(request, &["knownRevision"])?;
    let known_revision =
        members.read("knownRevision", |value| reader::nullable(value, reader::counter), "null or a counter")?;
    Ok(GetClusterIngressRouteTableRequest { known_revision })
}

fn hostname(value: &Value) -> Parsed<String> {
    let hostname = reader::string(value)?;
    reader::require(is_lowercase_dns_name(hostname))?;
    Ok(hostname.to_owned())
}

/// Reads `route: { hostname, serviceId, protocol, port }`, naming every violation.
fn route(value: &Value) -> Result<IngressRoute, ApiError> {
    let Value::Object(route) = value else {
        return Err(invalid("request route must be an object"));
    };
    let mut violations: Vec<String> = route
        .keys()
        .filter(|key| !["hostname", "serviceId", "protocol", "port"].contains(&key.as_str()))
        .map(|key| unknown_member("request route", key))
        .collect();
    let member = |key: &str| route.get(key).unwrap_or(&Value::Null);
    let mut named = |violation: &str| violations.push(format!("request route {violation}"));
    let hostname = hostname(member("hostname")).map_err(|_| named("hostname must be a lowercase DNS name")).ok();
    let service_id = reader::id(member("serviceId")).map_err(|_| named("serviceId must be an Id")).ok();
    let protocol = reader::protocol(member("protocol")).map_err(|_| named("protocol must be tcp or udp")).ok();
    let port = reader::port(member("port")).map_err(|_| named("port must be an integer from 1 to 65535")).ok();
    match (hostname, service_id, protocol, port) {
        (Some(hostname), Some(service_id), Some(protocol), Some(port)) if violations.is_empty() => {
            Ok(IngressRoute { hostname, service_id, protocol, port })
        }
        _ => Err(ApiError::request_invalid(violations)),
    }
}

/// `putClusterIngressRoute`: `{ identity, clusterId, route }`.
pub fn put_cluster_ingress_route(request: &Request) -> Result<PutClusterIngressRouteRequest, ApiError> {
    let members = Members::besides_identity(request, &["clusterId", "route"], &[])?;
    let cluster_id = members.id("clusterId")?;
    Ok(PutClusterIngressRouteRequest { cluster_id, route: route(members.get("route"))? })
}

/// `deleteClusterIngressRoute`: `{ identity, clusterId, hostname }`.
pub fn delete_cluster_ingress_route(request: &Request) -> Result<DeleteClusterIngressRouteRequest, ApiError> {
    let members = Members::besides_identity(request, &["clusterId", "hostname"], &[])?;
    Ok(DeleteClusterIngressRouteRequest {
        cluster_id: members.id("clusterId")?,
        hostname: members.read("hostname", hostname, "a lowercase DNS name")?,
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

/// `openRuntimeSession`: `{ clusterId, nodeId, bearer }`.
pub fn open_runtime_session(request: &Request) -> Result<crate::domain::sessions::OpenRuntimeSessionRequest, ApiError> {
    let members = Members::besides_identity(request, &["clusterId", "nodeId", "bearer"], &[])?;
    Ok(crate::domain::sessions::OpenRuntimeSessionRequest {
        cluster_id: members.id("clusterId")?,
        node_id: members.read("nodeId", reader::node_id, "a NodeId")?,
        bearer: Bearer::from_presented(members.read("bearer", reader::string, "a string")?),
    })
}

/// A node method's request read up to its `session`: the member set checked and the session
/// read. The session is checked against the socket
/// ([`Controller::check_node_session`](crate::domain::Controller::check_node_session)) before
/// [`SessionRequest::rest`] reads the other members.
pub struct SessionRequest<'a, T> {
    /// The session the request presents.
    pub session: RuntimeSessionReference,
    members: Members<'a>,
    rest: fn(&Members<'a>) -> Result<T, ApiError>,
}

impl<T> SessionRequest<'_, T> {
    /// The members after `session`.
    pub fn rest(&self) -> Result<T, ApiError> {
        (self.rest)(&self.members)
    }
}

fn session_request<'a, T>(
    request: &'a Request,
    required: &[&str],
    rest: fn(&Members<'a>) -> Result<T, ApiError>,
) -> Result<SessionRequest<'a, T>, ApiError> {
    let members = Members::besides_identity(request, required, &[])?;
    let session = members.read("session", RuntimeSessionReference::read, "an IRuntimeSessionReference")?;
    Ok(SessionRequest { session, members, rest })
}

fn assignment(members: &Members<'_>) -> Result<AuthorityReference, ApiError> {
    members.read("assignment", AuthorityReference::read, "an IRuntimeAuthorityReference")
}

/// `getRuntimeAssignments`: `{ session }` (no member after it).
pub fn get_runtime_assignments(request: &Request) -> Result<SessionRequest<'_, ()>, ApiError> {
    session_request(request, &["session"], |_| Ok(()))
}

/// `resolveRuntimeSecretBindings`: `{ session, assignment }`.
pub fn resolve_runtime_secret_bindings(
    request: &Request,
) -> Result<SessionRequest<'_, ResolveRuntimeSecretBindingsRequest>, ApiError> {
    session_request(request, &["session", "assignment"], |members| {
        Ok(ResolveRuntimeSecretBindingsRequest { assignment: assignment(members)? })
    })
}

/// `reportRuntimeAssignmentState`: `{ session, assignment, state }`.
pub fn report_runtime_assignment_state(
    request: &Request,
) -> Result<SessionRequest<'_, ReportRuntimeAssignmentStateRequest>, ApiError> {
    session_request(request, &["session", "assignment", "state"], |members| {
        let assignment = assignment(members)?;
        let state = members.read("state", reader::string, "a string")?;
        let state = AssignmentState::parse(state)
            .ok_or_else(|| invalid("request state must be starting, ready, failed or stopped"))?;
        Ok(ReportRuntimeAssignmentStateRequest { assignment, state })
    })
}

/// `getRuntimeNetworkProjection`: `{ session, known: IRuntimeAuthorityReference | null }`.
pub fn get_runtime_network_projection(
    request: &Request,
) -> Result<SessionRequest<'_, Option<AuthorityReference>>, ApiError> {
    session_request(request, &["session", "known"], |members| {
        members.read(
            "known",
            |value| if value.is_null() { Ok(None) } else { AuthorityReference::read(value).map(Some) },
            "an IRuntimeAuthorityReference or null",
        )
    })
}

/// `reportRuntimeNetworkProjectionApplied`: `{ session, applied }`.
pub fn report_runtime_network_projection_applied(
    request: &Request,
) -> Result<SessionRequest<'_, AuthorityReference>, ApiError> {
    session_request(request, &["session", "applied"], |members| {
        members.read("applied", AuthorityReference::read, "an IRuntimeAuthorityReference")
    })
}

/// `getRuntimeNetworkProjectionForNode`: `{ identity, clusterId, nodeId }`.
pub fn get_runtime_network_projection_for_node(request: &Request) -> Result<NodeProjectionRequest, ApiError> {
    let GetClusterNodeRequest { cluster_id, node_id } = get_cluster_node(request)?;
    Ok(NodeProjectionRequest { cluster_id, node_id })
}
