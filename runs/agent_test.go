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
		"zw\u200b":       `zw\u200b`,
		"nb\u00a0sp":     `nb\u00a0sp`,
		"ls\u2028x":      `ls\u2028x`,
		"hf\u3164x":      `hf\u3164x`,
		"pu\ue000x":      `pu\ue000x`,
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

// TestSpecDigestCoversTheRegistration: SpecDigestOf changes with each
// declared field an approval binds (key, backend, labels, repository,
// commit, lanes, device), not with health or times; MatchSpecDigest takes
// the whole digest, with or without "sha256:", in either case, and no
// prefix of it.
func TestSpecDigestCoversTheRegistration(t *testing.T) {
	base := runs.Agent{Name: "gpu1", KeyID: "SHA256:k", Backend: ledger.BackendCUDA, Labels: map[string]string{"gpu": "h200"},
		Spec: runs.AgentSpec{Lanes: []string{"l/v1"}, Repository: "github.com/o/r", Commit: strings.Repeat("a", 40), Device: ledger.Device{Model: "H200"}}}
	d := runs.SpecDigestOf(base)
	if !strings.HasPrefix(d, "sha256:") || len(d) != len("sha256:")+64 {
		t.Fatalf("digest %q", d)
	}
	same := base
	same.Health, same.CurrentRun, same.Approved = "degraded", "run_x", true
	if runs.SpecDigestOf(same) != d {
		t.Fatal("health, current run or approval changed the digest")
	}
	for name, mut := range map[string]func(*runs.Agent){
		"key":        func(a *runs.Agent) { a.KeyID = "SHA256:other" },
		"backend":    func(a *runs.Agent) { a.Backend = ledger.BackendCPU },
		"labels":     func(a *runs.Agent) { a.Labels = map[string]string{"gpu": "a100"} },
		"repository": func(a *runs.Agent) { a.Spec.Repository = "github.com/victim/r" },
		"commit":     func(a *runs.Agent) { a.Spec.Commit = strings.Repeat("b", 40) },
		"lanes":      func(a *runs.Agent) { a.Spec.Lanes = []string{"l/v1", "m/v1"} },
		"device":     func(a *runs.Agent) { a.Spec.Device.Model = "A100" },
	} {
		a := base
		a.Labels = map[string]string{"gpu": "h200"}
		mut(&a)
		if runs.SpecDigestOf(a) == d {
			t.Errorf("changing the %s left the digest unchanged", name)
		}
	}
	hexd := strings.TrimPrefix(d, "sha256:")
	for _, ok := range []string{d, hexd, strings.ToUpper(hexd), " " + d} {
		if !runs.MatchSpecDigest(ok, d) {
			t.Errorf("MatchSpecDigest(%q) = false", ok)
		}
	}
	for _, bad := range []string{"", "sha256:", hexd[:16], "sha256:" + hexd[:32], hexd[:63], strings.Repeat("0", 64), hexd + "0"} {
		if runs.MatchSpecDigest(bad, d) {
			t.Errorf("MatchSpecDigest(%q) = true", bad)
		}
	}
}

// TestRegistrationDeclaresABuild: a registration's spec must name the
// repository (normalized) and commit of the build the agent runs.
func TestRegistrationDeclaresABuild(t *testing.T) {
	for _, c := range []struct{ repo, commit, field string }{
		{"", strings.Repeat("a", 40), "spec.repository"},
		{"git@github.com:o/r.git", strings.Repeat("a", 40), "spec.repository"},
		{"github.com/o/r", "", "spec.commit"},
		{"github.com/o/r", strings.Repeat("A", 40), "spec.commit"},
		{"github.com/o/r", strings.Repeat("a", 39), "spec.commit"},
		{"github.com/o/r", strings.Repeat("a", 64), ""},
		{"github.com/o/r", strings.Repeat("a", 40), ""},
		{"gitlab.example.org/group/sub/p.go", strings.Repeat("a", 40), ""},
		// Not repository names: a local path, too few segments, a query,
		// a look-alike or invisible character, dot segments.
		{"/work/main", strings.Repeat("a", 40), "spec.repository"},
		{"a", strings.Repeat("a", 40), "spec.repository"},
		{"github.com/o", strings.Repeat("a", 40), "spec.repository"},
		{"github.com//r", strings.Repeat("a", 40), "spec.repository"},
		{"github.com/o/r?x=1", strings.Repeat("a", 40), "spec.repository"},
		{"github.com/o/r#f", strings.Repeat("a", 40), "spec.repository"},
		{"g\u0456thub.com/o/r", strings.Repeat("a", 40), "spec.repository"},
		{"github.com/o/r\u200b", strings.Repeat("a", 40), "spec.repository"},
		{"github.com/../../etc", strings.Repeat("a", 40), "spec.repository"},
	} {
		r := runs.RegisterRequest{Name: "gpu1", Backend: ledger.BackendCPU, Spec: runs.AgentSpec{Lanes: []string{"l/v1"}, Repository: c.repo, Commit: c.commit}}
		err := r.Validate()
		var le *ledger.Error
		switch {
		case c.field == "" && err != nil:
			t.Errorf("%q@%q: %v, want valid", c.repo, c.commit, err)
		case c.field != "" && (!errors.As(err, &le) || le.Field != c.field):
			t.Errorf("%q@%q: %v, want an error naming %s", c.repo, c.commit, err, c.field)
		}
	}
}

// TestRegistrationRefusesInvisibleText: a registration's text fields that
// an admin reads before approving (device model and driver, host, runner
// version and commit, device attrs) refuse format characters (Cf:
// zero-width, bidirectional, soft hyphen), line and paragraph separators,
// spaces other than U+0020, Hangul fillers, the Braille blank, variation
// selectors and other default-ignorable, private-use and unassigned code
// points, naming the field and the code point; a plain space and other
// non-ASCII letters and symbols are fine.
func TestRegistrationRefusesInvisibleText(t *testing.T) {
	for _, c := range []struct {
		field string
		edit  func(*runs.AgentSpec)
	}{
		{"spec.device.model", func(s *runs.AgentSpec) { s.Device.Model = "NVIDIA H200\u200b" }},
		{"spec.device.model", func(s *runs.AgentSpec) { s.Device.Model = "NVIDIA\u00adH200" }},
		{"spec.device.model", func(s *runs.AgentSpec) { s.Device.Model = "H200\ufeff" }},
		{"spec.device.driver", func(s *runs.AgentSpec) { s.Device.Driver = "550\u3000" }},
		{"spec.host", func(s *runs.AgentSpec) { s.Host = "gpu-host\u00a0prod" }},
		{"spec.host", func(s *runs.AgentSpec) { s.Host = "gpu\u2029host" }},
		{"spec.runner.version", func(s *runs.AgentSpec) { s.Runner.Version = "v1.0\u2028x" }},
		{"spec.runner.commit", func(s *runs.AgentSpec) { s.Runner.Commit = "abc\u2060" }},
		{"spec.device.attrs", func(s *runs.AgentSpec) { s.Device.Attrs = map[string]string{"mem\u200d": "141"} }},
		{"spec.device.attrs.mem", func(s *runs.AgentSpec) { s.Device.Attrs = map[string]string{"mem": "141\u2009GB"} }},
		{"spec.device.model", func(s *runs.AgentSpec) { s.Device.Model = "H200\u115f" }},
		{"spec.device.model", func(s *runs.AgentSpec) { s.Device.Model = "H200\u1160" }},
		{"spec.device.model", func(s *runs.AgentSpec) { s.Device.Model = "H200\u3164" }},
		{"spec.device.model", func(s *runs.AgentSpec) { s.Device.Model = "H200\uffa0" }},
		{"spec.device.model", func(s *runs.AgentSpec) { s.Device.Model = "H200\u2800" }},
		{"spec.device.model", func(s *runs.AgentSpec) { s.Device.Model = "H200\ufe0f" }},
		{"spec.device.model", func(s *runs.AgentSpec) { s.Device.Model = "H200\U000e0100" }},
		{"spec.device.model", func(s *runs.AgentSpec) { s.Device.Model = "H\u034f200" }},
		{"spec.device.model", func(s *runs.AgentSpec) { s.Device.Model = "H200\u17b4" }},
		{"spec.device.model", func(s *runs.AgentSpec) { s.Device.Model = "H200\ue000" }},
		{"spec.device.model", func(s *runs.AgentSpec) { s.Device.Model = "H200\U000f0000" }},
		{"spec.device.model", func(s *runs.AgentSpec) { s.Device.Model = "H200\U000e0001" }},
		{"spec.device.model", func(s *runs.AgentSpec) { s.Device.Model = "H200\U0010fffe" }},
		{"", func(s *runs.AgentSpec) {
			s.Device.Model, s.Host = "NVIDIA H200 (Grâce) – 141 GB ✓ 日本", "gpu-host prod"
		}},
	} {
		r := runs.RegisterRequest{Name: "gpu1", Backend: ledger.BackendCUDA, Spec: runs.AgentSpec{Lanes: []string{"l/v1"}, Repository: "github.com/o/r", Commit: strings.Repeat("a", 40)}}
		c.edit(&r.Spec)
		err := r.Validate()
		var le *ledger.Error
		switch {
		case c.field == "" && err != nil:
			t.Errorf("%+v: %v, want valid", r.Spec, err)
		case c.field != "" && (!errors.As(err, &le) || le.Field != c.field || le.Code != ledger.CodeInvalid || !strings.Contains(le.Message, "invisible")):
			t.Errorf("%s %+v: %v, want an invalid error naming it", c.field, r.Spec, err)
		}
	}
}
