//! The files the administrator commands read: JSON or YAML documents, and the inventory records
//! in them checked before anything is sent, so a malformed file is refused with every failing
//! member named (`cluster.relayOrgin is not a member`) and changes nothing.

use crate::contract::inventory::{
    CLUSTER_MEMBERS, NODE_MEMBERS, ORGANIZATION_MEMBERS, SERVICE_SPEC_BODY_MEMBERS, parse_cluster, parse_node,
    parse_organization, parse_service_spec_body,
};
use crate::contract::network::address_plan::{
    MEMBERS_WITHOUT_DIGEST, seal_runtime_network_address_plan, validate_runtime_network_address_plan,
};
use serde_json::Value;
use std::path::Path;

/// The format of a document file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    Json,
    Yaml,
}

/// Chooses the format: by extension (`.json`, `.yaml`, `.yml`), otherwise by content (JSON when
/// the first non-blank character opens an object or a list).
fn format_of(path: &Path, text: &str) -> Format {
    match path.extension().and_then(|extension| extension.to_str()).map(str::to_ascii_lowercase).as_deref() {
        Some("json") => Format::Json,
        Some("yaml" | "yml") => Format::Yaml,
        _ if text.trim_start().starts_with(['{', '[']) => Format::Json,
        _ => Format::Yaml,
    }
}

/// Reads a JSON or YAML file as a JSON value; the path `-` reads standard input (its format by
/// content). Errors name the file (`standard input` for `-`) and, for a syntax error, the line
/// and column.
pub fn read_document(path: &Path) -> anyhow::Result<Value> {
    let text = if path == Path::new("-") {
        std::io::read_to_string(std::io::stdin())
            .map_err(|error| anyhow::anyhow!("cannot read standard input: {error}"))?
    } else {
        std::fs::read_to_string(path).map_err(|error| anyhow::anyhow!("cannot read {}: {error}", path.display()))?
    };
    let shown = if path == Path::new("-") { "standard input".to_owned() } else { path.display().to_string() };
    match format_of(path, &text) {
        Format::Json => {
            serde_json::from_str(&text).map_err(|error| anyhow::anyhow!("{shown} is not valid JSON: {error}"))
        }
        Format::Yaml => {
            serde_yaml_ng::from_str(&text).map_err(|error| anyhow::anyhow!("{shown} is not valid YAML: {error}"))
        }
    }
}

/// The records a file may hold, with the members their exact schema allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordKind {
    /// `putOrganization`'s `organization`.
    Organization,
    /// `putCluster`'s `cluster`.
    Cluster,
    /// `putClusterNode`'s `node`.
    Node,
    /// `putServiceRuntimeSpec`'s `spec` (without `revision`).
    ServiceSpec,
}

impl RecordKind {
    /// The name violations start with, as the contract's readers name it.
    fn path(self) -> &'static str {
        match self {
            RecordKind::Organization => "organization",
            RecordKind::Cluster => "cluster",
            RecordKind::Node => "node",
            RecordKind::ServiceSpec => "spec",
        }
    }

    /// Every member of the record; each is required (the contract's own lists).
    fn members(self) -> &'static [&'static str] {
        match self {
            RecordKind::Organization => ORGANIZATION_MEMBERS,
            RecordKind::Cluster => CLUSTER_MEMBERS,
            RecordKind::Node => NODE_MEMBERS,
            RecordKind::ServiceSpec => SERVICE_SPEC_BODY_MEMBERS,
        }
    }

    /// Every violation of `value`: unknown and missing members by name, then the contract
    /// reader's own (one per failing member). Empty when the record is valid.
    pub fn violations(self, value: &Value) -> Vec<String> {
        let path = self.path();
        let found = member_violations(path, value, self.members(), &[]);
        if !found.is_empty() {
            return found;
        }
        let read = match self {
            RecordKind::Organization => parse_organization(value).map(drop),
            RecordKind::Cluster => parse_cluster(value).map(drop),
            RecordKind::Node => parse_node(value).map(drop),
            RecordKind::ServiceSpec => parse_service_spec_body(value).map(drop),
        };
        read.err().unwrap_or_default()
    }
}

/// `<path> must be an object`, or each member of `value` outside `required` and `optional`
/// (`<path>.<key> is not a member`) and each of `required` absent (`<path>.<key> is missing`).
pub fn member_violations(path: &str, value: &Value, required: &[&str], optional: &[&str]) -> Vec<String> {
    let members = required.iter().chain(optional).copied().collect::<Vec<_>>().join(", ");
    let Some(object) = value.as_object() else {
        return vec![format!("{path} must be an object with the members {members}")];
    };
    let unknown = object.keys().filter(|key| !required.contains(&key.as_str()) && !optional.contains(&key.as_str()));
    let unknown = unknown.map(|key| {
        let shown: String = key.chars().take(64).collect();
        format!("{path}.{shown} is not a member (members: {members})")
    });
    let missing =
        required.iter().filter(|key| !object.contains_key(**key)).map(|key| format!("{path}.{key} is missing"));
    unknown.chain(missing).collect()
}

/// The error of a file whose records break their schema: the file and each violation on its own
/// line.
pub fn invalid_file(path: &Path, violations: &[String]) -> anyhow::Error {
    anyhow::anyhow!("{} is invalid (nothing was sent):\n  {}", path.display(), violations.join("\n  "))
}

/// Reads `path` and checks it holds one valid record of `kind`.
pub fn read_record(path: &Path, kind: RecordKind) -> anyhow::Result<Value> {
    let value = read_document(path)?;
    let violations = kind.violations(&value);
    if violations.is_empty() { Ok(value) } else { Err(invalid_file(path, &violations)) }
}

/// Reads an address plan file for `network plan put`: the plan without `digest` (the controller
/// computes it). With `expected_revision` N (the current revision) the plan's `revision` is
/// N + 1, and a `revision` in the file must say so too; without it, the file's `revision`, else 1
/// (a first plan). Every member and every rule of the contract is checked before anything is
/// sent.
pub fn read_network_plan(path: &Path, expected_revision: Option<u64>) -> anyhow::Result<Value> {
    let mut plan = read_document(path)?;
    if let Some(members) = plan.as_object_mut() {
        let stated = members.get("revision").cloned();
        let revision = match expected_revision {
            Some(expected) => {
                let next = expected.saturating_add(1);
                if stated.as_ref().is_some_and(|stated| stated.as_u64() != Some(next)) {
                    let violation =
                        format!("plan.revision must be {next} with --expected-revision {expected}, or be left out");
                    return Err(invalid_file(path, &[violation]));
                }
                Value::from(next)
            }
            None => stated.unwrap_or_else(|| Value::from(1)),
        };
        members.insert("revision".to_owned(), revision);
    }
    let violations = member_violations("plan", &plan, &MEMBERS_WITHOUT_DIGEST, &[]);
    if !violations.is_empty() {
        return Err(invalid_file(path, &violations));
    }
    let violations = match seal_runtime_network_address_plan(&plan) {
        Ok(sealed) => validate_runtime_network_address_plan(&sealed),
        Err(rejected) => vec![rejected.to_string()],
    };
    if violations.is_empty() { Ok(plan) } else { Err(invalid_file(path, &violations)) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn examples() -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/examples")
    }

    #[test]
    fn members_match_the_contract() {
        let organization = json!({ "id": "org", "name": "Org" });
        let cluster = read_document(&examples().join("cluster.json")).unwrap();
        let node = read_document(&examples().join("node.json")).unwrap();
        let spec = read_document(&examples().join("ingress-spec.json")).unwrap();
        for (kind, record) in [
            (RecordKind::Organization, organization),
            (RecordKind::Cluster, cluster),
            (RecordKind::Node, node),
            (RecordKind::ServiceSpec, spec),
        ] {
            assert_eq!(kind.violations(&record), Vec::<String>::new(), "{kind:?}");
            let mut members: Vec<&str> = record.as_object().unwrap().keys().map(String::as_str).collect();
            members.sort_unstable();
            let mut expected = kind.members().to_vec();
            expected.sort_unstable();
            assert_eq!(members, expected, "{kind:?}: the example holds exactly the members");
            // Each member is required by the contract's reader too.
            for member in kind.members() {
                let mut without = record.clone();
                without.as_object_mut().unwrap().remove(*member);
                assert_eq!(kind.violations(&without), vec![format!("{}.{member} is missing", kind.path())]);
            }
        }
    }

    #[test]
    fn violations_name_the_member() {
        let mut cluster = read_document(&examples().join("cluster.json")).unwrap();
        let origin = cluster.as_object_mut().unwrap().remove("relayOrigin").unwrap();
        cluster["relayOrgin"] = origin;
        assert_eq!(
            RecordKind::Cluster.violations(&cluster),
            vec![
                "cluster.relayOrgin is not a member (members: id, organizationId, runtime, relayOrigin, \
                 fleetCutoverIngressDesignation)"
                    .to_owned(),
                "cluster.relayOrigin is missing".to_owned(),
            ]
        );
        cluster = read_document(&examples().join("cluster.json")).unwrap();
        cluster["runtime"]["generation"] = json!("one");
        assert_eq!(
            RecordKind::Cluster.violations(&cluster),
            vec!["cluster runtime must be { phase: swarm|cutover|pallet, generation ≥ 1 }".to_owned()]
        );
        assert_eq!(
            RecordKind::Node.violations(&json!([])),
            vec!["node must be an object with the members id, runtimeNamespace, hostAddresses".to_owned()]
        );
    }

    #[test]
    fn yaml_is_read_by_extension_or_content() {
        let dir = std::env::temp_dir().join(format!("cloudly-documents-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).unwrap();
        let yaml = "id: c1\nruntime:\n  phase: pallet\n  generation: 1\nrelayOrigin: null\n";
        let expected = json!({ "id": "c1", "runtime": { "phase": "pallet", "generation": 1 }, "relayOrigin": null });
        for name in ["cluster.yaml", "cluster.yml", "cluster.txt"] {
            std::fs::write(dir.join(name), yaml).unwrap();
            assert_eq!(read_document(&dir.join(name)).unwrap(), expected, "{name}");
        }
        std::fs::write(dir.join("cluster"), expected.to_string()).unwrap();
        assert_eq!(read_document(&dir.join("cluster")).unwrap(), expected);
        std::fs::write(dir.join("broken.yaml"), "id: [c1\n").unwrap();
        let error = read_document(&dir.join("broken.yaml")).unwrap_err().to_string();
        assert!(error.contains("broken.yaml is not valid YAML") && error.contains("line"), "{error}");
        std::fs::write(dir.join("broken.json"), "{\"id\": }").unwrap();
        let error = read_document(&dir.join("broken.json")).unwrap_err().to_string();
        assert!(error.contains("broken.json is not valid JSON") && error.contains("line 1"), "{error}");
        std::fs::remove_dir_all(dir).unwrap();
    }
}
