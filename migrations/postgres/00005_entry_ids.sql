-- +goose Up
-- SQLite's migration 5 moves content ids out of a UNIQUE index on leaves
-- into entry_ids/recent_ids, a SQLite write-path trick. PostgreSQL keeps
-- the UNIQUE index (leaves_id_key), which is what refuses a second leaf
-- with an id: a duplicate cannot be appended, by any server.
COMMENT ON COLUMN leaves.id IS 'content id (ledger.EntryID), unique (leaves_id_key)';

-- +goose Down
COMMENT ON COLUMN leaves.id IS NULL;
