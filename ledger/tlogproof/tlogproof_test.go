package tlogproof_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/ledger/tlogproof"
	"github.com/evidence-ledger/ledger/witness"
	"github.com/evidence-ledger/ledger/witness/witnesstest"
)

func TestMain(m *testing.M) { witnesstest.Main(m) }

// ledgerLog returns a log of n canonical ledger leaves (each naming its
// own index, as the ledger's leaves do).
func ledgerLog(t *testing.T, n int) *witnesstest.MemLog {
	t.Helper()
	l, err := witnesstest.NewMemLog("ledger.test.proof")
	if err != nil {
		t.Fatal(err)
	}
	appendLeaves(t, l, n)
	return l
}

func appendLeaves(t *testing.T, l *witnesstest.MemLog, n int) { appendTagged(t, l, "main", n) }

func appendTagged(t *testing.T, l *witnesstest.MemLog, tag string, n int) {
	t.Helper()
	for range n {
		i := l.Size()
		body, _ := ledger.CanonicalBody(map[string]any{"lane": "qmv-bias-sum/v1", "case": fmt.Sprint(tag, i)})
		raw, err := ledger.EncodeLeaf(ledger.Leaf{V: 1, Index: i, Kind: ledger.KindEvidence, ID: ledger.EntryID(ledger.KindEvidence, body),
			RecordedAt: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), Body: json.RawMessage(body)})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.Append(raw); err != nil {
			t.Fatal(err)
		}
	}
}

func logVerifier(t *testing.T, l *witnesstest.MemLog) note.Verifier {
	t.Helper()
	v, err := note.NewVerifier(l.VerifierKey())
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func proofFile(t *testing.T, l *witnesstest.MemLog, index, size uint64, signed string) []byte {
	t.Helper()
	cp, err := l.CheckpointAt(context.Background(), size)
	if err != nil {
		t.Fatal(err)
	}
	if signed == "" {
		signed = cp.Note
	}
	p, err := tlogproof.New(context.Background(), l, index, cp, signed)
	if err != nil {
		t.Fatal(err)
	}
	return p.Marshal()
}

// independentVerify checks a tlog-proof with golang.org/x/mod/sumdb/tlog
// and note only, parsing the file by hand from the specification.
func independentVerify(b []byte, vkey string) error {
	lines := strings.Split(string(b), "\n")
	if lines[0] != "c2sp.org/tlog-proof@v1" {
		return errors.New("header")
	}
	i := 1
	var leaf []byte
	if x, ok := strings.CutPrefix(lines[i], "extra "); ok {
		var err error
		if leaf, err = base64.StdEncoding.DecodeString(x); err != nil {
			return err
		}
		i++
	}
	idx, ok := strings.CutPrefix(lines[i], "index ")
	if !ok {
		return errors.New("index line")
	}
	index, err := strconv.ParseInt(idx, 10, 64)
	if err != nil {
		return err
	}
	var rp tlog.RecordProof
	for i++; lines[i] != ""; i++ {
		h, err := tlog.ParseHash(lines[i])
		if err != nil {
			return err
		}
		rp = append(rp, h)
	}
	signed := strings.Join(lines[i+1:], "\n")
	v, err := note.NewVerifier(vkey)
	if err != nil {
		return err
	}
	n, err := note.Open([]byte(signed), note.VerifierList(v))
	if err != nil {
		return err
	}
	cl := strings.SplitN(n.Text, "\n", 4)
	size, err := strconv.ParseInt(cl[1], 10, 64)
	if err != nil || cl[0] != v.Name() {
		return errors.New("checkpoint text")
	}
	root, err := tlog.ParseHash(cl[2])
	if err != nil {
		return err
	}
	return tlog.CheckRecord(rp, size, root, index, tlog.RecordHash(leaf))
}

func TestRoundTripAndIndependentVerifier(t *testing.T) {
	l := ledgerLog(t, 0)
	v := logVerifier(t, l)
	for _, size := range []uint64{1, 2, 3, 7, 8, 9, 33} {
		appendLeaves(t, l, int(size-l.Size()))
		for index := uint64(0); index < size; index++ {
			b := proofFile(t, l, index, size, "")
			r, err := tlogproof.Verify(b, nil, v, nil)
			if err != nil {
				t.Fatalf("index %d size %d: %v", index, size, err)
			}
			e, _ := l.EntryAt(context.Background(), index)
			if r.Index != index || r.Size != size || !bytes.Equal(r.Leaf, e.Raw) || r.LeafHash != e.LeafHash {
				t.Fatalf("index %d size %d: result %+v", index, size, r)
			}
			if err := independentVerify(b, l.VerifierKey()); err != nil {
				t.Fatalf("index %d size %d: x/mod/sumdb/tlog rejects our proof: %v", index, size, err)
			}
			p, err := tlogproof.Parse(b)
			if err != nil || !bytes.Equal(p.Marshal(), b) {
				t.Fatalf("index %d size %d: Parse/Marshal not a round trip: %v", index, size, err)
			}
		}
	}
}

// TestVerifyRejects: every corrupted variant must fail.
func TestVerifyRejects(t *testing.T) {
	l := ledgerLog(t, 13)
	v := logVerifier(t, l)
	good := proofFile(t, l, 5, 13, "")
	if _, err := tlogproof.Verify(good, nil, v, nil); err != nil {
		t.Fatal(err)
	}
	// Flip each bit-0 of every byte before the signature lines.
	sigStart := bytes.LastIndex(good, []byte("\n\n")) + 2
	for i := 0; i < sigStart; i++ {
		b := bytes.Clone(good)
		b[i] ^= 1
		if _, err := tlogproof.Verify(b, nil, v, nil); err == nil {
			t.Fatalf("flipped byte %d (%q): verified", i, good[i])
		}
	}
	e6, _ := l.EntryAt(context.Background(), 6)
	otherKeyLog, _ := witnesstest.NewMemLog("ledger.test.proof")
	otherV, _ := note.NewVerifier(otherKeyLog.VerifierKey())
	otherName, _ := witnesstest.NewMemLog("ledger.test.other")
	for name, c := range map[string]struct {
		b    []byte
		leaf []byte
		v    note.Verifier
	}{
		"truncated":          {good[:len(good)-10], nil, v},
		"no checkpoint":      {good[:sigStart-bytes.Index(good[1:], []byte("\n\n"))], nil, v},
		"duplicated header":  {append([]byte(tlogproof.Header+"\n"), good...), nil, v},
		"other leaf given":   {good, e6.Raw, v},
		"another key":        {good, nil, otherV},
		"other origin key":   {good, nil, logVerifier(t, otherName)},
		"proof of index 6":   {bytes.Replace(good, []byte("index 5\n"), []byte("index 6\n"), 1), nil, v},
		"leading zero index": {bytes.Replace(good, []byte("index 5\n"), []byte("index 05\n"), 1), nil, v},
		"empty":              {nil, nil, v},
	} {
		if _, err := tlogproof.Verify(c.b, c.leaf, c.v, nil); err == nil {
			t.Errorf("%s: verified", name)
		}
	}
	// A leaf whose own index is not the proof's: a ledger leaf for index 6
	// placed at index 5 of another log still hashes into that log, but the
	// ledger's leaf names its index.
	l2, _ := witnesstest.NewMemLogWithKey(l.SignerKey())
	for i := range 13 {
		raw := e6.Raw
		if i != 5 {
			raw = []byte(fmt.Sprint("x", i))
		}
		l2.Append(raw)
	}
	if _, err := tlogproof.Verify(proofFile(t, l2, 5, 13, ""), nil, v, nil); err == nil || !strings.Contains(err.Error(), "leaf says index 6") {
		t.Fatalf("misplaced ledger leaf: %v", err)
	}
}

// TestVerifyWithPolicy: a proof cosigned by a real litewitness meets a
// policy's quorum; a fork's proof, signed by the same log key but never
// cosigned, verifies with the key alone and fails with the policy.
func TestVerifyWithPolicy(t *testing.T) {
	l := ledgerLog(t, 10)
	v := logVerifier(t, l)
	lw := witnesstest.NewLitewitness(t, "witness.test/p", l.Origin(), l.VerifierKey())
	lw2 := witnesstest.NewLitewitness(t, "witness.test/p2", l.Origin(), l.VerifierKey())
	pol, err := witness.ParsePolicy([]byte("log " + l.VerifierKey() + "\n" + lw.PolicyLine() + "quorum witness.test/p\n"))
	if err != nil {
		t.Fatal(err)
	}
	w, err := witness.New(witness.Config{Log: l, LogKey: l.VerifierKey(), Policy: pol})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := w.Witness(context.Background()); err != nil || !r.Cosigned.QuorumMet {
		t.Fatalf("witness: %+v, %v", r, err)
	}
	cp, _ := l.Checkpoint(context.Background())
	signed, cosigners := w.CosignedCheckpoint(cp)
	if len(cosigners) != 1 {
		t.Fatalf("cosigners %v", cosigners)
	}
	b := proofFile(t, l, 3, 10, signed)
	r, err := tlogproof.Verify(b, nil, v, pol)
	if err != nil || !r.QuorumMet || len(r.Cosigners) != 1 {
		t.Fatalf("cosigned proof: %+v, %v", r, err)
	}
	if err := independentVerify(b, l.VerifierKey()); err != nil {
		t.Fatalf("independent verifier: %v", err)
	}
	// A policy that wants another witness too.
	pol2, _ := witness.ParsePolicy([]byte(lw.PolicyLine() + lw2.PolicyLine() + "group both all witness.test/p witness.test/p2\nquorum both\n"))
	if _, err := tlogproof.Verify(b, nil, v, pol2); !errors.Is(err, witness.ErrQuorum) {
		t.Fatalf("quorum of two with one cosignature: %v", err)
	}
	// A fork signed with the same key.
	f, _ := l.Fork(4)
	appendTagged(t, f, "fork", 6)
	if fcp, _ := f.Checkpoint(context.Background()); fcp.Root == cp.Root {
		t.Fatal("the fork has the same root")
	}
	fb := proofFile(t, f, 3, 10, "")
	if _, err := tlogproof.Verify(fb, nil, v, nil); err != nil {
		t.Fatalf("fork proof with the key alone: %v", err)
	}
	if _, err := tlogproof.Verify(fb, nil, v, pol); !errors.Is(err, witness.ErrQuorum) {
		t.Fatalf("fork proof with the policy: %v, want ErrQuorum", err)
	}
	// The witness's cosignature moved onto the fork's checkpoint fails.
	sigs := signed[strings.Index(signed, "\n\n")+2:]
	forged := append(bytes.Clone(fb), []byte(sigs[strings.Index(sigs, "— witness.test/p "):])...)
	if _, err := tlogproof.Verify(forged, nil, v, pol); err == nil {
		t.Fatal("a cosignature of another checkpoint verified")
	}
}

func FuzzParse(f *testing.F) {
	l, _ := witnesstest.NewMemLog("fuzz.log")
	l.AppendN("x", 5)
	cp, _ := l.Checkpoint(context.Background())
	p, _ := tlogproof.New(context.Background(), l, 2, cp, cp.Note)
	f.Add(p.Marshal())
	f.Add([]byte("c2sp.org/tlog-proof@v1\nindex 0\n\nx\n1\nAAAA\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := tlogproof.Parse(b)
		if err != nil {
			return
		}
		if !bytes.Equal(p.Marshal(), b) {
			t.Fatalf("Marshal(Parse(b)) != b")
		}
	})
}
