package main

import (
	"archive/zip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/evidence-ledger/ledger/gates"
)

// mlxRoot is the repository root seen from cmd/ledger; `make mlx-deps` and
// `make mlx-alloc-lib` install MLX's CPU wheels and the allocator adapter's
// native library under var/mlx-cpu there.
const mlxRoot = "../.."

// requireMLXCPU skips the test when MLX's CPU wheels or the allocator
// adapter's library are not installed, unless LEDGER_REQUIRE_MLX=1 (CI,
// .ci/run), which fails it instead.
func requireMLXCPU(t *testing.T) {
	t.Helper()
	site := filepath.Join(mlxRoot, "var/mlx-cpu/site")
	var why string
	if py, err := exec.LookPath("python3"); err != nil {
		why = err.Error()
	} else {
		cmd := exec.Command(py, "-c", "import sys; sys.path.insert(0, sys.argv[1]); import mlx.core", site)
		cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1", "PYTHONNOUSERSITE=1")
		if out, err := cmd.CombinedOutput(); err != nil {
			why = "MLX is not importable from " + site + " (make mlx-deps): " + strings.TrimSpace(string(out))
		} else if _, err := os.Stat(filepath.Join(mlxRoot, "var/mlx-cpu/lib/libledger_mlx_alloc.so")); err != nil {
			why = "the allocator adapter's library is not built (make mlx-alloc-lib): " + err.Error()
		}
	}
	if why == "" {
		return
	}
	if os.Getenv("LEDGER_REQUIRE_MLX") == "1" {
		t.Fatal("LEDGER_REQUIRE_MLX=1: " + why)
	}
	t.Skip(why)
}

// mlxEvidence is the part of an evidence record the expected verdict is
// derived from.
type mlxEvidence struct {
	Lane    string `json:"lane"`
	Backend string `json:"backend"`
	Subject struct {
		Repository string            `json:"repository"`
		Commit     string            `json:"commit"`
		Tree       string            `json:"tree"`
		Dirty      bool              `json:"dirty"`
		Artifacts  map[string]string `json:"artifacts"`
	} `json:"subject"`
	CasesExact int    `json:"cases_exact"`
	CasesTotal int    `json:"cases_total"`
	Control    string `json:"control"`
	Status     string `json:"status"`
}

// mlxAtPins is this test's own reading of DESIGN.md's evidence binding
// (TRUST.md rule 3): e counts for gate g of rel only when it is about the
// component's repository, head commit and tree, from a clean tree, names
// every release artifact it carries at its bound digest, and carries each
// artifact the gate is about. It returns why not, or "".
func mlxAtPins(e mlxEvidence, rel *gates.Release, g gates.Gate) string {
	c, _ := rel.Component(g.Component)
	s := e.Subject
	switch {
	case s.Repository != c.Repository || s.Commit != c.Head || (c.Tree != "" && s.Tree != c.Tree):
		return "other source"
	case s.Dirty:
		return "dirty"
	}
	for name, d := range rel.Artifacts {
		if got, ok := s.Artifacts[name]; ok && got != d {
			return "other " + name
		}
	}
	for _, name := range g.Artifacts {
		if _, ok := s.Artifacts[name]; !ok {
			return "lacks " + name
		}
	}
	return ""
}

// mlxExpected derives a lane gate's state from the recorded evidence by
// the counting rule: a failed run at the pins fails it; otherwise a clean,
// all-exact, control-caught run with the lane's case count passes it;
// otherwise it is open. It returns the state and the runs at the pins.
func mlxExpected(ev []mlxEvidence, rel *gates.Release, g gates.Gate) (gates.State, int) {
	state, n := gates.StateOpen, 0
	for _, e := range ev {
		if e.Lane != g.Lane || !slices.Contains(g.Backends, e.Backend) || mlxAtPins(e, rel, g) != "" {
			continue
		}
		n++
		switch {
		case e.Status == "failed":
			state = gates.StateFailed
		case state == gates.StateOpen && e.Status == "passed" && e.Control == "caught" &&
			e.CasesTotal > 0 && e.CasesExact == e.CasesTotal && (g.Cases == 0 || e.CasesTotal == g.Cases):
			state = gates.StatePassed
		}
	}
	return state, n
}

func readerSHA256(t *testing.T, r io.Reader) string {
	t.Helper()
	h := sha256.New()
	if _, err := io.Copy(h, r); err != nil {
		t.Fatal(err)
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

// zipMemberSHA256 is the digest of member name inside the wheel at path.
func zipMemberSHA256(t *testing.T, path, name string) string {
	t.Helper()
	z, err := zip.OpenReader(path)
	if err != nil {
		t.Fatal(err)
	}
	defer z.Close()
	f, err := z.Open(name)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	defer f.Close()
	return readerSHA256(t, f)
}

// TestMLXRelease applies examples/release-mlx-0.32.yaml to a fresh SQLite
// ledger, records MLX's CPU runs of the four lanes through `ledger run
// --impl mlx-cpu` and `--impl mlx-cpu-alloc` at the release's source pins
// (and, when present, the MLX CUDA evidence of testdata/device/mlx as it
// was taken), and checks that `ledger release check` answers what the
// recorded evidence implies, gate by gate: the expected states are derived
// here from the records' pins and statuses (mlxExpected), never written
// down. It also checks the CPU digests the release binds against the
// pinned wheels themselves. docs/validating-mlx.md, "The release".
func TestMLXRelease(t *testing.T) {
	requireMLXCPU(t)
	relFile := filepath.Join(mlxRoot, "examples/release-mlx-0.32.yaml")
	data, err := os.ReadFile(relFile)
	if err != nil {
		t.Fatal(err)
	}
	rel, err := gates.ParseRelease(data)
	if err != nil {
		t.Fatal(err)
	}
	comp, ok := rel.Component("mlx")
	if !ok {
		t.Fatal("the release has no component mlx")
	}

	// The CPU pins are the wheels as installed by make mlx-deps and the
	// libraries inside them.
	wheels := filepath.Join(mlxRoot, "var/mlx-cpu/wheels")
	mlxWhl, cpuWhl := "mlx-0.32.4-cp311-cp311-manylinux_2_35_x86_64.whl", "mlx_cpu-0.32.4-py3-none-manylinux_2_35_x86_64.whl"
	for _, w := range []string{mlxWhl, cpuWhl} {
		f, err := os.Open(filepath.Join(wheels, w))
		if err != nil {
			t.Fatal(err)
		}
		got := readerSHA256(t, f)
		f.Close()
		if got != rel.Artifacts[w] {
			t.Errorf("%s: the release binds %s, the installed wheel is %s", w, rel.Artifacts[w], got)
		}
	}
	if got := zipMemberSHA256(t, filepath.Join(wheels, cpuWhl), "mlx/lib/libmlx.so"); got != rel.Artifacts["libmlx.so"] {
		t.Errorf("libmlx.so: the release binds %s, the mlx_cpu wheel holds %s", rel.Artifacts["libmlx.so"], got)
	}
	core := "core.cpython-311-x86_64-linux-gnu.so"
	if got := zipMemberSHA256(t, filepath.Join(wheels, mlxWhl), "mlx/"+core); got != rel.Artifacts[core] {
		t.Errorf("%s: the release binds %s, the mlx wheel holds %s", core, rel.Artifacts[core], got)
	}

	db := filepath.Join(t.TempDir(), "mlx.db")
	if out, errOut, code := runBin(t, "", "--db", db, "release", "apply", relFile); code != 0 {
		t.Fatalf("release apply: exit %d\n%s%s", code, out, errOut)
	}
	impls := filepath.Join(mlxRoot, "adapters/implementations.yaml")
	pins := []string{"--impls", impls, "--repository", comp.Repository, "--commit", comp.Head, "--tree", comp.Tree, "--dirty", "false"}
	var recorded []mlxEvidence
	for _, run := range [][]string{
		{"--impl", "mlx-cpu", "--lane", "qmv-bias-sum/v1", "--lane", "qmv-bias-sum-paths/v1"},
		{"--impl", "mlx-cpu-alloc", "--lane", "alloc-snapshot/v1", "--lane", "alloc-footprint/v1"},
	} {
		args := append(append([]string{"--db", db, "--json", "run"}, run...), pins...)
		out, errOut, code := runBin(t, "", args...)
		var res struct {
			Evidence []mlxEvidence `json:"evidence"`
		}
		if err := json.Unmarshal([]byte(out), &res); err != nil || code > 1 || len(res.Evidence) != 2 {
			t.Fatalf("ledger run %v: exit %d, %v\n%s\n%s", run, code, err, out, errOut)
		}
		// Exit 1 when a lane did not pass, 0 when both did.
		want := 0
		for _, e := range res.Evidence {
			if e.Status != "passed" {
				want = 1
			}
			t.Logf("%s %s on %s: %s, %d/%d exact, control %s", run[1], e.Lane, e.Backend, e.Status, e.CasesExact, e.CasesTotal, e.Control)
		}
		if code != want {
			t.Errorf("ledger run %v: exit %d, want %d for %v", run, code, want, res.Evidence)
		}
		recorded = append(recorded, res.Evidence...)
	}
	// The MLX CUDA evidence from the GPU host, when it is in the tree,
	// recorded as it was taken: it counts only if its pins are the release's.
	if dev, err := os.ReadFile(filepath.Join(mlxRoot, "testdata/device/mlx/run-output.json")); err == nil {
		var res struct {
			Evidence json.RawMessage `json:"evidence"`
		}
		var ev []mlxEvidence
		if err := json.Unmarshal(dev, &res); err != nil || json.Unmarshal(res.Evidence, &ev) != nil {
			t.Fatalf("testdata/device/mlx/run-output.json: %v", err)
		}
		if out, errOut, code := runBin(t, string(res.Evidence), "--db", db, "record", "-"); code != 0 {
			t.Fatalf("record the device evidence: exit %d\n%s%s", code, out, errOut)
		}
		for _, e := range ev {
			t.Logf("device %s on %s: %s, %d/%d exact, commit %.12s dirty %v", e.Lane, e.Backend, e.Status, e.CasesExact, e.CasesTotal, e.Subject.Commit, e.Subject.Dirty)
		}
		recorded = append(recorded, ev...)
	}

	out, errOut, code := runBin(t, "", "--db", db, "--json", "release", "check", rel.Version)
	var check struct {
		Readiness struct {
			Ready bool               `json:"ready"`
			Gates []gates.GateResult `json:"gates"`
		} `json:"readiness"`
	}
	if err := json.Unmarshal([]byte(out), &check); err != nil {
		t.Fatalf("release check: exit %d, %v\n%s%s", code, err, out, errOut)
	}
	got := map[string]gates.GateResult{}
	for _, g := range check.Readiness.Gates {
		got[g.ID] = g
	}
	wantReady := true
	for _, g := range rel.Gates {
		if g.Kind != gates.KindLane {
			t.Fatalf("gate %s: kind %s; this test derives lane gates only", g.ID, g.Kind)
		}
		want, atPins := mlxExpected(recorded, rel, g)
		wantReady = wantReady && want == gates.StatePassed
		r, ok := got[g.ID]
		switch {
		case !ok:
			t.Errorf("gate %s: not in the readiness answer", g.ID)
			continue
		case r.State != want:
			t.Errorf("gate %s: %s (%s), the recorded evidence implies %s (%d run(s) at the pins)", g.ID, r.State, r.Reason, want, atPins)
		case r.Reason == "":
			t.Errorf("gate %s: %s without a reason", g.ID, r.State)
		case want == gates.StateOpen && len(r.Missing) == 0:
			t.Errorf("gate %s: open without saying what is missing", g.ID)
		}
		// Every CPU gate is fed by CI: a run at the pins must exist, so
		// the CPU verdicts are about the bound wheels, never open by a
		// pin the test got wrong.
		if slices.Contains(g.Backends, "cpu") && atPins == 0 {
			t.Errorf("gate %s: no CPU run recorded at the release's pins", g.ID)
		}
		t.Logf("%-22s %-6s %s", g.ID, r.State, r.Reason)
	}
	wantCode := 1
	if wantReady {
		wantCode = 0
	}
	if check.Readiness.Ready != wantReady || code != wantCode {
		t.Errorf("release check: ready %v exit %d; the recorded evidence implies ready %v (exit %d)", check.Readiness.Ready, code, wantReady, wantCode)
	}
}
