//! [`RegistrationStore`](crate::store::registrations::RegistrationStore) for
//! [`SqliteStore`](super::SqliteStore): the shared body of `registration_store!`.

use super::SqliteStore;

registration_store!(SqliteStore, sqlx::sqlite::SqliteRow);
