package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/ledger/tlog"
	"github.com/transparency-dev/merkle/proof"
	"github.com/transparency-dev/merkle/rfc6962"
	"golang.org/x/mod/sumdb/note"
)

// Lanes, backends and repositories the fixtures cycle through.
var (
	lanes    = []string{"qmv-bias-sum/v1", "alloc-snapshot/v1"}
	backends = []ledger.Backend{ledger.BackendCPU, ledger.BackendCUDA, ledger.BackendMetal}
	repos    = []string{"github.com/ml-explore/mlx", "github.com/example/other"}
)

// Evidence returns the suite's evidence record number n: lane n%2,
// backend n%3, repository 1 when n%4 == 3 (else 0), status failed when
// n%5 == 0 (200 of 216 cases exact) else passed (216 of 216), commit
// %040x of n+1, one artifact "libmlx.so" with digest sha256:%064x of n,
// device model "test", started n seconds after 2025-11-29T10:00:00Z (far
// enough back that every n the suites use stays before the receiving
// clock, which ledger.Evidence.Validate bounds times by).
// Tamper hooks may rely on these facts: the logs the suite tampers with
// hold Evidence(i) at index i.
func Evidence(n int) ledger.Evidence {
	start := time.Date(2025, 11, 29, 10, 0, 0, 0, time.UTC).Add(time.Duration(n) * time.Second)
	e := ledger.Evidence{
		Lane: lanes[n%2],
		Subject: ledger.Subject{
			Repository: repos[0],
			Commit:     fmt.Sprintf("%040x", n+1),
			Tree:       fmt.Sprintf("%040x", n+1000000),
			Artifacts:  map[string]string{"libmlx.so": fmt.Sprintf("sha256:%064x", n)},
		},
		Backend: backends[n%3], Device: ledger.Device{Model: "test", Cores: 2},
		CasesExact: 216, CasesTotal: 216, Control: ledger.ControlCaught, Status: ledger.StatusPassed,
		StartedAt: start, FinishedAt: start.Add(time.Second),
		Details: json.RawMessage(`{"n":` + fmt.Sprint(n) + `}`),
	}
	if n%4 == 3 {
		e.Subject.Repository = repos[1]
	}
	if n%5 == 0 {
		e.CasesExact, e.Status = 200, ledger.StatusFailed
	}
	return e
}

// Head returns the suite's head verification number n: repository n%2,
// commit %040x of n+1, verdict good unless n%3 == 0 (bad).
func Head(n int) ledger.HeadVerification {
	h := ledger.HeadVerification{
		Repository: repos[n%2], Ref: "refs/heads/main", Object: fmt.Sprintf("%040x", n+1), ObjectType: "commit",
		Commit: fmt.Sprintf("%040x", n+1), Verdict: ledger.VerdictGood, Decision: ledger.DecisionTrusted,
		VerifiedAt: time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC).Add(time.Duration(n) * time.Second),
	}
	if n%3 == 0 {
		h.Verdict, h.Decision = ledger.VerdictBad, ledger.DecisionUntrusted
	}
	return h
}

// Record encodes v (an Evidence, a HeadVerification, or for other kinds
// any JSON object) as a record of kind k.
func Record(t testing.TB, k ledger.Kind, v any) ledger.Record {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return ledger.Record{Kind: k, Body: b}
}

func evRec(t testing.TB, n int) ledger.Record { return Record(t, ledger.KindEvidence, Evidence(n)) }

func headRec(t testing.TB, n int) ledger.Record { return Record(t, ledger.KindHead, Head(n)) }

// releaseRec is a release (re)definition of version with a marker n.
func releaseRec(t testing.TB, k ledger.Kind, version string, n int) ledger.Record {
	return Record(t, k, map[string]any{"version": version, "n": n})
}

func appendOK(t testing.TB, s ledger.LogWriter, recs ...ledger.Record) *ledger.AppendResult {
	t.Helper()
	res, err := s.Append(context.Background(), recs, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Entries) != len(recs) {
		t.Fatalf("append of %d records answered %d entries", len(recs), len(res.Entries))
	}
	return res
}

// wantError fails unless err is a *ledger.Error with code and, when field
// is not "-", that field.
func wantError(t testing.TB, what string, err error, code ledger.Code, field string) {
	t.Helper()
	var le *ledger.Error
	if !errors.As(err, &le) || le.Code != code || (field != "-" && le.Field != field) {
		t.Fatalf("%s: got %#v (%v), want a %s error naming %q", what, err, err, code, field)
	}
}

func hashes(hs []ledger.Hash) [][]byte {
	out := make([][]byte, len(hs))
	for i := range hs {
		out[i] = hs[i][:]
	}
	return out
}

func verifyInclusion(t testing.TB, p ledger.InclusionProof, root ledger.Hash) {
	t.Helper()
	if err := proof.VerifyInclusion(rfc6962.DefaultHasher, p.Index, p.TreeSize, p.LeafHash[:], hashes(p.Hashes), root[:]); err != nil {
		t.Fatalf("inclusion proof of %d in %d does not verify: %v", p.Index, p.TreeSize, err)
	}
}

// verifyCheckpoint opens cp's note with the store's verifier key and
// checks that its text is cp's origin, size and root.
func verifyCheckpoint(t testing.TB, vkey string, cp ledger.Checkpoint) {
	t.Helper()
	v, err := note.NewVerifier(vkey)
	if err != nil {
		t.Fatalf("verifier key %q: %v", vkey, err)
	}
	n, err := note.Open([]byte(cp.Note), note.VerifierList(v))
	if err != nil {
		t.Fatalf("checkpoint of size %d does not verify: %v", cp.Size, err)
	}
	origin, size, root, err := tlog.ParseCheckpointText(n.Text)
	if err != nil || origin != cp.Origin || size != cp.Size || root != cp.Root {
		t.Fatalf("checkpoint text %q does not match origin %q size %d root %s (%v)", n.Text, cp.Origin, cp.Size, cp.Root, err)
	}
	if origin != v.Name() {
		t.Fatalf("checkpoint origin %q is not the key's name %q", origin, v.Name())
	}
}

// leafHashOf recomputes an entry's leaf hash from its fields.
func leafHashOf(t testing.TB, e ledger.Entry) ledger.Hash {
	t.Helper()
	raw, err := ledger.EncodeLeaf(ledger.Leaf{V: 1, Index: e.Index, Kind: e.Kind, ID: e.ID, RecordedAt: e.RecordedAt, Body: e.Body})
	if err != nil {
		t.Fatal(err)
	}
	return ledger.LeafHash(raw)
}

// verifyNote checks that signed is a note of text signed by vkey.
func verifyNote(t testing.TB, vkey, signed, text string) {
	t.Helper()
	v, err := note.NewVerifier(vkey)
	if err != nil {
		t.Fatalf("verifier key %q: %v", vkey, err)
	}
	n, err := note.Open([]byte(signed), note.VerifierList(v))
	if err != nil || n.Text != text {
		t.Fatalf("note does not verify or has other text: %q %v", n.Text, err)
	}
}
