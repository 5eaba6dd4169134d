//! The inventory methods of `07-inventory.md`: organizations, clusters, nodes, service runtime
//! specs. Writes are `admin`; reads every role. Replacing writes are compare-and-swaps.

use super::identity::Access;
use super::secrets::Bearer;
use super::{Controller, DomainError, id_member, request_members};
use crate::contract::inventory::{
    ServiceRuntimeSpec, parse_cluster, parse_node, parse_organization, parse_service_spec_body,
};
use crate::contract::reader;
use crate::store::{MissingKind, PutOutcome, StoredCluster, StoredNode, StoredOrganization};
use serde_json::{Map, Value};

/// The prefix of node bearers (`sznb_` + 256 random bits).
pub const NODE_BEARER_PREFIX: &str = "sznb_";

/// A node written by `putClusterNode`, with its bearer when one was issued. The bearer is shown
/// once, in this answer, and stored only as a hash.
#[derive(Debug)]
pub struct NodePut {
    /// The node.
    pub node: StoredNode,
    /// The new bearer, when the node was created or its credential rotated.
    pub bearer: Option<Bearer>,
}

fn expected_revision(request: &Map<String, Value>) -> Result<Option<u64>, DomainError> {
    reader::nullable(&request["expectedRevision"], reader::counter)
        .map_err(|_| DomainError::RequestInvalid(vec!["request expectedRevision must be null or a counter".to_owned()]))
}

fn member<'a>(request: &'a Map<String, Value>, key: &str) -> &'a Value {
    request.get(key).unwrap_or(&Value::Null)
}

impl Controller {
    /// `putOrganization`: `{ identity, organization }` → `{ organization }`.
    pub async fn put_organization(&self, request: &Map<String, Value>) -> Result<StoredOrganization, DomainError> {
        self.authorize(request, Access::Admin)?;
        request_members(request, &["organization"], &[])?;
        let organization = parse_organization(member(request, "organization")).map_err(DomainError::RequestInvalid)?;
        Ok(self.store.put_organization(&organization).await?)
    }

    /// `putCluster`: `{ identity, cluster, expectedRevision }` → `{ cluster }`.
    pub async fn put_cluster(&self, request: &Map<String, Value>) -> Result<StoredCluster, DomainError> {
        self.authorize(request, Access::Admin)?;
        request_members(request, &["cluster", "expectedRevision"], &[])?;
        let cluster = parse_cluster(member(request, "cluster")).map_err(DomainError::RequestInvalid)?;
        let expected = expected_revision(request)?;
        match self.store.put_cluster(&cluster, expected).await? {
            PutOutcome::Written(stored) => {
                self.assignments_changed(&stored.cluster.id).await;
                Ok(stored)
            }
            PutOutcome::RevisionConflict { current } => Err(DomainError::RevisionConflict(current)),
            PutOutcome::Missing(what) => Err(DomainError::NotFound(what)),
            PutOutcome::DesignationKindConflict => Err(DomainError::DesignationKindConflict),
        }
    }

    /// `getCluster`: `{ identity, clusterId }` → `{ cluster }`.
    pub async fn get_cluster(&self, request: &Map<String, Value>) -> Result<StoredCluster, DomainError> {
        self.authorize(request, Access::Read)?;
        request_members(request, &["clusterId"], &[])?;
        let cluster_id = id_member(request, "clusterId")?;
        self.store.get_cluster(&cluster_id).await?.ok_or(DomainError::NotFound(MissingKind::Cluster))
    }

    /// `listClusters`: `{ identity }` → `{ clusters }`.
    pub async fn list_clusters(&self, request: &Map<String, Value>) -> Result<Vec<StoredCluster>, DomainError> {
        self.authorize(request, Access::Read)?;
        request_members(request, &[], &[])?;
        Ok(self.store.list_clusters().await?)
    }

    /// `putClusterNode`: `{ identity, clusterId, node, rotateCredential }` → `{ node, bearer | null }`.
    pub async fn put_cluster_node(&self, request: &Map<String, Value>) -> Result<NodePut, DomainError> {
        self.authorize(request, Access::Admin)?;
        request_members(request, &["clusterId", "node", "rotateCredential"], &[])?;
        let cluster_id = id_member(request, "clusterId")?;
        let node = parse_node(member(request, "node")).map_err(DomainError::RequestInvalid)?;
        let rotate = reader::boolean(member(request, "rotateCredential"))
            .map_err(|_| DomainError::RequestInvalid(vec!["request rotateCredential must be a boolean".to_owned()]))?;
        let existing = self.store.get_node(&cluster_id, &node.id).await?;
        let bearer = if rotate || existing.is_none() {
            Some(Bearer::generate(NODE_BEARER_PREFIX).map_err(|_| DomainError::Internal)?)
        } else {
            None
        };
        match self.store.put_node(&cluster_id, &node, bearer.as_ref().map(Bearer::hash)).await? {
            PutOutcome::Written((node, created)) => {
                tracing::info!(cluster = %cluster_id, node = %node.node.id, created, rotated = rotate, "node written");
                self.assignments_changed(&cluster_id).await;
                Ok(NodePut { node, bearer })
            }
            PutOutcome::Missing(what) => Err(DomainError::NotFound(what)),
            PutOutcome::RevisionConflict { current } => Err(DomainError::RevisionConflict(current)),
            PutOutcome::DesignationKindConflict => Err(DomainError::Internal),
        }
    }

    /// `listClusterNodes`: `{ identity, clusterId }` → `{ nodes }`.
    pub async fn list_cluster_nodes(&self, request: &Map<String, Value>) -> Result<Vec<StoredNode>, DomainError> {
        self.authorize(request, Access::Read)?;
        request_members(request, &["clusterId"], &[])?;
        let cluster_id = id_member(request, "clusterId")?;
        self.store.get_cluster(&cluster_id).await?.ok_or(DomainError::NotFound(MissingKind::Cluster))?;
        Ok(self.store.list_nodes(&cluster_id).await?)
    }

    /// `putServiceRuntimeSpec`: `{ identity, spec, expectedRevision }` → `{ spec }`.
    pub async fn put_service_runtime_spec(
        &self,
        request: &Map<String, Value>,
    ) -> Result<ServiceRuntimeSpec, DomainError> {
        self.authorize(request, Access::Admin)?;
        request_members(request, &["spec", "expectedRevision"], &[])?;
        let body = parse_service_spec_body(member(request, "spec")).map_err(DomainError::RequestInvalid)?;
        let expected = expected_revision(request)?;
        match self.store.put_service_spec(&body, expected).await? {
            PutOutcome::Written(spec) => {
                self.assignments_changed(&spec.body.cluster_id).await;
                Ok(spec)
            }
            PutOutcome::RevisionConflict { current } => Err(DomainError::SpecRevisionMismatch(current)),
            PutOutcome::Missing(what) => Err(DomainError::NotFound(what)),
            PutOutcome::DesignationKindConflict => Err(DomainError::Internal),
        }
    }

    /// `getServiceRuntimeSpec`: `{ identity, clusterId, serviceId, revision? }` → `{ spec }`.
    pub async fn get_service_runtime_spec(
        &self,
        request: &Map<String, Value>,
    ) -> Result<ServiceRuntimeSpec, DomainError> {
        self.authorize(request, Access::Read)?;
        request_members(request, &["clusterId", "serviceId"], &["revision"])?;
        let cluster_id = id_member(request, "clusterId")?;
        let service_id = id_member(request, "serviceId")?;
        let revision = request
            .get("revision")
            .map(reader::counter)
            .transpose()
            .map_err(|_| DomainError::RequestInvalid(vec!["request revision must be a counter".to_owned()]))?;
        self.store.get_cluster(&cluster_id).await?.ok_or(DomainError::NotFound(MissingKind::Cluster))?;
        self.store
            .get_service_spec(&cluster_id, &service_id, revision)
            .await?
            .ok_or(DomainError::NotFound(MissingKind::Service))
    }

    /// `deleteService`: `{ identity, clusterId, serviceId, expectedRevision }` → `{ deleted: true }`.
    pub async fn delete_service(&self, request: &Map<String, Value>) -> Result<(), DomainError> {
        self.authorize(request, Access::Admin)?;
        request_members(request, &["clusterId", "serviceId", "expectedRevision"], &[])?;
        let cluster_id = id_member(request, "clusterId")?;
        let service_id = id_member(request, "serviceId")?;
        let expected = reader::counter(member(request, "expectedRevision"))
            .map_err(|_| DomainError::RequestInvalid(vec!["request expectedRevision must be a counter".to_owned()]))?;
        match self.store.delete_service(&cluster_id, &service_id, expected).await? {
            PutOutcome::Written(()) => {
                self.assignments_changed(&cluster_id).await;
                Ok(())
            }
            PutOutcome::RevisionConflict { current } => Err(DomainError::SpecRevisionMismatch(current)),
            PutOutcome::Missing(what) => Err(DomainError::NotFound(what)),
            PutOutcome::DesignationKindConflict => Err(DomainError::Internal),
        }
    }
}
