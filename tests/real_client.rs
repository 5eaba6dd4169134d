//! The ecosystem's own client, npm `@api.global/typedrequest` 3.3.0, drives the controller with
//! no adapter: calls succeed, a replay is answered, refusals arrive as `TypedResponseError` with
//! `errorData`. `scripts/test.sh` installs the client (`npm ci` in `tests/typedrequest-client`).

mod support;

use serde_json::{Value, json};
use std::process::Command;
use support::service::{Backend, TestService};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_typedrequest_client_designates_and_reads_refusals() {
    let client_dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/typedrequest-client");
    assert!(
        client_dir.join("node_modules/@api.global/typedrequest").is_dir(),
        "the real client is not installed: run `npm ci` in tests/typedrequest-client (scripts/test.sh does)"
    );
    let service = TestService::start(Backend::Sqlite).await;
    let identity_file = std::env::temp_dir().join(format!("cloudly-identity-{}.json", uuid::Uuid::new_v4().simple()));
    std::fs::write(&identity_file, service.admin().to_string()).unwrap();
    let base_url = service.base_url.clone();
    let output = tokio::task::spawn_blocking(move || {
        Command::new("node").arg(client_dir.join("check.mjs")).arg(&base_url).arg(&identity_file).output()
    })
    .await
    .unwrap()
    .expect("run node");
    assert!(output.status.success(), "node failed: {}", String::from_utf8_lossy(&output.stderr));
    let result: Value = serde_json::from_slice(&output.stdout).expect("one JSON line");
    assert_eq!(result["keys"]["keys"][0]["algorithm"], json!("ed25519"));
    assert_eq!(result["designated"]["replayed"], json!(false));
    assert_eq!(result["designated"]["designation"]["generation"], json!(1));
    assert_eq!(result["replayed"], json!(true));
    assert_eq!(result["current"]["designation"], result["designated"]["designation"]);
    assert_eq!(result["conflict"]["data"]["code"], json!("designation-conflict"));
    assert_eq!(result["conflict"]["data"]["current"]["generation"], json!(1));
    assert_eq!(result["unknown"]["data"], json!({ "code": "unknown-method" }));
    assert_eq!(result["unknown"]["text"], json!("There is no available method for this call on the server side"));
    service.stop().await;
}
