//! The dispatch table: every TypedRequest method this controller answers, in one place
//! (crates.io's `router.rs` habit). Each arm calls the domain and shapes the response object.

use super::error::ApiError;
use crate::contract::DigestedRecord;
use crate::contract::registration::CLUSTER_INGRESS_PROTOCOL;
use crate::contract::signing::{encode_public_key, key_id};
use crate::domain::{Controller, registration, relays};
use crate::store::{StoredCluster, StoredNode};
use serde_json::{Map, Value, json};

/// Every method name, sorted. `openapi/openapi.yaml` must describe exactly these.
pub const METHODS: &[&str] = &[
    "connectClusterRelay",
    "deleteClusterIngressRoute",
    "deleteService",
    "designateClusterIngress",
    "getCluster",
    "getClusterIngressDesignation",
    "getClusterIngressRouteTable",
    "getClusterIngressRoutes",
    "getControllerSigningKeys",
    "getRuntimeAssignments",
    "getServiceRuntimeSpec",
    "heartbeatClusterRelay",
    "issueClusterRelayCredential",
    "listClusterIngressDesignations",
    "listClusterIngressRegistrations",
    "listClusterNodes",
    "listClusters",
    "openRuntimeSession",
    "putCluster",
    "putClusterIngressRoute",
    "putClusterNode",
    "putOrganization",
    "putServiceRuntimeSpec",
    "registerClusterIngress",
    "reportRuntimeAssignmentState",
    "resolveRuntimeSecretBindings",
];

/// The node methods (`04-registration.md`): served only on `/typedsocket` (`api::socket`); over
/// HTTP they answer `principal-refused`.
pub const NODE_METHODS: &[&str] =
    &["getRuntimeAssignments", "openRuntimeSession", "reportRuntimeAssignmentState", "resolveRuntimeSecretBindings"];

/// True for a method of [`METHODS`].
pub fn is_known(method: &str) -> bool {
    METHODS.binary_search(&method).is_ok()
}

fn cluster_json(stored: &StoredCluster) -> Value {
    let mut cluster = serde_json::to_value(&stored.cluster).expect("clusters serialize");
    cluster["revision"] = json!(stored.revision);
    cluster
}

fn node_json(stored: &StoredNode) -> Value {
    serde_json::to_value(&stored.node).expect("nodes serialize")
}

/// Answers one request of `method` without `authInfo` (see [`call_with_auth`]).
pub async fn call(controller: &Controller, method: &str, request: &Value) -> Result<Value, ApiError> {
    call_with_auth(controller, method, request, None).await
}

/// Answers one request of `method`. `request` is the envelope's `request` member; `auth_jwt` is
/// the envelope's `authInfo.jwt`, the principal of the relay methods (a relay connection token).
pub async fn call_with_auth(
    controller: &Controller,
    method: &str,
    request: &Value,
    auth_jwt: Option<&str>,
) -> Result<Value, ApiError> {
    if !is_known(method) {
        return Err(ApiError::unknown_method());
    }
    if NODE_METHODS.contains(&method) {
        return Err(crate::domain::DomainError::PrincipalRefused.into());
    }
    if method == "registerClusterIngress" {
        // The protocol offer is read before the shape check, so any `request` is judged.
        let accepted = controller.register_cluster_ingress(request, auth_jwt).await?;
        return Ok(json!({
            "accepted": true,
            "revision": accepted.route_table_revision,
            "protocol": CLUSTER_INGRESS_PROTOCOL,
        }));
    }
    let empty = Map::new();
    let request = match request {
        Value::Object(members) => members,
        // `getControllerSigningKeys` takes `{}`; a null request is the same question.
        Value::Null if method == "getControllerSigningKeys" => &empty,
        _ => return Err(ApiError::request_invalid(vec!["request must be an object".to_owned()])),
    };
    let response = match method {
        "designateClusterIngress" => {
            let answer = controller.designate_cluster_ingress(request).await?;
            json!({
                "designation": answer.designation.to_value(),
                "spec": answer.spec,
                "replayed": answer.replayed,
            })
        }
        "getClusterIngressDesignation" => {
            let designation = controller.get_cluster_ingress_designation(request).await?;
            json!({ "designation": designation.as_ref().map(DigestedRecord::to_value) })
        }
        "listClusterIngressDesignations" => {
            let page = controller.list_cluster_ingress_designations(request).await?;
            let designations: Vec<Value> = page.designations.iter().map(DigestedRecord::to_value).collect();
            json!({ "designations": designations, "nextGeneration": page.next_generation })
        }
        "listClusterIngressRegistrations" => {
            let (registrations, next_before) = controller.list_cluster_ingress_registrations(request).await?;
            let registrations: Vec<Value> = registrations.iter().map(registration::registration_json).collect();
            json!({ "registrations": registrations, "nextBefore": next_before })
        }
        "putOrganization" => {
            let stored = controller.put_organization(request).await?;
            json!({ "organization": stored.organization })
        }
        "putCluster" => json!({ "cluster": cluster_json(&controller.put_cluster(request).await?) }),
        "getCluster" => json!({ "cluster": cluster_json(&controller.get_cluster(request).await?) }),
        "listClusters" => {
            let clusters: Vec<Value> = controller.list_clusters(request).await?.iter().map(cluster_json).collect();
            json!({ "clusters": clusters })
        }
        "putClusterNode" => {
            let put = controller.put_cluster_node(request).await?;
            // The one answer that shows a node bearer: it is issued here and stored only hashed.
            json!({ "node": node_json(&put.node), "bearer": put.bearer.as_ref().map(|bearer| bearer.expose()) })
        }
        "listClusterNodes" => {
            let mut nodes = Vec::new();
            for stored in controller.list_cluster_nodes(request).await? {
                let (session, connected) = controller.node_session_status(&stored.cluster_id, &stored.node.id).await?;
                nodes.push(json!({
                    "id": stored.node.id,
                    "hostAddresses": stored.node.host_addresses,
                    "session": session.as_ref().map(|session| session.to_value()),
                    "connected": connected,
                }));
            }
            json!({ "nodes": nodes })
        }
        "putServiceRuntimeSpec" => json!({ "spec": controller.put_service_runtime_spec(request).await? }),
        "getServiceRuntimeSpec" => json!({ "spec": controller.get_service_runtime_spec(request).await? }),
        "deleteService" => {
            controller.delete_service(request).await?;
            json!({ "deleted": true })
        }
        "issueClusterRelayCredential" => {
            let issued = controller.issue_cluster_relay_credential(request).await?;
            // The one answer that shows a relay bearer: it is issued here and stored only hashed.
            json!({ "relay": issued.relay.to_json(), "bearer": issued.bearer.expose() })
        }
        "connectClusterRelay" => {
            let connected = controller.connect_cluster_relay(request).await?;
            // The one answer that shows a connection token: it is stored only hashed.
            json!({
                "connection": relays::connection_json(&connected.connection),
                "token": connected.token.expose(),
                "leaseMs": connected.lease_ms,
            })
        }
        "heartbeatClusterRelay" => {
            let connection = controller.heartbeat_cluster_relay(request, auth_jwt).await?;
            json!({
                "connection": relays::connection_json(&connection),
                "leaseMs": controller.settings.relay_lease_ms,
            })
        }
        "getClusterIngressRouteTable" => {
            let table = controller.get_cluster_ingress_route_table(request, auth_jwt).await?;
            json!({ "table": relays::route_table_json(table.as_ref()) })
        }
        "putClusterIngressRoute" => {
            let table = controller.put_cluster_ingress_route(request).await?;
            json!({ "table": relays::route_table_json(Some(&table)) })
        }
        "deleteClusterIngressRoute" => {
            let table = controller.delete_cluster_ingress_route(request).await?;
            json!({ "table": relays::route_table_json(table.as_ref()) })
        }
        "getClusterIngressRoutes" => {
            let table = controller.get_cluster_ingress_routes(request).await?;
            json!({ "table": relays::route_table_json(table.as_ref()) })
        }
        "getControllerSigningKeys" => {
            // Anyone may ask; an identity a client attaches to every call is ignored.
            if let Some(key) = request.keys().find(|key| *key != "identity") {
                let key: String = key.chars().take(64).collect();
                return Err(ApiError::request_invalid(vec![format!("request has an unknown member {key:?}")]));
            }
            let public_key = controller.keys.signing.verifying_key();
            json!({ "keys": [{
                "keyId": key_id(&public_key),
                "algorithm": "ed25519",
                "publicKey": encode_public_key(&public_key),
                "activeSince": controller.keys.signing_active_since,
                "retiredAt": null,
            }] })
        }
        _ => return Err(ApiError::unknown_method()),
    };
    Ok(response)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_method_list_is_sorted_and_unique() {
        assert!(METHODS.windows(2).all(|pair| pair[0] < pair[1]));
    }
}
