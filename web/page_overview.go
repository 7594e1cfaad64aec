package web

import (
	"context"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/witness"
)

// ReleaseSummary is one release's gate summary on the overview.
type ReleaseSummary struct {
	Version    string    `json:"version"`
	Title      string    `json:"title,omitempty"`
	Ready      bool      `json:"ready"`
	Passed     int       `json:"passed"`
	Failed     int       `json:"failed"`
	Open       int       `json:"open"`
	Waived     int       `json:"waived"`
	ComputedAt time.Time `json:"computed_at"`
	// Problem says why the release could not be evaluated (then the counts
	// are zero).
	Problem string `json:"problem,omitempty"`
}

// LaneLatest is the newest run of a lane on one backend.
type LaneLatest struct {
	LaneRun
	Lane string `json:"lane"`
}

// Overview is the overview page's data and the body of GET /api/v1/overview.
type Overview struct {
	Releases    []ReleaseSummary  `json:"releases"`
	Lanes       []LaneLatest      `json:"lanes"`
	Latest      []EvidenceJSON    `json:"latest_evidence"`
	Checkpoint  ledger.Checkpoint `json:"checkpoint"`
	VerifierKey string            `json:"verifier_key"`
	// Witnesses is the witnessing status when the server runs witnesses;
	// Checkpoint.Note then carries their cosignatures.
	Witnesses *witness.Status `json:"witnesses,omitempty"`
	latest    []ledger.EvidenceEntry
	// releaseRows are Releases for the pages, most urgent first;
	// attention the failed gates, stale approvals and witnessing problems
	// at this checkpoint (the waiting runs are read per request); lanes
	// the latest runs grouped by repository.
	releaseRows []releaseRow
	attention   []attentionItem
	lanes       []repoLanes
	// html is the overview page of this value, rendered once per set of
	// waiting runs.
	html renderCache
}

// overviewScan is how many of the newest evidence records the overview
// scans for each lane's latest run.
const overviewScan = 1000

// sharedOverview is the overview at the latest checkpoint or a newer one,
// shared with concurrent readers through s.overviews (see freshCache).
// The answer must not be modified.
func (s *Server) sharedOverview(ctx context.Context) (*Overview, error) {
	return s.overviews.get(ctx, "", func(ctx context.Context, _ uint64, _ time.Time) (*Overview, error) {
		return s.overview(ctx)
	})
}

// overviewWindow is the newest evidence records at a checkpoint size, as
// the overview scanned them.
type overviewWindow struct {
	size   uint64
	recent []ledger.EvidenceEntry // newest first, at most overviewScan
}

// overviewRecent returns the newest overviewScan evidence records below
// checkpoint size, newest first. It reads only the records appended since
// the previous call's size when that is less than overviewScan leaves
// ago, and keeps the rest from that call (they were read, and checked by
// the verified store, then). Called by the overview's computation, which
// freshCache runs one at a time.
func (s *Server) overviewRecent(ctx context.Context, size uint64) ([]ledger.EvidenceEntry, error) {
	prev := s.lastOverview.Load()
	if prev == nil || prev.size > size || size-prev.size >= overviewScan {
		recent, _, err := s.store.Evidence(ctx, ledger.EvidenceFilter{Limit: overviewScan, AsOfSize: size})
		if err != nil {
			return nil, err
		}
		s.lastOverview.Store(&overviewWindow{size: size, recent: recent})
		return recent, nil
	}
	if size == prev.size {
		return prev.recent, nil
	}
	// Fewer than size-prev.size evidence records can sit at the new leaves.
	fresh, _, err := s.store.Evidence(ctx, ledger.EvidenceFilter{Limit: int(size - prev.size), AsOfSize: size})
	if err != nil {
		return nil, err
	}
	recent := make([]ledger.EvidenceEntry, 0, overviewScan)
	for _, e := range fresh {
		if e.Index >= prev.size {
			recent = append(recent, e)
		}
	}
	recent = append(recent, prev.recent[:min(len(prev.recent), overviewScan-len(recent))]...)
	s.lastOverview.Store(&overviewWindow{size: size, recent: recent})
	return recent, nil
}

// overview builds the overview at the latest checkpoint.
func (s *Server) overview(ctx context.Context) (*Overview, error) {
	o := &Overview{VerifierKey: s.store.VerifierKey()}
	var err error
	if o.Checkpoint, err = s.store.Checkpoint(ctx); err != nil {
		return nil, err
	}
	s.addWitnessing(o)
	if o.Releases, o.releaseRows, o.attention, err = s.releaseViews(ctx); err != nil {
		return nil, err
	}
	o.attention = append(o.attention, witnessAttention(o.Witnesses, o.Checkpoint.Size)...)
	recent, err := s.overviewRecent(ctx, o.Checkpoint.Size)
	if err != nil {
		return nil, err
	}
	type key struct {
		lane    string
		backend ledger.Backend
	}
	seen := map[key]bool{}
	for _, e := range recent { // newest first: the first seen is the latest
		k := key{e.Evidence.Lane, e.Evidence.Backend}
		if !seen[k] {
			seen[k] = true
			o.Lanes = append(o.Lanes, LaneLatest{LaneRun: laneRun(e), Lane: e.Evidence.Lane})
		}
	}
	sort.SliceStable(o.Lanes, func(i, j int) bool {
		if o.Lanes[i].Lane != o.Lanes[j].Lane {
			return o.Lanes[i].Lane < o.Lanes[j].Lane
		}
		return o.Lanes[i].Backend < o.Lanes[j].Backend
	})
	o.lanes = laneGroups(recent)
	o.latest = recent[:min(len(recent), 10)]
	o.Latest = make([]EvidenceJSON, len(o.latest))
	for i, e := range o.latest {
		o.Latest[i] = evidenceJSON(e, false)
		// The overview lists runs; their case tables stay on /evidence/{id}.
		o.Latest[i].Evidence.Details = nil
	}
	return o, nil
}

type overviewPage struct {
	pageBase
	*Overview
	Latest []ledger.EvidenceEntry
	// Attention is what needs a reviewer, most pressing first: a tampered
	// state, failed gates, stale approvals, runs waiting with no agent,
	// witnessing problems.
	Attention []attentionItem
	Rows      []releaseRow
	RepoLanes []repoLanes
}

// pageOverview is GET /: what needs a reviewer (attentionItem), every
// release most urgent first with its gate summary and approval, the latest
// run of every lane per backend grouped by repository, the latest
// evidence and the log's checkpoint.
func (s *Server) pageOverview(w http.ResponseWriter, r *http.Request) {
	o, err := s.sharedOverview(r.Context())
	if err != nil {
		s.renderError(w, r, err)
		return
	}
	// Runs and the tamper state are not part of the cached overview: the
	// rendering is keyed by them.
	extra := append(s.tamperedAttention(), s.waitingAttention(r.Context())...)
	var key strings.Builder
	for _, a := range extra {
		key.WriteString(a.Kind + "\x00" + a.Link + "\x00" + a.Text + "\x00")
	}
	var att []attentionItem
	for _, a := range extra {
		if a.Kind == "tampered" {
			att = append(att, a)
		}
	}
	att = append(att, o.attention...)
	for _, a := range extra {
		if a.Kind != "tampered" {
			att = append(att, a)
		}
	}
	b, err := o.html.get(key.String(), func() ([]byte, error) {
		return s.execute("overview", overviewPage{pageBase: pageBase{Title: "Overview", Nav: "overview", JSON: "/api/v1/overview"}, Overview: o, Latest: o.latest,
			Attention: att, Rows: o.releaseRows, RepoLanes: o.lanes})
	})
	if err != nil {
		s.log.Error("render page", "template", "overview", "err", err)
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	s.writePage(w, http.StatusOK, b)
}

// apiOverview is GET /api/v1/overview, the overview page as JSON.
func (s *Server) apiOverview(w http.ResponseWriter, r *http.Request) {
	o, err := s.sharedOverview(r.Context())
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, http.StatusOK, o)
}
