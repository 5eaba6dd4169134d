-- Cloudly store, PostgreSQL: a projection generation keeps its endpoint leases by reference.
--
-- Every endpoint of a projection is a whole lease record (some 500 bytes of its 3.5 MB at the
-- 4 096-endpoint limit), and every generation of every lease is already kept in
-- `runtime_network_leases`. A generation written from now on stores its record with
-- `"endpoints":[]` and the endpoint leases' references in `endpoint_leases`, a JSON array of
-- `[leaseId, generation]` in endpoint order; the reader puts the leases back and checks the
-- record's digest. A row written before this migration keeps its whole record and a NULL here.
ALTER TABLE runtime_network_projections ADD COLUMN endpoint_leases TEXT;

DO $$
BEGIN
    ALTER TABLE runtime_network_projections ALTER COLUMN endpoint_leases SET COMPRESSION lz4;
EXCEPTION WHEN feature_not_supported OR invalid_parameter_value THEN
    RAISE NOTICE 'lz4 is not available; endpoint lease references keep the default compression';
END
$$;
