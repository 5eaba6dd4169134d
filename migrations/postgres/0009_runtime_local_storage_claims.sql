-- Cloudly store, PostgreSQL: runtime local storage claims (`06-storage-claims.md`): every
-- generation of every claim (signed), each claim's head, and the node's answer to each
-- generation — the last one that passed `bindApplyRuntimeLocalStorageClaimResponse`, the protocol
-- faults of answers that did not, and an operator's decision on an `uncertain` one.

-- Every generation of every claim, kept: the payload as canonical JSON and its signature block as
-- JSON text. The answer columns hold the node's last trusted answer to this generation (all NULL
-- until one arrives); untrusted answers only count up `fault_count` and name `last_fault`.
CREATE TABLE runtime_local_storage_claims (
    cluster_id                  TEXT   NOT NULL REFERENCES clusters (id),
    claim_id                    TEXT   NOT NULL,
    generation                  BIGINT NOT NULL CHECK (generation >= 1),
    node_id                     TEXT   NOT NULL,
    service_id                  TEXT   NOT NULL,
    volume_id                   TEXT   NOT NULL,
    digest                      TEXT   NOT NULL,
    record                      TEXT   NOT NULL,
    signature                   TEXT   NOT NULL,
    issued_at                   BIGINT NOT NULL CHECK (issued_at >= 0),
    answer_status               TEXT CHECK (answer_status IN ('accepted', 'replay', 'historical')),
    node_state                  TEXT CHECK (node_state IN ('ready', 'import-required', 'purged', 'uncertain')),
    answered_session_id         TEXT,
    answered_session_generation BIGINT,
    answered_at                 BIGINT,
    fault_count                 BIGINT NOT NULL DEFAULT 0 CHECK (fault_count >= 0),
    last_fault                  TEXT,
    last_fault_at               BIGINT,
    resolution                  TEXT CHECK (resolution IN ('purge', 'rebind')),
    resolved_at                 BIGINT,
    PRIMARY KEY (cluster_id, claim_id, generation),
    CHECK ((answer_status IS NULL) = (node_state IS NULL))
);

-- The latest generation of each claim.
CREATE TABLE runtime_local_storage_claim_heads (
    cluster_id TEXT   NOT NULL,
    claim_id   TEXT   NOT NULL,
    generation BIGINT NOT NULL,
    node_id    TEXT   NOT NULL,
    service_id TEXT   NOT NULL,
    volume_id  TEXT   NOT NULL,
    PRIMARY KEY (cluster_id, claim_id),
    FOREIGN KEY (cluster_id, claim_id, generation)
        REFERENCES runtime_local_storage_claims (cluster_id, claim_id, generation)
);

CREATE INDEX runtime_local_storage_claim_heads_by_node ON runtime_local_storage_claim_heads (cluster_id, node_id);
-- `resolveRuntimeLocalStorageClaim` names a claim by its id alone.
CREATE INDEX runtime_local_storage_claim_heads_by_claim ON runtime_local_storage_claim_heads (claim_id);
