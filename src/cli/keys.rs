//! `cloudly keys adopt`: the operator's one way to give a store new keys, when its keys are lost
//! for good. `cloudly serve` never replaces a store's keys (`keys.rs`).

use crate::config::StoreConfig;
use crate::keys::adopt_keys_for_store;
use clap::Subcommand;
use serde_json::json;
use std::process::ExitCode;

/// What the operator is told before adopting, and why the confirmation flag is required.
const CONSEQUENCES: &str = "adopting keys makes every identity issued, every record signed and every secret sealed \
     with a replaced key unusable (administrators, nodes and ingress need new ones); restore keys/ from a backup \
     instead if you can. Stop every controller of this store first. To adopt anyway, add \
     --i-understand-old-keys-stop-working";

/// `cloudly keys …`.
#[derive(Debug, Subcommand)]
pub enum KeysCommand {
    /// Make the data directory's keys the store's keys, creating missing key files and retiring
    /// the recorded keys they replace. Prints each role's key id in use and the one it replaced.
    Adopt {
        /// Store settings.
        #[command(flatten)]
        store: StoreConfig,
        /// Confirms that identities, signatures and sealed secrets made with the replaced keys
        /// stop working.
        #[arg(long = "i-understand-old-keys-stop-working")]
        confirmed: bool,
    },
}

/// Runs `cloudly keys …`: exit 0 adopted, 1 the store or a key file failed, 2 not confirmed.
pub fn run(command: KeysCommand) -> ExitCode {
    let KeysCommand::Adopt { store, confirmed } = command;
    if !confirmed {
        eprintln!("error: {CONSEQUENCES}");
        return ExitCode::from(2);
    }
    super::block_on(async move {
        crate::server::init_tracing(crate::config::LogFormat::Human);
        std::fs::create_dir_all(&store.data_dir)?;
        let opened = store.open_store().await?;
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |elapsed| elapsed.as_millis() as u64);
        let adopted = adopt_keys_for_store(&store.data_dir, opened.as_ref(), now_ms).await;
        opened.close().await;
        let keys: Vec<_> = adopted?
            .into_iter()
            .map(|key| {
                json!({ "role": key.role.as_str(), "keyId": key.key_id, "replaced": key.replaced, "created": key.created })
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&json!({ "keys": keys }))?);
        Ok(())
    })
}
