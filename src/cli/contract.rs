//! `cloudly contract …`: lets operators and other implementations check records against this
//! contract layer.
//!
//! Exit codes are an interface: 0 = valid / verified / admitted, 1 = the record is invalid (every
//! violation printed, one per line), 2 = the command could not judge (unreadable file, text that
//! is not JSON at all, unknown kind, a kind without that operation, a malformed key).

use crate::contract::json::{TextError, parse_plain_text, parse_record_text};
use crate::contract::{RecordKind, assignment, dispatch, network, signing, storage_claim};
use clap::Subcommand;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Debug, Subcommand)]
pub enum ContractCommand {
    /// Print the digest (`sha256:…`) of a digested record.
    #[command(
        after_help = "Examples:\n  cloudly contract digest --kind cluster-ingress-designation tests/fixtures/designation.json"
    )]
    Digest {
        /// The record kind, e.g. `cluster-ingress-designation`.
        #[arg(long)]
        kind: String,
        /// The record's JSON file.
        file: PathBuf,
    },
    /// Print every violation of a record; exit 1 when there is one.
    #[command(
        after_help = "Examples:\n  cloudly contract validate --kind cluster-ingress-designation tests/fixtures/designation.json"
    )]
    Validate {
        /// The record kind, e.g. `runtime-local-storage-claim`.
        #[arg(long)]
        kind: String,
        /// The record's JSON file.
        file: PathBuf,
    },
    /// Verify an `ISigned<T>` envelope of the kind against one public key.
    #[command(
        after_help = "Examples:\n  cloudly contract verify --kind runtime-assignment --public-key <base64url key> assignment.json"
    )]
    Verify {
        /// The payload's record kind (fixes the domain and the schema).
        #[arg(long)]
        kind: String,
        /// Unpadded base64url of the raw 32-byte Ed25519 public key.
        #[arg(long = "public-key")]
        public_key: String,
        /// The signed envelope's JSON file.
        file: PathBuf,
    },
    /// Run `admitRuntimeNetworkProjection(previous, next, applied)`.
    #[command(
        after_help = "Examples:\n  cloudly contract admit-projection --next next.json --previous previous.json --applied applied.json"
    )]
    AdmitProjection {
        /// The projection to admit.
        #[arg(long)]
        next: PathBuf,
        /// The node's previous projection.
        #[arg(long)]
        previous: Option<PathBuf>,
        /// The reference of the node's joined application of the previous projection.
        #[arg(long)]
        applied: Option<PathBuf>,
    },
}

/// A failure that ends the command: an invalid record (exit 1) or no judgement possible (exit 2).
enum Failure {
    Invalid(Vec<String>),
    Unjudgeable(String),
}

pub fn run(command: ContractCommand) -> ExitCode {
    let outcome = match command {
        ContractCommand::Digest { kind, file } => digest(&kind, &file),
        ContractCommand::Validate { kind, file } => validate(&kind, &file),
        ContractCommand::Verify { kind, public_key, file } => verify(&kind, &public_key, &file),
        ContractCommand::AdmitProjection { next, previous, applied } => {
            admit_projection(&next, previous.as_deref(), applied.as_deref())
        }
    };
    match outcome {
        Ok(line) => {
            super::output::stdout_line(&line);
            ExitCode::SUCCESS
        }
        Err(Failure::Invalid(violations)) => {
            for violation in violations {
                super::output::stdout_line(&violation);
            }
            ExitCode::from(1)
        }
        Err(Failure::Unjudgeable(message)) => {
            super::output::error_line(message);
            ExitCode::from(2)
        }
    }
}

fn kind_named(name: &str) -> Result<RecordKind, Failure> {
    RecordKind::from_name(name).ok_or_else(|| {
        let known: Vec<&str> = RecordKind::ALL.iter().map(|kind| kind.name()).collect();
        Failure::Unjudgeable(format!("unknown kind {name:?}; known kinds: {}", known.join(", ")))
    })
}

fn read_text(path: &Path) -> Result<String, Failure> {
    std::fs::read_to_string(path)
        .map_err(|error| Failure::Unjudgeable(format!("cannot read {}: {error}", path.display())))
}

/// Reads a record file under the text rules of its kind: digested records (and the designation
/// request) under the raw-text rules, plain data keeping its numbers for the validator to name.
/// Text that breaks a raw-text rule is an invalid record, named like any schema failure of the
/// kind (`01-contract-basics.md`, "Raw JSON text").
fn read_record(path: &Path, kind: RecordKind) -> Result<Value, Failure> {
    let text = read_text(path)?;
    let parsed = if kind.is_raw_text_record() { parse_record_text(&text) } else { parse_plain_text(&text) };
    parsed.map_err(|error| match error {
        TextError::NotJson(detail) => Failure::Unjudgeable(format!("{} is not JSON: {detail}", path.display())),
        // A value that is not an object is exactly one schema failure of the kind.
        _ => Failure::Invalid(dispatch::validate(kind, &Value::Null)),
    })
}

/// Prints the digest of the record's content. The value of the stated `digest` member is ignored
/// (the member must be present, but it is not hashed), so the command also computes the digest of
/// a record being written; every other rule of the kind applies, and a record that breaks one is
/// invalid (exit 1).
fn digest(kind_name: &str, path: &Path) -> Result<String, Failure> {
    let kind = kind_named(kind_name)?;
    if dispatch::digest(kind, &Value::Null).is_none() {
        return Err(Failure::Unjudgeable(format!("kind {} has no digest", kind.name())));
    }
    let mut value = read_record(path, kind)?;
    if let Some(stated) = value.get_mut("digest") {
        *stated = Value::String(format!("sha256:{}", "0".repeat(64)));
    }
    let digest = match dispatch::digest(kind, &value) {
        Some(Ok(digest)) => digest,
        _ => return Err(Failure::Invalid(dispatch::validate(kind, &value))),
    };
    value["digest"] = Value::String(digest.as_str().to_owned());
    let violations = dispatch::validate(kind, &value);
    if violations.is_empty() { Ok(digest.as_str().to_owned()) } else { Err(Failure::Invalid(violations)) }
}

fn validate(kind_name: &str, path: &Path) -> Result<String, Failure> {
    let kind = kind_named(kind_name)?;
    if kind == RecordKind::RuntimeNetworkProjection {
        // A projection can be megabytes: the typed text reader judges a valid one without building a
        // JSON value first (about 4× faster on a maximal projection, `cargo bench --bench contract`).
        // A rejected one is read again the generic way below, so every violation is named.
        if network::text::validate_runtime_network_projection_text(&read_text(path)?).is_ok() {
            return Ok("valid".to_owned());
        }
    }
    let value = read_record(path, kind)?;
    let violations = dispatch::validate(kind, &value);
    if violations.is_empty() { Ok("valid".to_owned()) } else { Err(Failure::Invalid(violations)) }
}

fn verify(kind_name: &str, public_key: &str, path: &Path) -> Result<String, Failure> {
    let kind = kind_named(kind_name)?;
    let key = signing::decode_public_key(public_key).ok_or_else(|| {
        Failure::Unjudgeable("--public-key must be unpadded base64url of a 32-byte Ed25519 public key".to_owned())
    })?;
    let keys = [signing::PublishedKey::new(key)];
    if !signing::SIGNED_KINDS.contains(&kind) {
        return Err(Failure::Unjudgeable(format!("kind {} is not a signed record kind", kind.name())));
    }
    // The envelope is read under the raw-text rules: its payload is a digested record.
    let envelope = read_record(path, kind)?;
    let verified = match kind {
        RecordKind::RuntimeNetworkProjection => {
            signing::verify::<network::projection::RuntimeNetworkProjection>(&envelope, &keys).map(|_| ())
        }
        RecordKind::RuntimeLocalStorageClaim => {
            signing::verify::<storage_claim::RuntimeLocalStorageClaim>(&envelope, &keys).map(|_| ())
        }
        RecordKind::RuntimeAssignment => signing::verify::<assignment::RuntimeAssignment>(&envelope, &keys).map(|_| ()),
        other => return Err(Failure::Unjudgeable(format!("kind {} is not a signed record kind", other.name()))),
    };
    verified.map(|()| "verified".to_owned()).map_err(|error| Failure::Invalid(vec![error.to_string()]))
}

fn admit_projection(next: &Path, previous: Option<&Path>, applied: Option<&Path>) -> Result<String, Failure> {
    let kind = RecordKind::RuntimeNetworkProjection;
    let next = read_record(next, kind)?;
    let previous = previous.map(|path| read_record(path, kind)).transpose()?;
    let applied = applied
        .map(|path| {
            let value = read_record(path, kind)?;
            crate::contract::reader::Record::exact(&value, &["id", "generation", "digest"])
                .and_then(|_| crate::contract::AuthorityReference::read(&value))
                .map_err(|_| Failure::Invalid(vec!["applied must be an IRuntimeAuthorityReference".to_owned()]))
        })
        .transpose()?;
    let admission = network::projection::admit_runtime_network_projection(previous.as_ref(), &next, applied.as_ref())
        .map_err(|rejected| Failure::Invalid(vec![rejected.to_string()]))?;
    Ok(match admission.status {
        network::projection::AdmissionStatus::Accepted => "accepted",
        network::projection::AdmissionStatus::Replay => "replay",
    }
    .to_owned())
}
