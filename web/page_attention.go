package web

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strings"

	"github.com/evidence-ledger/ledger/admit"
	"github.com/evidence-ledger/ledger/gates"
	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/runs"
	"github.com/evidence-ledger/ledger/witness"
)

// The overview's "Needs attention" list and its release and lane views:
// what a reviewer must act on first (failed gates, stale approvals, runs
// waiting with no approved agent to serve them, witnesses behind, a
// tampered state), each with a link to where it is acted on.

// attentionItem is one thing a reviewer must act on: Kind ("failed",
// "stale", "waiting", "witness", "tampered"), Title the link text, Link
// the page (and anchor) it is acted on, Text the detail in words.
type attentionItem struct {
	Kind, Title, Link, Text string
}

// releaseRow is one release on the overview and the releases list, with
// its approval: Approval is "approved" (a current approval), "stale" (only
// stale ones) or "" (none); By and At name the newest approval.
type releaseRow struct {
	ReleaseSummary
	Approval string
	By       string
	At       string
	rank     int
}

// urgency ranks a release for the lists: one that cannot be evaluated
// first, then failed gates, open gates, ready but not approved, and ready
// and approved last.
func (r releaseRow) urgency() int {
	switch {
	case r.Problem != "":
		return 0
	case r.Failed > 0:
		return 1
	case r.Open > 0 || !r.Ready:
		return 2
	case r.Approval != "approved":
		return 3
	}
	return 4
}

// repoLanes are the latest runs of each lane per backend of one
// repository.
type repoLanes struct {
	Repository string
	Lanes      []LaneLatest
}

// releaseViews evaluates every release (gates.ListReleases, newest
// definition first) once and returns the API's summaries in that order,
// the page's rows ordered by urgency (stably), and the attention items of
// their failed gates and stale approvals. A release that fails to evaluate
// is listed with the problem.
func (s *Server) releaseViews(ctx context.Context) ([]ReleaseSummary, []releaseRow, []attentionItem, error) {
	rels, err := gates.ListReleases(ctx, s.store)
	if err != nil {
		return nil, nil, nil, err
	}
	sums := make([]ReleaseSummary, 0, len(rels))
	rows := make([]releaseRow, 0, len(rels))
	var att []attentionItem
	for _, rel := range rels {
		sum := ReleaseSummary{Version: rel.Version, Title: rel.Title}
		row := releaseRow{}
		page := "/releases/" + url.PathEscape(rel.Version)
		rd, err := s.evaluate(ctx, rel)
		if err != nil {
			st, body := errorBody(err)
			if st >= 500 {
				s.log.Error("overview: evaluate release", "version", rel.Version, "err", err)
			}
			sum.Problem = "cannot evaluate: " + body.Message
			att = append(att, attentionItem{Kind: "failed", Title: "release " + rel.Version, Link: page, Text: sum.Problem})
		} else {
			sum.Ready, sum.ComputedAt = rd.Ready, rd.ComputedAt
			sum.Passed, sum.Failed = rd.Counts[gates.StatePassed], rd.Counts[gates.StateFailed]
			sum.Open, sum.Waived = rd.Counts[gates.StateOpen], rd.Counts[gates.StateWaived]
			for _, g := range rd.Gates {
				if g.State == gates.StateFailed {
					att = append(att, attentionItem{Kind: "failed", Title: rel.Version + " gate " + g.ID + " failed", Link: page + "#gate-" + g.ID, Text: g.Reason})
				}
			}
			for i, a := range rd.Approvals {
				if i == 0 {
					row.By, row.At = a.Author, fmtTime(a.CreatedAt)
				}
				if a.State == gates.ApprovalCurrent {
					row.Approval, row.By, row.At = "approved", a.Author, fmtTime(a.CreatedAt)
					break
				}
				row.Approval = "stale"
			}
			if row.Approval == "stale" {
				why := ""
				if len(rd.Approvals) > 0 {
					why = rd.Approvals[0].Why
				}
				att = append(att, attentionItem{Kind: "stale", Title: rel.Version + " approval by " + row.By + " is stale", Link: page + "#approvals", Text: why})
			}
		}
		row.ReleaseSummary = sum
		row.rank = row.urgency()
		sums = append(sums, sum)
		rows = append(rows, row)
	}
	sort.SliceStable(rows, func(i, j int) bool { return rows[i].rank < rows[j].rank })
	return sums, rows, att, nil
}

// witnessAttention returns the attention items of the witnessing status
// w (nil: the server runs no witnesses): a checkpoint without its quorum,
// a witness behind the log, a witness that refused the log's checkpoint
// (a fork or rollback: a tampered state).
func witnessAttention(w *witness.Status, size uint64) []attentionItem {
	if w == nil {
		return nil
	}
	var out []attentionItem
	if !w.Witnessed {
		text := "quorum " + w.Quorum + " not met"
		if !w.UnwitnessedSince.IsZero() {
			text += " since " + fmtTime(w.UnwitnessedSince)
		}
		out = append(out, attentionItem{Kind: "witness", Title: "checkpoint unwitnessed", Link: "#h-log", Text: text})
	}
	for _, ws := range w.Witnesses {
		switch {
		case ws.Refused:
			out = append(out, attentionItem{Kind: "tampered", Title: "witness " + ws.Name + " refused the log's checkpoint", Link: "#h-log", Text: "inconsistent with what it cosigned before (a fork or rollback): " + ws.LastError})
		case ws.CosignedSize < size:
			text := fmt.Sprintf("cosigned size %d of %d", ws.CosignedSize, size)
			if ws.LastError != "" {
				text += ": " + ws.LastError
			}
			out = append(out, attentionItem{Kind: "witness", Title: "witness " + ws.Name + " is behind", Link: "#h-log", Text: text})
		}
	}
	return out
}

// tamperedAttention is the tampered state Config.Integrity reports, as an
// attention item, or nil.
func (s *Server) tamperedAttention() []attentionItem {
	if s.cfg.Integrity == nil {
		return nil
	}
	ts, bad := s.cfg.Integrity()
	if !bad {
		return nil
	}
	return []attentionItem{{Kind: "tampered", Title: fmt.Sprintf("leaf %d tampered", ts.Index), Link: "/api/v1/log/leaves/" + fmt.Sprint(ts.Index), Text: ts.Problem + "; run ledger audit"}}
}

// waitingAttention lists the queued runs no approved agent serves (by
// backend, labels, build commit, repository and lanes: admit.AgentServes),
// or that only offline approved agents serve. Runs are not in the log, so
// this is read for each request. A run store error is logged and leaves
// the list empty.
func (s *Server) waitingAttention(ctx context.Context) []attentionItem {
	if s.runs == nil {
		return nil
	}
	act, err := s.runs.store.List(ctx, "active", maxPlanScans)
	if err != nil {
		s.log.Error("overview: list runs", "err", err)
		return nil
	}
	var queued []runs.Run
	for _, r := range act {
		if r.State == runs.Queued {
			queued = append(queued, r.Visible())
		}
	}
	if len(queued) == 0 {
		return nil
	}
	agents, err := s.agentsWithApproval(ctx)
	if err != nil {
		s.log.Error("overview: list agents", "err", err)
		return nil
	}
	var out []attentionItem
	for _, r := range queued {
		online, offline := 0, 0
		for _, a := range agents {
			if !a.Approved || !admit.AgentServes(a.Agent, ledger.Token{})(r) {
				continue
			}
			if a.Online {
				online++
			} else {
				offline++
			}
		}
		if online > 0 {
			continue
		}
		what := string(r.Backend) + " " + strings.Join(r.Lanes, ", ")
		if len(r.Labels) > 0 {
			what += " with labels " + runs.SortedLabels(r.Labels)
		}
		text := "no approved agent serves " + what
		if offline > 0 {
			text = fmt.Sprintf("the %d approved agent(s) serving %s are offline", offline, what)
		}
		out = append(out, attentionItem{Kind: "waiting", Title: "run " + shortID(r.ID) + " waiting", Link: "/runs#run-" + r.ID, Text: text})
	}
	return out
}

// laneGroups groups the latest run of each lane per backend by
// repository, from recent (newest first), repositories and lanes sorted.
func laneGroups(recent []ledger.EvidenceEntry) []repoLanes {
	type key struct {
		repo, lane string
		backend    ledger.Backend
	}
	seen := map[key]bool{}
	by := map[string][]LaneLatest{}
	for _, e := range recent {
		k := key{e.Evidence.Subject.Repository, e.Evidence.Lane, e.Evidence.Backend}
		if !seen[k] {
			seen[k] = true
			by[k.repo] = append(by[k.repo], LaneLatest{LaneRun: laneRun(e), Lane: e.Evidence.Lane})
		}
	}
	out := make([]repoLanes, 0, len(by))
	for repo, ls := range by {
		sort.SliceStable(ls, func(i, j int) bool {
			if ls[i].Lane != ls[j].Lane {
				return ls[i].Lane < ls[j].Lane
			}
			return ls[i].Backend < ls[j].Backend
		})
		out = append(out, repoLanes{Repository: runs.Visible(repo), Lanes: ls})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Repository < out[j].Repository })
	return out
}

// releasesPage is the data of /releases.
type releasesPage struct {
	pageBase
	Rows []releaseRow
}

// pageReleases is GET /releases: every release, failed and open first,
// ready and approved last, with its gate counts and approval.
func (s *Server) pageReleases(w http.ResponseWriter, r *http.Request) {
	o, err := s.sharedOverview(r.Context())
	if err != nil {
		s.renderError(w, r, err)
		return
	}
	s.render(w, r, http.StatusOK, "releases", releasesPage{pageBase: pageBase{Title: "Releases", Nav: "releases", JSON: "/api/v1/releases"}, Rows: o.releaseRows})
}
