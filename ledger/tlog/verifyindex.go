package tlog

import (
	"context"
	"fmt"
	"runtime"
	"sort"
	"sync"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/ledger/internal/cursor"
	jsonv2 "github.com/go-json-experiment/json"
	"github.com/transparency-dev/merkle/compact"
)

// The query index: VerifiedStore answers the queries that readiness
// depends on (ledger.EvidenceFilter by lane, or lane and full commit id;
// ledger.EntryFilter by kind and key, or by kind other than evidence; ledger.HeadFilter by
// full commit id) from an index it builds itself from leaf bytes it
// verified, never from the store's projection columns. A per-row check
// can refuse a row a filter returns but cannot see one an edited column
// (commit_id, key, kind, a deleted heads_index row) makes the filter
// leave out; the index cannot be edited that way: it holds, for every
// leaf below a signed checkpoint's size, the keys read from its bytes,
// and the leaves it folded must give that checkpoint's root. Leaves are
// folded on demand: every such query folds the leaves up to the latest
// signed checkpoint, so the first one of a process reads the whole log
// once (unless BuildIndex did), and later ones only the leaves appended
// since, whichever server of the log appended them.

// leafIndex is the query index of the leaves [0, size): for each key,
// the indexes of the leaves that have it, ascending. Lists are only
// appended to; a reader copies a list's header under rmu and reads it
// unlocked (appends never touch the elements below its length).
type leafIndex struct {
	fold sync.Mutex // held while folding: one fold at a time

	rmu     sync.RWMutex
	size    uint64 // leaves [0, size) are folded and give root, a signed root
	root    ledger.Hash
	rng     *compact.Range // of the folded leaf hashes (fold holds it)
	entries map[string][]uint64
	kinds   map[ledger.Kind][]uint64
	lanes   map[string][]uint64
	commits map[string][]uint64 // evidence by lane "\x00" commit
	heads   map[string][]uint64 // head verifications by commit
}

// entryKey is the key of leafIndex.entries: kind and ledger.EntryKey.
func entryKey(k ledger.Kind, key string) string { return string(k) + "\x00" + key }

// foldChunk is how many leaves a fold reads in one range query.
const foldChunk = 2048

// leafKeys is what folding reads from one leaf.
type leafKeys struct {
	kind                 ledger.Kind
	key, commit, problem string
	hash                 ledger.Hash
	fault                error
}

// reset empties the index (after a failed fold, whose partial lists may
// hold leaves no signed root covered).
func (x *leafIndex) reset() {
	x.rmu.Lock()
	x.size, x.root, x.rng = 0, ledger.Hash{}, nil
	x.entries, x.kinds, x.lanes, x.commits, x.heads = nil, nil, nil, nil, nil
	x.rmu.Unlock()
}

// covered returns the size the index covers.
func (x *leafIndex) covered() uint64 {
	x.rmu.RLock()
	defer x.rmu.RUnlock()
	return x.size
}

// list returns the size the index covers and the list pick selects,
// read under one lock.
func (x *leafIndex) list(pick func() []uint64) (uint64, []uint64) {
	x.rmu.RLock()
	defer x.rmu.RUnlock()
	return x.size, pick()
}

// latestSigned returns the latest stored checkpoint with its note
// verified (once per size and root).
func (v *VerifiedStore) latestSigned(ctx context.Context) (ledger.Checkpoint, error) {
	cp, err := v.l.CheckpointAt(ctx, 0)
	if err != nil {
		return cp, err
	}
	v.mu.Lock()
	known := v.cp
	v.mu.Unlock()
	if known.Size == cp.Size && known.Root == cp.Root && known.Size > 0 {
		return cp, nil
	}
	if err := v.l.checkNote(cp); err != nil {
		v.log.Error("tampering: the latest checkpoint does not verify", "size", cp.Size)
		return cp, ledger.Errorf(ledger.CodeInternal, "the latest checkpoint (size %d) %v: run `ledger audit`", cp.Size, err)
	}
	v.mu.Lock()
	if cp.Size > v.cp.Size {
		v.cp = cp
	}
	v.mu.Unlock()
	return cp, nil
}

// indexAt makes the index cover the latest signed checkpoint, which must
// be at least want, and returns the size it covers. Each call reads the
// latest checkpoint (one query; its note is verified once per size and
// root): leaves appended since, by this server or another of the log, are
// folded, and a latest checkpoint that is not an extension of the one the
// index verified (the log restored to an older or another history under
// the running process) makes it fold the log again from its first leaf.
// A leaf that fails its check, or folded leaves that do not give the
// signed root, are a *TamperError (logged as tampering) and leave the
// index empty.
func (v *VerifiedStore) indexAt(ctx context.Context, want uint64) (uint64, error) {
	x := &v.index
	cp, err := v.latestSigned(ctx)
	switch {
	case ledger.ErrorCode(err) == ledger.CodeNotFound && want == 0:
		return 0, nil // a read-only empty log: nothing to fold
	case err != nil:
		return 0, err
	case cp.Size < want:
		return 0, v.tampered(want-1, "is beyond the latest signed checkpoint")
	}
	if x.current(cp) {
		return cp.Size, nil
	}
	x.fold.Lock()
	defer x.fold.Unlock()
	if x.current(cp) {
		return cp.Size, nil
	}
	if size, root := x.state(); cp.Size < size || (cp.Size == size && cp.Root != root) {
		if cp.Size < size {
			// This reader's view of the latest checkpoint can be older
			// than what a concurrent query folded: the index is ahead,
			// not rolled back, while the log still holds the checkpoint
			// it verified.
			if held, err := v.l.CheckpointAt(ctx, size); err == nil && held.Root == root {
				return size, nil
			}
		}
		v.log.Error("the log's latest signed checkpoint does not extend the one the query index verified; folding the log again", "size", cp.Size, "indexed", size)
		x.reset()
	}
	// The fold outlives a caller that gives up: the next query would
	// otherwise start it again from the same leaf.
	if err := v.foldTo(context.WithoutCancel(ctx), cp); err != nil {
		x.reset()
		return 0, err
	}
	return cp.Size, nil
}

// current reports whether the index covers exactly cp.
func (x *leafIndex) current(cp ledger.Checkpoint) bool {
	x.rmu.RLock()
	defer x.rmu.RUnlock()
	return x.size == cp.Size && (cp.Size == 0 || x.root == cp.Root)
}

// state returns the size and root the index covers.
func (x *leafIndex) state() (uint64, ledger.Hash) {
	x.rmu.RLock()
	defer x.rmu.RUnlock()
	return x.size, x.root
}

// BuildIndex folds every leaf up to the latest signed checkpoint into the
// query index now, so that the first query that needs it (a server's
// first readiness answer after a start) does not wait for the whole log
// to be read. Errors are indexAt's. Safe for concurrent use; a server
// calls it on its own goroutine at start.
func (v *VerifiedStore) BuildIndex(ctx context.Context) error {
	_, err := v.indexAt(ctx, 0)
	return err
}

// foldTo folds the leaves [x.size, cp.Size) and checks that the leaves
// [0, cp.Size) give cp's root. fold is held.
func (v *VerifiedStore) foldTo(ctx context.Context, cp ledger.Checkpoint) error {
	x := &v.index
	from := x.covered()
	if cp.Size <= from {
		return nil
	}
	if x.rng != nil && x.rng.End() != from {
		// The tree range must be the folded leaves' exactly; anything
		// else is folded again from the first leaf.
		x.reset()
		from = 0
	}
	if x.rng == nil {
		x.rng = rangeFactory.NewEmptyRange(0)
		x.rmu.Lock()
		x.entries, x.kinds, x.lanes = map[string][]uint64{}, map[ledger.Kind][]uint64{}, map[string][]uint64{}
		x.commits, x.heads = map[string][]uint64{}, map[string][]uint64{}
		x.rmu.Unlock()
	}
	// One goroutine reads the next chunk while this one checks the last.
	type chunk struct {
		lo, hi uint64
		es     []ledger.Entry
		err    error
	}
	chunks, stop := make(chan chunk, 1), make(chan struct{})
	defer close(stop)
	go func() {
		defer close(chunks)
		for lo := from; lo < cp.Size; lo += foldChunk {
			select {
			case <-stop:
				return
			default:
			}
			hi := min(cp.Size, lo+foldChunk)
			es, err := readRange(ctx, v.Store, lo, hi)
			select {
			case chunks <- chunk{lo, hi, es, err}:
			case <-stop:
				return
			}
			if err != nil {
				return
			}
		}
	}()
	keys := make([]leafKeys, foldChunk)
	folded := from
	for c := range chunks {
		lo, hi, es := c.lo, c.hi, c.es
		if c.err != nil {
			return c.err
		}
		folded = hi
		for i := lo; i < hi; i++ {
			if i-lo >= uint64(len(es)) || es[i-lo].Index != i {
				return v.tampered(i, "is missing")
			}
		}
		ks := keys[:hi-lo]
		readKeys(es, ks)
		x.rmu.Lock()
		for j := range ks {
			k, i := &ks[j], lo+uint64(j)
			if k.problem != "" || k.fault != nil {
				x.rmu.Unlock()
				if k.fault != nil {
					return internal(fmt.Sprintf("query index: leaf %d", i), k.fault)
				}
				return v.tampered(i, k.problem)
			}
			// A copy: the range keeps the slices it is given, and keys is
			// reused by the next chunk.
			h := k.hash
			if err := x.rng.Append(h[:], nil); err != nil {
				x.rmu.Unlock()
				return err
			}
			switch k.kind {
			case ledger.KindEvidence:
				x.lanes[k.key] = append(x.lanes[k.key], i)
				ck := k.key + "\x00" + k.commit
				x.commits[ck] = append(x.commits[ck], i)
			case ledger.KindHead:
				x.heads[k.commit] = append(x.heads[k.commit], i)
				fallthrough
			default:
				ek := entryKey(k.kind, k.key)
				x.entries[ek] = append(x.entries[ek], i)
				x.kinds[k.kind] = append(x.kinds[k.kind], i)
			}
		}
		x.rmu.Unlock()
	}
	if folded != cp.Size {
		return ledger.Errorf(ledger.CodeInternal, "query index: the leaves were read up to %d of %d", folded, cp.Size)
	}
	if rangeRoot(x.rng) != cp.Root {
		if from > 0 {
			// An incremental fold that misses the root is done again
			// from the first leaf before it is called tampering.
			v.log.Warn("query index: the leaves folded since the last checkpoint do not give the signed root; folding the log again", "from", from, "size", cp.Size)
			x.reset()
			return v.foldTo(ctx, cp)
		}
		return v.tampered(from, fmt.Sprintf("is the first of the leaves %d..%d, which do not give the root signed at size %d", from, cp.Size-1, cp.Size))
	}
	x.rmu.Lock()
	x.size, x.root = cp.Size, cp.Root
	x.rmu.Unlock()
	return nil
}

// readKeys checks each of es (scanProblem: bytes, leaf hash, envelope,
// content id) and reads its kind and query keys into ks, spread over the
// processors.
func readKeys(es []ledger.Entry, ks []leafKeys) {
	par := min(runtime.GOMAXPROCS(0), 1+len(es)/256)
	var wg sync.WaitGroup
	for p := range par {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := p; j < len(es); j += par {
				ks[j] = keysOf(&es[j])
			}
		}()
	}
	wg.Wait()
}

// keysOf checks that e's bytes hash to its leaf hash, carry its index
// and a body that hashes to the content id they carry, and returns the kind and keys they hold: the key is ledger.EntryKey's (the
// lane of evidence, the repository of a head, the name of a policy, else
// the version) and commit the subject commit of evidence and the commit
// of a head, decoded as the audit decodes them (DecodeAuditBody). The
// kind comes from the bytes, not the row's column. Bytes that hash to
// the leaf hash are what the signed tree holds once the fold's root
// matches, so nothing else of the row is trusted or needed here; the
// rows a query returns are checked whole (check).
func keysOf(e *ledger.Entry) leafKeys {
	k := leafKeys{hash: e.LeafHash}
	if ledger.LeafHash(e.Raw) != e.LeafHash {
		k.problem = "does not match its leaf hash"
		return k
	}
	h, body, ok := ledger.SplitLeaf(e.Raw)
	if !ok {
		l, err := ledger.DecodeLeafJSON(e.Raw)
		if err != nil {
			k.problem = "is not a leaf's canonical bytes"
			return k
		}
		h.Index, h.Kind, h.ID, body = l.Index, l.Kind, l.ID, l.Body
	}
	switch {
	case h.Index != e.Index:
		k.problem = fmt.Sprintf("carries index %d in its bytes (rows were reordered or copied)", h.Index)
		return k
	case ledger.EntryID(h.Kind, body) != h.ID:
		// An edit whose leaf hash was recomputed: named here rather than
		// only as a root that does not match.
		k.problem = "fails its check: the body does not hash to the entry id (edited)"
		return k
	}
	k.kind = h.Kind
	var err error
	switch h.Kind {
	case ledger.KindEvidence:
		var b struct {
			Lane    string `json:"lane"`
			Subject struct {
				Commit string `json:"commit"`
			} `json:"subject"`
		}
		err = jsonv2.Unmarshal(body, &b)
		k.key, k.commit = b.Lane, b.Subject.Commit
	case ledger.KindHead:
		var b struct {
			Repository string `json:"repository"`
			Commit     string `json:"commit"`
		}
		err = jsonv2.Unmarshal(body, &b)
		k.key, k.commit = b.Repository, b.Commit
	case ledger.KindPolicy:
		var b auditPolicyBody
		err = jsonv2.Unmarshal(body, &b)
		k.key = b.Name
	default:
		var b auditKeyedBody
		err = jsonv2.Unmarshal(body, &b)
		k.key = b.Version
	}
	if err != nil {
		k.fault = fmt.Errorf("%s leaf: its hash verified but its layout does not decode: %w", h.Kind, err)
	}
	return k
}

// page returns the indexes of list below bound, newest first, at most n,
// and whether older ones remain.
func page(list []uint64, bound uint64, n int) ([]uint64, bool) {
	hi := sort.Search(len(list), func(i int) bool { return list[i] >= bound })
	lo := max(0, hi-n)
	out := make([]uint64, 0, hi-lo)
	for i := hi - 1; i >= lo; i-- {
		out = append(out, list[i])
	}
	return out, lo > 0
}

// pageBound is the exclusive upper index of a page: below the cursor,
// below asOf when not 0, and below the index's size.
func pageBound(c string, asOf, size uint64) (uint64, error) {
	b, ok := cursor.Decode(c)
	if !ok {
		return 0, ledger.FieldError("cursor", "malformed cursor")
	}
	if asOf > 0 {
		b = min(b, asOf)
	}
	return min(b, size), nil
}

// pageLimit is a query's page size: 50 by default, at most 1000, as the
// stores answer.
func pageLimit(n int) int {
	switch {
	case n <= 0:
		return 50
	case n > 1000:
		return 1000
	}
	return n
}

// indexedEntries reads the entries at idx (newest first) through the
// verified reads: every one must be present and pass check.
func (v *VerifiedStore) indexedEntries(ctx context.Context, idx []uint64) ([]ledger.Entry, error) {
	if len(idx) == 0 {
		return nil, nil
	}
	var es []ledger.Entry
	if r, ok := v.Store.(ledger.EntriesAtReader); ok {
		got, err := r.EntriesAt(ctx, idx)
		if err != nil {
			return nil, err
		}
		es = got
	} else {
		for _, i := range idx {
			e, err := v.Store.EntryAt(ctx, i)
			if err != nil && ledger.ErrorCode(err) != ledger.CodeNotFound {
				return nil, err
			}
			if err == nil {
				es = append(es, e)
			}
		}
	}
	byIdx := make(map[uint64]int, len(es))
	for j := range es {
		byIdx[es[j].Index] = j
	}
	out := make([]ledger.Entry, len(idx))
	ps := make([]*ledger.Entry, len(idx))
	for j, i := range idx {
		k, ok := byIdx[i]
		if !ok {
			return nil, v.tampered(i, "is missing")
		}
		out[j] = es[k]
		ps[j] = &out[j]
	}
	if err := v.check(ctx, ps); err != nil {
		return nil, err
	}
	return out, nil
}

// indexedPage answers one page of the list pick selects: the bound from
// cursor and asOf, the verified entries and the next cursor.
func (v *VerifiedStore) indexedPage(ctx context.Context, c string, asOf uint64, limit int, pick func(x *leafIndex) []uint64) ([]ledger.Entry, string, error) {
	if _, ok := cursor.Decode(c); !ok {
		return nil, "", ledger.FieldError("cursor", "malformed cursor")
	}
	var size uint64
	var list []uint64
	for attempt := 0; ; attempt++ {
		n, err := v.indexAt(ctx, asOf)
		if err != nil {
			return nil, "", err
		}
		// Read under one lock with the size it covers; a concurrent fold
		// that failed (or refolds a restored log) empties the index
		// meanwhile, and an emptied index must never read as no records.
		if size, list = v.index.list(func() []uint64 { return pick(&v.index) }); size >= n {
			break
		}
		if attempt == 2 {
			return nil, "", ledger.Errorf(ledger.CodeUnavailable, "the query index was emptied while it was read (a fold found a problem or the log was restored); try again")
		}
	}
	bound, err := pageBound(c, asOf, size)
	if err != nil {
		return nil, "", err
	}
	lim := pageLimit(limit)
	idx, more := page(list, bound, lim)
	es, err := v.indexedEntries(ctx, idx)
	if err != nil {
		return nil, "", err
	}
	next := ""
	if more && len(es) > 0 {
		next = cursor.Encode(es[len(es)-1].Index)
	}
	return es, next, nil
}

// IndexedEvidence reports whether VerifiedStore answers f from its query
// index (complete against the verified leaves): a lane, optionally a
// full commit id (ledger.ValidObjectID), and no other filter. Gates read
// evidence only so.
func IndexedEvidence(f ledger.EvidenceFilter) bool {
	return f.Lane != "" && (f.Commit == "" || ledger.ValidObjectID(f.Commit)) &&
		f.Backend == "" && f.Status == "" && f.Repository == "" && f.ArtifactDigest == "" && f.Since.IsZero()
}

// IndexedEntries reports whether VerifiedStore answers f from its query
// index: a kind, with a key or (for kinds other than evidence) without.
// Token and token-revocation leaves are read so too: Authenticate folds
// them into the projection every tokens row is checked against, and a
// revocation whose kind column was edited must not drop out of that
// fold (a server's first authentication waits for the fold of the log,
// which serve starts at boot).
func IndexedEntries(f ledger.EntryFilter) bool {
	return f.Kind != "" && (f.Key != "" || f.Kind != ledger.KindEvidence)
}

// IndexedHeads reports whether VerifiedStore answers f from its query
// index: a full commit id (ledger.ValidObjectID) and no other filter.
func IndexedHeads(f ledger.HeadFilter) bool {
	return ledger.ValidObjectID(f.Commit) && f.Repository == "" && f.Verdict == ""
}
