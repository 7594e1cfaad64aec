package web

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/evidence-ledger/ledger/admit"
	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/runs"
	"github.com/evidence-ledger/ledger/verify"
	"github.com/go-chi/chi/v5"
)

// runState is the server's part of the runs service: the store, the
// lease settings, the wake-up of long polls, and the mutex that orders
// every change that appends a run's outcome (finish, cancel of a queued
// run, lease expiry) so that a finish and an expiry of one attempt cannot
// both happen.
type runState struct {
	store    *runs.Store
	ttl      time.Duration
	pollWait time.Duration
	mu       sync.Mutex // outcome appends and the state changes beside them
	planMu   sync.Mutex // the release run form's plan-and-queue (no duplicate on a double press)
	claimMu  sync.Mutex // claims, so one agent's concurrent polls take one lease (runs.Store.Claim)
	wakeMu   sync.Mutex
	wake     chan struct{} // closed and replaced when a run becomes queued
	changed  notifier      // woken when any run changes (GET /runs/{id}?wait= waits on it)
	staged   stage         // evidence staged by lease holders, appended only by their finish
}

func (rs *runState) woken() <-chan struct{} {
	rs.wakeMu.Lock()
	defer rs.wakeMu.Unlock()
	return rs.wake
}

func (rs *runState) wakeAll() {
	rs.wakeMu.Lock()
	close(rs.wake)
	rs.wake = make(chan struct{})
	rs.wakeMu.Unlock()
}

func (s *Server) runsOrErr() (*runState, error) {
	if s.runs == nil {
		return nil, ledger.Errorf(ledger.CodeNotFound, "this server runs no runs service (it was started without a run store)")
	}
	return s.runs, nil
}

// StartRuns appends the outcomes of final runs whose outcome leaf is
// missing (a crash between the state change and the append), then ends
// expired leases every sweep until ctx ends. A server without a run store
// returns at once.
func (s *Server) StartRuns(ctx context.Context, sweep time.Duration) error {
	if s.runs == nil {
		return nil
	}
	if err := s.recordUnrecorded(ctx); err != nil {
		return fmt.Errorf("runs: record pending outcomes: %w", err)
	}
	if sweep <= 0 {
		sweep = max(s.runs.ttl/4, 50*time.Millisecond)
	}
	go func() {
		t := time.NewTicker(sweep)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if err := s.expireLeases(ctx); err != nil && ctx.Err() == nil {
					s.log.Warn("runs: lease sweep failed", "err", err)
				}
			}
		}
	}()
	return nil
}

func (s *Server) recordUnrecorded(ctx context.Context) error {
	s.runs.mu.Lock()
	defer s.runs.mu.Unlock()
	pending, err := s.runs.store.Unrecorded(ctx)
	if err != nil {
		return err
	}
	for _, r := range pending {
		if err := s.appendOutcome(ctx, r); err != nil {
			return err
		}
	}
	return s.adoptLoggedOutcomes(ctx)
}

// adoptLoggedOutcomes ends the active runs whose outcome leaf is already in
// the log (a crash between a finish's append and its row update): the
// row takes the leaf's final state, attempts and evidence, so the run is
// not queued again and no second set of evidence is recorded. It reads
// the run-outcome leaves only when some run is active.
func (s *Server) adoptLoggedOutcomes(ctx context.Context) error {
	act, err := s.runs.store.List(ctx, "active", 1000)
	if err != nil || len(act) == 0 {
		return err
	}
	want := map[string]bool{}
	for _, r := range act {
		want[r.ID] = true
	}
	f := ledger.EntryFilter{Kind: ledger.KindRunOutcome, Limit: 1000}
	for {
		es, next, err := s.store.Entries(ctx, f)
		if err != nil {
			return err
		}
		for _, e := range es {
			var o ledger.RunOutcome
			if json.Unmarshal(e.Body, &o) != nil || !want[o.Run] {
				continue
			}
			if err := s.runs.store.Adopt(ctx, o, e.ID); err != nil {
				return err
			}
			s.log.Info("runs: adopted a logged outcome", "run", o.Run, "state", o.State, "entry", e.ID)
			delete(want, o.Run)
		}
		if next == "" || len(want) == 0 {
			return nil
		}
		f.Cursor = next
	}
}

// expireLeases ends the leases past their end (runs.Store.ExpireLeases)
// and appends the outcomes of the runs that became final.
func (s *Server) expireLeases(ctx context.Context) error {
	s.runs.mu.Lock()
	defer s.runs.mu.Unlock()
	final, requeued, err := s.runs.store.ExpireLeases(ctx)
	if requeued > 0 {
		s.runs.wakeAll()
	}
	if requeued > 0 || len(final) > 0 {
		s.runs.changed.wakeAll()
	}
	s.pruneStaged(ctx)
	for _, r := range final {
		if aerr := s.appendOutcome(ctx, r); aerr != nil {
			err = errors.Join(err, aerr)
		}
	}
	return err
}

// appendOutcome appends the run-outcome leaf of a final run with no
// evidence (canceled, expired) and stores its id. Caller holds runs.mu.
func (s *Server) appendOutcome(ctx context.Context, r runs.Run) error {
	body, err := ledger.CanonicalBody(new(r.Outcome(s.cfg.Now())))
	if err != nil {
		return err
	}
	res, err := s.store.Append(ctx, []ledger.Record{{Kind: ledger.KindRunOutcome, Body: body}}, "run-outcome:"+r.ID)
	if err != nil {
		return err
	}
	s.metrics.appended.WithLabelValues(string(ledger.KindRunOutcome)).Inc()
	return s.runs.store.SetOutcome(ctx, r.ID, res.Entries[0].ID)
}

// RunAnswer is a run as the API answers it. Version, in the answers of
// GET /api/v1/runs/{id}, is the run's version (32 hex): passed back as
// since with wait, the request is answered as soon as the run's version
// differs, or when wait ends.
type RunAnswer struct {
	Run     runs.Run `json:"run"`
	Version string   `json:"version,omitempty"`
}

func (s *Server) handleCreateRun(w http.ResponseWriter, r *http.Request) {
	var spec runs.Spec
	if err := s.decodeJSON(w, r, &spec); err != nil {
		s.writeError(w, r, err)
		return
	}
	t, _ := TokenFrom(r.Context())
	run, err := s.queueRun(r.Context(), t, spec)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, http.StatusCreated, RunAnswer{Run: run})
}

// queueRun validates spec, checks that token t's scope covers every lane
// of it on its backend and repository, queues it as created by t and wakes
// the agents' long polls. It is the one path that queues a run: POST
// /api/v1/runs and the release page's run form both call it. Errors:
// CodeNotFound without a run store, CodeInvalid naming the field,
// CodeForbidden naming the member out of t's scope (nothing queued).
func (s *Server) queueRun(ctx context.Context, t ledger.Token, spec runs.Spec) (runs.Run, error) {
	rs, err := s.runsOrErr()
	if err != nil {
		return runs.Run{}, err
	}
	if err := spec.Validate(); err != nil {
		return runs.Run{}, err
	}
	if err := admit.RunInScope(t, spec.Repository, spec.Lanes, spec.Backend); err != nil {
		return runs.Run{}, err
	}
	run, err := rs.store.Create(ctx, spec, t.Name)
	if err != nil {
		return run, err
	}
	rs.wakeAll()
	return run, nil
}

func (s *Server) handleListRuns(w http.ResponseWriter, r *http.Request) {
	rs, err := s.runsOrErr()
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	state := r.URL.Query().Get("state")
	switch state {
	case "", "active", runs.Queued, runs.Leased, runs.Running, runs.Canceling, runs.Done, runs.Failed, runs.Canceled, runs.Expired:
	default:
		s.writeError(w, r, ledger.FieldError("state", "must be active or a run state (queued, leased, running, canceling, done, failed, canceled, expired)"))
		return
	}
	limit, err := queryLimit(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	list, err := rs.store.List(r.Context(), state, limit)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, http.StatusOK, map[string]any{"runs": list})
}

func (s *Server) handleGetRun(w http.ResponseWriter, r *http.Request) {
	rs, err := s.runsOrErr()
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	wait, since, err := runWait(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	id := chi.URLParam(r, "id")
	var deadline <-chan time.Time
	if wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		deadline = t.C
	}
	for {
		woken := rs.changed.woken()
		run, err := rs.store.Get(r.Context(), id)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		v := runVersion(run)
		if wait == 0 || v != since || runs.Final(run.State) {
			w.Header().Set("ETag", `"`+v+`"`)
			s.writeJSON(w, http.StatusOK, RunAnswer{Run: run, Version: v})
			return
		}
		select {
		case <-woken:
		case <-deadline:
			wait = 0 // answer the run as it is
		case <-r.Context().Done():
			return
		}
	}
}

func (s *Server) handleCancelRun(w http.ResponseWriter, r *http.Request) {
	rs, err := s.runsOrErr()
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	id := chi.URLParam(r, "id")
	cur, err := rs.store.Get(r.Context(), id)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	t, _ := TokenFrom(r.Context())
	if err := admit.CancelInScope(t, id, cur.Repository, cur.Lanes, cur.Backend); err != nil {
		s.writeError(w, r, err)
		return
	}
	rs.mu.Lock()
	rs.staged.drop(id, nil)
	run, final, err := rs.store.Cancel(r.Context(), id)
	rs.changed.wakeAll()
	if err == nil && final {
		err = s.appendOutcome(r.Context(), run)
		if err == nil {
			run, err = rs.store.Get(r.Context(), id)
		}
	}
	rs.mu.Unlock()
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, http.StatusOK, RunAnswer{Run: run})
}

// agentsWithApproval lists the registered agents with Approved set from
// the runner-key registry and Online from their last heartbeat, their
// text fields runs.Visible (rows stored before registration refused
// control characters show them escaped).
func (s *Server) agentsWithApproval(ctx context.Context) ([]runs.AgentInfo, error) {
	rs, err := s.runsOrErr()
	if err != nil {
		return nil, err
	}
	list, err := rs.store.Agents(ctx)
	if err != nil {
		return nil, err
	}
	reg, err := ledger.LoadRunnerKeys(ctx, s.store, 0)
	if err != nil {
		return nil, err
	}
	out := make([]runs.AgentInfo, len(list))
	now := s.cfg.Now()
	for i, a := range list {
		live, ok := reg.Live(a.Name)
		a.Approved = ok && live.Kind == ledger.RunnerKindAgent && live.KeyID == a.KeyID
		a.SpecDigest = runs.SpecDigestOf(a)
		out[i] = runs.AgentInfo{Agent: a.Visible(), Online: now.Sub(a.LastSeen) < 2*rs.pollWait+rs.ttl}
		if a.Approved {
			out[i].ApprovedSpec = live.SpecDigest
		}
	}
	return out, nil
}

func (s *Server) handleListAgents(w http.ResponseWriter, r *http.Request) {
	list, err := s.agentsWithApproval(r.Context())
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, http.StatusOK, map[string]any{"agents": list})
}

// ApproveAnswer is the answer of POST /api/v1/agents/{name}/approve: the
// runner-key leaf's state and entry, and the registration approved (its
// SpecDigest set, its text fields runs.Visible).
type ApproveAnswer struct {
	RunnerAnswer
	Agent runs.Agent `json:"agent"`
}

// ApproveAgent appends the runner-key leaf (kind agent) that approves
// the key agent name registered with, by the admin named by, the leaf
// carrying the registration's spec digest, and returns the registration
// it approved. req.KeyID, when not "", must be that
// key's id, and req.SpecDigest, when not "", must name the registration's
// spec digest (runs.MatchSpecDigest): the approval is refused with
// CodeConflict (nothing appended) otherwise, so an admin who checked the
// key id and spec approves that registration or nothing. The check and
// the append hold the store's agent lock, which registration holds too,
// so no registration changes in between. CodeInvalid when
// req.SpecDigest is too short or not hex; CodeNotFound when no agent of
// that name registered; CodeConflict when the name has another live key.
// Approving the live key again appends nothing.
func ApproveAgent(ctx context.Context, st admit.KeyLog, rs *runs.Store, name string, req runs.ApproveRequest, by string) (ledger.RunnerState, *ledger.AppendResult, runs.Agent, error) {
	if d := strings.TrimPrefix(strings.ToLower(strings.TrimSpace(req.SpecDigest)), "sha256:"); req.SpecDigest != "" && (len(d) != 64 || !ledger.LowerHex(d)) {
		return ledger.RunnerState{}, nil, runs.Agent{}, ledger.FieldError("spec_digest", "must be the whole spec digest `ledger agent list` shows: sha256: and 64 hex digits (a prefix is not enough)")
	}
	defer rs.LockAgents()()
	a, err := rs.GetAgent(ctx, name)
	if err != nil {
		return ledger.RunnerState{}, nil, a, err
	}
	a.SpecDigest = runs.SpecDigestOf(a)
	if req.KeyID != "" && req.KeyID != a.KeyID {
		return ledger.RunnerState{}, nil, a, &ledger.Error{Code: ledger.CodeConflict, Field: "key_id", Message: fmt.Sprintf(
			"agent %q is registered with key %s, not %s: nothing was approved; if that is not the agent's key, remove the registration (`ledger agent remove %s`)", name, a.KeyID, clipText(req.KeyID), name)}
	}
	if req.SpecDigest != "" && !runs.MatchSpecDigest(req.SpecDigest, a.SpecDigest) {
		// The current digest is not in the message: an admin who copied
		// it from here would approve what they did not check. It is read,
		// beside the registration it digests, from `ledger agent list`.
		v := a.Visible()
		return ledger.RunnerState{}, nil, a, &ledger.Error{Code: ledger.CodeConflict, Field: "spec_digest", Message: fmt.Sprintf(
			"%s is not agent %q's current spec digest (its registration now declares repository %s, commit %s, lanes %s, backend %s, labels %s): nothing was approved; compare the registration and its spec digest in `ledger agent list` before approving",
			clipText(req.SpecDigest), name, v.Spec.Repository, v.Spec.Commit, strings.Join(v.Spec.Lanes, ","), v.Backend, runs.SortedLabels(v.Labels))}
	}
	st2, res, err := admit.AddKey(ctx, st, name, []byte(a.PublicKey), by, ledger.RunnerKindAgent, a.SpecDigest, a.Labels)
	a.Approved = err == nil
	return st2, res, a, err
}

func (s *Server) handleApproveAgent(w http.ResponseWriter, r *http.Request) {
	rs, err := s.runsOrErr()
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	who, err := actorOf(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if err := requireJSON(r); err != nil {
		s.writeError(w, r, err)
		return
	}
	body, err := s.readBody(w, r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	var req runs.ApproveRequest
	if len(bytes.TrimSpace(body)) > 0 {
		if err := ledger.DecodeStrict(body, &req); err != nil {
			s.writeError(w, r, err)
			return
		}
	}
	st, res, a, err := ApproveAgent(r.Context(), s.store, rs.store, chi.URLParam(r, "name"), req, who.Name)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	status, ans := s.runnerAnswerOf(st, res)
	s.writeJSON(w, status, ApproveAnswer{RunnerAnswer: ans, Agent: a.Visible()})
}

// RemoveAgent removes agent name, by the admin named by: when the name's
// live key is an agent key, its revocation is appended first (reason
// "agent removed"), then the registration row is deleted, so the name is
// free for a registration with another key, which needs approving again.
// A revoked key is never approved again: the agent registers with a new
// key. CodeNotFound when there is neither a registration nor a live
// agent key of that name; a live key of a plain runner is left alone.
func RemoveAgent(ctx context.Context, st admit.KeyLog, rs *runs.Store, name, by string) (runs.RemoveAnswer, error) {
	out := runs.RemoveAnswer{Name: name}
	reg, err := ledger.LoadRunnerKeys(ctx, st, 0)
	if err != nil {
		return out, err
	}
	if live, ok := reg.Live(name); ok && live.Kind == ledger.RunnerKindAgent {
		_, res, err := admit.RevokeRunner(ctx, st, name, "agent removed", by)
		if err != nil {
			return out, err
		}
		out.Revoked, out.Entry = live.KeyID, res.Entries[0].ID
	}
	if out.Registered, err = rs.RemoveAgent(ctx, name); err != nil {
		return out, err
	}
	if !out.Registered && out.Revoked == "" {
		return out, ledger.NotFound("no agent %q registered", clipText(name))
	}
	return out, nil
}

func (s *Server) handleRemoveAgent(w http.ResponseWriter, r *http.Request) {
	rs, err := s.runsOrErr()
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	who, err := actorOf(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	out, err := RemoveAgent(r.Context(), s.store, rs.store, chi.URLParam(r, "name"), who.Name)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, http.StatusOK, out)
}

// agentRequest reads the body of an agent's signed request and checks
// its signature: against the approved agent key of the named agent (a
// live runner key of kind agent whose key id the agent registered with),
// or, for registration (pub not nil), against the key the body carries.
// Unapproved agents are refused with 403 and get nothing.
func (s *Server) agentRequest(w http.ResponseWriter, r *http.Request, pub ed25519.PublicKey, body []byte) (runs.Agent, error) {
	name := r.Header.Get(runs.HeaderAgent)
	if !ledger.ValidRunnerName(name) {
		return runs.Agent{}, ledger.Errorf(ledger.CodeUnauthorized, "agent requests carry %s (a runner name) and a signature: run `ledger agent`", runs.HeaderAgent)
	}
	path := r.URL.Path
	if i := strings.Index(path, "/api/v1/"); i >= 0 {
		path = path[i+len("/api/v1"):]
	}
	var a runs.Agent
	if pub == nil {
		var err error
		if a, err = s.runs.store.GetAgent(r.Context(), name); err != nil {
			return a, ledger.Errorf(ledger.CodeForbidden, "agent %q is not registered: start `ledger agent`, then an admin approves it", name)
		}
		reg, err := ledger.LoadRunnerKeys(r.Context(), s.store, 0)
		if err != nil {
			return a, err
		}
		live, ok := reg.Live(name)
		if ok && live.Kind != ledger.RunnerKindAgent {
			return a, ledger.Errorf(ledger.CodeForbidden, "agent %q: the name is a plain runner's (key %s), which is not an agent's approval: an admin revokes it (`ledger runner revoke %s`) and the agent registers again with a new key (a revoked key is never approved again), or the agent takes another --name", name, live.KeyID, name)
		}
		if !ok || live.KeyID != a.KeyID {
			return a, ledger.Errorf(ledger.CodeForbidden, "agent %q's key %s is not approved: an admin checks its registration (`ledger agent list`) and runs `ledger agent approve %s --key-id %s --spec %s`", name, a.KeyID, name, a.KeyID, runs.SpecDigestOf(a))
		}
		if pub, err = verify.ParseRunnerPublicKey([]byte(live.PublicKey)); err != nil {
			return a, err
		}
	}
	if err := runs.VerifyRequest(pub, r.Method, path, name, r.Header.Get(runs.HeaderAgentDate), r.Header.Get(runs.HeaderAgentSig), s.cfg.Now(), body); err != nil {
		s.authFailed(w, r)
		return a, ledger.Errorf(ledger.CodeUnauthorized, "agent request refused: %v", err)
	}
	return a, nil
}

func (s *Server) handleAgentRegister(w http.ResponseWriter, r *http.Request) {
	rs, err := s.runsOrErr()
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if err := requireJSON(r); err != nil {
		s.writeError(w, r, err)
		return
	}
	body, err := s.readBody(w, r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	var req runs.RegisterRequest
	if err := ledger.DecodeStrict(body, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	if err := req.Validate(); err != nil {
		s.writeError(w, r, err)
		return
	}
	if req.Name != r.Header.Get(runs.HeaderAgent) {
		s.writeError(w, r, ledger.FieldError("name", "must equal the %s header", runs.HeaderAgent))
		return
	}
	pub, err := verify.ParseRunnerPublicKey([]byte(req.PublicKey))
	if err != nil {
		s.writeError(w, r, ledger.FieldError("public_key", "%v", err))
		return
	}
	if _, err := s.agentRequest(w, r, pub, body); err != nil {
		s.writeError(w, r, err)
		return
	}
	// The agent records through this token: a build or backend the token
	// may not record for would never be served.
	tok, _ := TokenFrom(r.Context())
	if err := admit.AgentInScope(tok, req.Spec.Repository, req.Backend); err != nil {
		s.writeError(w, r, err)
		return
	}
	if req.Labels == nil {
		req.Labels = map[string]string{}
	}
	a := runs.Agent{Name: req.Name, KeyID: verify.RunnerKeyID(pub), PublicKey: verify.AuthorizedKey(pub), Backend: req.Backend, Labels: req.Labels, Spec: req.Spec, Health: runs.CleanHealth(req.Health)}
	if a, err = s.registerAgent(r.Context(), rs.store, a); err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, http.StatusOK, map[string]any{"agent": a})
}

// registerAgent stores registration a (its signature checked) and returns
// the stored registration, with its registration and heartbeat times and
// Approved set. CodeConflict, nothing stored, when the name has another
// live key, is registered with another key (runs.Store.Register), or is
// approved with a's key and a changes its hardware (runs.HardwareChange,
// the error naming the field).
func (s *Server) registerAgent(ctx context.Context, rs *runs.Store, a runs.Agent) (runs.Agent, error) {
	defer rs.LockAgents()()
	reg, err := ledger.LoadRunnerKeys(ctx, s.store, 0)
	if err != nil {
		return a, err
	}
	// A key that can never be approved for this name is refused now, not
	// left waiting: a revoked key is never approved again, and a key is
	// one name's.
	for _, k := range reg.Runners {
		switch {
		case k.KeyID != a.KeyID:
		case k.Revoked:
			return a, ledger.Errorf(ledger.CodeConflict, "key %s was revoked (runner %q, entry %s) and is never approved again: the agent needs a new key (`ledger runner keygen`)", a.KeyID, k.Name, k.Entry)
		case k.Name != a.Name:
			return a, ledger.Errorf(ledger.CodeConflict, "key %s is runner %q's, and a key is one name's: register as %q, or with a new key", a.KeyID, k.Name, k.Name)
		}
	}
	live, ok := reg.Live(a.Name)
	if ok && live.KeyID != a.KeyID {
		how := "ledger agent remove " + a.Name
		if live.Kind != ledger.RunnerKindAgent {
			how = "ledger runner revoke " + a.Name
		}
		return a, ledger.Errorf(ledger.CodeConflict, "name %q has another live key (%s): pick another agent name, or an admin frees it first (`%s`)", a.Name, live.KeyID, how)
	}
	if ok && live.Kind != ledger.RunnerKindAgent {
		return a, ledger.Errorf(ledger.CodeConflict, "key %s is the key of runner %q (a plain runner, entry %s), which is never approved as an agent: an agent registers with a key of its own (`ledger runner keygen`) under another name", a.KeyID, a.Name, live.Entry)
	}
	approved := ok
	if err := waitingRoom(ctx, rs, reg, a, approved); err != nil {
		return a, err
	}
	if approved {
		if err := approvedHardware(ctx, rs, live, a); err != nil {
			return a, err
		}
	}
	if err := rs.Register(ctx, a); err != nil {
		return a, err
	}
	got, err := rs.GetAgent(ctx, a.Name)
	got.Approved, got.SpecDigest = approved, runs.SpecDigestOf(got)
	return got, err
}

// approvedHardware returns a CodeConflict error, naming the field, when
// registration a of an approved agent (live, its approval in the log)
// declares other hardware than the approval was for: other labels than the
// approval recorded (when it recorded any), or a change (runs.HardwareChange) from its stored
// registration. With no stored registration (a store copied or restored
// without its agents table, or a row deleted) the stored one cannot be
// compared with, and a is taken only when it is exactly the registration
// approved: its spec digest is the one the approval recorded.
func approvedHardware(ctx context.Context, rs *runs.Store, live ledger.RunnerState, a runs.Agent) error {
	again := fmt.Sprintf("an admin removes it (`ledger agent remove %s`, which revokes its key) and approves it again registered with a new key", a.Name)
	// An approval made before approvals recorded labels records none;
	// its agent's labels are held to the stored row alone (and count for
	// no agent_labels gate).
	if len(live.Labels) > 0 && !maps.Equal(live.Labels, a.Labels) {
		return &ledger.Error{Code: ledger.CodeConflict, Field: "labels", Message: fmt.Sprintf(
			"agent %q was approved (entry %s) with labels %s, and this registration declares %s: nothing was changed; %s", a.Name, live.Entry, labelsText(live.Labels), labelsText(a.Labels), again)}
	}
	prev, err := rs.GetAgent(ctx, a.Name)
	if errors.Is(err, ledger.ErrNotFound) {
		if d := runs.SpecDigestOf(a); d != live.SpecDigest {
			return &ledger.Error{Code: ledger.CodeConflict, Field: "spec", Message: fmt.Sprintf(
				"agent %q is approved (entry %s), but this store holds no registration of it to compare with (copied or restored without its agents?), and this registration is not the one approved (spec digest %s, approved %s): nothing was registered; the agent registers exactly as approved, or %s", a.Name, live.Entry, d, orNone(live.SpecDigest), again)}
		}
		return nil
	}
	if err != nil {
		return err
	}
	if field := runs.HardwareChange(prev, a); field != "" {
		return &ledger.Error{Code: ledger.CodeConflict, Field: field, Message: fmt.Sprintf(
			"agent %q is approved for the hardware it registered with, and this registration changes %s: nothing was changed; %s", a.Name, field, again)}
	}
	return nil
}

// labelsText is labels l as runs.SortedLabels, or "none".
func labelsText(l map[string]string) string {
	if len(l) == 0 {
		return "none"
	}
	return runs.SortedLabels(l)
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// MaxWaitingAgents is how many registrations may wait for approval at
// once: a new name past it is refused until an admin approves or removes
// some, so record tokens cannot grow the agents table without bound.
const MaxWaitingAgents = 256

// waitingRoom returns a CodeConflict error when a's key is registered
// under another name (a key is one name's, approved or not), or when a is
// not approved, its name is not registered yet and MaxWaitingAgents
// registrations already wait for approval (no live agent key in reg).
func waitingRoom(ctx context.Context, rs *runs.Store, reg ledger.RunnerRegistry, a runs.Agent, approved bool) error {
	all, err := rs.Agents(ctx)
	if err != nil {
		return err
	}
	waiting, again := 0, approved
	for _, x := range all {
		if x.Name == a.Name {
			again = true
			continue
		}
		if x.KeyID == a.KeyID {
			return ledger.Errorf(ledger.CodeConflict, "key %s is already registered as agent %q, and a key is one name's: register as %q, or with a new key (`ledger runner keygen`); nothing was registered", a.KeyID, x.Name, x.Name)
		}
		// A row whose name is a plain runner's now can never be approved
		// (its polls are refused): it does not hold a waiting place.
		if live, ok := reg.Live(x.Name); !ok || live.Kind == ledger.RunnerKindAgent && live.KeyID != x.KeyID {
			waiting++
		}
	}
	if !again && waiting >= MaxWaitingAgents {
		return ledger.Errorf(ledger.CodeConflict, "%d registrations are waiting for approval (at most %d): an admin approves or removes some (`ledger agent list`, `ledger agent remove NAME`) before a new agent registers; nothing was registered", waiting, MaxWaitingAgents)
	}
	return nil
}

// agentBody reads and authenticates an agent request (approved key).
func (s *Server) agentBody(w http.ResponseWriter, r *http.Request) (runs.Agent, []byte, error) {
	if _, err := s.runsOrErr(); err != nil {
		return runs.Agent{}, nil, err
	}
	body, err := s.readBody(w, r)
	if err != nil {
		return runs.Agent{}, nil, err
	}
	a, err := s.agentRequest(w, r, nil, body)
	return a, body, err
}

// agentServes is the filter of runs agent a may take with token t: its
// backend, labels and build (runs.Serves), every lane in its own
// configuration, and every lane in t's scope.
func agentServes(a runs.Agent, t ledger.Token) func(runs.Run) bool {
	return func(r runs.Run) bool {
		if !runs.Serves(r, a.Backend, a.Labels, a.Spec.Commit) {
			return false
		}
		if r.Repository != "" && r.Repository != a.Spec.Repository {
			return false
		}
		for _, l := range r.Lanes {
			if !slices.Contains(a.Spec.Lanes, l) && !slices.Contains(a.Spec.Lanes, ledger.LaneName(l)) {
				return false
			}
			if _, ok := t.Covers(a.Spec.Repository, l, r.Backend); !ok {
				return false
			}
		}
		return true
	}
}

func (s *Server) handleAgentPoll(w http.ResponseWriter, r *http.Request) {
	a, body, err := s.agentBody(w, r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	var req runs.PollRequest
	if len(bytes.TrimSpace(body)) > 0 {
		if err := ledger.DecodeStrict(body, &req); err != nil {
			s.writeError(w, r, err)
			return
		}
	}
	rs := s.runs
	if err := s.releaseHeld(r.Context(), a); err != nil {
		s.writeError(w, r, err)
		return
	}
	wait := min(time.Duration(req.WaitMS)*time.Millisecond, rs.pollWait)
	t, _ := TokenFrom(r.Context())
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	for {
		_ = rs.store.Seen(r.Context(), a.Name, req.Health, "")
		woken := rs.woken()
		rs.claimMu.Lock()
		run, err := rs.store.ClaimFor(r.Context(), a.Name, t.ID, agentServes(a, t), rs.ttl)
		rs.claimMu.Unlock()
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		if run != nil {
			rs.changed.wakeAll()
			_ = rs.store.Seen(r.Context(), a.Name, "", run.ID)
			s.writeJSON(w, http.StatusOK, runs.LeaseAnswer{Run: *run, Attempt: run.Attempt, Lease: run.LeaseID, LeaseUntil: run.LeaseUntil, LeaseTTLMS: rs.ttl.Milliseconds()})
			return
		}
		select {
		case <-woken:
		case <-deadline.C:
			w.WriteHeader(http.StatusNoContent)
			return
		case <-r.Context().Done():
			return
		}
	}
}

// releaseHeld ends every lease agent a holds when it polls for a run: an
// agent runs one run at a time, so one that polls has given up what it
// held (it restarted, or could not finish). Each attempt is recorded as an
// infrastructure failure and its run queued again at once rather than
// when the lease would have run out (or made final: expired with its
// attempts used up, canceled when canceling, its outcome appended).
func (s *Server) releaseHeld(ctx context.Context, a runs.Agent) error {
	rs := s.runs
	rs.mu.Lock()
	defer rs.mu.Unlock()
	held, err := rs.store.HeldBy(ctx, a.Name)
	if err != nil {
		return err
	}
	for _, run := range held {
		attempt := ledger.RunAttempt{Attempt: run.Attempt, Agent: a.Name, At: s.cfg.Now().UTC(),
			Reason: fmt.Sprintf("agent %s polled for a new run while holding this lease: it restarted or gave the attempt up", a.Name)}
		if _, _, err := s.finishInfrastructure(ctx, run, attempt); err != nil && !errors.Is(err, runs.ErrLeaseNotHeld) {
			return err
		}
	}
	return nil
}

func (s *Server) handleAgentHeartbeat(w http.ResponseWriter, r *http.Request) {
	a, body, err := s.agentBody(w, r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	var req runs.HeartbeatRequest
	if err := ledger.DecodeStrict(body, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	id := chi.URLParam(r, "id")
	if err := admit.LeaseHolder(principalOf(r), req.Lease); err != nil {
		s.writeError(w, r, err)
		return
	}
	run, err := s.runs.store.Extend(r.Context(), id, a.Name, req.Attempt, req.Lease, req.Progress, s.runs.ttl)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.runs.changed.wakeAll()
	_ = s.runs.store.Seen(r.Context(), a.Name, "", id)
	s.writeJSON(w, http.StatusOK, runs.HeartbeatAnswer{State: run.State, Cancel: run.State == runs.Canceling, LeaseUntil: run.LeaseUntil})
}

func (s *Server) handleAgentFinish(w http.ResponseWriter, r *http.Request) {
	a, body, err := s.agentBody(w, r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	var req runs.FinishRequest
	if err := ledger.DecodeStrict(body, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	run, status, err := s.finishRun(r, a, chi.URLParam(r, "id"), req)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, status, RunAnswer{Run: run})
}

// finishRun ends attempt req.Attempt of run id for agent a. It is
// idempotent per (run, attempt): finishing an attempt that this agent
// already finished answers the run as it is (200) and appends nothing.
// A finish for a lease the agent does not hold is refused (409,
// runs.ErrLeaseNotHeld). The evidence and the run-outcome leaf are
// appended in one append, all or nothing.
func (s *Server) finishRun(r *http.Request, a runs.Agent, id string, req runs.FinishRequest) (runs.Run, int, error) {
	ctx := r.Context()
	rs := s.runs
	rs.mu.Lock()
	defer rs.mu.Unlock()
	cur, err := rs.store.Get(ctx, id)
	if err != nil {
		return cur, 0, err
	}
	if req.Attempt >= 1 && req.Attempt <= len(cur.Attempts) {
		if prev := cur.Attempts[req.Attempt-1]; prev.Agent == a.Name && prev.Outcome != "infrastructure" {
			return cur, http.StatusOK, nil // already finished by this agent: the same answer again
		}
	}
	if err := admit.LeaseHolder(principalOf(r), req.Lease); err != nil {
		return cur, 0, err
	}
	run, err := rs.store.CheckLease(ctx, id, a.Name, req.Attempt, req.Lease)
	if err != nil {
		return run, 0, err
	}
	now := s.cfg.Now().UTC()
	attempt := ledger.RunAttempt{Attempt: req.Attempt, Agent: a.Name, At: now, Reason: runs.CleanText(req.Message, runs.MaxMessage)}
	switch req.Status {
	case "error":
		return s.finishInfrastructure(ctx, run, attempt)
	case "canceled":
		if run.State != runs.Canceling {
			return run, 0, ledger.FieldError("status", "canceled: the run was not canceled (state %s); finish it as completed or error", run.State)
		}
		if len(req.Evidence) > 0 || len(req.Staged) > 0 {
			return run, 0, ledger.FieldError("evidence", "a canceled attempt records nothing")
		}
		attempt.Outcome = "canceled"
		run.State, run.Agent, run.Attempts = runs.Canceled, a.Name, append(run.Attempts, attempt)
		return s.appendFinish(ctx, run, req.Lease, nil, nil)
	case "completed":
		if run.State == runs.Canceling {
			// The lanes ended before the agent saw the cancel: the run is
			// canceled all the same, and nothing it ran is recorded.
			attempt.Outcome, attempt.Reason = "canceled", "canceled while the lanes finished: their evidence is not recorded"
			run.State, run.Agent, run.Attempts = runs.Canceled, a.Name, append(run.Attempts, attempt)
			return s.appendFinish(ctx, run, req.Lease, nil, nil)
		}
	default:
		return run, 0, ledger.FieldError("status", "must be completed, canceled or error, got %q", clipText(req.Status))
	}
	recs, ids, passed, err := s.finishEvidence(r, a, run, req)
	if err != nil {
		return run, 0, err
	}
	attempt.Outcome = "finished"
	run.State = runs.Failed
	if passed {
		run.State = runs.Done
	}
	run.Agent, run.Attempts, run.Evidence = a.Name, append(run.Attempts, attempt), ids
	return s.appendFinish(ctx, run, req.Lease, recs, ids)
}

// finishInfrastructure ends an attempt the agent could not run: recorded
// as an infrastructure failure, the run queued again (or expired when its
// attempts are used up).
func (s *Server) finishInfrastructure(ctx context.Context, run runs.Run, attempt ledger.RunAttempt) (runs.Run, int, error) {
	attempt.Outcome = "infrastructure"
	if attempt.Reason == "" {
		attempt.Reason = "the agent could not run the attempt"
	}
	got, err := s.runs.store.Abandon(ctx, run.ID, run.LeaseID, attempt)
	if err != nil {
		return got, 0, err
	}
	s.runs.staged.drop(run.ID, nil)
	s.runs.changed.wakeAll()
	if runs.Final(got.State) {
		if err := s.appendOutcome(ctx, got); err != nil {
			return got, 0, err
		}
		got, err = s.runs.store.Get(ctx, run.ID)
	} else {
		s.runs.wakeAll()
	}
	return got, http.StatusOK, err
}

// finishEvidence gathers the evidence of a completed attempt: the
// envelopes req carries, checked now (checkEnvelopes), and the records it
// names as staged for this (run, attempt, lease), checked when they were
// staged; one per lane of the run. It returns the records, their content
// ids and whether every lane passed. A staged digest the server does not
// hold is a CodeConflict error naming staged[i].
func (s *Server) finishEvidence(r *http.Request, a runs.Agent, run runs.Run, req runs.FinishRequest) ([]ledger.Record, []string, bool, error) {
	if n := len(req.Evidence) + len(req.Staged); n != len(run.Lanes) {
		return nil, nil, false, ledger.FieldError("evidence", "a completed finish carries one envelope per lane of run %s (%d: %s), sent in evidence or named in staged; this one carries %d (an attempt that could not run its lanes finishes with status error)", run.ID, len(run.Lanes), strings.Join(run.Lanes, ", "), n)
	}
	staged, err := s.runs.staged.take(stageKey{run: run.ID, attempt: req.Attempt, lease: req.Lease}, req.Staged)
	if err != nil {
		return nil, nil, false, err
	}
	sent, err := s.checkEnvelopes(r, a, run, req.Evidence, func(i int) string { return fmt.Sprintf("evidence[%d]", i) })
	if err != nil {
		return nil, nil, false, err
	}
	all := append(staged, sent...)
	recs := make([]ledger.Record, len(all))
	ids := make([]string, len(all))
	seen := map[string]bool{}
	passed := true
	for i, lr := range all {
		if seen[ledger.LaneName(lr.lane)] {
			field := fmt.Sprintf("evidence[%d].lane", i-len(staged))
			if i < len(staged) {
				field = fmt.Sprintf("staged[%d]", i)
			}
			return nil, nil, false, ledger.FieldError(field, "lane %q twice", lr.lane)
		}
		seen[ledger.LaneName(lr.lane)] = true
		passed = passed && lr.passed
	}
	// The records go in the run's lane order, however they came.
	slices.SortStableFunc(all, func(x, y laneRecord) int { return laneIndex(run.Lanes, x.lane) - laneIndex(run.Lanes, y.lane) })
	for i, lr := range all {
		recs[i], ids[i] = lr.rec, lr.id
	}
	return recs, ids, passed, nil
}

// laneIndex is the position of lane (name or name/vN) in lanes.
func laneIndex(lanes []string, lane string) int {
	for i, l := range lanes {
		if l == lane || l == ledger.LaneName(lane) {
			return i
		}
	}
	return len(lanes)
}

// appendFinish appends recs and the outcome of run (in its final state)
// in one append, then ends the lease. Caller holds runs.mu.
func (s *Server) appendFinish(ctx context.Context, run runs.Run, lease string, recs []ledger.Record, ids []string) (runs.Run, int, error) {
	if ids == nil {
		ids = []string{}
	}
	run.Evidence = ids
	body, err := ledger.CanonicalBody(new(run.Outcome(s.cfg.Now())))
	if err != nil {
		return run, 0, err
	}
	all := append(slices.Clone(recs), ledger.Record{Kind: ledger.KindRunOutcome, Body: body})
	res, err := s.store.Append(ctx, all, "run-finish:"+run.ID+":"+strconv.Itoa(run.Attempt))
	if err != nil {
		return run, 0, err
	}
	for _, e := range res.Entries {
		s.metrics.appended.WithLabelValues(string(e.Kind)).Inc()
	}
	outcome := res.Entries[len(res.Entries)-1].ID
	got, err := s.runs.store.Finish(ctx, run.ID, lease, run.State, run.Attempts, ids, outcome, "")
	s.runs.staged.drop(run.ID, nil)
	s.runs.changed.wakeAll()
	if err != nil {
		return got, 0, err
	}
	_ = s.runs.store.Seen(ctx, run.Agent, "", "")
	return got, http.StatusOK, nil
}
