package web

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strings"

	"github.com/evidence-ledger/ledger/admit"
	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/ledger/auth"
	"github.com/evidence-ledger/ledger/runs"
	"github.com/go-chi/chi/v5"
)

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
	reg, err := auth.LoadRunnerKeys(ctx, s.store, 0)
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
func ApproveAgent(ctx context.Context, st admit.KeyLog, rs *runs.Store, name string, req runs.ApproveRequest, by string) (auth.RunnerState, *ledger.AppendResult, runs.Agent, error) {
	if d := strings.TrimPrefix(strings.ToLower(strings.TrimSpace(req.SpecDigest)), "sha256:"); req.SpecDigest != "" && (len(d) != 64 || !ledger.LowerHex(d)) {
		return auth.RunnerState{}, nil, runs.Agent{}, ledger.FieldError("spec_digest", "must be the whole spec digest `ledger agent list` shows: sha256: and 64 hex digits (a prefix is not enough)")
	}
	defer rs.LockAgents()()
	a, err := rs.GetAgent(ctx, name)
	if err != nil {
		return auth.RunnerState{}, nil, a, err
	}
	a.SpecDigest = runs.SpecDigestOf(a)
	if req.KeyID != "" && req.KeyID != a.KeyID {
		return auth.RunnerState{}, nil, a, &ledger.Error{Code: ledger.CodeConflict, Field: "key_id", Message: fmt.Sprintf(
			"agent %q is registered with key %s, not %s: nothing was approved; if that is not the agent's key, remove the registration (`ledger agent remove %s`)", name, a.KeyID, clipText(req.KeyID), name)}
	}
	if req.SpecDigest != "" && !runs.MatchSpecDigest(req.SpecDigest, a.SpecDigest) {
		// The current digest is not in the message: an admin who copied
		// it from here would approve what they did not check. It is read,
		// beside the registration it digests, from `ledger agent list`.
		v := a.Visible()
		return auth.RunnerState{}, nil, a, &ledger.Error{Code: ledger.CodeConflict, Field: "spec_digest", Message: fmt.Sprintf(
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
	reg, err := auth.LoadRunnerKeys(ctx, st, 0)
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
