//! The inventory methods of `07-inventory.md`: organizations, clusters, nodes, service runtime
//! specs. Writes are `admin`; reads every role. `putCluster` and `putServiceRuntimeSpec` are
//! compare-and-swaps on the revision (`revision-conflict` / `spec-revision-mismatch` with
//! `data.current`); `putOrganization` and `putClusterNode`, whose shapes carry no
//! `expectedRevision`, are upserts.
//! `getOrganization` and `getClusterNode` are this project's reads beside the spec's table.

use super::runners::Change;
use super::secrets::Bearer;
use super::sessions::NodeSessionStatus;
use super::{ClusterRequest, Controller, DomainError};
use crate::contract::inventory::{ClusterSpec, NodeSpec, Organization, ServiceRuntimeSpec, ServiceSpecBody};
use crate::contract::{Id, NodeId};
use crate::store::{
    ClusterGuard, MissingKind, NodeBearerHash, NodeWritten, PutOutcome, StoredCluster, StoredNode, StoredOrganization,
};

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

/// One node of `listClusterNodes` or `getClusterNode`: the node and its session status.
#[derive(Debug, Clone)]
pub struct NodeListing {
    /// The node.
    pub node: StoredNode,
    /// Its current session, and whether its socket is connected to this process.
    pub status: NodeSessionStatus,
}

/// `putOrganization`: `{ identity, organization }`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PutOrganizationRequest {
    /// The organization.
    pub organization: Organization,
}

/// `getOrganization`: `{ identity, organizationId }`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GetOrganizationRequest {
    /// The organization.
    pub organization_id: Id,
}

/// `putCluster`: `{ identity, cluster, expectedRevision }`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PutClusterRequest {
    /// The cluster.
    pub cluster: ClusterSpec,
    /// The revision the caller read, `None` to create.
    pub expected_revision: Option<u64>,
}

/// `putClusterNode`: `{ identity, clusterId, node, rotateCredential }`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PutClusterNodeRequest {
    /// The cluster.
    pub cluster_id: Id,
    /// The node.
    pub node: NodeSpec,
    /// Issue a new bearer for an existing node.
    pub rotate_credential: bool,
}

/// `getClusterNode`: `{ identity, clusterId, nodeId }`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GetClusterNodeRequest {
    /// The cluster.
    pub cluster_id: Id,
    /// The node.
    pub node_id: NodeId,
}

/// `putServiceRuntimeSpec`: `{ identity, spec, expectedRevision }`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PutServiceRuntimeSpecRequest {
    /// The spec body.
    pub spec: ServiceSpecBody,
    /// The revision the caller read, `None` to create.
    pub expected_revision: Option<u64>,
}

/// `getServiceRuntimeSpec`: `{ identity, clusterId, serviceId, revision? }`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GetServiceRuntimeSpecRequest {
    /// The cluster.
    pub cluster_id: Id,
    /// The service.
    pub service_id: Id,
    /// The revision to read, `None` for the current one.
    pub revision: Option<u64>,
}

/// `deleteService`: `{ identity, clusterId, serviceId, expectedRevision }`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeleteServiceRequest {
    /// The cluster.
    pub cluster_id: Id,
    /// The service.
    pub service_id: Id,
    /// The current revision of the service's spec.
    pub expected_revision: u64,
}

impl Controller {
    /// `putOrganization` (admin) → `{ organization }`.
    pub async fn put_organization(&self, request: PutOrganizationRequest) -> Result<StoredOrganization, DomainError> {
        let PutOrganizationRequest { organization } = request;
        Ok(self.store.put_organization(&organization).await?)
    }

    /// `getOrganization` (every role) → `{ organization }`.
    pub async fn get_organization(&self, request: GetOrganizationRequest) -> Result<StoredOrganization, DomainError> {
        let GetOrganizationRequest { organization_id } = request;
        self.store.get_organization(&organization_id).await?.ok_or(DomainError::NotFound(MissingKind::Organization))
    }

    /// `putCluster` (admin) → `{ cluster }`.
    pub async fn put_cluster(&self, request: PutClusterRequest) -> Result<StoredCluster, DomainError> {
        let PutClusterRequest { cluster, expected_revision: expected } = request;
        // A cluster holds one kind of ingress designation: a fleet-cutover reference only on a
        // cluster without a Pallet designation (the reference is stored only to keep the two
        // kinds apart; this controller does not run the fleet-cutover flow).
        let guard = match cluster.fleet_cutover_ingress_designation {
            Some(_) => ClusterGuard::NoDesignation,
            None => ClusterGuard::Revision,
        };
        match self.store.put_cluster(&cluster, expected, guard).await? {
            PutOutcome::Written(stored) => {
                self.assignments_changed(&stored.cluster.id, Change::Cluster).await;
                Ok(stored)
            }
            PutOutcome::RevisionConflict { current } => Err(DomainError::RevisionConflict(current)),
            PutOutcome::Missing(what) => Err(DomainError::NotFound(what)),
            PutOutcome::GuardFailed => Err(DomainError::DesignationKindConflict),
        }
    }

    /// `getCluster` (every role) → `{ cluster }`.
    pub async fn get_cluster(&self, request: ClusterRequest) -> Result<StoredCluster, DomainError> {
        self.existing_cluster(&request.cluster_id).await
    }

    /// The cluster `cluster_id`; `not-found` when there is none.
    pub(super) async fn existing_cluster(&self, cluster_id: &Id) -> Result<StoredCluster, DomainError> {
        self.store.get_cluster(cluster_id).await?.ok_or(DomainError::NotFound(MissingKind::Cluster))
    }

    /// `listClusters` (every role): `{ identity }` → `{ clusters }`.
    pub async fn list_clusters(&self) -> Result<Vec<StoredCluster>, DomainError> {
        Ok(self.store.list_clusters().await?)
    }

    /// `putClusterNode` (admin) → `{ node, bearer | null }`.
    pub async fn put_cluster_node(&self, request: PutClusterNodeRequest) -> Result<NodePut, DomainError> {
        let PutClusterNodeRequest { cluster_id, node, rotate_credential: rotate } = request;
        // A new bearer for every write; the store keeps it only when it rotates or creates the
        // node (decided under the cluster's lock), and only a kept one is answered.
        let bearer = Bearer::generate(NODE_BEARER_PREFIX).map_err(|_| DomainError::Internal)?;
        let bearer_hash =
            if rotate { NodeBearerHash::Rotate(bearer.hash()) } else { NodeBearerHash::IfCreated(bearer.hash()) };
        match self.store.put_node(&cluster_id, &node, bearer_hash).await? {
            PutOutcome::Written(NodeWritten { node, created, bearer_stored }) => {
                tracing::info!(cluster = %cluster_id, node = %node.node.id, created, rotated = rotate, "node written");
                self.assignments_changed(&cluster_id, Change::Node(node.node.id.clone())).await;
                Ok(NodePut { node, bearer: bearer_stored.then_some(bearer) })
            }
            PutOutcome::Missing(what) => Err(DomainError::NotFound(what)),
            PutOutcome::RevisionConflict { current } => Err(DomainError::RevisionConflict(current)),
            PutOutcome::GuardFailed => Err(DomainError::Internal),
        }
    }

    /// `listClusterNodes` (every role) → `{ nodes }`: each node with its session status.
    pub async fn list_cluster_nodes(&self, request: ClusterRequest) -> Result<Vec<NodeListing>, DomainError> {
        let ClusterRequest { cluster_id } = request;
        self.existing_cluster(&cluster_id).await?;
        let mut listed = Vec::new();
        for node in self.store.list_nodes(&cluster_id).await? {
            listed.push(self.node_listing(node).await?);
        }
        Ok(listed)
    }

    /// `getClusterNode` (every role) → `{ node }`: one node with its session status. A missing
    /// cluster is `not-found` naming the cluster, a missing node naming the node.
    pub async fn get_cluster_node(&self, request: GetClusterNodeRequest) -> Result<NodeListing, DomainError> {
        let GetClusterNodeRequest { cluster_id, node_id } = request;
        self.existing_cluster(&cluster_id).await?;
        let node = self.store.get_node(&cluster_id, &node_id).await?.ok_or(DomainError::NotFound(MissingKind::Node))?;
        self.node_listing(node).await
    }

    /// A node with its session status.
    async fn node_listing(&self, node: StoredNode) -> Result<NodeListing, DomainError> {
        let status = self.node_session_status(&node.cluster_id, &node.node.id).await?;
        Ok(NodeListing { node, status })
    }

    /// `putServiceRuntimeSpec` (admin) → `{ spec }`.
    pub async fn put_service_runtime_spec(
        &self,
        request: PutServiceRuntimeSpecRequest,
    ) -> Result<ServiceRuntimeSpec, DomainError> {
        let PutServiceRuntimeSpecRequest { spec: body, expected_revision: expected } = request;
        match self.store.put_service_spec(&body, expected).await? {
            PutOutcome::Written(spec) => {
                self.assignments_changed(&spec.body.cluster_id, Change::Service(spec.body.service_id.clone())).await;
                Ok(spec)
            }
            PutOutcome::RevisionConflict { current } => Err(DomainError::SpecRevisionMismatch(current)),
            PutOutcome::Missing(what) => Err(DomainError::NotFound(what)),
            PutOutcome::GuardFailed => Err(DomainError::Internal),
        }
    }

    /// `getServiceRuntimeSpec` (every role) → `{ spec }`.
    pub async fn get_service_runtime_spec(
        &self,
        request: GetServiceRuntimeSpecRequest,
    ) -> Result<ServiceRuntimeSpec, DomainError> {
        let GetServiceRuntimeSpecRequest { cluster_id, service_id, revision } = request;
        self.existing_cluster(&cluster_id).await?;
        self.store
            .get_service_spec(&cluster_id, &service_id, revision)
            .await?
            .ok_or(DomainError::NotFound(MissingKind::Service))
    }

    /// `deleteService` (admin) → `{ deleted: true }`.
    pub async fn delete_service(&self, request: DeleteServiceRequest) -> Result<(), DomainError> {
        let DeleteServiceRequest { cluster_id, service_id, expected_revision: expected } = request;
        match self.store.delete_service(&cluster_id, &service_id, expected).await? {
            PutOutcome::Written(()) => {
                self.assignments_changed(&cluster_id, Change::Service(service_id)).await;
                Ok(())
            }
            PutOutcome::RevisionConflict { current } => Err(DomainError::SpecRevisionMismatch(current)),
            PutOutcome::Missing(what) => Err(DomainError::NotFound(what)),
            PutOutcome::GuardFailed => Err(DomainError::Internal),
        }
    }
}
