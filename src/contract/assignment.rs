//! Runtime assignments (seed `data/runtimeassignment.ts`, `04-registration.md`, "Node sessions and
//! assignments"): the controller's signed order to run one replica of a service on one node.
//!
//! The seed shows the assignment's members but not every bound; the bounds this project chose are
//! the `MAXIMUM_*` constants below, and the service runtime spec refuses a spec whose assignment
//! could not hold them (`environment-too-large`, `ports-too-many`).

use super::designation::SecretVersionReference;
use super::kind::{DigestedRecord, RecordKind, Rejected, digested_record, validate_digested};
use super::primitives::{Id, NodeId, Protocol, Sha256Digest};
use super::reader::{
    Invalid, Parsed, Record, compare_bytes, counter, digest, id, list, node_id, port, protocol, require,
    strictly_ascending, string,
};
use super::reference::{AuthorityReference, REVISED_RECORD_KEYS, Revision};
use super::session::ControllerReference;
use serde::ser::SerializeStruct;
use serde::{Serialize, Serializer};
use serde_json::Value;

const KIND: RecordKind = RecordKind::RuntimeAssignment;

/// `runtimeAssignmentContract.error`: the assignment's one fixed rejection message.
pub const CONTRACT_ERROR: &str = "Runtime assignment contract rejected.";

/// `runtimeAssignmentContract.digestDomain`.
pub const DIGEST_DOMAIN: &str = "serve.zone/runtime-assignment";

/// The longest `IRuntimeAssignment['workload']['image']`, in characters (Unicode scalar values);
/// the shortest is 1 (the spec's `1..512 chars`).
pub const MAXIMUM_IMAGE_CHARS: usize = 512;

/// The most `IRuntimeAssignment['workload']['environment']` entries (this project's bound; the
/// seed states none).
pub const MAXIMUM_ENVIRONMENT_ENTRIES: usize = 256;

/// The longest environment `name` of `IRuntimeAssignment['workload']['environment']`, in bytes
/// (this project's bound).
pub const MAXIMUM_ENVIRONMENT_NAME_BYTES: usize = 256;

/// The longest plain environment `value` of `IRuntimeAssignment['workload']['environment']`, in
/// UTF-8 bytes (32 KiB; this project's bound).
pub const MAXIMUM_ENVIRONMENT_VALUE_BYTES: usize = 32 * 1024;

/// The most bytes of all `IRuntimeAssignment['workload']['environment']` names and plain values
/// together (256 KiB; this project's bound), so that a node's full assignment set stays far below
/// one WebSocket frame.
pub const MAXIMUM_ENVIRONMENT_TOTAL_BYTES: usize = 256 * 1024;

/// The most `IRuntimeAssignment['workload']['ports']` (`runtimeConfigContract.maximumTargetPorts`).
pub const MAXIMUM_WORKLOAD_PORTS: usize = 64;

/// The most `IRuntimeAssignment['workload']['storage']` claim references (this project's bound).
pub const MAXIMUM_WORKLOAD_STORAGE: usize = 64;

/// True when `text` can be `IRuntimeAssignment['workload']['image']` (and `IServiceRuntimeSpec.image`):
/// 1 to [`MAXIMUM_IMAGE_CHARS`] characters.
pub fn is_workload_image(text: &str) -> bool {
    !text.is_empty() && text.chars().count() <= MAXIMUM_IMAGE_CHARS
}

/// True when `text` can be an environment `name` of `IRuntimeAssignment['workload']['environment']`
/// (and of `IServiceRuntimeSpec.environment`): `^[A-Z_][A-Z0-9_]*$`, at most
/// [`MAXIMUM_ENVIRONMENT_NAME_BYTES`] bytes.
pub fn is_environment_name(text: &str) -> bool {
    let bytes = text.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= MAXIMUM_ENVIRONMENT_NAME_BYTES
        && (bytes[0].is_ascii_uppercase() || bytes[0] == b'_')
        && bytes.iter().all(|byte| byte.is_ascii_uppercase() || byte.is_ascii_digit() || *byte == b'_')
}

/// True when `text` can be a plain environment `value` of `IRuntimeAssignment['workload']['environment']`
/// (and of `IServiceRuntimeSpec.environment`): at most [`MAXIMUM_ENVIRONMENT_VALUE_BYTES`]
/// bytes and no NUL (a process environment cannot carry one).
pub fn is_environment_value(text: &str) -> bool {
    text.len() <= MAXIMUM_ENVIRONMENT_VALUE_BYTES && !text.contains('\0')
}

/// The `name` of an `IRuntimeAssignment['workload']['environment']` entry (`^[A-Z_][A-Z0-9_]*$`),
/// valid by construction.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EnvironmentName(String);

impl EnvironmentName {
    /// Parses the name, or `None` when it breaks [`is_environment_name`].
    pub fn parse(text: &str) -> Option<Self> {
        is_environment_name(text).then(|| EnvironmentName(text.to_owned()))
    }

    /// The name's text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Serialize for EnvironmentName {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}

/// What one environment entry binds its name to: a plain value or a secret version.
///
/// Seed counterpart: the two shapes of an `IRuntimeAssignment['workload']['environment']` entry,
/// `{ name, value }` and `{ name, secret: { secretId, secretVersionId } }`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum EnvironmentSource {
    /// `value`: the plain text, written into the record.
    Value(String),
    /// `secret`: a secret version, resolved only over the node's session
    /// (`resolveRuntimeSecretBindings`), never written into the record.
    Secret(SecretVersionReference),
}

/// One entry of `IRuntimeAssignment['workload']['environment']`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct EnvironmentEntry {
    /// The variable name.
    pub name: EnvironmentName,
    /// Its value or secret binding.
    pub source: EnvironmentSource,
}

impl EnvironmentEntry {
    fn read(value: &Value) -> Parsed<Self> {
        let object = value.as_object().ok_or(Invalid)?;
        let source = if object.contains_key("secret") {
            let record = Record::exact(value, &["name", "secret"])?;
            EnvironmentSource::Secret(record.read("secret", SecretVersionReference::read)?)
        } else {
            let record = Record::exact(value, &["name", "value"])?;
            let text = record.read("value", string)?;
            require(is_environment_value(text))?;
            EnvironmentSource::Value(text.to_owned())
        };
        let name = EnvironmentName::parse(string(&object["name"])?).ok_or(Invalid)?;
        Ok(EnvironmentEntry { name, source })
    }

    /// The bytes the entry costs against [`MAXIMUM_ENVIRONMENT_TOTAL_BYTES`]: its name plus its
    /// plain value (a secret binding's value is not in the record).
    pub fn weight(&self) -> usize {
        self.name.as_str().len()
            + match &self.source {
                EnvironmentSource::Value(text) => text.len(),
                EnvironmentSource::Secret(_) => 0,
            }
    }
}

impl Serialize for EnvironmentEntry {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut state = serializer.serialize_struct("EnvironmentEntry", 2)?;
        state.serialize_field("name", &self.name)?;
        match &self.source {
            EnvironmentSource::Value(text) => state.serialize_field("value", text)?,
            EnvironmentSource::Secret(secret) => state.serialize_field("secret", secret)?,
        }
        state.end()
    }
}

/// One entry of `IRuntimeAssignment['workload']['ports']`: `{ protocol, port }`. Orders by
/// `[protocol, port]` with `tcp` before `udp` (the derived order follows the field order).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct WorkloadPort {
    /// `tcp` or `udp`.
    pub protocol: Protocol,
    /// The workload's listening port.
    pub port: u16,
}

impl WorkloadPort {
    fn read(value: &Value) -> Parsed<Self> {
        let record = Record::exact(value, &["protocol", "port"])?;
        Ok(WorkloadPort { protocol: record.read("protocol", protocol)?, port: record.read("port", port)? })
    }
}

/// `IRuntimeAssignment['workload']`: `{ image, environment, ports, storage }`, exact keys.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RuntimeWorkload {
    /// The container image, 1 to 512 characters.
    pub image: String,
    /// Sorted by name (byte-wise), unique.
    pub environment: Vec<EnvironmentEntry>,
    /// Sorted by `[protocol, port]`, unique.
    pub ports: Vec<WorkloadPort>,
    /// References of the local storage claims the workload mounts, sorted by id, unique ids.
    pub storage: Vec<AuthorityReference>,
}

impl RuntimeWorkload {
    fn read(value: &Value) -> Parsed<Self> {
        let record = Record::exact(value, &["image", "environment", "ports", "storage"])?;
        let image = record.read("image", string)?;
        require(is_workload_image(image))?;
        let environment =
            record.read("environment", |value| list(value, MAXIMUM_ENVIRONMENT_ENTRIES, EnvironmentEntry::read))?;
        strictly_ascending(&environment, |left, right| compare_bytes(left.name.as_str(), right.name.as_str()))?;
        require(environment.iter().map(EnvironmentEntry::weight).sum::<usize>() <= MAXIMUM_ENVIRONMENT_TOTAL_BYTES)?;
        let ports = record.read("ports", |value| list(value, MAXIMUM_WORKLOAD_PORTS, WorkloadPort::read))?;
        strictly_ascending(&ports, WorkloadPort::cmp)?;
        let storage =
            record.read("storage", |value| list(value, MAXIMUM_WORKLOAD_STORAGE, AuthorityReference::read))?;
        strictly_ascending(&storage, |left, right| compare_bytes(left.id.as_str(), right.id.as_str()))?;
        Ok(RuntimeWorkload { image: image.to_owned(), environment, ports, storage })
    }

    /// The environment entry named `name`, if any (the list is sorted, so this is a binary search).
    pub fn environment_entry(&self, name: &str) -> Option<&EnvironmentEntry> {
        self.environment
            .binary_search_by(|entry| compare_bytes(entry.name.as_str(), name))
            .ok()
            .map(|index| &self.environment[index])
    }
}

/// `IRuntimeAssignment`: one replica of one service spec revision on one node, a revised record
/// hashed under `serve.zone/runtime-assignment` and signed for the node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeAssignment {
    /// Stable across the assignment's generations.
    pub id: Id,
    /// ≥ 1.
    pub generation: u64,
    /// The previous generation's reference, `None` for generation 1.
    pub previous: Option<AuthorityReference>,
    /// The issuing controller.
    pub controller: ControllerReference,
    /// The service's organization.
    pub organization_id: Id,
    /// The cluster.
    pub cluster_id: Id,
    /// The node the replica runs on.
    pub node_id: NodeId,
    /// The node's runtime namespace.
    pub runtime_namespace: Id,
    /// The service.
    pub service_id: Id,
    /// The service runtime spec revision the assignment carries.
    pub spec_revision: u64,
    /// What the node runs.
    pub workload: RuntimeWorkload,
    /// The digest of the rest.
    pub digest: Sha256Digest,
}

digested_record!(revised RuntimeAssignment, KIND, snapshot_runtime_assignment);

/// `snapshotRuntimeAssignment`: detached exact-schema snapshot; the digest is a separate check.
pub fn snapshot_runtime_assignment(value: &Value) -> Result<RuntimeAssignment, Rejected> {
    read_assignment(value).map_err(|_| Rejected::of(KIND))
}

/// The members a runtime assignment shares with the local storage claims it mounts, in both
/// records' key order: the issuing controller and where the service's replica runs. The claim
/// binds to an assignment only when all six agree.
pub(crate) const PLACEMENT_KEYS: [&str; 6] =
    ["controller", "organizationId", "clusterId", "nodeId", "runtimeNamespace", "serviceId"];

fn read_assignment(value: &Value) -> Parsed<RuntimeAssignment> {
    let record =
        Record::with_parts(value, &[&REVISED_RECORD_KEYS, &PLACEMENT_KEYS, &["specRevision", "workload"]], &[])?;
    let Revision { id: assignment_id, generation, previous } = Revision::read(&record)?;
    Ok(RuntimeAssignment {
        id: assignment_id,
        generation,
        previous,
        controller: record.read("controller", ControllerReference::read)?,
        organization_id: record.read("organizationId", id)?,
        cluster_id: record.read("clusterId", id)?,
        node_id: record.read("nodeId", node_id)?,
        runtime_namespace: record.read("runtimeNamespace", id)?,
        service_id: record.read("serviceId", id)?,
        spec_revision: record.read("specRevision", counter)?,
        workload: record.read("workload", RuntimeWorkload::read)?,
        digest: record.read("digest", digest)?,
    })
}

/// `computeRuntimeAssignmentDigest`: snapshots, then hashes under `serve.zone/runtime-assignment`.
pub fn compute_runtime_assignment_digest(value: &Value) -> Result<Sha256Digest, Rejected> {
    Ok(snapshot_runtime_assignment(value)?.compute_digest())
}

/// `validateRuntimeAssignment`: `[]`, `["runtime assignment digest does not match"]` or
/// `["runtime assignment must use its exact canonical schema"]`.
pub fn validate_runtime_assignment(value: &Value) -> Vec<String> {
    validate_digested::<RuntimeAssignment>(value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn reference(id: &str) -> Value {
        json!({ "id": id, "generation": 1, "digest": format!("sha256:{}", "a".repeat(64)) })
    }

    fn assignment() -> Value {
        let mut value = json!({
            "id": "asg-1", "generation": 1, "previous": null,
            "controller": { "kind": "cloudly", "id": "ctl-1" },
            "organizationId": "org-1", "clusterId": "cluster-1", "nodeId": "node-1", "runtimeNamespace": "ns-1",
            "serviceId": "svc-1", "specRevision": 4,
            "workload": {
                "image": "registry.example/app@sha256:0123",
                "environment": [
                    { "name": "A_VALUE", "value": "1" },
                    { "name": "SERVEZONE_CLUSTER_INGRESS_BEARER",
                      "secret": { "secretId": "sec-1", "secretVersionId": "sec-1-v2" } },
                    { "name": "_Z", "value": "" }
                ],
                "ports": [ { "protocol": "tcp", "port": 443 }, { "protocol": "tcp", "port": 8080 },
                           { "protocol": "udp", "port": 53 } ],
                "storage": [ reference("claim-a"), reference("claim-b") ]
            },
            "digest": format!("sha256:{}", "0".repeat(64))
        });
        let digest = snapshot_runtime_assignment(&value).unwrap().compute_digest();
        value["digest"] = json!(digest.as_str());
        value
    }

    fn with(path: &[&str], replacement: Value) -> Value {
        let mut value = assignment();
        let mut slot = &mut value;
        for key in path {
            slot = match key.parse::<usize>() {
                Ok(index) => &mut slot[index],
                Err(_) => &mut slot[*key],
            };
        }
        *slot = replacement;
        value
    }

    #[test]
    fn a_valid_assignment_round_trips_and_validates() {
        let value = assignment();
        let typed = snapshot_runtime_assignment(&value).unwrap();
        assert_eq!(typed.to_value(), value);
        assert!(validate_runtime_assignment(&value).is_empty());
        assert_eq!(typed.reference().id.as_str(), "asg-1");
        assert_eq!(compute_runtime_assignment_digest(&value).unwrap(), typed.digest);
        assert!(matches!(
            typed.workload.environment_entry("SERVEZONE_CLUSTER_INGRESS_BEARER").map(|entry| &entry.source),
            Some(EnvironmentSource::Secret(_))
        ));
        assert!(typed.workload.environment_entry("MISSING").is_none());
    }

    #[test]
    fn a_changed_assignment_fails_its_digest() {
        let value = with(&["specRevision"], json!(5));
        assert_eq!(validate_runtime_assignment(&value), vec!["runtime assignment digest does not match"]);
    }

    #[test]
    fn each_schema_rule_rejects() {
        let long_value = "x".repeat(MAXIMUM_ENVIRONMENT_VALUE_BYTES + 1);
        let many_ports: Vec<Value> = (1..=65).map(|port| json!({ "protocol": "tcp", "port": port })).collect();
        let many_refs: Vec<Value> = (0..65).map(|index| reference(&format!("claim-{index:03}"))).collect();
        let many_env: Vec<Value> =
            (0..257).map(|index| json!({ "name": format!("V{index:03}"), "value": "" })).collect();
        let heavy_env: Vec<Value> =
            (0..9).map(|index| json!({ "name": format!("V{index}"), "value": "x".repeat(30 * 1024) })).collect();
        let cases: Vec<(&str, Value)> = vec![
            ("empty image", with(&["workload", "image"], json!(""))),
            ("long image", with(&["workload", "image"], json!("i".repeat(513)))),
            ("lowercase name", with(&["workload", "environment", "0", "name"], json!("a_value"))),
            ("digit first", with(&["workload", "environment", "0", "name"], json!("1A"))),
            ("empty name", with(&["workload", "environment", "0", "name"], json!(""))),
            ("unsorted environment", with(&["workload", "environment", "0", "name"], json!("ZZ"))),
            (
                "duplicate environment",
                with(&["workload", "environment", "0", "name"], json!("SERVEZONE_CLUSTER_INGRESS_BEARER")),
            ),
            (
                "value and secret",
                with(&["workload", "environment", "0", "secret"], json!({ "secretId": "s", "secretVersionId": "v" })),
            ),
            ("neither value nor secret", with(&["workload", "environment", "0"], json!({ "name": "A_VALUE" }))),
            ("null value", with(&["workload", "environment", "0", "value"], Value::Null)),
            ("long value", with(&["workload", "environment", "0", "value"], json!(long_value))),
            ("nul in value", with(&["workload", "environment", "0", "value"], json!("a\u{0}b"))),
            ("secret extra key", with(&["workload", "environment", "1", "secret", "x"], json!(1))),
            ("too many entries", with(&["workload", "environment"], json!(many_env))),
            ("environment too heavy", with(&["workload", "environment"], json!(heavy_env))),
            ("unsorted ports", with(&["workload", "ports", "0", "port"], json!(9000))),
            ("udp before tcp", with(&["workload", "ports", "0", "protocol"], json!("udp"))),
            ("duplicate port", with(&["workload", "ports", "1", "port"], json!(443))),
            ("port zero", with(&["workload", "ports", "0", "port"], json!(0))),
            ("sctp", with(&["workload", "ports", "2", "protocol"], json!("sctp"))),
            ("too many ports", with(&["workload", "ports"], json!(many_ports))),
            ("unsorted storage", with(&["workload", "storage", "0", "id"], json!("claim-c"))),
            ("duplicate storage id", with(&["workload", "storage", "1", "id"], json!("claim-a"))),
            ("too many storage", with(&["workload", "storage"], json!(many_refs))),
            ("workload extra key", with(&["workload", "volumes"], json!([]))),
            ("bad controller", with(&["controller", "kind"], json!("swarm"))),
            ("bad node", with(&["nodeId"], json!("NODE"))),
            ("negative revision", with(&["specRevision"], json!(-1))),
            ("float revision", with(&["specRevision"], json!(1.5))),
            ("generation 2 without previous", with(&["generation"], json!(2))),
            ("extra key", with(&["extra"], json!(true))),
        ];
        for (name, value) in cases {
            assert_eq!(
                validate_runtime_assignment(&value),
                vec!["runtime assignment must use its exact canonical schema"],
                "{name}"
            );
            assert_eq!(snapshot_runtime_assignment(&value).unwrap_err().to_string(), CONTRACT_ERROR, "{name}");
        }
    }

    #[test]
    fn an_assignment_signs_and_verifies_under_its_domain() {
        use crate::contract::signing::{PublishedKey, sign, signed_to_value, verify};
        let key = ed25519_dalek::SigningKey::from_bytes(&[42u8; 32]);
        let typed = snapshot_runtime_assignment(&assignment()).unwrap();
        let envelope = signed_to_value(&sign(&key, typed.clone()));
        let keys = [PublishedKey::new(key.verifying_key())];
        assert_eq!(verify::<RuntimeAssignment>(&envelope, &keys).unwrap(), typed);
        assert_eq!(RuntimeAssignment::KIND.domain(), Some(DIGEST_DOMAIN));
    }

    #[test]
    fn the_bounds_are_inclusive() {
        let ports: Vec<Value> = (1..=64).map(|port| json!({ "protocol": "udp", "port": port })).collect();
        let refs: Vec<Value> = (0..64).map(|index| reference(&format!("claim-{index:03}"))).collect();
        let env: Vec<Value> = (0..256).map(|index| json!({ "name": format!("V{index:03}"), "value": "" })).collect();
        for value in [
            with(&["workload", "ports"], json!(ports)),
            with(&["workload", "storage"], json!(refs)),
            with(&["workload", "environment"], json!(env)),
            with(&["workload", "image"], json!("é".repeat(512))),
            with(&["workload", "environment", "0", "value"], json!("x".repeat(MAXIMUM_ENVIRONMENT_VALUE_BYTES))),
        ] {
            assert!(snapshot_runtime_assignment(&value).is_ok());
        }
    }
}
