package witness_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/evidence-ledger/ledger/witness"
	"github.com/evidence-ledger/ledger/witness/witnesstest"
)

// TestWitnesserState: the state file survives a restart, belongs to one
// log, and a witness whose key changes in the policy starts afresh.
func TestWitnesserState(t *testing.T) {
	l := newLog(t)
	appendN(t, l, "x", 4)
	a, b := newTestWitness(t, "a.example"), newTestWitness(t, "b.example")
	// Both witnesses are down (nothing listens on port 1).
	pol := mustPolicy(t, "witness A "+a.vkey+" http://127.0.0.1:1\nwitness B "+b.vkey+" http://127.0.0.1:1\ngroup G any A B\nquorum G\n")
	path := filepath.Join(t.TempDir(), "state.json")
	w := newWitnesser(t, l, pol, path)
	r := round(t, w)
	if r.Cosigned.QuorumMet || !errors.Is(r.Errors["A"], witness.ErrUnavailable) || !errors.Is(r.Errors["B"], witness.ErrUnavailable) {
		t.Fatalf("round with witnesses down: %+v", r)
	}
	st := w.Status()
	if st.Witnessed || st.UnwitnessedSince.IsZero() || st.Latest.Size != 4 || st.Witnesses[0].LastError == "" {
		t.Fatalf("status: %+v", st)
	}
	// A restart keeps it.
	w2 := newWitnesser(t, l, pol, path)
	if st2 := w2.Status(); !st2.UnwitnessedSince.Equal(st.UnwitnessedSince) || st2.Latest.Size != 4 || st2.Witnesses[1].LastError != st.Witnesses[1].LastError {
		t.Fatalf("after restart: %+v", st2)
	}
	// The state file of another log is refused, a corrupt one too, and
	// neither error quotes the file.
	other, _ := witnesstest.NewMemLog("ledger.test.other")
	if _, err := witness.New(witness.Config{Log: other, LogKey: other.VerifierKey(), Policy: pol, StatePath: path}); err == nil || !strings.Contains(err.Error(), "another log") {
		t.Fatalf("state of another log: %v", err)
	}
	bad := filepath.Join(t.TempDir(), "bad.json")
	os.WriteFile(bad, []byte(`{"v":1,"origin":"secret-looking text`), 0o600)
	if _, err := witness.New(witness.Config{Log: l, LogKey: l.VerifierKey(), Policy: pol, StatePath: bad}); err == nil || strings.Contains(err.Error(), "secret-looking") {
		t.Fatalf("corrupt state: %v", err)
	}
	// A witness with a new key in the policy starts from size 0; one no
	// longer in the policy is dropped.
	c := newTestWitness(t, "a.example")
	pol2 := mustPolicy(t, "witness A "+c.vkey+" http://127.0.0.1:1\nquorum A\n")
	w3 := newWitnesser(t, l, pol2, path)
	if st3 := w3.Status(); len(st3.Witnesses) != 1 || st3.Witnesses[0].LastError != "" || !st3.Witnesses[0].LastAttempt.IsZero() {
		t.Fatalf("key change: %+v", st3)
	}
	// Missing fields are refused.
	for _, cfg := range []witness.Config{{Policy: pol}, {Log: l, Policy: pol, LogKey: "nope"}, {Log: l, LogKey: l.VerifierKey()}} {
		if _, err := witness.New(cfg); err == nil {
			t.Errorf("config %+v accepted", cfg)
		}
	}
	if _, err := witness.New(witness.Config{Log: l, LogKey: l.VerifierKey(), Policy: mustPolicy(t, "witness A "+a.vkey+"\nquorum A\n")}); err == nil {
		t.Error("a witness without URL accepted")
	}
	// A checkpoint the log key does not verify is never sent.
	w4, _ := witness.New(witness.Config{Log: l, LogKey: other.VerifierKey(), Policy: pol})
	if _, err := w4.Witness(context.Background()); err == nil {
		t.Error("a checkpoint of another key was sent to witnesses")
	}
}
