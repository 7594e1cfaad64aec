// Package auth answers who the log says may do what: the runner-key
// registry folded from the runner-key leaves (LoadRunnerKeys,
// RunnerRegistry), which names the runner and agent keys a signed evidence
// record may be checked against, and the resolution of a trust policy by
// name or digest from the policy leaves (ResolvePolicy).
//
// It reads the log through ledger.Queries and imports package ledger only.
// A RunnerRegistry is a value, safe to share once built; the functions are
// safe for concurrent use when the Queries they are given are.
package auth
