// Package witness makes the ledger a log client of transparency-log
// witnesses, the C2SP way:
//
//   - [Client] speaks c2sp.org/tlog-witness: it sends a checkpoint with the
//     consistency proof from the witness's last size (add-checkpoint) and
//     returns the witness's cosignature;
//   - [NewCosignatureVerifier] verifies c2sp.org/tlog-cosignature
//     cosignature/v1 (Ed25519) signatures, as a note.Verifier;
//   - [ParsePolicy] reads a c2sp.org/tlog-policy file (logs, witnesses with
//     their vkeys and URLs, groups, the quorum) and [Policy.Check] decides
//     whether a cosigned checkpoint meets the quorum;
//   - [Witnesser] cosigns a ledger.LogReader's latest checkpoint with every
//     witness of a policy, keeps the cosignatures it got (in a state file, so
//     a restart keeps them), evaluates the quorum and reports since when the
//     log is unwitnessed. A witness that is down never stops appends: the
//     Witnesser only reads the log.
//
// The specifications are at https://c2sp.org/tlog-witness,
// https://c2sp.org/tlog-cosignature and https://c2sp.org/tlog-policy.
// Checkpoints are signed notes (golang.org/x/mod/sumdb/note) whose text is
// c2sp.org/tlog-checkpoint; proofs are RFC 6962 and are checked with
// golang.org/x/mod/sumdb/tlog.
package witness
