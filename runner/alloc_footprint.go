package runner

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/runner/alloc"
)

// footprintLane is alloc-footprint/v1.
type footprintLane struct{}

// NewFootprintLane returns alloc-footprint/v1: the four policy cases
// (fresh, reuse, overflow, detach) for each rule set (CPU, CUDA and Metal
// rules, all over the backend's real memory), with the naive bound
// (rounded size only) as negative control, which case reuse must catch.
func NewFootprintLane() Lane { return footprintLane{} }

func (footprintLane) Name() string { return LaneAllocFoot }
func (footprintLane) Summary() string {
	return "allocation footprint policy: fresh, reuse, overflow, detach for cpu/cuda/metal rule sets; naive bound as control"
}

var footprintCaseNames = []string{"fresh", "reuse", "overflow", "detach"}

func (l footprintLane) Definition() []byte {
	var ids []string
	for _, r := range alloc.AllRules {
		for _, c := range footprintCaseNames {
			ids = append(ids, r.String()+"/"+c)
		}
	}
	b, _ := ledger.CanonicalBody(map[string]any{
		"lane": l.Name(), "cases": ids, "sizes": boundarySizes(alloc.RulesCPU),
		"verdict": "all cases pass; control: the naive bound (rounded size) must fail case reuse for every rule set, else inconclusive",
		"sources": allocSources(),
	})
	return b
}

// boundarySizes returns the request sizes of case fresh: 0, 1, 7, 8, 9,
// page-1, page, page+1, 2 page +-1, powers of two 2^4..2^26 and their
// neighbours.
func boundarySizes(r alloc.RuleSet) []int {
	p := r.Page()
	s := []int{0, 1, 7, 8, 9, 15, 16, 17, p - 1, p, p + 1, 2*p - 1, 2 * p, 2*p + 1, 16*alloc.KiB - 1, 16 * alloc.KiB, 16*alloc.KiB + 1}
	for e := 4; e <= 26; e++ {
		s = append(s, 1<<e-1, 1<<e, 1<<e+1)
	}
	return s
}

type boundFunc func(n int) (int, error)

func (l footprintLane) Run(ctx context.Context, env *Env) (*Result, error) {
	if env == nil || env.Backend == nil {
		return nil, fmt.Errorf("%s: no backend", l.Name())
	}
	res := &Result{}
	caught := 0
	var ctlNotes []string
	done := 0
	for _, rules := range alloc.AllRules {
		a, err := alloc.New(env.Backend, alloc.Options{Rules: rules, MemoryLimit: 1 << 30, CacheLimit: 512 * alloc.MiB})
		if err != nil {
			return nil, err
		}
		pol := a.Policy()
		cases := []struct {
			name string
			run  func() (string, error)
		}{
			{"fresh", func() (string, error) { return caseFresh(a, pol.UpperBound) }},
			{"reuse", func() (string, error) { return caseReuse(a, pol.UpperBound) }},
			{"overflow", func() (string, error) { return caseOverflow(a, pol) }},
			{"detach", func() (string, error) { return caseDetach(a, pol) }},
		}
		for _, c := range cases {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			id := rules.String() + "/" + c.name
			note, err := c.run()
			cr := ledger.CaseResult{ID: id, Result: "exact", Note: note}
			if err != nil {
				cr.Result, cr.Note = "mismatch", err.Error()
				res.Failing = append(res.Failing, id)
			} else {
				res.Exact++
			}
			res.Total++
			res.Cases = append(res.Cases, cr)
			if err := a.ClearCache(); err != nil {
				return nil, err
			}
			done++
			env.progress(done, 4*len(alloc.AllRules))
		}
		// Negative control: the naive bound must be caught by case reuse.
		naive := func(n int) (int, error) { return rules.Round(n) }
		if _, err := caseReuse(a, naive); err != nil {
			caught++
			ctlNotes = append(ctlNotes, rules.String()+": caught: "+err.Error())
		} else {
			ctlNotes = append(ctlNotes, rules.String()+": NOT caught")
		}
		if err := a.Close(); err != nil {
			return nil, err
		}
	}
	// Failing cases first in the details.
	var failing, passing []ledger.CaseResult
	for _, c := range res.Cases {
		if c.Result == "exact" {
			passing = append(passing, c)
		} else {
			failing = append(failing, c)
		}
	}
	res.Cases = append(failing, passing...)
	res.Control = ControlResult{Outcome: ledger.ControlCaught,
		Summary: fmt.Sprintf("naive bound (rounded size) caught by case reuse for %d of %d rule sets", caught, len(alloc.AllRules)),
		Details: map[string]any{"notes": ctlNotes}}
	if caught != len(alloc.AllRules) {
		res.Control.Outcome = ledger.ControlNotCaught
	}
	res.Details = map[string]any{"rule_sets": []string{"cpu-rules", "cuda-rules", "metal-rules"}, "memory": string(env.Backend.Name())}
	return res, nil
}

// caseFresh: with an empty cache, every boundary size n gets
// n <= backing <= bound(n).
func caseFresh(a *alloc.Allocator, bound boundFunc) (string, error) {
	if err := a.ClearCache(); err != nil {
		return "", err
	}
	sizes := boundarySizes(a.Rules())
	for _, n := range sizes {
		b, err := a.Malloc(n)
		if err != nil {
			return "", fmt.Errorf("malloc %d: %w", n, err)
		}
		ub, err := bound(n)
		if err == nil && (b.Size < n || b.Size > ub) {
			err = fmt.Errorf("request %d got %d bytes, bound %d", n, b.Size, ub)
		}
		if ferr := a.Free(b); ferr != nil && err == nil {
			err = ferr
		}
		if err != nil {
			return "", err
		}
		if err := a.ClearCache(); err != nil {
			return "", err
		}
	}
	return fmt.Sprintf("%d boundary sizes", len(sizes)), nil
}

// caseReuse: for each request n, cache the largest buffer the reuse rule
// still accepts (and one just past it), then check that Malloc(n) reuses a
// cached buffer and that the backing stays within bound(n); then random
// traffic checks every handed-out buffer against the bound.
func caseReuse(a *alloc.Allocator, bound boundFunc) (string, error) {
	rules := a.Rules()
	if err := a.ClearCache(); err != nil {
		return "", err
	}
	reused := 0
	for _, n := range []int{1, 9, 100, 1000, 3000, 5000, 12000, 16385, 40000, 100000, 1 << 20} {
		r, err := rules.Round(n)
		if err != nil {
			return "", err
		}
		// The largest rounded size L with r <= L < min(2r, r+2*page):
		// found by walking rounded sizes (the allocator's cached buffers
		// always have rounded sizes).
		limit := r + min(r, 2*rules.Page())
		largest := r
		for m := r; m < limit; m++ {
			if rm, _ := rules.Round(m); rm < limit && rm > largest {
				largest = rm
			}
		}
		big, err := a.Malloc(largest)
		if err != nil {
			return "", err
		}
		if err := a.Free(big); err != nil {
			return "", err
		}
		before := a.Snapshot().Reuses
		b, err := a.Malloc(n)
		if err != nil {
			return "", err
		}
		if a.Snapshot().Reuses == before+1 {
			reused++
		}
		ub, berr := bound(n)
		if ferr := a.Free(b); ferr != nil {
			return "", ferr
		}
		if berr != nil {
			return "", berr
		}
		if b.Size < n || b.Size > ub {
			return "", fmt.Errorf("request %d reused a %d-byte buffer, above the bound %d", n, b.Size, ub)
		}
		if err := a.ClearCache(); err != nil {
			return "", err
		}
	}
	// Random traffic over a warm cache.
	rng := rand.New(rand.NewPCG(7, uint64(rules)))
	var live []alloc.Buffer
	for i := 0; i < 2000; i++ {
		if len(live) > 0 && rng.IntN(2) == 0 {
			j := rng.IntN(len(live))
			if err := a.Free(live[j]); err != nil {
				return "", err
			}
			live[j] = live[len(live)-1]
			live = live[:len(live)-1]
			continue
		}
		n := int(math.Exp2(rng.Float64() * 17))
		b, err := a.Malloc(n)
		if err != nil {
			return "", err
		}
		live = append(live, b)
		if ub, err := bound(n); err != nil || b.Size < n || b.Size > ub {
			for _, x := range live {
				_ = a.Free(x)
			}
			return "", fmt.Errorf("traffic: request %d got %d bytes, bound %d (%v)", n, b.Size, ub, err)
		}
	}
	for _, x := range live {
		if err := a.Free(x); err != nil {
			return "", err
		}
	}
	if reused == 0 {
		return "", fmt.Errorf("no request reused a cached buffer: the case did not exercise reuse")
	}
	return fmt.Sprintf("%d directed reuses, 2000 random operations", reused), nil
}

// caseOverflow: sizes near math.MaxInt are rejected by the policy with
// ErrOverflow, and Malloc of them fails without allocating anything.
func caseOverflow(a *alloc.Allocator, pol alloc.AllocationFootprintPolicy) (string, error) {
	p := pol.Page()
	before := a.Snapshot()
	rejected := 0
	for _, n := range []int{math.MaxInt, math.MaxInt - 1, math.MaxInt - p, math.MaxInt - 2*p + 2, math.MaxInt - 2*p + 1} {
		if _, err := pol.UpperBound(n); !errors.Is(err, alloc.ErrOverflow) {
			return "", fmt.Errorf("UpperBound(%d) = %v, want an overflow error", n, err)
		}
		if b, err := a.Malloc(n); err == nil {
			_ = a.Free(b)
			return "", fmt.Errorf("Malloc(%d) succeeded", n)
		}
		rejected++
	}
	// Just under the overflow threshold the bound exists but the memory
	// limit refuses the allocation, again without allocating.
	n := math.MaxInt / 2
	if _, err := pol.UpperBound(n); err != nil {
		return "", fmt.Errorf("UpperBound(%d): %v", n, err)
	}
	if _, err := a.Malloc(n); !errors.Is(err, alloc.ErrMemoryLimit) {
		return "", fmt.Errorf("Malloc(%d) = %v, want the memory limit error", n, err)
	}
	if _, err := pol.UpperBound(-1); err == nil {
		return "", fmt.Errorf("UpperBound(-1) accepted")
	}
	after := a.Snapshot()
	if after.RawBytes != before.RawBytes || after.RawBuffers != before.RawBuffers || after.FreshAllocs != before.FreshAllocs {
		return "", fmt.Errorf("rejected requests allocated memory: %+v -> %+v", before, after)
	}
	return fmt.Sprintf("%d sizes rejected, nothing allocated", rejected), nil
}

// caseDetach: changing the allocator's limits after capturing the policy
// changes nothing in it; concurrent readers see the same answers.
func caseDetach(a *alloc.Allocator, pol alloc.AllocationFootprintPolicy) (string, error) {
	sizes := boundarySizes(pol.Rules())
	want := make([]int, len(sizes))
	for i, n := range sizes {
		ub, err := pol.UpperBound(n)
		if err != nil {
			return "", err
		}
		want[i] = ub
	}
	memBefore, cacheBefore := pol.MemoryLimit(), pol.CacheLimit()
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for rep := 0; rep < 200; rep++ {
				for i, n := range sizes {
					if ub, err := pol.UpperBound(n); err != nil || ub != want[i] {
						errs <- fmt.Errorf("concurrent UpperBound(%d) = %d, %v; want %d", n, ub, err, want[i])
						return
					}
				}
			}
		}()
	}
	oldMem, err := a.SetMemoryLimit(64 * alloc.MiB)
	if err != nil {
		return "", err
	}
	oldCache, err := a.SetCacheLimit(1 * alloc.MiB)
	if err != nil {
		return "", err
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return "", err
	}
	fresh := a.Policy()
	_, _ = a.SetMemoryLimit(oldMem)
	_, _ = a.SetCacheLimit(oldCache)
	if pol.MemoryLimit() != memBefore || pol.CacheLimit() != cacheBefore {
		return "", fmt.Errorf("captured policy changed with the allocator's limits")
	}
	if fresh.MemoryLimit() != 64*alloc.MiB || fresh.CacheLimit() != 1*alloc.MiB {
		return "", fmt.Errorf("a policy captured after the change does not show it (%d, %d)", fresh.MemoryLimit(), fresh.CacheLimit())
	}
	return "limits changed after capture; captured policy unchanged under 4 concurrent readers", nil
}
