//! Every answer's wire JSON, built in one place from the domain's typed answers: the `response`
//! object of each method. Absent optional members stay absent (a registration without
//! `capabilities`), `null` members are written as `null`.
//!
//! The three answers that show a secret (a node bearer, a relay bearer, a connection token) are
//! those that issue it; the secret values of `resolveRuntimeSecretBindings` go to the node's
//! current session only. No other answer carries one.

use crate::contract::DigestedRecord;
use crate::contract::assignment::RuntimeAssignment;
use crate::contract::designation::ClusterIngressDesignation;
use crate::contract::inventory::ServiceRuntimeSpec;
use crate::contract::network::RuntimeNetworkProjection;
use crate::contract::registration::CLUSTER_INGRESS_PROTOCOL;
use crate::contract::service_status::ServiceRuntimeStatus;
use crate::contract::session::RuntimeSessionReference;
use crate::contract::signing::{Signed, encode_public_key, key_id, signed_to_value};
use crate::domain::ControllerSigningKey;
use crate::domain::designation::{DesignationAnswer, DesignationPage};
use crate::domain::inventory::{NodeListing, NodePut};
use crate::domain::projections::NodeProjection;
use crate::domain::registration::{RegistrationAccepted, RegistrationPage};
use crate::domain::relays::{ClusterRelays, RelayConnected, RelayCredentialIssued, RelayHeartbeatAnswer};
use crate::domain::secrets::Bearer;
use crate::domain::storage_claims::ClaimListing;
use crate::store::network::StoredNetworkPlan;
use crate::store::registrations::StoredIngressRegistration;
use crate::store::relays::{StoredRelayConnection, StoredRouteTable};
use crate::store::{StoredCluster, StoredNode, StoredOrganization};
use serde_json::{Value, json};

fn cluster_json(stored: &StoredCluster) -> Value {
    let mut cluster = serde_json::to_value(&stored.cluster).expect("clusters serialize");
    cluster["revision"] = json!(stored.revision);
    cluster
}

fn node_json(stored: &StoredNode) -> Value {
    serde_json::to_value(&stored.node).expect("nodes serialize")
}

/// `{ organization }` (`putOrganization`, `getOrganization`).
pub fn organization(stored: &StoredOrganization) -> Value {
    json!({ "organization": stored.organization })
}

/// `{ cluster }` with its `revision`.
pub fn cluster(stored: &StoredCluster) -> Value {
    json!({ "cluster": cluster_json(stored) })
}

/// `{ clusters }`.
pub fn clusters(stored: &[StoredCluster]) -> Value {
    json!({ "clusters": stored.iter().map(cluster_json).collect::<Vec<_>>() })
}

/// `{ node, bearer | null }`: the one answer that shows a node bearer; it is issued here and
/// stored only hashed.
pub fn node_put(put: &NodePut) -> Value {
    json!({ "node": node_json(&put.node), "bearer": put.bearer.as_ref().map(Bearer::expose) })
}

/// A node as `listClusterNodes` lists it: `{ id, hostAddresses, session | null, connected }`.
fn node_summary_json(listing: &NodeListing) -> Value {
    json!({
        "id": listing.node.node.id,
        "hostAddresses": listing.node.node.host_addresses,
        "session": listing.status.session.as_ref().map(RuntimeSessionReference::to_value),
        "connected": listing.status.connected,
    })
}

/// `{ nodes: [{ id, hostAddresses, session | null, connected }] }`.
pub fn nodes(listed: &[NodeListing]) -> Value {
    json!({ "nodes": listed.iter().map(node_summary_json).collect::<Vec<_>>() })
}

/// `{ node: { id, runtimeNamespace, hostAddresses, session | null, connected } }`: the summary
/// `listClusterNodes` lists, with the runtime namespace; never the bearer or its hash.
pub fn node(listing: &NodeListing) -> Value {
    let mut node = node_summary_json(listing);
    node["runtimeNamespace"] = json!(listing.node.node.runtime_namespace);
    json!({ "node": node })
}

/// `{ spec }`.
pub fn spec(spec: &ServiceRuntimeSpec) -> Value {
    json!({ "spec": spec })
}

/// `{ status }`.
pub fn status(status: &ServiceRuntimeStatus) -> Value {
    json!({ "status": status.to_value() })
}

/// `{ statuses }`.
pub fn statuses(statuses: &[ServiceRuntimeStatus]) -> Value {
    json!({ "statuses": statuses.iter().map(ServiceRuntimeStatus::to_value).collect::<Vec<_>>() })
}

/// `{ plan, protectedAuthority }`: the address plan with its digest and the cluster's protected
/// authority, both `null` when the cluster has no plan.
pub fn network_plan(stored: Option<&StoredNetworkPlan>) -> Value {
    json!({
        "plan": stored.map(|stored| stored.plan.to_value()),
        "protectedAuthority": stored.map(|stored| stored.authority.to_value()),
    })
}

/// One claim as `listRuntimeLocalStorageClaims` lists it: `{ claim, issuedAt, node: { generation,
/// status, state, answeredAt } | null, faults: { count, last: { fault, at } | null }, resolution:
/// { decision, at } | null }` — the head generation with its faults and decision, and the node's
/// latest answer to any generation of the claim.
fn claim_listing_json(listing: &ClaimListing) -> Value {
    let head = &listing.head;
    json!({
        "claim": serde_json::to_value(&head.signed.payload).expect("claims serialize"),
        "issuedAt": head.issued_at,
        "node": listing.last_answer.as_ref().map(|last| json!({
            "generation": last.generation,
            "status": last.answer.status,
            "state": last.answer.state,
            "answeredAt": last.answer.answered_at,
        })),
        "faults": {
            "count": head.fault_count,
            "last": head.last_fault.as_ref().map(|fault| json!({ "fault": fault.fault, "at": fault.at })),
        },
        "resolution": head.resolution.as_ref().map(|resolution| json!({
            "decision": resolution.decision, "at": resolution.at,
        })),
    })
}

/// `{ claims }` (`listRuntimeLocalStorageClaims`).
pub fn claims(listed: &[ClaimListing]) -> Value {
    json!({ "claims": listed.iter().map(claim_listing_json).collect::<Vec<_>>() })
}

/// `{ claim }` (`resolveRuntimeLocalStorageClaim`): the claim's listing after the decision.
pub fn claim(listing: &ClaimListing) -> Value {
    json!({ "claim": claim_listing_json(listing) })
}

/// `{ deleted: true }`.
pub fn deleted() -> Value {
    json!({ "deleted": true })
}

/// `{ designation, spec, replayed }`.
pub fn designated(answer: &DesignationAnswer) -> Value {
    json!({ "designation": answer.designation.to_value(), "spec": answer.spec, "replayed": answer.replayed })
}

/// `{ designation | null }`.
pub fn designation(designation: Option<&ClusterIngressDesignation>) -> Value {
    json!({ "designation": designation.map(DigestedRecord::to_value) })
}

/// `{ designations, nextGeneration }`.
pub fn designations(page: &DesignationPage) -> Value {
    let designations: Vec<Value> = page.designations.iter().map(DigestedRecord::to_value).collect();
    json!({ "designations": designations, "nextGeneration": page.next_generation })
}

/// `{ accepted: true, revision, protocol }` with the controller's own offer.
pub fn registered(accepted: &RegistrationAccepted) -> Value {
    json!({ "accepted": true, "revision": accepted.route_table_revision, "protocol": CLUSTER_INGRESS_PROTOCOL })
}

/// The wire form of a recorded registration; `capabilities` is absent when the ingress sent none.
fn registration_json(stored: &StoredIngressRegistration) -> Value {
    let registration = &stored.registration;
    let mut value = json!({
        "id": registration.id,
        "sequence": stored.sequence,
        "clusterId": registration.cluster_id,
        "nodeId": registration.node_id,
        "version": registration.version,
        "protocolVersion": registration.protocol_version,
        "relayConnection": {
            "id": registration.relay.id,
            "relayId": registration.relay.relay_id,
            "epoch": registration.relay.epoch,
        },
        "designation": registration.designation,
        "assignment": registration.assignment,
        "session": { "id": registration.session.id, "generation": registration.session.generation },
        "registeredAt": registration.registered_at,
    });
    if let Some(capabilities) = &registration.capabilities {
        value["capabilities"] = json!(capabilities);
    }
    value
}

/// `{ registrations, nextBefore }`.
pub fn registrations(page: &RegistrationPage) -> Value {
    let registrations: Vec<Value> = page.registrations.iter().map(registration_json).collect();
    json!({ "registrations": registrations, "nextBefore": page.next_before })
}

/// The wire form of a relay connection: `{ id, clusterId, relayId, epoch }`.
fn connection_json(connection: &StoredRelayConnection) -> Value {
    json!({
        "id": connection.id,
        "clusterId": connection.cluster_id,
        "relayId": connection.relay_id,
        "epoch": connection.epoch,
    })
}

/// `{ relay: { clusterId, relayId, origin }, bearer }`: the one answer that shows a relay
/// bearer; it is issued here and stored only hashed.
pub fn relay_credential(issued: &RelayCredentialIssued) -> Value {
    let relay = &issued.relay;
    json!({
        "relay": { "clusterId": relay.cluster_id, "relayId": relay.relay_id, "origin": relay.origin },
        "bearer": issued.bearer.expose(),
    })
}

/// `{ relays: [{ relayId, credential: { generation }, connections: [{ id, epoch, lastSeenAt,
/// elected }] }], truncated }` of `listClusterRelays`: stored facts and the election, never a
/// bearer, token or hash.
pub fn relays(listed: &ClusterRelays) -> Value {
    let relays: Vec<Value> = listed
        .relays
        .iter()
        .map(|relay| {
            let connections: Vec<Value> = relay
                .connections
                .iter()
                .map(|connection| {
                    json!({
                        "id": connection.id,
                        "epoch": connection.epoch,
                        "lastSeenAt": connection.last_seen_ms,
                        "elected": connection.elected,
                    })
                })
                .collect();
            json!({
                "relayId": relay.relay_id,
                "credential": { "generation": relay.credential_generation },
                "connections": connections,
            })
        })
        .collect();
    json!({ "relays": relays, "truncated": listed.truncated })
}

/// `{ connection, token, leaseMs }`: the one answer that shows a connection token; it is stored
/// only hashed.
pub fn relay_connected(connected: &RelayConnected) -> Value {
    json!({
        "connection": connection_json(&connected.connection),
        "token": connected.token.expose(),
        "leaseMs": connected.lease_ms,
    })
}

/// `{ connection, leaseMs }`.
pub fn relay_heartbeat(answer: &RelayHeartbeatAnswer) -> Value {
    json!({ "connection": connection_json(&answer.connection), "leaseMs": answer.lease_ms })
}

/// `{ table }`: `IClusterIngressRouteTable` or `null`. Routes are sorted by hostname, each
/// route's backends by lease id.
pub fn route_table(table: Option<&StoredRouteTable>) -> Value {
    let table = table.map(|table| {
        let routes: Vec<Value> = table
            .routes
            .iter()
            .map(|route| {
                json!({
                    "hostname": route.hostname,
                    "serviceId": route.service_id,
                    "protocol": route.protocol.as_str(),
                    "port": route.port,
                    "backends": table.backends.iter().filter(|backend| backend.hostname == route.hostname).map(|backend| json!({
                        "leaseId": backend.lease_id,
                        "address": backend.address,
                        "port": backend.port,
                    })).collect::<Vec<_>>(),
                })
            })
            .collect();
        json!({ "clusterId": table.cluster_id, "revision": table.revision, "routes": routes })
    });
    json!({ "table": table })
}

/// `{ keys: [{ keyId, algorithm: "ed25519", publicKey, activeSince, retiredAt }] }`.
pub fn signing_keys(keys: &[ControllerSigningKey]) -> Value {
    let keys: Vec<Value> = keys
        .iter()
        .map(|key| {
            json!({
                "keyId": key_id(&key.public_key),
                "algorithm": "ed25519",
                "publicKey": encode_public_key(&key.public_key),
                "activeSince": key.active_since,
                "retiredAt": key.retired_at,
            })
        })
        .collect();
    json!({ "keys": keys })
}

/// `{ version, profile, controllerId }`.
pub fn controller_version(version: &crate::domain::version::ControllerVersion) -> Value {
    json!({ "version": version.version, "profile": version.profile, "controllerId": version.controller_id.as_str() })
}

/// `{ session }`.
pub fn session(session: &RuntimeSessionReference) -> Value {
    json!({ "session": session.to_value() })
}

/// `{ assignments }`, each signed.
pub fn assignments(assignments: &[Signed<RuntimeAssignment>]) -> Value {
    json!({ "assignments": assignments.iter().map(signed_to_value).collect::<Vec<_>>() })
}

/// `{ values: [{ name, value }] }`: the one answer that carries secret values, to the node's
/// current session only.
pub fn secret_values(values: &[(String, Bearer)]) -> Value {
    let values: Vec<Value> =
        values.iter().map(|(name, value)| json!({ "name": name, "value": value.expose() })).collect();
    json!({ "values": values })
}

/// `{ projection: ISigned<IRuntimeNetworkProjection> | null }`.
pub fn projection(projection: Option<&Signed<RuntimeNetworkProjection>>) -> Value {
    json!({ "projection": projection.map(signed_to_value) })
}

/// `{ projection: ISigned<IRuntimeNetworkProjection> | null, applied: IRuntimeAuthorityReference | null }`.
pub fn node_projection(answer: &NodeProjection) -> Value {
    json!({ "projection": answer.projection.as_ref().map(signed_to_value), "applied": answer.applied })
}

/// `{ recorded: true }`.
pub fn recorded() -> Value {
    json!({ "recorded": true })
}
