package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/runner"
	"github.com/evidence-ledger/ledger/runs"
)

// minHeartbeat is the shortest lease extension interval: each heartbeat
// is a signed request and a row update on the server.
const minHeartbeat = 100 * time.Millisecond

// errCanceled and errLeaseLost end a lease's workload.
var (
	errCanceled  = errors.New("the run was canceled")
	errLeaseLost = errors.New("the lease was lost")
)

// supervise extends lease l every --heartbeat (at most, and by default,
// a third of its length) until work ends, and at once when started is
// closed (the first lane reported progress: the run shows running from
// then), sending the progress take returns; it stops the workload with
// errCanceled when the server answers canceling, and with errLeaseLost
// when the server refuses the lease. Transport errors are retried on the
// next tick.
func (ag *agent) supervise(ctx, work context.Context, stop context.CancelCauseFunc, l *runs.LeaseAnswer, started <-chan struct{}, take func() *runs.Progress, log *slog.Logger) {
	every := max(time.Duration(l.LeaseTTLMS)*time.Millisecond/3, minHeartbeat)
	switch h := ag.c.Heartbeat; {
	case h > every:
		log.Info("--heartbeat is more than a third of the lease: extending every third", "heartbeat", h.String(), "every", every.String())
	case h > 0:
		every = h
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-work.Done():
			return
		case <-started:
			started = nil
		case <-t.C:
		}
		hb, err := ag.api.Heartbeat(ctx, l.Run.ID, runs.HeartbeatRequest{Attempt: l.Attempt, Lease: l.Lease, Progress: take()})
		var le *ledger.Error
		switch {
		case errors.As(err, &le) && le.Code == ledger.CodeConflict:
			log.Warn("agent lost the lease", "err", err)
			stop(errLeaseLost)
			return
		case err != nil:
			log.Warn("agent heartbeat failed (retrying)", "err", err)
		case hb.Cancel:
			log.Info("run canceled: stopping at the next case boundary")
			stop(errCanceled)
			return
		}
	}
}

// runLease runs one leased attempt and returns the health verdict of its
// probe. The supervisor goroutine extends the lease (see supervise),
// whatever the lanes do, and stops the workload when the server says
// canceling or refuses the lease.
func (ag *agent) runLease(ctx context.Context, l *runs.LeaseAnswer) string {
	log := ag.a.log.With("run", l.Run.ID, "attempt", l.Attempt)
	log.Info("agent took a run", "lanes", strings.Join(l.Run.Lanes, ","), "backend", l.Run.Backend)
	work, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	var mu sync.Mutex
	var prog *runs.Progress
	started := make(chan struct{})
	var once sync.Once
	setProgress := func(p runs.Progress) {
		mu.Lock()
		prog = &p
		mu.Unlock()
		once.Do(func() { close(started) })
	}
	take := func() *runs.Progress { mu.Lock(); defer mu.Unlock(); p := prog; prog = nil; return p }
	superDone := make(chan struct{})
	go func() {
		defer close(superDone)
		ag.supervise(ctx, work, stop, l, started, take, log)
	}()
	var st *stager
	finish := func(req runs.FinishRequest) { ag.finish(ctx, l, st, req, log) }
	health, _ := ag.probe()
	if health != "ok" {
		stop(nil)
		<-superDone
		finish(runs.FinishRequest{Status: "error", Message: "health probe: " + health})
		return health
	}
	for _, lane := range l.Run.Lanes {
		if !slices.Contains(ag.spec.Lanes, lane) && !slices.Contains(ag.spec.Lanes, ledger.LaneName(lane)) {
			stop(nil)
			<-superDone
			finish(runs.FinishRequest{Status: "error", Message: "lane " + lane + " is not in this agent's configuration"})
			return health
		}
	}
	b, err := runner.OpenBackend(ag.c.Backend)
	if err != nil {
		stop(nil)
		<-superDone
		finish(runs.FinishRequest{Status: "error", Message: "open backend: " + err.Error()})
		return "backend does not open: " + err.Error()
	}
	defer b.Close()
	lanesDone := 0
	var cur string
	st = ag.newStager(ctx, work, l, log)
	// The run's case selection goes to the lanes that select cases as
	// `ledger run --cases --case-budget --max-samples` passes it locally
	// (unset: the lanes' defaults).
	sel := l.Run.CaseSelection
	results, rerr := runner.Run(work, b, runner.Options{Lanes: l.Run.Lanes, Subject: ag.subj, Runner: runner.BuildRunner(), BinaryDigest: ag.bin,
		Cases: sel.Cases, CaseBudget: sel.Budget(), MaxSamples: sel.MaxSamples,
		LaneDone: st.laneDone,
		Progress: func(lane string, done, total int) {
			if lane != cur {
				if cur != "" {
					lanesDone++
				}
				cur = lane
			}
			setProgress(runs.Progress{Lane: lane, Done: done, Total: total, LanesDone: lanesDone})
		}})
	cause := context.Cause(work)
	if cause != nil || rerr != nil || ctx.Err() != nil {
		st.abandon()
	}
	staged, serr := st.wait()
	stop(nil)
	<-superDone
	switch {
	case errors.Is(cause, errLeaseLost):
		log.Warn("lease lost: the attempt's results are dropped, nothing is recorded")
		return health
	case errors.Is(cause, errCanceled):
		finish(runs.FinishRequest{Status: "canceled", Message: "canceled at a case boundary"})
		return health
	case ctx.Err() != nil:
		return health // interrupted: the lease expires and the run is queued again
	case rerr != nil:
		finish(runs.FinishRequest{Status: "error", Message: "run: " + rerr.Error()})
		return health
	}
	finish(completed(len(results), staged, serr))
	return health
}

// completed is the finish of an attempt whose lanes all ran: the staged
// lanes by digest, the others in full; an error finish when a lane's
// evidence could not be signed.
func completed(lanes int, staged []stagedLane, err error) runs.FinishRequest {
	if err == nil && lanes != len(staged) {
		err = fmt.Errorf("%d lanes ran, %d were signed", lanes, len(staged))
	}
	if err != nil {
		return runs.FinishRequest{Status: "error", Message: err.Error()}
	}
	req := runs.FinishRequest{Status: "completed"}
	for _, sl := range staged {
		if sl.digest != "" {
			req.Staged = append(req.Staged, sl.digest)
		} else {
			req.Evidence = append(req.Evidence, sl.env)
		}
	}
	return req
}

// finish posts the finish of lease l, retrying transport and internal
// errors (5 tries); when the server no longer holds what st staged (409
// naming staged[i]: it restarted), it sends the same evidence again with
// every envelope in full.
func (ag *agent) finish(ctx context.Context, l *runs.LeaseAnswer, st *stager, req runs.FinishRequest, log *slog.Logger) {
	req.Attempt, req.Lease = l.Attempt, l.Lease
	for try := range 5 {
		_, err := ag.api.Finish(ctx, l.Run.ID, req)
		if err == nil {
			log.Info("agent finished the attempt", "status", req.Status, "staged", len(req.Staged))
			return
		}
		var le *ledger.Error
		if errors.As(err, &le) && le.Code == ledger.CodeConflict && strings.HasPrefix(le.Field, "staged[") && st != nil {
			log.Warn("agent's staged evidence is gone from the server: sending the envelopes in the finish", "err", err)
			if req.Evidence, err = st.envelopes(); err != nil {
				req = runs.FinishRequest{Attempt: l.Attempt, Lease: l.Lease, Status: "error", Message: err.Error()}
			}
			req.Staged = nil
			continue
		}
		if errors.As(err, &le) && le.Code != ledger.CodeInternal {
			log.Error("agent finish refused", "err", err)
			return
		}
		log.Warn("agent finish failed (retrying)", "err", err, "try", try+1)
		time.Sleep(time.Duration(try+1) * 500 * time.Millisecond)
	}
}
