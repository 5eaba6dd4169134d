//! [`RelayStore`](crate::store::relays::RelayStore) for [`SqliteStore`](super::SqliteStore).

use super::SqliteStore;
use crate::store::relays::RelayStore;
use async_trait::async_trait;

#[async_trait]
impl RelayStore for SqliteStore {}
