-- +goose Up
-- Fewer B-tree inserts per appended evidence record.
-- 1. evidence_artifacts becomes one clustered B-tree (WITHOUT ROWID) keyed
--    the way it is queried (digest prefix -> entry), instead of a rowid
--    table plus its primary-key index plus a digest index: a run of
--    `ledger run` pins about six artifacts, so this was most of the work.
CREATE TABLE evidence_artifacts_v2 (
    digest TEXT    NOT NULL,
    idx    INTEGER NOT NULL REFERENCES leaves(idx),
    name   TEXT    NOT NULL,
    PRIMARY KEY (digest, idx, name)
) STRICT, WITHOUT ROWID;
INSERT INTO evidence_artifacts_v2(digest, idx, name) SELECT digest, idx, name FROM evidence_artifacts;
DROP TABLE evidence_artifacts;
ALTER TABLE evidence_artifacts_v2 RENAME TO evidence_artifacts;
-- 2. The kind/key index serves releases, waivers, approvals and heads;
--    evidence is found through evidence_index, so evidence leaves stay out.
DROP INDEX IF EXISTS leaves_kind_key;
CREATE INDEX leaves_kind_key ON leaves(kind, key, idx) WHERE kind <> 'evidence';

-- +goose Down
DROP INDEX IF EXISTS leaves_kind_key;
CREATE INDEX leaves_kind_key ON leaves(kind, key, idx);
CREATE TABLE evidence_artifacts_v1 (
    idx    INTEGER NOT NULL REFERENCES leaves(idx),
    name   TEXT    NOT NULL,
    digest TEXT    NOT NULL,
    PRIMARY KEY (idx, name)
) STRICT;
INSERT INTO evidence_artifacts_v1(idx, name, digest) SELECT idx, name, digest FROM evidence_artifacts;
DROP TABLE evidence_artifacts;
ALTER TABLE evidence_artifacts_v1 RENAME TO evidence_artifacts;
CREATE INDEX evidence_artifacts_digest ON evidence_artifacts(digest, idx);
