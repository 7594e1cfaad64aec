package admit

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/ledger/auth"
	"github.com/evidence-ledger/ledger/runs"
	"github.com/evidence-ledger/ledger/verify"
)

// RefuseAgentSigner refuses evidence posted outside a run and signed by
// an approved agent's key (a runner key of kind agent): an agent records
// only through the runs whose leases it holds, where the server checks
// each record against the run's lanes and backend and the agent's
// declared configuration (AgentUndeclared). CodeForbidden naming
// prefix + "signer".
func RefuseAgentSigner(reg auth.RunnerRegistry, s ledger.Signer, prefix string) error {
	if st, ok := reg.ByEntry(s.KeyEntry); ok && st.Kind == ledger.RunnerKindAgent {
		return &Refusal{Rule: AgentUndeclared, Err: &ledger.Error{Code: ledger.CodeForbidden, Field: prefix + ledger.SignerField,
			Message: fmt.Sprintf("signed by agent %s's key: an agent's evidence is recorded only through the runs it holds (POST /api/v1/agent/runs/{id}/finish), nothing was recorded", s.Runner)}}
	}
	return nil
}

// RefuseAgentSignature is RefuseAgentSigner for every signature of a
// DSSE envelope of payloadType, not only the one its Signer names: an
// envelope with a signature of an agent's key (its keyid names one, or it
// verifies under one: verify.SignatureOfKind) beside a runner's is
// refused, CodeForbidden naming prefix + "signatures[i]"
// (AgentUndeclared).
func RefuseAgentSignature(reg auth.RunnerRegistry, envelope []byte, payloadType, prefix string) error {
	if i, st, ok := verify.SignatureOfKind(envelope, payloadType, reg, ledger.RunnerKindAgent); ok {
		return &Refusal{Rule: AgentUndeclared, Err: &ledger.Error{Code: ledger.CodeForbidden, Field: fmt.Sprintf("%ssignatures[%d]", prefix, i),
			Message: fmt.Sprintf("a signature of agent %s's key: an agent's evidence is recorded only through the runs it holds (POST /api/v1/agent/runs/{id}/finish), nothing was recorded", st.Name)}}
	}
	return nil
}

// LeaseHolder refuses (CodeForbidden, AgentLease) a heartbeat, staging or
// finish of lease by a principal whose token is not the one the lease was
// taken with: an agent heartbeats, stages and finishes with the token it
// polled with, so that its records stay within that token's scope and are
// attributed to it. A lease that names no holder passes (its lease check
// in the run store refuses a misnamed one).
func LeaseHolder(p Principal, lease string) error {
	holder := runs.LeaseHolder(lease)
	if holder == "" || p.Token.ID == holder {
		return nil
	}
	return &Refusal{Rule: AgentLease, Err: ledger.Errorf(ledger.CodeForbidden, "the lease was taken with token %s, and this request carries another: an agent heartbeats, stages and finishes with the token it polled with", clipText(holder))}
}

// clipText is s cut to 64 bytes (and an ellipsis), for quoting a
// caller's text in a refusal.
func clipText(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

// RunRecord is one admitted record of a run's lane: the prepared record,
// its entry id, its lane and whether it passed.
type RunRecord struct {
	Record ledger.Record
	ID     string
	Lane   string
	Passed bool
}

// RunEvidence admits the envelopes envs that agent a (principal p: the
// agent, with the token it polled with) sends for run, at now. Each must
// be a DSSE envelope signed by the agent's own approved key (not another
// runner's), in p's token scope, for a lane of the run on its backend,
// commit and repository, within what the agent declared (its lanes,
// backend, build repository and commit, approved hardware), naming the
// run and its current attempt (evidence.run), and started no earlier than
// the attempt could begin and finished no later than now, each less
// runs.MaxSkew (AgentUndeclared, AgentLease); stamped and prepared as an
// append would. field(i) names the i-th envelope in refusals. It does not
// check that lanes are distinct or complete.
func RunEvidence(ctx context.Context, keys ledger.Queries, p Principal, a runs.Agent, run runs.Run, envs []json.RawMessage, now time.Time, field func(int) string) ([]RunRecord, error) {
	recs, err := Admit(ctx, keys, p, Evidence{Raws: envs, DSSEOnly: true, OfRun: true, Prefix: func(i int) string { return field(i) + "." }})
	if err != nil {
		return nil, err
	}
	out := make([]RunRecord, len(recs))
	floor := AttemptFloor(run)
	for i, rec := range recs {
		pr, err := ledger.PrepareOne(rec)
		if err != nil {
			return nil, prefixed(err, field(i)+".")
		}
		e := pr.Evidence
		f := field(i)
		undeclared := func(field, format string, args ...any) error {
			return refuse(AgentUndeclared, ledger.FieldError(field, format, args...))
		}
		switch {
		case e.Signer == nil || e.Signer.Runner != a.Name || e.Signer.KeyID != a.KeyID:
			return nil, undeclared(f+".signatures", "must be signed by agent %s's own key", a.Name)
		case !slices.Contains(run.Lanes, e.Lane) && !slices.Contains(run.Lanes, ledger.LaneName(e.Lane)):
			return nil, undeclared(f+".lane", "lane %q is not a lane of run %s", e.Lane, run.ID)
		case e.Backend != run.Backend:
			return nil, undeclared(f+".backend", "run %s is for backend %s, not %s", run.ID, run.Backend, e.Backend)
		case run.Commit != "" && e.Subject.Commit != run.Commit:
			return nil, undeclared(f+".subject.commit", "run %s is for commit %s", run.ID, run.Commit)
		case run.Repository != "" && e.Subject.Repository != run.Repository:
			return nil, undeclared(f+".subject.repository", "run %s is for repository %s", run.ID, run.Repository)
		// What the agent declared binds as the run does: an agent records
		// only its own build, lanes and backend (TRUST.md), also for a run
		// that names no repository or commit. A registration stored
		// without a repository or commit (registration refuses one now)
		// matches no evidence: empty declares nothing, not "any".
		case !slices.Contains(a.Spec.Lanes, e.Lane) && !slices.Contains(a.Spec.Lanes, ledger.LaneName(e.Lane)):
			return nil, undeclared(f+".lane", "lane %q is not in agent %s's declared configuration", e.Lane, a.Name)
		case e.Backend != a.Backend:
			return nil, undeclared(f+".backend", "agent %s declared backend %s, not %s", a.Name, a.Backend, e.Backend)
		case a.Spec.Repository == "" || a.Spec.Commit == "":
			return nil, undeclared(f+".subject", "agent %s declared no build (spec.repository and spec.commit), so it records nothing: an admin removes it (`ledger agent remove %s`) and it registers again", a.Name, a.Name)
		case e.Subject.Repository != a.Spec.Repository:
			return nil, undeclared(f+".subject.repository", "agent %s declared builds of repository %s", a.Name, a.Spec.Repository)
		case e.Subject.Commit != a.Spec.Commit:
			return nil, undeclared(f+".subject.commit", "agent %s declared a build of commit %s", a.Name, a.Spec.Commit)
		}
		// The hardware a record names is the hardware approved: an agent
		// records lanes of its own device.
		if m := runs.DeviceChange(a.Spec.Device, e.Device); m != "" {
			return nil, undeclared(f+".device."+m, "agent %s registered (and was approved with) other hardware: %s", a.Name, deviceText(a.Spec.Device, m))
		}
		if err := CheckAttempt(f, e, a, run, floor, now); err != nil {
			return nil, err
		}
		// The run's Append does not prepare it again.
		out[i] = RunRecord{Record: pr.Record(), ID: pr.ID, Lane: e.Lane, Passed: e.Status == ledger.StatusPassed}
	}
	return out, nil
}

// CheckAttempt checks that evidence e (field f of agent a's finish or
// staging for run) was run for the attempt the agent holds (AgentLease):
// it names that run and attempt, so evidence of another run or attempt (a
// replay, or one set of lanes offered to two runs) is not this one's; it
// started no earlier than floor (AttemptFloor) and finished no later than
// now, by the agent's clock, which its signed requests keep within
// runs.MaxSkew of the server's. CodeInvalid naming the member.
func CheckAttempt(f string, e *ledger.Evidence, a runs.Agent, run runs.Run, floor, now time.Time) error {
	var err *ledger.Error
	switch {
	case e.Run == nil:
		err = ledger.FieldError(f+".run", "required: the run and attempt the lane was run for (run %s, attempt %d)", run.ID, run.Attempt)
	case e.Run.ID != run.ID || e.Run.Attempt != run.Attempt:
		err = ledger.FieldError(f+".run", "names run %s attempt %d, not run %s attempt %d, whose lease agent %s holds: evidence run for another run or attempt is not recorded for this one", e.Run.ID, e.Run.Attempt, run.ID, run.Attempt, a.Name)
	case e.StartedAt.Before(floor.Add(-runs.MaxSkew)):
		err = ledger.FieldError(f+".started_at", "is %s, before attempt %d of run %s could begin (%s, less %s of clock skew): a run records only lanes run under its lease", e.StartedAt.UTC().Format(time.RFC3339), run.Attempt, run.ID, floor.UTC().Format(time.RFC3339), runs.MaxSkew)
	case e.FinishedAt.After(now.Add(runs.MaxSkew)):
		err = ledger.FieldError(f+".finished_at", "is %s, more than %s after the server's clock (%s)", e.FinishedAt.UTC().Format(time.RFC3339), runs.MaxSkew, now.UTC().Format(time.RFC3339))
	default:
		return nil
	}
	return &Refusal{Rule: AgentLease, Err: err}
}

// AttemptFloor is the earliest time run's current attempt can have
// begun: when the previous attempt ended (its lease expired or its agent
// gave it up), or, for the first, when the run was queued.
func AttemptFloor(run runs.Run) time.Time {
	floor := run.CreatedAt
	for _, at := range run.Attempts {
		if at.At.After(floor) {
			floor = at.At
		}
	}
	return floor
}

// deviceText names member m (from runs.DeviceChange) of registered device
// d as it was registered, escaped.
func deviceText(d ledger.Device, m string) string {
	switch m {
	case "model":
		return "model " + strconv.Quote(runs.Visible(d.Model))
	case "cores":
		return "cores " + strconv.Itoa(d.Cores)
	}
	k := strings.TrimPrefix(m, "attrs.")
	return k + " " + strconv.Quote(runs.Visible(d.Attrs[k]))
}

// AgentServes is the filter of runs agent a may take with token t
// (AgentUndeclared, CIScope): its backend, labels and build
// (runs.Serves), every lane in its own configuration, and every lane in
// t's scope.
func AgentServes(a runs.Agent, t ledger.Token) func(runs.Run) bool {
	return func(r runs.Run) bool {
		if !runs.Serves(r, a.Backend, a.Labels, a.Spec.Commit) {
			return false
		}
		if r.Repository != "" && r.Repository != a.Spec.Repository {
			return false
		}
		for _, l := range r.Lanes {
			if !slices.Contains(a.Spec.Lanes, l) && !slices.Contains(a.Spec.Lanes, ledger.LaneName(l)) {
				return false
			}
			if _, ok := t.Covers(a.Spec.Repository, l, r.Backend); !ok {
				return false
			}
		}
		return true
	}
}
