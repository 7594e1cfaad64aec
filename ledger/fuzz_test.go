package ledger

import (
	"bytes"
	"testing"
)

// FuzzPrepareEvidence: the evidence decoder never panics, errors are
// *Error values with CodeInvalid, and accepted input canonicalizes to a
// fixed point (preparing the canonical bytes again gives the same bytes).
func FuzzPrepareEvidence(f *testing.F) {
	f.Add([]byte(`{"lane":"qmv-bias-sum/v1","subject":{"repository":"r","commit":"0123456789abcdef0123456789abcdef01234567","tree":"0123456789abcdef0123456789abcdef01234567"},"backend":"cpu","device":{},"runner":{},"cases_exact":1,"cases_total":1,"control":"none","status":"passed","started_at":"2026-01-01T00:00:00Z","finished_at":"2026-01-01T00:00:00Z"}`))
	f.Add([]byte(`{"lane":"x/v1","details":{"b":1,"a":[1,2,{"z":null}]}}`))
	f.Add([]byte(`[1,2]`))
	f.Add([]byte(`{"lane":"x/v1"} trailing`))
	f.Fuzz(func(t *testing.T, data []byte) {
		out, err := PrepareRecord(KindEvidence, data)
		if err != nil {
			if ErrorCode(err) != CodeInvalid {
				t.Fatalf("error with code %q: %v", ErrorCode(err), err)
			}
			return
		}
		again, err := PrepareRecord(KindEvidence, out)
		if err != nil {
			t.Fatalf("canonical bytes do not re-validate: %v\n%s", err, out)
		}
		if !bytes.Equal(out, again) {
			t.Fatalf("canonical form is not a fixed point:\n%s\n%s", out, again)
		}
	})
}

// FuzzCanonicalJSON: canonicalization is idempotent.
func FuzzCanonicalJSON(f *testing.F) {
	f.Add([]byte(`{"b":1,"a":"\u003c","c":[1.50,2e3]}`))
	f.Add([]byte(`"x"`))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := CanonicalJSON(data)
		if err != nil {
			return
		}
		c2, err := CanonicalJSON(c)
		if err != nil || !bytes.Equal(c, c2) {
			t.Fatalf("not idempotent: %q -> %q (%v)", c, c2, err)
		}
	})
}
