//! The decisions: who may call what, the designation compare-and-swap, inventory writes.
//!
//! **Architecture invariant: the domain knows neither HTTP nor SQL.** Its public methods take
//! typed requests (structs of validated contract types, defined next to the method that takes
//! them and parsed by `api`) and the principal they need (a verified [`Caller`], a checked node
//! session, a [`relays::RelayPrincipal`]); they answer typed values, which `api` alone turns into
//! wire JSON. They decide with the pure `contract`, and read and write through the
//! [`Store`](crate::store::Store) trait. Every failure is a [`DomainError`], which `api` alone
//! turns into an envelope's `error.data`. Requests the controller sends down a node's socket are
//! the exception today: `signals` builds the `pushRuntimeChanged` request, and `runners` sends
//! the `applyRuntimeLocalStorageClaim` request as JSON and reads the node's answer from JSON.

pub mod assignments;
pub mod designation;
pub mod identity;
pub mod inventory;
pub mod network;
pub mod plan;
pub mod projections;
pub mod registration;
pub mod relays;
pub mod retention;
pub mod runners;
pub mod secrets;
pub mod service_status;
pub mod sessions;
pub mod signals;
pub mod signing;
pub mod storage_claims;
pub mod version;

use crate::contract::designation::ClusterRuntimeReference;
use crate::contract::session::{ControllerKind, ControllerReference};
use crate::contract::{AuthorityReference, Id};
use crate::keys::ControllerKeys;
use crate::store::{MissingKind, SharedStore, StoreError};
use identity::{Access, Caller, IdentityVerifier};
use serde_json::Value;
pub use signing::ControllerSigningKey;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// The time source, in milliseconds since the Unix epoch. Tests pass a fixed or stepped clock.
pub trait Clock: Send + Sync + 'static {
    /// Now.
    fn now_ms(&self) -> u64;
}

/// The system clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> u64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|elapsed| elapsed.as_millis() as u64)
            .unwrap_or(0)
    }
}

/// Every refusal and failure of a domain operation. `api` maps each to its wire code.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DomainError {
    /// `identity-refused`.
    #[error("identity refused")]
    IdentityRefused,
    /// `identity-forbidden`.
    #[error("identity forbidden")]
    IdentityForbidden,
    /// `request-invalid` with every violation named.
    #[error("request invalid")]
    RequestInvalid(Vec<String>),
    /// `not-found` with `what`.
    #[error("{} not found", .0.what())]
    NotFound(MissingKind),
    /// `mutation-conflict`: the mutation id was used with other content.
    #[error("mutation conflict")]
    MutationConflict,
    /// `runtime-mismatch` with the cluster's current runtime.
    #[error("runtime mismatch")]
    RuntimeMismatch(ClusterRuntimeReference),
    /// `designation-kind-conflict`.
    #[error("designation kind conflict")]
    DesignationKindConflict,
    /// `spec-revision-mismatch` with the current revision (`None`: the service does not exist).
    #[error("spec revision mismatch")]
    SpecRevisionMismatch(Option<u64>),
    /// `revision-conflict` with the current revision of a cluster.
    #[error("revision conflict")]
    RevisionConflict(Option<u64>),
    /// `designation-conflict` with the current reference.
    #[error("designation conflict")]
    DesignationConflict(Option<AuthorityReference>),
    /// `address-plan-change-refused` with every violation: an address plan write that
    /// `admitRuntimeNetworkAddressPlanChange` refuses, or that would strand a live lease.
    #[error("address plan change refused")]
    AddressPlanChangeRefused(Vec<String>),
    /// `relay-connection-lost`: a known connection token whose connection is superseded or
    /// expired; the relay must connect again.
    #[error("relay connection lost")]
    RelayConnectionLost,
    /// `principal-refused` without detail: a node method over HTTP, or `openRuntimeSession`
    /// with an unknown node or a wrong bearer (never saying which); a relay method without a
    /// connection token or with an unknown one, or `connectClusterRelay` with an unknown cluster
    /// or relay or a wrong bearer (never saying which).
    #[error("principal refused")]
    PrincipalRefused,
    /// `principal-refused` with `current`: a node method whose session is not the socket's
    /// current session (`None`: the socket opened none, or the node has none).
    #[error("session not current")]
    SessionNotCurrent(Option<Box<crate::contract::session::RuntimeSessionReference>>),
    /// `not-found` with `what: "assignment"`: the referenced assignment is not in the node's
    /// current set (or was never issued to it).
    #[error("assignment not found")]
    AssignmentNotFound,
    /// `registerClusterIngress` step 1: `IProtocolRefusal` with the controller's own offer.
    #[error("protocol refused")]
    ProtocolRefused,
    /// `registerClusterIngress` steps 2–8: `IClusterIngressRegistrationRefusal`.
    #[error("cluster ingress registration refused: {}", .0.reason())]
    RegistrationRefused(crate::contract::registration::ClusterIngressRegistrationRefusal),
    /// `store-unavailable`, with what the store said (logged where the error is answered, never
    /// sent).
    #[error("store unavailable: {0}")]
    StoreUnavailable(String),
    /// Stored data that does not read back (a broken row, a digest that does not match): logged
    /// where the error is answered, answered as `internal-error` without detail.
    #[error("stored data is corrupt: {0}")]
    StoreCorrupt(String),
    /// This process does not hold the store's signing key in use (after `cloudly keys rotate`,
    /// until its data directory holds the new key): it signs nothing. Logged; answered as
    /// `internal-error` without detail.
    #[error("signing key unavailable")]
    SigningKeyUnavailable,
    /// A failure of the controller itself (no randomness, a record it wrote that does not read
    /// back); logged where it happens, answered as `internal-error` without detail.
    #[error("internal error")]
    Internal,
}

impl From<StoreError> for DomainError {
    fn from(error: StoreError) -> Self {
        match error {
            StoreError::Unavailable(detail) => DomainError::StoreUnavailable(detail),
            StoreError::Corrupt(detail) => DomainError::StoreCorrupt(detail),
        }
    }
}

/// Settings of the decisions, from configuration.
#[derive(Debug, Clone)]
pub struct ControllerSettings {
    /// This controller's id: `controller.id` of the sessions, assignments and projections it
    /// issues (`controller.kind` is always `cloudly`). Controllers sharing a database share it.
    pub controller_id: Id,
    /// How long a relay connection stays elected without a connect or heartbeat.
    pub relay_lease_ms: u64,
    /// How long `getClusterIngressRouteTable` holds a call whose `knownRevision` is current.
    pub route_table_long_poll_ms: u64,
    /// The `retryAfterMs` of each `registerClusterIngress` refusal reason.
    pub registration_retry_after: registration::RetryAfterTable,
    /// The shortest time between the starts of two background assignment reconciles of one
    /// cluster: a burst of designations is re-issued once per interval, a lone one at once.
    pub assignment_reconcile_interval_ms: u64,
    /// The most background assignment reconciles run at once, over all clusters (at least 1).
    pub assignment_reconcile_workers: usize,
    /// How long registrations and superseded relay connections are kept (`retention`).
    pub retention: retention::RetentionSettings,
    /// The first delay before a claim push is retried (after a protocol fault, a missing answer
    /// or `import-required`); it doubles with every retry of one generation.
    pub storage_claim_retry_ms: u64,
    /// The longest delay between two pushes of one claim generation.
    pub storage_claim_retry_max_ms: u64,
    /// How long a claim push waits for the node's answer.
    pub storage_claim_push_timeout_ms: u64,
    /// The most claim pushes in flight at once, over all nodes.
    pub storage_claim_push_concurrency: usize,
    /// How often a connected node's claims are read again without a wake (a missed signal).
    pub storage_claim_sweep_ms: u64,
    /// How often this process checks the store's signing key in use without a signal (`signing`).
    pub signing_key_check_ms: u64,
    /// How often the server issues every cluster's projections without being told
    /// ([`Controller::sweep_projections`]).
    pub projection_sweep_ms: u64,
    /// How often the server runs the full pass over every cluster
    /// ([`Controller::full_pass_all`]), in ms.
    pub reconcile_full_pass_ms: u64,
}

impl Default for ControllerSettings {
    fn default() -> Self {
        ControllerSettings {
            controller_id: Id::parse("cloudly").expect("a valid id"),
            relay_lease_ms: 30_000,
            route_table_long_poll_ms: 25_000,
            registration_retry_after: registration::RetryAfterTable::default(),
            assignment_reconcile_interval_ms: 100,
            assignment_reconcile_workers: 2,
            retention: retention::RetentionSettings::default(),
            storage_claim_retry_ms: 1_000,
            storage_claim_retry_max_ms: 60_000,
            storage_claim_push_timeout_ms: 10_000,
            storage_claim_push_concurrency: 64,
            storage_claim_sweep_ms: 30_000,
            signing_key_check_ms: 10_000,
            projection_sweep_ms: 60_000,
            reconcile_full_pass_ms: 300_000,
        }
    }
}

/// The controller: store, keys, identity verifier and clock, shared by every request.
pub struct Controller {
    /// The store.
    pub store: SharedStore,
    /// The controller's keys (identity and secret; the signing key it started with).
    pub keys: Arc<ControllerKeys>,
    /// The signing key it signs with now, following rotations (`signing`).
    pub signing: Arc<signing::SigningKeys>,
    /// Verifies administrator identities.
    pub identities: IdentityVerifier,
    /// The clock.
    pub clock: Arc<dyn Clock>,
    /// The settings.
    pub settings: ControllerSettings,
    /// Wakes route table long polls after this process's route writes.
    pub route_tables: Arc<relays::RouteTableWatch>,
    /// The node sockets of this process (`sessions`).
    pub links: Arc<sessions::NodeLinks>,
    /// Set once a stop signal arrived: the controller drains and judges no registration.
    draining: AtomicBool,
    /// The test seam of `registerClusterIngress` (`registration::RegistrationCommitGate`).
    #[cfg(feature = "testing")]
    registration_commit_gate: std::sync::RwLock<Option<registration::RegistrationCommitGate>>,
    /// Reconciles assignments, also in the background (`runners`).
    reconciler: Arc<runners::AssignmentReconciler>,
    /// Pushes runtime local storage claims to the nodes of this process (`runners`).
    claims: Arc<runners::ClaimPusher>,
    /// Issues signed runtime network projections (`projections`).
    projections: Arc<projections::ProjectionIssuer>,
    /// Paces this process's `pushRuntimeChanged` requests (`signals`).
    push_pacer: signals::PushPacer,
}

impl Controller {
    /// A controller over `store` with `keys`.
    pub fn new(store: SharedStore, keys: Arc<ControllerKeys>, clock: Arc<dyn Clock>) -> Controller {
        Controller::with_settings(store, keys, clock, ControllerSettings::default())
    }

    /// A controller with explicit settings.
    pub fn with_settings(
        store: SharedStore,
        keys: Arc<ControllerKeys>,
        clock: Arc<dyn Clock>,
        settings: ControllerSettings,
    ) -> Controller {
        let identities = IdentityVerifier::new(&keys.identity.verifying_key());
        let signing = Arc::new(signing::SigningKeys::new(keys.signing.clone(), keys.signing_active_since));
        let links: Arc<sessions::NodeLinks> = Arc::default();
        let issuer = ControllerReference { kind: ControllerKind::Cloudly, id: settings.controller_id.clone() };
        let milliseconds = std::time::Duration::from_millis;
        let claims = Arc::new(runners::ClaimPusher::new(
            store.clone(),
            clock.clone(),
            links.clone(),
            runners::ClaimPushSettings {
                retry_initial: milliseconds(settings.storage_claim_retry_ms),
                retry_max: milliseconds(settings.storage_claim_retry_max_ms),
                timeout: milliseconds(settings.storage_claim_push_timeout_ms),
                concurrency: settings.storage_claim_push_concurrency,
                sweep: milliseconds(settings.storage_claim_sweep_ms),
            },
        ));
        let route_tables: Arc<relays::RouteTableWatch> = Arc::default();
        let projections = Arc::new(projections::ProjectionIssuer::new(
            store.clone(),
            clock.clone(),
            signing.clone(),
            issuer.clone(),
            route_tables.clone(),
        ));
        let reconciler = Arc::new(runners::AssignmentReconciler::new(
            store.clone(),
            clock.clone(),
            signing.clone(),
            issuer,
            projections.clone(),
            milliseconds(settings.assignment_reconcile_interval_ms),
            settings.assignment_reconcile_workers,
        ));
        claims.set_reconciler(Arc::downgrade(&reconciler));
        Controller {
            store,
            keys,
            signing,
            identities,
            clock,
            settings,
            route_tables,
            links,
            reconciler,
            claims,
            projections,
            push_pacer: signals::PushPacer::default(),
            draining: AtomicBool::new(false),
            #[cfg(feature = "testing")]
            registration_commit_gate: std::sync::RwLock::new(None),
        }
    }

    /// Marks the controller as draining after a stop signal: from now on it judges no
    /// registration (`not-ready`).
    pub fn begin_draining(&self) {
        self.draining.store(true, Ordering::SeqCst);
    }

    /// True once [`Controller::begin_draining`] was called.
    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::SeqCst)
    }

    /// The identity value a token alone stands for (the console's sign-in takes a pasted token),
    /// `None` when its signature does not verify; [`Controller::authorize`] still checks it.
    pub fn identity_of_token(&self, token: &str) -> Option<Value> {
        let identity = self.identities.identity_of_token(token).ok()?;
        Some(serde_json::to_value(identity).expect("an identity serializes"))
    }

    /// Verifies `identity` (the request's `identity` member, `None` when absent) and that its
    /// role allows `access`: `identity-refused` or `identity-forbidden`.
    pub fn authorize(&self, identity: Option<&Value>, access: Access) -> Result<Caller, DomainError> {
        let caller = self.identities.verify(identity, self.clock.now_ms()).map_err(|refusal| {
            tracing::info!(reason = %refusal, "identity refused");
            DomainError::IdentityRefused
        })?;
        if caller.role.allows(access) { Ok(caller) } else { Err(DomainError::IdentityForbidden) }
    }
}

/// The request of the methods that name only a cluster (`getCluster`, `listClusterNodes`,
/// `getClusterIngressDesignation`, `getClusterIngressRoutes`, `listClusterRelays`):
/// `{ identity, clusterId }`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterRequest {
    /// The cluster.
    pub cluster_id: Id,
}

/// Runs `work` in a task of its own, in the caller's span, and waits for it to end: what a
/// committed write calls for (a reconcile, a projection issue) runs to its end even when the
/// caller stops waiting (an HTTP client that hangs up drops its request's future). A panic in
/// `work` is the caller's.
pub(crate) async fn run_to_end(work: impl std::future::Future<Output = ()> + Send + 'static) {
    use tracing::Instrument as _;
    if let Err(error) = tokio::spawn(work.in_current_span()).await
        && error.is_panic()
    {
        std::panic::resume_unwind(error.into_panic());
    }
}
