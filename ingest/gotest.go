package ingest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
)

// testEvent is one line of a go test -json stream, as cmd/test2json
// documents it (go doc cmd/test2json): Action is start, run, pause, cont,
// pass, bench, fail, output, skip, build-output or build-fail; Test is
// empty for package-level events; FailedBuild names the package whose
// build failed a test binary.
type testEvent struct {
	Time        time.Time
	Action      string
	Package     string
	ImportPath  string
	Test        string
	Elapsed     float64
	Output      string
	FailedBuild string
}

// DecodeGoTest reads a go test -json (test2json) stream. Every test and
// subtest that ran is a case with id "package > TestName/subtest" and the
// outcome of its pass, fail or skip event; a test that started and never
// ended is incomplete. A package that failed without a failing test (a
// build failure, a panic outside a test, TestMain) adds the case
// "package > (package)" as an error; a build failure reported only through
// build-fail or FailedBuild adds "package > (build)". A stream whose last
// line is cut off, or that ends before a package's final event, is
// truncated. Lines that are not JSON objects (stderr mixed in with 2>&1)
// are skipped and counted in a note; a broken JSON object before the last
// line is a CodeInvalid error naming its line. Decoding stops with
// ctx.Err() soon after ctx is done (checked every cancelStep lines and
// cases). It is safe for concurrent use.
func DecodeGoTest(ctx context.Context, body []byte) (*Run, error) {
	g := &goTestState{tests: map[testKey]*testState{}, pkgs: map[string]string{}, builds: map[string]bool{},
		pkgOut: map[string]*messageText{}, buildOut: map[string]*messageText{}, r: &Run{}}
	// Lines are walked in place (no slice of all of them): line i is the
	// text before the i-th newline, the last one what follows the last
	// newline.
	rest := body
	for i := 0; rest != nil; i++ {
		if i%cancelStep == 0 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
		line, after, more := bytes.Cut(rest, []byte("\n"))
		last := !more
		rest = after // nil after the last line
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			continue
		}
		if line[0] != '{' {
			g.skipped++
			continue
		}
		var ev testEvent
		if err := json.Unmarshal(line, &ev); err != nil || ev.Action == "" {
			if last {
				g.r.Truncated = true
				g.r.Notes = append(g.r.Notes, "the stream's last line is cut off")
				break
			}
			return nil, ledger.FieldError(fmt.Sprintf("line %d", i+1), "not a test2json event (want a JSON object with Action)")
		}
		g.event(ev)
	}
	if g.events == 0 {
		return nil, ledger.FieldError("", "no test2json events: want the output of go test -json")
	}
	return g.finish(ctx)
}

type testKey struct{ pkg, test string }

type testState struct {
	outcome Outcome
	elapsed float64
	order   int
	out     *messageText // the test's output lines (testOutput), nil while none; dropped when it passes
}

// testOutput adds the output of one event to *m (allocated on first use),
// leaving out test2json's framing lines ("=== RUN", "--- FAIL: ..."),
// which the case's outcome already says.
func testOutput(m **messageText, out string) {
	t := strings.TrimLeft(out, " \t")
	for _, frame := range []string{"=== RUN", "=== PAUSE", "=== CONT", "=== NAME", "--- PASS:", "--- FAIL:", "--- SKIP:"} {
		if strings.HasPrefix(t, frame) {
			return
		}
	}
	if strings.TrimSpace(out) == "" && *m == nil {
		return
	}
	if *m == nil {
		*m = &messageText{}
	}
	(*m).add(out)
}

// goTestState accumulates a stream's events.
type goTestState struct {
	tests    map[testKey]*testState
	pkgs     map[string]string // package -> final action ("" while running)
	pkgOrder []string
	builds   map[string]bool
	pkgOut   map[string]*messageText // package-level output, for a "(package)" case
	buildOut map[string]*messageText // build-output by package, for a "(build)" case
	events   int
	skipped  int
	r        *Run
}

func (g *goTestState) event(ev testEvent) {
	g.events++
	r := g.r
	if !ev.Time.IsZero() {
		if r.Started.IsZero() || ev.Time.Before(r.Started) {
			r.Started = ev.Time.UTC()
		}
		if ev.Time.After(r.Finished) {
			r.Finished = ev.Time.UTC()
		}
	}
	switch ev.Action {
	case "build-fail":
		// "pkg [pkg.test]" names the test variant of pkg.
		p, _, _ := strings.Cut(ev.ImportPath, " [")
		g.builds[p] = true
		return
	case "build-output":
		p, _, _ := strings.Cut(ev.ImportPath, " [")
		m := g.buildOut[p]
		testOutput(&m, ev.Output)
		if m != nil {
			g.buildOut[p] = m
		}
		return
	}
	if ev.Package == "" {
		return
	}
	if _, ok := g.pkgs[ev.Package]; !ok {
		g.pkgs[ev.Package] = ""
		g.pkgOrder = append(g.pkgOrder, ev.Package)
	}
	if ev.FailedBuild != "" {
		g.builds[ev.Package] = true
	}
	if ev.Test == "" {
		switch ev.Action {
		case "pass", "fail", "skip":
			g.pkgs[ev.Package] = ev.Action
			if ev.Action != "fail" {
				delete(g.pkgOut, ev.Package)
			}
		case "output":
			m := g.pkgOut[ev.Package]
			testOutput(&m, ev.Output)
			if m != nil {
				g.pkgOut[ev.Package] = m
			}
		}
		return
	}
	k := testKey{ev.Package, ev.Test}
	st := g.tests[k]
	if st == nil {
		st = &testState{outcome: Incomplete, order: len(g.tests)}
		g.tests[k] = st
	}
	switch ev.Action {
	case "output":
		if st.outcome != Passed {
			testOutput(&st.out, ev.Output)
		}
	case "pass":
		st.outcome, st.elapsed, st.out = Passed, ev.Elapsed, nil
	case "fail":
		st.outcome, st.elapsed = Failed, ev.Elapsed
	case "skip":
		st.outcome, st.elapsed = Skipped, ev.Elapsed
	}
}

// finish turns the accumulated tests and packages into the run's cases;
// it stops with ctx.Err() once ctx is done (checked every cancelStep
// tests).
func (g *goTestState) finish(ctx context.Context) (*Run, error) {
	r := g.r
	if g.skipped > 0 {
		r.Notes = append(r.Notes, fmt.Sprintf("%d line(s) that are not test2json events were skipped", g.skipped))
	}
	ids := newCaseIDs()
	ordered := make([]testKey, len(g.tests))
	for k, st := range g.tests {
		ordered[st.order] = k
	}
	failedIn := map[string]bool{}
	for i, k := range ordered {
		if i%cancelStep == 0 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
		st := g.tests[k]
		c := Case{ID: ids.next(k.pkg, k.test), Outcome: st.outcome, Duration: st.elapsed}
		if st.outcome != Passed {
			c.Message = st.out.text()
		}
		r.Cases = append(r.Cases, c)
		if st.outcome == Failed || st.outcome == Incomplete {
			failedIn[k.pkg] = true
		}
	}
	for _, p := range g.pkgOrder {
		switch final := g.pkgs[p]; {
		case g.builds[p]:
			r.Cases = append(r.Cases, Case{ID: ids.next(p, "(build)"), Outcome: Errored, Message: g.buildOut[p].text()})
		case final == "":
			r.Truncated = true
			r.Notes = append(r.Notes, "package "+clip(p)+" has no final result: the stream ends before it finished")
		case final == "fail" && !failedIn[p]:
			r.Cases = append(r.Cases, Case{ID: ids.next(p, "(package)"), Outcome: Errored, Message: g.pkgOut[p].text()})
		}
	}
	var orphans []string // builds that failed with no package events
	for p := range g.builds {
		if _, ok := g.pkgs[p]; !ok && p != "" {
			orphans = append(orphans, p)
		}
	}
	sort.Strings(orphans)
	for _, p := range orphans {
		r.Cases = append(r.Cases, Case{ID: ids.next(p, "(build)"), Outcome: Errored, Message: g.buildOut[p].text()})
	}
	for _, k := range r.Cases {
		if k.Outcome == Incomplete {
			r.Notes = append(r.Notes, "incomplete: "+k.ID+" started and never ended")
		}
	}
	return r, nil
}
