package web

import (
	"encoding/json"
	"strings"
	"testing"

	"golang.org/x/mod/sumdb/note"

	"github.com/evidence-ledger/ledger/ledger/tlogproof"
)

// TestTLogProofRoute: the tlog-proof of an evidence record verifies
// offline with the log's key; a bad format is refused naming the field;
// without a witness policy there is no witness route and no cosigners.
// (With witnesses, cmd/ledger's TestWitnessedServeProofAndAuditAgainst
// runs the real binary with a real litewitness.)
func TestTLogProofRoute(t *testing.T) {
	e := newAPIEnv(t, Config{})
	var ids []string
	for i := range 5 {
		code, b := e.do(t, "POST", "/api/v1/evidence", e.record, testEvidence(i))
		if code != 201 && code != 200 {
			t.Fatalf("append: %d %s", code, b)
		}
		var res struct {
			ID string `json:"id"`
		}
		json.Unmarshal(b, &res)
		ids = append(ids, res.ID)
	}
	v, _ := note.NewVerifier(e.store.VerifierKey())
	for i, id := range ids {
		for _, q := range []string{"", "&size=3"} {
			code, b := e.do(t, "GET", "/api/v1/evidence/"+id+"/proof?format=tlog-proof"+q, "", nil)
			if q != "" && i >= 3 {
				if code != 400 {
					t.Fatalf("entry %d not in size 3: %d %s", i, code, b)
				}
				continue
			}
			if code != 200 || !strings.HasPrefix(string(b), tlogproof.Header+"\n") {
				t.Fatalf("entry %d%s: %d %s", i, q, code, b)
			}
			r, err := tlogproof.Verify(b, nil, v, nil)
			if err != nil || r.Index != uint64(i) {
				t.Fatalf("entry %d%s: %+v, %v", i, q, r, err)
			}
			if want := uint64(5); q == "" && r.Size != want || q != "" && r.Size != 3 {
				t.Fatalf("entry %d%s: size %d", i, q, r.Size)
			}
		}
	}
	if code, b := e.do(t, "GET", "/api/v1/evidence/"+ids[0]+"/proof?format=xml", "", nil); code != 400 || !strings.Contains(string(b), `"field": "format"`) {
		t.Fatalf("format=xml: %d %s", code, b)
	}
	if code, _ := e.do(t, "GET", "/api/v1/log/witnesses", "", nil); code != 404 {
		t.Fatalf("witnesses without a policy: %d", code)
	}
	_, b := e.do(t, "GET", "/api/v1/log/checkpoint", "", nil)
	_, h := e.do(t, "GET", "/healthz", "", nil)
	if strings.Contains(string(b), "cosigners") || strings.Contains(string(h), "witness") {
		t.Fatalf("witness fields without a policy: %s %s", b, h)
	}
}
