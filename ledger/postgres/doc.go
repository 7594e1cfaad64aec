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
// go in pgx pipelines (one round trip each): BEGIN, the lock, the size
// read and the content ids of every queued request (LookupIDs); then, for
// evidence and head leaves, nothing per request: their rows go with the
// idempotency and checkpoint rows and COMMIT as multi-row INSERTs
// (pending.go). Rows a request alone can fail (tokens, text PostgreSQL
// cannot hold) and rows under a savepoint go at once, as do kept rows
// before any read of the batch. The batch's statements are planned with
// their arguments (plan_cache_mode force_custom_plan, for the
// transaction), never from a generic plan cached while the log was small.
// Append answers read their proofs' nodes from a cache of the nodes this
// process committed or read as committed (nodecache.go).
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
