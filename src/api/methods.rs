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
use serde_json::{Map, Value};
use std::future::Future;
use std::pin::Pin;
use std::sync::LazyLock;
use std::time::Duration;

/// A handler's answer: the response object, or the error.
pub type Answer<'a> = Pin<Box<dyn Future<Output = Result<Value, ApiError>> + Send + 'a>>;

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
        $name:literal,
        $principal:ident $(($access:ident))?,
        |$($argument:tt),*| $body:block
        $(, $timeout:ident)? $(,)?
    ) => {
        Method {
            name: $name,
            principal: Principal::$principal($(Access::$access,)? |$($argument),*| Box::pin(async move $body)),
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

/// Every method, sorted by name. `openapi/openapi.yaml` must describe exactly these.
pub static METHODS: &[Method] = &[
    method!("connectClusterRelay", RelayBearer, |controller, request| {
        let request = requests::connect_cluster_relay(request)?;
        Ok(answers::relay_connected(&controller.connect_cluster_relay(request).await?))
    }),
    method!("deleteClusterIngressRoute", Administrator(Admin), |controller, _, request| {
        let request = requests::delete_cluster_ingress_route(request)?;
        Ok(answers::route_table(controller.delete_cluster_ingress_route(request).await?.as_ref()))
    }),
    method!("deleteService", Administrator(Admin), |controller, _, request| {
        controller.delete_service(requests::delete_service(request)?).await?;
        Ok(answers::deleted())
    }),
    method!("designateClusterIngress", Administrator(Designate), |controller, caller, request| {
        let request = requests::designate_cluster_ingress(request)?;
        Ok(answers::designated(&controller.designate_cluster_ingress(caller, request).await?))
    }),
    method!("getCluster", Administrator(Read), |controller, _, request| {
        Ok(answers::cluster(&controller.get_cluster(requests::cluster(request)?).await?))
    }),
    method!("getClusterIngressDesignation", Administrator(Read), |controller, _, request| {
        let request = requests::cluster(request)?;
        Ok(answers::designation(controller.get_cluster_ingress_designation(request).await?.as_ref()))
    }),
    method!(
        "getClusterIngressRouteTable",
        RelayConnection,
        |controller, relay, request| {
            let request = requests::get_cluster_ingress_route_table(request)?;
            Ok(answers::route_table(controller.get_cluster_ingress_route_table(relay, request).await?.as_ref()))
        },
        RouteTableLongPoll
    ),
    method!("getClusterIngressRoutes", Administrator(Read), |controller, _, request| {
        let request = requests::cluster(request)?;
        Ok(answers::route_table(controller.get_cluster_ingress_routes(request).await?.as_ref()))
    }),
    method!("getClusterNode", Administrator(Read), |controller, _, request| {
        let request = requests::get_cluster_node(request)?;
        Ok(answers::node(&controller.get_cluster_node(request).await?))
    }),
    method!("getControllerSigningKeys", Anyone, |controller, request| {
        requests::get_controller_signing_keys(request)?;
        Ok(answers::signing_keys(&controller.get_controller_signing_keys().await?))
    }),
    method!("getControllerVersion", Anyone, |controller, request| {
        let request = requests::get_controller_version(request)?;
        Ok(answers::controller_version(&controller.get_controller_version(request)))
    }),
    method!("getOrganization", Administrator(Read), |controller, _, request| {
        let request = requests::get_organization(request)?;
        Ok(answers::organization(&controller.get_organization(request).await?))
    }),
    method!("getRuntimeAssignments", NodeSession, |controller, socket, request| {
        let request = requests::get_runtime_assignments(request)?;
        let session = controller.check_node_session(socket.session().as_ref(), request.session).await?;
        Ok(answers::assignments(&controller.get_runtime_assignments(&session).await?))
    }),
    method!("getRuntimeNetworkAddressPlan", Administrator(Read), |controller, _, request| {
        let request = requests::cluster(request)?;
        Ok(answers::network_plan(controller.get_runtime_network_address_plan(request).await?.as_ref()))
    }),
    method!("getRuntimeNetworkProjection", NodeSession, |controller, socket, request| {
        let request = requests::get_runtime_network_projection(request)?;
        let session = controller.check_node_session(socket.session().as_ref(), request.session.clone()).await?;
        let known = request.rest()?;
        Ok(answers::projection(controller.get_runtime_network_projection(&session, known.as_ref()).await?.as_ref()))
    }),
    method!("getRuntimeNetworkProjectionForNode", Administrator(Read), |controller, _, request| {
        let request = requests::get_runtime_network_projection_for_node(request)?;
        Ok(answers::node_projection(&controller.get_runtime_network_projection_for_node(request).await?))
    }),
    method!("getServiceRuntimeSpec", Administrator(Read), |controller, _, request| {
        let request = requests::get_service_runtime_spec(request)?;
        Ok(answers::spec(&controller.get_service_runtime_spec(request).await?))
    }),
    method!("getServiceRuntimeStatus", Administrator(Read), |controller, _, request| {
        let request = requests::get_service_runtime_status(request)?;
        Ok(answers::status(&controller.get_service_runtime_status(request).await?))
    }),
    method!("heartbeatClusterRelay", RelayConnection, |controller, relay, request| {
        requests::heartbeat_cluster_relay(request)?;
        Ok(answers::relay_heartbeat(&controller.heartbeat_cluster_relay(relay).await?))
    }),
    method!("issueClusterRelayCredential", Administrator(Admin), |controller, _, request| {
        let request = requests::issue_cluster_relay_credential(request)?;
        Ok(answers::relay_credential(&controller.issue_cluster_relay_credential(request).await?))
    }),
    method!("listClusterIngressDesignations", Administrator(Read), |controller, _, request| {
        let request = requests::list_cluster_ingress_designations(request)?;
        Ok(answers::designations(&controller.list_cluster_ingress_designations(request).await?))
    }),
    method!("listClusterIngressRegistrations", Administrator(Read), |controller, _, request| {
        let request = requests::list_cluster_ingress_registrations(request)?;
        Ok(answers::registrations(&controller.list_cluster_ingress_registrations(request).await?))
    }),
    method!("listClusterNodes", Administrator(Read), |controller, _, request| {
        Ok(answers::nodes(&controller.list_cluster_nodes(requests::cluster(request)?).await?))
    }),
    method!("listClusters", Administrator(Read), |controller, _, request| {
        requests::list_clusters(request)?;
        Ok(answers::clusters(&controller.list_clusters().await?))
    }),
    method!("listRuntimeLocalStorageClaims", Administrator(Read), |controller, _, request| {
        let request = requests::cluster(request)?;
        Ok(answers::claims(&controller.list_runtime_local_storage_claims(request).await?))
    }),
    method!("listServiceRuntimeStatuses", Administrator(Read), |controller, _, request| {
        let request = requests::cluster(request)?;
        Ok(answers::statuses(&controller.list_service_runtime_statuses(request).await?))
    }),
    method!("openRuntimeSession", NodeBearer, |controller, socket, request| {
        let session = controller.open_runtime_session(requests::open_runtime_session(request)?).await?;
        socket.attach(controller, &session);
        controller.node_session_attached(&session);
        Ok(answers::session(&session))
    }),
    method!("putCluster", Administrator(Admin), |controller, _, request| {
        Ok(answers::cluster(&controller.put_cluster(requests::put_cluster(request)?).await?))
    }),
    method!("putClusterIngressRoute", Administrator(Admin), |controller, _, request| {
        let request = requests::put_cluster_ingress_route(request)?;
        Ok(answers::route_table(Some(&controller.put_cluster_ingress_route(request).await?)))
    }),
    method!("putClusterNode", Administrator(Admin), |controller, _, request| {
        let request = requests::put_cluster_node(request)?;
        Ok(answers::node_put(&controller.put_cluster_node(request).await?))
    }),
    method!("putOrganization", Administrator(Admin), |controller, _, request| {
        let request = requests::put_organization(request)?;
        Ok(answers::organization(&controller.put_organization(request).await?))
    }),
    method!("putRuntimeNetworkAddressPlan", Administrator(Admin), |controller, _, request| {
        let request = requests::put_runtime_network_address_plan(request)?;
        Ok(answers::network_plan(Some(&controller.put_runtime_network_address_plan(request).await?)))
    }),
    method!("putServiceRuntimeSpec", Administrator(Admin), |controller, _, request| {
        let request = requests::put_service_runtime_spec(request)?;
        Ok(answers::spec(&controller.put_service_runtime_spec(request).await?))
    }),
    method!("registerClusterIngress", Registration, |controller, request, relay_token| {
        let request = requests::register_cluster_ingress(request, relay_token);
        Ok(answers::registered(&controller.register_cluster_ingress(request).await?))
    }),
    method!("reportRuntimeAssignmentState", NodeSession, |controller, socket, request| {
        let request = requests::report_runtime_assignment_state(request)?;
        let session = controller.check_node_session(socket.session().as_ref(), request.session.clone()).await?;
        controller.report_runtime_assignment_state(&session, request.rest()?).await?;
        Ok(answers::recorded())
    }),
    method!("reportRuntimeNetworkProjectionApplied", NodeSession, |controller, socket, request| {
        let request = requests::report_runtime_network_projection_applied(request)?;
        let session = controller.check_node_session(socket.session().as_ref(), request.session.clone()).await?;
        controller.report_runtime_network_projection_applied(&session, &request.rest()?).await?;
        Ok(answers::recorded())
    }),
    method!("resolveRuntimeLocalStorageClaim", Administrator(Admin), |controller, _, request| {
        let request = requests::resolve_runtime_local_storage_claim(request)?;
        Ok(answers::claim(&controller.resolve_runtime_local_storage_claim(request).await?))
    }),
    method!("resolveRuntimeSecretBindings", NodeSession, |controller, socket, request| {
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
    ) -> Result<Value, ApiError> {
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
    ) -> Result<Value, ApiError> {
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
/// `unknown-method`.
pub async fn call_with_auth(
    controller: &Controller,
    method: &str,
    request: &Value,
    auth_jwt: Option<&str>,
) -> Result<Value, ApiError> {
    let method = find(method).ok_or_else(ApiError::unknown_method)?;
    method.call(controller, Transport::Http, Ok(request), auth_jwt).await
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
