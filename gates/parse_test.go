package gates

import (
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/evidence-ledger/ledger/ledger"
)

func TestParseReleaseErrors(t *testing.T) {
	cases := []struct {
		name, old, new, want, field string
	}{
		{"unknown key", "    branch: release/1.0\n", "    brnch: release/1.0\n", "line 5: unknown key \"brnch\" in a component", ""},
		{"field of another kind", "    role: platform-reviewer\n", "    role: platform-reviewer\n    lane: x/v1\n", "line 44: field lane is not used by gates of kind manual", "gates[5].lane"},
		{"bad commit", "a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1\n    tree", "a1a1\n    tree", "line 7: must be a full commit", "components[0].head"},
		{"bad lane", "lane: qmv-bias-sum/v1", "lane: qmv", "line 20: must be a lane", "gates[0].lane"},
		{"unknown component", "    component: core\n    backends: [metal, cpu]", "    component: kore\n    backends: [metal, cpu]", "line 21: no component named", "gates[0].component"},
		{"unbound artifact", "artifacts: [lib]", "artifacts: [lob]", "line 23: artifact \"lob\" is not bound", "gates[0].artifacts[0]"},
		{"duplicate gate", "  - id: heads", "  - id: qmv", "line 24: duplicate gate id", "gates[1].id"},
		{"unknown kind", "kind: signed-heads", "kind: signed-head", "line 25: unknown gate kind", "gates[1].kind"},
		{"duplicate key", "    title: qmv discriminator\n", "    title: qmv discriminator\n    title: again\n", "already defined", ""},
		{"bad digest", "lib: sha256:1111", "lib: sha256:zz11", "must be sha256", "artifacts.lib"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if !strings.Contains(testYAML, tc.old) {
				t.Fatalf("fixture lacks %q", tc.old)
			}
			_, err := ParseRelease([]byte(strings.Replace(testYAML, tc.old, tc.new, 1)))
			if err == nil || !strings.Contains(err.Error(), tc.want) || ledger.ErrorCode(err) != ledger.CodeInvalid {
				t.Fatalf("err %v; want %q", err, tc.want)
			}
			var le *ledger.Error
			if tc.field != "" {
				if e, ok := err.(*ledger.Error); ok {
					le = e
				}
				if le == nil || le.Field != tc.field {
					t.Fatalf("field %+v; want %q", le, tc.field)
				}
			}
		})
	}
	if _, err := ParseRelease([]byte("version: 1\ncomponents: []\ngates: []\n")); err == nil {
		t.Fatal("empty components accepted")
	}
	if _, err := ParseRelease([]byte(testYAML + "---\nversion: 2\n")); err == nil {
		t.Fatal("two documents accepted")
	}
	if _, err := ParseRelease([]byte(strings.Replace(testYAML, "    role: platform-reviewer\n", "    role: platform-reviewer\n    min_runs: many\n", 1))); err == nil || !strings.Contains(err.Error(), "line 44: expected an integer, got a string") {
		t.Fatalf("wrong type: %v", err)
	}
	// Two wrong types: each message names its line and field.
	two := strings.Replace(testYAML, "    role: platform-reviewer\n", "    role: platform-reviewer\n    min_runs: many\n", 1)
	two = strings.Replace(two, "    branch: release/1.0\n", "    branch: [release/1.0]\n", 1)
	if _, err := ParseRelease([]byte(two)); err == nil || !strings.Contains(err.Error(), "line 5 (components[0].branch): expected a string, got a list") ||
		!strings.Contains(err.Error(), "line 44 (gates[5].min_runs): expected an integer, got a string") {
		t.Fatalf("two wrong types: %v", err)
	}
}

func TestPinsDigest(t *testing.T) {
	a := testRelease(t)
	b := testRelease(t)
	b.Gates = b.Gates[:1]
	b.Title = "other title"
	if a.PinsDigest() != b.PinsDigest() {
		t.Fatal("gates and titles changed the pins digest")
	}
	for name, f := range map[string]func(*Release){
		"head":     func(r *Release) { r.Components[0].Head = otherC },
		"tree":     func(r *Release) { r.Components[0].Tree = otherC },
		"artifact": func(r *Release) { r.Artifacts["lib"] = digestOld },
		"pins":     func(r *Release) { r.Components[0].Pins = []string{"x"} },
		"policy":   func(r *Release) { r.PolicyDigest = digestOld },
	} {
		c := testRelease(t)
		f(c)
		if c.PinsDigest() == a.PinsDigest() {
			t.Errorf("changing %s kept the pins digest", name)
		}
	}
}

func TestExampleReleaseParses(t *testing.T) {
	b, err := os.ReadFile("../examples/release-0.9.0.yaml")
	if err != nil {
		t.Skipf("example release not present: %v", err)
	}
	rel, err := ParseRelease(b)
	if err != nil {
		t.Fatal(err)
	}
	if rel.Version != "0.9.0" || len(rel.Components) != 6 {
		t.Fatalf("example release %s with %d components", rel.Version, len(rel.Components))
	}
	heads := map[string]string{
		"mlx": "f8eec2476cdb5263fb6e2a19dd71f2c8b7c0a7d3", "mlx-c": "8bdeb0f3c5793c54139e86c5437b09abc9ab9b42",
		"mlx-swift": "c3ac44766c3e0be2066bbd87a3e26aaa6f410ab0", "mlx-swift-lm": "67ac8607b5846e8acfbbdd8f36c0d252d69d0d01",
		"d-inference": "e1d68db84cb1a1e4a6dd10306383bd64bc5d6062",
		// The ledger's own kernel: the commit of the committed GPU throughput run.
		"ledger-qmv": throughputRunCommit(t),
	}
	for _, c := range rel.Components {
		if heads[c.Name] != c.Head {
			t.Errorf("component %s head %s, reference %s", c.Name, c.Head, heads[c.Name])
		}
	}
	// The throughput gate compares the corrected kernel with the narrow one.
	if g, ok := rel.gate("qmv-throughput"); !ok || g.Kind != KindThroughput || g.Component != "ledger-qmv" || g.Baseline != "narrow" || g.Threshold != 0.98 || g.Lane != DefaultThroughputLane {
		t.Errorf("example gate qmv-throughput: %+v", g)
	}
	// The source gates are about the five MLX components.
	for _, id := range []string{"signed-heads", "tree-equivalence"} {
		if g, ok := rel.gate(id); !ok || len(g.Components) != 5 || slices.Contains(g.Components, "ledger-qmv") {
			t.Errorf("example gate %s: components %v; want the five MLX components", id, g.Components)
		}
	}
	// The CUDA gate counts only evidence an approved agent signed.
	g, ok := rel.gate("cuda-execution")
	if !ok || g.Kind != KindLane || g.Runner != ledger.RunnerKindAgent || !slices.Equal(g.Backends, []string{"cuda"}) {
		t.Errorf("example gate cuda-execution: %+v; want a cuda lane gate with runner: agent", g)
	}
}

// throughputRunCommit returns the subject commit of the committed GPU
// throughput run (testdata/device/throughput/evidence.json, a JSON array
// of evidence records, all of one commit).
func throughputRunCommit(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../testdata/device/throughput/evidence.json")
	if err != nil {
		t.Fatal(err)
	}
	var evs []ledger.Evidence
	if err := json.Unmarshal(b, &evs); err != nil || len(evs) == 0 {
		t.Fatalf("evidence.json: %v (%d records)", err, len(evs))
	}
	for _, e := range evs {
		if e.Subject.Commit != evs[0].Subject.Commit {
			t.Fatalf("evidence.json holds commits %s and %s", evs[0].Subject.Commit, e.Subject.Commit)
		}
	}
	return evs[0].Subject.Commit
}
