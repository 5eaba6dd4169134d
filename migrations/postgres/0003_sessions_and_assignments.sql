-- Cloudly store, PostgreSQL: node runtime sessions, runtime assignments (every generation, signed)
-- with each cluster's current heads, and the states nodes report (`04-registration.md`, "Node
-- sessions and assignments").

-- Every session a node opened. The current one is the highest generation; the primary key makes
-- two opens with the same generation impossible, also across controller processes.
CREATE TABLE runtime_sessions (
    cluster_id        TEXT   NOT NULL,
    node_id           TEXT   NOT NULL,
    generation        BIGINT NOT NULL CHECK (generation >= 1),
    session_id        TEXT   NOT NULL UNIQUE,
    controller_kind   TEXT   NOT NULL CHECK (controller_kind IN ('cloudly', 'onebox')),
    controller_id     TEXT   NOT NULL,
    runtime_namespace TEXT   NOT NULL,
    opened_at         BIGINT NOT NULL,
    PRIMARY KEY (cluster_id, node_id, generation),
    FOREIGN KEY (cluster_id, node_id) REFERENCES cluster_nodes (cluster_id, node_id)
);

-- Every generation of every runtime assignment, kept: the payload as canonical JSON and its
-- signature block as JSON text.
CREATE TABLE runtime_assignments (
    cluster_id    TEXT   NOT NULL REFERENCES clusters (id),
    assignment_id TEXT   NOT NULL,
    generation    BIGINT NOT NULL CHECK (generation >= 1),
    node_id       TEXT   NOT NULL,
    service_id    TEXT   NOT NULL,
    digest        TEXT   NOT NULL,
    record        TEXT   NOT NULL,
    signature     TEXT   NOT NULL,
    PRIMARY KEY (cluster_id, assignment_id, generation)
);

-- The latest generation of each assignment and whether it is in its node's current set.
CREATE TABLE runtime_assignment_heads (
    cluster_id    TEXT    NOT NULL,
    assignment_id TEXT    NOT NULL,
    generation    BIGINT  NOT NULL,
    node_id       TEXT    NOT NULL,
    service_id    TEXT    NOT NULL,
    active        BOOLEAN NOT NULL,
    PRIMARY KEY (cluster_id, assignment_id),
    FOREIGN KEY (cluster_id, assignment_id, generation)
        REFERENCES runtime_assignments (cluster_id, assignment_id, generation)
);

CREATE INDEX runtime_assignment_heads_by_node ON runtime_assignment_heads (cluster_id, node_id);

-- The latest state a node reported for one assignment generation, with the session it used.
CREATE TABLE runtime_assignment_states (
    cluster_id         TEXT   NOT NULL,
    assignment_id      TEXT   NOT NULL,
    generation         BIGINT NOT NULL,
    state              TEXT   NOT NULL CHECK (state IN ('starting', 'ready', 'failed', 'stopped')),
    session_id         TEXT   NOT NULL,
    session_generation BIGINT NOT NULL,
    reported_at        BIGINT NOT NULL,
    PRIMARY KEY (cluster_id, assignment_id, generation),
    FOREIGN KEY (cluster_id, assignment_id, generation)
        REFERENCES runtime_assignments (cluster_id, assignment_id, generation)
);
