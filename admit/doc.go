// Package admit is the ledger's one admission path: given who asks (a
// Principal: anonymous, a token, an agent key with its token, or the
// local administrator of the database; runner keys sign the envelopes a
// principal posts) and the decoded input (records, their
// original bytes, their DSSE envelopes), it returns the records to append,
// stamped with recorded_by (the token, plus the runner key for a verified
// envelope), or a *Refusal naming the field and the TRUST.md rule
// (Rules) that refused it.
//
// The HTTP server (web), the dashboard's forms and the CLI's local
// commands (`ledger record --db`, `ledger run`) all call it; they only
// translate requests or flags into its input and its result into answers.
// It calls the decoders (ingest), the verifiers (verify), the gate rules
// (gates) and the run store (runs), and never the HTTP layer.
//
// Functions are safe for concurrent use when the stores handed in are.
package admit
