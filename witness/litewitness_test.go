package witness_test

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/mod/sumdb/note"

	"github.com/evidence-ledger/ledger/witness"
	"github.com/evidence-ledger/ledger/witness/witnesstest"
)

// These tests run filippo.io/torchwood's litewitness (v0.6.1), an
// independent c2sp.org/tlog-witness implementation, as its own process on
// 127.0.0.1 with its own ssh-agent and SQLite state.

func newLog(t *testing.T) *witnesstest.MemLog {
	t.Helper()
	l, err := witnesstest.NewMemLog("ledger.test.witness")
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func appendN(t *testing.T, l *witnesstest.MemLog, tag string, n int) {
	t.Helper()
	if _, err := l.AppendN(tag, n); err != nil {
		t.Fatal(err)
	}
}

func policyFor(t *testing.T, quorum string, ws ...*witnesstest.Litewitness) *witness.Policy {
	t.Helper()
	var b strings.Builder
	for _, w := range ws {
		b.WriteString(w.PolicyLine())
	}
	b.WriteString(quorum + "\n")
	p, err := witness.ParsePolicy([]byte(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func newWitnesser(t *testing.T, l *witnesstest.MemLog, p *witness.Policy, statePath string) *witness.Witnesser {
	t.Helper()
	w, err := witness.New(witness.Config{Log: l, LogKey: l.VerifierKey(), Policy: p, StatePath: statePath,
		Logger: slog.New(slog.NewTextHandler(t.Output(), nil))})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func round(t *testing.T, w *witness.Witnesser) witness.Round {
	t.Helper()
	r, err := w.Witness(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestLitewitnessCosignsConsistentExtensions(t *testing.T) {
	l := newLog(t)
	lw := witnesstest.NewLitewitness(t, "witness.test/a", l.Origin(), l.VerifierKey())
	if got := lw.LoggedVKey(); got != lw.VKey {
		t.Fatalf("litewitness logged vkey %q, ours %q", got, lw.VKey)
	}
	// The policy names the witness "A", not by its key name.
	p := mustPolicy(t, strings.Replace(lw.PolicyLine(), "witness witness.test/a ", "witness A ", 1)+"quorum A\n")
	w := newWitnesser(t, l, p, filepath.Join(t.TempDir(), "state.json"))

	for _, n := range []int{1, 4, 27, 1, 100} {
		appendN(t, l, "leaf", n)
		r := round(t, w)
		if len(r.Errors) != 0 || !r.Cosigned.QuorumMet || r.Cosigned.Size != l.Size() {
			t.Fatalf("size %d: %+v", l.Size(), r)
		}
		// The combined note verifies as an offline verifier would check it.
		logV, _ := note.NewVerifier(l.VerifierKey())
		res, err := p.Check([]byte(r.Cosigned.Note), logV)
		if err != nil || len(res.Cosigners) != 1 {
			t.Fatalf("size %d: combined note: %+v, %v", l.Size(), res, err)
		}
	}
	st := w.Status()
	if !st.Witnessed || !st.UnwitnessedSince.IsZero() || st.Witnesses[0].Size != l.Size() || st.LastWitnessed.Size != l.Size() {
		t.Fatalf("status %+v", st)
	}

	// A second Witnesser without state starts from old size 0: the witness
	// answers 409 with its size, and the retry with a fresh proof succeeds.
	appendN(t, l, "more", 3)
	w2 := newWitnesser(t, l, p, "")
	if r := round(t, w2); len(r.Errors) != 0 || !r.Cosigned.QuorumMet {
		t.Fatalf("fresh witnesser after 409: %+v", r)
	}
}

func mustPolicy(t *testing.T, s string) *witness.Policy {
	t.Helper()
	p, err := witness.ParsePolicy([]byte(s))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestLitewitnessRefusesForkAndRollback signs, with the same log key, a
// second history that parts from the cosigned one: litewitness must refuse
// it at the cosigned size, beyond it and below it, also after kill -9.
func TestLitewitnessRefusesForkAndRollback(t *testing.T) {
	l := newLog(t)
	lw := witnesstest.NewLitewitness(t, "witness.test/f", l.Origin(), l.VerifierKey())
	p := policyFor(t, "quorum witness.test/f", lw)
	state := filepath.Join(t.TempDir(), "state.json")
	appendN(t, l, "main", 8)
	if r := round(t, newWitnesser(t, l, p, state)); !r.Cosigned.QuorumMet {
		t.Fatalf("main history not cosigned: %+v", r)
	}

	forkAt := func(size uint64, tag string, n int) *witnesstest.MemLog {
		f, err := l.Fork(size)
		if err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			appendN(t, f, tag, n)
		}
		return f
	}
	check := func(name string, f *witnesstest.MemLog, statePath string) {
		t.Helper()
		w := newWitnesser(t, f, p, statePath)
		r := round(t, w)
		err := r.Errors["witness.test/f"]
		if r.Cosigned.QuorumMet || !errors.Is(err, witness.ErrInconsistent) {
			t.Fatalf("%s: witness cosigned or did not refuse as inconsistent: %+v, %v", name, r.Cosigned, err)
		}
		if st := w.Status(); !st.Witnesses[0].Refused || st.Witnessed || st.UnwitnessedSince.IsZero() {
			t.Fatalf("%s: status %+v", name, st)
		}
	}
	cases := []struct {
		name string
		log  func() *witnesstest.MemLog
	}{
		{"same size, other root", func() *witnesstest.MemLog { return forkAt(5, "fork", 3) }},
		{"fork beyond the cosigned size", func() *witnesstest.MemLog { return forkAt(5, "fork", 10) }},
		{"rollback", func() *witnesstest.MemLog { return forkAt(5, "", 0) }},
	}
	for _, c := range cases {
		// With the log's own state (it believes the witness is at 8) and
		// with none (it learns 8 from the witness's 409).
		check(c.name+", with state", c.log(), copyState(t, state))
		check(c.name+", fresh", c.log(), "")
	}

	// The witness itself refuses, whatever this log's client believes:
	// sent directly, a rollback and a same-size fork are refused.
	c := &witness.Client{Name: lw.Name, URL: lw.URL, Verifier: p.Witnesses[0].Verifier}
	rollback, _ := forkAt(5, "", 0).Checkpoint(context.Background())
	var ce *witness.ConflictError
	if _, err := c.AddCheckpoint(context.Background(), 5, nil, []byte(rollback.Note)); !errors.As(err, &ce) || ce.Known != 8 {
		t.Fatalf("rollback from old size 5: %v, want 409 naming size 8", err)
	}
	if _, err := c.AddCheckpoint(context.Background(), 8, nil, []byte(rollback.Note)); !errors.Is(err, witness.ErrBadRequest) {
		t.Fatalf("rollback from old size 8: %v, want 400", err)
	}
	same, _ := forkAt(5, "fork", 3).Checkpoint(context.Background())
	if _, err := c.AddCheckpoint(context.Background(), 8, nil, []byte(same.Note)); err == nil {
		t.Fatal("same-size fork sent directly was cosigned")
	}

	// kill -9: the witness keeps its state and still refuses.
	lw.Kill()
	lw.Start()
	for _, c := range cases {
		check(c.name+", after kill -9", c.log(), "")
	}
	// ... and still cosigns the consistent extension.
	appendN(t, l, "main", 2)
	if r := round(t, newWitnesser(t, l, p, state)); !r.Cosigned.QuorumMet {
		t.Fatalf("extension after kill -9 not cosigned: %+v", r.Errors)
	}
}

func copyState(t *testing.T, path string) string {
	t.Helper()
	b, err := readFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "state.json")
	if err := writeFile(dst, b); err != nil {
		t.Fatal(err)
	}
	return dst
}

// TestLitewitnessQuorumTwoOfThree: 2 of 3 holds with one witness down and
// fails with two down; appends never wait for witnesses.
func TestLitewitnessQuorumTwoOfThree(t *testing.T) {
	l := newLog(t)
	var lws []*witnesstest.Litewitness
	for _, n := range []string{"witness.test/q1", "witness.test/q2", "witness.test/q3"} {
		lws = append(lws, witnesstest.NewLitewitness(t, n, l.Origin(), l.VerifierKey()))
	}
	p := policyFor(t, "group two 2 witness.test/q1 witness.test/q2 witness.test/q3\nquorum two", lws...)
	state := filepath.Join(t.TempDir(), "state.json")
	w := newWitnesser(t, l, p, state)

	appendN(t, l, "a", 3)
	if r := round(t, w); !r.Cosigned.QuorumMet || len(r.Cosigned.Cosigners) != 3 {
		t.Fatalf("all up: %+v", r)
	}
	lws[0].Kill()
	appendN(t, l, "b", 3)
	r := round(t, w)
	if !r.Cosigned.QuorumMet || len(r.Cosigned.Cosigners) != 2 || !errors.Is(r.Errors["witness.test/q1"], witness.ErrUnavailable) {
		t.Fatalf("one down: %+v", r)
	}
	lws[1].Kill()
	appendN(t, l, "c", 3)
	r = round(t, w)
	if r.Cosigned.QuorumMet || len(r.Cosigned.Cosigners) != 1 {
		t.Fatalf("two down: quorum met: %+v", r)
	}
	st := w.Status()
	if st.Witnessed || st.UnwitnessedSince.IsZero() || st.LastWitnessed.Size != 6 || st.Latest.Size != 9 {
		t.Fatalf("two down: status %+v", st)
	}
	since := st.UnwitnessedSince

	// A restart of the Witnesser keeps all of it.
	w = newWitnesser(t, l, p, state)
	if st2 := w.Status(); st2.Witnessed || !st2.UnwitnessedSince.Equal(since) || st2.LastWitnessed.Size != 6 {
		t.Fatalf("after restart: status %+v", st2)
	}
	latest, _ := l.Checkpoint(context.Background())
	if _, cosigners := w.CosignedCheckpoint(latest); strings.Join(cosigners, ",") != "witness.test/q3" {
		t.Fatalf("cosigners of the latest checkpoint: %v", cosigners)
	}
	logV, _ := note.NewVerifier(l.VerifierKey())
	if res, err := p.Check([]byte(st.LastWitnessed.Note), logV); err != nil || len(res.Cosigners) != 2 {
		t.Fatalf("last witnessed note: %+v, %v", res, err)
	}
	// Size 6 keeps the quorum's two cosignatures, though q3 has moved on.
	cp6, _ := l.CheckpointAt(context.Background(), 6)
	if n, cosigners := w.CosignedCheckpoint(cp6); strings.Join(cosigners, ",") != "witness.test/q2,witness.test/q3" {
		t.Fatalf("cosigners of size 6: %v", cosigners)
	} else if res, err := p.Check([]byte(n), logV); err != nil || !res.QuorumMet {
		t.Fatalf("size 6 note: %+v, %v", res, err)
	}

	// Witnesses back (litewitness kept its state): quorum again.
	lws[0].Start()
	lws[1].Start()
	appendN(t, l, "d", 1)
	r = round(t, w)
	if !r.Cosigned.QuorumMet || len(r.Cosigned.Cosigners) != 3 {
		t.Fatalf("all back: %+v", r)
	}
	if st := w.Status(); !st.Witnessed || !st.UnwitnessedSince.IsZero() {
		t.Fatalf("all back: status %+v", st)
	}
}
