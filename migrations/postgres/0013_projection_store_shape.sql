-- Cloudly store, PostgreSQL: what issuing a projection reads and writes, in fewer and cheaper
-- statements. The granted destinations of each node's current projection become one column of
-- its projection head, and the backends of each route one column of its route.
-- Both are always written and read whole (a node's grants when its projection is issued, a
-- route's backends when the issuer judges them), and as rows they cost more than the projection
-- itself: 1 024 rows per maximal issue (`docs/benchmarks.md`, the projection store section).
--
-- `granted`: a JSON array of `[leaseId, protocol, port]`; `backends`: a JSON array of
-- `[leaseId, address]` (the port of a backend is its route's). Rows written before this
-- migration are carried over; then the two tables are dropped.

ALTER TABLE runtime_network_projection_heads ADD COLUMN granted TEXT NOT NULL DEFAULT '[]';
UPDATE runtime_network_projection_heads h
   SET granted = (SELECT json_agg(json_build_array(g.lease_id, g.protocol, g.port))::text
                    FROM runtime_network_projection_grants g
                   WHERE g.cluster_id = h.cluster_id AND g.node_id = h.node_id)
 WHERE EXISTS (SELECT 1 FROM runtime_network_projection_grants g
                WHERE g.cluster_id = h.cluster_id AND g.node_id = h.node_id);
DROP TABLE runtime_network_projection_grants;

ALTER TABLE ingress_routes ADD COLUMN backends TEXT NOT NULL DEFAULT '[]';
UPDATE ingress_routes r
   SET backends = (SELECT json_agg(json_build_array(b.lease_id, b.address))::text
                     FROM ingress_route_backends b
                    WHERE b.cluster_id = r.cluster_id AND b.hostname = r.hostname AND b.port = r.port)
 WHERE EXISTS (SELECT 1 FROM ingress_route_backends b
                WHERE b.cluster_id = r.cluster_id AND b.hostname = r.hostname AND b.port = r.port);
DROP TABLE ingress_route_backends;

-- A maximal projection record is some 3.5 MB of canonical JSON; lz4 compresses it about as well
-- as the default pglz at a fraction of the time. A server built without lz4 keeps the default.
DO $$
BEGIN
    ALTER TABLE runtime_network_projections ALTER COLUMN record SET COMPRESSION lz4;
EXCEPTION WHEN feature_not_supported OR invalid_parameter_value THEN
    RAISE NOTICE 'lz4 is not available; projection records keep the default compression';
END
$$;

-- The tag of each cluster's set of live leases: a fresh random value written with every change
-- of the cluster's lease heads, in the same transaction. A tag names one content for good, so a
-- process keeps the leases it parsed under their tag and reads only the tag while it holds
-- (`store/network.rs`, `live_leases_on`). Clusters with leases get a tag now.
CREATE TABLE runtime_network_lease_sets (
    cluster_id TEXT NOT NULL PRIMARY KEY REFERENCES clusters (id),
    tag        TEXT NOT NULL
);
INSERT INTO runtime_network_lease_sets (cluster_id, tag)
SELECT DISTINCT cluster_id, replace(gen_random_uuid()::text, '-', '') FROM runtime_network_lease_heads;
