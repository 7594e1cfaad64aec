// Package runs keeps the bookkeeping of runs queued through the service
// (POST /api/v1/runs) and of the agents that take them: the queue, the
// leases, attempts, progress and the agents' registrations and
// heartbeats. It is mutable state in its own tables (migration 00009),
// not audited; what a run produces (its evidence and its final outcome, a
// ledger.KindRunOutcome leaf) is appended to the log by package web.
//
// The queue is a table with compare-and-set updates rather than a queue
// library: a run is taken by the first agent whose backend, labels, commit
// and token scope satisfy it, which a FIFO receive cannot express, and a
// lease is held by one (agent, lease id) pair that every extend and finish
// must name. See docs/reference/runs-and-agents.md.
//
// A Store is safe for concurrent use; its methods that change a run are
// compare-and-set updates, so two agents claiming one run cannot both win.
package runs

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
)

// The states of a run. Queued, leased, running and canceling are active;
// done, failed, canceled and expired are final (ledger.RunDone and the
// others).
const (
	Queued    = "queued"
	Leased    = "leased"
	Running   = "running"
	Canceling = "canceling"
	Done      = ledger.RunDone
	Failed    = ledger.RunFailed
	Canceled  = ledger.RunCanceled
	Expired   = ledger.RunExpired
)

// Final reports whether state is a final state.
func Final(state string) bool {
	switch state {
	case Done, Failed, Canceled, Expired:
		return true
	}
	return false
}

func active(state string) bool { return state == Leased || state == Running || state == Canceling }

// Progress is the latest progress an agent reported for a run: the lane
// running, its finished and total units, and how many of the run's lanes
// are finished; zero once the run is final.
type Progress struct {
	Lane      string `json:"lane,omitempty"`
	Done      int    `json:"done"`
	Total     int    `json:"total"`
	LanesDone int    `json:"lanes_done"`
}

// MaxProgressTotal is the most cases progress may count in one lane
// (lanes have at most tens of thousands).
const MaxProgressTotal = 1 << 30

// progressOf reports whether progress lane p is run lane l: l itself, l's
// name without its version, or, for an l named without a version, a lane
// name/vN of that name (ledger.ValidLane).
func progressOf(l, p string) bool {
	switch {
	case p == l || p == ledger.LaneName(l):
		return true
	case ledger.LaneName(l) == l:
		return ledger.ValidLane(p) && ledger.LaneName(p) == l
	}
	return false
}

// Validate checks progress p of a run of lanes: its lane is empty or a
// lane of the run (progressOf), and done,
// total and lanes_done are not negative, done at most total and lanes_done
// at most len(lanes), total at most MaxProgressTotal. Errors are
// CodeInvalid naming "progress." and the member; a lane is echoed cut to
// 64 bytes at a rune boundary and escaped.
func (p Progress) Validate(lanes []string) error {
	switch {
	case p.Lane != "" && !slices.ContainsFunc(lanes, func(l string) bool { return progressOf(l, p.Lane) }):
		return ledger.FieldError("progress.lane", "%q is not a lane of the run (%s)", Visible(cut(p.Lane, 64)), strings.Join(lanes, ", "))
	case p.Done < 0 || p.Total < 0 || p.LanesDone < 0:
		return ledger.FieldError("progress", "done, total and lanes_done must not be negative")
	case p.Total > MaxProgressTotal:
		return ledger.FieldError("progress.total", "%d is more than %d", p.Total, MaxProgressTotal)
	case p.Done > p.Total:
		return ledger.FieldError("progress.done", "%d is more than total %d", p.Done, p.Total)
	case p.LanesDone > len(lanes):
		return ledger.FieldError("progress.lanes_done", "%d is more than the run's %d lanes", p.LanesDone, len(lanes))
	}
	return nil
}

// Run is one run's state. LeaseID is the current attempt's lease
// (only the agent holding it sees it; it is not in list answers).
// LeaseUntil is when the lease ends unless extended. Attempts lists every
// ended attempt. Evidence is the content ids of the evidence recorded by
// the finishing attempt, OutcomeEntry the id of the run-outcome leaf.
// The CaseSelection members (cases, case_budget, max_samples) are the
// spec's, left out when it has none.
type Run struct {
	ID      string            `json:"id"`
	State   string            `json:"state"`
	Backend ledger.Backend    `json:"backend"`
	Lanes   []string          `json:"lanes"`
	Labels  map[string]string `json:"labels"`
	ledger.CaseSelection
	Repository   string              `json:"repository,omitempty"`
	Commit       string              `json:"commit,omitempty"`
	Attempt      int                 `json:"attempt"`
	MaxAttempts  int                 `json:"max_attempts"`
	Agent        string              `json:"agent,omitempty"`
	LeaseID      string              `json:"-"`
	LeaseUntil   time.Time           `json:"lease_until,omitzero"`
	Progress     Progress            `json:"progress"`
	Attempts     []ledger.RunAttempt `json:"attempts"`
	Evidence     []string            `json:"evidence"`
	OutcomeEntry string              `json:"outcome_entry,omitempty"`
	Message      string              `json:"message,omitempty"`
	CreatedBy    string              `json:"created_by"`
	CreatedAt    time.Time           `json:"created_at"`
	UpdatedAt    time.Time           `json:"updated_at"`
}

// Outcome returns the run-outcome leaf body of a run in a final state.
func (r Run) Outcome(now time.Time) ledger.RunOutcome {
	return ledger.RunOutcome{Run: r.ID, State: r.State, Backend: r.Backend, Lanes: r.Lanes, Labels: r.Labels, CaseSelection: r.CaseSelection,
		Agent: r.Agent, Evidence: r.Evidence, Attempts: r.Attempts, By: r.CreatedBy, At: now.UTC()}
}

// Spec is what POST /api/v1/runs asks for: the lanes to run on backend,
// the agent labels required (an agent must have every one, with the same
// value), and optionally the repository and commit the agent's own build
// must be of. MaxAttempts (default 3, at most 10) bounds the attempts.
// The CaseSelection members (cases, case_budget, max_samples; JSON
// inline) select and bound the cases of the run's lanes that select cases
// (qmv-throughput/v1), as `ledger run --cases --case-budget --max-samples`
// does locally: a spec with any of them must name such a lane, and each
// glob must select at least one of that lane's cases (CheckCases).
type Spec struct {
	Lanes   []string          `json:"lanes"`
	Backend ledger.Backend    `json:"backend"`
	Labels  map[string]string `json:"labels,omitempty"`
	ledger.CaseSelection
	Repository  string `json:"repository,omitempty"`
	Commit      string `json:"commit,omitempty"`
	MaxAttempts int    `json:"max_attempts,omitempty"`
}

var (
	laneRe   = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,95}(/v[1-9][0-9]{0,5})?$`)
	commitRe = regexp.MustCompile(`^[0-9a-f]{40}([0-9a-f]{24})?$`)
)

// ValidateLabels checks agent or run labels (ledger.ValidateLabels).
func ValidateLabels(field string, l map[string]string) error { return ledger.ValidateLabels(field, l) }

// ParseLabels parses "k=v" flags into labels.
func ParseLabels(flags []string) (map[string]string, error) {
	out := map[string]string{}
	for _, f := range flags {
		k, v, ok := strings.Cut(f, "=")
		if !ok {
			return nil, fmt.Errorf("label %q: want key=value", clip(f))
		}
		out[k] = v
	}
	return out, ValidateLabels("label", out)
}

// Validate checks and normalizes s (lanes deduplicated in order, default
// attempts, the case budget in its canonical form: CaseSelection.Validate,
// without the lanes' case lists, which CheckCases needs); a repository, when set, must be a repository name an agent
// can declare (ValidateRepository). Errors are CodeInvalid naming the
// field.
func (s *Spec) Validate() error {
	if len(s.Lanes) == 0 || len(s.Lanes) > 64 {
		return ledger.FieldError("lanes", "1 to 64 lanes required, got %d", len(s.Lanes))
	}
	var lanes []string
	for i, l := range s.Lanes {
		if !laneRe.MatchString(l) {
			return ledger.FieldError(fmt.Sprintf("lanes[%d]", i), "must be a lane name or name/vN, got %q", clip(l))
		}
		if !slices.Contains(lanes, l) {
			lanes = append(lanes, l)
		}
	}
	s.Lanes = lanes
	if !s.Backend.Valid() {
		return ledger.FieldError("backend", "must be one of %s, got %q", ledger.BackendList(), clip(string(s.Backend)))
	}
	if err := ValidateLabels("labels", s.Labels); err != nil {
		return err
	}
	if s.Labels == nil {
		s.Labels = map[string]string{}
	}
	if s.Repository != "" {
		if err := ValidateRepository("repository", s.Repository); err != nil {
			return err
		}
	}
	if s.Commit != "" && !commitRe.MatchString(s.Commit) {
		return ledger.FieldError("commit", "must be a 40- or 64-hex lowercase commit id")
	}
	if err := s.CaseSelection.Validate(); err != nil {
		return err
	}
	switch {
	case s.MaxAttempts == 0:
		s.MaxAttempts = 3
	case s.MaxAttempts < 1 || s.MaxAttempts > ledger.MaxRunAttempts:
		return ledger.FieldError("max_attempts", "must be 1 to %d, got %d", ledger.MaxRunAttempts, s.MaxAttempts)
	}
	return nil
}

// CaseLanes lists the lanes that select cases, each (name/vN) with the
// ids of its cases: what a server checks a spec's case selection against
// (CheckCases). The server's own build supplies it (runner's lanes); nil
// knows no such lane.
type CaseLanes map[string][]string

// lane returns the entry of cl that run lane l names: l itself, or the
// lane name/vN whose name l is.
func (cl CaseLanes) lane(l string) ([]string, bool) {
	if ids, ok := cl[l]; ok {
		return ids, true
	}
	for name, ids := range cl {
		if ledger.LaneName(name) == l {
			return ids, true
		}
	}
	return nil, false
}

// CheckCases checks s's case selection (after Validate) against cl, the
// rule `ledger run` applies locally: a spec with a selection must name a
// lane of cl, and every glob must select (ledger.MatchCaseGlob) at least
// one case of each lane of cl it names. A spec with no selection passes.
// Errors are CodeInvalid naming "cases", "case_budget", "max_samples"
// (the first set) or "cases[i]".
func (s Spec) CheckCases(cl CaseLanes) error {
	if s.CaseSelection.Empty() {
		return nil
	}
	var named []string
	for _, l := range s.Lanes {
		if _, ok := cl.lane(l); ok {
			named = append(named, l)
		}
	}
	if len(named) == 0 {
		f := "cases"
		switch {
		case len(s.Cases) > 0:
		case s.CaseBudget != "":
			f = "case_budget"
		default:
			f = "max_samples"
		}
		known := slices.Sorted(maps.Keys(cl))
		if len(known) == 0 {
			return ledger.FieldError(f, "applies only to lanes that select cases, and this server knows none")
		}
		return ledger.FieldError(f, "applies only to lanes that select cases (%s); the run's lanes (%s) select none", strings.Join(known, ", "), strings.Join(s.Lanes, ", "))
	}
	for _, l := range named {
		ids, _ := cl.lane(l)
		for i, g := range s.Cases {
			if !slices.ContainsFunc(ids, func(id string) bool { return ledger.MatchCaseGlob(g, id) }) {
				eg := ""
				if len(ids) > 0 {
					eg = " (ids look like " + ids[0] + ")"
				}
				return ledger.FieldError(fmt.Sprintf("cases[%d]", i), "glob %q selects none of the %d cases of %s%s", Visible(clip(g)), len(ids), l, eg)
			}
		}
	}
	return nil
}

// SortedLabels renders labels as "k=v,k=v" sorted by key.
func SortedLabels(l map[string]string) string {
	keys := slices.Collect(maps.Keys(l))
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + l[k]
	}
	return strings.Join(parts, ",")
}

func clip(s string) string { return clipN(s, 64) }

func clipN(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}
