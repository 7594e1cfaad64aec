-- +goose Up
-- The log: one row per leaf, never updated or deleted. leaf holds the exact
-- canonical bytes that were hashed; leaf_hash is their RFC 6962 leaf hash.
CREATE TABLE leaves (
    idx         BIGINT PRIMARY KEY,           -- 0-based leaf index
    id          TEXT   NOT NULL UNIQUE,       -- content id (ledger.EntryID)
    kind        TEXT   NOT NULL,
    key         TEXT   NOT NULL DEFAULT '',   -- ledger.EntryKey
    recorded_at BIGINT NOT NULL,              -- unix nanoseconds, UTC
    leaf        BYTEA  NOT NULL,
    leaf_hash   BYTEA  NOT NULL
);
CREATE INDEX leaves_kind_key ON leaves(kind, key, idx);
CREATE INDEX leaves_kind_idx ON leaves(kind, idx);

-- Every Merkle tree node of a perfect subtree above the leaves (level >= 1;
-- level 0 is leaves.leaf_hash); ord = (end_exclusive_leaf << 6) | level.
CREATE TABLE tree_nodes (
    ord  BIGINT PRIMARY KEY,
    hash BYTEA  NOT NULL
);

-- Signed checkpoints, one per committed batch.
CREATE TABLE checkpoints (
    size       BIGINT PRIMARY KEY,
    root       BYTEA  NOT NULL,
    note       TEXT   NOT NULL,
    created_at BIGINT NOT NULL
);

-- Query projections of evidence leaves (derived; audit re-derives them).
CREATE TABLE evidence_index (
    idx         BIGINT PRIMARY KEY REFERENCES leaves(idx),
    lane        TEXT   NOT NULL,
    backend     TEXT   NOT NULL,
    status      TEXT   NOT NULL,
    control     TEXT   NOT NULL,
    repository  TEXT   NOT NULL,
    commit_id   TEXT   NOT NULL,
    tree_id     TEXT   NOT NULL,
    dirty       BIGINT NOT NULL,
    recorded_at BIGINT NOT NULL
);
CREATE INDEX evidence_lane ON evidence_index(lane, idx);
CREATE INDEX evidence_commit ON evidence_index(commit_id, idx);
CREATE INDEX evidence_lane_commit ON evidence_index(lane, commit_id, idx);
CREATE INDEX evidence_backend ON evidence_index(backend, idx);
CREATE INDEX evidence_status ON evidence_index(status, idx);
CREATE INDEX evidence_recorded ON evidence_index(recorded_at);

CREATE TABLE evidence_artifacts (
    idx    BIGINT NOT NULL REFERENCES leaves(idx),
    name   TEXT   NOT NULL,
    digest TEXT   NOT NULL,
    PRIMARY KEY (idx, name)
);
CREATE INDEX evidence_artifacts_digest ON evidence_artifacts(digest, idx);

CREATE TABLE heads_index (
    idx        BIGINT PRIMARY KEY REFERENCES leaves(idx),
    repository TEXT NOT NULL,
    ref        TEXT NOT NULL,
    commit_id  TEXT NOT NULL,
    verdict    TEXT NOT NULL,
    decision   TEXT NOT NULL
);
CREATE INDEX heads_repo ON heads_index(repository, idx);
CREATE INDEX heads_commit ON heads_index(commit_id, idx);

-- API tokens: only the SHA-256 of the secret is stored.
CREATE TABLE tokens (
    id          TEXT   PRIMARY KEY,
    name        TEXT   NOT NULL UNIQUE,
    scope       TEXT   NOT NULL,
    secret_hash BYTEA  NOT NULL UNIQUE,
    created_at  BIGINT NOT NULL,
    revoked_at  BIGINT
);

-- +goose Down
DROP TABLE tokens;
DROP TABLE heads_index;
DROP TABLE evidence_artifacts;
DROP TABLE evidence_index;
DROP TABLE checkpoints;
DROP TABLE tree_nodes;
DROP TABLE leaves;
