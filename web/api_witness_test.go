package web

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/evidence-ledger/ledger/ledger/storetest/teststore"

	"golang.org/x/mod/sumdb/note"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/ledger/tlogproof"
	"github.com/evidence-ledger/ledger/witness"
	"github.com/evidence-ledger/ledger/witness/witnesstest"
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
		for _, q := range []string{"", fmt.Sprintf("&size=%d", e.base+3)} {
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
			if err != nil || r.Index != e.base+uint64(i) {
				t.Fatalf("entry %d%s: %+v, %v", i, q, r, err)
			}
			if want := e.base + 5; q == "" && r.Size != want || q != "" && r.Size != e.base+3 {
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

// TestWitnessedOverview: with a Witnesser, the dashboard, /healthz, the
// checkpoint and the witness route show the cosignatures, and since when
// the log is unwitnessed when the witness is down.
func TestWitnessedOverview(t *testing.T) {
	ctx := context.Background()
	st := teststore.Open(t, teststore.Options{})
	lw := witnesstest.NewLitewitness(t, "witness.test/web", st.Origin(), st.VerifierKey())
	pol, err := witness.ParsePolicy([]byte(lw.PolicyLine() + "quorum witness.test/web\n"))
	if err != nil {
		t.Fatal(err)
	}
	wit, err := witness.New(witness.Config{Log: st, LogKey: st.VerifierKey(), Policy: pol, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{Store: st, Witnesser: wit})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(s)
	defer hs.Close()
	e := &apiEnv{srv: hs, store: st}
	body, _ := json.Marshal(testEvidence(1))
	if _, err := st.Append(ctx, []ledger.Record{{Kind: ledger.KindEvidence, Body: body}}, ""); err != nil {
		t.Fatal(err)
	}
	if r, err := wit.Witness(ctx); err != nil || !r.Cosigned.QuorumMet {
		t.Fatalf("round: %+v, %v", r, err)
	}
	_, page := e.do(t, "GET", "/", "", nil)
	if !strings.Contains(string(page), "quorum <code>witness.test/web</code> met") || !strings.Contains(string(page), "cosigned by 1: witness.test/web") {
		t.Fatalf("overview lacks the witnessing:\n%s", page)
	}
	_, b := e.do(t, "GET", "/api/v1/log/checkpoint", "", nil)
	var cp struct {
		Note      string   `json:"note"`
		Cosigners []string `json:"cosigners"`
	}
	json.Unmarshal(b, &cp)
	if len(cp.Cosigners) != 1 || !strings.Contains(cp.Note, "— witness.test/web ") {
		t.Fatalf("checkpoint: %s", b)
	}

	// The witness goes down and the log moves on.
	lw.Kill()
	body, _ = json.Marshal(testEvidence(2))
	st.Append(ctx, []ledger.Record{{Kind: ledger.KindEvidence, Body: body}}, "")
	if r, _ := wit.Witness(ctx); r.Cosigned.QuorumMet {
		t.Fatal("quorum met with the witness down")
	}
	_, page = e.do(t, "GET", "/", "", nil)
	if !strings.Contains(string(page), "<strong>unwitnessed</strong> since") || !strings.Contains(string(page), "Last witnessed</dt><dd>checkpoint 1,") {
		t.Fatalf("overview while unwitnessed:\n%s", page)
	}
	_, h := e.do(t, "GET", "/healthz", "", nil)
	if !strings.Contains(string(h), `"unwitnessed_since"`) || !strings.Contains(string(h), `"witnessed": false`) {
		t.Fatalf("healthz: %s", h)
	}
	if code, b := e.do(t, "GET", "/api/v1/log/witnesses", "", nil); code != 200 || !strings.Contains(string(b), `"last_error"`) {
		t.Fatalf("witnesses: %d %s", code, b)
	}
	// The tlog-proof of the first record is against the witnessed
	// checkpoint, with its cosignature.
	first, _ := st.EntryAt(ctx, 0)
	_, p := e.do(t, "GET", "/api/v1/evidence/"+first.ID+"/proof?format=tlog-proof", "", nil)
	v, _ := note.NewVerifier(st.VerifierKey())
	if r, err := tlogproof.Verify(p, nil, v, pol); err != nil || r.Size != 1 || !r.QuorumMet {
		t.Fatalf("tlog-proof: %+v, %v\n%s", r, err, p)
	}
}
