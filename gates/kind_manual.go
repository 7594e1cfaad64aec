package gates

import (
	"fmt"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
)

// KindManual is the kind of gates a holder of a role signs off (Signoff).
const KindManual = "manual"

var manualKind = kindSpec{
	name:   KindManual,
	fields: []string{"role"},
	validate: func(g *Gate, f string) error {
		if !roleRe.MatchString(g.Role) {
			return ledger.FieldError(f+".role", "required: the role whose holder signs off, 1-64 of [A-Za-z0-9._-], got %q", g.Role)
		}
		return nil
	},
	evaluate: func(ev *evaluator, g *Gate) (GateResult, error) { return ev.manual(g), nil },
	rule: "A sign-off by a token holding the gate's role, for the current pins, passes; " +
		"sign-offs by another role or for other pins are baseline. No record fails a manual gate.",
}

func (ev *evaluator) manual(g *Gate) GateResult {
	var res GateResult
	pins := ev.rel.PinsDigest()
	for _, se := range ev.signoffs {
		s := se.s
		if s.Gate != g.ID {
			continue
		}
		r := EvidenceRef{ID: se.ID, Index: se.Index, Summary: fmt.Sprintf("signed off by %s (%s) at %s", s.Author, s.Role, s.CreatedAt.Format(time.RFC3339))}
		if s.Note != "" {
			r.Summary += ": " + s.Note
		}
		switch {
		case s.Role != g.Role:
			res.Baseline = append(res.Baseline, BaselineRef{EvidenceRef: r, Reason: fmt.Sprintf("signed with role %s, gate needs %s", s.Role, g.Role)})
		case s.PinsDigest != pins:
			res.Baseline = append(res.Baseline, BaselineRef{EvidenceRef: r, Reason: "signed off for other pins (" + shortDigest(s.PinsDigest) + ")"})
		default:
			res.Satisfying = append(res.Satisfying, r)
		}
	}
	if len(res.Satisfying) > 0 {
		res.State, res.Reason = StatePassed, res.Satisfying[0].Summary
		return res
	}
	res.State = StateOpen
	res.Reason = fmt.Sprintf("no sign-off by a holder of role %s for the current pins", g.Role)
	res.Missing = []string{fmt.Sprintf("a sign-off by a token holding role %s (POST /api/v1/releases/%s/signoffs or ledger release signoff)", g.Role, ev.rel.Version)}
	return res
}
