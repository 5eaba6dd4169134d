//! The administrator CLI's kubectl habits, with the real binary against a real `cloudly serve`:
//! `-o table|json|yaml` (lists default to a table with RFC 3339 times, single records to JSON),
//! `--cluster`/`--id` addressing with the older forms kept as aliases, `-f -` reading standard
//! input, `cloudly version` and `cloudly ready` (no identity), the request id of a refusal found in
//! the server's own log lines and the one of a transport error, the URL and the right scheme named
//! when `https://` meets plain HTTP, `--ca-cert` trusting only its CA, and no panic on a closed
//! pipe.

mod support;

use serde_json::Value;
use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use support::database::{Backend, TestDatabase};
use support::process::{Scratch, Serving, start};

/// `cloudly args` against `serving` as its bootstrap administrator, `stdin` on standard input.
fn cloudly_with(serving: &Serving, scratch: &Scratch, args: &[&str], stdin: &str) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_cloudly"))
        .args(args)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("CLOUDLY_URL", &serving.base_url)
        .env("CLOUDLY_IDENTITY", serving.data_dir.join("admin-identity.json"))
        .env("CLOUDLY_STATE_DIR", scratch.join("state"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(stdin.as_bytes()).unwrap();
    child.wait_with_output().unwrap()
}

fn cloudly(serving: &Serving, scratch: &Scratch, args: &[&str]) -> Output {
    cloudly_with(serving, scratch, args, "")
}

fn stdout(output: &Output) -> String {
    assert!(output.status.success(), "cloudly failed: {}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8(output.stdout.clone()).unwrap()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn example(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/examples").join(name).display().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn output_formats_addressing_aliases_and_standard_input() {
    let database = TestDatabase::create(Backend::Sqlite).await;
    let scratch = Scratch::new("cloudly-habits");
    let serving = start(&scratch.join("data"), &database.url).serving();
    let inventory = std::fs::read_to_string(example("inventory.yaml")).unwrap();
    // `-f -` reads standard input (YAML by content).
    let applied = cloudly_with(&serving, &scratch, &["apply", "-f", "-", "-o", "json"], &inventory);
    let applied: Value = serde_json::from_str(&stdout(&applied)).unwrap();
    assert!(applied["applied"].as_array().is_some_and(|entries| entries.len() >= 4), "{applied}");

    // A list is a table by default; JSON and YAML on request.
    let table = stdout(&cloudly(&serving, &scratch, &["cluster", "list"]));
    let mut lines = table.lines();
    assert_eq!(lines.next().unwrap().split_whitespace().next(), Some("ID"), "{table}");
    assert_eq!(lines.next().unwrap().split_whitespace().next(), Some("c1"), "{table}");
    let listed: Value =
        serde_json::from_str(&stdout(&cloudly(&serving, &scratch, &["cluster", "list", "-o", "json"]))).unwrap();
    assert_eq!(listed["clusters"][0]["id"], "c1");
    let yaml = stdout(&cloudly(&serving, &scratch, &["cluster", "list", "-o", "yaml"]));
    assert!(yaml.starts_with("clusters:\n- "), "{yaml}");

    // A single record is JSON by default, by --id, and by the older positional form and --cluster.
    let by_id: Value =
        serde_json::from_str(&stdout(&cloudly(&serving, &scratch, &["cluster", "get", "--id", "c1"]))).unwrap();
    assert_eq!(by_id["cluster"]["id"], "c1");
    for older in [&["cluster", "get", "c1"][..], &["cluster", "get", "--cluster", "c1"][..]] {
        let answer: Value = serde_json::from_str(&stdout(&cloudly(&serving, &scratch, older))).unwrap();
        assert_eq!(answer, by_id, "{older:?}");
    }
    let spec = ["service", "get", "--cluster", "c1", "--id", "web", "-o", "table"];
    let spec = stdout(&cloudly(&serving, &scratch, &spec));
    assert!(spec.lines().nth(1).is_some_and(|line| line.starts_with("web ")), "{spec}");
    let older = stdout(&cloudly(&serving, &scratch, &["service", "get", "--cluster", "c1", "--service", "web"]));
    assert!(older.contains("\"serviceId\": \"web\""), "{older}");

    // Times in tables are RFC 3339.
    stdout(&cloudly(&serving, &scratch, &["ingress", "designate", "--cluster", "c1", "--service", "ingress"]));
    let statuses = stdout(&cloudly(&serving, &scratch, &["service", "status", "--cluster", "c1"]));
    let header: Vec<&str> = statuses.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(header, ["SERVICE", "REVISION", "STATE", "REASON", "CHANGED", "AT"], "{statuses}");
    for line in statuses.lines().skip(1) {
        let changed_at = line.split_whitespace().last().unwrap();
        assert!(changed_at.len() == 24 && changed_at.ends_with('Z') && changed_at.contains('T'), "{statuses}");
    }
    let designations = stdout(&cloudly(&serving, &scratch, &["ingress", "list", "--cluster", "c1"]));
    assert!(designations.lines().nth(1).is_some_and(|line| line.starts_with("1 ")), "{designations}");

    // `call` takes YAML on standard input and answers YAML.
    let nodes =
        cloudly_with(&serving, &scratch, &["call", "listClusterNodes", "-f", "-", "-o", "yaml"], "clusterId: c1\n");
    assert!(stdout(&nodes).starts_with("nodes:\n"), "{}", stdout(&nodes));
    serving.terminate();
    database.drop_now().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn version_and_ready_need_no_identity_and_a_refusal_names_the_request_id_of_the_servers_log() {
    let database = TestDatabase::create(Backend::Sqlite).await;
    let scratch = Scratch::new("cloudly-habits");
    let serving = start(&scratch.join("data"), &database.url).serving();
    let anonymous = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_cloudly"))
            .args(args)
            .env_clear()
            .env("CLOUDLY_URL", &serving.base_url)
            .output()
            .unwrap()
    };
    let version = anonymous(&["version"]);
    let version = stdout(&version);
    let rows: Vec<Vec<&str>> = version.lines().map(|line| line.split_whitespace().collect()).collect();
    assert_eq!(rows[1][..2], ["client", env!("CARGO_PKG_VERSION")], "{version}");
    assert_eq!(rows[2], ["controller", env!("CARGO_PKG_VERSION"), "debug", "cloudly"], "{version}");
    let version: Value = serde_json::from_str(&stdout(&anonymous(&["version", "-o", "json"]))).unwrap();
    assert_eq!(version["controller"]["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(stdout(&anonymous(&["ready", "--wait", "10s"])), "ready\n");

    let refused = cloudly(&serving, &scratch, &["cluster", "get", "--id", "c9"]);
    assert_eq!(refused.status.code(), Some(1), "{}", stderr(&refused));
    let refusal: Value = serde_json::from_str(&stderr(&refused)).unwrap();
    assert_eq!(refusal["error"]["data"]["code"], "not-found");
    let request_id = refusal["requestId"].as_str().unwrap().to_owned();
    // The server logged the call under that id.
    let logged = |id: &str| {
        serving.log().lines().filter_map(|line| serde_json::from_str::<Value>(line).ok()).any(|line| {
            line["span"]["request_id"] == id && line["message"] == "typed request" && line["outcome"] == "not-found"
        })
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while !logged(&request_id) && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(25));
    }
    assert!(logged(&request_id), "no log line of request {request_id}:\n{}", serving.log());

    // `https://` against plain HTTP: exit 3, the URL, the right scheme in plain words, a request id.
    let https_url = serving.base_url.replace("http://", "https://");
    let wrong_scheme = Command::new(env!("CARGO_BIN_EXE_cloudly"))
        .args(["--url", &https_url, "version"])
        .env_clear()
        .output()
        .unwrap();
    assert_eq!(wrong_scheme.status.code(), Some(3), "{}", stderr(&wrong_scheme));
    let text = stderr(&wrong_scheme);
    assert!(text.contains(&format!("{https_url}/typedrequest")), "{text}");
    assert!(text.contains("does not speak TLS there: use http:// instead of https://"), "{text}");
    assert!(text.contains("request id: "), "{text}");
    // Not ready: a closed port answers nothing within the wait.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let closed_url = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let unreachable =
        Command::new(env!("CARGO_BIN_EXE_cloudly")).args(["--url", &closed_url, "ready"]).env_clear().output().unwrap();
    assert_eq!(unreachable.status.code(), Some(3), "{}", stderr(&unreachable));
    assert!(stderr(&unreachable).contains(&format!("{closed_url}/readyz")), "{}", stderr(&unreachable));
    serving.terminate();
    database.drop_now().await;
}

#[test]
fn a_closed_pipe_ends_the_output_without_a_panic() {
    let cloudly = env!("CARGO_BIN_EXE_cloudly");
    // `true` reads nothing and exits at once, so the writes meet a closed pipe; `head` closes it
    // after its line.
    for command in [
        format!("'{cloudly}' completions bash | true"),
        format!("'{cloudly}' completions zsh | head -n 1"),
        format!("'{cloudly}' contract validate --kind service-runtime-status /dev/null | true"),
    ] {
        let output = Command::new("bash").args(["-c", &format!("set -o pipefail; {command}")]).output().unwrap();
        let code = output.status.code();
        assert!(!stderr(&output).contains("panicked"), "{command}: {}", stderr(&output));
        // A closed pipe is no failure of the command: it exits as it would have (validate: 1 or 2).
        assert!(code.is_some_and(|code| code < 101), "{command}: {:?} {}", output.status, stderr(&output));
    }
}
