-- Cloudly store, embedded SQLite: the same column as migrations/postgres/0014 (a projection
-- generation keeps its endpoint leases by reference: `endpoint_leases`, a JSON array of
-- `[leaseId, generation]` in endpoint order, with the record stored with `"endpoints":[]`; NULL
-- for a row written before, whose record is whole). SQLite compresses nothing, so the postgres
-- file's compression has no counterpart.
ALTER TABLE runtime_network_projections ADD COLUMN endpoint_leases TEXT;
