//! Contract scale target (`05-projection.md`): a projection with 4 096 endpoints, 1 024 workload
//! ingress grants and 4 096 withdrawals is
//!
//! * (a) issued from typed records — canonicalized, digested, admitted against a valid previous
//!   generation, signed — in under 50 ms, and
//! * (b) validated from JSON text within 10× of (c), SHA-256 alone over its canonical bytes.
//!
//! Run with `cargo bench --bench contract` (add `-- --quick` for a short run).

use cloudly::contract::json::parse_record_text;
use cloudly::contract::network::authority::PlatformEndpoint;
use cloudly::contract::network::lease::{LeaseIpv4, RuntimeNetworkLease};
use cloudly::contract::network::projection::{
    ControllerKind, ProjectionController, ProjectionEndpoint, ProtectedAuthorityReference, RuntimeNetworkProjection,
    admit_projection, validate_runtime_network_projection,
};
use cloudly::contract::network::text::{
    snapshot_runtime_network_projection_text, validate_runtime_network_projection_text,
};
use cloudly::contract::network::workload_ingress::{
    PacketGrant, PacketGrantDestination, WorkloadIngressGrant, WorkloadIngressProjection,
};
use cloudly::contract::signing::sign;
use cloudly::contract::{AuthorityReference, DigestedRecord, Id, Ipv4, Ipv4Prefix, NodeId, Protocol, Sha256Digest};
use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use ed25519_dalek::SigningKey;
use sha2::{Digest as _, Sha256};
use std::hint::black_box;
use std::time::Instant;

const ENDPOINTS: u32 = 4096;
const GRANTS: u32 = 1024;
const WITHDRAWALS: usize = 4096;

fn id(text: &str) -> Id {
    Id::parse(text).expect("a bench id")
}

fn placeholder() -> Sha256Digest {
    Sha256Digest::from_bytes(&[0; 32])
}

/// Lease 0 is the cluster ingress workload on `node-1`; leases 1..=1 024 are the targets of its
/// routes, spread over `node-2`..`node-9`; the rest are assignments on `node-1`.
fn leases() -> Vec<RuntimeNetworkLease> {
    (0..ENDPOINTS)
        .map(|index| {
            let node =
                if (1..=GRANTS).contains(&index) { format!("node-{}", 2 + index % 8) } else { "node-1".to_owned() };
            let subnet = Ipv4Prefix::new(Ipv4::from_u32(0x0a40_0000 + index * 4), 30).expect("a /30");
            RuntimeNetworkLease {
                id: id(&format!("lease-{index:05}")),
                generation: 1,
                previous: None,
                organization_id: id(&format!("org-{:03}", index % 97)),
                cluster_id: id("cluster-a"),
                service_id: id(&format!("service-{:04}", index % 1500)),
                node_id: NodeId::parse(&node).expect("a node id"),
                assignment_id: id(&format!("assignment-{index:05}-r1")),
                ipv4: LeaseIpv4::for_link_subnet(subnet).expect("a /30"),
                digest: placeholder(),
            }
            .with_computed_digest()
        })
        .collect()
}

fn grants(leases: &[RuntimeNetworkLease], port: u16, authorization: &AuthorityReference) -> Vec<WorkloadIngressGrant> {
    (1..=GRANTS as usize)
        .map(|index| WorkloadIngressGrant {
            source: leases[0].reference(),
            destination: leases[index].reference(),
            protocol: Protocol::Tcp,
            port,
            authorization: authorization.clone(),
        })
        .collect()
}

/// Generation 2 (routes on port 8080, 3 072 retained withdrawals of three older ports) and
/// generation 3 (the routes moved to port 9090: the 1 024 old grants join the withdrawals,
/// 4 096 in all), which is admissible against generation 2 before its application.
fn previous_and_next() -> (RuntimeNetworkProjection, RuntimeNetworkProjection) {
    let leases = leases();
    let authorization =
        AuthorityReference { id: id("designation-a"), generation: 3, digest: Sha256Digest::from_bytes(&[0x1a; 32]) };
    let older: Vec<PacketGrant> = (0..WITHDRAWALS - GRANTS as usize)
        .map(|index| PacketGrant {
            source: leases[0].reference(),
            destination: PacketGrantDestination {
                lease: leases[1 + index % GRANTS as usize].reference(),
                protocol: Protocol::Tcp,
                port: 7000 + (index / GRANTS as usize) as u16,
            },
        })
        .collect();
    let sorted = |mut withdrawals: Vec<PacketGrant>| {
        withdrawals.sort_by(PacketGrant::canonical_cmp);
        withdrawals
    };
    let endpoint = |address: &str, name: &str, protocol, port| PlatformEndpoint {
        id: id(name),
        address: Ipv4::parse(address).expect("an address"),
        protocol,
        port,
    };
    let previous_grants = grants(&leases, 8080, &authorization);
    let previous = RuntimeNetworkProjection {
        id: id("projection-node-1"),
        generation: 2,
        previous: Some(AuthorityReference {
            id: id("projection-node-1"),
            generation: 1,
            digest: Sha256Digest::from_bytes(&[0x11; 32]),
        }),
        controller: ProjectionController { kind: ControllerKind::Cloudly, id: id("ctl-1") },
        cluster_id: id("cluster-a"),
        node_id: NodeId::parse("node-1").expect("a node id"),
        runtime_namespace: id("ns-main"),
        protected_authority: ProtectedAuthorityReference {
            id: id("authority-a"),
            generation: 1,
            digest: Sha256Digest::from_bytes(&[0x1f; 32]),
            platform_endpoints: vec![
                endpoint("192.0.2.17", "corestore", Protocol::Tcp, 9000),
                endpoint("192.0.2.1", "hub-a", Protocol::Udp, 51820),
                endpoint("192.0.2.17", "relay-listener", Protocol::Tcp, 8443),
            ],
        },
        endpoints: leases.iter().cloned().map(|lease| ProjectionEndpoint { lease }).collect(),
        retired_leases: Vec::new(),
        workload_ingress: Some(WorkloadIngressProjection {
            grants: previous_grants.clone(),
            withdrawals: sorted(older.clone()),
        }),
        host_platform_endpoint_ids: Some(vec![id("corestore"), id("relay-listener")]),
        digest: placeholder(),
    }
    .with_computed_digest();
    let mut next = previous.clone();
    next.generation = 3;
    next.previous = Some(previous.reference());
    next.workload_ingress = Some(WorkloadIngressProjection {
        grants: grants(&leases, 9090, &authorization),
        withdrawals: sorted(
            older.into_iter().chain(previous_grants.iter().map(WorkloadIngressGrant::packet_grant)).collect(),
        ),
    });
    next.digest = placeholder();
    (previous, next)
}

fn contract(c: &mut Criterion) {
    let (previous, next_template) = previous_and_next();
    let key = SigningKey::from_bytes(&[7; 32]);
    let next = next_template.clone().with_computed_digest();
    assert_eq!(next.withdrawals().len(), WITHDRAWALS);
    admit_projection(Some(&previous), &next, None).expect("the bench projection is admissible");
    let canonical = next.canonical_without_digest();
    let text = String::from_utf8(canonical.clone()).expect("canonical bytes are UTF-8");
    let text = format!("{}{}", &text[..text.len() - 1], format_args!(",\"digest\":\"{}\"}}", next.digest));
    let reread = parse_record_text(&text).expect("the record text");
    assert_eq!(validate_runtime_network_projection(&reread).as_ref(), Ok(&next));
    eprintln!(
        "projection: {} endpoints, {} grants, {} withdrawals, {} canonical bytes ({} with digest), JSON text {} bytes",
        next.endpoints.len(),
        next.packet_grants().len(),
        next.withdrawals().len(),
        canonical.len(),
        next.canonical_len(),
        text.len()
    );

    // A quick ratio before criterion's runs: the fastest of 30 runs of each, the run least
    // disturbed by other work on a busy machine.
    let fastest = |run: &mut dyn FnMut()| {
        (0..30)
            .map(|_| {
                let started = Instant::now();
                run();
                started.elapsed()
            })
            .min()
            .expect("at least one run")
    };
    let validate = fastest(&mut || drop(validate_runtime_network_projection_text(black_box(&text))));
    let hash = fastest(&mut || {
        black_box(Sha256::digest(black_box(&canonical)));
    });
    eprintln!(
        "fastest of 30: (b) text validation {validate:?}, (c) SHA-256 {hash:?}: (b) = {:.1} × (c) (target ≤ 10)",
        validate.as_secs_f64() / hash.as_secs_f64()
    );

    c.bench_function("(a) issue: digest + admit + sign (typed)", |bench| {
        bench.iter_batched(
            || next_template.clone(),
            |mut next| {
                next.digest = next.compute_digest();
                admit_projection(Some(&previous), &next, None).expect("admissible");
                sign(&key, next)
            },
            BatchSize::LargeInput,
        )
    });
    c.bench_function("admit only (typed, both generations validated)", |bench| {
        bench.iter(|| admit_projection(Some(&previous), black_box(&next), None).expect("admissible"))
    });
    c.bench_function("(b) validate from JSON text (text reader)", |bench| {
        bench.iter(|| validate_runtime_network_projection_text(black_box(&text)).expect("valid"))
    });
    c.bench_function("snapshot from JSON text (text reader)", |bench| {
        bench.iter(|| snapshot_runtime_network_projection_text(black_box(&text)).expect("valid"))
    });
    c.bench_function("validate typed (whole-projection rules + digest)", |bench| {
        bench.iter(|| black_box(&next).validate().expect("valid"))
    });
    c.bench_function("canonical bytes (typed)", |bench| bench.iter(|| black_box(&next).canonical_without_digest()));
    c.bench_function("(b, Value path) parse_record_text + validate_runtime_network_projection", |bench| {
        bench.iter(|| {
            let value = parse_record_text(black_box(&text)).expect("the record text");
            validate_runtime_network_projection(&value).expect("valid")
        })
    });
    c.bench_function("parse JSON text only", |bench| {
        bench.iter(|| parse_record_text(black_box(&text)).expect("the record text"))
    });
    c.bench_function("serde_json::from_str::<Value> (reference)", |bench| {
        bench.iter(|| serde_json::from_str::<serde_json::Value>(black_box(&text)).expect("JSON"))
    });
    c.bench_function("(c) sha256 over the canonical bytes", |bench| {
        bench.iter(|| Sha256::digest(black_box(&canonical)))
    });
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20);
    targets = contract
}
criterion_main!(benches);
