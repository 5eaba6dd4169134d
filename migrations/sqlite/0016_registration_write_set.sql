-- A smaller write set per accepted registration on PostgreSQL (see its 0016): there the foreign
-- keys of `ingress_registrations` go, since checking them locked rows every registration shares.
-- On SQLite they stay: it checks them in-process, under the database's one write lock, so this
-- version changes nothing here.
SELECT 1;
