-- +goose Up
-- The indexes SQLite's migration 3 drops: covered by another index's prefix
-- or served by scanning the primary key newest first.
DROP INDEX IF EXISTS leaves_kind_idx;
DROP INDEX IF EXISTS evidence_backend;
DROP INDEX IF EXISTS evidence_status;
DROP INDEX IF EXISTS evidence_recorded;

-- +goose Down
CREATE INDEX leaves_kind_idx ON leaves(kind, idx);
CREATE INDEX evidence_backend ON evidence_index(backend, idx);
CREATE INDEX evidence_status ON evidence_index(status, idx);
CREATE INDEX evidence_recorded ON evidence_index(recorded_at);
