// Package postgres is the PostgreSQL driver of the log engine (tlog.Log)
// and, with it, a ledger.Store, through github.com/jackc/pgx/v5 (its
// database/sql adapter, pgx/v5/stdlib).
//
// The engine owns what every store shares (sequencer, group commit, the
// Merkle tree, checkpoint signing, de-duplication policy, proofs and the
// audit); this package implements tlog.Driver and tlog.Batch: one
// batch is one READ COMMITTED transaction that first takes a
// transaction-scoped advisory lock (pg_advisory_xact_lock(SequencerLock)).
// The lock serialises the batches of every ledger process on the
// database, so several `ledger serve` may share one PostgreSQL: each batch
// reads the stored size after taking the lock (the engine reloads its
// tree when another server appended), so no two servers write the same
// index, fork the tree or sign two checkpoints of one size; a server
// killed mid-batch leaves nothing (its transaction aborts and the lock is
// released with its connection). An append is acknowledged after COMMIT
// returns, which with synchronous_commit on (PostgreSQL's default) means
// the commit record is flushed to the server's WAL. A batch's statements
// go in pgx pipelines (one round trip each): BEGIN, the lock and the size
// read; each request's rows of every table; the idempotency and checkpoint
// rows with COMMIT. Only each request's content-id lookup stands alone.
// The projection queries, the tokens table and the audit's checks of the
// projections are ledger/sqlstore's, shared with the SQLite driver under
// PostgreSQL's dialect (query.go).
//
// Tables (migrations/postgres, version for version the SQLite schema):
// leaves (canonical bytes, leaf hash and the evidence projection columns),
// tree_nodes, checkpoints, evidence_artifacts, heads_index, tokens and
// idempotency. Content ids are a UNIQUE index on leaves.id, which also
// refuses a duplicate appended by any server. Times are Unix nanoseconds
// (BIGINT), as in SQLite, so rows move unchanged between the stores.
package postgres
