package runner

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/runner/alloc"
)

// DefaultSnapshots is the number of snapshots alloc-snapshot/v1 takes.
const DefaultSnapshots = 20000

// snapshotLane is alloc-snapshot/v1.
type snapshotLane struct{}

// NewSnapshotLane returns alloc-snapshot/v1: mutator goroutines allocate
// and free real backend memory through the caching allocator (the
// backend's native rule set) while an observer takes 20,000 snapshots;
// every snapshot must satisfy Snapshot.Check. The negative control reads
// the same counters one by one without the lock under the same traffic and
// must observe at least one violation, else the run is inconclusive.
func NewSnapshotLane() Lane { return snapshotLane{} }

func (snapshotLane) Name() string { return LaneAllocSnap }
func (snapshotLane) Summary() string {
	return "coherent allocator snapshot: 20,000 snapshots under concurrent real allocation, one-by-one reads as control"
}

func (l snapshotLane) Definition() []byte {
	b, _ := ledger.CanonicalBody(map[string]any{
		"lane":       l.Name(),
		"cases":      "one case per snapshot, ids snapshot/NNNNN",
		"snapshots":  DefaultSnapshots,
		"invariants": "active+cache == raw bytes held; live+cached buffers == raw buffers held; cache <= cache limit; active <= memory limit",
		"traffic":    "max(2, GOMAXPROCS) mutators, sizes log-uniform 1 B..256 KiB, up to 16 live buffers each, memory limit 256 MiB, cache limit 16 MiB",
		"verdict":    "all snapshots coherent; control (counters read one by one, lockless, yielding between the separate reads; up to 10 fresh rounds of the same number of readings until one is seen) must see >= 1 violation, and readings are paced so each phase overlaps >= snapshots/10 mutator operations spread over it, else inconclusive",
		"sources":    allocSources(),
	})
	return b
}

// traffic runs mutators against a until stop is closed; it returns the
// number of operations and the first error.
type traffic struct {
	ops  atomic.Int64
	errs chan error
	stop chan struct{}
	wg   sync.WaitGroup
}

func startTraffic(a *alloc.Allocator, mutators int, seed uint64) *traffic {
	tr := &traffic{errs: make(chan error, mutators), stop: make(chan struct{})}
	for m := 0; m < mutators; m++ {
		tr.wg.Add(1)
		go func(m int) {
			defer tr.wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(m)))
			var live []alloc.Buffer
			defer func() {
				for _, b := range live {
					_ = a.Free(b)
				}
			}()
			for {
				select {
				case <-tr.stop:
					return
				default:
				}
				if len(live) < 16 && (len(live) == 0 || rng.IntN(2) == 0) {
					n := int(math.Exp2(rng.Float64() * 18)) // 1 B .. 256 KiB
					b, err := a.Malloc(n)
					if err != nil {
						tr.errs <- err
						return
					}
					if len(b.Host) > 0 { // touch the real memory
						b.Host[0], b.Host[len(b.Host)-1] = byte(m), byte(n)
					}
					live = append(live, b)
				} else {
					i := rng.IntN(len(live))
					if err := a.Free(live[i]); err != nil {
						tr.errs <- err
						return
					}
					live[i] = live[len(live)-1]
					live = live[:len(live)-1]
				}
				tr.ops.Add(1)
			}
		}(m)
	}
	return tr
}

func (tr *traffic) finish() error {
	close(tr.stop)
	tr.wg.Wait()
	select {
	case err := <-tr.errs:
		return err
	default:
		return nil
	}
}

// observe takes count readings with read while traffic runs and returns
// the indexes and errors of incoherent ones.
func observe(ctx context.Context, env *Env, a *alloc.Allocator, count int, read func() alloc.Snapshot, report bool) (bad []int, firstErr []string, ops int64, err error) {
	mutators := max(2, runtime.GOMAXPROCS(0))
	tr := startTraffic(a, mutators, 42)
	// Readings only count while traffic runs: wait for the mutators to
	// get going (each has done several operations).
	for tr.ops.Load() < int64(20*mutators) {
		if err := ctx.Err(); err != nil {
			_ = tr.finish()
			return nil, nil, 0, err
		}
		select {
		case err := <-tr.errs:
			_ = tr.finish()
			return nil, nil, 0, fmt.Errorf("traffic: %w", err)
		default:
		}
		runtime.Gosched()
	}
	start := tr.ops.Load()
	// Pace the readings over the traffic: reading i waits until the
	// mutators have done i*minOps/count operations since the start, so
	// every phase overlaps at least minOps operations spread over all its
	// readings (a reader faster than the traffic would otherwise finish
	// inside one long operation).
	minOps := int64(max(1, count/10))
	for i := 0; i < count; i++ {
		if need := start + int64(i)*minOps/int64(count); tr.ops.Load() < need {
			deadline := time.Now().Add(10 * time.Second)
			for tr.ops.Load() < need {
				if time.Now().After(deadline) {
					_ = tr.finish()
					return nil, nil, 0, fmt.Errorf("allocation traffic stalled (%d operations in 10 s)", tr.ops.Load()-start)
				}
				runtime.Gosched()
			}
		}
		if i%1024 == 0 {
			if err := ctx.Err(); err != nil {
				_ = tr.finish()
				return nil, nil, 0, err
			}
			if report {
				env.progress(i, count)
			}
		}
		if cerr := read().Check(); cerr != nil {
			bad = append(bad, i)
			if len(firstErr) < 10 {
				firstErr = append(firstErr, fmt.Sprintf("reading %d: %v", i, cerr))
			}
		}
	}
	ops = tr.ops.Load() - start
	if err := tr.finish(); err != nil {
		return nil, nil, 0, fmt.Errorf("traffic: %w", err)
	}
	return bad, firstErr, ops, nil
}

// controlRounds bounds how many rounds of one-by-one readings the
// snapshot lane's negative control takes before it calls the run
// inconclusive.
const controlRounds = 10

func (l snapshotLane) Run(ctx context.Context, env *Env) (*Result, error) {
	if env == nil || env.Backend == nil {
		return nil, fmt.Errorf("%s: no backend", l.Name())
	}
	rules, err := alloc.RulesFor(string(env.Backend.Name()))
	if err != nil {
		return nil, err
	}
	count := env.Snapshots
	if count <= 0 {
		count = DefaultSnapshots
	}
	newAlloc := func() (*alloc.Allocator, error) {
		return alloc.New(env.Backend, alloc.Options{Rules: rules, MemoryLimit: 256 * alloc.MiB, CacheLimit: 16 * alloc.MiB})
	}
	a, err := newAlloc()
	if err != nil {
		return nil, err
	}
	t0 := time.Now()
	bad, msgs, ops, err := observe(ctx, env, a, count, a.Snapshot, true)
	if err != nil {
		return nil, err
	}
	final := a.Snapshot()
	if err := a.Close(); err != nil {
		return nil, err
	}
	t1 := time.Now()
	res := &Result{Total: count, Exact: count - len(bad)}
	for i, idx := range bad {
		id := fmt.Sprintf("snapshot/%05d", idx)
		res.Failing = append(res.Failing, id)
		if i < 100 {
			res.Cases = append(res.Cases, ledger.CaseResult{ID: id, Result: "mismatch", Note: "incoherent snapshot"})
		}
	}
	// Negative control: the same traffic, counters read one by one. A
	// race is probabilistic: on a loaded machine (or under the race
	// detector) one round of readings can miss it, so the control keeps
	// observing, up to controlRounds fresh rounds, until it sees a violation.
	var (
		cbad  []int
		cmsgs []string
		cops  int64
		round int
	)
	for round = 1; round <= controlRounds; round++ {
		c, err := newAlloc()
		if err != nil {
			return nil, err
		}
		b, m, o, err := observe(ctx, env, c, count, func() alloc.Snapshot { return c.ReadOneByOne(runtime.Gosched) }, false)
		if err != nil {
			c.Close()
			return nil, err
		}
		if err := c.Close(); err != nil {
			return nil, err
		}
		cbad, cmsgs = b, m
		cops = o // each round must itself overlap enough traffic (checked below)
		if len(cbad) > 0 {
			break
		}
	}
	round = min(round, controlRounds)
	t2 := time.Now()
	ctl := ControlResult{Outcome: ledger.ControlCaught,
		Summary: fmt.Sprintf("one-by-one reads: %d of %d readings incoherent under %d mutator operations (round %d of at most %d)", len(cbad), count, cops, round, controlRounds)}
	if len(cbad) == 0 {
		ctl.Outcome = ledger.ControlNotCaught
		ctl.Summary += " (the traffic did not race: inconclusive)"
	}
	ctl.Details = map[string]any{"readings": count, "rounds": round, "violations": len(cbad), "mutator_ops": cops, "examples": cmsgs}
	res.Control = ctl
	if minOps := int64(max(1, count/10)); ops < minOps || cops < minOps {
		// Without concurrent traffic the snapshots prove nothing.
		res.Control.Outcome = ledger.ControlNotCaught
		res.Control.Summary += fmt.Sprintf("; only %d (coherent) and %d (control) mutator operations ran during the readings, fewer than %d", ops, cops, minOps)
	}
	res.Details = map[string]any{
		"rules": rules.String(), "snapshots": count, "violations": len(bad), "violation_examples": msgs,
		"mutator_ops": ops, "final": final,
		"timing_ms": map[string]float64{"snapshots": ms(t1.Sub(t0)), "control": ms(t2.Sub(t1))},
	}
	env.progress(count, count)
	return res, nil
}
