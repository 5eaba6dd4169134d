//! `cloudly identity issue` and the administrator client commands. The client commands read the
//! identity from `--identity FILE` or `CLOUDLY_IDENTITY` and print the method's response as JSON.
//! Exit codes (an interface, see README.md): 0 answered; 1 refused (the controller answered an
//! error: its text and data on stderr); 2 usage (clap's, a missing identity, an unreadable or
//! invalid input file); 3 the controller could not be reached or did not answer in time (the
//! message names the URL, never the identity).

use super::documents::{RecordKind, invalid_file, member_violations, read_document, read_network_plan, read_record};
use super::remembered::{DesignationKey, RememberedDesignations};
use crate::client::{CallError, Client, TypedError};
use crate::contract::Id;
use crate::contract::network::RuntimeNetworkProjection;
use crate::contract::network::projection::admit_projection;
use crate::contract::signing::{self, PublishedKey, decode_public_key};
use crate::domain::identity::{IdentitySubject, IdentityType, Role, issue_identity};
use crate::keys::ControllerKeys;
use clap::{Args, Subcommand, ValueEnum};
use serde_json::{Value, json};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Debug, Subcommand)]
pub enum IdentityCommand {
    /// Issue an identity signed by this controller's identity key; prints the IIdentity JSON.
    Issue {
        /// A display name.
        #[arg(long)]
        name: String,
        /// The user id (an Id).
        #[arg(long = "user-id")]
        user_id: String,
        /// The role.
        #[arg(long, value_enum)]
        role: RoleArg,
        /// Lifetime: a number with s, m, h or d (`12h`).
        #[arg(long, default_value = "12h")]
        ttl: String,
        /// human or machine.
        #[arg(long = "type", value_enum, default_value = "human")]
        identity_type: TypeArg,
        /// The controller's data directory (its keys live in `keys/`; nothing is created there).
        #[arg(long, env = "CLOUDLY_DATA_DIR", default_value = "./cloudly-data")]
        data_dir: PathBuf,
        /// The controller keys directory; default `<data dir>/keys`.
        #[arg(long, env = "CLOUDLY_KEYS_DIR")]
        keys_dir: Option<PathBuf>,
    },
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum RoleArg {
    Admin,
    Operator,
    Viewer,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum TypeArg {
    Human,
    Machine,
}

/// Parses `90s`, `30m`, `12h`, `7d` into milliseconds.
pub fn parse_ttl(text: &str) -> Option<u64> {
    let (number, unit) = text.split_at(text.find(|c: char| !c.is_ascii_digit())?);
    let number: u64 = number.parse().ok()?;
    let unit_ms = match unit {
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return None,
    };
    number.checked_mul(unit_ms).filter(|ms| *ms > 0)
}

pub fn run_identity(command: IdentityCommand) -> ExitCode {
    let IdentityCommand::Issue { name, user_id, role, ttl, identity_type, data_dir, keys_dir } = command;
    let Some(user_id) = Id::parse(&user_id) else {
        eprintln!("error: --user-id must be an Id (^[A-Za-z0-9][A-Za-z0-9._-]{{0,127}}$)");
        return ExitCode::from(2);
    };
    let Some(ttl_ms) = parse_ttl(&ttl) else {
        eprintln!("error: --ttl must be a positive number with s, m, h or d, such as 12h");
        return ExitCode::from(2);
    };
    let keys_dir = keys_dir.unwrap_or_else(|| crate::keys::default_keys_dir(&data_dir));
    let keys = match ControllerKeys::load_from(&keys_dir) {
        Ok(keys) => keys,
        Err(error) => {
            eprintln!("error: {error}");
            return ExitCode::from(2);
        }
    };
    let role = match role {
        RoleArg::Admin => Role::Admin,
        RoleArg::Operator => Role::Operator,
        RoleArg::Viewer => Role::Viewer,
    };
    let identity_type = match identity_type {
        TypeArg::Human => IdentityType::Human,
        TypeArg::Machine => IdentityType::Machine,
    };
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|elapsed| elapsed.as_millis() as u64)
        .unwrap_or(0);
    let subject = IdentitySubject { name, user_id, identity_type, role };
    match issue_identity(&keys.identity, &subject, now_ms, ttl_ms, &uuid::Uuid::new_v4().to_string()) {
        Ok(identity) => {
            println!("{}", serde_json::to_string_pretty(&identity).expect("JSON serializes"));
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("error: cannot sign the identity: {error}");
            ExitCode::from(2)
        }
    }
}

/// Where the controller is, who is calling and how long a call may take (global flags of the
/// administrator commands).
#[derive(Debug, Clone, Args)]
pub struct Connection {
    /// The controller's base URL (`http://…` or `https://…`).
    #[arg(long, env = "CLOUDLY_URL", default_value = "http://127.0.0.1:8080", global = true)]
    url: String,
    /// A file holding an IIdentity JSON (from `cloudly identity issue` or the bootstrap identity).
    #[arg(long, env = "CLOUDLY_IDENTITY", global = true)]
    identity: Option<PathBuf>,
    /// How long one call to the controller may take: seconds, or a number with s or m (`30s`).
    #[arg(long, env = "CLOUDLY_TIMEOUT", default_value = "30s", value_parser = parse_timeout, global = true)]
    timeout: std::time::Duration,
}

/// Parses `--timeout`: `45` (seconds), `45s`, `2m`; at least one second, at most an hour.
fn parse_timeout(text: &str) -> Result<std::time::Duration, String> {
    let milliseconds = if text.bytes().all(|byte| byte.is_ascii_digit()) {
        text.parse::<u64>().ok().and_then(|seconds| seconds.checked_mul(1_000))
    } else {
        parse_ttl(text).filter(|_| text.ends_with(['s', 'm']))
    };
    milliseconds
        .filter(|milliseconds| (1_000..=3_600_000).contains(milliseconds))
        .map(std::time::Duration::from_millis)
        .ok_or_else(|| "must be 1 to 3600 seconds: a number of seconds, or a number with s or m (30s, 2m)".to_owned())
}

#[derive(Debug, Subcommand)]
pub enum AdminCommand {
    /// Organizations.
    #[command(subcommand)]
    Org(OrgCommand),
    /// Clusters.
    #[command(subcommand)]
    Cluster(ClusterCommand),
    /// Cluster nodes.
    #[command(subcommand)]
    Node(NodeCommand),
    /// Service runtime specs.
    #[command(subcommand)]
    Service(ServiceCommand),
    /// Cluster ingress designation.
    #[command(subcommand)]
    Ingress(IngressCommand),
    /// Cluster relays.
    #[command(subcommand)]
    Relay(RelayCommand),
    /// The cluster ingress route table.
    #[command(subcommand)]
    Route(RouteCommand),
    /// The cluster's runtime network.
    #[command(subcommand)]
    Network(NetworkCommand),
    /// Runtime local storage claims: the node-local volumes of services.
    #[command(subcommand)]
    Volume(VolumeCommand),
    /// Apply a whole inventory from one JSON or YAML file: `{ organizations, clusters, nodes,
    /// services }` (each optional; a node entry is `{ clusterId, node, rotateCredential? }`).
    /// Every record is checked first (nothing is sent when one is invalid). Each record is read
    /// from the controller and written only when it is absent or differs (clusters and services
    /// by compare-and-swap on the revision read; nodes compared by runtimeNamespace and
    /// hostAddresses); `rotateCredential: true` always writes the node. Prints what each record
    /// became (`created`, `updated` or `unchanged`) and each node bearer issued, once.
    Apply {
        /// The inventory file (`.json`, `.yaml`/`.yml`, or by content).
        #[arg(short = 'f', long = "file")]
        file: PathBuf,
    },
    /// Call any method with a request file; the identity is added to the request.
    Call {
        /// The method name.
        method: String,
        /// The request file, JSON or YAML (without `identity`).
        #[arg(short = 'f', long = "file")]
        file: PathBuf,
    },
}

#[derive(Debug, Subcommand)]
pub enum OrgCommand {
    /// Create or replace an organization.
    Put {
        #[arg(long)]
        id: String,
        #[arg(long)]
        name: String,
    },
    /// One organization.
    Get {
        #[arg(long)]
        id: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum ClusterCommand {
    /// Create (no --expected-revision) or replace a cluster from a JSON file.
    Put {
        #[arg(short = 'f', long = "file")]
        file: PathBuf,
        #[arg(long = "expected-revision")]
        expected_revision: Option<u64>,
    },
    /// One cluster.
    Get { id: String },
    /// Every cluster.
    List,
}

#[derive(Debug, Subcommand)]
pub enum NodeCommand {
    /// Create or update a node from a JSON file; prints its bearer once when issued.
    Put {
        #[arg(long)]
        cluster: String,
        #[arg(short = 'f', long = "file")]
        file: PathBuf,
        /// Issue a new bearer.
        #[arg(long)]
        rotate: bool,
    },
    /// One node with its session status (never its bearer).
    Get {
        #[arg(long)]
        cluster: String,
        #[arg(long)]
        id: String,
    },
    /// The nodes of a cluster.
    List {
        #[arg(long)]
        cluster: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum ServiceCommand {
    /// Write a service runtime spec from a JSON file (without `revision`).
    Put {
        #[arg(short = 'f', long = "file")]
        file: PathBuf,
        /// The current revision; omit to create.
        #[arg(long = "expected-revision")]
        expected_revision: Option<u64>,
    },
    /// The current spec, or one revision.
    Get {
        #[arg(long)]
        cluster: String,
        #[arg(long)]
        service: String,
        #[arg(long)]
        revision: Option<u64>,
    },
    /// Delete a service.
    Delete {
        #[arg(long)]
        cluster: String,
        #[arg(long)]
        service: String,
        #[arg(long = "expected-revision")]
        expected_revision: u64,
    },
    /// Why a service runs or does not: the runtime status of every service of the cluster, or of
    /// one (`getServiceRuntimeStatus` / `listServiceRuntimeStatuses`).
    Status {
        #[arg(long)]
        cluster: String,
        /// One service; omit for all.
        #[arg(long)]
        service: Option<String>,
        /// `table` (readable) or `json` (the answer as the controller gave it).
        #[arg(short = 'o', long = "output", value_enum, default_value = "table")]
        output: OutputFormat,
    },
}

/// How a command that has a readable form prints its answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OutputFormat {
    /// Aligned columns for people.
    Table,
    /// The controller's answer as JSON.
    Json,
}

/// What a command prints on success.
enum Answer {
    /// The controller's answer (or the command's own summary) as JSON.
    Json(Value),
    /// A readable text.
    Text(String),
}

/// A JSON value as a table cell: a string as it is, `null` as `-`, anything else as JSON.
fn cell(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        Value::Null => "-".to_owned(),
        other => other.to_string(),
    }
}

/// Service statuses as aligned columns: service, spec revision, state, reason, changed at.
fn status_table(statuses: &[Value]) -> String {
    let rows: Vec<Vec<String>> = statuses
        .iter()
        .map(|status| {
            ["id", "specRevision", "state", "reason", "changedAt"].iter().map(|key| cell(&status[*key])).collect()
        })
        .collect();
    let header = ["SERVICE", "REVISION", "STATE", "REASON", "CHANGED AT (ms)"].map(str::to_owned);
    aligned(&header, &rows)
}

#[derive(Debug, Subcommand)]
pub enum VolumeCommand {
    /// Every claim of the cluster with the node's last state (`listRuntimeLocalStorageClaims`).
    List {
        #[arg(long)]
        cluster: String,
        /// `table` (readable) or `json` (the answer as the controller gave it).
        #[arg(short = 'o', long = "output", value_enum, default_value = "table")]
        output: OutputFormat,
    },
    /// Decide on a claim whose node answered `uncertain` (`resolveRuntimeLocalStorageClaim`):
    /// `rebind` keeps and mounts the bytes, `purge` deletes them. The claim's current generation
    /// is read from the cluster's list first; `--generation` makes sure it is the one you saw.
    Resolve {
        #[arg(long)]
        cluster: String,
        /// The claim id (`lsc-…`).
        #[arg(long)]
        claim: String,
        /// The generation the decision is for; refused when the claim has moved on.
        #[arg(long)]
        generation: Option<u64>,
        #[arg(long, value_enum)]
        decision: DecisionArg,
    },
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum DecisionArg {
    Purge,
    Rebind,
}

/// Claims as aligned columns: claim, service, volume, node, generation, lifecycle, node state
/// (with the generation it is about when that is not the head), faults.
fn claim_table(claims: &[Value]) -> String {
    let rows: Vec<Vec<String>> = claims
        .iter()
        .map(|listing| {
            let claim = &listing["claim"];
            let node = &listing["node"];
            let state = match (&node["state"], &node["generation"]) {
                (Value::Null, _) => "pending".to_owned(),
                (state, generation) if generation == &claim["generation"] => cell(state),
                (state, generation) => format!("{} (generation {generation})", cell(state)),
            };
            let mut row: Vec<String> = ["id", "serviceId", "volumeId", "nodeId", "generation", "lifecycle"]
                .iter()
                .map(|key| cell(&claim[*key]))
                .collect();
            row.push(state);
            row.push(cell(&listing["faults"]["count"]));
            row
        })
        .collect();
    let header = ["CLAIM", "SERVICE", "VOLUME", "NODE", "GENERATION", "LIFECYCLE", "NODE STATE", "FAULTS"];
    aligned(&header.map(str::to_owned), &rows)
}

/// `header` and `rows` as left-aligned columns two spaces apart.
fn aligned(header: &[String], rows: &[Vec<String>]) -> String {
    let widths: Vec<usize> = (0..header.len())
        .map(|column| {
            rows.iter().map(Vec::as_slice).chain([header]).map(|row| row[column].chars().count()).max().unwrap_or(0)
        })
        .collect();
    std::iter::once(header)
        .chain(rows.iter().map(Vec::as_slice))
        .map(|row| {
            let cells: Vec<String> =
                row.iter().zip(&widths).map(|(cell, width)| format!("{cell:<width$}", width = *width)).collect();
            cells.join("  ").trim_end().to_owned()
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// `resolveRuntimeLocalStorageClaim` for the current generation of `claim`, read from the
/// cluster's list.
/// `network projection`: the node's projection payload and application, verified on request.
async fn node_projection(session: &Session, cluster: &str, node: &str, verify: bool) -> Result<Value, Outcome> {
    let answer =
        session.call("getRuntimeNetworkProjectionForNode", json!({ "clusterId": cluster, "nodeId": node })).await?;
    let signed = &answer["projection"];
    let mut printed =
        json!({ "projection": signed.get("payload").cloned().unwrap_or(Value::Null), "applied": answer["applied"] });
    if verify {
        if signed.is_null() {
            return Err(anyhow::anyhow!("node {node} of cluster {cluster} has no projection to verify").into());
        }
        let published = session.call("getControllerSigningKeys", json!({})).await?;
        let keys: Vec<PublishedKey> = published["keys"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|key| key["publicKey"].as_str().and_then(decode_public_key))
            .map(PublishedKey::new)
            .collect();
        let projection: RuntimeNetworkProjection = signing::verify(signed, &keys)
            .map_err(|error| anyhow::anyhow!("the projection does not verify: {error}"))?;
        if projection.generation == 1 {
            admit_projection(None, &projection, None)
                .map_err(|_| anyhow::anyhow!("the projection is not admitted as a first generation"))?;
        } else {
            projection.validate().map_err(|_| anyhow::anyhow!("the projection breaks its contract rules"))?;
        }
        printed["keyId"] = signed["signature"]["keyId"].clone();
    }
    Ok(printed)
}

async fn resolve_claim(
    session: &Session,
    cluster: &str,
    claim: &str,
    generation: Option<u64>,
    decision: DecisionArg,
) -> Result<Value, Outcome> {
    let listed = session.call("listRuntimeLocalStorageClaims", json!({ "clusterId": cluster })).await?;
    let current = listed["claims"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|listing| &listing["claim"])
        .find(|listed| listed["id"] == claim)
        .ok_or_else(|| anyhow::anyhow!("--claim {claim}: cluster {cluster} has no such claim"))?;
    if let Some(generation) = generation
        && current["generation"] != generation
    {
        return Err(anyhow::anyhow!(
            "--generation {generation}: the claim's current generation is {}; list the claims again",
            current["generation"]
        )
        .into());
    }
    let decision = match decision {
        DecisionArg::Purge => "purge",
        DecisionArg::Rebind => "rebind",
    };
    let reference = json!({ "id": current["id"], "generation": current["generation"], "digest": current["digest"] });
    Ok(session.call("resolveRuntimeLocalStorageClaim", json!({ "claim": reference, "decision": decision })).await?)
}

#[derive(Debug, Subcommand)]
pub enum RelayCommand {
    /// Issue or rotate a relay's credential; prints its bearer once.
    Credential {
        #[arg(long)]
        cluster: String,
        #[arg(long)]
        relay: String,
    },
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum ProtocolArg {
    Tcp,
    Udp,
}

#[derive(Debug, Subcommand)]
pub enum RouteCommand {
    /// Create or replace the route of a hostname.
    Put {
        #[arg(long)]
        cluster: String,
        #[arg(long)]
        hostname: String,
        #[arg(long)]
        service: String,
        #[arg(long, value_enum, default_value = "tcp")]
        protocol: ProtocolArg,
        #[arg(long)]
        port: u16,
    },
    /// Delete the route of a hostname.
    Delete {
        #[arg(long)]
        cluster: String,
        #[arg(long)]
        hostname: String,
    },
    /// The cluster's route table (`null` before its first route).
    List {
        #[arg(long)]
        cluster: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum NetworkCommand {
    /// The cluster's address plan.
    #[command(subcommand)]
    Plan(NetworkPlanCommand),
    /// A node's current signed projection: prints `{ projection, applied }` (the payload and
    /// the generation the node last reported applying).
    Projection {
        #[arg(long)]
        cluster: String,
        #[arg(long)]
        node: String,
        /// Also check the signature against `getControllerSigningKeys` and the projection's
        /// rules (`validateRuntimeNetworkProjection`; a first generation also passes
        /// `admitRuntimeNetworkProjection` from nothing); prints the signing key id as `keyId`.
        #[arg(long)]
        verify: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum NetworkPlanCommand {
    /// Write the address plan from a JSON or YAML file (without `digest`). The plan's revision is
    /// --expected-revision + 1, or the file's `revision`, or 1 for a first plan.
    Put {
        #[arg(short = 'f', long = "file")]
        file: PathBuf,
        /// The current revision of the cluster's plan; omit for a first plan.
        #[arg(long = "expected-revision")]
        expected_revision: Option<u64>,
    },
    /// The cluster's address plan and protected authority (`null` before its first plan).
    Get {
        #[arg(long)]
        cluster: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum IngressCommand {
    /// Designate a service as the cluster's ingress. Reads the cluster's runtime, the service's
    /// current spec revision and the current designation, and sends the compare-and-swap. The
    /// request is remembered under the state directory; the same --mutation-id resends it
    /// unchanged, so a retry is answered as a replay.
    Designate {
        #[arg(long)]
        cluster: String,
        #[arg(long)]
        service: String,
        /// The mutation id (retry with the same one after a lost answer: the remembered request
        /// is resent); default: a new one.
        #[arg(long = "mutation-id")]
        mutation_id: Option<String>,
    },
    /// The cluster's current designation.
    Get {
        #[arg(long)]
        cluster: String,
    },
    /// The designation chain, oldest first.
    List {
        #[arg(long)]
        cluster: String,
        #[arg(long = "from-generation")]
        from_generation: Option<u64>,
        #[arg(long)]
        limit: Option<u64>,
    },
    /// The accepted ingress registrations of the cluster, newest first.
    Registrations {
        #[arg(long)]
        cluster: String,
        /// Only this node's registrations.
        #[arg(long)]
        node: Option<String>,
        /// Only registrations older than this sequence (the `nextBefore` of the previous page).
        #[arg(long)]
        before: Option<u64>,
        #[arg(long)]
        limit: Option<u64>,
    },
}

/// How an administrator command ended other than with an answer; each is one exit code.
enum Outcome {
    /// The controller answered an error (exit 1).
    Refused(TypedError),
    /// The command cannot be run as given: no identity, an unreadable or invalid file (exit 2).
    Usage(anyhow::Error),
    /// The controller could not be reached, broke the exchange, did not answer in time, or
    /// answered something that is not an envelope (exit 3).
    Unreachable(String),
}

impl From<CallError> for Outcome {
    fn from(error: CallError) -> Self {
        match error {
            CallError::Typed(error) => Outcome::Refused(error),
            other => Outcome::Unreachable(other.to_string()),
        }
    }
}

impl From<anyhow::Error> for Outcome {
    fn from(error: anyhow::Error) -> Self {
        Outcome::Usage(error)
    }
}

struct Session {
    client: Client,
    identity: Value,
}

impl Session {
    fn open(connection: &Connection) -> Result<Session, Outcome> {
        let path = connection
            .identity
            .as_ref()
            .ok_or_else(|| anyhow::anyhow!("no identity: pass --identity FILE or set CLOUDLY_IDENTITY"))?;
        let identity = read_document(path)?;
        let client = Client::with_timeout(&connection.url, connection.timeout)
            .map_err(|error| anyhow::anyhow!("--url {}: {error}", crate::config::redact_url(&connection.url)))?;
        Ok(Session { client, identity })
    }

    async fn call(&self, method: &str, mut request: Value) -> Result<Value, CallError> {
        request["identity"] = self.identity.clone();
        self.client.call(method, request).await
    }

    /// `method`'s answer, or `None` when the controller answers `not-found`.
    async fn call_if_found(&self, method: &str, request: Value) -> Result<Option<Value>, Outcome> {
        match self.call(method, request).await {
            Ok(answer) => Ok(Some(answer)),
            Err(CallError::Typed(error)) if error.code() == "not-found" => Ok(None),
            Err(error) => Err(error.into()),
        }
    }
}

pub fn run(command: AdminCommand, connection: &Connection) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: cannot start the runtime: {error}");
            return ExitCode::from(2);
        }
    };
    let outcome = runtime.block_on(async {
        let session = Session::open(connection)?;
        execute(command, &session, connection).await
    });
    match outcome {
        Ok(Answer::Json(response)) => {
            println!("{}", serde_json::to_string_pretty(&response).expect("JSON serializes"));
            ExitCode::SUCCESS
        }
        Ok(Answer::Text(text)) => {
            println!("{text}");
            ExitCode::SUCCESS
        }
        Err(Outcome::Refused(error)) => {
            eprintln!(
                "{}",
                serde_json::to_string_pretty(&json!({ "error": { "text": error.text, "data": error.data } }))
                    .expect("JSON serializes")
            );
            ExitCode::from(1)
        }
        Err(Outcome::Usage(error)) => {
            eprintln!("error: {error:#}");
            ExitCode::from(2)
        }
        Err(Outcome::Unreachable(message)) => {
            eprintln!("error: {message}");
            ExitCode::from(3)
        }
    }
}

/// The members of an inventory file.
const INVENTORY_MEMBERS: &[&str] = &["organizations", "clusters", "nodes", "services"];

/// An inventory file's records, each checked against its schema.
struct Inventory {
    organizations: Vec<Value>,
    clusters: Vec<Value>,
    nodes: Vec<Value>,
    services: Vec<Value>,
}

impl Inventory {
    /// Reads and checks an inventory file; every violation of every record is named (with its
    /// list and index) before anything is sent.
    fn read(path: &std::path::Path) -> anyhow::Result<Inventory> {
        let document = read_document(path)?;
        let mut violations: Vec<String> = match document.as_object() {
            Some(members) => members
                .keys()
                .filter(|key| !INVENTORY_MEMBERS.contains(&key.as_str()))
                .map(|key| format!("inventory.{key} is not a member (members: {})", INVENTORY_MEMBERS.join(", ")))
                .collect(),
            None => {
                vec![format!("inventory must be an object with the optional members {}", INVENTORY_MEMBERS.join(", "))]
            }
        };
        let mut list = |key: &str, check: &dyn Fn(&Value) -> Vec<String>| -> Vec<Value> {
            match document.get(key) {
                None => Vec::new(),
                Some(Value::Array(items)) => {
                    for (index, item) in items.iter().enumerate() {
                        violations
                            .extend(check(item).into_iter().map(|violation| format!("{key}[{index}]: {violation}")));
                    }
                    items.clone()
                }
                Some(_) => {
                    violations.push(format!("inventory.{key} must be a list"));
                    Vec::new()
                }
            }
        };
        let inventory = Inventory {
            organizations: list("organizations", &|item| RecordKind::Organization.violations(item)),
            clusters: list("clusters", &|item| RecordKind::Cluster.violations(item)),
            nodes: list("nodes", &|entry| {
                let found = member_violations("entry", entry, &["clusterId", "node"], &["rotateCredential"]);
                if !found.is_empty() {
                    return found;
                }
                let mut found = Vec::new();
                if entry["clusterId"].as_str().and_then(Id::parse).is_none() {
                    found.push("entry.clusterId must be an Id".to_owned());
                }
                if entry.get("rotateCredential").is_some_and(|rotate| !rotate.is_boolean()) {
                    found.push("entry.rotateCredential must be a boolean".to_owned());
                }
                found.extend(RecordKind::Node.violations(&entry["node"]));
                found
            }),
            services: list("services", &|item| RecordKind::ServiceSpec.violations(item)),
        };
        if violations.is_empty() { Ok(inventory) } else { Err(invalid_file(path, &violations)) }
    }
}

/// What a put of `record` over `stored` (the controller's record, with its `revision` where it
/// has one; `None` when absent) does: `created`, `updated` or `unchanged`.
fn put_result(stored: Option<&Value>, record: &Value) -> &'static str {
    match stored {
        None => "created",
        Some(stored) => {
            let mut stored = stored.clone();
            stored.as_object_mut().map(|members| members.remove("revision"));
            if &stored == record { "unchanged" } else { "updated" }
        }
    }
}

/// Creates or replaces every record of an inventory, in dependency order, and answers what each
/// became.
async fn apply(session: &Session, inventory: Inventory) -> Result<Value, Outcome> {
    let mut applied = Vec::new();
    for organization in inventory.organizations {
        let stored = session.call_if_found("getOrganization", json!({ "organizationId": organization["id"] })).await?;
        let result = put_result(stored.as_ref().map(|answer| &answer["organization"]), &organization);
        if result != "unchanged" {
            session.call("putOrganization", json!({ "organization": organization })).await?;
        }
        applied.push(json!({ "organization": organization["id"], "result": result }));
    }
    for cluster in inventory.clusters {
        let stored = session.call_if_found("getCluster", json!({ "clusterId": cluster["id"] })).await?;
        let stored = stored.map(|answer| answer["cluster"].clone());
        let result = put_result(stored.as_ref(), &cluster);
        if result != "unchanged" {
            let expected = stored.as_ref().map(|stored| stored["revision"].clone());
            session.call("putCluster", json!({ "cluster": cluster, "expectedRevision": expected })).await?;
        }
        applied.push(json!({ "cluster": cluster["id"], "result": result }));
    }
    // A node is its `runtimeNamespace` and `hostAddresses`; `putClusterNode` issues (and answers)
    // a bearer when it creates the node or rotates its credential.
    for entry in inventory.nodes {
        let rotate = entry.get("rotateCredential").and_then(Value::as_bool).unwrap_or(false);
        let request = json!({ "clusterId": entry["clusterId"], "nodeId": entry["node"]["id"] });
        let stored = session.call_if_found("getClusterNode", request).await?.map(|answer| {
            let node = &answer["node"];
            let (namespace, addresses) = (&node["runtimeNamespace"], &node["hostAddresses"]);
            json!({ "id": node["id"], "runtimeNamespace": namespace, "hostAddresses": addresses })
        });
        let mut result = match put_result(stored.as_ref(), &entry["node"]) {
            "unchanged" if rotate => "updated",
            result => result,
        };
        let mut bearer = Value::Null;
        if result != "unchanged" {
            let request = json!({ "clusterId": entry["clusterId"], "node": entry["node"], "rotateCredential": rotate });
            bearer = session.call("putClusterNode", request).await?["bearer"].take();
            // Created by another writer between the read and the put: this put updated it.
            if result == "created" && bearer.is_null() {
                result = "updated";
            }
        }
        applied.push(json!({
            "cluster": entry["clusterId"], "node": entry["node"]["id"], "result": result, "bearer": bearer,
        }));
    }
    for spec in inventory.services {
        let request = json!({ "clusterId": spec["clusterId"], "serviceId": spec["serviceId"] });
        let stored = session.call_if_found("getServiceRuntimeSpec", request).await?;
        let stored = stored.map(|answer| answer["spec"].clone());
        let result = put_result(stored.as_ref(), &spec);
        if result != "unchanged" {
            let expected = stored.as_ref().map(|stored| stored["revision"].clone());
            session.call("putServiceRuntimeSpec", json!({ "spec": spec, "expectedRevision": expected })).await?;
        }
        applied.push(json!({ "cluster": spec["clusterId"], "service": spec["serviceId"], "result": result }));
    }
    Ok(json!({ "applied": applied }))
}

/// `designateClusterIngress`: the remembered request of this mutation id, or one built from the
/// controller's current state (remembered before it is sent).
async fn designate(
    session: &Session,
    connection: &Connection,
    cluster: String,
    service: String,
    mutation_id: Option<String>,
) -> Result<Value, Outcome> {
    let remembered_designations = RememberedDesignations::from_environment();
    let given_mutation_id = mutation_id.is_some();
    let mutation_id = mutation_id.unwrap_or_else(|| format!("mut-{}", uuid::Uuid::new_v4().simple()));
    let key = DesignationKey { url: &connection.url, cluster: &cluster, service: &service, mutation_id: &mutation_id };
    let remembered = if given_mutation_id { remembered_designations.recall(&key)? } else { None };
    let request = match remembered {
        Some(request) => request,
        None => {
            let request = designation_request(session, &cluster, &service, &mutation_id).await?;
            if let Err(error) = remembered_designations.remember(&key, &request) {
                eprintln!("warning: {error:#}; a retry with --mutation-id {mutation_id} will not be a replay");
            }
            request
        }
    };
    session.call("designateClusterIngress", request).await.map_err(|error| match error {
        CallError::Typed(error) => Outcome::Refused(error),
        other => Outcome::Unreachable(format!(
            "{other}\nthe designation may have been made: run the same command with --mutation-id {mutation_id} \
             (it resends the same request, answered as a replay if it was)"
        )),
    })
}

/// The designation request for the controller's current state: the cluster's runtime, the
/// service's current spec revision and the current designation as expected.
async fn designation_request(
    session: &Session,
    cluster: &str,
    service: &str,
    mutation_id: &str,
) -> Result<Value, Outcome> {
    let stored = session.call("getCluster", json!({ "clusterId": cluster })).await?;
    let spec = session.call("getServiceRuntimeSpec", json!({ "clusterId": cluster, "serviceId": service })).await?;
    let current = session.call("getClusterIngressDesignation", json!({ "clusterId": cluster })).await?;
    let expected = match &current["designation"] {
        Value::Null => Value::Null,
        designation => json!({
            "id": designation["id"], "generation": designation["generation"], "digest": designation["digest"],
        }),
    };
    Ok(json!({ "designation": {
        "mutationId": mutation_id,
        "clusterId": cluster,
        "ingressServiceId": service,
        "currentRuntime": {
            "id": cluster,
            "phase": stored["cluster"]["runtime"]["phase"],
            "generation": stored["cluster"]["runtime"]["generation"],
        },
        "expectedSpecRevision": spec["spec"]["revision"],
        "expectedDesignation": expected,
    } }))
}

/// Adds each present optional member to `request`.
fn with_optional(mut request: Value, members: &[(&str, Option<Value>)]) -> Value {
    for (name, value) in members {
        if let Some(value) = value {
            request[*name] = value.clone();
        }
    }
    request
}

async fn execute(command: AdminCommand, session: &Session, connection: &Connection) -> Result<Answer, Outcome> {
    let (method, request) = match command {
        AdminCommand::Apply { file } => return apply(session, Inventory::read(&file)?).await.map(Answer::Json),
        AdminCommand::Call { method, file } => (method, read_document(&file)?),
        AdminCommand::Org(command) => match command {
            OrgCommand::Put { id, name } => {
                ("putOrganization".to_owned(), json!({ "organization": { "id": id, "name": name } }))
            }
            OrgCommand::Get { id } => ("getOrganization".to_owned(), json!({ "organizationId": id })),
        },
        AdminCommand::Cluster(command) => match command {
            ClusterCommand::Put { file, expected_revision } => (
                "putCluster".to_owned(),
                json!({ "cluster": read_record(&file, RecordKind::Cluster)?, "expectedRevision": expected_revision }),
            ),
            ClusterCommand::Get { id } => ("getCluster".to_owned(), json!({ "clusterId": id })),
            ClusterCommand::List => ("listClusters".to_owned(), json!({})),
        },
        AdminCommand::Node(command) => match command {
            NodeCommand::Put { cluster, file, rotate } => (
                "putClusterNode".to_owned(),
                json!({ "clusterId": cluster, "node": read_record(&file, RecordKind::Node)?, "rotateCredential": rotate }),
            ),
            NodeCommand::Get { cluster, id } => {
                ("getClusterNode".to_owned(), json!({ "clusterId": cluster, "nodeId": id }))
            }
            NodeCommand::List { cluster } => ("listClusterNodes".to_owned(), json!({ "clusterId": cluster })),
        },
        AdminCommand::Service(command) => match command {
            ServiceCommand::Put { file, expected_revision } => (
                "putServiceRuntimeSpec".to_owned(),
                json!({ "spec": read_record(&file, RecordKind::ServiceSpec)?, "expectedRevision": expected_revision }),
            ),
            ServiceCommand::Get { cluster, service, revision } => (
                "getServiceRuntimeSpec".to_owned(),
                with_optional(
                    json!({ "clusterId": cluster, "serviceId": service }),
                    &[("revision", revision.map(Value::from))],
                ),
            ),
            ServiceCommand::Delete { cluster, service, expected_revision } => (
                "deleteService".to_owned(),
                json!({ "clusterId": cluster, "serviceId": service, "expectedRevision": expected_revision }),
            ),
            ServiceCommand::Status { cluster, service, output } => {
                let (answer, statuses) = match service {
                    Some(service) => {
                        let request = json!({ "clusterId": cluster, "serviceId": service });
                        let answer = session.call("getServiceRuntimeStatus", request).await?;
                        let statuses = vec![answer["status"].clone()];
                        (answer, statuses)
                    }
                    None => {
                        let answer =
                            session.call("listServiceRuntimeStatuses", json!({ "clusterId": cluster })).await?;
                        let statuses = answer["statuses"].as_array().cloned().unwrap_or_default();
                        (answer, statuses)
                    }
                };
                return Ok(match output {
                    OutputFormat::Json => Answer::Json(answer),
                    OutputFormat::Table => Answer::Text(status_table(&statuses)),
                });
            }
        },
        AdminCommand::Volume(command) => match command {
            VolumeCommand::List { cluster, output } => {
                let answer = session.call("listRuntimeLocalStorageClaims", json!({ "clusterId": cluster })).await?;
                return Ok(match output {
                    OutputFormat::Json => Answer::Json(answer),
                    OutputFormat::Table => {
                        Answer::Text(claim_table(answer["claims"].as_array().map_or(&[], Vec::as_slice)))
                    }
                });
            }
            VolumeCommand::Resolve { cluster, claim, generation, decision } => {
                return resolve_claim(session, &cluster, &claim, generation, decision).await.map(Answer::Json);
            }
        },
        AdminCommand::Relay(RelayCommand::Credential { cluster, relay }) => {
            ("issueClusterRelayCredential".to_owned(), json!({ "clusterId": cluster, "relayId": relay }))
        }
        AdminCommand::Route(command) => match command {
            RouteCommand::Put { cluster, hostname, service, protocol, port } => {
                let protocol = match protocol {
                    ProtocolArg::Tcp => "tcp",
                    ProtocolArg::Udp => "udp",
                };
                let route = json!({ "hostname": hostname, "serviceId": service, "protocol": protocol, "port": port });
                ("putClusterIngressRoute".to_owned(), json!({ "clusterId": cluster, "route": route }))
            }
            RouteCommand::Delete { cluster, hostname } => {
                ("deleteClusterIngressRoute".to_owned(), json!({ "clusterId": cluster, "hostname": hostname }))
            }
            RouteCommand::List { cluster } => ("getClusterIngressRoutes".to_owned(), json!({ "clusterId": cluster })),
        },
        AdminCommand::Network(NetworkCommand::Projection { cluster, node, verify }) => {
            return node_projection(session, &cluster, &node, verify).await.map(Answer::Json);
        }
        AdminCommand::Network(NetworkCommand::Plan(command)) => match command {
            NetworkPlanCommand::Put { file, expected_revision } => (
                "putRuntimeNetworkAddressPlan".to_owned(),
                json!({ "plan": read_network_plan(&file, expected_revision)? }),
            ),
            NetworkPlanCommand::Get { cluster } => {
                ("getRuntimeNetworkAddressPlan".to_owned(), json!({ "clusterId": cluster }))
            }
        },
        AdminCommand::Ingress(command) => match command {
            IngressCommand::Designate { cluster, service, mutation_id } => {
                return designate(session, connection, cluster, service, mutation_id).await.map(Answer::Json);
            }
            IngressCommand::Get { cluster } => {
                ("getClusterIngressDesignation".to_owned(), json!({ "clusterId": cluster }))
            }
            IngressCommand::List { cluster, from_generation, limit } => (
                "listClusterIngressDesignations".to_owned(),
                with_optional(
                    json!({ "clusterId": cluster }),
                    &[("fromGeneration", from_generation.map(Value::from)), ("limit", limit.map(Value::from))],
                ),
            ),
            IngressCommand::Registrations { cluster, node, before, limit } => (
                "listClusterIngressRegistrations".to_owned(),
                with_optional(
                    json!({ "clusterId": cluster }),
                    &[
                        ("nodeId", node.map(Value::from)),
                        ("before", before.map(Value::from)),
                        ("limit", limit.map(Value::from)),
                    ],
                ),
            ),
        },
    };
    Ok(Answer::Json(session.call(&method, request).await?))
}

#[cfg(test)]
mod tests {
    use super::parse_ttl;

    #[test]
    fn ttls_parse_with_units() {
        assert_eq!(parse_ttl("12h"), Some(43_200_000));
        assert_eq!(parse_ttl("90s"), Some(90_000));
        assert_eq!(parse_ttl("7d"), Some(604_800_000));
        assert_eq!(parse_ttl("0h"), None);
        assert_eq!(parse_ttl("12"), None);
        assert_eq!(parse_ttl("h"), None);
        assert_eq!(parse_ttl("12w"), None);
    }
}
