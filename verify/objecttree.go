package verify

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"path"
	"sort"
	"strings"

	"github.com/evidence-ledger/ledger/ledger"
	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
)

// TreeUpload is a tree-equivalence check from uploaded objects: the head
// and reviewed commits and the tree objects along every path where their
// trees differ (a subtree whose id is the same on both sides need not be
// sent; a subtree present on one side only is sent whole). Blobs never
// travel: files compare by id.
type TreeUpload struct {
	Format   string // FormatSHA1 when empty
	Head     string // the signed head commit id
	Reviewed string // the reviewed source commit id
	Objects  []RawObject
	// Pins are the path globs allowed to differ (TreeEquivalence's rule).
	Pins []string
}

// treeItem is one entry of a git tree object.
type treeItem struct {
	name string
	mode filemode.FileMode
	id   string
}

// parseTreeObject parses a git tree object: entries "<octal mode>
// <name>\x00<id bytes>", ids of idLen/2 bytes. Names must be non-empty,
// without "/", and not "." or "..".
func parseTreeObject(data []byte, n int) ([]treeItem, error) {
	var out []treeItem
	for off := 0; off < len(data); {
		sp := bytes.IndexByte(data[off:], ' ')
		if sp <= 0 {
			return nil, fmt.Errorf("entry at byte %d has no mode", off)
		}
		m, err := filemode.New(string(data[off : off+sp]))
		if err != nil {
			return nil, fmt.Errorf("entry at byte %d has a bad mode", off)
		}
		off += sp + 1
		nul := bytes.IndexByte(data[off:], 0)
		if nul <= 0 {
			return nil, fmt.Errorf("entry at byte %d has no name", off)
		}
		name := string(data[off : off+nul])
		if strings.Contains(name, "/") || name == "." || name == ".." {
			return nil, fmt.Errorf("entry at byte %d has an invalid name", off)
		}
		off += nul + 1
		if off+n > len(data) {
			return nil, fmt.Errorf("entry %q is truncated", clip([]byte(name)))
		}
		out = append(out, treeItem{name: name, mode: m, id: hex.EncodeToString(data[off : off+n])})
		off += n
	}
	return out, nil
}

// TreeEquivalenceObjects compares the trees of u.Head and u.Reviewed from
// uploaded objects with the rules of TreeEquivalence (same differences,
// same pin matching, same renames), after recomputing every object's id
// from its bytes. Errors are CodeInvalid *ledger.Error values naming the
// field: objects[i].data wrapping ErrObjectID for bytes that do not hash
// to their id, objects[i] for duplicates or unparsable trees, objects for
// a commit or a differing subtree that was not sent (naming its path),
// pins for bad patterns. It is safe for concurrent use.
func TreeEquivalenceObjects(u TreeUpload) (TreeReport, []string, error) {
	var rep TreeReport
	for _, p := range u.Pins {
		if _, err := path.Match(strings.TrimSuffix(p, "/**"), ""); err != nil || p == "" {
			return rep, nil, ledger.FieldError("pins", "bad pin pattern %q", p)
		}
	}
	if len(u.Objects) > MaxUploadObjects {
		return rep, nil, ledger.FieldError("objects", "at most %d objects", MaxUploadObjects)
	}
	n := idLen(u.Format)
	byID := make(map[string]RawObject, len(u.Objects))
	ids := make([]string, 0, len(u.Objects))
	for i, o := range u.Objects {
		id, err := checkUploaded(u.Format, i, o, "commit", "tree")
		if err != nil {
			return rep, nil, err
		}
		if _, dup := byID[id]; dup {
			return rep, nil, ledger.FieldError(fmt.Sprintf("objects[%d]", i), "object %s is sent twice", id)
		}
		byID[id] = o
		ids = append(ids, id)
	}
	commitTree := func(field, id string) (string, error) {
		o, ok := byID[id]
		if !ok || o.Type != "commit" {
			return "", ledger.FieldError("objects", "the %s commit %s was not sent", field, id)
		}
		c, err := parseFormat(u.Format, id, "commit", o.Data)
		if err != nil {
			return "", ledger.FieldError("objects", "the %s commit %s does not parse: %v", field, id, err)
		}
		return c.Tree, nil
	}
	var err error
	rep.Head, rep.Reviewed, rep.Pins = u.Head, u.Reviewed, u.Pins
	if rep.HeadTree, err = commitTree("head", u.Head); err != nil {
		return rep, nil, err
	}
	if rep.ReviewedTree, err = commitTree("reviewed", u.Reviewed); err != nil {
		return rep, nil, err
	}
	w := treeWalker{byID: byID, n: n, oldT: map[string]treeEntry{}, newT: map[string]treeEntry{}}
	if err := w.compare("", rep.ReviewedTree, rep.HeadTree, 0); err != nil {
		return rep, nil, err
	}
	rep.Differences = diffTrees(w.oldT, w.newT)
	for i := range rep.Differences {
		d := &rep.Differences[i]
		d.InPins = inPins(d.Path, u.Pins) && (d.OldPath == "" || inPins(d.OldPath, u.Pins))
		if !d.InPins {
			rep.OutsidePins++
		}
	}
	if rep.Differences == nil {
		rep.Differences = []TreeDifference{}
	}
	rep.Equivalent = rep.OutsidePins == 0
	sort.Strings(ids)
	return rep, ids, nil
}

// treeWalker walks two trees from uploaded objects, recording into oldT
// and newT the non-tree entries under every differing path (entries under
// equal subtrees are equal on both sides and cannot make a difference).
type treeWalker struct {
	byID       map[string]RawObject
	n          int
	oldT, newT map[string]treeEntry
}

func (w *treeWalker) tree(id, at string) ([]treeItem, error) {
	o, ok := w.byID[id]
	if !ok || o.Type != "tree" {
		return nil, ledger.FieldError("objects", "tree %s at %q differs between head and reviewed and was not sent", id, orRoot(at))
	}
	items, err := parseTreeObject(o.Data, w.n/2)
	if err != nil {
		return nil, ledger.FieldError("objects", "tree %s at %q does not parse: %v", id, orRoot(at), err)
	}
	return items, nil
}

func orRoot(p string) string {
	if p == "" {
		return "/"
	}
	return p
}

// compare records the differing entries of trees oldID and newID at
// prefix ("" means absent on that side).
func (w *treeWalker) compare(prefix, oldID, newID string, depth int) error {
	if oldID == newID {
		return nil
	}
	if depth > 256 {
		return ledger.FieldError("objects", "trees nest deeper than 256 at %q", prefix)
	}
	items := func(id string) (map[string]treeItem, error) {
		m := map[string]treeItem{}
		if id == "" {
			return m, nil
		}
		list, err := w.tree(id, prefix)
		for _, it := range list {
			m[it.name] = it
		}
		return m, err
	}
	oldI, err := items(oldID)
	if err != nil {
		return err
	}
	newI, err := items(newID)
	if err != nil {
		return err
	}
	names := map[string]bool{}
	for k := range oldI {
		names[k] = true
	}
	for k := range newI {
		names[k] = true
	}
	for name := range names {
		p := name
		if prefix != "" {
			p = prefix + "/" + name
		}
		o, inOld := oldI[name]
		nw, inNew := newI[name]
		var oSub, nSub string
		if inOld {
			if o.mode == filemode.Dir {
				oSub = o.id
			} else {
				w.oldT[p] = treeEntry{mode: canonicalMode(o.mode), id: o.id}
			}
		}
		if inNew {
			if nw.mode == filemode.Dir {
				nSub = nw.id
			} else {
				w.newT[p] = treeEntry{mode: canonicalMode(nw.mode), id: nw.id}
			}
		}
		if oSub != "" || nSub != "" {
			if err := w.compare(p, oSub, nSub, depth+1); err != nil {
				return err
			}
		}
	}
	return nil
}

// CollectTree reads from the repository at repoPath what a
// tree-equivalence upload of headRev against reviewedRev needs: both
// commits, and every tree object along the paths where their trees differ
// (TreeUpload). SHA-1 repositories only. Errors are those of
// TreeEquivalence.
func CollectTree(repoPath, headRev, reviewedRev string) (TreeUpload, error) {
	u := TreeUpload{Format: FormatSHA1}
	repo, err := openRepo(repoPath)
	if err != nil {
		return u, err
	}
	headC, err := commitOf(repo, headRev)
	if err != nil {
		return u, err
	}
	revC, err := commitOf(repo, reviewedRev)
	if err != nil {
		return u, err
	}
	u.Head, u.Reviewed = headC.Hash.String(), revC.Hash.String()
	seen := map[plumbing.Hash]bool{}
	add := func(typ plumbing.ObjectType, h plumbing.Hash) ([]byte, error) {
		b, err := rawOf(repo, typ, h)
		if err != nil {
			return nil, err
		}
		if !seen[h] {
			seen[h] = true
			u.Objects = append(u.Objects, RawObject{Type: typ.String(), ID: h.String(), Data: b})
		}
		return b, nil
	}
	if _, err := add(plumbing.CommitObject, headC.Hash); err != nil {
		return u, err
	}
	if _, err := add(plumbing.CommitObject, revC.Hash); err != nil {
		return u, err
	}
	if err := collectTrees(repo, add, revC.TreeHash, headC.TreeHash, 0); err != nil {
		return u, err
	}
	return u, nil
}

// collectTrees adds the tree objects of oldH and newH (zero: absent) and,
// recursively, of their differing subtrees.
func collectTrees(repo *git.Repository, add func(plumbing.ObjectType, plumbing.Hash) ([]byte, error), oldH, newH plumbing.Hash, depth int) error {
	if oldH == newH {
		return nil
	}
	if depth > 256 {
		return newErr(ErrMalformed, "trees nest deeper than 256")
	}
	subs := func(h plumbing.Hash) (map[string]plumbing.Hash, error) {
		m := map[string]plumbing.Hash{}
		if h.IsZero() {
			return m, nil
		}
		b, err := add(plumbing.TreeObject, h)
		if err != nil {
			return nil, err
		}
		items, err := parseTreeObject(b, 20)
		if err != nil {
			return nil, newErr(ErrMalformed, "tree %s: %v", h, err)
		}
		for _, it := range items {
			if it.mode == filemode.Dir {
				m[it.name] = plumbing.NewHash(it.id)
			}
		}
		return m, nil
	}
	o, err := subs(oldH)
	if err != nil {
		return err
	}
	n, err := subs(newH)
	if err != nil {
		return err
	}
	for name, h := range o {
		if err := collectTrees(repo, add, h, n[name], depth+1); err != nil {
			return err
		}
	}
	for name, h := range n {
		if _, ok := o[name]; !ok {
			if err := collectTrees(repo, add, plumbing.ZeroHash, h, depth+1); err != nil {
				return err
			}
		}
	}
	return nil
}
