-- Cloudly store, embedded SQLite: the same tables as migrations/postgres/0006, as STRICT tables.
--
-- Times are milliseconds since the Unix epoch.

CREATE TABLE controller_keys (
    role        TEXT    NOT NULL,
    key_id      TEXT    NOT NULL,
    state       TEXT    NOT NULL CHECK (state IN ('active', 'retired')),
    recorded_at INTEGER NOT NULL CHECK (recorded_at >= 0),
    retired_at  INTEGER CHECK (retired_at >= 0),
    PRIMARY KEY (role, key_id)
) STRICT;

CREATE UNIQUE INDEX controller_keys_one_active_per_role ON controller_keys (role) WHERE state = 'active';

CREATE TABLE store_heartbeat (
    id     INTEGER PRIMARY KEY CHECK (id = 1),
    checks INTEGER NOT NULL CHECK (checks >= 0)
) STRICT;

INSERT INTO store_heartbeat (id, checks) VALUES (1, 0);
