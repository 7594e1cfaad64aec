package verify

import (
	"bytes"
	"errors"
	"io"
	"path"
	"sort"
	"strings"
	"testing"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/storage"
)

// fileSpec is one path of a test tree: a blob with content, or a gitlink
// (submodule) pinned at commit.
type fileSpec struct {
	mode    filemode.FileMode
	content string // blob content; for submodules a 40-hex commit id
}

func storeBlob(t *testing.T, s storage.Storer, content string) plumbing.Hash {
	t.Helper()
	o := s.NewEncodedObject()
	o.SetType(plumbing.BlobObject)
	w, _ := o.Writer()
	w.Write([]byte(content))
	w.Close()
	h, err := s.SetEncodedObject(o)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// storeTree writes the nested trees for files and returns the root id.
func storeTree(t *testing.T, s storage.Storer, files map[string]fileSpec) plumbing.Hash {
	t.Helper()
	type dir struct {
		entries map[string]object.TreeEntry
		subdirs map[string]bool
	}
	dirs := map[string]*dir{"": {entries: map[string]object.TreeEntry{}, subdirs: map[string]bool{}}}
	get := func(p string) *dir {
		if dirs[p] == nil {
			dirs[p] = &dir{entries: map[string]object.TreeEntry{}, subdirs: map[string]bool{}}
		}
		return dirs[p]
	}
	for p, f := range files {
		d, name := path.Split(p)
		d = strings.TrimSuffix(d, "/")
		h := plumbing.NewHash(f.content)
		if f.mode != filemode.Submodule {
			h = storeBlob(t, s, f.content)
		}
		get(d).entries[name] = object.TreeEntry{Name: name, Mode: f.mode, Hash: h}
		for d != "" {
			parent, base := path.Split(d)
			parent = strings.TrimSuffix(parent, "/")
			get(parent).subdirs[base] = true
			d = parent
		}
	}
	var build func(p string) plumbing.Hash
	build = func(p string) plumbing.Hash {
		d := dirs[p]
		var es []object.TreeEntry
		for _, e := range d.entries {
			es = append(es, e)
		}
		for sd := range d.subdirs {
			full := sd
			if p != "" {
				full = p + "/" + sd
			}
			es = append(es, object.TreeEntry{Name: sd, Mode: filemode.Dir, Hash: build(full)})
		}
		sort.Slice(es, func(i, j int) bool { return treeSortKey(es[i]) < treeSortKey(es[j]) })
		o := s.NewEncodedObject()
		if err := (&object.Tree{Entries: es}).Encode(o); err != nil {
			t.Fatal(err)
		}
		h, err := s.SetEncodedObject(o)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	return build("")
}

func treeSortKey(e object.TreeEntry) string {
	if e.Mode == filemode.Dir {
		return e.Name + "/"
	}
	return e.Name
}

func storeCommit(t *testing.T, s storage.Storer, tree plumbing.Hash, msg string) plumbing.Hash {
	t.Helper()
	sig := object.Signature{Name: "T", Email: "t@example.com", When: fixtureT0}
	c := &object.Commit{Author: sig, Committer: sig, Message: msg, TreeHash: tree}
	o := s.NewEncodedObject()
	if err := c.Encode(o); err != nil {
		t.Fatal(err)
	}
	h, err := s.SetEncodedObject(o)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func TestTreeEquivalence(t *testing.T) {
	subA := strings.Repeat("a", 40)
	subB := strings.Repeat("b", 40)
	base := map[string]fileSpec{
		"README.md":             {filemode.Regular, "readme\n"},
		"src/main.go":           {filemode.Regular, "package main\n"},
		"src/util/util.go":      {filemode.Regular, "package util\n"},
		"scripts/build.sh":      {filemode.Executable, "#!/bin/sh\n"},
		"go.sum":                {filemode.Regular, "sums v1\n"},
		"third_party/dep":       {filemode.Submodule, subA},
		"third_party/pins.lock": {filemode.Regular, "dep v1\n"},
	}
	with := func(changes map[string]*fileSpec) map[string]fileSpec {
		m := map[string]fileSpec{}
		for k, v := range base {
			m[k] = v
		}
		for k, v := range changes {
			if v == nil {
				delete(m, k)
			} else {
				m[k] = *v
			}
		}
		return m
	}
	pins := []string{"go.sum", "third_party/**"}
	cases := []struct {
		name       string
		head       map[string]fileSpec
		equivalent bool
		want       []string // "kind path [old]" of each difference, "!" suffix: outside pins
	}{
		{"equal", base, true, nil},
		{"only pins changed", with(map[string]*fileSpec{
			"go.sum":                {filemode.Regular, "sums v2\n"},
			"third_party/pins.lock": {filemode.Regular, "dep v2\n"},
		}), true, []string{"modified go.sum", "modified third_party/pins.lock"}},
		{"change outside pins", with(map[string]*fileSpec{
			"go.sum":      {filemode.Regular, "sums v2\n"},
			"src/main.go": {filemode.Regular, "package main // backdoor\n"},
		}), false, []string{"modified go.sum", "modified src/main.go!"}},
		{"mode only", with(map[string]*fileSpec{
			"README.md": {filemode.Executable, "readme\n"},
		}), false, []string{"mode README.md!"}},
		{"100664 equals 100644", with(map[string]*fileSpec{
			"README.md": {filemode.Deprecated, "readme\n"},
		}), true, nil},
		{"submodule pin change", with(map[string]*fileSpec{
			"third_party/dep": {filemode.Submodule, subB},
		}), true, []string{"submodule third_party/dep"}},
		{"submodule outside pins", with(map[string]*fileSpec{
			"vendor/lib": {filemode.Submodule, subB},
		}), false, []string{"added vendor/lib!"}},
		{"file replaced by submodule", with(map[string]*fileSpec{
			"src/util/util.go": {filemode.Submodule, subB},
		}), false, []string{"type src/util/util.go!"}},
		{"rename", with(map[string]*fileSpec{
			"src/util/util.go":    nil,
			"src/helpers/util.go": {filemode.Regular, "package util\n"},
		}), false, []string{"renamed src/helpers/util.go src/util/util.go!"}},
		{"rename inside pins", with(map[string]*fileSpec{
			"third_party/pins.lock":     nil,
			"third_party/pins.lock.new": {filemode.Regular, "dep v1\n"},
		}), true, []string{"renamed third_party/pins.lock.new third_party/pins.lock"}},
		{"added and removed", with(map[string]*fileSpec{
			"README.md": nil,
			"NEW.md":    {filemode.Regular, "new\n"},
		}), false, []string{"added NEW.md!", "removed README.md!"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			repo, err := git.PlainInit(dir, false)
			if err != nil {
				t.Fatal(err)
			}
			s := repo.Storer
			rev := storeCommit(t, s, storeTree(t, s, base), "reviewed")
			head := storeCommit(t, s, storeTree(t, s, tc.head), "head")
			if err := s.SetReference(plumbing.NewHashReference("refs/heads/release", head)); err != nil {
				t.Fatal(err)
			}
			if tc.name == "100664 equals 100644" {
				// The stored tree really carries 100664 (not normalised on write).
				// (go-git canonicalises modes on decode, so look at the bytes.)
				ht, _ := repo.CommitObject(head)
				eo, err := repo.Storer.EncodedObject(plumbing.TreeObject, ht.TreeHash)
				if err != nil {
					t.Fatal(err)
				}
				rd, _ := eo.Reader()
				raw, _ := io.ReadAll(rd)
				if !bytes.Contains(raw, []byte("100664 README.md\x00")) {
					t.Fatalf("fixture tree does not store README.md as 100664")
				}
			}
			rep, err := TreeEquivalence(dir, "release", rev.String(), pins)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, d := range rep.Differences {
				s := d.Kind + " " + d.Path
				if d.OldPath != "" {
					s += " " + d.OldPath
				}
				if !d.InPins {
					s += "!"
				}
				got = append(got, s)
			}
			if strings.Join(got, "|") != strings.Join(tc.want, "|") {
				t.Errorf("differences\n got %q\nwant %q", got, tc.want)
			}
			if rep.Equivalent != tc.equivalent {
				t.Errorf("equivalent %v, want %v", rep.Equivalent, tc.equivalent)
			}
			if rep.Head != head.String() || rep.Reviewed != rev.String() {
				t.Errorf("head/reviewed %s %s", rep.Head, rep.Reviewed)
			}
		})
	}
}

func TestTreeEquivalenceErrors(t *testing.T) {
	dir := t.TempDir()
	repo, err := git.PlainInit(dir, false)
	if err != nil {
		t.Fatal(err)
	}
	c := storeCommit(t, repo.Storer, storeTree(t, repo.Storer, map[string]fileSpec{"a": {filemode.Regular, "a"}}), "x")
	if _, err := TreeEquivalence(dir, c.String(), "nope", nil); err == nil {
		t.Error("unknown reviewed revision accepted")
	}
	if _, err := TreeEquivalence(dir, c.String(), c.String(), []string{"[bad"}); !errors.Is(err, ErrMalformed) {
		t.Errorf("bad pin: %v", err)
	}
	if _, err := TreeEquivalence(t.TempDir(), "HEAD", "HEAD", nil); err == nil {
		t.Error("non-repository accepted")
	}
}
