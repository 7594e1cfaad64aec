-- +goose Up
-- Idempotency keys: a replayed key returns the original result.
CREATE TABLE idempotency (
    key          TEXT   PRIMARY KEY,
    request_hash BYTEA  NOT NULL,
    entry_ids    TEXT   NOT NULL,   -- JSON array of entry ids, in request order
    size         BIGINT NOT NULL,   -- checkpoint size of the original answer
    created_at   BIGINT NOT NULL
);
-- Roles a token holds for manual gates (JSON array of strings).
ALTER TABLE tokens ADD COLUMN roles TEXT NOT NULL DEFAULT '[]';

-- +goose Down
ALTER TABLE tokens DROP COLUMN roles;
DROP TABLE idempotency;
