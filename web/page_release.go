package web

import (
	"context"
	"encoding/json"
	"html/template"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"time"

	"github.com/evidence-ledger/ledger/gates"
	"github.com/evidence-ledger/ledger/ledger"
	"github.com/go-chi/chi/v5"
)

// componentRow is one component of the release page with the newest
// signature verification of its signed head and the newest server-computed
// tree-equivalence evidence for it.
type componentRow struct {
	gates.Component
	Verified *ledger.HeadEntry // nil: not verified yet
	Same     bool              // the signed head is the reviewed commit
	TreeEq   *ledger.EvidenceEntry
	TreeEqOK bool
	Outside  []string // paths differing outside the pins
}

// releasePage is the data of /releases/{version}.
type releasePage struct {
	pageBase
	Rel   *gates.Release
	Entry ledger.Entry
	R     *gates.Readiness
	// Gates are R's gates in the order reviewers need them: failed, open,
	// waived, passed (the release's order within a state).
	Gates []gates.GateResult
	// Rule is the counting rule every gate follows (gates.CountingRule),
	// written once on the page; KindRules are the rules of the gate kinds
	// the release uses (gates.KindRule), by kind, each gate linking its
	// kind's.
	Rule       string
	KindRules  []kv
	Components []componentRow
	Artifacts  []kv
	Waivers    []gates.WaiverInfo
	Manual     []string // ids of manual gates (sign-off form)
	// Failing are the records that keep a gate failed (supersede form).
	Failing []failingOption
	Forms   releaseForms
	Done    string // "waiver", "signoff", "approval" or "supersede" after a successful form post
	// RunsHTML is the run form's section (fillRunPlan), rendered per
	// request: agents and runs change without the log changing.
	RunsHTML template.HTML
	// renders holds the renderings of a shared page value (renderRelease).
	renders *renderCache
}

// failingOption is one record the supersede form offers: its id, the gate
// it fails and its summary.
type failingOption struct {
	ID, Gate, Summary string
}

// attentionOrder ranks gate states for the board: what needs a reviewer
// first.
var attentionOrder = map[gates.State]int{gates.StateFailed: 0, gates.StateOpen: 1, gates.StateWaived: 2, gates.StatePassed: 3}

// byAttention returns gs sorted failed, open, waived, passed, stably.
func byAttention(gs []gates.GateResult) []gates.GateResult {
	out := append([]gates.GateResult(nil), gs...)
	sort.SliceStable(out, func(i, j int) bool { return attentionOrder[out[i].State] < attentionOrder[out[j].State] })
	return out
}

// Passed, Failed, Open and Waived are the gate counts by state.
func (p releasePage) Passed() int { return p.R.Counts[gates.StatePassed] }
func (p releasePage) Failed() int { return p.R.Counts[gates.StateFailed] }
func (p releasePage) Open() int   { return p.R.Counts[gates.StateOpen] }
func (p releasePage) Waived() int { return p.R.Counts[gates.StateWaived] }

// loadReleasePage evaluates release version at the latest checkpoint (or
// a newer one) and gathers what its page shows, shared with concurrent
// readers through s.releasePages (keyed by the release's entry id); the
// caller owns the returned copy's Forms and Done. Errors: CodeNotFound for
// an unknown version, store errors.
func (s *Server) loadReleasePage(r *http.Request, version string) (*releasePage, error) {
	ctx := r.Context()
	lr, err := s.sharedRelease(ctx, version)
	if err != nil {
		return nil, err
	}
	shared, err := s.releasePages.get(ctx, lr.rel.EntryID, func(ctx context.Context, _ uint64, _ time.Time) (*releasePage, error) {
		return s.buildReleasePage(ctx, lr.rel, lr.entry)
	})
	if err != nil {
		return nil, err
	}
	p := *shared
	return &p, nil
}

// buildReleasePage gathers the page of rel (defined by entry) at the
// latest checkpoint.
func (s *Server) buildReleasePage(ctx context.Context, rel *gates.Release, entry ledger.Entry) (*releasePage, error) {
	rd, err := s.evaluate(ctx, rel)
	if err != nil {
		return nil, err
	}
	p := &releasePage{
		renders:   &renderCache{},
		pageBase:  pageBase{Title: "Release " + rel.Version, JSON: "/api/v1/releases/" + url.PathEscape(rel.Version) + "/readiness"},
		Rel:       rel,
		Entry:     entry,
		R:         rd,
		Gates:     byAttention(rd.Gates),
		Rule:      gates.CountingRule,
		Artifacts: sortedKV(rel.Artifacts),
	}
	kinds := map[string]string{}
	for _, g := range rel.Gates {
		kinds[g.Kind] = gates.KindRule(g.Kind)
	}
	p.KindRules = sortedKV(kinds)
	seen := map[string]bool{}
	for _, g := range p.Gates {
		p.Waivers = append(p.Waivers, g.Waivers...)
		for _, f := range g.Failing {
			if f.ID != "" && !seen[f.ID] {
				seen[f.ID] = true
				p.Failing = append(p.Failing, failingOption{ID: f.ID, Gate: g.ID, Summary: f.Summary})
			}
		}
	}
	sort.SliceStable(p.Waivers, func(i, j int) bool { return p.Waivers[i].CreatedAt.After(p.Waivers[j].CreatedAt) })
	for _, g := range rel.Gates {
		if g.Kind == gates.KindManual {
			p.Manual = append(p.Manual, g.ID)
		}
	}
	treeLane := gates.DefaultTreeEquivalenceLane
	for _, g := range rel.Gates {
		if g.Kind == gates.KindTreeEquivalence && g.Lane != "" {
			treeLane = g.Lane
		}
	}
	for _, c := range rel.Components {
		row := componentRow{Component: c, Same: c.Head == c.Reviewed}
		hs, _, err := s.store.Heads(ctx, ledger.HeadFilter{Repository: c.Repository, Commit: c.Head, Limit: 1})
		if err != nil {
			return nil, err
		}
		if len(hs) > 0 {
			row.Verified = &hs[0]
		}
		if !row.Same {
			es, _, err := s.store.Evidence(ctx, ledger.EvidenceFilter{Lane: treeLane, Commit: c.Head, Limit: 20})
			if err != nil {
				return nil, err
			}
			for i := range es {
				if gates.TreeClaim(&es[i].Evidence) != "" {
					continue // a posted claim is not shown as the comparison
				}
				f := ledger.JudgeTreeEquivalence(&es[i].Evidence, c.Reviewed)
				if !f.Decides || f.Details.BindingMismatch(rel.Version, c.Name, c.Pins) != "" {
					continue // not about this release's pins: the gate keeps it baseline
				}
				row.TreeEq, row.TreeEqOK, row.Outside = &es[i], f.Equal, f.Details.OutsidePins
				break
			}
		}
		p.Components = append(p.Components, row)
	}
	return p, nil
}

// pageRelease is GET /releases/{version}: the readiness and the approval
// state (who approved, when, current or stale) in the header, then the
// gate board, failed and open gates first, one row per gate (state as
// colour and word, a one-line reason, the record that decides it) whose
// folded details hold the full reason, the failing records with a link to
// a trajectory's divergent pair, the satisfying evidence, what is missing,
// the baseline (folded, each with why it does not count) and waivers; the
// components with their signed heads and tree equivalence, the bound
// artifacts, the counting rule written once (each gate links its kind's
// rule), and the forms to waive, sign off, supersede, approve and run the
// missing lanes.
func (s *Server) pageRelease(w http.ResponseWriter, r *http.Request) {
	p, err := s.loadReleasePage(r, chi.URLParam(r, "version"))
	if err != nil {
		s.renderError(w, r, err)
		return
	}
	switch d := r.URL.Query().Get("done"); d {
	case "waiver", "signoff", "approval", "supersede":
		p.Done = d
	}
	p.Forms = s.releaseForms(w, r, p.Rel.Version, formValues{})
	queued := -1
	if q, err := strconv.Atoi(r.URL.Query().Get("queued")); err == nil && q >= 0 && q <= 10000 {
		queued = q
	}
	if err := s.fillRunPlan(r.Context(), w, r, p, queued, ""); err != nil {
		s.renderError(w, r, err)
		return
	}
	s.renderRelease(w, r, http.StatusOK, p)
}

// pageEntry is GET /entries/{id}: it sends the browser to the page that
// shows a log entry of any kind (evidence page, heads list, release page,
// or the entry's JSON for other kinds).
func (s *Server) pageEntry(w http.ResponseWriter, r *http.Request) {
	e, err := s.store.Entry(r.Context(), chi.URLParam(r, "id"))
	if err != nil {
		s.renderError(w, r, err)
		return
	}
	target := "/api/v1/log/entries/" + url.PathEscape(e.ID)
	switch e.Kind {
	case ledger.KindEvidence:
		target = "/evidence/" + url.PathEscape(e.ID)
	case ledger.KindHead:
		var h ledger.HeadVerification
		if json.Unmarshal(e.Body, &h) == nil {
			target = "/heads?" + url.Values{"repository": {h.Repository}, "commit": {h.Commit}}.Encode()
		}
	case ledger.KindRelease:
		if v := ledger.EntryKey(e.Kind, e.Body); v != "" {
			target = "/releases/" + url.PathEscape(v)
		}
	}
	http.Redirect(w, r, target, http.StatusSeeOther)
}
