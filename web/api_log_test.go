package web

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/evidence-ledger/ledger/ledger"
)

// TestLogReadRoutes: the log routes an HTTP client reads the log through
// refuse bad parameters with 400 naming the parameter, answer 404 for
// what is not in the log, and honour ?as_of= on the list routes.
func TestLogReadRoutes(t *testing.T) {
	e := newAPIEnv(t, Config{})
	for i := range 3 {
		if code, body := e.do(t, "POST", "/api/v1/evidence", e.record, testEvidence(i)); code != http.StatusCreated {
			t.Fatalf("POST: %d %s", code, body)
		}
	}
	for _, tc := range []struct {
		path   string
		status int
		field  string
	}{
		{"/api/v1/log/entries", 400, "kind"},
		{"/api/v1/log/entries?kind=bogus", 400, "kind"},
		{"/api/v1/evidence?repository=%ff%fe", 400, "repository"},
		{"/api/v1/evidence?repository=a%00b", 400, "repository"},
		{"/api/v1/evidence?lane=a&lane=b", 400, "lane"},
		{"/api/v1/evidence?lane=a%e2%80%aeb", 400, "lane"},
		{"/api/v1/evidence?%ff=1", 400, "query"},
		{"/api/v1/evidence?a=%zz", 400, ""},
		{"/api/v1/evidence?lan=qmv-bias-sum/v1", 400, "lan"},
		{"/api/v1/log/entries?kind=evidence&limt=5", 400, "limt"},
		{"/api/v1/releases?repository=x&bogus=", 400, "bogus"},
		{"/api/v1/log/entries?kind=evidence&limit=0", 400, "limit"},
		{"/api/v1/log/entries?kind=evidence&as_of=0", 400, "as_of"},
		{"/api/v1/evidence?as_of=x", 400, "as_of"},
		{"/api/v1/heads?as_of=-1", 400, "as_of"},
		{"/api/v1/heads?limit=1001", 400, "limit"},
		{"/api/v1/log/leaves/x", 400, "index"},
		{fmt.Sprintf("/api/v1/log/leaves/%d", e.base+3), 404, ""},
		{"/api/v1/log/proof/inclusion", 400, "index"},
		{"/api/v1/log/proof/inclusion?index=0&size=0", 400, "size"},
		{"/api/v1/log/proof/inclusion?index=5", 400, "size"},
	} {
		code, body := e.do(t, "GET", tc.path, "", nil)
		var ae APIError
		json.Unmarshal(body, &ae)
		if code != tc.status || ae.Field != tc.field {
			t.Errorf("GET %s: %d field %q (%s), want %d field %q", tc.path, code, ae.Field, body, tc.status, tc.field)
		}
	}
	// The kind error names every kind the route takes.
	_, body := e.do(t, "GET", "/api/v1/log/entries?kind=signoff", "", nil)
	for _, k := range ledger.Kinds() {
		if !strings.Contains(string(body), string(k)) {
			t.Errorf("kind error does not name %s: %s", k, body)
		}
	}
	code, body := e.do(t, "GET", fmt.Sprintf("/api/v1/log/entries?kind=evidence&as_of=%d&limit=1", e.base+2), "", nil)
	var page struct {
		Entries []EntryJSON `json:"entries"`
		Next    string      `json:"next_cursor"`
	}
	if err := json.Unmarshal(body, &page); err != nil || code != 200 || len(page.Entries) != 1 || page.Entries[0].Entry.Index != e.base+1 || page.Next == "" || page.Entries[0].Leaf == "" {
		t.Fatalf("entries as of 2: %d %s", code, body)
	}
	code, body = e.do(t, "GET", fmt.Sprintf("/api/v1/evidence?as_of=%d", e.base+1), "", nil)
	var ev struct {
		Evidence []EvidenceJSON `json:"evidence"`
	}
	if err := json.Unmarshal(body, &ev); err != nil || code != 200 || len(ev.Evidence) != 1 || ev.Evidence[0].Index != e.base {
		t.Fatalf("evidence as of 1: %d %s", code, body)
	}
	code, body = e.do(t, "GET", fmt.Sprintf("/api/v1/log/leaves/%d", e.base+2), "", nil)
	var leaf EntryJSON
	if err := json.Unmarshal(body, &leaf); err != nil || code != 200 || leaf.Entry.Index != e.base+2 || leaf.Leaf == "" {
		t.Fatalf("leaf 2: %d %s", code, body)
	}
}
