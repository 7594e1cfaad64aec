package storetest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/ledger/tlog"
	"github.com/transparency-dev/merkle/proof"
	"github.com/transparency-dev/merkle/rfc6962"
)

// testAppend: an appended record gets the next index, its canonical body
// and content id, a leaf hash that is the hash of its canonical leaf, and
// an inclusion proof against the signed checkpoint the answer carries.
func testAppend(t *testing.T, h Harness) {
	s := h.Open(t)
	for i := 0; i < 3; i++ {
		rec := evRec(t, i)
		want, err := ledger.PrepareOne(rec)
		if err != nil {
			t.Fatal(err)
		}
		res := appendOK(t, s, rec)
		e := res.Entries[0]
		if e.Index != uint64(i) || e.Existing || e.Kind != ledger.KindEvidence || e.ID != want.ID || string(e.Body) != string(want.Body) {
			t.Fatalf("append %d: index %d existing %v kind %s id %s, want index %d id %s", i, e.Index, e.Existing, e.Kind, e.ID, i, want.ID)
		}
		if e.LeafHash != leafHashOf(t, e.Entry) {
			t.Fatalf("append %d: leaf hash is not the hash of the canonical leaf", i)
		}
		if res.Checkpoint.Size != uint64(i+1) {
			t.Fatalf("append %d: checkpoint size %d", i, res.Checkpoint.Size)
		}
		verifyCheckpoint(t, s.VerifierKey(), res.Checkpoint)
		if e.Proof.Index != e.Index || e.Proof.TreeSize != res.Checkpoint.Size || e.Proof.LeafHash != e.LeafHash || e.Proof.Root != res.Checkpoint.Root {
			t.Fatalf("append %d: proof %+v does not match its entry and checkpoint", i, e.Proof)
		}
		verifyInclusion(t, e.Proof, res.Checkpoint.Root)
	}
	// Several records in one call get consecutive indexes and one checkpoint.
	res := appendOK(t, s, evRec(t, 10), headRec(t, 1), releaseRec(t, ledger.KindRelease, "1.0", 1))
	for j, e := range res.Entries {
		if e.Index != uint64(3+j) || e.Existing {
			t.Fatalf("batch entry %d: index %d existing %v", j, e.Index, e.Existing)
		}
		verifyInclusion(t, e.Proof, res.Checkpoint.Root)
	}
	if res.Checkpoint.Size != 6 {
		t.Fatalf("checkpoint size %d, want 6", res.Checkpoint.Size)
	}
}

// testAppendAtomic: one invalid record refuses the whole call, naming the
// record and its field, and nothing is appended.
func testAppendAtomic(t *testing.T, h Harness) {
	ctx := context.Background()
	s := h.Open(t)
	bad := Evidence(2)
	bad.CasesExact = 300
	_, err := s.Append(ctx, []ledger.Record{evRec(t, 1), Record(t, ledger.KindEvidence, bad)}, "")
	wantError(t, "batch with a bad record", err, ledger.CodeInvalid, "[1].cases_exact")
	_, err = s.Append(ctx, []ledger.Record{Record(t, ledger.KindEvidence, bad)}, "")
	wantError(t, "one bad record", err, ledger.CodeInvalid, "cases_exact")
	if cp, err := s.Checkpoint(ctx); err != nil || cp.Size != 0 {
		t.Fatalf("something was appended: size %d, %v", cp.Size, err)
	}
	if res := appendOK(t, s, evRec(t, 1)); res.Entries[0].Index != 0 {
		t.Fatalf("first good append got index %d", res.Entries[0].Index)
	}
}

// testAppendLimits: the call's own limits are field errors.
func testAppendLimits(t *testing.T, h Harness) {
	ctx := context.Background()
	s := h.Open(t)
	_, err := s.Append(ctx, nil, "")
	wantError(t, "no records", err, ledger.CodeInvalid, "")
	recs := make([]ledger.Record, ledger.MaxRecordsPerAppend+1)
	for i := range recs {
		recs[i] = ledger.Record{Kind: ledger.KindRelease, Body: []byte(fmt.Sprintf(`{"version":"v","n":%d}`, i))}
	}
	_, err = s.Append(ctx, recs, "")
	wantError(t, "too many records", err, ledger.CodeInvalid, "")
	_, err = s.Append(ctx, []ledger.Record{evRec(t, 1)}, strings.Repeat("k", tlog.MaxIdempotencyKey+1))
	wantError(t, "long idempotency key", err, ledger.CodeInvalid, "Idempotency-Key")
	_, err = s.Append(ctx, []ledger.Record{{Kind: "nonsense", Body: []byte(`{}`)}}, "")
	wantError(t, "unknown kind", err, ledger.CodeInvalid, "kind")
	if cp, err := s.Checkpoint(ctx); err != nil || cp.Size != 0 {
		t.Fatalf("something was appended: size %d, %v", cp.Size, err)
	}
}

// testDedupe: a record identical to one logged (or earlier in the same
// call) is answered with the original entry and appended once.
func testDedupe(t *testing.T, h Harness) {
	ctx := context.Background()
	s := h.Open(t)
	appendOK(t, s, evRec(t, 1))
	res := appendOK(t, s, evRec(t, 1), evRec(t, 2), evRec(t, 2))
	var got []bool
	for _, e := range res.Entries {
		got = append(got, e.Existing)
		verifyInclusion(t, e.Proof, res.Checkpoint.Root)
	}
	if fmt.Sprint(got) != "[true false true]" || res.Entries[0].Index != 0 || res.Entries[1].Index != 1 || res.Entries[2].Index != 1 || res.Checkpoint.Size != 2 {
		t.Fatalf("existing %v, indexes %d %d %d, size %d", got, res.Entries[0].Index, res.Entries[1].Index, res.Entries[2].Index, res.Checkpoint.Size)
	}
	// A resubmission alone appends nothing and signs nothing new.
	res = appendOK(t, s, evRec(t, 2))
	if !res.Entries[0].Existing || res.Entries[0].Index != 1 || res.Checkpoint.Size != 2 {
		t.Fatalf("resubmission: %+v", res.Entries[0])
	}
	if e, err := s.Entry(ctx, res.Entries[0].ID); err != nil || e.Index != 1 {
		t.Fatalf("entry by id: %+v %v", e, err)
	}
}

// testIdempotency: a key seen before answers its original result without
// appending; the same key with other records is a conflict; concurrent
// uses of one key append once.
func testIdempotency(t *testing.T, h Harness) {
	ctx := context.Background()
	s := h.Open(t)
	first, err := s.Append(ctx, []ledger.Record{evRec(t, 1), evRec(t, 2)}, "k1")
	if err != nil {
		t.Fatal(err)
	}
	again, err := s.Append(ctx, []ledger.Record{evRec(t, 1), evRec(t, 2)}, "k1")
	if err != nil {
		t.Fatal(err)
	}
	for j := range again.Entries {
		if !again.Entries[j].Existing || again.Entries[j].Index != first.Entries[j].Index || again.Entries[j].ID != first.Entries[j].ID {
			t.Fatalf("replay entry %d: %+v, first %+v", j, again.Entries[j].Entry, first.Entries[j].Entry)
		}
		verifyInclusion(t, again.Entries[j].Proof, again.Checkpoint.Root)
	}
	_, err = s.Append(ctx, []ledger.Record{evRec(t, 3)}, "k1")
	wantError(t, "key reused with other records", err, ledger.CodeConflict, "-")
	if cp, _ := s.Checkpoint(ctx); cp.Size != 2 {
		t.Fatalf("size %d after replays, want 2", cp.Size)
	}
	var wg sync.WaitGroup
	idx := make([]uint64, 8)
	errs := make([]error, 8)
	for g := range idx {
		wg.Go(func() {
			res, err := s.Append(ctx, []ledger.Record{evRec(t, 4)}, "k2")
			if errs[g] = err; err == nil {
				idx[g] = res.Entries[0].Index
			}
		})
	}
	wg.Wait()
	for g := range idx {
		if errs[g] != nil || idx[g] != 2 {
			t.Fatalf("concurrent use %d of one key: index %d, %v", g, idx[g], errs[g])
		}
	}
	if cp, _ := s.Checkpoint(ctx); cp.Size != 3 {
		t.Fatalf("size %d after concurrent uses of one key, want 3", cp.Size)
	}
}

// testConcurrent: concurrent appends get distinct, dense indexes and the
// log audits.
func testConcurrent(t *testing.T, h Harness) {
	ctx := context.Background()
	s := h.Open(t)
	const clients, each = 16, 10
	var mu sync.Mutex
	seen := map[uint64]bool{}
	var wg sync.WaitGroup
	for g := 0; g < clients; g++ {
		wg.Go(func() {
			for i := 0; i < each; i++ {
				res, err := s.Append(ctx, []ledger.Record{evRec(t, g*1000+i)}, "")
				if err != nil {
					t.Error(err)
					return
				}
				verifyInclusion(t, res.Entries[0].Proof, res.Checkpoint.Root)
				mu.Lock()
				seen[res.Entries[0].Index] = true
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	for i := uint64(0); i < clients*each; i++ {
		if !seen[i] {
			t.Fatalf("no append got index %d", i)
		}
	}
	rep, err := s.Audit(ctx)
	if err != nil || !rep.OK || rep.Leaves != clients*each {
		t.Fatalf("audit %+v %v", rep, err)
	}
}

// testProofs: inclusion proofs of leaves at every earlier size and
// consistency proofs between sizes verify against the signed roots.
func testProofs(t *testing.T, h Harness) {
	ctx := context.Background()
	s := h.Open(t)
	const n = 37
	for i := 0; i < n; i++ {
		appendOK(t, s, evRec(t, i))
	}
	roots := map[uint64]ledger.Hash{}
	for size := uint64(1); size <= n; size++ {
		cp, err := s.CheckpointAt(ctx, size)
		if err != nil {
			t.Fatal(err)
		}
		verifyCheckpoint(t, s.VerifierKey(), cp)
		roots[size] = cp.Root
	}
	for size := uint64(1); size <= n; size++ {
		for idx := uint64(0); idx < size; idx += 3 {
			p, err := s.InclusionProof(ctx, idx, size)
			if err != nil {
				t.Fatal(err)
			}
			if p.Index != idx || p.TreeSize != size || p.Root != roots[size] {
				t.Fatalf("inclusion %d@%d: %+v", idx, size, p)
			}
			e, err := s.EntryAt(ctx, idx)
			if err != nil || e.LeafHash != p.LeafHash {
				t.Fatalf("inclusion %d@%d: leaf hash differs from the entry's (%v)", idx, size, err)
			}
			verifyInclusion(t, p, roots[size])
		}
		for to := size; to <= n; to += 5 {
			c, err := s.ConsistencyProof(ctx, size, to)
			if err != nil {
				t.Fatal(err)
			}
			if c.FromRoot != roots[size] || c.ToRoot != roots[to] {
				t.Fatalf("consistency %d->%d: roots differ from the checkpoints'", size, to)
			}
			fr, tr := roots[size], roots[to]
			if err := proof.VerifyConsistency(rfc6962.DefaultHasher, size, to, hashes(c.Hashes), fr[:], tr[:]); err != nil {
				t.Fatalf("consistency %d->%d: %v", size, to, err)
			}
		}
	}
	// Size 0 means the latest checkpoint.
	p, err := s.InclusionProof(ctx, 5, 0)
	if err != nil || p.TreeSize != n {
		t.Fatalf("inclusion at the latest size: %+v %v", p, err)
	}
	verifyInclusion(t, p, roots[n])
	c, err := s.ConsistencyProof(ctx, 10, 0)
	if err != nil || c.To != n {
		t.Fatalf("consistency to the latest size: %+v %v", c, err)
	}
}

// testProofErrors: proofs beyond the signed log are field errors.
func testProofErrors(t *testing.T, h Harness) {
	ctx := context.Background()
	s := h.Open(t)
	for i := 0; i < 5; i++ {
		appendOK(t, s, evRec(t, i))
	}
	_, err := s.InclusionProof(ctx, 0, 6)
	wantError(t, "inclusion beyond the log", err, ledger.CodeInvalid, "size")
	_, err = s.InclusionProof(ctx, 5, 5)
	wantError(t, "inclusion of a leaf beyond the size", err, ledger.CodeInvalid, "size")
	_, err = s.ConsistencyProof(ctx, 4, 3)
	wantError(t, "consistency backwards", err, ledger.CodeInvalid, "from")
	_, err = s.ConsistencyProof(ctx, 1, 6)
	wantError(t, "consistency beyond the log", err, ledger.CodeInvalid, "to")
}

// testCheckpoints: the empty log's checkpoint, one signed checkpoint per
// appending call, each extending the previous one, and no checkpoint at a
// size no call ended at.
func testCheckpoints(t *testing.T, h Harness) {
	ctx := context.Background()
	s := h.Open(t)
	cp0, err := s.Checkpoint(ctx)
	if err != nil || cp0.Size != 0 || cp0.Root != ledger.Hash(rfc6962.DefaultHasher.EmptyRoot()) {
		t.Fatalf("empty log checkpoint %+v %v", cp0, err)
	}
	verifyCheckpoint(t, s.VerifierKey(), cp0)
	var sizes []uint64
	n := 0
	for _, k := range []int{1, 3, 1, 4} {
		recs := make([]ledger.Record, k)
		for j := range recs {
			recs[j] = evRec(t, n)
			n++
		}
		res := appendOK(t, s, recs...)
		verifyCheckpoint(t, s.VerifierKey(), res.Checkpoint)
		sizes = append(sizes, res.Checkpoint.Size)
	}
	if fmt.Sprint(sizes) != "[1 4 5 9]" {
		t.Fatalf("checkpoint sizes %v, want [1 4 5 9]", sizes)
	}
	prev := cp0
	for _, size := range sizes {
		cp, err := s.CheckpointAt(ctx, size)
		if err != nil || cp.Size != size {
			t.Fatalf("checkpoint at %d: %+v %v", size, cp, err)
		}
		verifyCheckpoint(t, s.VerifierKey(), cp)
		if prev.Size > 0 {
			c, err := s.ConsistencyProof(ctx, prev.Size, size)
			if err != nil {
				t.Fatal(err)
			}
			if err := proof.VerifyConsistency(rfc6962.DefaultHasher, prev.Size, size, hashes(c.Hashes), prev.Root[:], cp.Root[:]); err != nil {
				t.Fatalf("checkpoint %d does not extend %d: %v", size, prev.Size, err)
			}
		}
		prev = cp
	}
	if latest, err := s.Checkpoint(ctx); err != nil || latest.Size != 9 || latest.Root != prev.Root || latest.Note != prev.Note {
		t.Fatalf("latest checkpoint %+v %v", latest, err)
	}
	for _, size := range []uint64{2, 3, 10} {
		_, err := s.CheckpointAt(ctx, size)
		wantError(t, fmt.Sprintf("checkpoint at unsigned size %d", size), err, ledger.CodeNotFound, "-")
	}
}

// testEntries: entries by content id and by index, and not-found errors.
func testEntries(t *testing.T, h Harness) {
	ctx := context.Background()
	s := h.Open(t)
	res := appendOK(t, s, evRec(t, 1), headRec(t, 1), releaseRec(t, ledger.KindWaiver, "1.0", 1))
	for _, a := range res.Entries {
		byID, err := s.Entry(ctx, a.ID)
		if err != nil {
			t.Fatal(err)
		}
		at, err := s.EntryAt(ctx, a.Index)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range []ledger.Entry{byID, at} {
			if e.Index != a.Index || e.ID != a.ID || e.Kind != a.Kind || string(e.Body) != string(a.Body) || e.LeafHash != a.LeafHash || !e.RecordedAt.Equal(a.RecordedAt) {
				t.Fatalf("read back %+v, appended %+v", e, a.Entry)
			}
		}
	}
	_, err := s.Entry(ctx, strings.Repeat("0", 32))
	wantError(t, "unknown id", err, ledger.CodeNotFound, "-")
	_, err = s.EntryAt(ctx, 3)
	wantError(t, "index beyond the log", err, ledger.CodeNotFound, "-")
}

// testKeys: the verifier key verifies notes signed with SignNote.
func testKeys(t *testing.T, h Harness) {
	s := h.Open(t)
	signed, err := s.SignNote("release 1.0 is ready")
	if err != nil {
		t.Fatal(err)
	}
	verifyNote(t, s.VerifierKey(), signed, "release 1.0 is ready\n")
}

// testAudit: a clean log audits, with its size, root and checkpoints.
func testAudit(t *testing.T, h Harness) {
	ctx := context.Background()
	s := h.Open(t)
	if rep, err := s.Audit(ctx); err != nil || !rep.OK || rep.Leaves != 0 || rep.FirstBadIndex != -1 {
		t.Fatalf("empty log audit %+v %v", rep, err)
	}
	for i := 0; i < 12; i++ {
		appendOK(t, s, evRec(t, i), headRec(t, i), releaseRec(t, ledger.KindApproval, "1.0", i))
	}
	cp, err := s.Checkpoint(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := s.Audit(ctx)
	if err != nil || !rep.OK || rep.Leaves != 36 || rep.Root != cp.Root || rep.Checkpoints != 12 || rep.FirstBadIndex != -1 || rep.Problem != "" {
		t.Fatalf("audit %+v %v; checkpoint root %s", rep, err, cp.Root)
	}
}

// testTamper: every Edit behind the store's back fails the audit, which
// names the first leaf concerned.
func testTamper(t *testing.T, h Harness) {
	if h.Tamper == nil {
		t.Skip("the harness cannot edit a stored log")
	}
	cases := []struct {
		edit Edit
		at   uint64
		want int64
	}{
		{EditLeafBody, 7, 7},
		{EditLeafBodyRehash, 9, 9},
		{DeleteLeaf, 5, 5},
		{TruncateFrom, 17, 17},
		{SwapLeaves, 3, 3},
		{InsertLeaf, 20, 20},
		{EditProjection, 4, 4},
		{EditCheckpoint, 12, 12},
		{EditProjectionCommit, 6, 6},
	}
	for _, tc := range cases {
		t.Run(tc.edit.String(), func(t *testing.T) {
			s := h.Open(t)
			for i := 0; i < 20; i++ {
				appendOK(t, s, evRec(t, i))
			}
			if rep, err := s.Audit(context.Background()); err != nil || !rep.OK {
				t.Fatalf("clean log: %+v %v", rep, err)
			}
			edited := h.Tamper(t, s, tc.edit, tc.at)
			rep, err := edited.Audit(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if rep.OK || rep.FirstBadIndex != tc.want || rep.Problem == "" {
				t.Fatalf("audit after %s at %d: ok %v, first bad %d, want %d (%s)", tc.edit, tc.at, rep.OK, rep.FirstBadIndex, tc.want, rep.Problem)
			}
		})
	}
}

// fullScanner is a store with its log's background full verification
// (tlog.Log.FullScan, promoted from the embedded *tlog.Log).
type fullScanner interface {
	FullScan(ctx context.Context, r tlog.EntryAtReader, size uint64, o tlog.ScanOptions) error
	Tampered() (tlog.TamperState, bool)
}

// testScanProjection: a projection column edited behind the store's
// back (the leaf's bytes, hash and tree untouched) puts the log in the
// tampered state through the full verification alone, naming the leaf.
func testScanProjection(t *testing.T, h Harness) {
	if h.Tamper == nil {
		t.Skip("the harness cannot edit a stored log")
	}
	for _, tc := range []struct {
		edit Edit
		at   uint64
	}{{EditProjection, 4}, {EditProjectionCommit, 6}} {
		t.Run(tc.edit.String(), func(t *testing.T) {
			ctx := context.Background()
			s := h.Open(t)
			for i := 0; i < 20; i++ {
				appendOK(t, s, evRec(t, i))
			}
			if sc, ok := s.(fullScanner); !ok {
				t.Fatalf("%T has no FullScan", s)
			} else if err := sc.FullScan(ctx, s, 20, tlog.ScanOptions{Chunk: 7}); err != nil {
				t.Fatalf("clean log: %v", err)
			}
			edited := h.Tamper(t, s, tc.edit, tc.at)
			sc := edited.(fullScanner)
			err := sc.FullScan(ctx, edited, 20, tlog.ScanOptions{Chunk: 7})
			var te *tlog.TamperError
			if !errors.As(err, &te) || te.Index != tc.at {
				t.Fatalf("full scan after %s at %d: %v", tc.edit, tc.at, err)
			}
			ts, bad := sc.Tampered()
			if !bad || ts.Index != tc.at || !strings.Contains(ts.Problem, "projection columns do not match the leaf") {
				t.Fatalf("tamper state after %s at %d: %+v %v", tc.edit, tc.at, ts, bad)
			}
		})
	}
}
