package gates

import (
	"fmt"
	"strings"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/ledger/auth"
)

// KindSignedHeads is the kind of gates over head verifications: each
// component's signed head verified good and trusted.
const KindSignedHeads = "signed-heads"

var signedHeadsKind = kindSpec{
	name:     KindSignedHeads,
	fields:   []string{"components"},
	evaluate: (*evaluator).signedHeads,
	rule: "Per component, every verification of the signed head at the pins (repository, release policy, tree) counts; a release that binds no policy counts none and the gate stays open: " +
		"any verdict other than good, or a decision other than trusted, keeps the gate failed until superseded or waived; " +
		"otherwise a good and trusted verification passes. Unsigned heads and verifications that could not check the object leave it open.",
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
	case ev.noPolicy != "":
		// Every verification is baseline: which policy would judge them is
		// not the release's choice, so the gate is open, not failed.
		res.State, res.Reason = StateOpen, ev.noPolicy
	case len(t.failed) > 0:
		res.State, res.Reason = StateFailed, strings.Join(t.failed, "; ")
	case len(res.Missing) > 0:
		res.State, res.Reason = StateOpen, fmt.Sprintf("%d of %d signed heads verified good and trusted; %d not verified yet, %d unsigned", n-len(res.Missing), n, t.notVerified, len(res.Missing)-t.notVerified)
	default:
		res.State, res.Reason = StatePassed, fmt.Sprintf("all %d signed heads verified good and trusted", n)
	}
	return res, nil
}

// headOf reads every verification of c's head. Those at other pins (other
// repository, policy or tree), claims (headClaim) and superseded ones are
// baseline; of the rest, any failing one fails c (CountingRule), else a
// good and trusted one satisfies it.
func (ev *evaluator) headOf(c Component, res *GateResult, t *headsTally) error {
	var passing, failing []ledger.HeadEntry
	unsigned := false
	err := ev.forEachHead(ledger.HeadFilter{Commit: c.Head}, func(h ledger.HeadEntry) bool {
		v := h.Head
		if v.Commit != c.Head {
			return true
		}
		if r := ev.headExcluded(c, h); r != "" {
			res.Baseline = append(res.Baseline, BaselineRef{EvidenceRef: headRef(h), Reason: r})
			return true
		}
		switch {
		case v.Verdict == ledger.VerdictGood && v.Decision == ledger.DecisionTrusted:
			passing = append(passing, h)
		case v.Verdict == ledger.VerdictUnsigned:
			// An unsigned head is not a bad signature: the gate stays open
			// until the head is signed and verified again.
			unsigned = true
			res.Baseline = append(res.Baseline, BaselineRef{EvidenceRef: headRef(h), Reason: "the head is unsigned"})
		case v.Verdict == ledger.VerdictError:
			res.Baseline = append(res.Baseline, BaselineRef{EvidenceRef: headRef(h), Reason: "the verification could not check the object: " + v.Reason})
		default:
			failing = append(failing, h)
		}
		return true
	})
	if err != nil {
		return err
	}
	switch {
	case len(failing) > 0:
		v := failing[0].Head
		why := fmt.Sprintf("%s head %s: verdict %s, decision %s", c.Name, short(c.Head), v.Verdict, v.Decision)
		if v.Reason != "" {
			why += " (" + v.Reason + ")"
		}
		if len(failing) > 1 {
			why += fmt.Sprintf(" and %d more failing verification(s)", len(failing)-1)
		}
		t.failed = append(t.failed, why)
		for _, h := range failing {
			res.Failing = append(res.Failing, FailingRef{EvidenceRef: headRef(h), Reason: fmt.Sprintf("verdict %s, decision %s at the release's pins", h.Head.Verdict, h.Head.Decision)})
		}
	case len(passing) > 0:
		res.Satisfying = append(res.Satisfying, headRef(passing[0]))
	case unsigned:
		res.Missing = append(res.Missing, fmt.Sprintf("a signature on %s's head %s: it is unsigned (sign it, then `ledger verify head --record`)", c.Name, short(c.Head)))
	default:
		t.notVerified++
		res.Missing = append(res.Missing, fmt.Sprintf("a verification of %s's signed head %s (%s) that is good and trusted", c.Name, c.Head, c.Repository))
	}
	return nil
}

// headExcluded returns why verification h does not count for c: another
// repository, policy or tree, a claim, or a supersede; "" when it counts.
func (ev *evaluator) headExcluded(c Component, h ledger.HeadEntry) string {
	v := h.Head
	switch {
	case v.Repository != c.Repository:
		return fmt.Sprintf("verified as repository %q, release binds %s to %q", v.Repository, c.Name, c.Repository)
	case ev.noPolicy != "":
		return ev.noPolicy
	case ev.policy != "" && v.Policy != ev.policy:
		return fmt.Sprintf("verified under policy %s, release requires %s", shortDigest(v.Policy), shortDigest(ev.policy))
	case c.Tree != "" && v.Tree != "" && v.Tree != c.Tree:
		return fmt.Sprintf("the verified commit's tree %s is not the release's tree pin %s", short(v.Tree), short(c.Tree))
	}
	if r := headClaim(&v); r != "" {
		return r
	}
	if r, ok := ev.supersededBy(h.ID); ok {
		return r
	}
	return ""
}

// resolvePolicy sets ev.policy from the release's policy_digest, else from
// the registered policy it names (TRUST.md rule 2: a head counts only when
// it was verified under the policy the release binds); it sets ev.noPolicy
// instead when the named policy is not registered or the release binds none.
func (ev *evaluator) resolvePolicy() error {
	switch {
	case ev.rel.PolicyDigest != "":
		ev.policy = ev.rel.PolicyDigest
	case ev.rel.Policy != "":
		p, err := auth.ResolvePolicy(ev.ctx, ev.store, ev.rel.Policy, ev.asOf)
		switch {
		case ledger.ErrorCode(err) == ledger.CodeNotFound:
			ev.noPolicy = fmt.Sprintf("the release's policy %q is not registered (ledger policy apply)", ev.rel.Policy)
		case err != nil:
			return err
		default:
			ev.policy = p.Policy.Digest
		}
	default:
		ev.noPolicy = ReasonNoPolicy
	}
	return nil
}

// ReasonNoPolicy is why a signed-heads gate of a release that binds no
// trust policy (neither policy nor policy_digest) stays open: a head
// verification counts only under the policy the release names, never one
// the verifying caller chose (TRUST.md rule 2).
const ReasonNoPolicy = "release binds no policy: a head verification counts only under the trust policy the release names (add policy: NAME, registered with `ledger policy apply`, or policy_digest)"
