package web

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/evidence-ledger/ledger/admit"
	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/runs"
	"github.com/go-chi/chi/v5"
)

// maxStagedBytes bounds the canonical bytes of all staged records held in
// memory; a staging beyond it is refused (409) and the agent sends that
// envelope in its finish instead.
const maxStagedBytes = 256 << 20

// maxRunWait bounds how long GET /api/v1/runs/{id}?wait= holds a request.
const maxRunWait = 30 * time.Second

// notifier wakes every waiter at once: woken returns a channel that is
// closed at the next wakeAll. Its zero value is ready; it is safe for
// concurrent use.
type notifier struct {
	mu sync.Mutex
	ch chan struct{}
}

func (n *notifier) woken() <-chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.ch == nil {
		n.ch = make(chan struct{})
	}
	return n.ch
}

func (n *notifier) wakeAll() {
	n.mu.Lock()
	if n.ch != nil {
		close(n.ch)
		n.ch = nil
	}
	n.mu.Unlock()
}

// stageKey is the attempt a staged record belongs to: run id, attempt and
// the lease id the agent held when it staged.
type stageKey struct {
	run     string
	attempt int
	lease   string
}

// laneRecord is one lane's checked and prepared evidence record: what the
// append takes, its content id, lane and whether it passed.
type laneRecord struct {
	rec    ledger.Record
	id     string
	lane   string
	passed bool
}

// stagedSet is the evidence staged for one attempt, by envelope digest,
// at most one per lane (a lane staged again replaces its record).
type stagedSet struct {
	byDigest map[string]laneRecord
	byLane   map[string]string // lane name -> digest
}

// stage holds evidence staged by agents in memory, never in the log: a
// server restart drops it, and a finish naming a dropped digest gets 409.
// It is safe for concurrent use.
type stage struct {
	mu    sync.Mutex
	sets  map[stageKey]*stagedSet
	bytes int
}

func (st *stage) put(k stageKey, digest string, lr laneRecord) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.sets == nil {
		st.sets = map[stageKey]*stagedSet{}
	}
	set := st.sets[k]
	if set == nil {
		set = &stagedSet{byDigest: map[string]laneRecord{}, byLane: map[string]string{}}
	}
	lane := ledger.LaneName(lr.lane)
	freed := 0
	if old, ok := set.byLane[lane]; ok {
		freed = len(set.byDigest[old].rec.Body)
	}
	if st.bytes-freed+len(lr.rec.Body) > maxStagedBytes {
		return ledger.Errorf(ledger.CodeConflict, "the server holds %d MiB of staged evidence, its bound: nothing was staged; send the envelope in the finish", maxStagedBytes>>20)
	}
	if old, ok := set.byLane[lane]; ok {
		delete(set.byDigest, old)
	}
	st.bytes += len(lr.rec.Body) - freed
	set.byDigest[digest], set.byLane[lane] = lr, digest
	st.sets[k] = set
	return nil
}

// take returns the staged records of k named by digests, in order; the
// i-th digest not held is a CodeConflict error naming staged[i]. The set
// stays staged until the finish's append succeeds (appendFinish drops it),
// so a finish that fails can be sent again.
func (st *stage) take(k stageKey, digests []string) ([]laneRecord, error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	set := st.sets[k]
	out := make([]laneRecord, len(digests))
	for i, d := range digests {
		lr, ok := laneRecord{}, false
		if set != nil {
			lr, ok = set.byDigest[d]
		}
		if !ok {
			return nil, &ledger.Error{Code: ledger.CodeConflict, Field: fmt.Sprintf("staged[%d]", i), Message: fmt.Sprintf(
				"%s is not staged for run %s attempt %d (the server restarted, or it was never staged under this lease): nothing was appended; send the full envelopes in evidence", clipText(d), k.run, k.attempt)}
		}
		out[i] = lr
	}
	return out, nil
}

// drop forgets every staged set of run id whose key keep does not accept
// (keep nil: all of them).
func (st *stage) drop(id string, keep func(stageKey) bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	for k, set := range st.sets {
		if k.run == id && (keep == nil || !keep(k)) {
			for _, lr := range set.byDigest {
				st.bytes -= len(lr.rec.Body)
			}
			delete(st.sets, k)
		}
	}
}

// keys lists the staged attempts.
func (st *stage) keys() []stageKey {
	st.mu.Lock()
	defer st.mu.Unlock()
	out := make([]stageKey, 0, len(st.sets))
	for k := range st.sets {
		out = append(out, k)
	}
	return out
}

// pruneStaged drops the staged sets whose lease is no longer held (the
// lease expired, the run was canceled or finished), so staged memory
// never outlives its attempt by more than one sweep.
func (s *Server) pruneStaged(ctx context.Context) {
	rs := s.runs
	for _, k := range rs.staged.keys() {
		r, err := rs.store.Get(ctx, k.run)
		if errors.Is(err, ledger.ErrNotFound) || err == nil && (r.State == runs.Canceling || r.LeaseID != k.lease || r.Attempt != k.attempt || runs.Final(r.State) || !s.cfg.Now().Before(r.LeaseUntil)) {
			rs.staged.drop(k.run, func(x stageKey) bool { return x != k })
		}
	}
}

// handleAgentStage is POST /api/v1/agent/runs/{id}/evidence: the holder
// of the run's lease stages one lane's DSSE envelope. The envelope gets
// every check of a finish's (checkEnvelopes) and the prepared record is
// kept in memory for the (run, attempt, lease); nothing is appended.
// 409 when the lease is not held or the run is being canceled, nothing
// staged.
func (s *Server) handleAgentStage(w http.ResponseWriter, r *http.Request) {
	a, body, err := s.agentBody(w, r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	var req runs.StageRequest
	if err := ledger.DecodeStrict(body, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	if len(req.Envelope) == 0 || string(req.Envelope) == "null" {
		s.writeError(w, r, ledger.FieldError("envelope", "required: one lane's DSSE envelope of evidence"))
		return
	}
	id := chi.URLParam(r, "id")
	rs := s.runs
	if err := admit.LeaseHolder(principalOf(r), req.Lease); err != nil {
		s.writeError(w, r, err)
		return
	}
	run, err := rs.store.CheckLease(r.Context(), id, a.Name, req.Attempt, req.Lease)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if run.State == runs.Canceling {
		s.writeError(w, r, ledger.Errorf(ledger.CodeConflict, "run %s is being canceled: nothing was staged", id))
		return
	}
	lrs, err := s.checkEnvelopes(r, a, run, []json.RawMessage{req.Envelope}, func(int) string { return "envelope" })
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	digest := runs.EnvelopeDigest(req.Envelope)
	k := stageKey{run: id, attempt: req.Attempt, lease: req.Lease}
	if err := rs.staged.put(k, digest, lrs[0]); err != nil {
		s.writeError(w, r, err)
		return
	}
	// A cancel, expiry or finish between the lease check and the put would
	// leave this set behind: check again and drop it (pruneStaged would
	// otherwise drop it at the next sweep).
	if cur, err := rs.store.CheckLease(r.Context(), id, a.Name, req.Attempt, req.Lease); err != nil || cur.State == runs.Canceling {
		rs.staged.drop(id, func(x stageKey) bool { return x != k })
		if err == nil {
			err = ledger.Errorf(ledger.CodeConflict, "run %s is being canceled: nothing was staged", id)
		}
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, http.StatusOK, runs.StageAnswer{Digest: digest, Lane: lrs[0].lane, Evidence: lrs[0].id})
}

// checkEnvelopes admits envelopes of evidence from agent a for run
// (admit.RunEvidence: the agent's own key, the run's and the agent's
// declared lanes, backend and build, the attempt's time window; stamped
// and prepared as an append would). field(i) names the i-th envelope in
// errors. It does not check that lanes are distinct or complete
// (finishEvidence does).
func (s *Server) checkEnvelopes(r *http.Request, a runs.Agent, run runs.Run, envs []json.RawMessage, field func(int) string) ([]laneRecord, error) {
	tok, _ := TokenFrom(r.Context())
	recs, err := admit.RunEvidence(r.Context(), s.store, admit.ByAgent(a.Name, tok), a, run, envs, s.cfg.Now(), field)
	if err != nil {
		return nil, err
	}
	out := make([]laneRecord, len(recs))
	for i, rr := range recs {
		out[i] = laneRecord{rec: rr.Record, id: rr.ID, lane: rr.Lane, passed: rr.Passed}
	}
	return out, nil
}

// runVersion is the version GET /api/v1/runs/{id} answers a run with: the
// first 16 bytes of the SHA-256 of its JSON, in hex, so any change of what
// the answer shows (state, progress, attempts, lease end) is a new version.
func runVersion(r runs.Run) string {
	b, _ := json.Marshal(r)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:16])
}

// runWait reads GET /api/v1/runs/{id}'s wait and since: wait a Go
// duration ("5s", capped at maxRunWait), since a version a previous answer
// carried. Both empty: no wait.
func runWait(r *http.Request) (time.Duration, string, error) {
	q := r.URL.Query()
	since := q.Get("since")
	ws := q.Get("wait")
	if ws == "" {
		if since != "" {
			return 0, "", ledger.FieldError("wait", "required with since: how long to wait for a change, e.g. 5s")
		}
		return 0, "", nil
	}
	d, err := time.ParseDuration(ws)
	if err != nil || d <= 0 {
		return 0, "", ledger.FieldError("wait", "must be a positive duration such as 5s (at most %s)", maxRunWait)
	}
	if len(since) > 64 || strings.Trim(since, "0123456789abcdef") != "" {
		return 0, "", ledger.FieldError("since", "must be the version of a previous answer (hex)")
	}
	return min(d, maxRunWait), since, nil
}
