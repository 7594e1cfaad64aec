package web

import (
	"encoding/json"
	"net/http"
	"testing"
)

// FuzzPostEvidence: any body gets either a success (200/201) or a 4xx JSON
// {code, message}; a 4xx appends nothing.
func FuzzPostEvidence(f *testing.F) {
	good, _ := json.Marshal(testEvidence(1))
	f.Add(good)
	f.Add([]byte(`[` + string(good) + `,{"lane":"x"}]`))
	f.Add([]byte(`{"lane":"qmv-bias-sum/v1","subject":{}}`))
	f.Add([]byte("\x00\xff"))
	e := newAPIEnv(f, Config{MaxBody: 64 << 10})
	f.Fuzz(func(t *testing.T, body []byte) {
		before := e.size(t)
		code, out := e.do(t, "POST", "/api/v1/evidence", e.record, body)
		switch {
		case code == http.StatusCreated || code == http.StatusOK:
			return
		case code >= 400 && code < 500:
			var ae APIError
			if err := json.Unmarshal(out, &ae); err != nil || ae.Code == "" || ae.Message == "" {
				t.Fatalf("4xx without a JSON error: %s", out)
			}
			if e.size(t) != before {
				t.Fatalf("%d answer but the log grew", code)
			}
		default:
			t.Fatalf("status %d for %q: %s", code, body, out)
		}
	})
}
