// Package ledger is the vocabulary of the evidence ledger: the domain types
// (Evidence, Subject, HeadVerification, log Entry, Checkpoint), their
// validation and canonical encoding, the RFC 6962 leaf hashing of log entries,
// the application error type, and the Store interface that implementations
// such as ledger/sqlite satisfy.
//
// The package imports only the standard library and transparency-dev/merkle.
// All types are plain values; functions are safe for concurrent use unless a
// comment says otherwise.
package ledger
