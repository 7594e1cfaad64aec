package web

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
)

// testFresh is a freshCache over a checkpoint size the test moves, with
// a compute that records how often and how concurrently it runs.
type testFresh struct {
	c          *freshCache[uint64]
	size       atomic.Uint64
	clock      atomic.Int64 // nanoseconds
	computes   atomic.Int64
	inFlight   atomic.Int64
	maxFlight  atomic.Int64
	computeFor time.Duration
	fail       atomic.Bool
}

func newTestFresh(minGap, computeFor time.Duration) *testFresh {
	f := &testFresh{computeFor: computeFor}
	f.clock.Store(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	f.c = &freshCache[uint64]{maxAge: time.Second, minGap: minGap,
		now:    func() time.Time { return time.Unix(0, f.clock.Load()) },
		latest: func(context.Context) (uint64, error) { return f.size.Load(), nil }}
	return f
}

// compute returns the size it was asked for, after computeFor.
func (f *testFresh) compute(_ context.Context, size uint64, _ time.Time) (uint64, error) {
	f.computes.Add(1)
	n := f.inFlight.Add(1)
	defer f.inFlight.Add(-1)
	for {
		m := f.maxFlight.Load()
		if n <= m || f.maxFlight.CompareAndSwap(m, n) {
			break
		}
	}
	time.Sleep(f.computeFor)
	if f.fail.Load() {
		return 0, errors.New("evaluation failed")
	}
	return size, nil
}

// A reader never gets a value older than the checkpoint it saw on
// arrival, alone or among many, while the checkpoint keeps moving; and
// the readers of one key share computations, one at a time.
func TestFreshCacheReadYourWrites(t *testing.T) {
	f := newTestFresh(5*time.Millisecond, 3*time.Millisecond)
	ctx := context.Background()
	f.size.Store(10)
	if v, _ := f.c.get(ctx, "k", f.compute); v != 10 {
		t.Fatalf("first value at size %d, want 10", v)
	}
	if v, _ := f.c.get(ctx, "k", f.compute); v != 10 || f.computes.Load() != 1 {
		t.Fatalf("unchanged checkpoint: value %d after %d computations, want 10 after 1", v, f.computes.Load())
	}
	f.size.Store(11)
	if v, _ := f.c.get(ctx, "k", f.compute); v != 11 {
		t.Fatalf("after an append the value is at size %d, want 11: the cache hid the append", v)
	}

	stop := make(chan struct{})
	var writer sync.WaitGroup
	writer.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			f.size.Add(1)
			time.Sleep(100 * time.Microsecond)
		}
	})
	before := f.computes.Load()
	var wg sync.WaitGroup
	const readers, each = 32, 20
	for range readers {
		wg.Go(func() {
			for range each {
				arrival := f.size.Load()
				v, err := f.c.get(ctx, "k", f.compute)
				if err != nil {
					t.Error(err)
					return
				}
				if v < arrival {
					t.Errorf("a reader that saw size %d got a value at %d", arrival, v)
					return
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	writer.Wait()
	n := f.computes.Load() - before
	if f.maxFlight.Load() != 1 {
		t.Errorf("%d computations of one key ran at once, want 1", f.maxFlight.Load())
	}
	if n >= readers*each/4 {
		t.Errorf("%d computations for %d reads: readers did not share them", n, readers*each)
	}
	t.Logf("%d reads under moving checkpoints took %d computations", readers*each, n)
}

// At an unchanged checkpoint a value is served until it is maxAge old
// (verdicts depend on the clock too); a failed computation is not cached.
func TestFreshCacheAgeAndErrors(t *testing.T) {
	f := newTestFresh(0, 0)
	ctx := context.Background()
	f.size.Store(5)
	f.c.get(ctx, "k", f.compute)
	f.clock.Add(int64(999 * time.Millisecond))
	f.c.get(ctx, "k", f.compute)
	if f.computes.Load() != 1 {
		t.Fatalf("%d computations within maxAge, want 1", f.computes.Load())
	}
	f.clock.Add(int64(time.Millisecond))
	f.c.get(ctx, "k", f.compute)
	if f.computes.Load() != 2 {
		t.Fatalf("%d computations once maxAge passed, want 2", f.computes.Load())
	}
	f.clock.Add(int64(-time.Hour)) // a clock set back does not serve a "future" value
	f.c.get(ctx, "k", f.compute)
	if f.computes.Load() != 3 {
		t.Fatalf("%d computations after the clock went back, want 3", f.computes.Load())
	}
	f.fail.Store(true)
	f.size.Store(6)
	if _, err := f.c.get(ctx, "k", f.compute); err == nil {
		t.Fatal("a failed computation answered no error")
	}
	f.fail.Store(false)
	if v, err := f.c.get(ctx, "k", f.compute); err != nil || v != 6 {
		t.Fatalf("after a failure: %d, %v; want a new computation at 6", v, err)
	}
	if v, err := f.c.get(ctx, "other", f.compute); err != nil || v != 6 || f.computes.Load() != 6 {
		t.Fatalf("another key: %d, %v after %d computations; want its own computation", v, err, f.computes.Load())
	}
	f.fail.Store(true)
	for i := range 100 {
		f.c.get(ctx, fmt.Sprintf("missing-%d", i), f.compute)
	}
	f.c.mu.Lock()
	n := len(f.c.keys)
	f.c.mu.Unlock()
	if n != 2 {
		t.Fatalf("%d keys after 100 failed lookups of other keys, want the 2 that have values", n)
	}
}

// A reader whose request ends stops waiting; the computation it started
// still finishes for the others.
func TestFreshCacheCallerGivesUp(t *testing.T) {
	f := newTestFresh(0, 50*time.Millisecond)
	f.size.Store(1)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
	defer cancel()
	if _, err := f.c.get(ctx, "k", f.compute); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err %v, want the caller's deadline", err)
	}
	if v, err := f.c.get(context.Background(), "k", f.compute); err != nil || v != 1 || f.computes.Load() != 1 {
		t.Fatalf("%d, %v after %d computations: the second reader should share the first one's", v, err, f.computes.Load())
	}
}

// The overview's evidence window, read incrementally, is the same as a
// full scan at every checkpoint: across small and large appends, past the
// window's size, and with other kinds of leaves in between.
func TestOverviewWindowMatchesFullScan(t *testing.T) {
	e := newAPIEnv(t, Config{})
	s := e.srv.Config.Handler.(*Server)
	ctx := context.Background()
	n, tokens := 0, 0
	appendN := func(k int) {
		recs := make([]ledger.Record, 0, k+1)
		for range k {
			b, _ := json.Marshal(testEvidence(n))
			n++
			recs = append(recs, ledger.Record{Kind: ledger.KindEvidence, Body: b})
		}
		if len(recs) > 0 {
			if _, err := e.store.Append(ctx, recs, ""); err != nil {
				t.Fatal(err)
			}
		}
		// A leaf of another kind between the evidence records.
		tokens++
		if _, _, err := e.store.CreateToken(ctx, fmt.Sprintf("t%d", tokens), ledger.ScopeRead, nil); err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range []int{3, 1, 0, 40, 700, 2, 500, 1, 1100, 5} {
		appendN(k)
		cp, err := e.store.Checkpoint(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got, err := s.overviewRecent(ctx, cp.Size)
		if err != nil {
			t.Fatal(err)
		}
		want, _, err := e.store.Evidence(ctx, ledger.EvidenceFilter{Limit: overviewScan, AsOfSize: cp.Size})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(want) {
			t.Fatalf("after +%d at size %d: window of %d records, full scan %d", k, cp.Size, len(got), len(want))
		}
		for i := range got {
			if got[i].ID != want[i].ID {
				t.Fatalf("after +%d at size %d: record %d is %s, full scan %s", k, cp.Size, i, got[i].ID, want[i].ID)
			}
		}
	}
}
