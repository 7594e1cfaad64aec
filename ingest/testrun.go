package ingest

import (
	"fmt"
	"strings"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
)

// Outcome is the result of one case as the input gave it.
type Outcome string

// The outcomes. Flaky is a case that failed and then passed on a rerun: it
// is not a pass. Incomplete is a case a stream started and never finished.
const (
	Passed     Outcome = "passed"
	Failed     Outcome = "failed"
	Errored    Outcome = "error"
	Skipped    Outcome = "skipped"
	Flaky      Outcome = "flaky"
	Incomplete Outcome = "incomplete"
)

// Case is one test case: a stable id, its outcome, duration in seconds
// and, for a case that did not pass, the message the input gave for it
// (JUnit's failure, error, flaky or skipped element: its message
// attribute and text; TestNG's exception message; go test's output lines
// of the test), at most
// MaxMessage bytes (cutMessage).
type Case struct {
	ID       string  `json:"id"`
	Outcome  Outcome `json:"outcome"`
	Duration float64 `json:"duration_s,omitempty"`
	Message  string  `json:"message,omitempty"`
}

// Counts tallies cases by outcome; Tests is all of them.
type Counts struct {
	Tests      int `json:"tests"`
	Passed     int `json:"passed"`
	Failed     int `json:"failed"`
	Errors     int `json:"errors"`
	Skipped    int `json:"skipped"`
	Flaky      int `json:"flaky,omitempty"`
	Incomplete int `json:"incomplete,omitempty"`
}

// Declared is what a file says of itself (JUnit's tests, failures,
// errors, skipped attributes; TestNG's, DecodeTestNG), compared with the
// cases found. Passed, Retried and Ignored are TestNG's passed, retried
// and ignored attributes (nil for formats without them): passed is
// compared with the passed methods found, a method that passed on a
// retry included, retried with the retried attempts found; ignored
// methods are written nowhere but in the counts.
type Declared struct {
	Tests    int  `json:"tests"`
	Failures int  `json:"failures"`
	Errors   int  `json:"errors"`
	Skipped  int  `json:"skipped"`
	Passed   *int `json:"passed,omitempty"`
	Retried  *int `json:"retried,omitempty"`
	Ignored  *int `json:"ignored,omitempty"`

	passedFound, retriedFound int // what Passed and Retried are compared with
}

// Identity is who produced a signed input: the runner key that signed a
// DSSE envelope, or the Sigstore certificate identity of a bundle.
type Identity struct {
	Kind   string `json:"kind"` // "runner-key", "sigstore-certificate" or "sigstore-public-key"
	Name   string `json:"name"` // the key's registered or policy name, or the certificate's SAN
	KeyID  string `json:"keyid,omitempty"`
	Issuer string `json:"issuer,omitempty"` // the certificate's OIDC issuer
}

// Run is what a decoder found: the cases, the file's own counts where it
// has them, the time span (zero when the format has none), notes on what
// was odd (a cut-off stream, a rerun), and for attestations the subject,
// predicate type and signer.
type Run struct {
	Cases         []Case
	Declared      *Declared
	Started       time.Time
	Finished      time.Time
	Truncated     bool
	Notes         []string
	Subject       *ledger.Subject // from the input; nil when it has none
	PredicateType string
	Identity      *Identity
	// Signer is the verified runner signature of a DSSE envelope; the
	// record carries it (ledger.Evidence.Signer), so signed_by gates
	// count it.
	Signer *ledger.Signer
	// Provenance is the build facts of a SLSA provenance Statement,
	// extracted from its verified bytes; nil for other inputs.
	Provenance *ledger.Provenance
}

// Tally counts r's cases by outcome.
func (r *Run) Tally() Counts {
	var c Counts
	for _, k := range r.Cases {
		c.Tests++
		switch k.Outcome {
		case Passed:
			c.Passed++
		case Failed:
			c.Failed++
		case Errored:
			c.Errors++
		case Skipped:
			c.Skipped++
		case Flaky:
			c.Flaky++
		case Incomplete:
			c.Incomplete++
		}
	}
	return c
}

// mismatch describes how the declared counts differ from c, "" when they
// agree.
func (d *Declared) mismatch(c Counts) string {
	if d == nil {
		return ""
	}
	var parts []string
	if d.Tests != c.Tests {
		parts = append(parts, fmt.Sprintf("tests declared %d, found %d", d.Tests, c.Tests))
	}
	if d.Failures != c.Failed {
		parts = append(parts, fmt.Sprintf("failures declared %d, found %d", d.Failures, c.Failed))
	}
	if d.Errors != c.Errors {
		parts = append(parts, fmt.Sprintf("errors declared %d, found %d", d.Errors, c.Errors))
	}
	if d.Skipped != c.Skipped {
		parts = append(parts, fmt.Sprintf("skipped declared %d, found %d", d.Skipped, c.Skipped))
	}
	if d.Passed != nil && *d.Passed != d.passedFound {
		parts = append(parts, fmt.Sprintf("passed declared %d, found %d", *d.Passed, d.passedFound))
	}
	if d.Retried != nil && *d.Retried != d.retriedFound {
		parts = append(parts, fmt.Sprintf("retried declared %d, found %d", *d.Retried, d.retriedFound))
	}
	return strings.Join(parts, "; ")
}
