// Package postgres holds the PostgreSQL migrations of the ledger schema
// (goose, SQL only), one file per SQLite migration of package migrations,
// with the same version and name: a migration added to one set is added
// to the other (TestMigrationSetsInLockstep in ledger/postgres fails
// otherwise). A SQLite migration whose SQL runs unchanged on PostgreSQL is
// not copied: it is listed in migrations.Shared and served from there.
// Columns keep SQLite's types where the bytes matter (times as Unix
// nanoseconds in BIGINT, hashes and leaves as BYTEA), so that `ledger
// copy` moves rows unchanged between the two.
package postgres
