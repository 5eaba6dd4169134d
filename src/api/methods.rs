//! The method table: every TypedRequest method this controller answers, one row each, in one
//! place (crates.io's `router.rs` habit). A row names the method, its principal (who may call it,
//! how that is proven, and the handler that runs once it is), and its timeout class. The HTTP
//! endpoint, the socket, the metric labels and `tests/openapi.rs` all read [`METHODS`].
//!
//! A handler parses the typed request (`requests`), calls one domain function, and builds the
//! answer (`answers`). [`Method::call`] checks, in this order: a socket-only method over HTTP
//! (`principal-refused`); the envelope's raw-text rules (`request-invalid`); a `request` that is
//! not an object (`request-invalid`); the principal (an administrator's identity and role, or a
//! relay's connection token); then the handler, which reads the members.
//! `registerClusterIngress` takes its `request` as sent: its protocol offer is judged before
//! anything else.

use super::envelope::TextRule;
use super::error::ApiError;
use super::requests::{self, Request};
use super::socket::NodeSocket;
use super::{Limits, answers};
use crate::domain::identity::{Access, Caller};
use crate::domain::relays::RelayPrincipal;
use crate::domain::{Controller, DomainError};
use serde_json::value::RawValue;
use serde_json::{Map, Value};
use std::future::Future;
use std::pin::Pin;
use std::sync::LazyLock;
use std::time::Duration;

/// A handler's answer: the response object's text, or the error.
pub type Answer<'a> = Pin<Box<dyn Future<Output = Result<answers::Written, ApiError>> + Send + 'a>>;

/// The handler of a node method: the socket the request came on and the request object.
pub type NodeHandler = for<'a> fn(&'a Controller, &'a NodeSocket, &'a Request) -> Answer<'a>;

/// Who may call a method, how that is proven, and the handler that runs once it is.
pub enum Principal {
    /// An administrator: `request.identity`, verified with a role that allows the access before
    /// the request's members are read (`identity-refused`, `identity-forbidden`).
    Administrator(Access, for<'a> fn(&'a Controller, &'a Caller, &'a Request) -> Answer<'a>),
    /// A relay by its connection: `authInfo.jwt` names its cluster's elected connection, checked
    /// before the members (`principal-refused`, `relay-connection-lost`).
    RelayConnection(for<'a> fn(&'a Controller, &'a RelayPrincipal, &'a Request) -> Answer<'a>),
    /// A relay by its bearer, a member of the request checked by the domain after the members
    /// (`connectClusterRelay`).
    RelayBearer(for<'a> fn(&'a Controller, &'a Request) -> Answer<'a>),
    /// A node by its bearer, a member checked by the domain after the members; socket only
    /// (`openRuntimeSession`, which attaches the new session to the socket).
    NodeBearer(NodeHandler),
    /// A node by its session: socket only; the request's `session` must be the socket's current
    /// session, checked after the member set and before the other members.
    NodeSession(NodeHandler),
    /// `registerClusterIngress`: a relay forwarding with its connection token (`authInfo.jwt`).
    /// The handler takes the `request` as sent, or `None` when the envelope's text has no single
    /// reading, and the token; the domain judges everything in the spec's order.
    Registration(for<'a> fn(&'a Controller, Option<&'a Value>, Option<&'a str>) -> Answer<'a>),
    /// Anyone, without proof. A `null` request is `{}`.
    Anyone(for<'a> fn(&'a Controller, &'a Request) -> Answer<'a>),
}

impl Principal {
    /// True for the node methods, served only on `/typedsocket`.
    pub fn socket_only(&self) -> bool {
        matches!(self, Principal::NodeBearer(_) | Principal::NodeSession(_))
    }

    /// The `x-roles` of the method's request in `openapi/openapi.yaml`: the identity roles that
    /// may call it, or `relay`, `node`, `anyone`.
    pub fn roles(&self) -> &'static [&'static str] {
        match self {
            Principal::Administrator(Access::Read, _) => &["admin", "operator", "viewer"],
            Principal::Administrator(Access::Designate, _) => &["admin", "operator"],
            Principal::Administrator(Access::Admin, _) => &["admin"],
            Principal::RelayConnection(_) | Principal::RelayBearer(_) | Principal::Registration(_) => &["relay"],
            Principal::NodeBearer(_) | Principal::NodeSession(_) => &["node"],
            Principal::Anyone(_) => &["anyone"],
        }
    }
}

/// How long a method may take before it is answered as timed out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Timeout {
    /// The request timeout (`Limits::request_timeout`).
    Standard,
    /// The request timeout plus the route table long poll (`route_table_long_poll_ms`), for as
    /// long as the method may hold a call (`02-wire.md`, "Limits").
    RouteTableLongPoll,
}

/// One row of the table.
pub struct Method {
    /// The method name.
    pub name: &'static str,
    /// Who may call it, and its handler.
    pub principal: Principal,
    /// Its timeout class.
    pub timeout: Timeout,
}

/// One row of [`METHODS`]: `method!(name, principal, |arguments| body)` is the method `name`
/// called by `Principal::principal` (an administrator's names its `Access`, as in
/// `Administrator(Read)`), whose handler runs `body` as its answer's future with `arguments` in
/// scope. The timeout is [`Timeout::Standard`] unless a last argument names another.
macro_rules! method {
    (
        $name:expr,
        $principal:ident $(($access:ident))?,
        |$($argument:tt),*| $body:block
        $(, $timeout:ident)? $(,)?
    ) => {
        Method {
            name: $name,
            principal: Principal::$principal($(Access::$access,)? |$($argument),*| {
                Box::pin(async move $body)
            }),
            timeout: method!(@timeout $($timeout)?),
        }
    };
    (@timeout) => {
        Timeout::Standard
    };
    (@timeout $timeout:ident) => {
        Timeout::$timeout
    };
}

/// The name of each method of [`METHODS`], for the code that calls one by name (the CLI).
pub mod name {
    /// `connectClusterRelay`.
    pub const CONNECT_CLUSTER_RELAY: &str = "connectClusterRelay";
    /// `deleteClusterIngressRoute`.
    pub const DELETE_CLUSTER_INGRESS_ROUTE: &str = "deleteClusterIngressRoute";
    /// `deleteService`.
    pub const DELETE_SERVICE: &str = "deleteService";
    /// `designateClusterIngress`.
    pub const DESIGNATE_CLUSTER_INGRESS: &str = "designateClusterIngress";
    /// `getCluster`.
    pub const GET_CLUSTER: &str = "getCluster";
    /// `getClusterIngressDesignation`.
    pub const GET_CLUSTER_INGRESS_DESIGNATION: &str = "getClusterIngressDesignation";
    /// `getClusterIngressRouteTable`.
    pub const GET_CLUSTER_INGRESS_ROUTE_TABLE: &str = "getClusterIngressRouteTable";
    /// `getClusterIngressRoutes`.
    pub const GET_CLUSTER_INGRESS_ROUTES: &str = "getClusterIngressRoutes";
    /// `getClusterNode`.
    pub const GET_CLUSTER_NODE: &str = "getClusterNode";
    /// `getControllerSigningKeys`.
    pub const GET_CONTROLLER_SIGNING_KEYS: &str = "getControllerSigningKeys";
    /// `getControllerVersion`.
    pub const GET_CONTROLLER_VERSION: &str = "getControllerVersion";
    /// `getOrganization`.
    pub const GET_ORGANIZATION: &str = "getOrganization";
    /// `getRuntimeAssignments`.
    pub const GET_RUNTIME_ASSIGNMENTS: &str = "getRuntimeAssignments";
    /// `getRuntimeNetworkAddressPlan`.
    pub const GET_RUNTIME_NETWORK_ADDRESS_PLAN: &str = "getRuntimeNetworkAddressPlan";
    /// `getRuntimeNetworkProjection`.
    pub const GET_RUNTIME_NETWORK_PROJECTION: &str = "getRuntimeNetworkProjection";
    /// `getRuntimeNetworkProjectionForNode`.
    pub const GET_RUNTIME_NETWORK_PROJECTION_FOR_NODE: &str = "getRuntimeNetworkProjectionForNode";
    /// `getServiceRuntimeSpec`.
    pub const GET_SERVICE_RUNTIME_SPEC: &str = "getServiceRuntimeSpec";
    /// `getServiceRuntimeStatus`.
    pub const GET_SERVICE_RUNTIME_STATUS: &str = "getServiceRuntimeStatus";
    /// `heartbeatClusterRelay`.
    pub const HEARTBEAT_CLUSTER_RELAY: &str = "heartbeatClusterRelay";
    /// `issueClusterRelayCredential`.
    pub const ISSUE_CLUSTER_RELAY_CREDENTIAL: &str = "issueClusterRelayCredential";
    /// `listClusterIngressDesignations`.
    pub const LIST_CLUSTER_INGRESS_DESIGNATIONS: &str = "listClusterIngressDesignations";
    /// `listClusterIngressRegistrations`.
    pub const LIST_CLUSTER_INGRESS_REGISTRATIONS: &str = "listClusterIngressRegistrations";
    /// `listClusterNodes`.
    pub const LIST_CLUSTER_NODES: &str = "listClusterNodes";
    /// `listClusterRelays`.
    pub const LIST_CLUSTER_RELAYS: &str = "listClusterRelays";
    /// `listClusters`.
    pub const LIST_CLUSTERS: &str = "listClusters";
    /// `listRuntimeLocalStorageClaims`.
    pub const LIST_RUNTIME_LOCAL_STORAGE_CLAIMS: &str = "listRuntimeLocalStorageClaims";
    /// `listServiceRuntimeStatuses`.
    pub const LIST_SERVICE_RUNTIME_STATUSES: &str = "listServiceRuntimeStatuses";
    /// `openRuntimeSession`.
    pub const OPEN_RUNTIME_SESSION: &str = "openRuntimeSession";
    /// `putCluster`.
    pub const PUT_CLUSTER: &str = "putCluster";
    /// `putClusterIngressRoute`.
    pub const PUT_CLUSTER_INGRESS_ROUTE: &str = "putClusterIngressRoute";
    /// `putClusterNode`.
    pub const PUT_CLUSTER_NODE: &str = "putClusterNode";
    /// `putOrganization`.
    pub const PUT_ORGANIZATION: &str = "putOrganization";
    /// `putRuntimeNetworkAddressPlan`.
    pub const PUT_RUNTIME_NETWORK_ADDRESS_PLAN: &str = "putRuntimeNetworkAddressPlan";
    /// `putServiceRuntimeSpec`.
    pub const PUT_SERVICE_RUNTIME_SPEC: &str = "putServiceRuntimeSpec";
    /// `registerClusterIngress`.
    pub const REGISTER_CLUSTER_INGRESS: &str = "registerClusterIngress";
    /// `reportRuntimeAssignmentState`.
    pub const REPORT_RUNTIME_ASSIGNMENT_STATE: &str = "reportRuntimeAssignmentState";
    /// `reportRuntimeNetworkProjectionApplied`.
    pub const REPORT_RUNTIME_NETWORK_PROJECTION_APPLIED: &str = "reportRuntimeNetworkProjectionApplied";
    /// `resolveRuntimeLocalStorageClaim`.
    pub const RESOLVE_RUNTIME_LOCAL_STORAGE_CLAIM: &str = "resolveRuntimeLocalStorageClaim";
    /// `resolveRuntimeSecretBindings`.
    pub const RESOLVE_RUNTIME_SECRET_BINDINGS: &str = "resolveRuntimeSecretBindings";
}

/// Every method, sorted by name. `openapi/openapi.yaml` must describe exactly these.
pub static METHODS: &[Method] = &[
    method!(name::CONNECT_CLUSTER_RELAY, RelayBearer, |controller, request| {
        let request = requests::connect_cluster_relay(request)?;
        Ok(answers::relay_connected(&controller.connect_cluster_relay(request).await?))
    }),
    method!(name::DELETE_CLUSTER_INGRESS_ROUTE, Administrator(Admin), |controller, _, request| {
        let request = requests::delete_cluster_ingress_route(request)?;
        Ok(answers::route_table(controller.delete_cluster_ingress_route(request).await?.as_ref()))
    }),
    method!(name::DELETE_SERVICE, Administrator(Admin), |controller, _, request| {
        controller.delete_service(requests::delete_service(request)?).await?;
        Ok(answers::deleted())
    }),
    method!(name::DESIGNATE_CLUSTER_INGRESS, Administrator(Designate), |controller, caller, request| {
        let request = requests::designate_cluster_ingress(request)?;
        Ok(answers::designated(&controller.designate_cluster_ingress(caller, request).await?))
    }),
    method!(name::GET_CLUSTER, Administrator(Read), |controller, _, request| {
        Ok(answers::cluster(&controller.get_cluster(requests::cluster(request)?).await?))
    }),
    method!(name::GET_CLUSTER_INGRESS_DESIGNATION, Administrator(Read), |controller, _, request| {
        let request = requests::cluster(request)?;
        Ok(answers::designation(controller.get_cluster_ingress_designation(request).await?.as_ref()))
    }),
    method!(
        name::GET_CLUSTER_INGRESS_ROUTE_TABLE,
        RelayConnection,
        |controller, relay, request| {
            let request = requests::get_cluster_ingress_route_table(request)?;
            Ok(answers::route_table(controller.get_cluster_ingress_route_table(relay, request).await?.as_ref()))
        },
        RouteTableLongPoll
    ),
    method!(name::GET_CLUSTER_INGRESS_ROUTES, Administrator(Read), |controller, _, request| {
        let request = requests::cluster(request)?;
        Ok(answers::route_table(controller.get_cluster_ingress_routes(request).await?.as_ref()))
    }),
    method!(name::GET_CLUSTER_NODE, Administrator(Read), |controller, _, request| {
        let request = requests::get_cluster_node(request)?;
        Ok(answers::node(&controller.get_cluster_node(request).await?))
    }),
    method!(name::GET_CONTROLLER_SIGNING_KEYS, Anyone, |controller, request| {
        requests::get_controller_signing_keys(request)?;
        Ok(answers::signing_keys(&controller.get_controller_signing_keys().await?))
    }),
    method!(name::GET_CONTROLLER_VERSION, Anyone, |controller, request| {
        let request = requests::get_controller_version(request)?;
        Ok(answers::controller_version(&controller.get_controller_version(request)))
    }),
    method!(name::GET_ORGANIZATION, Administrator(Read), |controller, _, request| {
        let request = requests::get_organization(request)?;
        Ok(answers::organization(&controller.get_organization(request).await?))
    }),
    method!(name::GET_RUNTIME_ASSIGNMENTS, NodeSession, |controller, socket, request| {
        let request = requests::get_runtime_assignments(request)?;
        let session = controller.check_node_session(socket.session().as_ref(), request.session).await?;
        Ok(answers::assignments(&controller.get_runtime_assignments(&session).await?))
    }),
    method!(name::GET_RUNTIME_NETWORK_ADDRESS_PLAN, Administrator(Read), |controller, _, request| {
        let request = requests::cluster(request)?;
        Ok(answers::network_plan(controller.get_runtime_network_address_plan(request).await?.as_ref()))
    }),
    method!(name::GET_RUNTIME_NETWORK_PROJECTION, NodeSession, |controller, socket, request| {
        let request = requests::get_runtime_network_projection(request)?;
        let known = request.rest()?;
        let projection = controller
            .get_runtime_network_projection(socket.session().as_ref(), request.session, known.as_ref())
            .await?;
        Ok(answers::projection(projection.as_ref()))
    }),
    method!(name::GET_RUNTIME_NETWORK_PROJECTION_FOR_NODE, Administrator(Read), |controller, _, request| {
        let request = requests::get_runtime_network_projection_for_node(request)?;
        Ok(answers::node_projection(&controller.get_runtime_network_projection_for_node(request).await?))
    }),
    method!(name::GET_SERVICE_RUNTIME_SPEC, Administrator(Read), |controller, _, request| {
        let request = requests::get_service_runtime_spec(request)?;
        Ok(answers::spec(&controller.get_service_runtime_spec(request).await?))
    }),
    method!(name::GET_SERVICE_RUNTIME_STATUS, Administrator(Read), |controller, _, request| {
        let request = requests::get_service_runtime_status(request)?;
        Ok(answers::status(&controller.get_service_runtime_status(request).await?))
    }),
    method!(name::HEARTBEAT_CLUSTER_RELAY, RelayConnection, |controller, relay, request| {
        requests::heartbeat_cluster_relay(request)?;
        Ok(answers::relay_heartbeat(&controller.heartbeat_cluster_relay(relay).await?))
    }),
    method!(name::ISSUE_CLUSTER_RELAY_CREDENTIAL, Administrator(Admin), |controller, _, request| {
        let request = requests::issue_cluster_relay_credential(request)?;
        Ok(answers::relay_credential(&controller.issue_cluster_relay_credential(request).await?))
    }),
    method!(name::LIST_CLUSTER_INGRESS_DESIGNATIONS, Administrator(Read), |controller, _, request| {
        let request = requests::list_cluster_ingress_designations(request)?;
        Ok(answers::designations(&controller.list_cluster_ingress_designations(request).await?))
    }),
    method!(name::LIST_CLUSTER_INGRESS_REGISTRATIONS, Administrator(Read), |controller, _, request| {
        let request = requests::list_cluster_ingress_registrations(request)?;
        Ok(answers::registrations(&controller.list_cluster_ingress_registrations(request).await?))
    }),
    method!(name::LIST_CLUSTER_NODES, Administrator(Read), |controller, _, request| {
        Ok(answers::nodes(&controller.list_cluster_nodes(requests::cluster(request)?).await?))
    }),
    method!(name::LIST_CLUSTER_RELAYS, Administrator(Read), |controller, caller, request| {
        let request = requests::cluster(request)?;
        Ok(answers::relays(&controller.list_cluster_relays(caller, request).await?))
    }),
    method!(name::LIST_CLUSTERS, Administrator(Read), |controller, _, request| {
        requests::list_clusters(request)?;
        Ok(answers::clusters(&controller.list_clusters().await?))
    }),
    method!(name::LIST_RUNTIME_LOCAL_STORAGE_CLAIMS, Administrator(Read), |controller, _, request| {
        let request = requests::cluster(request)?;
        Ok(answers::claims(&controller.list_runtime_local_storage_claims(request).await?))
    }),
    method!(name::LIST_SERVICE_RUNTIME_STATUSES, Administrator(Read), |controller, _, request| {
        let request = requests::cluster(request)?;
        Ok(answers::statuses(&controller.list_service_runtime_statuses(request).await?))
    }),
    method!(name::OPEN_RUNTIME_SESSION, NodeBearer, |controller, socket, request| {
        let session = controller.open_runtime_session(requests::open_runtime_session(request)?).await?;
        socket.attach(controller, &session);
        controller.node_session_attached(&session);
        Ok(answers::session(&session))
    }),
    method!(name::PUT_CLUSTER, Administrator(Admin), |controller, _, request| {
        Ok(answers::cluster(&controller.put_cluster(requests::put_cluster(request)?).await?))
    }),
    method!(name::PUT_CLUSTER_INGRESS_ROUTE, Administrator(Admin), |controller, _, request| {
        let request = requests::put_cluster_ingress_route(request)?;
        Ok(answers::route_table(Some(&controller.put_cluster_ingress_route(request).await?)))
    }),
    method!(name::PUT_CLUSTER_NODE, Administrator(Admin), |controller, _, request| {
        let request = requests::put_cluster_node(request)?;
        Ok(answers::node_put(&controller.put_cluster_node(request).await?))
    }),
    method!(name::PUT_ORGANIZATION, Administrator(Admin), |controller, _, request| {
        let request = requests::put_organization(request)?;
        Ok(answers::organization(&controller.put_organization(request).await?))
    }),
    method!(name::PUT_RUNTIME_NETWORK_ADDRESS_PLAN, Administrator(Admin), |controller, _, request| {
        let request = requests::put_runtime_network_address_plan(request)?;
        Ok(answers::network_plan(Some(&controller.put_runtime_network_address_plan(request).await?)))
    }),
    method!(name::PUT_SERVICE_RUNTIME_SPEC, Administrator(Admin), |controller, _, request| {
        let request = requests::put_service_runtime_spec(request)?;
        Ok(answers::spec(&controller.put_service_runtime_spec(request).await?))
    }),
    method!(name::REGISTER_CLUSTER_INGRESS, Registration, |controller, request, relay_token| {
        let request = requests::register_cluster_ingress(request, relay_token);
        Ok(answers::registered(&controller.register_cluster_ingress(request).await?))
    }),
    method!(name::REPORT_RUNTIME_ASSIGNMENT_STATE, NodeSession, |controller, socket, request| {
        let request = requests::report_runtime_assignment_state(request)?;
        let session = controller.check_node_session(socket.session().as_ref(), request.session.clone()).await?;
        controller.report_runtime_assignment_state(&session, request.rest()?).await?;
        Ok(answers::recorded())
    }),
    method!(name::REPORT_RUNTIME_NETWORK_PROJECTION_APPLIED, NodeSession, |controller, socket, request| {
        let request = requests::report_runtime_network_projection_applied(request)?;
        let session = controller.check_node_session(socket.session().as_ref(), request.session.clone()).await?;
        controller.report_runtime_network_projection_applied(&session, &request.rest()?).await?;
        Ok(answers::recorded())
    }),
    method!(name::RESOLVE_RUNTIME_LOCAL_STORAGE_CLAIM, Administrator(Admin), |controller, _, request| {
        let request = requests::resolve_runtime_local_storage_claim(request)?;
        Ok(answers::claim(&controller.resolve_runtime_local_storage_claim(request).await?))
    }),
    method!(name::RESOLVE_RUNTIME_SECRET_BINDINGS, NodeSession, |controller, socket, request| {
        let request = requests::resolve_runtime_secret_bindings(request)?;
        let session = controller.check_node_session(socket.session().as_ref(), request.session.clone()).await?;
        let values = controller.resolve_runtime_secret_bindings(&session, request.rest()?).await?;
        Ok(answers::secret_values(&values))
    }),
];

/// The row of `name`, if this controller answers it.
pub fn find(name: &str) -> Option<&'static Method> {
    METHODS.binary_search_by(|method| method.name.cmp(name)).ok().map(|index| &METHODS[index])
}

/// True for a method of [`METHODS`].
pub fn is_known(name: &str) -> bool {
    find(name).is_some()
}

/// Where a request arrived.
#[derive(Clone, Copy)]
pub enum Transport<'a> {
    /// `POST /typedrequest`.
    Http,
    /// A `/typedsocket` frame, on this socket.
    Socket(&'a NodeSocket),
}

impl Method {
    /// True when the method's envelope is read as plain data (`api::envelope`): numbers kept as
    /// written, for the validator to name.
    pub fn reads_plain_data(&self) -> bool {
        matches!(self.principal, Principal::Registration(_))
    }

    /// How long a call may take.
    pub fn time_limit(&self, limits: &Limits, controller: &Controller) -> Duration {
        match self.timeout {
            Timeout::Standard => limits.request_timeout,
            Timeout::RouteTableLongPoll => {
                limits.request_timeout + Duration::from_millis(controller.settings.route_table_long_poll_ms)
            }
        }
    }

    /// The answer to a call that ran out of time: `not-ready` for `registerClusterIngress` (its
    /// refusals are its own), `store-unavailable` for every other method.
    pub fn timed_out(&self, controller: &Controller) -> ApiError {
        use crate::contract::registration::RefusalReason;
        match self.principal {
            Principal::Registration(_) => DomainError::RegistrationRefused(
                controller.settings.registration_retry_after.refusal(RefusalReason::NotReady),
            ),
            _ => DomainError::StoreUnavailable("the call ran out of time".to_owned()),
        }
        .into()
    }

    /// Answers one call of this method. `request` is the envelope's `request` member, or the
    /// raw-text rule its text breaks; `auth_jwt` is the envelope's `authInfo.jwt`.
    pub async fn call(
        &self,
        controller: &Controller,
        transport: Transport<'_>,
        request: Result<&Value, TextRule>,
        auth_jwt: Option<&str>,
    ) -> Result<Box<RawValue>, ApiError> {
        let answer = self.answer(controller, transport, request, auth_jwt).await;
        if let Err(error) = &answer {
            error.log_cause();
        }
        answer
    }

    async fn answer(
        &self,
        controller: &Controller,
        transport: Transport<'_>,
        request: Result<&Value, TextRule>,
        auth_jwt: Option<&str>,
    ) -> Result<Box<RawValue>, ApiError> {
        let socket = match transport {
            Transport::Socket(socket) => Some(socket),
            Transport::Http if self.principal.socket_only() => return Err(DomainError::PrincipalRefused.into()),
            Transport::Http => None,
        };
        match &self.principal {
            Principal::Registration(handler) => handler(controller, request.ok(), auth_jwt).await,
            Principal::Administrator(access, handler) => {
                let request = request_object(request)?;
                let caller = controller.authorize(request.get("identity"), *access)?;
                let principal = format!("{}:{}", caller.role.as_str(), caller.user_id);
                tracing::Span::current().record("principal", principal.as_str());
                handler(controller, &caller, request).await
            }
            Principal::RelayConnection(handler) => {
                let request = request_object(request)?;
                let relay = controller.relay_principal(auth_jwt).await?;
                tracing::Span::current().record("principal", "relay");
                handler(controller, &relay, request).await
            }
            Principal::RelayBearer(handler) => handler(controller, request_object(request)?).await,
            Principal::NodeBearer(handler) | Principal::NodeSession(handler) => {
                let request = request_object(request)?;
                match socket {
                    Some(socket) => handler(controller, socket, request).await,
                    None => Err(DomainError::PrincipalRefused.into()),
                }
            }
            Principal::Anyone(handler) => {
                static EMPTY: LazyLock<Request> = LazyLock::new(Map::new);
                match request {
                    Ok(Value::Null) => handler(controller, &EMPTY).await,
                    request => handler(controller, request_object(request)?).await,
                }
            }
        }
    }
}

/// The request object, or `request-invalid`: the raw-text rule the envelope breaks, or a
/// request that is not an object.
fn request_object(request: Result<&Value, TextRule>) -> Result<&Request, ApiError> {
    match request.map_err(|rule| ApiError::request_invalid(vec![rule.violation().to_owned()]))? {
        Value::Object(members) => Ok(members),
        _ => Err(ApiError::request_invalid(vec!["request must be an object".to_owned()])),
    }
}

/// Answers one call of `method` over HTTP without `authInfo` (see [`call_with_auth`]).
pub async fn call(controller: &Controller, method: &str, request: &Value) -> Result<Value, ApiError> {
    call_with_auth(controller, method, request, None).await
}

/// Answers one call of `method` as `POST /typedrequest` does once the envelope is read:
/// `request` is its `request` member, `auth_jwt` its `authInfo.jwt`. An unknown method is
/// `unknown-method`. The answer is read back into a value for the in-process callers (the
/// console and the tests).
pub async fn call_with_auth(
    controller: &Controller,
    method: &str,
    request: &Value,
    auth_jwt: Option<&str>,
) -> Result<Value, ApiError> {
    let method = find(method).ok_or_else(ApiError::unknown_method)?;
    let answer = method.call(controller, Transport::Http, Ok(request), auth_jwt).await?;
    Ok(serde_json::from_str(answer.get()).expect("an answer is JSON"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_method_table_is_sorted_by_name_and_unique() {
        assert!(METHODS.windows(2).all(|pair| pair[0].name < pair[1].name));
        assert!(METHODS.iter().all(|method| find(method.name).is_some_and(|found| found.name == method.name)));
        assert!(find("dropAllTables").is_none());
    }
}
