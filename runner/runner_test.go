package runner_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/evidence-ledger/ledger/backends/cpu"
	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/runner"
	"github.com/evidence-ledger/ledger/runner/quant"
)

// brokenBackend wraps the CPU backend and corrupts its qmv kernel.
type brokenBackend struct {
	*cpu.Backend
	mutate func(r *runner.QMVRequest, out runner.Vec)
	// swap, when set, runs the other variant than the one asked for.
	swap bool
}

func (b *brokenBackend) QMV(ctx context.Context, r *runner.QMVRequest) (runner.Vec, error) {
	if b.swap {
		rr := *r
		rr.Variant = runner.Promoted + runner.Narrow - r.Variant
		r = &rr
	}
	out, err := b.Backend.QMV(ctx, r)
	if err == nil && b.mutate != nil {
		b.mutate(r, out)
	}
	return out, err
}

func cpuBackend(t testing.TB) *cpu.Backend {
	b, err := cpu.New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

func runLane(t *testing.T, name string, b runner.Backend) *runner.Result {
	t.Helper()
	l, err := runner.LookupLane(name)
	if err != nil {
		t.Fatal(err)
	}
	res, err := l.Run(context.Background(), &runner.Env{Backend: b})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// TestReferenceIndependence proves the lane's reference does not follow
// the kernel: deliberately broken kernels make the lane fail.
func TestReferenceIndependence(t *testing.T) {
	base := cpuBackend(t)
	t.Run("last-bit-flip", func(t *testing.T) {
		// One ulp off in the last row of every bf16 output.
		b := &brokenBackend{Backend: base, mutate: func(r *runner.QMVRequest, out runner.Vec) {
			if r.DType == quant.BFloat16 {
				out.Set(out.Len()-1, out.At(out.Len()-1)^1)
			}
		}}
		res := runLane(t, runner.LaneQMV, b)
		if res.Exact != 144 || runner.Verdict(res, nil) != ledger.StatusFailed {
			t.Fatalf("broken kernel: %d/%d exact, verdict %v; want 144/216 failed", res.Exact, res.Total, runner.Verdict(res, nil))
		}
	})
	t.Run("variants-swapped", func(t *testing.T) {
		// The original kernel shipped as the corrected one.
		b := &brokenBackend{Backend: base, swap: true}
		res := runLane(t, runner.LaneQMV, b)
		if res.Exact != 156 || len(res.Failing) != 60 || runner.Verdict(res, nil) != ledger.StatusFailed {
			t.Fatalf("swapped: %d/%d exact, verdict %v", res.Exact, res.Total, runner.Verdict(res, nil))
		}
		if res.Control.Outcome != ledger.ControlNotCaught {
			t.Fatalf("swapped: the corrected kernel as control must not look like the narrow one")
		}
	})
	t.Run("dot-part-ignores-weights", func(t *testing.T) {
		// A kernel that reads q = 0 everywhere (a broken unpack).
		zero := &zeroWeights{Backend: base}
		res := runLane(t, runner.LaneQMV, zero)
		if res.Exact == res.Total {
			t.Fatalf("kernel ignoring the weights passed %d/%d", res.Exact, res.Total)
		}
	})
}

// zeroWeights runs the kernel with every packed weight cleared.
type zeroWeights struct{ *cpu.Backend }

func (z *zeroWeights) QMV(ctx context.Context, r *runner.QMVRequest) (runner.Vec, error) {
	rr := *r
	rr.W = make([]uint32, len(r.W))
	return z.Backend.QMV(ctx, &rr)
}

// identicalVariants answers the narrow request with the promoted kernel:
// the control cannot be caught, so the run must be inconclusive.
type identicalVariants struct{ *cpu.Backend }

func (b *identicalVariants) QMV(ctx context.Context, r *runner.QMVRequest) (runner.Vec, error) {
	rr := *r
	rr.Variant = runner.Promoted
	return b.Backend.QMV(ctx, &rr)
}

func TestControlNotCaughtIsInconclusive(t *testing.T) {
	res := runLane(t, runner.LaneQMV, &identicalVariants{cpuBackend(t)})
	if res.Exact != 216 || res.Control.Outcome != ledger.ControlNotCaught {
		t.Fatalf("%d/%d, control %v", res.Exact, res.Total, res.Control.Outcome)
	}
	if v := runner.Verdict(res, nil); v != ledger.StatusInconclusive {
		t.Fatalf("verdict %v, want inconclusive", v)
	}
}

func TestVerdict(t *testing.T) {
	cases := []struct {
		res  *runner.Result
		err  error
		want ledger.Status
	}{
		{nil, context.Canceled, ledger.StatusError},
		{&runner.Result{Total: 3, Exact: 3, Control: runner.ControlResult{Outcome: ledger.ControlCaught}}, nil, ledger.StatusPassed},
		{&runner.Result{Total: 3, Exact: 3, Control: runner.ControlResult{Outcome: ledger.ControlNone}}, nil, ledger.StatusPassed},
		{&runner.Result{Total: 3, Exact: 2, Control: runner.ControlResult{Outcome: ledger.ControlCaught}}, nil, ledger.StatusFailed},
		{&runner.Result{Total: 3, Exact: 3, Control: runner.ControlResult{Outcome: ledger.ControlNotCaught}}, nil, ledger.StatusInconclusive},
		{&runner.Result{Total: 0, Exact: 0, Control: runner.ControlResult{Outcome: ledger.ControlCaught}}, nil, ledger.StatusFailed},
	}
	for i, c := range cases {
		if got := runner.Verdict(c.res, c.err); got != c.want {
			t.Errorf("case %d: %v, want %v", i, got, c.want)
		}
	}
}

func testSubject() ledger.Subject {
	return ledger.Subject{Repository: "https://github.com/evidence-ledger/ledger",
		Commit: strings.Repeat("ab", 20), Tree: strings.Repeat("cd", 20)}
}

func TestRunBuildsEvidence(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "ledger")
	if err := os.WriteFile(bin, []byte("binary"), 0o755); err != nil {
		t.Fatal(err)
	}
	var progress int
	runs, err := runner.Run(context.Background(), cpuBackend(t), runner.Options{
		Lanes: []string{"qmv-bias-sum", "alloc-footprint/v1", "alloc-snapshot/v1"}, Subject: testSubject(),
		BinaryPath: bin, Runner: ledger.RunnerBuild{Version: "test"}, Snapshots: 2000,
		Progress: func(string, int, int) { progress++ },
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 3 || progress == 0 {
		t.Fatalf("%d runs, %d progress calls", len(runs), progress)
	}
	for _, r := range runs {
		ev := r.Evidence
		if err := ev.Validate(); err != nil {
			t.Fatalf("%s: %v", r.Lane, err)
		}
		if ev.Status != ledger.StatusPassed || ev.Control != ledger.ControlCaught || ev.Backend != ledger.BackendCPU {
			t.Errorf("%s: status %v control %v", r.Lane, ev.Status, ev.Control)
		}
		for _, name := range []string{"bin/ledger", "lane/" + ev.Lane, "backends/cpu/qmv.go", "backends/cpu/mem_unix.go"} {
			if !ledger.ValidDigest(ev.Subject.Artifacts[name]) {
				t.Errorf("%s: artifact %s missing: %v", r.Lane, name, ev.Subject.Artifacts)
			}
		}
		if ev.Device.Model == "" || ev.Device.Cores < 1 || ev.Device.Attrs["goarch"] == "" || ev.Device.Attrs["go_version"] == "" {
			t.Errorf("device identity incomplete: %+v", ev.Device)
		}
		var det struct {
			Cases   []ledger.CaseResult  `json:"cases"`
			Control runner.ControlResult `json:"control"`
		}
		if err := json.Unmarshal(ev.Details, &det); err != nil || det.Control.Outcome != ledger.ControlCaught {
			t.Errorf("%s: details %v %+v", r.Lane, err, det.Control)
		}
		if _, err := ledger.CanonicalBody(&ev); err != nil {
			t.Error(err)
		}
	}
	if runs[0].Evidence.CasesExact != 216 {
		t.Errorf("core lane %d/216", runs[0].Evidence.CasesExact)
	}
	want, _ := runner.FileDigest(bin)
	if runs[0].Evidence.Subject.Artifacts["bin/ledger"] != want {
		t.Errorf("binary digest %s, want %s", runs[0].Evidence.Subject.Artifacts["bin/ledger"], want)
	}
}

func TestRunFailingLaneEvidence(t *testing.T) {
	b := &brokenBackend{Backend: cpuBackend(t), swap: true}
	bin := filepath.Join(t.TempDir(), "ledger")
	_ = os.WriteFile(bin, []byte("x"), 0o600)
	runs, err := runner.Run(context.Background(), b, runner.Options{Lanes: []string{runner.LaneQMV}, Subject: testSubject(), BinaryPath: bin})
	if err != nil {
		t.Fatal(err)
	}
	ev := runs[0].Evidence
	if ev.Status != ledger.StatusFailed || ev.CasesExact != 156 || len(ev.FailingCases) != 60 {
		t.Fatalf("status %v %d/%d %d failing", ev.Status, ev.CasesExact, ev.CasesTotal, len(ev.FailingCases))
	}
	var det struct {
		Cases []ledger.CaseResult `json:"cases"`
	}
	_ = json.Unmarshal(ev.Details, &det)
	if len(det.Cases) != 216 || det.Cases[0].Result != "mismatch" || det.Cases[59].Result != "mismatch" || det.Cases[60].Result != "exact" {
		t.Fatalf("details do not list failing cases first")
	}
}

func TestRunRejects(t *testing.T) {
	b := cpuBackend(t)
	if _, err := runner.Run(context.Background(), b, runner.Options{Lanes: []string{"nope/v1"}, Subject: testSubject()}); err == nil {
		t.Error("unknown lane accepted")
	}
	if _, err := runner.Run(context.Background(), b, runner.Options{Subject: ledger.Subject{Repository: "r", Commit: "xyz"}}); err == nil {
		t.Error("invalid subject accepted")
	}
	if _, err := runner.OpenBackend("no-such"); err == nil {
		t.Error("unknown backend opened")
	}
	if bk, err := runner.OpenBackend("cpu"); err != nil {
		t.Error(err)
	} else {
		_ = bk.Close()
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	runs, err := runner.Run(ctx, b, runner.Options{Subject: testSubject(), BinaryPath: os.Args[0]})
	if err == nil || len(runs) != 0 {
		t.Errorf("cancelled run: %v, %d runs", err, len(runs))
	}
}

func TestResolveSubjectFromGit(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not installed")
	}
	dir := t.TempDir()
	gitRun := func(args ...string) string {
		cmd := exec.Command("git", append([]string{"-C", dir, "-c", "user.name=t", "-c", "user.email=t@e", "-c", "commit.gpgsign=false"}, args...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v %s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	gitRun("init", "-q")
	if _, err := runner.ResolveSubject(context.Background(), runner.SubjectOptions{RepoPath: dir, Repository: "r"}); err == nil {
		t.Fatal("repository without commits gave a subject")
	}
	_ = os.WriteFile(filepath.Join(dir, "a.txt"), []byte("a"), 0o644)
	gitRun("add", "a.txt")
	gitRun("commit", "-q", "-m", "one")
	head, tree := gitRun("rev-parse", "HEAD"), gitRun("rev-parse", "HEAD^{tree}")
	// Test binaries carry no vcs.revision, so the checkout is used.
	s, err := runner.ResolveSubject(context.Background(), runner.SubjectOptions{RepoPath: dir, Repository: "r"})
	if err != nil {
		t.Fatal(err)
	}
	if s.Commit != head || s.Tree != tree || s.Dirty {
		t.Fatalf("subject %+v, want %s %s clean", s, head, tree)
	}
	_ = os.WriteFile(filepath.Join(dir, "a.txt"), []byte("b"), 0o644)
	s, _ = runner.ResolveSubject(context.Background(), runner.SubjectOptions{RepoPath: dir, Repository: "r"})
	if !s.Dirty {
		t.Fatal("modified work tree not dirty")
	}
	clean := false
	s, _ = runner.ResolveSubject(context.Background(), runner.SubjectOptions{RepoPath: dir, Repository: "r", Commit: head, Dirty: &clean})
	if s.Dirty || s.Tree != tree {
		t.Fatalf("explicit commit: %+v", s)
	}
}

func TestLaneDefinitionsStable(t *testing.T) {
	for _, l := range runner.Lanes() {
		a, b := l.Definition(), l.Definition()
		if string(a) != string(b) || !json.Valid(a) {
			t.Errorf("%s: definition not stable JSON", l.Name())
		}
	}
	if n := len(runner.Lanes()); n != 5 {
		t.Errorf("%d lanes registered", n)
	}
}
