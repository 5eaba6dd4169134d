//! The operator console in a real Chromium: a real `cloudly serve` on SQLite, a cluster seeded
//! over the wire, a test node agent on `/typedsocket`, and `tests/console-browser/console.mjs`
//! (playwright-core driving Debian's `chromium`, headless) signing in with the bootstrap identity
//! file. At each step the script names, this test makes the change (the node reports its
//! assignments ready, a new designation, a route) and the script watches it appear without a
//! reload, and finds the connected relay in the cluster's relays table; then a viewer reads every
//! page, and a forged cookie and a form posted from another site are refused. Screenshots go to `<CARGO_TARGET_TMPDIR>/console-browser/`.
//! A story that stalls fails naming the phase it stalled in (the script's `phase` lines and its
//! errors are part of this test's output), with the controller's last log lines.
//!
//! `scripts/test.sh` installs `chromium` and the script's `node_modules` when they are missing;
//! without them this test fails, it never skips.

#[macro_use]
mod support;

use cloudly::api::methods::name;
use cloudly::api::wire;
use cloudly::client::{CallError, Client};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;
use support::database::{Backend, TestDatabase};
use support::node_agent::{ClaimReply, NodeAgent, NodeVolumes};
use support::service::{designation_request, reference_of, seed_plan, spec_body};
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};

/// How long the whole browser story may take: the script ends itself after
/// [`SCRIPT_DEADLINE`], naming the phase it was in; this test stops waiting after
/// `STORY_DEADLINE`.
const STORY_DEADLINE: Duration = Duration::from_secs(180);
const SCRIPT_DEADLINE: Duration = Duration::from_secs(150);

struct Admin {
    client: Client,
    identity: Value,
}

impl Admin {
    async fn call(&self, method: &str, mut request: Value) -> Value {
        request["identity"] = self.identity.clone();
        match self.client.call(method, request).await {
            Ok(answer) => answer,
            Err(CallError::Typed(error)) => panic!("{method}: {} {}", error.text, error.data),
            Err(other) => panic!("{method}: {other}"),
        }
    }
}

fn uncertain(claim: &Value) -> Value {
    json!({ "status": "accepted", "state": "uncertain",
            "claim": { "id": claim["id"], "generation": claim["generation"], "digest": claim["digest"] } })
}

/// Cluster `c1` with `node-1` (its host carries `192.0.2.17`): `web` and the designated
/// `ingress` on it, and `db`, whose volume's claim the node will answer `uncertain`. Answers
/// node-1's bearer.
async fn seed(admin: &Admin) -> String {
    admin.call("putOrganization", json!({ "organization": { "id": "org", "name": "Org" } })).await;
    let cluster = json!({
        "id": "c1", "organizationId": "org", "runtime": { "phase": "pallet", "generation": 3 },
        "relayOrigin": "https://relay.example.net:8443", "fleetCutoverIngressDesignation": null,
    });
    admin.call("putCluster", json!({ "cluster": cluster, "expectedRevision": null })).await;
    let node = json!({ "id": "node-1", "runtimeNamespace": "ns-main", "hostAddresses": ["192.0.2.17"] });
    let bearer = admin
        .call("putClusterNode", json!({ "clusterId": "c1", "node": node, "rotateCredential": true }))
        .await["bearer"]
        .as_str()
        .expect("a new node bearer")
        .to_owned();
    let on_node_one = |service: &str| {
        let mut spec = spec_body("c1", service);
        spec["replicas"] = json!(1);
        spec["placement"] = json!({ "nodeIds": ["node-1"] });
        spec
    };
    let mut db = on_node_one("db");
    db["volumes"] = json!([{
        "id": "data", "mountPath": "/var/lib/db", "readOnly": false, "driver": "local", "driverOptions": [],
        "mountOptions": [], "initialization": { "kind": "empty", "ownership": { "uid": 1000, "gid": 1000, "mode": 488 } },
    }]);
    for spec in [on_node_one("web"), on_node_one("ingress"), db] {
        admin.call("putServiceRuntimeSpec", json!({ "spec": spec, "expectedRevision": null })).await;
    }
    admin.call("putRuntimeNetworkAddressPlan", json!({ "plan": seed_plan("c1", 1) })).await;
    admin.call("designateClusterIngress", designation_request("c1", "ingress", "m1", 1, Value::Null)).await;
    bearer
}

/// Reports every assignment of the node's current set `ready`, as a node agent that started them.
async fn report_ready(agent: &NodeAgent, session: &Value) {
    let answer = agent
        .call(name::GET_RUNTIME_ASSIGNMENTS, wire::GetRuntimeAssignments { session: &session })
        .await
        .expect("the assignments");
    for signed in answer["assignments"].as_array().unwrap() {
        let assignment = &signed["payload"];
        let reference =
            json!({ "id": assignment["id"], "generation": assignment["generation"], "digest": assignment["digest"] });
        agent
            .call(
                name::REPORT_RUNTIME_ASSIGNMENT_STATE,
                wire::ReportRuntimeAssignmentState { session, assignment: &reference, state: &json!("ready") },
            )
            .await
            .expect("the report is recorded");
    }
}

fn chromium() -> PathBuf {
    let path = PathBuf::from(std::env::var("CLOUDLY_CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".to_owned()));
    assert!(path.exists(), "no Chromium at {} (scripts/test.sh installs Debian's chromium)", path.display());
    path
}

fn script_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/console-browser");
    assert!(
        dir.join("node_modules/playwright-core").exists(),
        "tests/console-browser/node_modules is missing (scripts/test.sh runs npm ci there)"
    );
    dir
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_operator_follows_the_cluster_in_chromium() {
    let (chromium, script_dir) = (chromium(), script_dir());
    let output = Path::new(env!("CARGO_TARGET_TMPDIR")).join("console-browser");
    let data_dir = output.join(format!("data-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&data_dir).unwrap();
    let database = TestDatabase::create(Backend::Sqlite).await;
    let serving = support::process::start(&data_dir, &database.url).serving();
    let identity_file = data_dir.join("admin-identity.json");
    let identity: Value = serde_json::from_str(&std::fs::read_to_string(&identity_file).unwrap()).unwrap();
    let admin = Admin { client: Client::new(&serving.base_url), identity };
    let node_bearer = seed(&admin).await;
    // relay-1 connects: the cluster page lists it, and shows neither its bearer nor its token.
    let relay = json!({ "clusterId": "c1", "relayId": "relay-1" });
    let relay_bearer = admin.call("issueClusterRelayCredential", relay.clone()).await["bearer"].clone();
    let connect = wire::ConnectClusterRelay {
        cluster_id: &relay["clusterId"],
        relay_id: &relay["relayId"],
        bearer: &relay_bearer,
    };
    let relay_token =
        admin.client.call(name::CONNECT_CLUSTER_RELAY, connect).await.expect("the relay connects")["token"].clone();
    let relay_secrets = format!("{} {}", relay_bearer.as_str().unwrap(), relay_token.as_str().unwrap());

    // A viewer's identity, issued by the CLI with the controller's keys.
    let viewer = std::process::Command::new(env!("CARGO_BIN_EXE_cloudly"))
        .args(["identity", "issue", "--name", "Vera", "--user-id", "vera", "--role", "viewer", "--ttl", "1h"])
        .arg("--data-dir")
        .arg(&data_dir)
        .output()
        .unwrap();
    assert!(viewer.status.success(), "{}", String::from_utf8_lossy(&viewer.stderr));
    let viewer_file = data_dir.join("viewer-identity.json");
    std::fs::write(&viewer_file, &viewer.stdout).unwrap();

    // node-1 connects; it answers its volume's claim `uncertain`.
    let volumes = NodeVolumes::new();
    volumes.script([ClaimReply::Respond(uncertain)]);
    let agent = NodeAgent::connect_holding(&serving.base_url, volumes).await;
    let session = agent.open("c1", "node-1", &node_bearer).await;

    let mut browser = tokio::process::Command::new("node")
        .arg(script_dir.join("console.mjs"))
        .current_dir(&script_dir)
        .env("CONSOLE_URL", &serving.base_url)
        .env("IDENTITY_FILE", &identity_file)
        .env("VIEWER_FILE", &viewer_file)
        .env("RELAY_SECRETS", &relay_secrets)
        .env("OUTPUT_DIR", &output)
        .env("CHROMIUM", &chromium)
        .env("STORY_SECONDS", SCRIPT_DEADLINE.as_secs().to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("start node");
    let mut answers = browser.stdin.take().unwrap();
    let mut lines = BufReader::new(browser.stdout.take().unwrap()).lines();
    // The script's errors go to the test's own output, beside its steps.
    let mut errors = BufReader::new(browser.stderr.take().unwrap()).lines();
    tokio::spawn(async move {
        while let Ok(Some(line)) = errors.next_line().await {
            println!("browser stderr: {line}");
        }
    });
    let story = async {
        let mut steps = Vec::new();
        while let Some(line) = lines.next_line().await.unwrap() {
            println!("browser: {line}");
            if line == "done" {
                break;
            }
            let Some(step) = line.strip_prefix("step ") else { continue };
            match step {
                "converge" => report_ready(&agent, &session).await,
                "designate" => {
                    let current = admin.call("getClusterIngressDesignation", json!({ "clusterId": "c1" })).await;
                    let request = designation_request("c1", "ingress", "m2", 1, reference_of(&current["designation"]));
                    admin.call("designateClusterIngress", request).await;
                }
                "route" => {
                    let route =
                        json!({ "hostname": "app.example.com", "serviceId": "web", "protocol": "tcp", "port": 443 });
                    admin.call("putClusterIngressRoute", json!({ "clusterId": "c1", "route": route })).await;
                }
                other => panic!("the browser script asked for an unknown step {other}"),
            }
            steps.push(step.to_owned());
            answers.write_all(b"ok\n").await.unwrap();
        }
        steps
    };
    // The controller's last lines, without its statements.
    let log_tail = || {
        let log = serving.log();
        let lines: Vec<&str> = log.lines().filter(|line| !line.contains(r#""target":"sqlx::query""#)).collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    };
    let Ok(steps) = tokio::time::timeout(STORY_DEADLINE, story).await else {
        let _ = browser.kill().await;
        panic!("the browser story did not end in {STORY_DEADLINE:?}; the controller's log ends:\n{}", log_tail());
    };
    drop(answers);
    let status = tokio::time::timeout(Duration::from_secs(30), browser.wait()).await.expect("node exits").unwrap();
    assert!(
        status.success(),
        "the browser story failed ({status}) after the steps {steps:?}; the controller's log ends:\n{}",
        log_tail()
    );
    assert_eq!(steps, ["converge", "designate", "route"]);
    for shot in ["01-clusters", "02-cluster", "03-node", "04-volumes", "05-forged-cookie", "06-service-as-viewer"] {
        assert!(output.join(format!("{shot}.png")).exists(), "screenshot {shot}");
    }

    // The controller stops cleanly, and no log line carries the identity token.
    drop(agent);
    let log = serving.terminate();
    assert!(!log.contains(admin.identity["jwt"].as_str().unwrap()), "a log line carries the identity token");
    database.drop_now().await;
    let _ = std::fs::remove_dir_all(&data_dir);
}
