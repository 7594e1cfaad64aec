package web

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/evidence-ledger/ledger/gates"
	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/ledger/auth"
	"github.com/evidence-ledger/ledger/verify"
	"github.com/go-chi/chi/v5"
)

// ApplyPolicyRequest registers a trust policy (POST /api/v1/policies,
// scope admin): its name, its YAML and the content of every file the YAML
// names, keyed as the YAML names them (what `ledger policy apply` reads).
// The server reads no file: the policy is self-contained.
type ApplyPolicyRequest struct {
	Name   string            `json:"name"`
	Policy string            `json:"policy"`
	Files  map[string][]byte `json:"files,omitempty"`
}

// PolicySummaryJSON is a registered policy without its content.
type PolicySummaryJSON struct {
	ID        string    `json:"id"`
	Index     uint64    `json:"index"`
	Name      string    `json:"name"`
	Digest    string    `json:"digest"`
	AppliedAt time.Time `json:"applied_at"`
	AppliedBy string    `json:"applied_by,omitempty"`
}

func (s *Server) handleApplyPolicy(w http.ResponseWriter, r *http.Request) {
	var req ApplyPolicyRequest
	if err := s.decodeJSON(w, r, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	if !ledger.ValidPolicyName(req.Name) {
		s.writeError(w, r, ledger.FieldError("name", "a policy name is 1-64 of [a-z0-9._-] starting with a letter or digit"))
		return
	}
	pol, err := verify.PolicyFromBundle([]byte(req.Policy), req.Files)
	if err != nil {
		s.writeError(w, r, ledger.FieldError("policy", "%v", err))
		return
	}
	rec := ledger.PolicyRecord{Name: req.Name, Digest: pol.Digest, Policy: req.Policy, Files: req.Files, AppliedAt: s.cfg.Now().UTC()}
	if t, ok := TokenFrom(r.Context()); ok {
		rec.AppliedBy = t.Name
	}
	body, err := ledger.CanonicalBody(&rec)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	res, err := s.store.Append(r.Context(), []ledger.Record{{Kind: ledger.KindPolicy, Body: body}}, r.Header.Get("Idempotency-Key"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	e := res.Entries[0]
	status := http.StatusCreated
	if e.Existing {
		status = http.StatusOK
	}
	s.metrics.appended.WithLabelValues(string(ledger.KindPolicy)).Inc()
	s.writeJSON(w, status, map[string]any{
		"policy": PolicySummaryJSON{ID: e.ID, Index: e.Index, Name: rec.Name, Digest: rec.Digest, AppliedAt: rec.AppliedAt, AppliedBy: rec.AppliedBy},
		"id":     e.ID, "index": e.Index, "leaf_hash": e.LeafHash, "existing": e.Existing, "inclusion_proof": e.Proof, "checkpoint": res.Checkpoint,
	})
}

func (s *Server) handleListPolicies(w http.ResponseWriter, r *http.Request) {
	f := ledger.EntryFilter{Kind: ledger.KindPolicy, Cursor: r.URL.Query().Get("cursor")}
	var err error
	if f.Limit, err = queryLimit(r); err != nil {
		s.writeError(w, r, err)
		return
	}
	es, next, err := s.store.Entries(r.Context(), f)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	out := make([]PolicySummaryJSON, 0, len(es))
	for _, e := range es {
		var p ledger.PolicyRecord
		if err := ledger.DecodeStrict(e.Body, &p); err != nil {
			s.writeError(w, r, ledger.Errorf(ledger.CodeInternal, "policy entry %s: %v", e.ID, err))
			return
		}
		out = append(out, PolicySummaryJSON{ID: e.ID, Index: e.Index, Name: p.Name, Digest: p.Digest, AppliedAt: p.AppliedAt, AppliedBy: p.AppliedBy})
	}
	s.writeJSON(w, http.StatusOK, map[string]any{"policies": out, "next_cursor": next})
}

// handleGetPolicy answers the newest policy of a name, or the policy of a
// digest, with its content (public key material only).
func (s *Server) handleGetPolicy(w http.ResponseWriter, r *http.Request) {
	pe, err := auth.ResolvePolicy(r.Context(), s.store, chi.URLParam(r, "ref"), 0)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, http.StatusOK, map[string]any{"id": pe.ID, "index": pe.Index, "policy": pe.Policy})
}

// loadPolicy returns the registered policy ref names (a name or a digest),
// parsed with its material (cached by digest), and its record.
func (s *Server) loadPolicy(r *http.Request, ref string) (*verify.Policy, ledger.PolicyRecord, error) {
	pe, err := s.refs.resolve(r.Context(), s.store, ref)
	if err != nil {
		return nil, ledger.PolicyRecord{}, err
	}
	if p, ok := s.policies.Load(pe.Policy.Digest); ok {
		return p.(*verify.Policy), pe.Policy, nil
	}
	p, err := verify.PolicyFromBundle([]byte(pe.Policy.Policy), pe.Policy.Files)
	if err != nil {
		return nil, pe.Policy, ledger.Errorf(ledger.CodeInternal, "registered policy %s does not load: %v", pe.Policy.Name, err)
	}
	if p.Digest != pe.Policy.Digest {
		return nil, pe.Policy, ledger.Errorf(ledger.CodeInternal, "registered policy %s: digest %s, content hashes to %s", pe.Policy.Name, pe.Policy.Digest, p.Digest)
	}
	s.policies.Store(p.Digest, p)
	return p, pe.Policy, nil
}

// releasePolicy returns the policy release rel binds: policy_digest when
// set (and, when policy names one too, the newest policy of that name must
// have that digest), else the newest policy of the name. A release that
// binds none is CodePrecondition.
func (s *Server) releasePolicy(r *http.Request, rel *gates.Release) (*verify.Policy, error) {
	ref := rel.PolicyDigest
	if ref == "" {
		ref = rel.Policy
	}
	if ref == "" {
		return nil, ledger.Errorf(ledger.CodePrecondition, "release %s binds no trust policy: add `policy: NAME` (a policy registered with `ledger policy apply`) to its definition", rel.Version)
	}
	p, rec, err := s.loadPolicy(r, ref)
	if err != nil {
		return nil, err
	}
	if rel.PolicyDigest != "" && rel.Policy != "" {
		byName, _, err := s.loadPolicy(r, rel.Policy)
		if err != nil {
			return nil, err
		}
		if byName.Digest != rec.Digest {
			return nil, ledger.Errorf(ledger.CodePrecondition, "release %s binds policy %s at %s, but the newest policy of that name is %s", rel.Version, rel.Policy, rel.PolicyDigest, byName.Digest)
		}
	}
	return p, nil
}

// policyRefs caches what policy names and digests resolve to. A policy
// leaf is large (it carries its keys), so reading the newest one on every
// head verification would dominate it; instead each lookup reads the
// log's tail since the previous lookup, and any policy leaf in it (or a
// tail longer than policyTailMax, or a log that shrank) empties the cache.
// A lookup therefore always sees every policy appended before it, by this
// server or another process. Safe for concurrent use.
type policyRefs struct {
	mu    sync.Mutex
	size  uint64
	byRef map[string]ledger.PolicyEntry
}

const policyTailMax = 64

func (c *policyRefs) resolve(ctx context.Context, st ledger.Store, ref string) (ledger.PolicyEntry, error) {
	cp, err := st.Checkpoint(ctx)
	if err != nil {
		return ledger.PolicyEntry{}, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.byRef == nil || cp.Size < c.size || cp.Size-c.size > policyTailMax {
		c.byRef = map[string]ledger.PolicyEntry{}
	} else {
		for i := c.size; i < cp.Size; i++ {
			e, err := st.EntryAt(ctx, i)
			if err != nil {
				return ledger.PolicyEntry{}, err
			}
			if e.Kind == ledger.KindPolicy {
				c.byRef = map[string]ledger.PolicyEntry{}
				break
			}
		}
	}
	c.size = cp.Size
	if pe, ok := c.byRef[ref]; ok {
		return pe, nil
	}
	pe, err := auth.ResolvePolicy(ctx, st, ref, cp.Size)
	if err != nil {
		return pe, err
	}
	c.byRef[ref] = pe
	return pe, nil
}
