//! The store conformance suite: every behaviour of the [`Store`] traits is one story, written once
//! over a [`SharedStore`] and run on both backends (`on_both_stores!`), each on a fresh database
//! of its own (`support::database`). The designation compare-and-swap runs as the domain drives it
//! (`domain::designation::commit_designation`) with a test judge, so a story can land writes
//! between the optimistic read and the write from inside the judge.

#[macro_use]
mod support;

use cloudly::contract::designation::{
    ClusterIngressDesignation, CredentialReference, PalletRuntime, RuntimePhase, SecretVersionReference,
};
use cloudly::contract::inventory::{
    ClusterRuntime, ClusterSpec, NodeSpec, Organization, Placement, ServicePort, ServiceRuntimeSpec, ServiceSpecBody,
};
use cloudly::contract::network::RuntimeNetworkLease;
use cloudly::contract::network::address_plan::{
    RuntimeNetworkAddressPlan, seal_runtime_network_address_plan, snapshot_runtime_network_address_plan,
};
use cloudly::contract::network::authority::compose_runtime_network_protected_authority;
use cloudly::contract::network::projection::ProtectedAuthorityReference;
use cloudly::contract::session::{ControllerKind, ControllerReference, RuntimeSessionReference};
use cloudly::contract::storage_claim::{
    InitialOwnership, LocalStorageAccessMode, LocalStorageInitialization, LocalStorageLifecycle, LocalStorageMount,
    LocalStorageReclaimPolicy, LocalStorageSource, MountPath, RuntimeLocalStorageClaim,
};
use cloudly::contract::{AuthorityReference, DigestedRecord, Id, Ipv4, NodeId, Protocol, Sha256Digest};
use cloudly::domain::designation::{DesignationCommit, DesignationRefusal, commit_designation};
use cloudly::domain::projections::{next_projection, node_inputs};
use cloudly::domain::{Controller, SystemClock};
use cloudly::keys::ControllerKeys;
use cloudly::store::assignments::{AssignmentChange, StoredAssignment};
use cloudly::store::network::LeaseChange;
use cloudly::store::projections::IssuedProjection;
use cloudly::store::relays::{IngressRoute, RouteBackend};
use cloudly::store::service_status::RecordedStatus;
use cloudly::store::storage_claims::{ClaimAnswer, ClaimChange, ClaimFault, ClaimResolution};
use cloudly::store::{
    Backend, ChangeKind, DesignationSnapshot, DesignationWrite, KeyRecord, KeyRole, MissingKind, NodeBearerHash,
    PutOutcome, SealedSecret, SharedStore, Signal, SignalSubscription, Store, StoreError, StoredCluster,
};
use cloudly::store::{ClusterGuard, FactScope, StoredNetworkPlan};
use serde_json::{Value, json};
use sqlx::{AssertSqlSafe, Connection};
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use support::database::{TestDatabase, admin_connection, pg_admin_url, server_of, url_with_database};

// ---------------------------------------------------------------------------------------------
// The harness: a fresh database per story, on either backend (`support::database`).

/// What a story gets: a store that is not migrated yet, and its database.
#[derive(Clone)]
struct Context {
    store: SharedStore,
    database: Arc<TestDatabase>,
}

impl Context {
    /// Migrates the story's store and answers it.
    async fn migrated(&self) -> SharedStore {
        self.store.migrate().await.expect("migrate");
        self.store.clone()
    }
}

/// Runs `story` on a fresh database of `backend` and drops the database, also when the story
/// fails.
async fn run<Story, Fut>(backend: Backend, story: Story)
where
    Story: FnOnce(Context) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let database = Arc::new(TestDatabase::create(backend).await);
    let store = database.connect().await;
    let outcome = tokio::spawn(story(Context { store, database: database.clone() })).await;
    // The story's context is gone with its task; a clone it leaked is dropped by `Drop`.
    if let Ok(database) = Arc::try_unwrap(database) {
        database.drop_now().await;
    }
    if let Err(error) = outcome {
        std::panic::resume_unwind(error.into_panic());
    }
}

on_both_stores!(run =>
    migrations_apply_once_and_make_the_store_ready,
    organizations_count_their_revisions,
    clusters_are_written_by_compare_and_swap,
    nodes_need_their_cluster_and_keep_the_bearer_hash,
    a_session_opens_only_while_the_checked_bearer_hash_is_current,
    service_specs_keep_every_revision,
    deleted_services_continue_their_revisions,
    accepted_designation_is_recorded_for_replay,
    designation_chain_lists_oldest_first_in_pages,
    refused_designation_writes_nothing,
    pallet_and_fleet_cutover_designations_exclude_each_other,
    racing_designations_accept_exactly_one,
    racing_designations_across_two_stores_accept_exactly_one,
    rows_that_do_not_read_back_are_corrupt,
    designations_written_before_migration_5_read_back,
    projection_rows_written_before_migration_13_read_back,
    volume_declarations_written_before_migration_15_are_found_by_volume_id,
    lost_connections_are_replaced,
    facts_written_between_read_and_write_are_judged_again,
    a_twin_committed_between_read_and_write_is_replayed,
    a_cancelled_write_releases_its_locks_at_once,
    racing_key_sets_record_exactly_one_and_readiness_writes,
    service_statuses_keep_their_time_until_the_verdict_changes,
    network_plans_and_leases_keep_their_rules,
    claims_link_their_heads_and_keep_each_answer,
    a_late_claim_answer_of_an_older_session_changes_nothing,
    of_two_decisions_on_an_uncertain_claim_one_is_recorded,
    an_uncertain_answer_after_a_forgetting_decision_asks_for_a_decision_again,
    signals_reach_every_store_of_the_database,
    a_key_rotation_is_a_compare_and_swap_that_keeps_the_public_key,
    assignment_generations_are_written_in_batches_under_their_guards,
    a_late_state_report_of_an_older_session_changes_nothing,
    facts_read_under_the_lock_see_what_its_last_holder_wrote,
    projections_keep_their_endpoint_leases_by_reference,
);

// ---------------------------------------------------------------------------------------------
// Records.

fn id(text: &str) -> Id {
    Id::parse(text).unwrap_or_else(|| panic!("{text} is an Id"))
}

fn fresh_id(prefix: &str) -> Id {
    id(&format!("{prefix}-{}", uuid::Uuid::new_v4().simple()))
}

fn node_id(text: &str) -> NodeId {
    NodeId::parse(text).unwrap()
}

fn organization(organization_id: &str) -> Organization {
    Organization { id: id(organization_id), name: format!("Organization {organization_id}") }
}

fn cluster(cluster_id: &str, organization_id: &str) -> ClusterSpec {
    ClusterSpec {
        id: id(cluster_id),
        organization_id: id(organization_id),
        runtime: ClusterRuntime { phase: RuntimePhase::Pallet, generation: 4 },
        relay_origin: Some("https://relay.example.net".to_owned()),
        fleet_cutover_ingress_designation: None,
    }
}

fn node(node: &str, address: &str) -> NodeSpec {
    NodeSpec { id: node_id(node), runtime_namespace: id("ns-1"), host_addresses: vec![Ipv4::parse(address).unwrap()] }
}

fn spec_body(cluster_id: &str, service_id: &str, image: &str) -> ServiceSpecBody {
    ServiceSpecBody {
        cluster_id: id(cluster_id),
        service_id: id(service_id),
        organization_id: id("org"),
        image: image.to_owned(),
        replicas: 2,
        placement: Placement { node_ids: vec![node_id("node-1"), node_id("node-2")] },
        ports: vec![ServicePort { protocol: Protocol::Tcp.into(), port: 443 }],
        environment: Vec::new(),
        volumes: Vec::new(),
    }
}

fn fleet_reference() -> AuthorityReference {
    AuthorityReference { id: id("fleet-designation"), generation: 1, digest: Sha256Digest::from_bytes(&[0x11; 32]) }
}

/// An organization `org`, a Pallet cluster `c1` and an ingress service `ingress` at revision 1.
async fn inventory(store: &SharedStore) {
    store.put_organization(&organization("org")).await.unwrap();
    written(store.put_cluster(&cluster("c1", "org"), None, ClusterGuard::Revision).await.unwrap());
    written(store.put_service_spec(&spec_body("c1", "ingress", "ingress:1"), None).await.unwrap());
}

fn written<T: std::fmt::Debug>(outcome: PutOutcome<T>) -> T {
    match outcome {
        PutOutcome::Written(value) => value,
        other => panic!("expected Written, got {other:?}"),
    }
}

// ---------------------------------------------------------------------------------------------
// A designation judge as the domain decides (`03-designation.md`, steps 4 to 10).

/// What the test administrator asks for.
#[derive(Clone)]
struct Proposal {
    cluster_id: Id,
    service_id: Id,
    mutation_id: Id,
    runtime_generation: u64,
    expected_spec_revision: u64,
    expected_designation: Option<AuthorityReference>,
}

impl Proposal {
    fn new(expected_spec_revision: u64, expected_designation: Option<AuthorityReference>) -> Self {
        Proposal {
            cluster_id: id("c1"),
            service_id: id("ingress"),
            mutation_id: fresh_id("mutation"),
            runtime_generation: 4,
            expected_spec_revision,
            expected_designation,
        }
    }

    fn request_canonical(&self) -> String {
        format!("{{\"mutationId\":\"{}\"}}", self.mutation_id)
    }

    /// Facts of this proposal as the store would read them.
    fn facts(
        &self,
        cluster: Option<StoredCluster>,
        service: Option<ServiceRuntimeSpec>,
        current: Option<ClusterIngressDesignation>,
    ) -> DesignationSnapshot {
        DesignationSnapshot {
            cluster_id: self.cluster_id.clone(),
            service_id: self.service_id.clone(),
            mutation_id: self.mutation_id.clone(),
            cluster,
            service,
            current,
            mutation_recorded: false,
            facts_version: 0,
        }
    }

    /// The judgement, counting how often it ran.
    fn judge(&self, facts: &DesignationSnapshot, calls: &AtomicUsize) -> Result<DesignationWrite, DesignationRefusal> {
        calls.fetch_add(1, Ordering::SeqCst);
        let Some(stored) = &facts.cluster else { return Err(DesignationRefusal::NotFound(MissingKind::Cluster)) };
        let runtime = stored.cluster.runtime_reference();
        if runtime.phase != RuntimePhase::Pallet || runtime.generation != self.runtime_generation {
            return Err(DesignationRefusal::RuntimeMismatch(runtime));
        }
        if stored.cluster.fleet_cutover_ingress_designation.is_some() {
            return Err(DesignationRefusal::KindConflict);
        }
        let Some(service) = &facts.service else { return Err(DesignationRefusal::NotFound(MissingKind::Service)) };
        if service.revision != self.expected_spec_revision {
            return Err(DesignationRefusal::SpecRevisionMismatch(service.revision));
        }
        let current = facts.current.as_ref().map(ClusterIngressDesignation::reference);
        if current != self.expected_designation {
            return Err(DesignationRefusal::DesignationConflict(current));
        }
        let previous = facts.current.as_ref();
        let secret = SealedSecret {
            secret_id: previous.map_or_else(|| fresh_id("secret"), |d| d.credential.secret_version.secret_id.clone()),
            secret_version_id: fresh_id("sv"),
            nonce: vec![7; 12],
            ciphertext: vec![0xc1; 48],
            value_hash: [0x5a; 32],
        };
        let generation = previous.map_or(1, |designation| designation.generation + 1);
        let mut designation = ClusterIngressDesignation {
            id: previous.map_or_else(|| fresh_id("designation"), |designation| designation.id.clone()),
            generation,
            previous: current,
            cluster_id: self.cluster_id.clone(),
            runtime: PalletRuntime { id: self.cluster_id.clone(), generation: self.runtime_generation },
            ingress_service_id: self.service_id.clone(),
            prepared_spec_revision: service.revision,
            credential: CredentialReference {
                credential_id: previous.map_or_else(|| fresh_id("cred"), |d| d.credential.credential_id.clone()),
                generation,
                secret_version: SecretVersionReference {
                    secret_id: secret.secret_id.clone(),
                    secret_version_id: secret.secret_version_id.clone(),
                },
            },
            actor_id: id("user-27cd95a0"),
            accepted_at: 1_765_237_028_238 + generation,
            digest: Sha256Digest::from_bytes(&[0; 32]),
        };
        designation.digest = designation.compute_digest();
        Ok(DesignationWrite {
            designation,
            secret,
            mutation_id: self.mutation_id.clone(),
            request_canonical: self.request_canonical(),
        })
    }

    /// Commits this proposal on `store`; also answers how often the judge ran.
    async fn commit_counting(&self, store: &dyn Store) -> (DesignationCommit, usize) {
        let calls = AtomicUsize::new(0);
        let judge = |facts: &DesignationSnapshot| self.judge(facts, &calls);
        let outcome =
            commit_designation(store, &self.cluster_id, &self.service_id, &self.mutation_id, &judge).await.unwrap();
        (outcome, calls.load(Ordering::SeqCst))
    }

    /// Commits this proposal on `store`, with nothing racing it: the judge runs once (the
    /// optimistic path) unless the mutation id is recorded (then not at all).
    async fn commit(&self, store: &dyn Store) -> DesignationCommit {
        let (outcome, calls) = self.commit_counting(store).await;
        let expected = if matches!(outcome, DesignationCommit::MutationExists) { 0 } else { 1 };
        assert_eq!(calls, expected, "the judge runs once per uncontended commit");
        outcome
    }

    /// Commits and expects acceptance.
    async fn accept(&self, store: &dyn Store) -> (ClusterIngressDesignation, ServiceRuntimeSpec) {
        match self.commit(store).await {
            DesignationCommit::Accepted { designation, spec, .. } => (designation, spec),
            other => panic!("expected Accepted, got {other:?}"),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The stories.

async fn migrations_apply_once_and_make_the_store_ready(context: Context) {
    let store = context.store.clone();
    assert!(!store.is_ready().await.unwrap(), "an empty database is not ready");
    // Two stores (two pools, as two processes would have) migrate an empty database at once.
    let other = context.database.connect().await;
    let (first, second) = tokio::join!(store.migrate(), other.migrate());
    first.unwrap();
    second.unwrap();
    assert!(store.is_ready().await.unwrap());
    assert!(other.is_ready().await.unwrap());
    // Migrating again changes nothing and keeps the data.
    store.put_organization(&organization("org")).await.unwrap();
    store.migrate().await.unwrap();
    other.migrate().await.unwrap();
    assert!(store.is_ready().await.unwrap());
    assert_eq!(store.get_organization(&id("org")).await.unwrap().unwrap().revision, 1);
    assert_eq!(store.backend(), context.database.backend);
}

async fn organizations_count_their_revisions(context: Context) {
    let store = context.migrated().await;
    assert!(store.get_organization(&id("org")).await.unwrap().is_none());
    let first = store.put_organization(&organization("org")).await.unwrap();
    assert_eq!((first.organization.clone(), first.revision), (organization("org"), 1));
    let renamed = Organization { id: id("org"), name: "Renamed".to_owned() };
    assert_eq!(store.put_organization(&renamed).await.unwrap().revision, 2);
    let stored = store.get_organization(&id("org")).await.unwrap().unwrap();
    assert_eq!((stored.organization, stored.revision), (renamed, 2));
}

async fn clusters_are_written_by_compare_and_swap(context: Context) {
    let store = context.migrated().await;
    assert_eq!(
        store.put_cluster(&cluster("c1", "org"), None, ClusterGuard::Revision).await.unwrap(),
        PutOutcome::Missing(MissingKind::Organization)
    );
    store.put_organization(&organization("org")).await.unwrap();
    let created = written(store.put_cluster(&cluster("c1", "org"), None, ClusterGuard::Revision).await.unwrap());
    assert_eq!(created, StoredCluster { cluster: cluster("c1", "org"), revision: 1 });
    assert_eq!(
        store.put_cluster(&cluster("c1", "org"), None, ClusterGuard::Revision).await.unwrap(),
        PutOutcome::RevisionConflict { current: Some(1) },
        "creating an existing cluster"
    );
    let mut moved = cluster("c1", "org");
    moved.runtime = ClusterRuntime { phase: RuntimePhase::Cutover, generation: 5 };
    moved.relay_origin = None;
    assert_eq!(written(store.put_cluster(&moved, Some(1), ClusterGuard::Revision).await.unwrap()).revision, 2);
    assert_eq!(
        store.put_cluster(&cluster("c1", "org"), Some(1), ClusterGuard::Revision).await.unwrap(),
        PutOutcome::RevisionConflict { current: Some(2) },
        "a stale revision"
    );
    assert_eq!(
        store.put_cluster(&cluster("c2", "org"), Some(1), ClusterGuard::Revision).await.unwrap(),
        PutOutcome::RevisionConflict { current: None },
        "replacing a cluster that does not exist"
    );
    let stored = store.get_cluster(&id("c1")).await.unwrap().unwrap();
    assert_eq!((stored.cluster, stored.revision), (moved.clone(), 2));
    assert!(store.get_cluster(&id("c2")).await.unwrap().is_none());

    // Listing is sorted by id (byte order).
    for cluster_id in ["b-cluster", "a-cluster", "C-cluster"] {
        written(store.put_cluster(&cluster(cluster_id, "org"), None, ClusterGuard::Revision).await.unwrap());
    }
    let listed: Vec<String> =
        store.list_clusters().await.unwrap().into_iter().map(|stored| stored.cluster.id.to_string()).collect();
    assert_eq!(listed, ["C-cluster", "a-cluster", "b-cluster", "c1"]);

    // Racing creations of one cluster: exactly one is written.
    let racers: Vec<_> = (0..8)
        .map(|_| {
            let store = store.clone();
            tokio::spawn(async move {
                store.put_cluster(&cluster("raced", "org"), None, ClusterGuard::Revision).await.unwrap()
            })
        })
        .collect();
    let mut created = 0;
    for racer in racers {
        match racer.await.unwrap() {
            PutOutcome::Written(stored) => {
                assert_eq!(stored.revision, 1);
                created += 1;
            }
            other => assert_eq!(other, PutOutcome::RevisionConflict { current: Some(1) }),
        }
    }
    assert_eq!(created, 1);
}

async fn nodes_need_their_cluster_and_keep_the_bearer_hash(context: Context) {
    let store = context.migrated().await;
    let cluster_id = id("c1");
    assert_eq!(
        store.put_node(&cluster_id, &node("node-1", "10.0.0.9"), NodeBearerHash::IfCreated([1; 32])).await.unwrap(),
        PutOutcome::Missing(MissingKind::Cluster)
    );
    inventory(&store).await;
    match store.put_node(&cluster_id, &node("node-1", "10.0.0.9"), NodeBearerHash::Keep).await {
        Err(StoreError::Corrupt(detail)) => assert!(detail.contains("bearer hash"), "{detail}"),
        other => panic!("creating a node without a bearer hash: {other:?}"),
    }
    assert!(store.get_node(&cluster_id, &node_id("node-1")).await.unwrap().is_none());

    let created = written(
        store.put_node(&cluster_id, &node("node-1", "10.0.0.9"), NodeBearerHash::IfCreated([1; 32])).await.unwrap(),
    );
    assert!(created.created && created.bearer_stored);
    let stored = &created.node;
    assert_eq!((stored.revision, stored.bearer_hash, stored.cluster_id.clone()), (1, [1; 32], cluster_id.clone()));

    // A second create finds the node under the lock: it keeps the first hash and says so.
    let second = written(
        store.put_node(&cluster_id, &node("node-1", "10.0.0.9"), NodeBearerHash::IfCreated([4; 32])).await.unwrap(),
    );
    assert!(!second.created && !second.bearer_stored);
    assert_eq!((second.node.revision, second.node.bearer_hash), (2, [1; 32]));
    assert_eq!(store.get_node(&cluster_id, &node_id("node-1")).await.unwrap().unwrap().bearer_hash, [1; 32]);

    // An update that keeps the hash keeps the old one.
    let updated =
        written(store.put_node(&cluster_id, &node("node-1", "10.0.0.10"), NodeBearerHash::Keep).await.unwrap());
    assert!(!updated.created && !updated.bearer_stored);
    assert_eq!((updated.node.revision, updated.node.bearer_hash), (3, [1; 32]));
    // A rotation replaces it.
    let rotated = written(
        store.put_node(&cluster_id, &node("node-1", "10.0.0.10"), NodeBearerHash::Rotate([2; 32])).await.unwrap(),
    );
    assert!(!rotated.created && rotated.bearer_stored);
    assert_eq!((rotated.node.revision, rotated.node.bearer_hash), (4, [2; 32]));
    assert_eq!(store.get_node(&cluster_id, &node_id("node-1")).await.unwrap(), Some(rotated.node.clone()));

    written(store.put_node(&cluster_id, &node("node-0", "10.0.0.8"), NodeBearerHash::Rotate([3; 32])).await.unwrap());
    let listed: Vec<String> =
        store.list_nodes(&cluster_id).await.unwrap().into_iter().map(|stored| stored.node.id.to_string()).collect();
    assert_eq!(listed, ["node-0", "node-1"]);
    assert!(store.list_nodes(&id("elsewhere")).await.unwrap().is_empty());
}

fn controller() -> ControllerReference {
    ControllerReference { kind: ControllerKind::Cloudly, id: id("controller-1") }
}

/// A bearer rotated out between the caller's check and the open opens no session; an unknown
/// node opens none either; the bearer hash the node has opens the next generation.
async fn a_session_opens_only_while_the_checked_bearer_hash_is_current(context: Context) {
    let store = context.migrated().await;
    inventory(&store).await;
    let (cluster_id, node_1) = (id("c1"), node_id("node-1"));
    written(
        store.put_node(&cluster_id, &node("node-1", "10.0.0.9"), NodeBearerHash::IfCreated([1; 32])).await.unwrap(),
    );
    let first = store.open_session(&cluster_id, &node_1, &[1; 32], &id("session-1"), &controller(), 100).await.unwrap();
    assert_eq!(first.map(|session| session.generation), Some(1));

    // The caller checked the presented bearer against this read; the bearer rotates after it.
    let checked = store.get_node(&cluster_id, &node_1).await.unwrap().unwrap().bearer_hash;
    written(store.put_node(&cluster_id, &node("node-1", "10.0.0.9"), NodeBearerHash::Rotate([2; 32])).await.unwrap());
    let refused = store.open_session(&cluster_id, &node_1, &checked, &id("session-2"), &controller(), 110).await;
    assert_eq!(refused.unwrap(), None);
    let unknown = node_id("node-9");
    let refused = store.open_session(&cluster_id, &unknown, &[2; 32], &id("session-3"), &controller(), 110).await;
    assert_eq!(refused.unwrap(), None);
    assert_eq!(
        store.current_session(&cluster_id, &node_1).await.unwrap().map(|session| session.id),
        Some(id("session-1"))
    );

    let opened =
        store.open_session(&cluster_id, &node_1, &[2; 32], &id("session-4"), &controller(), 120).await.unwrap();
    assert_eq!(opened.map(|session| (session.id, session.generation)), Some((id("session-4"), 2)));
}

async fn service_specs_keep_every_revision(context: Context) {
    let store = context.migrated().await;
    let (cluster_id, service_id) = (id("c1"), id("web"));
    assert_eq!(
        store.put_service_spec(&spec_body("c1", "web", "web:1"), None).await.unwrap(),
        PutOutcome::Missing(MissingKind::Cluster)
    );
    inventory(&store).await;
    let first = written(store.put_service_spec(&spec_body("c1", "web", "web:1"), None).await.unwrap());
    assert_eq!(first, ServiceRuntimeSpec { body: spec_body("c1", "web", "web:1"), revision: 1 });
    assert_eq!(
        store.put_service_spec(&spec_body("c1", "web", "web:x"), None).await.unwrap(),
        PutOutcome::RevisionConflict { current: Some(1) },
        "creating an existing service"
    );
    assert_eq!(written(store.put_service_spec(&spec_body("c1", "web", "web:2"), Some(1)).await.unwrap()).revision, 2);
    assert_eq!(
        store.put_service_spec(&spec_body("c1", "web", "web:x"), Some(1)).await.unwrap(),
        PutOutcome::RevisionConflict { current: Some(2) },
        "a stale revision"
    );
    assert_eq!(
        store.put_service_spec(&spec_body("c1", "nothing", "x:1"), Some(1)).await.unwrap(),
        PutOutcome::RevisionConflict { current: None },
        "replacing a service that does not exist"
    );
    assert_eq!(written(store.put_service_spec(&spec_body("c1", "web", "web:3"), Some(2)).await.unwrap()).revision, 3);

    for (revision, image) in [(1, "web:1"), (2, "web:2"), (3, "web:3")] {
        let spec = store.get_service_spec(&cluster_id, &service_id, Some(revision)).await.unwrap().unwrap();
        assert_eq!(spec, ServiceRuntimeSpec { body: spec_body("c1", "web", image), revision });
    }
    let current = store.get_service_spec(&cluster_id, &service_id, None).await.unwrap().unwrap();
    assert_eq!((current.revision, current.body.image.as_str()), (3, "web:3"));
    assert!(store.get_service_spec(&cluster_id, &service_id, Some(4)).await.unwrap().is_none());
    assert!(store.get_service_spec(&cluster_id, &id("nothing"), None).await.unwrap().is_none());

    // Racing writers expecting the same revision: exactly one is written.
    let racers: Vec<_> = (0..8)
        .map(|racer| {
            let store = store.clone();
            tokio::spawn(async move {
                store.put_service_spec(&spec_body("c1", "web", &format!("web:race-{racer}")), Some(3)).await.unwrap()
            })
        })
        .collect();
    let mut written_count = 0;
    for racer in racers {
        match racer.await.unwrap() {
            PutOutcome::Written(spec) => {
                assert_eq!(spec.revision, 4);
                written_count += 1;
            }
            other => assert_eq!(other, PutOutcome::RevisionConflict { current: Some(4) }),
        }
    }
    assert_eq!(written_count, 1);
}

async fn deleted_services_continue_their_revisions(context: Context) {
    let store = context.migrated().await;
    let (cluster_id, service_id) = (id("c1"), id("web"));
    assert_eq!(
        store.delete_service(&cluster_id, &service_id, 1).await.unwrap(),
        PutOutcome::Missing(MissingKind::Cluster)
    );
    inventory(&store).await;
    assert_eq!(
        store.delete_service(&cluster_id, &service_id, 1).await.unwrap(),
        PutOutcome::Missing(MissingKind::Service)
    );
    written(store.put_service_spec(&spec_body("c1", "web", "web:1"), None).await.unwrap());
    written(store.put_service_spec(&spec_body("c1", "web", "web:2"), Some(1)).await.unwrap());
    assert_eq!(
        store.delete_service(&cluster_id, &service_id, 1).await.unwrap(),
        PutOutcome::RevisionConflict { current: Some(2) },
        "deleting at a stale revision"
    );
    assert_eq!(store.delete_service(&cluster_id, &service_id, 2).await.unwrap(), PutOutcome::Written(()));
    assert!(store.get_service_spec(&cluster_id, &service_id, None).await.unwrap().is_none());
    assert_eq!(
        store.get_service_spec(&cluster_id, &service_id, Some(2)).await.unwrap().map(|spec| spec.body.image),
        Some("web:2".to_owned()),
        "the revisions of a deleted service stay readable"
    );
    assert_eq!(
        store.delete_service(&cluster_id, &service_id, 2).await.unwrap(),
        PutOutcome::Missing(MissingKind::Service),
        "deleting twice"
    );
    assert_eq!(
        store.put_service_spec(&spec_body("c1", "web", "web:x"), Some(2)).await.unwrap(),
        PutOutcome::RevisionConflict { current: None },
        "replacing a deleted service"
    );
    let recreated = written(store.put_service_spec(&spec_body("c1", "web", "web:3"), None).await.unwrap());
    assert_eq!(recreated.revision, 3, "re-creating continues the numbering");
    assert_eq!(store.get_service_spec(&cluster_id, &service_id, None).await.unwrap(), Some(recreated));
}

fn recorded(service: &str, revision: u64, state: &str, reason: Option<&str>, at: u64) -> RecordedStatus {
    RecordedStatus {
        service_id: id(service),
        spec_revision: revision,
        state: state.to_owned(),
        reason: reason.map(str::to_owned),
        changed_at: at,
    }
}

async fn service_statuses_keep_their_time_until_the_verdict_changes(context: Context) {
    let store = context.migrated().await;
    inventory(&store).await;
    written(store.put_service_spec(&spec_body("c1", "web", "web:1"), None).await.unwrap());
    let cluster_id = id("c1");
    let first =
        vec![recorded("ingress", 1, "converging", None, 10), recorded("web", 1, "refused", Some("ports-too-many"), 10)];
    assert_eq!(store.record_statuses(&cluster_id, &FactScope::Cluster, &first).await.unwrap(), first);
    // The same verdicts judged later keep their time; a changed one takes the new time.
    let later =
        vec![recorded("ingress", 1, "converged", None, 20), recorded("web", 1, "refused", Some("ports-too-many"), 20)];
    let expected =
        vec![recorded("ingress", 1, "converged", None, 20), recorded("web", 1, "refused", Some("ports-too-many"), 10)];
    assert_eq!(store.record_statuses(&cluster_id, &FactScope::Cluster, &later).await.unwrap(), expected);
    // Another reason, or another revision with the same verdict, is a change.
    let moved = vec![
        recorded("ingress", 2, "converged", None, 30),
        recorded("web", 1, "refused", Some("no-eligible-node"), 30),
    ];
    assert_eq!(store.record_statuses(&cluster_id, &FactScope::Cluster, &moved).await.unwrap(), moved);
    // A service that is gone (deleted) is forgotten.
    let only = vec![recorded("ingress", 2, "converged", None, 40)];
    assert_eq!(
        store.record_statuses(&cluster_id, &FactScope::Cluster, &only).await.unwrap(),
        vec![recorded("ingress", 2, "converged", None, 30)]
    );
    // A state the schema does not know is refused by the database and changes nothing.
    let bad = vec![recorded("ingress", 2, "running", None, 50)];
    assert!(store.record_statuses(&cluster_id, &FactScope::Cluster, &bad).await.is_err());
    assert_eq!(
        store.record_statuses(&cluster_id, &FactScope::Cluster, &only).await.unwrap(),
        vec![recorded("ingress", 2, "converged", None, 30)]
    );
}

async fn accepted_designation_is_recorded_for_replay(context: Context) {
    let store = context.migrated().await;
    inventory(&store).await;
    let cluster_id = id("c1");
    assert_eq!(store.cluster_designation(&cluster_id).await.unwrap(), Some(None), "a cluster without one");
    assert_eq!(store.cluster_designation(&id("c9")).await.unwrap(), None, "an unknown cluster");
    let first = Proposal::new(1, None);
    let (designation, spec) = first.accept(store.as_ref()).await;
    assert_eq!((designation.generation, designation.previous.clone()), (1, None));
    assert_eq!(spec, ServiceRuntimeSpec { body: spec_body("c1", "ingress", "ingress:1"), revision: 1 });
    assert_eq!(store.current_designation(&cluster_id).await.unwrap(), Some(designation.clone()));
    assert_eq!(store.cluster_designation(&cluster_id).await.unwrap(), Some(Some(designation.clone())));

    // The sealed secret version is stored as given.
    let version = &designation.credential.secret_version;
    let secret = store.get_secret(&version.secret_id, &version.secret_version_id).await.unwrap().unwrap();
    assert_eq!(
        (secret.nonce.clone(), secret.ciphertext.clone(), secret.value_hash),
        (vec![7; 12], vec![0xc1; 48], [0x5a; 32])
    );
    assert!(store.get_secret(&version.secret_id, &id("other")).await.unwrap().is_none());

    // A second commit with the same mutation id is a replay: the judge is not asked.
    assert!(matches!(first.commit(store.as_ref()).await, DesignationCommit::MutationExists));
    let recorded = store.find_designation_mutation(&cluster_id, &first.mutation_id).await.unwrap().unwrap();
    assert_eq!(
        (recorded.request_canonical.clone(), recorded.designation.clone(), recorded.spec.clone()),
        (first.request_canonical(), designation.clone(), spec.clone())
    );
    assert!(store.find_designation_mutation(&cluster_id, &id("unknown")).await.unwrap().is_none());
    assert!(store.find_designation_mutation(&id("c2"), &first.mutation_id).await.unwrap().is_none());

    // The spec moves on and a rotation supersedes the first generation.
    written(store.put_service_spec(&spec_body("c1", "ingress", "ingress:2"), Some(1)).await.unwrap());
    let rotation = Proposal::new(2, Some(designation.reference()));
    let (rotated, rotated_spec) = rotation.accept(store.as_ref()).await;
    assert_eq!((rotated.generation, rotated.previous.clone()), (2, Some(designation.reference())));
    assert_eq!((rotated_spec.revision, rotated_spec.body.image.as_str()), (2, "ingress:2"));
    assert_eq!(store.current_designation(&cluster_id).await.unwrap(), Some(rotated.clone()));
    assert_eq!(store.cluster_designation(&cluster_id).await.unwrap(), Some(Some(rotated.clone())));

    // The first mutation still replays its own designation and the spec it was prepared against.
    let replayed = store.find_designation_mutation(&cluster_id, &first.mutation_id).await.unwrap().unwrap();
    assert_eq!((replayed.designation, replayed.spec), (designation, spec));
    assert!(matches!(first.commit(store.as_ref()).await, DesignationCommit::MutationExists));
}

async fn designation_chain_lists_oldest_first_in_pages(context: Context) {
    let store = context.migrated().await;
    inventory(&store).await;
    let cluster_id = id("c1");
    assert!(store.list_designations(&cluster_id, 1, 500).await.unwrap().is_empty());
    let mut chain: Vec<ClusterIngressDesignation> = Vec::new();
    for _ in 0..5 {
        let proposal = Proposal::new(1, chain.last().map(ClusterIngressDesignation::reference));
        chain.push(proposal.accept(store.as_ref()).await.0);
    }
    assert_eq!(store.list_designations(&cluster_id, 1, 500).await.unwrap(), chain);
    assert_eq!(store.list_designations(&cluster_id, 1, 2).await.unwrap(), chain[0..2]);
    assert_eq!(store.list_designations(&cluster_id, 3, 2).await.unwrap(), chain[2..4]);
    assert_eq!(store.list_designations(&cluster_id, 5, 2).await.unwrap(), chain[4..5]);
    assert!(store.list_designations(&cluster_id, 6, 2).await.unwrap().is_empty());
    // Each generation links the previous one and keeps the chain's id.
    for pair in chain.windows(2) {
        assert_eq!(pair[1].previous, Some(pair[0].reference()));
        assert_eq!(pair[1].id, pair[0].id);
    }
    assert!(store.list_designations(&id("c2"), 1, 500).await.unwrap().is_empty());
}

/// Asserts that no designation, mutation or secret was written for `proposal`.
async fn nothing_written(store: &SharedStore, proposal: &Proposal) {
    assert!(store.current_designation(&proposal.cluster_id).await.unwrap().is_none());
    assert!(store.list_designations(&proposal.cluster_id, 1, 500).await.unwrap().is_empty());
    assert!(store.find_designation_mutation(&proposal.cluster_id, &proposal.mutation_id).await.unwrap().is_none());
}

async fn refused_designation_writes_nothing(context: Context) {
    let store = context.migrated().await;

    // An unknown cluster: the judge is asked with no cluster and refuses.
    let proposal = Proposal::new(1, None);
    let seen = std::sync::Mutex::new(None);
    let judge = |facts: &DesignationSnapshot| {
        *seen.lock().unwrap() = Some(facts.clone());
        proposal.judge(facts, &AtomicUsize::new(0))
    };
    let outcome =
        commit_designation(store.as_ref(), &proposal.cluster_id, &proposal.service_id, &proposal.mutation_id, &judge)
            .await;
    assert!(matches!(outcome.unwrap(), DesignationCommit::Refused(DesignationRefusal::NotFound(MissingKind::Cluster))));
    let facts = seen.lock().unwrap().take().unwrap();
    assert!(facts.cluster.is_none() && facts.service.is_none() && facts.current.is_none());
    nothing_written(&store, &proposal).await;

    // The facts of an existing cluster, under the lock.
    inventory(&store).await;
    let outcome =
        commit_designation(store.as_ref(), &proposal.cluster_id, &proposal.service_id, &proposal.mutation_id, &judge)
            .await;
    assert!(matches!(outcome.unwrap(), DesignationCommit::Accepted { .. }));
    let facts = seen.lock().unwrap().take().unwrap();
    assert_eq!(facts.cluster.map(|stored| (stored.cluster, stored.revision)), Some((cluster("c1", "org"), 1)));
    assert_eq!(facts.service.map(|spec| spec.revision), Some(1));
    assert!(facts.current.is_none());
    let accepted = store.current_designation(&proposal.cluster_id).await.unwrap().unwrap();

    // Refusals on a fresh cluster leave nothing behind.
    store.put_organization(&organization("org")).await.unwrap();
    written(store.put_cluster(&cluster("c2", "org"), None, ClusterGuard::Revision).await.unwrap());
    let on_c2 = |mut proposal: Proposal| {
        proposal.cluster_id = id("c2");
        proposal
    };
    let missing_service = on_c2(Proposal::new(1, None));
    assert!(matches!(
        missing_service.commit(store.as_ref()).await,
        DesignationCommit::Refused(DesignationRefusal::NotFound(MissingKind::Service))
    ));
    nothing_written(&store, &missing_service).await;
    written(store.put_service_spec(&spec_body("c2", "ingress", "ingress:1"), None).await.unwrap());
    let stale_spec = on_c2(Proposal::new(7, None));
    assert_eq!(refusal(stale_spec.commit(store.as_ref()).await), DesignationRefusal::SpecRevisionMismatch(1));
    nothing_written(&store, &stale_spec).await;
    let mut other_runtime = on_c2(Proposal::new(1, None));
    other_runtime.runtime_generation = 5;
    assert!(matches!(
        refusal(other_runtime.commit(store.as_ref()).await),
        DesignationRefusal::RuntimeMismatch(runtime) if runtime.generation == 4
    ));
    nothing_written(&store, &other_runtime).await;
    let wrong_expectation = on_c2(Proposal::new(1, Some(accepted.reference())));
    assert_eq!(refusal(wrong_expectation.commit(store.as_ref()).await), DesignationRefusal::DesignationConflict(None));
    nothing_written(&store, &wrong_expectation).await;

    // A refused rotation on c1 leaves the accepted generation alone.
    let stale_rotation = Proposal::new(1, None);
    assert_eq!(
        refusal(stale_rotation.commit(store.as_ref()).await),
        DesignationRefusal::DesignationConflict(Some(accepted.reference()))
    );
    assert_eq!(store.list_designations(&id("c1"), 1, 500).await.unwrap(), std::slice::from_ref(&accepted));
    assert!(store.find_designation_mutation(&id("c1"), &stale_rotation.mutation_id).await.unwrap().is_none());

    // A judge whose write breaks the chain is refused by the store, and nothing is written.
    let broken = on_c2(Proposal::new(1, None));
    let judge = |facts: &DesignationSnapshot| {
        let mut write = broken.judge(facts, &AtomicUsize::new(0))?;
        write.designation.digest = Sha256Digest::from_bytes(&[0xee; 32]);
        Ok(write)
    };
    let outcome =
        commit_designation(store.as_ref(), &broken.cluster_id, &broken.service_id, &broken.mutation_id, &judge).await;
    assert!(matches!(outcome, Err(StoreError::Corrupt(_))), "{outcome:?}");
    nothing_written(&store, &broken).await;
    // So is one prepared against another spec revision than the service's current one.
    let judge = |facts: &DesignationSnapshot| {
        let mut write = broken.judge(facts, &AtomicUsize::new(0))?;
        write.designation.prepared_spec_revision += 1;
        write.designation.digest = write.designation.compute_digest();
        Ok(write)
    };
    let outcome =
        commit_designation(store.as_ref(), &broken.cluster_id, &broken.service_id, &broken.mutation_id, &judge).await;
    assert!(matches!(outcome, Err(StoreError::Corrupt(_))), "{outcome:?}");
    nothing_written(&store, &broken).await;
}

fn refusal(outcome: DesignationCommit) -> DesignationRefusal {
    match outcome {
        DesignationCommit::Refused(refusal) => refusal,
        other => panic!("expected Refused, got {other:?}"),
    }
}

async fn pallet_and_fleet_cutover_designations_exclude_each_other(context: Context) {
    let store = context.migrated().await;
    inventory(&store).await;
    let mut fleet = cluster("c1", "org");
    fleet.fleet_cutover_ingress_designation = Some(fleet_reference());

    // Without a Pallet designation the fleet-cutover one may be set and cleared.
    assert_eq!(written(store.put_cluster(&fleet, Some(1), ClusterGuard::NoDesignation).await.unwrap()).revision, 2);
    assert_eq!(refusal(Proposal::new(1, None).commit(store.as_ref()).await), DesignationRefusal::KindConflict);
    assert_eq!(
        written(store.put_cluster(&cluster("c1", "org"), Some(2), ClusterGuard::Revision).await.unwrap()).revision,
        3
    );

    // Once the cluster holds a Pallet designation, a put guarded by `NoDesignation` writes nothing.
    Proposal::new(1, None).accept(store.as_ref()).await;
    assert_eq!(store.put_cluster(&fleet, Some(3), ClusterGuard::NoDesignation).await.unwrap(), PutOutcome::GuardFailed);
    assert_eq!(store.get_cluster(&id("c1")).await.unwrap().unwrap().revision, 3);
    // Other changes still go through.
    let mut moved = cluster("c1", "org");
    moved.relay_origin = Some("https://relay2.example.net".to_owned());
    assert_eq!(written(store.put_cluster(&moved, Some(3), ClusterGuard::Revision).await.unwrap()).revision, 4);
    // The compare-and-swap is judged first.
    assert_eq!(
        store.put_cluster(&fleet, Some(3), ClusterGuard::NoDesignation).await.unwrap(),
        PutOutcome::RevisionConflict { current: Some(4) }
    );
}

/// Races `count` proposals expecting `expected`, spread over `stores`; answers the one accepted.
async fn race(stores: &[SharedStore], count: usize, expected: Option<AuthorityReference>) -> ClusterIngressDesignation {
    let barrier = Arc::new(tokio::sync::Barrier::new(count));
    let racers: Vec<_> = (0..count)
        .map(|racer| {
            let store = stores[racer % stores.len()].clone();
            let barrier = barrier.clone();
            let proposal = Proposal::new(1, expected.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                let (outcome, calls) = proposal.commit_counting(store.as_ref()).await;
                // Once on the optimistic path, and once more under the lock when it lost.
                assert!((1..=2).contains(&calls), "the judge ran {calls} times");
                outcome
            })
        })
        .collect();
    let mut accepted = Vec::new();
    let mut refused = Vec::new();
    for racer in racers {
        match racer.await.unwrap() {
            DesignationCommit::Accepted { designation, .. } => accepted.push(designation),
            DesignationCommit::Refused(refusal) => refused.push(refusal),
            DesignationCommit::MutationExists => panic!("every racer has its own mutation id"),
        }
    }
    assert_eq!(accepted.len(), 1, "exactly one racer is accepted");
    let winner = accepted.pop().unwrap();
    assert_eq!(refused.len(), count - 1);
    for refusal in refused {
        assert_eq!(refusal, DesignationRefusal::DesignationConflict(Some(winner.reference())));
    }
    assert_eq!(stores[0].current_designation(&id("c1")).await.unwrap(), Some(winner.clone()));
    winner
}

async fn racing_designations_accept_exactly_one(context: Context) {
    let store = context.migrated().await;
    inventory(&store).await;
    let stores = [store.clone()];
    let first = race(&stores, 32, None).await;
    assert_eq!(first.generation, 1);
    // The rotation races too: exactly one second generation.
    let second = race(&stores, 32, Some(first.reference())).await;
    assert_eq!((second.generation, second.previous), (2, Some(first.reference())));
    assert_eq!(store.list_designations(&id("c1"), 1, 500).await.unwrap().len(), 2);
}

async fn racing_designations_across_two_stores_accept_exactly_one(context: Context) {
    let store = context.migrated().await;
    inventory(&store).await;
    // A second pool on the same database, as a second controller process would have.
    let other = context.database.connect().await;
    assert!(other.is_ready().await.unwrap());
    let stores = [store.clone(), other];
    let first = race(&stores, 32, None).await;
    race(&stores, 32, Some(first.reference())).await;
    assert_eq!(store.list_designations(&id("c1"), 1, 500).await.unwrap().len(), 2);
}

async fn rows_that_do_not_read_back_are_corrupt(context: Context) {
    let store = context.migrated().await;
    inventory(&store).await;
    Proposal::new(1, None).accept(store.as_ref()).await;
    context.database.execute("UPDATE clusters SET record = '{\"id\":\"c1\"}' WHERE id = 'c1'").await;
    assert!(matches!(store.get_cluster(&id("c1")).await, Err(StoreError::Corrupt(_))));
    assert!(matches!(store.list_clusters().await, Err(StoreError::Corrupt(_))));
    context.database.execute("UPDATE service_spec_revisions SET body = 'not json'").await;
    assert!(matches!(store.get_service_spec(&id("c1"), &id("ingress"), None).await, Err(StoreError::Corrupt(_))));
    // A designation whose digest no longer matches its content.
    context
        .database
        .execute("UPDATE ingress_designations SET record = replace(record, '\"actorId\":\"user-27cd95a0\"', '\"actorId\":\"someone\"')")
        .await;
    assert!(matches!(store.current_designation(&id("c1")).await, Err(StoreError::Corrupt(_))));
    assert!(matches!(store.cluster_designation(&id("c1")).await, Err(StoreError::Corrupt(_))));
    assert!(matches!(store.list_designations(&id("c1"), 1, 10).await, Err(StoreError::Corrupt(_))));
}

/// A key set whose ids carry `tag`, recorded at `at`.
fn key_set(tag: &str, at: u64) -> Vec<KeyRecord> {
    KeyRole::ALL
        .map(|role| KeyRecord {
            role,
            key_id: format!("sha256:{tag}-{role}"),
            recorded_at_ms: at,
            public_key: None,
            retired_at_ms: None,
        })
        .to_vec()
}

async fn racing_key_sets_record_exactly_one_and_readiness_writes(context: Context) {
    let store = context.migrated().await;
    assert!(store.recorded_keys().await.unwrap().is_empty());
    assert!(!store.holds_deployment_data().await.unwrap());
    // Two stores (two processes) record different key sets at once: one whole set is recorded, and
    // both answer it.
    let other = context.database.connect().await;
    let (first, second) = (key_set("a", 1), key_set("b", 2));
    let (a, b) = tokio::join!(store.record_keys_if_absent(&first), other.record_keys_if_absent(&second));
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_eq!(a, b);
    assert!(a == first || a == second, "{a:?}");
    assert_eq!(store.recorded_keys().await.unwrap(), a);
    assert!(store.holds_deployment_data().await.unwrap());
    // A set naming a role twice writes nothing.
    let twice = [key_set("c", 3)[0].clone(), key_set("d", 3)[0].clone()];
    assert!(matches!(store.replace_recorded_keys(&twice, 3).await, Err(StoreError::Corrupt(_))));
    // Replacing a role's key retires the old one; the other roles keep theirs.
    let signing = key_set("e", 4)[1].clone();
    let recorded = store.replace_recorded_keys(std::slice::from_ref(&signing), 4).await.unwrap();
    assert_eq!(recorded, vec![a[0].clone(), signing, a[2].clone()]);
    // The replaced key stays recorded, retired: making it the key in use again brings back its
    // first record.
    let again = KeyRecord { recorded_at_ms: 9, ..a[1].clone() };
    assert_eq!(store.replace_recorded_keys(&[again], 9).await.unwrap(), a);

    // Readiness writes: without the heartbeat row it is an error, not ready.
    assert!(store.is_ready().await.unwrap());
    context.database.execute("DELETE FROM store_heartbeat").await;
    assert!(matches!(store.is_ready().await, Err(StoreError::Corrupt(_))));
}

async fn a_key_rotation_is_a_compare_and_swap_that_keeps_the_public_key(context: Context) {
    let store = context.migrated().await;
    let keys = ControllerKeys::generate().unwrap();
    let recorded = store.record_keys_if_absent(&keys.key_records(1)).await.unwrap();
    assert_eq!(recorded, keys.key_records(1), "public keys read back");
    let in_use = recorded[1].clone();
    let next_record = |at: u64| {
        let next = ControllerKeys::generate().unwrap();
        KeyRecord {
            role: KeyRole::Signing,
            key_id: next.key_id(KeyRole::Signing),
            recorded_at_ms: at,
            public_key: next.public_key(KeyRole::Signing),
            retired_at_ms: None,
        }
    };
    // Two rotations from one read, across two stores: exactly one wins.
    let other = context.database.connect().await;
    let (first, second) = (next_record(2), next_record(2));
    let (a, b) =
        tokio::join!(store.rotate_recorded_key(&in_use, &first, 2), other.rotate_recorded_key(&in_use, &second, 2));
    let (a, b) = (a.unwrap(), b.unwrap());
    assert!(a ^ b, "exactly one rotation wins: {a} {b}");
    let winner = if a { first } else { second };
    assert_eq!(store.recorded_keys().await.unwrap(), vec![recorded[0].clone(), winner.clone(), recorded[2].clone()]);
    // Oldest first; the retired key keeps its public key.
    let history = vec![KeyRecord { retired_at_ms: Some(2), ..in_use.clone() }, winner.clone()];
    assert_eq!(store.key_history(KeyRole::Signing).await.unwrap(), history);
    // A stale read writes nothing; a rotation that names another role's key is refused.
    assert!(!store.rotate_recorded_key(&in_use, &next_record(3), 3).await.unwrap());
    assert!(matches!(store.rotate_recorded_key(&winner, &recorded[0], 3).await, Err(StoreError::Corrupt(_))));
    assert_eq!(store.key_history(KeyRole::Signing).await.unwrap(), history);
    // A key recorded without its public key is retired with the one the rotation knows.
    let known = next_record(4);
    let bare = KeyRecord { public_key: None, ..known.clone() };
    store.replace_recorded_keys(std::slice::from_ref(&bare), 4).await.unwrap();
    assert_eq!(store.recorded_keys().await.unwrap()[1], bare);
    assert!(store.rotate_recorded_key(&known, &next_record(5), 5).await.unwrap());
    let history = store.key_history(KeyRole::Signing).await.unwrap();
    let retired = history.iter().find(|record| record.key_id == known.key_id).unwrap();
    assert_eq!(retired, &KeyRecord { retired_at_ms: Some(5), ..known });
}

/// The next signal of `subscription`, waiting at most 10 s.
async fn next_signal(subscription: &mut SignalSubscription) -> Signal {
    tokio::time::timeout(std::time::Duration::from_secs(10), subscription.next())
        .await
        .expect("a signal in time")
        .expect("the subscription is open")
}

/// Sends "keys changed" through `store` until `subscription` hears it (a PostgreSQL listener
/// listens a moment after its subscription starts).
async fn until_listening(store: &SharedStore, subscription: &mut SignalSubscription) {
    for _ in 0..100 {
        store.notify_keys_changed().await.unwrap();
        let heard = tokio::time::timeout(std::time::Duration::from_millis(100), async {
            while subscription.next().await != Some(Signal::KeysChanged) {}
        });
        if heard.await.is_ok() {
            return;
        }
    }
    panic!("the subscription never heard a signal");
}

/// Sends a marker through `store` and takes every signal of `subscriptions` up to it.
async fn drain(store: &SharedStore, subscriptions: [&mut SignalSubscription; 2]) {
    let marker = [node_id("marker")];
    store.notify_nodes_changed(&id("probe"), &marker, &[ChangeKind::Projection]).await.unwrap();
    let expected = Signal::NodesChanged {
        cluster_id: id("probe"),
        node_ids: marker.to_vec(),
        kinds: vec![ChangeKind::Projection],
    };
    for subscription in subscriptions {
        while next_signal(subscription).await != expected {}
    }
}

async fn signals_reach_every_store_of_the_database(context: Context) {
    let store = context.migrated().await;
    // Another store on the database: another process on PostgreSQL, another store of this
    // process on the same SQLite file.
    let other = context.database.connect().await;
    let (mut mine, mut theirs) = (store.subscribe_signals(), other.subscribe_signals());
    until_listening(&store, &mut mine).await;
    until_listening(&other, &mut theirs).await;
    drain(&store, [&mut mine, &mut theirs]).await;

    // A long node list arrives whole, cut into signals within the payload limit, at both.
    let nodes: Vec<NodeId> = (0..600).map(|index| node_id(&format!("node-{index:0>40}"))).collect();
    let kinds = [ChangeKind::Assignments, ChangeKind::Claims];
    other.notify_nodes_changed(&id("c1"), &nodes, &kinds).await.unwrap();
    // Nothing is sent for no nodes or no kinds.
    store.notify_nodes_changed(&id("c1"), &[], &kinds).await.unwrap();
    store.notify_nodes_changed(&id("c1"), &nodes, &[]).await.unwrap();
    store.notify_keys_changed().await.unwrap();
    for subscription in [&mut mine, &mut theirs] {
        let (mut received, mut signals) = (Vec::new(), 0);
        while received.len() < nodes.len() {
            let Signal::NodesChanged { cluster_id, node_ids, kinds: named } = next_signal(subscription).await else {
                panic!("a nodes signal")
            };
            assert_eq!((cluster_id, named.as_slice()), (id("c1"), &kinds[..]));
            received.extend(node_ids);
            signals += 1;
        }
        assert_eq!(received, nodes);
        assert!(signals > 1, "a long list is cut");
        assert_eq!(next_signal(subscription).await, Signal::KeysChanged);
    }

    // PostgreSQL: a listener whose connection is cut reconnects, says it may have missed
    // signals, and hears the next ones.
    if let Some(name) = context.database.postgres_name() {
        let mut admin = admin_connection().await;
        let terminated: Vec<bool> = sqlx::query_scalar(AssertSqlSafe(format!(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE datname = '{name}' AND application_name = 'cloudly-signals'"
        )))
        .fetch_all(&mut admin)
        .await
        .unwrap();
        admin.close().await.ok();
        assert_eq!(terminated, [true, true], "both stores listen on a connection of their own");
        for subscription in [&mut mine, &mut theirs] {
            assert_eq!(next_signal(subscription).await, Signal::Missed);
        }
        let node = [node_id("node-1")];
        store.notify_nodes_changed(&id("c1"), &node, &[ChangeKind::Assignments]).await.unwrap();
        for subscription in [&mut mine, &mut theirs] {
            let expected = Signal::NodesChanged {
                cluster_id: id("c1"),
                node_ids: node.to_vec(),
                kinds: vec![ChangeKind::Assignments],
            };
            assert_eq!(next_signal(subscription).await, expected);
        }
    }
    other.close().await;
}

// ---------------------------------------------------------------------------------------------
// Opening by URL.

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn open_picks_the_backend_by_scheme_and_migrates() {
    // An in-memory SQLite database keeps its data across calls.
    let memory = cloudly::store::open("sqlite::memory:").await.unwrap();
    assert_eq!(memory.backend(), Backend::Sqlite);
    assert!(memory.is_ready().await.unwrap());
    inventory(&memory).await;
    assert_eq!(memory.list_clusters().await.unwrap().len(), 1);
    Proposal::new(1, None).accept(memory.as_ref()).await;

    // A SQLite file is created when missing.
    let file = TestDatabase::create(Backend::Sqlite).await;
    let sqlite = cloudly::store::open(&file.url).await.unwrap();
    assert_eq!(sqlite.backend(), Backend::Sqlite);
    assert!(sqlite.is_ready().await.unwrap());
    drop(sqlite);
    file.drop_now().await;

    let database = TestDatabase::create(Backend::Postgres).await;
    let outcome = tokio::spawn({
        let url = database.url.clone();
        async move {
            for url in [url.clone(), url.replacen("postgres://", "postgresql://", 1)] {
                let postgres = cloudly::store::open(&url).await.unwrap();
                assert_eq!(postgres.backend(), Backend::Postgres);
                assert!(postgres.is_ready().await.unwrap());
            }
        }
    })
    .await;
    database.drop_now().await;
    if let Err(error) = outcome {
        std::panic::resume_unwind(error.into_panic());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn store_errors_never_name_the_url() {
    // A role that does not exist on the test server fails at once (a refused connection would
    // be retried until the pool's acquire timeout, as a server that is starting up).
    let wrong_role = format!("postgres://cloudly_no_such_role:hunter2@{}/cloudly", server_of(&pg_admin_url()));
    for url in [
        "mysql://admin:hunter2@127.0.0.1/cloudly",
        wrong_role.as_str(),
        "postgres://admin:hunter2@[not a host/cloudly",
        "sqlite:///nonexistent-directory-hunter2/cloudly.sqlite3",
    ] {
        let error = match cloudly::store::open(url).await {
            Ok(_) => panic!("opening a bad store URL succeeded"),
            Err(error) => error,
        };
        let text = format!("{error} {error:?}");
        assert!(!text.contains("hunter2"), "{text}");
        assert!(matches!(error, StoreError::Unavailable(_)), "{text}");
    }
}

#[test]
fn test_database_urls_keep_the_server_and_the_parameters() {
    assert_eq!(
        url_with_database("postgres://postgres@127.0.0.1:5432/postgres", "x"),
        "postgres://postgres@127.0.0.1:5432/x"
    );
    assert_eq!(url_with_database("postgres://u:p@h/db?sslmode=disable", "x"), "postgres://u:p@h/x?sslmode=disable");
    assert_eq!(url_with_database("postgres://h:5432", "x"), "postgres://h:5432/x");
    assert_eq!(server_of("postgres://u:p@h:5432/db?sslmode=disable"), "h:5432");
    assert_eq!(server_of("postgres://h/db"), "h");
}

// ---------------------------------------------------------------------------------------------
// Upgrades and connection loss.

/// The migrations of versions 1–4 of `backend`, as the build before migration 5 applied them
/// (same SQL, so the same checksums the store checks).
/// The migrations of the build before `version`: the files as that build embedded them (sqlx
/// checks a migration's SQL, not its description).
fn migrator_before(backend: Backend, version: i64) -> sqlx::migrate::Migrator {
    use sqlx::SqlSafeStr as _;
    use sqlx::migrate::{Migration, MigrationType, Migrator};
    macro_rules! files {
        ($dir:literal) => {
            files!(@ $dir: 1 "0001_inventory_and_designations", 2 "0002_relays_and_routes",
                3 "0003_sessions_and_assignments", 4 "0004_ingress_registrations", 5 "0005_designation_write_set",
                6 "0006_controller_keys_and_readiness", 7 "0007_network", 8 "0008_service_runtime_status",
                9 "0009_runtime_local_storage_claims", 10 "0010_retention", 11 "0011_network_projections",
                12 "0012_controller_key_public_keys", 13 "0013_projection_store_shape",
                14 "0014_projection_endpoint_references")
        };
        (@ $dir:literal: $($version:literal $name:literal),*) => {
            [$(($version, $name, include_str!(concat!("../migrations/", $dir, "/", $name, ".sql")))),*]
        };
    }
    let files: [(i64, &str, &'static str); 14] = match backend {
        Backend::Postgres => files!("postgres"),
        Backend::Sqlite => files!("sqlite"),
    };
    Migrator::with_migrations(
        files
            .into_iter()
            .filter(|(file_version, _, _)| *file_version < version)
            .map(|(version, name, sql)| {
                Migration::new(version, name.into(), MigrationType::Simple, sql.into_sql_str(), false)
            })
            .collect(),
    )
}

/// A byte string as an SQL literal of `backend`.
fn bytes_literal(backend: Backend, bytes: &[u8]) -> String {
    let hex: String = bytes.iter().map(|byte| format!("{byte:02x}")).collect();
    match backend {
        Backend::Postgres => format!("'\\x{hex}'::bytea"),
        Backend::Sqlite => format!("X'{hex}'"),
    }
}

/// A text as an SQL string literal.
fn text_literal(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

/// A database that holds a designation chain written by the build before migration 5 (head
/// table, mutation table) reads back whole after the upgrade, replays, and rotates on.
async fn designations_written_before_migration_5_read_back(context: Context) {
    let backend = context.store.backend();
    context.database.run_raw(Some(&migrator_before(backend, 5)), &[]).await;
    let store = context.store.clone();
    assert!(!store.is_ready().await.unwrap(), "version 5 is pending");
    // The inventory as the old build wrote it (this build's service writes need version 5).
    store.put_organization(&organization("org")).await.unwrap();
    written(store.put_cluster(&cluster("c1", "org"), None, ClusterGuard::Revision).await.unwrap());
    let body = spec_body("c1", "ingress", "ingress:1");
    let body_text = cloudly::contract::json::canonical(&serde_json::to_value(&body).unwrap()).unwrap();
    context
        .database
        .run_raw(
        None,
        &[
            "INSERT INTO services (cluster_id, service_id, current_revision, deleted) VALUES ('c1', 'ingress', 1, FALSE)"
                .to_owned(),
            format!(
                "INSERT INTO service_spec_revisions (cluster_id, service_id, revision, body) VALUES ('c1', 'ingress', 1, {})",
                text_literal(&body_text)
            ),
        ],
    )
    .await;

    // Two generations as the old build wrote them.
    let cluster = store.get_cluster(&id("c1")).await.unwrap().unwrap();
    let spec = store.get_service_spec(&id("c1"), &id("ingress"), None).await.unwrap().unwrap();
    let calls = AtomicUsize::new(0);
    let first = Proposal::new(1, None);
    let first_write = first.judge(&first.facts(Some(cluster.clone()), Some(spec.clone()), None), &calls).unwrap();
    let second = Proposal::new(1, Some(first_write.designation.reference()));
    let facts = second.facts(Some(cluster), Some(spec.clone()), Some(first_write.designation.clone()));
    let second_write = second.judge(&facts, &calls).unwrap();
    let mut statements = Vec::new();
    for write in [&first_write, &second_write] {
        let designation = &write.designation;
        statements.push(format!(
            "INSERT INTO ingress_designations (cluster_id, generation, designation_id, digest, ingress_service_id, \
               prepared_spec_revision, record) VALUES ('c1', {}, {}, {}, 'ingress', 1, {})",
            designation.generation,
            text_literal(designation.id.as_str()),
            text_literal(designation.digest.as_str()),
            text_literal(&cloudly::contract::json::canonical(&designation.to_value()).unwrap()),
        ));
        statements.push(format!(
            "INSERT INTO secret_versions (secret_id, secret_version_id, nonce, ciphertext, value_hash) \
             VALUES ({}, {}, {}, {}, {})",
            text_literal(write.secret.secret_id.as_str()),
            text_literal(write.secret.secret_version_id.as_str()),
            bytes_literal(backend, &write.secret.nonce),
            bytes_literal(backend, &write.secret.ciphertext),
            bytes_literal(backend, &write.secret.value_hash),
        ));
        statements.push(format!(
            "INSERT INTO ingress_designation_mutations (cluster_id, mutation_id, request_canonical, generation) \
             VALUES ('c1', {}, {}, {})",
            text_literal(write.mutation_id.as_str()),
            text_literal(&write.request_canonical),
            designation.generation,
        ));
    }
    statements.push("INSERT INTO ingress_designation_heads (cluster_id, generation) VALUES ('c1', 2)".to_owned());
    context.database.run_raw(None, &statements).await;

    store.migrate().await.unwrap();
    assert!(store.is_ready().await.unwrap());
    let (first_designation, second_designation) = (first_write.designation.clone(), second_write.designation.clone());
    assert_eq!(store.current_designation(&id("c1")).await.unwrap(), Some(second_designation.clone()));
    assert_eq!(store.cluster_designation(&id("c1")).await.unwrap(), Some(Some(second_designation.clone())));
    assert_eq!(
        store.list_designations(&id("c1"), 1, 10).await.unwrap(),
        vec![first_designation.clone(), second_designation.clone()]
    );
    let recorded = store.find_designation_mutation(&id("c1"), &first.mutation_id).await.unwrap().unwrap();
    assert_eq!(
        (recorded.request_canonical, recorded.designation, recorded.spec),
        (first.request_canonical(), first_designation, spec)
    );
    let version = &second_designation.credential.secret_version;
    let secret = store.get_secret(&version.secret_id, &version.secret_version_id).await.unwrap().unwrap();
    assert_eq!(secret.value_hash, second_write.secret.value_hash);

    // The upgraded chain replays its mutations and moves on from its head.
    assert!(matches!(second.commit(store.as_ref()).await, DesignationCommit::MutationExists));
    assert_eq!(
        refusal(Proposal::new(1, Some(first_write.designation.reference())).commit(store.as_ref()).await),
        DesignationRefusal::DesignationConflict(Some(second_designation.reference()))
    );
    let (third, _) = Proposal::new(1, Some(second_designation.reference())).accept(store.as_ref()).await;
    assert_eq!((third.generation, third.previous), (3, Some(second_designation.reference())));
}

/// Connections the database server drops (a restart, an administrator's terminate) are replaced:
/// at most one call per lost connection answers `Unavailable`, and the store recovers without a
/// restart of its own.
async fn lost_connections_are_replaced(context: Context) {
    let store = context.migrated().await;
    inventory(&store).await;
    // Several connections in the pool at once.
    let cluster_id = id("c1");
    let reads = (0..8).map(|_| store.get_cluster(&cluster_id));
    for read in futures_util::future::join_all(reads).await {
        assert!(read.unwrap().is_some());
    }
    if let Some(name) = context.database.postgres_name() {
        let mut admin = admin_connection().await;
        let terminated: Vec<bool> = sqlx::query_scalar(AssertSqlSafe(format!(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{name}' AND pid <> pg_backend_pid()"
        )))
        .fetch_all(&mut admin)
        .await
        .unwrap();
        admin.close().await.ok();
        assert!(!terminated.is_empty(), "the store had connections to terminate");
    }
    // The first call may meet a dead connection; it answers Unavailable and marks the pool
    // suspect, so every later checkout is checked and a dead connection replaced.
    let first = store.get_cluster(&id("c1")).await;
    if let Err(error) = &first {
        assert!(matches!(error, StoreError::Unavailable(_)), "{error:?}");
    }
    for _ in 0..20 {
        assert!(store.get_cluster(&id("c1")).await.unwrap().is_some(), "the store recovered");
    }
    // Writes recover too.
    let (designation, _) = Proposal::new(1, None).accept(store.as_ref()).await;
    assert_eq!(designation.generation, 1);
}

// ---------------------------------------------------------------------------------------------
// The optimistic designation commit: facts read, judged, and written only while unchanged.

/// Runs `work` on a second store of the same database (as a second controller process would),
/// to completion, on a thread and runtime of its own: called from inside a judge, it lands
/// between the optimistic read of the facts and their write.
fn meanwhile<Work, Fut>(database: &TestDatabase, work: Work)
where
    Work: FnOnce(SharedStore) -> Fut + Send,
    Fut: Future<Output = ()>,
{
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
                runtime.block_on(async {
                    let other = database.connect().await;
                    work(other).await;
                });
            })
            .join()
            .expect("the concurrent write succeeds");
    });
}

/// A spec written after the optimistic read fails the write's guard; judged again under the lock,
/// the request is refused `spec-revision-mismatch` and nothing is written.
async fn facts_written_between_read_and_write_are_judged_again(context: Context) {
    let store = context.migrated().await;
    inventory(&store).await;
    let proposal = Proposal::new(1, None);
    let calls = AtomicUsize::new(0);
    let judge = |facts: &DesignationSnapshot| {
        if calls.load(Ordering::SeqCst) == 0 {
            meanwhile(&context.database, |other| async move {
                written(other.put_service_spec(&spec_body("c1", "ingress", "ingress:2"), Some(1)).await.unwrap());
            });
        }
        proposal.judge(facts, &calls)
    };
    let outcome =
        commit_designation(store.as_ref(), &id("c1"), &id("ingress"), &proposal.mutation_id, &judge).await.unwrap();
    assert_eq!(refusal(outcome), DesignationRefusal::SpecRevisionMismatch(2));
    assert_eq!(calls.load(Ordering::SeqCst), 2, "judged again under the lock");
    assert_eq!(store.current_designation(&id("c1")).await.unwrap(), None, "nothing was written");
    assert!(store.find_designation_mutation(&id("c1"), &proposal.mutation_id).await.unwrap().is_none());

    // The same for the cluster record (a new runtime generation) during a rotation.
    let (first, _) = Proposal::new(2, None).accept(store.as_ref()).await;
    let rotation = Proposal::new(2, Some(first.reference()));
    let calls = AtomicUsize::new(0);
    let judge = |facts: &DesignationSnapshot| {
        if calls.load(Ordering::SeqCst) == 0 {
            meanwhile(&context.database, |other| async move {
                let mut moved = cluster("c1", "org");
                moved.runtime.generation += 1;
                written(other.put_cluster(&moved, Some(1), ClusterGuard::Revision).await.unwrap());
            });
        }
        rotation.judge(facts, &calls)
    };
    let outcome =
        commit_designation(store.as_ref(), &id("c1"), &id("ingress"), &rotation.mutation_id, &judge).await.unwrap();
    assert!(matches!(refusal(outcome), DesignationRefusal::RuntimeMismatch(runtime) if runtime.generation == 5));
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    assert_eq!(store.current_designation(&id("c1")).await.unwrap(), Some(first));
}

/// A twin with the same mutation id that commits after the optimistic read makes this request a
/// replay (the store answers `MutationExists`), not a `designation-conflict`.
async fn a_twin_committed_between_read_and_write_is_replayed(context: Context) {
    let store = context.migrated().await;
    inventory(&store).await;
    let proposal = Proposal::new(1, None);
    let calls = AtomicUsize::new(0);
    let judge = |facts: &DesignationSnapshot| {
        if calls.load(Ordering::SeqCst) == 0 {
            let twin = proposal.clone();
            meanwhile(&context.database, |other| async move {
                twin.accept(other.as_ref()).await;
            });
        }
        proposal.judge(facts, &calls)
    };
    let outcome =
        commit_designation(store.as_ref(), &id("c1"), &id("ingress"), &proposal.mutation_id, &judge).await.unwrap();
    assert!(matches!(outcome, DesignationCommit::MutationExists), "{outcome:?}");
    assert_eq!(calls.load(Ordering::SeqCst), 1, "the recorded mutation is answered before the judge");
    assert_eq!(store.list_designations(&id("c1"), 1, 10).await.unwrap().len(), 1, "one generation");
}

/// A write cancelled while it waits for the cluster's lock (a request timeout, a client gone)
/// must not leave its transaction — and the lock it gets a moment later — on a pooled connection
/// until that connection's next use: other processes would block on the cluster meanwhile.
async fn a_cancelled_write_releases_its_locks_at_once(context: Context) {
    let store = context.migrated().await;
    inventory(&store).await;
    if context.database.backend != Backend::Postgres {
        // SQLite has one writer at a time and no row locks to leave behind.
        return;
    }
    let url = &context.database.url;
    // Another session holds the cluster's lock, so the store's write waits for it.
    let mut holder = sqlx::PgConnection::connect(url).await.unwrap();
    sqlx::query("BEGIN").execute(&mut holder).await.unwrap();
    sqlx::query("SELECT 1 FROM clusters WHERE id = 'c1' FOR UPDATE").execute(&mut holder).await.unwrap();
    let moved_on = spec_body("c1", "ingress", "ingress:2");
    let write = store.put_service_spec(&moved_on, Some(1));
    assert!(
        tokio::time::timeout(std::time::Duration::from_millis(300), write).await.is_err(),
        "the write waits for the lock, and is cancelled"
    );
    // The holder lets go; the cancelled write's backend gets the lock, and must give it back.
    sqlx::query("ROLLBACK").execute(&mut holder).await.unwrap();
    let mut probe = sqlx::PgConnection::connect(url).await.unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        sqlx::query("BEGIN").execute(&mut probe).await.unwrap();
        let locked = sqlx::query("SELECT 1 FROM clusters WHERE id = 'c1' FOR UPDATE NOWAIT").execute(&mut probe).await;
        sqlx::query("ROLLBACK").execute(&mut probe).await.unwrap();
        if locked.is_ok() {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the cluster stays locked by the cancelled write: {locked:?}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    // Nothing of the cancelled write was committed, and the store works on.
    assert_eq!(store.get_service_spec(&id("c1"), &id("ingress"), None).await.unwrap().unwrap().revision, 1);
    written(store.put_service_spec(&spec_body("c1", "ingress", "ingress:2"), Some(1)).await.unwrap());
    holder.close().await.ok();
    probe.close().await.ok();
}

// ---------------------------------------------------------------------------------------------
// Runtime network address plans and leases.

/// An address plan of `c1` at `revision` with organization `org`'s pool `pool`.
fn address_plan(revision: u64, pool: &str) -> RuntimeNetworkAddressPlan {
    let sealed = seal_runtime_network_address_plan(&serde_json::json!({
        "clusterId": "c1", "revision": revision, "prefixes": ["10.64.0.0/16", "192.0.2.16/28"],
        "pools": [{ "id": "pool-org", "organizationId": "org", "prefix": pool }],
        "vpn": null, "hubs": [],
        "platformEndpoints": [{ "id": "corestore", "address": "192.0.2.17", "protocol": "tcp", "port": 9000 }],
    }))
    .unwrap();
    snapshot_runtime_network_address_plan(&sealed).unwrap()
}

/// Plans are kept by revision with the authority generation each made, leases by generation with
/// their heads; a plan or lease change that breaks a rule of the store, and a live lease that
/// overlaps another, write nothing; a row that does not read back is corrupt.
/// [`inventory`] and its cluster's nodes `node-1` and `node-2`.
async fn inventory_on_two_nodes(store: &SharedStore) {
    inventory(store).await;
    for name in ["node-1", "node-2"] {
        written(store.put_node(&id("c1"), &node(name, "10.0.0.1"), NodeBearerHash::IfCreated([1; 32])).await.unwrap());
    }
}

async fn network_plans_and_leases_keep_their_rules(context: Context) {
    let store = context.migrated().await;
    inventory_on_two_nodes(&store).await;
    let cluster = id("c1");
    assert!(store.lock_network(&id("c9")).await.unwrap().is_none(), "no cluster, no lock");
    assert_eq!(store.network_plan(&cluster).await.unwrap(), None);

    let first = address_plan(1, "10.64.0.0/29");
    let authority = compose_runtime_network_protected_authority(&cluster, None, &first).unwrap();
    let mut locked = store.lock_network(&cluster).await.unwrap().unwrap();
    for (plan, authority) in [(address_plan(2, "10.64.0.0/29"), Some(&authority)), (first.clone(), None)] {
        let refused = locked.write_plan(&plan, authority).await;
        assert!(matches!(refused, Err(StoreError::Corrupt(_))), "{refused:?}");
    }
    let mut tampered = first.clone();
    tampered.revision = 1;
    tampered.pools.clear();
    assert!(matches!(locked.write_plan(&tampered, Some(&authority)).await, Err(StoreError::Corrupt(_))));
    locked.write_plan(&first, Some(&authority)).await.unwrap();
    locked.commit().await.unwrap();
    let stored = StoredNetworkPlan { plan: first.clone(), authority: authority.clone() };
    assert_eq!(store.network_plan(&cluster).await.unwrap(), Some(stored.clone()));
    // A revision that keeps the authority writes the plan alone.
    let grown = address_plan(2, "10.64.0.0/28");
    let mut locked = store.lock_network(&cluster).await.unwrap().unwrap();
    assert_eq!(locked.current(), Some(&stored));
    locked.write_plan(&grown, None).await.unwrap();
    locked.commit().await.unwrap();
    let stored = StoredNetworkPlan { plan: grown, authority };
    assert_eq!(store.network_plan(&cluster).await.unwrap(), Some(stored.clone()));

    // The assignment reconcile allocates leases in its own transaction.
    let controller =
        Controller::new(store.clone(), Arc::new(ControllerKeys::generate().unwrap()), Arc::new(SystemClock));
    controller.reconcile_assignments(&cluster, &FactScope::Cluster).await.unwrap();
    let leases = store.live_leases(&cluster).await.unwrap();
    assert_eq!(leases.len(), 2);
    for lease in &leases {
        assert_eq!(store.lease_generations(&cluster, &lease.id).await.unwrap(), std::slice::from_ref(lease));
    }

    // A lease on a live lease's link subnet: the database refuses it, nothing is written.
    let overlapping = RuntimeNetworkLease {
        id: fresh_id("lease"),
        generation: 1,
        previous: None,
        ipv4: leases[0].ipv4,
        ..leases[1].clone()
    }
    .with_computed_digest();
    let mut locked = store.lock_network(&cluster).await.unwrap().unwrap();
    let changes = [
        LeaseChange::Release { id: leases[1].id.clone(), generation: 1 },
        LeaseChange::Issue(Box::new(overlapping.clone())),
    ];
    let refused = locked.apply_leases(&changes).await;
    assert!(matches!(refused, Err(StoreError::Unavailable(_))), "{refused:?}");
    locked.rollback().await.unwrap();
    assert_eq!(store.live_leases(&cluster).await.unwrap(), leases);
    assert!(store.lease_generations(&cluster, &overlapping.id).await.unwrap().is_empty());

    // Changes a planner must never make are refused before anything is written.
    let mut untrue = leases[0].clone();
    untrue.generation = 2;
    untrue.previous = Some(leases[0].reference());
    let linked = untrue.clone().with_computed_digest();
    let mut unlinked = linked.clone();
    unlinked.previous = Some(leases[1].reference());
    let unlinked = unlinked.with_computed_digest();
    let mut foreign = RuntimeNetworkLease { id: fresh_id("lease"), ..overlapping.clone() };
    foreign.cluster_id = id("c2");
    let foreign = foreign.with_computed_digest();
    let twice = LeaseChange::Release { id: linked.id.clone(), generation: 1 };
    for (rule, changes) in [
        ("a digest that is not the content's", vec![LeaseChange::Issue(Box::new(untrue))]),
        ("a chain that does not link", vec![LeaseChange::Issue(Box::new(unlinked))]),
        ("another cluster", vec![LeaseChange::Issue(Box::new(foreign))]),
        ("one lease twice", vec![LeaseChange::Issue(Box::new(linked.clone())), twice]),
    ] {
        let mut locked = store.lock_network(&cluster).await.unwrap().unwrap();
        let refused = locked.apply_leases(&changes).await;
        assert!(matches!(refused, Err(StoreError::Corrupt(_))), "{rule}: {refused:?}");
        locked.rollback().await.unwrap();
    }
    // A stale head: the guard finds another state.
    let mut locked = store.lock_network(&cluster).await.unwrap().unwrap();
    let stale = locked.apply_leases(&[LeaseChange::Release { id: leases[0].id.clone(), generation: 2 }]).await;
    assert!(matches!(stale, Err(StoreError::Unavailable(_))), "{stale:?}");
    locked.rollback().await.unwrap();
    // The next generation of a live lease (a move) is written and read back.
    let mut locked = store.lock_network(&cluster).await.unwrap().unwrap();
    locked.apply_leases(&[LeaseChange::Issue(Box::new(linked.clone()))]).await.unwrap();
    locked.commit().await.unwrap();
    assert_eq!(store.lease_generations(&cluster, &linked.id).await.unwrap(), [leases[0].clone(), linked.clone()]);
    assert_eq!(store.live_leases(&cluster).await.unwrap(), [linked, leases[1].clone()].into_iter().collect::<Vec<_>>());

    // A process keeps the leases it parsed while the cluster's lease set tag holds; a record
    // rewritten behind the store's back is found by a reader that has not kept that set (here:
    // the tag moves with it, as any write of lease heads moves it).
    context.database.execute("UPDATE runtime_network_leases SET record = '{}'").await;
    context.database.execute("UPDATE runtime_network_lease_sets SET tag = 'rewritten'").await;
    assert!(matches!(store.live_leases(&cluster).await, Err(StoreError::Corrupt(_))));
    context
        .database
        .execute("UPDATE runtime_network_address_plans SET digest = record, record = '{\"clusterId\":1}'")
        .await;
    assert!(matches!(store.network_plan(&cluster).await, Err(StoreError::Corrupt(_))));
}

/// Generation `generation` of the claim of volume `data` of `ingress` on node-1, linking
/// `previous`, digested and signed.
fn claim(generation: u64, previous: Option<AuthorityReference>, lifecycle: LocalStorageLifecycle) -> ClaimChange {
    let mut claim = RuntimeLocalStorageClaim {
        id: id("lsc-data"),
        generation,
        previous,
        controller: ControllerReference { kind: ControllerKind::Cloudly, id: id("cloudly") },
        organization_id: id("org"),
        cluster_id: id("c1"),
        node_id: node_id("node-1"),
        runtime_namespace: id("ns-1"),
        service_id: id("ingress"),
        volume_id: id("data"),
        source: LocalStorageSource::Directory,
        initialization: LocalStorageInitialization::Empty(InitialOwnership { uid: 1000, gid: 1000, mode: 0o750 }),
        mount: LocalStorageMount { mount_path: MountPath::parse("/var/lib/data").unwrap(), read_only: false },
        access_mode: LocalStorageAccessMode::ReadWriteOnce,
        reclaim_policy: LocalStorageReclaimPolicy::Retain,
        lifecycle,
        digest: Sha256Digest::from_bytes(&[0; 32]),
    };
    claim.digest = claim.compute_digest();
    let keys = cloudly::keys::ControllerKeys::generate().unwrap();
    ClaimChange::Issue(Box::new(cloudly::contract::signing::sign(&keys.signing, claim)))
}

fn answer(state: &str, at: u64) -> ClaimAnswer {
    ClaimAnswer {
        status: "accepted".to_owned(),
        state: state.to_owned(),
        session_id: id("session-1"),
        session_generation: 1,
        answered_at: at,
    }
}

async fn claims_link_their_heads_and_keep_each_answer(context: Context) {
    let store = context.migrated().await;
    inventory(&store).await;
    let (cluster_id, claim_id) = (id("c1"), id("lsc-data"));
    let first = claim(1, None, LocalStorageLifecycle::Bound);
    let ClaimChange::Issue(signed) = &first;
    let first_reference = signed.payload.reference();
    let mut locked = store.lock_assignments(&cluster_id, &FactScope::Cluster).await.unwrap();
    locked.apply_claims(std::slice::from_ref(&first), 100).await.unwrap();
    locked.commit().await.unwrap();
    let heads = store.claim_heads(&cluster_id).await.unwrap();
    assert_eq!(heads.readable.len(), 1);
    assert_eq!(heads.readable[0].signed, **signed);
    assert_eq!((heads.readable[0].issued_at, heads.readable[0].answer.clone()), (100, None));
    assert_eq!(store.assignment_facts(&cluster_id, &FactScope::Cluster).await.unwrap().claims, heads);
    assert_eq!(store.claim_cluster(&claim_id).await.unwrap(), Some(cluster_id.clone()));
    assert_eq!(store.claim_cluster(&id("lsc-none")).await.unwrap(), None);

    // A generation that does not link the head is refused; nothing is written.
    let mut locked = store.lock_assignments(&cluster_id, &FactScope::Cluster).await.unwrap();
    let skipping = claim(3, Some(first_reference.clone()), LocalStorageLifecycle::Purge);
    assert!(matches!(locked.apply_claims(&[skipping], 110).await, Err(StoreError::Corrupt(_))));
    locked.rollback().await.unwrap();
    let mut locked = store.lock_assignments(&cluster_id, &FactScope::Cluster).await.unwrap();
    assert!(matches!(locked.apply_claims(std::slice::from_ref(&first), 110).await, Err(StoreError::Corrupt(_))));
    locked.rollback().await.unwrap();
    let purge = claim(2, Some(first_reference.clone()), LocalStorageLifecycle::Purge);
    let mut locked = store.lock_assignments(&cluster_id, &FactScope::Cluster).await.unwrap();
    locked.apply_claims(&[purge], 120).await.unwrap();
    locked.commit().await.unwrap();
    let node_heads = store.node_claim_heads(&cluster_id, &node_id("node-1")).await.unwrap();
    assert_eq!(node_heads.readable[0].signed.payload.generation, 2);
    assert!(store.node_claim_heads(&cluster_id, &node_id("node-2")).await.unwrap().readable.is_empty());

    // Answers are kept per generation; faults count up and never touch the answer.
    assert!(store.record_claim_answer(&cluster_id, &claim_id, 1, &answer("ready", 130)).await.unwrap());
    assert!(!store.record_claim_answer(&cluster_id, &claim_id, 9, &answer("ready", 130)).await.unwrap());
    for at in [140, 150] {
        let fault = ClaimFault { fault: "the answer does not bind".to_owned(), at };
        store.record_claim_fault(&cluster_id, &claim_id, 2, &fault).await.unwrap();
    }
    let head = store.get_claim(&cluster_id, &claim_id, 2).await.unwrap().unwrap();
    assert_eq!((head.fault_count, head.answer), (2, None));
    assert_eq!(head.last_fault, Some(ClaimFault { fault: "the answer does not bind".to_owned(), at: 150 }));
    let last = store.last_claim_answers(&cluster_id).await.unwrap();
    assert_eq!((last.len(), last[0].generation, last[0].answer.clone()), (1, 1, answer("ready", 130)));

    // A decision is recorded only on an uncertain head.
    let decision = ClaimResolution { decision: "purge".to_owned(), at: 160 };
    assert!(!store.record_claim_resolution(&cluster_id, &claim_id, 2, &decision, true).await.unwrap());
    assert!(store.record_claim_answer(&cluster_id, &claim_id, 2, &answer("uncertain", 170)).await.unwrap());
    store.record_claim_answer(&cluster_id, &claim_id, 1, &answer("uncertain", 170)).await.unwrap();
    assert!(!store.record_claim_resolution(&cluster_id, &claim_id, 1, &decision, false).await.unwrap());
    assert!(store.record_claim_resolution(&cluster_id, &claim_id, 2, &decision, true).await.unwrap());
    let head = store.get_claim(&cluster_id, &claim_id, 2).await.unwrap().unwrap();
    assert_eq!((head.answer, head.resolution), (None, Some(decision)));
    assert_eq!(store.last_claim_answers(&cluster_id).await.unwrap()[0].generation, 1);
    // A state the schema does not know is refused by the database.
    assert!(store.record_claim_answer(&cluster_id, &claim_id, 2, &answer("mounted", 180)).await.is_err());

    // A record that does not read back affects only itself.
    context.database.execute("UPDATE runtime_local_storage_claims SET record = '{}' WHERE generation = 2").await;
    let heads = store.claim_heads(&cluster_id).await.unwrap();
    assert!(heads.readable.is_empty());
    assert_eq!(heads.unreadable[0].reference.generation, 2);
    assert_eq!(heads.unreadable[0].extra.volume_id, id("data"));
    assert!(matches!(store.get_claim(&cluster_id, &claim_id, 2).await, Err(StoreError::Corrupt(_))));
    assert!(store.get_claim(&cluster_id, &claim_id, 1).await.unwrap().is_some());
}

/// [`inventory`] and generation 1 of the bound claim `lsc-data` of `c1`: answers their ids.
async fn one_bound_claim(store: &SharedStore) -> (Id, Id) {
    inventory(store).await;
    let cluster_id = id("c1");
    let mut locked = store.lock_assignments(&cluster_id, &FactScope::Cluster).await.unwrap();
    locked.apply_claims(&[claim(1, None, LocalStorageLifecycle::Bound)], 100).await.unwrap();
    locked.commit().await.unwrap();
    (cluster_id, id("lsc-data"))
}

/// An answer under session 1 after one under session 2 keeps session 2's.
async fn a_late_claim_answer_of_an_older_session_changes_nothing(context: Context) {
    let store = context.migrated().await;
    let (cluster_id, claim_id) = one_bound_claim(&store).await;
    let under = |state: &str, session_generation: u64, at: u64| ClaimAnswer {
        session_id: id(&format!("session-{session_generation}")),
        session_generation,
        ..answer(state, at)
    };
    assert!(store.record_claim_answer(&cluster_id, &claim_id, 1, &under("uncertain", 1, 110)).await.unwrap());
    assert!(store.record_claim_answer(&cluster_id, &claim_id, 1, &under("ready", 2, 120)).await.unwrap());
    assert!(!store.record_claim_answer(&cluster_id, &claim_id, 1, &under("uncertain", 1, 130)).await.unwrap());
    let kept = store.get_claim(&cluster_id, &claim_id, 1).await.unwrap().unwrap().answer;
    assert_eq!(kept, Some(under("ready", 2, 120)));

    // The same session answers on.
    assert!(store.record_claim_answer(&cluster_id, &claim_id, 1, &under("import-required", 2, 140)).await.unwrap());
    let kept = store.get_claim(&cluster_id, &claim_id, 1).await.unwrap().unwrap().answer;
    assert_eq!(kept, Some(under("import-required", 2, 140)));
}

/// Two operators decide one uncertain generation at once: one decision is recorded, the other
/// answers false and changes nothing; a later decision is refused as well.
async fn of_two_decisions_on_an_uncertain_claim_one_is_recorded(context: Context) {
    let store = context.migrated().await;
    let (cluster_id, claim_id) = one_bound_claim(&store).await;
    assert!(store.record_claim_answer(&cluster_id, &claim_id, 1, &answer("uncertain", 110)).await.unwrap());
    let decisions =
        [("rebind", 120), ("purge", 121)].map(|(decision, at)| ClaimResolution { decision: decision.to_owned(), at });
    let (first, second) = tokio::join!(
        store.record_claim_resolution(&cluster_id, &claim_id, 1, &decisions[0], false),
        store.record_claim_resolution(&cluster_id, &claim_id, 1, &decisions[1], false),
    );
    let recorded = [first.unwrap(), second.unwrap()];
    assert_eq!(recorded.iter().filter(|recorded| **recorded).count(), 1, "{recorded:?}");
    let winner = &decisions[usize::from(recorded[1])];
    let stored = store.get_claim(&cluster_id, &claim_id, 1).await.unwrap().unwrap();
    assert_eq!((stored.resolution.as_ref(), stored.answer), (Some(winner), Some(answer("uncertain", 110))));

    let late = ClaimResolution { decision: "purge".to_owned(), at: 130 };
    assert!(!store.record_claim_resolution(&cluster_id, &claim_id, 1, &late, true).await.unwrap());
    let stored = store.get_claim(&cluster_id, &claim_id, 1).await.unwrap().unwrap();
    assert_eq!((stored.resolution.as_ref(), stored.answer), (Some(winner), Some(answer("uncertain", 110))));
}

/// A decision that forgot the node's answer (an uncertain purge decided `purge`, pushed again)
/// stands until the node answers again: an `uncertain` answer then holds the claim for an
/// operator once more, and a new decision can be recorded; any other answer keeps the decision.
async fn an_uncertain_answer_after_a_forgetting_decision_asks_for_a_decision_again(context: Context) {
    let store = context.migrated().await;
    let (cluster_id, claim_id) = one_bound_claim(&store).await;
    assert!(store.record_claim_answer(&cluster_id, &claim_id, 1, &answer("uncertain", 110)).await.unwrap());
    let purge = ClaimResolution { decision: "purge".to_owned(), at: 120 };
    assert!(store.record_claim_resolution(&cluster_id, &claim_id, 1, &purge, true).await.unwrap());
    assert!(store.record_claim_answer(&cluster_id, &claim_id, 1, &answer("uncertain", 130)).await.unwrap());
    let stored = store.get_claim(&cluster_id, &claim_id, 1).await.unwrap().unwrap();
    assert_eq!((stored.resolution, stored.answer), (None, Some(answer("uncertain", 130))));
    let again = ClaimResolution { decision: "purge".to_owned(), at: 140 };
    assert!(store.record_claim_resolution(&cluster_id, &claim_id, 1, &again, true).await.unwrap());
    assert!(store.record_claim_answer(&cluster_id, &claim_id, 1, &answer("purged", 150)).await.unwrap());
    let stored = store.get_claim(&cluster_id, &claim_id, 1).await.unwrap().unwrap();
    assert_eq!((stored.resolution, stored.answer), (Some(again), Some(answer("purged", 150))));
}

// ---------------------------------------------------------------------------------------------
// Runtime assignments.

/// The next generation of `head` with `image`, linking it, digested and signed.
fn next_generation(head: &StoredAssignment, image: &str, keys: &ControllerKeys) -> AssignmentChange {
    let mut payload = head.signed.payload.clone();
    payload.generation += 1;
    payload.previous = Some(head.signed.payload.reference());
    payload.workload.image = image.to_owned();
    payload.digest = payload.compute_digest();
    AssignmentChange::Issue(Box::new(cloudly::contract::signing::sign(&keys.signing, payload)))
}

/// The (id, generation, image, active) of every assignment head of `c1`, sorted by id.
async fn assignment_heads(store: &SharedStore) -> Vec<(Id, u64, String, bool)> {
    let heads = store.assignment_facts(&id("c1"), &FactScope::Cluster).await.unwrap().heads;
    assert!(heads.unreadable.is_empty());
    heads
        .readable
        .iter()
        .map(|head| {
            let payload = &head.signed.payload;
            (payload.id.clone(), payload.generation, payload.workload.image.clone(), head.active)
        })
        .collect()
}

/// The new generations of one apply are written a batch per statement: first generations of new
/// ids and next generations of existing ones, each with its head, read back as written. A batch
/// one of whose records already exists is refused by its guard (`Unavailable`); rolled back, it
/// leaves nothing.
async fn assignment_generations_are_written_in_batches_under_their_guards(context: Context) {
    let store = context.migrated().await;
    inventory_on_two_nodes(&store).await;
    let cluster = id("c1");
    let keys = ControllerKeys::generate().unwrap();
    let controller =
        Controller::new(store.clone(), Arc::new(ControllerKeys::generate().unwrap()), Arc::new(SystemClock));
    // Generation 1 of both replicas: one batch of new ids.
    controller.reconcile_assignments(&cluster, &FactScope::Cluster).await.unwrap();
    let first = store.assignment_facts(&cluster, &FactScope::Cluster).await.unwrap().heads.readable;
    let ids: Vec<Id> = first.iter().map(|head| head.signed.payload.id.clone()).collect();
    let image = |generation: u64, image: &str| -> Vec<(Id, u64, String, bool)> {
        ids.iter().map(|id| (id.clone(), generation, image.to_owned(), true)).collect()
    };
    assert_eq!(assignment_heads(&store).await, image(1, "ingress:1"));

    // Generation 2 of both and generation 1 of a new id, in one apply.
    let mut extra = first[0].signed.payload.clone();
    extra.id = id("asg-extra");
    extra.digest = extra.compute_digest();
    let extra = AssignmentChange::Issue(Box::new(cloudly::contract::signing::sign(&keys.signing, extra)));
    let mut changes: Vec<AssignmentChange> =
        first.iter().map(|head| next_generation(head, "ingress:2", &keys)).collect();
    changes.push(extra);
    let mut locked = store.lock_assignments(&cluster, &FactScope::Cluster).await.unwrap();
    locked.apply(&changes).await.unwrap();
    locked.commit().await.unwrap();
    let mut expected = image(2, "ingress:2");
    expected.push((id("asg-extra"), 1, "ingress:1".to_owned(), true));
    expected.sort_by(|left, right| left.0.as_str().cmp(right.0.as_str()));
    assert_eq!(assignment_heads(&store).await, expected);
    for change in &changes {
        let AssignmentChange::Issue(signed) = change else { unreachable!() };
        let payload = &signed.payload;
        let stored = store.get_assignment(&cluster, &payload.id, payload.generation).await.unwrap().unwrap();
        assert_eq!((&stored.signed, stored.active), (&**signed, true));
    }

    // A generation-3 record of the second replica already exists beside its chain: the batch
    // writes one record of two, its guard refuses, and the rollback leaves nothing of it.
    context
        .database
        .execute(&format!(
            "INSERT INTO runtime_assignments \
               (cluster_id, assignment_id, generation, node_id, service_id, digest, record, signature) \
             SELECT cluster_id, assignment_id, 3, node_id, service_id, digest, record, signature \
             FROM runtime_assignments WHERE assignment_id = '{}' AND generation = 2",
            ids[1]
        ))
        .await;
    let mut locked = store.lock_assignments(&cluster, &FactScope::Cluster).await.unwrap();
    let second = locked.facts().heads.readable.iter().filter(|head| ids.contains(&head.signed.payload.id)).cloned();
    let changes: Vec<AssignmentChange> = second.map(|head| next_generation(&head, "ingress:3", &keys)).collect();
    let refused = locked.apply(&changes).await;
    assert!(matches!(refused, Err(StoreError::Unavailable(_))), "{refused:?}");
    locked.rollback().await.unwrap();
    assert_eq!(assignment_heads(&store).await, expected);
    assert_eq!(store.get_assignment(&cluster, &ids[0], 3).await.unwrap(), None);
}

/// Session `generation` of node-1 of `c1`.
fn node_session(generation: u64) -> RuntimeSessionReference {
    RuntimeSessionReference {
        id: id(&format!("session-{generation}")),
        generation,
        controller: controller(),
        cluster_id: id("c1"),
        node_id: node_id("node-1"),
        runtime_namespace: id("ns-1"),
    }
}

/// A state reported under session 1 after one reported under session 2 keeps session 2's.
async fn a_late_state_report_of_an_older_session_changes_nothing(context: Context) {
    let store = context.migrated().await;
    inventory_on_two_nodes(&store).await;
    let cluster = id("c1");
    let controller =
        Controller::new(store.clone(), Arc::new(ControllerKeys::generate().unwrap()), Arc::new(SystemClock));
    controller.reconcile_assignments(&cluster, &FactScope::Cluster).await.unwrap();
    let heads = store.assignment_facts(&cluster, &FactScope::Cluster).await.unwrap().heads.readable;
    let assignment = &heads[0].signed.payload;
    let (assignment_id, generation) = (&assignment.id, assignment.generation);
    store
        .record_assignment_state(&cluster, assignment_id, generation, "starting", &node_session(1), 100)
        .await
        .unwrap();
    store.record_assignment_state(&cluster, assignment_id, generation, "ready", &node_session(2), 110).await.unwrap();
    store.record_assignment_state(&cluster, assignment_id, generation, "stopped", &node_session(1), 120).await.unwrap();
    let kept = store.assignment_state(&cluster, assignment_id, generation).await.unwrap().unwrap();
    assert_eq!((kept.state.as_str(), kept.session_generation, kept.reported_at), ("ready", 2, 110));

    // The same session reports on.
    store.record_assignment_state(&cluster, assignment_id, generation, "failed", &node_session(2), 130).await.unwrap();
    let kept = store.assignment_state(&cluster, assignment_id, generation).await.unwrap().unwrap();
    assert_eq!((kept.state.as_str(), kept.session_generation, kept.reported_at), ("failed", 2, 130));
}

/// The facts of a reconcile that waited for the cluster's lock include what the lock's holder
/// committed meanwhile (here a storage claim head).
async fn facts_read_under_the_lock_see_what_its_last_holder_wrote(context: Context) {
    let store = context.migrated().await;
    inventory(&store).await;
    let mut holder = store.lock_assignments(&id("c1"), &FactScope::Cluster).await.unwrap();
    let waiter = tokio::spawn({
        let store = store.clone();
        async move {
            let locked = store.lock_assignments(&id("c1"), &FactScope::Cluster).await.unwrap();
            let claims = locked.facts().claims.clone();
            locked.rollback().await.unwrap();
            claims
        }
    });
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert!(!waiter.is_finished(), "the second reconcile waits for the lock");
    holder.apply_claims(&[claim(1, None, LocalStorageLifecycle::Bound)], 100).await.unwrap();
    holder.commit().await.unwrap();
    let claims = waiter.await.unwrap();
    assert_eq!(claims.readable.iter().map(|head| head.signed.payload.generation).collect::<Vec<_>>(), [1]);
}

/// A database written by the build before migration 15 — specs whose volumes lived only in
/// their bodies — finds the declarers of each volume id after the upgrade: the current revision's
/// volumes of every service that is not deleted, and nothing of older revisions or deleted
/// services.
async fn volume_declarations_written_before_migration_15_are_found_by_volume_id(context: Context) {
    let backend = context.store.backend();
    context.database.run_raw(Some(&migrator_before(backend, 15)), &[]).await;
    let store = context.store.clone();
    assert!(!store.is_ready().await.unwrap(), "version 15 is pending");
    store.put_organization(&organization("org")).await.unwrap();
    written(store.put_cluster(&cluster("c1", "org"), None, ClusterGuard::Revision).await.unwrap());
    let volume = |volume_id: &str| {
        json!({ "id": volume_id, "mountPath": format!("/var/lib/{volume_id}"), "readOnly": false, "driver": "local",
                "driverOptions": [], "mountOptions": [],
                "initialization": { "kind": "empty", "ownership": { "uid": 1000, "gid": 1000, "mode": 493 } } })
    };
    let body = |service: &str, volumes: &[&str]| {
        let mut body = serde_json::to_value(spec_body("c1", service, "app:1")).unwrap();
        body["replicas"] = json!(1);
        body["placement"] = json!({ "nodeIds": ["node-1"] });
        body["volumes"] = Value::Array(volumes.iter().map(|id| volume(id)).collect());
        text_literal(&cloudly::contract::json::canonical(&body).unwrap())
    };
    // `db`: revision 1 declared `old`, revision 2 (current) `data` and `logs`; `api`: `data`;
    // `gone` (deleted): `data`; `web`: none.
    let statements = vec![
        "INSERT INTO services (cluster_id, service_id, current_revision, deleted) VALUES            ('c1', 'db', 2, FALSE), ('c1', 'api', 1, FALSE), ('c1', 'gone', 1, TRUE), ('c1', 'web', 1, FALSE)"
            .to_owned(),
        format!(
            "INSERT INTO service_spec_revisions (cluster_id, service_id, revision, body) VALUES                ('c1', 'db', 1, {}), ('c1', 'db', 2, {}), ('c1', 'api', 1, {}), ('c1', 'gone', 1, {}), ('c1', 'web', 1, {})",
            body("db", &["old"]),
            body("db", &["data", "logs"]),
            body("api", &["data"]),
            body("gone", &["data"]),
            body("web", &[]),
        ),
    ];
    context.database.run_raw(None, &statements).await;

    store.migrate().await.unwrap();
    assert!(store.is_ready().await.unwrap());
    let services = |ids: &[&str]| ids.iter().map(|text| id(text)).collect::<std::collections::BTreeSet<Id>>();
    let cluster = id("c1");
    assert_eq!(store.services_sharing_volumes(&cluster, &services(&["api"])).await.unwrap(), services(&["api", "db"]));
    assert_eq!(store.services_sharing_volumes(&cluster, &services(&["db"])).await.unwrap(), services(&["api", "db"]));
    assert!(store.services_sharing_volumes(&cluster, &services(&["web", "gone"])).await.unwrap().is_empty());
    let facts = store.assignment_facts(&cluster, &FactScope::Services(services(&["db"]))).await.unwrap();
    let declarers: Vec<(String, Vec<String>)> = facts
        .volume_declarers
        .iter()
        .map(|(volume, services)| (volume.to_string(), services.iter().map(Id::to_string).collect()))
        .collect();
    assert_eq!(
        declarers,
        [("data".to_owned(), vec!["api".to_owned(), "db".to_owned()]), ("logs".to_owned(), vec!["db".to_owned()])]
    );
    // Writes after the upgrade keep the table: `api` drops `data`, `db` is deleted.
    let mut api = spec_body("c1", "api", "app:2");
    api.replicas = 1;
    api.placement.node_ids = vec![node_id("node-1")];
    written(store.put_service_spec(&api, Some(1)).await.unwrap());
    written(store.delete_service(&cluster, &id("db"), 2).await.unwrap());
    assert!(store.services_sharing_volumes(&cluster, &services(&["api", "db"])).await.unwrap().is_empty());
}

/// A database written by the build before migration 13 — the grants of each node's current
/// projection and the backends of each route as rows of their own tables — reads back the same
/// after the upgrade, from the columns those rows moved into.
async fn projection_rows_written_before_migration_13_read_back(context: Context) {
    let backend = context.store.backend();
    context.database.run_raw(Some(&migrator_before(backend, 13)), &[]).await;
    let store = context.store.clone();
    assert!(!store.is_ready().await.unwrap(), "version 13 is pending");
    store.put_organization(&organization("org")).await.unwrap();
    written(store.put_cluster(&cluster("c1", "org"), None, ClusterGuard::Revision).await.unwrap());
    let digest = format!("sha256:{}", "ab".repeat(32));
    let statements: Vec<String> = [
        "INSERT INTO ingress_route_tables (cluster_id, revision) VALUES ('c1', 3)",
        "INSERT INTO ingress_routes (cluster_id, hostname, service_id, protocol, port) \
         VALUES ('c1', 'web.example.net', 'web', 'tcp', 443), ('c1', 'api.example.net', 'api', 'udp', 8080)",
        "INSERT INTO ingress_route_backends (cluster_id, hostname, lease_id, address, port) \
         VALUES ('c1', 'web.example.net', 'lease-b', '10.0.0.6', 443), ('c1', 'web.example.net', 'lease-a', '10.0.0.2', 443)",
    ]
    .into_iter()
    .map(str::to_owned)
    .chain(["node-1", "node-2"].into_iter().flat_map(|node| {
        [
            format!(
                "INSERT INTO runtime_network_projections (cluster_id, node_id, generation, digest, record, signature, issued_at) \
                 VALUES ('c1', '{node}', 1, '{digest}', '{{}}', '{{}}', 1)"
            ),
            format!(
                "INSERT INTO runtime_network_projection_heads (cluster_id, node_id, generation, digest, inputs, retains) \
                 VALUES ('c1', '{node}', 1, '{digest}', 'inputs', FALSE)"
            ),
        ]
    }))
    .chain([
        "INSERT INTO runtime_network_projection_grants (cluster_id, node_id, lease_id, protocol, port) \
         VALUES ('c1', 'node-1', 'lease-a', 'tcp', 443), ('c1', 'node-1', 'lease-b', 'tcp', 443), \
                ('c1', 'node-1', 'lease-c', 'udp', 8080)"
            .to_owned(),
    ])
    .collect();
    context.database.run_raw(None, &statements).await;

    store.migrate().await.unwrap();
    assert!(store.is_ready().await.unwrap());
    let backend_of = |lease: &str, address: &str| RouteBackend {
        hostname: "web.example.net".to_owned(),
        lease_id: id(lease),
        address: Ipv4::parse(address).unwrap(),
        port: 443,
    };
    let table = store.get_route_table(&id("c1")).await.unwrap().unwrap();
    assert_eq!(table.revision, 3);
    assert_eq!(table.backends, [backend_of("lease-a", "10.0.0.2"), backend_of("lease-b", "10.0.0.6")]);
    let mut locked = store.lock_projections(&id("c1"), None).await.unwrap().unwrap();
    let granted: Vec<(Id, Protocol, u16)> = locked.granted().await.unwrap().into_iter().collect();
    assert_eq!(
        granted,
        [
            (id("lease-a"), Protocol::Tcp, 443),
            (id("lease-b"), Protocol::Tcp, 443),
            (id("lease-c"), Protocol::Udp, 8080)
        ]
    );
    // The upgraded route table moves on: the issuer replaces backends, a changed route forgets its own.
    assert!(locked.replace_backends(&[backend_of("lease-a", "10.0.0.2")]).await.unwrap());
    assert!(!locked.replace_backends(&[backend_of("lease-a", "10.0.0.2")]).await.unwrap(), "nothing to replace");
    locked.commit().await.unwrap();
    let table = store.get_route_table(&id("c1")).await.unwrap().unwrap();
    assert_eq!((table.revision, table.backends), (4, vec![backend_of("lease-a", "10.0.0.2")]));
    let moved = IngressRoute {
        hostname: "web.example.net".to_owned(),
        service_id: id("web"),
        protocol: Protocol::Tcp,
        port: 8443,
    };
    store.put_ingress_route(&id("c1"), &moved).await.unwrap();
    let table = store.get_route_table(&id("c1")).await.unwrap().unwrap();
    assert_eq!((table.revision, table.backends), (5, Vec::new()));
}

/// A projection generation is stored with `"endpoints":[]` and its endpoint leases' references;
/// it reads back equal while its leases are live, after one of them moved on (from the kept
/// generations), and as a whole record (a row written before migration 14). References the
/// store cannot resolve, or that resolve to other content, are corrupt.
async fn projections_keep_their_endpoint_leases_by_reference(context: Context) {
    let store = context.migrated().await;
    inventory_on_two_nodes(&store).await;
    let cluster = id("c1");
    let plan = address_plan(1, "10.64.0.0/29");
    let authority = compose_runtime_network_protected_authority(&cluster, None, &plan).unwrap();
    let mut locked = store.lock_network(&cluster).await.unwrap().unwrap();
    locked.write_plan(&plan, Some(&authority)).await.unwrap();
    locked.commit().await.unwrap();
    let keys = Arc::new(ControllerKeys::generate().unwrap());
    Controller::new(store.clone(), keys.clone(), Arc::new(SystemClock))
        .reconcile_assignments(&cluster, &FactScope::Cluster)
        .await
        .unwrap();

    let node = node_id("node-1");
    let mut locked = store.lock_projections(&cluster, None).await.unwrap().unwrap();
    let facts = locked.facts().clone();
    let inputs = node_inputs(&facts).into_iter().find(|inputs| inputs.node_id == node).unwrap();
    assert!(!inputs.endpoints.is_empty(), "node-1 holds a lease");
    let authority = ProtectedAuthorityReference::of(&facts.plan.as_ref().unwrap().authority);
    let controller = ControllerReference { kind: ControllerKind::Cloudly, id: id("cloudly") };
    let projection = next_projection(&inputs, &authority, &cluster, &controller, None).unwrap().unwrap();
    let signed = cloudly::contract::signing::sign(&keys.signing, projection);
    let issued = IssuedProjection {
        signed: signed.clone(),
        inputs: inputs.digest(&authority, &controller),
        granted: Default::default(),
        issued_at: 1,
    };
    // An endpoint lease that is not the live one could not be read back: refused, nothing written.
    let mut unheld = issued.clone();
    unheld.signed.payload.endpoints[0].lease.generation = 9;
    assert!(matches!(locked.write(&[unheld]).await, Err(StoreError::Corrupt(_))));
    locked.rollback().await.unwrap();
    assert_eq!(store.node_projection(&cluster, &node).await.unwrap(), None);
    let mut locked = store.lock_projections(&cluster, None).await.unwrap().unwrap();
    locked.write(&[issued]).await.unwrap();
    locked.commit().await.unwrap();
    let read =
        || async { store.node_projection(&cluster, &node).await.map(|stored| stored.map(|stored| stored.signed)) };
    assert_eq!(read().await.unwrap().as_ref(), Some(&signed));

    // The endpoint lease moves on: the projection still names (and reads back) its generation 1.
    let lease = inputs.endpoints[0].clone();
    let mut moved = RuntimeNetworkLease { generation: 2, previous: Some(lease.reference()), ..lease.clone() };
    moved = moved.with_computed_digest();
    let mut locked = store.lock_network(&cluster).await.unwrap().unwrap();
    locked.apply_leases(&[LeaseChange::Issue(Box::new(moved))]).await.unwrap();
    locked.commit().await.unwrap();
    assert_eq!(read().await.unwrap().as_ref(), Some(&signed));

    let quoted = |text: &str| text.replace('\'', "''");
    let without = quoted(&signed.payload.canonical_without_endpoints());
    for (what, record, references) in [
        ("no references", without.clone(), "'[]'".to_owned()),
        ("an unknown generation", without.clone(), format!("'[[\"{}\", 9]]'", lease.id.as_str())),
        ("another generation", without.clone(), format!("'[[\"{}\", 2]]'", lease.id.as_str())),
        (
            "a record with its endpoints and references",
            quoted(&signed.payload.canonical()),
            format!("'[[\"{}\", 1]]'", lease.id.as_str()),
        ),
    ] {
        context
            .database
            .execute(&format!(
                "UPDATE runtime_network_projections SET record = '{record}', endpoint_leases = {references}"
            ))
            .await;
        assert!(matches!(read().await, Err(StoreError::Corrupt(_))), "{what}");
    }
    // A row written before migration 14 holds its whole record and no references.
    let whole = quoted(&signed.payload.canonical());
    context
        .database
        .execute(&format!("UPDATE runtime_network_projections SET record = '{whole}', endpoint_leases = NULL"))
        .await;
    assert_eq!(read().await.unwrap().as_ref(), Some(&signed));
}
