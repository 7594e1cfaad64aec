-- +goose Up
-- Tokens become a projection of the token and token-revocation leaves:
-- their evidence scope (JSON arrays; empty: any), expiry, and the index
-- of the leaf that created (and revoked) each. A token made before this
-- schema has no leaf: it is marked leaf_idx -1 here, and the next
-- writable store that opens the database with its signing key logs it
-- (ledger/sqlite tokens.go); until then `ledger audit` reports it.
ALTER TABLE tokens ADD COLUMN repositories TEXT NOT NULL DEFAULT '[]';
ALTER TABLE tokens ADD COLUMN lanes TEXT NOT NULL DEFAULT '[]';
ALTER TABLE tokens ADD COLUMN backends TEXT NOT NULL DEFAULT '[]';
ALTER TABLE tokens ADD COLUMN expires_at INTEGER;
ALTER TABLE tokens ADD COLUMN leaf_idx INTEGER;
ALTER TABLE tokens ADD COLUMN revoked_idx INTEGER;
UPDATE tokens SET leaf_idx = -1;

-- +goose Down
ALTER TABLE tokens DROP COLUMN revoked_idx;
ALTER TABLE tokens DROP COLUMN leaf_idx;
ALTER TABLE tokens DROP COLUMN expires_at;
ALTER TABLE tokens DROP COLUMN backends;
ALTER TABLE tokens DROP COLUMN lanes;
ALTER TABLE tokens DROP COLUMN repositories;
