//! Bad input over the wire, generated from the document: Schemathesis (pinned in
//! `tests/schemathesis/requirements.txt`, installed by `tests/schemathesis/install.sh`, which
//! `scripts/test.sh` runs) reads `openapi/openapi.yaml` and sends a bounded, seeded run of
//! generated requests to a real `cloudly serve` on SQLite: its coverage phase (every schema
//! boundary, every `oneOf` branch, every documented value, each member missing or of a wrong type)
//! and its fuzzing phase (random requests that fit the document and that break it).
//!
//! Every answer must pass:
//! - `not_a_server_error`: no 5xx but the documented 503 of `/readyz`;
//! - `status_code_conformance`, `content_type_conformance`, `response_headers_conformance`,
//!   `response_schema_conformance`: each answer is a documented status with its documented media
//!   type, headers and body schema (an answered envelope, refusals included, is a 200
//!   `TypedAnswerEnvelope`);
//! - `no_internal_error` (`tests/schemathesis/hooks.py`): no envelope answers `internal-error` or
//!   `store-unavailable`, the server faults that an HTTP 200 envelope carries;
//! - `negative_data_refused` (the same file): an envelope that breaks the document is refused,
//!   with a non-200 status or an envelope with `error`, never answered with a `response`.
//!
//! The envelopes generated to fit the document carry the bootstrap administrator's identity
//! (the hook replaces a generated `request.identity` object), so they reach the request readers
//! and the domain rather than stopping at `identity-refused`; those generated to break it keep
//! what was generated.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use support::process::{Scratch, start};

/// The run's seed: the same requests on every run.
const SEED: &str = "20261204";
/// Test cases per operation in the fuzzing phase (the coverage phase adds its own, ~5 500).
const MAX_EXAMPLES: &str = "300";

fn schemathesis_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests").join("schemathesis")
}

#[test]
fn generated_requests_get_documented_answers_and_no_server_fault() {
    let dir = schemathesis_dir();
    let schemathesis = dir.join(".venv/bin/schemathesis");
    assert!(
        schemathesis.is_file(),
        "Schemathesis is not installed: run tests/schemathesis/install.sh (scripts/test.sh does)"
    );
    let scratch = Scratch::new("cloudly-openapi-fuzz");
    let database = format!("sqlite://{}", scratch.join("cloudly.db").display());
    let serving = start(&scratch.join("data"), &database).serving();
    let identity = serving.data_dir.join("admin-identity.json");
    let output = Command::new(&schemathesis)
        .arg("run")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("openapi/openapi.yaml"))
        .args(["--url", &serving.base_url])
        .args([
            "--checks",
            "not_a_server_error,status_code_conformance,content_type_conformance,response_headers_conformance,\
             response_schema_conformance,no_internal_error,negative_data_refused",
        ])
        .args(["--phases", "coverage,fuzzing"])
        .args(["--max-examples", MAX_EXAMPLES, "--seed", SEED, "--workers", "1"])
        .args(["--generation-database", "none", "--continue-on-failure", "--no-color"])
        .args(["--request-timeout", "30"])
        // Its working directory is the scratch directory, so nothing it writes lands in the tree.
        .current_dir(&scratch.0)
        .env("SCHEMATHESIS_HOOKS", dir.join("hooks.py"))
        .env("CLOUDLY_FUZZ_IDENTITY", &identity)
        .output()
        .expect("run schemathesis");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    println!("{stdout}");
    assert!(output.status.success(), "schemathesis found failures ({:?}):\n{stdout}\n{stderr}", output.status);
    // The run tested every operation and generated thousands of cases, all passing.
    let summary = stdout.lines().find(|line| line.contains(" generated, ")).expect("a summary line");
    let generated: u64 =
        summary.split_whitespace().next().and_then(|count| count.parse().ok()).expect("a count of test cases");
    assert!(generated >= 3_000, "too few test cases: {summary}");
    assert!(summary.contains(&format!("{generated} passed")), "{summary}");
    assert!(stdout.contains("Tested: 5"), "every operation is tested:\n{stdout}");
    // The server still serves, and its log holds no panic.
    let log = serving.terminate();
    assert!(!log.contains("panicked"), "the server panicked:\n{log}");
}
