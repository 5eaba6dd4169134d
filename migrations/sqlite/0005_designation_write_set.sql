-- A smaller write set per designation, as on PostgreSQL (see its 0005 and docs/benchmarks.md).
--
-- 1. The head of a cluster's designation chain moves into the cluster row
--    (`clusters.designation_generation`, NULL while the cluster holds none).
-- 2. The mutation record folds into the generation it produced (`mutation_key` =
--    `<cluster id>/<mutation id>`, unique; `request_canonical`). SQLite cannot add NOT NULL columns to a table
--    other tables reference without rebuilding it; the columns are nullable here and every write
--    sets both (the store's tests read them back).
-- 3. `clusters.facts_version` counts every write of a fact the designation judge reads, as on
--    PostgreSQL.
-- The foreign keys of `ingress_designations` stay: SQLite checks them in-process.

ALTER TABLE clusters ADD COLUMN designation_generation INTEGER CHECK (designation_generation >= 1);
ALTER TABLE clusters ADD COLUMN facts_version INTEGER NOT NULL DEFAULT 0;

UPDATE clusters SET designation_generation =
    (SELECT h.generation FROM ingress_designation_heads h WHERE h.cluster_id = clusters.id);

ALTER TABLE ingress_designations ADD COLUMN mutation_key TEXT;
ALTER TABLE ingress_designations ADD COLUMN request_canonical TEXT;

UPDATE ingress_designations SET
    mutation_key = (SELECT m.cluster_id || '/' || m.mutation_id FROM ingress_designation_mutations m
                   WHERE m.cluster_id = ingress_designations.cluster_id
                     AND m.generation = ingress_designations.generation),
    request_canonical = (SELECT m.request_canonical FROM ingress_designation_mutations m
                         WHERE m.cluster_id = ingress_designations.cluster_id
                           AND m.generation = ingress_designations.generation);

CREATE UNIQUE INDEX ingress_designations_mutation ON ingress_designations (mutation_key);

DROP TABLE ingress_designation_mutations;
DROP TABLE ingress_designation_heads;
