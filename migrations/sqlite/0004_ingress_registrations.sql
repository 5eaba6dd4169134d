-- Cloudly store, embedded SQLite: the same table as migrations/postgres/0004, as a STRICT table.
-- Accepted cluster ingress registrations, every one kept; the bearer is neither stored nor
-- derived from.

CREATE TABLE ingress_registrations (
    sequence               INTEGER PRIMARY KEY AUTOINCREMENT,
    registration_id        TEXT    NOT NULL UNIQUE,
    cluster_id             TEXT    NOT NULL REFERENCES clusters (id),
    node_id                TEXT    NOT NULL,
    version                TEXT    NOT NULL,
    capabilities           TEXT,
    protocol_version       INTEGER NOT NULL CHECK (protocol_version >= 1),
    relay_connection_id    TEXT    NOT NULL REFERENCES relay_connections (id),
    relay_id               TEXT    NOT NULL,
    relay_epoch            INTEGER NOT NULL CHECK (relay_epoch >= 1),
    designation_id         TEXT    NOT NULL,
    designation_generation INTEGER NOT NULL CHECK (designation_generation >= 1),
    designation_digest     TEXT    NOT NULL,
    assignment_id          TEXT    NOT NULL,
    assignment_generation  INTEGER NOT NULL CHECK (assignment_generation >= 1),
    assignment_digest      TEXT    NOT NULL,
    session_id             TEXT    NOT NULL,
    session_generation     INTEGER NOT NULL CHECK (session_generation >= 1),
    registered_at          INTEGER NOT NULL CHECK (registered_at >= 0),
    FOREIGN KEY (cluster_id, designation_generation) REFERENCES ingress_designations (cluster_id, generation),
    FOREIGN KEY (cluster_id, assignment_id, assignment_generation)
        REFERENCES runtime_assignments (cluster_id, assignment_id, generation)
) STRICT;

CREATE INDEX ingress_registrations_by_cluster ON ingress_registrations (cluster_id, sequence);
CREATE INDEX ingress_registrations_by_node ON ingress_registrations (cluster_id, node_id, sequence);
