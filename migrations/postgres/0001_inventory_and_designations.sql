-- Cloudly store, PostgreSQL: inventory, service spec revisions, the cluster ingress designation
-- chain with its mutations, and sealed secret versions.
--
-- Records are kept as canonical JSON text (`record`, `body`) and read back through the contract
-- readers; the other columns are keys, counters and references the statements need. Counters
-- are at most 2^53 - 1, so BIGINT holds them.

CREATE TABLE organizations (
    id       TEXT   PRIMARY KEY,
    record   TEXT   NOT NULL,
    revision BIGINT NOT NULL CHECK (revision >= 1)
);

CREATE TABLE clusters (
    id                           TEXT   PRIMARY KEY,
    organization_id              TEXT   NOT NULL REFERENCES organizations (id),
    record                       TEXT   NOT NULL,
    revision                     BIGINT NOT NULL CHECK (revision >= 1),
    runtime_phase                TEXT   NOT NULL CHECK (runtime_phase IN ('swarm', 'cutover', 'pallet')),
    runtime_generation           BIGINT NOT NULL CHECK (runtime_generation >= 1),
    relay_origin                 TEXT,
    fleet_designation_id         TEXT,
    fleet_designation_generation BIGINT,
    fleet_designation_digest     TEXT,
    CHECK ((fleet_designation_id IS NULL) = (fleet_designation_generation IS NULL)
       AND (fleet_designation_id IS NULL) = (fleet_designation_digest IS NULL))
);

CREATE INDEX clusters_by_organization ON clusters (organization_id);

CREATE TABLE cluster_nodes (
    cluster_id  TEXT   NOT NULL REFERENCES clusters (id),
    node_id     TEXT   NOT NULL,
    record      TEXT   NOT NULL,
    bearer_hash BYTEA  NOT NULL CHECK (octet_length(bearer_hash) = 32),
    revision    BIGINT NOT NULL CHECK (revision >= 1),
    PRIMARY KEY (cluster_id, node_id)
);

-- The head of a service: its current revision and whether it is deleted. Deleting keeps the
-- revision, so re-creating the service continues its numbering.
CREATE TABLE services (
    cluster_id       TEXT    NOT NULL REFERENCES clusters (id),
    service_id       TEXT    NOT NULL,
    current_revision BIGINT  NOT NULL CHECK (current_revision >= 1),
    deleted          BOOLEAN NOT NULL DEFAULT FALSE,
    PRIMARY KEY (cluster_id, service_id)
);

-- Every revision of every service spec, kept.
CREATE TABLE service_spec_revisions (
    cluster_id TEXT   NOT NULL,
    service_id TEXT   NOT NULL,
    revision   BIGINT NOT NULL CHECK (revision >= 1),
    body       TEXT   NOT NULL,
    PRIMARY KEY (cluster_id, service_id, revision),
    FOREIGN KEY (cluster_id, service_id) REFERENCES services (cluster_id, service_id)
);

-- Every generation of every cluster's Pallet ingress designation, kept: the audit chain.
CREATE TABLE ingress_designations (
    cluster_id             TEXT   NOT NULL REFERENCES clusters (id),
    generation             BIGINT NOT NULL CHECK (generation >= 1),
    designation_id         TEXT   NOT NULL,
    digest                 TEXT   NOT NULL,
    ingress_service_id     TEXT   NOT NULL,
    prepared_spec_revision BIGINT NOT NULL,
    record                 TEXT   NOT NULL,
    PRIMARY KEY (cluster_id, generation),
    FOREIGN KEY (cluster_id, ingress_service_id, prepared_spec_revision)
        REFERENCES service_spec_revisions (cluster_id, service_id, revision)
);

-- The current generation of each cluster's designation. The commit moves it with a guarded
-- statement (insert when there is none, else update where the generation is the expected one).
CREATE TABLE ingress_designation_heads (
    cluster_id TEXT   PRIMARY KEY REFERENCES clusters (id),
    generation BIGINT NOT NULL,
    FOREIGN KEY (cluster_id, generation) REFERENCES ingress_designations (cluster_id, generation)
        DEFERRABLE INITIALLY DEFERRED
);

-- The mutation that produced each generation, for replay.
CREATE TABLE ingress_designation_mutations (
    cluster_id        TEXT   NOT NULL,
    mutation_id       TEXT   NOT NULL,
    request_canonical TEXT   NOT NULL,
    generation        BIGINT NOT NULL,
    PRIMARY KEY (cluster_id, mutation_id),
    UNIQUE (cluster_id, generation),
    FOREIGN KEY (cluster_id, generation) REFERENCES ingress_designations (cluster_id, generation)
);

-- Secret values sealed by the caller (AEAD); the store never sees plaintext.
CREATE TABLE secret_versions (
    secret_id         TEXT  NOT NULL,
    secret_version_id TEXT  NOT NULL,
    nonce             BYTEA NOT NULL,
    ciphertext        BYTEA NOT NULL,
    value_hash        BYTEA NOT NULL CHECK (octet_length(value_hash) = 32),
    PRIMARY KEY (secret_id, secret_version_id)
);
