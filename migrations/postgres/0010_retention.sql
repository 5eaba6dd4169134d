-- Cloudly store, PostgreSQL: an index for retention (`store/retention.rs`): a relay connection is
-- deleted only when no registration names it, which this index answers without a scan.
CREATE INDEX ingress_registrations_by_relay_connection ON ingress_registrations (relay_connection_id);
