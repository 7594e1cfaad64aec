package tlogproof

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"filippo.io/torchwood"
	"github.com/transparency-dev/merkle/proof"
	"github.com/transparency-dev/merkle/rfc6962"
	"golang.org/x/mod/sumdb/note"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/witness"
)

// Header is the first line of a tlog-proof.
const Header = "c2sp.org/tlog-proof@v1"

// MaxProofHashes bounds the inclusion path: a tree of 2^63 leaves has a
// path of at most 63 hashes.
const MaxProofHashes = 63

// maxProofBytes bounds a proof file (a checkpoint note is at most 1 MB in
// torchwood's parser; a proof with a leaf adds little).
const maxProofBytes = 4 << 20

// Proof is a parsed tlog-proof.
type Proof struct {
	// Extra is the optional extra data; the ledger stores the entry's leaf
	// bytes there. It is not authenticated until Verify hashes it.
	Extra []byte
	// Index is the zero-based index of the entry.
	Index uint64
	// Hashes is the inclusion path, RFC 6962 section 2.1.1 order.
	Hashes []ledger.Hash
	// Checkpoint is the signed checkpoint note, verbatim.
	Checkpoint []byte
}

// New builds the proof of the entry at index against cp (a checkpoint of
// log), with signedNote the checkpoint's note as it should be served (the
// log's note with cosignatures, or cp.Note) and the entry's leaf bytes as
// extra data. It errors when the entry or proof cannot be read or the
// proof's root is not cp's.
func New(ctx context.Context, log ledger.LogReader, index uint64, cp ledger.Checkpoint, signedNote string) (*Proof, error) {
	if index >= cp.Size {
		return nil, ledger.FieldError("index", "entry %d is not in the checkpoint of size %d", index, cp.Size)
	}
	e, err := log.EntryAt(ctx, index)
	if err != nil {
		return nil, fmt.Errorf("tlog-proof: entry %d: %w", index, err)
	}
	ip, err := log.InclusionProof(ctx, index, cp.Size)
	if err != nil {
		return nil, fmt.Errorf("tlog-proof: inclusion proof of %d in %d: %w", index, cp.Size, err)
	}
	if ip.Root != cp.Root || ip.LeafHash != ledger.LeafHash(e.Raw) {
		return nil, fmt.Errorf("tlog-proof: the store's proof of entry %d does not match checkpoint %d", index, cp.Size)
	}
	if len(ip.Hashes) > MaxProofHashes {
		return nil, fmt.Errorf("tlog-proof: inclusion path of %d hashes", len(ip.Hashes))
	}
	return &Proof{Extra: e.Raw, Index: index, Hashes: ip.Hashes, Checkpoint: []byte(signedNote)}, nil
}

// Marshal encodes p as a tlog-proof file.
func (p *Proof) Marshal() []byte {
	var b bytes.Buffer
	b.WriteString(Header + "\n")
	if len(p.Extra) > 0 {
		b.WriteString("extra " + base64.StdEncoding.EncodeToString(p.Extra) + "\n")
	}
	fmt.Fprintf(&b, "index %d\n", p.Index)
	for _, h := range p.Hashes {
		b.WriteString(base64.StdEncoding.EncodeToString(h[:]) + "\n")
	}
	b.WriteString("\n")
	b.Write(p.Checkpoint)
	return b.Bytes()
}

// Parse decodes a tlog-proof file. It errors, naming the line, on a wrong
// header, malformed extra or index lines, a hash that is not 32 bytes of
// base64, more than MaxProofHashes hashes or a missing checkpoint; it
// does not verify anything (see Verify).
func Parse(b []byte) (*Proof, error) {
	if len(b) > maxProofBytes {
		return nil, fmt.Errorf("tlog-proof: larger than %d bytes", maxProofBytes)
	}
	rest := string(b)
	next := func() (string, bool) {
		line, after, ok := strings.Cut(rest, "\n")
		rest = after
		return line, ok
	}
	p := &Proof{}
	line, ok := next()
	if !ok || line != Header {
		return nil, errors.New("tlog-proof line 1: want " + Header)
	}
	n := 2
	line, ok = next()
	if e, found := strings.CutPrefix(line, "extra "); ok && found {
		x, err := base64.StdEncoding.Strict().DecodeString(e)
		if err != nil || len(x) == 0 {
			return nil, fmt.Errorf("tlog-proof line %d: extra is not base64", n)
		}
		p.Extra = x
		n++
		line, ok = next()
	}
	idx, found := strings.CutPrefix(line, "index ")
	i, err := strconv.ParseUint(idx, 10, 64)
	if !ok || !found || err != nil || strconv.FormatUint(i, 10) != idx {
		return nil, fmt.Errorf("tlog-proof line %d: want index <decimal, no leading zeroes>", n)
	}
	p.Index = i
	for {
		n++
		line, ok = next()
		if !ok {
			return nil, fmt.Errorf("tlog-proof line %d: no empty line before the checkpoint", n)
		}
		if line == "" {
			break
		}
		h, err := base64.StdEncoding.Strict().DecodeString(line)
		if err != nil || len(h) != 32 {
			return nil, fmt.Errorf("tlog-proof line %d: inclusion proof hash is not 32 bytes of base64", n)
		}
		if len(p.Hashes) == MaxProofHashes {
			return nil, fmt.Errorf("tlog-proof line %d: more than %d inclusion proof hashes", n, MaxProofHashes)
		}
		p.Hashes = append(p.Hashes, ledger.Hash(h))
	}
	if rest == "" {
		return nil, fmt.Errorf("tlog-proof line %d: no checkpoint", n+1)
	}
	p.Checkpoint = []byte(rest)
	return p, nil
}

// Result is what Verify established.
type Result struct {
	Origin   string      `json:"origin"`
	Size     uint64      `json:"size"`
	Root     ledger.Hash `json:"root"`
	Index    uint64      `json:"index"`
	LeafHash ledger.Hash `json:"leaf_hash"`
	// Leaf is the verified leaf bytes.
	Leaf []byte `json:"-"`
	// Cosigners are the policy's witnesses whose cosignature verified
	// (nil without a policy); QuorumMet whether they meet its quorum
	// (false without a policy).
	Cosigners []string `json:"cosigners,omitempty"`
	QuorumMet bool     `json:"quorum_met"`
}

// Verify checks a tlog-proof offline: the checkpoint carries a valid
// signature of logKey and its origin is logKey's name; leaf (or, when leaf
// is nil, the proof's extra data) hashes as an RFC 6962 leaf to a leaf at
// the proof's index in the checkpoint's tree (checked with
// transparency-dev/merkle); a ledger leaf's own index must be the proof's
// index. With a policy, every cosignature from a known witness must verify
// and the valid ones must meet its quorum (an error wrapping
// witness.ErrQuorum otherwise). Errors say which check failed.
func Verify(b []byte, leaf []byte, logKey note.Verifier, policy *witness.Policy) (Result, error) {
	p, err := Parse(b)
	if err != nil {
		return Result{}, err
	}
	if leaf == nil {
		leaf = p.Extra
	}
	if leaf == nil {
		return Result{}, errors.New("tlog-proof: no leaf given and no extra data in the proof")
	}
	var (
		text      string
		cosigners []string
		met       bool
		qerr      error
	)
	if policy != nil {
		cr, err := policy.Check(p.Checkpoint, logKey)
		if err != nil && !errors.Is(err, witness.ErrQuorum) {
			return Result{}, fmt.Errorf("tlog-proof: %w", err)
		}
		text, cosigners, met, qerr = cr.Text, cr.Cosigners, cr.QuorumMet, err
	} else {
		n, err := note.Open(p.Checkpoint, note.VerifierList(logKey))
		if err != nil {
			return Result{}, fmt.Errorf("tlog-proof: checkpoint: %w", noteError(err))
		}
		text = n.Text
	}
	r, err := verifyInclusion(p, leaf, text, logKey)
	if err != nil {
		return Result{}, err
	}
	r.Cosigners, r.QuorumMet = cosigners, met
	if qerr != nil {
		return r, fmt.Errorf("tlog-proof: %w", qerr)
	}
	return r, nil
}

func verifyInclusion(p *Proof, leaf []byte, text string, logKey note.Verifier) (Result, error) {
	c, err := torchwood.ParseCheckpoint(text)
	if err != nil {
		return Result{}, errors.New("tlog-proof: checkpoint text is not a c2sp.org/tlog-checkpoint")
	}
	if c.Origin != logKey.Name() {
		return Result{}, errors.New("tlog-proof: checkpoint origin is not the log key's name")
	}
	size := uint64(c.N)
	if p.Index >= size {
		return Result{}, fmt.Errorf("tlog-proof: index %d is not in a tree of size %d", p.Index, size)
	}
	lh := ledger.LeafHash(leaf)
	path := make([][]byte, len(p.Hashes))
	for i := range p.Hashes {
		path[i] = p.Hashes[i][:]
	}
	if err := proof.VerifyInclusion(rfc6962.DefaultHasher, p.Index, size, lh[:], path, c.Hash[:]); err != nil {
		return Result{}, fmt.Errorf("tlog-proof: inclusion proof of index %d in size %d does not verify", p.Index, size)
	}
	if l, err := ledger.DecodeLeaf(leaf); err == nil && l.Index != p.Index {
		return Result{}, fmt.Errorf("tlog-proof: the leaf says index %d, the proof %d", l.Index, p.Index)
	}
	return Result{Origin: c.Origin, Size: size, Root: ledger.Hash(c.Hash), Index: p.Index, LeafHash: lh, Leaf: leaf}, nil
}

// noteError rewords note.Open's errors without the note's text.
func noteError(err error) error {
	var inv *note.InvalidSignatureError
	var unv *note.UnverifiedNoteError
	switch {
	case errors.As(err, &inv):
		return fmt.Errorf("invalid signature from key %s", inv.Name)
	case errors.As(err, &unv):
		return errors.New("no valid signature from the log key")
	}
	return errors.New("malformed signed note")
}
