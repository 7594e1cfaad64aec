package web

import (
	"context"
	"net/http"
	"time"

	"github.com/evidence-ledger/ledger/admit"
	"github.com/evidence-ledger/ledger/gates"
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
	streamPage(s, w, r, "heads", f.Cursor, f.Limit,
		func(ctx context.Context, cursor string, limit int) ([]ledger.HeadEntry, string, error) {
			g := f
			g.Cursor, g.Limit = cursor, limit
			return s.store.Heads(ctx, g)
		},
		func(h ledger.HeadEntry) uint64 { return h.Index },
		func(h ledger.HeadEntry) any {
			return HeadJSON{ID: h.ID, Index: h.Index, RecordedAt: h.RecordedAt, LeafHash: h.LeafHash, Head: h.Head}
		})
}

// VerifyHeadRequest asks the server to verify a head and record the
// verification (POST /api/v1/heads/verify, scope record). The caller
// uploads the head's raw objects (Objects: the commit, or the tag then the
// objects it tags down to the commit); the server recomputes every id from
// the bytes. The trust policy is never the caller's: it is the one Release
// binds, or, outside a release, the registered policy Policy names (a name
// or a digest). RepoPath, instead of Objects, names a repository under a
// configured --repo-root and needs an admin token. PolicyPath is refused:
// it exists to name the field in the refusal.
type VerifyHeadRequest struct {
	Repository   string             `json:"repository,omitempty"` // as the policy and the release name it; default: the component's (a release's only component by default)
	Ref          string             `json:"ref,omitempty"`        // full ref name; default refs/heads/main for uploads
	Release      string             `json:"release,omitempty"`
	Component    string             `json:"component,omitempty"`
	Policy       string             `json:"policy,omitempty"`        // a registered policy's name or digest (not YAML)
	ObjectFormat string             `json:"object_format,omitempty"` // sha1 (default) or sha256
	Objects      []verify.RawObject `json:"objects,omitempty"`
	RepoPath     string             `json:"repo_path,omitempty"`
	PolicyPath   string             `json:"policy_path,omitempty"`
}

// headPolicy resolves the policy of a head verification request and
// defaults its repository from the release's component.
func (s *Server) headPolicy(r *http.Request, req *VerifyHeadRequest) (*verify.Policy, error) {
	if err := admit.HeadPolicy(req.PolicyPath, req.Policy, req.Release); err != nil {
		return nil, err
	}
	if req.Release == "" {
		if req.Component != "" {
			return nil, ledger.FieldError("component", "needs release")
		}
		if req.Policy == "" {
			return nil, ledger.FieldError("release", "required: the release whose policy judges the head (or policy: a registered policy's name)")
		}
		p, _, err := s.loadPolicy(r, req.Policy)
		return p, err
	}
	if !gates.ValidVersion(req.Release) {
		return nil, ledger.FieldError("release", "not a release version")
	}
	rel, _, err := gates.LoadRelease(r.Context(), s.store, req.Release)
	if err != nil {
		return nil, err
	}
	if req.Component == "" && len(rel.Components) == 1 {
		req.Component = rel.Components[0].Name
	}
	if req.Component != "" {
		c, ok := rel.Component(req.Component)
		if !ok {
			return nil, ledger.FieldError("component", "release %s has no component %q", rel.Version, clipField(req.Component))
		}
		if req.Repository == "" {
			req.Repository = c.Repository
		} else if req.Repository != c.Repository {
			return nil, ledger.FieldError("repository", "release %s names component %s's repository %q", rel.Version, c.Name, c.Repository)
		}
	}
	return s.releasePolicy(r, rel)
}

func clipField(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

func (s *Server) handleVerifyHead(w http.ResponseWriter, r *http.Request) {
	var req VerifyHeadRequest
	if err := s.decodeJSON(w, r, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	pol, err := s.headPolicy(r, &req)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if err := admit.RepositoryInScope(principalOf(r), "repository", req.Repository); err != nil {
		s.writeError(w, r, err)
		return
	}
	var hv ledger.HeadVerification
	switch {
	case req.RepoPath != "" && len(req.Objects) > 0:
		s.writeError(w, r, ledger.FieldError("repo_path", "give objects or repo_path, not both"))
		return
	case req.RepoPath != "":
		if err := admit.RepoPath(principalOf(r)); err != nil {
			s.writeError(w, r, err)
			return
		}
		if req.ObjectFormat != "" && req.ObjectFormat != verify.FormatSHA1 {
			s.writeError(w, r, ledger.FieldError("object_format", "repositories on the server's disk are read as sha1"))
			return
		}
		dir, err := admit.ServerPath(s.cfg.RepoRoots, s.cfg.FileAccess, "repo_path", req.RepoPath)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		hv, err = verify.VerifyHead(r.Context(), verify.VerifyHeadOptions{RepoPath: dir, Repository: req.Repository, Ref: req.Ref, Policy: pol, Now: s.cfg.Now()})
		if err != nil {
			// The cause may name server paths; say only what failed.
			s.log.Info("verify head from repo root failed", "err", err)
			s.writeError(w, r, ledger.FieldError("repo_path", "the repository or its ref could not be read"))
			return
		}
	case len(req.Objects) > 0:
		if req.Ref == "" {
			req.Ref = "refs/heads/main"
		}
		hv, err = verify.VerifyUploadedHead(verify.HeadUpload{Repository: req.Repository, Ref: req.Ref, Format: req.ObjectFormat, Objects: req.Objects, Policy: pol, Now: s.cfg.Now()})
		if err != nil {
			if ledger.ErrorCode(err) != ledger.CodeInvalid {
				err = ledger.FieldError("objects", "%v", err)
			}
			s.writeError(w, r, err)
			return
		}
	default:
		s.writeError(w, r, ledger.FieldError("objects", "required: the head's raw commit (and tag) objects"))
		return
	}
	hv.RecordedBy = principalOf(r).Recorder()
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
	} else {
		s.metrics.appended.WithLabelValues(string(ledger.KindHead)).Inc()
	}
	s.writeJSON(w, status, map[string]any{"head": hv, "id": e.ID, "index": e.Index, "leaf_hash": e.LeafHash, "existing": e.Existing, "inclusion_proof": e.Proof, "checkpoint": res.Checkpoint})
}
