//! The command line. `serve`, `migrate`, `config`, `identity` and `keys` run the controller's own
//! parts; `contract` checks records offline; the administrator commands (`org`, `cluster`, `node`,
//! `service`, `ingress`, `relay`, `route`, `volume`, `apply`, `call`) are clients of a running controller;
//! `completions` prints a shell completion script.

mod admin;
mod contract;
mod documents;
mod keys;
mod remembered;

use crate::config::{ServeConfig, StoreConfig};
use clap::{CommandFactory as _, Parser, Subcommand};
use std::process::ExitCode;

/// Cloudly, the serve.zone cluster controller.
#[derive(Debug, Parser)]
#[command(name = "cloudly", version, about)]
struct Cli {
    /// The controller the administrator commands talk to, and who calls (global flags: before or
    /// after the subcommand).
    #[command(flatten)]
    connection: admin::Connection,
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
    /// The controller's keys as the store records them.
    #[command(subcommand)]
    Keys(keys::KeysCommand),
    /// Check records against the contract: digests, validation, signatures, projection admission.
    #[command(subcommand)]
    Contract(contract::ContractCommand),
    /// Print a shell completion script (`cloudly completions bash > /etc/bash_completion.d/cloudly`).
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
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
        // Migrations only: the keys are checked by `serve`, so a migration job needs no keys/.
        Command::Migrate(config) => block_on(async move {
            crate::server::init_tracing(crate::config::LogFormat::Human);
            config.open_store().await?.close().await;
            println!("migrations applied: {}", crate::config::redact_url(&config.database_url()));
            Ok(())
        }),
        Command::Config(config) => {
            println!("{}", serde_json::to_string_pretty(&config.redacted()).expect("JSON serializes"));
            ExitCode::SUCCESS
        }
        Command::Identity(command) => admin::run_identity(command),
        Command::Keys(command) => keys::run(command),
        Command::Completions { shell } => {
            clap_complete::generate(shell, &mut Cli::command(), "cloudly", &mut std::io::stdout());
            ExitCode::SUCCESS
        }
        Command::Admin(command) => admin::run(command, &cli.connection),
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
