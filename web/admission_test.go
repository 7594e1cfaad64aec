package web

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/ledger/storetest/teststore"
)

// While a write is in flight, reads run one at a time and leave a pause
// of readPauseFactor times their work behind them, so that they take at
// most about 1/(1+readPauseFactor) of one core; without writes they run
// side by side. A read whose request
// ends while it waits is not admitted.
func TestReadGateYieldsToWrites(t *testing.T) {
	g := newReadGate()
	run := func(readers int, work time.Duration) (elapsed time.Duration, maxAtOnce int64) {
		var now, peak atomic.Int64
		var wg sync.WaitGroup
		start := time.Now()
		for range readers {
			wg.Go(func() {
				tk, ok := g.enter(context.Background())
				if !ok {
					t.Error("read not admitted")
					return
				}
				n := now.Add(1)
				for m := peak.Load(); n > m && !peak.CompareAndSwap(m, n); m = peak.Load() {
				}
				time.Sleep(work)
				now.Add(-1)
				tk.release()
			})
		}
		wg.Wait()
		return time.Since(start), peak.Load()
	}
	if cap(g.slots) > 1 {
		if _, peak := run(8, 5*time.Millisecond); peak < 2 {
			t.Errorf("without writes at most %d reads ran at once, want up to %d", peak, cap(g.slots))
		}
	}
	g.writes.Add(1)
	el, peak := run(8, 5*time.Millisecond)
	if peak != 1 {
		t.Errorf("with a write in flight %d reads ran at once, want 1", peak)
	}
	// 8 reads of 5 ms, each followed by a 5 ms pause before the next.
	if el < 75*time.Millisecond {
		t.Errorf("8 reads of 5 ms took %s with a write in flight: no pause between them", el)
	}
	// A read holding the exclusive slot longer than readHoldMax lets the
	// next one in.
	slow, _ := g.enter(context.Background())
	done := make(chan bool)
	go func() {
		tk, ok := g.enter(context.Background())
		if ok {
			tk.release()
		}
		done <- ok
	}()
	select {
	case ok := <-done:
		if !ok {
			t.Error("the second read was refused")
		}
	case <-time.After(2 * time.Second):
		t.Fatal("a slow read kept the exclusive slot past readHoldMax")
	}
	slow.release()
	time.Sleep(2 * readPauseMax)
	held, _ := g.enter(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if _, ok := g.enter(ctx); ok {
		t.Error("a read whose request ended while the exclusive slot was held was admitted")
	}
	held.release()
	g.writes.Add(-1)
}

// A proof is answered while every read slot and the exclusive slot are
// held (page renders in flight while writes are) and a page request
// waits; proof slots are a class of their own.
func TestProofsDoNotQueueBehindPages(t *testing.T) {
	st := teststore.Open(t, teststore.Options{})
	s, err := New(Config{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(s)
	t.Cleanup(hs.Close)
	ctx := context.Background()
	rec, _, err := st.CreateToken(ctx, "ci", ledger.ScopeRecord, nil)
	if err != nil {
		t.Fatal(err)
	}
	e := &apiEnv{srv: hs, store: st, record: rec}
	code, body := e.do(t, "POST", "/api/v1/evidence", rec, testEvidence(1))
	if code != http.StatusCreated {
		t.Fatalf("POST: %d %s", code, body)
	}
	var res AppendedJSON
	if err := json.Unmarshal(body, &res); err != nil {
		t.Fatal(err)
	}

	// Hold the read gate as page renders under write load do.
	s.gate.writes.Add(1)
	defer s.gate.writes.Add(-1)
	for range cap(s.gate.slots) {
		s.gate.slots <- struct{}{}
	}
	s.gate.exclusive <- struct{}{}
	defer func() {
		<-s.gate.exclusive
		for range cap(s.gate.slots) {
			<-s.gate.slots
		}
	}()

	get := func(path string, wait time.Duration) (int, error) {
		c, cancel := context.WithTimeout(ctx, wait)
		defer cancel()
		req, _ := http.NewRequestWithContext(c, "GET", hs.URL+path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		io.Copy(io.Discard, resp.Body)
		return resp.StatusCode, nil
	}
	if code, err := get("/", 100*time.Millisecond); err == nil {
		t.Fatalf("the overview was answered (%d) with every read slot held: the gate is not held", code)
	}
	size := e.size(t)
	for _, p := range []string{
		"/api/v1/evidence/" + res.ID + "/proof",
		"/api/v1/evidence/" + res.ID + "/proof?format=tlog-proof",
		fmt.Sprintf("/api/v1/log/proof/inclusion?index=%d", res.Index),
		fmt.Sprintf("/api/v1/log/proof/consistency?from=1&to=%d", size),
	} {
		code, err := get(p, 10*time.Second)
		if err != nil || code != http.StatusOK {
			t.Errorf("GET %s with page reads held: %d %v, want 200", p, code, err)
		}
	}
}

func TestIsProofRead(t *testing.T) {
	for p, want := range map[string]bool{
		"/api/v1/evidence/sha256:ab/proof": true,
		"/api/v1/log/proof/inclusion":      true,
		"/api/v1/log/proof/consistency":    true,
		"/api/v1/evidence/x/y/proof":       false,
		"/api/v1/evidence//proof":          false,
		"/api/v1/evidence/abc":             false,
		"/api/v1/log/proof/inclusionx":     false,
		"/releases/0.9.0":                  false,
		"/api/v1/releases/0.9.0/readiness": false,
	} {
		r := httptest.NewRequest("GET", p, nil)
		if got := isProofRead(r); got != want {
			t.Errorf("isProofRead(GET %s) = %v, want %v", p, got, want)
		}
		if isProofRead(httptest.NewRequest("POST", p, nil)) {
			t.Errorf("isProofRead(POST %s) = true", p)
		}
	}
}

// While a write is in flight a proof slot is given back only after a
// pause (readPauseFactor times as long as it was held); without writes at
// once.
func TestProofSlotsPauseWhileWrites(t *testing.T) {
	g := newReadGate()
	fill := func() []func() {
		var dones []func()
		for range cap(g.proofs) {
			done, ok := g.enterProof(context.Background())
			if !ok {
				t.Fatal("proof not admitted with free slots")
			}
			dones = append(dones, done)
		}
		return dones
	}
	try := func(wait time.Duration) bool {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		done, ok := g.enterProof(ctx)
		if ok {
			done()
		}
		return ok
	}
	g.writes.Add(1)
	dones := fill()
	if try(time.Millisecond) {
		t.Fatal("a proof was admitted with every proof slot held")
	}
	time.Sleep(readPauseMax)
	for _, d := range dones {
		d()
	}
	if try(time.Millisecond) {
		t.Error("a proof slot held for readPauseMax was free again at once while a write is in flight")
	}
	if !try(10 * time.Second) {
		t.Error("a proof slot was not given back after its pause")
	}
	g.writes.Add(-1)
	for _, d := range fill() {
		d()
	}
	if !try(time.Second) {
		t.Error("without writes a proof slot was not given back at once")
	}
}
