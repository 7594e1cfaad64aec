package gates

import (
	"fmt"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
)

// kindSpec is one gate kind: the Gate fields it uses, how it fills and
// checks them beyond the checks common to every kind, and how it is
// evaluated. Each kind is defined in its own file (kind_*.go) and listed
// once in kinds.
type kindSpec struct {
	name string
	// fields are the Gate fields (by YAML name, see gateFields) the kind
	// uses besides id, kind, title and description; setting any other is
	// an error.
	fields []string
	// defaultLane, when not "", is the lane of a gate that names none.
	defaultLane string
	// backendLabels is true when backends are free-form labels inside the
	// evidence details rather than ledger.Backends.
	backendLabels bool
	// validate, when non-nil, checks and fills what is particular to the
	// kind, after the common checks; f is the gate's field path
	// ("gates[3]").
	validate func(g *Gate, f string) error
	// evaluate computes the gate's state without waivers.
	evaluate func(ev *evaluator, g *Gate) (GateResult, error)
	// rule is CountingRule applied to the kind: which records pass and
	// which fail, in words (shown beside the gate).
	rule string
}

// kinds is every gate kind, in the order messages list them.
var kinds = []*kindSpec{&laneKind, &signedHeadsKind, &treeEquivalenceKind, &trajectoryKind, &matrixKind, &manualKind, &provenanceKind, &throughputKind}

// kindOf returns the kind named name, or nil.
func kindOf(name string) *kindSpec {
	for _, k := range kinds {
		if k.name == name {
			return k
		}
	}
	return nil
}

func (k *kindSpec) uses(field string) bool {
	for _, f := range k.fields {
		if f == field {
			return true
		}
	}
	return false
}

// gateFields are the kind-dependent Gate fields by YAML name with whether
// a gate sets them, sorted by name (the order unused fields are reported
// in).
var gateFields = []struct {
	name string
	set  func(*Gate) bool
}{
	{"agent_labels", func(g *Gate) bool { return len(g.AgentLabels) > 0 }},
	{"all_backends", func(g *Gate) bool { return g.AllBackends }},
	{"artifact", func(g *Gate) bool { return g.Artifact != "" }},
	{"artifacts", func(g *Gate) bool { return len(g.Artifacts) > 0 }},
	{"at", func(g *Gate) bool { return g.At != "" }},
	{"backends", func(g *Gate) bool { return len(g.Backends) > 0 }},
	{"baseline", func(g *Gate) bool { return g.Baseline != "" }},
	{"baseline_artifacts", func(g *Gate) bool { return len(g.BaselineArtifacts) > 0 }},
	{"builders", func(g *Gate) bool { return len(g.Builders) > 0 }},
	{"cases", func(g *Gate) bool { return g.Cases != 0 }},
	{"component", func(g *Gate) bool { return g.Component != "" }},
	{"components", func(g *Gate) bool { return len(g.Components) > 0 }},
	{"dimensions", func(g *Gate) bool { return len(g.Dimensions) > 0 }},
	{"freshness", func(g *Gate) bool { return g.Freshness != "" }},
	{"lane", func(g *Gate) bool { return g.Lane != "" }},
	{"min_runs", func(g *Gate) bool { return g.MinRuns != 0 }},
	{"modes", func(g *Gate) bool { return len(g.Modes) > 0 }},
	{"role", func(g *Gate) bool { return g.Role != "" }},
	{"runner", func(g *Gate) bool { return g.Runner != "" }},
	{"select", func(g *Gate) bool { return len(g.Select) > 0 }},
	{"signed_by", func(g *Gate) bool { return len(g.SignedBy) > 0 }},
	{"source", func(g *Gate) bool { return g.Source != "" }},
	{"threshold", func(g *Gate) bool { return g.Threshold != 0 }},
	{"trajectories", func(g *Gate) bool { return len(g.Trajectories) > 0 }},
}

func kindNames() string {
	names := make([]string, len(kinds))
	for i, k := range kinds {
		names[i] = k.name
	}
	return strings.Join(names, ", ")
}

// validateGate checks gate i of r and fills its defaults: the id, the
// kind, that only the kind's fields are set, the checks common to every
// kind, then the kind's own.
func (r *Release) validateGate(i int, components map[string]bool) error {
	g := &r.Gates[i]
	f := fmt.Sprintf("gates[%d]", i)
	if !gateIDRe.MatchString(g.ID) {
		return ledger.FieldError(f+".id", "required: 1-64 of [a-z0-9._-] starting alphanumeric, got %q", g.ID)
	}
	k := kindOf(g.Kind)
	if k == nil {
		return ledger.FieldError(f+".kind", "unknown gate kind %q (%s)", g.Kind, kindNames())
	}
	for _, gf := range gateFields {
		if gf.set(g) && !k.uses(gf.name) {
			return ledger.FieldError(f+"."+gf.name, "field %s is not used by gates of kind %s", gf.name, g.Kind)
		}
	}
	for _, check := range []func(*kindSpec, *Gate, string, map[string]bool) error{checkLane, checkComponent, checkBackends, r.checkArtifacts, r.checkArtifact, checkCounts, checkComponents, checkSignedBy} {
		if err := check(k, g, f, components); err != nil {
			return err
		}
	}
	if k.validate != nil {
		return k.validate(g, f)
	}
	return nil
}

func checkLane(k *kindSpec, g *Gate, f string, _ map[string]bool) error {
	switch {
	case !k.uses("lane"):
	case g.Lane == "" && k.defaultLane != "":
		g.Lane = k.defaultLane
	case !ledger.ValidLane(g.Lane):
		return ledger.FieldError(f+".lane", "must be a lane name@version like qmv-bias-sum/v1, got %q", g.Lane)
	}
	return nil
}

func checkComponent(k *kindSpec, g *Gate, f string, components map[string]bool) error {
	if !k.uses("component") {
		return nil
	}
	if g.Component == "" {
		return ledger.FieldError(f+".component", "required: the component whose commit the evidence must be about")
	}
	if !components[g.Component] {
		return ledger.FieldError(f+".component", "no component named %q", g.Component)
	}
	if g.At != "" && g.At != "head" && g.At != "reviewed" {
		return ledger.FieldError(f+".at", "must be head or reviewed, got %q", g.At)
	}
	return nil
}

func checkBackends(k *kindSpec, g *Gate, f string, _ map[string]bool) error {
	if k.backendLabels {
		return nil
	}
	for j, b := range g.Backends {
		if !ledger.Backend(b).Valid() {
			return ledger.FieldError(fmt.Sprintf("%s.backends[%d]", f, j), "unknown backend %q (%s)", b, ledger.BackendList())
		}
	}
	return nil
}

func (r *Release) checkArtifacts(_ *kindSpec, g *Gate, f string, _ map[string]bool) error {
	for j, a := range g.Artifacts {
		if _, ok := r.Artifacts[a]; !ok {
			return ledger.FieldError(fmt.Sprintf("%s.artifacts[%d]", f, j), "artifact %q is not bound by the release (artifacts:)", a)
		}
	}
	return nil
}

func (r *Release) checkArtifact(k *kindSpec, g *Gate, f string, _ map[string]bool) error {
	if !k.uses("artifact") {
		return nil
	}
	if g.Artifact == "" {
		return ledger.FieldError(f+".artifact", "required: the bound artifact (artifacts:) the provenance must be about")
	}
	if _, ok := r.Artifacts[g.Artifact]; !ok {
		return ledger.FieldError(f+".artifact", "artifact %q is not bound by the release (artifacts:)", g.Artifact)
	}
	return nil
}

func checkCounts(_ *kindSpec, g *Gate, f string, _ map[string]bool) error {
	if g.Cases < 0 {
		return ledger.FieldError(f+".cases", "must be >= 0, got %d", g.Cases)
	}
	if g.MinRuns < 0 || g.MinRuns > 1000 {
		return ledger.FieldError(f+".min_runs", "must be 0..1000, got %d", g.MinRuns)
	}
	if g.Freshness != "" {
		d, err := parseDuration(g.Freshness)
		if err != nil || d <= 0 {
			return ledger.FieldError(f+".freshness", "must be a positive duration such as 720h or 30d, got %q", g.Freshness)
		}
		g.freshness = d
	}
	return nil
}

func checkComponents(_ *kindSpec, g *Gate, f string, components map[string]bool) error {
	for j, c := range g.Components {
		if !components[c] {
			return ledger.FieldError(fmt.Sprintf("%s.components[%d]", f, j), "no component named %q", c)
		}
	}
	return nil
}

// validateComponent checks component i of r.
func (r *Release) validateComponent(i int, names map[string]bool) error {
	c := &r.Components[i]
	f := fmt.Sprintf("components[%d]", i)
	if !roleRe.MatchString(c.Name) {
		return ledger.FieldError(f+".name", "required: 1-64 of [A-Za-z0-9._-], got %q", c.Name)
	}
	if names[c.Name] {
		return ledger.FieldError(f+".name", "duplicate component %q", c.Name)
	}
	names[c.Name] = true
	if strings.TrimSpace(c.Repository) == "" || len(c.Repository) > 512 {
		return ledger.FieldError(f+".repository", "required, at most 512 characters")
	}
	for _, o := range []struct {
		field, v string
		req      bool
	}{{"reviewed", c.Reviewed, true}, {"head", c.Head, true}, {"tree", c.Tree, false}, {"reviewed_tree", c.ReviewedTree, false}} {
		if o.v == "" && !o.req {
			continue
		}
		if !ledger.ValidObjectID(o.v) {
			return ledger.FieldError(f+"."+o.field, "must be a full commit/tree id (40 or 64 lowercase hex digits), got %q", o.v)
		}
	}
	for j, g := range c.Pins {
		if g == "" || strings.HasPrefix(g, "/") {
			return ledger.FieldError(fmt.Sprintf("%s.pins[%d]", f, j), "pin glob must be a relative path pattern, got %q", g)
		}
		if _, err := path.Match(g, ""); err != nil {
			return ledger.FieldError(fmt.Sprintf("%s.pins[%d]", f, j), "bad glob %q: %v", g, err)
		}
	}
	return nil
}

// parseDuration accepts Go durations and whole days ("30d").
func parseDuration(s string) (time.Duration, error) {
	if d, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.Atoi(d)
		if err != nil || n < 0 || n > 36500 {
			return 0, fmt.Errorf("bad day count %q", s)
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	return time.ParseDuration(s)
}
