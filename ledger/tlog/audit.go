package tlog

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
	jsonv2 "github.com/go-json-experiment/json"
	"github.com/transparency-dev/merkle/compact"
	"golang.org/x/mod/sumdb/note"
)

// The audit is an fsck of the log over an AuditSource: every signed
// checkpoint is verified (signature, origin, size, root), every stored
// leaf is re-hashed and its canonical envelope, index, kind, id and key
// checked, the tree is recomputed from the leaves and compared node by
// node with the stored one and root by root with the checkpoints, and the
// driver checks its projections (CheckLeaf per leaf, Finish at the end).
// The first inconsistency is reported with the first bad leaf index.

// AuditLeaf is one stored leaf as an audit reads it: the columns a driver
// keeps beside the canonical bytes (RecordedAt in Unix nanoseconds).
type AuditLeaf struct {
	Index      uint64
	ID         string
	Kind       string
	Key        string
	RecordedAt int64
	Raw        []byte
	LeafHash   []byte
}

// AuditRow is an AuditLeaf with the driver's projection of it (P, read in
// the same row) and what the audit found. Hash is the recomputed leaf hash.
type AuditRow[P any] struct {
	AuditLeaf
	Proj    P
	Hash    ledger.Hash
	problem string
	failure string    // the ledger.AuditReport.Failure class of problem
	body    AuditBody // what checkLeaf decoded (in the row: rows are reused)
}

// AuditBody holds the body fields a projection may be derived from. Only
// the fields of the leaf's own kind are decoded (DecodeAuditBody), so a
// field name one kind uses with another type elsewhere (an approval's
// "decision" object, a head's "decision" string) never makes a genuine
// leaf unreadable.
type AuditBody struct {
	Name    string // policies' key (ledger.EntryKey)
	Lane    string
	Backend string
	Status  string
	Control string
	Subject struct {
		Repository string            `json:"repository"`
		Commit     string            `json:"commit"`
		Tree       string            `json:"tree"`
		Dirty      bool              `json:"dirty"`
		Artifacts  map[string]string `json:"artifacts"`
	}
	Repository string
	Ref        string
	Commit     string
	Verdict    string
	Decision   string
	Version    string
}

// auditEvidenceBody, auditHeadBody, auditPolicyBody and auditKeyedBody are
// the fields DecodeAuditBody reads for each kind.
type auditEvidenceBody struct {
	Lane    string `json:"lane"`
	Backend string `json:"backend"`
	Status  string `json:"status"`
	Control string `json:"control"`
	Subject *struct {
		Repository string            `json:"repository"`
		Commit     string            `json:"commit"`
		Tree       string            `json:"tree"`
		Dirty      bool              `json:"dirty"`
		Artifacts  map[string]string `json:"artifacts"`
	} `json:"subject"`
}

type auditHeadBody struct {
	Repository string `json:"repository"`
	Ref        string `json:"ref"`
	Commit     string `json:"commit"`
	Verdict    string `json:"verdict"`
	Decision   string `json:"decision"`
}

type auditPolicyBody struct {
	Name string `json:"name"`
}

type auditKeyedBody struct {
	Version string `json:"version"`
}

// DecodeAuditBody decodes the fields of a canonical leaf body of the given
// kind into b (evidence: lane, backend, status, control, subject; head:
// repository, ref, commit, verdict, decision; policy: name; every other
// kind: version). The error says which field of the kind failed to decode.
func DecodeAuditBody(kind ledger.Kind, body []byte, b *AuditBody) error {
	// encoding/json/v2 (its go-json-experiment mirror): about twice as
	// fast as encoding/json here, where every leaf is decoded once.
	switch kind {
	case ledger.KindEvidence:
		var e auditEvidenceBody
		if err := jsonv2.Unmarshal(body, &e); err != nil {
			return err
		}
		b.Lane, b.Backend, b.Status, b.Control = e.Lane, e.Backend, e.Status, e.Control
		if e.Subject != nil {
			b.Subject = *e.Subject
		}
	case ledger.KindHead:
		var h auditHeadBody
		if err := jsonv2.Unmarshal(body, &h); err != nil {
			return err
		}
		b.Repository, b.Ref, b.Commit, b.Verdict, b.Decision = h.Repository, h.Ref, h.Commit, h.Verdict, h.Decision
	case ledger.KindPolicy:
		var p auditPolicyBody
		if err := jsonv2.Unmarshal(body, &p); err != nil {
			return err
		}
		b.Name = p.Name
	default:
		var k auditKeyedBody
		if err := jsonv2.Unmarshal(body, &k); err != nil {
			return err
		}
		b.Version = k.Version
	}
	return nil
}

// AuditFinding is what a driver's final checks found: a problem ("" when
// none) and the leaf index it concerns (-1 when none), and the leaves that
// repeat an earlier leaf's content id (see ledger.AuditReport).
type AuditFinding struct {
	Index           int64
	Problem         string
	DuplicateLeaves uint64
	FirstDuplicate  int64
}

// AuditSource is a driver's read snapshot of the whole log for RunAudit.
// ReadLeaves runs on its own goroutine while the others run on the
// caller's; CheckLeaf runs concurrently on distinct rows.
type AuditSource[P any] interface {
	// Checkpoints returns every stored checkpoint in increasing size
	// (Origin empty).
	Checkpoints(ctx context.Context) ([]ledger.Checkpoint, error)
	// ReadLeaves appends the next stored leaves, in index order, to
	// rows[:0] up to cap(rows), and returns them; none at the end. The
	// slice is reused once its rows were added: rows[:cap(rows)] may hold
	// rows of an earlier batch, whose Raw and LeafHash buffers the
	// driver may write the new rows' bytes into.
	ReadLeaves(ctx context.Context, rows []AuditRow[P]) ([]AuditRow[P], error)
	// NextNode returns the next stored inner node (level > 0) in the order
	// an appending compact range completes them; ok is false at the end.
	NextNode(ctx context.Context) (id compact.NodeID, hash []byte, ok bool, err error)
	// CheckLeaf checks the projection of a leaf whose bytes verified
	// (b is its decoded body, kept in r) and returns the problem, "" when
	// none.
	CheckLeaf(r *AuditRow[P], b *AuditBody) string
	// AddLeaf is called in index order for every leaf that passed. It
	// keeps nothing of r: the row is read into again.
	AddLeaf(r *AuditRow[P])
	// Finish runs the driver's checks over the whole snapshot once the n
	// leaves passed.
	Finish(ctx context.Context, n uint64) (AuditFinding, error)
}

// KeyRotationSource is implemented by AuditSources that read their
// snapshot's key-rotation leaves up front, in index order; RunAudit
// builds the log's key chain from them before it verifies checkpoints,
// and checks each against the same leaf in the stream.
type KeyRotationSource interface {
	KeyRotations(ctx context.Context) ([]AuditLeaf, error)
}

// auditBatch is how many leaves the reader hands the checkers at a time.
const auditBatch = 2048

// RunAudit audits the log of src against the checkpoints signed by its
// key chain with origin. verifierKey is the key the caller trusts: with
// no key rotation it is the log's only key; otherwise it must be a key of
// the chain the rotation leaves build (each rotation signed by the key
// before it and the key after it), and every checkpoint must verify with
// the chain's key at its size (a checkpoint the retired key signed past
// its rotation fails). Problems go in the report (OK false); the error is
// for failures to read. It audits the snapshot src reads.
func RunAudit[P any](ctx context.Context, src AuditSource[P], verifierKey, origin string) (ledger.AuditReport, error) {
	a := &auditRun[P]{src: src, rep: ledger.AuditReport{FirstBadIndex: -1, FirstDuplicate: -1}, nodeBad: -1, rng: rangeFactory.NewEmptyRange(0)}
	if bad, err := a.keyChain(ctx, verifierKey, origin); bad || err != nil {
		return a.rep, err
	}
	if bad, err := a.checkpoints(ctx, origin); bad || err != nil {
		return a.rep, err
	}
	if bad, err := a.leaves(ctx); bad || err != nil {
		return a.rep, err
	}
	if a.rotSeen != len(a.rots) {
		return a.bad(-1, "the snapshot lists %d key rotation leaves but %d were read in the log", len(a.rots), a.rotSeen)
	}
	if a.expect < a.latest {
		return a.bad(int64(a.expect), "the log has %d leaves but a signed checkpoint covers %d: leaves from %d on were deleted", a.expect, a.latest, a.expect)
	}
	if _, _, more, err := src.NextNode(ctx); err != nil {
		return a.rep, err
	} else if more {
		return a.bad(int64(a.expect), "the stored tree holds nodes beyond the last leaf")
	}
	// Every leaf verified: the report carries the log's size and root
	// whatever the driver's projection checks say.
	a.rep.Leaves = a.expect
	if a.expect > 0 {
		a.rep.Root = rangeRoot(a.rng)
	}
	f, err := src.Finish(ctx, a.expect)
	if err != nil {
		return a.rep, err
	}
	a.rep.DuplicateLeaves, a.rep.FirstDuplicate = f.DuplicateLeaves, f.FirstDuplicate
	if f.Problem != "" {
		return a.bad(f.Index, "%s", f.Problem)
	}
	a.rep.OK = true
	return a.rep, nil
}

type auditCP struct {
	size uint64
	root ledger.Hash
}

// auditRun is the state of one RunAudit.
type auditRun[P any] struct {
	src    AuditSource[P]
	rep    ledger.AuditReport
	cps    []auditCP
	latest uint64 // the largest checkpoint's size
	rng    *compact.Range
	cpi    int    // the next checkpoint to compare a root with
	expect uint64 // the next leaf index
	// verified: leaves below the last checkpoint whose root matched are
	// proven good, so a culprit lies at or after it.
	verified    uint64
	nodeProblem string
	nodeErr     error // a failure to read the stored nodes: an error, never a finding
	nodeBad     int64

	chain   ledger.KeyChain
	rots    map[uint64][]byte // rotation leaf index -> its leaf hash
	rotSeen int
}

// keyChain reads the rotation leaves (when src lists them), checks their
// bytes, builds the key chain and checks that verifierKey is in it.
func (a *auditRun[P]) keyChain(ctx context.Context, verifierKey, origin string) (bad bool, err error) {
	verifierKey = strings.TrimSpace(verifierKey)
	if _, err := note.NewVerifier(verifierKey); err != nil {
		return false, fmt.Errorf("audit: verifier key: %w", err)
	}
	var leaves []AuditLeaf
	if ks, ok := a.src.(KeyRotationSource); ok {
		if leaves, err = ks.KeyRotations(ctx); err != nil {
			return false, err
		}
	}
	a.rots = make(map[uint64][]byte, len(leaves))
	rots := make([]ledger.RotationLeaf, 0, len(leaves))
	for i := range leaves {
		l := &leaves[i]
		if h := ledger.LeafHash(l.Raw); !bytes.Equal(h[:], l.LeafHash) {
			a.bad(int64(l.Index), "leaf %d: stored bytes do not hash to the stored leaf hash (edited)", l.Index)
			return true, nil
		}
		body, problem, _ := leafBody(l)
		if problem != "" {
			a.bad(int64(l.Index), "leaf %d: %s", l.Index, problem)
			return true, nil
		}
		a.rots[l.Index] = l.LeafHash
		rots = append(rots, ledger.RotationLeaf{Index: l.Index, Body: body})
	}
	chain, err := ledger.BuildKeyChain(origin, verifierKey, rots)
	if err != nil {
		idx := int64(-1)
		for _, r := range rots {
			if strings.HasPrefix(err.Error(), fmt.Sprintf("key rotation leaf %d:", r.Index)) {
				idx = int64(r.Index)
			}
		}
		a.bad(idx, "%v", err)
		return true, nil
	}
	if chain.Index(verifierKey) < 0 {
		a.bad(-1, "the key given (%s) is not in the log's key chain (%s): the public key was replaced, or this is another log", ledger.KeyID(verifierKey), strings.Join(keyIDs(chain), " -> "))
		return true, nil
	}
	a.chain = chain
	a.rep.KeyChain = chain
	return false, nil
}

func keyIDs(c ledger.KeyChain) []string {
	out := make([]string, len(c))
	for i, e := range c {
		out[i] = ledger.KeyID(e.Key)
	}
	return out
}

func (a *auditRun[P]) bad(idx int64, format string, args ...any) (ledger.AuditReport, error) {
	a.rep.OK = false
	a.rep.FirstBadIndex = idx
	a.rep.Problem = fmt.Sprintf(format, args...)
	return a.rep, nil
}

// checkpoints verifies every stored checkpoint's signature, with the key
// the chain puts in force at its size, and that its signed text matches
// its stored size and root.
func (a *auditRun[P]) checkpoints(ctx context.Context, origin string) (bad bool, err error) {
	vs := map[string]note.Verifier{}
	verifier := func(k string) note.Verifier {
		if v, ok := vs[k]; ok {
			return v
		}
		v, _ := note.NewVerifier(k) // the chain's keys parsed in ledger.BuildKeyChain
		vs[k] = v
		return v
	}
	cps, err := a.src.Checkpoints(ctx)
	if err != nil {
		return false, err
	}
	for _, cp := range cps {
		k := a.chain.KeyFor(cp.Size)
		n, err := note.Open([]byte(cp.Note), note.VerifierList(verifier(k)))
		if err != nil {
			a.bad(int64(cp.Size)-1, "checkpoint of size %d: signature does not verify with %s, the key in force at that size%s: %v", cp.Size, k, a.otherSigner(cp, k, verifier), err)
			return true, nil
		}
		o, nsize, nroot, err := ParseCheckpointText(n.Text)
		if err != nil || o != origin || nsize != cp.Size || nroot != cp.Root {
			a.bad(int64(cp.Size)-1, "checkpoint of size %d: signed text does not match its row (origin %q, size %d)", cp.Size, o, nsize)
			return true, nil
		}
		a.cps = append(a.cps, auditCP{size: cp.Size, root: nroot})
	}
	a.rep.Checkpoints = len(a.cps)
	if len(a.cps) > 0 {
		a.latest = a.cps[len(a.cps)-1].size
	}
	return false, nil
}

// otherSigner names the chain's other key that signed cp, when one did
// ("" when none): a retired key signing past its rotation, or a key
// signing before it took over.
func (a *auditRun[P]) otherSigner(cp ledger.Checkpoint, inForce string, verifier func(string) note.Verifier) string {
	for _, e := range a.chain {
		if e.Key == inForce {
			continue
		}
		if _, err := note.Open([]byte(cp.Note), note.VerifierList(verifier(e.Key))); err == nil {
			if e.From > cp.Size {
				return fmt.Sprintf(" (it is signed by %s, which takes over only at size %d)", ledger.KeyID(e.Key), e.From)
			}
			return fmt.Sprintf(" (it is signed by %s, retired before size %d: a retired key signed past its rotation)", ledger.KeyID(e.Key), cp.Size)
		}
	}
	return ""
}

// checkLeaf verifies one leaf on its own: its hash, canonical envelope,
// index, id, kind, key and time, then the driver's projection of it. Safe
// to run concurrently on distinct rows.
func checkLeaf[P any](src AuditSource[P], r *AuditRow[P]) {
	r.Hash = ledger.LeafHash(r.Raw)
	if !bytes.Equal(r.Hash[:], r.LeafHash) {
		r.problem, r.failure = "stored bytes do not hash to the stored leaf hash (edited)", ledger.FailureHash
		return
	}
	body, problem, failure := leafBody(&r.AuditLeaf)
	if problem != "" {
		r.problem, r.failure = problem, failure
		return
	}
	b := &r.body
	*b = AuditBody{}
	if err := DecodeAuditBody(ledger.Kind(r.Kind), body, b); err != nil {
		// The bytes hash to the signed leaf: this build cannot read a
		// layout the log holds (a reading fault), which is no edit.
		r.problem = fmt.Sprintf("its hash and envelope verify but this build cannot decode its %s body (%s): a reading fault of this build, not tampering; see RELIABILITY.md, \"A tampered state\"", r.Kind, ledger.Clip(err.Error()))
		r.failure = ledger.FailureLayout
		return
	}
	key := b.Version
	switch ledger.Kind(r.Kind) {
	case ledger.KindEvidence:
		key = b.Lane
	case ledger.KindHead:
		key = b.Repository
	case ledger.KindPolicy:
		key = b.Name
	}
	if key != r.Key {
		r.problem, r.failure = "key column does not match the leaf body", ledger.FailureProjection
		return
	}
	if r.problem = src.CheckLeaf(r, b); r.problem != "" {
		r.failure = ledger.FailureProjection
	}
}

// leafBody checks that the leaf's bytes are exactly the canonical envelope
// (see ledger.EncodeLeaf) of its index, kind, id and time around a body that
// hashes to its id, and returns the body.
func leafBody(l *AuditLeaf) (body []byte, problem, failure string) {
	kind := ledger.Kind(l.Kind)
	if !ledger.ValidKind(kind) || len(l.ID) != 32 || !ledger.LowerHex(l.ID) {
		return nil, "id or kind column is malformed", ledger.FailureEnvelope
	}
	// The envelope's prefix up to the body, as ledger.EncodeLeaf writes it
	// (kind and id are plain ASCII, checked above: nothing to escape).
	var buf [160]byte
	prefix := append(buf[:0], `{"v":1,"index":`...)
	prefix = strconv.AppendUint(prefix, l.Index, 10)
	prefix = append(prefix, `,"kind":"`...)
	prefix = append(prefix, l.Kind...)
	prefix = append(prefix, `","id":"`...)
	prefix = append(prefix, l.ID...)
	prefix = append(prefix, `","recorded_at":"`...)
	prefix = time.Unix(0, l.RecordedAt).UTC().AppendFormat(prefix, time.RFC3339Nano)
	prefix = append(prefix, `","body":`...)
	if !bytes.HasPrefix(l.Raw, prefix) || len(l.Raw) < len(prefix)+3 || l.Raw[len(l.Raw)-1] != '}' {
		var lf ledger.Leaf
		if err := json.Unmarshal(l.Raw, &lf); err == nil && lf.Index != l.Index {
			return nil, fmt.Sprintf("the stored bytes say index %d (rows were reordered or copied)", lf.Index), ledger.FailureEnvelope
		}
		return nil, "leaf bytes are not the canonical envelope of the row's index, kind, id and time (edited or reordered)", ledger.FailureEnvelope
	}
	body = l.Raw[len(prefix) : len(l.Raw)-1]
	if ledger.EntryID(kind, body) != l.ID {
		return nil, "the body does not hash to the entry id (edited)", ledger.FailureHash
	}
	return body, "", ""
}
