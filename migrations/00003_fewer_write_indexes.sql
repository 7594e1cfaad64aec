-- +goose Up
-- Every index costs a B-tree insert per appended record. These four served
-- filters that are either covered by another index's prefix (kind alone:
-- leaves_kind_key) or that scan the primary key newest-first and stop at the
-- page limit (backend, status, since: evidence_index.idx grows with time).
DROP INDEX IF EXISTS leaves_kind_idx;
DROP INDEX IF EXISTS evidence_backend;
DROP INDEX IF EXISTS evidence_status;
DROP INDEX IF EXISTS evidence_recorded;

-- +goose Down
CREATE INDEX leaves_kind_idx ON leaves(kind, idx);
CREATE INDEX evidence_backend ON evidence_index(backend, idx);
CREATE INDEX evidence_status ON evidence_index(status, idx);
CREATE INDEX evidence_recorded ON evidence_index(recorded_at);
