// Package tlog is the ledger's log engine: Log appends over a store Driver
// in the shape of transparency-dev/tessera's appender. One sequencer
// goroutine gathers concurrent appends into a batch (group commit),
// de-duplicates records by content id and answers idempotency keys, checks
// each request's AppendGuard inside the batch, updates the compact-range
// Merkle tree, signs one checkpoint per batch with the note.Signer it was
// given, and has the driver write the batch atomically (Batch).
//
// Around the sequencer: the signed-state journal (SignedState) and the
// start-up checks (Log.CheckStart) that refuse a database older than what
// the log signed; VerifiedStore, which checks every leaf it reads against a
// signed checkpoint and answers readiness queries from its own index of
// verified leaves, and authenticates tokens by checking the tokens row a
// driver reads (ledger.TokenRow) against the token leaves
// (TokenProjection); the background full scan (Log.FullScan);
// key rotation (Log.Rotate); and the audit (RunAudit, AuditAgainst,
// AuditSignedState), a check of a whole log from a driver's AuditSource.
// Drivers (ledger/sqlite, ledger/postgres) implement Driver and Batch;
// ledger/storetest is the conformance suite they pass.
//
// tlog imports package ledger (the vocabulary), ledger/keys and
// ledger/internal packages, never a package above them. Log and
// VerifiedStore are safe for concurrent use; other types are plain values
// unless a comment says otherwise.
package tlog
