package web

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

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
	if err := leaseTokenHolds(r, req.Lease); err != nil {
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

// checkEnvelopes checks envelopes of evidence from agent a for run: each a
// DSSE envelope signed by the agent's own approved key (not another
// runner's), in the request token's scope, for a lane of the run on its
// backend, commit and repository, within what the agent declared (its
// lanes, backend, build repository and commit), naming the run and its
// current attempt (evidence.run), and started no earlier than the attempt
// could begin and finished no later than the server's clock, each less
// runs.MaxSkew; stamped and prepared as an append would. field(i) names the i-th envelope in errors. It does not check
// that lanes are distinct or complete (finishEvidence does).
func (s *Server) checkEnvelopes(r *http.Request, a runs.Agent, run runs.Run, envs []json.RawMessage, field func(int) string) ([]laneRecord, error) {
	tok, _ := TokenFrom(r.Context())
	recs, err := s.signedRecords(r, envs, true, true, tok, recorderFor(r), func(i int) string { return field(i) + "." })
	if err != nil {
		return nil, err
	}
	out := make([]laneRecord, len(recs))
	floor, now := attemptFloor(run), s.cfg.Now()
	for i, rec := range recs {
		p, err := ledger.PrepareOne(rec)
		if err != nil {
			return nil, prefixed(err, field(i)+".")
		}
		e := p.Evidence
		f := field(i)
		switch {
		case e.Signer == nil || e.Signer.Runner != a.Name || e.Signer.KeyID != a.KeyID:
			return nil, ledger.FieldError(f+".signatures", "must be signed by agent %s's own key", a.Name)
		case !slices.Contains(run.Lanes, e.Lane) && !slices.Contains(run.Lanes, ledger.LaneName(e.Lane)):
			return nil, ledger.FieldError(f+".lane", "lane %q is not a lane of run %s", e.Lane, run.ID)
		case e.Backend != run.Backend:
			return nil, ledger.FieldError(f+".backend", "run %s is for backend %s, not %s", run.ID, run.Backend, e.Backend)
		case run.Commit != "" && e.Subject.Commit != run.Commit:
			return nil, ledger.FieldError(f+".subject.commit", "run %s is for commit %s", run.ID, run.Commit)
		case run.Repository != "" && e.Subject.Repository != run.Repository:
			return nil, ledger.FieldError(f+".subject.repository", "run %s is for repository %s", run.ID, run.Repository)
		// What the agent declared binds as the run does: an agent records
		// only its own build, lanes and backend (TRUST.md), also for a run
		// that names no repository or commit. A registration stored
		// without a repository or commit (registration refuses one now)
		// matches no evidence: empty declares nothing, not "any".
		case !slices.Contains(a.Spec.Lanes, e.Lane) && !slices.Contains(a.Spec.Lanes, ledger.LaneName(e.Lane)):
			return nil, ledger.FieldError(f+".lane", "lane %q is not in agent %s's declared configuration", e.Lane, a.Name)
		case e.Backend != a.Backend:
			return nil, ledger.FieldError(f+".backend", "agent %s declared backend %s, not %s", a.Name, a.Backend, e.Backend)
		case a.Spec.Repository == "" || a.Spec.Commit == "":
			return nil, ledger.FieldError(f+".subject", "agent %s declared no build (spec.repository and spec.commit), so it records nothing: an admin removes it (`ledger agent remove %s`) and it registers again", a.Name, a.Name)
		case e.Subject.Repository != a.Spec.Repository:
			return nil, ledger.FieldError(f+".subject.repository", "agent %s declared builds of repository %s", a.Name, a.Spec.Repository)
		case e.Subject.Commit != a.Spec.Commit:
			return nil, ledger.FieldError(f+".subject.commit", "agent %s declared a build of commit %s", a.Name, a.Spec.Commit)
		}
		// The hardware a record names is the hardware approved: an agent
		// records lanes of its own device.
		if m := runs.DeviceChange(a.Spec.Device, e.Device); m != "" {
			return nil, ledger.FieldError(f+".device."+m, "agent %s registered (and was approved with) other hardware: %s", a.Name, deviceText(a.Spec.Device, m))
		}
		if err := checkAttemptOf(f, e, a, run, floor, now); err != nil {
			return nil, err
		}
		// appendFinish's Append does not prepare it again.
		out[i] = laneRecord{rec: p.Record(), id: p.ID, lane: e.Lane, passed: e.Status == ledger.StatusPassed}
	}
	return out, nil
}

// checkAttemptOf checks that evidence e (field f of agent a's finish or
// staging for run) was run for the attempt the agent holds: it names that
// run and attempt, so evidence of another run or attempt (a replay, or one
// set of lanes offered to two runs) is not this one's; it started no
// earlier than floor (attemptFloor) and finished no later than now, by
// the agent's clock, which its signed requests keep within runs.MaxSkew
// of the server's.
func checkAttemptOf(f string, e *ledger.Evidence, a runs.Agent, run runs.Run, floor, now time.Time) error {
	switch {
	case e.Run == nil:
		return ledger.FieldError(f+".run", "required: the run and attempt the lane was run for (run %s, attempt %d)", run.ID, run.Attempt)
	case e.Run.ID != run.ID || e.Run.Attempt != run.Attempt:
		return ledger.FieldError(f+".run", "names run %s attempt %d, not run %s attempt %d, whose lease agent %s holds: evidence run for another run or attempt is not recorded for this one", e.Run.ID, e.Run.Attempt, run.ID, run.Attempt, a.Name)
	case e.StartedAt.Before(floor.Add(-runs.MaxSkew)):
		return ledger.FieldError(f+".started_at", "is %s, before attempt %d of run %s could begin (%s, less %s of clock skew): a run records only lanes run under its lease", e.StartedAt.UTC().Format(time.RFC3339), run.Attempt, run.ID, floor.UTC().Format(time.RFC3339), runs.MaxSkew)
	case e.FinishedAt.After(now.Add(runs.MaxSkew)):
		return ledger.FieldError(f+".finished_at", "is %s, more than %s after the server's clock (%s)", e.FinishedAt.UTC().Format(time.RFC3339), runs.MaxSkew, now.UTC().Format(time.RFC3339))
	}
	return nil
}

// attemptFloor is the earliest time run's current attempt can have
// begun: when the previous attempt ended (its lease expired or its agent
// gave it up), or, for the first, when the run was queued.
func attemptFloor(run runs.Run) time.Time {
	floor := run.CreatedAt
	for _, at := range run.Attempts {
		if at.At.After(floor) {
			floor = at.At
		}
	}
	return floor
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

// deviceText names member m (from runs.DeviceChange) of registered device
// d as it was registered, escaped.
func deviceText(d ledger.Device, m string) string {
	switch m {
	case "model":
		return "model " + strconv.Quote(runs.Visible(d.Model))
	case "cores":
		return "cores " + strconv.Itoa(d.Cores)
	}
	k := strings.TrimPrefix(m, "attrs.")
	return k + " " + strconv.Quote(runs.Visible(d.Attrs[k]))
}
