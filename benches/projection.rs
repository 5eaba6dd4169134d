//! The projection issuer's own work (`05-projection.md`, "Issuing"; issue 11 item 7):
//!
//! * (a) issuing the maximal projection through the issuer's builder: 4 096 endpoints, 1 024
//!   grants and 4 096 retained withdrawals — built from typed records by `next_projection`
//!   (canonicalized, digested, admitted against the previous generation), signed, and written as
//!   the canonical text the store inserts. Target: under 50 ms on one core.
//! * (b) one route change on a 1 000-node cluster: every node's inputs worked out and compared with
//!   the digest its head was built from (the pass the issuer runs on every trigger), then only
//!   the affected nodes rebuilt, admitted and signed. Target: under 1 s, and exactly the affected
//!   nodes (the ingress's node and the route target's node) rebuilt.
//!
//! Both run the issuer's pure code in-process; the store's statements (one read of the facts, one
//! locked re-read, one insert per issued generation) are not part of these figures.
//! Run with `cargo bench --bench projection` (add `-- --quick` for a short run).

use cloudly::contract::designation::snapshot_cluster_ingress_designation;
use cloudly::contract::inventory::NodeSpec;
use cloudly::contract::network::address_plan::{
    seal_runtime_network_address_plan, snapshot_runtime_network_address_plan,
};
use cloudly::contract::network::authority::compose_runtime_network_protected_authority;
use cloudly::contract::network::lease::RuntimeNetworkLease;
use cloudly::contract::network::projection::ProtectedAuthorityReference;
use cloudly::contract::network::workload_ingress::WorkloadIngressGrant;
use cloudly::contract::signing::sign;
use cloudly::contract::{AuthorityReference, Id, NodeId, Protocol, Sha256Digest};
use cloudly::domain::projections::testing::{authority, controller, lease};
use cloudly::domain::projections::{NodeInputs, affected_nodes, next_projection};
use cloudly::store::StoredNetworkPlan;
use cloudly::store::projections::{ProjectionFacts, ProjectionHead, StoredProjection};
use cloudly::store::relays::IngressRoute;
use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use ed25519_dalek::SigningKey;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::hint::black_box;
use std::time::Instant;

/// The binary's allocator (`src/main.rs`), so the domain runs here as it runs in the server.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const NODES: u32 = 1000;

fn id(text: &str) -> Id {
    Id::parse(text).expect("a bench id")
}

/// The maximal inputs of one node: 4 096 endpoint leases, 1 024 grants on `port`.
fn maximal_inputs(endpoints: &[RuntimeNetworkLease], port: u16) -> NodeInputs {
    let authorization = AuthorityReference { id: id("d1"), generation: 1, digest: Sha256Digest::from_bytes(&[7; 32]) };
    let mut grants: Vec<WorkloadIngressGrant> = endpoints[1..=1024]
        .iter()
        .map(|target| WorkloadIngressGrant {
            source: endpoints[0].reference(),
            destination: target.reference(),
            protocol: Protocol::Tcp,
            port,
            authorization: authorization.clone(),
        })
        .collect();
    grants.sort_by(WorkloadIngressGrant::order_cmp);
    NodeInputs {
        node_id: NodeId::parse("node-1").unwrap(),
        runtime_namespace: id("ns-main"),
        endpoints: endpoints.to_vec(),
        grants,
        host_platform_endpoint_ids: Vec::new(),
    }
}

/// A head of generation 4 on `node-1` that retains 3 072 withdrawals (three earlier ports,
/// never applied), whose next generation moves the grants once more: 4 096 withdrawals.
fn maximal_head(endpoints: &[RuntimeNetworkLease], signing: &SigningKey) -> StoredProjection {
    let mut previous: Option<StoredProjection> = None;
    for port in 1000..1004 {
        let next = next_projection(
            &maximal_inputs(endpoints, port),
            &authority(),
            &id("c1"),
            &controller(),
            previous.as_ref(),
        )
        .expect("admitted")
        .expect("new content");
        previous = Some(StoredProjection { signed: sign(signing, next), applied: None });
    }
    previous.expect("a head")
}

fn plan() -> StoredNetworkPlan {
    let plan = json!({
        "clusterId": "c1", "revision": 1, "prefixes": ["10.64.0.0/16", "192.0.2.16/28"],
        "pools": [{ "id": "pool-org", "organizationId": "org", "prefix": "10.64.0.0/20" }],
        "vpn": { "prefix": "192.0.2.0/28", "hubPrefix": "192.0.2.0/28" },
        "hubs": [{ "id": "hub-a", "address": "192.0.2.1", "port": 51820 }],
        "platformEndpoints": [{ "id": "corestore", "address": "192.0.2.17", "protocol": "tcp", "port": 9000 }],
    });
    let plan = snapshot_runtime_network_address_plan(&seal_runtime_network_address_plan(&plan).unwrap()).unwrap();
    let authority = compose_runtime_network_protected_authority(&id("c1"), None, &plan).unwrap();
    StoredNetworkPlan { plan, authority }
}

/// A designation of service `ingress` read from the vectors, renamed onto cluster `c1`'s
/// ingress service (the issuer reads only its reference and `ingressServiceId`).
fn designation() -> cloudly::contract::designation::ClusterIngressDesignation {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/vectors/cluster-ingress-designation.json");
    let vectors: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let mut designation = snapshot_cluster_ingress_designation(&vectors["valid"][0]["record"]).unwrap();
    designation.ingress_service_id = id("ingress");
    designation
}

/// 1 000 nodes, one `web-NNNN` service with one lease on each, the ingress on `node-0000`, routes
/// to `web-0001`..`web-0100`, and every node's head issued from these facts.
fn cluster(signing: &SigningKey) -> (ProjectionFacts, BTreeMap<NodeId, StoredProjection>) {
    let mut leases = vec![lease(0, "ingress", "node-0000")];
    let mut nodes = Vec::new();
    for index in 0..NODES {
        let node = format!("node-{index:04}");
        nodes.push(NodeSpec {
            id: NodeId::parse(&node).unwrap(),
            runtime_namespace: id("ns-main"),
            host_addresses: Vec::new(),
        });
        leases.push(lease(index + 1, &format!("web-{index:04}"), &node));
    }
    leases.sort_by(|left, right| left.id.as_str().cmp(right.id.as_str()));
    let routes = (1..=100)
        .map(|index| IngressRoute {
            hostname: format!("app-{index:04}.example.net"),
            service_id: id(&format!("web-{index:04}")),
            protocol: Protocol::Tcp,
            port: 443,
        })
        .collect();
    let mut facts = ProjectionFacts {
        plan: Some(plan()),
        nodes,
        leases: std::sync::Arc::new(leases.into_iter().map(std::sync::Arc::new).collect()),
        routes,
        designation: Some(designation()),
        heads: Vec::new(),
    };
    let authority = ProtectedAuthorityReference::of(&facts.plan.as_ref().unwrap().authority);
    let mut issued = BTreeMap::new();
    for inputs in affected_nodes(&facts, &controller()) {
        let next = next_projection(&inputs, &authority, &id("c1"), &controller(), None).unwrap().unwrap();
        facts.heads.push(ProjectionHead {
            node_id: inputs.node_id.clone(),
            reference: next.reference(),
            inputs: inputs.digest(&authority, &controller()),
            retains: false,
            applied: None,
            granted: Default::default(),
        });
        issued.insert(inputs.node_id.clone(), StoredProjection { signed: sign(signing, next), applied: None });
    }
    (facts, issued)
}

fn projection(c: &mut Criterion) {
    let signing = SigningKey::from_bytes(&[5; 32]);
    let mut endpoints: Vec<RuntimeNetworkLease> = (0..4096).map(|index| lease(index, "web", "node-1")).collect();
    endpoints.sort_by(|left, right| left.id.as_str().cmp(right.id.as_str()));
    let head = maximal_head(&endpoints, &signing);
    let inputs = maximal_inputs(&endpoints, 1004);
    let issue = || {
        let next = next_projection(&inputs, &authority(), &id("c1"), &controller(), Some(&head))
            .expect("admitted")
            .expect("new content");
        assert_eq!(next.withdrawals().len(), 4096);
        let signed = sign(&signing, next);
        signed.payload.canonical_without_endpoints()
    };
    let started = Instant::now();
    let text = issue();
    println!("(a) maximal projection issued in {:?} ({} bytes of record stored)", started.elapsed(), text.len());
    c.bench_function("(a) issue the maximal projection: build, admit, sign, stored record", |b| {
        b.iter(|| black_box(issue()))
    });

    let (mut after, heads) = cluster(&signing);
    after.routes.push(IngressRoute {
        hostname: "app-0500.example.net".to_owned(),
        service_id: id("web-0500"),
        protocol: Protocol::Tcp,
        port: 443,
    });
    let authority_reference = ProtectedAuthorityReference::of(&after.plan.as_ref().unwrap().authority);
    let recompute = |facts: &ProjectionFacts| {
        let affected = affected_nodes(facts, &controller());
        let issued: Vec<_> = affected
            .iter()
            .map(|inputs| {
                let next =
                    next_projection(inputs, &authority_reference, &id("c1"), &controller(), heads.get(&inputs.node_id))
                        .expect("admitted")
                        .expect("new content");
                sign(&signing, next)
            })
            .collect();
        (affected.len(), issued)
    };
    let started = Instant::now();
    let (affected, _) = recompute(&after);
    println!("(b) one route change on {NODES} nodes: {affected} nodes rebuilt in {:?}", started.elapsed());
    assert_eq!(affected, 2, "the ingress's node and the new target's node");
    c.bench_function("(b) one route change on a 1 000-node cluster: find and rebuild the affected nodes", |b| {
        b.iter_batched(|| after.clone(), |facts| black_box(recompute(&facts)), BatchSize::LargeInput)
    });
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20);
    targets = projection
}
criterion_main!(benches);
