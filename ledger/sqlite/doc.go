// Package sqlite implements ledger.Store on SQLite through modernc.org/sqlite
// (pure Go, no cgo).
//
// Layout: one writer connection (transactions BEGIN IMMEDIATE) fed by a
// single group-commit goroutine, a pool of read-only connections, and a
// checkpointer connection. The database runs in WAL mode with
// synchronous=FULL, so a transaction that COMMIT returned for has been
// fsynced to the WAL and survives a crash or kill -9 of the process
// (https://www.sqlite.org/pragma.html#pragma_synchronous, "FULL ... ensures
// that an operating system crash or power failure will not corrupt the
// database" and in WAL mode every commit is synced). An append is
// acknowledged only after its COMMIT returns.
//
// Concurrent appends are batched: the writer goroutine drains all waiting
// requests into one IMMEDIATE transaction and commits them with one fsync;
// each batch gets one signed checkpoint. The first attempt runs without
// savepoints; if a write fails, the transaction is rolled back and the batch
// runs again with one SAVEPOINT per request, so one request's failure does
// not touch the others (see commitBatch). Readers never block on the writer
// (WAL), and writers never see "database is locked": there is exactly one
// writer connection per process and busy_timeout is set in the DSN. The
// checkpointer copies committed WAL frames into the database file (PASSIVE
// checkpoints) off the writer's path.
//
// Tables (migrations/): leaves holds one row per leaf (the canonical leaf
// bytes, their RFC 6962 hash, and, for evidence, the projection the
// filters query: backend, status, repository, commit, with the lane as the
// key column; migration 6), tree_nodes the perfect-subtree hashes,
// checkpoints the signed checkpoints, evidence_artifacts and heads_index
// the projections with several rows per leaf or another shape. New
// databases use 16 KiB pages (pageSize).
//
// Content ids are kept in two derived tables instead of a UNIQUE index on
// the leaves (ids.go): recent_ids, appended in leaf order, and entry_ids,
// keyed by id and fed from recent_ids in sorted runs. The writer enforces
// one leaf per id; `ledger audit` checks both tables against the leaves.
//
// Callers prepare (validate, canonicalize) their records and look their
// ids up on their own goroutines: first in an in-memory Bloom filter of
// every id in the log (idfilter.go; a new record's id is almost never in
// it, so nothing is read), then in entry_ids for the ids it may hold. The
// writer goroutine does only what must be serial: assigning indexes, the
// Merkle tree, the SQL inserts and the commit.
package sqlite
