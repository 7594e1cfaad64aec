package gates

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/ledger/auth"
)

// runnerCache is the runner-key registry as of an evaluation's size,
// loaded on first use by a gate with signed_by (most releases have none).
type runnerCache struct {
	once sync.Once
	reg  auth.RunnerRegistry
	err  error
}

// runCache maps the id of every evidence entry a run-outcome entry lists,
// as of an evaluation's size, to the run and the agent that finished it;
// loaded on first use by a gate with runner: agent.
type runCache struct {
	once sync.Once
	byEv map[string]runOf
	err  error
}

type runOf struct{ run, agent string }

// loadRunOutcomes reads every run-outcome entry as of asOf, paging to the
// end; an entry that does not decode is an error, not a skip.
func loadRunOutcomes(ctx context.Context, q ledger.Queries, asOf uint64) (map[string]runOf, error) {
	out := map[string]runOf{}
	f := ledger.EntryFilter{Kind: ledger.KindRunOutcome, AsOfSize: asOf, Limit: 1000}
	for {
		es, next, err := q.Entries(ctx, f)
		if err != nil {
			return nil, err
		}
		for _, e := range es {
			var o ledger.RunOutcome
			if err := ledger.DecodeStrict(e.Body, &o); err != nil {
				return nil, fmt.Errorf("run-outcome entry %d does not decode: %w", e.Index, err)
			}
			for _, id := range o.Evidence {
				out[id] = runOf{run: o.Run, agent: o.Agent}
			}
		}
		if next == "" {
			return out, nil
		}
		f.Cursor = next
	}
}

// checkSignedBy checks a gate's signed_by: runner names, no duplicates.
func checkSignedBy(_ *kindSpec, g *Gate, f string, _ map[string]bool) error {
	seen := map[string]bool{}
	for j, n := range g.SignedBy {
		if !ledger.ValidRunnerName(n) {
			return ledger.FieldError(fmt.Sprintf("%s.signed_by[%d]", f, j), "must be a runner name (1-64 of [a-z0-9._-]), got %q", n)
		}
		if seen[n] {
			return ledger.FieldError(fmt.Sprintf("%s.signed_by[%d]", f, j), "duplicate runner %q", n)
		}
		seen[n] = true
	}
	if g.Runner != "" && g.Runner != ledger.RunnerKindAgent {
		return ledger.FieldError(f+".runner", "must be %q (only evidence an approved agent signed counts), got %q", ledger.RunnerKindAgent, g.Runner)
	}
	if len(g.AgentLabels) > 0 && g.Runner != ledger.RunnerKindAgent {
		return ledger.FieldError(f+".agent_labels", "needs runner: agent (labels are an approved agent's)")
	}
	return ledger.ValidateLabels(f+".agent_labels", g.AgentLabels)
}

// labelsLacking returns the "k=v" of want that have lacks (a missing key
// or another value), sorted.
func labelsLacking(have, want map[string]string) []string {
	var out []string
	for k, v := range want {
		if got, ok := have[k]; !ok || got != v {
			out = append(out, k+"="+v)
		}
	}
	slices.Sort(out)
	return out
}

// labelText is labels as sorted "k=v" joined by ", ", or "none".
func labelText(l map[string]string) string {
	if len(l) == 0 {
		return "none"
	}
	out := make([]string, 0, len(l))
	for k, v := range l {
		out = append(out, k+"="+v)
	}
	slices.Sort(out)
	return strings.Join(out, ", ")
}

// signerMismatch returns why e does not count for a gate that requires
// signed_by, or "" when the gate requires none or e is signed by one of the
// runners it names with a key that was registered and, as of the
// evaluation, not revoked, and whose kept envelope verifies under that
// key (ledger.Signer.Check). The server sets a signer only after verifying
// the DSSE envelope (TRUST.md rule 1); the gate checks the signature again
// so that no other path into the log can make a signer count. A key
// revoked later revokes what it signed. An error loading the registry is
// returned as the reason, so the evidence does not count.
//
// A gate with runner: agent counts, in the same way, only evidence signed
// by a registered key of kind agent (an approved agent's) that a run
// produced: a run-outcome entry, appended with the evidence when the run
// finished, lists its id (the entry's, id) and names the signer as the
// agent that finished the run. The server checked then that the evidence
// is the run's, for its lanes and backend, from the agent holding its
// lease; evidence an agent's key signed outside a run does not count.
// With agent_labels, the signing key's approval must have recorded every
// label the gate names, with the same value.
func (ev *evaluator) signerMismatch(id string, e *ledger.Evidence, g *Gate) string {
	if len(g.SignedBy) == 0 && g.Runner == "" {
		return "" // agent_labels needs runner: agent (checkSignedBy)
	}
	want := strings.Join(g.SignedBy, ", ")
	s := e.Signer
	switch {
	case s == nil && len(g.SignedBy) > 0:
		return fmt.Sprintf("unsigned: the gate counts only evidence signed by runner %s (signed_by)", want)
	case s == nil:
		return "unsigned: the gate counts only evidence an approved agent produced and signed (runner: agent)"
	}
	if len(g.SignedBy) > 0 && !slices.Contains(g.SignedBy, s.Runner) {
		return fmt.Sprintf("signed by runner %s, not by %s (signed_by)", s.Runner, want)
	}
	st, why := ev.signerKey(s)
	if why != "" {
		return why
	}
	if g.Runner == ledger.RunnerKindAgent && st.Kind != ledger.RunnerKindAgent {
		return fmt.Sprintf("signed by runner %s, whose key is not an approved agent's (runner: agent)", s.Runner)
	}
	if g.Runner == ledger.RunnerKindAgent {
		ev.runOutcomes.once.Do(func() { ev.runOutcomes.byEv, ev.runOutcomes.err = loadRunOutcomes(ev.ctx, ev.store, ev.asOf) })
		if ev.runOutcomes.err != nil {
			return fmt.Sprintf("run outcomes could not be read: %v", ev.runOutcomes.err)
		}
		ro, ok := ev.runOutcomes.byEv[id]
		switch {
		case !ok:
			return fmt.Sprintf("signed by agent %s but produced by no run: no run-outcome entry lists it (runner: agent counts only evidence an agent recorded for a run it held)", s.Runner)
		case ro.agent != s.Runner:
			return fmt.Sprintf("listed by run %s, which agent %s finished, but signed by %s (runner: agent)", ro.run, ro.agent, s.Runner)
		}
		if lack := labelsLacking(st.Labels, g.AgentLabels); len(lack) > 0 {
			return fmt.Sprintf("produced by agent %s, whose approval recorded labels %s, without %s (agent_labels)", s.Runner, labelText(st.Labels), strings.Join(lack, ", "))
		}
	}
	return ""
}

// signerKey returns the registry state of the key that signed s, or why
// s does not stand: the registry could not be read, no runner-key entry
// registered the key (or it names another runner or key id), the key was
// revoked as of the evaluation (a key revoked later revokes what it
// signed), or the kept envelope does not verify under the key
// (ledger.Signer.Check).
func (ev *evaluator) signerKey(s *ledger.Signer) (auth.RunnerState, string) {
	ev.runners.once.Do(func() { ev.runners.reg, ev.runners.err = auth.LoadRunnerKeys(ev.ctx, ev.store, ev.asOf) })
	if ev.runners.err != nil {
		return auth.RunnerState{}, fmt.Sprintf("runner keys could not be read: %v", ev.runners.err)
	}
	st, ok := ev.runners.reg.ByEntry(s.KeyEntry)
	switch {
	case !ok || st.KeyID != s.KeyID || st.Name != s.Runner:
		return st, fmt.Sprintf("signed by %s with key %s, which no runner-key entry registered", s.Runner, s.KeyID)
	case st.Revoked:
		return st, fmt.Sprintf("signed by runner %s's key %s, revoked at index %d: %s", s.Runner, s.KeyID, st.RevokedIndex, st.Reason)
	}
	if err := s.Check(st.PublicKey); err != nil {
		return st, fmt.Sprintf("signer %s: %v", s.Runner, err)
	}
	return st, ""
}
