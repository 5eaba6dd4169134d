//! [`SessionStore`](crate::store::sessions::SessionStore) for [`PostgresStore`](super::PostgresStore).

use super::PostgresStore;
use crate::store::sessions::SessionStore;
use async_trait::async_trait;

#[async_trait]
impl SessionStore for PostgresStore {}
