//! `cloudly identity issue` and the administrator client commands. The client commands read the
//! identity from `--identity FILE` or `CLOUDLY_IDENTITY` and print the method's answer: `-o table`
//! (aligned columns, the default of lists), `-o json` (the answer as the controller gave it, the
//! default of single records and writes) or `-o yaml`. Every command addresses its cluster with
//! `--cluster` and its record with `--id` (the older forms `cluster get <ID>`, `--service`,
//! `--relay`, `--claim` and `--node` are kept as aliases). Exit codes (an interface, see
//! README.md): 0 answered; 1 refused (the controller answered an error: its text, data and the
//! request id on stderr); 2 usage (clap's, a missing identity, an unreadable or invalid input
//! file); 3 the controller could not be reached or did not answer in time (the message names the
//! URL and the request id, never the identity).

use super::documents::{RecordKind, invalid_file, member_violations, read_document, read_network_plan, read_record};
use super::output::{self, DataFormat, OutputFormat, error_line, stderr_line, stdout_line};
use super::remembered::{DesignationKey, RememberedDesignations};
use super::views::{self, View};
use crate::api::methods::name;
use crate::api::wire::answers::{
    ClaimListingRead, ClaimsAnswer, ClusterAnswer, DesignationAnswer, NodeAnswer, NodeProjectionAnswer, NodePutAnswer,
    NodeSummaryRead, OrganizationAnswer, Revised, SigningKeysAnswer, SpecAnswer,
};
use crate::api::wire::{self, NoMembers};
use crate::client::{CallError, Client, TypedError};
use crate::contract::network::RuntimeNetworkProjection;
use crate::contract::network::projection::admit_projection;
use crate::contract::signing::{self, PublishedKey, decode_public_key};
use crate::contract::{Id, Protocol};
use crate::domain::identity::{IdentitySubject, IdentityType, Role, issue_identity};
use crate::domain::plan::claims::ClaimDecision;
use crate::keys::ControllerKeys;
use clap::{Args, Subcommand, ValueEnum};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Debug, Subcommand)]
pub enum IdentityCommand {
    /// Issue an identity signed by this controller's identity key; prints the IIdentity JSON.
    #[command(
        after_help = "Examples:\n  cloudly identity issue --name Ada --user-id ada --role operator --ttl 12h > ada.json\n  cloudly identity issue --name ci --user-id ci --role viewer --type machine --ttl 1h --data-dir /var/lib/cloudly"
    )]
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

/// An identity's role.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum RoleArg {
    /// Every method.
    Admin,
    /// Reads and designations.
    Operator,
    /// Reads only.
    Viewer,
}

/// An identity's type.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum TypeArg {
    /// A person.
    Human,
    /// A program.
    Machine,
}

/// Parses a positive duration (`90s`, `30m`, `12h`, `7d`, `1h 30m`: humantime's forms) into
/// milliseconds.
pub fn parse_ttl(text: &str) -> Option<u64> {
    let duration = humantime::parse_duration(text).ok()?;
    u64::try_from(duration.as_millis()).ok().filter(|ms| *ms > 0)
}

pub fn run_identity(command: IdentityCommand) -> ExitCode {
    let IdentityCommand::Issue { name, user_id, role, ttl, identity_type, data_dir, keys_dir } = command;
    let Some(user_id) = Id::parse(&user_id) else {
        error_line("--user-id must be an Id (^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$)");
        return ExitCode::from(2);
    };
    let Some(ttl_ms) = parse_ttl(&ttl) else {
        error_line("--ttl must be a positive number with s, m, h or d, such as 12h");
        return ExitCode::from(2);
    };
    let keys_dir = keys_dir.unwrap_or_else(|| crate::keys::default_keys_dir(&data_dir));
    let keys = match ControllerKeys::load_from(&keys_dir) {
        Ok(keys) => keys,
        Err(error) => {
            error_line(error);
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
            stdout_line(&output::json_text(&serde_json::to_value(&identity).unwrap_or(Value::Null)));
            ExitCode::SUCCESS
        }
        Err(error) => {
            error_line(format!("cannot sign the identity: {error}"));
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
    /// A PEM file of CA certificates: an `https://` controller's certificate must chain to one of
    /// them (and no other root is trusted). Default: the system's roots (`SSL_CERT_FILE`).
    #[arg(long = "ca-cert", env = "CLOUDLY_CA_CERT", global = true, value_name = "FILE")]
    ca_cert: Option<PathBuf>,
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

/// Parses `--wait`: as `--timeout`, or `0` (do not wait).
fn parse_wait(text: &str) -> Result<std::time::Duration, String> {
    if text.trim_end_matches('s') == "0" { Ok(std::time::Duration::ZERO) } else { parse_timeout(text) }
}

/// `-o` of a command that answers a list: a table unless asked otherwise.
#[derive(Debug, Clone, Copy, Args)]
pub struct ListOutput {
    /// Output format: `table` (aligned columns, times in RFC 3339), `json` or `yaml` (the answer
    /// as the controller gave it).
    #[arg(short = 'o', long = "output", value_enum, default_value = "table")]
    output: OutputFormat,
}

/// `-o` of a command that answers one record: JSON unless asked otherwise.
#[derive(Debug, Clone, Copy, Args)]
pub struct RecordOutput {
    /// Output format: `json` or `yaml` (the answer as the controller gave it), or `table`
    /// (aligned columns, times in RFC 3339).
    #[arg(short = 'o', long = "output", value_enum, default_value = "json")]
    output: OutputFormat,
}

/// `-o` of a write or a raw call: JSON unless asked otherwise.
#[derive(Debug, Clone, Copy, Args)]
pub struct WriteOutput {
    /// Output format of the answer: `json` or `yaml`.
    #[arg(short = 'o', long = "output", value_enum, default_value = "json")]
    output: DataFormat,
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
    /// Service runtime specs and their runtime status.
    #[command(subcommand)]
    Service(ServiceCommand),
    /// Cluster ingress designation and registrations.
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
    #[command(
        after_help = "Examples:\n  cloudly apply -f deploy/examples/inventory.yaml\n  cloudly apply -f deploy/examples/inventory.yaml -o table\n  cat inventory.json | cloudly apply -f -"
    )]
    Apply {
        /// The inventory file (`.json`, `.yaml`/`.yml`, or by content); `-` reads standard input.
        #[arg(short = 'f', long = "file")]
        file: PathBuf,
        #[command(flatten)]
        output: RecordOutput,
    },
    /// Call any method with a request file; the identity is added to the request.
    #[command(
        after_help = "Examples:\n  cloudly call getCluster -f deploy/examples/get-cluster.json\n  echo '{ \"clusterId\": \"c1\" }' | cloudly call listClusterNodes -f - -o yaml"
    )]
    Call {
        /// The method name (`openapi/openapi.yaml` lists them).
        method: String,
        /// The request file, JSON or YAML (without `identity`); `-` reads standard input.
        #[arg(short = 'f', long = "file")]
        file: PathBuf,
        #[command(flatten)]
        output: WriteOutput,
    },
    /// Print this client's version and the controller's (`getControllerVersion`; needs no
    /// identity).
    #[command(after_help = "Examples:\n  cloudly version\n  cloudly version -o json")]
    Version {
        #[command(flatten)]
        output: ListOutput,
    },
    /// Whether the controller is ready (`GET /readyz`; needs no identity): prints `ready`, or why
    /// not and exits 1. With `--wait`, asks again until it is ready or the time is up.
    #[command(after_help = "Examples:\n  cloudly ready\n  cloudly ready --wait 60s")]
    Ready {
        /// How long to wait for the controller to be ready: seconds, or a number with s or m
        /// (`60s`); `0` asks once.
        #[arg(long, default_value = "0", value_parser = parse_wait)]
        wait: std::time::Duration,
    },
}

#[derive(Debug, Subcommand)]
pub enum OrgCommand {
    /// Create or replace an organization.
    #[command(after_help = "Examples:\n  cloudly org put --id org --name \"Example Org\"")]
    Put {
        /// The organization id.
        #[arg(long)]
        id: String,
        /// Its display name.
        #[arg(long)]
        name: String,
        #[command(flatten)]
        output: WriteOutput,
    },
    /// One organization.
    #[command(after_help = "Examples:\n  cloudly org get --id org\n  cloudly org get --id org -o table")]
    Get {
        /// The organization id.
        #[arg(long)]
        id: String,
        #[command(flatten)]
        output: RecordOutput,
    },
}

#[derive(Debug, Subcommand)]
pub enum ClusterCommand {
    /// Create (no --expected-revision) or replace a cluster from a JSON or YAML file.
    #[command(
        after_help = "Examples:\n  cloudly cluster put -f deploy/examples/cluster.json\n  cloudly cluster put -f deploy/examples/cluster.json --expected-revision 1"
    )]
    Put {
        /// The cluster record (`.json`, `.yaml`/`.yml`, or by content); `-` reads standard input.
        #[arg(short = 'f', long = "file")]
        file: PathBuf,
        /// The cluster's current revision; omit to create.
        #[arg(long = "expected-revision")]
        expected_revision: Option<u64>,
        #[command(flatten)]
        output: WriteOutput,
    },
    /// One cluster.
    #[command(after_help = "Examples:\n  cloudly cluster get --id c1\n  cloudly cluster get --id c1 -o yaml")]
    Get {
        /// The cluster id (also `--cluster`).
        #[arg(
            long = "id",
            alias = "cluster",
            required_unless_present = "positional_id",
            conflicts_with = "positional_id"
        )]
        id: Option<String>,
        /// The cluster id, as an argument (the older form of `--id`).
        #[arg(value_name = "ID", hide = true)]
        positional_id: Option<String>,
        #[command(flatten)]
        output: RecordOutput,
    },
    /// Every cluster.
    #[command(after_help = "Examples:\n  cloudly cluster list\n  cloudly cluster list -o json")]
    List {
        #[command(flatten)]
        output: ListOutput,
    },
}

#[derive(Debug, Subcommand)]
pub enum NodeCommand {
    /// Create or update a node from a JSON or YAML file; prints its bearer once when issued.
    #[command(
        after_help = "Examples:\n  cloudly node put --cluster c1 -f deploy/examples/node.json\n  cloudly node put --cluster c1 -f deploy/examples/node.json --rotate"
    )]
    Put {
        /// The cluster.
        #[arg(long)]
        cluster: String,
        /// The node record (`.json`, `.yaml`/`.yml`, or by content); `-` reads standard input.
        #[arg(short = 'f', long = "file")]
        file: PathBuf,
        /// Issue a new bearer (the old one stops working).
        #[arg(long)]
        rotate: bool,
        #[command(flatten)]
        output: WriteOutput,
    },
    /// One node with its session status (never its bearer).
    #[command(
        after_help = "Examples:\n  cloudly node get --cluster c1 --id node-1\n  cloudly node get --cluster c1 --id node-1 -o table"
    )]
    Get {
        /// The cluster.
        #[arg(long)]
        cluster: String,
        /// The node id (also `--node`).
        #[arg(long = "id", alias = "node")]
        id: String,
        #[command(flatten)]
        output: RecordOutput,
    },
    /// The nodes of a cluster.
    #[command(after_help = "Examples:\n  cloudly node list --cluster c1")]
    List {
        /// The cluster.
        #[arg(long)]
        cluster: String,
        #[command(flatten)]
        output: ListOutput,
    },
}

#[derive(Debug, Subcommand)]
pub enum ServiceCommand {
    /// Write a service runtime spec from a JSON or YAML file (without `revision`).
    #[command(
        after_help = "Examples:\n  cloudly service put -f deploy/examples/web-spec.json\n  cloudly service put -f deploy/examples/web-spec.json --expected-revision 1"
    )]
    Put {
        /// The spec (`.json`, `.yaml`/`.yml`, or by content); `-` reads standard input.
        #[arg(short = 'f', long = "file")]
        file: PathBuf,
        /// The current revision; omit to create.
        #[arg(long = "expected-revision")]
        expected_revision: Option<u64>,
        #[command(flatten)]
        output: WriteOutput,
    },
    /// The current spec, or one revision.
    #[command(
        after_help = "Examples:\n  cloudly service get --cluster c1 --id web\n  cloudly service get --cluster c1 --id web --revision 1 -o table"
    )]
    Get {
        /// The cluster.
        #[arg(long)]
        cluster: String,
        /// The service id (also `--service`).
        #[arg(long = "id", alias = "service")]
        id: String,
        /// One revision; omit for the current spec.
        #[arg(long)]
        revision: Option<u64>,
        #[command(flatten)]
        output: RecordOutput,
    },
    /// Delete a service.
    #[command(after_help = "Examples:\n  cloudly service delete --cluster c1 --id web --expected-revision 1")]
    Delete {
        /// The cluster.
        #[arg(long)]
        cluster: String,
        /// The service id (also `--service`).
        #[arg(long = "id", alias = "service")]
        id: String,
        /// The service's current spec revision.
        #[arg(long = "expected-revision")]
        expected_revision: u64,
        #[command(flatten)]
        output: WriteOutput,
    },
    /// Why a service runs or does not: the runtime status of every service of the cluster, or of
    /// one (`getServiceRuntimeStatus` / `listServiceRuntimeStatuses`).
    #[command(
        after_help = "Examples:\n  cloudly service status --cluster c1\n  cloudly service status --cluster c1 --id web -o json"
    )]
    Status {
        /// The cluster.
        #[arg(long)]
        cluster: String,
        /// One service (also `--service`); omit for all.
        #[arg(long = "id", alias = "service")]
        id: Option<String>,
        #[command(flatten)]
        output: ListOutput,
    },
}

#[derive(Debug, Subcommand)]
pub enum VolumeCommand {
    /// Every claim of the cluster with the node's last state (`listRuntimeLocalStorageClaims`).
    #[command(after_help = "Examples:\n  cloudly volume list --cluster c1\n  cloudly volume list --cluster c1 -o json")]
    List {
        /// The cluster.
        #[arg(long)]
        cluster: String,
        #[command(flatten)]
        output: ListOutput,
    },
    /// Decide on a claim whose node answered `uncertain` (`resolveRuntimeLocalStorageClaim`):
    /// `rebind` keeps and mounts the bytes, `purge` deletes them. The claim's current generation
    /// is read from the cluster's list first; `--generation` makes sure it is the one you saw.
    #[command(
        after_help = "Examples:\n  cloudly volume resolve --cluster c1 --id lsc-<id> --generation 1 --decision rebind"
    )]
    Resolve {
        /// The cluster.
        #[arg(long)]
        cluster: String,
        /// The claim id, `lsc-…` (also `--claim`).
        #[arg(long = "id", alias = "claim")]
        id: String,
        /// The generation the decision is for; refused when the claim has moved on.
        #[arg(long)]
        generation: Option<u64>,
        /// `rebind` (keep and mount the bytes) or `purge` (delete them).
        #[arg(long, value_enum)]
        decision: DecisionArg,
        #[command(flatten)]
        output: WriteOutput,
    },
}

/// An operator's decision on an `uncertain` claim.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum DecisionArg {
    /// Delete the bytes.
    Purge,
    /// Keep and mount the bytes.
    Rebind,
}

#[derive(Debug, Subcommand)]
pub enum RelayCommand {
    /// Issue or rotate a relay's credential; prints its bearer once.
    #[command(after_help = "Examples:\n  cloudly relay credential --cluster c1 --id relay-1")]
    Credential {
        /// The cluster.
        #[arg(long)]
        cluster: String,
        /// The relay id (also `--relay`).
        #[arg(long = "id", alias = "relay")]
        id: String,
        #[command(flatten)]
        output: WriteOutput,
    },
    /// The cluster's relays (`listClusterRelays`): each credential's generation and its newest
    /// connection's epoch, last connect or heartbeat and whether it is elected; `-o json` shows
    /// every connection. Never a bearer or token.
    #[command(after_help = "Examples:\n  cloudly relay list --cluster c1\n  cloudly relay list --cluster c1 -o json")]
    List {
        /// The cluster.
        #[arg(long)]
        cluster: String,
        #[command(flatten)]
        output: ListOutput,
    },
}

/// A route's transport protocol.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum ProtocolArg {
    /// TCP.
    Tcp,
    /// UDP.
    Udp,
}

#[derive(Debug, Subcommand)]
pub enum RouteCommand {
    /// Create or replace the route of a hostname.
    #[command(
        after_help = "Examples:\n  cloudly route put --cluster c1 --hostname www.example.net --service web --protocol tcp --port 443"
    )]
    Put {
        /// The cluster.
        #[arg(long)]
        cluster: String,
        /// The hostname routed (a lowercase DNS name; also `--id`).
        #[arg(long, alias = "id")]
        hostname: String,
        /// The service it reaches.
        #[arg(long)]
        service: String,
        /// The transport protocol.
        #[arg(long, value_enum, default_value = "tcp")]
        protocol: ProtocolArg,
        /// The port: one the service declares with that protocol.
        #[arg(long)]
        port: u16,
        #[command(flatten)]
        output: WriteOutput,
    },
    /// Delete the route of a hostname.
    #[command(after_help = "Examples:\n  cloudly route delete --cluster c1 --hostname www.example.net")]
    Delete {
        /// The cluster.
        #[arg(long)]
        cluster: String,
        /// The hostname (also `--id`).
        #[arg(long, alias = "id")]
        hostname: String,
        #[command(flatten)]
        output: WriteOutput,
    },
    /// The cluster's route table (no rows, or `table: null` as JSON, before its first route).
    #[command(after_help = "Examples:\n  cloudly route list --cluster c1\n  cloudly route list --cluster c1 -o json")]
    List {
        /// The cluster.
        #[arg(long)]
        cluster: String,
        #[command(flatten)]
        output: ListOutput,
    },
}

#[derive(Debug, Subcommand)]
pub enum NetworkCommand {
    /// The cluster's address plan.
    #[command(subcommand)]
    Plan(NetworkPlanCommand),
    /// A node's current signed projection: prints `{ projection, applied }` (the payload and
    /// the generation the node last reported applying).
    #[command(
        after_help = "Examples:\n  cloudly network projection --cluster c1 --id node-1\n  cloudly network projection --cluster c1 --id node-1 --verify -o table"
    )]
    Projection {
        /// The cluster.
        #[arg(long)]
        cluster: String,
        /// The node id (also `--node`).
        #[arg(long = "id", alias = "node")]
        id: String,
        /// Also check the signature against `getControllerSigningKeys` and the projection's
        /// rules (`validateRuntimeNetworkProjection`; a first generation also passes
        /// `admitRuntimeNetworkProjection` from nothing); prints the signing key id as `keyId`.
        #[arg(long)]
        verify: bool,
        #[command(flatten)]
        output: RecordOutput,
    },
}

#[derive(Debug, Subcommand)]
pub enum NetworkPlanCommand {
    /// Write the address plan from a JSON or YAML file (without `digest`). The plan's revision is
    /// --expected-revision + 1, or the file's `revision`, or 1 for a first plan.
    #[command(
        after_help = "Examples:\n  cloudly network plan put -f deploy/examples/network-plan.yaml\n  cloudly network plan put -f deploy/examples/network-plan.yaml --expected-revision 1"
    )]
    Put {
        /// The plan (`.json`, `.yaml`/`.yml`, or by content); `-` reads standard input.
        #[arg(short = 'f', long = "file")]
        file: PathBuf,
        /// The current revision of the cluster's plan; omit for a first plan.
        #[arg(long = "expected-revision")]
        expected_revision: Option<u64>,
        #[command(flatten)]
        output: WriteOutput,
    },
    /// The cluster's address plan and protected authority (`null` before its first plan).
    #[command(
        after_help = "Examples:\n  cloudly network plan get --cluster c1\n  cloudly network plan get --cluster c1 -o table"
    )]
    Get {
        /// The cluster.
        #[arg(long)]
        cluster: String,
        #[command(flatten)]
        output: RecordOutput,
    },
}

#[derive(Debug, Subcommand)]
pub enum IngressCommand {
    /// Designate a service as the cluster's ingress. Reads the cluster's runtime, the service's
    /// current spec revision and the current designation, and sends the compare-and-swap. The
    /// request is remembered under the state directory; the same --mutation-id resends it
    /// unchanged, so a retry is answered as a replay.
    #[command(
        after_help = "Examples:\n  cloudly ingress designate --cluster c1 --service ingress\n  cloudly ingress designate --cluster c1 --service ingress --mutation-id rotate-1"
    )]
    Designate {
        /// The cluster.
        #[arg(long)]
        cluster: String,
        /// The service designated as the cluster's ingress.
        #[arg(long)]
        service: String,
        /// The mutation id (retry with the same one after a lost answer: the remembered request
        /// is resent); default: a new one.
        #[arg(long = "mutation-id")]
        mutation_id: Option<String>,
        #[command(flatten)]
        output: WriteOutput,
    },
    /// The cluster's current designation.
    #[command(
        after_help = "Examples:\n  cloudly ingress get --cluster c1\n  cloudly ingress get --cluster c1 -o table"
    )]
    Get {
        /// The cluster.
        #[arg(long)]
        cluster: String,
        #[command(flatten)]
        output: RecordOutput,
    },
    /// The designation chain, oldest first.
    #[command(
        after_help = "Examples:\n  cloudly ingress list --cluster c1\n  cloudly ingress list --cluster c1 --from-generation 2 --limit 10 -o json"
    )]
    List {
        /// The cluster.
        #[arg(long)]
        cluster: String,
        /// The first generation listed (the `nextGeneration` of the previous page).
        #[arg(long = "from-generation")]
        from_generation: Option<u64>,
        /// At most this many designations.
        #[arg(long)]
        limit: Option<u64>,
        #[command(flatten)]
        output: ListOutput,
    },
    /// The accepted ingress registrations of the cluster, newest first.
    #[command(
        after_help = "Examples:\n  cloudly ingress registrations --cluster c1\n  cloudly ingress registrations --cluster c1 --node node-1 --limit 20 -o json"
    )]
    Registrations {
        /// The cluster.
        #[arg(long)]
        cluster: String,
        /// Only this node's registrations.
        #[arg(long)]
        node: Option<String>,
        /// Only registrations older than this sequence (the `nextBefore` of the previous page).
        #[arg(long)]
        before: Option<u64>,
        /// At most this many registrations.
        #[arg(long)]
        limit: Option<u64>,
        #[command(flatten)]
        output: ListOutput,
    },
}

/// How an administrator command ended other than with an answer; each is one exit code.
enum Outcome {
    /// The controller answered an error (exit 1), with the request id of the call.
    Refused(TypedError, String),
    /// The command cannot be run as given: no identity, an unreadable or invalid file (exit 2).
    Usage(anyhow::Error),
    /// The controller could not be reached, broke the exchange, did not answer in time, or
    /// answered something that is not an envelope (exit 3). The message names the URL.
    Unreachable(String),
    /// `ready`: the controller answered that it is not ready (exit 1).
    NotReady(String),
}

impl From<anyhow::Error> for Outcome {
    fn from(error: anyhow::Error) -> Self {
        Outcome::Usage(error)
    }
}

/// A failed call: the error and the request id of the call.
struct Failed {
    error: CallError,
    request_id: String,
    endpoint: String,
}

impl From<Failed> for Outcome {
    fn from(failed: Failed) -> Self {
        let Failed { error, request_id, endpoint } = failed;
        match error {
            CallError::Typed(error) => Outcome::Refused(error, request_id),
            CallError::Http { status, body } => Outcome::Unreachable(format!(
                "{endpoint} answered HTTP {status} instead of an envelope: {}\nrequest id: {request_id}",
                body.trim()
            )),
            other => Outcome::Unreachable(format!("{other}\nrequest id: {request_id}")),
        }
    }
}

/// A client of the controller and the caller's identity (read only by the commands that need it).
struct Session {
    client: Client,
    identity: Option<PathBuf>,
    url: String,
}

impl Session {
    fn open(connection: &Connection) -> Result<Session, Outcome> {
        let client = Client::with_options(&connection.url, connection.timeout, connection.ca_cert.as_deref())
            .map_err(|error| anyhow::anyhow!("--url {}: {error}", crate::config::redact_url(&connection.url)))?;
        Ok(Session { client, identity: connection.identity.clone(), url: connection.url.clone() })
    }

    /// The identity file's content.
    fn identity(&self) -> Result<Value, Outcome> {
        let path = self
            .identity
            .as_ref()
            .ok_or_else(|| anyhow::anyhow!("no identity: pass --identity FILE or set CLOUDLY_IDENTITY"))?;
        Ok(read_document(path)?)
    }

    /// `method` as the identity's holder; `request` is the method's shape (`api::wire`), or a
    /// request file's content.
    /// The answer is read as `A`: `Value`, or an answer shape of `api::wire::answers`.
    async fn call<A: DeserializeOwned>(&self, method: &str, request: impl Serialize) -> Result<A, Outcome> {
        let request = wire::WithIdentity { request, identity: self.identity()? };
        self.call_anonymous(method, request).await.map_err(Outcome::from)
    }

    /// `method` without an identity.
    async fn call_anonymous<A: DeserializeOwned>(&self, method: &str, request: impl Serialize) -> Result<A, Failed> {
        let (request_id, answer) = self.client.call_traced(method, request).await;
        answer.map_err(|error| Failed { error, request_id, endpoint: self.client.endpoint().to_owned() })
    }

    /// `method`'s answer, or `None` when the controller answers `not-found`.
    async fn call_if_found<A: DeserializeOwned>(
        &self,
        method: &str,
        request: impl Serialize,
    ) -> Result<Option<A>, Outcome> {
        match self.call(method, request).await {
            Ok(answer) => Ok(Some(answer)),
            Err(Outcome::Refused(error, _)) if error.code() == "not-found" => Ok(None),
            Err(outcome) => Err(outcome),
        }
    }
}

/// What a command prints on success: the answer, in `format`, through `view` for a table.
struct Answer {
    value: Value,
    format: OutputFormat,
    view: Option<&'static View>,
}

impl Answer {
    fn data(value: Value, output: WriteOutput) -> Answer {
        Answer { value, format: output.output.into(), view: None }
    }

    fn viewed(value: Value, format: OutputFormat, view: &'static View) -> Answer {
        Answer { value, format, view: Some(view) }
    }

    fn print(&self) {
        match (self.format, self.view) {
            (OutputFormat::Table, Some(view)) => stdout_line(&view.render(&self.value)),
            (OutputFormat::Table, None) if self.value.is_string() => stdout_line(self.value.as_str().unwrap_or("")),
            (OutputFormat::Yaml, _) => output::print_data(&self.value, DataFormat::Yaml),
            _ => output::print_data(&self.value, DataFormat::Json),
        }
    }
}

/// Runs an administrator command against the controller of `connection`.
pub fn run(command: AdminCommand, connection: &Connection) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            error_line(format!("cannot start the runtime: {error}"));
            return ExitCode::from(2);
        }
    };
    let outcome = runtime.block_on(async {
        let session = Session::open(connection)?;
        execute(command, &session).await
    });
    match outcome {
        Ok(answer) => {
            answer.print();
            ExitCode::SUCCESS
        }
        Err(Outcome::Refused(error, request_id)) => {
            let refusal = json!({ "error": { "text": error.text, "data": error.data }, "requestId": request_id });
            stderr_line(&output::json_text(&refusal));
            ExitCode::from(1)
        }
        Err(Outcome::NotReady(message)) => {
            stderr_line(&message);
            ExitCode::from(1)
        }
        Err(Outcome::Usage(error)) => {
            error_line(format!("{error:#}"));
            ExitCode::from(2)
        }
        Err(Outcome::Unreachable(message)) => {
            error_line(message);
            ExitCode::from(3)
        }
    }
}

/// `cloudly version`: this client's version, then the controller's.
async fn version(session: &Session, output: ListOutput) -> Result<Answer, Outcome> {
    use crate::domain::version::{PROFILE, VERSION};
    let client = json!({ "component": "client", "version": VERSION, "profile": PROFILE, "controllerId": null });
    let controller: Value = match session.call_anonymous(name::GET_CONTROLLER_VERSION, NoMembers {}).await {
        Ok(answer) => answer,
        Err(failed) => {
            // The client's version is worth printing even when the controller cannot be asked.
            stderr_line(&format!("client version: {VERSION} ({PROFILE})"));
            return Err(failed.into());
        }
    };
    let mut controller_row = controller.clone();
    controller_row["component"] = json!("controller");
    let value = match output.output {
        OutputFormat::Table => json!({ "components": [client, controller_row] }),
        _ => json!({ "client": { "version": VERSION, "profile": PROFILE }, "controller": controller }),
    };
    Ok(Answer::viewed(value, output.output, &views::VERSION_VIEW))
}

/// `cloudly ready`: `GET /readyz` until it answers 200 or `wait` is over.
async fn ready(session: &Session, wait: std::time::Duration) -> Result<Answer, Outcome> {
    let deadline = tokio::time::Instant::now() + wait;
    let readyz = format!("{}/readyz", crate::config::redact_url(session.url.trim_end_matches('/')));
    loop {
        let outcome = match session.client.get("/readyz").await {
            Ok((200, _)) => return Ok(Answer { value: json!("ready"), format: OutputFormat::Table, view: None }),
            Ok((status, body)) => {
                let reason = serde_json::from_str::<Value>(&body)
                    .ok()
                    .and_then(|body| body["reason"].as_str().map(str::to_owned));
                Outcome::NotReady(format!(
                    "not ready: {readyz} answered {status} ({})",
                    reason.unwrap_or_else(|| body.trim().to_owned())
                ))
            }
            Err(error) => Outcome::Unreachable(error.to_string()),
        };
        if tokio::time::Instant::now() + std::time::Duration::from_millis(250) > deadline {
            return Err(outcome);
        }
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
}

async fn execute(command: AdminCommand, session: &Session) -> Result<Answer, Outcome> {
    /// A read answered through a view: (method, request, format, view).
    fn read(
        method: &str,
        request: impl Serialize,
        format: OutputFormat,
        view: &'static View,
    ) -> (String, Value, OutputFormat, &'static View) {
        (method.to_owned(), wire::to_request(&request), format, view)
    }
    let (method, request, format, view) = match command {
        AdminCommand::Version { output } => return version(session, output).await,
        AdminCommand::Ready { wait } => return ready(session, wait).await,
        AdminCommand::Apply { file, output } => {
            let applied = apply(session, Inventory::read(&file)?).await?;
            return Ok(Answer::viewed(applied, output.output, &views::APPLIED_VIEW));
        }
        AdminCommand::Call { method, file, output } => {
            return Ok(Answer::data(session.call(&method, read_document(&file)?).await?, output));
        }
        AdminCommand::Org(OrgCommand::Put { id, name, output }) => {
            let request = wire::PutOrganization { organization: wire::Organization { id, name } };
            return Ok(Answer::data(session.call(name::PUT_ORGANIZATION, request).await?, output));
        }
        AdminCommand::Org(OrgCommand::Get { id, output }) => {
            let request = wire::GetOrganization { organization_id: id };
            read(name::GET_ORGANIZATION, request, output.output, &views::ORGANIZATION_VIEW)
        }
        AdminCommand::Cluster(ClusterCommand::Put { file, expected_revision, output }) => {
            let cluster = read_record(&file, RecordKind::Cluster)?;
            let request = wire::PutCluster { cluster, expected_revision: Value::from(expected_revision) };
            return Ok(Answer::data(session.call(name::PUT_CLUSTER, request).await?, output));
        }
        AdminCommand::Cluster(ClusterCommand::Get { id, positional_id, output }) => {
            let request = wire::OfCluster { cluster_id: id.or(positional_id).unwrap_or_default() };
            read(name::GET_CLUSTER, request, output.output, &views::CLUSTER_VIEW)
        }
        AdminCommand::Cluster(ClusterCommand::List { output }) => {
            read(name::LIST_CLUSTERS, NoMembers {}, output.output, &views::CLUSTERS_VIEW)
        }
        AdminCommand::Node(NodeCommand::Put { cluster, file, rotate, output }) => {
            let node = read_record(&file, RecordKind::Node)?;
            let request =
                wire::PutClusterNode { cluster_id: Value::from(cluster), node, rotate_credential: Value::from(rotate) };
            return Ok(Answer::data(session.call(name::PUT_CLUSTER_NODE, request).await?, output));
        }
        AdminCommand::Node(NodeCommand::Get { cluster, id, output }) => {
            let request = wire::GetClusterNode { cluster_id: cluster, node_id: id };
            read(name::GET_CLUSTER_NODE, request, output.output, &views::NODE_VIEW)
        }
        AdminCommand::Node(NodeCommand::List { cluster, output }) => {
            read(name::LIST_CLUSTER_NODES, wire::OfCluster { cluster_id: cluster }, output.output, &views::NODES_VIEW)
        }
        AdminCommand::Service(ServiceCommand::Put { file, expected_revision, output }) => {
            let spec = read_record(&file, RecordKind::ServiceSpec)?;
            let request = wire::PutServiceRuntimeSpec { spec, expected_revision: Value::from(expected_revision) };
            return Ok(Answer::data(session.call(name::PUT_SERVICE_RUNTIME_SPEC, request).await?, output));
        }
        AdminCommand::Service(ServiceCommand::Get { cluster, id, revision, output }) => {
            let request = wire::GetServiceRuntimeSpec {
                cluster_id: Value::from(cluster),
                service_id: Value::from(id),
                revision: revision.map(Value::from),
            };
            read(name::GET_SERVICE_RUNTIME_SPEC, request, output.output, &views::SPEC_VIEW)
        }
        AdminCommand::Service(ServiceCommand::Delete { cluster, id, expected_revision, output }) => {
            let request = wire::DeleteService {
                cluster_id: Value::from(cluster),
                service_id: Value::from(id),
                expected_revision: Value::from(expected_revision),
            };
            return Ok(Answer::data(session.call(name::DELETE_SERVICE, request).await?, output));
        }
        AdminCommand::Service(ServiceCommand::Status { cluster, id: Some(id), output }) => {
            let request = wire::GetServiceRuntimeStatus { cluster_id: cluster, service_id: id };
            read(name::GET_SERVICE_RUNTIME_STATUS, request, output.output, &views::STATUS_VIEW)
        }
        AdminCommand::Service(ServiceCommand::Status { cluster, id: None, output }) => {
            let request = wire::OfCluster { cluster_id: cluster };
            read(name::LIST_SERVICE_RUNTIME_STATUSES, request, output.output, &views::STATUSES_VIEW)
        }
        AdminCommand::Volume(VolumeCommand::List { cluster, output }) => {
            let request = wire::OfCluster { cluster_id: cluster };
            read(name::LIST_RUNTIME_LOCAL_STORAGE_CLAIMS, request, output.output, &views::CLAIMS_VIEW)
        }
        AdminCommand::Volume(VolumeCommand::Resolve { cluster, id, generation, decision, output }) => {
            return Ok(Answer::data(resolve_claim(session, &cluster, &id, generation, decision).await?, output));
        }
        AdminCommand::Relay(RelayCommand::Credential { cluster, id, output }) => {
            let request = wire::IssueClusterRelayCredential { cluster_id: cluster, relay_id: id };
            return Ok(Answer::data(session.call(name::ISSUE_CLUSTER_RELAY_CREDENTIAL, request).await?, output));
        }
        AdminCommand::Relay(RelayCommand::List { cluster, output }) => {
            read(name::LIST_CLUSTER_RELAYS, wire::OfCluster { cluster_id: cluster }, output.output, &views::RELAYS_VIEW)
        }
        AdminCommand::Route(RouteCommand::Put { cluster, hostname, service, protocol, port, output }) => {
            let protocol = match protocol {
                ProtocolArg::Tcp => Protocol::Tcp,
                ProtocolArg::Udp => Protocol::Udp,
            };
            let route = wire::IngressRoute {
                hostname: Value::from(hostname),
                service_id: Value::from(service),
                protocol: Value::from(protocol.as_str()),
                port: Value::from(port),
            };
            let request =
                wire::PutClusterIngressRoute { cluster_id: Value::from(cluster), route: wire::to_request(&route) };
            return Ok(Answer::data(session.call(name::PUT_CLUSTER_INGRESS_ROUTE, request).await?, output));
        }
        AdminCommand::Route(RouteCommand::Delete { cluster, hostname, output }) => {
            let request = wire::DeleteClusterIngressRoute { cluster_id: cluster, hostname };
            return Ok(Answer::data(session.call(name::DELETE_CLUSTER_INGRESS_ROUTE, request).await?, output));
        }
        AdminCommand::Route(RouteCommand::List { cluster, output }) => {
            let request = wire::OfCluster { cluster_id: cluster };
            read(name::GET_CLUSTER_INGRESS_ROUTES, request, output.output, &views::ROUTES_VIEW)
        }
        AdminCommand::Network(NetworkCommand::Projection { cluster, id, verify, output }) => {
            let projection = node_projection(session, &cluster, &id, verify).await?;
            return Ok(Answer::viewed(projection, output.output, &views::PROJECTION_VIEW));
        }
        AdminCommand::Network(NetworkCommand::Plan(NetworkPlanCommand::Put { file, expected_revision, output })) => {
            let request = wire::PutRuntimeNetworkAddressPlan { plan: read_network_plan(&file, expected_revision)? };
            return Ok(Answer::data(session.call(name::PUT_RUNTIME_NETWORK_ADDRESS_PLAN, request).await?, output));
        }
        AdminCommand::Network(NetworkCommand::Plan(NetworkPlanCommand::Get { cluster, output })) => {
            let request = wire::OfCluster { cluster_id: cluster };
            read(name::GET_RUNTIME_NETWORK_ADDRESS_PLAN, request, output.output, &views::PLAN_VIEW)
        }
        AdminCommand::Ingress(IngressCommand::Designate { cluster, service, mutation_id, output }) => {
            return Ok(Answer::data(designate(session, cluster, service, mutation_id).await?, output));
        }
        AdminCommand::Ingress(IngressCommand::Get { cluster, output }) => {
            let request = wire::OfCluster { cluster_id: cluster };
            read(name::GET_CLUSTER_INGRESS_DESIGNATION, request, output.output, &views::DESIGNATION_VIEW)
        }
        AdminCommand::Ingress(IngressCommand::List { cluster, from_generation, limit, output }) => {
            let request = wire::ListClusterIngressDesignations {
                cluster_id: Value::from(cluster),
                from_generation: from_generation.map(Value::from),
                limit: limit.map(Value::from),
            };
            read(name::LIST_CLUSTER_INGRESS_DESIGNATIONS, request, output.output, &views::DESIGNATIONS_VIEW)
        }
        AdminCommand::Ingress(IngressCommand::Registrations { cluster, node, before, limit, output }) => {
            let request = wire::ListClusterIngressRegistrations {
                cluster_id: Value::from(cluster),
                node_id: node.map(Value::from),
                before: before.map(Value::from),
                limit: limit.map(Value::from),
            };
            read(name::LIST_CLUSTER_INGRESS_REGISTRATIONS, request, output.output, &views::REGISTRATIONS_VIEW)
        }
    };
    Ok(Answer::viewed(session.call(&method, request).await?, format, view))
}

/// `network projection`: the node's projection payload and application, verified on request.
async fn node_projection(session: &Session, cluster: &str, node: &str, verify: bool) -> Result<Value, Outcome> {
    let answer: NodeProjectionAnswer<Value, Value> = session
        .call(
            name::GET_RUNTIME_NETWORK_PROJECTION_FOR_NODE,
            wire::GetClusterNode { cluster_id: cluster, node_id: node },
        )
        .await?;
    let signed = &answer.projection;
    let payload = signed.get("payload").cloned().unwrap_or(Value::Null);
    let mut printed = wire::to_request(&NodeProjectionAnswer { applied: &answer.applied, projection: payload });
    if verify {
        if signed.is_null() {
            return Err(anyhow::anyhow!("node {node} of cluster {cluster} has no projection to verify").into());
        }
        let published: SigningKeysAnswer<Vec<wire::answers::PublishedKey<String, Value, Value>>> =
            session.call(name::GET_CONTROLLER_SIGNING_KEYS, NoMembers {}).await?;
        let keys: Vec<PublishedKey> =
            published.keys.iter().filter_map(|key| decode_public_key(&key.public_key)).map(PublishedKey::new).collect();
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

/// `resolveRuntimeLocalStorageClaim` for the current generation of `claim`, read from the
/// cluster's list.
async fn resolve_claim(
    session: &Session,
    cluster: &str,
    claim: &str,
    generation: Option<u64>,
    decision: DecisionArg,
) -> Result<Value, Outcome> {
    let listed: ClaimsAnswer<Vec<ClaimListingRead>> =
        session.call(name::LIST_RUNTIME_LOCAL_STORAGE_CLAIMS, wire::OfCluster { cluster_id: cluster }).await?;
    let current = listed
        .claims
        .into_iter()
        .map(|listing| reference(listing.claim))
        .find(|listed| listed.id == claim)
        .ok_or_else(|| anyhow::anyhow!("--id {claim}: cluster {cluster} has no such claim"))?;
    if let Some(generation) = generation
        && current.generation != generation
    {
        return Err(anyhow::anyhow!(
            "--generation {generation}: the claim's current generation is {}; list the claims again",
            current.generation
        )
        .into());
    }
    let decision = match decision {
        DecisionArg::Purge => ClaimDecision::Purge,
        DecisionArg::Rebind => ClaimDecision::Rebind,
    };
    let claim = wire::to_request(&current);
    let request = wire::ResolveRuntimeLocalStorageClaim { claim, decision: Value::from(decision.as_str()) };
    session.call(name::RESOLVE_RUNTIME_LOCAL_STORAGE_CLAIM, request).await
}

/// The `IRuntimeAuthorityReference` of a record the controller answered: its members of
/// [`wire::Reference`] (`null` when absent, for the controller to name).
fn reference(record: Value) -> wire::Reference<Value> {
    serde_json::from_value(record).unwrap_or(wire::Reference {
        id: Value::Null,
        generation: Value::Null,
        digest: Value::Null,
    })
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

/// What a put of `record` over `stored` (the controller's record without the `revision` beside
/// it, read through [`Revised`]; `None` when absent) does: `created`, `updated` or `unchanged`.
fn put_result(stored: Option<&Value>, record: &Value) -> &'static str {
    match stored {
        None => "created",
        Some(stored) if stored == record => "unchanged",
        Some(_) => "updated",
    }
}

/// Creates or replaces every record of an inventory, in dependency order, and answers what each
/// became.
async fn apply(session: &Session, inventory: Inventory) -> Result<Value, Outcome> {
    let mut applied = Vec::new();
    for organization in inventory.organizations {
        let stored: Option<OrganizationAnswer<Value>> = session
            .call_if_found(name::GET_ORGANIZATION, wire::GetOrganization { organization_id: &organization["id"] })
            .await?;
        let result = put_result(stored.as_ref().map(|answer| &answer.organization), &organization);
        if result != "unchanged" {
            session
                .call::<Value>(name::PUT_ORGANIZATION, wire::PutOrganization { organization: &organization })
                .await?;
        }
        applied.push(json!({ "organization": organization["id"], "result": result }));
    }
    for cluster in inventory.clusters {
        let stored: Option<ClusterAnswer<Revised<Value, Value>>> =
            session.call_if_found(name::GET_CLUSTER, wire::OfCluster { cluster_id: &cluster["id"] }).await?;
        let stored = stored.map(|answer| answer.cluster);
        let result = put_result(stored.as_ref().map(|stored| &stored.record), &cluster);
        if result != "unchanged" {
            let expected_revision = stored.map_or(Value::Null, |stored| stored.revision);
            session
                .call::<Value>(
                    name::PUT_CLUSTER,
                    wire::PutCluster { cluster: &cluster, expected_revision: &expected_revision },
                )
                .await?;
        }
        applied.push(json!({ "cluster": cluster["id"], "result": result }));
    }
    // A node is its `runtimeNamespace` and `hostAddresses`; `putClusterNode` issues (and answers)
    // a bearer when it creates the node or rotates its credential.
    for entry in inventory.nodes {
        let rotate = entry.get("rotateCredential").and_then(Value::as_bool).unwrap_or(false);
        let request = wire::GetClusterNode { cluster_id: &entry["clusterId"], node_id: &entry["node"]["id"] };
        let stored: Option<NodeAnswer<NodeSummaryRead>> =
            session.call_if_found(name::GET_CLUSTER_NODE, request).await?;
        let stored = stored.map(|NodeAnswer { node }| {
            let namespace = node.runtime_namespace.unwrap_or(Value::Null);
            json!({ "id": node.id, "runtimeNamespace": namespace, "hostAddresses": node.host_addresses })
        });
        let mut result = match put_result(stored.as_ref(), &entry["node"]) {
            "unchanged" if rotate => "updated",
            result => result,
        };
        let mut bearer = Value::Null;
        if result != "unchanged" {
            let request = wire::PutClusterNode {
                cluster_id: &entry["clusterId"],
                node: &entry["node"],
                rotate_credential: &Value::Bool(rotate),
            };
            let put: NodePutAnswer<Value, Value> = session.call(name::PUT_CLUSTER_NODE, request).await?;
            bearer = put.bearer;
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
        let request = wire::GetServiceRuntimeSpec {
            cluster_id: &spec["clusterId"],
            service_id: &spec["serviceId"],
            revision: None,
        };
        let stored: Option<SpecAnswer<Revised<Value, Value>>> =
            session.call_if_found(name::GET_SERVICE_RUNTIME_SPEC, request).await?;
        let stored = stored.map(|answer| answer.spec);
        let result = put_result(stored.as_ref().map(|stored| &stored.record), &spec);
        if result != "unchanged" {
            let expected_revision = stored.map_or(Value::Null, |stored| stored.revision);
            let request = wire::PutServiceRuntimeSpec { spec: &spec, expected_revision: &expected_revision };
            session.call::<Value>(name::PUT_SERVICE_RUNTIME_SPEC, request).await?;
        }
        applied.push(json!({ "cluster": spec["clusterId"], "service": spec["serviceId"], "result": result }));
    }
    Ok(json!({ "applied": applied }))
}

/// `designateClusterIngress`: the remembered request of this mutation id, or one built from the
/// controller's current state (remembered before it is sent).
async fn designate(
    session: &Session,
    cluster: String,
    service: String,
    mutation_id: Option<String>,
) -> Result<Value, Outcome> {
    let remembered_designations = RememberedDesignations::from_environment();
    let given_mutation_id = mutation_id.is_some();
    let mutation_id = mutation_id.unwrap_or_else(|| format!("mut-{}", uuid::Uuid::new_v4().simple()));
    let key = DesignationKey { url: &session.url, cluster: &cluster, service: &service, mutation_id: &mutation_id };
    let remembered = if given_mutation_id { remembered_designations.recall(&key)? } else { None };
    let request = match remembered {
        Some(request) => request,
        None => {
            let request = designation_request(session, &cluster, &service, &mutation_id).await?;
            if let Err(error) = remembered_designations.remember(&key, &request) {
                stderr_line(&format!(
                    "warning: {error:#}; a retry with --mutation-id {mutation_id} will not be a replay"
                ));
            }
            request
        }
    };
    session.call(name::DESIGNATE_CLUSTER_INGRESS, request).await.map_err(|outcome| match outcome {
        Outcome::Unreachable(message) => Outcome::Unreachable(format!(
            "{message}\nthe designation may have been made: run the same command with --mutation-id {mutation_id} \
             (it resends the same request, answered as a replay if it was)"
        )),
        other => other,
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
    let stored: ClusterAnswer<Revised<Value, Value>> =
        session.call(name::GET_CLUSTER, wire::OfCluster { cluster_id: cluster }).await?;
    let spec = wire::GetServiceRuntimeSpec { cluster_id: cluster, service_id: service, revision: None };
    let spec: SpecAnswer<Revised<Value, Value>> = session.call(name::GET_SERVICE_RUNTIME_SPEC, spec).await?;
    let current: DesignationAnswer<Value> =
        session.call(name::GET_CLUSTER_INGRESS_DESIGNATION, wire::OfCluster { cluster_id: cluster }).await?;
    let expected = match current.designation {
        Value::Null => Value::Null,
        designation => wire::to_request(&reference(designation)),
    };
    let runtime = &stored.cluster.record["runtime"];
    let current_runtime = wire::RuntimeReference {
        id: Value::from(cluster),
        phase: runtime["phase"].clone(),
        generation: runtime["generation"].clone(),
    };
    let designation = wire::DesignationRequest {
        mutation_id: Value::from(mutation_id),
        cluster_id: Value::from(cluster),
        ingress_service_id: Value::from(service),
        current_runtime: wire::to_request(&current_runtime),
        expected_spec_revision: spec.spec.revision,
        expected_designation: expected,
    };
    Ok(wire::to_request(&wire::DesignateClusterIngress { designation: Some(designation) }))
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
        assert_eq!(parse_ttl("12x"), None);
        assert_eq!(parse_ttl("1h 30m"), Some(5_400_000));
    }
}
