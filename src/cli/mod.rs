//! The command line. `serve`, `migrate`, `config`, `identity` and `keys` run the controller's own
//! parts; `contract` checks records offline; the administrator commands (`org`, `cluster`, `node`,
//! `service`, `ingress`, `relay`, `route`, `network`, `volume`, `apply`, `call`, `version`, `ready`)
//! are clients of a running controller; `completions` prints a shell completion script. Every
//! command has help on every flag and an Examples section (a unit test walks the command tree);
//! everything printed goes through `output`.

mod admin;
mod contract;
mod documents;
mod keys;
mod output;
mod remembered;
mod views;

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
    #[command(
        after_help = "Examples:\n  cloudly serve\n  cloudly serve 2> cloudly.log &\n  CLOUDLY_DATABASE_URL=postgres://cloudly@db.internal/cloudly cloudly serve --listen 0.0.0.0:8080 --log-format json"
    )]
    Serve(ServeConfig),
    /// Apply the store's migrations and exit.
    #[command(
        after_help = "Examples:\n  cloudly migrate\n  CLOUDLY_DATABASE_URL=postgres://cloudly@db.internal/cloudly cloudly migrate"
    )]
    Migrate(StoreConfig),
    /// Print the configuration in force, secrets redacted.
    #[command(after_help = "Examples:\n  cloudly config\n  cloudly config --listen 0.0.0.0:8080")]
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
    /// Print a shell completion script.
    #[command(
        after_help = "Examples:\n  cloudly completions bash > /etc/bash_completion.d/cloudly\n  cloudly completions zsh > \"${fpath[1]}/_cloudly\""
    )]
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
            output::stdout_line(&format!("migrations applied: {}", crate::config::redact_url(&config.database_url())));
            Ok(())
        }),
        Command::Config(config) => {
            output::stdout_line(&output::json_text(&serde_json::to_value(config.redacted()).unwrap_or_default()));
            ExitCode::SUCCESS
        }
        Command::Identity(command) => admin::run_identity(command),
        Command::Keys(command) => keys::run(command),
        Command::Completions { shell } => {
            // Written whole through `output`: clap_complete panics when its writer fails (a
            // closed pipe).
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "cloudly", &mut script);
            output::stdout_bytes(&script);
            ExitCode::SUCCESS
        }
        Command::Admin(command) => admin::run(command, &cli.connection),
    }
}

fn block_on(future: impl std::future::Future<Output = anyhow::Result<()>>) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            output::error_line(format!("cannot start the runtime: {error}"));
            return ExitCode::from(2);
        }
    };
    match runtime.block_on(future) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            output::error_line(format!("{error:#}"));
            ExitCode::from(1)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Cli;
    use clap::CommandFactory as _;

    /// Every flag and argument of every command says what it is, and every command that runs
    /// something shows examples (`after_help`, starting `Examples:`).
    #[test]
    fn every_flag_has_help_and_every_command_examples() {
        fn walk(command: &clap::Command, path: &str, missing: &mut Vec<String>) {
            for argument in command.get_arguments() {
                let id = argument.get_id().as_str();
                if matches!(id, "help" | "version") {
                    continue;
                }
                if argument.get_help().is_none_or(|help| help.to_string().trim().is_empty()) {
                    missing.push(format!("{path}: --{id} has no help"));
                }
            }
            let leaf = command.get_subcommands().next().is_none();
            let examples =
                command.get_after_help().is_some_and(|text| text.to_string().starts_with("Examples:\n  cloudly"));
            if leaf && !examples {
                missing.push(format!("{path}: no Examples section"));
            }
            if command.get_about().is_none() && path != "cloudly" {
                missing.push(format!("{path}: no description"));
            }
            for subcommand in command.get_subcommands() {
                walk(subcommand, &format!("{path} {}", subcommand.get_name()), missing);
            }
        }
        let mut missing = Vec::new();
        let command = Cli::command();
        command.clone().debug_assert();
        walk(&command, "cloudly", &mut missing);
        assert!(missing.is_empty(), "{}", missing.join("\n"));
    }
}
