// Package ledger is the vocabulary of the evidence ledger and its log
// engine.
//
// Vocabulary: the domain types (Evidence, Subject, HeadVerification, log
// Entry, Checkpoint), their validation and canonical encoding, the RFC 6962
// leaf hashing of log entries, the application error type, and the narrow
// interfaces callers use (LogWriter, LogReader, Queries, Keys, TokenStore,
// Auditor, and Store, their composition).
//
// Log engine (engine.go, sequencer.go, tree.go, audit.go): Log appends over
// a store Driver in the shape of transparency-dev/tessera's appender. One
// sequencer goroutine gathers concurrent appends into a batch (group
// commit), de-duplicates records by content id and answers idempotency
// keys, updates the compact-range Merkle tree, signs one checkpoint per
// batch with the note.Signer it was given, and has the driver write the
// batch atomically. Proofs and checkpoints are read back through the
// driver by range; RunAudit checks a whole log from a driver's
// AuditSource. Drivers (ledger/sqlite) keep their speed machinery private;
// ledger/storetest is the conformance suite they pass.
//
// The package imports the standard library, transparency-dev/merkle,
// golang.org/x/mod/sumdb/note and go-json-experiment/json. Types are plain
// values and functions are safe for concurrent use unless a comment says
// otherwise.
package ledger
