package ingest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/evidence-ledger/ledger/ledger"
)

// throwaway writes a Go module with passing, failing, skipped, parallel,
// unterminated-print, panicking and unbuildable tests and returns its
// directory.
func throwaway(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{
		"go.mod": "module example.com/throwaway\n\ngo 1.22\n",
		"a/a_test.go": `package a

import (
	"fmt"
	"testing"
)

func TestPass(t *testing.T) {}
func TestFail(t *testing.T) { t.Fatal("wanted failure") }
func TestSkip(t *testing.T) { t.Skip("not here") }
func TestPrint(t *testing.T) { fmt.Print("no trailing newline") }
func TestParallel(t *testing.T) {
	for _, name := range []string{"one", "two", "three"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			fmt.Print("interleaved " + name)
			if name == "two" {
				t.Error("two fails")
			}
		})
	}
}
`,
		"b/b_test.go": `package b

import "testing"

func TestBefore(t *testing.T) {}
func TestPanic(t *testing.T) { panic("boom") }
`,
		"c/c_test.go": `package c

import "testing"

func TestBroken(t *testing.T) { undefinedName() }
`,
	}
	for name, body := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// goTestJSON runs go test -json over the throwaway module.
func goTestJSON(t *testing.T) []byte {
	t.Helper()
	if testing.Short() {
		t.Skip("runs go test over a throwaway module")
	}
	dir := throwaway(t)
	cmd := exec.Command("go", "test", "-json", "-count=1", "./...")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod", "GOPROXY=off", "GOTOOLCHAIN=local")
	out, err := cmd.Output()
	if err == nil {
		t.Fatalf("go test over failing tests exited 0")
	}
	if len(out) == 0 {
		t.Fatalf("go test -json wrote nothing: %v", err)
	}
	return out
}

func outcomes(t *testing.T, res *Result) (map[string]Outcome, Details) {
	t.Helper()
	var d Details
	if err := ledger.DecodeStrict(res.Evidence[0].Details, &d); err != nil {
		t.Fatal(err)
	}
	m := map[string]Outcome{}
	for _, c := range d.Cases {
		m[c.ID] = c.Outcome
	}
	return m, d
}

// TestGoTestJSONRealRun records a real go test -json stream and checks the
// outcome of every case, the build failure and the panic.
func TestGoTestJSONRealRun(t *testing.T) {
	stream := goTestJSON(t)
	res, err := Decode(context.Background(), MediaGoTest, stream, testParams())
	if err != nil {
		t.Fatal(err)
	}
	checkOriginal(t, res, stream)
	got, d := outcomes(t, res)
	const m = "example.com/throwaway/"
	want := map[string]Outcome{
		m + "a > TestPass": Passed, m + "a > TestFail": Failed, m + "a > TestSkip": Skipped, m + "a > TestPrint": Passed,
		m + "a > TestParallel": Failed, m + "a > TestParallel/one": Passed, m + "a > TestParallel/two": Failed, m + "a > TestParallel/three": Passed,
		m + "b > TestBefore": Passed, m + "b > TestPanic": Failed, m + "c > (build)": Errored,
	}
	for id, o := range want {
		if got[id] != o {
			t.Errorf("case %s: got %q, want %q", id, got[id], o)
		}
	}
	if len(got) != len(want) {
		t.Errorf("cases %v, want %d of them", got, len(want))
	}
	if d.Truncated || res.Evidence[0].Status != ledger.StatusFailed {
		t.Errorf("truncated %v status %s", d.Truncated, res.Evidence[0].Status)
	}
	// The same stream cut off in the middle of package a is reported as such.
	cut := stream[:len(stream)/3]
	res, err = Decode(context.Background(), MediaGoTest, cut, testParams())
	if err != nil {
		t.Fatal(err)
	}
	if _, d := outcomes(t, res); !d.Truncated || res.Evidence[0].Status != ledger.StatusError {
		t.Fatalf("cut-off stream: truncated %v, status %s", d.Truncated, res.Evidence[0].Status)
	}
}

// TestJUnitProducers converts the real go test -json stream to JUnit with
// gotestsum and go-junit-report (Go modules, run as go tool), and runs
// pytest --junitxml where python3-pytest is installed; every file records
// with counts equal to the producer's and the outcomes of the run.
func TestJUnitProducers(t *testing.T) {
	stream := goTestJSON(t)
	dir := t.TempDir()
	in := filepath.Join(dir, "stream.json")
	if err := os.WriteFile(in, stream, 0o644); err != nil {
		t.Fatal(err)
	}
	tool := func(out string, args ...string) []byte {
		t.Helper()
		cmd := exec.Command("go", append([]string{"tool"}, args...)...)
		cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOTOOLCHAIN=local")
		if b, err := cmd.CombinedOutput(); err != nil && !strings.Contains(string(b), "FAIL") {
			t.Fatalf("go tool %s: %v\n%s", args[0], err, b)
		}
		b, err := os.ReadFile(out)
		if err != nil {
			t.Fatalf("%s wrote no report: %v", args[0], err)
		}
		return b
	}
	gotestsum := filepath.Join(dir, "gotestsum.xml")
	gjr := filepath.Join(dir, "go-junit-report.xml")
	reports := map[string][]byte{
		"gotestsum":       tool(gotestsum, "gotestsum", "--junitfile", gotestsum, "--raw-command", "--", "cat", in),
		"go-junit-report": tool(gjr, "go-junit-report", "-parser", "gojson", "-in", in, "-out", gjr),
	}
	if py := pytestReport(t); py != nil {
		reports["pytest"] = py
	}
	for producer, xml := range reports {
		t.Run(producer, func(t *testing.T) {
			res, err := Decode(context.Background(), MediaJUnit, xml, testParams())
			if err != nil {
				t.Fatalf("decode %s report: %v", producer, err)
			}
			checkOriginal(t, res, xml)
			got, d := outcomes(t, res)
			t.Logf("%s: counts %+v declared %+v mismatch %q", producer, d.Counts, d.Declared, d.CountMismatch)
			// gotestsum reports the build failure as a testcase with a
			// <failure> that it counts as an error and not as a test.
			wantMismatch := map[string]string{"gotestsum": "tests declared 10, found 11; errors declared 1, found 0"}[producer]
			if d.Declared == nil || d.CountMismatch != wantMismatch {
				t.Fatalf("declared %+v mismatch %q, want %q", d.Declared, d.CountMismatch, wantMismatch)
			}
			if res.Evidence[0].Status == ledger.StatusPassed {
				t.Fatalf("a run with failures recorded as passed")
			}
			for id, o := range got {
				switch {
				case strings.HasSuffix(id, "TestPass") || strings.HasSuffix(id, "test_pass"):
					if o != Passed {
						t.Errorf("%s: %s", id, o)
					}
				case strings.HasSuffix(id, "TestFail") || strings.HasSuffix(id, "test_fail"):
					if o != Failed {
						t.Errorf("%s: %s", id, o)
					}
				case strings.HasSuffix(id, "TestSkip") || strings.HasSuffix(id, "test_skip"):
					if o != Skipped {
						t.Errorf("%s: %s", id, o)
					}
				}
			}
			if d.Counts.Failed == 0 || d.Counts.Skipped == 0 || d.Counts.Passed == 0 {
				t.Fatalf("counts %+v", d.Counts)
			}
		})
	}
}

// pytestReport runs python3 -m pytest --junitxml over a throwaway test
// file; nil (and a logged skip) when pytest is not installed.
func pytestReport(t *testing.T) []byte {
	python := ""
	for _, p := range []string{"python3", "/usr/bin/python3"} { // Debian's python3-pytest is /usr/bin's
		if exec.Command(p, "-c", "import pytest").Run() == nil {
			python = p
			break
		}
	}
	if python == "" {
		t.Log("python3-pytest is not installed: no pytest report")
		return nil
	}
	dir := t.TempDir()
	src := `import pytest

def test_pass():
    pass

def test_fail():
    assert 1 == 2

@pytest.mark.skip(reason="not here")
def test_skip():
    pass

@pytest.fixture
def broken():
    raise RuntimeError("fixture")

def test_error(broken):
    pass
`
	if err := os.WriteFile(filepath.Join(dir, "test_throwaway.py"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "pytest.xml")
	cmd := exec.Command(python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--junitxml", out, dir)
	cmd.Dir = dir
	_ = cmd.Run()
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatalf("pytest wrote no report: %v", err)
	}
	return b
}
