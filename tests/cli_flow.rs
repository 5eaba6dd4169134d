//! The README's operator flow with the real binary: `cloudly serve` on a fresh data directory
//! (SQLite by default, and PostgreSQL) writes keys and the bootstrap administrator identity; with
//! that identity the CLI creates an organization, a Pallet cluster, a node, a service spec and
//! designates the service (a retry with the same `--mutation-id` is answered as a replay), then
//! reads the designation back.

mod support;

use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use support::service::{Backend, TestDatabase};

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/examples")
}

fn serve(data_dir: &Path, database_url: Option<&str>) -> (Child, String) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_cloudly"));
    command.args(["serve", "--listen", "127.0.0.1:0", "--log-format", "json"]).env("CLOUDLY_DATA_DIR", data_dir);
    command.env_remove("CLOUDLY_DATABASE_URL");
    if let Some(url) = database_url {
        command.env("CLOUDLY_DATABASE_URL", url);
    }
    let mut child = command.stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
    let stderr = child.stderr.take().unwrap();
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Ok(event) = serde_json::from_str::<Value>(&line)
                && event["message"] == "cloudly serving"
            {
                let _ = sender.send(event["address"].as_str().unwrap_or_default().to_owned());
            }
        }
    });
    let address = receiver.recv_timeout(Duration::from_secs(60)).expect("cloudly serve prints its address");
    (child, format!("http://{address}"))
}

fn cli(url: &str, identity: &Path, args: &[&str]) -> Value {
    let state_dir = identity.parent().expect("the identity lives in the data directory").join("cli-state");
    let output = Command::new(env!("CARGO_BIN_EXE_cloudly"))
        .args(args)
        .env("CLOUDLY_URL", url)
        .env("CLOUDLY_IDENTITY", identity)
        .env("CLOUDLY_STATE_DIR", state_dir)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "cloudly {args:?} failed: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap_or_else(|error| panic!("cloudly {args:?} printed no JSON: {error}"))
}

fn operator_flow(data_dir: &Path, database_url: Option<&str>) {
    let (mut child, url) = serve(data_dir, database_url);
    let identity = data_dir.join("admin-identity.json");
    assert!(identity.is_file(), "the bootstrap identity is written on first start");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&identity).unwrap().permissions().mode() & 0o777, 0o600);
    }
    let file = |name: &str| examples().join(name).display().to_string();
    cli(&url, &identity, &["org", "put", "--id", "org", "--name", "Example Org"]);
    let cluster = cli(&url, &identity, &["cluster", "put", "-f", &file("cluster.json")]);
    assert_eq!(cluster["cluster"]["revision"], 1);
    let node = cli(&url, &identity, &["node", "put", "--cluster", "c1", "-f", &file("node.json")]);
    assert!(node["bearer"].as_str().is_some_and(|bearer| bearer.starts_with("sznb_")));
    let spec = cli(&url, &identity, &["service", "put", "-f", &file("ingress-spec.json")]);
    assert_eq!(spec["spec"]["revision"], 1);
    let designated = cli(&url, &identity, &["ingress", "designate", "--cluster", "c1", "--service", "ingress"]);
    assert_eq!(designated["designation"]["generation"], 1);
    let rotate = ["ingress", "designate", "--cluster", "c1", "--service", "ingress", "--mutation-id", "rotate-1"];
    let rotated = cli(&url, &identity, &rotate);
    assert_eq!(rotated["designation"]["generation"], 2);
    assert_eq!(rotated["replayed"], false);
    // The same mutation id again (an operator retrying after a lost answer) is a replay.
    let retried = cli(&url, &identity, &rotate);
    assert_eq!(retried["replayed"], true, "{retried}");
    assert_eq!(retried["designation"], rotated["designation"]);
    let current = cli(&url, &identity, &["ingress", "get", "--cluster", "c1"]);
    assert_eq!(current["designation"], rotated["designation"]);
    let chain = cli(&url, &identity, &["ingress", "list", "--cluster", "c1", "-o", "json"]);
    assert_eq!(chain["designations"].as_array().unwrap().len(), 2);
    // Applying the whole inventory file again changes nothing that is already there.
    let applied = cli(&url, &identity, &["apply", "-f", &file("inventory.json")]);
    let results: Vec<&str> =
        applied["applied"].as_array().unwrap().iter().map(|entry| entry["result"].as_str().unwrap()).collect();
    assert_eq!(results, ["unchanged", "unchanged", "unchanged", "unchanged"], "{applied}");
    // An operator identity issued by the CLI reads but may not write.
    let issued = Command::new(env!("CARGO_BIN_EXE_cloudly"))
        .args(["identity", "issue", "--name", "Ada", "--user-id", "ada", "--role", "viewer", "--ttl", "1h"])
        .env("CLOUDLY_DATA_DIR", data_dir)
        .output()
        .unwrap();
    assert!(issued.status.success());
    let viewer = data_dir.join("viewer.json");
    std::fs::write(&viewer, &issued.stdout).unwrap();
    let current_as_viewer = cli(&url, &viewer, &["ingress", "get", "--cluster", "c1"]);
    assert_eq!(current_as_viewer["designation"], rotated["designation"]);
    let refused = Command::new(env!("CARGO_BIN_EXE_cloudly"))
        .args(["org", "put", "--id", "org2", "--name", "Other"])
        .env("CLOUDLY_URL", &url)
        .env("CLOUDLY_IDENTITY", &viewer)
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("identity-forbidden"));
    Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
    assert!(child.wait().unwrap().success());
}

#[test]
fn the_readme_flow_works_on_sqlite_with_nothing_configured() {
    let data_dir = std::env::temp_dir().join(format!("cloudly-flow-{}", uuid::Uuid::new_v4().simple()));
    operator_flow(&data_dir, None);
    assert!(data_dir.join("cloudly.db").is_file(), "SQLite is the default store");
    assert!(data_dir.join("keys/identity.ed25519").is_file());
    std::fs::remove_dir_all(data_dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_flow_works_on_postgres() {
    let database = TestDatabase::create(Backend::Postgres).await;
    let data_dir = std::env::temp_dir().join(format!("cloudly-flow-{}", uuid::Uuid::new_v4().simple()));
    let url = database.url.clone();
    let dir = data_dir.clone();
    tokio::task::spawn_blocking(move || operator_flow(&dir, Some(&url))).await.unwrap();
    assert!(!data_dir.join("cloudly.db").exists(), "PostgreSQL was used, not SQLite");
    std::fs::remove_dir_all(data_dir).unwrap();
    database.drop_now().await;
}
