package runner

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
)

// Lane is a named, versioned validation procedure. A lane owns its case
// matrix (stable case ids), its independent reference and its negative
// control; Run executes all of it on env.Backend and returns the raw
// outcome, from which the runner derives the verdict (see Verdict).
// Implementations must be safe to Run more than once.
type Lane interface {
	// Name is "name/vN", e.g. "qmv-bias-sum/v1".
	Name() string
	// Summary is one line for listings.
	Summary() string
	// Definition returns canonical bytes describing the lane: its case
	// matrix, verdict rule and the digests of its own source files. Its
	// SHA-256 is pinned as artifact "lane/<name>" in the evidence.
	Definition() []byte
	// Run runs the lane. An error means the lane could not run (status
	// error); mismatches are reported in the Result, not as errors.
	Run(ctx context.Context, env *Env) (*Result, error)
}

// OnRequest is implemented by lanes that run only when named: Run with no
// lanes selected skips a lane whose OnRequest returns true (a throughput
// lane takes minutes where the others take seconds).
type OnRequest interface {
	OnRequest() bool
}

// CaseSelector is implemented by lanes that honour Env.Cases.
type CaseSelector interface {
	SelectsCases() bool
}

// CaseLister is implemented by lanes that select cases and list the ids
// Env.Cases' globs select from.
type CaseLister interface {
	CaseIDs() []string
}

// CaseIDs lists the ids of ThroughputCases, in matrix order. It is
// outside throughput_lane.go, whose digest is part of the lane's
// definition.
func (throughputLane) CaseIDs() []string {
	cs := ThroughputCases()
	ids := make([]string, len(cs))
	for i, c := range cs {
		ids[i] = c.ID
	}
	return ids
}

// CaseLanes returns every registered lane that selects cases
// (SelectsCases), by name/vN, with its case ids (CaseLister; none when it
// lists none): what a server checks a queued run's case selection against
// (runs.Spec.CheckCases).
func CaseLanes() map[string][]string {
	out := map[string][]string{}
	for _, l := range Lanes() {
		if !SelectsCases(l) {
			continue
		}
		var ids []string
		if c, ok := l.(CaseLister); ok {
			ids = c.CaseIDs()
		}
		out[l.Name()] = ids
	}
	return out
}

// IsOnRequest reports whether l runs only when named (OnRequest).
func IsOnRequest(l Lane) bool {
	o, ok := l.(OnRequest)
	return ok && o.OnRequest()
}

// SelectsCases reports whether l honours Env.Cases (CaseSelector).
func SelectsCases(l Lane) bool {
	c, ok := l.(CaseSelector)
	return ok && c.SelectsCases()
}

// DefaultLanes returns the registered lanes that run when none is named:
// every lane but those on request, in registration order.
func DefaultLanes() []Lane {
	var out []Lane
	for _, l := range Lanes() {
		if !IsOnRequest(l) {
			out = append(out, l)
		}
	}
	return out
}

// Env is what a lane runs with.
type Env struct {
	Backend Backend
	// Progress, when not nil, is called with the number of finished and
	// total work units (cases, snapshots); calls come from the lane's
	// goroutine.
	Progress func(done, total int)
	// Snapshots overrides the number of snapshots of alloc-snapshot/v1
	// (0: the lane's 20,000). Only tests and benchmarks set it.
	Snapshots int
	// Cases selects the cases of lanes that select cases (SelectsCases):
	// globs on case ids (path.Match; see SelectThroughputCases), a case
	// runs when any glob matches; empty runs every case.
	Cases []string
	// CaseBudget caps the measuring time of one case of a throughput lane
	// (0: 5 s); MaxSamples caps its samples per arm (0: 200, at most
	// ledger.MaxThroughputSamples).
	CaseBudget time.Duration
	MaxSamples int
}

func (e *Env) progress(done, total int) {
	if e.Progress != nil {
		e.Progress(done, total)
	}
}

// Result is the raw outcome of one lane run.
type Result struct {
	// Total and Exact count the cases of the implementation under test.
	Total, Exact int
	// Failing lists the ids of every case that was not exact.
	Failing []string
	// Cases are per-case results kept in the evidence details (lanes with
	// very many cases may keep only failing ones plus a sample).
	Cases []ledger.CaseResult
	// Control is the negative control's outcome.
	Control ControlResult
	// Details holds lane-specific extras (parameters, timing), JSON
	// encodable.
	Details map[string]any
}

// ControlResult is the outcome of a lane's negative control: Outcome is
// ledger.ControlCaught when the known-faulty variant was told apart
// exactly as predicted, ledger.ControlNotCaught otherwise (and
// ledger.ControlNone for lanes without a control).
type ControlResult struct {
	Outcome ledger.Control `json:"outcome"`
	Summary string         `json:"summary"`
	Details any            `json:"details,omitempty"`
}

// Verdict derives a lane run's status: error when the lane could not run;
// failed when any case was not exact; inconclusive when the negative
// control was not caught (the lane did not show it can tell right from
// wrong); passed otherwise.
func Verdict(r *Result, err error) ledger.Status {
	switch {
	case err != nil || r == nil:
		return ledger.StatusError
	case r.Exact < r.Total || r.Total == 0:
		return ledger.StatusFailed
	case r.Control.Outcome == ledger.ControlNotCaught:
		return ledger.StatusInconclusive
	}
	return ledger.StatusPassed
}

var (
	lanesMu sync.Mutex
	lanes   []Lane
)

// RegisterLane adds a lane to the registry; it panics on an invalid or
// duplicate name (meant for init functions).
func RegisterLane(l Lane) {
	lanesMu.Lock()
	defer lanesMu.Unlock()
	if !ledger.ValidLane(l.Name()) {
		panic("runner: invalid lane name " + l.Name())
	}
	for _, x := range lanes {
		if x.Name() == l.Name() {
			panic("runner: lane " + l.Name() + " registered twice")
		}
	}
	lanes = append(lanes, l)
}

// Lanes returns the registered lanes in registration order.
func Lanes() []Lane {
	lanesMu.Lock()
	defer lanesMu.Unlock()
	return append([]Lane(nil), lanes...)
}

// LookupLane returns the lane called name ("name/vN", or just "name" when
// one version is registered).
func LookupLane(name string) (Lane, error) {
	var found []Lane
	for _, l := range Lanes() {
		if l.Name() == name {
			return l, nil
		}
		if ledger.LaneName(l.Name()) == name {
			found = append(found, l)
		}
	}
	if len(found) == 1 {
		return found[0], nil
	}
	names := []string{}
	for _, l := range Lanes() {
		names = append(names, l.Name())
	}
	return nil, fmt.Errorf("unknown lane %q (registered: %v)", name, names)
}
