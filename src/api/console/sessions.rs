//! The console's sign-in sessions: a random id in a cookie, the identity kept here, in memory.
//!
//! A session holds the identity an operator signed in with (its token included, so every page
//! is read through the method table with it) and ends when the identity expires. The table is
//! bounded ([`MAX_SESSIONS`]): a new session past the bound takes the place of the oldest. The
//! id is 32 random bytes; the table is keyed by the id's SHA-256, so the map holds no cookie
//! value.

use crate::domain::identity::Role;
use serde_json::Value;
use sha2::{Digest as _, Sha256};
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};
use tokio::sync::Semaphore;

/// How many sessions one process keeps at once.
pub const MAX_SESSIONS: usize = 1024;

/// How many live streams one session may hold at once.
pub const STREAMS_PER_SESSION: usize = 4;

/// One signed-in operator. `Debug` shows no identity.
#[derive(Clone)]
pub struct Session {
    /// The identity signed in with (`IIdentity`): sent as `identity` with every read.
    pub identity: Value,
    /// The identity's display name.
    pub name: String,
    /// The identity's role.
    pub role: Role,
    /// When the identity (and so the session) expires, ms since the epoch.
    pub expires_at: u64,
    /// The live streams this session may still open.
    pub streams: Arc<Semaphore>,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("Session")
            .field("name", &self.name)
            .field("role", &self.role)
            .field("expires_at", &self.expires_at)
            .field("identity", &"<redacted>")
            .finish()
    }
}

type Key = [u8; 32];

fn key_of(id: &str) -> Key {
    Sha256::digest(id.as_bytes()).into()
}

/// The session table.
#[derive(Default)]
pub struct Sessions {
    table: Mutex<Table>,
}

#[derive(Default)]
struct Table {
    sessions: HashMap<Key, Session>,
    order: VecDeque<Key>,
}

impl Sessions {
    fn lock(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Keeps `session` and answers its new id (64 hex digits), or `None` when no random bytes
    /// could be drawn. Expired sessions leave first, then the oldest while the table is full.
    pub fn create(&self, session: Session, now_ms: u64) -> Option<String> {
        let mut bytes = [0u8; 32];
        getrandom::fill(&mut bytes).ok()?;
        let id = hex::encode(bytes);
        let mut table = self.lock();
        let Table { sessions, order } = &mut *table;
        sessions.retain(|_, kept| kept.expires_at > now_ms);
        order.retain(|key| sessions.contains_key(key));
        while sessions.len() >= MAX_SESSIONS {
            let Some(oldest) = order.pop_front() else { break };
            sessions.remove(&oldest);
        }
        let key = key_of(&id);
        sessions.insert(key, session);
        order.push_back(key);
        Some(id)
    }

    /// The session of `id` while its identity has not expired; an expired one is removed.
    pub fn get(&self, id: &str, now_ms: u64) -> Option<Session> {
        let key = key_of(id);
        let mut table = self.lock();
        let session = table.sessions.get(&key)?.clone();
        if session.expires_at <= now_ms {
            table.sessions.remove(&key);
            table.order.retain(|kept| *kept != key);
            return None;
        }
        Some(session)
    }

    /// Ends the session of `id`, if any.
    pub fn remove(&self, id: &str) {
        let key = key_of(id);
        let mut table = self.lock();
        if table.sessions.remove(&key).is_some() {
            table.order.retain(|kept| *kept != key);
        }
    }

    /// How many sessions are kept.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.lock().sessions.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn session(expires_at: u64) -> Session {
        Session {
            identity: json!({ "jwt": "secret-token" }),
            name: "Ada".to_owned(),
            role: Role::Viewer,
            expires_at,
            streams: Arc::new(Semaphore::new(STREAMS_PER_SESSION)),
        }
    }

    #[test]
    fn a_session_lives_until_its_identity_expires() {
        let sessions = Sessions::default();
        let id = sessions.create(session(2_000), 1_000).unwrap();
        assert_eq!(id.len(), 64);
        assert!(sessions.get(&id, 1_999).is_some());
        assert!(sessions.get("forged", 1_999).is_none());
        assert!(sessions.get(&id, 2_000).is_none());
        assert_eq!(sessions.len(), 0, "an expired session is removed");
    }

    #[test]
    fn the_table_is_bounded_and_signing_out_ends_a_session() {
        let sessions = Sessions::default();
        let first = sessions.create(session(10_000), 1).unwrap();
        for _ in 0..MAX_SESSIONS {
            sessions.create(session(10_000), 1).unwrap();
        }
        assert_eq!(sessions.len(), MAX_SESSIONS);
        assert!(sessions.get(&first, 2).is_none(), "the oldest session made room");
        let last = sessions.create(session(10_000), 1).unwrap();
        sessions.remove(&last);
        assert!(sessions.get(&last, 2).is_none());
    }

    #[test]
    fn debug_shows_no_identity() {
        assert!(!format!("{:?}", session(1)).contains("secret-token"));
    }
}
