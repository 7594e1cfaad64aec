package gates

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/evidence-ledger/ledger/ledger"
)

// CountingRule is the one rule that decides which records count, for every
// gate kind (TRUST.md rule 4). It is shown on the release page and written
// in docs/reference/release-yaml.md ("Which evidence counts"); each kind's Rule says what a passing and a failing record
// of that kind are.
const CountingRule = "Only records at the release's exact pins count: repository, commit, tree where pinned, " +
	"the digest of every bound artifact the record names, every bound artifact the gate is about, a clean work tree, " +
	"for verdicts the server must compute (tree equivalence), the server's own computation at the component's current path pins for this release, " +
	"and, for head verifications, the trust policy the release binds (none count when it binds none). " +
	"Any other record is baseline, shown with the reason. At the exact pins one failing record keeps the gate failed " +
	"until a supersede leaf (attributed and reasoned, by the release's approval role, for these pins) retracts it or the gate is waived; " +
	"otherwise the passing records count, each run once: a record repeating an earlier record's run " +
	"(the same DSSE payload by the same signer key, or the same evidence apart from recorded_by) is a duplicate, baseline. A superseded record is baseline."

// KindRule returns the counting rule of gate kind kind in words, or "" for
// an unknown kind.
func KindRule(kind string) string {
	if k := kindOf(kind); k != nil {
		return k.rule
	}
	return ""
}

// TreeClaim returns why tree-equivalence evidence e is a claim the ledger
// cannot stand behind (TRUST.md rule 1), or "" when the server computed it
// (details "computed_by": ledger.ComputedByServer). It is the one place
// that decides which tree verdicts count; the dashboard asks it too.
func TreeClaim(e *ledger.Evidence) string { return treeClaim(e) }

func treeClaim(e *ledger.Evidence) string {
	var probe struct {
		ComputedBy string `json:"computed_by"`
	}
	if len(e.Details) == 0 || json.Unmarshal(e.Details, &probe) != nil || probe.ComputedBy != ledger.ComputedByServer {
		return "claimed, not computed: tree equivalence counts only when the server computed it from uploaded objects"
	}
	return ""
}

// laneClaim returns why evidence e, read by any gate, is a claim: records
// of the lanes whose verdict only the server may compute (tree
// equivalence) count only in the server's computation, whichever gate
// kind reads them. "" otherwise.
func laneClaim(e *ledger.Evidence) string {
	if e.Lane == ledger.TreeEquivalenceLane {
		return treeClaim(e)
	}
	return ""
}

// headClaim returns why head verification h is a claim the ledger cannot
// stand behind, or "". Every head record is appended by the server's own
// verification (no route accepts a posted verdict), so none is a claim
// today; a rule that requires verification from uploaded objects goes here.
func headClaim(_ *ledger.HeadVerification) string { return "" }

// RefuseServerMarkers returns a CodeInvalid error naming
// prefix+"details.computed_by" or prefix+"details.provenance" (prefix is
// "" for a single body, "[3]." for the fourth of a batch) when an evidence
// body posted by a client carries a member that only the server may set
// (ledger.ComputedByField, the tree check's verdict;
// ledger.ProvenanceField, the facts of a verified provenance), in any
// letter case, the way encoding/json matches names, or nil. Bodies that
// are not JSON objects are left to the evidence decoder. Safe for
// concurrent use.
func RefuseServerMarkers(body []byte, prefix string) error {
	return refuseMarkers(body, prefix, true)
}

// RefuseDecodedMarkers is RefuseServerMarkers for a record the server
// decoded itself from another format (ingest): details.provenance is
// what the decoder extracted from verified bytes there, so only
// details.computed_by is refused.
func RefuseDecodedMarkers(body []byte, prefix string) error {
	return refuseMarkers(body, prefix, false)
}

func refuseMarkers(body []byte, prefix string, provenance bool) error {
	if bytes.IndexByte(body, '\\') < 0 && !containsFold(body, ledger.ComputedByField) && (!provenance || !containsFoldAny(body, ledger.ProvenanceField)) {
		return nil // fast path: no escape could spell the names either
	}
	var probe struct {
		Details json.RawMessage `json:"details"`
	}
	if json.Unmarshal(body, &probe) != nil || len(probe.Details) == 0 {
		return nil
	}
	var members map[string]json.RawMessage
	if json.Unmarshal(probe.Details, &members) != nil {
		return nil
	}
	for k := range members {
		if strings.EqualFold(k, ledger.ComputedByField) {
			return ledger.FieldError(prefix+"details."+ledger.ComputedByField, "is set only by the server's own tree check; a posted verdict is a claim (record the comparison's inputs instead)")
		}
		if provenance && strings.EqualFold(k, ledger.ProvenanceField) {
			return ledger.FieldError(prefix+"details."+ledger.ProvenanceField, "is set only by the server from a verified SLSA provenance Statement; a posted one is a claim (post the signed provenance: a DSSE envelope or a Sigstore bundle)")
		}
	}
	return nil
}

// containsFoldAny reports whether s contains the ASCII string sub,
// ignoring ASCII letter case.
func containsFoldAny(s []byte, sub string) bool {
	lo, up := sub[0]|0x20, sub[0]&^0x20
	for i := 0; i+len(sub) <= len(s); {
		j := bytes.IndexAny(s[i:], string([]byte{lo, up}))
		if j < 0 {
			return false
		}
		at := i + j
		if at+len(sub) <= len(s) && bytes.EqualFold(s[at:at+len(sub)], []byte(sub)) {
			return true
		}
		i = at + 1
	}
	return false
}

// containsFold reports whether s contains the ASCII string sub, ignoring
// ASCII letter case. sub must contain '_': the scan jumps between
// underscores (bytes.IndexByte), so most bodies are read at memchr speed.
func containsFold(s []byte, sub string) bool {
	u := strings.IndexByte(sub, '_')
	for i := 0; ; {
		j := bytes.IndexByte(s[i:], '_')
		if j < 0 {
			return false
		}
		at := i + j - u
		if at >= 0 && at+len(sub) <= len(s) && bytes.EqualFold(s[at:at+len(sub)], []byte(sub)) {
			return true
		}
		i += j + 1
	}
}

// supersededBy returns why entry id no longer counts, when a supersede
// leaf for the current pins retracts it, and whether one does.
func (ev *evaluator) supersededBy(id string) (string, bool) {
	s, ok := ev.supersedes[id]
	if !ok {
		return "", false
	}
	return fmt.Sprintf("superseded by %s (%s, %s): %s", short(s.ID), s.s.Author, s.s.Role, s.s.Reason), true
}
