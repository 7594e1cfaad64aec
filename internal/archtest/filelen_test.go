package archtest

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestNoLongFiles fails for every non-test Go file of the module over
// MaxLines lines.
func TestNoLongFiles(t *testing.T) {
	root, _ := moduleRoot(t)
	long, err := longFiles(root, MaxLines)
	if err != nil {
		t.Fatal(err)
	}
	if len(long) > 0 {
		t.Errorf("%d non-test Go files over %d lines:\n\t%s", len(long), MaxLines, strings.Join(long, "\n\t"))
	}
}

// TestLongFiles is the length check on a synthetic tree: only the non-test
// file over the limit outside testdata and nested modules is reported.
func TestLongFiles(t *testing.T) {
	root := t.TempDir()
	write := func(rel string, lines int, trailingNewline bool) {
		t.Helper()
		p := filepath.Join(root, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		s := strings.Repeat("//\n", lines)
		if !trailingNewline {
			s = strings.TrimSuffix(s, "\n")
		}
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", 1, true)
	write("a/long.go", 601, true)
	write("a/long_nonl.go", 601, false)
	write("a/limit.go", 600, true)
	write("a/long_test.go", 900, true)
	write("a/testdata/long.go", 900, true)
	write("nested/go.mod", 1, true)
	write("nested/long.go", 900, true)
	write(".hidden/long.go", 900, true)
	got, err := longFiles(root, 600)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"a/long.go: 601 lines", "a/long_nonl.go: 601 lines"}
	if !slices.Equal(got, want) {
		t.Errorf("longFiles = %q, want %q", got, want)
	}
}
