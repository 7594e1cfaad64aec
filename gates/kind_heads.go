package gates

import (
	"fmt"
	"strings"

	"github.com/evidence-ledger/ledger/ledger"
)

// KindSignedHeads is the kind of gates over head verifications: each
// component's signed head verified good and trusted.
const KindSignedHeads = "signed-heads"

var signedHeadsKind = kindSpec{
	name:     KindSignedHeads,
	fields:   []string{"components"},
	evaluate: (*evaluator).signedHeads,
}

func headRef(h ledger.HeadEntry) EvidenceRef {
	v := h.Head
	s := fmt.Sprintf("%s %s: %s, %s", v.Repository, short(v.Commit), v.Verdict, v.Decision)
	if v.Signer != "" {
		s += ", signer " + v.Signer
	}
	if v.Scheme != "" {
		s += " (" + v.Scheme + ")"
	}
	return EvidenceRef{ID: h.ID, Index: h.Index, Summary: s}
}

// headsTally is what the head verifications of a gate's components show.
type headsTally struct {
	failed      []string
	notVerified int
}

func (ev *evaluator) signedHeads(g *Gate) (GateResult, error) {
	var res GateResult
	var t headsTally
	comps := ev.components(g)
	for _, c := range comps {
		if err := ev.headOf(c, &res, &t); err != nil {
			return res, err
		}
	}
	n := len(comps)
	switch {
	case len(t.failed) > 0:
		res.State, res.Reason = StateFailed, strings.Join(t.failed, "; ")
	case len(res.Missing) > 0:
		res.State, res.Reason = StateOpen, fmt.Sprintf("%d of %d signed heads verified good and trusted; %d not verified yet, %d unsigned", len(res.Satisfying), n, t.notVerified, len(res.Missing)-t.notVerified)
	default:
		res.State, res.Reason = StatePassed, fmt.Sprintf("all %d signed heads verified good and trusted", n)
	}
	return res, nil
}

// headOf reads the verifications of c's head, newest first, to the first
// one that applies (same repository, the release's policy): it decides.
// The ones before it are listed as baseline.
func (ev *evaluator) headOf(c Component, res *GateResult, t *headsTally) error {
	var decided bool
	err := ev.forEachHead(ledger.HeadFilter{Commit: c.Head}, func(h ledger.HeadEntry) bool {
		v := h.Head
		if v.Commit != c.Head {
			return true
		}
		if v.Repository != c.Repository {
			res.Baseline = append(res.Baseline, BaselineRef{EvidenceRef: headRef(h), Reason: fmt.Sprintf("verified as repository %q, release binds %s to %q", v.Repository, c.Name, c.Repository)})
			return true
		}
		if ev.rel.PolicyDigest != "" && v.Policy != ev.rel.PolicyDigest {
			res.Baseline = append(res.Baseline, BaselineRef{EvidenceRef: headRef(h), Reason: fmt.Sprintf("verified under policy %s, release requires %s", shortDigest(v.Policy), shortDigest(ev.rel.PolicyDigest))})
			return true
		}
		decided = true
		judgeHead(c, h, res, t)
		return false // the newest applicable verification decides
	})
	if err != nil {
		return err
	}
	if !decided {
		t.notVerified++
		res.Missing = append(res.Missing, fmt.Sprintf("a verification of %s's signed head %s (%s) that is good and trusted", c.Name, c.Head, c.Repository))
	}
	return nil
}

// judgeHead records what the deciding verification h of c's head says.
func judgeHead(c Component, h ledger.HeadEntry, res *GateResult, t *headsTally) {
	v := h.Head
	switch {
	case c.Tree != "" && v.Tree != "" && v.Tree != c.Tree:
		t.failed = append(t.failed, fmt.Sprintf("%s: the verified head's tree %s is not the release's tree pin %s", c.Name, short(v.Tree), short(c.Tree)))
		res.Baseline = append(res.Baseline, BaselineRef{EvidenceRef: headRef(h), Reason: "tree differs from the release's tree pin"})
	case v.Verdict == ledger.VerdictGood && v.Decision == ledger.DecisionTrusted:
		res.Satisfying = append(res.Satisfying, headRef(h))
	case v.Verdict == ledger.VerdictUnsigned:
		// An unsigned head is not a bad signature: the gate stays open
		// until the head is signed and verified again.
		res.Missing = append(res.Missing, fmt.Sprintf("a signature on %s's head %s: it is unsigned (sign it, then `ledger verify head --record`)", c.Name, short(c.Head)))
		res.Baseline = append(res.Baseline, BaselineRef{EvidenceRef: headRef(h), Reason: "the head is unsigned"})
	default:
		why := fmt.Sprintf("%s head %s: verdict %s, decision %s", c.Name, short(c.Head), v.Verdict, v.Decision)
		if v.Reason != "" {
			why += " (" + v.Reason + ")"
		}
		t.failed = append(t.failed, why)
		res.Baseline = append(res.Baseline, BaselineRef{EvidenceRef: headRef(h), Reason: "newest verification is not good and trusted"})
	}
}
