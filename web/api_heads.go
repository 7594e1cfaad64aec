package web

import (
	"net/http"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/verify"
)

// HeadJSON is the API representation of one head verification entry.
type HeadJSON struct {
	ID         string                  `json:"id"`
	Index      uint64                  `json:"index"`
	RecordedAt time.Time               `json:"recorded_at"`
	LeafHash   ledger.Hash             `json:"leaf_hash"`
	Head       ledger.HeadVerification `json:"head"`
}

func (s *Server) handleListHeads(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f := ledger.HeadFilter{Repository: q.Get("repository"), Commit: q.Get("commit"), Verdict: ledger.Verdict(q.Get("verdict")), Cursor: q.Get("cursor")}
	var err error
	if f.Limit, err = queryLimit(r); err != nil {
		s.writeError(w, r, err)
		return
	}
	if f.AsOfSize, err = queryAsOf(r); err != nil {
		s.writeError(w, r, err)
		return
	}
	list, next, err := s.store.Heads(r.Context(), f)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	out := make([]HeadJSON, len(list))
	for i, h := range list {
		out[i] = HeadJSON{ID: h.ID, Index: h.Index, RecordedAt: h.RecordedAt, LeafHash: h.LeafHash, Head: h.Head}
	}
	s.writeJSON(w, http.StatusOK, map[string]any{"heads": out, "next_cursor": next})
}

// VerifyHeadRequest asks the server to verify a head of a repository on the
// server's file system and record the verification.
type VerifyHeadRequest struct {
	RepoPath   string `json:"repo_path"`            // a git work tree or bare repository readable by the server
	Repository string `json:"repository,omitempty"` // the name recorded (default: origin URL or path)
	Ref        string `json:"ref,omitempty"`        // default HEAD
	PolicyPath string `json:"policy_path,omitempty"`
	Policy     string `json:"policy,omitempty"` // the trust policy YAML inline (instead of policy_path)
}

func (s *Server) handleVerifyHead(w http.ResponseWriter, r *http.Request) {
	var req VerifyHeadRequest
	if err := s.decodeJSON(w, r, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	if req.RepoPath == "" {
		s.writeError(w, r, ledger.FieldError("repo_path", "required: a repository path readable by the server"))
		return
	}
	var pol *verify.Policy
	var err error
	switch {
	case req.Policy != "" && req.PolicyPath != "":
		s.writeError(w, r, ledger.FieldError("policy", "give policy or policy_path, not both"))
		return
	case req.Policy != "":
		if pol, err = verify.ParsePolicy([]byte(req.Policy)); err != nil {
			s.writeError(w, r, ledger.FieldError("policy", "%v", err))
			return
		}
	case req.PolicyPath != "":
		if pol, err = verify.LoadPolicy(req.PolicyPath); err != nil {
			s.writeError(w, r, ledger.FieldError("policy_path", "%v", err))
			return
		}
	}
	hv, err := verify.VerifyHead(r.Context(), verify.VerifyHeadOptions{RepoPath: req.RepoPath, Repository: req.Repository, Ref: req.Ref, Policy: pol, Now: s.cfg.Now()})
	if err != nil {
		s.writeError(w, r, ledger.FieldError("repo_path", "%v", err))
		return
	}
	body, err := ledger.CanonicalBody(&hv)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	idem, err := idempotencyKey(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	res, err := s.store.Append(r.Context(), []ledger.Record{{Kind: ledger.KindHead, Body: body}}, idem)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	e := res.Entries[0]
	status := http.StatusCreated
	if e.Existing {
		status = http.StatusOK
	}
	s.writeJSON(w, status, map[string]any{"head": hv, "id": e.ID, "index": e.Index, "leaf_hash": e.LeafHash, "existing": e.Existing, "inclusion_proof": e.Proof, "checkpoint": res.Checkpoint})
}
