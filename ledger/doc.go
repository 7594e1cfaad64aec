// Package ledger is the vocabulary of the evidence ledger: the domain
// types (Evidence, Subject, HeadVerification, RunnerKey, Signer, Token,
// PolicyRecord, log Entry, Leaf, Checkpoint), their validation, the
// preparation of a record into its canonical leaf body (PrepareRecord,
// PrepareEvidence), the RFC 6962 leaf hashing of log entries, the
// application error type with its codes, and the narrow interfaces callers
// and drivers use (LogWriter, LogReader, Queries, Keys, TokenStore,
// Auditor, and Store, their composition; TokenRowAuthenticator and
// TokenRowBatch for the tokens rows a driver keeps).
//
// The log engine that appends and verifies is package ledger/tlog;
// authorization over the log's leaves (the runner-key registry, policy
// resolution) is package ledger/auth. This package imports no other
// package of the module but its own internal helpers: the standard
// library, transparency-dev/merkle, golang.org/x/mod/sumdb/note and
// go-json-experiment/json. Types are plain values and functions are safe
// for concurrent use unless a comment says otherwise.
package ledger
