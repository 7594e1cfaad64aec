package gates

import (
	"strings"
	"testing"
)

// TestKindsTable checks every gate kind's entry: a unique name found by
// kindOf, an evaluation, fields that are Gate fields, and that a gate of
// the kind refuses every field the kind does not list.
func TestKindsTable(t *testing.T) {
	known := map[string]bool{}
	for _, gf := range gateFields {
		known[gf.name] = true
	}
	seen := map[string]bool{}
	for _, k := range kinds {
		if k.name == "" || seen[k.name] || kindOf(k.name) != k || k.evaluate == nil {
			t.Fatalf("kind %q: empty, duplicate, not found by kindOf or without evaluate", k.name)
		}
		seen[k.name] = true
		for _, f := range k.fields {
			if !known[f] {
				t.Errorf("kind %s uses %q, which is not a Gate field in gateFields", k.name, f)
			}
		}
		if !strings.Contains(kindNames(), k.name) {
			t.Errorf("kindNames() %q lacks %s", kindNames(), k.name)
		}
	}
	// Every field set on a kind that does not use it is refused, naming it.
	full := Gate{AllBackends: true, Artifacts: []string{"lib"}, At: "head", Backends: []string{"cpu"}, Cases: 1, Component: "core",
		Components: []string{"core"}, Dimensions: []Dimension{{"d", []string{"v"}}}, Freshness: "1h", Lane: "x/v1", MinRuns: 1,
		Modes: []string{"a", "b"}, Role: "r", Trajectories: []string{"t"}, SignedBy: []string{"ci"}, Runner: "agent", AgentLabels: map[string]string{"gpu": "h200"},
		Artifact: "lib", Builders: []string{"https://builder.example/b"}, Source: "head",
		Baseline: "narrow", BaselineArtifacts: map[string]string{"lib": digestLib}, Threshold: 0.98, Select: []string{"batch1/*"}}
	for _, k := range kinds {
		for _, gf := range gateFields {
			if k.uses(gf.name) {
				continue
			}
			rel := testRelease(t)
			g := full
			g.ID, g.Kind = "g", k.name
			for _, other := range gateFields {
				if other.name != gf.name {
					clearField(&g, other.name)
				}
			}
			if !gf.set(&g) {
				t.Fatalf("field %s: the probe gate does not set it", gf.name)
			}
			rel.Gates = []Gate{g}
			err := rel.Validate()
			if err == nil || !strings.Contains(err.Error(), "gates[0]."+gf.name) || !strings.Contains(err.Error(), "not used by gates of kind "+k.name) {
				t.Errorf("kind %s with %s set: %v; want the field refused", k.name, gf.name, err)
			}
		}
	}
}

// clearField zeroes the Gate field with YAML name name.
func clearField(g *Gate, name string) {
	switch name {
	case "all_backends":
		g.AllBackends = false
	case "artifacts":
		g.Artifacts = nil
	case "at":
		g.At = ""
	case "backends":
		g.Backends = nil
	case "cases":
		g.Cases = 0
	case "component":
		g.Component = ""
	case "components":
		g.Components = nil
	case "dimensions":
		g.Dimensions = nil
	case "freshness":
		g.Freshness = ""
	case "lane":
		g.Lane = ""
	case "min_runs":
		g.MinRuns = 0
	case "modes":
		g.Modes = nil
	case "role":
		g.Role = ""
	case "trajectories":
		g.Trajectories = nil
	case "signed_by":
		g.SignedBy = nil
	case "runner":
		g.Runner = ""
	case "agent_labels":
		g.AgentLabels = nil
	case "artifact":
		g.Artifact = ""
	case "builders":
		g.Builders = nil
	case "source":
		g.Source = ""
	case "baseline":
		g.Baseline = ""
	case "baseline_artifacts":
		g.BaselineArtifacts = nil
	case "threshold":
		g.Threshold = 0
	case "select":
		g.Select = nil
	}
}
