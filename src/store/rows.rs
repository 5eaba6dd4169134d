//! The row readers of the store's records, written once for both backends against [`Row`]
//! (a statement that answers one plain column reads it where it runs). A reader names
//! the columns it reads; a statement that feeds it selects them under those names. Records go
//! through their contract readers (`codec.rs`), so a row that does not read back is
//! [`StoreError::Corrupt`].

use super::StoreError;
use super::assignments::{ClusterFacts, StoredAssignment, UnreadableHead};
use super::codec::{
    counter_from_sql, hash_from_sql, read_cluster, read_designation, read_digested, read_node, read_organization,
    read_service_spec,
};
use super::designations::{DesignationSnapshot, RecordedMutation, SealedSecret};
use super::inventory::{StoredCluster, StoredNode, StoredOrganization};
use super::key_records::{KeyRecord, KeyRole};
use super::migrations::AppliedMigration;
use super::projections::{GrantedDestination, ProjectionHead, StoredProjection};
use super::registrations::{
    IngressRegistration, RegistrationFacts, RelayConnectionReference, SessionGeneration, StoredIngressRegistration,
};
use super::relays::{IngressRoute, RelayConnectionState, RouteBackend, StoredRelayConnection, StoredRelayCredential};
use super::service_status::{HeadState, RecordedStatus};
use super::sessions::ReportedState;
use super::sql::Row;
use super::storage_claims::{ClaimAnswer, ClaimFault, ClaimResolution, LastClaimAnswer, StoredClaim, UnreadableClaim};
use crate::contract::assignment::{RuntimeAssignment, snapshot_runtime_assignment};
use crate::contract::designation::ClusterIngressDesignation;
use crate::contract::inventory::ServiceRuntimeSpec;
use crate::contract::network::{
    ProjectionEndpoint, RuntimeNetworkAddressPlan, RuntimeNetworkLease, RuntimeNetworkProjection,
    RuntimeNetworkProtectedAuthority,
};
use crate::contract::session::{ControllerKind, ControllerReference, RuntimeSessionReference};
use crate::contract::signing::{ALGORITHM, SignatureBlock, Signed, decode_public_key, key_id as signing_key_id};
use crate::contract::storage_claim::{RuntimeLocalStorageClaim, snapshot_runtime_local_storage_claim};
use crate::contract::{AuthorityReference, DigestedRecord, Id, Ipv4, NodeId, Protocol, Sha256Digest};

impl Row {
    /// A `TEXT` column holding an [`Id`].
    fn id(&self, column: &str, what: &str) -> Result<Id, StoreError> {
        Id::parse(&self.text(column)?).ok_or_else(|| StoreError::Corrupt(format!("stored {what} is not an Id")))
    }

    /// A `TEXT` column holding a [`NodeId`].
    fn node_id(&self, column: &str, what: &str) -> Result<NodeId, StoreError> {
        NodeId::parse(&self.text(column)?).ok_or_else(|| StoreError::Corrupt(format!("stored {what} is not a NodeId")))
    }

    /// A `TEXT` column holding a `sha256:…` digest.
    fn digest(&self, column: &str, what: &str) -> Result<Sha256Digest, StoreError> {
        Sha256Digest::parse(&self.text(column)?)
            .ok_or_else(|| StoreError::Corrupt(format!("stored {what} is not a digest")))
    }

    /// An integer column holding a counter (0 to 2^53 − 1).
    fn counter(&self, column: &str, what: &str) -> Result<u64, StoreError> {
        counter_from_sql(self.integer(column)?, what)
    }

    /// A column holding a 32-byte hash.
    fn hash(&self, column: &str, what: &str) -> Result<[u8; 32], StoreError> {
        hash_from_sql(self.bytes(column)?, what)
    }
}

/// An organization: `record`, `revision`.
pub(crate) fn organization(row: &Row) -> Result<StoredOrganization, StoreError> {
    Ok(StoredOrganization {
        organization: read_organization(&row.text("record")?)?,
        revision: row.counter("revision", "organization revision")?,
    })
}

/// A cluster: `record`, `revision`.
pub(crate) fn cluster(row: &Row) -> Result<StoredCluster, StoreError> {
    Ok(StoredCluster {
        cluster: read_cluster(&row.text("record")?)?,
        revision: row.counter("revision", "cluster revision")?,
    })
}

/// A cluster's facts beside its row (`sessions.rs`, `CLUSTER_FACTS`): `designation` (NULL:
/// none), `plan` and `authority` (NULL: no plan), `live_leases`, `claims`. A plan whose protected
/// authority is missing or does not read back is [`StoreError::Corrupt`].
pub(crate) fn cluster_facts(row: &Row) -> Result<ClusterFacts, StoreError> {
    let designation = optional_designation(row, "designation")?;
    let plan = row.optional_text("plan")?.map(|text| read_digested(&text, "address plan")).transpose()?;
    if plan.is_some() {
        let authority = row
            .optional_text("authority")?
            .ok_or_else(|| StoreError::Corrupt("an address plan without a protected authority".into()))?;
        read_digested::<RuntimeNetworkProtectedAuthority>(&authority, "protected authority")?;
    }
    Ok(ClusterFacts { designation, plan, live_leases: row.boolean("live_leases")?, claims: row.boolean("claims")? })
}

/// A node of `cluster_id`: `record`, `bearer_hash`, `revision`.
pub(crate) fn node(cluster_id: &Id, row: &Row) -> Result<StoredNode, StoreError> {
    Ok(StoredNode {
        cluster_id: cluster_id.clone(),
        node: read_node(&row.text("record")?)?,
        bearer_hash: row.hash("bearer_hash", "node bearer hash")?,
        revision: row.counter("revision", "node revision")?,
    })
}

/// A node's bearer hash and revision: `bearer_hash`, `revision`.
pub(crate) fn node_credential(row: &Row) -> Result<([u8; 32], u64), StoreError> {
    Ok((row.hash("bearer_hash", "node bearer hash")?, row.counter("revision", "node revision")?))
}

/// The head of a service: `current_revision`, `deleted`.
pub(crate) fn service_head(row: &Row) -> Result<(u64, bool), StoreError> {
    Ok((row.counter("current_revision", "service revision")?, row.boolean("deleted")?))
}

/// A service spec: `body`, `revision`.
pub(crate) fn service_spec(row: &Row) -> Result<ServiceRuntimeSpec, StoreError> {
    read_service_spec(&row.text("body")?, row.integer("revision")?)
}

/// A row's `service_id`.
pub(crate) fn service_id(row: &Row) -> Result<Id, StoreError> {
    row.id("service_id", "service id")
}

/// A row of `service_volumes`: `volume_id`, `service_id`.
pub(crate) fn service_volume(row: &Row) -> Result<(Id, Id), StoreError> {
    Ok((row.id("volume_id", "volume id")?, row.id("service_id", "service id")?))
}

/// A designation in column `column`.
pub(crate) fn designation(row: &Row, column: &str) -> Result<ClusterIngressDesignation, StoreError> {
    read_designation(&row.text(column)?)
}

/// A designation in the nullable column `column`.
pub(crate) fn optional_designation(row: &Row, column: &str) -> Result<Option<ClusterIngressDesignation>, StoreError> {
    row.optional_text(column)?.map(|text| read_designation(&text)).transpose()
}

/// The facts of a designation (see `designations.rs`, `DESIGNATION_FACTS_SQL`): `record` and
/// `revision` of the cluster (NULL: no such cluster), `facts_version`, `recorded`, `spec_body`
/// and `spec_revision` (NULL: no such service), `designation` (NULL: none).
pub(crate) fn designation_snapshot(
    cluster_id: &Id,
    service_id: &Id,
    mutation_id: &Id,
    row: &Row,
) -> Result<DesignationSnapshot, StoreError> {
    let mut snapshot = DesignationSnapshot {
        cluster_id: cluster_id.clone(),
        service_id: service_id.clone(),
        mutation_id: mutation_id.clone(),
        cluster: None,
        service: None,
        current: None,
        mutation_recorded: false,
        facts_version: 0,
    };
    if row.optional_text("record")?.is_none() {
        return Ok(snapshot);
    }
    snapshot.cluster = Some(cluster(row)?);
    snapshot.service = match (row.optional_text("spec_body")?, row.optional_integer("spec_revision")?) {
        (Some(body), Some(revision)) => Some(read_service_spec(&body, revision)?),
        _ => None,
    };
    snapshot.current = optional_designation(row, "designation")?;
    snapshot.mutation_recorded = row.boolean("recorded")?;
    snapshot.facts_version = row.integer("facts_version")?;
    Ok(snapshot)
}

/// A recorded designation mutation: `request_canonical`, `record`, and the spec it was prepared
/// against, `body` and `revision` (NULL when that revision is missing, which is corrupt).
pub(crate) fn recorded_mutation(row: &Row) -> Result<RecordedMutation, StoreError> {
    let (Some(body), Some(revision)) = (row.optional_text("body")?, row.optional_integer("revision")?) else {
        return Err(StoreError::Corrupt("a recorded designation names a missing spec revision".into()));
    };
    Ok(RecordedMutation {
        request_canonical: row.text("request_canonical")?,
        designation: designation(row, "record")?,
        spec: read_service_spec(&body, revision)?,
    })
}

/// A sealed secret version: `nonce`, `ciphertext`, `value_hash`.
pub(crate) fn sealed_secret(secret_id: &Id, secret_version_id: &Id, row: &Row) -> Result<SealedSecret, StoreError> {
    Ok(SealedSecret {
        secret_id: secret_id.clone(),
        secret_version_id: secret_version_id.clone(),
        nonce: row.bytes("nonce")?,
        ciphertext: row.bytes("ciphertext")?,
        value_hash: row.hash("value_hash", "secret value hash")?,
    })
}

/// The SHA-256 of a secret version's value: `value_hash`.
pub(crate) fn secret_hash(row: &Row) -> Result<[u8; 32], StoreError> {
    row.hash("value_hash", "secret value hash")
}

/// A relay credential: `bearer_hash`, `generation`.
pub(crate) fn relay_credential(cluster_id: &Id, relay_id: &Id, row: &Row) -> Result<StoredRelayCredential, StoreError> {
    Ok(StoredRelayCredential {
        cluster_id: cluster_id.clone(),
        relay_id: relay_id.clone(),
        bearer_hash: row.hash("bearer_hash", "relay bearer hash")?,
        generation: row.counter("generation", "relay credential generation")?,
    })
}

/// A relay connection: `id`, `cluster_id`, `relay_id`, `epoch`, `last_seen_at`.
pub(crate) fn relay_connection(row: &Row) -> Result<StoredRelayConnection, StoreError> {
    Ok(StoredRelayConnection {
        id: row.id("id", "relay connection id")?,
        cluster_id: row.id("cluster_id", "relay connection cluster id")?,
        relay_id: row.id("relay_id", "relay connection relay id")?,
        epoch: row.counter("epoch", "relay connection epoch")?,
        last_seen_ms: row.counter("last_seen_at", "relay connection last seen")?,
    })
}

/// A relay connection with its cluster's highest epoch (`highest_epoch`).
pub(crate) fn relay_connection_state(row: &Row) -> Result<RelayConnectionState, StoreError> {
    Ok(RelayConnectionState {
        connection: relay_connection(row)?,
        highest_epoch: row.counter("highest_epoch", "relay connection epoch")?,
    })
}

/// A route of a route table: `hostname`, `service_id`, `protocol`, `port`.
pub(crate) fn route(row: &Row) -> Result<IngressRoute, StoreError> {
    Ok(IngressRoute {
        hostname: row.text("hostname")?,
        service_id: row.id("service_id", "route service id")?,
        protocol: protocol(row, "route")?,
        port: port(row, "route")?,
    })
}

/// A `protocol` column: `tcp` or `udp`.
fn protocol(row: &Row, what: &str) -> Result<Protocol, StoreError> {
    Protocol::parse(&row.text("protocol")?)
        .ok_or_else(|| StoreError::Corrupt(format!("stored {what} protocol is not tcp or udp")))
}

/// A `port` column: 1..=65535.
fn port(row: &Row, what: &str) -> Result<u16, StoreError> {
    u16::try_from(row.integer("port")?)
        .ok()
        .filter(|port| *port >= 1)
        .ok_or_else(|| StoreError::Corrupt(format!("stored {what} port is not a port")))
}

/// The backends of a route: `hostname`, `port` and `backends`, a JSON array of `[leaseId, address]`.
pub(crate) fn route_backends(row: &Row) -> Result<Vec<RouteBackend>, StoreError> {
    let corrupt = || StoreError::Corrupt("stored route backends do not read back".into());
    let hostname = row.text("hostname")?;
    let port = port(row, "route")?;
    let items: Vec<(String, String)> = serde_json::from_str(&row.text("backends")?).map_err(|_| corrupt())?;
    items
        .into_iter()
        .map(|(lease_id, address)| {
            Ok(RouteBackend {
                hostname: hostname.clone(),
                lease_id: Id::parse(&lease_id).ok_or_else(corrupt)?,
                address: Ipv4::parse(&address).ok_or_else(corrupt)?,
                port,
            })
        })
        .collect()
}

/// The `granted` column of a projection head: a JSON array of `[leaseId, protocol, port]`.
pub(crate) fn granted_destinations(row: &Row) -> Result<Vec<GrantedDestination>, StoreError> {
    let corrupt = || StoreError::Corrupt("stored projection grants do not read back".into());
    let items: Vec<(String, String, u16)> = serde_json::from_str(&row.text("granted")?).map_err(|_| corrupt())?;
    items
        .into_iter()
        .map(|(lease_id, protocol, port)| {
            Ok((
                Id::parse(&lease_id).ok_or_else(corrupt)?,
                Protocol::parse(&protocol).ok_or_else(corrupt)?,
                Some(port).filter(|port| *port >= 1).ok_or_else(corrupt)?,
            ))
        })
        .collect()
}

/// `applied_generation`, `applied_digest` of a projection head, with its node as the id.
fn applied_projection(row: &Row, node_id: &NodeId) -> Result<Option<AuthorityReference>, StoreError> {
    match (row.optional_integer("applied_generation")?, row.optional_text("applied_digest")?) {
        (Some(generation), Some(digest)) => Ok(Some(AuthorityReference {
            id: Id::parse(node_id.as_str())
                .ok_or_else(|| StoreError::Corrupt("stored projection node id is not an id".into()))?,
            generation: counter_from_sql(generation, "applied projection generation")?,
            digest: Sha256Digest::parse(&digest)
                .ok_or_else(|| StoreError::Corrupt("stored applied projection digest is not a digest".into()))?,
        })),
        (None, None) => Ok(None),
        _ => Err(StoreError::Corrupt("stored applied projection is half a reference".into())),
    }
}

/// The reference of a node's current projection from its head's `node_id` (a projection's id is
/// its node's), `generation` and `digest`.
pub(crate) fn projection_reference(row: &Row) -> Result<AuthorityReference, StoreError> {
    Ok(AuthorityReference {
        id: row.id("node_id", "projection node id")?,
        generation: row.counter("generation", "projection generation")?,
        digest: row.digest("digest", "projection digest")?,
    })
}

/// The head of a node's projection chain: `node_id`, `generation`, `digest`, `inputs`,
/// `retains`, `applied_generation`, `applied_digest`.
pub(crate) fn projection_head(row: &Row) -> Result<ProjectionHead, StoreError> {
    let node_id = row.node_id("node_id", "projection node id")?;
    Ok(ProjectionHead {
        reference: projection_reference(row)?,
        inputs: row.text("inputs")?,
        retains: row.boolean("retains")?,
        applied: applied_projection(row, &node_id)?,
        granted: granted_destinations(row)?.into_iter().collect(),
        node_id,
    })
}

/// A node's current projection: `record`, `signature` (a signed projection) and its head's
/// `node_id`, `applied_generation`, `applied_digest`. `endpoints` are the endpoint leases of a row
/// that keeps them by reference ([`endpoint_references`]), put in before the digest is checked.
pub(crate) fn stored_projection(
    row: &Row,
    endpoints: Option<Vec<RuntimeNetworkLease>>,
) -> Result<StoredProjection, StoreError> {
    let node_id = row.node_id("node_id", "projection node id")?;
    Ok(StoredProjection {
        signed: signed_record(row, "runtime network projection", |value| {
            let mut projection = RuntimeNetworkProjection::snapshot(value).ok()?;
            if let Some(leases) = endpoints {
                if !projection.endpoints.is_empty() {
                    return None;
                }
                projection.endpoints = leases.into_iter().map(|lease| ProjectionEndpoint { lease }).collect();
            }
            Some(projection)
        })?,
        applied: applied_projection(row, &node_id)?,
    })
}

/// `endpoint_leases` of a projection generation: the id and generation of each endpoint lease in
/// endpoint order (a JSON array of `[leaseId, generation]`), or `None` when the row's record holds
/// its endpoints whole.
pub(crate) fn endpoint_references(row: &Row) -> Result<Option<Vec<(Id, u64)>>, StoreError> {
    let corrupt = || StoreError::Corrupt("stored projection endpoint references do not read back".into());
    let Some(text) = row.optional_text("endpoint_leases")? else { return Ok(None) };
    let items: Vec<(String, u64)> = serde_json::from_str(&text).map_err(|_| corrupt())?;
    items
        .into_iter()
        .map(|(id, generation)| Ok((Id::parse(&id).ok_or_else(corrupt)?, generation)))
        .collect::<Result<Vec<_>, _>>()
        .map(Some)
}

/// A node session of `node_id`: `session_id`, `generation`, `controller_kind`, `controller_id`,
/// `runtime_namespace`.
pub(crate) fn session(cluster_id: &Id, node_id: &NodeId, row: &Row) -> Result<RuntimeSessionReference, StoreError> {
    let kind = ControllerKind::parse(&row.text("controller_kind")?)
        .ok_or_else(|| StoreError::Corrupt("stored session controller kind is unknown".into()))?;
    Ok(RuntimeSessionReference {
        id: row.id("session_id", "session id")?,
        generation: row.counter("generation", "session generation")?,
        controller: ControllerReference { kind, id: row.id("controller_id", "controller id")? },
        cluster_id: cluster_id.clone(),
        node_id: node_id.clone(),
        runtime_namespace: row.id("runtime_namespace", "runtime namespace")?,
    })
}

/// A signed assignment generation: `record` (the payload, read through the contract's snapshot
/// with its digest checked) and `signature` (the signature block).
pub(crate) fn signed_assignment(row: &Row) -> Result<Signed<RuntimeAssignment>, StoreError> {
    signed_record(row, "runtime assignment", |value| snapshot_runtime_assignment(value).ok())
}

/// A signed record of kind `T`: `record` (the payload, read through `snapshot` with its digest
/// checked) and `signature` (the signature block).
fn signed_record<T: DigestedRecord>(
    row: &Row,
    kind: &str,
    snapshot: impl FnOnce(&serde_json::Value) -> Option<T>,
) -> Result<Signed<T>, StoreError> {
    let corrupt = |what: &str| StoreError::Corrupt(format!("stored {kind} {what}"));
    let value = crate::contract::json::parse_record_text(&row.text("record")?)
        .map_err(|_| corrupt("breaks the raw-text rules"))?;
    let payload = snapshot(&value).ok_or_else(|| corrupt("does not read back"))?;
    if payload.compute_digest() != *payload.stated_digest() {
        return Err(corrupt("digest does not match"));
    }
    let block: serde_json::Value =
        serde_json::from_str(&row.text("signature")?).map_err(|_| corrupt("signature is not JSON"))?;
    let text = |key: &str| block.get(key).and_then(serde_json::Value::as_str).map(str::to_owned);
    let (Some(key_id), Some(ALGORITHM), Some(value)) = (text("keyId"), text("algorithm").as_deref(), text("value"))
    else {
        return Err(corrupt("signature does not read back"));
    };
    Ok(Signed { payload, signature: SignatureBlock { key_id, algorithm: ALGORITHM, value } })
}

/// A stored assignment generation: [`signed_assignment`]'s columns and `active`.
pub(crate) fn assignment(row: &Row) -> Result<StoredAssignment, StoreError> {
    Ok(StoredAssignment { signed: signed_assignment(row)?, active: row.boolean("active")? })
}

/// A head assignment generation: [`assignment`]'s columns, or, when those do not read back, what
/// the head's own columns say of it (`assignment_id`, `head_generation`, `digest`, `node_id`,
/// `service_id`, `active`), so that one unreadable record affects only itself.
pub(crate) fn assignment_head(row: &Row) -> Result<Result<StoredAssignment, UnreadableHead>, StoreError> {
    let problem = match assignment(row) {
        Ok(stored) => return Ok(Ok(stored)),
        Err(StoreError::Corrupt(problem)) => problem,
        Err(error) => return Err(error),
    };
    Ok(Err(UnreadableHead {
        reference: AuthorityReference {
            id: row.id("assignment_id", "assignment id")?,
            generation: row.counter("head_generation", "assignment generation")?,
            digest: row.digest("digest", "assignment digest")?,
        },
        node_id: row.node_id("node_id", "assignment node id")?,
        service_id: row.id("service_id", "assignment service id")?,
        active: row.boolean("active")?,
        problem,
    }))
}

/// The reported state of a head generation: `assignment_id`, `generation` and
/// [`reported_state`]'s columns.
pub(crate) fn head_state(row: &Row) -> Result<HeadState, StoreError> {
    Ok(HeadState {
        assignment_id: row.id("assignment_id", "assignment id")?,
        generation: row.counter("generation", "assignment generation")?,
        reported: reported_state(row)?
            .ok_or_else(|| StoreError::Corrupt("a reported state without its state".into()))?,
    })
}

/// A node's current session: `node_id` and [`session`]'s columns.
pub(crate) fn current_session(cluster_id: &Id, row: &Row) -> Result<(NodeId, RuntimeSessionReference), StoreError> {
    let node_id = row.node_id("node_id", "session node id")?;
    let session = session(cluster_id, &node_id, row)?;
    Ok((node_id, session))
}

/// A recorded service status: `service_id`, `spec_revision`, `state`, `reason`, `changed_at`.
pub(crate) fn recorded_status(row: &Row) -> Result<RecordedStatus, StoreError> {
    Ok(RecordedStatus {
        service_id: row.id("service_id", "status service id")?,
        spec_revision: row.counter("spec_revision", "status spec revision")?,
        state: row.text("state")?,
        reason: row.optional_text("reason")?,
        changed_at: row.counter("changed_at", "status change time")?,
    })
}

/// The latest reported state of an assignment generation: `state`, `session_id`,
/// `session_generation`, `reported_at` (all NULL when none was reported).
pub(crate) fn reported_state(row: &Row) -> Result<Option<ReportedState>, StoreError> {
    let Some(state) = row.optional_text("state")? else { return Ok(None) };
    Ok(Some(ReportedState {
        state,
        session_id: row.id("session_id", "state session id")?,
        session_generation: row.counter("session_generation", "session generation")?,
        reported_at: row.counter("reported_at", "report time")?,
    }))
}

/// A recorded ingress registration: the columns of `ingress_registrations`.
pub(crate) fn registration(row: &Row) -> Result<StoredIngressRegistration, StoreError> {
    let id = |column: &str| row.id(column, &format!("registration {column}"));
    let counter = |column: &str| row.counter(column, column);
    let reference = |prefix: &str| -> Result<AuthorityReference, StoreError> {
        Ok(AuthorityReference {
            id: id(&format!("{prefix}_id"))?,
            generation: counter(&format!("{prefix}_generation"))?,
            digest: row.digest(&format!("{prefix}_digest"), &format!("registration {prefix}_digest"))?,
        })
    };
    let capabilities = match row.optional_text("capabilities")? {
        None => None,
        Some(text) => Some(
            serde_json::from_str::<Vec<String>>(&text)
                .map_err(|_| StoreError::Corrupt("stored registration capabilities do not read back".into()))?,
        ),
    };
    Ok(StoredIngressRegistration {
        sequence: counter("sequence")?,
        registration: IngressRegistration {
            id: id("registration_id")?,
            cluster_id: id("cluster_id")?,
            node_id: row.node_id("node_id", "registration node_id")?,
            version: row.text("version")?,
            capabilities,
            protocol_version: counter("protocol_version")?,
            relay: RelayConnectionReference {
                id: id("relay_connection_id")?,
                relay_id: id("relay_id")?,
                epoch: counter("relay_epoch")?,
            },
            designation: reference("designation")?,
            assignment: reference("assignment")?,
            session: SessionGeneration { id: id("session_id")?, generation: counter("session_generation")? },
            registered_at: counter("registered_at")?,
        },
    })
}

/// The first read of a registration's facts (see `registrations.rs`, `REGISTRATION_FACTS_SQL`):
/// `designation` (NULL: none), the designated service's current spec `spec_body` and
/// `spec_revision` (NULL: deleted), `node_exists`, `route_revision` (NULL: no table yet), and the
/// node's current session (`generation`, `session_id`, `controller_kind`, `controller_id`,
/// `runtime_namespace`; NULL: none). The assignments and the credential's hash are read after it.
pub(crate) fn registration_facts(
    cluster_id: &Id,
    node_id: &NodeId,
    row: &Row,
) -> Result<RegistrationFacts, StoreError> {
    let designation = optional_designation(row, "designation")?;
    let spec = match (&designation, row.optional_text("spec_body")?) {
        (Some(_), Some(body)) => Some(read_service_spec(&body, row.integer("spec_revision")?)?),
        _ => None,
    };
    let node_exists = row.boolean("node_exists")?;
    // A session is the node's only while the node exists.
    let session = match row.optional_text("session_id")? {
        Some(_) if node_exists => Some(session(cluster_id, node_id, row)?),
        _ => None,
    };
    Ok(RegistrationFacts {
        designation,
        spec,
        node_exists,
        session,
        assignments: Vec::new(),
        credential_hash: None,
        route_table_revision: row
            .optional_integer("route_revision")?
            .map(|revision| counter_from_sql(revision, "route table revision"))
            .transpose()?,
    })
}

/// A recorded controller key: `role`, `key_id`, `recorded_at`, `retired_at`, `public_key` (which
/// must be an Ed25519 public key whose id is `key_id`).
pub(crate) fn key_record(row: &Row) -> Result<KeyRecord, StoreError> {
    let role = row.text("role")?;
    let role =
        KeyRole::parse(&role).ok_or_else(|| StoreError::Corrupt(format!("stored key role {role:?} is unknown")))?;
    let key_id = row.text("key_id")?;
    if key_id.is_empty() {
        return Err(StoreError::Corrupt(format!("stored {role} key id is empty")));
    }
    let public_key = match row.optional_text("public_key")? {
        None => None,
        Some(text) => {
            Some(decode_public_key(&text).filter(|public_key| signing_key_id(public_key) == key_id).ok_or_else(
                || StoreError::Corrupt(format!("stored public key of {role} key {key_id} is not that key")),
            )?)
        }
    };
    let retired_at_ms =
        row.optional_integer("retired_at")?.map(|at| counter_from_sql(at, "key retirement time")).transpose()?;
    Ok(KeyRecord {
        role,
        key_id,
        recorded_at_ms: row.counter("recorded_at", "key record time")?,
        public_key,
        retired_at_ms,
    })
}

/// An address plan revision: `record`.
pub(crate) fn address_plan(row: &Row) -> Result<RuntimeNetworkAddressPlan, StoreError> {
    read_digested(&row.text("record")?, "address plan")
}

/// A protected authority generation: `record`.
pub(crate) fn protected_authority(row: &Row) -> Result<RuntimeNetworkProtectedAuthority, StoreError> {
    read_digested(&row.text("record")?, "protected authority")
}

/// A lease generation: `record`.
pub(crate) fn network_lease(row: &Row) -> Result<RuntimeNetworkLease, StoreError> {
    read_digested(&row.text("record")?, "runtime network lease")
}

/// One row of sqlx's `_sqlx_migrations`: `version`, `success`, `checksum`.
pub(crate) fn applied_migration(row: &Row) -> Result<AppliedMigration, StoreError> {
    Ok(AppliedMigration {
        version: row.integer("version")?,
        success: row.boolean("success")?,
        checksum: row.bytes("checksum")?,
    })
}

/// An integer column holding a counter, such as a revision or the highest epoch so far.
pub(crate) fn counter(row: &Row, column: &str, what: &str) -> Result<u64, StoreError> {
    row.counter(column, what)
}

/// A claim generation: [`signed_record`]'s columns, `issued_at`, the answer columns
/// (`answer_status`, `node_state`, `answered_session_id`, `answered_session_generation`,
/// `answered_at`), `fault_count`, `last_fault`, `last_fault_at`, `resolution`, `resolved_at`.
pub(crate) fn stored_claim(row: &Row) -> Result<StoredClaim, StoreError> {
    let signed: Signed<RuntimeLocalStorageClaim> =
        signed_record(row, "runtime local storage claim", |value| snapshot_runtime_local_storage_claim(value).ok())?;
    let time =
        |column: &str, what: &str| row.optional_integer(column)?.map(|value| counter_from_sql(value, what)).transpose();
    let last_fault = match (row.optional_text("last_fault")?, time("last_fault_at", "fault time")?) {
        (Some(fault), Some(at)) => Some(ClaimFault { fault, at }),
        _ => None,
    };
    let resolution = match (row.optional_text("resolution")?, time("resolved_at", "resolution time")?) {
        (Some(decision), Some(at)) => Some(ClaimResolution { decision, at }),
        _ => None,
    };
    Ok(StoredClaim {
        signed,
        issued_at: row.counter("issued_at", "claim issue time")?,
        answer: claim_answer(row)?,
        fault_count: row.counter("fault_count", "claim fault count")?,
        last_fault,
        resolution,
    })
}

/// The answer columns of a claim generation, `None` when it has no answer.
fn claim_answer(row: &Row) -> Result<Option<ClaimAnswer>, StoreError> {
    let (Some(status), Some(state)) = (row.optional_text("answer_status")?, row.optional_text("node_state")?) else {
        return Ok(None);
    };
    Ok(Some(ClaimAnswer {
        status,
        state,
        session_id: row.id("answered_session_id", "answer session id")?,
        session_generation: row.counter("answered_session_generation", "answer session generation")?,
        answered_at: row.counter("answered_at", "answer time")?,
    }))
}

/// A head claim generation: [`stored_claim`]'s columns, or, when the record does not read back,
/// what the head's own columns say of it (`claim_id`, `head_generation`, `digest`, `node_id`,
/// `service_id`, `volume_id`), so that one unreadable record affects only itself.
pub(crate) fn claim_head(row: &Row) -> Result<Result<StoredClaim, UnreadableClaim>, StoreError> {
    let problem = match stored_claim(row) {
        Ok(stored) => return Ok(Ok(stored)),
        Err(StoreError::Corrupt(problem)) => problem,
        Err(error) => return Err(error),
    };
    Ok(Err(UnreadableClaim {
        reference: AuthorityReference {
            id: row.id("claim_id", "claim id")?,
            generation: row.counter("head_generation", "claim generation")?,
            digest: row.digest("digest", "claim digest")?,
        },
        node_id: row.node_id("node_id", "claim node id")?,
        service_id: row.id("service_id", "claim service id")?,
        volume_id: row.id("volume_id", "claim volume id")?,
        problem,
    }))
}

/// The latest answered generation of a claim: `claim_id`, `generation` and the answer columns.
pub(crate) fn last_claim_answer(row: &Row) -> Result<LastClaimAnswer, StoreError> {
    Ok(LastClaimAnswer {
        claim_id: row.id("claim_id", "claim id")?,
        generation: row.counter("generation", "claim generation")?,
        answer: claim_answer(row)?.ok_or_else(|| StoreError::Corrupt("a listed claim answer is NULL".into()))?,
    })
}

/// The cluster of a claim: `cluster_id`.
pub(crate) fn claim_cluster(row: &Row) -> Result<Id, StoreError> {
    row.id("cluster_id", "claim cluster id")
}
