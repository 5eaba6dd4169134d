-- Cloudly store, embedded SQLite: the same shape as migrations/postgres/0013 (the granted
-- destinations of each node's current projection on its head, the backends of each route on the
-- route, carried over from the two tables, which are then dropped; a tag per cluster's live lease
-- set). SQLite compresses nothing, so the postgres file's record compression has no counterpart.

ALTER TABLE runtime_network_projection_heads ADD COLUMN granted TEXT NOT NULL DEFAULT '[]';
UPDATE runtime_network_projection_heads
   SET granted = (SELECT json_group_array(json_array(g.lease_id, g.protocol, g.port))
                    FROM runtime_network_projection_grants g
                   WHERE g.cluster_id = runtime_network_projection_heads.cluster_id
                     AND g.node_id = runtime_network_projection_heads.node_id)
 WHERE EXISTS (SELECT 1 FROM runtime_network_projection_grants g
                WHERE g.cluster_id = runtime_network_projection_heads.cluster_id
                  AND g.node_id = runtime_network_projection_heads.node_id);
DROP TABLE runtime_network_projection_grants;

ALTER TABLE ingress_routes ADD COLUMN backends TEXT NOT NULL DEFAULT '[]';
UPDATE ingress_routes
   SET backends = (SELECT json_group_array(json_array(b.lease_id, b.address))
                     FROM ingress_route_backends b
                    WHERE b.cluster_id = ingress_routes.cluster_id AND b.hostname = ingress_routes.hostname
                      AND b.port = ingress_routes.port)
 WHERE EXISTS (SELECT 1 FROM ingress_route_backends b
                WHERE b.cluster_id = ingress_routes.cluster_id AND b.hostname = ingress_routes.hostname
                  AND b.port = ingress_routes.port);
DROP TABLE ingress_route_backends;

-- The tag of each cluster's set of live leases (see migrations/postgres/0013).
CREATE TABLE runtime_network_lease_sets (
    cluster_id TEXT NOT NULL PRIMARY KEY REFERENCES clusters (id),
    tag        TEXT NOT NULL
) STRICT;
INSERT INTO runtime_network_lease_sets (cluster_id, tag)
SELECT cluster_id, lower(hex(randomblob(16))) FROM (SELECT DISTINCT cluster_id FROM runtime_network_lease_heads);
