// Package storetest is the conformance suite of ledger.Store
// implementations: everything package gates, package web and the audit
// rely on, checked through the ledger interfaces alone. A driver's tests
// call Run with a Harness that opens fresh stores and, where the driver
// can, edits them behind their back.
//
// Proofs are checked with transparency-dev/merkle's verifiers and
// checkpoints with golang.org/x/mod/sumdb/note, never with the code under
// test.
package storetest

import (
	"testing"

	"github.com/evidence-ledger/ledger/ledger"
)

// Edit names a change made to a stored log behind the store's back, which
// the audit must detect.
type Edit int

// The edits. Each names a leaf index i (the Tamper argument).
const (
	// EditLeafBody changes a byte of leaf i's body, keeping its stored hash.
	EditLeafBody Edit = iota
	// EditLeafBodyRehash changes leaf i's body and also stores the hash
	// and content id the new bytes have, as a careful attacker would: the
	// tree and the signed checkpoints must catch it.
	EditLeafBodyRehash
	// DeleteLeaf removes leaf i (and its projections).
	DeleteLeaf
	// TruncateFrom removes leaves i and later.
	TruncateFrom
	// SwapLeaves exchanges the stored positions of leaves i and i+8.
	SwapLeaves
	// InsertLeaf stores a copy of leaf 0 at index i, at the end of the log,
	// under no signed checkpoint.
	InsertLeaf
	// EditProjection changes what the queries answer for leaf i (an
	// evidence leaf's status) without touching its bytes.
	EditProjection
	// EditCheckpoint changes the stored root of the checkpoint of tree
	// size i+1.
	EditCheckpoint
	// EditProjectionCommit changes evidence leaf i's commit column to
	// forty zeros without touching its bytes: every query by the leaf's
	// commit stops returning it.
	EditProjectionCommit
)

func (e Edit) String() string {
	return [...]string{"edit-leaf-body", "edit-leaf-body-and-rehash", "delete-leaf", "truncate-from", "swap-leaves", "insert-leaf", "edit-projection", "edit-checkpoint", "edit-projection-commit"}[e]
}

// Harness is what a driver gives Run.
type Harness struct {
	// Open returns a new, empty store whose clock is the real one. It
	// closes the store at the end of the test (t.Cleanup).
	Open func(t *testing.T) ledger.Store
	// Tamper, when not nil, closes s, applies edit at leaf index i to what
	// s stored, and returns a store over the edited log for the audit
	// (closed by Tamper's own t.Cleanup). Nil skips the tamper tests (an
	// HTTP client cannot edit a server's database).
	Tamper func(t *testing.T, s ledger.Store, edit Edit, i uint64) ledger.Store
}

// Run runs the suite as subtests of t.
func Run(t *testing.T, h Harness) {
	t.Run("Append", func(t *testing.T) { testAppend(t, h) })
	t.Run("AppendAtomic", func(t *testing.T) { testAppendAtomic(t, h) })
	t.Run("AppendLimits", func(t *testing.T) { testAppendLimits(t, h) })
	t.Run("Dedupe", func(t *testing.T) { testDedupe(t, h) })
	t.Run("Idempotency", func(t *testing.T) { testIdempotency(t, h) })
	t.Run("ConcurrentAppends", func(t *testing.T) { testConcurrent(t, h) })
	t.Run("Proofs", func(t *testing.T) { testProofs(t, h) })
	t.Run("ProofErrors", func(t *testing.T) { testProofErrors(t, h) })
	t.Run("Checkpoints", func(t *testing.T) { testCheckpoints(t, h) })
	t.Run("Entries", func(t *testing.T) { testEntries(t, h) })
	t.Run("EvidenceFilters", func(t *testing.T) { testEvidenceFilters(t, h) })
	t.Run("EvidenceFilterErrors", func(t *testing.T) { testEvidenceFilterErrors(t, h) })
	t.Run("EntryFilters", func(t *testing.T) { testEntryFilters(t, h) })
	t.Run("HeadFilters", func(t *testing.T) { testHeadFilters(t, h) })
	t.Run("Paging", func(t *testing.T) { testPaging(t, h) })
	t.Run("Tokens", func(t *testing.T) { testTokens(t, h) })
	t.Run("Keys", func(t *testing.T) { testKeys(t, h) })
	t.Run("Audit", func(t *testing.T) { testAudit(t, h) })
	t.Run("AuditDetectsTampering", func(t *testing.T) { testTamper(t, h) })
	t.Run("FullScanDetectsProjectionEdits", func(t *testing.T) { testScanProjection(t, h) })
}
