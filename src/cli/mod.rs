//! The command line. `serve`, `migrate`, `config` and `identity` run the controller's own
//! parts; `contract` checks records offline; the administrator commands (`org`, `cluster`, `node`,
//! `service`, `ingress`, `call`) are clients of a running controller.

mod admin;
mod contract;

use crate::config::{ServeConfig, StoreConfig};
use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// Cloudly, the serve.zone cluster controller.
#[derive(Debug, Parser)]
#[command(name = "cloudly", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the controller (HTTP TypedRequest API, health, metrics).
    Serve(ServeConfig),
    /// Apply the store's migrations and exit.
    Migrate(StoreConfig),
    /// Print the configuration in force, secrets redacted.
    Config(ServeConfig),
    /// Administrator identities.
    #[command(subcommand)]
    Identity(admin::IdentityCommand),
    /// Check records against the contract: digests, validation, signatures, projection admission.
    #[command(subcommand)]
    Contract(contract::ContractCommand),
    /// Administrator commands against a running controller.
    #[command(flatten)]
    Admin(admin::AdminCommand),
}

/// Parses the command line and runs it. Exit codes are an interface (see README.md).
pub fn run() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Contract(command) => contract::run(command),
        Command::Serve(config) => block_on(crate::server::serve(config)),
        Command::Migrate(config) => block_on(async move {
            crate::server::init_tracing(crate::config::LogFormat::Human);
            crate::store::open(&config.database_url()).await?;
            println!("migrations applied: {}", crate::config::redact_url(&config.database_url()));
            Ok(())
        }),
        Command::Config(config) => {
            println!("{}", serde_json::to_string_pretty(&config.redacted()).expect("JSON serializes"));
            ExitCode::SUCCESS
        }
        Command::Identity(command) => admin::run_identity(command),
        Command::Admin(command) => admin::run(command),
    }
}

fn block_on(future: impl std::future::Future<Output = anyhow::Result<()>>) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: cannot start the runtime: {error}");
            return ExitCode::from(2);
        }
    };
    match runtime.block_on(future) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::from(1)
        }
    }
}
