package runner

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
)

// MaxFailingIDs caps the failing case ids listed in one evidence record;
// the details say how many were left out.
const MaxFailingIDs = 1000

// Options configure Run.
type Options struct {
	// Lanes to run, by name ("name/vN" or "name"); empty runs
	// DefaultLanes (every registered lane not on request) in registration
	// order.
	Lanes []string
	// Subject is the source identity (repository, commit, tree, dirty);
	// Run adds the artifact digests. See ResolveSubject.
	Subject ledger.Subject
	// BinaryPath is the program pinned as artifact "bin/ledger"; empty
	// means os.Executable().
	BinaryPath string
	// BinaryDigest, when not empty, is the "sha256:<hex>" digest pinned as
	// "bin/ledger" instead of hashing BinaryPath: a long-running caller (an
	// agent) hashes its program once at start, which is also the program
	// that runs when the file on disk is replaced later.
	BinaryDigest string
	// Runner identifies the runner build; see BuildRunner.
	Runner ledger.RunnerBuild
	// Progress, when not nil, gets each lane's progress (from Run's
	// goroutine).
	Progress func(lane string, done, total int)
	// LaneDone, when not nil, gets each lane's LaneRun as soon as its
	// evidence is built, before the next lane starts (from Run's
	// goroutine), so a caller can record it while later lanes run.
	LaneDone func(LaneRun)
	// Snapshots overrides alloc-snapshot's snapshot count (tests only).
	Snapshots int
	// Cases, CaseBudget and MaxSamples are passed to every lane's Env (see
	// Env); Cases needs a selected lane that selects cases.
	Cases      []string
	CaseBudget time.Duration
	MaxSamples int
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// LaneRun is the outcome of one lane run: its evidence (normalized and
// validated) and the wall time. Err is set when the lane could not run;
// the evidence then has status error.
type LaneRun struct {
	Lane     string
	Evidence ledger.Evidence
	Wall     time.Duration
	Err      error
}

// Run runs the selected lanes on backend b one after another and returns
// one LaneRun per lane. It fails before running anything when a lane name
// is unknown, o.Cases is set but no selected lane selects cases, the
// subject is invalid or the binary cannot be hashed; a
// lane that fails to run yields evidence with status error and Run goes
// on. Cancelling ctx stops the current lane (its evidence has status
// error) and skips the rest.
func Run(ctx context.Context, b Backend, o Options) ([]LaneRun, error) {
	if b == nil {
		return nil, fmt.Errorf("run: no backend")
	}
	sel := DefaultLanes()
	if len(o.Lanes) > 0 {
		sel = nil
		for _, name := range o.Lanes {
			l, err := LookupLane(name)
			if err != nil {
				return nil, err
			}
			sel = append(sel, l)
		}
	}
	if len(o.Cases) > 0 && !slices.ContainsFunc(sel, SelectsCases) {
		return nil, fmt.Errorf("run: case globs %q select cases of none of the selected lanes", o.Cases)
	}
	if o.CaseBudget < 0 || o.MaxSamples < 0 {
		return nil, fmt.Errorf("run: case budget and max samples must not be negative")
	}
	if err := o.Subject.Validate("subject."); err != nil {
		return nil, fmt.Errorf("run: %w", err)
	}
	now := o.Now
	if now == nil {
		now = time.Now
	}
	binDigest, err := o.binaryDigest()
	if err != nil {
		return nil, err
	}
	common := map[string]string{"bin/ledger": binDigest}
	for name, src := range b.Sources() {
		common["backends/"+string(b.Name())+"/"+name] = sha256Hex(src)
	}
	var out []LaneRun
	for _, l := range sel {
		if err := ctx.Err(); err != nil {
			return out, err
		}
		env := &Env{Backend: b, Snapshots: o.Snapshots, Cases: o.Cases, CaseBudget: o.CaseBudget, MaxSamples: o.MaxSamples}
		if o.Progress != nil {
			name := l.Name()
			env.Progress = func(done, total int) { o.Progress(name, done, total) }
		}
		start := now()
		wall := time.Now()
		res, rerr := l.Run(ctx, env)
		lr := LaneRun{Lane: l.Name(), Wall: time.Since(wall), Err: rerr}
		ev, err := BuildEvidence(l, b, o.Subject, common, o.Runner, res, rerr, start, now())
		if err != nil {
			return out, fmt.Errorf("run %s: %w", l.Name(), err)
		}
		lr.Evidence = ev
		out = append(out, lr)
		if o.LaneDone != nil {
			o.LaneDone(lr)
		}
	}
	return out, nil
}

// binaryDigest is the digest pinned as "bin/ledger": BinaryDigest, else
// the hash of BinaryPath or of the running program.
func (o Options) binaryDigest() (string, error) {
	if o.BinaryDigest != "" {
		return o.BinaryDigest, nil
	}
	bin := o.BinaryPath
	if bin == "" {
		var err error
		if bin, err = os.Executable(); err != nil {
			return "", fmt.Errorf("run: locate the running binary: %w", err)
		}
	}
	d, err := FileDigest(bin)
	if err != nil {
		return "", fmt.Errorf("run: hash the running binary: %w", err)
	}
	return d, nil
}

// BuildEvidence turns a lane's result into a normalized, validated
// evidence record. artifacts (name -> digest) are pinned in the subject
// together with "lane/<lane name>" (the digest of l.Definition()).
func BuildEvidence(l Lane, b Backend, subj ledger.Subject, artifacts map[string]string, rb ledger.RunnerBuild, res *Result, runErr error, start, end time.Time) (ledger.Evidence, error) {
	s := subj
	s.Artifacts = map[string]string{}
	for k, v := range subj.Artifacts {
		s.Artifacts[k] = v
	}
	for k, v := range artifacts {
		s.Artifacts[k] = v
	}
	s.Artifacts["lane/"+l.Name()] = sha256Hex(l.Definition())
	ev := ledger.Evidence{
		Lane: l.Name(), Subject: s, Backend: b.Name(), Device: b.Device(), Runner: rb,
		Control: ledger.ControlNone, StartedAt: start, FinishedAt: end,
	}
	if end.Before(start) {
		ev.FinishedAt = start
	}
	details := map[string]any{"wall_ms": ms(end.Sub(start))}
	if runErr != nil || res == nil {
		ev.Status = ledger.StatusError
		msg := "lane returned no result"
		if runErr != nil {
			msg = runErr.Error()
		}
		details["error"] = msg
	} else {
		ev.CasesTotal, ev.CasesExact = res.Total, res.Exact
		ev.Control = res.Control.Outcome
		if ev.Control == "" {
			ev.Control = ledger.ControlNone
		}
		ev.Status = Verdict(res, nil)
		failing := append([]string(nil), res.Failing...)
		sort.Strings(failing)
		failing = dedupe(failing)
		if len(failing) > MaxFailingIDs {
			details["failing_cases_omitted"] = len(failing) - MaxFailingIDs
			failing = failing[:MaxFailingIDs]
		}
		if len(failing) > ev.CasesTotal-ev.CasesExact {
			return ev, fmt.Errorf("lane reported %d failing ids for %d non-exact cases", len(failing), ev.CasesTotal-ev.CasesExact)
		}
		ev.FailingCases = failing
		details["cases"] = res.Cases
		details["control"] = res.Control
		for k, v := range res.Details {
			details[k] = v
		}
	}
	raw, err := json.Marshal(details)
	if err != nil {
		return ev, fmt.Errorf("encode details: %w", err)
	}
	ev.Details = raw
	ev.Normalize()
	if err := ev.Validate(); err != nil {
		return ev, fmt.Errorf("evidence: %w", err)
	}
	return ev, nil
}

func dedupe(s []string) []string {
	out := s[:0]
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}

// FileDigest returns "sha256:<hex>" of a file's contents.
func FileDigest(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}
