-- +goose Up
-- The evidence projection moves into the leaf rows (NULL unless kind =
-- 'evidence'; the lane is key), with partial indexes per filter.
ALTER TABLE leaves ADD COLUMN backend TEXT;
ALTER TABLE leaves ADD COLUMN status TEXT;
ALTER TABLE leaves ADD COLUMN repository TEXT;
ALTER TABLE leaves ADD COLUMN commit_id TEXT;
UPDATE leaves l SET backend = e.backend, status = e.status, repository = e.repository, commit_id = e.commit_id
    FROM evidence_index e WHERE e.idx = l.idx;
DROP TABLE evidence_index;
CREATE INDEX evidence_lane ON leaves(key, idx) WHERE kind = 'evidence';
CREATE INDEX evidence_commit ON leaves(commit_id, idx) WHERE kind = 'evidence';
CREATE INDEX evidence_lane_commit ON leaves(key, commit_id, idx) WHERE kind = 'evidence';
CREATE INDEX evidence_unpassed ON leaves(status, idx) WHERE kind = 'evidence' AND status <> 'passed';

-- +goose Down
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
INSERT INTO evidence_index(idx, lane, backend, status, control, repository, commit_id, tree_id, dirty, recorded_at)
    SELECT idx, key, backend, status,
        COALESCE(convert_from(leaf, 'UTF8')::jsonb #>> '{body,control}', ''), repository, commit_id,
        COALESCE(convert_from(leaf, 'UTF8')::jsonb #>> '{body,subject,tree}', ''),
        CASE WHEN (convert_from(leaf, 'UTF8')::jsonb #>> '{body,subject,dirty}') = 'true' THEN 1 ELSE 0 END, recorded_at
    FROM leaves WHERE kind = 'evidence';
DROP INDEX evidence_unpassed;
DROP INDEX evidence_lane_commit;
DROP INDEX evidence_commit;
DROP INDEX evidence_lane;
ALTER TABLE leaves DROP COLUMN commit_id;
ALTER TABLE leaves DROP COLUMN repository;
ALTER TABLE leaves DROP COLUMN status;
ALTER TABLE leaves DROP COLUMN backend;
CREATE INDEX evidence_lane ON evidence_index(lane, idx);
CREATE INDEX evidence_commit ON evidence_index(commit_id, idx);
CREATE INDEX evidence_lane_commit ON evidence_index(lane, commit_id, idx);
