//! Runtime network address plans over the wire, on PostgreSQL and on SQLite
//! (`05-projection.md`, "Address plan"): the seed's example plan accepted and read back with its
//! protected authority, every validation refusal changing nothing, the compare-and-swap on the
//! plan's revision (also between racing writers), the authority's generations following its
//! endpoints, the admission refusing a change that would strand a live lease, and the CLI.

#[macro_use]
mod support;

use cloudly::contract::Id;
use cloudly::contract::network::address_plan::validate_runtime_network_address_plan;
use cloudly::contract::network::authority::validate_runtime_network_protected_authority;
use cloudly::domain::identity::Role;
use serde_json::{Value, json};
use support::service::{Backend, TestService};

/// The seed's example plan of cluster `c1` at `revision` (`support::service::seed_plan`).
fn seed_plan(revision: u64) -> Value {
    support::service::seed_plan("c1", revision)
}

/// `seed_plan(revision)` with `edit` applied.
fn edited(revision: u64, edit: impl FnOnce(&mut Value)) -> Value {
    let mut plan = seed_plan(revision);
    edit(&mut plan);
    plan
}

fn reference_of(record: &Value) -> Value {
    json!({ "id": record["id"], "generation": record["generation"], "digest": record["digest"] })
}

/// A service with organization `org`'s cluster `c1`, nodes `node-1` and `node-2`, and service
/// `web` (two replicas, one per node).
async fn seeded(backend: Backend) -> TestService {
    let service = TestService::start(backend).await;
    service.seed_cluster("c1", "web").await;
    service
}

async fn put(service: &TestService, plan: Value) -> Result<Value, cloudly::client::TypedError> {
    service.call_as(&service.admin(), "putRuntimeNetworkAddressPlan", json!({ "plan": plan })).await
}

async fn get(service: &TestService) -> Value {
    service.admin_call("getRuntimeNetworkAddressPlan", json!({ "clusterId": "c1" })).await
}

on_both_stores!(the_seed_example_plan_is_accepted_and_read_back_by_every_role, |backend| async move {
    let service = seeded(backend).await;
    assert_eq!(get(&service).await, json!({ "plan": null, "protectedAuthority": null }));

    let answer = put(&service, seed_plan(1)).await.unwrap_or_else(|error| panic!("{} {}", error.text, error.data));
    let plan = &answer["plan"];
    let mut sent = seed_plan(1);
    sent["digest"] = plan["digest"].clone();
    assert_eq!(plan, &sent, "the plan as sent, with the digest the controller computed");
    assert_eq!(validate_runtime_network_address_plan(plan), Vec::<String>::new());
    let authority = &answer["protectedAuthority"];
    assert_eq!(validate_runtime_network_protected_authority(authority), Vec::<String>::new());
    assert_eq!(
        (&authority["id"], &authority["generation"], &authority["previous"]),
        (&json!("c1"), &json!(1), &json!(null))
    );
    assert_eq!(
        authority["platformEndpoints"],
        json!([
            { "id": "corestore", "address": "192.0.2.17", "protocol": "tcp", "port": 9000 },
            { "id": "hub-a", "address": "192.0.2.1", "protocol": "udp", "port": 51820 },
            { "id": "relay-listener", "address": "192.0.2.17", "protocol": "tcp", "port": 8443 },
        ]),
        "the plan's endpoints and one udp endpoint per hub, sorted by id"
    );

    for role in [Role::Admin, Role::Operator, Role::Viewer] {
        let identity = serde_json::to_value(service.identity("reader", role)).unwrap();
        let read = service.call_as(&identity, "getRuntimeNetworkAddressPlan", json!({ "clusterId": "c1" })).await;
        assert_eq!(read.unwrap(), answer, "{role:?}");
    }
    for role in [Role::Operator, Role::Viewer] {
        let identity = serde_json::to_value(service.identity("writer", role)).unwrap();
        let refused = service
            .call_as(&identity, "putRuntimeNetworkAddressPlan", json!({ "plan": seed_plan(2) }))
            .await
            .unwrap_err();
        assert_eq!(refused.code(), "identity-forbidden", "{role:?}");
    }
    let unknown = service
        .call_as(&service.admin(), "getRuntimeNetworkAddressPlan", json!({ "clusterId": "c9" }))
        .await
        .unwrap_err();
    assert_eq!(unknown.data, json!({ "code": "not-found", "what": "cluster" }));
    let unknown = put(&service, edited(1, |plan| plan["clusterId"] = json!("c9"))).await.unwrap_err();
    assert_eq!(unknown.data, json!({ "code": "not-found", "what": "cluster" }));
    assert_eq!(get(&service).await, answer);
    service.stop().await;
});

on_both_stores!(every_validation_refusal_changes_nothing, |backend| async move {
    let service = seeded(backend).await;
    let stored = put(&service, seed_plan(1)).await.unwrap();
    let leases = service.store.live_leases(&Id::parse("c1").unwrap()).await.unwrap();
    let endpoints = |count: u16| -> Value {
        (0..count)
            .map(|index| json!({ "id": format!("e{index:02}"), "address": "192.0.2.17", "protocol": "udp", "port": index + 1 }))
            .collect()
    };
    let cases: Vec<(&str, Value, Vec<&str>)> = vec![
        (
            "an endpoint outside prefixes",
            edited(2, |plan| plan["platformEndpoints"][0]["address"] = json!("10.99.0.1")),
            vec!["every platform endpoint address must lie inside prefixes"],
        ),
        (
            "an endpoint inside a pool",
            edited(2, |plan| plan["platformEndpoints"][0]["address"] = json!("10.64.0.9")),
            vec!["no platform endpoint address may lie inside a pool"],
        ),
        (
            "an endpoint inside the VPN prefix",
            edited(2, |plan| {
                plan["prefixes"] = json!(["10.64.0.0/16", "192.0.2.0/24"]);
                plan["vpn"] = json!({ "prefix": "192.0.2.0/27", "hubPrefix": "192.0.2.0/28" });
                plan["platformEndpoints"][0]["address"] = json!("192.0.2.20");
            }),
            vec!["no platform endpoint address may lie inside the VPN prefixes"],
        ),
        (
            "an endpoint inside the hub prefix",
            edited(2, |plan| {
                plan["prefixes"] = json!(["10.64.0.0/16", "192.0.2.0/24"]);
                plan["platformEndpoints"][0]["address"] = json!("192.0.2.2");
            }),
            vec!["no platform endpoint address may lie inside the VPN prefixes"],
        ),
        (
            "two endpoints on one address:port:protocol",
            edited(2, |plan| plan["platformEndpoints"][1]["port"] = json!(9000)),
            vec!["each platform endpoint address:port:protocol must be unique"],
        ),
        (
            "a hub outside hubPrefix",
            edited(2, |plan| plan["hubs"][0]["address"] = json!("192.0.2.33")),
            vec!["every hub address must lie inside vpn.hubPrefix"],
        ),
        (
            "65 places: 64 endpoints and a hub",
            edited(2, |plan| plan["platformEndpoints"] = endpoints(64)),
            vec!["hubs and platformEndpoints must hold at most 64 entries together"],
        ),
        (
            "overlapping pools",
            edited(2, |plan| {
                plan["pools"] = json!([
                    { "id": "pool-a", "organizationId": "org", "prefix": "10.64.0.0/20" },
                    { "id": "pool-b", "organizationId": "org-b", "prefix": "10.64.8.0/21" },
                ]);
            }),
            vec!["pools must not overlap"],
        ),
        (
            "endpoints out of order",
            edited(2, |plan| {
                let endpoints = plan["platformEndpoints"].as_array_mut().unwrap();
                endpoints.reverse();
            }),
            vec!["platformEndpoints must be sorted by id"],
        ),
        (
            "several failures at once",
            edited(2, |plan| {
                plan["revision"] = json!(0);
                plan["hubs"][0]["address"] = json!("192.0.2.33");
                plan["platformEndpoints"][1]["port"] = json!(9000);
            }),
            vec![
                "revision must be a generation (an integer ≥ 1)",
                "every hub address must lie inside vpn.hubPrefix",
                "each platform endpoint address:port:protocol must be unique",
            ],
        ),
        (
            "a digest",
            edited(2, |plan| plan["digest"] = stored["plan"]["digest"].clone()),
            vec!["request plan has an unknown member \"digest\""],
        ),
        (
            "a missing member",
            edited(2, |plan| {
                plan.as_object_mut().unwrap().remove("vpn");
            }),
            vec!["request plan vpn is required"],
        ),
        ("not an object", json!([]), vec!["request plan must be an object"]),
    ];
    for (case, plan, violations) in cases {
        let refused = put(&service, plan).await.unwrap_err();
        assert_eq!(refused.code(), "request-invalid", "{case}: {}", refused.data);
        assert_eq!(refused.data["violations"], json!(violations), "{case}");
        assert_eq!(get(&service).await, stored, "{case}: nothing changed");
        assert_eq!(service.store.live_leases(&Id::parse("c1").unwrap()).await.unwrap(), leases, "{case}");
    }
    // At the limits: 63 endpoints and a hub fill the 64 places; one address serves several
    // endpoints on distinct ports, and one port under both protocols.
    let full = edited(2, |plan| plan["platformEndpoints"] = endpoints(63));
    let answer = put(&service, full).await.unwrap_or_else(|error| panic!("{} {}", error.text, error.data));
    assert_eq!(answer["protectedAuthority"]["platformEndpoints"].as_array().unwrap().len(), 64);
    let shared = edited(3, |plan| {
        plan["platformEndpoints"][1] =
            json!({ "id": "relay-listener", "address": "192.0.2.17", "protocol": "udp", "port": 9000 })
    });
    put(&service, shared).await.unwrap_or_else(|error| panic!("{} {}", error.text, error.data));
    service.stop().await;
});

on_both_stores!(revisions_are_a_compare_and_swap, |backend| async move {
    let service = seeded(backend).await;
    let conflict = put(&service, seed_plan(2)).await.unwrap_err();
    assert_eq!(conflict.data, json!({ "code": "revision-conflict", "current": null }), "no plan yet");
    let first = put(&service, seed_plan(1)).await.unwrap();
    for revision in [1, 3] {
        let conflict = put(&service, seed_plan(revision)).await.unwrap_err();
        assert_eq!(conflict.data, json!({ "code": "revision-conflict", "current": 1 }), "revision {revision}");
    }
    assert_eq!(get(&service).await, first);

    // Racing writers of revision 2: exactly one is accepted, the others are told the winner's.
    let writers: Vec<_> = (0..4u16)
        .map(|index| {
            let plan = edited(2, |plan| plan["platformEndpoints"][0]["port"] = json!(9100 + index));
            put(&service, plan)
        })
        .collect();
    let answers = futures_util::future::join_all(writers).await;
    let accepted: Vec<&Value> = answers.iter().filter_map(|answer| answer.as_ref().ok()).collect();
    assert_eq!(accepted.len(), 1, "exactly one racing revision 2 is accepted");
    for refused in answers.iter().filter_map(|answer| answer.as_ref().err()) {
        assert_eq!(refused.data, json!({ "code": "revision-conflict", "current": 2 }));
    }
    assert_eq!(&get(&service).await, accepted[0]);
    service.stop().await;
});

on_both_stores!(the_authority_gets_a_generation_only_when_its_endpoints_change, |backend| async move {
    let service = seeded(backend).await;
    let first = put(&service, seed_plan(1)).await.unwrap()["protectedAuthority"].clone();
    // A pool grown: the same authority.
    let grown = put(&service, edited(2, |plan| plan["pools"][0]["prefix"] = json!("10.64.0.0/19"))).await.unwrap();
    assert_eq!(grown["protectedAuthority"], first);
    assert_eq!(grown["plan"]["revision"], json!(2));
    // An endpoint's port: the next generation, linking the first.
    let moved = put(
        &service,
        edited(3, |plan| {
            plan["pools"][0]["prefix"] = json!("10.64.0.0/19");
            plan["platformEndpoints"][0]["port"] = json!(9001);
        }),
    )
    .await
    .unwrap()["protectedAuthority"]
        .clone();
    assert_eq!(moved["generation"], json!(2));
    assert_eq!(moved["previous"], reference_of(&first));
    assert_eq!(moved["platformEndpoints"][0]["port"], json!(9001));
    assert_eq!(validate_runtime_network_protected_authority(&moved), Vec::<String>::new());
    // A hub added (hubs may be added; those there stay): one more generation.
    let hub = put(
        &service,
        edited(4, |plan| {
            plan["pools"][0]["prefix"] = json!("10.64.0.0/19");
            plan["platformEndpoints"][0]["port"] = json!(9001);
            plan["hubs"] = json!([
                { "id": "hub-a", "address": "192.0.2.1", "port": 51820 },
                { "id": "hub-b", "address": "192.0.2.2", "port": 51820 },
            ]);
        }),
    )
    .await
    .unwrap();
    assert_eq!(hub["protectedAuthority"]["generation"], json!(3));
    assert_eq!(hub["protectedAuthority"]["previous"], reference_of(&moved));
    assert_eq!(get(&service).await, hub);
    service.stop().await;
});

on_both_stores!(a_change_that_strands_a_live_lease_is_refused_and_changes_nothing, |backend| async move {
    let service = seeded(backend).await;
    let cluster = Id::parse("c1").unwrap();
    let stored = put(&service, seed_plan(1)).await.unwrap();
    let leases = service.store.live_leases(&cluster).await.unwrap();
    assert_eq!(leases.len(), 2, "web's two assignments hold leases");
    let lease_names = leases
        .iter()
        .map(|lease| format!("{} ({})", lease.id, lease.ipv4.link_subnet()))
        .collect::<Vec<_>>()
        .join(", ");
    let stranded = format!("live leases would lie outside their organization's pool: {lease_names}");
    let cases: Vec<(&str, Value, Vec<String>)> = vec![
        (
            "the pool removed",
            edited(2, |plan| plan["pools"] = json!([])),
            vec!["a pool of the previous revision is missing".to_owned(), stranded.clone()],
        ),
        (
            "the pool shrunk away from the leases",
            edited(2, |plan| plan["pools"][0]["prefix"] = json!("10.64.8.0/21")),
            vec!["a pool of the previous revision must keep its prefix or grow around it".to_owned(), stranded.clone()],
        ),
        (
            "the pool given to another organization",
            edited(2, |plan| plan["pools"][0]["organizationId"] = json!("org-b")),
            vec!["a pool of the previous revision changed its organization".to_owned(), stranded],
        ),
        (
            "the VPN removed",
            edited(2, |plan| {
                plan["vpn"] = json!(null);
                plan["hubs"] = json!([]);
            }),
            vec![
                "a VPN once set must not change or be removed".to_owned(),
                "a hub of the previous revision is missing".to_owned(),
            ],
        ),
        (
            "a hub moved",
            edited(2, |plan| plan["hubs"][0]["port"] = json!(51821)),
            vec!["a hub of the previous revision moved".to_owned()],
        ),
    ];
    for (case, plan, violations) in cases {
        let refused = put(&service, plan).await.unwrap_err();
        assert_eq!(refused.data, json!({ "code": "address-plan-change-refused", "violations": violations }), "{case}");
        assert_eq!(refused.text, "the address plan change is refused");
        assert_eq!(get(&service).await, stored, "{case}: nothing changed");
        assert_eq!(service.store.live_leases(&cluster).await.unwrap(), leases, "{case}: the leases stay");
    }
    // Endpoints change freely.
    put(&service, edited(2, |plan| plan["platformEndpoints"][1]["port"] = json!(8444))).await.unwrap();
    assert_eq!(service.store.live_leases(&cluster).await.unwrap(), leases);
    service.stop().await;
});

on_both_stores!(the_cli_writes_and_reads_the_example_plan, |backend| async move {
    let service = seeded(backend).await;
    let directory = std::env::temp_dir().join(format!("cloudly-network-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&directory).unwrap();
    let identity = directory.join("admin.json");
    std::fs::write(&identity, service.admin().to_string()).unwrap();
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/examples/network-plan.yaml");

    let written = service.cli(&identity, &["network", "plan", "put", "-f", example]).await;
    assert_eq!(written["plan"]["revision"], json!(1));
    assert_eq!(written["plan"]["hubs"], seed_plan(1)["hubs"]);
    assert_eq!(written["protectedAuthority"]["generation"], json!(1));
    assert_eq!(service.cli(&identity, &["network", "plan", "get", "--cluster", "c1"]).await, written);
    let again = service.cli(&identity, &["network", "plan", "put", "-f", example, "--expected-revision", "1"]).await;
    assert_eq!(again["plan"]["revision"], json!(2));
    assert_eq!(again["protectedAuthority"], written["protectedAuthority"]);

    // A file the contract refuses is not sent (exit 2); a refused write is exit 1.
    let run = |args: Vec<String>| {
        std::process::Command::new(env!("CARGO_BIN_EXE_cloudly"))
            .args(args)
            .env("CLOUDLY_URL", &service.base_url)
            .env("CLOUDLY_IDENTITY", &identity)
            .output()
            .unwrap()
    };
    let broken = directory.join("broken.yaml");
    let text = std::fs::read_to_string(example).unwrap().replace("port: 8443", "port: 9000");
    std::fs::write(&broken, text).unwrap();
    let output = run(vec!["network".into(), "plan".into(), "put".into(), "-f".into(), broken.display().to_string()]);
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("each platform endpoint address:port:protocol must be unique"), "{stderr}");
    assert!(stderr.contains("nothing was sent"), "{stderr}");
    let output = run(vec![
        "network".into(),
        "plan".into(),
        "put".into(),
        "-f".into(),
        example.into(),
        "--expected-revision".into(),
        "5".into(),
    ]);
    assert_eq!(output.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&output.stderr).contains("revision-conflict"));
    assert_eq!(get(&service).await, again);
    std::fs::remove_dir_all(directory).unwrap();
    service.stop().await;
});
