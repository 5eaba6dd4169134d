-- A smaller write set per designation (docs/benchmarks.md, "designation write set").
--
-- 1. The head of a cluster's designation chain moves into the cluster row
--    (`clusters.designation_generation`, NULL while the cluster holds none). Every write that
--    judges a cluster locks that row first, so the compare-and-swap now updates the row it has
--    locked, like a plain single-row CAS, instead of a second table.
-- 2. The mutation record folds into the generation it produced (`mutation_id`,
--    `request_canonical`), unique per cluster: one row and one index less per designation. The
--    unique index leads with `mutation_id`, so the primary key (cluster_id, generation) is the one
--    index that starts with `cluster_id` and a lookup of one generation never settles for a scan
--    of every generation of the cluster (which a planner with stale statistics may choose when two
--    indexes share that first column).
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

ALTER TABLE ingress_designations ADD COLUMN mutation_id TEXT, ADD COLUMN request_canonical TEXT;

UPDATE ingress_designations d SET mutation_id = m.mutation_id, request_canonical = m.request_canonical
FROM ingress_designation_mutations m WHERE m.cluster_id = d.cluster_id AND m.generation = d.generation;

ALTER TABLE ingress_designations
    ALTER COLUMN mutation_id SET NOT NULL,
    ALTER COLUMN request_canonical SET NOT NULL,
    ADD CONSTRAINT ingress_designations_mutation UNIQUE (mutation_id, cluster_id);

DO $$
DECLARE constraint_name TEXT;
BEGIN
    SELECT conname INTO constraint_name FROM pg_constraint
    WHERE conrelid = 'ingress_designations'::regclass AND confrelid = 'service_spec_revisions'::regclass;
    EXECUTE format('ALTER TABLE ingress_designations DROP CONSTRAINT %I', constraint_name);
END $$;

DROP TABLE ingress_designation_mutations;
DROP TABLE ingress_designation_heads;
