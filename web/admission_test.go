package web

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// While a write is in flight, reads run one at a time and leave a pause
// as long as their work behind them, so that they take at most about half
// of one core; without writes they run side by side. A read whose request
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
