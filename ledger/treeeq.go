package ledger

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"
)

// TreeEquivalenceLane is the default lane of tree-equivalence evidence.
const TreeEquivalenceLane = "tree-equivalence/v1"

// TreeEquivalence is the Details object of tree-equivalence evidence, the
// shape `ledger verify tree --record` appends (see Evidence): lane
// TreeEquivalenceLane, backend external, subject commit = the signed head
// (subject tree = its tree), one case. Reviewed is the reviewed source
// commit compared against; Equivalent is true when the head's tree equals
// the reviewed tree after normalizing only the paths matching Pins;
// OutsidePins lists the paths that differ outside those globs (empty when
// equivalent); Differences counts every differing path, in the pins or not.
//
//	{"reviewed": "<commit>", "equivalent": true, "outside_pins": [], "pins": ["Package.resolved"], "differences": 1}
//
// ComputedBy is ComputedByServer only in records the server appended after
// hashing the objects and walking both trees itself; POST /api/v1/evidence
// refuses details that carry the member at all, so a record token cannot
// set it. Gates count only computed records (see package gates).
type TreeEquivalence struct {
	Reviewed    string   `json:"reviewed"`
	Equivalent  *bool    `json:"equivalent"`
	OutsidePins []string `json:"outside_pins"`
	Pins        []string `json:"pins"`
	Differences int      `json:"differences"`

	// ComputedBy is ComputedByServer on the records the server appends
	// after hashing the uploaded objects itself (POST /api/v1/trees/verify)
	// and absent otherwise; POST /api/v1/evidence refuses evidence whose
	// details carry it, so no token can set it. The fields below are set
	// on server-computed records only: the release and component whose
	// pins were applied, both tree ids, every differing path (in the pins
	// or not, sorted) and the ids of the objects the server hashed.
	ComputedBy     string   `json:"computed_by,omitempty"`
	Release        string   `json:"release,omitempty"`
	Component      string   `json:"component,omitempty"`
	HeadTree       string   `json:"head_tree,omitempty"`
	ReviewedTree   string   `json:"reviewed_tree,omitempty"`
	DifferingPaths []string `json:"differing_paths,omitempty"`
	ObjectFormat   string   `json:"object_format,omitempty"`
	Objects        []string `json:"objects,omitempty"`
}

// ComputedByServer is the TreeEquivalence.ComputedBy of tree-equivalence
// evidence the server computed from objects it hashed.
const ComputedByServer = "server"

// ComputedByField is the details member that carries ComputedBy.
const ComputedByField = "computed_by"

// ServerComputed reports whether the details were computed by the server
// (see TreeEquivalence.ComputedBy).
func (t TreeEquivalence) ServerComputed() bool { return t.ComputedBy == ComputedByServer }

// DecodeTreeEquivalence decodes the Details of tree-equivalence evidence:
// a JSON object with a non-empty "reviewed" string and a boolean
// "equivalent"; other members are allowed and ignored. Errors are
// CodeInvalid *Error values naming the field under "details."; they never
// quote the details.
func DecodeTreeEquivalence(details json.RawMessage) (TreeEquivalence, error) {
	var t TreeEquivalence
	if len(details) == 0 {
		return t, FieldError("details", "absent: tree-equivalence evidence needs {\"reviewed\": COMMIT, \"equivalent\": BOOL, \"outside_pins\": [...]}")
	}
	if err := json.Unmarshal(details, &t); err != nil {
		return TreeEquivalence{}, FieldError("details", "not a JSON object of reviewed, equivalent and outside_pins")
	}
	if t.Reviewed == "" {
		return TreeEquivalence{}, FieldError("details.reviewed", "required: the reviewed source commit compared against")
	}
	if t.Equivalent == nil {
		return TreeEquivalence{}, FieldError("details.equivalent", "required: true or false")
	}
	return t, nil
}

// Holds reports whether the details say the head equals the reviewed
// source apart from its pins: equivalent, and no path differs outside the
// pins.
func (t TreeEquivalence) Holds() bool {
	return t.Equivalent != nil && *t.Equivalent && len(t.OutsidePins) == 0
}

// BindingMismatch returns why server-computed details t do not speak for
// component of release at pins, or "" when they do: t.Pins must equal
// pins as a set (order and repeats ignored, nil and empty alike), and
// t.Release and t.Component, when set, must be release and component.
// The message names both sides, for example
// "computed at pins [go.sum src/*]; release 2.0 pins core at [go.sum]".
func (t TreeEquivalence) BindingMismatch(release, component string, pins []string) string {
	have, want := pinSet(t.Pins), pinSet(pins)
	switch {
	case !slices.Equal(have, want):
		return fmt.Sprintf("computed at pins %v; release %s pins %s at %v", have, release, component, want)
	case t.Release != "" && t.Release != release:
		return fmt.Sprintf("computed for release %s, not %s", t.Release, release)
	case t.Component != "" && t.Component != component:
		return fmt.Sprintf("computed for component %s, not %s of release %s", t.Component, component, release)
	}
	return ""
}

// pinSet returns pins sorted with repeats removed (never nil).
func pinSet(pins []string) []string {
	out := append([]string{}, pins...)
	slices.Sort(out)
	return slices.Compact(out)
}

// TreeFinding is what one tree-equivalence evidence record says about a
// signed head compared with a reviewed source commit.
type TreeFinding struct {
	// Details are the decoded details (zero when they do not decode).
	Details TreeEquivalence
	// Decides is true when the record speaks to this comparison: its
	// details decode, compare against the reviewed commit asked about, and
	// its status is passed or failed. Why says why not, otherwise.
	Decides bool
	Why     string
	// Equal, when Decides, is the verdict: the head equals the reviewed
	// source apart from its pins (Details.Holds and status passed).
	Equal bool
}

// JudgeTreeEquivalence is the one rule for tree-equivalence evidence: it
// decodes e's details and says whether e decides that its subject (a
// signed head) equals reviewed apart from pins. It does not check e's
// subject against a release's pins; callers do that first.
func JudgeTreeEquivalence(e *Evidence, reviewed string) TreeFinding {
	d, err := DecodeTreeEquivalence(e.Details)
	switch {
	case err != nil:
		return TreeFinding{Why: "details lack reviewed/equivalent (see ledger.TreeEquivalence)"}
	case d.Reviewed != reviewed:
		return TreeFinding{Details: d, Why: fmt.Sprintf("compares against %s, release's reviewed source is %s", shortID(d.Reviewed), shortID(reviewed))}
	case e.Status != StatusPassed && e.Status != StatusFailed:
		return TreeFinding{Details: d, Why: "status " + string(e.Status)}
	}
	return TreeFinding{Details: d, Decides: true, Equal: d.Holds() && e.Status == StatusPassed}
}

// Evidence returns the tree-equivalence evidence record of t about
// subject (the signed head): lane TreeEquivalenceLane, backend external,
// one case, no negative control; status passed when t.Holds, else failed
// with the failing case "tree-equivalence". Times are stored in UTC.
func (t TreeEquivalence) Evidence(subject Subject, rb RunnerBuild, started, finished time.Time) (Evidence, error) {
	if t.OutsidePins == nil {
		t.OutsidePins = []string{}
	}
	details, err := json.Marshal(t)
	if err != nil {
		return Evidence{}, fmt.Errorf("encode tree-equivalence details: %w", err)
	}
	ev := Evidence{
		Lane: TreeEquivalenceLane, Subject: subject, Backend: BackendExternal, Runner: rb,
		CasesExact: 1, CasesTotal: 1, Control: ControlNone, Status: StatusPassed,
		StartedAt: started.UTC(), FinishedAt: finished.UTC(), Details: details,
	}
	if !t.Holds() {
		ev.CasesExact, ev.Status, ev.FailingCases = 0, StatusFailed, []string{"tree-equivalence"}
	}
	return ev, nil
}

// shortID returns the first 12 characters of an object id, for messages.
func shortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}
