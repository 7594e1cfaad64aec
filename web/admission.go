package web

import (
	"context"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// readGate is the admission control that keeps CPU for appends under read
// load. The log has one writer (the sequencer and its group commit); on a
// machine with few cores, dozens of readers in a loop would otherwise take
// most of the CPU it needs and the write rate would fall far below what
// the same writers reach alone.
//
// Reads (GET and HEAD, but static assets, /healthz and /metrics) take
// one of GOMAXPROCS slots. While any write request is in flight they
// also take the single exclusive slot, and on leaving keep it for a pause
// readPauseFactor times as long as they held it (at most readPauseMax):
// while appends are coming, reads get at most about 1/(1+readPauseFactor)
// of one core and the writer the rest; an idle writer costs reads nothing. A read holds the exclusive
// slot at most readHoldMax (a slow client cannot stall the other reads),
// and gives both slots up once it waits for a shared computation
// (freshCache), which is not its own CPU. Waiting ends with the request's
// context.
//
// Proofs (isProofRead: inclusion and consistency proofs, a few node hash
// reads each) are a class of their own: they take one of
// max(1, GOMAXPROCS/2) proof slots and nothing else, so they never queue
// behind a page render or the pause a page leaves behind. While writes
// are in flight a proof slot is given back after a pause readPauseFactor
// times as long as it was held (at most readPauseMax), so proofs take at
// most about 1/(1+readPauseFactor) of GOMAXPROCS/2 cores however many
// clients ask. Safe for concurrent use.
type readGate struct {
	slots     chan struct{} // GOMAXPROCS
	exclusive chan struct{} // 1, taken only while writes are in flight
	proofs    chan struct{} // max(1, GOMAXPROCS/2), proof reads only
	writes    atomic.Int64  // write requests in flight
}

const (
	readPauseMax = 50 * time.Millisecond
	// readPauseFactor is the pause after a read, in multiples of the time
	// it held its slot, while writes are in flight.
	readPauseFactor = 2
	readHoldMax     = 50 * time.Millisecond
)

func newReadGate() *readGate {
	n := runtime.GOMAXPROCS(0)
	return &readGate{slots: make(chan struct{}, n), exclusive: make(chan struct{}, 1), proofs: make(chan struct{}, max(1, n/2))}
}

// enterProof admits a proof read, waiting for a proof slot; it returns the
// function that gives the slot back (after the pause while writes are in
// flight), or false when ctx ended first.
func (g *readGate) enterProof(ctx context.Context) (func(), bool) {
	select {
	case g.proofs <- struct{}{}:
	case <-ctx.Done():
		return nil, false
	}
	since := time.Now()
	return func() {
		if pause := min(readPauseFactor*time.Since(since), readPauseMax); pause > 0 && g.writes.Load() > 0 {
			time.AfterFunc(pause, func() { <-g.proofs })
			return
		}
		<-g.proofs
	}, true
}

// readTicket is one read's admission. Its methods are called from the
// read's goroutine only; the exclusive slot may also be released by a
// timer, which exclusiveHold's once guards.
type readTicket struct {
	g    *readGate
	slot bool
	excl *exclusiveHold
}

// exclusiveHold is one holding of the exclusive slot, released once:
// by the read (after its pause) or by the hold timer, whichever is first.
type exclusiveHold struct {
	once  sync.Once
	g     *readGate
	since time.Time
	timer *time.Timer
}

func (h *exclusiveHold) release() { h.once.Do(func() { <-h.g.exclusive }) }

type ticketKey struct{}

// enter admits a read, waiting for its slots; false when ctx ended first.
func (g *readGate) enter(ctx context.Context) (*readTicket, bool) {
	t := &readTicket{g: g}
	return t, t.acquire(ctx)
}

func (t *readTicket) acquire(ctx context.Context) bool {
	select {
	case t.g.slots <- struct{}{}:
		t.slot = true
	case <-ctx.Done():
		return false
	}
	if t.g.writes.Load() == 0 {
		return true
	}
	select {
	case t.g.exclusive <- struct{}{}:
		h := &exclusiveHold{g: t.g, since: time.Now()}
		h.timer = time.AfterFunc(readHoldMax, h.release)
		t.excl = h
		return true
	case <-ctx.Done():
		<-t.g.slots
		t.slot = false
		return false
	}
}

// release gives the slots back: the exclusive one after a pause as long as
// it was held, while writes are in flight.
func (t *readTicket) release() {
	if h := t.excl; h != nil {
		t.excl = nil
		if h.timer.Stop() {
			pause := min(readPauseFactor*time.Since(h.since), readPauseMax)
			if pause > 0 && t.g.writes.Load() > 0 {
				time.AfterFunc(pause, h.release)
			} else {
				h.release()
			}
		}
	}
	if t.slot {
		t.slot = false
		<-t.g.slots
	}
}

// waiting releases the ticket of ctx's read (if any) for good before wait
// runs (see freshCache): what such a read does afterwards is serve the
// shared value it waited for, which is cheap, and queueing for the gate a
// second time would double its wait.
func waiting(ctx context.Context, wait func()) {
	if t, _ := ctx.Value(ticketKey{}).(*readTicket); t != nil {
		t.release()
	}
	wait()
}

// isGatedRead reports whether r is a read the gate admits.
func isGatedRead(r *http.Request) bool {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		return false
	}
	p := r.URL.Path
	return p != "/healthz" && p != "/metrics" && !strings.HasPrefix(p, "/static/")
}

// isProofRead reports whether r is a gated read of a proof: GET or HEAD of
// /api/v1/evidence/{id}/proof, /api/v1/log/proof/inclusion or
// /api/v1/log/proof/consistency.
func isProofRead(r *http.Request) bool {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		return false
	}
	switch p := r.URL.Path; p {
	case "/api/v1/log/proof/inclusion", "/api/v1/log/proof/consistency":
		return true
	default:
		id, ok := strings.CutPrefix(p, "/api/v1/evidence/")
		if !ok {
			return false
		}
		id, ok = strings.CutSuffix(id, "/proof")
		return ok && id != "" && !strings.Contains(id, "/")
	}
}

// admit is the middleware of the read gate: proofs wait for a proof slot,
// other reads for admission, every other request counts as a write in
// flight.
func (s *Server) admit(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if isProofRead(r) {
			done, ok := s.gate.enterProof(r.Context())
			if !ok {
				return // the client went away while waiting
			}
			defer done()
			next.ServeHTTP(w, r)
			return
		}
		if !isGatedRead(r) {
			if r.Method != http.MethodGet && r.Method != http.MethodHead {
				s.gate.writes.Add(1)
				defer s.gate.writes.Add(-1)
			}
			next.ServeHTTP(w, r)
			return
		}
		t, ok := s.gate.enter(r.Context())
		if !ok {
			return // the client went away while waiting
		}
		defer t.release()
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), ticketKey{}, t)))
	})
}
