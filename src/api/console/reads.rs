//! What each console page reads, and from where: every read is a call of the method table
//! ([`methods::call`]) with the session's identity as `identity`, so the identity is verified and
//! its role checked by the same code as an API call, on every page and every live refresh. The
//! one read the table has no method for, a node's assignments with their reported states, is
//! [`Controller::node_assignment_reports`], called after [`Controller::authorize`] with
//! `Access::Read`, the check every read method of the table makes.

use super::pages::{self, ClusterView, NodeView, ServiceView};
use super::sessions::Session;
use crate::api::error::ApiError;
use crate::api::methods::{self, name};
use crate::contract::primitives::is_id;
use crate::contract::{Id, NodeId};
use crate::domain::Controller;
use crate::domain::assignments::AssignmentReport;
use crate::domain::identity::{Access, Caller};
use maud::Markup;
use serde_json::{Value, json};

/// A console page, by its path under `/console`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Page {
    /// `/console`: every cluster.
    Clusters,
    /// `/console/clusters/{cluster}`.
    Cluster(String),
    /// `/console/clusters/{cluster}/services/{service}`.
    Service(String, String),
    /// `/console/clusters/{cluster}/nodes/{node}`.
    Node(String, String),
    /// `/console/clusters/{cluster}/volumes`.
    Volumes(String),
}

impl Page {
    /// The page at `path` (the part after `/console`), or `None` for no page or an id that is not
    /// an id.
    pub fn parse(path: &str) -> Option<Page> {
        let segments: Vec<&str> = path.split('/').filter(|segment| !segment.is_empty()).collect();
        let id = |segment: &&str| is_id(segment).then(|| (*segment).to_owned());
        Some(match segments.as_slice() {
            [] | ["clusters"] => Page::Clusters,
            ["clusters", cluster] => Page::Cluster(id(cluster)?),
            ["clusters", cluster, "volumes"] => Page::Volumes(id(cluster)?),
            ["clusters", cluster, "services", service] => Page::Service(id(cluster)?, id(service)?),
            ["clusters", cluster, "nodes", node] => Page::Node(id(cluster)?, id(node)?),
            _ => return None,
        })
    }

    /// The page's path under `/console`.
    pub fn path(&self) -> String {
        match self {
            Page::Clusters => "/".to_owned(),
            Page::Cluster(cluster) => format!("/clusters/{cluster}"),
            Page::Volumes(cluster) => format!("/clusters/{cluster}/volumes"),
            Page::Service(cluster, service) => format!("/clusters/{cluster}/services/{service}"),
            Page::Node(cluster, node) => format!("/clusters/{cluster}/nodes/{node}"),
        }
    }
}

/// Calls the read `method` of the table with `request` and the session's identity.
async fn read(controller: &Controller, session: &Session, method: &str, mut request: Value) -> Result<Value, ApiError> {
    request["identity"] = session.identity.clone();
    methods::call(controller, method, &request).await
}

fn list(mut answer: Value, key: &str) -> Vec<Value> {
    match answer[key].take() {
        Value::Array(items) => items,
        _ => Vec::new(),
    }
}

fn not_found() -> ApiError {
    ApiError::new("not found", json!({ "code": "not-found" }))
}

/// The node's assignments with their states, read as [`Controller::node_assignment_reports`]
/// after the same authorization as a read method.
async fn assignments(
    controller: &Controller,
    caller: &Caller,
    cluster_id: &str,
    node_id: &str,
) -> Result<Vec<AssignmentReport>, ApiError> {
    let cluster_id = Id::parse(cluster_id).ok_or_else(not_found)?;
    let node_id = NodeId::parse(node_id).ok_or_else(not_found)?;
    Ok(controller.node_assignment_reports(caller, &cluster_id, &node_id).await?)
}

/// How many generations of the designation chain the cluster page shows, newest first.
pub const CHAIN_SHOWN: u64 = 20;

/// The newest [`CHAIN_SHOWN`] generations of the cluster's designation chain, oldest first: the
/// current designation (`getClusterIngressDesignation`), then the page of
/// `listClusterIngressDesignations` that ends with it.
async fn designation_chain(
    controller: &Controller,
    session: &Session,
    cluster_id: &str,
) -> Result<Vec<Value>, ApiError> {
    let request = json!({ "clusterId": cluster_id });
    let current =
        read(controller, session, name::GET_CLUSTER_INGRESS_DESIGNATION, request).await?["designation"].take();
    let Some(generation) = current["generation"].as_u64() else { return Ok(Vec::new()) };
    let from = generation.saturating_sub(CHAIN_SHOWN - 1).max(1);
    let page = read(
        controller,
        session,
        name::LIST_CLUSTER_INGRESS_DESIGNATIONS,
        json!({ "clusterId": cluster_id, "fromGeneration": from, "limit": CHAIN_SHOWN }),
    )
    .await?;
    let mut chain = list(page, "designations");
    chain.retain(|designation| designation["generation"].as_u64() <= Some(generation));
    if chain.last().map(|last| &last["generation"]) != Some(&current["generation"]) {
        chain.push(current);
    }
    Ok(chain)
}

/// Reads what `page` shows and renders its `main`, with the page's title.
pub async fn render(controller: &Controller, session: &Session, page: &Page) -> Result<(String, Markup), ApiError> {
    let now_ms = controller.clock.now_ms();
    match page {
        Page::Clusters => {
            let clusters = list(read(controller, session, name::LIST_CLUSTERS, json!({})).await?, "clusters");
            Ok(("Clusters".to_owned(), pages::clusters(&clusters)))
        }
        Page::Cluster(cluster_id) => {
            let request = json!({ "clusterId": cluster_id });
            let cluster = read(controller, session, name::GET_CLUSTER, request.clone()).await?["cluster"].take();
            let view = ClusterView {
                cluster,
                statuses: list(
                    read(controller, session, name::LIST_SERVICE_RUNTIME_STATUSES, request.clone()).await?,
                    "statuses",
                ),
                nodes: list(read(controller, session, name::LIST_CLUSTER_NODES, request.clone()).await?, "nodes"),
                designations: designation_chain(controller, session, cluster_id).await?,
                relays: read(controller, session, name::LIST_CLUSTER_RELAYS, request.clone()).await?,
                registrations: list(
                    read(controller, session, name::LIST_CLUSTER_INGRESS_REGISTRATIONS, request.clone()).await?,
                    "registrations",
                ),
                routes: read(controller, session, name::GET_CLUSTER_INGRESS_ROUTES, request).await?["table"].take(),
                now_ms,
            };
            Ok((format!("Cluster {cluster_id}"), pages::cluster(&view)))
        }
        Page::Service(cluster_id, service_id) => {
            let request = json!({ "clusterId": cluster_id, "serviceId": service_id });
            let spec = read(controller, session, name::GET_SERVICE_RUNTIME_SPEC, request.clone()).await?["spec"].take();
            let status = read(controller, session, name::GET_SERVICE_RUNTIME_STATUS, request).await?["status"].take();
            let cluster = json!({ "clusterId": cluster_id });
            let nodes = list(read(controller, session, name::LIST_CLUSTER_NODES, cluster.clone()).await?, "nodes");
            let caller = controller.authorize(Some(&session.identity), Access::Read)?;
            let mut per_node = Vec::new();
            for node in &nodes {
                let node_id = node["id"].as_str().unwrap_or_default();
                let mut reports = assignments(controller, &caller, cluster_id, node_id).await?;
                reports.retain(|report| report.service_id.as_str() == service_id.as_str());
                per_node.push((node_id.to_owned(), reports));
            }
            let mut claims =
                list(read(controller, session, name::LIST_RUNTIME_LOCAL_STORAGE_CLAIMS, cluster).await?, "claims");
            claims.retain(|claim| claim["claim"]["serviceId"].as_str() == Some(service_id.as_str()));
            let view =
                ServiceView { cluster_id: cluster_id.clone(), spec, status, assignments: per_node, claims, now_ms };
            Ok((format!("Service {service_id}"), pages::service(&view)))
        }
        Page::Node(cluster_id, node_id) => {
            let request = json!({ "clusterId": cluster_id, "nodeId": node_id });
            let node = read(controller, session, name::GET_CLUSTER_NODE, request.clone()).await?["node"].take();
            let mut projection =
                read(controller, session, name::GET_RUNTIME_NETWORK_PROJECTION_FOR_NODE, request).await?;
            let caller = controller.authorize(Some(&session.identity), Access::Read)?;
            let view = NodeView {
                cluster_id: cluster_id.clone(),
                node,
                assignments: assignments(controller, &caller, cluster_id, node_id).await?,
                projection: projection["projection"]["payload"].take(),
                applied: projection["applied"].take(),
                now_ms,
            };
            Ok((format!("Node {node_id}"), pages::node(&view)))
        }
        Page::Volumes(cluster_id) => {
            let request = json!({ "clusterId": cluster_id });
            // The cluster is read first, so an unknown cluster is "not found", not an empty list.
            read(controller, session, name::GET_CLUSTER, request.clone()).await?;
            let claims =
                list(read(controller, session, name::LIST_RUNTIME_LOCAL_STORAGE_CLAIMS, request).await?, "claims");
            Ok((format!("Volumes of {cluster_id}"), pages::volumes(cluster_id, &claims, now_ms)))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_name_pages_and_nothing_else() {
        for (path, page) in [
            ("", Some(Page::Clusters)),
            ("/", Some(Page::Clusters)),
            ("/clusters/c1", Some(Page::Cluster("c1".to_owned()))),
            ("/clusters/c1/volumes", Some(Page::Volumes("c1".to_owned()))),
            ("/clusters/c1/services/web", Some(Page::Service("c1".to_owned(), "web".to_owned()))),
            ("/clusters/c1/nodes/node-1", Some(Page::Node("c1".to_owned(), "node-1".to_owned()))),
            ("/clusters/c1/other", None),
            ("/clusters/%3Cscript%3E", None),
            ("/clusters/<x>/volumes", None),
        ] {
            assert_eq!(Page::parse(path), page, "{path}");
            if let Some(page) = page {
                assert_eq!(Page::parse(&page.path()), Some(page));
            }
        }
    }
}
