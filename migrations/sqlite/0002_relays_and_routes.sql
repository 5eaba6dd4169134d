-- Cloudly store, embedded SQLite: the same tables as migrations/postgres/0002, as STRICT tables.
--
-- Bearers and connection tokens are kept only as SHA-256 hashes. Times are milliseconds since
-- the Unix epoch.

CREATE TABLE relay_credentials (
    cluster_id  TEXT    NOT NULL REFERENCES clusters (id),
    relay_id    TEXT    NOT NULL,
    bearer_hash BLOB    NOT NULL CHECK (length(bearer_hash) = 32),
    generation  INTEGER NOT NULL CHECK (generation >= 1),
    PRIMARY KEY (cluster_id, relay_id)
) STRICT;

CREATE TABLE relay_connections (
    id           TEXT    PRIMARY KEY NOT NULL,
    cluster_id   TEXT    NOT NULL REFERENCES clusters (id),
    relay_id     TEXT    NOT NULL,
    epoch        INTEGER NOT NULL CHECK (epoch >= 1),
    token_hash   BLOB    NOT NULL UNIQUE CHECK (length(token_hash) = 32),
    connected_at INTEGER NOT NULL CHECK (connected_at >= 0),
    last_seen_at INTEGER NOT NULL CHECK (last_seen_at >= 0),
    UNIQUE (cluster_id, epoch),
    FOREIGN KEY (cluster_id, relay_id) REFERENCES relay_credentials (cluster_id, relay_id)
) STRICT;

CREATE TABLE ingress_route_tables (
    cluster_id TEXT    PRIMARY KEY NOT NULL REFERENCES clusters (id),
    revision   INTEGER NOT NULL CHECK (revision >= 1)
) STRICT;

CREATE TABLE ingress_routes (
    cluster_id TEXT    NOT NULL REFERENCES ingress_route_tables (cluster_id),
    hostname   TEXT    NOT NULL,
    service_id TEXT    NOT NULL,
    protocol   TEXT    NOT NULL CHECK (protocol IN ('tcp', 'udp')),
    port       INTEGER NOT NULL CHECK (port BETWEEN 1 AND 65535),
    PRIMARY KEY (cluster_id, hostname)
) STRICT;
