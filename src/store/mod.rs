//! The store: one domain-level [`Store`] trait, implemented for PostgreSQL (production) and an
//! embedded SQLite (one box).
//!
//! **Architecture invariant: only this module knows SQL.** Queries are runtime queries
//! (`sqlx::query(...).bind(...)`), so no build needs a live database. Both backends pass one
//! conformance suite (`tests/store_conformance.rs`).
//!
//! **Architecture invariant: no secret value leaves the store except sealed.** The store keeps
//! bearer values only as AEAD ciphertext plus a SHA-256 hash; it never sees plaintext.

use crate::contract::designation::ClusterIngressDesignation;
use crate::contract::inventory::{ClusterSpec, NodeSpec, Organization, ServiceRuntimeSpec, ServiceSpecBody};
use crate::contract::{AuthorityReference, Id, NodeId};
use async_trait::async_trait;
use std::sync::Arc;

mod codec;
#[macro_use]
pub mod registrations;
#[macro_use]
mod shared;
mod postgres;
pub mod relays;
pub mod sessions;
mod sqlite;

pub use postgres::{POSTGRES_POOL_SIZE, PostgresStore};
pub use sqlite::{SQLITE_BUSY_TIMEOUT, SQLITE_POOL_SIZE, SqliteStore};

/// Why the store could not answer. The detail is for the log, never for a caller.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database did not answer or failed the statement.
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// A stored row does not read back as the record it must be.
    #[error("stored data is corrupt: {0}")]
    Corrupt(String),
}

impl From<sqlx::Error> for StoreError {
    fn from(error: sqlx::Error) -> Self {
        // Every pooled PostgreSQL connection is checked before its next use after a failure.
        postgres::pool::note_store_failure();
        StoreError::Unavailable(error.to_string())
    }
}

/// Which backend a store is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// PostgreSQL.
    Postgres,
    /// Embedded SQLite.
    Sqlite,
}

/// An organization with its revision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredOrganization {
    /// The record.
    pub organization: Organization,
    /// Counts up from 1 with every write.
    pub revision: u64,
}

/// A cluster with its revision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredCluster {
    /// The record.
    pub cluster: ClusterSpec,
    /// Counts up from 1 with every write.
    pub revision: u64,
}

/// A node of a cluster. The bearer is kept only as its SHA-256 hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredNode {
    /// The cluster.
    pub cluster_id: Id,
    /// The record.
    pub node: NodeSpec,
    /// SHA-256 of the node's bearer.
    pub bearer_hash: [u8; 32],
    /// Counts up from 1 with every write.
    pub revision: u64,
}

/// The outcome of a compare-and-swap write of an inventory record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PutOutcome<T> {
    /// Written at the new revision.
    Written(T),
    /// `expectedRevision` is not the current revision (`None` when the record does not exist).
    RevisionConflict {
        /// The current revision, or `None` when there is no record.
        current: Option<u64>,
    },
    /// A record this one names (organization, cluster) does not exist.
    Missing(MissingKind),
    /// The cluster holds a Pallet ingress designation, so it cannot take a fleet-cutover one.
    DesignationKindConflict,
}

/// Which named record is missing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MissingKind {
    /// `what: "organization"`.
    Organization,
    /// `what: "cluster"`.
    Cluster,
    /// `what: "service"`.
    Service,
}

impl MissingKind {
    /// The `what` of a `not-found` answer.
    pub fn what(self) -> &'static str {
        match self {
            MissingKind::Organization => "organization",
            MissingKind::Cluster => "cluster",
            MissingKind::Service => "service",
        }
    }
}

/// A secret value sealed with AEAD by the caller; the store never sees plaintext.
#[derive(Clone, PartialEq, Eq)]
pub struct SealedSecret {
    /// Stable across versions.
    pub secret_id: Id,
    /// This version.
    pub secret_version_id: Id,
    /// The AEAD nonce.
    pub nonce: Vec<u8>,
    /// The AEAD ciphertext (with tag).
    pub ciphertext: Vec<u8>,
    /// SHA-256 of the plaintext, for constant-time verification.
    pub value_hash: [u8; 32],
}

impl std::fmt::Debug for SealedSecret {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("SealedSecret")
            .field("secret_id", &self.secret_id)
            .field("secret_version_id", &self.secret_version_id)
            .finish_non_exhaustive()
    }
}

/// What a designation judgement reads: all at one snapshot (see [`Store::commit_designation`]).
#[derive(Debug, Clone)]
pub struct DesignationFacts {
    /// The cluster, if it exists.
    pub cluster: Option<StoredCluster>,
    /// The named service's current runtime spec, if the service exists (and is not deleted).
    pub service: Option<ServiceRuntimeSpec>,
    /// The cluster's current Pallet ingress designation.
    pub current: Option<ClusterIngressDesignation>,
}

/// Why a designation compare-and-swap was refused, decided by the domain from the facts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DesignationRefusal {
    /// `not-found`.
    NotFound(MissingKind),
    /// `runtime-mismatch`, with the cluster's current runtime reference.
    RuntimeMismatch(crate::contract::designation::ClusterRuntimeReference),
    /// `designation-kind-conflict`.
    KindConflict,
    /// `spec-revision-mismatch`, with the current revision.
    SpecRevisionMismatch(u64),
    /// `designation-conflict`, with the current reference or `None`.
    DesignationConflict(Option<AuthorityReference>),
}

/// What an accepted designation writes, atomically.
#[derive(Debug, Clone)]
pub struct DesignationWrite {
    /// The new generation.
    pub designation: ClusterIngressDesignation,
    /// The new bearer, sealed.
    pub secret: SealedSecret,
    /// The mutation id of the request, for replay.
    pub mutation_id: Id,
    /// The request's canonical bytes, for replay comparison.
    pub request_canonical: String,
}

/// The decision the domain makes from the facts. Pure: the store may ask twice (once on the
/// optimistic path, once more under the cluster's lock when a fact changed in between).
pub type DesignationJudge<'a> =
    dyn Fn(&DesignationFacts) -> Result<DesignationWrite, DesignationRefusal> + Send + Sync + 'a;

/// The outcome of [`Store::commit_designation`].
// The accepted answer is large and returned once per request; boxing it would only burden callers.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone)]
pub enum DesignationCommit {
    /// Written and committed: the designation and the service spec it was prepared against.
    Accepted {
        /// The committed generation.
        designation: ClusterIngressDesignation,
        /// The spec at `preparedSpecRevision`.
        spec: ServiceRuntimeSpec,
    },
    /// The judge refused; nothing was written.
    Refused(DesignationRefusal),
    /// Another request with this mutation id committed first; answer it as a replay.
    MutationExists,
}

/// A designation mutation recorded for replay.
#[derive(Debug, Clone)]
pub struct RecordedMutation {
    /// The canonical bytes of the request that produced it.
    pub request_canonical: String,
    /// The designation it produced.
    pub designation: ClusterIngressDesignation,
    /// The spec at that designation's `preparedSpecRevision`.
    pub spec: ServiceRuntimeSpec,
}

/// The store, as the domain sees it. Methods name domain operations, not tables.
#[async_trait]
pub trait Store:
    relays::RelayStore + sessions::SessionStore + registrations::RegistrationStore + Send + Sync + 'static
{
    /// Which backend this is.
    fn backend(&self) -> Backend;

    /// Applies every pending migration.
    async fn migrate(&self) -> Result<(), StoreError>;

    /// True when the database answers and every migration of this build is applied.
    async fn is_ready(&self) -> Result<bool, StoreError>;

    /// Creates or replaces an organization.
    async fn put_organization(&self, organization: &Organization) -> Result<StoredOrganization, StoreError>;

    /// One organization.
    async fn get_organization(&self, id: &Id) -> Result<Option<StoredOrganization>, StoreError>;

    /// Creates (`expected_revision = None`) or replaces a cluster by compare-and-swap.
    async fn put_cluster(
        &self,
        cluster: &ClusterSpec,
        expected_revision: Option<u64>,
    ) -> Result<PutOutcome<StoredCluster>, StoreError>;

    /// One cluster.
    async fn get_cluster(&self, id: &Id) -> Result<Option<StoredCluster>, StoreError>;

    /// Every cluster, sorted by id.
    async fn list_clusters(&self) -> Result<Vec<StoredCluster>, StoreError>;

    /// Creates or updates a node. `new_bearer_hash` replaces the bearer hash; it is required
    /// when the node does not exist yet. Answers the node and whether it was created.
    /// `Missing(Cluster)` when the cluster does not exist; creating a node without a bearer hash
    /// is a programming error, answered as [`StoreError::Corrupt`] with nothing written.
    async fn put_node(
        &self,
        cluster_id: &Id,
        node: &NodeSpec,
        new_bearer_hash: Option<[u8; 32]>,
    ) -> Result<PutOutcome<(StoredNode, bool)>, StoreError>;

    /// One node.
    async fn get_node(&self, cluster_id: &Id, node_id: &NodeId) -> Result<Option<StoredNode>, StoreError>;

    /// The nodes of a cluster, sorted by id.
    async fn list_nodes(&self, cluster_id: &Id) -> Result<Vec<StoredNode>, StoreError>;

    /// Writes a new revision of a service spec by compare-and-swap on the current revision
    /// (`None` to create). Every revision stays readable.
    ///
    /// `Missing(Cluster)` when `body.cluster_id` does not exist. Creating answers revision 1, or
    /// continues the numbering of a deleted service; it is a `RevisionConflict` with the current
    /// revision when the service exists. Replacing a service that does not exist (or is deleted)
    /// is a `RevisionConflict { current: None }`.
    async fn put_service_spec(
        &self,
        body: &ServiceSpecBody,
        expected_revision: Option<u64>,
    ) -> Result<PutOutcome<ServiceRuntimeSpec>, StoreError>;

    /// The current spec of a service (`revision = None`; `None` when the service is deleted) or
    /// that revision (also of a deleted service).
    async fn get_service_spec(
        &self,
        cluster_id: &Id,
        service_id: &Id,
        revision: Option<u64>,
    ) -> Result<Option<ServiceRuntimeSpec>, StoreError>;

    /// Deletes a service by compare-and-swap on its current revision. `Missing(Cluster)` or
    /// `Missing(Service)` (also for a deleted service); `RevisionConflict` with the current one.
    async fn delete_service(
        &self,
        cluster_id: &Id,
        service_id: &Id,
        expected_revision: u64,
    ) -> Result<PutOutcome<()>, StoreError>;

    /// The mutation recorded for `mutation_id` in the cluster, if any.
    async fn find_designation_mutation(
        &self,
        cluster_id: &Id,
        mutation_id: &Id,
    ) -> Result<Option<RecordedMutation>, StoreError>;

    /// The cluster's current Pallet ingress designation.
    async fn current_designation(&self, cluster_id: &Id) -> Result<Option<ClusterIngressDesignation>, StoreError>;

    /// The cluster's current Pallet ingress designation, read together with the cluster's
    /// existence in one query: `None` when the cluster does not exist, `Some(None)` when it holds
    /// no designation.
    async fn cluster_designation(
        &self,
        cluster_id: &Id,
    ) -> Result<Option<Option<ClusterIngressDesignation>>, StoreError>;

    /// The designation chain of a cluster, oldest first, from `from_generation`, at most `limit`.
    async fn list_designations(
        &self,
        cluster_id: &Id,
        from_generation: u64,
        limit: u32,
    ) -> Result<Vec<ClusterIngressDesignation>, StoreError>;

    /// The designation compare-and-swap: read the facts at one snapshot, let `judge` decide, and
    /// write everything it decides, in one transaction that commits only while no fact it read has
    /// been written since (the cluster's facts version), or nothing; when a fact was written in
    /// between, lock the cluster, read the facts again and let `judge` decide again. Two racing
    /// calls with the same expected designation end with exactly one write, across processes.
    ///
    /// A mutation id already recorded for the cluster answers `MutationExists` without asking the
    /// judge. For an unknown cluster the judge is asked with `cluster: None` (and nothing can be
    /// written). An accepted write must be the next generation of the cluster's chain for this
    /// service and mutation, be prepared against the service's current spec (which the answer
    /// carries), name the sealed secret, and carry its true digest; otherwise nothing is written
    /// and the answer is [`StoreError::Corrupt`] (a bug in the judge).
    async fn commit_designation(
        &self,
        cluster_id: &Id,
        service_id: &Id,
        mutation_id: &Id,
        judge: &DesignationJudge<'_>,
    ) -> Result<DesignationCommit, StoreError>;

    /// One sealed secret version.
    async fn get_secret(&self, secret_id: &Id, secret_version_id: &Id) -> Result<Option<SealedSecret>, StoreError>;
}

/// A shared store handle.
pub type SharedStore = Arc<dyn Store>;

/// Opens the store named by `url` and applies every pending migration: PostgreSQL for
/// `postgres://…` and `postgresql://…`, embedded SQLite for `sqlite:…` (`sqlite://path`, created
/// if missing, or `sqlite::memory:`). No error names the URL, which may hold a password.
pub async fn open(url: &str) -> Result<SharedStore, StoreError> {
    open_with(url, OpenOptions::default()).await
}

/// How [`open_with`] opens a store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenOptions {
    /// The most connections the process keeps to PostgreSQL (ignored by SQLite).
    pub postgres_max_connections: u32,
}

impl Default for OpenOptions {
    fn default() -> Self {
        OpenOptions { postgres_max_connections: POSTGRES_POOL_SIZE }
    }
}

/// [`open`] with explicit [`OpenOptions`].
pub async fn open_with(url: &str, options: OpenOptions) -> Result<SharedStore, StoreError> {
    let store: SharedStore = if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        Arc::new(PostgresStore::connect_with_pool_size(url, options.postgres_max_connections).await?)
    } else if url.starts_with("sqlite:") {
        Arc::new(SqliteStore::connect(url).await?)
    } else {
        return Err(StoreError::Unavailable(
            "the store URL must start with postgres://, postgresql:// or sqlite:".into(),
        ));
    };
    store.migrate().await?;
    Ok(store)
}
