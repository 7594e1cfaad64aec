package tlog

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/transparency-dev/merkle/compact"
	"github.com/transparency-dev/merkle/rfc6962"
	"golang.org/x/mod/sumdb/note"
)

// Driver is what the log engine (Log) needs of a store: one atomic batch
// at a time under the store's write lock, the signed checkpoints and the
// tree nodes by size and position, and a content-id lookup the caller's
// goroutine runs before its request queues. Drivers keep their speed
// machinery (caches, filters, prepared statements) to themselves. A
// Driver must be safe for concurrent use; a Batch is used by one
// goroutine.
type Driver interface {
	NodeReader
	// StoredCheckpoint returns the stored checkpoint of tree size size (0:
	// the largest), with Origin left empty, or a ledger.CodeNotFound error.
	StoredCheckpoint(ctx context.Context, size uint64) (ledger.Checkpoint, error)
	// SignedSize returns the tree size of the largest stored checkpoint (0
	// when none).
	SignedSize(ctx context.Context) (uint64, error)
	// LookupIDs is the driver's part of de-duplication that needs no write
	// lock: it runs on the appending caller's goroutine and its result is
	// handed, untouched, to Batch.Find. It may return nil.
	LookupIDs(ctx context.Context, recs []ledger.Prepared) any
	// BeginBatch opens a batch (a write transaction) holding the store's
	// write lock until Commit or Rollback.
	BeginBatch(ctx context.Context) (Batch, error)
}

// AnswerNodeReader is implemented by drivers that read the nodes of
// append answers' inclusion proofs apart from other readers (their own
// connections), so appends do not queue behind page reads for them.
type AnswerNodeReader interface {
	AnswerNodes() NodeReader
}

// Batch is one atomic write of the log: leaves, tree nodes, projections,
// idempotency answers and a checkpoint, all committed together or not at
// all. Reads through a Batch see its own writes once flushed. The engine
// calls, in order: Size, Start, then per request BeginRequest, Find,
// Idempotency/EntryByID/EntryAt, AddLeaf and AddNode, Flush (after each
// request, or once after several requests' AddLeaf calls: rows of
// evidence-only requests wait for the batch's end), EndRequest; then
// PutIdempotency, PutCheckpoint and Commit, or Rollback at any point. An
// EndRequest(false) without a savepoint while earlier requests' rows are
// unflushed is followed by Rollback.
type Batch interface {
	NodeReader
	// Size returns the number of stored leaves as this batch sees them.
	Size(ctx context.Context) (uint64, error)
	// StoredCheckpoint is Driver.StoredCheckpoint inside the batch.
	StoredCheckpoint(ctx context.Context, size uint64) (ledger.Checkpoint, error)
	// Start prepares the batch for a log of size leaves. reload is true
	// when the engine (re)loaded its tree: the log grew outside this
	// process, or this is the first batch, or the last commit failed; the
	// driver then reloads whatever it derives from the stored log.
	Start(ctx context.Context, size uint64, reload bool) error
	// BeginRequest starts one request's writes; with savepoint, they can
	// be undone alone (EndRequest(false)) without undoing the batch.
	BeginRequest(ctx context.Context, savepoint bool) error
	// EndRequest ends the request: ok keeps its writes, !ok drops its
	// buffered rows and, under a savepoint, rolls its flushed ones back.
	EndRequest(ctx context.Context, ok bool) error
	// Find returns the leaf index of every record of recs whose content id
	// is stored or appended earlier in this batch (hint is LookupIDs'
	// result for recs); records it does not name are new. The map may be
	// nil and must not be modified.
	Find(ctx context.Context, recs []ledger.Prepared, hint any) (map[string]uint64, error)
	// EntryAt returns the stored leaf at index (flushed writes included).
	EntryAt(ctx context.Context, index uint64) (ledger.Entry, error)
	// EntryByID returns the stored leaf of a content id.
	EntryByID(ctx context.Context, id string) (ledger.Entry, error)
	// Idempotency returns the stored answer of an idempotency key.
	Idempotency(ctx context.Context, key string) (ans IdempotentAnswer, found bool, err error)
	// AddLeaf buffers a new leaf (e) with its prepared record (its
	// projections come from p).
	AddLeaf(e ledger.Entry, p *ledger.Prepared)
	// AddNode buffers a tree node the leaf completed (level 0: the leaf
	// hash itself, which drivers may keep with the leaf).
	AddNode(id compact.NodeID, hash []byte)
	// Flush writes every row buffered since the last Flush (of one
	// request or of several).
	Flush(ctx context.Context) error
	// PutIdempotency stores an idempotency key's answer; a key stored
	// concurrently by another process is not an error.
	PutIdempotency(ctx context.Context, key string, ans IdempotentAnswer, at time.Time) error
	// PutCheckpoint stores the signed checkpoint of the batch.
	PutCheckpoint(ctx context.Context, cp ledger.Checkpoint) error
	// Commit makes the batch durable (its return means durable) and
	// releases the write lock. On error nothing was written, and the driver
	// forgets what it derived in memory (the next Start reloads).
	Commit(ctx context.Context, size uint64) error
	// Rollback undoes the batch and releases the write lock.
	Rollback()
}

// IdempotentAnswer is what an idempotency key answered: the hash of the
// request's content ids (see requestHash), the entries' ids in order and
// the tree size the proofs were against.
type IdempotentAnswer struct {
	RequestHash []byte
	IDs         []string
	Size        uint64
}

// LogOptions configures NewLog.
type LogOptions struct {
	// Signer signs checkpoints; its Name is the log origin. Required.
	Signer note.Signer
	// VerifierKey is the signed-note verifier key of Signer. Required.
	VerifierKey string
	// Logger; default slog.Default().
	Logger *slog.Logger
	// Now is the clock; default time.Now.
	Now func() time.Time
	// MaxBatch caps how many append requests share one batch (default 256).
	MaxBatch int
	// Linger is how long the sequencer waits for more concurrent appends to
	// join a batch once the previous batch showed concurrency (default
	// 500µs; negative disables). It never delays a lone writer, and it
	// stops waiting as soon as the batch is as large as the previous one.
	Linger time.Duration
	// ReadOnly starts no sequencer: Append fails.
	ReadOnly bool
	// OnCheckpoint, when set, is called by the sequencer with each new
	// checkpoint after its batch committed and before any of the batch's
	// appends is answered (the signed-state journal, see SignedState). An
	// error fails those appends (they are committed; the error says so).
	OnCheckpoint func(ledger.Checkpoint) error
}

// Log is the log engine over a Driver: the sequencer with group commit
// (one goroutine; concurrent appends share a batch and its one signed
// checkpoint), the compact-range tree update, checkpoint signing,
// de-duplication by content id and idempotency keys, proofs, and the
// audit (Audit). It implements ledger.LogWriter, ledger.LogReader's checkpoint and proof
// methods, and Keys. Safe for concurrent use.
type Log struct {
	d      Driver
	opts   LogOptions
	origin string
	key    atomic.Pointer[logKey] // the key that signs new checkpoints
	chainM sync.Mutex
	chain  ledger.KeyChain             // the key chain as last loaded or rotated (nil: not loaded)
	tamper atomic.Pointer[TamperState] // set once a full scan found a bad leaf
	// committed is the latest checkpoint this process committed (nil
	// before its first commit), for CheckStored.
	committed atomic.Pointer[ledger.Checkpoint]
	// journal, when set (UseJournal), is the signed-state journal every
	// batch checks the stored log against before it signs.
	journal     atomic.Pointer[SignedState]
	journalSeen SignedEntry // sequencer goroutine only: the journal entry last found extended

	reqs      chan *appendReq
	rots      chan *appendReq // key rotations, each committed in a batch of its own
	done      chan struct{}   // closed by Close
	exited    chan struct{}   // closed when the sequencer has returned
	closeOnce sync.Once
	wg        sync.WaitGroup

	tree *treeState // sequencer goroutine only; nil until loaded
}

// logKey is the signing key in force: the signer, its verifier key and
// verifier.
type logKey struct {
	signer   note.Signer
	vkey     string
	verifier note.Verifier
}

type appendReq struct {
	// rotate, set on a key rotation request, builds its one record for a
	// log of the given size inside the batch; after runs once the batch
	// committed, before the request is answered.
	rotate  func(size uint64) (ledger.Prepared, error)
	after   func(cp ledger.Checkpoint)
	ctx     context.Context
	recs    []ledger.Prepared
	hint    any // Driver.LookupIDs' answer
	idemKey string
	reqHash []byte
	guard   AppendGuard // from the caller's context (WithAppendGuard)
	resp    chan appendResp
}

type appendResp struct {
	entries  []ledger.Entry
	existing []bool
	size     uint64             // proofs are against this size
	cp       *ledger.Checkpoint // the checkpoint of that size when the sequencer has it
	// nodes are tree nodes of the committed batch (batchNodes), read
	// before the store for the answer's proofs; nil when it added none.
	nodes map[compact.NodeID][]byte
	err   error
}

// NewLog returns the engine over d and, unless opts.ReadOnly, starts its
// sequencer goroutine (stopped by Close). Errors name the bad option.
func NewLog(d Driver, opts LogOptions) (*Log, error) {
	if opts.Signer == nil {
		return nil, errors.New("log: no signer")
	}
	v, err := note.NewVerifier(opts.VerifierKey)
	if err != nil {
		return nil, fmt.Errorf("log: verifier key: %w", err)
	}
	if v.Name() != opts.Signer.Name() || v.KeyHash() != opts.Signer.KeyHash() {
		return nil, errors.New("log: the verifier key is not the signer's")
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.MaxBatch <= 0 {
		opts.MaxBatch = 256
	}
	if opts.Linger == 0 {
		opts.Linger = 500 * time.Microsecond
	}
	l := &Log{d: d, opts: opts, origin: opts.Signer.Name(), done: make(chan struct{}), exited: make(chan struct{}), reqs: make(chan *appendReq, 1024), rots: make(chan *appendReq)}
	l.key.Store(&logKey{signer: opts.Signer, vkey: opts.VerifierKey, verifier: v})
	if !opts.ReadOnly {
		l.wg.Add(1)
		go l.sequencer()
	}
	return l, nil
}

// Close stops the sequencer after the requests already queued; later
// appends fail. It does not close the driver. Safe to call twice.
func (l *Log) Close() {
	l.closeOnce.Do(func() {
		close(l.done)
		l.wg.Wait()
	})
}

// VerifierKey implements Keys: the verifier key of the key in force (the
// new key once Rotate has returned).
func (l *Log) VerifierKey() string { return l.key.Load().vkey }

// Origin returns the log origin (the first line of every checkpoint).
func (l *Log) Origin() string { return l.origin }

// SignNote implements Keys: text (a newline is added when missing) signed
// as a note with the log key.
func (l *Log) SignNote(text string) (string, error) {
	if err := l.refuseTampered(); err != nil {
		return "", err
	}
	if !strings.HasSuffix(text, "\n") {
		text += "\n"
	}
	b, err := note.Sign(&note.Note{Text: text}, l.key.Load().signer)
	if err != nil {
		return "", fmt.Errorf("sign note: %w", err)
	}
	return string(b), nil
}

// Append implements ledger.LogWriter. Each record is validated (ledger.PrepareRecords);
// with several records, error fields are prefixed by the record's position
// ("[3].lane"). The call blocks until the batch that carries it has
// committed (durably) or failed.
func (l *Log) Append(ctx context.Context, recs []ledger.Record, idemKey string) (*ledger.AppendResult, error) {
	if l.opts.ReadOnly {
		return nil, ledger.Errorf(ledger.CodeInternal, "store opened read-only")
	}
	if err := l.refuseTampered(); err != nil {
		return nil, err
	}
	if len(recs) == 0 {
		return nil, ledger.FieldError("", "no records to append")
	}
	for _, r := range recs {
		if r.Kind == ledger.KindKeyRotation {
			return nil, ledger.FieldError("kind", "key-rotation leaves are appended only by `ledger key rotate` (Log.Rotate), never through Append")
		}
	}
	if len(recs) > ledger.MaxRecordsPerAppend {
		return nil, ledger.FieldError("", "at most %d records per append, got %d: split them over several requests", ledger.MaxRecordsPerAppend, len(recs))
	}
	if len(idemKey) > MaxIdempotencyKey {
		return nil, ledger.FieldError("Idempotency-Key", "at most %d bytes", MaxIdempotencyKey)
	}
	req := &appendReq{ctx: ctx, idemKey: idemKey, guard: guardFrom(ctx), resp: make(chan appendResp, 1)}
	var err error
	if req.recs, err = ledger.PrepareRecords(recs); err != nil {
		return nil, err
	}
	req.hint = l.d.LookupIDs(ctx, req.recs)
	req.reqHash = requestHash(req.recs)
	select {
	case l.reqs <- req:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-l.done:
		return nil, ledger.Errorf(ledger.CodeInternal, "store is closed")
	}
	var resp appendResp
	select {
	case resp = <-req.resp:
	case <-l.exited:
		// The sequencer answered every request it took before it
		// returned; one queued after its last look was never taken.
		select {
		case resp = <-req.resp:
		default:
			return nil, ledger.Errorf(ledger.CodeInternal, "store is closed")
		}
	}
	if resp.err != nil {
		return nil, resp.err
	}
	return l.answer(ctx, resp)
}

// MaxIdempotencyKey is the longest idempotency key Append takes, in bytes:
// a caller's key of up to 256 bytes with the scope a server prefixes
// (web scopes keys to the token that made them).
const MaxIdempotencyKey = 512

// requestHash identifies a request for its idempotency key: SHA-256 over
// its records' content ids in order.
func requestHash(recs []ledger.Prepared) []byte {
	h := sha256.New()
	for _, p := range recs {
		h.Write([]byte(p.ID))
	}
	return h.Sum(nil)
}

// answer builds the ledger.AppendResult (proofs and checkpoint) outside the
// sequencer.
func (l *Log) answer(ctx context.Context, resp appendResp) (*ledger.AppendResult, error) {
	var cp ledger.Checkpoint
	if resp.cp != nil && resp.cp.Size == resp.size {
		cp = *resp.cp
	} else {
		var err error
		if cp, err = l.CheckpointAt(ctx, resp.size); err != nil {
			return nil, err
		}
	}
	out := &ledger.AppendResult{Checkpoint: cp, Entries: make([]ledger.AppendedEntry, 0, len(resp.entries))}
	idx := make([]uint64, len(resp.entries))
	for i, e := range resp.entries {
		idx[i] = e.Index
	}
	var nr NodeReader = l.d
	if a, ok := l.d.(AnswerNodeReader); ok {
		nr = a.AnswerNodes()
	}
	if resp.nodes != nil {
		nr = memNodes{m: resp.nodes, next: nr}
	}
	proofs, err := inclusionMany(ctx, nr, idx, resp.size, cp.Root)
	if err != nil {
		return nil, internal("inclusion proof", err)
	}
	for i, e := range resp.entries {
		out.Entries = append(out.Entries, ledger.AppendedEntry{Entry: e, Existing: resp.existing[i], Proof: proofs[i]})
	}
	return out, nil
}

// internal wraps err as a ledger.CodeInternal *Error (ledger.CodeStorageFull on a full
// disk), unless it already is an *Error or a context error.
func internal(op string, err error) error {
	if err == nil {
		return nil
	}
	var le *ledger.Error
	if errors.As(err, &le) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	if ledger.IsStorageFull(err) {
		return ledger.StorageFull(op, err)
	}
	return &ledger.Error{Code: ledger.CodeInternal, Message: op + ": " + err.Error(), Err: err}
}

// Checkpoint implements ledger.LogReader: the latest signed checkpoint. An empty
// log has a zero-size checkpoint with the empty root, signed on the fly;
// a read-only log (opened with a public key) has none to give and answers
// a ledger.CodeNotFound error instead.
func (l *Log) Checkpoint(ctx context.Context) (ledger.Checkpoint, error) {
	return l.CheckpointAt(ctx, 0)
}

// CheckpointAt implements ledger.LogReader; size 0 means the latest.
func (l *Log) CheckpointAt(ctx context.Context, size uint64) (ledger.Checkpoint, error) {
	cp, err := l.d.StoredCheckpoint(ctx, size)
	if err == nil {
		cp.Origin = l.origin
		return cp, nil
	}
	if size == 0 && ledger.ErrorCode(err) == ledger.CodeNotFound && !l.opts.ReadOnly {
		var root ledger.Hash
		copy(root[:], rfc6962.DefaultHasher.EmptyRoot())
		signed, err := l.SignNote(CheckpointText(l.origin, 0, root))
		if err != nil {
			return cp, err
		}
		return ledger.Checkpoint{Origin: l.origin, Size: 0, Root: root, Note: signed, CreatedAt: l.opts.Now().UTC()}, nil
	}
	return cp, err
}

// InclusionProof implements ledger.LogReader; size 0 means the latest
// checkpoint's size. Sizes beyond the latest checkpoint and leaves beyond
// the size are ledger.CodeInvalid errors naming "size".
func (l *Log) InclusionProof(ctx context.Context, index, size uint64) (ledger.InclusionProof, error) {
	cur, err := l.d.SignedSize(ctx)
	if err != nil {
		return ledger.InclusionProof{}, err
	}
	if size == 0 {
		size = cur
	}
	if size > cur {
		return ledger.InclusionProof{}, ledger.FieldError("size", "tree size %d is beyond the latest checkpoint (%d)", size, cur)
	}
	if index >= size {
		return ledger.InclusionProof{}, ledger.FieldError("size", "leaf %d is not in a tree of size %d", index, size)
	}
	p, err := inclusion(ctx, l.d, index, size)
	return p, internal("inclusion proof", err)
}

// ConsistencyProof implements ledger.LogReader; to 0 means the latest
// checkpoint's size. Errors name "to" or "from".
func (l *Log) ConsistencyProof(ctx context.Context, from, to uint64) (ledger.ConsistencyProof, error) {
	out := ledger.ConsistencyProof{From: from, To: to}
	cur, err := l.d.SignedSize(ctx)
	if err != nil {
		return out, err
	}
	if to == 0 {
		to, out.To = cur, cur
	}
	if to > cur {
		return out, ledger.FieldError("to", "tree size %d is beyond the latest checkpoint (%d)", to, cur)
	}
	if from > to {
		return out, ledger.FieldError("from", "from (%d) must not exceed to (%d)", from, to)
	}
	p, err := consistency(ctx, l.d, from, to)
	return p, internal("consistency proof", err)
}

// ReadNodes implements NodeReader over the driver: the stored hashes of
// perfect-subtree nodes (level 0: leaf hashes), for tile readers (web's
// c2sp.org/tlog-tiles routes). Safe for concurrent use.
func (l *Log) ReadNodes(ctx context.Context, ids []compact.NodeID) ([][]byte, error) {
	return l.d.ReadNodes(ctx, ids)
}
