package web

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/evidence-ledger/ledger/gates"
	"github.com/evidence-ledger/ledger/ingest"
)

// TestEvidenceAsInToto exports recorded evidence with ?format=in-toto and
// records the Statement again with only lane and backend: same pins and
// counts.
func TestEvidenceAsInToto(t *testing.T) {
	e := newAPIEnv(t, Config{})
	code, body := e.post(t, ingestQuery+"&artifact=lib.so=sha256:"+string(make64('4')), "application/junit+xml", []byte(junitFixture))
	var ans struct {
		Entries []AppendedJSON `json:"entries"`
	}
	if code != http.StatusCreated || json.Unmarshal(body, &ans) != nil {
		t.Fatalf("POST: %d %s", code, body)
	}
	code, st := e.do(t, http.MethodGet, "/api/v1/evidence/"+ans.Entries[1].ID+"?format=in-toto", "", nil)
	if code != 200 {
		t.Fatalf("GET in-toto: %d %s", code, st)
	}
	code, body = e.post(t, "/api/v1/evidence?lane=ci-tests/v1&backend=cpu", ingest.MediaInToto, st)
	if code != http.StatusCreated || json.Unmarshal(body, &ans) != nil {
		t.Fatalf("POST statement: %d %s", code, body)
	}
	var first, again EvidenceJSON
	_, b1 := e.do(t, http.MethodGet, "/api/v1/evidence/"+ans.Entries[1].ID, "", nil)
	_ = json.Unmarshal(b1, &again)
	code, b0 := e.do(t, http.MethodGet, "/api/v1/evidence?lane=ci-tests/v1", "", nil)
	var list struct{ Evidence []EvidenceJSON }
	_ = json.Unmarshal(b0, &list)
	if code != 200 || len(list.Evidence) != 2 {
		t.Fatalf("list: %d %d", code, len(list.Evidence))
	}
	first = list.Evidence[1]
	if first.ID == again.ID {
		first = list.Evidence[0]
	}
	f, a := first.Evidence, again.Evidence
	if f.Subject.Commit != a.Subject.Commit || f.Subject.Tree != a.Subject.Tree || f.Subject.Artifacts["lib.so"] != a.Subject.Artifacts["lib.so"] ||
		f.CasesExact != a.CasesExact || f.CasesTotal != a.CasesTotal || f.Status != a.Status {
		t.Fatalf("recorded again as %+v, want %+v", a, f)
	}
	if code, _ := e.do(t, http.MethodGet, "/api/v1/evidence/"+ans.Entries[1].ID+"?format=yaml", "", nil); code != 400 {
		t.Fatalf("unknown format: %d", code)
	}
}

func make64(c byte) []byte {
	b := make([]byte, 64)
	for i := range b {
		b[i] = c
	}
	return b
}

// TestReadinessJUnit renders a verdict as JUnit and reads it back with the
// ingest decoder: one case per gate, failures and skips where the gates
// are blocked and waived, counts that agree with the file's.
func TestReadinessJUnit(t *testing.T) {
	rd := &gates.Readiness{Version: "3.1.0", PinsDigest: "sha256:00", ComputedAt: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC),
		Gates: []gates.GateResult{{ID: "cpu", Kind: "lane", State: gates.StatePassed, Reason: "ok"},
			{ID: "cuda", Kind: "lane", State: gates.StateOpen, Reason: "no evidence <at> the pins"},
			{ID: "sig", Kind: "signature", State: gates.StateWaived, Reason: "waived by rm"}}}
	b, err := ReadinessJUnit(rd)
	if err != nil {
		t.Fatal(err)
	}
	run, err := ingest.DecodeJUnit(context.Background(), b)
	if err != nil {
		t.Fatalf("decode: %v\n%s", err, b)
	}
	c := run.Tally()
	if c.Tests != 3 || c.Passed != 1 || c.Failed != 1 || c.Skipped != 1 || run.Declared == nil || run.Declared.Tests != 3 || run.Declared.Failures != 1 {
		t.Fatalf("tally %+v declared %+v\n%s", c, run.Declared, b)
	}
	_ = context.Background
}
