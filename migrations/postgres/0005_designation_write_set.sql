-- A smaller write set per designation (docs/benchmarks.md, "designation write set").
--
-- 1. The head of a cluster's designation chain moves into the cluster row
--    (`clusters.designation_generation`, NULL while the cluster holds none). Every write that
--    judges a cluster locks that row first, so the compare-and-swap now updates the row it has
--    locked, like a plain single-row CAS, instead of a second table.
-- 2. The mutation record folds into the generation it produced (`mutation_key`,
--    `request_canonical`): one row and one index less per designation. `mutation_key` is
--    `<cluster id>/<mutation id>` (an id never holds `/`), unique, so a mutation is looked up by one
--    column that only its own index holds. With the key split into (cluster_id, mutation_id), the
--    primary key (cluster_id, generation) also matches `cluster_id = …`, and a planner whose
--    statistics are from when the table was small (when each cluster had one generation) may pick
--    it and scan every generation of the cluster.
-- 3. The foreign key from a generation to its spec revision goes: checking it locked the revision
--    row (FOR KEY SHARE) on every designation. The judge reads that revision under the cluster
--    lock in the same transaction, and spec revisions are never deleted.
-- 4. `clusters.facts_version` counts every write of a fact the designation judge reads (the
--    cluster record, its services and spec revisions, its designation head and mutations). A
--    designation judged on facts read at version v commits only while the version is still v
--    (ARCHITECTURE.md, "optimistic designation commit").
-- Every generation, sealed secret and mutation stays stored, as before.

ALTER TABLE clusters ADD COLUMN designation_generation BIGINT CHECK (designation_generation >= 1);
ALTER TABLE clusters ADD COLUMN facts_version BIGINT NOT NULL DEFAULT 0;

UPDATE clusters c SET designation_generation = h.generation
FROM ingress_designation_heads h WHERE h.cluster_id = c.id;

ALTER TABLE ingress_designations ADD COLUMN mutation_key TEXT, ADD COLUMN request_canonical TEXT;

UPDATE ingress_designations d SET mutation_key = m.cluster_id || '/' || m.mutation_id,
    request_canonical = m.request_canonical
FROM ingress_designation_mutations m WHERE m.cluster_id = d.cluster_id AND m.generation = d.generation;

ALTER TABLE ingress_designations
    ALTER COLUMN mutation_key SET NOT NULL,
    ALTER COLUMN request_canonical SET NOT NULL,
    ADD CONSTRAINT ingress_designations_mutation UNIQUE (mutation_key);

DO $$
DECLARE constraint_name TEXT;
BEGIN
    SELECT conname INTO constraint_name FROM pg_constraint
    WHERE conrelid = 'ingress_designations'::regclass AND confrelid = 'service_spec_revisions'::regclass;
    EXECUTE format('ALTER TABLE ingress_designations DROP CONSTRAINT %I', constraint_name);
END $$;

DROP TABLE ingress_designation_mutations;
DROP TABLE ingress_designation_heads;
