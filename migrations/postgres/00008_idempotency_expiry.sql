-- +goose Up
-- Idempotency keys expire and the table is bounded: the writer deletes by
-- age, oldest first.
CREATE INDEX idempotency_created ON idempotency(created_at);

-- +goose Down
DROP INDEX idempotency_created;
