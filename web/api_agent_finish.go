package web

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/evidence-ledger/ledger/admit"
	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/runs"
	"github.com/go-chi/chi/v5"
)

func (s *Server) handleAgentFinish(w http.ResponseWriter, r *http.Request) {
	a, body, err := s.agentBody(w, r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	var req runs.FinishRequest
	if err := ledger.DecodeStrict(body, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	run, status, err := s.finishRun(r, a, chi.URLParam(r, "id"), req)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, status, RunAnswer{Run: run})
}

// finishRun ends attempt req.Attempt of run id for agent a. It is
// idempotent per (run, attempt): finishing an attempt that this agent
// already finished answers the run as it is (200) and appends nothing.
// A finish for a lease the agent does not hold is refused (409,
// runs.ErrLeaseNotHeld). The evidence and the run-outcome leaf are
// appended in one append, all or nothing.
func (s *Server) finishRun(r *http.Request, a runs.Agent, id string, req runs.FinishRequest) (runs.Run, int, error) {
	ctx := r.Context()
	rs := s.runs
	rs.mu.Lock()
	defer rs.mu.Unlock()
	cur, err := rs.store.Get(ctx, id)
	if err != nil {
		return cur, 0, err
	}
	if req.Attempt >= 1 && req.Attempt <= len(cur.Attempts) {
		if prev := cur.Attempts[req.Attempt-1]; prev.Agent == a.Name && prev.Outcome != "infrastructure" {
			return cur, http.StatusOK, nil // already finished by this agent: the same answer again
		}
	}
	if err := admit.LeaseHolder(principalOf(r), req.Lease); err != nil {
		return cur, 0, err
	}
	run, err := rs.store.CheckLease(ctx, id, a.Name, req.Attempt, req.Lease)
	if err != nil {
		return run, 0, err
	}
	now := s.cfg.Now().UTC()
	attempt := ledger.RunAttempt{Attempt: req.Attempt, Agent: a.Name, At: now, Reason: runs.CleanText(req.Message, runs.MaxMessage)}
	switch req.Status {
	case "error":
		return s.finishInfrastructure(ctx, run, attempt)
	case "canceled":
		if run.State != runs.Canceling {
			return run, 0, ledger.FieldError("status", "canceled: the run was not canceled (state %s); finish it as completed or error", run.State)
		}
		if len(req.Evidence) > 0 || len(req.Staged) > 0 {
			return run, 0, ledger.FieldError("evidence", "a canceled attempt records nothing")
		}
		attempt.Outcome = "canceled"
		run.State, run.Agent, run.Attempts = runs.Canceled, a.Name, append(run.Attempts, attempt)
		return s.appendFinish(ctx, run, req.Lease, nil, nil)
	case "completed":
		if run.State == runs.Canceling {
			// The lanes ended before the agent saw the cancel: the run is
			// canceled all the same, and nothing it ran is recorded.
			attempt.Outcome, attempt.Reason = "canceled", "canceled while the lanes finished: their evidence is not recorded"
			run.State, run.Agent, run.Attempts = runs.Canceled, a.Name, append(run.Attempts, attempt)
			return s.appendFinish(ctx, run, req.Lease, nil, nil)
		}
	default:
		return run, 0, ledger.FieldError("status", "must be completed, canceled or error, got %q", clipText(req.Status))
	}
	recs, ids, passed, err := s.finishEvidence(r, a, run, req)
	if err != nil {
		return run, 0, err
	}
	attempt.Outcome = "finished"
	run.State = runs.Failed
	if passed {
		run.State = runs.Done
	}
	run.Agent, run.Attempts, run.Evidence = a.Name, append(run.Attempts, attempt), ids
	return s.appendFinish(ctx, run, req.Lease, recs, ids)
}

// finishInfrastructure ends an attempt the agent could not run: recorded
// as an infrastructure failure, the run queued again (or expired when its
// attempts are used up).
func (s *Server) finishInfrastructure(ctx context.Context, run runs.Run, attempt ledger.RunAttempt) (runs.Run, int, error) {
	attempt.Outcome = "infrastructure"
	if attempt.Reason == "" {
		attempt.Reason = "the agent could not run the attempt"
	}
	got, err := s.runs.store.Abandon(ctx, run.ID, run.LeaseID, attempt)
	if err != nil {
		return got, 0, err
	}
	s.runs.staged.drop(run.ID, nil)
	s.runs.changed.wakeAll()
	if runs.Final(got.State) {
		if err := s.appendOutcome(ctx, got); err != nil {
			return got, 0, err
		}
		got, err = s.runs.store.Get(ctx, run.ID)
	} else {
		s.runs.wakeAll()
	}
	return got, http.StatusOK, err
}

// finishEvidence gathers the evidence of a completed attempt: the
// envelopes req carries, checked now (checkEnvelopes), and the records it
// names as staged for this (run, attempt, lease), checked when they were
// staged; one per lane of the run. It returns the records, their content
// ids and whether every lane passed. A staged digest the server does not
// hold is a CodeConflict error naming staged[i].
func (s *Server) finishEvidence(r *http.Request, a runs.Agent, run runs.Run, req runs.FinishRequest) ([]ledger.Record, []string, bool, error) {
	if n := len(req.Evidence) + len(req.Staged); n != len(run.Lanes) {
		return nil, nil, false, ledger.FieldError("evidence", "a completed finish carries one envelope per lane of run %s (%d: %s), sent in evidence or named in staged; this one carries %d (an attempt that could not run its lanes finishes with status error)", run.ID, len(run.Lanes), strings.Join(run.Lanes, ", "), n)
	}
	staged, err := s.runs.staged.take(stageKey{run: run.ID, attempt: req.Attempt, lease: req.Lease}, req.Staged)
	if err != nil {
		return nil, nil, false, err
	}
	sent, err := s.checkEnvelopes(r, a, run, req.Evidence, func(i int) string { return fmt.Sprintf("evidence[%d]", i) })
	if err != nil {
		return nil, nil, false, err
	}
	all := append(staged, sent...)
	recs := make([]ledger.Record, len(all))
	ids := make([]string, len(all))
	seen := map[string]bool{}
	passed := true
	for i, lr := range all {
		if seen[ledger.LaneName(lr.lane)] {
			field := fmt.Sprintf("evidence[%d].lane", i-len(staged))
			if i < len(staged) {
				field = fmt.Sprintf("staged[%d]", i)
			}
			return nil, nil, false, ledger.FieldError(field, "lane %q twice", lr.lane)
		}
		seen[ledger.LaneName(lr.lane)] = true
		passed = passed && lr.passed
	}
	// The records go in the run's lane order, however they came.
	slices.SortStableFunc(all, func(x, y laneRecord) int { return laneIndex(run.Lanes, x.lane) - laneIndex(run.Lanes, y.lane) })
	for i, lr := range all {
		recs[i], ids[i] = lr.rec, lr.id
	}
	return recs, ids, passed, nil
}

// laneIndex is the position of lane (name or name/vN) in lanes.
func laneIndex(lanes []string, lane string) int {
	for i, l := range lanes {
		if l == lane || l == ledger.LaneName(lane) {
			return i
		}
	}
	return len(lanes)
}

// appendFinish appends recs and the outcome of run (in its final state)
// in one append, then ends the lease. Caller holds runs.mu.
func (s *Server) appendFinish(ctx context.Context, run runs.Run, lease string, recs []ledger.Record, ids []string) (runs.Run, int, error) {
	if ids == nil {
		ids = []string{}
	}
	run.Evidence = ids
	body, err := ledger.CanonicalBody(new(run.Outcome(s.cfg.Now())))
	if err != nil {
		return run, 0, err
	}
	all := append(slices.Clone(recs), ledger.Record{Kind: ledger.KindRunOutcome, Body: body})
	res, err := s.store.Append(ctx, all, "run-finish:"+run.ID+":"+strconv.Itoa(run.Attempt))
	if err != nil {
		return run, 0, err
	}
	for _, e := range res.Entries {
		s.metrics.appended.WithLabelValues(string(e.Kind)).Inc()
	}
	outcome := res.Entries[len(res.Entries)-1].ID
	got, err := s.runs.store.Finish(ctx, run.ID, lease, run.State, run.Attempts, ids, outcome, "")
	s.runs.staged.drop(run.ID, nil)
	s.runs.changed.wakeAll()
	if err != nil {
		return got, 0, err
	}
	_ = s.runs.store.Seen(ctx, run.Agent, "", "")
	return got, http.StatusOK, nil
}
