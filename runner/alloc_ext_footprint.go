package runner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"sync"

	"github.com/evidence-ledger/ledger/ledger"
)

// extFootprint runs alloc-footprint/v1's cases against an adapter.
type extFootprint struct {
	ctx   context.Context
	s     *allocSession
	rules *RuntimeAllocRules
	// workloads collects how WORKLOADS' rule set fares on the same
	// observations.
	workloads []string
}

func (x *extFootprint) steps(st []AllocStep) ([]AllocStepResult, error) {
	var r struct {
		Results []AllocStepResult `json:"results"`
	}
	if err := x.s.do(x.ctx, AllocRequest{Op: "steps", Steps: st}, &r); err != nil {
		return nil, err
	}
	if len(r.Results) != len(st) {
		return nil, fmt.Errorf("steps: %d results for %d steps", len(r.Results), len(st))
	}
	return r.Results, nil
}

// backing is the active-memory growth of an alloc step.
func backing(r AllocStepResult) int { return int(r.After["active"] - r.Before["active"]) }

func (x *extFootprint) workloadsCheck(n, got int) {
	wb, err := extWorkloadsBound(x.rules, n)
	if err == nil && got > wb && len(x.workloads) < 20 {
		x.workloads = append(x.workloads, fmt.Sprintf("request %d got %d bytes, above WORKLOADS' %s bound %d", n, got, x.rules.Workloads, wb))
	}
}

func extWorkloadsBound(r *RuntimeAllocRules, n int) (int, error) {
	w := r.Workloads
	rr, err := w.Round(n)
	if err != nil {
		return 0, err
	}
	if b := rr + min(rr, 2*w.Page()) - 1; b > rr {
		return b, nil
	}
	return rr, nil
}

func extSizes(r *RuntimeAllocRules) []int {
	s := []int{0, 1, 7, 8, 9, 511, 512, 513, 4095, 4096, 4097, 8191, 8192, 8193, 16*1024 - 1, 16 * 1024, 16*1024 + 1}
	for e := 10; e <= 26; e += 2 {
		s = append(s, 1<<e-1, 1<<e+1)
	}
	if r == PyTorchCUDARules {
		s = append(s, ptSmallSize, ptSmallSize+1, ptMinLargeAlloc-1, ptMinLargeAlloc, 11<<20+1, 13<<20-512)
	}
	return s
}

func (x *extFootprint) fresh(bound boundFunc) (string, error) {
	sizes := extSizes(x.rules)
	var st []AllocStep
	for _, n := range sizes {
		st = append(st, AllocStep{Op: "clear_cache"}, AllocStep{Op: "alloc", Slot: 0, N: n}, AllocStep{Op: "free", Slot: 0})
	}
	st = append(st, AllocStep{Op: "clear_cache"})
	rs, err := x.steps(st)
	if err != nil {
		return "", err
	}
	for i, n := range sizes {
		r := rs[3*i+1]
		if r.Error != "" {
			return "", fmt.Errorf("request %d: runtime error: %s", n, r.Error)
		}
		got := backing(r)
		x.workloadsCheck(n, got)
		ub, err := bound(n)
		if err != nil {
			return "", err
		}
		if got < n || got > ub {
			return "", fmt.Errorf("request %d got %d bytes, bound %d", n, got, ub)
		}
	}
	return fmt.Sprintf("%d boundary sizes", len(sizes)), nil
}

func (x *extFootprint) reuse(bound boundFunc) (string, error) {
	reused, checked := 0, 0
	var mism []string
	for _, n := range []int{1, 9, 100, 1000, 3000, 5000, 12000, 16385, 40000, 100000, 1 << 20, 3 << 20, 11 << 20} {
		for _, cached := range x.rules.reusePairs(n) {
			rs, err := x.steps([]AllocStep{{Op: "clear_cache"}, {Op: "alloc", Slot: 0, N: cached}, {Op: "free", Slot: 0},
				{Op: "alloc", Slot: 1, N: n}, {Op: "free", Slot: 1}, {Op: "clear_cache"}})
			if err != nil {
				return "", err
			}
			r := rs[3]
			if r.Error != "" {
				return "", fmt.Errorf("request %d: runtime error: %s", n, r.Error)
			}
			got := backing(r)
			// Reused: the cache (or the reserved memory) did not grow.
			didReuse := r.After["cache"] < r.Before["cache"] || (r.Before["reserved"] > 0 && r.After["reserved"] == r.Before["reserved"])
			if didReuse {
				reused++
			}
			x.workloadsCheck(n, got)
			if x.rules.reuse != nil {
				checked++
				if pr, pb := x.rules.reuse(n, cached); pr != didReuse || pb != got {
					mism = append(mism, fmt.Sprintf("request %d after a freed %d: reused %v with %d bytes, the rules predict %v with %d", n, cached, didReuse, got, pr, pb))
				}
			}
			ub, err := bound(n)
			if err != nil {
				return "", err
			}
			if got < n || got > ub {
				return "", fmt.Errorf("request %d after a freed %d-byte buffer got %d bytes, above the bound %d", n, cached, got, ub)
			}
		}
	}
	if len(mism) > 0 {
		return "", fmt.Errorf("reuse differs from the rule set: %v", mism)
	}
	// Random traffic over a warm cache, one thread.
	rng := rand.New(rand.NewPCG(7, 11))
	var st []AllocStep
	var reqs []int
	live := []int{}
	for i := 0; i < 2000; i++ {
		if len(live) > 0 && rng.IntN(2) == 0 {
			j := rng.IntN(len(live))
			st = append(st, AllocStep{Op: "free", Slot: live[j]})
			reqs = append(reqs, -1)
			live[j] = live[len(live)-1]
			live = live[:len(live)-1]
			continue
		}
		n := int(math.Exp2(rng.Float64() * math.Log2(float64(x.rules.randomMax))))
		st = append(st, AllocStep{Op: "alloc", Slot: i, N: n})
		reqs = append(reqs, n)
		live = append(live, i)
	}
	for _, sl := range live {
		st = append(st, AllocStep{Op: "free", Slot: sl})
		reqs = append(reqs, -1)
	}
	st = append(st, AllocStep{Op: "clear_cache"})
	rs, err := x.steps(st)
	if err != nil {
		return "", err
	}
	for i, n := range reqs {
		if n < 0 {
			continue
		}
		if rs[i].Error != "" {
			return "", fmt.Errorf("traffic: request %d: runtime error: %s", n, rs[i].Error)
		}
		got := backing(rs[i])
		x.workloadsCheck(n, got)
		ub, err := bound(n)
		if err != nil || got < n || got > ub {
			return "", fmt.Errorf("traffic: request %d got %d bytes, bound %d (%v)", n, got, ub, err)
		}
	}
	if reused == 0 {
		return "", fmt.Errorf("no request reused a cached buffer: the case did not exercise reuse")
	}
	return fmt.Sprintf("%d directed requests reused a cached buffer (%d checked against the rules' prediction), 2000 random operations", reused, checked), nil
}

// refusedSize is a request no machine can serve (1 PiB) that still fits
// every size type: the runtime must refuse it without counting anything.
const refusedSize = 1 << 50

func (x *extFootprint) overflow() (string, error) {
	rejected := 0
	for _, n := range []int{math.MaxInt, math.MaxInt - 1, math.MaxInt - 4096} {
		if _, err := x.rules.UpperBound(n); err == nil {
			return "", fmt.Errorf("UpperBound(%d) accepted", n)
		}
		rejected++
	}
	if _, err := x.rules.UpperBound(-1); err == nil {
		return "", fmt.Errorf("UpperBound(-1) accepted")
	}
	rs, err := x.steps([]AllocStep{{Op: "clear_cache"}, {Op: "alloc", Slot: 0, N: refusedSize}, {Op: "free", Slot: 0}})
	if err != nil {
		return "", err
	}
	r := rs[1]
	if r.Error == "" {
		return "", fmt.Errorf("the runtime served a request of %d bytes", refusedSize)
	}
	for _, k := range []string{"active", "reserved", "cache"} {
		if r.After[k] > r.Before[k] {
			return "", fmt.Errorf("a refused request of %d bytes (%s) left %s at %d, was %d", refusedSize, r.Error, k, r.After[k], r.Before[k])
		}
	}
	return fmt.Sprintf("policy rejects %d sizes near the maximum; the runtime refused %d bytes (%s) without counting it", rejected, refusedSize, clipText(r.Error)), nil
}

func (x *extFootprint) detach(info *AllocInfo) (string, error) {
	sizes := extSizes(x.rules)
	want := make([]int, len(sizes))
	for i, n := range sizes {
		ub, err := x.rules.UpperBound(n)
		if err != nil {
			return "", err
		}
		want[i] = ub
	}
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for rep := 0; rep < 200; rep++ {
				for i, n := range sizes {
					if ub, err := x.rules.UpperBound(n); err != nil || ub != want[i] {
						errs <- fmt.Errorf("concurrent UpperBound(%d) = %d, %v; want %d", n, ub, err, want[i])
						return
					}
				}
			}
		}()
	}
	var old struct{ Memory, Cache int }
	err := x.s.do(x.ctx, AllocRequest{Op: "set_limits", Memory: 1 << 30, Cache: 1 << 20}, &old)
	wg.Wait()
	close(errs)
	if err != nil {
		return "", err
	}
	if e := <-errs; e != nil {
		return "", e
	}
	// The runtime's answers under the new limits still obey the captured rules.
	msg, ferr := x.fresh(x.rules.UpperBound)
	var back struct{ Memory, Cache int }
	if err := x.s.do(x.ctx, AllocRequest{Op: "set_limits", Memory: old.Memory, Cache: old.Cache}, &back); err != nil {
		return "", err
	}
	if ferr != nil {
		return "", fmt.Errorf("under changed limits: %w", ferr)
	}
	if back.Memory != 1<<30 && back.Memory != 0 || back.Cache != 1<<20 && back.Cache != 0 {
		return "", fmt.Errorf("the runtime did not take the changed limits (read back %d, %d)", back.Memory, back.Cache)
	}
	return "limits changed (memory 1 GiB, cache 1 MiB, were " + fmt.Sprint(old.Memory, ", ", old.Cache) + "); rules unchanged under 4 concurrent readers; " + msg + " still within them", nil
}

func runExtFootprint(ctx context.Context, s *allocSession, info *AllocInfo, rules *RuntimeAllocRules) (*Result, error) {
	x := &extFootprint{ctx: ctx, s: s, rules: rules}
	res := &Result{}
	cases := []struct {
		name string
		run  func() (string, error)
	}{
		{"fresh", func() (string, error) { return x.fresh(rules.UpperBound) }},
		{"reuse", func() (string, error) { return x.reuse(rules.UpperBound) }},
		{"detach", func() (string, error) { return x.detach(info) }},
		// Last: a refused request may leave the runtime's counters off.
		{"overflow", x.overflow},
	}
	for _, c := range cases {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		id := rules.Name + "/" + c.name
		note, err := c.run()
		var unsup *allocUnsupported
		cr := ledger.CaseResult{ID: id, Result: "exact", Note: note}
		if errors.As(err, &unsup) {
			cr.Result, cr.Note = "unsupported", err.Error()
		} else if err != nil && (errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, context.Canceled)) {
			return nil, err
		} else if err != nil {
			cr.Result, cr.Note = "mismatch", err.Error()
		}
		if cr.Result == "exact" {
			res.Exact++
		} else {
			res.Failing = append(res.Failing, id)
		}
		res.Total++
		res.Cases = append(res.Cases, cr)
	}
	// Negative control: the naive bound (rounded size) must fail case reuse.
	naive := func(n int) (int, error) { return rules.Round(n) }
	_, nerr := x.reuse(naive)
	res.Control = ControlResult{Outcome: ledger.ControlCaught, Summary: "naive bound (rounded size) caught by case reuse"}
	if nerr == nil {
		res.Control = ControlResult{Outcome: ledger.ControlNotCaught, Summary: "naive bound (rounded size) NOT caught by case reuse"}
	} else {
		res.Control.Details = map[string]any{"caught": nerr.Error()}
	}
	res.Details = map[string]any{
		"rules": rules.Name, "rule_sources": rules.Sources, "differences_from_workloads": rules.Differences,
		"workloads_rules":          rules.Workloads.String(),
		"workloads_rules_exceeded": x.workloads,
		"memory_limit":             info.MemoryLimit, "cache_limit": info.CacheLimit,
	}
	return res, nil
}
