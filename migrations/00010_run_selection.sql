-- +goose Up
-- The case selection a queued run asks of its lanes that select cases
-- (runs.Spec's cases, case_budget and max_samples): a JSON object, '{}'
-- for a run that asks for the lanes' defaults (every run queued before
-- this column existed). Plain types, so the same SQL runs on PostgreSQL.
ALTER TABLE runs ADD COLUMN selection TEXT NOT NULL DEFAULT '{}';

-- +goose Down
ALTER TABLE runs DROP COLUMN selection;
