package web

import (
	"encoding/json"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/ledger/tlog"
)

// TestTamperedStateServesNoViews: once the full verification reports the
// tampered state (an edited projection row can drop a failing record out
// of every query without its leaf failing a read-path check), the
// overview, the release list, evidence lists and every dashboard page
// answer 503 naming the leaf, while the health check says degraded and
// the raw log (checkpoint, leaves, proofs) is still served.
func TestTamperedStateServesNoViews(t *testing.T) {
	var bad atomic.Bool
	e := newAPIEnv(t, Config{Integrity: func() (tlog.TamperState, bool) {
		if !bad.Load() {
			return tlog.TamperState{}, false
		}
		return tlog.TamperState{Index: 1, Problem: "projection columns do not match the leaf", Since: time.Now()}, true
	}})
	if code, body := e.do(t, "POST", "/api/v1/evidence", e.record, testEvidence(1)); code != http.StatusCreated {
		t.Fatalf("append: %d %s", code, body)
	}
	views := []string{"/api/v1/overview", "/api/v1/releases", "/api/v1/evidence", "/api/v1/heads", "/", "/releases/0.9.0", "/evidence", "/runs", "/agents"}
	for _, p := range views {
		if code, body := e.do(t, "GET", p, "", nil); code >= 500 {
			t.Fatalf("GET %s before tampering: %d %s", p, code, body)
		}
	}
	bad.Store(true)
	for _, p := range views {
		code, body := e.do(t, "GET", p, "", nil)
		if code != http.StatusServiceUnavailable || !strings.Contains(string(body), "leaf 1 projection columns do not match") {
			t.Errorf("GET %s in the tampered state: %d %.200s, want 503 naming the leaf", p, code, body)
		}
		if strings.HasPrefix(p, "/api/") {
			var ae APIError
			if json.Unmarshal(body, &ae) != nil || ae.Code != ledger.CodeUnavailable {
				t.Errorf("GET %s: not a JSON unavailable error: %s", p, body)
			}
		}
	}
	for _, p := range []string{"/api/v1/log/checkpoint", "/api/v1/log/leaves/0", "/api/v1/log/key"} {
		if code, body := e.do(t, "GET", p, "", nil); code != http.StatusOK {
			t.Errorf("GET %s in the tampered state: %d %s, want the raw log served", p, code, body)
		}
	}
	if code, _ := e.do(t, "GET", "/healthz", "", nil); code != http.StatusServiceUnavailable {
		t.Errorf("healthz in the tampered state: %d, want 503", code)
	}
}
