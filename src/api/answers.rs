//! Every answer, written from the domain's typed answers through its shape in
//! `api::wire::answers`: the `response` object of each method, serialized once into the text the
//! envelope carries. Absent optional members stay absent (a registration without
//! `capabilities`), `null` members are written as `null`.
//!
//! The three answers that show a secret (a node bearer, a relay bearer, a connection token) are
//! those that issue it; the secret values of `resolveRuntimeSecretBindings` go to the node's
//! current session only. No other answer carries one.

use super::wire::answers::{self as shape, *};
use crate::contract::assignment::RuntimeAssignment;
use crate::contract::designation::ClusterIngressDesignation;
use crate::contract::inventory::ServiceRuntimeSpec;
use crate::contract::network::RuntimeNetworkProjection;
use crate::contract::registration::CLUSTER_INGRESS_PROTOCOL;
use crate::contract::service_status::ServiceRuntimeStatus;
use crate::contract::session::RuntimeSessionReference;
use crate::contract::signing::{Signed, encode_public_key, key_id};
use crate::domain::ControllerSigningKey;
use crate::domain::designation::{DesignationAnswer, DesignationPage};
use crate::domain::inventory::{NodeListing, NodePut};
use crate::domain::projections::NodeProjection;
use crate::domain::registration::{RegistrationAccepted, RegistrationPage};
use crate::domain::relays::{ClusterRelays, RelayConnected, RelayCredentialIssued, RelayHeartbeatAnswer};
use crate::domain::secrets::Bearer;
use crate::domain::storage_claims::ClaimListing as Listing;
use crate::store::network::StoredNetworkPlan;
use crate::store::registrations::StoredIngressRegistration;
use crate::store::relays::{StoredRelayConnection, StoredRouteTable};
use crate::store::{StoredCluster, StoredOrganization};
use serde::Serialize;
use serde_json::value::RawValue;

/// An answer's text, as the envelope carries it.
pub type Written = Box<RawValue>;

/// The text of `answer`.
///
/// Every object of an answer has its members sorted by name; in debug builds this checks it, so
/// a shape whose fields are out of order fails every test that meets its answer.
///
/// # Panics
/// Never for the shapes of `wire::answers`, whose members are `Serialize` values with string keys.
pub fn written(answer: &impl Serialize) -> Written {
    let text = serde_json::value::to_raw_value(answer).expect("answers serialize");
    debug_assert_eq!(
        text.get(),
        serde_json::from_str::<serde_json::Value>(text.get()).map(|value| value.to_string()).unwrap_or_default(),
        "an answer's members are sorted by name"
    );
    text
}

/// `{ organization }` (`putOrganization`, `getOrganization`).
pub fn organization(stored: &StoredOrganization) -> Written {
    written(&OrganizationAnswer { organization: &stored.organization })
}

type WrittenCluster<'a> = Sorted<Revised<&'a crate::contract::inventory::ClusterSpec, u64>>;

fn revised(stored: &StoredCluster) -> Revised<&crate::contract::inventory::ClusterSpec, u64> {
    Revised { record: &stored.cluster, revision: stored.revision }
}

/// `{ cluster }` with its `revision`.
pub fn cluster(stored: &StoredCluster) -> Written {
    written(&ClusterAnswer { cluster: Sorted(revised(stored)) })
}

/// `{ clusters }`.
pub fn clusters(stored: &[StoredCluster]) -> Written {
    let clusters: Vec<WrittenCluster<'_>> = stored.iter().map(|stored| Sorted(revised(stored))).collect();
    written(&ClustersAnswer { clusters })
}

/// `{ bearer | null, node }`: the one answer that shows a node bearer; it is issued here and
/// stored only hashed.
pub fn node_put(put: &NodePut) -> Written {
    written(&NodePutAnswer { bearer: put.bearer.as_ref().map(Bearer::expose), node: Sorted(&put.node.node) })
}

/// A node as `listClusterNodes` lists it, with the runtime namespace for `getClusterNode`; never
/// the bearer or its hash.
fn node_summary(listing: &NodeListing, with_namespace: bool) -> impl Serialize + '_ {
    let node = &listing.node.node;
    NodeSummary {
        connected: listing.status.connected,
        host_addresses: &node.host_addresses,
        id: &node.id,
        runtime_namespace: with_namespace.then_some(&node.runtime_namespace),
        session: listing.status.session.as_ref().map(Sorted),
    }
}

/// `{ nodes }`.
pub fn nodes(listed: &[NodeListing]) -> Written {
    written(&NodesAnswer { nodes: listed.iter().map(|listing| node_summary(listing, false)).collect::<Vec<_>>() })
}

/// `{ node }`: the summary `listClusterNodes` lists, with the runtime namespace.
pub fn node(listing: &NodeListing) -> Written {
    written(&NodeAnswer { node: node_summary(listing, true) })
}

/// `{ spec }`.
pub fn spec(spec: &ServiceRuntimeSpec) -> Written {
    written(&SpecAnswer { spec: Sorted(spec) })
}

/// `{ status }`.
pub fn status(status: &ServiceRuntimeStatus) -> Written {
    written(&StatusAnswer { status: Sorted(status) })
}

/// `{ statuses }`.
pub fn statuses(statuses: &[ServiceRuntimeStatus]) -> Written {
    written(&StatusesAnswer { statuses: statuses.iter().map(Sorted).collect::<Vec<_>>() })
}

/// `{ plan, protectedAuthority }`: the address plan with its digest and the cluster's protected
/// authority, both `null` when the cluster has no plan.
pub fn network_plan(stored: Option<&StoredNetworkPlan>) -> Written {
    written(&NetworkPlanAnswer {
        plan: stored.map(|stored| Sorted(&stored.plan)),
        protected_authority: stored.map(|stored| Sorted(&stored.authority)),
    })
}

/// One claim as `listRuntimeLocalStorageClaims` lists it.
fn claim_listing(listing: &Listing) -> impl Serialize + '_ {
    let head = &listing.head;
    ClaimListing {
        claim: Sorted(&head.signed.payload),
        faults: ClaimFaults {
            count: head.fault_count,
            last: head.last_fault.as_ref().map(|fault| ClaimFault { at: fault.at, fault: &fault.fault }),
        },
        issued_at: head.issued_at,
        node: listing.last_answer.as_ref().map(|last| ClaimNodeAnswer {
            answered_at: last.answer.answered_at,
            generation: last.generation,
            state: &last.answer.state,
            status: &last.answer.status,
        }),
        resolution: head
            .resolution
            .as_ref()
            .map(|resolution| ClaimResolution { at: resolution.at, decision: &resolution.decision }),
    }
}

/// `{ claims }` (`listRuntimeLocalStorageClaims`).
pub fn claims(listed: &[Listing]) -> Written {
    written(&ClaimsAnswer { claims: listed.iter().map(claim_listing).collect::<Vec<_>>() })
}

/// `{ claim }` (`resolveRuntimeLocalStorageClaim`): the claim's listing after the decision.
pub fn claim(listing: &Listing) -> Written {
    written(&ClaimAnswer { claim: claim_listing(listing) })
}

/// `{ deleted: true }`.
pub fn deleted() -> Written {
    written(&DeletedAnswer { deleted: true })
}

/// `{ designation, replayed, spec }`.
pub fn designated(answer: &DesignationAnswer) -> Written {
    written(&DesignatedAnswer {
        designation: Sorted(&answer.designation),
        replayed: answer.replayed,
        spec: Sorted(&answer.spec),
    })
}

/// `{ designation | null }`.
pub fn designation(designation: Option<&ClusterIngressDesignation>) -> Written {
    written(&shape::DesignationAnswer { designation: designation.map(Sorted) })
}

/// `{ designations, nextGeneration }`.
pub fn designations(page: &DesignationPage) -> Written {
    written(&DesignationsAnswer {
        designations: page.designations.iter().map(Sorted).collect::<Vec<_>>(),
        next_generation: page.next_generation,
    })
}

/// `{ accepted: true, protocol, revision }` with the controller's own offer.
pub fn registered(accepted: &RegistrationAccepted) -> Written {
    written(&RegisteredAnswer {
        accepted: true,
        protocol: Sorted(&CLUSTER_INGRESS_PROTOCOL),
        revision: accepted.route_table_revision,
    })
}

/// A recorded registration; `capabilities` is absent when the ingress sent none.
fn registration(stored: &StoredIngressRegistration) -> Registration<'_> {
    let registration = &stored.registration;
    Registration {
        assignment: Sorted(&registration.assignment),
        capabilities: registration.capabilities.as_deref(),
        cluster_id: &registration.cluster_id,
        designation: Sorted(&registration.designation),
        id: &registration.id,
        node_id: &registration.node_id,
        protocol_version: registration.protocol_version,
        registered_at: registration.registered_at,
        relay_connection: RegistrationRelay {
            epoch: registration.relay.epoch,
            id: &registration.relay.id,
            relay_id: &registration.relay.relay_id,
        },
        sequence: stored.sequence,
        session: RegistrationSession { generation: registration.session.generation, id: &registration.session.id },
        version: &registration.version,
    }
}

/// `{ nextBefore, registrations }`.
pub fn registrations(page: &RegistrationPage) -> Written {
    written(&RegistrationsAnswer {
        next_before: page.next_before,
        registrations: page.registrations.iter().map(registration).collect::<Vec<_>>(),
    })
}

/// A relay connection: `{ clusterId, epoch, id, relayId }`.
fn connection(connection: &StoredRelayConnection) -> RelayConnection<&crate::contract::Id, u64> {
    RelayConnection {
        cluster_id: &connection.cluster_id,
        epoch: connection.epoch,
        id: &connection.id,
        relay_id: &connection.relay_id,
    }
}

/// `{ bearer, relay }`: the one answer that shows a relay bearer; it is issued here and stored
/// only hashed.
pub fn relay_credential(issued: &RelayCredentialIssued) -> Written {
    let relay = &issued.relay;
    written(&RelayCredentialAnswer {
        bearer: issued.bearer.expose(),
        relay: RelayCredentialRelay {
            cluster_id: relay.cluster_id.as_str(),
            origin: relay.origin.as_str(),
            relay_id: relay.relay_id.as_str(),
        },
    })
}

/// `{ relays, truncated }` of `listClusterRelays`: stored facts and the election, never a
/// bearer, token or hash.
pub fn relays(listed: &ClusterRelays) -> Written {
    let relays: Vec<_> = listed
        .relays
        .iter()
        .map(|relay| ListedRelay {
            connections: relay
                .connections
                .iter()
                .map(|connection| ListedRelayConnection {
                    elected: connection.elected,
                    epoch: connection.epoch,
                    id: &connection.id,
                    last_seen_at: connection.last_seen_ms,
                })
                .collect::<Vec<_>>(),
            credential: ListedRelayCredential { generation: relay.credential_generation },
            relay_id: &relay.relay_id,
        })
        .collect();
    written(&RelaysAnswer { relays, truncated: listed.truncated })
}

/// `{ connection, leaseMs, token }`: the one answer that shows a connection token; it is stored
/// only hashed.
pub fn relay_connected(connected: &RelayConnected) -> Written {
    written(&RelayConnectedAnswer {
        connection: connection(&connected.connection),
        lease_ms: connected.lease_ms,
        token: connected.token.expose(),
    })
}

/// `{ connection, leaseMs }`.
pub fn relay_heartbeat(answer: &RelayHeartbeatAnswer) -> Written {
    written(&shape::RelayHeartbeatAnswer { connection: connection(&answer.connection), lease_ms: answer.lease_ms })
}

/// `{ table }`: `IClusterIngressRouteTable` or `null`. Routes are sorted by hostname, each
/// route's backends by lease id.
pub fn route_table(table: Option<&StoredRouteTable>) -> Written {
    let table = table.map(|table| RouteTable {
        cluster_id: &table.cluster_id,
        revision: table.revision,
        routes: table
            .routes
            .iter()
            .map(|route| Route {
                backends: table
                    .backends
                    .iter()
                    .filter(|backend| backend.hostname == route.hostname)
                    .map(|backend| Backend {
                        address: &backend.address,
                        lease_id: &backend.lease_id,
                        port: backend.port,
                    })
                    .collect::<Vec<_>>(),
                hostname: &route.hostname,
                port: route.port,
                protocol: route.protocol.as_str(),
                service_id: &route.service_id,
            })
            .collect::<Vec<_>>(),
    });
    written(&RouteTableAnswer { table })
}

/// `{ keys: [{ activeSince, algorithm: "ed25519", keyId, publicKey, retiredAt }] }`.
pub fn signing_keys(keys: &[ControllerSigningKey]) -> Written {
    let keys: Vec<_> = keys
        .iter()
        .map(|key| PublishedKey {
            active_since: key.active_since,
            algorithm: "ed25519".to_owned(),
            key_id: key_id(&key.public_key),
            public_key: encode_public_key(&key.public_key),
            retired_at: key.retired_at,
        })
        .collect();
    written(&SigningKeysAnswer { keys })
}

/// `{ controllerId, profile, version }`.
pub fn controller_version(version: &crate::domain::version::ControllerVersion) -> Written {
    written(&ControllerVersionAnswer {
        controller_id: &version.controller_id,
        profile: version.profile,
        version: version.version,
    })
}

/// `{ session }`.
pub fn session(session: &RuntimeSessionReference) -> Written {
    written(&SessionAnswer { session: Sorted(session) })
}

/// `{ assignments }`, each signed.
pub fn assignments(assignments: &[Signed<RuntimeAssignment>]) -> Written {
    written(&AssignmentsAnswer { assignments: assignments.iter().map(Sorted).collect::<Vec<_>>() })
}

/// `{ values: [{ name, value }] }`: the one answer that carries secret values, to the node's
/// current session only.
pub fn secret_values(values: &[(String, Bearer)]) -> Written {
    written(&SecretValuesAnswer {
        values: values.iter().map(|(name, value)| SecretValue { name, value: value.expose() }).collect::<Vec<_>>(),
    })
}

/// `{ projection: ISigned<IRuntimeNetworkProjection> | null }`.
pub fn projection(projection: Option<&Signed<RuntimeNetworkProjection>>) -> Written {
    written(&ProjectionAnswer { projection: projection.map(Sorted) })
}

/// `{ applied: IRuntimeAuthorityReference | null, projection: ISigned<IRuntimeNetworkProjection> | null }`.
pub fn node_projection(answer: &NodeProjection) -> Written {
    written(&NodeProjectionAnswer {
        applied: answer.applied.as_ref().map(Sorted),
        projection: answer.projection.as_ref().map(Sorted),
    })
}

/// `{ recorded: true }`.
pub fn recorded() -> Written {
    written(&RecordedAnswer { recorded: true })
}
