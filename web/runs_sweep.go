package web

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/runs"
)

// runState is the server's part of the runs service: the store, the
// lease settings, the wake-up of long polls, and the mutex that orders
// every change that appends a run's outcome (finish, cancel of a queued
// run, lease expiry) so that a finish and an expiry of one attempt cannot
// both happen.
type runState struct {
	store    *runs.Store
	ttl      time.Duration
	pollWait time.Duration
	mu       sync.Mutex // outcome appends and the state changes beside them
	planMu   sync.Mutex // the release run form's plan-and-queue (no duplicate on a double press)
	claimMu  sync.Mutex // claims, so one agent's concurrent polls take one lease (runs.Store.Claim)
	wakeMu   sync.Mutex
	wake     chan struct{} // closed and replaced when a run becomes queued
	changed  notifier      // woken when any run changes (GET /runs/{id}?wait= waits on it)
	staged   stage         // evidence staged by lease holders, appended only by their finish
}

func (rs *runState) woken() <-chan struct{} {
	rs.wakeMu.Lock()
	defer rs.wakeMu.Unlock()
	return rs.wake
}

func (rs *runState) wakeAll() {
	rs.wakeMu.Lock()
	close(rs.wake)
	rs.wake = make(chan struct{})
	rs.wakeMu.Unlock()
}

func (s *Server) runsOrErr() (*runState, error) {
	if s.runs == nil {
		return nil, ledger.Errorf(ledger.CodeNotFound, "this server runs no runs service (it was started without a run store)")
	}
	return s.runs, nil
}

// StartRuns appends the outcomes of final runs whose outcome leaf is
// missing (a crash between the state change and the append), then ends
// expired leases every sweep until ctx ends. A server without a run store
// returns at once.
func (s *Server) StartRuns(ctx context.Context, sweep time.Duration) error {
	if s.runs == nil {
		return nil
	}
	if err := s.recordUnrecorded(ctx); err != nil {
		return fmt.Errorf("runs: record pending outcomes: %w", err)
	}
	if sweep <= 0 {
		sweep = max(s.runs.ttl/4, 50*time.Millisecond)
	}
	go func() {
		t := time.NewTicker(sweep)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if err := s.expireLeases(ctx); err != nil && ctx.Err() == nil {
					s.log.Warn("runs: lease sweep failed", "err", err)
				}
			}
		}
	}()
	return nil
}

func (s *Server) recordUnrecorded(ctx context.Context) error {
	s.runs.mu.Lock()
	defer s.runs.mu.Unlock()
	pending, err := s.runs.store.Unrecorded(ctx)
	if err != nil {
		return err
	}
	for _, r := range pending {
		if err := s.appendOutcome(ctx, r); err != nil {
			return err
		}
	}
	return s.adoptLoggedOutcomes(ctx)
}

// adoptLoggedOutcomes ends the active runs whose outcome leaf is already in
// the log (a crash between a finish's append and its row update): the
// row takes the leaf's final state, attempts and evidence, so the run is
// not queued again and no second set of evidence is recorded. It reads
// the run-outcome leaves only when some run is active.
func (s *Server) adoptLoggedOutcomes(ctx context.Context) error {
	act, err := s.runs.store.List(ctx, "active", 1000)
	if err != nil || len(act) == 0 {
		return err
	}
	want := map[string]bool{}
	for _, r := range act {
		want[r.ID] = true
	}
	f := ledger.EntryFilter{Kind: ledger.KindRunOutcome, Limit: 1000}
	for {
		es, next, err := s.store.Entries(ctx, f)
		if err != nil {
			return err
		}
		for _, e := range es {
			var o ledger.RunOutcome
			if json.Unmarshal(e.Body, &o) != nil || !want[o.Run] {
				continue
			}
			if err := s.runs.store.Adopt(ctx, o, e.ID); err != nil {
				return err
			}
			s.log.Info("runs: adopted a logged outcome", "run", o.Run, "state", o.State, "entry", e.ID)
			delete(want, o.Run)
		}
		if next == "" || len(want) == 0 {
			return nil
		}
		f.Cursor = next
	}
}

// expireLeases ends the leases past their end (runs.Store.ExpireLeases)
// and appends the outcomes of the runs that became final.
func (s *Server) expireLeases(ctx context.Context) error {
	s.runs.mu.Lock()
	defer s.runs.mu.Unlock()
	final, requeued, err := s.runs.store.ExpireLeases(ctx)
	if requeued > 0 {
		s.runs.wakeAll()
	}
	if requeued > 0 || len(final) > 0 {
		s.runs.changed.wakeAll()
	}
	s.pruneStaged(ctx)
	for _, r := range final {
		if aerr := s.appendOutcome(ctx, r); aerr != nil {
			err = errors.Join(err, aerr)
		}
	}
	return err
}

// appendOutcome appends the run-outcome leaf of a final run with no
// evidence (canceled, expired) and stores its id. Caller holds runs.mu.
func (s *Server) appendOutcome(ctx context.Context, r runs.Run) error {
	body, err := ledger.CanonicalBody(new(r.Outcome(s.cfg.Now())))
	if err != nil {
		return err
	}
	res, err := s.store.Append(ctx, []ledger.Record{{Kind: ledger.KindRunOutcome, Body: body}}, "run-outcome:"+r.ID)
	if err != nil {
		return err
	}
	s.metrics.appended.WithLabelValues(string(ledger.KindRunOutcome)).Inc()
	return s.runs.store.SetOutcome(ctx, r.ID, res.Entries[0].ID)
}
