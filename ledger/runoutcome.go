package ledger

import (
	"fmt"
	"regexp"
	"strings"
	"time"
)

// KindRunOutcome is the entry kind of a run's final outcome (RunOutcome):
// the server appends one when a run queued through POST /api/v1/runs ends
// (done, failed, canceled or expired), in the same append as the evidence
// the finishing attempt produced. The run's bookkeeping (queue position,
// leases, progress) is mutable state outside the log (package runs); what
// the run produced and how it ended are leaves.
const KindRunOutcome Kind = "run-outcome"

// The final states of a run, as a RunOutcome carries them.
const (
	RunDone     = "done"     // every lane ran and recorded evidence that passed
	RunFailed   = "failed"   // the lanes ran and recorded evidence; one did not pass
	RunCanceled = "canceled" // canceled before it finished: nothing was recorded as passed
	RunExpired  = "expired"  // every attempt lost its lease (infrastructure failures)
)

var runIDRe = regexp.MustCompile(`^run_[0-9a-f]{32}$`)

// ValidRunID reports whether s is a run id: "run_" and 32 lowercase hex
// digits.
func ValidRunID(s string) bool { return runIDRe.MatchString(s) }

// RunAttempt is one attempt of a run: the agent that held its lease and
// how the attempt ended. Outcome is "finished" (the agent reported the
// attempt's result), "infrastructure" (the lease expired: the agent
// stopped extending it; never a failed lane) or "canceled".
type RunAttempt struct {
	Attempt int       `json:"attempt"`
	Agent   string    `json:"agent"`
	Outcome string    `json:"outcome"`
	Reason  string    `json:"reason,omitempty"`
	At      time.Time `json:"at"`
}

// RunOutcome is the body of a KindRunOutcome entry. Run is the run id,
// State its final state (RunDone, RunFailed, RunCanceled, RunExpired),
// Backend and Lanes what it was asked to run, Labels the agent labels it
// required, Agent the agent of the finishing attempt ("" when none
// finished), Evidence the content ids of the evidence entries appended
// with it (in the same append; empty for canceled and expired runs),
// Attempts every attempt in order, By the token name that queued it.
// The CaseSelection members (cases, case_budget, max_samples) are the
// case selection the run asked of its lanes that select cases, left out
// when it asked for none (the lanes' defaults).
type RunOutcome struct {
	Run     string            `json:"run"`
	State   string            `json:"state"`
	Backend Backend           `json:"backend"`
	Lanes   []string          `json:"lanes"`
	Labels  map[string]string `json:"labels,omitempty"`
	CaseSelection
	Agent    string       `json:"agent,omitempty"`
	Evidence []string     `json:"evidence"`
	Attempts []RunAttempt `json:"attempts"`
	By       string       `json:"by"`
	At       time.Time    `json:"at"`
}

// Validate checks every field of o. Errors are CodeInvalid naming the
// field.
func (o *RunOutcome) Validate() error {
	if !ValidRunID(o.Run) {
		return FieldError("run", "must be a run id (run_ and 32 hex digits), got %q", Clip(o.Run))
	}
	switch o.State {
	case RunDone, RunFailed, RunCanceled, RunExpired:
	default:
		return FieldError("state", "must be done, failed, canceled or expired, got %q", Clip(o.State))
	}
	if !o.Backend.Valid() {
		return FieldError("backend", "must be one of %s, got %q", BackendList(), Clip(string(o.Backend)))
	}
	if len(o.Lanes) == 0 || len(o.Lanes) > 64 {
		return FieldError("lanes", "1 to 64 lanes required, got %d", len(o.Lanes))
	}
	for i, l := range o.Lanes {
		if !lanePartRe.MatchString(l) {
			return FieldError(fmt.Sprintf("lanes[%d]", i), "must be a lane name or name/vN, got %q", Clip(l))
		}
	}
	sel := o.CaseSelection
	if err := sel.Validate(); err != nil {
		return err
	}
	for _, id := range o.Evidence {
		if len(id) != 32 || !LowerHex(id) {
			return FieldError("evidence", "each must be a 32-hex content id")
		}
	}
	if (o.State == RunCanceled || o.State == RunExpired) && len(o.Evidence) > 0 {
		return FieldError("evidence", "a %s run records no evidence", o.State)
	}
	if len(o.Attempts) > 100 {
		return FieldError("attempts", "at most 100")
	}
	for i, a := range o.Attempts {
		if a.Attempt != i+1 {
			return FieldError(fmt.Sprintf("attempts[%d].attempt", i), "must be %d", i+1)
		}
		switch a.Outcome {
		case "finished", "infrastructure", "canceled":
		default:
			return FieldError(fmt.Sprintf("attempts[%d].outcome", i), "must be finished, infrastructure or canceled, got %q", Clip(a.Outcome))
		}
		if len(a.Reason) > 1024 {
			return FieldError(fmt.Sprintf("attempts[%d].reason", i), "at most 1024 characters")
		}
	}
	if strings.TrimSpace(o.By) == "" || len(o.By) > 256 {
		return FieldError("by", "required: the name of the token that queued the run")
	}
	if o.At.IsZero() {
		return FieldError("at", "required (RFC 3339)")
	}
	return nil
}

// PrepareRunOutcome decodes body strictly as a RunOutcome, validates it
// and returns it with its canonical bytes.
func PrepareRunOutcome(body []byte) (RunOutcome, []byte, error) {
	var o RunOutcome
	if err := DecodeStrict(body, &o); err != nil {
		return o, nil, err
	}
	if err := o.Validate(); err != nil {
		return o, nil, err
	}
	o.At = o.At.UTC()
	for i := range o.Attempts {
		o.Attempts[i].At = o.Attempts[i].At.UTC()
	}
	if o.Evidence == nil {
		o.Evidence = []string{}
	}
	b, err := marshalNoEscape(&o)
	return o, b, err
}
