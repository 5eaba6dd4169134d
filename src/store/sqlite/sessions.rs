//! [`SessionStore`](crate::store::sessions::SessionStore) for [`SqliteStore`](super::SqliteStore).

use super::SqliteStore;
use crate::store::sessions::SessionStore;
use async_trait::async_trait;

#[async_trait]
impl SessionStore for SqliteStore {}
