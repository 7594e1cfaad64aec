// Package tlogproof writes and verifies c2sp.org/tlog-proof offline proofs
// of the ledger's log: one entry's index, its RFC 6962 inclusion path and
// the checkpoint it is proved against, verbatim with the log's signature
// and the witnesses' cosignatures. The ledger puts the entry's exact leaf
// bytes in the proof's extra line, so a proof file is self-contained:
// Verify needs only the log's note verifier key and, to require cosigning,
// a c2sp.org/tlog-policy.
//
// The format is c2sp.org/tlog-proof@v1 (https://c2sp.org/tlog-proof):
//
//	c2sp.org/tlog-proof@v1
//	extra <base64 leaf bytes>
//	index <decimal>
//	<base64 hash>        (zero or more, leaf's sibling first)
//	<empty line>
//	<signed checkpoint>  (c2sp.org/tlog-checkpoint, with cosignatures)
package tlogproof
