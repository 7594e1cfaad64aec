-- +goose Up
-- evidence_artifacts keyed the way it is queried (digest prefix -> entry),
-- one B-tree instead of a primary key plus a digest index; the kind/key
-- index leaves evidence out (evidence is found through its own indexes).
ALTER TABLE evidence_artifacts DROP CONSTRAINT evidence_artifacts_pkey;
ALTER TABLE evidence_artifacts ADD PRIMARY KEY (digest, idx, name);
DROP INDEX IF EXISTS evidence_artifacts_digest;
DROP INDEX IF EXISTS leaves_kind_key;
CREATE INDEX leaves_kind_key ON leaves(kind, key, idx) WHERE kind <> 'evidence';

-- +goose Down
DROP INDEX IF EXISTS leaves_kind_key;
CREATE INDEX leaves_kind_key ON leaves(kind, key, idx);
ALTER TABLE evidence_artifacts DROP CONSTRAINT evidence_artifacts_pkey;
ALTER TABLE evidence_artifacts ADD PRIMARY KEY (idx, name);
CREATE INDEX evidence_artifacts_digest ON evidence_artifacts(digest, idx);
