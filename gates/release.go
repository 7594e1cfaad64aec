package gates

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/evidence-ledger/ledger/internal/yamltext"
	"github.com/evidence-ledger/ledger/ledger"
	"gopkg.in/yaml.v3"
)

// Release is a release definition: a version, its component stack, its
// bound artifacts, the trust policy for heads and its gates. Field names are
// the same in YAML and JSON. A Release loaded from the log carries the
// entry that defined it (Entry*). Releases are values: do not mutate one
// that is shared between goroutines.
type Release struct {
	Version    string      `yaml:"version" json:"version"`
	Title      string      `yaml:"title,omitempty" json:"title,omitempty"`
	Components []Component `yaml:"components" json:"components"`
	// Artifacts binds artifact names to "sha256:<64 lowercase hex>".
	Artifacts map[string]string `yaml:"artifacts,omitempty" json:"artifacts,omitempty"`
	// Policy names the registered trust policy (ledger.PolicyRecord, by
	// name: `ledger policy apply FILE --name NAME`) the server verifies
	// this release's heads under; the newest policy of that name applies.
	// It is a name (ledger.ValidPolicyName), never a path.
	Policy string `yaml:"policy,omitempty" json:"policy,omitempty"`
	// PolicyDigest, when set ("sha256:<64 hex>", ledger.PolicyDigest),
	// binds the policy by content: heads are verified under exactly that
	// registered policy, and signed-heads gates count only head
	// verifications made under it (ledger.HeadVerification.Policy). With
	// Policy set too, the newest policy of that name must have this digest.
	PolicyDigest string `yaml:"policy_digest,omitempty" json:"policy_digest,omitempty"`
	// ApprovalRole, when set, is the role a token must hold to record the
	// final release approval (besides admin scope).
	ApprovalRole string `yaml:"approval_role,omitempty" json:"approval_role,omitempty"`
	// Approval, when set, is the release's two-person rule (ApprovalRule):
	// who may not give the final approval. Nil: anyone holding the
	// approval role may.
	Approval *ApprovalRule `yaml:"approval,omitempty" json:"approval,omitempty"`
	// RequireWitnessed makes the verdict be computed at the newest
	// checkpoint that met the witness quorum (ledger.WitnessedLog): with
	// none, or on a store that runs no witnesses, the release is not ready
	// and Readiness.Witnessing says why.
	RequireWitnessed bool   `yaml:"require_witnessed,omitempty" json:"require_witnessed,omitempty"`
	Gates            []Gate `yaml:"gates" json:"gates"`

	// DefinedAt and DefinedBy are set by Apply (not read from YAML); they
	// make every (re)definition a distinct log record.
	DefinedAt time.Time `yaml:"-" json:"defined_at,omitzero"`
	DefinedBy string    `yaml:"-" json:"defined_by,omitempty"`

	// EntryID and EntryIndex identify the log entry this definition was
	// loaded from (zero when parsed from a file).
	EntryID    string `yaml:"-" json:"-"`
	EntryIndex uint64 `yaml:"-" json:"-"`
}

// Component is one repository of the release's stack. Head is the signed
// publication head commit (what evidence must be about, by default);
// Reviewed is the reviewed source commit. Tree and ReviewedTree are their
// tree ids: optional because trees are not always published (the reference
// release publishes commits only); when given, evidence must carry the same
// tree. Pins are path globs (path.Match syntax) of dependency pins, the only
// paths allowed to differ between head and reviewed source. Artifacts names
// the release's bound artifacts built from this component: evidence for
// every lane, trajectory and matrix gate of the component must carry each
// of them at its bound digest, unless the gate lists its own artifacts.
type Component struct {
	Name         string   `yaml:"name" json:"name"`
	Repository   string   `yaml:"repository" json:"repository"`
	Branch       string   `yaml:"branch,omitempty" json:"branch,omitempty"`
	Change       string   `yaml:"change,omitempty" json:"change,omitempty"`
	Reviewed     string   `yaml:"reviewed" json:"reviewed"`
	Head         string   `yaml:"head" json:"head"`
	Tree         string   `yaml:"tree,omitempty" json:"tree,omitempty"`
	ReviewedTree string   `yaml:"reviewed_tree,omitempty" json:"reviewed_tree,omitempty"`
	Pins         []string `yaml:"pins,omitempty" json:"pins,omitempty"`
	Artifacts    []string `yaml:"artifacts,omitempty" json:"artifacts,omitempty"`
}

// Dimension is one axis of a matrix gate: evidence details must carry
// Name with one of Values (a dimension named "backend" falls back to the
// evidence's backend when details lack it).
type Dimension struct {
	Name   string   `yaml:"name" json:"name"`
	Values []string `yaml:"values" json:"values"`
}

// Gate is one requirement. Which fields apply depends on Kind:
//
//	lane:             lane, component, at, backends, all_backends, artifacts, min_runs, freshness, cases, signed_by, runner
//	signed-heads:     components (default: all)
//	tree-equivalence: components (default: all), lane (default tree-equivalence/v1)
//	trajectory:       lane (default trajectory/v1), component, at, artifacts, trajectories, modes, backends, signed_by, runner
//	matrix:           lane, component, at, artifacts, dimensions, signed_by, runner
//	manual:           role
//
// A field set on a kind that does not use it is an error. Artifacts, when
// set, are the bound artifacts the gate is about instead of its
// component's; every bound artifact's digest binds every gate regardless.
type Gate struct {
	ID          string `yaml:"id" json:"id"`
	Kind        string `yaml:"kind" json:"kind"`
	Title       string `yaml:"title,omitempty" json:"title,omitempty"`
	Description string `yaml:"description,omitempty" json:"description,omitempty"`

	Lane      string `yaml:"lane,omitempty" json:"lane,omitempty"`
	Component string `yaml:"component,omitempty" json:"component,omitempty"`
	// At selects which commit of Component evidence must be about: "head"
	// (default) or "reviewed".
	At          string   `yaml:"at,omitempty" json:"at,omitempty"`
	Backends    []string `yaml:"backends,omitempty" json:"backends,omitempty"`
	AllBackends bool     `yaml:"all_backends,omitempty" json:"all_backends,omitempty"`
	Artifacts   []string `yaml:"artifacts,omitempty" json:"artifacts,omitempty"`
	MinRuns     int      `yaml:"min_runs,omitempty" json:"min_runs,omitempty"`
	// Cases, when set, is the number of cases the lane's matrix has: a run
	// with another cases_total does not count (it did not run the lane).
	// For a throughput gate it is the fewest selected cases a run must
	// carry.
	Cases int `yaml:"cases,omitempty" json:"cases,omitempty"`
	// Freshness is the maximum age of a run (its finished_at) at evaluation
	// time: a Go duration or a number of days ("30d"). Empty: no limit.
	Freshness string `yaml:"freshness,omitempty" json:"freshness,omitempty"`

	Components []string `yaml:"components,omitempty" json:"components,omitempty"`

	Trajectories []string `yaml:"trajectories,omitempty" json:"trajectories,omitempty"`
	Modes        []string `yaml:"modes,omitempty" json:"modes,omitempty"`

	Dimensions []Dimension `yaml:"dimensions,omitempty" json:"dimensions,omitempty"`

	Role string `yaml:"role,omitempty" json:"role,omitempty"`

	// SignedBy, when set, names the runners (ledger runner add) whose
	// DSSE-signed evidence alone counts: unsigned evidence, evidence
	// signed by another runner or by a revoked key is baseline.
	SignedBy []string `yaml:"signed_by,omitempty" json:"signed_by,omitempty"`
	// Runner "agent" counts only evidence signed by an approved agent's
	// key (ledger agent approve: a runner key of kind agent), that is
	// evidence an agent produced for a run queued on the server; other
	// evidence is baseline with the reason. "" (the default): any.
	Runner string `yaml:"runner,omitempty" json:"runner,omitempty"`
	// AgentLabels, with Runner "agent", counts only evidence of an agent
	// whose approval (its runner-key leaf) recorded every one of these
	// labels with the same value (e.g. gpu: h200); the release page's
	// "run the missing lanes" queues its runs with these labels.
	AgentLabels map[string]string `yaml:"agent_labels,omitempty" json:"agent_labels,omitempty"`

	// Artifact is the bound artifact a provenance gate is about.
	Artifact string `yaml:"artifact,omitempty" json:"artifact,omitempty"`
	// Builders are the SLSA builder ids (runDetails.builder.id, v0.2's
	// builder.id) whose provenance a provenance gate counts, exact.
	Builders []string `yaml:"builders,omitempty" json:"builders,omitempty"`
	// Source is the commit of Component a provenance must name as the
	// build's source: "reviewed" (the default) or "head".
	Source string `yaml:"source,omitempty" json:"source,omitempty"`

	// Baseline is the name a throughput record's baseline must carry
	// (details.throughput.baseline.name: a kernel variant such as
	// "narrow", or an original implementation's name).
	Baseline string `yaml:"baseline,omitempty" json:"baseline,omitempty"`
	// BaselineArtifacts are artifact pins (name -> "sha256:<64 hex>")
	// the throughput record's baseline.artifacts must carry, each at that
	// digest.
	BaselineArtifacts map[string]string `yaml:"baseline_artifacts,omitempty" json:"baseline_artifacts,omitempty"`
	// Threshold is the lowest acceptable speed ratio of a throughput
	// gate, baseline time / candidate time, in (0, 10]: 0.98 accepts a
	// candidate at most 2 % slower.
	Threshold float64 `yaml:"threshold,omitempty" json:"threshold,omitempty"`
	// Select are case-id globs (path.Match; "*" does not cross "/") of the
	// throughput cases a gate judges; none: every case of the record.
	Select []string `yaml:"select,omitempty" json:"select,omitempty"`

	freshness time.Duration
}

var (
	versionRe = regexp.MustCompile(`^[0-9A-Za-z][0-9A-Za-z._+-]{0,63}$`)
	gateIDRe  = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,63}$`)
	nameRe    = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._+@:/-]{0,254}$`)
	roleRe    = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)
)

// ValidVersion reports whether s is a usable release version (1-64 of
// [0-9A-Za-z._+-], starting alphanumeric).
func ValidVersion(s string) bool { return versionRe.MatchString(s) }

// ParseRelease decodes a release definition from YAML (JSON is YAML too)
// strictly: unknown keys, duplicate keys, wrong types and invalid values are
// CodeInvalid *ledger.Error values whose message starts with "line N:" and
// whose Field is the path of the offending field (e.g. "gates[3].lane").
func ParseRelease(data []byte) (*Release, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, ledger.FieldError("", "empty release definition")
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var rel Release
	if err := dec.Decode(&rel); err != nil {
		return nil, yamlError(err, data)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, ledger.FieldError("", "more than one YAML document: a release file holds exactly one")
	}
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return nil, yamlError(err, nil)
	}
	lines := map[string]int{}
	walkLines(&root, "", lines)
	if err := rel.validate(); err != nil {
		return nil, withLine(err, lines)
	}
	return &rel, nil
}

// yamlError turns a yaml.v3 error (which already names lines) into a
// CodeInvalid *ledger.Error that quotes no value of the file
// (yamltext.Messages): a type error says what was expected and what kind
// of value was found and, when data (the decoded file) parses, which
// field: the Error's Field for a single message, else after the line
// ("line 176 (gates[6].threshold): expected a number, got a string"); an
// unknown key is named.
func yamlError(err error, data []byte) error {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return ledger.FieldError("", "%s", strings.Join(yamltext.Messages(err, nil), "; "))
	}
	where := map[string]string{"gates.Release": "the release", "gates.Component": "a component", "gates.Gate": "a gate", "gates.Dimension": "a matrix dimension",
		"gates.ApprovalRule": "the approval rule (approval:)"}
	msgs := yamltext.Messages(err, map[string]string{"gates.Release": "the release (a mapping)", "gates.Component": "a component (a mapping)",
		"gates.Gate": "a gate (a mapping)", "gates.Dimension": "a matrix dimension (a mapping)", "gates.ApprovalRule": "the approval rule (a mapping with distinct_from)"})
	for i, m := range msgs {
		// "line 3: field colour not found in type gates.Release" ->
		// "line 3: unknown key "colour" (in the release)"
		if a, b, ok := strings.Cut(m, ": field "); ok {
			if name, typ, ok := strings.Cut(b, " not found in type "); ok {
				w := where[typ]
				if w == "" {
					w = typ
				}
				msgs[i] = fmt.Sprintf("%s: unknown key %q in %s", a, name, w)
			}
		}
	}
	field := ""
	if bad := wrongKinds(data); len(bad) == len(msgs) {
		// Both list the values yaml.v3 could not decode in document order.
		for i, m := range msgs {
			head, rest, ok := strings.Cut(m, ": ")
			if !ok || head != fmt.Sprintf("line %d", bad[i].line) || strings.HasPrefix(rest, "unknown key") {
				continue
			}
			if len(msgs) == 1 {
				field = bad[i].path
			} else {
				msgs[i] = fmt.Sprintf("%s (%s): %s", head, bad[i].path, rest)
			}
		}
	}
	return ledger.FieldError(field, "%s", strings.Join(msgs, "; "))
}

// wrongKind is a value of a release file that does not decode into its
// field, with its field path ("gates[6].threshold") and line.
type wrongKind struct {
	path string
	line int
}

// wrongKinds walks the YAML document data beside the Release type and
// lists, in document order, the values that do not decode into the Go
// type of their field (a string for a number, a list for a string, ...);
// keys the type does not have are skipped. Nil when data does not parse.
func wrongKinds(data []byte) []wrongKind {
	var root yaml.Node
	if data == nil || yaml.Unmarshal(data, &root) != nil || len(root.Content) != 1 {
		return nil
	}
	var out []wrongKind
	var walk func(n *yaml.Node, t reflect.Type, p string)
	walk = func(n *yaml.Node, t reflect.Type, p string) {
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		switch {
		case t.Kind() == reflect.Struct && n.Kind == yaml.MappingNode:
			fields := map[string]reflect.Type{}
			for i := range t.NumField() {
				name, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ",")
				if name != "" && name != "-" {
					fields[name] = t.Field(i).Type
				}
			}
			for i := 0; i+1 < len(n.Content); i += 2 {
				if ft, ok := fields[n.Content[i].Value]; ok {
					walk(n.Content[i+1], ft, joinPath(p, n.Content[i].Value))
				}
			}
		case t.Kind() == reflect.Slice && n.Kind == yaml.SequenceNode:
			for i, c := range n.Content {
				walk(c, t.Elem(), fmt.Sprintf("%s[%d]", p, i))
			}
		case t.Kind() == reflect.Map && n.Kind == yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				walk(n.Content[i+1], t.Elem(), joinPath(p, n.Content[i].Value))
			}
		default:
			if err := n.Decode(reflect.New(t).Interface()); err != nil {
				out = append(out, wrongKind{p, n.Line})
			}
		}
	}
	walk(root.Content[0], reflect.TypeFor[Release](), "")
	return out
}

func joinPath(p, key string) string {
	if p == "" {
		return key
	}
	return p + "." + key
}

// walkLines records the line of every mapping value and sequence item by
// its field path ("gates[2].lane").
func walkLines(n *yaml.Node, p string, out map[string]int) {
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			walkLines(c, p, out)
		}
	case yaml.MappingNode:
		if _, ok := out[p]; !ok {
			out[p] = n.Line
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			cp := k.Value
			if p != "" {
				cp = p + "." + k.Value
			}
			out[cp] = k.Line
			walkLines(v, cp, out)
		}
	case yaml.SequenceNode:
		if _, ok := out[p]; !ok {
			out[p] = n.Line
		}
		for i, c := range n.Content {
			cp := fmt.Sprintf("%s[%d]", p, i)
			out[cp] = c.Line
			walkLines(c, cp, out)
		}
	}
}

// withLine prefixes the message of a field error with the line of its
// field (or of the nearest enclosing field that has one).
func withLine(err error, lines map[string]int) error {
	var le *ledger.Error
	if !errors.As(err, &le) {
		return err
	}
	for f := le.Field; ; {
		if l, ok := lines[f]; ok && l > 0 {
			c := *le
			c.Message = fmt.Sprintf("line %d: %s", l, c.Message)
			return &c
		}
		i := strings.LastIndexAny(f, ".[")
		if i < 0 {
			if f == "" {
				return err
			}
			f = ""
			continue
		}
		f = f[:i]
	}
}

// Validate checks a release definition (ParseRelease calls it; use it for
// releases built in code or decoded from JSON). Errors are CodeInvalid
// *ledger.Error values naming the field path.
func (r *Release) Validate() error { return r.validate() }

func (r *Release) validate() error {
	if !ValidVersion(r.Version) {
		return ledger.FieldError("version", "required: 1-64 of [0-9A-Za-z._+-] starting alphanumeric, got %q", r.Version)
	}
	if len(r.Components) == 0 {
		return ledger.FieldError("components", "at least one component is required")
	}
	names := map[string]bool{}
	for i := range r.Components {
		if err := r.validateComponent(i, names); err != nil {
			return err
		}
	}
	for name, d := range r.Artifacts {
		if !nameRe.MatchString(name) {
			return ledger.FieldError("artifacts."+name, "artifact name %q is not valid", name)
		}
		if !ledger.ValidDigest(d) {
			return ledger.FieldError("artifacts."+name, "digest must be sha256:<64 lowercase hex>, got %q", d)
		}
	}
	for i, c := range r.Components {
		for j, a := range c.Artifacts {
			if _, ok := r.Artifacts[a]; !ok {
				return ledger.FieldError(fmt.Sprintf("components[%d].artifacts[%d]", i, j), "artifact %q is not bound by the release (artifacts:)", a)
			}
		}
	}
	if r.Policy != "" && !ledger.ValidPolicyName(r.Policy) {
		return ledger.FieldError("policy", "must name a registered trust policy (1-64 of [a-z0-9._-], see `ledger policy apply`), not a file or a description, got %q", r.Policy)
	}
	if r.PolicyDigest != "" && !ledger.ValidDigest(r.PolicyDigest) {
		return ledger.FieldError("policy_digest", "must be sha256:<64 lowercase hex>, got %q", r.PolicyDigest)
	}
	if r.ApprovalRole != "" && !roleRe.MatchString(r.ApprovalRole) {
		return ledger.FieldError("approval_role", "role must be 1-64 of [A-Za-z0-9._-], got %q", r.ApprovalRole)
	}
	if err := r.Approval.validate(); err != nil {
		return err
	}
	if len(r.Gates) == 0 {
		return ledger.FieldError("gates", "at least one gate is required")
	}
	ids := map[string]bool{}
	for i := range r.Gates {
		if err := r.validateGate(i, names); err != nil {
			return err
		}
		g := &r.Gates[i]
		if ids[g.ID] {
			return ledger.FieldError(fmt.Sprintf("gates[%d].id", i), "duplicate gate id %q", g.ID)
		}
		ids[g.ID] = true
	}
	return nil
}

// Component returns the component named name.
func (r *Release) Component(name string) (Component, bool) {
	for _, c := range r.Components {
		if c.Name == name {
			return c, true
		}
	}
	return Component{}, false
}

// pinsView is the canonical content of a release's pins.
type pinsView struct {
	Version      string            `json:"version"`
	Components   []pinComponent    `json:"components"`
	Artifacts    map[string]string `json:"artifacts"`
	PolicyDigest string            `json:"policy_digest"`
}

type pinComponent struct {
	Name         string   `json:"name"`
	Repository   string   `json:"repository"`
	Reviewed     string   `json:"reviewed"`
	Head         string   `json:"head"`
	Tree         string   `json:"tree"`
	ReviewedTree string   `json:"reviewed_tree"`
	Pins         []string `json:"pins"`
	Artifacts    []string `json:"artifacts,omitempty"`
}

// PinsDigest returns "sha256:<hex>" of the canonical JSON of the release's
// pins: version, each component's (name, repository, reviewed, head, tree,
// reviewed_tree, pins, and the artifacts built from it when it lists any)
// sorted by name, artifacts and policy digest. Gates
// and titles are not pins: redefining gates keeps waivers and sign-offs,
// changing any pin lapses them.
func (r *Release) PinsDigest() string {
	v := pinsView{Version: r.Version, Artifacts: map[string]string{}, PolicyDigest: r.PolicyDigest}
	for k, d := range r.Artifacts {
		v.Artifacts[k] = d
	}
	for _, c := range r.Components {
		pins := append([]string{}, c.Pins...)
		sort.Strings(pins)
		var arts []string
		if len(c.Artifacts) > 0 {
			arts = append(arts, c.Artifacts...)
			sort.Strings(arts)
		}
		v.Components = append(v.Components, pinComponent{c.Name, c.Repository, c.Reviewed, c.Head, c.Tree, c.ReviewedTree, pins, arts})
	}
	sort.Slice(v.Components, func(i, j int) bool { return v.Components[i].Name < v.Components[j].Name })
	b, err := ledger.CanonicalBody(v)
	if err != nil { // cannot happen: plain strings and maps
		panic(err)
	}
	h := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(h[:])
}

// GateSubject returns the repository and commit evidence for gate g
// must be about: the repository of g's component and its head commit, or
// its reviewed commit when g has at: reviewed ("" for a gate naming no
// component of r).
func (r *Release) GateSubject(g *Gate) (repository, commit string) {
	c, _ := r.Component(g.Component)
	commit, _ = r.commitFor(g)
	return c.Repository, commit
}

// commitFor returns the commit and tree evidence for gate g must be about.
func (r *Release) commitFor(g *Gate) (commit, tree string) {
	c, _ := r.Component(g.Component)
	if g.At == "reviewed" {
		return c.Reviewed, c.ReviewedTree
	}
	return c.Head, c.Tree
}
