package gates

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/evidence-ledger/ledger/ledger"
)

// The kinds of record an ApprovalRule's DistinctFrom names.
const (
	// DistinctWaiver: a waiver of a gate of the release (RecordWaiver).
	DistinctWaiver = "waiver"
	// DistinctSignoff: a sign-off of a manual gate (RecordSignoff).
	DistinctSignoff = "signoff"
	// DistinctSupersede: a supersede of a record (RecordSupersede).
	DistinctSupersede = "supersede"
)

// distinctKinds are the values DistinctFrom accepts, in the order
// messages list them.
var distinctKinds = []string{DistinctWaiver, DistinctSignoff, DistinctSupersede}

// ErrTwoPerson is wrapped (in a CodeForbidden *ledger.Error) by the
// refusal of an approval that the release's ApprovalRule forbids; test
// with errors.Is.
var ErrTwoPerson = errors.New("the release's two-person rule forbids this approver")

// ApprovalRule is a release's two-person rule (the release YAML's
// optional `approval:` mapping):
//
//	approval:
//	  distinct_from: [waiver, signoff]
//
// DistinctFrom names kinds of record (DistinctWaiver, DistinctSignoff,
// DistinctSupersede; each at most once, at least one) whose authors may
// not give the release's final approval. The records that count are
// those for the release's current pins (PinsDigest): waivers and
// sign-offs of a gate the current definition has, expired or not, and
// supersedes. An author is the name the ledger attributes the record to:
// the token that recorded it over the API or the dashboard, the live
// token named by --as locally.
//
// RecordApproval refuses an approval whose author wrote such a record
// (CodeForbidden wrapping ErrTwoPerson, nothing appended), and Evaluate
// lists an approval as stale while its author wrote one, whether before
// or after the approval: a waiver or sign-off by the approver after the
// approval changes the readiness a second person approved, so the
// approval stops counting, with the reason (ApprovalState.Why).
type ApprovalRule struct {
	DistinctFrom []string `yaml:"distinct_from" json:"distinct_from"`
}

// validate checks r (nil: no rule). Errors are CodeInvalid naming
// approval.distinct_from or one of its members.
func (r *ApprovalRule) validate() error {
	if r == nil {
		return nil
	}
	if len(r.DistinctFrom) == 0 {
		return ledger.FieldError("approval.distinct_from", "required: the kinds of record whose authors may not approve, one or more of %s", strings.Join(distinctKinds, ", "))
	}
	for i, k := range r.DistinctFrom {
		f := fmt.Sprintf("approval.distinct_from[%d]", i)
		if !slices.Contains(distinctKinds, k) {
			return ledger.FieldError(f, "unknown kind of record %q: one of %s", k, strings.Join(distinctKinds, ", "))
		}
		if slices.Contains(r.DistinctFrom[:i], k) {
			return ledger.FieldError(f, "%q is listed twice", k)
		}
	}
	return nil
}

// names reports whether r names kind (false for a nil r).
func (r *ApprovalRule) names(kind string) bool {
	return r != nil && slices.Contains(r.DistinctFrom, kind)
}

// String is the rule as the release YAML writes it.
func (r *ApprovalRule) String() string {
	return "approval.distinct_from: [" + strings.Join(r.DistinctFrom, ", ") + "]"
}

// handRecord is a record whose author the release's ApprovalRule keeps
// from approving: its kind (DistinctWaiver, ...), its entry id, what it
// is about ("gate ID", or "entry ID" for a supersede) and its author.
type handRecord struct {
	kind, id, about, author string
}

// ruledRecords returns the records of the kinds the release's rule names
// for its current pins, as of the evaluation size (none without a rule).
func (ev *evaluator) ruledRecords() []handRecord {
	rule := ev.rel.Approval
	if rule == nil {
		return nil
	}
	pins := ev.rel.PinsDigest()
	var out []handRecord
	if rule.names(DistinctWaiver) {
		for _, we := range ev.waivers {
			if _, ok := ev.rel.gate(we.w.Gate); ok && we.w.PinsDigest == pins {
				out = append(out, handRecord{DistinctWaiver, we.ID, "gate " + we.w.Gate, we.w.Author})
			}
		}
	}
	if rule.names(DistinctSignoff) {
		for _, se := range ev.signoffs {
			if _, ok := ev.rel.gate(se.s.Gate); ok && se.s.PinsDigest == pins {
				out = append(out, handRecord{DistinctSignoff, se.ID, "gate " + se.s.Gate, se.s.Author})
			}
		}
	}
	if rule.names(DistinctSupersede) {
		for _, se := range ev.supersedeList {
			out = append(out, handRecord{DistinctSupersede, se.ID, "entry " + short(se.s.Entry), se.s.Author})
		}
	}
	return out
}

// byAuthor returns the records of recs whose author is author.
func byAuthor(recs []handRecord, author string) []handRecord {
	var out []handRecord
	for _, h := range recs {
		if h.author == author {
			out = append(out, h)
		}
	}
	return out
}

// acts says what the records did, in words: "waived gate ci (entry
// 0123456789ab), signed off gate review (entry ...)".
func acts(recs []handRecord) string {
	verb := map[string]string{DistinctWaiver: "waived", DistinctSignoff: "signed off", DistinctSupersede: "superseded"}
	parts := make([]string, len(recs))
	for i, h := range recs {
		parts[i] = fmt.Sprintf("%s %s (entry %s)", verb[h.kind], h.about, short(h.id))
	}
	return strings.Join(parts, ", ")
}

// staleWhy is why an approval by author is stale under rule r, given
// the records author wrote (same, not empty).
func (r *ApprovalRule) staleWhy(author string, same []handRecord) string {
	return fmt.Sprintf("two-person rule (%s): the approver %s also %s for the current pins, so the approval needs another person", r, author, acts(same))
}

// refusal is the error refusing an approval of version by author under
// r, given the rule's records (recs); nil when r is nil or author wrote
// none of them.
func (r *ApprovalRule) refusal(version, author string, recs []handRecord) error {
	same := byAuthor(recs, author)
	if r == nil || len(same) == 0 {
		return nil
	}
	return &ledger.Error{Code: ledger.CodeForbidden, Err: ErrTwoPerson, Message: fmt.Sprintf(
		"release %s has the two-person rule (%s): %s %s for the current pins, so %s may not approve it; another person must",
		version, r, author, acts(same), author)}
}
