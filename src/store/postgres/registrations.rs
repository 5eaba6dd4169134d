//! [`RegistrationStore`](crate::store::registrations::RegistrationStore) for
//! [`PostgresStore`](super::PostgresStore): the shared body of `registration_store!`.

use super::PostgresStore;

registration_store!(PostgresStore, sqlx::postgres::PgRow);
