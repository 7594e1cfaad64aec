package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/runner"
	"github.com/evidence-ledger/ledger/runs"
	"github.com/evidence-ledger/ledger/verify"
)

// stager signs each lane's evidence as the lane ends and stages the
// envelope on the server (POST /agent/runs/{id}/evidence) while the next
// lanes run, so that the finish names staged records instead of carrying
// and having the server check them all at the end. A lane whose staging
// fails is sent in full in the finish. Its methods are safe for
// concurrent use.
type stager struct {
	ag   *agent
	ctx  context.Context
	stop context.CancelFunc
	work context.Context
	l    *runs.LeaseAnswer
	log  *slog.Logger
	wg   sync.WaitGroup
	mu   sync.Mutex
	done []stagedLane
	err  error
}

// stagedLane is one lane's signed envelope and, once staged, the digest
// the server answered ("" when it was not staged).
type stagedLane struct {
	env    json.RawMessage
	digest string
}

func (ag *agent) newStager(ctx, work context.Context, l *runs.LeaseAnswer, log *slog.Logger) *stager {
	sctx, stop := context.WithCancel(ctx)
	return &stager{ag: ag, ctx: sctx, stop: stop, work: work, l: l, log: log}
}

// laneDone is runner.Options.LaneDone: it reserves the lane's slot (lane
// order) and signs and stages its evidence on a goroutine.
func (st *stager) laneDone(lr runner.LaneRun) {
	if st.work.Err() != nil {
		return // canceled or lost: nothing of this attempt is recorded
	}
	st.mu.Lock()
	i := len(st.done)
	st.done = append(st.done, stagedLane{})
	st.mu.Unlock()
	ev := lr.Evidence
	// The record names the attempt it is run for: the server records it
	// for no other run or attempt.
	ev.Run = &ledger.RunRef{ID: st.l.Run.ID, Attempt: st.l.Attempt}
	st.wg.Go(func() {
		recs, err := evidenceRecords([]ledger.Evidence{ev})
		var env json.RawMessage
		if err == nil {
			env, err = verify.SignEvidence(st.ctx, st.ag.priv, recs[0].Body)
		}
		if err != nil {
			st.mu.Lock()
			st.err = errors.Join(st.err, fmt.Errorf("sign %s: %w", lr.Lane, err))
			st.mu.Unlock()
			return
		}
		ans, err := st.ag.api.Stage(st.ctx, st.l.Run.ID, runs.StageRequest{Attempt: st.l.Attempt, Lease: st.l.Lease, Envelope: env})
		switch {
		case err == nil:
			st.log.Info("agent staged a lane's evidence", "lane", lr.Lane, "digest", ans.Digest)
		case st.ctx.Err() == nil:
			st.log.Warn("agent could not stage a lane's evidence: it goes in the finish", "lane", lr.Lane, "err", err)
		}
		st.mu.Lock()
		st.done[i] = stagedLane{env: env, digest: ans.Digest}
		if err != nil {
			st.done[i].digest = ""
		}
		st.mu.Unlock()
	})
}

// abandon stops the stagings in flight: the attempt records nothing.
func (st *stager) abandon() { st.stop() }

// wait waits for every lane's signing and staging and returns the lanes
// in the order they ended, or the first signing error.
func (st *stager) wait() ([]stagedLane, error) {
	st.wg.Wait()
	st.stop()
	st.mu.Lock()
	defer st.mu.Unlock()
	return slices.Clone(st.done), st.err
}

// envelopes is every lane's envelope, for a finish that carries them all.
func (st *stager) envelopes() ([]json.RawMessage, error) {
	lanes, err := st.wait()
	if err != nil {
		return nil, err
	}
	out := make([]json.RawMessage, len(lanes))
	for i, sl := range lanes {
		out[i] = sl.env
	}
	return out, nil
}
