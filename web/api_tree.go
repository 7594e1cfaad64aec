package web

import (
	"net/http"

	"github.com/evidence-ledger/ledger/admit"
	"github.com/evidence-ledger/ledger/gates"
	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/verify"
)

// VerifyTreeRequest asks the server to compute tree equivalence for a
// release's component from uploaded objects and record it (POST
// /api/v1/trees/verify, scope record). The commits compared are the
// component's head and reviewed commits and the pins are the ones the
// release declares for it: the caller names neither. Objects are the two
// commits and the tree objects along every path where their trees differ
// (verify.TreeUpload); Lane defaults to tree-equivalence/v1 and may only
// name the lane of one of the release's tree-equivalence gates.
type VerifyTreeRequest struct {
	Release      string             `json:"release"`
	Component    string             `json:"component,omitempty"` // required when the release has several
	Lane         string             `json:"lane,omitempty"`
	ObjectFormat string             `json:"object_format,omitempty"` // sha1 (default) or sha256
	Objects      []verify.RawObject `json:"objects"`
}

func (s *Server) handleVerifyTree(w http.ResponseWriter, r *http.Request) {
	started := s.cfg.Now()
	var req VerifyTreeRequest
	if err := s.decodeJSON(w, r, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	if !gates.ValidVersion(req.Release) {
		s.writeError(w, r, ledger.FieldError("release", "required: the release whose component and pins apply"))
		return
	}
	rel, _, err := gates.LoadRelease(r.Context(), s.store, req.Release)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if req.Lane == "" {
		req.Lane = ledger.TreeEquivalenceLane
	} else if !treeLane(rel, req.Lane) {
		s.writeError(w, r, ledger.FieldError("lane", "must be %s or the lane of one of release %s's tree-equivalence gates", ledger.TreeEquivalenceLane, rel.Version))
		return
	}
	var c gates.Component
	switch {
	case req.Component != "":
		var ok bool
		if c, ok = rel.Component(req.Component); !ok {
			s.writeError(w, r, ledger.FieldError("component", "release %s has no component %q", rel.Version, clipField(req.Component)))
			return
		}
	case len(rel.Components) == 1:
		c = rel.Components[0]
	default:
		s.writeError(w, r, ledger.FieldError("component", "required: release %s has %d components", rel.Version, len(rel.Components)))
		return
	}
	if err := admit.RepositoryInScope(principalOf(r), "component", c.Repository); err != nil {
		s.writeError(w, r, err)
		return
	}
	pins := append([]string{}, c.Pins...)
	rep, ids, err := verify.TreeEquivalenceObjects(verify.TreeUpload{Format: req.ObjectFormat, Head: c.Head, Reviewed: c.Reviewed, Objects: req.Objects, Pins: pins})
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	format := req.ObjectFormat
	if format == "" {
		format = verify.FormatSHA1
	}
	te := ledger.TreeEquivalence{
		Reviewed: rep.Reviewed, Equivalent: &rep.Equivalent, OutsidePins: []string{}, Pins: pins, Differences: len(rep.Differences),
		ComputedBy: ledger.ComputedByServer, Release: rel.Version, Component: c.Name, HeadTree: rep.HeadTree, ReviewedTree: rep.ReviewedTree,
		ObjectFormat: format, Objects: ids,
	}
	for _, d := range rep.Differences {
		te.DifferingPaths = append(te.DifferingPaths, d.Path)
		if d.OldPath != "" {
			te.DifferingPaths = append(te.DifferingPaths, d.OldPath)
		}
		if !d.InPins {
			te.OutsidePins = append(te.OutsidePins, d.Path)
		}
	}
	ev, err := te.Evidence(ledger.Subject{Repository: c.Repository, Commit: rep.Head, Tree: rep.HeadTree}, ledger.RunnerBuild{Version: "ledger-server"}, started, s.cfg.Now())
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	ev.Lane = req.Lane
	ev.RecordedBy = principalOf(r).Recorder()
	body, err := ledger.CanonicalBody(&ev)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	res, err := s.store.Append(r.Context(), []ledger.Record{{Kind: ledger.KindEvidence, Body: body}}, r.Header.Get("Idempotency-Key"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	e := res.Entries[0]
	status := http.StatusCreated
	if e.Existing {
		status = http.StatusOK
	} else {
		s.metrics.appended.WithLabelValues(string(ledger.KindEvidence)).Inc()
	}
	s.writeJSON(w, status, map[string]any{"tree": rep, "evidence": ev, "id": e.ID, "index": e.Index, "leaf_hash": e.LeafHash, "existing": e.Existing, "inclusion_proof": e.Proof, "checkpoint": res.Checkpoint})
}

// treeLane reports whether lane may carry the server's tree evidence for
// rel: the default lane or a tree-equivalence gate's, never another gate
// kind's lane (a record there would be a passed run nobody ran).
func treeLane(rel *gates.Release, lane string) bool {
	if lane == ledger.TreeEquivalenceLane {
		return true
	}
	for _, g := range rel.Gates {
		if g.Kind == gates.KindTreeEquivalence && g.Lane == lane {
			return true
		}
	}
	return false
}
