package gates

import (
	"time"

	"github.com/evidence-ledger/ledger/ledger"
)

// State is a gate's computed state.
type State string

// The gate states. A gate is never set by hand: it is open until matching
// evidence exists, passed when it does, failed when matching evidence shows
// a failure, waived when an applicable waiver covers it.
const (
	StatePassed State = "passed"
	StateFailed State = "failed"
	StateOpen   State = "open"
	StateWaived State = "waived"
)

// EvidenceRef points at a log entry that satisfies (or fails) a gate.
type EvidenceRef struct {
	ID      string         `json:"id"`
	Index   uint64         `json:"index"`
	Lane    string         `json:"lane,omitempty"`
	Backend ledger.Backend `json:"backend,omitempty"`
	Status  ledger.Status  `json:"status,omitempty"`
	Summary string         `json:"summary,omitempty"` // e.g. "216/216 exact, control caught"
}

// BaselineRef is evidence for the same lane that does not count for this
// release, with the reason (older artifact, other commit, dirty tree, other
// backend, control not caught, claimed rather than computed, superseded).
type BaselineRef struct {
	EvidenceRef
	Reason string `json:"reason"`
}

// FailingRef is a record at the release's exact pins that keeps its gate
// failed (see CountingRule) until it is superseded or the gate is waived,
// with why it fails. For a trajectory run, Trajectory names it and Pair is
// the id of the run it was compared with: the two are the divergent pair.
type FailingRef struct {
	EvidenceRef
	Reason     string `json:"reason"`
	Trajectory string `json:"trajectory,omitempty"`
	Pair       string `json:"pair,omitempty"`
}

// WaiverInfo is an applicable (or recently lapsed) waiver shown with a gate.
type WaiverInfo struct {
	ID        string    `json:"id"`
	Gate      string    `json:"gate"`
	Reason    string    `json:"reason"`
	Author    string    `json:"author"`
	Expires   time.Time `json:"expires"`
	Applies   bool      `json:"applies"`
	WhyNot    string    `json:"why_not,omitempty"` // "expired", "pins changed"
	CreatedAt time.Time `json:"created_at"`
}

// GateResult is one gate's evaluated state with its reason, the evidence
// that satisfies it and what is missing.
type GateResult struct {
	ID     string `json:"id"`
	Kind   string `json:"kind"`
	Title  string `json:"title,omitempty"`
	State  State  `json:"state"`
	Reason string `json:"reason"`
	// Rule is the kind's counting rule in words (CountingRule).
	Rule       string        `json:"rule,omitempty"`
	Satisfying []EvidenceRef `json:"satisfying,omitempty"`
	// Failing are the records at the exact pins that keep the gate
	// failed; none when it is not failed by evidence.
	Failing  []FailingRef  `json:"failing,omitempty"`
	Missing  []string      `json:"missing,omitempty"`
	Baseline []BaselineRef `json:"baseline,omitempty"`
	Waivers  []WaiverInfo  `json:"waivers,omitempty"`
	// Divergence is set by trajectory gates: the first divergent zero-based
	// index and both tokens.
	Divergence *Divergence `json:"divergence,omitempty"`
	// Throughput is set by throughput gates with a judged record: the
	// decisive case's speed ratio with its interval and the threshold.
	Throughput *ThroughputResult `json:"throughput,omitempty"`
}
