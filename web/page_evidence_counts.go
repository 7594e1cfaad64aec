package web

import (
	"context"
	"encoding/json"
	"net/url"
	"strings"

	"github.com/evidence-ledger/ledger/gates"
	"github.com/evidence-ledger/ledger/ledger"
)

// releaseCount is one line of an evidence page's "Counts for" list: how
// the record stands in one gate of one release that binds its repository,
// as that release's readiness verdict (gates.Evaluate, the counting rule)
// lists it. State is "counts" (it satisfies the gate), "fails" (it keeps
// the gate failed), "baseline" (it does not count, Text says why),
// "unlisted" (a gate reads its lane but lists only the newest baseline
// records), "out-of-scope" (no gate reads its lane) or "problem" (the
// release cannot be evaluated). Gate is "" for a line about the whole
// release; Link is the gate on the release page.
type releaseCount struct {
	Version, Gate, State, Text, Link string
}

// countsFor says, for every release with a component in e's repository
// (newest definition first), which gates e counts for and why it does not
// count for the others that read it, from the releases' cached readiness
// verdicts. Errors are the store's, listing the releases.
func (s *Server) countsFor(ctx context.Context, e ledger.EvidenceEntry) ([]releaseCount, error) {
	rels, err := gates.ListReleases(ctx, s.store)
	if err != nil {
		return nil, err
	}
	var out []releaseCount
	for _, rel := range rels {
		binds := false
		for _, c := range rel.Components {
			binds = binds || c.Repository == e.Evidence.Subject.Repository
		}
		if !binds {
			continue
		}
		page := "/releases/" + url.PathEscape(rel.Version)
		rd, err := s.evaluate(ctx, rel)
		if err != nil {
			_, body := errorBody(err)
			out = append(out, releaseCount{Version: rel.Version, State: "problem", Text: "cannot evaluate: " + body.Message, Link: page})
			continue
		}
		found := false
		for _, g := range rd.Gates {
			link := page + "#gate-" + g.ID
			for _, x := range g.Satisfying {
				if x.ID == e.ID {
					found = true
					out = append(out, releaseCount{rel.Version, g.ID, "counts", "counts: it satisfies the gate (" + string(g.State) + ")", link})
				}
			}
			for _, x := range g.Failing {
				if x.ID == e.ID {
					found = true
					out = append(out, releaseCount{rel.Version, g.ID, "fails", "counts: it keeps the gate failed until superseded or waived: " + x.Reason, link})
				}
			}
			for _, x := range g.Baseline {
				if x.ID == e.ID {
					found = true
					out = append(out, releaseCount{rel.Version, g.ID, "baseline", "does not count (baseline): " + x.Reason, link})
				}
			}
		}
		if found {
			continue
		}
		var readers []string
		for _, g := range rel.Gates {
			if gateReadsLane(g, e.Evidence.Lane) {
				readers = append(readers, g.ID)
			}
		}
		if len(readers) == 0 {
			out = append(out, releaseCount{Version: rel.Version, State: "out-of-scope", Text: "out of scope: no gate of this release reads lane " + e.Evidence.Lane, Link: page})
			continue
		}
		out = append(out, releaseCount{Version: rel.Version, Gate: strings.Join(readers, ", "), State: "unlisted",
			Text: "does not count: not at the release's pins for these gates, which list only the newest baseline records of the lane", Link: page + "#gate-" + readers[0]})
	}
	return out, nil
}

// gateReadsLane reports whether gate g reads records of lane: its lane, or
// the default lane of a trajectory or tree-equivalence gate naming none.
func gateReadsLane(g gates.Gate, lane string) bool {
	switch {
	case g.Lane != "":
		return g.Lane == lane
	case g.Kind == gates.KindTrajectory:
		return lane == gates.DefaultTrajectoryLane
	case g.Kind == gates.KindTreeEquivalence:
		return lane == gates.DefaultTreeEquivalenceLane
	}
	return false
}

// originalOf returns the id and format of the original an ingested
// record's details name (details.original, ingest.OriginalRef), or "".
func originalOf(details json.RawMessage) (id, format string) {
	var d struct {
		Original struct {
			ID     string `json:"id"`
			Format string `json:"format"`
		} `json:"original"`
	}
	if len(details) == 0 || json.Unmarshal(details, &d) != nil || len(d.Original.ID) != 32 || !ledger.LowerHex(d.Original.ID) {
		return "", ""
	}
	return d.Original.ID, d.Original.Format
}
