package runs

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
)

// ErrLeaseNotHeld is the CodeConflict error of an extend, staging or
// finish that names a lease the caller does not hold (another agent's,
// another attempt's, an expired one, or one of a final run).
var ErrLeaseNotHeld = ledger.Errorf(ledger.CodeConflict, "lease not held: the run's lease belongs to another agent or attempt, or has expired; nothing was recorded")

// LeaseHolder returns the token id a lease id was bound to by ClaimFor
// ("" for a lease bound to none).
func LeaseHolder(lease string) string {
	if _, h, ok := strings.Cut(lease, "."); ok {
		return h
	}
	return ""
}

// Serves reports whether an agent with backend, labels and commit may
// take run r: same backend, every label of the run present with the same
// value, and the run's commit (when it names one) equal to the agent's.
func Serves(r Run, backend ledger.Backend, labels map[string]string, commit string) bool {
	if r.Backend != backend {
		return false
	}
	for k, v := range r.Labels {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	return r.Commit == "" || r.Commit == commit
}

// Claim gives the oldest queued run that agent may take (filter reports
// that, Serves plus the token's scope) a lease of ttl: the run's attempt
// is incremented, its state becomes leased. It returns nil when no queued
// run matches, or when agent holds a lease already (an agent runs one run
// at a time). Two claims of one run cannot both win: the update is a
// compare-and-set on (state, attempt). The held-lease check is in the same
// statement, which on SQLite (one writer) makes two claims of one agent
// unable to both win; on PostgreSQL (read committed) the caller serializes
// one agent's claims.
func (s *Store) Claim(ctx context.Context, agent string, filter func(Run) bool, ttl time.Duration) (*Run, error) {
	return s.ClaimFor(ctx, agent, "", filter, ttl)
}

// ClaimFor is Claim with the lease bound to holder (the id of the token
// the agent polled with; "" binds none): the lease id carries it, and
// LeaseHolder gives it back, so that only requests with that token
// extend, stage under or finish the lease.
func (s *Store) ClaimFor(ctx context.Context, agent, holder string, filter func(Run) bool, ttl time.Duration) (*Run, error) {
	if strings.Contains(holder, ".") {
		return nil, fmt.Errorf("claim: holder %q has a dot", holder)
	}
	queued, err := s.queryRuns(ctx, `SELECT `+runCols+` FROM runs WHERE state = 'queued' ORDER BY created_at, id LIMIT 200`)
	if err != nil {
		return nil, err
	}
	for _, r := range queued {
		if !filter(r) {
			continue
		}
		now := s.now()
		lease := newID("lease_")
		if holder != "" {
			lease += "." + holder
		}
		res, err := s.exec(ctx, `UPDATE runs SET state = 'leased', attempt = attempt + 1, agent = ?, lease_id = ?, lease_until = ?, updated_at = ?, progress = ?
			WHERE id = ? AND state = 'queued' AND attempt = ?
			AND NOT EXISTS (SELECT 1 FROM runs h WHERE h.agent = ? AND h.state IN ('leased', 'running', 'canceling') AND h.lease_until > ?)`,
			agent, lease, ms(now.Add(ttl)), ms(now), mustJSON(Progress{}), r.ID, r.Attempt, agent, ms(now))
		if err != nil {
			return nil, err
		}
		if n, _ := res.RowsAffected(); n == 1 {
			got, err := s.Get(ctx, r.ID)
			return &got, err
		}
	}
	return nil, nil
}

// HeldBy returns the active runs (leased, running, canceling) whose
// lease agent holds now (its end not passed), oldest first.
func (s *Store) HeldBy(ctx context.Context, agent string) ([]Run, error) {
	return s.queryRuns(ctx, `SELECT `+runCols+` FROM runs WHERE state IN ('leased', 'running', 'canceling') AND agent = ? AND lease_until > ? ORDER BY created_at, id`, agent, ms(s.now()))
}

// held loads run id and checks that (agent, attempt, lease) holds its
// lease now.
func (s *Store) held(ctx context.Context, id, agent string, attempt int, lease string) (Run, error) {
	r, err := s.Get(ctx, id)
	if err != nil {
		return r, err
	}
	if !active(r.State) || r.Agent != agent || r.Attempt != attempt || r.LeaseID != lease || !s.now().Before(r.LeaseUntil) {
		return r, ErrLeaseNotHeld
	}
	return r, nil
}

// Extend extends the lease (agent, attempt, lease) of run id by ttl from
// now and stores progress when not nil (a leased run becomes running). It
// returns the run, whose State is Canceling when a cancel was asked for;
// ErrLeaseNotHeld when the caller does not hold the lease; p.Validate's
// CodeInvalid error (nothing changed) when p is not progress of its lanes.
func (s *Store) Extend(ctx context.Context, id, agent string, attempt int, lease string, p *Progress, ttl time.Duration) (Run, error) {
	r, err := s.held(ctx, id, agent, attempt, lease)
	if err != nil {
		return r, err
	}
	now := s.now()
	state := r.State
	prog := r.Progress
	if p != nil {
		if err := p.Validate(r.Lanes); err != nil {
			return r, err
		}
		prog = *p
		if state == Leased {
			state = Running
		}
	}
	// The lease is checked again in the update: a lease that ran out
	// since the read above is not extended (a claim may have counted on
	// its end).
	res, err := s.exec(ctx, `UPDATE runs SET lease_until = ?, updated_at = ?, progress = ?, state = ?
		WHERE id = ? AND lease_id = ? AND state = ? AND lease_until > ?`, ms(now.Add(ttl)), ms(now), mustJSON(prog), state, id, lease, r.State, ms(now))
	if err != nil {
		return r, err
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return r, ErrLeaseNotHeld
	}
	return s.Get(ctx, id)
}

// CheckLease returns run id when (agent, attempt, lease) holds its lease
// now, else ErrLeaseNotHeld (see Finish).
func (s *Store) CheckLease(ctx context.Context, id, agent string, attempt int, lease string) (Run, error) {
	return s.held(ctx, id, agent, attempt, lease)
}

// Finish ends the attempt held by lease with final state (Done, Failed or
// Canceled), the evidence ids recorded and the run-outcome entry id.
// attempts is the run's attempts with this one added (as the outcome
// leaf carries them). It is a compare-and-set on the lease: ErrLeaseNotHeld
// when another change came first.
func (s *Store) Finish(ctx context.Context, id, lease, state string, attempts []ledger.RunAttempt, evidence []string, entry, message string) (Run, error) {
	now := s.now()
	res, err := s.exec(ctx, `UPDATE runs SET state = ?, attempts = ?, evidence = ?, outcome_entry = ?, message = ?, lease_until = 0, updated_at = ?
		WHERE id = ? AND lease_id = ? AND state IN ('leased', 'running', 'canceling')`,
		state, mustJSON(attempts), mustJSON(evidence), entry, clipN(message, 1024), ms(now), id, lease)
	if err != nil {
		return Run{}, err
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return Run{}, ErrLeaseNotHeld
	}
	return s.Get(ctx, id)
}

// Abandon ends the attempt held by lease as attempt (an infrastructure
// failure the agent reported: it could not run it). The run is queued
// again as the next attempt (its progress cleared), or expired when its
// attempts are used up, or canceled when it was canceling.
// ErrLeaseNotHeld when the lease changed.
func (s *Store) Abandon(ctx context.Context, id, lease string, attempt ledger.RunAttempt) (Run, error) {
	r, err := s.Get(ctx, id)
	if err != nil {
		return r, err
	}
	if r.LeaseID != lease || !active(r.State) {
		return r, ErrLeaseNotHeld
	}
	att := append(slices.Clone(r.Attempts), attempt)
	next, agent := Queued, ""
	switch {
	case r.State == Canceling:
		next, agent = Canceled, r.Agent
	case r.Attempt >= r.MaxAttempts:
		next, agent = Expired, r.Agent
	}
	res, err := s.exec(ctx, `UPDATE runs SET state = ?, attempts = ?, agent = ?, lease_id = '', lease_until = 0, updated_at = ?, message = ?, progress = ?
		WHERE id = ? AND lease_id = ? AND state = ?`, next, mustJSON(att), agent, ms(s.now()), clipN(attempt.Reason, 1024), mustJSON(Progress{}), id, lease, r.State)
	if err != nil {
		return r, err
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return r, ErrLeaseNotHeld
	}
	return s.Get(ctx, id)
}

// Adopt makes an active run final as its outcome leaf o (entry id entry)
// says: state, agent, attempts and evidence. It is for a run whose
// outcome reached the log while its row did not change (a crash between
// the two).
func (s *Store) Adopt(ctx context.Context, o ledger.RunOutcome, entry string) error {
	_, err := s.exec(ctx, `UPDATE runs SET state = ?, agent = ?, attempts = ?, evidence = ?, outcome_entry = ?, lease_id = '', lease_until = 0, updated_at = ?
		WHERE id = ? AND state IN ('queued', 'leased', 'running', 'canceling')`,
		o.State, o.Agent, mustJSON(o.Attempts), mustJSON(o.Evidence), entry, ms(s.now()), o.Run)
	return err
}

// SetOutcome stores the run-outcome entry id of a final run.
func (s *Store) SetOutcome(ctx context.Context, id, entry string) error {
	_, err := s.exec(ctx, `UPDATE runs SET outcome_entry = ?, updated_at = ? WHERE id = ?`, entry, ms(s.now()), id)
	return err
}

// Cancel asks run id to stop: a queued run becomes canceled at once
// (final reports it: the caller appends its outcome), an active one
// canceling (its agent sees it on the next heartbeat and stops at the next
// case boundary). A run already final or canceling is answered as it is.
func (s *Store) Cancel(ctx context.Context, id string) (r Run, final bool, err error) {
	for range 5 {
		r, err := s.Get(ctx, id)
		if err != nil {
			return r, false, err
		}
		var next string
		switch r.State {
		case Queued:
			next = Canceled
		case Leased, Running:
			next = Canceling
		default:
			return r, false, nil
		}
		res, err := s.exec(ctx, `UPDATE runs SET state = ?, updated_at = ? WHERE id = ? AND state = ? AND attempt = ?`, next, ms(s.now()), id, r.State, r.Attempt)
		if err != nil {
			return r, false, err
		}
		if n, _ := res.RowsAffected(); n == 1 {
			got, err := s.Get(ctx, id)
			return got, next == Canceled, err
		}
	}
	return Run{}, false, ledger.Errorf(ledger.CodeConflict, "run %s changed under the cancel five times: try again", id)
}

// ExpireLeases ends every lease past its end: the attempt is recorded as
// an infrastructure failure ("lease expired": the agent stopped extending
// it), never a failed lane. The run goes back to the queue as the next
// attempt (its progress cleared), unless it was canceling (then it is canceled) or its attempts
// are used up (then it is expired). It returns the runs that became final
// (the caller appends their outcomes) and how many were requeued.
func (s *Store) ExpireLeases(ctx context.Context) (final []Run, requeued int, err error) {
	now := s.now()
	due, err := s.queryRuns(ctx, `SELECT `+runCols+` FROM runs WHERE state IN ('leased', 'running', 'canceling') AND lease_until <= ?`, ms(now))
	if err != nil {
		return nil, 0, err
	}
	for _, r := range due {
		att := append(slices.Clone(r.Attempts), ledger.RunAttempt{Attempt: r.Attempt, Agent: r.Agent, Outcome: "infrastructure",
			Reason: fmt.Sprintf("lease expired at %s: agent %s stopped extending it", r.LeaseUntil.Format(time.RFC3339Nano), r.Agent), At: now.UTC()})
		next, agent := Queued, ""
		switch {
		case r.State == Canceling:
			next, agent = Canceled, r.Agent
		case r.Attempt >= r.MaxAttempts:
			next, agent = Expired, r.Agent
		}
		res, err := s.exec(ctx, `UPDATE runs SET state = ?, attempts = ?, agent = ?, lease_id = '', lease_until = 0, updated_at = ?, progress = ?
			WHERE id = ? AND lease_id = ? AND state = ? AND lease_until <= ?`, next, mustJSON(att), agent, ms(now), mustJSON(Progress{}), r.ID, r.LeaseID, r.State, ms(now))
		if err != nil {
			return final, requeued, err
		}
		if n, _ := res.RowsAffected(); n != 1 {
			continue
		}
		if next == Queued {
			requeued++
			continue
		}
		got, err := s.Get(ctx, r.ID)
		if err != nil {
			return final, requeued, err
		}
		final = append(final, got)
	}
	return final, requeued, nil
}

// Unrecorded returns the final runs whose outcome leaf is not appended
// yet (a crash between the state change and the append), oldest first.
func (s *Store) Unrecorded(ctx context.Context) ([]Run, error) {
	return s.queryRuns(ctx, `SELECT `+runCols+` FROM runs WHERE state IN ('done', 'failed', 'canceled', 'expired') AND outcome_entry = '' ORDER BY created_at`)
}
