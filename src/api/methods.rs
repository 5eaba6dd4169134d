//! The dispatch table: every TypedRequest method this controller answers, in one place
//! (crates.io's `router.rs` habit). Each arm calls the domain and shapes the response object.

use super::error::ApiError;
use crate::contract::DigestedRecord;
use crate::contract::signing::{encode_public_key, key_id};
use crate::domain::Controller;
use crate::store::{StoredCluster, StoredNode};
use serde_json::{Map, Value, json};

/// Every method name, sorted. `openapi/openapi.yaml` must describe exactly these.
pub const METHODS: &[&str] = &[
    "deleteService",
    "designateClusterIngress",
    "getCluster",
    "getClusterIngressDesignation",
    "getControllerSigningKeys",
    "getServiceRuntimeSpec",
    "listClusterIngressDesignations",
    "listClusterNodes",
    "listClusters",
    "putCluster",
    "putClusterNode",
    "putOrganization",
    "putServiceRuntimeSpec",
];

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

/// Answers one request of `method`. `request` is the envelope's `request` member.
pub async fn call(controller: &Controller, method: &str, request: &Value) -> Result<Value, ApiError> {
    if !is_known(method) {
        return Err(ApiError::unknown_method());
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
            let nodes: Vec<Value> = controller
                .list_cluster_nodes(request)
                .await?
                .iter()
                .map(|stored| {
                    json!({
                        "id": stored.node.id,
                        "hostAddresses": stored.node.host_addresses,
                        "session": null,
                        "connected": false,
                    })
                })
                .collect();
            json!({ "nodes": nodes })
        }
        "putServiceRuntimeSpec" => json!({ "spec": controller.put_service_runtime_spec(request).await? }),
        "getServiceRuntimeSpec" => json!({ "spec": controller.get_service_runtime_spec(request).await? }),
        "deleteService" => {
            controller.delete_service(request).await?;
            json!({ "deleted": true })
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
