-- Cloudly store, PostgreSQL: the controller keys the store was written with, and the row the
-- readiness check writes.
--
-- Times are milliseconds since the Unix epoch.

-- One record per key, by its role (`identity`, `signing`, `secret`) and its key id, never the key:
-- an Ed25519 key's id is `sha256:` + lowerhex(SHA-256(public key)), the secret key's a one-way
-- fingerprint (`fingerprint:` + the first 16 bytes of SHA-256 over a fixed label and the key, in
-- lowerhex). A role has at most one key in use (`active`, the partial unique index); a key taken
-- out of use stays recorded as `retired`, with when.
CREATE TABLE controller_keys (
    role        TEXT   NOT NULL,
    key_id      TEXT   NOT NULL,
    state       TEXT   NOT NULL CHECK (state IN ('active', 'retired')),
    recorded_at BIGINT NOT NULL CHECK (recorded_at >= 0),
    retired_at  BIGINT CHECK (retired_at >= 0),
    PRIMARY KEY (role, key_id)
);

CREATE UNIQUE INDEX controller_keys_one_active_per_role ON controller_keys (role) WHERE state = 'active';

-- Exactly one row; every readiness check adds one to `checks` and commits, so a store that no
-- longer takes writes is not ready.
CREATE TABLE store_heartbeat (
    id     INTEGER PRIMARY KEY CHECK (id = 1),
    checks BIGINT  NOT NULL CHECK (checks >= 0)
);

INSERT INTO store_heartbeat (id, checks) VALUES (1, 0);
