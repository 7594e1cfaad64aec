// Package sqlstore is the SQL both store drivers share (ledger/sqlite and
// ledger/postgres): the projection queries (evidence, entries, heads,
// checkpoints), the tokens table (its rows, their writes in a batch,
// authentication's one-query read), the audit's checks of the projection
// tables and the translation of database errors into ledger errors.
//
// Statements are written once with "?" placeholders; a Dialect says what
// differs between the engines: how a placeholder is spelled ($1 in
// PostgreSQL), how a prefix bound compares bytewise, which strings no
// stored text can equal, how an index column scans, and which errors are
// the engine's own (a lost connection, a full disk). Each driver keeps only
// what truly differs: connections and locking, the batch's writes, the
// content-id lookup, migrations and the audit's snapshot.
package sqlstore
