-- Cloudly store, embedded SQLite: the same index as migrations/postgres/0010.
CREATE INDEX ingress_registrations_by_relay_connection ON ingress_registrations (relay_connection_id);
