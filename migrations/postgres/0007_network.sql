-- Cloudly store, PostgreSQL: runtime network address plans (every revision), each cluster's
-- protected authority (every generation) and runtime network leases (every generation, with each
-- lease's head) (`05-projection.md`, "Address plan", "Leases").
--
-- Records are kept as canonical JSON text (`record`) and read back through the contract readers;
-- the other columns are keys and the facts the statements guard on. Every table hangs off a
-- cluster (and so off an organization) by a foreign key.

-- Every revision of every cluster's address plan. The current one is the highest revision; the
-- primary key makes two writes of one revision impossible, also across controller processes.
CREATE TABLE runtime_network_address_plans (
    cluster_id TEXT   NOT NULL REFERENCES clusters (id),
    revision   BIGINT NOT NULL CHECK (revision >= 1),
    digest     TEXT   NOT NULL,
    record     TEXT   NOT NULL,
    PRIMARY KEY (cluster_id, revision)
);

-- Every generation of every cluster's protected authority, with the plan revision that made it.
-- The current one is the highest generation.
CREATE TABLE runtime_network_protected_authorities (
    cluster_id    TEXT   NOT NULL REFERENCES clusters (id),
    generation    BIGINT NOT NULL CHECK (generation >= 1),
    plan_revision BIGINT NOT NULL,
    digest        TEXT   NOT NULL,
    record        TEXT   NOT NULL,
    PRIMARY KEY (cluster_id, generation),
    FOREIGN KEY (cluster_id, plan_revision) REFERENCES runtime_network_address_plans (cluster_id, revision)
);

-- Every generation of every lease.
CREATE TABLE runtime_network_leases (
    cluster_id TEXT   NOT NULL REFERENCES clusters (id),
    lease_id   TEXT   NOT NULL,
    generation BIGINT NOT NULL CHECK (generation >= 1),
    digest     TEXT   NOT NULL,
    record     TEXT   NOT NULL,
    PRIMARY KEY (cluster_id, lease_id, generation)
);

-- The latest generation of each lease, the assignment holding it, its link subnet (the /30's
-- network address as an unsigned 32-bit number) and whether it is live (released leases stay,
-- not live). Every link subnet is a /30 on a /30 boundary, so two link subnets overlap only when
-- they are equal: the first partial unique index makes overlapping live leases impossible, the
-- second gives an assignment at most one live lease.
CREATE TABLE runtime_network_lease_heads (
    cluster_id    TEXT    NOT NULL,
    lease_id      TEXT    NOT NULL,
    generation    BIGINT  NOT NULL,
    assignment_id TEXT    NOT NULL,
    link_subnet   BIGINT  NOT NULL CHECK (link_subnet >= 0 AND link_subnet <= 4294967292 AND link_subnet % 4 = 0),
    live          BOOLEAN NOT NULL,
    PRIMARY KEY (cluster_id, lease_id),
    FOREIGN KEY (cluster_id, lease_id, generation)
        REFERENCES runtime_network_leases (cluster_id, lease_id, generation),
    FOREIGN KEY (cluster_id, assignment_id) REFERENCES runtime_assignment_heads (cluster_id, assignment_id)
);

CREATE UNIQUE INDEX runtime_network_lease_heads_live_link_subnet
    ON runtime_network_lease_heads (cluster_id, link_subnet) WHERE live;

CREATE UNIQUE INDEX runtime_network_lease_heads_live_assignment
    ON runtime_network_lease_heads (cluster_id, assignment_id) WHERE live;
