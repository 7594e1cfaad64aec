package web

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/evidence-ledger/ledger/admit"
	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/runs"
)

func (s *Server) handleAgentPoll(w http.ResponseWriter, r *http.Request) {
	a, body, err := s.agentBody(w, r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	var req runs.PollRequest
	if len(bytes.TrimSpace(body)) > 0 {
		if err := ledger.DecodeStrict(body, &req); err != nil {
			s.writeError(w, r, err)
			return
		}
	}
	rs := s.runs
	if err := s.releaseHeld(r.Context(), a); err != nil {
		s.writeError(w, r, err)
		return
	}
	wait := min(time.Duration(req.WaitMS)*time.Millisecond, rs.pollWait)
	t, _ := TokenFrom(r.Context())
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	for {
		_ = rs.store.Seen(r.Context(), a.Name, req.Health, "")
		woken := rs.woken()
		rs.claimMu.Lock()
		run, err := rs.store.ClaimFor(r.Context(), a.Name, t.ID, admit.AgentServes(a, t), rs.ttl)
		rs.claimMu.Unlock()
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		if run != nil {
			rs.changed.wakeAll()
			_ = rs.store.Seen(r.Context(), a.Name, "", run.ID)
			s.writeJSON(w, http.StatusOK, runs.LeaseAnswer{Run: *run, Attempt: run.Attempt, Lease: run.LeaseID, LeaseUntil: run.LeaseUntil, LeaseTTLMS: rs.ttl.Milliseconds()})
			return
		}
		select {
		case <-woken:
		case <-deadline.C:
			w.WriteHeader(http.StatusNoContent)
			return
		case <-r.Context().Done():
			return
		}
	}
}

// releaseHeld ends every lease agent a holds when it polls for a run: an
// agent runs one run at a time, so one that polls has given up what it
// held (it restarted, or could not finish). Each attempt is recorded as an
// infrastructure failure and its run queued again at once rather than
// when the lease would have run out (or made final: expired with its
// attempts used up, canceled when canceling, its outcome appended).
func (s *Server) releaseHeld(ctx context.Context, a runs.Agent) error {
	rs := s.runs
	rs.mu.Lock()
	defer rs.mu.Unlock()
	held, err := rs.store.HeldBy(ctx, a.Name)
	if err != nil {
		return err
	}
	for _, run := range held {
		attempt := ledger.RunAttempt{Attempt: run.Attempt, Agent: a.Name, At: s.cfg.Now().UTC(),
			Reason: fmt.Sprintf("agent %s polled for a new run while holding this lease: it restarted or gave the attempt up", a.Name)}
		if _, _, err := s.finishInfrastructure(ctx, run, attempt); err != nil && !errors.Is(err, runs.ErrLeaseNotHeld) {
			return err
		}
	}
	return nil
}
