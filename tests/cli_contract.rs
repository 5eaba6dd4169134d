//! `cloudly contract …` as a black box: the real binary, run over every golden vector, must behave
//! exactly as README.md ("`cloudly contract`") documents it: what it prints and its exit codes
//! (0 valid / verified / admitted, 1 invalid with the violations on stdout, 2 no judgement possible
//! with one `error: …` line on stderr).
//!
//! Every expectation comes from the vector files; every list is counted so that an emptied vector
//! file cannot pass. The invocations of one test run from a few threads; all failures of a test are
//! reported together.

mod support;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use cloudly::contract::RecordKind;
use serde_json::{Map, Value};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

const DESIGNATIONS: &str = "cluster-ingress-designation.json";
const CLAIMS: &str = "runtime-local-storage-claim.json";
const PROJECTIONS: &str = "runtime-network-projection.json";
const REGISTRATIONS: &str = "cluster-ingress-registration.json";
const SIGNATURES: &str = "signatures.json";

const DESIGNATION: &str = "cluster-ingress-designation";
const DESIGNATION_REQUEST: &str = "cluster-ingress-designation-request";
const CLAIM: &str = "runtime-local-storage-claim";
const PROJECTION: &str = "runtime-network-projection";
const LEASE: &str = "runtime-network-lease";
const REGISTRATION: &str = "cluster-ingress-registration";
const REFUSAL: &str = "cluster-ingress-registration-refusal";
const ROUTE_TABLE_CHANGE: &str = "cluster-ingress-route-table-change";

/// The kinds README.md says travel signed (`verify` takes exactly these).
const SIGNED_KINDS: [&str; 3] = [PROJECTION, CLAIM, "runtime-assignment"];

// ---------------------------------------------------------------------------------------------
// Running the binary
// ---------------------------------------------------------------------------------------------

/// One command-line argument.
#[derive(Clone)]
enum Arg {
    /// Passed as is.
    Text(String),
    /// Written to a fresh temp file whose path is passed.
    File(String),
    /// A path that does not exist.
    MissingFile,
    /// A path that exists but is a directory (cannot be read as a file).
    Directory,
}

fn text(value: &str) -> Arg {
    Arg::Text(value.to_owned())
}

/// A record written as pretty-printed JSON text.
fn json_file(value: &Value) -> Arg {
    Arg::File(serde_json::to_string_pretty(value).expect("JSON serializes"))
}

/// What an invocation must do.
#[derive(Debug, Clone)]
enum Expect {
    /// Exit 0; stdout is exactly this one line.
    Prints(String),
    /// Exit 1; stdout is exactly these lines.
    Violations(Vec<String>),
    /// Exit 1; stdout has exactly this many lines.
    ViolationCount(usize),
    /// Exit 1; stdout has at least one line.
    Invalid,
    /// Exit 2; stdout empty; stderr exactly one line starting `error: `.
    Unjudgeable,
}

struct Check {
    name: String,
    args: Vec<Arg>,
    expect: Expect,
}

impl Check {
    fn new(name: impl Into<String>, args: Vec<Arg>, expect: Expect) -> Self {
        Check { name: name.into(), args, expect }
    }
}

struct Outcome {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

/// A temp file removed when dropped.
struct TempFile(PathBuf);

impl TempFile {
    fn with_text(text: &str) -> Self {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let serial = NEXT.fetch_add(1, Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!("cloudly-cli-contract-{}-{serial}.json", std::process::id()));
        std::fs::write(&path, text).unwrap_or_else(|error| panic!("write {}: {error}", path.display()));
        TempFile(path)
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Runs `cloudly contract <args>`.
fn run(args: &[Arg]) -> Outcome {
    let mut files = Vec::new();
    let mut command = Command::new(env!("CARGO_BIN_EXE_cloudly"));
    command.arg("contract").stdin(Stdio::null());
    for arg in args {
        match arg {
            Arg::Text(value) => {
                command.arg(value);
            }
            Arg::File(contents) => {
                let file = TempFile::with_text(contents);
                command.arg(&file.0);
                files.push(file);
            }
            Arg::MissingFile => {
                let missing =
                    std::env::temp_dir().join(format!("cloudly-cli-contract-{}-missing.json", std::process::id()));
                assert!(!missing.exists(), "{} must not exist", missing.display());
                command.arg(missing);
            }
            Arg::Directory => {
                command.arg(std::env::temp_dir());
            }
        }
    }
    let output = command.output().expect("the cloudly binary runs");
    drop(files);
    Outcome {
        code: output.status.code(),
        stdout: String::from_utf8(output.stdout).expect("stdout is UTF-8"),
        stderr: String::from_utf8(output.stderr).expect("stderr is UTF-8"),
    }
}

fn lines(text: &str) -> Vec<&str> {
    text.lines().collect()
}

/// Why `outcome` does not meet `expect`, if it does not.
fn judge(outcome: &Outcome, expect: &Expect) -> Option<String> {
    let stdout = lines(&outcome.stdout);
    let ends_with_newline = outcome.stdout.ends_with('\n');
    let problem = match expect {
        Expect::Prints(line) => (outcome.code != Some(0) || outcome.stdout != format!("{line}\n"))
            .then(|| format!("want exit 0 and stdout {line:?}")),
        Expect::Violations(want) => (outcome.code != Some(1) || stdout != *want || !ends_with_newline)
            .then(|| format!("want exit 1 and exactly the lines {want:?}")),
        Expect::ViolationCount(count) => (outcome.code != Some(1) || stdout.len() != *count || !ends_with_newline)
            .then(|| format!("want exit 1 and exactly {count} violation line(s)")),
        Expect::Invalid => (outcome.code != Some(1) || stdout.is_empty() || !ends_with_newline)
            .then(|| "want exit 1 and at least one violation line".to_owned()),
        Expect::Unjudgeable => {
            let one_error_line = outcome.stderr.starts_with("error: ")
                && outcome.stderr.ends_with('\n')
                && outcome.stderr.matches('\n').count() == 1;
            (outcome.code != Some(2) || !outcome.stdout.is_empty() || !one_error_line)
                .then(|| "want exit 2, empty stdout and one `error: …` line on stderr".to_owned())
        }
    };
    // Exit 0 and 1 answer on stdout only.
    let problem = problem.or_else(|| {
        (!matches!(expect, Expect::Unjudgeable) && !outcome.stderr.is_empty())
            .then(|| "want nothing on stderr".to_owned())
    });
    problem.map(|why| {
        format!("{why}; got exit {:?}, stdout {:?}, stderr {:?}", outcome.code, outcome.stdout, outcome.stderr)
    })
}

/// Runs every check from a few threads; panics listing every failure. Returns how many ran.
fn run_checks(checks: Vec<Check>) -> usize {
    assert!(!checks.is_empty(), "no checks to run");
    let next = AtomicUsize::new(0);
    let failures = Mutex::new(Vec::new());
    let threads = std::thread::available_parallelism().map_or(4, |count| count.get()).clamp(2, 8);
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| {
                loop {
                    let index = next.fetch_add(1, Ordering::Relaxed);
                    let Some(check) = checks.get(index) else { break };
                    if let Some(why) = judge(&run(&check.args), &check.expect) {
                        failures.lock().unwrap().push(format!("{}: {why}", check.name));
                    }
                }
            });
        }
    });
    let mut failures = failures.into_inner().unwrap();
    failures.sort();
    assert!(failures.is_empty(), "{} of {} checks failed:\n{}", failures.len(), checks.len(), failures.join("\n"));
    checks.len()
}

// ---------------------------------------------------------------------------------------------
// Reading the vectors
// ---------------------------------------------------------------------------------------------

/// The non-empty list `key` of `vector`, as (name, entry) pairs.
fn listed<'a>(vector: &'a Value, key: &str) -> Vec<(String, &'a Value)> {
    let cases = support::cases(vector, key);
    assert!(!cases.is_empty(), "vector list {key} is empty");
    cases
}

/// The non-empty list `key` of the `requests` member of the designation vector.
fn requests<'a>(vector: &'a Value, key: &str) -> Vec<(String, &'a Value)> {
    let cases = support::cases(&vector["requests"], key);
    assert!(!cases.is_empty(), "vector list requests.{key} is empty");
    cases.into_iter().map(|(name, case)| (format!("requests.{name}"), case)).collect()
}

fn string<'a>(value: &'a Value, what: &str) -> &'a str {
    value.as_str().unwrap_or_else(|| panic!("{what} must be a string"))
}

fn strings(value: &Value, what: &str) -> Vec<String> {
    value
        .as_array()
        .unwrap_or_else(|| panic!("{what} must be a list"))
        .iter()
        .map(|line| string(line, what).to_owned())
        .collect()
}

fn count(value: &Value, what: &str) -> usize {
    usize::try_from(value.as_u64().unwrap_or_else(|| panic!("{what} must be a count"))).unwrap()
}

/// Every endpoint lease inside the valid projections, as (name, lease).
fn endpoint_leases(vector: &Value) -> Vec<(String, &Value)> {
    let mut leases = Vec::new();
    for (name, case) in listed(vector, "valid") {
        let endpoints = case["projection"]["endpoints"].as_array().unwrap_or_else(|| panic!("{name}: endpoints"));
        for (index, endpoint) in endpoints.iter().enumerate() {
            leases.push((format!("{name}: endpoints[{index}].lease"), &endpoint["lease"]));
        }
    }
    assert!(!leases.is_empty(), "the valid projections hold no endpoint lease");
    leases
}

fn digest_check(name: &str, kind: &str, record: &Value, digest: &Value) -> Check {
    let digest = string(digest, &format!("{name}: digest")).to_owned();
    assert!(digest.starts_with("sha256:"), "{name}: vector digest {digest:?}");
    Check::new(
        format!("digest {kind} {name}"),
        vec![text("digest"), text("--kind"), text(kind), json_file(record)],
        Expect::Prints(digest),
    )
}

fn validate_check(name: &str, kind: &str, file: Arg, expect: Expect) -> Check {
    Check::new(format!("validate {kind} {name}"), vec![text("validate"), text("--kind"), text(kind), file], expect)
}

fn valid() -> Expect {
    Expect::Prints("valid".to_owned())
}

// ---------------------------------------------------------------------------------------------
// digest
// ---------------------------------------------------------------------------------------------

#[test]
fn digest_prints_every_vector_digest() {
    let designations = support::load_vector(DESIGNATIONS);
    let claims = support::load_vector(CLAIMS);
    let projections = support::load_vector(PROJECTIONS);
    let mut checks = Vec::new();
    for (name, case) in listed(&designations, "valid") {
        assert_eq!(case["digest"], case["record"]["digest"], "{name}: the vector states one digest");
        checks.push(digest_check(&name, DESIGNATION, &case["record"], &case["digest"]));
    }
    for (name, case) in listed(&claims, "valid") {
        assert_eq!(case["digest"], case["record"]["digest"], "{name}: the vector states one digest");
        checks.push(digest_check(&name, CLAIM, &case["record"], &case["digest"]));
    }
    for (name, case) in listed(&projections, "valid") {
        assert_eq!(case["digest"], case["projection"]["digest"], "{name}: the vector states one digest");
        checks.push(digest_check(&name, PROJECTION, &case["projection"], &case["digest"]));
    }
    let leases = endpoint_leases(&projections);
    for (name, lease) in &leases {
        checks.push(digest_check(name, LEASE, lease, &lease["digest"]));
    }
    let expected = designations["valid"].as_array().unwrap().len()
        + claims["valid"].as_array().unwrap().len()
        + projections["valid"].as_array().unwrap().len()
        + leases.len();
    assert_eq!(run_checks(checks), expected);
}

/// README: `digest` ignores the value of the stated `digest` member and applies every other rule
/// of the kind.
/// An invalid record whose only fault is its stated digest therefore prints its content digest
/// (exit 0); every other invalid designation, claim and projection of the vectors exits 1.
#[test]
fn digest_exits_1_for_every_record_invalid_beyond_its_digest() {
    let mut checks = Vec::new();
    let mut only_the_digest_is_wrong = 0;
    for (file, kind, member) in
        [(DESIGNATIONS, DESIGNATION, "record"), (CLAIMS, CLAIM, "record"), (PROJECTIONS, PROJECTION, "projection")]
    {
        let vector = support::load_vector(file);
        let record_kind = cloudly::contract::RecordKind::from_name(kind).unwrap();
        for (name, case) in listed(&vector, "invalid") {
            let record = &case[member];
            let content_digest = record
                .get("digest")
                .and_then(|_| cloudly::contract::kind::compute_digest(record_kind.domain().unwrap(), record).ok());
            let mut restated = record.clone();
            let expect = match content_digest {
                Some(digest)
                    if {
                        restated["digest"] = Value::String(digest.as_str().to_owned());
                        cloudly::contract::dispatch::validate(record_kind, &restated).is_empty()
                    } =>
                {
                    only_the_digest_is_wrong += 1;
                    Expect::Prints(digest.as_str().to_owned())
                }
                _ => Expect::Invalid,
            };
            checks.push(Check::new(
                format!("digest {kind} {name}"),
                vec![text("digest"), text("--kind"), text(kind), json_file(record)],
                expect,
            ));
        }
    }
    // The designation and claim vectors hold one "digest does not match" case each, the designation
    // vector an uppercase digest; the projection's "digest mismatch" also changes `nodeId`.
    assert_eq!(only_the_digest_is_wrong, 3);
    run_checks(checks);
}

// ---------------------------------------------------------------------------------------------
// validate
// ---------------------------------------------------------------------------------------------

#[test]
fn validate_accepts_every_valid_record() {
    let designations = support::load_vector(DESIGNATIONS);
    let claims = support::load_vector(CLAIMS);
    let projections = support::load_vector(PROJECTIONS);
    let registrations = support::load_vector(REGISTRATIONS);
    let mut checks = Vec::new();
    for (name, case) in listed(&designations, "valid") {
        checks.push(validate_check(&name, DESIGNATION, json_file(&case["record"]), valid()));
    }
    for (name, request) in requests(&designations, "valid") {
        checks.push(validate_check(&name, DESIGNATION_REQUEST, json_file(request), valid()));
    }
    for (name, case) in listed(&claims, "valid") {
        checks.push(validate_check(&name, CLAIM, json_file(&case["record"]), valid()));
    }
    for (name, case) in listed(&projections, "valid") {
        checks.push(validate_check(&name, PROJECTION, json_file(&case["projection"]), valid()));
    }
    for (name, lease) in endpoint_leases(&projections) {
        checks.push(validate_check(&name, LEASE, json_file(lease), valid()));
    }
    let mut plain = 0;
    for (name, case) in listed(&registrations, "registrations") {
        if count(&case["violations"], &name) == 0 {
            checks.push(validate_check(&name, REGISTRATION, json_file(&case["value"]), valid()));
            plain += 1;
        }
    }
    for (name, case) in listed(&registrations, "refusals") {
        if count(&case["violations"], &name) == 0 {
            assert!(strings(&case["messages"], &name).is_empty(), "{name}: no violations but messages");
            checks.push(validate_check(&name, REFUSAL, json_file(&case["value"]), valid()));
            plain += 1;
        }
    }
    for (name, case) in listed(&registrations, "routeTableChanges") {
        if strings(&case["messages"], &name).is_empty() {
            checks.push(validate_check(&name, ROUTE_TABLE_CHANGE, json_file(&case["value"]), valid()));
            plain += 1;
        }
    }
    assert!(plain >= 3, "the registration vector holds valid registrations, refusals and route table changes");
    let ran = run_checks(checks);
    assert!(ran > plain);
}

/// Every invalid designation prints exactly the vector's `expect` lines.
#[test]
fn validate_prints_the_vector_messages_of_invalid_designations() {
    let designations = support::load_vector(DESIGNATIONS);
    let mut checks = Vec::new();
    for (name, case) in listed(&designations, "invalid") {
        let expect = strings(&case["expect"], &format!("{name}: expect"));
        assert!(!expect.is_empty(), "{name}: an invalid designation names its violation");
        checks.push(validate_check(&name, DESIGNATION, json_file(&case["record"]), Expect::Violations(expect)));
    }
    assert_eq!(run_checks(checks), designations["invalid"].as_array().unwrap().len());
}

#[test]
fn validate_refuses_every_invalid_record() {
    let designations = support::load_vector(DESIGNATIONS);
    let claims = support::load_vector(CLAIMS);
    let projections = support::load_vector(PROJECTIONS);
    let registrations = support::load_vector(REGISTRATIONS);
    let mut checks = Vec::new();
    for (name, request) in requests(&designations, "invalid") {
        checks.push(validate_check(&name, DESIGNATION_REQUEST, json_file(&request["request"]), Expect::Invalid));
    }
    for (name, case) in listed(&claims, "invalid") {
        checks.push(validate_check(&name, CLAIM, json_file(&case["record"]), Expect::Invalid));
    }
    for (name, case) in listed(&projections, "invalid") {
        checks.push(validate_check(&name, PROJECTION, json_file(&case["projection"]), Expect::Invalid));
    }
    let mut per_list = [0usize; 4];
    for (name, case) in listed(&registrations, "registrations") {
        let violations = count(&case["violations"], &name);
        if violations > 0 {
            checks.push(validate_check(
                &name,
                REGISTRATION,
                json_file(&case["value"]),
                Expect::ViolationCount(violations),
            ));
            per_list[0] += 1;
        }
    }
    for (name, case) in listed(&registrations, "registrationShapeErrors") {
        checks.push(validate_check(&name, REGISTRATION, json_file(&case["value"]), Expect::ViolationCount(1)));
        per_list[1] += 1;
    }
    for (name, case) in listed(&registrations, "refusals") {
        let violations = count(&case["violations"], &name);
        let messages = strings(&case["messages"], &name);
        assert_eq!(messages.len(), violations, "{name}: one message per violation");
        if violations > 0 {
            checks.push(validate_check(&name, REFUSAL, json_file(&case["value"]), Expect::Violations(messages)));
            per_list[2] += 1;
        }
    }
    for (name, case) in listed(&registrations, "routeTableChanges") {
        let messages = strings(&case["messages"], &name);
        if !messages.is_empty() {
            checks.push(validate_check(
                &name,
                ROUTE_TABLE_CHANGE,
                json_file(&case["value"]),
                Expect::Violations(messages),
            ));
            per_list[3] += 1;
        }
    }
    assert!(per_list.iter().all(|&listed| listed > 0), "every plain-data list holds invalid cases: {per_list:?}");
    let expected = designations["requests"]["invalid"].as_array().unwrap().len()
        + claims["invalid"].as_array().unwrap().len()
        + projections["invalid"].as_array().unwrap().len()
        + per_list.iter().sum::<usize>();
    assert_eq!(run_checks(checks), expected);
}

/// README: validators of plain data judge the parsed value, so `1.5` is named by its field's
/// violation, not refused as raw text; a duplicate key is invalid there too.
#[test]
fn plain_data_keeps_its_numbers_for_the_validator() {
    let registrations = support::load_vector(REGISTRATIONS);
    let refusals = listed(&registrations, "refusals");
    let (valid_name, valid_refusal) = refusals
        .iter()
        .find(|(_, case)| count(&case["violations"], "violations") == 0)
        .expect("a valid refusal in the vector");
    // The one message the vector gives for a bad retryAfterMs.
    let mut retry_messages: Vec<String> = refusals
        .iter()
        .flat_map(|(name, case)| strings(&case["messages"], name))
        .filter(|message| message.contains("retryAfterMs"))
        .collect();
    retry_messages.sort();
    retry_messages.dedup();
    assert_eq!(retry_messages.len(), 1, "one retryAfterMs message in the vector: {retry_messages:?}");

    let mut fractional = valid_refusal["value"].as_object().expect("a refusal is an object").clone();
    fractional.insert("retryAfterMs".to_owned(), serde_json::json!(1.5));
    let fractional_text = serde_json::to_string(&Value::Object(fractional)).unwrap();
    assert!(fractional_text.contains("\"retryAfterMs\":1.5"), "{fractional_text}");

    let valid_text = serde_json::to_string(&valid_refusal["value"]).unwrap();
    let duplicated = duplicate_first_member(&valid_refusal["value"]);
    let registration = listed(&registrations, "registrations")
        .into_iter()
        .find(|(_, case)| count(&case["violations"], "violations") == 0)
        .expect("a valid registration in the vector")
        .1;
    run_checks(vec![
        validate_check(&format!("{valid_name} as text"), REFUSAL, Arg::File(valid_text), valid()),
        validate_check("retryAfterMs 1.5", REFUSAL, Arg::File(fractional_text), Expect::Violations(retry_messages)),
        validate_check("refusal with a duplicate key", REFUSAL, Arg::File(duplicated), Expect::Invalid),
        validate_check(
            "registration with a duplicate key",
            REGISTRATION,
            Arg::File(duplicate_first_member(&registration["value"])),
            Expect::Invalid,
        ),
    ]);
}

// ---------------------------------------------------------------------------------------------
// Raw-text rules
// ---------------------------------------------------------------------------------------------

/// Writes `value` as compact JSON text, with the first number for which `literal` answers written
/// as that literal instead. Returns `None` when no number was replaced.
fn text_with_literal(value: &Value, literal: &mut dyn FnMut(i64) -> Option<String>) -> Option<String> {
    fn write(value: &Value, literal: &mut dyn FnMut(i64) -> Option<String>, done: &mut bool, out: &mut String) {
        match value {
            Value::Number(number) if !*done => {
                let integer = number.as_i64().expect("vector records hold integers");
                match literal(integer) {
                    Some(text) => {
                        *done = true;
                        out.push_str(&text);
                    }
                    None => out.push_str(&number.to_string()),
                }
            }
            Value::Array(items) => {
                out.push('[');
                for (index, item) in items.iter().enumerate() {
                    if index > 0 {
                        out.push(',');
                    }
                    write(item, literal, done, out);
                }
                out.push(']');
            }
            Value::Object(members) => {
                out.push('{');
                for (index, (key, member)) in members.iter().enumerate() {
                    if index > 0 {
                        out.push(',');
                    }
                    out.push_str(&serde_json::to_string(key).unwrap());
                    out.push(':');
                    write(member, literal, done, out);
                }
                out.push('}');
            }
            other => out.push_str(&serde_json::to_string(other).unwrap()),
        }
    }
    let mut done = false;
    let mut out = String::new();
    write(value, literal, &mut done, &mut out);
    done.then_some(out)
}

/// The object's compact text with its first member written a second time (same key, same value).
fn duplicate_first_member(value: &Value) -> String {
    let members: &Map<String, Value> = value.as_object().expect("an object");
    let (key, member) = members.iter().next().expect("a member");
    let text = serde_json::to_string(value).unwrap();
    let body = text.strip_suffix('}').unwrap();
    let duplicated =
        format!("{body},{}:{}}}", serde_json::to_string(key).unwrap(), serde_json::to_string(member).unwrap());
    assert_eq!(duplicated.matches(&format!("{}:", serde_json::to_string(key).unwrap())).count(), 2, "{duplicated}");
    duplicated
}

/// Texts of valid claims that break exactly one raw-text rule each, with the same values where a
/// literal allows it: a duplicate key, `1.0`, `1e3`, `-0`, and 2^53.
fn claim_raw_text_variants(claims: &Value) -> Vec<(String, String)> {
    let valid = listed(claims, "valid");
    let records: Vec<&Value> = valid.iter().map(|(_, case)| &case["record"]).collect();
    // The first valid claim for which `literal` finds a number to rewrite.
    let variant = |what: &str, literal: &dyn Fn(i64) -> Option<String>| -> (String, String) {
        records
            .iter()
            .find_map(|record| text_with_literal(record, &mut |integer| literal(integer)))
            .map(|text| (what.to_owned(), text))
            .unwrap_or_else(|| panic!("no valid claim has a number to write as {what}"))
    };
    let mut variants = vec![
        ("duplicate key".to_owned(), duplicate_first_member(records[0])),
        variant("a fraction (1.0)", &|integer| Some(format!("{integer}.0"))),
        variant("an exponent (1e3)", &|integer| {
            (integer != 0 && integer % 1000 == 0).then(|| format!("{}e3", integer / 1000))
        }),
        variant("an exponent (e0)", &|integer| Some(format!("{integer}e0"))),
        variant("2^53", &|_| Some("9007199254740992".to_owned())),
    ];
    // `-0`: a zero written negative if a valid claim holds a zero, else any number.
    let minus_zero = records
        .iter()
        .find_map(|record| text_with_literal(record, &mut |integer| (integer == 0).then(|| "-0".to_owned())))
        .unwrap_or_else(|| text_with_literal(records[0], &mut |_| Some("-0".to_owned())).expect("a number"));
    variants.push(("-0".to_owned(), minus_zero));
    variants
}

/// Every raw-text violation is an invalid record: exit 1, a violation on stdout.
#[test]
fn raw_text_rules_make_records_invalid() {
    let designations = support::load_vector(DESIGNATIONS);
    let claims = support::load_vector(CLAIMS);
    let mut checks = Vec::new();
    for (name, case) in listed(&designations, "rawInvalid") {
        let raw = string(&case["text"], &name).to_owned();
        checks.push(validate_check(
            &format!("rawInvalid {name}"),
            DESIGNATION,
            Arg::File(raw.clone()),
            Expect::Invalid,
        ));
        checks.push(Check::new(
            format!("digest rawInvalid {name}"),
            vec![text("digest"), text("--kind"), text(DESIGNATION), Arg::File(raw)],
            Expect::Invalid,
        ));
    }
    // Control: the writer of the variants produces valid text when it changes nothing.
    let first_claim = &listed(&claims, "valid")[0].1["record"];
    let unchanged = text_with_literal(first_claim, &mut |integer| Some(integer.to_string())).unwrap();
    checks.push(validate_check("claim text as written by the variant writer", CLAIM, Arg::File(unchanged), valid()));
    let variants = claim_raw_text_variants(&claims);
    for (what, raw) in &variants {
        checks.push(validate_check(&format!("claim with {what}"), CLAIM, Arg::File(raw.clone()), Expect::Invalid));
    }
    // The designation request is read under the raw-text rules too.
    let request = requests(&designations, "valid")[0].1;
    let request_fraction = text_with_literal(request, &mut |integer| Some(format!("{integer}.0"))).expect("a number");
    checks.push(validate_check(
        "request with a fraction",
        DESIGNATION_REQUEST,
        Arg::File(request_fraction),
        Expect::Invalid,
    ));
    checks.push(validate_check(
        "request with a duplicate key",
        DESIGNATION_REQUEST,
        Arg::File(duplicate_first_member(request)),
        Expect::Invalid,
    ));
    let expected = 2 * designations["rawInvalid"].as_array().unwrap().len() + 1 + variants.len() + 2;
    assert_eq!(run_checks(checks), expected);
}

/// `01-contract-basics.md`, "Raw JSON text": a raw-text violation is "rejected like any schema
/// failure (for a designation: `cluster ingress designation must use its exact canonical
/// schema`)". The schema failure of a kind is what `validate` prints for a valid record with one
/// unknown member added.
#[test]
fn raw_text_violations_read_as_schema_failures() {
    let designations = support::load_vector(DESIGNATIONS);
    let claims = support::load_vector(CLAIMS);
    let schema_failure = |kind: &str, record: &Value| -> Vec<String> {
        let mut extended = record.as_object().expect("a record is an object").clone();
        extended.insert("unknownMember".to_owned(), Value::Bool(true));
        let outcome = run(&[text("validate"), text("--kind"), text(kind), json_file(&Value::Object(extended))]);
        assert_eq!(outcome.code, Some(1), "{kind} with an unknown member: {:?}", outcome.stdout);
        let failure: Vec<String> = outcome.stdout.lines().map(str::to_owned).collect();
        assert_eq!(failure.len(), 1, "{kind}: one schema failure line: {failure:?}");
        failure
    };
    let designation_failure = schema_failure(DESIGNATION, &listed(&designations, "valid")[0].1["record"]);
    // The vector names the same message for its schema failures.
    assert!(
        listed(&designations, "invalid")
            .iter()
            .any(|(_, case)| case["expect"] == serde_json::json!(designation_failure)),
        "the designation vector expects {designation_failure:?} somewhere"
    );
    let claim_failure = schema_failure(CLAIM, &listed(&claims, "valid")[0].1["record"]);
    let mut checks = Vec::new();
    for (name, case) in listed(&designations, "rawInvalid") {
        checks.push(validate_check(
            &format!("rawInvalid {name}"),
            DESIGNATION,
            Arg::File(string(&case["text"], &name).to_owned()),
            Expect::Violations(designation_failure.clone()),
        ));
    }
    for (what, raw) in claim_raw_text_variants(&claims) {
        checks.push(validate_check(
            &format!("claim with {what}"),
            CLAIM,
            Arg::File(raw),
            Expect::Violations(claim_failure.clone()),
        ));
    }
    run_checks(checks);
}

// ---------------------------------------------------------------------------------------------
// Exit 2
// ---------------------------------------------------------------------------------------------

#[test]
fn unjudgeable_inputs_exit_2_with_one_error_line() {
    let designations = support::load_vector(DESIGNATIONS);
    let signatures = support::load_vector(SIGNATURES);
    let record = json_file(&listed(&designations, "valid")[0].1["record"]);
    let public_key = string(&signatures["publicKey"], "publicKey").to_owned();
    let first_signed = || json_file(&listed(&signatures, "valid")[0].1["signed"]);
    let unjudgeable = Expect::Unjudgeable;
    let mut checks = vec![Check::new(
        "validate an unknown kind",
        vec![text("validate"), text("--kind"), text("no-such-kind"), record],
        unjudgeable.clone(),
    )];
    checks.push(Check::new(
        "digest an unknown kind",
        vec![text("digest"), text("--kind"), text("no-such-kind"), json_file(&Value::Null)],
        unjudgeable.clone(),
    ));
    // Not JSON at all, under a raw-text kind and under a plain-data kind.
    for kind in [DESIGNATION, DESIGNATION_REQUEST, CLAIM, REGISTRATION, REFUSAL, ROUTE_TABLE_CHANGE] {
        checks.push(validate_check(&format!("{kind} `{{`"), kind, Arg::File("{".to_owned()), unjudgeable.clone()));
    }
    checks.push(Check::new(
        "digest `{`",
        vec![text("digest"), text("--kind"), text(DESIGNATION), Arg::File("{".to_owned())],
        unjudgeable.clone(),
    ));
    // Unreadable paths, for every command.
    for (what, path) in [("a missing file", Arg::MissingFile), ("a directory", Arg::Directory)] {
        checks.push(validate_check(&format!("validate {what}"), DESIGNATION, path.clone(), unjudgeable.clone()));
        checks.push(Check::new(
            format!("digest {what}"),
            vec![text("digest"), text("--kind"), text(DESIGNATION), path.clone()],
            unjudgeable.clone(),
        ));
        checks.push(Check::new(
            format!("verify {what}"),
            vec![text("verify"), text("--kind"), text(CLAIM), text("--public-key"), text(&public_key), path.clone()],
            unjudgeable.clone(),
        ));
        checks.push(Check::new(
            format!("admit-projection --next {what}"),
            vec![text("admit-projection"), text("--next"), path.clone()],
            unjudgeable.clone(),
        ));
    }
    // Kinds without a digest.
    let mut digestless = 0;
    for kind in RecordKind::ALL.into_iter().filter(|kind| kind.domain().is_none()) {
        checks.push(Check::new(
            format!("digest --kind {}", kind.name()),
            vec![text("digest"), text("--kind"), text(kind.name()), json_file(&Value::Null)],
            unjudgeable.clone(),
        ));
        digestless += 1;
    }
    assert!(digestless > 0 && RecordKind::from_name(REGISTRATION).unwrap().domain().is_none());
    // Malformed keys.
    for key in ["abc".to_owned(), format!("{public_key}="), public_key[..public_key.len() - 1].to_owned()] {
        checks.push(Check::new(
            format!("verify --public-key {key:?}"),
            vec![text("verify"), text("--kind"), text(CLAIM), text("--public-key"), text(&key), first_signed()],
            unjudgeable.clone(),
        ));
    }
    // Kinds that do not travel signed.
    let mut unsigned = 0;
    for kind in RecordKind::ALL.into_iter().map(RecordKind::name).filter(|kind| !SIGNED_KINDS.contains(kind)) {
        checks.push(Check::new(
            format!("verify --kind {kind}"),
            vec![text("verify"), text("--kind"), text(kind), text("--public-key"), text(&public_key), first_signed()],
            unjudgeable.clone(),
        ));
        unsigned += 1;
    }
    assert!(unsigned > 0);
    run_checks(checks);
}

// ---------------------------------------------------------------------------------------------
// verify
// ---------------------------------------------------------------------------------------------

fn verify_check(name: &str, kind: &str, key: &str, signed: &Value, expect: Expect) -> Check {
    Check::new(
        format!("verify {kind} {name}"),
        vec![text("verify"), text("--kind"), text(kind), text("--public-key"), text(key), json_file(signed)],
        expect,
    )
}

#[test]
fn verify_judges_every_signed_vector() {
    let signatures = support::load_vector(SIGNATURES);
    let key = string(&signatures["publicKey"], "publicKey");
    // A well-formed key that did not sign anything in the vector.
    let other_key = URL_SAFE_NO_PAD.encode(ed25519_dalek::SigningKey::from_bytes(&[7; 32]).verifying_key().as_bytes());
    assert_ne!(other_key, key);
    let mut checks = Vec::new();
    let valid = listed(&signatures, "valid");
    let invalid = listed(&signatures, "invalid");
    let signed_kinds: Vec<&str> = valid.iter().map(|(name, case)| string(&case["kind"], name)).collect();
    for (name, case) in &valid {
        let kind = string(&case["kind"], name);
        assert!(SIGNED_KINDS.contains(&kind), "{name}: {kind} travels signed");
        checks.push(verify_check(name, kind, key, &case["signed"], Expect::Prints("verified".to_owned())));
        checks.push(verify_check(
            &format!("{name} under another key"),
            kind,
            &other_key,
            &case["signed"],
            Expect::Invalid,
        ));
        for other_kind in signed_kinds.iter().filter(|other| **other != kind) {
            checks.push(verify_check(
                &format!("{name} as {other_kind}"),
                other_kind,
                key,
                &case["signed"],
                Expect::Invalid,
            ));
        }
    }
    for (name, case) in &invalid {
        let kind = string(&case["kind"], name);
        checks.push(verify_check(name, kind, key, &case["signed"], Expect::Invalid));
    }
    let ran = run_checks(checks);
    assert!(ran >= 2 * valid.len() + invalid.len());
}

// ---------------------------------------------------------------------------------------------
// admit-projection
// ---------------------------------------------------------------------------------------------

#[test]
fn admit_projection_reproduces_every_admission() {
    let projections = support::load_vector(PROJECTIONS);
    let mut checks = Vec::new();
    let mut seen = [0usize; 3];
    for (name, case) in listed(&projections, "admissions") {
        let mut args = vec![text("admit-projection"), text("--next"), json_file(&case["next"])];
        if !case["previous"].is_null() {
            args.extend([text("--previous"), json_file(&case["previous"])]);
        }
        if !case["applied"].is_null() {
            args.extend([text("--applied"), json_file(&case["applied"])]);
        }
        let expect = match string(&case["expect"], &name) {
            "accepted" => {
                seen[0] += 1;
                Expect::Prints("accepted".to_owned())
            }
            "replay" => {
                seen[1] += 1;
                Expect::Prints("replay".to_owned())
            }
            "reject" => {
                seen[2] += 1;
                Expect::Invalid
            }
            other => panic!("{name}: unknown expectation {other:?}"),
        };
        checks.push(Check::new(format!("admit-projection {name}"), args, expect));
    }
    assert!(seen.iter().all(|&count| count > 0), "accepted, replay and reject all occur: {seen:?}");
    assert_eq!(run_checks(checks), projections["admissions"].as_array().unwrap().len());
}

// ---------------------------------------------------------------------------------------------
// README examples
// ---------------------------------------------------------------------------------------------

fn fixture(name: &str) -> (PathBuf, Value) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests").join("fixtures").join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|error| panic!("read {}: {error}", path.display()));
    (path, serde_json::from_str(&text).unwrap_or_else(|error| panic!("parse {name}: {error}")))
}

/// `tests/fixtures/` holds the first valid designation and request of the vectors, for README
/// examples; `validate` accepts both.
#[test]
fn readme_fixtures_are_the_vectors_and_valid() {
    let designations = support::load_vector(DESIGNATIONS);
    let (designation_path, designation) = fixture("designation.json");
    let (request_path, request) = fixture("designation-request.json");
    assert_eq!(designation, listed(&designations, "valid")[0].1["record"], "designation.json drifted from the vector");
    assert_eq!(request, *requests(&designations, "valid")[0].1, "designation-request.json drifted from the vector");
    for (kind, path) in [(DESIGNATION, &designation_path), (DESIGNATION_REQUEST, &request_path)] {
        let output = Command::new(env!("CARGO_BIN_EXE_cloudly"))
            .args(["contract", "validate", "--kind", kind])
            .arg(path)
            .output()
            .expect("the cloudly binary runs");
        let outcome = Outcome {
            code: output.status.code(),
            stdout: String::from_utf8(output.stdout).unwrap(),
            stderr: String::from_utf8(output.stderr).unwrap(),
        };
        assert!(judge(&outcome, &valid()).is_none(), "{}: {:?}", path.display(), judge(&outcome, &valid()));
    }
}
