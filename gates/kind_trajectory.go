package gates

import (
	"fmt"
	"slices"
	"strings"

	"github.com/evidence-ledger/ledger/ledger"
)

// KindTrajectory is the kind of gates over trajectory evidence
// (ledger.Trajectory): token sequences identical across listed modes and
// backends.
const KindTrajectory = "trajectory"

// DefaultTrajectoryLane is the lane of a trajectory gate that names none.
const DefaultTrajectoryLane = ledger.TrajectoryLane

var trajectoryKind = kindSpec{
	name:          KindTrajectory,
	fields:        []string{"lane", "component", "at", "artifacts", "trajectories", "modes", "backends", "signed_by", "runner", "agent_labels"},
	defaultLane:   DefaultTrajectoryLane,
	backendLabels: true, // trajectory backends are runtime labels inside details
	validate: func(g *Gate, f string) error {
		if len(g.Trajectories) == 0 {
			return ledger.FieldError(f+".trajectories", "list the trajectory names to compare")
		}
		if len(g.Modes) == 0 {
			g.Modes = nil
		}
		if max(len(g.Modes), 1)*max(len(g.Backends), 1) < 2 {
			return ledger.FieldError(f+".modes", "a trajectory gate compares at least two mode/backend combinations")
		}
		return nil
	},
	evaluate: (*evaluator).trajectory,
	rule: "Every run at the pins of a listed trajectory, mode and backend counts, not only the newest: " +
		"any run whose tokens differ from the base run (the newest of the first mode/backend) keeps the gate failed until superseded or waived; " +
		"otherwise the gate passes when every mode/backend has a run. Runs with status error are baseline.",
}

// Divergence describes where two trajectories first differ.
type Divergence struct {
	Trajectory string `json:"trajectory"`
	A          string `json:"a"` // mode/backend label of the first sequence
	B          string `json:"b"`
	// Index is ledger.FirstDivergence of the two sequences: the first
	// zero-based position whose tokens differ or where one sequence has
	// ended. TokenA and TokenB are the tokens there; nil for a sequence
	// that has ended.
	Index  int    `json:"index"`
	TokenA *int64 `json:"token_a,omitempty"`
	TokenB *int64 `json:"token_b,omitempty"`
	// AID and BID are the evidence ids of the two runs: the divergent
	// pair.
	AID string `json:"a_id,omitempty"`
	BID string `json:"b_id,omitempty"`
}

// String describes the divergence: "gemma: automatic/paged differs from
// ordinary/paged at index 30 (token 1234 vs 5678)", B's token first; a
// sequence that has ended shows as "ended" ("(ended vs token 5678)").
func (d Divergence) String() string {
	var toks string
	switch {
	case d.TokenA != nil && d.TokenB != nil:
		toks = fmt.Sprintf("token %d vs %d", *d.TokenB, *d.TokenA)
	case d.TokenB != nil:
		toks = fmt.Sprintf("token %d vs ended", *d.TokenB)
	case d.TokenA != nil:
		toks = fmt.Sprintf("ended vs token %d", *d.TokenA)
	default:
		toks = "both ended"
	}
	return fmt.Sprintf("%s: %s differs from %s at index %d (%s)", d.Trajectory, d.B, d.A, d.Index, toks)
}

// cellRun is one counting run of one trajectory, mode and backend.
type cellRun struct {
	e      ledger.EvidenceEntry
	tokens []int64
}

// trajectoryCells are a trajectory gate's counting runs by (trajectory,
// mode, backend), newest first.
type trajectoryCells map[[3]string][]cellRun

func (ev *evaluator) trajectory(g *Gate) (GateResult, error) {
	var res GateResult
	b := ev.bindingOf(g)
	modes, backends := orBlank(g.Modes), orBlank(g.Backends)
	bl := &baselines{limit: ev.baseLim}
	cells, err := ev.trajectoryRuns(g, b, modes, backends, bl)
	if err != nil {
		return res, err
	}
	var divs []Divergence
	for _, t := range g.Trajectories {
		divs = append(divs, cells.compare(&res, t, modes, backends, fmt.Sprintf("at %s %s", b.comp.Name, short(b.commit)))...)
	}
	res.Baseline = bl.list
	switch {
	case len(divs) > 0:
		res.State = StateFailed
		d := divs[0]
		res.Divergence = &d
		// The runs compared are not satisfying evidence of a failed
		// gate: the divergent runs are listed as failing instead.
		res.Satisfying = nil
		var parts []string
		for i, d := range divs {
			if i == 8 {
				parts = append(parts, fmt.Sprintf("and %d more divergent run(s)", len(divs)-i))
				break
			}
			parts = append(parts, d.String())
		}
		res.Reason = strings.Join(parts, "; ")
		res.Missing = append(res.Missing, fmt.Sprintf("identical trajectories across %s", strings.Join(slices.DeleteFunc(append(slices.Clone(g.Modes), g.Backends...), func(s string) bool { return s == "" }), ", ")))
	case len(res.Missing) > 0:
		res.State, res.Reason = StateOpen, fmt.Sprintf("%d trajectory runs missing at the release's pins", len(res.Missing))
	default:
		res.State, res.Reason = StatePassed, fmt.Sprintf("all %d trajectory runs identical", len(res.Satisfying))
	}
	return res, nil
}

func orBlank(labels []string) []string {
	if len(labels) == 0 {
		return []string{""}
	}
	return labels
}

// trajectoryRuns reads the gate's evidence at its commit and keeps every
// counting run of every wanted cell; the rest of the gate's trajectories
// go to bl with the reason.
func (ev *evaluator) trajectoryRuns(g *Gate, b binding, modes, backends []string, bl *baselines) (trajectoryCells, error) {
	cells := trajectoryCells{}
	err := ev.forEachEvidence(ledger.EvidenceFilter{Lane: g.Lane, Commit: b.commit}, func(e ledger.EvidenceEntry) bool {
		d, err := ledger.DecodeTrajectory(e.Evidence.Details)
		switch {
		case err != nil:
			bl.add(e, "details lack trajectory/mode/backend/tokens (see ledger.Trajectory)")
		case !slices.Contains(g.Trajectories, d.Name):
		default:
			if r := ev.excluded(&e, b); r != "" {
				bl.add(e, r)
				break
			}
			if r := ev.signerMismatch(e.ID, &e.Evidence, g); r != "" {
				bl.add(e, r)
				break
			}
			if !slices.Contains(modes, d.Mode) || !slices.Contains(backends, d.Backend) {
				break
			}
			if e.Evidence.Status == ledger.StatusError {
				bl.add(e, "status error")
				break
			}
			k := [3]string{d.Name, d.Mode, d.Backend}
			cells[k] = append(cells[k], cellRun{e, d.Tokens})
		}
		return true
	})
	if err != nil {
		return nil, err
	}
	err = ev.sampleBaseline(g.Lane, b, bl, func(e *ledger.Evidence) bool {
		d, err := ledger.DecodeTrajectory(e.Details)
		return err == nil && slices.Contains(g.Trajectories, d.Name)
	})
	return cells, err
}

// compare lists trajectory t's runs in res (the newest of each cell as
// satisfying, cells without runs as missing, where names the commit) and
// returns how every counting run differs from the base run (the newest of
// the first cell present, in backend-major order); each divergent run is
// also listed in res.Failing with the base run as its pair.
func (cells trajectoryCells) compare(res *GateResult, t string, modes, backends []string, where string) []Divergence {
	label := func(m, b string) string { return strings.Trim(m+"/"+b, "/") }
	var divs []Divergence
	var base *cellRun
	var baseLabel string
	for _, b := range backends {
		for _, m := range modes {
			runs := cells[[3]string{t, m, b}]
			if len(runs) == 0 {
				res.Missing = append(res.Missing, fmt.Sprintf("trajectory %s mode %s backend %s %s", t, m, b, where))
				continue
			}
			r := ref(runs[0].e)
			r.Summary = fmt.Sprintf("%s %s: %d tokens", t, label(m, b), len(runs[0].tokens))
			if len(runs) > 1 {
				r.Summary += fmt.Sprintf(" (%d runs, all compared)", len(runs))
			}
			res.Satisfying = append(res.Satisfying, r)
			for i := range runs {
				c := &runs[i]
				if base == nil {
					base, baseLabel = c, label(m, b)
					continue
				}
				at := ledger.FirstDivergence(base.tokens, c.tokens)
				if at == ledger.NoDivergence {
					continue
				}
				d := Divergence{Trajectory: t, A: baseLabel, B: label(m, b), Index: at, TokenA: ledger.TokenAt(base.tokens, at), TokenB: ledger.TokenAt(c.tokens, at), AID: base.e.ID, BID: c.e.ID}
				divs = append(divs, d)
				f := FailingRef{EvidenceRef: ref(c.e), Reason: d.String(), Trajectory: t, Pair: base.e.ID}
				f.Summary = fmt.Sprintf("%s %s: %d tokens", t, label(m, b), len(c.tokens))
				res.Failing = append(res.Failing, f)
			}
		}
	}
	return divs
}
