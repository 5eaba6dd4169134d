//! The inventory records the controller judges against (`07-inventory.md`): organizations,
//! clusters, nodes and service runtime specs. Upstream these live in other parts of the package;
//! here they are this project's own, read with the same exact-schema discipline.
//!
//! Each `parse_*` answers the typed record or every violation, one per failing field, so an
//! administrator's `request-invalid` names each failure without echoing a value.

use super::assignment::{is_environment_name, is_environment_value, is_workload_image};
use super::designation::{ClusterRuntimeReference, RuntimePhase};
use super::primitives::{Id, Ipv4, NodeId, Protocol};
use super::reader::{self, Invalid, Parsed, Record, strictly_ascending};
use super::reference::AuthorityReference;
use super::registration::CLUSTER_INGRESS_ENVIRONMENT_NAMES;
use serde::Serialize;
use serde_json::Value;

/// Violations collected while reading one record, each naming its field.
#[derive(Debug, Default)]
struct Violations {
    path: &'static str,
    found: Vec<String>,
}

impl Violations {
    fn new(path: &'static str) -> Self {
        Violations { path, found: Vec::new() }
    }

    /// Reads `key` with `read`; on failure records `<path> <key> <rule>` and answers `None`.
    fn field<'a, T>(
        &mut self,
        record: &Record<'a>,
        key: &str,
        rule: &str,
        read: impl FnOnce(&'a Value) -> Parsed<T>,
    ) -> Option<T> {
        match record.read(key, read) {
            Ok(value) => Some(value),
            Err(Invalid) => {
                self.found.push(format!("{} {key} {rule}", self.path));
                None
            }
        }
    }

    fn fail(&mut self, key: &str, rule: &str) {
        self.found.push(format!("{} {key} {rule}", self.path));
    }

    fn exact_schema(path: &str) -> Vec<String> {
        vec![format!("{path} must use its exact schema")]
    }
}

fn bounded_text(value: &Value, minimum: usize, maximum: usize) -> Parsed<String> {
    let text = reader::string(value)?;
    let length = text.chars().count();
    reader::require((minimum..=maximum).contains(&length))?;
    Ok(text.to_owned())
}

/// An organization: `{ id, name }`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Organization {
    /// The organization id.
    pub id: Id,
    /// A display name, 1 to 256 characters.
    pub name: String,
}

/// The members of an organization (`IOrganization`'s exact schema; every one required).
pub const ORGANIZATION_MEMBERS: &[&str] = &["id", "name"];

/// The members of a cluster (every one required).
pub const CLUSTER_MEMBERS: &[&str] =
    &["id", "organizationId", "runtime", "relayOrigin", "fleetCutoverIngressDesignation"];

/// The members of a node (every one required).
pub const NODE_MEMBERS: &[&str] = &["id", "runtimeNamespace", "hostAddresses"];

/// The members of `putServiceRuntimeSpec`'s `spec`, without `revision` (every one required).
pub const SERVICE_SPEC_BODY_MEMBERS: &[&str] =
    &["clusterId", "serviceId", "organizationId", "image", "replicas", "placement", "ports", "environment", "volumes"];

/// Reads an organization, naming every violation.
pub fn parse_organization(value: &Value) -> Result<Organization, Vec<String>> {
    let path = "organization";
    let record = Record::exact(value, ORGANIZATION_MEMBERS).map_err(|_| Violations::exact_schema(path))?;
    let mut violations = Violations::new(path);
    let id = violations.field(&record, "id", "must be an Id", reader::id);
    let name = violations.field(&record, "name", "must be 1 to 256 characters", |value| bounded_text(value, 1, 256));
    match (id, name) {
        (Some(id), Some(name)) if violations.found.is_empty() => Ok(Organization { id, name }),
        _ => Err(violations.found),
    }
}

/// The cluster's runtime as stored: `{ phase, generation }` (the id is the cluster's).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ClusterRuntime {
    /// The phase.
    pub phase: RuntimePhase,
    /// The runtime generation (≥ 1).
    pub generation: u64,
}

/// A cluster as an administrator puts it (`putCluster`'s `cluster`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterSpec {
    /// The cluster id.
    pub id: Id,
    /// The owning organization.
    pub organization_id: Id,
    /// The current runtime phase and generation.
    pub runtime: ClusterRuntime,
    /// The canonical origin of the cluster's relay (`IClusterRelay.origin`), if it has one.
    pub relay_origin: Option<String>,
    /// The fleet-cutover ingress designation the cluster holds, if any.
    pub fleet_cutover_ingress_designation: Option<AuthorityReference>,
}

impl ClusterSpec {
    /// `IClusterRuntimeReference` of the cluster's current runtime.
    pub fn runtime_reference(&self) -> ClusterRuntimeReference {
        ClusterRuntimeReference { id: self.id.clone(), phase: self.runtime.phase, generation: self.runtime.generation }
    }
}

/// Reads a cluster, naming every violation.
pub fn parse_cluster(value: &Value) -> Result<ClusterSpec, Vec<String>> {
    let path = "cluster";
    let record = Record::exact(value, CLUSTER_MEMBERS).map_err(|_| Violations::exact_schema(path))?;
    let mut violations = Violations::new(path);
    let id = violations.field(&record, "id", "must be an Id", reader::id);
    let organization_id = violations.field(&record, "organizationId", "must be an Id", reader::id);
    let runtime =
        violations.field(&record, "runtime", "must be { phase: swarm|cutover|pallet, generation ≥ 1 }", |value| {
            let runtime = Record::exact(value, &["phase", "generation"])?;
            Ok(ClusterRuntime {
                phase: runtime.read("phase", |value| RuntimePhase::parse(reader::string(value)?).ok_or(Invalid))?,
                generation: runtime.read("generation", reader::generation)?,
            })
        });
    let relay_origin =
        violations.field(&record, "relayOrigin", "must be null or a canonical http(s) origin", |value| {
            reader::nullable(value, |value| {
                let origin = reader::string(value)?;
                reader::require(is_canonical_origin(origin))?;
                Ok(origin.to_owned())
            })
        });
    let fleet = violations.field(
        &record,
        "fleetCutoverIngressDesignation",
        "must be null or an IRuntimeAuthorityReference",
        |value| reader::nullable(value, AuthorityReference::read),
    );
    match (id, organization_id, runtime, relay_origin, fleet) {
        (Some(id), Some(organization_id), Some(runtime), Some(relay_origin), Some(fleet))
            if violations.found.is_empty() =>
        {
            Ok(ClusterSpec { id, organization_id, runtime, relay_origin, fleet_cutover_ingress_designation: fleet })
        }
        _ => Err(violations.found),
    }
}

/// True for a lowercase DNS name: 1 to 253 characters, dot-separated labels of 1 to 63 of
/// `a-z`, `0-9` and `-`, neither starting nor ending with `-`, no trailing dot (the host of a
/// canonical origin, and an ingress route's hostname).
pub fn is_lowercase_dns_name(text: &str) -> bool {
    !text.is_empty()
        && text.len() <= 253
        && text.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label.bytes().all(|byte| byte.is_ascii_lowercase() || byte.is_ascii_digit() || byte == b'-')
        })
}

/// True for an exact URL origin in canonical form: scheme `http` or `https`, a lowercase host
/// (DNS name or IPv4), a port only when it is not the scheme's default, no path, no trailing
/// slash (`https://relay.example.net:8443`).
pub fn is_canonical_origin(origin: &str) -> bool {
    let (rest, default_port) = if let Some(rest) = origin.strip_prefix("https://") {
        (rest, 443)
    } else if let Some(rest) = origin.strip_prefix("http://") {
        (rest, 80)
    } else {
        return false;
    };
    let (host, port) = match rest.rsplit_once(':') {
        Some((host, port)) => (host, Some(port)),
        None => (rest, None),
    };
    let host_ok = is_lowercase_dns_name(host);
    let port_ok = match port {
        None => true,
        Some(port) => {
            !port.is_empty()
                && !port.starts_with('0')
                && port.bytes().all(|byte| byte.is_ascii_digit())
                && port.parse::<u32>().is_ok_and(|number| (1..=65_535).contains(&number) && number != default_port)
        }
    };
    host_ok && port_ok
}

/// A node as an administrator puts it (`putClusterNode`'s `node`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeSpec {
    /// The node id (a DNS label).
    pub id: NodeId,
    /// The node's runtime namespace.
    pub runtime_namespace: Id,
    /// The addresses the node's own host carries, sorted numerically, unique.
    pub host_addresses: Vec<Ipv4>,
}

/// Reads a node, naming every violation.
pub fn parse_node(value: &Value) -> Result<NodeSpec, Vec<String>> {
    let path = "node";
    let record = Record::exact(value, NODE_MEMBERS).map_err(|_| Violations::exact_schema(path))?;
    let mut violations = Violations::new(path);
    let id = violations.field(&record, "id", "must be a node id (a DNS label)", reader::node_id);
    let runtime_namespace = violations.field(&record, "runtimeNamespace", "must be an Id", reader::id);
    let host_addresses =
        violations.field(&record, "hostAddresses", "must be at most 64 IPv4 addresses, sorted, unique", |value| {
            let addresses = reader::list(value, 64, reader::ipv4)?;
            strictly_ascending(&addresses, Ord::cmp)?;
            Ok(addresses)
        });
    match (id, runtime_namespace, host_addresses) {
        (Some(id), Some(runtime_namespace), Some(host_addresses)) if violations.found.is_empty() => {
            Ok(NodeSpec { id, runtime_namespace, host_addresses })
        }
        _ => Err(violations.found),
    }
}

/// The protocol of a service's target port: a lowercase protocol name of 1 to 16 characters
/// (`^[a-z][a-z0-9-]{0,15}$`). A spec may name any such protocol; only `tcp` and `udp` can run
/// ([`PortProtocol::runnable`]), any other makes the service `refused` with
/// `port-protocol-unsupported` rather than an invalid request. Orders byte-wise, so `tcp` before
/// `udp`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct PortProtocol(String);

impl PortProtocol {
    /// Parses a protocol name.
    pub fn parse(text: &str) -> Option<Self> {
        let mut bytes = text.bytes();
        let first_is_letter = bytes.next().is_some_and(|byte| byte.is_ascii_lowercase());
        let rest_valid = bytes.all(|byte| byte.is_ascii_lowercase() || byte.is_ascii_digit() || byte == b'-');
        (first_is_letter && rest_valid && text.len() <= 16).then(|| PortProtocol(text.to_owned()))
    }

    /// The protocol name.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The runnable protocol this names (`tcp` or `udp`), if any.
    pub fn runnable(&self) -> Option<Protocol> {
        Protocol::parse(&self.0)
    }
}

impl From<Protocol> for PortProtocol {
    fn from(protocol: Protocol) -> Self {
        PortProtocol(protocol.as_str().to_owned())
    }
}

/// One target port of a service.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct ServicePort {
    /// The protocol; only `tcp` and `udp` run.
    pub protocol: PortProtocol,
    /// The port.
    pub port: u16,
}

/// One plain environment entry of a spec.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EnvironmentEntry {
    /// `^[A-Z_][A-Z0-9_]*$`.
    pub name: String,
    /// The value.
    pub value: String,
}

/// A `{ name, value }` driver option.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DriverOption {
    /// Option name.
    pub name: String,
    /// Option value.
    pub value: String,
}

/// Ownership of an `empty` volume's root.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct VolumeOwnership {
    /// Owner uid, ≤ 4 294 967 294.
    pub uid: u64,
    /// Owner gid, ≤ 4 294 967 294.
    pub gid: u64,
    /// Directory permission bits (`mode & !0o3777 == 0`).
    pub mode: u64,
}

/// How a volume starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum VolumeInitialization {
    /// An empty root with this ownership.
    Empty {
        /// The root's ownership.
        ownership: VolumeOwnership,
    },
    /// Waits for imported bytes.
    Import,
}

/// A declared volume of a service.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct VolumeSpec {
    /// The service's own volume id.
    pub id: Id,
    /// Where the workload mounts it.
    pub mount_path: String,
    /// Mounted read-only.
    pub read_only: bool,
    /// `local` is the node-local directory; anything else is refused at status time.
    pub driver: String,
    /// Driver options (any is refused at status time).
    pub driver_options: Vec<DriverOption>,
    /// Mount options (any is refused at status time).
    pub mount_options: Vec<String>,
    /// How the volume starts.
    pub initialization: VolumeInitialization,
}

/// `IServiceRuntimeSpec` without its revision (what `putServiceRuntimeSpec` takes).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ServiceSpecBody {
    /// The cluster.
    pub cluster_id: Id,
    /// The service.
    pub service_id: Id,
    /// The owning organization.
    pub organization_id: Id,
    /// The image, 1 to 512 characters.
    pub image: String,
    /// Replica count, ≥ 1.
    pub replicas: u64,
    /// The nodes the replicas may run on: replica *i* on `node_ids[i mod n]`.
    pub placement: Placement,
    /// Target ports, sorted by `[protocol, port]`.
    pub ports: Vec<ServicePort>,
    /// Plain environment, sorted by name.
    pub environment: Vec<EnvironmentEntry>,
    /// Declared volumes, sorted by id.
    pub volumes: Vec<VolumeSpec>,
}

/// `placement`: `{ nodeIds }`, sorted, unique, non-empty.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Placement {
    /// The nodes.
    pub node_ids: Vec<NodeId>,
}

/// `IServiceRuntimeSpec`: a spec body at a revision.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ServiceRuntimeSpec {
    /// The content.
    #[serde(flatten)]
    pub body: ServiceSpecBody,
    /// The revision (first is 1).
    pub revision: u64,
}

/// Most replicas one spec may ask for.
pub const MAXIMUM_REPLICAS: u64 = 1_024;
/// Most target ports a spec may declare (more than 64 is a status refusal, `ports-too-many`).
pub const MAXIMUM_SPEC_PORTS: usize = 1_024;
/// Most environment entries of a spec.
pub const MAXIMUM_ENVIRONMENT: usize = 256;
/// Most volumes of a spec.
pub const MAXIMUM_VOLUMES: usize = 64;

/// Reads `putServiceRuntimeSpec`'s `spec` (no `revision`), naming every violation. The names of
/// `clusterIngressEnvironmentNames` are reserved: a spec setting one is refused.
pub fn parse_service_spec_body(value: &Value) -> Result<ServiceSpecBody, Vec<String>> {
    let path = "spec";
    let record = Record::exact(value, SERVICE_SPEC_BODY_MEMBERS).map_err(|_| Violations::exact_schema(path))?;
    read_spec_body(&record, path)
}

fn read_spec_body(record: &Record<'_>, path: &'static str) -> Result<ServiceSpecBody, Vec<String>> {
    let mut violations = Violations::new(path);
    let cluster_id = violations.field(record, "clusterId", "must be an Id", reader::id);
    let service_id = violations.field(record, "serviceId", "must be an Id", reader::id);
    let organization_id = violations.field(record, "organizationId", "must be an Id", reader::id);
    let image = violations.field(record, "image", "must be 1 to 512 characters", |value| {
        let image = reader::string(value)?;
        reader::require(is_workload_image(image))?;
        Ok(image.to_owned())
    });
    let replicas = violations.field(record, "replicas", "must be an integer from 1 to 1024", |value| {
        reader::counter_in(value, 1, MAXIMUM_REPLICAS)
    });
    let placement =
        violations.field(record, "placement", "must be { nodeIds } with 1 to 256 node ids, sorted, unique", |value| {
            let placement = Record::exact(value, &["nodeIds"])?;
            let node_ids = placement.read("nodeIds", |value| reader::list(value, 256, reader::node_id))?;
            reader::require(!node_ids.is_empty())?;
            strictly_ascending(&node_ids, |left, right| left.as_str().as_bytes().cmp(right.as_str().as_bytes()))?;
            Ok(Placement { node_ids })
        });
    let ports = violations.field(
        record,
        "ports",
        "must be { protocol, port } entries (protocol a lowercase name, port 1 to 65535) sorted by [protocol, port], unique",
        |value| {
            let ports = reader::list(value, MAXIMUM_SPEC_PORTS, |value| {
                let port = Record::exact(value, &["protocol", "port"])?;
                Ok(ServicePort {
                    protocol: port.read("protocol", |value| PortProtocol::parse(reader::string(value)?).ok_or(Invalid))?,
                    port: port.read("port", reader::port)?,
                })
            })?;
            strictly_ascending(&ports, Ord::cmp)?;
            Ok(ports)
        },
    );
    let environment = violations.field(
        record,
        "environment",
        "must be { name, value } entries with names ^[A-Z_][A-Z0-9_]*$, sorted by name, unique",
        |value| {
            let entries = reader::list(value, MAXIMUM_ENVIRONMENT, |value| {
                let entry = Record::exact(value, &["name", "value"])?;
                let name = entry.read("name", reader::string)?;
                reader::require(is_environment_name(name))?;
                let text = entry.read("value", reader::string)?;
                reader::require(is_environment_value(text))?;
                Ok(EnvironmentEntry { name: name.to_owned(), value: text.to_owned() })
            })?;
            strictly_ascending(&entries, |left, right| left.name.as_bytes().cmp(right.name.as_bytes()))?;
            Ok(entries)
        },
    );
    if let Some(entries) = &environment
        && entries.iter().any(|entry| CLUSTER_INGRESS_ENVIRONMENT_NAMES.all().contains(&entry.name.as_str()))
    {
        violations.fail("environment", "must not set a name of clusterIngressEnvironmentNames (reserved)");
    }
    let volumes =
        violations.field(record, "volumes", "must be valid volumes sorted by id, unique, at most 64", |value| {
            let volumes = reader::list(value, MAXIMUM_VOLUMES, read_volume)?;
            strictly_ascending(&volumes, |left, right| left.id.as_str().as_bytes().cmp(right.id.as_str().as_bytes()))?;
            Ok(volumes)
        });
    match (cluster_id, service_id, organization_id, image, replicas, placement, ports, environment, volumes) {
        (
            Some(cluster_id),
            Some(service_id),
            Some(organization_id),
            Some(image),
            Some(replicas),
            Some(placement),
            Some(ports),
            Some(environment),
            Some(volumes),
        ) if violations.found.is_empty() => Ok(ServiceSpecBody {
            cluster_id,
            service_id,
            organization_id,
            image,
            replicas,
            placement,
            ports,
            environment,
            volumes,
        }),
        _ => Err(violations.found),
    }
}

fn read_volume(value: &Value) -> Parsed<VolumeSpec> {
    let volume = Record::exact(
        value,
        &["id", "mountPath", "readOnly", "driver", "driverOptions", "mountOptions", "initialization"],
    )?;
    let mount_path = volume.read("mountPath", reader::string)?;
    reader::require(super::storage_claim::is_canonical_mount_path(mount_path))?;
    Ok(VolumeSpec {
        id: volume.read("id", reader::id)?,
        mount_path: mount_path.to_owned(),
        read_only: volume.read("readOnly", reader::boolean)?,
        driver: volume.read("driver", |value| bounded_text(value, 1, 128))?,
        driver_options: volume.read("driverOptions", |value| {
            reader::list(value, 64, |value| {
                let option = Record::exact(value, &["name", "value"])?;
                Ok(DriverOption {
                    name: option.read("name", |value| bounded_text(value, 1, 256))?,
                    value: option.read("value", |value| bounded_text(value, 0, 4096))?,
                })
            })
        })?,
        mount_options: volume
            .read("mountOptions", |value| reader::list(value, 64, |value| bounded_text(value, 1, 256)))?,
        initialization: volume.read("initialization", |value| {
            let kind = value.get("kind").and_then(Value::as_str).ok_or(Invalid)?;
            match kind {
                "empty" => {
                    let initialization = Record::exact(value, &["kind", "ownership"])?;
                    let ownership = initialization.read("ownership", |value| {
                        let ownership = Record::exact(value, &["uid", "gid", "mode"])?;
                        Ok(VolumeOwnership {
                            uid: ownership.read("uid", |value| reader::counter_in(value, 0, 4_294_967_294))?,
                            gid: ownership.read("gid", |value| reader::counter_in(value, 0, 4_294_967_294))?,
                            mode: ownership.read("mode", |value| reader::counter_in(value, 0, 0o3777))?,
                        })
                    })?;
                    Ok(VolumeInitialization::Empty { ownership })
                }
                "import" => {
                    Record::exact(value, &["kind"])?;
                    Ok(VolumeInitialization::Import)
                }
                _ => Err(Invalid),
            }
        })?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec() -> Value {
        json!({
            "clusterId": "c1", "serviceId": "ingress", "organizationId": "org",
            "image": "registry.example/ingress:1", "replicas": 2,
            "placement": { "nodeIds": ["node-1", "node-2"] },
            "ports": [{ "protocol": "tcp", "port": 80 }, { "protocol": "tcp", "port": 443 }, { "protocol": "udp", "port": 53 }],
            "environment": [{ "name": "A", "value": "1" }, { "name": "B_2", "value": "" }],
            "volumes": [{ "id": "data", "mountPath": "/var/lib/data", "readOnly": false, "driver": "local",
                          "driverOptions": [], "mountOptions": [],
                          "initialization": { "kind": "empty", "ownership": { "uid": 1000, "gid": 1000, "mode": 493 } } }]
        })
    }

    #[test]
    fn a_valid_spec_round_trips() {
        let body = parse_service_spec_body(&spec()).unwrap();
        assert_eq!(serde_json::to_value(&body).unwrap(), spec());
    }

    #[test]
    fn each_failing_field_is_named_once() {
        let mut value = spec();
        value["image"] = json!("");
        value["replicas"] = json!(0);
        value["ports"] = json!([{ "protocol": "udp", "port": 53 }, { "protocol": "tcp", "port": 80 }]);
        value["environment"] = json!([{ "name": "SERVEZONE_CLUSTER_NODE_ID", "value": "x" }]);
        let violations = parse_service_spec_body(&value).unwrap_err();
        assert_eq!(violations.len(), 4, "{violations:?}");
        assert!(violations.iter().any(|violation| violation.contains("reserved")));
        assert_eq!(parse_service_spec_body(&json!([])).unwrap_err(), vec!["spec must use its exact schema"]);
    }

    #[test]
    fn origins_are_canonical() {
        for good in ["https://relay.example.net:8443", "http://relay", "https://10.0.0.1", "http://a.b:8080"] {
            assert!(is_canonical_origin(good), "{good}");
        }
        for bad in [
            "https://relay.example.net/",
            "https://Relay.example.net",
            "https://relay:443",
            "http://relay:80",
            "ftp://relay",
            "https://relay/path",
            "https://relay:0",
            "https://relay:08443",
            "https://",
        ] {
            assert!(!is_canonical_origin(bad), "{bad}");
        }
    }

    #[test]
    fn clusters_and_nodes_parse_or_name_violations() {
        let cluster = json!({ "id": "c1", "organizationId": "org", "runtime": { "phase": "pallet", "generation": 1 },
                              "relayOrigin": "https://relay.example.net", "fleetCutoverIngressDesignation": null });
        assert!(parse_cluster(&cluster).is_ok());
        let mut bad = cluster.clone();
        bad["runtime"] = json!({ "phase": "moon", "generation": 1 });
        bad["relayOrigin"] = json!("https://relay.example.net/");
        assert_eq!(parse_cluster(&bad).unwrap_err().len(), 2);
        let node = json!({ "id": "node-1", "runtimeNamespace": "ns", "hostAddresses": ["10.0.0.9", "10.0.0.10"] });
        assert!(parse_node(&node).is_ok(), "addresses sort numerically");
        let unsorted = json!({ "id": "node-1", "runtimeNamespace": "ns", "hostAddresses": ["10.0.0.10", "10.0.0.9"] });
        assert_eq!(parse_node(&unsorted).unwrap_err().len(), 1);
    }
}
