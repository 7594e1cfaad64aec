package verify

import (
	"fmt"
	"path"
	"sort"
	"strings"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
)

// Difference kinds of a TreeReport.
const (
	DiffAdded     = "added"
	DiffRemoved   = "removed"
	DiffModified  = "modified"  // content changed (same mode)
	DiffMode      = "mode"      // only the mode changed (e.g. 100644 -> 100755)
	DiffType      = "type"      // the entry changed kind (file, symlink, submodule)
	DiffSubmodule = "submodule" // a gitlink's pinned commit id changed
	DiffRenamed   = "renamed"   // same content and mode under a new path
)

// TreeDifference is one path-level difference between the reviewed tree
// (old) and the head tree (new).
type TreeDifference struct {
	Kind    string `json:"kind"`
	Path    string `json:"path"`               // the new path (the old one for removals)
	OldPath string `json:"old_path,omitempty"` // renames only
	OldMode string `json:"old_mode,omitempty"` // octal, e.g. "100644"
	NewMode string `json:"new_mode,omitempty"`
	OldID   string `json:"old_id,omitempty"` // blob id, or commit id for submodules
	NewID   string `json:"new_id,omitempty"`
	InPins  bool   `json:"in_pins"` // every path of the difference lies in a pin
}

// TreeReport compares a signed head's tree with the reviewed source's tree.
type TreeReport struct {
	Head         string           `json:"head"` // commit ids
	Reviewed     string           `json:"reviewed"`
	HeadTree     string           `json:"head_tree"`
	ReviewedTree string           `json:"reviewed_tree"`
	Pins         []string         `json:"pins,omitempty"`
	Differences  []TreeDifference `json:"differences"`
	OutsidePins  int              `json:"outside_pins"` // differences not in pins
	// Equivalent is true when every difference lies in a pin.
	Equivalent bool `json:"equivalent"`
}

type treeEntry struct {
	mode filemode.FileMode
	id   string // hex object id (SHA-1 or SHA-256)
}

// TreeEquivalence compares the trees of headRev and reviewedRev in the
// repository at repoPath. Paths are compared as git stores them: mode
// 100664 counts as 100644 (git's canonical_mode), submodules (gitlinks)
// are compared by their pinned commit ids and never entered, and a removed
// and an added path with the same content and mode form one rename. A
// difference is in the pins when each of its paths matches a pin glob:
// path.Match on the full slash-separated path, where a pattern ending in
// "/**" or naming a directory also covers everything below it. Errors are
// unreadable repositories or revisions, ErrUnsupportedObjectFormat, or
// ErrMalformed for bad pin patterns.
func TreeEquivalence(repoPath, headRev, reviewedRev string, pins []string) (TreeReport, error) {
	var rep TreeReport
	for _, p := range pins {
		if _, err := path.Match(strings.TrimSuffix(p, "/**"), ""); err != nil || p == "" {
			return rep, newErr(ErrMalformed, "bad pin pattern %q", p)
		}
	}
	repo, err := openRepo(repoPath)
	if err != nil {
		return rep, err
	}
	headC, err := commitOf(repo, headRev)
	if err != nil {
		return rep, err
	}
	revC, err := commitOf(repo, reviewedRev)
	if err != nil {
		return rep, err
	}
	rep.Head, rep.Reviewed = headC.Hash.String(), revC.Hash.String()
	rep.HeadTree, rep.ReviewedTree = headC.TreeHash.String(), revC.TreeHash.String()
	rep.Pins = pins
	newT, err := flattenTree(repo, headC.TreeHash)
	if err != nil {
		return rep, err
	}
	oldT, err := flattenTree(repo, revC.TreeHash)
	if err != nil {
		return rep, err
	}
	rep.Differences = diffTrees(oldT, newT)
	for i := range rep.Differences {
		d := &rep.Differences[i]
		d.InPins = inPins(d.Path, pins) && (d.OldPath == "" || inPins(d.OldPath, pins))
		if !d.InPins {
			rep.OutsidePins++
		}
	}
	if rep.Differences == nil {
		rep.Differences = []TreeDifference{}
	}
	rep.Equivalent = rep.OutsidePins == 0
	return rep, nil
}

func commitOf(repo *git.Repository, rev string) (*object.Commit, error) {
	_, h, err := resolveRef(repo, rev)
	if err != nil {
		return nil, err
	}
	// Peel annotated tags.
	for i := 0; i < 8; i++ {
		t, err := repo.TagObject(h)
		if err != nil {
			break
		}
		h = t.Target
	}
	c, err := repo.CommitObject(h)
	if err != nil {
		return nil, fmt.Errorf("revision %s: %w", rev, err)
	}
	return c, nil
}

// canonicalMode maps modes as git's canonical_mode does: any regular file
// mode becomes 100644 or 100755 by the owner-execute bit.
func canonicalMode(m filemode.FileMode) filemode.FileMode {
	if m == filemode.Deprecated {
		return filemode.Regular
	}
	return m
}

// flattenTree lists every non-tree entry by full path, descending into
// subtrees but not into submodules. A missing subtree is an error.
func flattenTree(repo *git.Repository, h plumbing.Hash) (map[string]treeEntry, error) {
	out := map[string]treeEntry{}
	var walk func(prefix string, h plumbing.Hash, depth int) error
	walk = func(prefix string, h plumbing.Hash, depth int) error {
		if depth > 256 {
			return newErr(ErrMalformed, "tree %s nests deeper than 256", h)
		}
		t, err := repo.TreeObject(h)
		if err != nil {
			return fmt.Errorf("read tree %s at %q: %w", h, prefix, err)
		}
		for _, e := range t.Entries {
			p := e.Name
			if prefix != "" {
				p = prefix + "/" + e.Name
			}
			if e.Mode == filemode.Dir {
				if err := walk(p, e.Hash, depth+1); err != nil {
					return err
				}
				continue
			}
			out[p] = treeEntry{mode: canonicalMode(e.Mode), id: e.Hash.String()}
		}
		return nil
	}
	return out, walk("", h, 0)
}

func kindOfMode(m filemode.FileMode) string {
	switch m {
	case filemode.Submodule:
		return "submodule"
	case filemode.Symlink:
		return "symlink"
	}
	return "file"
}

func modeStr(m filemode.FileMode) string { return fmt.Sprintf("%06o", uint32(m)) }

func diffTrees(oldT, newT map[string]treeEntry) []TreeDifference {
	var diffs []TreeDifference
	var added, removed []string
	for p, o := range oldT {
		n, ok := newT[p]
		if !ok {
			removed = append(removed, p)
			continue
		}
		if n == o {
			continue
		}
		d := TreeDifference{Path: p, OldMode: modeStr(o.mode), NewMode: modeStr(n.mode), OldID: o.id, NewID: n.id}
		switch {
		case kindOfMode(o.mode) != kindOfMode(n.mode):
			d.Kind = DiffType
		case o.mode == filemode.Submodule:
			d.Kind = DiffSubmodule
		case o.id == n.id:
			d.Kind = DiffMode
		default:
			d.Kind = DiffModified
		}
		diffs = append(diffs, d)
	}
	for p := range newT {
		if _, ok := oldT[p]; !ok {
			added = append(added, p)
		}
	}
	sort.Strings(added)
	sort.Strings(removed)
	// Exact renames: pair each removed path with the first added path of
	// the same content and mode (sorted order makes the pairing stable).
	byContent := map[treeEntry][]string{}
	for _, p := range added {
		byContent[newT[p]] = append(byContent[newT[p]], p)
	}
	used := map[string]bool{}
	for _, p := range removed {
		e := oldT[p]
		if cands := byContent[e]; len(cands) > 0 {
			np := cands[0]
			byContent[e] = cands[1:]
			used[np] = true
			diffs = append(diffs, TreeDifference{Kind: DiffRenamed, Path: np, OldPath: p, OldMode: modeStr(e.mode), NewMode: modeStr(e.mode), OldID: e.id, NewID: e.id})
			continue
		}
		diffs = append(diffs, TreeDifference{Kind: DiffRemoved, Path: p, OldMode: modeStr(e.mode), OldID: e.id})
	}
	for _, p := range added {
		if used[p] {
			continue
		}
		e := newT[p]
		diffs = append(diffs, TreeDifference{Kind: DiffAdded, Path: p, NewMode: modeStr(e.mode), NewID: e.id})
	}
	sort.Slice(diffs, func(i, j int) bool {
		if diffs[i].Path != diffs[j].Path {
			return diffs[i].Path < diffs[j].Path
		}
		return diffs[i].Kind < diffs[j].Kind
	})
	return diffs
}

// inPins reports whether p lies in one of the pin patterns.
func inPins(p string, pins []string) bool {
	for _, pin := range pins {
		pat := strings.TrimSuffix(strings.TrimSuffix(pin, "/**"), "/")
		if ok, _ := path.Match(pat, p); ok {
			return true
		}
		// A pattern matching a leading directory covers what lies below.
		for dir := path.Dir(p); dir != "." && dir != "/"; dir = path.Dir(dir) {
			if ok, _ := path.Match(pat, dir); ok {
				return true
			}
		}
	}
	return false
}
