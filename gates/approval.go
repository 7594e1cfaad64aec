package gates

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
)

// Decision is the part of a readiness verdict an approval approves: the
// release definition entry, its pins, whether it was ready and every
// gate's state. Reasons and evidence lists are not part of it: another
// passing run does not change what was approved, a gate changing state
// does.
type Decision struct {
	Version      string         `json:"version"`
	ReleaseEntry string         `json:"release_entry"`
	PinsDigest   string         `json:"pins_digest"`
	Ready        bool           `json:"ready"`
	Gates        []GateDecision `json:"gates"`
}

// GateDecision is one gate's state in a Decision.
type GateDecision struct {
	ID    string `json:"id"`
	State State  `json:"state"`
}

// Decision returns the decision of the verdict r.
func (r *Readiness) Decision() Decision {
	d := Decision{Version: r.Version, ReleaseEntry: r.Release.ID, PinsDigest: r.PinsDigest, Ready: r.Ready, Gates: make([]GateDecision, len(r.Gates))}
	for i, g := range r.Gates {
		d.Gates[i] = GateDecision{g.ID, g.State}
	}
	return d
}

// Digest returns "sha256:<hex>" of the canonical JSON of d.
func (d Decision) Digest() string {
	b, err := ledger.CanonicalBody(d)
	if err != nil { // cannot happen: strings and booleans
		panic(err)
	}
	h := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(h[:])
}

// The states of an approval.
const (
	// ApprovalCurrent: the verdict now has the decision the approval
	// approved; the approval counts.
	ApprovalCurrent = "current"
	// ApprovalStale: the decision has changed since (a gate changed
	// state, the pins or the definition changed), or the release's
	// two-person rule (ApprovalRule) excludes the approver; the approval
	// no longer counts.
	ApprovalStale = "stale"
)

// ApprovalState is a final approval as a verdict lists it: the approval
// and whether it still holds at the verdict's checkpoint, with why not.
type ApprovalState struct {
	ID             string        `json:"id"`
	Index          uint64        `json:"index"`
	Author         string        `json:"author"`
	Note           string        `json:"note,omitempty"`
	CreatedAt      time.Time     `json:"created_at"`
	Checkpoint     CheckpointRef `json:"checkpoint"`
	VerdictSHA256  string        `json:"verdict_sha256"`
	DecisionDigest string        `json:"decision_digest,omitempty"`
	State          string        `json:"state"`
	Why            string        `json:"why,omitempty"`
}

type approvalEntry struct {
	ledger.Entry
	a Approval
}

// approvalStates lists the approvals of ev (newest first) against the
// decision now and the release's two-person rule (ruled: the records
// whose authors it keeps from approving), and whether any is current.
func (ev *evaluator) approvalStates(now Decision, ruled []handRecord) ([]ApprovalState, bool) {
	var out []ApprovalState
	approved := false
	digest := now.Digest()
	for _, ae := range ev.approvals {
		a := ae.a
		st := ApprovalState{ID: ae.ID, Index: ae.Index, Author: a.Author, Note: a.Note, CreatedAt: a.CreatedAt, Checkpoint: a.Checkpoint, VerdictSHA256: a.VerdictSHA256, DecisionDigest: a.DecisionDigest, State: ApprovalCurrent}
		switch {
		case a.Decision == nil || a.DecisionDigest == "":
			st.State, st.Why = ApprovalStale, "the approval names no decision (checkpoint and verdict only), so it cannot be shown to hold"
		case a.DecisionDigest != digest || a.Decision.Digest() != digest:
			st.State, st.Why = ApprovalStale, staleWhy(*a.Decision, now, a.Checkpoint.Size)
		}
		if same := byAuthor(ruled, a.Author); len(same) > 0 {
			why := ev.rel.Approval.staleWhy(a.Author, same)
			if st.State == ApprovalStale {
				why = st.Why + "; " + why
			}
			st.State, st.Why = ApprovalStale, why
		}
		if st.State == ApprovalCurrent {
			approved = true
		}
		out = append(out, st)
	}
	return out, approved
}

// staleWhy says how decision now differs from approved (granted at
// checkpoint size).
func staleWhy(approved, now Decision, size uint64) string {
	var parts []string
	if approved.PinsDigest != now.PinsDigest {
		parts = append(parts, "the pins changed")
	}
	if approved.ReleaseEntry != now.ReleaseEntry {
		parts = append(parts, fmt.Sprintf("the release was redefined (entry %s, approved %s)", short(now.ReleaseEntry), short(approved.ReleaseEntry)))
	}
	if approved.Ready && !now.Ready {
		parts = append(parts, "the release is no longer ready")
	}
	was := map[string]State{}
	for _, g := range approved.Gates {
		was[g.ID] = g.State
	}
	for _, g := range now.Gates {
		switch s, ok := was[g.ID]; {
		case !ok:
			parts = append(parts, fmt.Sprintf("gate %s is new (%s)", g.ID, g.State))
		case s != g.State:
			parts = append(parts, fmt.Sprintf("gate %s was %s, now %s", g.ID, s, g.State))
		}
		delete(was, g.ID)
	}
	removed := make([]string, 0, len(was))
	for id := range was {
		removed = append(removed, id)
	}
	sort.Strings(removed)
	for _, id := range removed {
		parts = append(parts, "gate "+id+" was removed")
	}
	if len(parts) == 0 {
		parts = append(parts, "the decision digest differs")
	}
	return fmt.Sprintf("approved the verdict at checkpoint %d; since then %s", size, strings.Join(parts, "; "))
}
