-- +goose Up
-- Run state (package runs): mutable bookkeeping of runs queued through
-- POST /api/v1/runs and of the agents that take them. What a run produces
-- (its evidence and its final outcome) is appended to the log; these rows
-- are the queue, the leases and the progress, and are not audited.
-- The same SQL as the SQLite migration of this number (plain types only:
-- TEXT, INTEGER, BIGINT). Times are Unix milliseconds (BIGINT).
CREATE TABLE runs (
    id            TEXT    PRIMARY KEY,
    created_at    BIGINT  NOT NULL,
    updated_at    BIGINT  NOT NULL,
    created_by    TEXT    NOT NULL,
    state         TEXT    NOT NULL,
    backend       TEXT    NOT NULL,
    lanes         TEXT    NOT NULL,
    labels        TEXT    NOT NULL,
    repository    TEXT    NOT NULL,
    commit_id     TEXT    NOT NULL,
    attempt       INTEGER NOT NULL,
    max_attempts  INTEGER NOT NULL,
    agent         TEXT    NOT NULL,
    lease_id      TEXT    NOT NULL,
    lease_until   BIGINT  NOT NULL,
    progress      TEXT    NOT NULL,
    attempts      TEXT    NOT NULL,
    evidence      TEXT    NOT NULL,
    outcome_entry TEXT    NOT NULL,
    message       TEXT    NOT NULL
);
CREATE INDEX runs_state_created ON runs(state, created_at);
CREATE INDEX runs_created ON runs(created_at);

CREATE TABLE agents (
    name          TEXT    PRIMARY KEY,
    key_id        TEXT    NOT NULL,
    public_key    TEXT    NOT NULL,
    backend       TEXT    NOT NULL,
    labels        TEXT    NOT NULL,
    spec          TEXT    NOT NULL,
    health        TEXT    NOT NULL,
    registered_at BIGINT  NOT NULL,
    last_seen     BIGINT  NOT NULL,
    current_run   TEXT    NOT NULL
);

-- +goose Down
DROP TABLE agents;
DROP INDEX runs_created;
DROP INDEX runs_state_created;
DROP TABLE runs;
