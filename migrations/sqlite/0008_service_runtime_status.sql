-- Cloudly store, embedded SQLite: the same table as migrations/postgres/0008, as a STRICT table.
CREATE TABLE service_runtime_statuses (
    cluster_id    TEXT    NOT NULL,
    service_id    TEXT    NOT NULL,
    spec_revision INTEGER NOT NULL CHECK (spec_revision >= 1),
    state         TEXT    NOT NULL CHECK (state IN ('converged', 'converging', 'waiting', 'refused')),
    reason        TEXT,
    changed_at    INTEGER NOT NULL CHECK (changed_at >= 0),
    PRIMARY KEY (cluster_id, service_id),
    FOREIGN KEY (cluster_id, service_id) REFERENCES services (cluster_id, service_id)
) STRICT;
