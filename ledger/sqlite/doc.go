// Package sqlite is the SQLite driver of the log engine (tlog.Log) and,
// with it, a ledger.Store, through modernc.org/sqlite (pure Go, no cgo).
//
// The engine owns what every store shares: the sequencer and group
// commit, the Merkle tree, checkpoint signing, de-duplication policy,
// proofs and the audit. This package implements tlog.Driver and
// tlog.Batch (driver.go, batch.go): one batch is one write transaction;
// reads by range serve proofs and the audit (tlog.AuditSource,
// audit.go). The projection queries, the tokens table and the audit's
// checks of the projections are ledger/sqlstore's, shared with the
// PostgreSQL driver under SQLite's dialect (query.go); what is SQLite's
// own here is the connections, the batch's writes, the content-id tables
// and the audit's snapshot.
//
// Layout: one writer connection (transactions BEGIN IMMEDIATE) used by the
// engine's single sequencer goroutine, a pool of read-only connections,
// and a checkpointer connection. The database runs in WAL mode with
// synchronous=FULL, so a transaction that COMMIT returned for has been
// fsynced to the WAL and survives a crash or kill -9 of the process
// (https://www.sqlite.org/pragma.html#pragma_synchronous, "FULL ... ensures
// that an operating system crash or power failure will not corrupt the
// database" and in WAL mode every commit is synced). An append is
// acknowledged only after its COMMIT returns.
//
// Concurrent appends share one transaction and one fsync (the engine's
// group commit); each batch gets one signed checkpoint. A request's
// savepoint (Batch.BeginRequest) is a SQL SAVEPOINT. Readers never block on
// the writer (WAL), and writers never see "database is locked": there is
// exactly one writer connection per process and busy_timeout is set in the
// DSN; a second process appending to the same file is seen by the size
// check at the start of every batch. The checkpointer copies committed WAL
// frames into the database file (PASSIVE checkpoints) off the writer's
// path.
//
// Tables (migrations/): leaves holds one row per leaf (the canonical leaf
// bytes, their RFC 6962 hash, and, for evidence, the projection the
// filters query: backend, status, repository, commit, with the lane as the
// key column), tree_nodes the perfect-subtree hashes keyed by sqlstore.NodeOrd,
// checkpoints the signed checkpoints, evidence_artifacts and heads_index
// the projections with several rows per leaf or another shape. New
// databases use 16 KiB pages (pageSize).
//
// Content ids are kept in two derived tables instead of a UNIQUE index on
// the leaves (ids.go): recent_ids, appended in leaf order, and entry_ids,
// keyed by id and fed from recent_ids in sorted runs. The driver's
// Batch.Find answers the engine's de-duplication from them; `ledger
// audit` checks both tables against the leaves.
//
// Callers look their ids up on their own goroutines (Driver.LookupIDs):
// first in an in-memory Bloom filter of every id in the log (idfilter.go;
// a new record's id is almost never in it, so nothing is read), then in
// entry_ids for the ids it may hold. Writes go out as multi-row INSERTs
// of prepared chunk statements (rowBuf); recently committed tree nodes
// are cached for the proofs answered right after an append (nodecache.go),
// and the read pool caches prepared statements (stmtcache.go).
package sqlite
