package gates

import (
	"strings"
	"testing"
)

// TestSignedByValidation: signed_by names runners, without duplicates, on
// the kinds that count evidence only; agent_labels are labels, on a gate
// with runner: agent only.
func TestSignedByValidation(t *testing.T) {
	base := `version: 1.0.0
components:
  - {name: core, repository: r, reviewed: ` + strings.Repeat("a", 40) + `, head: ` + strings.Repeat("b", 40) + `}
gates:
`
	for _, c := range []struct{ gate, field string }{
		{`  - {id: g, kind: lane, lane: x/v1, component: core, backends: [cpu], signed_by: [Bad Name]}`, "gates[0].signed_by[0]"},
		{`  - {id: g, kind: lane, lane: x/v1, component: core, backends: [cpu], signed_by: [ci, ci]}`, "gates[0].signed_by[1]"},
		{`  - {id: g, kind: manual, role: r, signed_by: [ci]}`, "gates[0].signed_by"},
		{`  - {id: g, kind: signed-heads, signed_by: [ci]}`, "gates[0].signed_by"},
		{`  - {id: g, kind: lane, lane: x/v1, component: core, backends: [cpu], runner: ci}`, "gates[0].runner"},
		{`  - {id: g, kind: manual, role: r, runner: agent}`, "gates[0].runner"},
		{`  - {id: g, kind: lane, lane: x/v1, component: core, backends: [cuda], agent_labels: {gpu: h200}}`, "gates[0].agent_labels"},
		{`  - {id: g, kind: lane, lane: x/v1, component: core, backends: [cuda], runner: agent, agent_labels: {GPU: h200}}`, "gates[0].agent_labels"},
		{`  - {id: g, kind: lane, lane: x/v1, component: core, backends: [cuda], runner: agent, agent_labels: {gpu: "h 200"}}`, "gates[0].agent_labels"},
		{`  - {id: g, kind: manual, role: r, agent_labels: {gpu: h200}}`, "gates[0].agent_labels"},
	} {
		_, err := ParseRelease([]byte(base + c.gate + "\n"))
		if err == nil || !strings.Contains(err.Error(), c.field) {
			t.Errorf("%s: %v; want an error naming %s", c.gate, err, c.field)
		}
	}
	for _, g := range []string{
		`  - {id: g, kind: lane, lane: x/v1, component: core, backends: [cpu], signed_by: [ci-mac, lab.2]}`,
		`  - {id: g, kind: trajectory, component: core, trajectories: [t], modes: [a, b], signed_by: [ci]}`,
		`  - {id: g, kind: matrix, lane: m/v1, component: core, dimensions: [{name: d, values: [v]}], signed_by: [ci]}`,
		`  - {id: g, kind: lane, lane: x/v1, component: core, backends: [cuda], runner: agent}`,
		`  - {id: g, kind: lane, lane: x/v1, component: core, backends: [cuda], runner: agent, agent_labels: {gpu: h200, zone: b}}`,
	} {
		if _, err := ParseRelease([]byte(base + g + "\n")); err != nil {
			t.Errorf("%s: %v", g, err)
		}
	}
}
