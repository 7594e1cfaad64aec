package witness

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"time"

	"golang.org/x/mod/sumdb/note"

	"github.com/evidence-ledger/ledger/ledger"
)

// Config configures a Witnesser.
type Config struct {
	// Log is the log whose latest checkpoint is cosigned. Required.
	Log ledger.LogReader
	// LogKey is the log's note verifier key (ledger.Keys.VerifierKey()):
	// a checkpoint it does not verify is never sent. Required.
	LogKey string
	// Policy names the witnesses (each needs a URL) and the quorum.
	// Required.
	Policy *Policy
	// StatePath is the state file (witness sizes, the cosignatures got, the
	// last witnessed checkpoint); "" keeps the state in memory only.
	StatePath string
	// HTTP is the client for the witnesses; nil means one with a 10 s
	// timeout per request.
	HTTP *http.Client
	// Now is the clock; default time.Now.
	Now func() time.Time
	// Logger; default slog.Default().
	Logger *slog.Logger
	// MinRoundInterval is the least time between the starts of two rounds
	// of Run (default 1 s): appends in a burst share one round, and a
	// witness gets at most one request per interval.
	MinRoundInterval time.Duration
}

// Cosigned is a checkpoint with the cosignatures a round got for it.
type Cosigned struct {
	Size uint64      `json:"size"`
	Root ledger.Hash `json:"root"`
	// Note is the log's signed checkpoint followed by the witnesses'
	// cosignature lines: a c2sp.org/tlog-cosignature cosigned checkpoint.
	Note string `json:"note"`
	// Cosigners are the policy names of the witnesses whose cosignature is
	// in Note, in policy order.
	Cosigners []string `json:"cosigners"`
	QuorumMet bool     `json:"quorum_met"`
	// CreatedAt is the log's time of the checkpoint; At the round's time.
	CreatedAt time.Time `json:"created_at,omitzero"`
	At        time.Time `json:"at"`
}

// WitnessStatus is one witness's state after the last round.
type WitnessStatus struct {
	Name string `json:"name"`
	URL  string `json:"url"`
	// Size is the size the witness last cosigned, as far as the log knows.
	Size         uint64    `json:"size"`
	CosignedSize uint64    `json:"cosigned_size"`
	CosignedAt   time.Time `json:"cosigned_at,omitzero"`
	LastAttempt  time.Time `json:"last_attempt,omitzero"`
	LastError    string    `json:"last_error,omitempty"`
	// Refused: the witness refused the log's checkpoint as inconsistent
	// with what it cosigned before (a fork or a rollback).
	Refused bool `json:"refused,omitempty"`
}

// Status is a Witnesser's view after its last round, for /healthz and the
// dashboard.
type Status struct {
	Quorum string `json:"quorum"`
	// Latest is the last checkpoint a round tried, with what it got.
	Latest *Cosigned `json:"latest,omitempty"`
	// LastWitnessed is the newest checkpoint that met the quorum.
	LastWitnessed *Cosigned `json:"last_witnessed,omitempty"`
	// Witnessed reports whether Latest met the quorum.
	Witnessed bool `json:"witnessed"`
	// UnwitnessedSince is the log's time of the first checkpoint a round
	// could not get a quorum for since the last one that met it (the
	// round's time when the checkpoint has none); zero when witnessed.
	UnwitnessedSince time.Time       `json:"unwitnessed_since,omitzero"`
	Witnesses        []WitnessStatus `json:"witnesses"`
}

// Witnesser cosigns a log's latest checkpoint with the witnesses of a
// policy. Its methods are safe for concurrent use; rounds run one at a
// time. It only reads the log: a witness that is down or refuses delays
// nothing but the cosignatures.
type Witnesser struct {
	cfg     Config
	logKey  note.Verifier
	clients []*Client
	round   sync.Mutex // one round at a time
	mu      sync.RWMutex
	st      *state
	kick    chan struct{}
}

// New returns a Witnesser, loading the state file when there is one. It
// errors when a required field is missing, the log key does not parse, a
// witness has no URL, or the state file is unreadable or of another log.
func New(cfg Config) (*Witnesser, error) {
	if cfg.Log == nil || cfg.Policy == nil {
		return nil, errors.New("witnesser: Log and Policy are required")
	}
	v, err := note.NewVerifier(cfg.LogKey)
	if err != nil {
		return nil, fmt.Errorf("witnesser: log key: %w", err)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.MinRoundInterval <= 0 {
		cfg.MinRoundInterval = time.Second
	}
	w := &Witnesser{cfg: cfg, logKey: v, kick: make(chan struct{}, 1)}
	for _, pw := range cfg.Policy.Witnesses {
		if pw.URL == "" {
			return nil, fmt.Errorf("witnesser: witness %s has no URL in the policy", pw.Name)
		}
		w.clients = append(w.clients, &Client{Name: pw.Name, URL: pw.URL, Verifier: pw.Verifier, HTTP: cfg.HTTP})
	}
	st, err := loadState(cfg.StatePath, v.Name())
	if err != nil {
		return nil, err
	}
	// Drop witnesses no longer in the policy and start afresh any whose
	// key changed.
	for name, ws := range st.Witnesses {
		i := slices.IndexFunc(cfg.Policy.Witnesses, func(p PolicyWitness) bool { return p.Name == name })
		if i < 0 || cfg.Policy.Witnesses[i].VKey != ws.VKey {
			delete(st.Witnesses, name)
		}
	}
	for _, pw := range cfg.Policy.Witnesses {
		if st.Witnesses[pw.Name] == nil {
			st.Witnesses[pw.Name] = &witnessState{VKey: pw.VKey}
		}
	}
	w.st = st
	return w, nil
}

// Round is the outcome of one Witness call.
type Round struct {
	Cosigned Cosigned
	// Errors holds, by witness name, why a witness gave no cosignature.
	Errors map[string]error
}

// ErrInconsistent is wrapped by a witness's round error when the witness
// refuses the log's checkpoint as not extending what it cosigned, or when it
// has cosigned a larger tree than the log now has: a fork or a rollback of
// the log.
var ErrInconsistent = errors.New("log is not a consistent extension of what the witness cosigned")

// Witness runs one round: it asks every witness, concurrently, to cosign
// the log's latest checkpoint (from that witness's last known size; on a
// 409 it retries once from the size the witness named, with a fresh
// consistency proof), combines the cosignatures into one note, evaluates
// the quorum and saves the state. It errors only when the log cannot be
// read, its checkpoint does not verify with the log key, or the state
// cannot be saved; per-witness failures are in Round.Errors and Status.
func (w *Witnesser) Witness(ctx context.Context) (Round, error) {
	w.round.Lock()
	defer w.round.Unlock()
	cp, err := w.cfg.Log.Checkpoint(ctx)
	if err != nil {
		return Round{}, fmt.Errorf("witness round: read checkpoint: %w", err)
	}
	if _, err := note.Open([]byte(cp.Note), note.VerifierList(w.logKey)); err != nil {
		return Round{}, fmt.Errorf("witness round: checkpoint of size %d: %w", cp.Size, openError(err))
	}
	now := w.cfg.Now().UTC()

	// Work on copies of the witness states; publish them at the end.
	w.mu.RLock()
	wss := make([]witnessState, len(w.clients))
	for i, c := range w.clients {
		wss[i] = *w.st.Witnesses[c.Name]
	}
	w.mu.RUnlock()

	errs := make([]error, len(w.clients))
	var wg sync.WaitGroup
	for i, c := range w.clients {
		wg.Go(func() {
			errs[i] = w.cosignOne(ctx, c, &wss[i], cp, now)
		})
	}
	wg.Wait()

	// Combine the cosignatures for this checkpoint and check the result
	// the way an offline verifier would.
	combined := cp.Note
	for _, ws := range wss {
		if ws.CosignedSize == cp.Size && ws.CosignedRoot == cp.Root && ws.Cosignature != "" {
			combined += ws.Cosignature
		}
	}
	res, qerr := w.cfg.Policy.Check([]byte(combined), w.logKey)
	if qerr != nil && !errors.Is(qerr, ErrQuorum) {
		return Round{}, fmt.Errorf("witness round: combined checkpoint: %w", qerr)
	}
	c := Cosigned{Size: cp.Size, Root: cp.Root, Note: combined, Cosigners: res.Cosigners, QuorumMet: res.QuorumMet, CreatedAt: cp.CreatedAt, At: now}
	round := Round{Cosigned: c, Errors: map[string]error{}}
	for i, e := range errs {
		if e != nil {
			round.Errors[w.clients[i].Name] = e
			level := slog.LevelWarn
			if errors.Is(e, ErrInconsistent) {
				level = slog.LevelError
			}
			w.cfg.Logger.Log(ctx, level, "witness did not cosign", "witness", w.clients[i].Name, "size", cp.Size, "err", e)
		}
	}
	return round, w.publish(wss, c, cp.CreatedAt, now)
}

// publish makes a round's outcome the Witnesser's state, saving it first.
func (w *Witnesser) publish(wss []witnessState, c Cosigned, created, now time.Time) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if unchanged(w.st, wss, w.clients, c) {
		return nil // an idle round: nothing to write
	}
	next := *w.st
	next.Witnesses = map[string]*witnessState{}
	for i, cl := range w.clients {
		next.Witnesses[cl.Name] = &wss[i]
	}
	next.Latest = &c
	if c.QuorumMet {
		next.LastWitnessed = &c
		next.UnwitnessedSince = nil
	} else if next.UnwitnessedSince == nil {
		since := now
		if !created.IsZero() && created.Before(now) {
			since = created.UTC()
		}
		next.UnwitnessedSince = &since
	}
	if err := next.save(w.cfg.StatePath); err != nil {
		return err
	}
	w.st = &next
	return nil
}

// unchanged reports whether a round changed nothing: the same checkpoint
// as the last round, the same outcome, and every witness state as before.
func unchanged(st *state, wss []witnessState, clients []*Client, c Cosigned) bool {
	l := st.Latest
	if l == nil || l.Size != c.Size || l.Root != c.Root || l.QuorumMet != c.QuorumMet || !slices.Equal(l.Cosigners, c.Cosigners) {
		return false
	}
	for i, cl := range clients {
		if *st.Witnesses[cl.Name] != wss[i] {
			return false
		}
	}
	return true
}

// cosignOne asks one witness to cosign cp and updates ws.
func (w *Witnesser) cosignOne(ctx context.Context, c *Client, ws *witnessState, cp ledger.Checkpoint, now time.Time) error {
	if ws.CosignedSize == cp.Size && ws.CosignedRoot == cp.Root && ws.Cosignature != "" {
		return nil // already cosigned this very checkpoint
	}
	ws.LastAttempt = now
	err := w.addCheckpoint(ctx, c, ws, cp, now)
	ws.Refused = errors.Is(err, ErrInconsistent)
	ws.LastError = ""
	if err != nil {
		ws.LastError = err.Error()
	}
	return err
}

func (w *Witnesser) addCheckpoint(ctx context.Context, c *Client, ws *witnessState, cp ledger.Checkpoint, now time.Time) error {
	for attempt := 0; ; attempt++ {
		old := ws.Size
		if old > cp.Size {
			return fmt.Errorf("witness %s cosigned size %d, the log has %d: %w", c.Name, old, cp.Size, ErrInconsistent)
		}
		var proof []ledger.Hash
		if old > 0 && old < cp.Size {
			p, err := w.cfg.Log.ConsistencyProof(ctx, old, cp.Size)
			if err != nil {
				return fmt.Errorf("witness %s: consistency proof %d to %d: %w", c.Name, old, cp.Size, err)
			}
			proof = p.Hashes
		}
		sig, err := c.AddCheckpoint(ctx, old, proof, []byte(cp.Note))
		var ce *ConflictError
		switch {
		case err == nil:
			ws.Size, ws.CosignedSize, ws.CosignedRoot = cp.Size, cp.Size, cp.Root
			ws.Cosignature, ws.CosignedAt = string(sig), now
			return nil
		case errors.As(err, &ce) && ce.KnownSet && ce.Known != old && attempt == 0:
			ws.Size = ce.Known // retry from the size the witness holds
			continue
		case errors.As(err, &ce):
			// Same old size, or no size: the witness holds a different
			// root at the size it names.
			return fmt.Errorf("%w: %w", err, ErrInconsistent)
		case errors.Is(err, ErrBadProof) && old > 0:
			return fmt.Errorf("%w (from size %d): %w", err, old, ErrInconsistent)
		}
		return err
	}
}

// Status returns the view after the last round (or from the state file
// before the first). The slices and pointers returned are copies.
func (w *Witnesser) Status() Status {
	w.mu.RLock()
	defer w.mu.RUnlock()
	s := Status{Quorum: w.cfg.Policy.Quorum}
	if w.st.Latest != nil {
		c := *w.st.Latest
		s.Latest = &c
		s.Witnessed = c.QuorumMet
	}
	if w.st.LastWitnessed != nil {
		c := *w.st.LastWitnessed
		s.LastWitnessed = &c
	}
	if w.st.UnwitnessedSince != nil {
		s.UnwitnessedSince = *w.st.UnwitnessedSince
	}
	for _, c := range w.clients {
		ws := w.st.Witnesses[c.Name]
		s.Witnesses = append(s.Witnesses, WitnessStatus{
			Name: c.Name, URL: c.URL, Size: ws.Size, CosignedSize: ws.CosignedSize, CosignedAt: ws.CosignedAt,
			LastAttempt: ws.LastAttempt, LastError: ws.LastError, Refused: ws.Refused,
		})
	}
	return s
}

// CosignedCheckpoint returns the log's checkpoint cp with the cosignatures
// the witnesses gave for exactly that checkpoint (same size and root), and
// the names of those witnesses: the witnesses' latest cosignatures, or the
// last checkpoint that met the quorum when that is cp and has more. It
// returns cp.Note unchanged and nil when there are none. It reads only the
// Witnesser's state.
func (w *Witnesser) CosignedCheckpoint(cp ledger.Checkpoint) (signedNote string, cosigners []string) {
	w.mu.RLock()
	defer w.mu.RUnlock()
	signedNote = cp.Note
	for _, c := range w.clients {
		ws := w.st.Witnesses[c.Name]
		if ws.CosignedSize == cp.Size && ws.CosignedRoot == cp.Root && ws.Cosignature != "" {
			signedNote += ws.Cosignature
			cosigners = append(cosigners, c.Name)
		}
	}
	if lw := w.st.LastWitnessed; lw != nil && lw.Size == cp.Size && lw.Root == cp.Root && len(lw.Cosigners) > len(cosigners) {
		return lw.Note, slices.Clone(lw.Cosigners)
	}
	return signedNote, cosigners
}

// Notify asks a running Run loop for a round soon (after an append, say).
// It never blocks.
func (w *Witnesser) Notify() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// Run runs a round at once, then after every Notify and at least every
// interval (default 1 minute), each bounded by timeout (default 30 s) and
// starting at least Config.MinRoundInterval after the previous one, until
// ctx is done. Round errors are logged, never fatal.
func (w *Witnesser) Run(ctx context.Context, interval, timeout time.Duration) {
	if interval <= 0 {
		interval = time.Minute
	}
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		start := time.Now()
		rctx, cancel := context.WithTimeout(ctx, timeout)
		if _, err := w.Witness(rctx); err != nil && ctx.Err() == nil {
			w.cfg.Logger.Error("witness round failed", "err", err)
		}
		cancel()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-w.kick:
		}
		if d := w.cfg.MinRoundInterval - time.Since(start); d > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(d):
			}
		}
	}
}
