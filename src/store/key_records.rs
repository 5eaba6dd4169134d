//! The store's part for the controller's keys: which key of each role the store was written with,
//! by key id (never the key), so that a controller whose `keys/` is not this store's is refused at
//! start instead of issuing identities, signatures and sealed secrets nobody else can use
//! (`keys.rs` decides; this file only records and reads).
//!
//! **At most one key of each role is in use**, across processes: the partial unique index
//! `controller_keys_one_active_per_role` holds one `active` record per role, and
//! [`KeyRecordStore::record_keys_if_absent`] inserts with `ON CONFLICT DO NOTHING` in one
//! transaction, always in role order. Of two controllers recording different keys into an empty
//! store at once, the first insert of the second waits for the first's transaction and then
//! inserts nothing, so exactly one whole key set is recorded; each answers the set in use and
//! compares it with its own. A key taken out of use stays recorded as `retired`, with when.
//!
//! **A rotation is one compare-and-swap** ([`KeyRecordStore::rotate_recorded_key`]): the role's
//! key in use is retired only while it is the one the caller read, and the new key recorded in
//! the same transaction, so of two racing rotations one wins and the other writes nothing. The
//! public key of each Ed25519 key is recorded beside its id (never a private key), so a retired
//! signing key stays listed by `getControllerSigningKeys` after its private key is gone.

use super::codec::{counter_from_sql, counter_to_sql};
use super::sql::{HoldsConnection, Row, Statement, Transaction};
use super::{SqlStore, StoreError};
use crate::contract::signing::{decode_public_key, encode_public_key, key_id as signing_key_id};
use async_trait::async_trait;
use ed25519_dalek::VerifyingKey;

/// What a controller key is for. Each role has its own file under `keys/` and its own record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum KeyRole {
    /// Signs administrator identities (`keys/identity.ed25519`).
    Identity,
    /// Signs records that leave for nodes (`keys/signing.ed25519`).
    Signing,
    /// Seals secret values at rest (`keys/secret.key`).
    Secret,
}

impl KeyRole {
    /// Every role, in the order records are written and errors are reported.
    pub const ALL: [KeyRole; 3] = [KeyRole::Identity, KeyRole::Signing, KeyRole::Secret];

    /// The role as stored (`identity`, `signing`, `secret`).
    pub fn as_str(self) -> &'static str {
        match self {
            KeyRole::Identity => "identity",
            KeyRole::Signing => "signing",
            KeyRole::Secret => "secret",
        }
    }

    /// The role a stored text names.
    pub fn parse(text: &str) -> Option<KeyRole> {
        KeyRole::ALL.into_iter().find(|role| role.as_str() == text)
    }
}

impl std::fmt::Display for KeyRole {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str(self.as_str())
    }
}

/// One recorded key: its role, key id and (for an Ed25519 key) public key. Nothing here is
/// secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyRecord {
    /// What the key is for.
    pub role: KeyRole,
    /// The key's id: `sha256:…` of an Ed25519 public key, `fingerprint:…` of the secret key.
    pub key_id: String,
    /// When it was recorded, ms since the Unix epoch.
    pub recorded_at_ms: u64,
    /// The public key of an Ed25519 key (identity, signing), whose id it is; `None` for the
    /// secret key, and for a key recorded before public keys were, until a controller holding
    /// that key records it.
    pub public_key: Option<VerifyingKey>,
    /// When it was taken out of use; `None` while in use.
    pub retired_at_ms: Option<u64>,
}

/// Persistence of the controller's key records.
#[async_trait]
pub trait KeyRecordStore: Send + Sync {
    /// The key in use of each role that has one, in role order.
    async fn recorded_keys(&self) -> Result<Vec<KeyRecord>, StoreError>;

    /// True when the store holds anything of a deployment: a recorded key, an organization
    /// (every cluster, node, service, designation, relay, session, assignment, registration,
    /// address plan and lease hangs off one by foreign keys) or a sealed secret. A store written before keys were
    /// recorded is told apart from an empty one by this.
    async fn holds_deployment_data(&self) -> Result<bool, StoreError>;

    /// Records each of `keys` as its role's key in use where that role has none yet
    /// (insert-if-absent, one transaction, in role order, so racing controllers record exactly
    /// one set), and answers the keys in use afterwards ([`KeyRecordStore::recorded_keys`]).
    async fn record_keys_if_absent(&self, keys: &[KeyRecord]) -> Result<Vec<KeyRecord>, StoreError>;

    /// Makes each of `keys` its role's key in use, retiring (at `now_ms`) the one it replaces,
    /// in one transaction: what an operator asks for when the store's keys are lost for good.
    /// Answers the keys in use afterwards.
    async fn replace_recorded_keys(&self, keys: &[KeyRecord], now_ms: u64) -> Result<Vec<KeyRecord>, StoreError>;

    /// Every record of `role`, in use and retired, oldest first (by `recorded_at`, then key id).
    async fn key_history(&self, role: KeyRole) -> Result<Vec<KeyRecord>, StoreError>;

    /// Records the public key of the recorded key `key_id` of `role` where it has none yet (a
    /// key recorded before public keys were). The caller checks that `key_id` is its id.
    async fn record_public_key(&self, role: KeyRole, key_id: &str, public_key: &VerifyingKey)
    -> Result<(), StoreError>;

    /// Replaces `retiring`, read as its role's key in use, with `next`, in one transaction:
    /// `retiring` becomes `retired` at `now_ms` (keeping its public key, recording the one given
    /// when it had none) and `next` the role's key in use. Answers false, writing nothing, when
    /// `retiring` is no longer the role's key in use (another rotation came first).
    async fn rotate_recorded_key(
        &self,
        retiring: &KeyRecord,
        next: &KeyRecord,
        now_ms: u64,
    ) -> Result<bool, StoreError>;
}

/// The columns [`key_record_from_row`] reads.
const KEY_RECORD_COLUMNS: &str = "role, key_id, recorded_at, retired_at, public_key";

/// The key in use of each role, in role order, on `on`.
async fn recorded_keys_on(on: &mut impl HoldsConnection) -> Result<Vec<KeyRecord>, StoreError> {
    let mut records: Vec<KeyRecord> = Statement::new(
        "SELECT role, key_id, recorded_at, retired_at, public_key FROM controller_keys WHERE state = 'active'",
    )
    .fetch_all_as(on, key_record_from_row)
    .await?;
    records.sort_by_key(|record| record.role);
    Ok(records)
}

/// `keys` in role order, each role once (a caller's list of one key per role).
fn in_role_order(keys: &[KeyRecord]) -> Result<Vec<&KeyRecord>, StoreError> {
    let mut ordered: Vec<&KeyRecord> = keys.iter().collect();
    ordered.sort_by_key(|record| record.role);
    if ordered.windows(2).any(|pair| pair[0].role == pair[1].role) {
        return Err(StoreError::Corrupt("a key set names one role twice".into()));
    }
    Ok(ordered)
}

/// Runs `sql`, an insert of `key` as its role's key in use (`$1` role, `$2` key id, `$3` recorded
/// at, `$4` its public key, unpadded base64url), in `transaction`.
async fn insert_key(transaction: &mut Transaction, sql: &'static str, key: &KeyRecord) -> Result<(), StoreError> {
    let public_key = stored_public_key(key);
    Statement::new(sql)
        .text(key.role.as_str())
        .text(&key.key_id)
        .integer(counter_to_sql(key.recorded_at_ms, "key record time")?)
        .optional_text(public_key.as_deref())
        .execute(transaction)
        .await?;
    Ok(())
}

/// Commits a write of key records, answering the keys in use it leaves.
async fn commit_answering_recorded(mut transaction: Transaction) -> Result<Vec<KeyRecord>, StoreError> {
    let recorded = recorded_keys_on(&mut transaction).await?;
    transaction.commit().await?;
    Ok(recorded)
}

/// The stored spelling of a record's public key (unpadded base64url).
fn stored_public_key(key: &KeyRecord) -> Option<String> {
    key.public_key.as_ref().map(encode_public_key)
}

#[async_trait]
impl KeyRecordStore for SqlStore {
    async fn recorded_keys(&self) -> Result<Vec<KeyRecord>, StoreError> {
        recorded_keys_on(&mut self.pool.connection().await?).await
    }

    async fn holds_deployment_data(&self) -> Result<bool, StoreError> {
        Statement::new(
            "SELECT EXISTS (SELECT 1 FROM controller_keys) OR EXISTS (SELECT 1 FROM organizations) \
             OR EXISTS (SELECT 1 FROM secret_versions) AS present",
        )
        .fetch_one(&mut self.pool.connection().await?)
        .await?
        .boolean("present")
    }

    async fn record_keys_if_absent(&self, keys: &[KeyRecord]) -> Result<Vec<KeyRecord>, StoreError> {
        let mut transaction = self.pool.begin_write().await?;
        for key in in_role_order(keys)? {
            insert_key(
                &mut transaction,
                "INSERT INTO controller_keys (role, key_id, state, recorded_at, public_key) \
                 VALUES ($1, $2, 'active', $3, $4) ON CONFLICT DO NOTHING",
                key,
            )
            .await?;
        }
        commit_answering_recorded(transaction).await
    }

    async fn replace_recorded_keys(&self, keys: &[KeyRecord], now_ms: u64) -> Result<Vec<KeyRecord>, StoreError> {
        let now = counter_to_sql(now_ms, "key retirement time")?;
        let mut transaction = self.pool.begin_write().await?;
        for key in in_role_order(keys)? {
            Statement::new(
                "UPDATE controller_keys SET state = 'retired', retired_at = $3 \
                 WHERE role = $1 AND state = 'active' AND key_id <> $2",
            )
            .text(key.role.as_str())
            .text(&key.key_id)
            .integer(now)
            .execute(&mut transaction)
            .await?;
            // A key that was retired before comes back into use under its first record.
            insert_key(
                &mut transaction,
                "INSERT INTO controller_keys (role, key_id, state, recorded_at, public_key) \
                 VALUES ($1, $2, 'active', $3, $4) ON CONFLICT (role, key_id) DO UPDATE \
                 SET state = 'active', retired_at = NULL, public_key = COALESCE(controller_keys.public_key, $4)",
                key,
            )
            .await?;
        }
        commit_answering_recorded(transaction).await
    }

    async fn key_history(&self, role: KeyRole) -> Result<Vec<KeyRecord>, StoreError> {
        Statement::composed(format!(
            "SELECT {KEY_RECORD_COLUMNS} FROM controller_keys WHERE role = $1 ORDER BY recorded_at, key_id{}",
            self.pool.backend().bytewise()
        ))
        .text(role.as_str())
        .fetch_all_as(&mut self.pool.connection().await?, key_record_from_row)
        .await
    }

    async fn record_public_key(
        &self,
        role: KeyRole,
        key_id: &str,
        public_key: &VerifyingKey,
    ) -> Result<(), StoreError> {
        let public_key = encode_public_key(public_key);
        Statement::new(
            "UPDATE controller_keys SET public_key = $3 WHERE role = $1 AND key_id = $2 AND public_key IS NULL",
        )
        .text(role.as_str())
        .text(key_id)
        .text(&public_key)
        .execute(&mut self.pool.connection().await?)
        .await?;
        Ok(())
    }

    async fn rotate_recorded_key(
        &self,
        retiring: &KeyRecord,
        next: &KeyRecord,
        now_ms: u64,
    ) -> Result<bool, StoreError> {
        if retiring.role != next.role || retiring.key_id == next.key_id {
            return Err(StoreError::Corrupt("a key rotation must replace a key of its role with another".into()));
        }
        let retiring_public_key = stored_public_key(retiring);
        let mut transaction = self.pool.begin_write().await?;
        let retired = Statement::new(
            "UPDATE controller_keys SET state = 'retired', retired_at = $3, public_key = COALESCE(public_key, $4) \
             WHERE role = $1 AND key_id = $2 AND state = 'active'",
        )
        .text(retiring.role.as_str())
        .text(&retiring.key_id)
        .integer(counter_to_sql(now_ms, "key retirement time")?)
        .optional_text(retiring_public_key.as_deref())
        .execute(&mut transaction)
        .await?;
        if retired != 1 {
            transaction.rollback().await?;
            return Ok(false);
        }
        insert_key(
            &mut transaction,
            "INSERT INTO controller_keys (role, key_id, state, recorded_at, public_key) VALUES ($1, $2, 'active', $3, $4)",
            next,
        )
        .await?;
        transaction.commit().await?;
        Ok(true)
    }
}

/// A recorded controller key: `role`, `key_id`, `recorded_at`, `retired_at`, `public_key` (which
/// must be an Ed25519 public key whose id is `key_id`).
pub(crate) fn key_record_from_row(row: &Row) -> Result<KeyRecord, StoreError> {
    let role = row.text("role")?;
    let role =
        KeyRole::parse(&role).ok_or_else(|| StoreError::Corrupt(format!("stored key role {role:?} is unknown")))?;
    let key_id = row.text("key_id")?;
    if key_id.is_empty() {
        return Err(StoreError::Corrupt(format!("stored {role} key id is empty")));
    }
    let public_key = match row.optional_text("public_key")? {
        None => None,
        Some(text) => {
            Some(decode_public_key(&text).filter(|public_key| signing_key_id(public_key) == key_id).ok_or_else(
                || StoreError::Corrupt(format!("stored public key of {role} key {key_id} is not that key")),
            )?)
        }
    };
    let retired_at_ms =
        row.optional_integer("retired_at")?.map(|at| counter_from_sql(at, "key retirement time")).transpose()?;
    Ok(KeyRecord {
        role,
        key_id,
        recorded_at_ms: row.counter("recorded_at", "key record time")?,
        public_key,
        retired_at_ms,
    })
}
