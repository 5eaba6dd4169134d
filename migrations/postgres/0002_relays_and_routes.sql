-- Cloudly store, PostgreSQL: cluster relays (credentials, connections, the election) and the
-- cluster ingress route table (`04-registration.md`, "Relays" and "Route table").
--
-- Bearers and connection tokens are kept only as SHA-256 hashes. Times are milliseconds since
-- the Unix epoch. Counters are at most 2^53 - 1, so BIGINT holds them.

-- One credential per (cluster, relay); `generation` counts rotations, so a connect can check
-- that the credential it verified is still the current one when it commits.
CREATE TABLE relay_credentials (
    cluster_id  TEXT   NOT NULL REFERENCES clusters (id),
    relay_id    TEXT   NOT NULL,
    bearer_hash BYTEA  NOT NULL CHECK (octet_length(bearer_hash) = 32),
    generation  BIGINT NOT NULL CHECK (generation >= 1),
    PRIMARY KEY (cluster_id, relay_id)
);

-- Every relay connection. The cluster's elected connection is the one with the highest epoch,
-- while its last connect or heartbeat is younger than the lease.
CREATE TABLE relay_connections (
    id           TEXT   PRIMARY KEY,
    cluster_id   TEXT   NOT NULL REFERENCES clusters (id),
    relay_id     TEXT   NOT NULL,
    epoch        BIGINT NOT NULL CHECK (epoch >= 1),
    token_hash   BYTEA  NOT NULL UNIQUE CHECK (octet_length(token_hash) = 32),
    connected_at BIGINT NOT NULL CHECK (connected_at >= 0),
    last_seen_at BIGINT NOT NULL CHECK (last_seen_at >= 0),
    UNIQUE (cluster_id, epoch),
    FOREIGN KEY (cluster_id, relay_id) REFERENCES relay_credentials (cluster_id, relay_id)
);

-- The head of a cluster's route table: absent until the first route is written.
CREATE TABLE ingress_route_tables (
    cluster_id TEXT   PRIMARY KEY REFERENCES clusters (id),
    revision   BIGINT NOT NULL CHECK (revision >= 1)
);

CREATE TABLE ingress_routes (
    cluster_id TEXT    NOT NULL REFERENCES ingress_route_tables (cluster_id),
    hostname   TEXT    NOT NULL,
    service_id TEXT    NOT NULL,
    protocol   TEXT    NOT NULL CHECK (protocol IN ('tcp', 'udp')),
    port       INTEGER NOT NULL CHECK (port BETWEEN 1 AND 65535),
    PRIMARY KEY (cluster_id, hostname)
);
