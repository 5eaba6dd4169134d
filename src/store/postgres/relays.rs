//! [`RelayStore`](crate::store::relays::RelayStore) for [`PostgresStore`](super::PostgresStore).

use super::PostgresStore;
use crate::store::relays::RelayStore;
use async_trait::async_trait;

#[async_trait]
impl RelayStore for PostgresStore {}
