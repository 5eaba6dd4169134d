-- A smaller write set per accepted registration (docs/benchmarks.md, "Load and scale report").
--
-- The foreign keys of `ingress_registrations` go. Checking one takes a FOR KEY SHARE lock on the
-- referenced row at every insert: the cluster row (which every designation updates), the relay
-- connection, the designation generation and the assignment generation, rows that every
-- registration of a cluster shares, so concurrent registrations built multixacts on them. What
-- the keys held stays held:
-- - clusters, designation generations and assignment generations are never deleted, and the
--   insert's guard (`store/registrations.rs`, `REGISTRATION_COMMIT_SQL`) already requires the
--   designation generation to be the cluster's current one and the assignment generation to be
--   its head's, in the same statement;
-- - the guard now also requires the relay connection to exist. Retention deletes only
--   connections last seen more than `--relay-connection-retention-hours` (at least 1 hour) ago
--   and that no registration names; a connection a registration is judged through was seen
--   within its lease (`--relay-lease-ms`, at most 1 hour), so it is never one of them.
-- On SQLite the keys stay: it checks them in-process, under the database's one write lock.

DO $$
DECLARE constraint_name TEXT;
BEGIN
    FOR constraint_name IN
        SELECT conname FROM pg_constraint
        WHERE conrelid = 'ingress_registrations'::regclass AND contype = 'f'
    LOOP
        EXECUTE format('ALTER TABLE ingress_registrations DROP CONSTRAINT %I', constraint_name);
    END LOOP;
END $$;
