package gates

import (
	"fmt"
	"slices"
	"strings"

	"github.com/evidence-ledger/ledger/ledger"
)

// KindProvenance is the kind of gates over verified SLSA provenance: a
// bound artifact was built by an allowed builder from the component's
// reviewed (or head) commit.
const KindProvenance = "provenance"

// DefaultProvenanceLane is the lane of a provenance gate that names none
// (ingest.LanePredicates: lanes of the provenance family accept SLSA
// provenance Statements).
const DefaultProvenanceLane = "provenance/v1"

var provenanceKind = kindSpec{
	name:        KindProvenance,
	fields:      []string{"lane", "component", "artifact", "builders", "source"},
	defaultLane: DefaultProvenanceLane,
	validate: func(g *Gate, f string) error {
		if len(g.Builders) == 0 {
			return ledger.FieldError(f+".builders", "required: the builder ids (SLSA runDetails.builder.id) whose provenance counts")
		}
		for j, b := range g.Builders {
			if strings.TrimSpace(b) == "" || len(b) > 512 {
				return ledger.FieldError(fmt.Sprintf("%s.builders[%d]", f, j), "must be a builder id of 1-512 characters")
			}
			if slices.Contains(g.Builders[:j], b) {
				return ledger.FieldError(fmt.Sprintf("%s.builders[%d]", f, j), "duplicate builder id %q", b)
			}
		}
		if g.Source != "" && g.Source != "reviewed" && g.Source != "head" {
			return ledger.FieldError(f+".source", "must be reviewed or head, got %q", g.Source)
		}
		return nil
	},
	evaluate: (*evaluator).provenance,
	rule: "Only SLSA provenance whose facts the server extracted from a verified signature (a DSSE envelope of a registered runner key, a Sigstore bundle) counts: " +
		"at the pins (the artifact's bound digest among its subjects), built by one of the listed builder ids from the component's reviewed commit (or signed head, with source: head) in its repository. " +
		"A passing such record passes the gate; unsigned or posted provenance, another builder, another source commit or another artifact digest is baseline, shown with the reason.",
}

// provenanceBinding is the binding of provenance gate g: its component's
// reviewed (or head) commit and tree, about g's artifact.
func (ev *evaluator) provenanceBinding(g *Gate) binding {
	c, _ := ev.rel.Component(g.Component)
	if g.Source == "head" {
		return binding{comp: c, at: "head", commit: c.Head, tree: c.Tree, required: []string{g.Artifact}}
	}
	return binding{comp: c, at: "reviewed", commit: c.Reviewed, tree: c.ReviewedTree, required: []string{g.Artifact}}
}

// ProvenanceClaim returns why evidence e is not verified provenance the
// ledger can stand behind (TRUST.md rule 1), or "": its details carry the
// facts the server extracted from a verified signature
// (ledger.ProvenanceOf, VerifiedBy set), which no posted record can
// (RefuseServerMarkers).
func ProvenanceClaim(e *ledger.Evidence) string {
	pv := ledger.ProvenanceOf(e)
	if pv == nil || pv.VerifiedBy == "" {
		return "not verified provenance: no facts the server extracted from a signed SLSA provenance Statement"
	}
	return ""
}

// provenanceMismatch returns why verified provenance pv does not show g's
// artifact built by an allowed builder from b's commit in b's repository,
// or "".
func provenanceMismatch(pv *ledger.Provenance, g *Gate, b binding) string {
	src := pv.Source
	switch {
	case src.Commit == "":
		return "the provenance names no source commit"
	case src.Commit != b.commit:
		return fmt.Sprintf("built from commit %s, not %s's %s %s", short(src.Commit), b.comp.Name, atName(b.at), short(b.commit))
	case src.Repository != "" && src.Repository != repoPath(b.comp.Repository):
		return fmt.Sprintf("built from repository %q, not %q", src.Repository, b.comp.Repository)
	case !slices.Contains(g.Builders, pv.BuilderID):
		return fmt.Sprintf("built by %q, not a builder the gate allows", pv.BuilderID)
	}
	return ""
}

// repoPath is a repository URL or name as host/owner/name, the form
// ledger.ProvenanceSource.Repository takes.
func repoPath(repo string) string {
	r := strings.TrimPrefix(repo, "git+")
	if i := strings.Index(r, "://"); i >= 0 {
		r = r[i+3:]
	}
	return strings.TrimSuffix(strings.TrimSuffix(r, "/"), ".git")
}

func (ev *evaluator) provenance(g *Gate) (GateResult, error) {
	var res GateResult
	b := ev.provenanceBinding(g)
	bl := &baselines{limit: ev.baseLim}
	err := ev.forEachEvidence(ledger.EvidenceFilter{Lane: g.Lane, Commit: b.commit}, func(e ledger.EvidenceEntry) bool {
		why := ev.excluded(&e, b)
		if why == "" {
			why = ProvenanceClaim(&e.Evidence)
		}
		if why == "" && e.Evidence.Signer != nil {
			// Provenance a runner key vouched for stands only while that
			// key does, as for signed_by: a revoked key revokes it.
			_, why = ev.signerKey(e.Evidence.Signer)
		}
		if why == "" {
			why = provenanceMismatch(ledger.ProvenanceOf(&e.Evidence), g, b)
		}
		if why == "" && e.Evidence.Status != ledger.StatusPassed {
			why = fmt.Sprintf("status %s", e.Evidence.Status)
		}
		if why != "" {
			bl.add(e, why)
			return true
		}
		if len(res.Satisfying) < 50 {
			r := ref(e)
			pv := ledger.ProvenanceOf(&e.Evidence)
			r.Summary = fmt.Sprintf("%s built by %s from %s %s (%s)", g.Artifact, pv.BuilderID, b.comp.Name, short(pv.Source.Commit), pv.VerifiedBy)
			res.Satisfying = append(res.Satisfying, r)
		}
		return true
	})
	if err != nil {
		return res, err
	}
	if err := ev.sampleBaseline(g.Lane, b, bl, nil); err != nil {
		return res, err
	}
	res.Baseline = bl.list
	what := fmt.Sprintf("%s=%s", g.Artifact, shortDigest(ev.rel.Artifacts[g.Artifact]))
	if len(res.Satisfying) > 0 {
		res.State, res.Reason = StatePassed, fmt.Sprintf("verified provenance: %s built by an allowed builder from %s's %s %s", what, b.comp.Name, atName(b.at), short(b.commit))
		return res, nil
	}
	res.State = StateOpen
	res.Missing = append(res.Missing, fmt.Sprintf("verified SLSA provenance (%s) of %s built by %s from %s's %s %s", g.Lane, what, strings.Join(g.Builders, " or "), b.comp.Name, atName(b.at), short(b.commit)))
	res.Reason = fmt.Sprintf("no verified provenance of %s from an allowed builder at %s's %s %s", what, b.comp.Name, atName(b.at), short(b.commit))
	if n := len(bl.list) + bl.more; n > 0 {
		res.Reason += fmt.Sprintf("; %d other record(s) do not count (see baseline)", n)
	}
	return res, nil
}
