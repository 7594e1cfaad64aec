package archtest

import (
	"bufio"
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// MaxLines is the most lines a non-test Go file may have.
const MaxLines = 600

// parseRules reads the first markdown table of doc whose header has a
// "package" column and a "may import" column, and returns each row's
// package (module-relative, backticks removed) with the patterns it may
// import. A pattern is a module-relative package ("gates"), a package and
// everything under it ("ledger/...") or "*" (any module package); a cell of
// "—", "-" or nothing allows none. It fails when no such table is found or
// a package has two rows.
func parseRules(doc []byte) (map[string][]string, error) {
	rules := map[string][]string{}
	pkgCol, mayCol := -1, -1
	inTable := false
	sc := bufio.NewScanner(bytes.NewReader(doc))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if !strings.HasPrefix(line, "|") {
			if inTable {
				break
			}
			continue
		}
		cells := splitRow(line)
		if !inTable {
			for i, c := range cells {
				switch strings.ToLower(c) {
				case "package":
					pkgCol = i
				case "may import":
					mayCol = i
				}
			}
			if pkgCol >= 0 && mayCol >= 0 {
				inTable = true
			} else {
				pkgCol, mayCol = -1, -1
			}
			continue
		}
		if isSeparator(cells) {
			continue
		}
		if pkgCol >= len(cells) || mayCol >= len(cells) {
			return nil, fmt.Errorf("row %q: fewer cells than the header", line)
		}
		pkg := strings.Trim(cells[pkgCol], "` ")
		if pkg == "" {
			return nil, fmt.Errorf("row %q: no package", line)
		}
		if _, dup := rules[pkg]; dup {
			return nil, fmt.Errorf("package %s has two rows", pkg)
		}
		var pats []string
		for _, p := range strings.Split(cells[mayCol], ",") {
			p = strings.Trim(strings.TrimSpace(p), "`")
			switch p {
			case "", "—", "-":
				continue
			}
			pats = append(pats, p)
		}
		rules[pkg] = pats
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if !inTable {
		return nil, fmt.Errorf(`no table with a "package" and a "may import" column`)
	}
	return rules, nil
}

// splitRow splits a markdown table row into its trimmed cells.
func splitRow(line string) []string {
	line = strings.TrimPrefix(strings.TrimSuffix(line, "|"), "|")
	cells := strings.Split(line, "|")
	for i := range cells {
		cells[i] = strings.TrimSpace(cells[i])
	}
	return cells
}

// isSeparator reports whether cells are a header separator (---).
func isSeparator(cells []string) bool {
	for _, c := range cells {
		if strings.Trim(c, ":-") != "" {
			return false
		}
	}
	return true
}

// allowed reports whether one of patterns allows importing pkg.
func allowed(patterns []string, pkg string) bool {
	for _, p := range patterns {
		if p == "*" || p == pkg {
			return true
		}
		if base, ok := strings.CutSuffix(p, "/..."); ok && (pkg == base || strings.HasPrefix(pkg, base+"/")) {
			return true
		}
	}
	return false
}

// check returns every violation of rules by graph (module-relative
// package -> the module-relative packages it imports), sorted:
// "pkg -> imported" for an import its row does not allow (with
// "(no row for pkg)" appended when pkg has no row), "pkg: no row" for a
// package without a row and "pkg: a row but no such package" for a row
// naming no package of graph.
func check(rules, graph map[string][]string) []string {
	var out []string
	for pkg, imps := range graph {
		pats, ok := rules[pkg]
		if !ok {
			out = append(out, pkg+": no row")
		}
		for _, imp := range imps {
			switch {
			case !ok:
				out = append(out, pkg+" -> "+imp+" (no row for "+pkg+")")
			case !allowed(pats, imp):
				out = append(out, pkg+" -> "+imp)
			}
		}
	}
	for pkg := range rules {
		if _, ok := graph[pkg]; !ok {
			out = append(out, pkg+": a row but no such package")
		}
	}
	sort.Strings(out)
	return out
}

// longFiles walks root and returns "path: N lines" (path relative to root,
// slash-separated, sorted) for every non-test .go file over max lines. It
// skips directories named testdata or vendor, those starting with "." or
// "_", and nested modules (a directory other than root with a go.mod).
func longFiles(root string, max int) ([]string, error) {
	var out []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path == root {
				return nil
			}
			if name == "testdata" || name == "vendor" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		n := bytes.Count(b, []byte("\n"))
		if len(b) > 0 && b[len(b)-1] != '\n' {
			n++
		}
		if n > max {
			rel, err := filepath.Rel(root, path)
			if err != nil {
				return err
			}
			out = append(out, fmt.Sprintf("%s: %d lines", filepath.ToSlash(rel), n))
		}
		return nil
	})
	sort.Strings(out)
	return out, err
}
