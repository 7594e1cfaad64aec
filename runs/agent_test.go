package runs_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/runs"
)

// TestRegisterNeverTakesOverAName: a name registered with one key is
// replaced only by a registration with that key; many concurrent
// registrations of one new name with different keys store exactly one,
// the others get CodeConflict, and RemoveAgent frees the name.
func TestRegisterNeverTakesOverAName(t *testing.T) {
	rs, _ := open(t)
	ctx := context.Background()
	agent := func(key, model string) runs.Agent {
		return runs.Agent{Name: "gpu1", KeyID: key, PublicKey: "pk-" + key, Backend: ledger.BackendCPU, Labels: map[string]string{},
			Spec: runs.AgentSpec{Lanes: []string{"l/v1"}, Device: ledger.Device{Model: model}}}
	}
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Go(func() { errs[i] = rs.Register(ctx, agent(string(rune('a'+i)), "m")) })
	}
	wg.Wait()
	won := 0
	for i, err := range errs {
		var le *ledger.Error
		switch {
		case err == nil:
			won++
		case !errors.As(err, &le) || le.Code != ledger.CodeConflict:
			t.Errorf("registration %d: %v, want nil or a conflict", i, err)
		}
	}
	if won != 1 {
		t.Fatalf("%d concurrent registrations with different keys were stored, want 1", won)
	}
	got, err := rs.GetAgent(ctx, "gpu1")
	if err != nil {
		t.Fatal(err)
	}
	if err := rs.Register(ctx, agent(got.KeyID, "m2")); err != nil {
		t.Fatalf("the same key again: %v", err)
	}
	if again, _ := rs.GetAgent(ctx, "gpu1"); again.Spec.Device.Model != "m2" {
		t.Fatalf("the same key's registration was not replaced: %+v", again)
	}
	if err := rs.Register(ctx, agent("other", "m3")); err == nil || !strings.Contains(err.Error(), "ledger agent remove gpu1") {
		t.Fatalf("another key: %v, want a conflict naming ledger agent remove", err)
	}
	if ok, err := rs.RemoveAgent(ctx, "gpu1"); !ok || err != nil {
		t.Fatalf("remove: %v %v", ok, err)
	}
	if err := rs.Register(ctx, agent("other", "m3")); err != nil {
		t.Fatalf("another key after remove: %v", err)
	}
}

// TestVisibleAndCleanHealth: Visible writes every control and
// bidirectional formatting character as an escape and leaves other text
// alone; CleanHealth drops them and cuts at a rune boundary.
func TestVisibleAndCleanHealth(t *testing.T) {
	for in, want := range map[string]string{
		"H200":           "H200",
		"a\x1b[2Jb":      `a\x1b[2Jb`,
		"nul\x00bel\a":   `nul\x00bel\a`,
		"c1\u0085":       `c1\u0085`,
		"bad\xff":        "bad\uFFFD",
		"ünïcode – fine": "ünïcode – fine",
		"gnp\u202e.exe":  `gnp\u202e.exe`,
		"iso\u2066x":     `iso\u2066x`,
	} {
		if got := runs.Visible(in); got != want {
			t.Errorf("Visible(%q) = %q, want %q", in, got, want)
		}
	}
	h := runs.CleanHealth("line1\nline2\x1b\u202e" + strings.Repeat("é", runs.MaxHealth))
	if len(h) > runs.MaxHealth || !utf8.ValidString(h) || strings.ContainsAny(h, "\n\x1b\u202e") || !strings.HasPrefix(h, "line1 line2  ") {
		t.Fatalf("CleanHealth: %q", h[:20])
	}
}
