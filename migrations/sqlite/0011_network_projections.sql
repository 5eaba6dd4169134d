-- Cloudly store, embedded SQLite: the same tables as migrations/postgres/0011, as STRICT tables
-- (booleans are INTEGER 0 or 1): signed runtime network projections (`05-projection.md`,
-- "Projection", "Issuing") and the route table's backends (`04-registration.md`, "Route table").
--
-- Records are kept as canonical JSON text (`record`) with their signature block, read back
-- through the contract readers. Every table hangs off a cluster by a foreign key.

-- The issued generations of each node's projection (one chain per node). The head and the
-- generation before it are kept; older generations are pruned when a new one is issued.
CREATE TABLE runtime_network_projections (
    cluster_id TEXT   NOT NULL REFERENCES clusters (id),
    node_id    TEXT   NOT NULL,
    generation INTEGER NOT NULL CHECK (generation >= 1),
    digest     TEXT   NOT NULL,
    record     TEXT   NOT NULL,
    signature  TEXT   NOT NULL,
    issued_at  INTEGER NOT NULL,
    PRIMARY KEY (cluster_id, node_id, generation)
) STRICT;

-- The current generation of each node's projection; `inputs` is the digest of what it was built
-- from (the issuer rebuilds a node only when its inputs move), `retains` whether it carries
-- withdrawals or retired leases, and `applied_*` the generation the node last reported applying.
CREATE TABLE runtime_network_projection_heads (
    cluster_id         TEXT    NOT NULL,
    node_id            TEXT    NOT NULL,
    generation         INTEGER  NOT NULL,
    digest             TEXT    NOT NULL,
    inputs             TEXT    NOT NULL,
    retains            INTEGER NOT NULL,
    applied_generation INTEGER,
    applied_digest     TEXT,
    PRIMARY KEY (cluster_id, node_id),
    FOREIGN KEY (cluster_id, node_id, generation)
        REFERENCES runtime_network_projections (cluster_id, node_id, generation)
) STRICT;

-- The workload ingress grants of each node's current projection, by destination lease, protocol
-- and port: what the route table's backends are judged from.
CREATE TABLE runtime_network_projection_grants (
    cluster_id TEXT   NOT NULL REFERENCES clusters (id),
    node_id    TEXT   NOT NULL,
    lease_id   TEXT   NOT NULL,
    protocol   TEXT   NOT NULL,
    port       INTEGER NOT NULL,
    PRIMARY KEY (cluster_id, node_id, lease_id, protocol, port)
) STRICT;

-- The backends of each route: a target lease whose grant exists in an issued projection.
CREATE TABLE ingress_route_backends (
    cluster_id TEXT   NOT NULL,
    hostname   TEXT   NOT NULL,
    lease_id   TEXT   NOT NULL,
    address    TEXT   NOT NULL,
    port       INTEGER NOT NULL,
    PRIMARY KEY (cluster_id, hostname, lease_id),
    FOREIGN KEY (cluster_id, hostname) REFERENCES ingress_routes (cluster_id, hostname) ON DELETE CASCADE
) STRICT;
