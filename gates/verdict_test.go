package gates

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func TestVerdictSignVerifyReplay(t *testing.T) {
	ctx := context.Background()
	s := openStore(t)
	rel := testRelease(t)
	apply(t, s, rel)
	record(t, s, passing("qmv-bias-sum/v1"))
	rd := evaluate(t, s, rel)
	sv, err := Sign(rd, s)
	if err != nil {
		t.Fatal(err)
	}
	got, err := VerifyVerdict([]byte(sv.Note), s.VerifierKey())
	if err != nil {
		t.Fatal(err)
	}
	if got.Gates[0].State != StatePassed || got.Checkpoint != rd.Checkpoint {
		t.Fatalf("verified verdict %+v", got)
	}
	wrapped, _ := json.Marshal(sv)
	if _, err := VerifyVerdict(wrapped, s.VerifierKey()); err != nil {
		t.Fatalf("JSON-wrapped verdict: %v", err)
	}

	// Every single-byte change of the note must fail.
	note := []byte(sv.Note)
	for i := range note {
		for _, x := range []byte{0x01, 0x20} {
			c := append([]byte(nil), note...)
			c[i] ^= x
			if _, err := VerifyVerdict(c, s.VerifierKey()); err == nil {
				t.Fatalf("flipping byte %d (%q) with %#x still verifies", i, note[i], x)
			}
		}
	}
	for name, c := range map[string]string{
		"truncated":       sv.Note[:len(sv.Note)/2],
		"extra signature": sv.Note + "— other+abcd1234 AAAA\n",
		"empty":           "",
	} {
		if _, err := VerifyVerdict([]byte(c), s.VerifierKey()); err == nil {
			t.Errorf("%s: verifies", name)
		}
	}
	// A JSON wrapper whose readiness was edited fails.
	var w SignedVerdict
	json.Unmarshal(wrapped, &w)
	w.Readiness.Ready = !w.Readiness.Ready
	edited, _ := json.Marshal(w)
	if _, err := VerifyVerdict(edited, s.VerifierKey()); !errors.Is(err, ErrVerdictSignature) {
		t.Fatalf("edited wrapper: %v", err)
	}
	// Another key fails.
	other := openStore(t)
	if _, err := VerifyVerdict([]byte(sv.Note), other.VerifierKey()); !errors.Is(err, ErrVerdictSignature) {
		t.Fatalf("other key: %v", err)
	}

	// Replay after more evidence: the as-of evaluation still matches.
	ev := passing("qmv-bias-sum/v1")
	ev.CasesExact, ev.Status = 156, "failed"
	record(t, s, ev)
	if now := evaluate(t, s, rel); now.Gates[0].State != StateFailed {
		t.Fatalf("latest state %s", now.Gates[0].State)
	}
	loaded, _, err := LoadRelease(ctx, s, rel.Version)
	if err != nil {
		t.Fatal(err)
	}
	_ = loaded
	again, diffs, err := Replay(ctx, s, got)
	if err != nil || len(diffs) != 0 || again.Gates[0].State != StatePassed {
		t.Fatalf("replay: %v %v", diffs, err)
	}
	// A verdict claiming another state does not replay.
	got.Gates[0].State = StateOpen
	if _, diffs, err := Replay(ctx, s, got); err != nil || len(diffs) == 0 || !strings.Contains(diffs[0], "gate qmv") {
		t.Fatalf("tampered replay: %v %v", diffs, err)
	}
}
