package web

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"strings"

	"github.com/evidence-ledger/ledger/admit"
	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/ledger/auth"
	"github.com/evidence-ledger/ledger/runs"
	"github.com/evidence-ledger/ledger/verify"
)

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
		reg, err := auth.LoadRunnerKeys(r.Context(), s.store, 0)
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
	reg, err := auth.LoadRunnerKeys(ctx, s.store, 0)
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
func approvedHardware(ctx context.Context, rs *runs.Store, live auth.RunnerState, a runs.Agent) error {
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
func waitingRoom(ctx context.Context, rs *runs.Store, reg auth.RunnerRegistry, a runs.Agent, approved bool) error {
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
