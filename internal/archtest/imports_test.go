package archtest

import (
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"golang.org/x/mod/modfile"
)

// moduleRoot returns the directory of the go.mod above the test's working
// directory and the module path it declares.
func moduleRoot(t *testing.T) (dir, path string) {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil {
			return dir, modfile.ModulePath(b)
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the working directory")
		}
		dir = parent
	}
}

// importGraph runs `go list -json ./...` in root and returns each package
// of module mod (module-relative, "." for the module's root package) with
// the module packages its non-test files import.
func importGraph(t *testing.T, root, mod string) map[string][]string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	cmd := exec.Command(goBin, "list", "-json", "./...")
	cmd.Dir = root
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -json ./...: %v\n%s", err, stderr.String())
	}
	rel := func(p string) (string, bool) {
		if p == mod {
			return ".", true
		}
		r, ok := strings.CutPrefix(p, mod+"/")
		return r, ok
	}
	graph := map[string][]string{}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p struct {
			ImportPath string
			Imports    []string
		}
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("go list output: %v", err)
		}
		pkg, ok := rel(p.ImportPath)
		if !ok {
			continue
		}
		imps := []string{}
		for _, imp := range p.Imports {
			if r, ok := rel(imp); ok {
				imps = append(imps, r)
			}
		}
		graph[pkg] = imps
	}
	if len(graph) == 0 {
		t.Fatal("go list listed no package of the module")
	}
	return graph
}

// TestImportBoundaries checks every module-internal import of every
// package's non-test files against its row of docs/ARCHITECTURE.md's
// "may import" table, and that every package has a row and every row a
// package.
func TestImportBoundaries(t *testing.T) {
	root, mod := moduleRoot(t)
	doc, err := os.ReadFile(filepath.Join(root, "docs", "ARCHITECTURE.md"))
	if err != nil {
		t.Fatal(err)
	}
	rules, err := parseRules(doc)
	if err != nil {
		t.Fatalf("docs/ARCHITECTURE.md: %v", err)
	}
	if v := check(rules, importGraph(t, root, mod)); len(v) > 0 {
		t.Errorf("%d import-boundary violations of docs/ARCHITECTURE.md's \"may import\" table:\n\t%s", len(v), strings.Join(v, "\n\t"))
	}
}

// TestCheck is the checker on a synthetic graph: a disallowed import, a
// package without a row and a row without a package must all be reported,
// and allowed imports (exact, "x/...", "*") must not.
func TestCheck(t *testing.T) {
	doc := []byte("# x\n\n| package | holds | may import |\n|---|---|---|\n" +
		"| `ledger` | vocabulary | `ledger/internal/...` |\n" +
		"| `ledger/internal/cursor` | cursors | — |\n" +
		"| `gates` | gates | `ledger` |\n" +
		"| `web` | http | `gates`, `ledger` |\n" +
		"| `cmd/ledger` | wiring | `*` |\n" +
		"| `admit` | admission | `gates`, `ledger` |\n\nafter the table | not | a row |\n")
	rules, err := parseRules(doc)
	if err != nil {
		t.Fatal(err)
	}
	graph := map[string][]string{
		"ledger":                 {"ledger/internal/cursor"},
		"ledger/internal/cursor": {},
		"gates":                  {"ledger", "web"},
		"web":                    {"gates", "ledger", "ledger/internal/cursor"},
		"cmd/ledger":             {"web", "gates", "ledger"},
		"ledger/client":          {"gates", "ledger"},
	}
	got := check(rules, graph)
	want := []string{
		"admit: a row but no such package",
		"gates -> web",
		"ledger/client -> gates (no row for ledger/client)",
		"ledger/client -> ledger (no row for ledger/client)",
		"ledger/client: no row",
		"web -> ledger/internal/cursor",
	}
	if !slices.Equal(got, want) {
		t.Errorf("check:\n got %q\nwant %q", got, want)
	}
}

// TestParseRules pins the table format: cells of backticked names, "—"
// for none, duplicate rows and a missing table refused.
func TestParseRules(t *testing.T) {
	rules, err := parseRules([]byte("| package | may import |\n|:--|--|\n| `a` | `b`, `c/...` |\n| `d` | — |\n| `e` |  |\n"))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(rules["a"], []string{"b", "c/..."}) || len(rules["d"]) != 0 || len(rules["e"]) != 0 || len(rules) != 3 {
		t.Errorf("rules = %q", rules)
	}
	for _, bad := range []string{
		"no table here\n",
		"| rule | package and file |\n|---|---|\n| 1 | `gates` |\n",
		"| package | may import |\n|---|---|\n| `a` | `b` |\n| `a` | `c` |\n",
	} {
		if _, err := parseRules([]byte(bad)); err == nil {
			t.Errorf("parseRules(%q): no error", bad)
		}
	}
}

// TestAllowed pins the pattern forms.
func TestAllowed(t *testing.T) {
	for _, c := range []struct {
		pats []string
		pkg  string
		want bool
	}{
		{[]string{"ledger"}, "ledger", true},
		{[]string{"ledger"}, "ledger/tlog", false},
		{[]string{"ledger/..."}, "ledger", true},
		{[]string{"ledger/..."}, "ledger/tlog", true},
		{[]string{"ledger/..."}, "ledgerx", false},
		{[]string{"runner/..."}, "runner/alloc", true},
		{[]string{"*"}, "web", true},
		{nil, "ledger", false},
	} {
		if got := allowed(c.pats, c.pkg); got != c.want {
			t.Errorf("allowed(%q, %q) = %v, want %v", c.pats, c.pkg, got, c.want)
		}
	}
}

// TestDocNamesFilesThatExist checks that every Go file docs/ARCHITECTURE.md
// points at (a backticked module-relative path ending in .go, as in "where
// each TRUST.md rule lives") exists, so the rule map cannot point at a file
// that was renamed or removed.
func TestDocNamesFilesThatExist(t *testing.T) {
	root, _ := moduleRoot(t)
	doc, err := os.ReadFile(filepath.Join(root, "docs", "ARCHITECTURE.md"))
	if err != nil {
		t.Fatal(err)
	}
	paths := goPaths(string(doc))
	if len(paths) == 0 {
		t.Fatal("docs/ARCHITECTURE.md names no Go file; the rule map is missing")
	}
	for _, p := range paths {
		if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(p))); err != nil {
			t.Errorf("docs/ARCHITECTURE.md names %s, which does not exist", p)
		}
	}
}

// goPaths returns the backticked spans of s that are paths of Go files
// (contain a slash, end in ".go"), in order, without repeats.
func goPaths(s string) []string {
	var out []string
	parts := strings.Split(s, "`")
	for i := 1; i < len(parts); i += 2 {
		p := parts[i]
		if strings.HasSuffix(p, ".go") && strings.Contains(p, "/") && !strings.ContainsAny(p, " *") && !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out
}

func TestGoPaths(t *testing.T) {
	got := goPaths("a `admit/rules.go` (`Token.Covers`), `ledger/x.go` and `admit/rules.go`, `cmd/ledger/agent*.go` `go`")
	if want := []string{"admit/rules.go", "ledger/x.go"}; !slices.Equal(got, want) {
		t.Fatalf("goPaths = %q, want %q", got, want)
	}
}
