//! The wire shape of each answer: the `response` object of each method, its member names written
//! once. The api writes an answer through its shape (`api::answers`); the CLI reads the answers
//! it uses through the same shape, with `Value` or its own types as the members it does not
//! look into.
//!
//! Every object of an answer has its members sorted by name, as the wire has always had them: a
//! shape declares its fields in that order, and a contract record it holds is written through
//! [`Sorted`]. `answers::written` checks this in debug builds.

use crate::contract::primitives::{Id, Ipv4, NodeId};
use crate::contract::reference::AuthorityReference;
use serde::ser::Error as _;
use serde::{Deserialize, Serialize, Serializer};
use serde_json::Value;

/// A contract record written with its members sorted by name (through `serde_json::Value`, whose
/// objects are sorted).
#[derive(Debug, Clone, Copy)]
pub struct Sorted<T>(pub T);

impl<T: Serialize> Serialize for Sorted<T> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serde_json::to_value(&self.0).map_err(S::Error::custom)?.serialize(serializer)
    }
}

/// `one_member! { Name { field }; … }`: for each answer of one member, the struct named by its
/// doc comment, generic over the member's type.
macro_rules! one_member {
    ($($(#[$doc:meta])* $name:ident { $field:ident };)*) => {$(
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
        pub struct $name<M> {
            #[doc = concat!("`", stringify!($field), "`.")]
            pub $field: M,
        }
    )*};
}

one_member! {
    /// `{ organization }`: `putOrganization`, `getOrganization`.
    OrganizationAnswer { organization };

    /// `{ cluster }`: `putCluster`, `getCluster`; the cluster is a [`Revised`].
    ClusterAnswer { cluster };

    /// `{ clusters }`: `listClusters`.
    ClustersAnswer { clusters };

    /// `{ nodes }`: `listClusterNodes`.
    NodesAnswer { nodes };

    /// `{ node }`: `getClusterNode`.
    NodeAnswer { node };

    /// `{ spec }`: `putServiceRuntimeSpec`, `getServiceRuntimeSpec`.
    SpecAnswer { spec };

    /// `{ status }`: `getServiceRuntimeStatus`.
    StatusAnswer { status };

    /// `{ statuses }`: `listServiceRuntimeStatuses`.
    StatusesAnswer { statuses };

    /// `{ claims }`: `listRuntimeLocalStorageClaims`.
    ClaimsAnswer { claims };

    /// `{ claim }`: `resolveRuntimeLocalStorageClaim`, the claim's listing after the decision.
    ClaimAnswer { claim };

    /// `{ designation | null }`: `getClusterIngressDesignation`.
    DesignationAnswer { designation };

    /// `{ keys }`: `getControllerSigningKeys`.
    SigningKeysAnswer { keys };

    /// `{ session }`: `openRuntimeSession`.
    SessionAnswer { session };

    /// `{ assignments }`: `getRuntimeAssignments`, each signed.
    AssignmentsAnswer { assignments };

    /// `{ values }`: `resolveRuntimeSecretBindings`, the one answer that carries secret values, to
    /// the node's current session only.
    SecretValuesAnswer { values };

    /// `{ projection }`: `getRuntimeNetworkProjection`, an `ISigned<IRuntimeNetworkProjection>` or
    /// `null`.
    ProjectionAnswer { projection };
}

/// A record with the `revision` the store keeps beside it (a cluster).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Revised<R, N> {
    /// The record's own members.
    #[serde(flatten)]
    pub record: R,
    /// `revision`.
    pub revision: N,
}

/// `{ bearer | null, node }`: `putClusterNode`, the one answer that shows a node bearer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodePutAnswer<B, N> {
    /// `bearer`: the new bearer, `null` when none was issued.
    pub bearer: B,
    /// `node`.
    pub node: N,
}

/// A node as `listClusterNodes` lists it, and `getClusterNode` answers it with its
/// `runtimeNamespace`: never the bearer or its hash.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeSummary<C, A, I, N, S> {
    /// `connected`: whether the node's socket is connected to the answering process.
    pub connected: C,
    /// `hostAddresses`.
    #[serde(rename = "hostAddresses")]
    pub host_addresses: A,
    /// `id`.
    pub id: I,
    /// `runtimeNamespace`: `getClusterNode` only.
    #[serde(rename = "runtimeNamespace", default, skip_serializing_if = "Option::is_none")]
    pub runtime_namespace: Option<N>,
    /// `session`: the current session reference, or `null`.
    pub session: S,
}

/// `{ plan, protectedAuthority }`: both `null` when the cluster has no plan.
#[derive(Debug, Clone, Serialize)]
pub struct NetworkPlanAnswer<P, A> {
    /// `plan`, with its digest.
    pub plan: P,
    /// `protectedAuthority`.
    #[serde(rename = "protectedAuthority")]
    pub protected_authority: A,
}

/// One claim as `listRuntimeLocalStorageClaims` lists it: the head generation with its faults
/// and decision, and the node's latest answer to any generation of the claim.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClaimListing<C, F, T, N, R> {
    /// `claim`: the head generation's record.
    pub claim: C,
    /// `faults`: `{ count, last }`.
    pub faults: F,
    /// `issuedAt`.
    #[serde(rename = "issuedAt")]
    pub issued_at: T,
    /// `node`: the node's latest [`ClaimNodeAnswer`], or `null`.
    pub node: N,
    /// `resolution`: the [`ClaimResolution`], or `null`.
    pub resolution: R,
}

/// The `node` of a [`ClaimListing`].
#[derive(Debug, Clone, Serialize)]
pub struct ClaimNodeAnswer<'a> {
    /// `answeredAt`.
    #[serde(rename = "answeredAt")]
    pub answered_at: u64,
    /// `generation`.
    pub generation: u64,
    /// `state`.
    pub state: &'a str,
    /// `status`.
    pub status: &'a str,
}

/// The `faults` of a [`ClaimListing`].
#[derive(Debug, Clone, Serialize)]
pub struct ClaimFaults<L> {
    /// `count`.
    pub count: u64,
    /// `last`: `{ at, fault }`, or `null`.
    pub last: Option<L>,
}

/// `dated! { Name { field }; … }`: for each, `{ at, field }`, a word and when it was said.
macro_rules! dated {
    ($($(#[$doc:meta])* $name:ident { $field:ident };)*) => {$(
        $(#[$doc])*
        #[derive(Debug, Clone, Serialize)]
        pub struct $name<'a> {
            /// `at`.
            pub at: u64,
            #[doc = concat!("`", stringify!($field), "`.")]
            pub $field: &'a str,
        }
    )*};
}

dated! {
    /// The `last` of [`ClaimFaults`].
    ClaimFault { fault };

    /// The `resolution` of a [`ClaimListing`].
    ClaimResolution { decision };
}

/// `{ deleted: true }`: `deleteService`.
#[derive(Debug, Clone, Serialize)]
pub struct DeletedAnswer {
    /// `deleted`.
    pub deleted: bool,
}

/// `{ designation, replayed, spec }`: `designateClusterIngress`.
#[derive(Debug, Clone, Serialize)]
pub struct DesignatedAnswer<D, S> {
    /// `designation`.
    pub designation: D,
    /// `replayed`.
    pub replayed: bool,
    /// `spec`.
    pub spec: S,
}

/// `{ designations, nextGeneration }`: `listClusterIngressDesignations`.
#[derive(Debug, Clone, Serialize)]
pub struct DesignationsAnswer<L> {
    /// `designations`.
    pub designations: L,
    /// `nextGeneration`.
    #[serde(rename = "nextGeneration")]
    pub next_generation: Option<u64>,
}

/// `{ accepted: true, protocol, revision }`: `registerClusterIngress`.
#[derive(Debug, Clone, Serialize)]
pub struct RegisteredAnswer<P> {
    /// `accepted`.
    pub accepted: bool,
    /// `protocol`: the controller's own offer.
    pub protocol: P,
    /// `revision`: the route table's revision.
    pub revision: Option<u64>,
}

/// A recorded registration as `listClusterIngressRegistrations` lists it; `capabilities` is
/// absent when the ingress sent none.
#[derive(Debug, Clone, Serialize)]
pub struct Registration<'a> {
    /// `assignment`.
    pub assignment: Sorted<&'a AuthorityReference>,
    /// `capabilities`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capabilities: Option<&'a [String]>,
    /// `clusterId`.
    #[serde(rename = "clusterId")]
    pub cluster_id: &'a Id,
    /// `designation`.
    pub designation: Sorted<&'a AuthorityReference>,
    /// `id`.
    pub id: &'a Id,
    /// `nodeId`.
    #[serde(rename = "nodeId")]
    pub node_id: &'a NodeId,
    /// `protocolVersion`.
    #[serde(rename = "protocolVersion")]
    pub protocol_version: u64,
    /// `registeredAt`.
    #[serde(rename = "registeredAt")]
    pub registered_at: u64,
    /// `relayConnection`.
    #[serde(rename = "relayConnection")]
    pub relay_connection: RegistrationRelay<'a>,
    /// `sequence`.
    pub sequence: u64,
    /// `session`.
    pub session: RegistrationSession<'a>,
    /// `version`.
    pub version: &'a str,
}

/// The `relayConnection` of a [`Registration`].
#[derive(Debug, Clone, Serialize)]
pub struct RegistrationRelay<'a> {
    /// `epoch`.
    pub epoch: u64,
    /// `id`.
    pub id: &'a Id,
    /// `relayId`.
    #[serde(rename = "relayId")]
    pub relay_id: &'a Id,
}

/// The `session` of a [`Registration`].
#[derive(Debug, Clone, Serialize)]
pub struct RegistrationSession<'a> {
    /// `generation`.
    pub generation: u64,
    /// `id`.
    pub id: &'a Id,
}

/// `{ nextBefore, registrations }`: `listClusterIngressRegistrations`.
#[derive(Debug, Clone, Serialize)]
pub struct RegistrationsAnswer<L> {
    /// `nextBefore`.
    #[serde(rename = "nextBefore")]
    pub next_before: Option<u64>,
    /// `registrations`.
    pub registrations: L,
}

/// A relay connection: `{ clusterId, epoch, id, relayId }`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RelayConnection<S, N> {
    /// `clusterId`.
    #[serde(rename = "clusterId")]
    pub cluster_id: S,
    /// `epoch`.
    pub epoch: N,
    /// `id`.
    pub id: S,
    /// `relayId`.
    #[serde(rename = "relayId")]
    pub relay_id: S,
}

/// `{ bearer, relay: { clusterId, origin, relayId } }`: `issueClusterRelayCredential`, the one
/// answer that shows a relay bearer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RelayCredentialAnswer<S> {
    /// `bearer`.
    pub bearer: S,
    /// `relay`.
    pub relay: RelayCredentialRelay<S>,
}

/// The `relay` of a [`RelayCredentialAnswer`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RelayCredentialRelay<S> {
    /// `clusterId`.
    #[serde(rename = "clusterId")]
    pub cluster_id: S,
    /// `origin`.
    pub origin: S,
    /// `relayId`.
    #[serde(rename = "relayId")]
    pub relay_id: S,
}

/// One relay of `listClusterRelays`: stored facts and the election, never a bearer, token or
/// hash.
#[derive(Debug, Clone, Serialize)]
pub struct ListedRelay<'a, L> {
    /// `connections`: [`ListedRelayConnection`]s.
    pub connections: L,
    /// `credential`: `{ generation }`.
    pub credential: ListedRelayCredential,
    /// `relayId`.
    #[serde(rename = "relayId")]
    pub relay_id: &'a Id,
}

/// The `credential` of a [`ListedRelay`].
#[derive(Debug, Clone, Serialize)]
pub struct ListedRelayCredential {
    /// `generation`.
    pub generation: u64,
}

/// One connection of a [`ListedRelay`].
#[derive(Debug, Clone, Serialize)]
pub struct ListedRelayConnection<'a> {
    /// `elected`.
    pub elected: bool,
    /// `epoch`.
    pub epoch: u64,
    /// `id`.
    pub id: &'a Id,
    /// `lastSeenAt`.
    #[serde(rename = "lastSeenAt")]
    pub last_seen_at: u64,
}

/// `{ relays, truncated }`: `listClusterRelays`.
#[derive(Debug, Clone, Serialize)]
pub struct RelaysAnswer<L> {
    /// `relays`.
    pub relays: L,
    /// `truncated`.
    pub truncated: bool,
}

/// `{ connection, leaseMs, token }`: `connectClusterRelay`, the one answer that shows a
/// connection token.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RelayConnectedAnswer<C, S, N> {
    /// `connection`: a [`RelayConnection`].
    pub connection: C,
    /// `leaseMs`.
    #[serde(rename = "leaseMs")]
    pub lease_ms: N,
    /// `token`.
    pub token: S,
}

/// `{ connection, leaseMs }`: `heartbeatClusterRelay`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RelayHeartbeatAnswer<C, N> {
    /// `connection`: a [`RelayConnection`].
    pub connection: C,
    /// `leaseMs`.
    #[serde(rename = "leaseMs")]
    pub lease_ms: N,
}

/// `{ table }`: an `IClusterIngressRouteTable` or `null`.
#[derive(Debug, Clone, Serialize)]
pub struct RouteTableAnswer<T> {
    /// `table`.
    pub table: Option<T>,
}

/// `IClusterIngressRouteTable`: routes sorted by hostname.
#[derive(Debug, Clone, Serialize)]
pub struct RouteTable<'a, L> {
    /// `clusterId`.
    #[serde(rename = "clusterId")]
    pub cluster_id: &'a Id,
    /// `revision`.
    pub revision: u64,
    /// `routes`: [`Route`]s.
    pub routes: L,
}

/// One route of a [`RouteTable`]: backends sorted by lease id.
#[derive(Debug, Clone, Serialize)]
pub struct Route<'a, L> {
    /// `backends`: [`Backend`]s.
    pub backends: L,
    /// `hostname`.
    pub hostname: &'a str,
    /// `port`.
    pub port: u16,
    /// `protocol`.
    pub protocol: &'a str,
    /// `serviceId`.
    #[serde(rename = "serviceId")]
    pub service_id: &'a Id,
}

/// One backend of a [`Route`].
#[derive(Debug, Clone, Serialize)]
pub struct Backend<'a> {
    /// `address`.
    pub address: &'a Ipv4,
    /// `leaseId`.
    #[serde(rename = "leaseId")]
    pub lease_id: &'a Id,
    /// `port`.
    pub port: u16,
}

/// One key of `getControllerSigningKeys`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PublishedKey<S, N, R> {
    /// `activeSince`.
    #[serde(rename = "activeSince")]
    pub active_since: N,
    /// `algorithm`: `ed25519`.
    pub algorithm: S,
    /// `keyId`.
    #[serde(rename = "keyId")]
    pub key_id: S,
    /// `publicKey`.
    #[serde(rename = "publicKey")]
    pub public_key: S,
    /// `retiredAt`: `null` while the key signs.
    #[serde(rename = "retiredAt")]
    pub retired_at: R,
}

/// `{ controllerId, profile, version }`: `getControllerVersion`.
#[derive(Debug, Clone, Serialize)]
pub struct ControllerVersionAnswer<'a> {
    /// `controllerId`.
    #[serde(rename = "controllerId")]
    pub controller_id: &'a Id,
    /// `profile`.
    pub profile: &'a str,
    /// `version`.
    pub version: &'a str,
}

/// One value of `resolveRuntimeSecretBindings`.
#[derive(Debug, Clone, Serialize)]
pub struct SecretValue<'a> {
    /// `name`.
    pub name: &'a str,
    /// `value`.
    pub value: &'a str,
}

/// `{ applied, projection }`: `getRuntimeNetworkProjectionForNode`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeProjectionAnswer<A, P> {
    /// `applied`: the `IRuntimeAuthorityReference` the node last reported applying, or `null`.
    pub applied: A,
    /// `projection`: an `ISigned<IRuntimeNetworkProjection>`, or `null`.
    pub projection: P,
}

/// `{ recorded: true }`: the node reports.
#[derive(Debug, Clone, Serialize)]
pub struct RecordedAnswer {
    /// `recorded`.
    pub recorded: bool,
}

/// A [`ClaimListing`] as a reader that looks only into its claim reads it.
pub type ClaimListingRead = ClaimListing<Value, Value, Value, Value, Value>;

/// A [`NodeSummary`] read with its members as values.
pub type NodeSummaryRead = NodeSummary<Value, Value, Value, Value, Value>;

#[cfg(test)]
mod tests {
    //! Every answer shape a reader deserializes (the CLI's, `Client::call_as`'s), met with an
    //! answer the api writes (`api::answers`): read back through the reader's instantiation of
    //! the shape, and written again to the same JSON, so a member the writer names differently, or
    //! writes and the reader drops, fails here.

    use super::*;
    use crate::api::answers;
    use crate::api::requests::tests::{digest, example, id};
    use crate::contract::inventory::{
        ServiceRuntimeSpec, parse_cluster, parse_node, parse_organization, parse_service_spec_body,
    };
    use crate::contract::session::RuntimeSessionReference;
    use crate::domain::ControllerSigningKey;
    use crate::domain::inventory::{NodeListing, NodePut};
    use crate::domain::projections::NodeProjection;
    use crate::domain::relays::{self, ClusterRelay, RelayConnected, RelayCredentialIssued};
    use crate::domain::secrets::Bearer;
    use crate::domain::sessions::NodeSessionStatus;
    use crate::store::relays::StoredRelayConnection;
    use crate::store::{StoredCluster, StoredNode, StoredOrganization};
    use serde::Serialize;
    use serde::de::DeserializeOwned;
    use serde_json::json;
    use serde_json::value::RawValue;

    /// `written` read as `A`, which writes it again member for member.
    fn read_back<A: DeserializeOwned + Serialize>(written: &RawValue) -> A {
        let text = written.get();
        let read: A = serde_json::from_str(text).unwrap_or_else(|error| panic!("{error}: {text}"));
        let again = serde_json::to_value(&read).expect("a shape serializes");
        assert_eq!(again, serde_json::from_str::<Value>(text).expect("an answer is JSON"), "every member is read");
        read
    }

    fn reference() -> AuthorityReference {
        AuthorityReference { id: id("a1"), generation: 2, digest: digest() }
    }

    fn stored_node() -> StoredNode {
        let node = parse_node(&example("node.json")).expect("a node");
        StoredNode { cluster_id: id("c1"), node, bearer_hash: [0; 32], revision: 1 }
    }

    fn connection() -> StoredRelayConnection {
        StoredRelayConnection {
            id: id("conn-1"),
            cluster_id: id("c1"),
            relay_id: id("relay-a"),
            epoch: 3,
            last_seen_ms: 9,
        }
    }

    #[test]
    fn every_answer_a_reader_deserializes_reads_what_the_api_writes() {
        let organization = parse_organization(&json!({ "id": "org", "name": "Example Org" })).expect("an organization");
        let answer: OrganizationAnswer<Value> =
            read_back(&answers::organization(&StoredOrganization { organization, revision: 1 }));
        assert_eq!(answer.organization["name"], "Example Org");

        let cluster =
            StoredCluster { cluster: parse_cluster(&example("cluster.json")).expect("a cluster"), revision: 4 };
        let answer: ClusterAnswer<Revised<Value, Value>> = read_back(&answers::cluster(&cluster));
        assert_eq!((&answer.cluster.record["id"], &answer.cluster.revision), (&json!("c1"), &json!(4)));
        let answer: ClustersAnswer<Vec<Revised<Value, Value>>> = read_back(&answers::clusters(&[cluster]));
        assert_eq!(answer.clusters.len(), 1);

        let put = NodePut { node: stored_node(), bearer: Some(Bearer::from_presented("node-secret")) };
        let answer: NodePutAnswer<Value, Value> = read_back(&answers::node_put(&put));
        assert_eq!(answer.bearer, "node-secret");
        let answer: NodePutAnswer<Value, Value> = read_back(&answers::node_put(&NodePut { bearer: None, ..put }));
        assert_eq!(answer.bearer, Value::Null);

        let listing = NodeListing { node: stored_node(), status: NodeSessionStatus { session: None, connected: true } };
        let answer: NodeAnswer<NodeSummaryRead> = read_back(&answers::node(&listing));
        assert_eq!((&answer.node.connected, answer.node.runtime_namespace.is_some()), (&json!(true), true));
        let answer: NodesAnswer<Vec<NodeSummaryRead>> = read_back(&answers::nodes(&[listing]));
        assert_eq!(answer.nodes[0].runtime_namespace, None);

        let body = parse_service_spec_body(&example("web-spec.json")).expect("a spec");
        let answer: SpecAnswer<Revised<Value, Value>> =
            read_back(&answers::spec(&ServiceRuntimeSpec { body, revision: 2 }));
        assert_eq!(answer.spec.revision, 2);

        let answer: DesignationAnswer<Value> = read_back(&answers::designation(None));
        assert_eq!(answer.designation, Value::Null);

        let claim = ClaimListing {
            claim: Sorted(json!({ "id": "claim-1", "generation": 2 })),
            faults: ClaimFaults { count: 1, last: Some(ClaimFault { at: 5, fault: "node-refused" }) },
            issued_at: 3,
            node: Some(ClaimNodeAnswer { answered_at: 6, generation: 2, state: "ready", status: "accepted" }),
            resolution: Some(ClaimResolution { at: 7, decision: "purge" }),
        };
        let answer: ClaimsAnswer<Vec<ClaimListingRead>> =
            read_back(&answers::written(&ClaimsAnswer { claims: [&claim] }));
        assert_eq!(answer.claims[0].claim["id"], "claim-1");
        let answer: ClaimAnswer<ClaimListingRead> = read_back(&answers::written(&ClaimAnswer { claim: &claim }));
        assert_eq!(answer.claim.resolution["decision"], "purge");

        let key = ed25519_dalek::SigningKey::from_bytes(&[7; 32]).verifying_key();
        let keys = [ControllerSigningKey { public_key: key, active_since: 1, retired_at: Some(8) }];
        let answer: SigningKeysAnswer<Vec<PublishedKey<String, Value, Value>>> =
            read_back(&answers::signing_keys(&keys));
        assert_eq!((answer.keys[0].algorithm.as_str(), &answer.keys[0].retired_at), ("ed25519", &json!(8)));

        let projection = NodeProjection { projection: None, applied: Some(reference()) };
        let answer: NodeProjectionAnswer<Value, Value> = read_back(&answers::node_projection(&projection));
        assert_eq!((&answer.applied["generation"], &answer.projection), (&json!(2), &Value::Null));

        let issued = RelayCredentialIssued {
            relay: ClusterRelay {
                cluster_id: id("c1"),
                relay_id: id("relay-a"),
                origin: "https://relay.example".to_owned(),
            },
            bearer: Bearer::from_presented("relay-secret"),
        };
        let answer: RelayCredentialAnswer<String> = read_back(&answers::relay_credential(&issued));
        assert_eq!((answer.bearer.as_str(), answer.relay.relay_id.as_str()), ("relay-secret", "relay-a"));

        let connected =
            RelayConnected { connection: connection(), token: Bearer::from_presented("token"), lease_ms: 30_000 };
        let answer: RelayConnectedAnswer<RelayConnection<String, u64>, String, u64> =
            read_back(&answers::relay_connected(&connected));
        assert_eq!((answer.token.as_str(), answer.lease_ms, answer.connection.epoch), ("token", 30_000, 3));

        let heartbeat = relays::RelayHeartbeatAnswer { connection: connection(), lease_ms: 30_000 };
        let answer: RelayHeartbeatAnswer<RelayConnection<String, u64>, u64> =
            read_back(&answers::relay_heartbeat(&heartbeat));
        assert_eq!(answer.connection.id, "conn-1");

        let session = json!({
            "clusterId": "c1", "controller": { "id": "ctl", "kind": "cloudly" }, "generation": 2, "id": "s1",
            "nodeId": "node-1", "runtimeNamespace": "ns-main",
        });
        let read = RuntimeSessionReference::read(&session).expect("a session");
        let answer: SessionAnswer<Value> = read_back(&answers::session(&read));
        assert_eq!(answer.session, session);
        let answer: AssignmentsAnswer<Vec<Value>> = read_back(&answers::assignments(&[]));
        assert!(answer.assignments.is_empty());
        let values = [("SERVEZONE_CLUSTER_INGRESS_BEARER".to_owned(), Bearer::from_presented("ingress-secret"))];
        let answer: SecretValuesAnswer<Vec<Value>> = read_back(&answers::secret_values(&values));
        assert_eq!(answer.values[0]["value"], "ingress-secret");
        let answer: ProjectionAnswer<Value> = read_back(&answers::projection(None));
        assert_eq!(answer.projection, Value::Null);
        let answer: StatusesAnswer<Vec<Value>> = read_back(&answers::statuses(&[]));
        assert!(answer.statuses.is_empty());
    }
}
