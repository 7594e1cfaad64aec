package main

import (
	"fmt"
	"math/rand/v2"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
)

// The lifecycle model test (TRUST.md rule 8, issue 29): seeded random
// sequences of every operation that writes a leaf, driven through a real
// `ledger serve` and the --db CLI, with the invariants checked every few
// steps (lcEnv.check). A failure prints the seed and a shrunk sequence
// that fails on a fresh ledger, and how to replay it.
//
// Environment:
//
//	LEDGER_LIFECYCLE_STEPS   steps per seed (default 300; make lifecycle: 1500 x 2 seeds)
//	LEDGER_LIFECYCLE_SEEDS   seeds per store (default 1)
//	LEDGER_LIFECYCLE_SEED    the first seed (default: from the time, printed)
//	LEDGER_LIFECYCLE_CHECK   steps between invariant checks (default 25)
//	LEDGER_LIFECYCLE_REPLAY  a sequence to run instead ("op@seed op@seed ...")
//	LEDGER_LIFECYCLE_STORES  stores to run (default "sqlite postgres")
//	LEDGER_LIFECYCLE_SHRINK_SECONDS  time spent shrinking a failure (default 120)

// lcStep is one generated step: an operation and the seed of its own
// random choices, so that a step does the same when others are dropped.
type lcStep struct {
	op   string
	seed uint64
}

func (s lcStep) String() string { return fmt.Sprintf("%s@%d", s.op, s.seed) }

func lcEnvInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// lcGenerate draws n steps from seed by the operations' weights; every
// operation is drawn at least once (a restore after a backup), so a run
// covers every leaf kind.
func lcGenerate(seed uint64, n int) []lcStep {
	r := rand.New(rand.NewPCG(seed, 0x6c6966656379636c))
	total := 0
	for _, o := range lcOps {
		total += o.weight
	}
	seq := make([]lcStep, 0, n+len(lcOps))
	for range n {
		x := r.IntN(total)
		for _, o := range lcOps {
			if x < o.weight {
				seq = append(seq, lcStep{o.name, r.Uint64()})
				break
			}
			x -= o.weight
		}
	}
	for _, o := range lcOps {
		if slices.ContainsFunc(seq, func(s lcStep) bool { return s.op == o.name }) {
			continue
		}
		at := r.IntN(len(seq) + 1)
		seq = slices.Insert(seq, at, lcStep{o.name, r.Uint64()})
	}
	// A restore needs a backup some steps before it.
	first := slices.IndexFunc(seq, func(s lcStep) bool { return s.op == "restore" })
	if b := slices.IndexFunc(seq, func(s lcStep) bool { return s.op == "backup" }); b < 0 || b > first {
		seq = slices.Insert(seq, max(0, first-3), lcStep{"backup", r.Uint64()})
	}
	return seq
}

func parseLCSteps(s string) ([]lcStep, error) {
	var seq []lcStep
	for _, f := range strings.Fields(s) {
		op, sd, ok := strings.Cut(f, "@")
		n, err := strconv.ParseUint(sd, 10, 64)
		if _, known := lcOpByName(op); !ok || err != nil || !known {
			return nil, fmt.Errorf("step %q: want op@seed with a known op", f)
		}
		seq = append(seq, lcStep{op, n})
	}
	return seq, nil
}

// lcResult is how a run of a sequence ended.
type lcResult struct {
	failAt int // the step after which it failed; -1 passed
	err    error
	kinds  map[ledger.Kind]int
	trace  []string
	size   uint64
}

// lcRun runs seq on a fresh ledger of store, checking the invariants
// every checkEvery steps (0: only at the end) and at the end.
func lcRun(t *testing.T, store string, fix *lcFixture, seq []lcStep, checkEvery int) (res lcResult) {
	res = lcResult{failAt: -1, kinds: map[ledger.Kind]int{}}
	e, err := newLCEnv(t, store, fix)
	defer func() {
		e.close()
		res.trace = e.trace
	}()
	if err != nil {
		res.failAt, res.err = 0, fmt.Errorf("set-up: %w", err)
		return res
	}
	e.seen = res.kinds
	for i, s := range seq {
		e.step = i
		o, _ := lcOpByName(s.op)
		if err := o.do(e, rand.New(rand.NewPCG(s.seed, 1))); err != nil {
			res.failAt, res.err = i, fmt.Errorf("step %d %s: %w", i, s, err)
			return res
		}
		if i == len(seq)-1 || checkEvery > 0 && (i+1)%checkEvery == 0 {
			if err := e.check(); err != nil {
				res.failAt, res.err = i, fmt.Errorf("invariants after step %d %s: %w", i, s, err)
				return res
			}
			if err := e.noteKinds(); err != nil {
				res.failAt, res.err = i, err
				return res
			}
		}
	}
	if cp, err := e.checkpoint(); err == nil {
		res.size = cp.Size
	}
	return res
}

// noteKinds adds the kinds of the log's leaves to the kinds seen (before
// a restore drops some).
func (e *lcEnv) noteKinds() error {
	seen, err := e.kindsSeen()
	if err != nil {
		return err
	}
	for k, n := range seen {
		e.seen[k] = max(e.seen[k], n)
	}
	return nil
}

// lcShrink drops steps (halves, then smaller chunks, then one at a time)
// while the sequence still fails the same way (lcSignature) on a fresh
// ledger, within budget.
func lcShrink(t *testing.T, store string, fix *lcFixture, seq []lcStep, failure error, budget time.Duration) ([]lcStep, lcResult) {
	end := time.Now().Add(budget)
	best := seq
	want := lcSignature(failure)
	var bestRes lcResult
	for chunk := len(best) / 2; chunk >= 1 && time.Now().Before(end); chunk /= 2 {
		for i := 0; i < len(best) && time.Now().Before(end); {
			cand := slices.Concat(best[:i], best[min(len(best), i+chunk):])
			if len(cand) == 0 {
				i += chunk
				continue
			}
			res := lcRun(t, store, fix, cand, 0)
			if res.err != nil && lcSignature(res.err) == want {
				t.Logf("shrink: %d steps still fail (%v)", len(cand), firstLine(res.err))
				best, bestRes = cand[:res.failAt+1], res
				continue
			}
			i += chunk
		}
	}
	return best, bestRes
}

var lcVarying = regexp.MustCompile(`[0-9a-f]{8,}|[0-9]+`)

// lcSignature is what makes two failures the same one while shrinking:
// the failing operation (or "invariants") and the first line of the
// error, without the step numbers, seeds, ids and sizes that vary.
func lcSignature(err error) string {
	msg := firstLine(err)
	where := "invariants"
	if !strings.HasPrefix(msg, "invariants") {
		f := strings.Fields(msg)
		if len(f) > 2 {
			where, _, _ = strings.Cut(f[2], "@")
		}
	}
	if _, rest, ok := strings.Cut(msg, ": "); ok {
		msg = rest
	}
	msg = lcVarying.ReplaceAllString(msg, "#")
	msg = regexp.MustCompile(`/tmp/\S+`).ReplaceAllString(msg, "PATH")
	return where + ": " + msg[:min(len(msg), 100)]
}

func firstLine(err error) string {
	s, _, _ := strings.Cut(err.Error(), "\n")
	return s
}

// TestLifecycle is the lifecycle model test on SQLite and on PostgreSQL.
func TestLifecycle(t *testing.T) {
	if testing.Short() {
		t.Skip("the lifecycle model test runs real server processes: skipped with -short")
	}
	fix := newLCFixture(t)
	stores := strings.Fields(os.Getenv("LEDGER_LIFECYCLE_STORES"))
	if len(stores) == 0 {
		stores = []string{"sqlite", "postgres"}
	}
	for _, store := range stores {
		t.Run(store, func(t *testing.T) {
			if store == "postgres" {
				newPGDatabase(t) // skips (or fails under LEDGER_REQUIRE_POSTGRES=1) without PostgreSQL
			}
			steps, seeds, every := lcEnvInt("LEDGER_LIFECYCLE_STEPS", 300), lcEnvInt("LEDGER_LIFECYCLE_SEEDS", 1), lcEnvInt("LEDGER_LIFECYCLE_CHECK", 25)
			first := uint64(time.Now().UnixNano())
			if v, err := strconv.ParseUint(os.Getenv("LEDGER_LIFECYCLE_SEED"), 10, 64); err == nil {
				first = v
			}
			if replay := os.Getenv("LEDGER_LIFECYCLE_REPLAY"); replay != "" {
				seq, err := parseLCSteps(replay)
				if err != nil {
					t.Fatal(err)
				}
				res := lcRun(t, store, fix, seq, 1)
				t.Logf("trace:\n%s", strings.Join(res.trace, "\n"))
				if res.err != nil {
					t.Fatalf("replay failed: %v", res.err)
				}
				return
			}
			for s := range seeds {
				seed := first + uint64(s)
				seq := lcGenerate(seed, steps)
				start := time.Now()
				res := lcRun(t, store, fix, seq, every)
				if res.err != nil {
					t.Errorf("seed %d (%d steps) failed after step %d: %v", seed, len(seq), res.failAt, res.err)
					t.Logf("trace of the failing run (last 30 steps):\n%s", strings.Join(res.trace[max(0, len(res.trace)-30):], "\n"))
					shrunk, sres := lcShrink(t, store, fix, seq[:res.failAt+1], res.err, time.Duration(lcEnvInt("LEDGER_LIFECYCLE_SHRINK_SECONDS", 120))*time.Second)
					if sres.err != nil {
						t.Errorf("shrunk to %d steps, failing with: %v\ntrace:\n%s", len(shrunk), sres.err, strings.Join(sres.trace, "\n"))
					}
					t.Errorf("replay: LEDGER_LIFECYCLE_STORES=%s LEDGER_LIFECYCLE_REPLAY='%s' go test -count=1 -run TestLifecycle ./cmd/ledger", store, lcJoin(shrunk))
					return
				}
				var missing []string
				for _, k := range ledger.Kinds() {
					if res.kinds[k] == 0 {
						missing = append(missing, string(k))
					}
				}
				for k := range res.kinds {
					if !ledger.ValidKind(k) {
						missing = append(missing, "unknown kind "+string(k))
					}
				}
				t.Logf("seed %d: %d steps in %s, log size %d, leaves by kind %v", seed, len(seq), time.Since(start).Round(time.Second), res.size, res.kinds)
				if len(missing) > 0 {
					t.Errorf("seed %d: the log never held a leaf of kind %v: the generator must cover every kind of ledger.Kinds()", seed, missing)
				}
			}
		})
	}
}

func lcJoin(seq []lcStep) string {
	parts := make([]string, len(seq))
	for i, s := range seq {
		parts[i] = s.String()
	}
	return strings.Join(parts, " ")
}

// TestLifecycleGeneratorCoversEveryKind: the lifecycle test's operations,
// together, can write every leaf kind the ledger has, and no other; a
// new kind in ledger.Kinds() fails this until an operation writes it.
func TestLifecycleGeneratorCoversEveryKind(t *testing.T) {
	can := map[ledger.Kind]bool{}
	for _, o := range lcOps {
		for _, k := range o.kinds {
			can[k] = true
		}
	}
	for _, k := range ledger.Kinds() {
		if !can[k] {
			t.Errorf("no lifecycle operation writes a leaf of kind %q: add one to lcOps", k)
		}
		delete(can, k)
	}
	for k := range can {
		t.Errorf("lifecycle operations claim kind %q, which ledger.Kinds() does not list", k)
	}
	// Every operation is drawn by a generated sequence, however short.
	seq := lcGenerate(1, 1)
	for _, o := range lcOps {
		if !slices.ContainsFunc(seq, func(s lcStep) bool { return s.op == o.name }) {
			t.Errorf("a generated sequence lacks operation %s", o.name)
		}
	}
}
