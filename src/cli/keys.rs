//! `cloudly keys adopt`: the operator's one way to give a store new keys, when its keys are lost
//! for good; `cloudly keys rotate`: a new signing key, run beside running controllers (the old
//! one stays listed as retired, so earlier signatures still verify). `cloudly serve` never
//! replaces a store's keys (`keys.rs`).

use crate::config::StoreConfig;
use crate::keys::{adopt_keys_for_store, rotate_signing_key};
use crate::store::SharedStore;
use clap::Subcommand;
use serde_json::json;
use std::process::ExitCode;

/// What the operator is told before adopting, and why the confirmation flag is required.
const CONSEQUENCES: &str = "adopting keys makes every identity issued and every secret sealed with a replaced key \
     unusable (administrators and ingress need new ones; records signed with a replaced signing key still verify, \
     as it stays listed as retired); restore keys/ from a backup instead if you can, and use `cloudly keys rotate` \
     for a routine signing key rotation. Stop every controller of this store first. To adopt anyway, add \
     --i-understand-old-keys-stop-working";

/// `cloudly keys …`.
#[derive(Debug, Subcommand)]
pub enum KeysCommand {
    /// Make the keys directory's keys the store's keys, creating missing key files and retiring
    /// the recorded keys they replace. Prints each role's key id in use and the one it replaced.
    #[command(
        after_help = "Examples:\n  cloudly keys adopt --i-understand-old-keys-stop-working\n  cloudly keys adopt --data-dir /var/lib/cloudly --i-understand-old-keys-stop-working"
    )]
    Adopt {
        /// Store settings.
        #[command(flatten)]
        store: StoreConfig,
        /// Confirms that identities, signatures and sealed secrets made with the replaced keys
        /// stop working.
        #[arg(long = "i-understand-old-keys-stop-working")]
        confirmed: bool,
    },
    /// Make a new signing key the store's signing key in use, retiring the old one (still listed
    /// by `getControllerSigningKeys`, so what it signed still verifies). Run it with the keys
    /// directory of the running controllers (`--keys-dir`, default `<data dir>/keys`), writable,
    /// while they run: they sign with the new key within seconds. Prints the new key id and the
    /// retired one.
    #[command(after_help = "Examples:\n  cloudly keys rotate\n  cloudly keys rotate --keys-dir /etc/cloudly/keys")]
    Rotate {
        /// Store settings.
        #[command(flatten)]
        store: StoreConfig,
    },
}

/// Runs `cloudly keys …`: exit 0 done, 1 the store or a key file failed, 2 `adopt` not
/// confirmed.
pub fn run(command: KeysCommand) -> ExitCode {
    match command {
        KeysCommand::Adopt { store, confirmed } => adopt(store, confirmed),
        KeysCommand::Rotate { store } => rotate(store),
    }
}

/// Opens the store of `config` (migrated) and runs `work` on it with the time now, closing the
/// store afterwards.
async fn with_store<T>(
    config: &StoreConfig,
    work: impl AsyncFnOnce(&SharedStore, u64) -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    crate::server::init_tracing(crate::config::LogFormat::Human);
    std::fs::create_dir_all(&config.data_dir)?;
    let opened = config.open_store().await?;
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_millis() as u64);
    let done = work(&opened, now_ms).await;
    opened.close().await;
    done
}

fn adopt(store: StoreConfig, confirmed: bool) -> ExitCode {
    if !confirmed {
        super::output::error_line(CONSEQUENCES);
        return ExitCode::from(2);
    }
    super::block_on(async move {
        let adopted = with_store(&store, async |opened, now_ms| {
            Ok(adopt_keys_for_store(&store.keys_dir(), opened.as_ref(), now_ms).await?)
        })
        .await?;
        let keys: Vec<_> = adopted
            .into_iter()
            .map(|key| {
                json!({ "role": key.role.as_str(), "keyId": key.key_id, "replaced": key.replaced, "created": key.created })
            })
            .collect();
        super::output::stdout_line(&serde_json::to_string_pretty(&json!({ "keys": keys }))?);
        Ok(())
    })
}

fn rotate(store: StoreConfig) -> ExitCode {
    super::block_on(async move {
        let rotation = with_store(&store, async |opened, now_ms| {
            let rotation = rotate_signing_key(&store.keys_dir(), opened.as_ref(), now_ms).await?;
            // Running controllers also find it on their own within their check interval.
            if let Err(error) = opened.notify_keys_changed().await {
                tracing::warn!(%error, "running controllers could not be told of the rotation; they find it within their check interval");
            }
            Ok(rotation)
        })
        .await?;
        let (retired, retired_at) = rotation.retired.map_or((None, None), |(key_id, at)| (Some(key_id), Some(at)));
        let answer = json!({
            "signing": { "keyId": rotation.key_id, "activeSince": rotation.active_since },
            "retired": retired.map(|key_id| json!({ "keyId": key_id, "retiredAt": retired_at })),
        });
        super::output::stdout_line(&serde_json::to_string_pretty(&answer)?);
        Ok(())
    })
}
