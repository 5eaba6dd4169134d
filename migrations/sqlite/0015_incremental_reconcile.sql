-- Cloudly store, embedded SQLite: the same indexes and table as migrations/postgres/0015.

CREATE INDEX runtime_assignment_heads_by_service ON runtime_assignment_heads (cluster_id, service_id);
CREATE INDEX runtime_local_storage_claim_heads_by_service
    ON runtime_local_storage_claim_heads (cluster_id, service_id);

CREATE INDEX service_runtime_statuses_by_reason
    ON service_runtime_statuses (cluster_id, reason) WHERE reason IS NOT NULL;

CREATE TABLE service_volumes (
    cluster_id TEXT    NOT NULL,
    volume_id  TEXT    NOT NULL,
    service_id TEXT    NOT NULL,
    declared   INTEGER NOT NULL CHECK (declared >= 1),
    PRIMARY KEY (cluster_id, volume_id, service_id),
    FOREIGN KEY (cluster_id, service_id) REFERENCES services (cluster_id, service_id)
) STRICT;
CREATE INDEX service_volumes_by_service ON service_volumes (cluster_id, service_id);
CREATE INDEX service_volumes_by_declared ON service_volumes (cluster_id, declared);

INSERT INTO service_volumes (cluster_id, volume_id, service_id, declared)
SELECT cluster_id, volume_id, service_id, ROW_NUMBER() OVER (PARTITION BY cluster_id ORDER BY service_id, volume_id)
  FROM (SELECT DISTINCT s.cluster_id, json_extract(v.value, '$.id') AS volume_id, s.service_id
          FROM services s
          JOIN service_spec_revisions r
            ON r.cluster_id = s.cluster_id AND r.service_id = s.service_id AND r.revision = s.current_revision
          JOIN json_each(r.body, '$.volumes') AS v
         WHERE NOT s.deleted);

-- The reconcile lock of each cluster: the reconciles, projection issues, address plan writes and
-- route writes of a cluster serialize on its row, so the cluster row itself is held only by the
-- short writes of the facts (specs, nodes, the cluster record, the designation).
CREATE TABLE cluster_reconcile_locks (
    cluster_id TEXT NOT NULL PRIMARY KEY REFERENCES clusters (id)
) STRICT;
INSERT INTO cluster_reconcile_locks (cluster_id) SELECT id FROM clusters;
