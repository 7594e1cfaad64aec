package runner

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/evidence-ledger/ledger/ledger"
)

// AllocAdapterProtocol is the allocator adapter protocol, the second
// version of the adapter protocol beside AdapterProtocol (which is
// unchanged). It carries alloc-snapshot/v1 and alloc-footprint/v1 to a real
// runtime's allocator: the adapter generates allocation traffic inside the
// runtime (threads creating and freeing arrays or tensors of the sizes the
// ledger asks for) and answers counter readings; the ledger computes every
// verdict from the readings.
//
// Frames are those of AdapterProtocol (type byte, u32 little-endian
// length, payload). Both sides open with a hello (FrameHello, JSON
// AdapterHello with protocol "ledger-alloc-adapter/1"); then the ledger
// sends requests (FrameRequest, JSON AllocRequest) and the adapter answers
// each, in order, with exactly one FrameReply (JSON), FrameUnsupported
// (UTF-8 reason: the runtime has no way to do it) or FrameError (UTF-8
// message); FrameBye ends the session. Requests, by op:
//
//	info:       reply AllocInfo (runtime rule set name, counters, limits)
//	observe:    mode "coherent" (one reading of every counter under the
//	            allocator's lock) or "independent" (each counter by its own
//	            call, the original way); readings, mutators, sizes[m] (bytes
//	            of mutator m's arrays), live (arrays each mutator holds at
//	            most), min_ops (mutator operations to spread the readings
//	            over). Reply AllocObservation.
//	steps:      run steps in order on one thread: {"op":"alloc","slot":i,
//	            "n":bytes}, {"op":"free","slot":i}, {"op":"clear_cache"};
//	            reply {"results":[AllocStepResult...]}, one per step.
//	set_limits: {"memory":bytes,"cache":bytes} (0 leaves one unchanged);
//	            reply {"memory":old,"cache":old}.
//
// Payloads are at most MaxFramePayload bytes; texts at most 1024 bytes.
const AllocAdapterProtocol = "ledger-alloc-adapter/1"

// Frame types of AllocAdapterProtocol beside FrameHello, FrameUnsupported,
// FrameError and FrameBye.
const (
	FrameRequest byte = 'R' // ledger -> adapter: JSON AllocRequest
	FrameReply   byte = 'A' // adapter -> ledger: JSON reply
)

//go:embed alloc_ext.go
var srcAllocExt []byte

//go:embed alloc_ext_rules.go
var srcAllocExtRules []byte

// AllocRequest is one request of AllocAdapterProtocol.
type AllocRequest struct {
	Op       string      `json:"op"`
	Mode     string      `json:"mode,omitempty"`
	Readings int         `json:"readings,omitempty"`
	Mutators int         `json:"mutators,omitempty"`
	Sizes    []int       `json:"sizes,omitempty"`
	Live     int         `json:"live,omitempty"`
	MinOps   int         `json:"min_ops,omitempty"`
	Steps    []AllocStep `json:"steps,omitempty"`
	Memory   int         `json:"memory,omitempty"`
	Cache    int         `json:"cache,omitempty"`
}

// AllocStep is one step of a steps request.
type AllocStep struct {
	Op   string `json:"op"`
	Slot int    `json:"slot"`
	N    int    `json:"n,omitempty"`
}

// AllocInfo is the reply to info.
type AllocInfo struct {
	// Rules names the runtime's rule set (RuntimeRulesFor).
	Rules string `json:"rules"`
	// Counters are the counter names every reading carries, among
	// "active" (bytes of live buffers), "cache" (bytes of freed buffers
	// held for reuse), "peak" (maximum of active) and "reserved" (bytes
	// held from the backend).
	Counters    []string `json:"counters"`
	MemoryLimit int      `json:"memory_limit,omitempty"`
	CacheLimit  int      `json:"cache_limit,omitempty"`
	// Coherent names the runtime's call that reads every counter under
	// one acquisition of the allocator's lock, "" when it has none.
	Coherent    string `json:"coherent,omitempty"`
	Independent string `json:"independent,omitempty"`
}

// AllocObservation is the reply to observe.
type AllocObservation struct {
	Fields   []string  `json:"fields"`
	Readings [][]int64 `json:"readings"`
	// MutatorOps counts the mutators' operations during the readings.
	MutatorOps int `json:"mutator_ops"`
	// FreshBuffers counts buffer addresses first seen during the readings
	// (-1: not tracked).
	FreshBuffers int `json:"fresh_buffers"`
	// QuiescentBefore/After are readings with no traffic running, after
	// the warm-up and after the mutators stopped.
	QuiescentBefore map[string]int64 `json:"quiescent_before"`
	QuiescentAfter  map[string]int64 `json:"quiescent_after"`
	Stalled         bool             `json:"stalled,omitempty"`
}

// AllocStepResult is the outcome of one step: the counters before and
// after it, the runtime's own size of an allocated buffer (-1 unknown) and
// the runtime's error, if any.
type AllocStepResult struct {
	Before map[string]int64 `json:"before"`
	After  map[string]int64 `json:"after"`
	Size   int64            `json:"size"`
	Error  string           `json:"error,omitempty"`
}

// errAllocUnsupported wraps an adapter's unsupported answer.
type allocUnsupported struct{ reason string }

func (e *allocUnsupported) Error() string { return "unsupported: " + e.reason }

// allocSession is one allocator adapter process, or a replay of one.
type allocSession struct {
	p       *adapterProc
	timeout time.Duration
	replay  []AllocExchange
}

// AllocExchange is one recorded request and its answer, as an allocator
// adapter writes them with LEDGER_ALLOC_DUMP=FILE (one JSON object a
// line): Type is "A" (Answer is the reply's JSON text), "U" or "E"
// (Answer is the reason or message).
type AllocExchange struct {
	Request json.RawMessage `json:"request"`
	Type    string          `json:"type"`
	Answer  string          `json:"answer"`
}

// ReplayAllocLane re-derives an allocator lane's result (lane
// alloc-snapshot/v1 or alloc-footprint/v1) from a recorded session: the
// same Go code judges the recorded answers, and every request the lane
// makes must equal the recorded one, in order (a different request, or
// one past the record, is an error). It is how a test checks committed
// device evidence without the device.
func ReplayAllocLane(ctx context.Context, lane string, rec []AllocExchange) (*Result, error) {
	s := &allocSession{replay: rec}
	var info AllocInfo
	if err := s.do(ctx, AllocRequest{Op: "info"}, &info); err != nil {
		return nil, err
	}
	rules, err := RuntimeRulesFor(info.Rules)
	if err != nil {
		return nil, err
	}
	switch lane {
	case LaneAllocSnap:
		return runExtSnapshot(ctx, s, &info, rules, DefaultSnapshots)
	case LaneAllocFoot:
		return runExtFootprint(ctx, s, &info, rules)
	}
	return nil, fmt.Errorf("%s is not an allocator lane", lane)
}

// doReplay answers req from the record.
func (s *allocSession) doReplay(req AllocRequest, b []byte) (byte, []byte, error) {
	if len(s.replay) == 0 {
		return 0, nil, fmt.Errorf("replay: request %s past the end of the record", req.Op)
	}
	x := s.replay[0]
	s.replay = s.replay[1:]
	var got, want any
	if json.Unmarshal(b, &got) != nil || json.Unmarshal(x.Request, &want) != nil {
		return 0, nil, fmt.Errorf("replay: unreadable request")
	}
	gb, _ := json.Marshal(got)
	wb, _ := json.Marshal(want)
	if string(gb) != string(wb) {
		return 0, nil, fmt.Errorf("replay: the lane asked %s, the record has %s", clipText(string(gb)), clipText(string(wb)))
	}
	if len(x.Type) != 1 {
		return 0, nil, fmt.Errorf("replay: answer type %q", x.Type)
	}
	return x.Type[0], []byte(x.Answer), nil
}

// startAllocSession starts an adapter and exchanges the allocator hello.
func startAllocSession(ctx context.Context, spec AdapterSpec) (*allocSession, error) {
	spec = spec.defaults()
	p, err := startProc(ctx, spec, AllocAdapterProtocol)
	if err != nil {
		return nil, fmt.Errorf("%s adapter protocol: %w", AllocAdapterProtocol, err)
	}
	return &allocSession{p: p, timeout: max(spec.CaseTimeout, 120*time.Second)}, nil
}

// frameRes is one answer frame read from an adapter.
type frameRes struct {
	typ     byte
	payload []byte
	err     error
}

// send writes a request and reads the answer frame into ch.
func (s *allocSession) send(ch chan<- frameRes, op string, b []byte) {
	if err := WriteFrame(s.p.stdin, FrameRequest, b); err != nil {
		ch <- frameRes{err: fmt.Errorf("send %s: %w", op, err)}
		return
	}
	typ, payload, err := ReadFrame(s.p.out)
	ch <- frameRes{typ, payload, err}
}

// do sends one request and decodes its answer into reply; an unsupported
// answer is an *allocUnsupported error.
func (s *allocSession) do(ctx context.Context, req AllocRequest, reply any) error {
	b, err := json.Marshal(req)
	if err != nil {
		return err
	}
	var r frameRes
	if s.replay != nil {
		r.typ, r.payload, r.err = s.doReplay(req, b)
		if r.err != nil {
			return r.err
		}
	} else {
		ch := make(chan frameRes, 1)
		go s.send(ch, req.Op, b)
		t := time.NewTimer(s.timeout)
		defer t.Stop()
		select {
		case r = <-ch:
			if r.err != nil {
				return fmt.Errorf("%s: %w%s", req.Op, r.err, s.p.exitNote())
			}
		case <-t.C:
			s.p.kill()
			return fmt.Errorf("%s: no answer within %v", req.Op, s.timeout)
		case <-ctx.Done():
			s.p.kill()
			return ctx.Err()
		}
	}
	switch r.typ {
	case FrameReply:
		if err := json.Unmarshal(r.payload, reply); err != nil {
			return fmt.Errorf("%s: reply: %v", req.Op, err)
		}
		return nil
	case FrameUnsupported, FrameError:
		txt := string(r.payload)
		if len(txt) > maxReason || !utf8.ValidString(txt) {
			return fmt.Errorf("%s: answer text must be at most %d bytes of UTF-8", req.Op, maxReason)
		}
		if r.typ == FrameUnsupported {
			return &allocUnsupported{txt}
		}
		return fmt.Errorf("%s: adapter error: %s", req.Op, txt)
	}
	return fmt.Errorf("%s: unexpected frame type %q", req.Op, r.typ)
}

func (s *allocSession) close() { s.p.close() }

// extAllocLane is alloc-snapshot/v1 or alloc-footprint/v1 run against an
// external allocator through AllocAdapterProtocol. It is not registered:
// RunImpl runs it; Run refuses to run without an adapter.
type extAllocLane struct{ name string }

func (l extAllocLane) Name() string { return l.name }
func (l extAllocLane) Summary() string {
	return l.name + " against a runtime's own allocator through " + AllocAdapterProtocol
}
func (l extAllocLane) Run(context.Context, *Env) (*Result, error) {
	return nil, fmt.Errorf("%s against an external allocator runs only through ledger run --impl", l.name)
}

func (l extAllocLane) Definition() []byte {
	d := map[string]any{
		"lane": l.name, "against": "an external allocator through " + AllocAdapterProtocol,
		"sources": map[string]string{"runner/alloc_ext.go": sha256Hex(srcAllocExt), "runner/alloc_ext_rules.go": sha256Hex(srcAllocExtRules)},
	}
	if l.name == LaneAllocSnap {
		d["readings"] = DefaultSnapshots
		d["invariants"] = extInvariants
		d["verdict"] = "every coherent reading satisfies the invariants (failed when the runtime has no coherent reading: every case unsupported); control: readings of each counter by its own call under the same traffic must violate one at least once in up to 10 rounds, with >= readings/10 mutator operations during the readings and the raw bytes held constant (no fresh buffer), else inconclusive"
	} else {
		d["cases"] = []string{"<rules>/fresh", "<rules>/reuse", "<rules>/overflow", "<rules>/detach"}
		d["verdict"] = "all four cases pass under the runtime's rule set (RuntimeAllocRules, from its source); WORKLOADS' rule set for the backend is evaluated on the same observations and reported; control: the naive bound (rounded size) must fail case reuse, else inconclusive"
	}
	b, _ := ledger.CanonicalBody(d)
	return b
}

var extInvariants = []string{
	"active + cache == raw bytes held (when the reading has cache and the traffic is closed: raw measured quiescent before and after, equal, no fresh buffer)",
	"active <= reserved (when the reading has reserved)",
	"peak >= active (when the reading has peak; no reset during the observation)",
}

// checkReading returns the first invariant a reading violates, "" if none.
func checkReading(f map[string]int, r []int64, raw int64) string {
	get := func(k string) (int64, bool) {
		i, ok := f[k]
		if !ok || i >= len(r) {
			return 0, false
		}
		return r[i], true
	}
	a, okA := get("active")
	if c, ok := get("cache"); ok && okA && raw >= 0 && a+c != raw {
		return fmt.Sprintf("active %d + cache %d = %d, raw bytes held %d", a, c, a+c, raw)
	}
	if v, ok := get("reserved"); ok && okA && a > v {
		return fmt.Sprintf("active %d > reserved %d", a, v)
	}
	if p, ok := get("peak"); ok && okA && p < a {
		return fmt.Sprintf("peak %d < active %d", p, a)
	}
	return ""
}

// ObservationVerdict is the ledger's reading of one observation.
type ObservationVerdict struct {
	Readings   int      `json:"readings"`
	Violations int      `json:"violations"`
	Bad        []int    `json:"-"`
	Examples   []string `json:"examples,omitempty"`
	// Raw is the raw bytes held (quiescent active + cache) when the
	// traffic was closed (equal before and after, no fresh buffer), else -1.
	Raw        int64  `json:"raw"`
	MutatorOps int    `json:"mutator_ops"`
	Valid      bool   `json:"valid"`
	Why        string `json:"why,omitempty"`
}

// JudgeObservation applies the invariants to an adapter's observation.
// minOps is the number of mutator operations the readings must have
// overlapped. Valid says whether the observation raced real traffic (enough
// operations, not stalled, and, where cache is read, a closed traffic).
func JudgeObservation(o *AllocObservation, minOps int) ObservationVerdict {
	f := map[string]int{}
	for i, k := range o.Fields {
		f[k] = i
	}
	v := ObservationVerdict{Readings: len(o.Readings), Raw: -1, MutatorOps: o.MutatorOps, Valid: true}
	if _, hasCache := f["cache"]; hasCache {
		qb, qa := o.QuiescentBefore, o.QuiescentAfter
		rb, ra := qb["active"]+qb["cache"], qa["active"]+qa["cache"]
		if rb == ra && o.FreshBuffers == 0 && qb != nil && qa != nil {
			v.Raw = rb
		} else {
			v.Valid, v.Why = false, fmt.Sprintf("traffic not closed: raw bytes %d before, %d after, %d fresh buffers", rb, ra, o.FreshBuffers)
		}
	}
	if o.Stalled {
		v.Valid, v.Why = false, "traffic stalled"
	}
	if o.MutatorOps < minOps {
		v.Valid, v.Why = false, fmt.Sprintf("only %d mutator operations during the readings, fewer than %d", o.MutatorOps, minOps)
	}
	for i, r := range o.Readings {
		if msg := checkReading(f, r, v.Raw); msg != "" {
			v.Violations++
			v.Bad = append(v.Bad, i)
			if len(v.Examples) < 10 {
				v.Examples = append(v.Examples, fmt.Sprintf("reading %d: %s", i, msg))
			}
		}
	}
	return v
}

// extTraffic is the observe request of both phases.
func extTraffic(mode string, readings int, rules *RuntimeAllocRules) AllocRequest {
	sizes := []int{}
	mut := 4
	for m := 0; m < mut; m++ {
		if rules == PyTorchCUDARules {
			// Large-pool requests of whole 2 MiB segments (>= 10 MiB): with
			// the cache emptied, reserved tracks allocated tightly.
			sizes = append(sizes, (6+m)*ptRoundLarge)
		} else {
			// Sizes far apart (beyond each other's reuse window).
			sizes = append(sizes, (m+1)*64*1024+8*m)
		}
	}
	return AllocRequest{Op: "observe", Mode: mode, Readings: readings, Mutators: mut, Sizes: sizes, Live: 4, MinOps: max(1, readings/10)}
}

// runExtSnapshot is alloc-snapshot/v1 against an adapter.
func runExtSnapshot(ctx context.Context, s *allocSession, info *AllocInfo, rules *RuntimeAllocRules, count int) (*Result, error) {
	minOps := max(1, count/10)
	res := &Result{Total: count}
	var coh AllocObservation
	err := s.do(ctx, extTraffic("coherent", count, rules), &coh)
	var unsup *allocUnsupported
	details := map[string]any{"rules": rules.Name, "counters": info.Counters, "coherent_call": info.Coherent, "independent_calls": info.Independent, "readings": count}
	switch {
	case errors.As(err, &unsup):
		res.Failing = []string{"snapshot/*"}
		res.Cases = []ledger.CaseResult{{ID: "snapshot/*", Result: "unsupported",
			Note: "the runtime offers no coherent snapshot, so no reading can pass: " + unsup.reason}}
		details["coherent"] = "unsupported: " + unsup.reason
	case err != nil:
		return nil, err
	default:
		v := JudgeObservation(&coh, minOps)
		if len(coh.Readings) != count {
			return nil, fmt.Errorf("observe coherent: %d readings, asked for %d", len(coh.Readings), count)
		}
		res.Exact = count - v.Violations
		for i, idx := range v.Bad {
			id := fmt.Sprintf("snapshot/%05d", idx)
			res.Failing = append(res.Failing, id)
			if i < 100 {
				res.Cases = append(res.Cases, ledger.CaseResult{ID: id, Result: "mismatch", Note: "incoherent reading"})
			}
		}
		details["coherent"] = v
		if !v.Valid {
			details["coherent_traffic"] = v.Why
		}
	}
	var cv ObservationVerdict
	round := 0
	for round = 1; round <= controlRounds; round++ {
		var o AllocObservation
		if err := s.do(ctx, extTraffic("independent", count, rules), &o); err != nil {
			return nil, fmt.Errorf("control: %w", err)
		}
		if len(o.Readings) != count && !o.Stalled {
			return nil, fmt.Errorf("observe independent: %d readings, asked for %d", len(o.Readings), count)
		}
		cv = JudgeObservation(&o, minOps)
		if cv.Valid && cv.Violations > 0 {
			break
		}
	}
	round = min(round, controlRounds)
	ctl := ControlResult{Outcome: ledger.ControlCaught, Details: map[string]any{"rounds": round, "last": cv}}
	ctl.Summary = fmt.Sprintf("independent reads (%s): %d of %d readings incoherent under %d mutator operations (round %d of at most %d)",
		info.Independent, cv.Violations, cv.Readings, cv.MutatorOps, round, controlRounds)
	if !cv.Valid || cv.Violations == 0 {
		ctl.Outcome = ledger.ControlNotCaught
		if cv.Why != "" {
			ctl.Summary += "; " + cv.Why
		} else {
			ctl.Summary += " (the traffic did not race: inconclusive)"
		}
	}
	res.Control = ctl
	res.Details = details
	return res, nil
}

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
