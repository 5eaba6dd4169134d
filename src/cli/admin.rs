//! `cloudly identity issue` and the administrator client commands. The client commands read the
//! identity from `--identity FILE` or `CLOUDLY_IDENTITY` and print the method's response as JSON;
//! a refusal prints the error's text and data on stderr and exits 1.

use crate::client::{CallError, Client};
use crate::contract::Id;
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
        /// The controller's data directory (its keys live in `keys/`).
        #[arg(long, env = "CLOUDLY_DATA_DIR", default_value = "./cloudly-data")]
        data_dir: PathBuf,
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
    let IdentityCommand::Issue { name, user_id, role, ttl, identity_type, data_dir } = command;
    let Some(user_id) = Id::parse(&user_id) else {
        eprintln!("error: --user-id must be an Id (^[A-Za-z0-9][A-Za-z0-9._-]{{0,127}}$)");
        return ExitCode::from(2);
    };
    let Some(ttl_ms) = parse_ttl(&ttl) else {
        eprintln!("error: --ttl must be a positive number with s, m, h or d, such as 12h");
        return ExitCode::from(2);
    };
    let keys = match ControllerKeys::load_or_create(&data_dir) {
        Ok((keys, _)) => keys,
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

/// Where the controller is and who is calling.
#[derive(Debug, Clone, Args)]
pub struct Connection {
    /// The controller's base URL.
    #[arg(long, env = "CLOUDLY_URL", default_value = "http://127.0.0.1:8080", global = true)]
    url: String,
    /// A file holding an IIdentity JSON (from `cloudly identity issue` or the bootstrap identity).
    #[arg(long, env = "CLOUDLY_IDENTITY", global = true)]
    identity: Option<PathBuf>,
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
    /// Apply a whole inventory from one JSON file: `{ organizations, clusters, nodes, services }`
    /// (each optional). Records are created, or replaced by compare-and-swap on their current
    /// revision when they differ; node bearers issued on creation are printed once.
    Apply {
        /// The inventory JSON file.
        #[arg(short = 'f', long = "file")]
        file: PathBuf,
        #[command(flatten)]
        connection: Connection,
    },
    /// Call any method with a request file; the identity is added to the request.
    Call {
        /// The method name.
        method: String,
        /// The request JSON file (without `identity`).
        #[arg(short = 'f', long = "file")]
        file: PathBuf,
        #[command(flatten)]
        connection: Connection,
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
        #[command(flatten)]
        connection: Connection,
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
        #[command(flatten)]
        connection: Connection,
    },
    /// One cluster.
    Get {
        id: String,
        #[command(flatten)]
        connection: Connection,
    },
    /// Every cluster.
    List {
        #[command(flatten)]
        connection: Connection,
    },
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
        #[command(flatten)]
        connection: Connection,
    },
    /// The nodes of a cluster.
    List {
        #[arg(long)]
        cluster: String,
        #[command(flatten)]
        connection: Connection,
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
        #[command(flatten)]
        connection: Connection,
    },
    /// The current spec, or one revision.
    Get {
        #[arg(long)]
        cluster: String,
        #[arg(long)]
        service: String,
        #[arg(long)]
        revision: Option<u64>,
        #[command(flatten)]
        connection: Connection,
    },
    /// Delete a service.
    Delete {
        #[arg(long)]
        cluster: String,
        #[arg(long)]
        service: String,
        #[arg(long = "expected-revision")]
        expected_revision: u64,
        #[command(flatten)]
        connection: Connection,
    },
}

#[derive(Debug, Subcommand)]
pub enum RelayCommand {
    /// Issue or rotate a relay's credential; prints its bearer once.
    Credential {
        #[arg(long)]
        cluster: String,
        #[arg(long)]
        relay: String,
        #[command(flatten)]
        connection: Connection,
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
        #[command(flatten)]
        connection: Connection,
    },
    /// Delete the route of a hostname.
    Delete {
        #[arg(long)]
        cluster: String,
        #[arg(long)]
        hostname: String,
        #[command(flatten)]
        connection: Connection,
    },
    /// The cluster's route table (`null` before its first route).
    List {
        #[arg(long)]
        cluster: String,
        #[command(flatten)]
        connection: Connection,
    },
}

#[derive(Debug, Subcommand)]
pub enum IngressCommand {
    /// Designate a service as the cluster's ingress. Reads the cluster's runtime, the service's
    /// current spec revision and the current designation, and sends the compare-and-swap.
    Designate {
        #[arg(long)]
        cluster: String,
        #[arg(long)]
        service: String,
        /// The mutation id (retry with the same one after a lost answer); default: a new one.
        #[arg(long = "mutation-id")]
        mutation_id: Option<String>,
        #[command(flatten)]
        connection: Connection,
    },
    /// The cluster's current designation.
    Get {
        #[arg(long)]
        cluster: String,
        #[command(flatten)]
        connection: Connection,
    },
    /// The designation chain, oldest first.
    List {
        #[arg(long)]
        cluster: String,
        #[arg(long = "from-generation")]
        from_generation: Option<u64>,
        #[arg(long)]
        limit: Option<u64>,
        #[command(flatten)]
        connection: Connection,
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
        #[command(flatten)]
        connection: Connection,
    },
}

fn read_json(path: &PathBuf) -> anyhow::Result<Value> {
    let text =
        std::fs::read_to_string(path).map_err(|error| anyhow::anyhow!("cannot read {}: {error}", path.display()))?;
    serde_json::from_str(&text).map_err(|error| anyhow::anyhow!("{} is not JSON: {error}", path.display()))
}

struct Session {
    client: Client,
    identity: Value,
}

impl Session {
    fn open(connection: &Connection) -> anyhow::Result<Session> {
        let path = connection
            .identity
            .as_ref()
            .ok_or_else(|| anyhow::anyhow!("no identity: pass --identity FILE or set CLOUDLY_IDENTITY"))?;
        Ok(Session { client: Client::new(&connection.url), identity: read_json(path)? })
    }

    async fn call(&self, method: &str, mut request: Value) -> Result<Value, CallError> {
        request["identity"] = self.identity.clone();
        self.client.call(method, request).await
    }
}

pub fn run(command: AdminCommand) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: cannot start the runtime: {error}");
            return ExitCode::from(2);
        }
    };
    match runtime.block_on(execute(command)) {
        Ok(response) => {
            println!("{}", serde_json::to_string_pretty(&response).expect("JSON serializes"));
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
        Err(Outcome::Failed(error)) => {
            eprintln!("error: {error:#}");
            ExitCode::from(2)
        }
    }
}

enum Outcome {
    Refused(crate::client::TypedError),
    Failed(anyhow::Error),
}

impl From<CallError> for Outcome {
    fn from(error: CallError) -> Self {
        match error {
            CallError::Typed(error) => Outcome::Refused(error),
            other => Outcome::Failed(other.into()),
        }
    }
}

impl From<anyhow::Error> for Outcome {
    fn from(error: anyhow::Error) -> Self {
        Outcome::Failed(error)
    }
}

/// Creates or replaces every record of an inventory file, in dependency order.
async fn apply(session: &Session, inventory: &Value) -> Result<Value, Outcome> {
    let list = |key: &str| -> Result<Vec<Value>, Outcome> {
        match inventory.get(key) {
            None => Ok(Vec::new()),
            Some(Value::Array(items)) => Ok(items.clone()),
            Some(_) => Err(Outcome::Failed(anyhow::anyhow!("inventory {key} must be a list"))),
        }
    };
    if let Some(key) = inventory.as_object().and_then(|members| {
        members.keys().find(|key| !["organizations", "clusters", "nodes", "services"].contains(&key.as_str()))
    }) {
        return Err(Outcome::Failed(anyhow::anyhow!("inventory has an unknown member {key:?}")));
    }
    let mut applied = Vec::new();
    for organization in list("organizations")? {
        session.call("putOrganization", json!({ "organization": organization })).await?;
        applied.push(json!({ "organization": organization["id"], "written": true }));
    }
    for cluster in list("clusters")? {
        let current = match session.call("getCluster", json!({ "clusterId": cluster["id"] })).await {
            Ok(answer) => Some(answer["cluster"].clone()),
            Err(CallError::Typed(error)) if error.code() == "not-found" => None,
            Err(error) => return Err(error.into()),
        };
        let expected = current.as_ref().map(|stored| stored["revision"].clone());
        let unchanged = current.as_ref().is_some_and(|stored| {
            let mut stored = stored.clone();
            stored.as_object_mut().map(|members| members.remove("revision"));
            stored == cluster
        });
        if !unchanged {
            session.call("putCluster", json!({ "cluster": cluster, "expectedRevision": expected })).await?;
        }
        applied.push(json!({ "cluster": cluster["id"], "written": !unchanged }));
    }
    for entry in list("nodes")? {
        let answer = session
            .call(
                "putClusterNode",
                json!({ "clusterId": entry["clusterId"], "node": entry["node"], "rotateCredential": false }),
            )
            .await?;
        applied.push(json!({ "cluster": entry["clusterId"], "node": entry["node"]["id"], "bearer": answer["bearer"] }));
    }
    for spec in list("services")? {
        let request = json!({ "clusterId": spec["clusterId"], "serviceId": spec["serviceId"] });
        let current = match session.call("getServiceRuntimeSpec", request).await {
            Ok(answer) => Some(answer["spec"].clone()),
            Err(CallError::Typed(error)) if error.code() == "not-found" => None,
            Err(error) => return Err(error.into()),
        };
        let expected = current.as_ref().map(|stored| stored["revision"].clone());
        let unchanged = current.as_ref().is_some_and(|stored| {
            let mut stored = stored.clone();
            stored.as_object_mut().map(|members| members.remove("revision"));
            stored == spec
        });
        if !unchanged {
            session.call("putServiceRuntimeSpec", json!({ "spec": spec, "expectedRevision": expected })).await?;
        }
        applied.push(json!({ "cluster": spec["clusterId"], "service": spec["serviceId"], "written": !unchanged }));
    }
    Ok(json!({ "applied": applied }))
}

async fn execute(command: AdminCommand) -> Result<Value, Outcome> {
    match command {
        AdminCommand::Apply { file, connection } => {
            let session = Session::open(&connection)?;
            apply(&session, &read_json(&file)?).await
        }
        AdminCommand::Call { method, file, connection } => {
            let session = Session::open(&connection)?;
            Ok(session.call(&method, read_json(&file)?).await?)
        }
        AdminCommand::Org(OrgCommand::Put { id, name, connection }) => {
            let session = Session::open(&connection)?;
            Ok(session.call("putOrganization", json!({ "organization": { "id": id, "name": name } })).await?)
        }
        AdminCommand::Cluster(command) => match command {
            ClusterCommand::Put { file, expected_revision, connection } => {
                let session = Session::open(&connection)?;
                let request = json!({ "cluster": read_json(&file)?, "expectedRevision": expected_revision });
                Ok(session.call("putCluster", request).await?)
            }
            ClusterCommand::Get { id, connection } => {
                Ok(Session::open(&connection)?.call("getCluster", json!({ "clusterId": id })).await?)
            }
            ClusterCommand::List { connection } => {
                Ok(Session::open(&connection)?.call("listClusters", json!({})).await?)
            }
        },
        AdminCommand::Node(command) => match command {
            NodeCommand::Put { cluster, file, rotate, connection } => {
                let session = Session::open(&connection)?;
                let request = json!({ "clusterId": cluster, "node": read_json(&file)?, "rotateCredential": rotate });
                Ok(session.call("putClusterNode", request).await?)
            }
            NodeCommand::List { cluster, connection } => {
                Ok(Session::open(&connection)?.call("listClusterNodes", json!({ "clusterId": cluster })).await?)
            }
        },
        AdminCommand::Service(command) => match command {
            ServiceCommand::Put { file, expected_revision, connection } => {
                let session = Session::open(&connection)?;
                let request = json!({ "spec": read_json(&file)?, "expectedRevision": expected_revision });
                Ok(session.call("putServiceRuntimeSpec", request).await?)
            }
            ServiceCommand::Get { cluster, service, revision, connection } => {
                let mut request = json!({ "clusterId": cluster, "serviceId": service });
                if let Some(revision) = revision {
                    request["revision"] = json!(revision);
                }
                Ok(Session::open(&connection)?.call("getServiceRuntimeSpec", request).await?)
            }
            ServiceCommand::Delete { cluster, service, expected_revision, connection } => {
                let request =
                    json!({ "clusterId": cluster, "serviceId": service, "expectedRevision": expected_revision });
                Ok(Session::open(&connection)?.call("deleteService", request).await?)
            }
        },
        AdminCommand::Relay(RelayCommand::Credential { cluster, relay, connection }) => Ok(Session::open(&connection)?
            .call("issueClusterRelayCredential", json!({ "clusterId": cluster, "relayId": relay }))
            .await?),
        AdminCommand::Route(command) => match command {
            RouteCommand::Put { cluster, hostname, service, protocol, port, connection } => {
                let protocol = match protocol {
                    ProtocolArg::Tcp => "tcp",
                    ProtocolArg::Udp => "udp",
                };
                let route = json!({ "hostname": hostname, "serviceId": service, "protocol": protocol, "port": port });
                Ok(Session::open(&connection)?
                    .call("putClusterIngressRoute", json!({ "clusterId": cluster, "route": route }))
                    .await?)
            }
            RouteCommand::Delete { cluster, hostname, connection } => Ok(Session::open(&connection)?
                .call("deleteClusterIngressRoute", json!({ "clusterId": cluster, "hostname": hostname }))
                .await?),
            RouteCommand::List { cluster, connection } => {
                Ok(Session::open(&connection)?.call("getClusterIngressRoutes", json!({ "clusterId": cluster })).await?)
            }
        },
        AdminCommand::Ingress(command) => match command {
            IngressCommand::Designate { cluster, service, mutation_id, connection } => {
                let session = Session::open(&connection)?;
                let stored = session.call("getCluster", json!({ "clusterId": cluster })).await?;
                let spec = session
                    .call("getServiceRuntimeSpec", json!({ "clusterId": cluster, "serviceId": service }))
                    .await?;
                let current = session.call("getClusterIngressDesignation", json!({ "clusterId": cluster })).await?;
                let expected = match &current["designation"] {
                    Value::Null => Value::Null,
                    designation => json!({
                        "id": designation["id"], "generation": designation["generation"], "digest": designation["digest"],
                    }),
                };
                let mutation_id = mutation_id.unwrap_or_else(|| format!("mut-{}", uuid::Uuid::new_v4().simple()));
                let request = json!({ "designation": {
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
                } });
                Ok(session.call("designateClusterIngress", request).await?)
            }
            IngressCommand::Get { cluster, connection } => Ok(Session::open(&connection)?
                .call("getClusterIngressDesignation", json!({ "clusterId": cluster }))
                .await?),
            IngressCommand::List { cluster, from_generation, limit, connection } => {
                let mut request = json!({ "clusterId": cluster });
                if let Some(from) = from_generation {
                    request["fromGeneration"] = json!(from);
                }
                if let Some(limit) = limit {
                    request["limit"] = json!(limit);
                }
                Ok(Session::open(&connection)?.call("listClusterIngressDesignations", request).await?)
            }
            IngressCommand::Registrations { cluster, node, before, limit, connection } => {
                let mut request = json!({ "clusterId": cluster });
                if let Some(node) = node {
                    request["nodeId"] = json!(node);
                }
                if let Some(before) = before {
                    request["before"] = json!(before);
                }
                if let Some(limit) = limit {
                    request["limit"] = json!(limit);
                }
                Ok(Session::open(&connection)?.call("listClusterIngressRegistrations", request).await?)
            }
        },
    }
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
