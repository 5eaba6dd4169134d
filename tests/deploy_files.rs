//! `deploy/` agrees with the code (scripts/compose-e2e.sh runs it under Docker; these checks need
//! no engine and name the line that drifted): every `CLOUDLY_*`
//! variable the Dockerfile, the compose file, the systemd unit and the READMEs name is one the
//! built binary's configuration accepts (read from `cloudly … --help` of `CARGO_BIN_EXE_cloudly`)
//! or one the end-to-end suite's interface defines; the controllers' environment, run through
//! `cloudly config`, listens on the port the files publish and health-check, with the shared keys
//! directory they mount; the health path answers on a real process; the binary the image copies
//! is the one cargo builds; the compose file's `keys` command writes keys the binary loads; the
//! dependencies are compiled in layers of their own; both builders ignore the same files; the
//! compose file suits Compose v1 and v2; and the systemd unit is sandboxed.

#[macro_use]
mod support;

use serde_yaml_ng::Value;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use support::process::{Scratch, start_with};

/// The end-to-end suite's interface (`scripts/e2e.sh`, `tests/e2e.rs`): the controllers' base
/// URLs, comma-separated, and the administrator identity file.
const E2E_VARIABLES: [&str; 2] = ["CLOUDLY_E2E_URLS", "CLOUDLY_E2E_IDENTITY"];

/// The port the image and the compose file serve on.
const PORT: &str = "8080";

/// The address the compose file publishes the controllers on, unless the operator sets another.
const PUBLISH_ADDRESS: &str = "${PUBLISH_ADDRESS:-127.0.0.1}";

/// The health path of the image's and the compose file's checks.
const HEALTH_PATH: &str = "/readyz";

fn repository() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &str) -> String {
    std::fs::read_to_string(repository().join(path)).unwrap_or_else(|error| panic!("{path}: {error}"))
}

fn cloudly(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_cloudly")).args(args).env_clear().output().unwrap()
}

/// The `[env: NAME=]` variables of `cloudly <args> --help`.
fn help_variables(args: &[&str]) -> BTreeSet<String> {
    let output = cloudly(&[args, &["--help"]].concat());
    assert!(output.status.success(), "cloudly {args:?} --help: {}", String::from_utf8_lossy(&output.stderr));
    let help = String::from_utf8(output.stdout).unwrap();
    help.split("[env: ").skip(1).map(|rest| rest.split('=').next().unwrap().to_owned()).collect()
}

/// Every variable the binary reads, by command.
struct Accepted {
    serve: BTreeSet<String>,
    identity_issue: BTreeSet<String>,
    all: BTreeSet<String>,
}

fn accepted() -> Accepted {
    let serve = help_variables(&["serve"]);
    let identity_issue = help_variables(&["identity", "issue"]);
    let mut all = serve.clone();
    for args in [&["migrate"][..], &["keys", "rotate"], &["keys", "adopt"], &["identity", "issue"], &["call"]] {
        all.extend(help_variables(args));
    }
    for name in ["CLOUDLY_LISTEN", "CLOUDLY_DATA_DIR", "CLOUDLY_KEYS_DIR", "CLOUDLY_DATABASE_URL", "CLOUDLY_LOG_FORMAT"]
    {
        assert!(serve.contains(name), "cloudly serve --help names {name}: {serve:?}");
    }
    Accepted { serve, identity_issue, all }
}

/// Every `CLOUDLY_…` word of `text`.
fn variables_in(text: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let mut rest = text;
    while let Some(at) = rest.find("CLOUDLY_") {
        let word: String = rest[at..]
            .chars()
            .take_while(|character| character.is_ascii_uppercase() || *character == '_' || character.is_ascii_digit())
            .collect();
        let word = word.trim_end_matches('_');
        // `CLOUDLY_*`, `CLOUDLY_…`: the family, not a variable.
        if word != "CLOUDLY" {
            found.insert(word.to_owned());
        }
        rest = &rest[at + "CLOUDLY_".len()..];
    }
    found
}

/// The text of every `.rs` file under `dir`.
fn source_text(dir: &Path) -> String {
    let mut text = String::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            text += &source_text(&path);
        } else if path.extension().is_some_and(|extension| extension == "rs") {
            text += &std::fs::read_to_string(&path).unwrap();
        }
    }
    text
}

fn compose() -> Value {
    serde_yaml_ng::from_str(&read("deploy/docker-compose.yml")).expect("the compose file is YAML")
}

fn service<'a>(compose: &'a Value, name: &str) -> &'a Value {
    let service = &compose["services"][name];
    assert!(service.is_mapping(), "the compose file has a service {name}");
    service
}

fn text(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        Value::Sequence(items) => items.iter().map(text).collect::<Vec<_>>().join(" "),
        Value::Number(number) => number.to_string(),
        Value::Bool(flag) => flag.to_string(),
        _ => String::new(),
    }
}

/// A service's environment as (name, value) pairs.
fn environment(service: &Value) -> Vec<(String, String)> {
    service["environment"]
        .as_mapping()
        .map(|mapping| mapping.iter().map(|(name, value)| (text(name), text(value))).collect())
        .unwrap_or_default()
}

fn variable(service: &Value, name: &str) -> String {
    environment(service)
        .into_iter()
        .find(|(each, _)| each == name)
        .unwrap_or_else(|| panic!("no {name} in {service:?}"))
        .1
}

/// A service's volume mounts as (source, target, read-only): `source:target[:ro]`, or the long
/// syntax (a tmpfs has no source).
fn mounts(service: &Value) -> Vec<(String, String, bool)> {
    service["volumes"]
        .as_sequence()
        .map(|items| {
            items
                .iter()
                .map(|item| {
                    if item.is_mapping() {
                        return (text(&item["source"]), text(&item["target"]), item["read_only"] == Value::Bool(true));
                    }
                    let parts: Vec<String> = text(item).split(':').map(str::to_owned).collect();
                    (parts[0].clone(), parts[1].clone(), parts.get(2).is_some_and(|mode| mode == "ro"))
                })
                .collect()
        })
        .unwrap_or_default()
}

const CONTROLLERS: [&str; 2] = ["cloudly-1", "cloudly-2"];

#[test]
fn every_cloudly_variable_of_the_deploy_files_is_one_the_code_reads() {
    let accepted = accepted();
    let compose = compose();
    for (name, service) in compose["services"].as_mapping().unwrap() {
        let name = text(name);
        let allowed: &BTreeSet<String> =
            if name == "admin-identity" { &accepted.identity_issue } else { &accepted.serve };
        for (variable, _) in environment(service).into_iter().filter(|(variable, _)| variable.starts_with("CLOUDLY_")) {
            let e2e = name == "e2e" && E2E_VARIABLES.contains(&variable.as_str());
            assert!(
                e2e || allowed.contains(&variable),
                "service {name} sets {variable}, which its command does not read"
            );
        }
    }
    let e2e = service(&compose, "e2e");
    let e2e_variables: BTreeSet<String> = environment(e2e).into_iter().map(|(name, _)| name).collect();
    assert_eq!(e2e_variables, E2E_VARIABLES.map(str::to_owned).into(), "the e2e service sets the suite's variables");

    let documents =
        ["deploy/Dockerfile", "deploy/docker-compose.yml", "deploy/systemd/cloudly.service", "deploy/README.md"];
    // deploy/README.md also documents the settings of the test command's run under Docker.
    let compose_run = read("scripts/compose-e2e.sh");
    for document in documents {
        for variable in variables_in(&read(document)) {
            let known = accepted.all.contains(&variable)
                || E2E_VARIABLES.contains(&variable.as_str())
                || (document == "deploy/README.md"
                    && variable.starts_with("CLOUDLY_COMPOSE_E2E_")
                    && compose_run.contains(&format!("${{{variable}:-")));
            assert!(known, "{document} names {variable}, which cloudly does not read");
        }
    }
    // The top-level README: every variable it documents is read by the binary (its flags, or
    // `std::env` in `src/`), by the test command (`CLOUDLY_TEST_…`) or by the end-to-end suite
    // (`CLOUDLY_E2E_…`); every variable of `cloudly serve` is documented.
    let readme = read("README.md");
    let test_command = read("scripts/test.sh")
        + &read("scripts/compose-e2e.sh")
        + &read("tests/support/database.rs")
        + &read("tests/e2e.rs");
    let source = source_text(&repository().join("src"));
    for variable in variables_in(&readme) {
        let read_by_source = source.contains(&format!("\"{variable}\""));
        let known = accepted.all.contains(&variable) || read_by_source || test_command.contains(&variable);
        assert!(known, "README.md documents {variable}, which no code reads");
    }
    for variable in &accepted.serve {
        assert!(readme.contains(&format!("`{variable}`")), "README.md does not document {variable}");
    }
}

#[test]
fn the_controllers_listen_where_the_files_publish_and_check_them_and_share_one_keys_directory() {
    let compose = compose();
    let mut data_volumes = BTreeSet::new();
    let mut shared = BTreeSet::new();
    for name in CONTROLLERS {
        let controller = service(&compose, name);
        assert_eq!(text(&controller["command"]), "serve", "{name} runs cloudly serve (the image's entrypoint)");
        let ports = text(&controller["ports"]);
        assert!(ports.ends_with(&format!(":{PORT}")), "{name} publishes the container's port {PORT}: {ports}");
        assert!(
            ports.starts_with(&format!("{PUBLISH_ADDRESS}:")),
            "{name} publishes on 127.0.0.1 unless the operator sets an address: {ports}"
        );
        let check = text(&controller["healthcheck"]["test"]);
        assert!(check.contains(&format!("127.0.0.1:{PORT}{HEALTH_PATH}")), "{name} checks {HEALTH_PATH}: {check}");
        assert_eq!(text(&controller["depends_on"]["postgres"]["condition"]), "service_healthy");

        // The environment as the binary reads it.
        let scratch = Scratch::new("cloudly-deploy");
        let mut command = Command::new(env!("CARGO_BIN_EXE_cloudly"));
        command.arg("config").env_clear();
        for (variable, value) in environment(controller) {
            command.env(variable, value);
        }
        let output = command.current_dir(&scratch.0).output().unwrap();
        assert!(output.status.success(), "{name}: {}", String::from_utf8_lossy(&output.stderr));
        let config: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
        assert_eq!(config["listen"], format!("0.0.0.0:{PORT}"), "{name}");
        assert_eq!(config["logFormat"], "json", "{name}");
        assert!(
            config["databaseUrl"].as_str().unwrap().starts_with("postgres://cloudly:***@postgres:5432/"),
            "{config}"
        );

        let keys_dir = variable(controller, "CLOUDLY_KEYS_DIR");
        let data_dir = variable(controller, "CLOUDLY_DATA_DIR");
        assert_eq!(config["keys"], keys_dir);
        let volumes = mounts(controller);
        let keys = volumes.iter().find(|(_, target, _)| *target == keys_dir).expect("the keys directory is a mount");
        assert!(keys.2, "{name} mounts the keys read-only");
        shared.insert((keys.0.clone(), variable(controller, "CLOUDLY_DATABASE_URL")));
        let data = volumes.iter().find(|(_, target, _)| *target == data_dir).expect("the data directory is a mount");
        assert!(!data.2, "{name} writes its data directory");
        data_volumes.insert(data.0.clone());
    }
    assert_eq!(shared.len(), 1, "both controllers share one keys volume and one database: {shared:?}");
    assert_eq!(data_volumes.len(), 2, "each controller has a data directory of its own");
    let declared = compose["volumes"].as_mapping().unwrap();
    for volume in
        data_volumes.iter().chain(shared.iter().map(|(keys, _)| keys)).chain(["postgres-data".to_owned()].iter())
    {
        assert!(declared.contains_key(volume.as_str()), "the volume {volume} is declared");
    }

    let postgres = service(&compose, "postgres");
    let image = text(&postgres["image"]);
    let image = image
        .strip_prefix("${POSTGRES_IMAGE:-")
        .and_then(|rest| rest.strip_suffix('}'))
        .unwrap_or_else(|| panic!("the PostgreSQL image is ${{POSTGRES_IMAGE:-…}} (the test passes its own): {image}"));
    assert!(image.starts_with("postgres:") && !image.ends_with(":latest"), "PostgreSQL is pinned by tag: {image}");
    assert!(postgres["ports"].is_null(), "PostgreSQL publishes no port (the host's 5432 stays free)");
    assert!(text(&postgres["healthcheck"]["test"]).contains("pg_isready"));
    assert!(
        mounts(postgres)
            .iter()
            .any(|(source, target, _)| source == "postgres-data" && target == "/var/lib/postgresql/data")
    );
}

#[test]
fn the_e2e_service_runs_the_suite_against_both_controllers_with_an_identity_of_the_shared_keys() {
    let compose = compose();
    let e2e = service(&compose, "e2e");
    let entrypoint = text(&e2e["entrypoint"]) + " " + &text(&e2e["command"]);
    assert!(entrypoint.contains("scripts/e2e.sh"), "the e2e service runs scripts/e2e.sh: {entrypoint}");
    assert_eq!(text(&e2e["build"]["target"]), "e2e");
    let urls = variable(e2e, "CLOUDLY_E2E_URLS");
    let expected: Vec<String> = CONTROLLERS.iter().map(|name| format!("http://{name}:{PORT}")).collect();
    assert_eq!(urls, expected.join(","));
    for name in CONTROLLERS {
        assert_eq!(text(&e2e["depends_on"][name]["condition"]), "service_healthy");
    }

    // The identity file is the one `admin-identity` writes with the shared keys.
    let identity_path = variable(e2e, "CLOUDLY_E2E_IDENTITY");
    let (identity_volume, identity_dir, _) = mounts(e2e)
        .into_iter()
        .find(|(_, target, _)| identity_path.starts_with(&format!("{target}/")))
        .expect("the identity file lies in a mounted volume");
    let file_name = &identity_path[identity_dir.len() + 1..];
    let issuer = service(&compose, "admin-identity");
    let command = text(&issuer["command"]);
    assert!(command.contains("cloudly identity issue") && command.contains("--role admin"), "{command}");
    let (_, written_dir, read_only) = mounts(issuer)
        .into_iter()
        .find(|(source, _, _)| *source == identity_volume)
        .expect("admin-identity mounts the identity volume");
    assert!(!read_only);
    assert!(command.contains(&format!("> {written_dir}/{file_name}")), "{command}");
    let keys_dir = variable(issuer, "CLOUDLY_KEYS_DIR");
    assert_eq!(keys_dir, variable(service(&compose, CONTROLLERS[0]), "CLOUDLY_KEYS_DIR"));
    assert!(mounts(issuer).iter().any(|(source, target, _)| source == "cloudly-keys" && *target == keys_dir));

    let dockerfile = read("deploy/Dockerfile");
    let stage = dockerfile.split("\nFROM ").find(|stage| stage.contains(" AS e2e\n")).expect("an e2e stage");
    assert!(stage.contains("--test e2e") && stage.contains("scripts/e2e.sh"), "{stage}");
}

#[test]
fn the_image_builds_the_binary_cargo_builds_and_runs_it_as_a_user_with_its_data_on_a_volume() {
    let dockerfile = read("deploy/Dockerfile");
    let binary = Path::new(env!("CARGO_BIN_EXE_cloudly")).file_name().unwrap().to_str().unwrap().to_owned();
    assert_eq!(binary, "cloudly");
    // The base images are build arguments (the test command passes stand-ins), whose defaults are
    // the official images, pinned by tag.
    let argument = |name: &str| {
        dockerfile
            .lines()
            .find_map(|line| line.strip_prefix(&format!("ARG {name}=")))
            .unwrap_or_else(|| panic!("ARG {name}=… before the first FROM"))
            .to_owned()
    };
    assert_eq!(argument("RUST_IMAGE"), "rust:1.95-bookworm");
    assert_eq!(argument("RUNTIME_IMAGE"), "debian:bookworm-slim");
    let stages: Vec<(&str, &str)> = dockerfile
        .lines()
        .filter_map(|line| line.strip_prefix("FROM "))
        .map(|rest| rest.split_once(" AS ").unwrap_or_else(|| panic!("FROM {rest} names its stage")))
        .collect();
    for (index, (base, name)) in stages.iter().enumerate() {
        let earlier = stages[..index].iter().any(|(_, stage)| stage == base);
        assert!(earlier || ["${RUST_IMAGE}", "${RUNTIME_IMAGE}"].contains(base), "stage {name} is built FROM {base}");
    }
    let runtime_stage = stages.last().unwrap();
    assert_eq!(*runtime_stage, ("${RUNTIME_IMAGE}", "runtime"), "the runtime is the default (last) stage");
    // The engine's built-in frontend builds the file offline: no `# syntax=` line to fetch one.
    assert!(!dockerfile.lines().any(|line| line.trim_start().starts_with("# syntax")), "a # syntax line");
    assert!(dockerfile.contains(&format!("cargo build --release --locked --bin {binary}")));
    assert!(dockerfile.contains(&format!("COPY --from=builder /src/target/release/{binary} /usr/local/bin/{binary}")));
    let runtime = &dockerfile[dockerfile.find("FROM ${RUNTIME_IMAGE} AS runtime").unwrap()..];
    let user = runtime.lines().find_map(|line| line.strip_prefix("USER ")).expect("a USER");
    assert!(user != "root" && user != "0", "the runtime runs as {user}");
    assert!(runtime.contains("CLOUDLY_DATA_DIR=/var/lib/cloudly") && runtime.contains("VOLUME [\"/var/lib/cloudly\"]"));
    assert!(runtime.contains(&format!("CLOUDLY_LISTEN=0.0.0.0:{PORT}")) && runtime.contains(&format!("EXPOSE {PORT}")));
    assert!(runtime.contains(&format!("http://127.0.0.1:{PORT}{HEALTH_PATH}")), "HEALTHCHECK on {HEALTH_PATH}");
    assert!(runtime.contains(&format!("ENTRYPOINT [\"{binary}\"]")) && runtime.contains("CMD [\"serve\"]"));

    let unit = read("deploy/systemd/cloudly.service");
    assert!(unit.contains(&format!("ExecStart=/usr/local/bin/{binary} serve")));
    assert!(unit.contains("User=cloudly"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_health_path_answers_on_the_port_of_the_listen_setting() {
    let scratch = Scratch::new("cloudly-deploy");
    let data_dir = scratch.join("data");
    let database = format!("sqlite://{}", scratch.join("cloudly.db").display());
    let keys_dir = scratch.join("keys");
    let serving = start_with(&data_dir, &database, &[("CLOUDLY_KEYS_DIR", keys_dir.to_str().unwrap())]).serving();
    let _ = rustls::crypto::ring::default_provider().install_default();
    let response = reqwest::get(format!("{}{HEALTH_PATH}", serving.base_url)).await.unwrap();
    assert_eq!(response.status(), 200);
    let body: serde_json::Value = serde_json::from_str(&response.text().await.unwrap()).unwrap();
    assert_eq!(body, serde_json::json!({ "ready": true }));
    assert!(keys_dir.join("signing.ed25519").exists(), "the keys are in CLOUDLY_KEYS_DIR");
    serving.terminate();
}

#[test]
fn the_keys_command_of_the_compose_file_writes_keys_the_binary_loads_and_only_once() {
    let compose = compose();
    let keys = service(&compose, "keys");
    assert_eq!(text(&keys["entrypoint"]), "/bin/sh -c");
    // Compose turns `$$` into `$`.
    let script = text(&keys["command"]).replace("$$", "$");
    let keys_dir = variable(keys, "CLOUDLY_KEYS_DIR");
    assert!(
        mounts(keys)
            .iter()
            .any(|(source, target, read_only)| source == "cloudly-keys" && *target == keys_dir && !read_only)
    );
    let scratch = Scratch::new("cloudly-deploy");
    let dir = scratch.join("keys");
    std::fs::create_dir_all(&dir).unwrap();
    let run = || {
        let output = Command::new("sh").args(["-c", &script]).env("CLOUDLY_KEYS_DIR", &dir).output().unwrap();
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    };
    run();
    let first = cloudly::keys::ControllerKeys::load_from(&dir).expect("the binary loads the keys");
    let mut names: Vec<String> =
        std::fs::read_dir(&dir).unwrap().map(|entry| entry.unwrap().file_name().into_string().unwrap()).collect();
    names.sort();
    assert_eq!(names, ["identity.ed25519", "secret.key", "signing.ed25519"]);
    #[cfg(unix)]
    for name in &names {
        use std::os::unix::fs::PermissionsExt as _;
        assert_eq!(std::fs::metadata(dir.join(name)).unwrap().permissions().mode() & 0o777, 0o600, "{name}");
    }
    run();
    let again = cloudly::keys::ControllerKeys::load_from(&dir).unwrap();
    for role in cloudly::store::KeyRole::ALL {
        assert_eq!(first.key_id(role), again.key_id(role), "a second run replaces nothing");
    }
}

/// Every `include_str!`/`include_bytes!` of the `.rs` files under `dir`: (the file, the included
/// path resolved against the file's directory).
fn includes(dir: &Path) -> Vec<(PathBuf, PathBuf)> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            found.extend(includes(&path));
        } else if path.extension().is_some_and(|extension| extension == "rs") {
            let text = std::fs::read_to_string(&path).unwrap();
            for macro_name in ["include_str!(\"", "include_bytes!(\""] {
                for rest in text.split(macro_name).skip(1) {
                    let relative = rest.split('"').next().unwrap();
                    let mut resolved = path.parent().unwrap().to_path_buf();
                    for component in Path::new(relative).components() {
                        match component {
                            std::path::Component::ParentDir => {
                                resolved.pop();
                            }
                            other => resolved.push(other),
                        }
                    }
                    found.push((path.clone(), resolved));
                }
            }
        }
    }
    found
}

/// The text of stage `name` of the Dockerfile, from its FROM line to the next.
fn stage(dockerfile: &str, name: &str) -> String {
    let start = dockerfile
        .lines()
        .position(|line| line.starts_with("FROM ") && line.ends_with(&format!(" AS {name}")))
        .unwrap_or_else(|| panic!("a stage {name}"));
    let lines: Vec<&str> = dockerfile.lines().collect();
    let end = (start + 1..lines.len()).find(|index| lines[*index].starts_with("FROM ")).unwrap_or(lines.len());
    lines[start..end].join("\n")
}

#[test]
fn the_dependencies_are_compiled_in_layers_that_depend_on_the_manifests_alone() {
    let dockerfile = read("deploy/Dockerfile");
    // `dependencies` copies Cargo.toml and Cargo.lock only, and compiles the release binary's
    // dependencies against stub sources; `e2e-dependencies` does the same for the suite's.
    let dependencies = stage(&dockerfile, "dependencies");
    let copies: Vec<&str> = dependencies.lines().filter(|line| line.starts_with("COPY ")).collect();
    assert_eq!(copies, ["COPY Cargo.toml Cargo.lock ./"], "the dependencies layer copies the manifests alone");
    assert!(dependencies.contains("cargo build --release --locked --bin cloudly"));
    let e2e_dependencies = stage(&dockerfile, "e2e-dependencies");
    assert!(e2e_dependencies.starts_with("FROM dependencies AS "));
    assert!(!e2e_dependencies.contains("COPY "), "{e2e_dependencies}");
    assert!(e2e_dependencies.contains("cargo test --release --locked --test e2e --no-run"));
    // Then the source, and our crate compiled again (the copied files are older than the stubs):
    // the binary from `src/` and the migrations it includes alone, the suite from the whole tree.
    let builder = stage(&dockerfile, "builder");
    assert!(builder.starts_with("FROM dependencies AS builder"), "{builder}");
    let copies: Vec<&str> = builder.lines().filter(|line| line.starts_with("COPY ")).collect();
    assert_eq!(copies, ["COPY src src", "COPY migrations migrations"]);
    assert!(builder.contains("touch src/lib.rs src/main.rs"), "{builder}");
    // Every file src/ includes is under src/ or migrations/ (or, in unit tests, which the release
    // build does not compile, tests/).
    for (file, included) in includes(&repository().join("src")) {
        let top = included.strip_prefix(repository()).ok().and_then(|path| path.components().next());
        let top = top.map(|component| component.as_os_str().to_string_lossy().into_owned()).unwrap_or_default();
        assert!(
            ["src", "migrations", "tests"].contains(&top.as_str()),
            "{} includes {}: copy its directory in the builder stage",
            file.display(),
            included.display()
        );
    }
    let e2e = stage(&dockerfile, "e2e");
    assert!(e2e.starts_with("FROM e2e-dependencies AS e2e"), "{e2e}");
    let copies: Vec<&str> = e2e.lines().filter(|line| line.starts_with("COPY ")).collect();
    assert_eq!(
        copies,
        [
            "COPY src src",
            "COPY migrations migrations",
            "COPY tests tests",
            "COPY deploy/examples deploy/examples",
            "COPY scripts/e2e.sh scripts/e2e.sh"
        ]
    );
    assert!(e2e.contains("touch src/lib.rs src/main.rs tests/e2e.rs"), "{e2e}");
    // What the suite reads through CARGO_MANIFEST_DIR is among what the stage copies.
    let suite = read("tests/e2e.rs") + &read("tests/support/mod.rs") + &read("tests/support/process.rs");
    for path in suite.split("env!(\"CARGO_MANIFEST_DIR\")").skip(1) {
        let path = path.split('"').nth(1).unwrap_or_default().trim_start_matches('/');
        let copied = ["src", "migrations", "tests", "deploy/examples", "scripts/e2e.sh"];
        assert!(path.is_empty() || copied.iter().any(|prefix| path.starts_with(prefix)), "the suite reads {path}");
    }
    // The stubs: one per `[[bench]]` of Cargo.toml, whose `name` the stage reads from the line after
    // the table header.
    let manifest = read("Cargo.toml");
    let lines: Vec<&str> = manifest.lines().collect();
    for (index, line) in lines.iter().enumerate() {
        if *line == "[[bench]]" {
            let name = lines[index + 1].strip_prefix("name = \"").and_then(|rest| rest.strip_suffix('"'));
            let name = name.unwrap_or_else(|| panic!("the line after [[bench]] is its name: {}", lines[index + 1]));
            assert!(repository().join(format!("benches/{name}.rs")).exists(), "benches/{name}.rs");
        }
    }
    assert!(dependencies.contains(r#"sed -n '/^\[\[bench\]\]/{n;s/^name = "\(.*\)"$/\1/p}' Cargo.toml"#));
}

#[test]
fn both_builders_read_the_same_ignore_list_and_the_compose_file_suits_compose_v1_and_v2() {
    let lines = |path: &str| -> Vec<String> {
        read(path).lines().filter(|line| !line.starts_with('#') && !line.is_empty()).map(str::to_owned).collect()
    };
    let root = lines(".dockerignore");
    assert_eq!(root, lines("deploy/Dockerfile.dockerignore"), "the classic builder's and BuildKit's ignore lists");
    for ignored in ["target/", ".git/", "deploy/.env"] {
        assert!(root.iter().any(|line| line == ignored), "{ignored} stays out of the build context");
    }
    // Compose v1 refuses a top-level `name`; the project name comes from deploy/.env.
    let compose = compose();
    let top: Vec<String> = compose.as_mapping().unwrap().keys().map(text).collect();
    assert_eq!(top, ["services", "volumes"], "top-level keys");
    assert!(read("deploy/.env").lines().any(|line| line == "COMPOSE_PROJECT_NAME=cloudly"));
}

#[test]
fn the_systemd_unit_is_sandboxed_to_an_exposure_of_three_or_better() {
    let unit = read("deploy/systemd/cloudly.service");
    for directive in [
        "CapabilityBoundingSet=\n",
        "NoNewPrivileges=yes",
        "ProtectSystem=strict",
        "PrivateUsers=yes",
        "RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX",
        "SystemCallFilter=@system-service",
        "SystemCallArchitectures=native",
        "MemoryDenyWriteExecute=yes",
    ] {
        assert!(unit.contains(directive), "the unit sets {directive}");
    }
    // systemd's own rating, where systemd-analyze exists (`--threshold=30`: exposure 3.0).
    let analyze = Command::new("systemd-analyze").arg("--version").output();
    if analyze.is_err() {
        eprintln!("systemd-analyze is not installed: the unit's rating is not checked here");
        return;
    }
    let scratch = Scratch::new("cloudly-deploy");
    let copy = scratch.join("cloudly.service");
    std::fs::write(&copy, &unit).unwrap();
    let output = Command::new("systemd-analyze")
        .args(["security", "--no-pager", "--offline=true", "--threshold=30"])
        .arg(&copy)
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&output.stdout);
    let overall = report.lines().find(|line| line.contains("Overall exposure level")).unwrap_or("no rating");
    assert!(output.status.success(), "{overall}\n{}", String::from_utf8_lossy(&output.stderr));
}
