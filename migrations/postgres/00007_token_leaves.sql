-- +goose Up
-- Tokens become a projection of the token and token-revocation leaves:
-- their evidence scope (JSON arrays; empty: any), expiry, and the index of
-- the leaf that created (and revoked) each. A row made before this schema
-- is marked leaf_idx -1 (the SQLite driver logs such rows; a PostgreSQL
-- ledger starts at the newest schema and has none).
ALTER TABLE tokens ADD COLUMN repositories TEXT NOT NULL DEFAULT '[]';
ALTER TABLE tokens ADD COLUMN lanes TEXT NOT NULL DEFAULT '[]';
ALTER TABLE tokens ADD COLUMN backends TEXT NOT NULL DEFAULT '[]';
ALTER TABLE tokens ADD COLUMN expires_at BIGINT;
ALTER TABLE tokens ADD COLUMN leaf_idx BIGINT;
ALTER TABLE tokens ADD COLUMN revoked_idx BIGINT;
UPDATE tokens SET leaf_idx = -1;

-- +goose Down
ALTER TABLE tokens DROP COLUMN revoked_idx;
ALTER TABLE tokens DROP COLUMN leaf_idx;
ALTER TABLE tokens DROP COLUMN expires_at;
ALTER TABLE tokens DROP COLUMN backends;
ALTER TABLE tokens DROP COLUMN lanes;
ALTER TABLE tokens DROP COLUMN repositories;
