//! Retention (`domain::retention`): accepted registrations and superseded relay connections older
//! than their configured age are deleted in bounded batches; the newest registration of each node,
//! a cluster's newest relay connection and a connection a kept registration names are never
//! deleted. On PostgreSQL and on SQLite, through the real wire.

#[macro_use]
mod support;

use cloudly::api::methods::name;
use cloudly::api::wire;
use cloudly::domain::ControllerSettings;
use cloudly::domain::retention::{Pruned, RetentionSettings};
use std::sync::atomic::Ordering;
use support::ingress::{CLUSTER, IngressWorld, RELAY, connect_relay_with_bearer_at, relay_call};
use support::service::Backend;

const HOUR: u64 = 3_600_000;

async fn world(backend: Backend) -> IngressWorld {
    let retention =
        RetentionSettings { registration_age_ms: HOUR, relay_connection_age_ms: HOUR, batch: 2, ..Default::default() };
    IngressWorld::build_with(backend, ControllerSettings { retention, ..Default::default() }).await
}

async fn register_times(world: &IngressWorld, token: &str, count: usize) {
    for _ in 0..count {
        support::ingress::register(&world.service.client, world.registration(), Some(token))
            .await
            .unwrap_or_else(|error| panic!("registerClusterIngress: {} {}", error.text, error.data));
    }
}

async fn heartbeat_code(world: &IngressWorld, token: &str) -> String {
    match relay_call(
        &world.service.client,
        name::HEARTBEAT_CLUSTER_RELAY,
        wire::to_request(&wire::NoMembers {}),
        Some(token),
    )
    .await
    {
        Ok(_) => "ok".to_owned(),
        Err(error) => error.data["code"].as_str().unwrap_or("").to_owned(),
    }
}

on_both_stores!(old_registrations_and_superseded_connections_are_pruned_in_batches, |backend| async move {
    let world = world(backend).await;
    let clock = &world.service.clock.0;
    let first_token = world.token.clone();
    register_times(&world, &first_token, 3).await;
    clock.fetch_add(HOUR / 2, Ordering::SeqCst);
    let second_token = connect_relay_with_bearer_at(&world.service.client, CLUSTER, RELAY, &world.relay_bearer).await;
    register_times(&world, &second_token, 2).await;
    let newest = world.registrations().await[0].clone();

    // Nothing is old enough yet.
    let controller = world.service.controller();
    assert_eq!(controller.prune_retained().await.unwrap(), Pruned::default());

    clock.fetch_add(2 * HOUR, Ordering::SeqCst);
    // Two runs at once (as two controllers on one database): every old record is deleted once.
    let (left, right) = tokio::join!(controller.prune_retained(), controller.prune_retained());
    let (left, right) = (left.unwrap(), right.unwrap());
    assert_eq!(left.registrations + right.registrations, 4, "all but the newest of node-1");
    assert_eq!(left.relay_connections + right.relay_connections, 1, "the superseded, unnamed connection");
    assert_eq!(world.registrations().await, vec![newest]);
    // The pruned connection's token is now unknown; the newest connection is still recorded (its
    // lease ran out with the clock).
    assert_eq!(heartbeat_code(&world, &first_token).await, "principal-refused");
    assert_eq!(heartbeat_code(&world, &second_token).await, "relay-connection-lost");
    assert_eq!(controller.prune_retained().await.unwrap(), Pruned::default(), "a second run finds nothing");
    world.stop().await;
});

on_both_stores!(a_connection_a_kept_registration_names_is_kept, |backend| async move {
    let world = world(backend).await;
    let clock = &world.service.clock.0;
    let first_token = world.token.clone();
    register_times(&world, &first_token, 2).await;
    // A newer connection through which nothing registered.
    let second_token = connect_relay_with_bearer_at(&world.service.client, CLUSTER, RELAY, &world.relay_bearer).await;
    clock.fetch_add(2 * HOUR, Ordering::SeqCst);
    let pruned = world.service.controller().prune_retained().await.unwrap();
    assert_eq!(pruned, Pruned { registrations: 1, relay_connections: 0 });
    // The first connection is superseded but named by node-1's newest registration: still known.
    assert_eq!(heartbeat_code(&world, &first_token).await, "relay-connection-lost");
    assert_eq!(heartbeat_code(&world, &second_token).await, "relay-connection-lost");
    assert_eq!(world.registrations().await.len(), 1);
    world.stop().await;
});

/// `cloudly serve`'s flags alone.
#[derive(clap::Parser)]
struct Serve {
    #[command(flatten)]
    config: cloudly::config::ServeConfig,
}

#[test]
fn retention_flags_are_checked() {
    use clap::Parser as _;
    let config = |args: &[&str]| {
        let mut all = vec!["serve"];
        all.extend_from_slice(args);
        Serve::try_parse_from(all).expect("the flags parse").config
    };
    let defaults = config(&[]).controller_settings().unwrap().retention;
    assert_eq!(defaults.registration_age_ms, 30 * 24 * HOUR);
    assert_eq!(defaults.relay_connection_age_ms, 7 * 24 * HOUR);
    assert_eq!(defaults.interval_ms, 600_000);
    let set = config(&[
        "--registration-retention-hours",
        "48",
        "--relay-connection-retention-hours",
        "2",
        "--retention-interval-seconds",
        "30",
    ])
    .controller_settings()
    .unwrap()
    .retention;
    assert_eq!((set.registration_age_ms, set.relay_connection_age_ms, set.interval_ms), (48 * HOUR, 2 * HOUR, 30_000));
    for bad in [
        &["--registration-retention-hours", "0"][..],
        &["--relay-connection-retention-hours", "0"],
        &["--retention-interval-seconds", "0"],
    ] {
        let error = config(bad).controller_settings().unwrap_err().to_string();
        assert!(error.contains(bad[0]), "{error}");
    }
}
