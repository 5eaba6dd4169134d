-- Cloudly store, PostgreSQL: the last service runtime status verdict of every service
-- (`06-storage-claims.md`, "IServiceRuntimeStatus"). `changed_at` is when the verdict (spec
-- revision, state, reason) last changed; a recomputation that finds the same verdict leaves the
-- row as it is.
CREATE TABLE service_runtime_statuses (
    cluster_id    TEXT   NOT NULL,
    service_id    TEXT   NOT NULL,
    spec_revision BIGINT NOT NULL CHECK (spec_revision >= 1),
    state         TEXT   NOT NULL CHECK (state IN ('converged', 'converging', 'waiting', 'refused')),
    reason        TEXT,
    changed_at    BIGINT NOT NULL CHECK (changed_at >= 0),
    PRIMARY KEY (cluster_id, service_id),
    FOREIGN KEY (cluster_id, service_id) REFERENCES services (cluster_id, service_id)
);
