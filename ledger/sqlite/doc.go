// Package sqlite implements ledger.Store on SQLite through modernc.org/sqlite
// (pure Go, no cgo).
//
// Layout: one writer connection (transactions BEGIN IMMEDIATE) fed by a
// single group-commit goroutine, and a pool of read-only connections. The
// database runs in WAL mode with synchronous=FULL, so a transaction that
// COMMIT returned for has been fsynced to the WAL and survives a crash or
// kill -9 of the process (https://www.sqlite.org/pragma.html#pragma_synchronous,
// "FULL ... ensures that an operating system crash or power failure will not
// corrupt the database" and in WAL mode every commit is synced). An append is
// acknowledged only after its COMMIT returns.
//
// Concurrent appends are batched: the writer goroutine drains all waiting
// requests into one IMMEDIATE transaction (each in its own SAVEPOINT, so one
// request's failure does not touch the others) and commits them with one
// fsync; each batch gets one signed checkpoint. Readers never block on the
// writer (WAL), and writers never see "database is locked" because there is
// exactly one writer connection and busy_timeout is set in the DSN.
package sqlite
