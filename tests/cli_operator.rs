//! The administrator CLI as an operator meets it, with the real binary: exit codes (0 answered,
//! 1 refused, 2 usage, 3 unreachable or timed out), global flags, timeouts, `https://`, files
//! checked locally with each failing member named, YAML, what `apply` changed (and that it
//! writes nothing unchanged, on both stores), `org get` and `node get`, designation retries
//! answered as replays, shell completions and `identity issue` without keys.

#[macro_use]
mod support;

use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::service::{Backend, TestService};

use cloudly::contract::{Id, NodeId};

/// A temporary directory removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> Scratch {
        let dir = std::env::temp_dir().join(format!("cloudly-cli-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    fn write(&self, name: &str, contents: &str) -> PathBuf {
        let path = self.0.join(name);
        std::fs::write(&path, contents).unwrap();
        path
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs `cloudly` with `args` and exactly the environment given (plus `PATH`), the state
/// directory inside `scratch`.
async fn cloudly(scratch: &Scratch, environment: &[(&str, &str)], args: &[&str]) -> Output {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_cloudly"));
    command.args(args).env_clear().env("PATH", std::env::var_os("PATH").unwrap_or_default());
    command.env("CLOUDLY_STATE_DIR", scratch.0.join("state"));
    for (name, value) in environment {
        command.env(name, value);
    }
    // A CLI that hangs fails the test instead of hanging it.
    command.kill_on_drop(true);
    tokio::time::timeout(Duration::from_secs(60), command.output())
        .await
        .unwrap_or_else(|_| panic!("cloudly {args:?} did not finish within 60 s"))
        .unwrap()
}

fn stdout_json(output: &Output) -> Value {
    assert!(output.status.success(), "cloudly failed: {}", String::from_utf8_lossy(&output.stderr));
    serde_json::from_slice(&output.stdout).unwrap()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// A controller on SQLite and the path of an administrator identity file for it.
async fn controller(scratch: &Scratch) -> (TestService, String) {
    controller_on(Backend::Sqlite, scratch).await
}

/// A controller on `backend` and the path of an administrator identity file for it.
async fn controller_on(backend: Backend, scratch: &Scratch) -> (TestService, String) {
    let service = TestService::start(backend).await;
    let identity = scratch.write("admin.json", &service.admin().to_string());
    (service, identity.display().to_string())
}

/// `CLOUDLY_URL` and `CLOUDLY_IDENTITY` for `service` and the identity file `identity`.
fn environment<'a>(service: &'a TestService, identity: &'a str) -> [(&'static str, &'a str); 2] {
    [("CLOUDLY_URL", service.base_url.as_str()), ("CLOUDLY_IDENTITY", identity)]
}

fn examples(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/examples").join(name).display().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_codes_say_answered_refused_usage_and_unreachable() {
    let scratch = Scratch::new();
    let (service, identity) = controller(&scratch).await;
    let environment = environment(&service, &identity);
    let answered = cloudly(&scratch, &environment, &["cluster", "list", "-o", "json"]).await;
    assert_eq!(answered.status.code(), Some(0));
    assert_eq!(stdout_json(&answered), json!({ "clusters": [] }));
    let refused = cloudly(&scratch, &environment, &["cluster", "get", "c9"]).await;
    assert_eq!(refused.status.code(), Some(1), "{}", stderr(&refused));
    let error: Value = serde_json::from_str(&stderr(&refused)).unwrap();
    assert_eq!(error["error"]["data"]["code"], "not-found");
    let unknown_flag = cloudly(&scratch, &environment, &["cluster", "list", "--no-such-flag"]).await;
    assert_eq!(unknown_flag.status.code(), Some(2));
    let no_identity =
        cloudly(&scratch, &[("CLOUDLY_URL", service.base_url.as_str())], &["cluster", "list", "-o", "json"]).await;
    assert_eq!(no_identity.status.code(), Some(2));
    assert!(stderr(&no_identity).contains("no identity"), "{}", stderr(&no_identity));
    let missing_file = cloudly(&scratch, &environment, &["cluster", "put", "-f", "/nonexistent/cluster.json"]).await;
    assert_eq!(missing_file.status.code(), Some(2));
    assert!(stderr(&missing_file).contains("cannot read /nonexistent/cluster.json"), "{}", stderr(&missing_file));
    let bad_timeout = cloudly(&scratch, &environment, &["--timeout", "0s", "cluster", "list", "-o", "json"]).await;
    assert_eq!(bad_timeout.status.code(), Some(2));
    // A closed port: nothing listens on a port just released.
    let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let closed_url = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let unreachable =
        cloudly(&scratch, &[("CLOUDLY_URL", closed_url.as_str()), environment[1]], &["cluster", "list", "-o", "json"])
            .await;
    assert_eq!(unreachable.status.code(), Some(3), "{}", stderr(&unreachable));
    assert!(stderr(&unreachable).contains(&format!("{closed_url}/typedrequest")), "{}", stderr(&unreachable));
    let identity_file = serde_json::from_str::<Value>(&std::fs::read_to_string(&identity).unwrap()).unwrap();
    let token = identity_file["jwt"].as_str().unwrap();
    for output in [&unreachable, &refused] {
        assert!(!stderr(output).contains(token), "no identity token in errors");
    }
    service.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_accepts_and_never_answers_times_out_with_exit_3() {
    let scratch = Scratch::new();
    let identity = scratch.write("identity.json", r#"{ "jwt": "SECRET-IDENTITY-TOKEN" }"#).display().to_string();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let held = Arc::new(tokio::sync::Mutex::new(Vec::new()));
    let held_by_acceptor = held.clone();
    let acceptor = tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            held_by_acceptor.lock().await.push(socket);
        }
    });
    let started = Instant::now();
    let environment = [("CLOUDLY_IDENTITY", identity.as_str())];
    let output = cloudly(&scratch, &environment, &["cluster", "list", "--url", &url, "--timeout", "1s"]).await;
    assert_eq!(output.status.code(), Some(3), "{}", stderr(&output));
    assert!(started.elapsed() < Duration::from_secs(20), "the timeout ended the call: {:?}", started.elapsed());
    assert!(stderr(&output).contains(&format!("{url}/typedrequest did not answer within 1 s")), "{}", stderr(&output));
    assert!(!stderr(&output).contains("SECRET-IDENTITY-TOKEN"));
    assert!(!held.lock().await.is_empty(), "the CLI connected and waited");
    // The environment variable sets the timeout too.
    let environment =
        [("CLOUDLY_IDENTITY", identity.as_str()), ("CLOUDLY_URL", url.as_str()), ("CLOUDLY_TIMEOUT", "2")];
    let output = cloudly(&scratch, &environment, &["ingress", "get", "--cluster", "c1"]).await;
    assert_eq!(output.status.code(), Some(3));
    assert!(stderr(&output).contains("did not answer within 2 s"), "{}", stderr(&output));
    acceptor.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn url_and_identity_are_global_flags_before_or_after_the_subcommand() {
    let scratch = Scratch::new();
    let (service, identity) = controller(&scratch).await;
    let url = service.base_url.as_str();
    let before =
        cloudly(&scratch, &[], &["--url", url, "--identity", &identity, "cluster", "list", "-o", "json"]).await;
    assert_eq!(stdout_json(&before), json!({ "clusters": [] }));
    let between =
        cloudly(&scratch, &[], &["cluster", "--url", url, "list", "--identity", &identity, "-o", "json"]).await;
    assert_eq!(stdout_json(&between), json!({ "clusters": [] }));
    let after =
        cloudly(&scratch, &[], &["org", "put", "--id", "org", "--name", "Org", "--url", url, "--identity", &identity])
            .await;
    assert_eq!(stdout_json(&after)["organization"]["id"], "org");
    // A flag wins over the environment.
    let environment = [("CLOUDLY_URL", "http://127.0.0.1:1"), ("CLOUDLY_IDENTITY", "/nonexistent")];
    let flags_win =
        cloudly(&scratch, &environment, &["cluster", "list", "--url", url, "--identity", &identity, "-o", "json"])
            .await;
    assert_eq!(stdout_json(&flags_win), json!({ "clusters": [] }));
    service.stop().await;
}

/// A TLS-terminating proxy on 127.0.0.1 in front of `backend` (`host:port`), with a self-signed
/// certificate for `localhost`; answers its port and the certificate's PEM.
async fn tls_proxy(backend: String) -> (u16, String, tokio::task::JoinHandle<()>) {
    let certified = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
    let certificate = certified.cert.der().clone();
    let key = tokio_rustls::rustls::pki_types::PrivateKeyDer::try_from(certified.signing_key.serialize_der()).unwrap();
    let provider = Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
    let config = tokio_rustls::rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![certificate], key)
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let task = tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            let backend = backend.clone();
            tokio::spawn(async move {
                if let Ok(mut tls) = acceptor.accept(socket).await
                    && let Ok(mut plain) = tokio::net::TcpStream::connect(&backend).await
                {
                    let _ = tokio::io::copy_bidirectional(&mut tls, &mut plain).await;
                }
            });
        }
    });
    (port, certified.cert.pem(), task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_controllers_are_reached_and_their_certificate_is_checked() {
    let scratch = Scratch::new();
    let (service, identity) = controller(&scratch).await;
    let backend = service.base_url.trim_start_matches("http://").to_owned();
    let (port, certificate_pem, proxy) = tls_proxy(backend).await;
    let roots = scratch.write("roots.pem", &certificate_pem).display().to_string();
    let url = format!("https://localhost:{port}");
    let environment = [("CLOUDLY_URL", url.as_str()), ("CLOUDLY_IDENTITY", identity.as_str())];
    let trusted = cloudly(
        &scratch,
        &[environment[0], environment[1], ("SSL_CERT_FILE", &roots)],
        &["cluster", "list", "-o", "json"],
    )
    .await;
    assert_eq!(stdout_json(&trusted), json!({ "clusters": [] }));
    // Without the certificate among the roots, the controller is not trusted: exit 3, named.
    let other_roots = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap().cert.pem();
    let other_roots = scratch.write("other.pem", &other_roots).display().to_string();
    let untrusted = cloudly(
        &scratch,
        &[environment[0], environment[1], ("SSL_CERT_FILE", &other_roots)],
        &["cluster", "list", "-o", "json"],
    )
    .await;
    assert_eq!(untrusted.status.code(), Some(3), "{}", stderr(&untrusted));
    assert!(stderr(&untrusted).contains(&format!("cannot reach {url}/typedrequest")), "{}", stderr(&untrusted));
    assert!(stderr(&untrusted).to_lowercase().contains("certificate"), "{}", stderr(&untrusted));
    // --ca-cert trusts its CA, and only it: the system's roots (SSL_CERT_FILE) no longer count.
    let list = ["cluster", "list", "-o", "json"];
    let pinned = cloudly(
        &scratch,
        &[environment[0], environment[1], ("SSL_CERT_FILE", &other_roots)],
        &[&["--ca-cert", roots.as_str()][..], &list].concat(),
    )
    .await;
    assert_eq!(stdout_json(&pinned), json!({ "clusters": [] }));
    let by_environment = cloudly(&scratch, &[environment[0], environment[1], ("CLOUDLY_CA_CERT", &roots)], &list).await;
    assert_eq!(stdout_json(&by_environment), json!({ "clusters": [] }));
    let only = cloudly(
        &scratch,
        &[environment[0], environment[1], ("SSL_CERT_FILE", &roots)],
        &[&["--ca-cert", other_roots.as_str()][..], &list].concat(),
    )
    .await;
    assert_eq!(only.status.code(), Some(3), "{}", stderr(&only));
    assert!(stderr(&only).to_lowercase().contains("certificate"), "{}", stderr(&only));
    proxy.abort();
    service.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_file_is_refused_naming_the_member_and_nothing_is_sent() {
    let scratch = Scratch::new();
    let (service, identity) = controller(&scratch).await;
    let environment = environment(&service, &identity);
    let cluster = std::fs::read_to_string(examples("cluster.json")).unwrap().replace("relayOrigin", "relayOrgin");
    let cluster = scratch.write("cluster.json", &cluster).display().to_string();
    let refused = cloudly(&scratch, &environment, &["cluster", "put", "-f", &cluster]).await;
    assert_eq!(refused.status.code(), Some(2), "{}", stderr(&refused));
    assert!(stderr(&refused).contains("cluster.relayOrgin is not a member"), "{}", stderr(&refused));
    assert!(stderr(&refused).contains("cluster.relayOrigin is missing"), "{}", stderr(&refused));
    let node =
        scratch.write("node.yaml", "id: node-1\nruntimeNamespace: ns-main\nhostAddresses: [10.0.0.2, 10.0.0.1]\n");
    let refused =
        cloudly(&scratch, &environment, &["node", "put", "--cluster", "c1", "-f", &node.display().to_string()]).await;
    assert_eq!(refused.status.code(), Some(2));
    assert!(stderr(&refused).contains("node hostAddresses must be"), "{}", stderr(&refused));
    let inventory = scratch.write(
        "inventory.yaml",
        "organizations:\n  - { id: org, name: Org }\nclusters:\n  - { id: c1, organizationId: org }\nextra: 1\n\
         nodes:\n  - { clusterId: c1, node: { id: node-1, runtimeNamespace: ns-main, hostAddresses: [] }, \
         rotateCredential: 1 }\n",
    );
    let refused = cloudly(&scratch, &environment, &["apply", "-f", &inventory.display().to_string()]).await;
    assert_eq!(refused.status.code(), Some(2));
    let text = stderr(&refused);
    assert!(text.contains("inventory.extra is not a member"), "{text}");
    assert!(text.contains("clusters[0]: cluster.runtime is missing"), "{text}");
    assert!(text.contains("nodes[0]: entry.rotateCredential must be a boolean"), "{text}");
    // Nothing of the file was sent: the organization of its first entry does not exist.
    let clusters = cloudly(&scratch, &environment, &["cluster", "list", "-o", "json"]).await;
    assert_eq!(stdout_json(&clusters), json!({ "clusters": [] }));
    let cluster_of_unknown_org =
        cloudly(&scratch, &environment, &["cluster", "put", "-f", &examples("cluster.json")]).await;
    assert_eq!(cluster_of_unknown_org.status.code(), Some(1), "the organization was not written");
    service.stop().await;
}

/// `deploy/examples/inventory.json` written as YAML.
fn inventory_yaml(cluster_generation: u64) -> String {
    let inventory: Value = serde_json::from_str(&std::fs::read_to_string(examples("inventory.json")).unwrap()).unwrap();
    let mut inventory = inventory;
    inventory["clusters"][0]["runtime"]["generation"] = json!(cluster_generation);
    let mut yaml = String::from("# The example inventory, as YAML.\n");
    for (key, items) in inventory.as_object().unwrap() {
        yaml.push_str(&format!("{key}:\n"));
        for item in items.as_array().unwrap() {
            yaml.push_str(&format!("  - {item}\n"));
        }
    }
    yaml
}

/// The `result` of each entry `apply` printed.
fn results(output: &Output) -> Vec<String> {
    stdout_json(output)["applied"]
        .as_array()
        .unwrap()
        .iter()
        .map(|entry| entry["result"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_reads_yaml_and_reports_what_it_changed() {
    let scratch = Scratch::new();
    let (service, identity) = controller(&scratch).await;
    let environment = environment(&service, &identity);
    let first = scratch.write("inventory.yml", &inventory_yaml(1)).display().to_string();
    let created = cloudly(&scratch, &environment, &["apply", "-f", &first]).await;
    assert_eq!(results(&created), ["created", "created", "created", "created"]);
    assert!(stdout_json(&created)["applied"][2]["bearer"].as_str().is_some_and(|bearer| bearer.starts_with("sznb_")));
    let again = cloudly(&scratch, &environment, &["apply", "-f", &first]).await;
    assert_eq!(results(&again), ["unchanged", "unchanged", "unchanged", "unchanged"]);
    assert_eq!(stdout_json(&again)["applied"][2]["bearer"], Value::Null);
    // Recognised by content without an extension.
    let changed = scratch.write("inventory", &inventory_yaml(2)).display().to_string();
    let updated = cloudly(&scratch, &environment, &["apply", "-f", &changed]).await;
    assert_eq!(results(&updated), ["unchanged", "updated", "unchanged", "unchanged"]);
    let cluster = cloudly(&scratch, &environment, &["cluster", "get", "c1"]).await;
    assert_eq!(stdout_json(&cluster)["cluster"]["runtime"]["generation"], 2);
    assert_eq!(stdout_json(&cluster)["cluster"]["revision"], 2);
    service.stop().await;
}

/// The stored revisions of the organizations and nodes `apply_writes_only_what_differs` applies.
async fn revisions(service: &TestService) -> Value {
    let mut revisions = json!({});
    for organization in ["org", "org-2"] {
        let stored = service.store.get_organization(&Id::parse(organization).unwrap()).await.unwrap();
        revisions[organization] = json!(stored.map(|stored| stored.revision));
    }
    for node in ["node-1", "node-2"] {
        let stored = service.store.get_node(&Id::parse("c1").unwrap(), &NodeId::parse(node).unwrap()).await.unwrap();
        revisions[node] = json!(stored.map(|stored| (stored.revision, stored.bearer_hash)));
    }
    revisions
}

on_both_stores!(apply_writes_only_what_differs, |backend| async move {
    let scratch = Scratch::new();
    let (service, identity) = controller_on(backend, &scratch).await;
    let environment = environment(&service, &identity);
    let mut inventory = json!({
        "organizations": [{ "id": "org", "name": "Org" }],
        "clusters": [{ "id": "c1", "organizationId": "org", "runtime": { "phase": "pallet", "generation": 1 },
                       "relayOrigin": null, "fleetCutoverIngressDesignation": null }],
        "nodes": [
            { "clusterId": "c1",
              "node": { "id": "node-1", "runtimeNamespace": "ns-main", "hostAddresses": ["10.0.0.1"] } },
            { "clusterId": "c1",
              "node": { "id": "node-2", "runtimeNamespace": "ns-main", "hostAddresses": ["10.0.0.2"] } },
        ],
    });
    let apply = async |inventory: &Value| {
        let file = scratch.write("inventory.json", &inventory.to_string()).display().to_string();
        cloudly(&scratch, &environment, &["apply", "-f", &file]).await
    };
    let created = apply(&inventory).await;
    assert_eq!(results(&created), ["created", "created", "created", "created"]);
    let before = revisions(&service).await;
    assert_eq!(before["org"], json!(1));
    assert_eq!(before["node-1"][0], json!(1));

    // The same file again: nothing is written, not even an organization or a node.
    let again = apply(&inventory).await;
    assert_eq!(results(&again), ["unchanged", "unchanged", "unchanged", "unchanged"]);
    assert!(stdout_json(&again)["applied"][2]["bearer"].is_null());
    assert_eq!(revisions(&service).await, before, "an unchanged record is not written");

    // One node's host addresses change: exactly that node is written.
    inventory["nodes"][1]["node"]["hostAddresses"] = json!(["10.0.0.2", "10.0.0.3"]);
    let moved = apply(&inventory).await;
    assert_eq!(results(&moved), ["unchanged", "unchanged", "unchanged", "updated"]);
    assert!(stdout_json(&moved)["applied"][3]["bearer"].is_null(), "no new bearer without rotation");
    let after = revisions(&service).await;
    assert_eq!(after["node-1"], before["node-1"]);
    assert_eq!(after["node-2"][0], json!(2));
    assert_eq!(after["node-2"][1], before["node-2"][1], "the bearer is kept");
    let node =
        stdout_json(&cloudly(&scratch, &environment, &["node", "get", "--cluster", "c1", "--id", "node-2"]).await);
    assert_eq!(
        node,
        json!({ "node": { "id": "node-2", "runtimeNamespace": "ns-main", "hostAddresses": ["10.0.0.2", "10.0.0.3"],
                          "session": null, "connected": false } })
    );

    // A new organization is created; the one already there is not written.
    inventory["organizations"] = json!([{ "id": "org", "name": "Org" }, { "id": "org-2", "name": "Second" }]);
    let added = apply(&inventory).await;
    assert_eq!(results(&added), ["unchanged", "created", "unchanged", "unchanged", "unchanged"]);
    let organization = stdout_json(&cloudly(&scratch, &environment, &["org", "get", "--id", "org-2"]).await);
    assert_eq!(organization, json!({ "organization": { "id": "org-2", "name": "Second" } }));
    let with_second = revisions(&service).await;
    assert_eq!((with_second["org"].clone(), with_second["org-2"].clone()), (json!(1), json!(1)));

    // `rotateCredential: true` always writes the node and prints its new bearer.
    inventory["nodes"][0]["rotateCredential"] = json!(true);
    let rotated = apply(&inventory).await;
    assert_eq!(results(&rotated), ["unchanged", "unchanged", "unchanged", "updated", "unchanged"]);
    let bearer = stdout_json(&rotated)["applied"][3]["bearer"].clone();
    assert!(bearer.as_str().is_some_and(|bearer| bearer.starts_with("sznb_")), "{bearer}");
    let after_rotation = revisions(&service).await;
    assert_eq!(after_rotation["node-1"][0], json!(2));
    assert_ne!(after_rotation["node-1"][1], before["node-1"][1], "a new bearer hash");
    assert_eq!(after_rotation["node-2"], after["node-2"]);

    // A missing node is refused naming it, and no answer carries the bearer.
    let missing = cloudly(&scratch, &environment, &["node", "get", "--cluster", "c1", "--id", "node-9"]).await;
    assert_eq!(missing.status.code(), Some(1));
    let error: Value = serde_json::from_str(&stderr(&missing)).unwrap();
    assert_eq!(error["error"]["data"], json!({ "code": "not-found", "what": "node" }));
    let node = cloudly(&scratch, &environment, &["node", "get", "--cluster", "c1", "--id", "node-1"]).await;
    assert!(!String::from_utf8_lossy(&node.stdout).contains(bearer.as_str().unwrap()));
    service.stop().await;
});

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_designation_retried_with_its_mutation_id_is_answered_as_a_replay() {
    let scratch = Scratch::new();
    let (service, identity) = controller(&scratch).await;
    service.seed_cluster("c1", "ingress").await;
    let environment = environment(&service, &identity);
    let designate = ["ingress", "designate", "--cluster", "c1", "--service", "ingress", "--mutation-id", "retry-1"];
    let first = stdout_json(&cloudly(&scratch, &environment, &designate).await);
    assert_eq!(first["replayed"], false);
    let retry = stdout_json(&cloudly(&scratch, &environment, &designate).await);
    assert_eq!(retry["replayed"], true, "{retry}");
    assert_eq!(retry["designation"], first["designation"]);
    // The remembered request is private and holds no identity.
    let remembered: Vec<PathBuf> =
        std::fs::read_dir(scratch.0.join("state/designations")).unwrap().map(|entry| entry.unwrap().path()).collect();
    assert_eq!(remembered.len(), 1);
    let text = std::fs::read_to_string(&remembered[0]).unwrap();
    assert!(!text.contains("jwt") && !text.contains("identity"), "{text}");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        assert_eq!(std::fs::metadata(&remembered[0]).unwrap().permissions().mode() & 0o777, 0o600);
    }
    // A new mutation id is a new designation.
    let next = ["ingress", "designate", "--cluster", "c1", "--service", "ingress", "--mutation-id", "retry-2"];
    let rotated = stdout_json(&cloudly(&scratch, &environment, &next).await);
    assert_eq!(rotated["designation"]["generation"], 2);
    // The first mutation id still answers its own outcome.
    let late_retry = stdout_json(&cloudly(&scratch, &environment, &designate).await);
    assert_eq!(
        (late_retry["replayed"].clone(), late_retry["designation"].clone()),
        (json!(true), first["designation"].clone())
    );
    service.stop().await;
}

#[tokio::test]
async fn completions_print_a_script_for_each_shell() {
    let scratch = Scratch::new();
    for shell in ["bash", "zsh", "fish"] {
        let output = cloudly(&scratch, &[], &["completions", shell]).await;
        assert!(output.status.success(), "{shell}: {}", stderr(&output));
        let script = String::from_utf8(output.stdout).unwrap();
        assert!(script.len() > 1_000 && script.contains("cloudly"), "{shell}: {script}");
        assert!(script.contains("designate"), "{shell}: subcommands are completed");
    }
    let unknown = cloudly(&scratch, &[], &["completions", "tcsh"]).await;
    assert_eq!(unknown.status.code(), Some(2));
}

#[tokio::test]
async fn identity_issue_without_keys_fails_naming_the_key_file_and_creates_nothing() {
    let scratch = Scratch::new();
    let data_dir = scratch.0.join("not-a-deployment");
    let data_dir_text = data_dir.display().to_string();
    let issue = ["identity", "issue", "--name", "Ada", "--user-id", "ada", "--role", "viewer"];
    let output = cloudly(&scratch, &[("CLOUDLY_DATA_DIR", data_dir_text.as_str())], &issue).await;
    assert_eq!(output.status.code(), Some(2));
    assert!(output.stdout.is_empty(), "no identity is printed");
    let text = stderr(&output);
    assert!(text.contains(&data_dir.join("keys/identity.ed25519").display().to_string()), "{text}");
    assert!(text.contains("cloudly serve") && text.contains("copy keys/"), "{text}");
    assert!(!data_dir.exists(), "nothing was created");
    // With the keys of a deployment it issues.
    cloudly::keys::ControllerKeys::create(&data_dir).unwrap();
    let output = cloudly(&scratch, &[("CLOUDLY_DATA_DIR", data_dir_text.as_str())], &issue).await;
    assert!(stdout_json(&output)["jwt"].is_string());
}
