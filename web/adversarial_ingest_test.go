package web

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/evidence-ledger/ledger/gates"
	"github.com/evidence-ledger/ledger/ingest"
	"github.com/evidence-ledger/ledger/ledger"
)

// Adversarial tests of the ingest formats over the real HTTP API
// (TRUST.md: a CI job must never record outside its scope, nor make a
// gate pass with a claim the server did not check): every decoded record
// goes through the checks plain JSON evidence goes through.

// mlxCommit and mlxTree are the pins release 9.9.9 of newRunnerEnv binds.
var (
	mlxCommit = fmt.Sprintf("%040x", 2)
	mlxTree   = fmt.Sprintf("%040x", 8)
)

// qmvStatement is an in-toto test-result Statement about release 9.9.9's
// component at its reviewed commit with n passed tests, and extra
// predicate members merged in.
func qmvStatement(t *testing.T, repo string, n int, extra map[string]any) []byte {
	t.Helper()
	passed := make([]string, n)
	for i := range passed {
		passed[i] = fmt.Sprintf("case-%03d", i)
	}
	pred := map[string]any{"result": "PASSED", "passedTests": passed, "warnedTests": []string{}, "failedTests": []string{}}
	for k, v := range extra {
		pred[k] = v
	}
	b, err := json.Marshal(map[string]any{
		"_type":         "https://in-toto.io/Statement/v1",
		"subject":       []map[string]any{{"name": repo, "digest": map[string]string{"gitCommit": mlxCommit, "gitTree": mlxTree}}},
		"predicateType": "https://in-toto.io/attestation/test-result/v0.1",
		"predicate":     pred,
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func (e *runnerEnv) postAs(t *testing.T, token, path, contentType string, body []byte) (int, []byte) {
	t.Helper()
	return e.do(t, http.MethodPost, path, token, body, "Content-Type", contentType)
}

// TestIngestScopeAndSignatures: a record token scoped to one repository,
// lane and backend posting JUnit, go test -json, an in-toto Statement or
// a DSSE envelope of one about another repository, lane or backend gets
// 403 and nothing is appended, whether the flags or the input name the
// repository; a DSSE envelope by an unregistered key is refused; a
// Statement that claims computed_by: server, a signer or recorded_by in
// its predicate does not carry it into the record, which stays baseline
// for the signed_by gate; the same Statement signed by the runner the gate
// names passes it, recorded with that runner and the token.
func TestIngestScopeAndSignatures(t *testing.T) {
	e := newRunnerEnv(t)
	ctx := context.Background()
	scoped, _, err := e.store.CreateScopedToken(ctx, ledger.TokenSpec{Name: "ci-mlx-cpu", Scope: ledger.ScopeRecord,
		Repositories: []string{"github.com/ml-explore/mlx"}, Lanes: []string{"qmv-bias-sum"}, Backends: []ledger.Backend{ledger.BackendCPU}})
	if err != nil {
		t.Fatal(err)
	}
	query := func(repo, lane, backend string) string {
		q := url.Values{"lane": {lane}, "backend": {backend}, "commit": {mlxCommit}, "tree": {mlxTree}}
		if repo != "" {
			q.Set("repository", repo)
		}
		return "/api/v1/evidence?" + q.Encode()
	}
	junit := []byte(`<testsuite name="s" tests="1"><testcase classname="c" name="n"/></testsuite>`)
	gotest := []byte(`{"Action":"run","Package":"p","Test":"T"}` + "\n" + `{"Action":"pass","Package":"p","Test":"T"}` + "\n")
	inScope := qmvStatement(t, "github.com/ml-explore/mlx", 216, nil)
	otherRepo := qmvStatement(t, "github.com/evil/fork", 216, nil)
	const mlx, lane = "github.com/ml-explore/mlx", "qmv-bias-sum/v1"

	for _, tc := range []struct {
		name, path, ct string
		body           []byte
		field          string
	}{
		{"junit, other repository", query("github.com/evil/fork", lane, "cpu"), "application/junit+xml", junit, "subject.repository"},
		{"junit, other lane", query(mlx, "other-lane/v1", "cpu"), "application/junit+xml", junit, "lane"},
		{"junit, other backend", query(mlx, lane, "cuda"), "application/junit+xml", junit, "backend"},
		{"go test -json, other repository", query("github.com/evil/fork", lane, "cpu"), "application/vnd.go.test2json+jsonl", gotest, "subject.repository"},
		{"go test -json, other lane", query(mlx, "other-lane/v1", "cpu"), "application/vnd.go.test2json+jsonl", gotest, "lane"},
		{"in-toto, its subject another repository", query("", lane, "cpu"), "application/vnd.in-toto+json", otherRepo, "subject.repository"},
		{"in-toto, other backend", query("", lane, "metal"), "application/vnd.in-toto+json", inScope, "backend"},
		{"signed in-toto, its subject another repository", query("", lane, "cpu"), ledger.ContentTypeDSSE,
			dsseEnvelope(t, e.mac, ledger.PayloadTypeInToto, otherRepo), "subject.repository"},
		{"signed in-toto, other lane", query("", "other-lane/v1", "cpu"), ledger.ContentTypeDSSE,
			dsseEnvelope(t, e.mac, ledger.PayloadTypeInToto, inScope), "lane"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := e.size(t)
			code, body := e.postAs(t, scoped, tc.path, tc.ct, tc.body)
			var ae struct{ Code, Field string }
			_ = json.Unmarshal(body, &ae)
			if code != http.StatusForbidden || ae.Field != tc.field {
				t.Fatalf("%d %s; want 403 naming %s", code, body, tc.field)
			}
			if e.size(t) != before {
				t.Fatal("an out-of-scope input appended")
			}
		})
	}

	// Refused signatures: nothing appended.
	for _, tc := range []struct {
		name  string
		body  []byte
		field string
	}{
		{"unregistered key", dsseEnvelope(t, newKey(t), ledger.PayloadTypeInToto, inScope), "signatures"},
		{"registered key, payload changed after signing", func() []byte {
			var env ledger.Envelope
			_ = json.Unmarshal(dsseEnvelope(t, e.mac, ledger.PayloadTypeInToto, inScope), &env)
			env.Payload = dsseEnvelopePayload(qmvStatement(t, mlx, 217, nil))
			b, _ := json.Marshal(env)
			return b
		}(), "signatures[0]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := e.size(t)
			code, body := e.postAs(t, scoped, query("", lane, "cpu"), ledger.ContentTypeDSSE, tc.body)
			var ae struct{ Field string }
			_ = json.Unmarshal(body, &ae)
			if code != http.StatusBadRequest || ae.Field != tc.field {
				t.Fatalf("%d %s; want 400 naming %s", code, body, tc.field)
			}
			if e.size(t) != before {
				t.Fatal("a refused envelope appended")
			}
		})
	}

	// A Statement that claims what only the server sets: decoded, its
	// claims are not carried, and the record is baseline for signed_by.
	claims := qmvStatement(t, mlx, 216, map[string]any{
		"computed_by": "server", "details": map[string]any{"computed_by": "server"},
		"signer": map[string]any{"runner": "ci-mac"}, "recorded_by": map[string]any{"token": map[string]any{"name": "admin"}},
	})
	code, body := e.postAs(t, scoped, query("", lane, "cpu"), "application/vnd.in-toto+json", claims)
	if code >= 500 {
		t.Fatalf("claims: %d %s", code, body)
	}
	claimsID := ""
	if code == http.StatusCreated {
		ev := e.evidenceOf(t, body)
		claimsID = e.lastID(t, body)
		if ev.Signer != nil || strings.Contains(string(ev.Details), ledger.ComputedByField) {
			t.Fatalf("a posted claim was carried into the record: signer %+v details %s", ev.Signer, ev.Details)
		}
		if ev.RecordedBy == nil || ev.RecordedBy.Token == nil || ev.RecordedBy.Token.Name != "ci-mlx-cpu" || ev.RecordedBy.Runner != nil {
			t.Fatalf("recorded_by %+v, want the token only", ev.RecordedBy)
		}
	}

	// Signed by the runner the gate names: the signed_by check accepts
	// it. Lane gates also require a caught negative control, which no
	// ingested format carries (README, Known limitations): the record is
	// baseline for that reason alone, the claims record for being unsigned.
	env := dsseEnvelope(t, e.mac, ledger.PayloadTypeInToto, inScope)
	code, body = e.postAs(t, scoped, query("", lane, "cpu"), ledger.ContentTypeDSSE, env)
	if code != http.StatusCreated {
		t.Fatalf("signed in-toto: %d %s", code, body)
	}
	ev := e.evidenceOf(t, body)
	if ev.Signer == nil || ev.Signer.Runner != "ci-mac" || ev.RecordedBy == nil || ev.RecordedBy.Runner == nil || ev.RecordedBy.Runner.Name != "ci-mac" ||
		ev.RecordedBy.Token == nil || ev.RecordedBy.Token.Name != "ci-mlx-cpu" {
		t.Fatalf("signer %+v recorded_by %+v", ev.Signer, ev.RecordedBy)
	}
	signedID := e.lastID(t, body)
	g, ready := e.gate(t)
	if ready || g.State == gates.StatePassed {
		t.Fatalf("gate %+v passed", g)
	}
	reasons := map[string]string{}
	for _, b := range g.Baseline {
		reasons[b.ID] = b.Reason
	}
	if r := reasons[signedID]; !strings.Contains(r, "no negative control") {
		t.Fatalf("the runner-signed record's baseline reason is %q, want only the missing control (signed_by accepted); gate %+v", r, g)
	}
	if r := reasons[claimsID]; claimsID != "" && !strings.Contains(r, "unsigned") {
		t.Fatalf("the claims record's baseline reason is %q, want unsigned", r)
	}
	// Signed by another registered runner: recorded, baseline for the gate.
	other := dsseEnvelope(t, e.other, ledger.PayloadTypeInToto, qmvStatement(t, mlx, 216, map[string]any{"url": "https://ci.example/2"}))
	if code, body := e.postAs(t, scoped, query("", lane, "cpu"), ledger.ContentTypeDSSE, other); code != http.StatusCreated {
		t.Fatalf("other runner: %d %s", code, body)
	} else if ev := e.evidenceOf(t, body); ev.Signer == nil || ev.Signer.Runner != "other-runner" {
		t.Fatalf("other runner's signer %+v", ev.Signer)
	}
}

// TestIngestAtomicAndCapped: an input is appended as its original and its
// evidence in one batch, or not at all: a JUnit file whose evidence is
// refused after the decode (a failing case id with a bidirectional
// formatting character) is refused naming failing_cases and appends
// neither; a JUnit file whose cases exceed the details cap is recorded,
// its details under the cap counting the passed cases left out (kept in
// the original); a Sigstore bundle on a server without a Sigstore trust
// setting is refused with 409 naming the setting.
func TestIngestAtomicAndCapped(t *testing.T) {
	e := newAPIEnv(t, Config{})
	before := e.size(t)
	code, body := e.post(t, ingestQuery, "application/junit+xml", []byte(junitFixture))
	if code != http.StatusCreated || e.size(t) != before+2 {
		t.Fatalf("junit: %d, %d entries appended; want 201 and 2 (original and evidence)", code, e.size(t)-before)
	}
	_ = body
	var big strings.Builder
	big.WriteString(`<testsuite name="s" tests="9000">`)
	for i := 0; i < 9000; i++ {
		fmt.Fprintf(&big, `<testcase classname="c" name="%04d-%s"/>`, i, strings.Repeat("x", 220))
	}
	big.WriteString(`</testsuite>`)
	before = e.size(t)
	bidi := `<testsuite name="s"><testcase name="ok"/><testcase name="a&#x202E;b"><failure message="boom"/></testcase></testsuite>`
	code, body = e.post(t, ingestQuery, "application/junit+xml", []byte(bidi))
	var ae struct{ Field string }
	_ = json.Unmarshal(body, &ae)
	if code != http.StatusBadRequest || !strings.HasPrefix(ae.Field, "failing_cases") || e.size(t) != before {
		t.Fatalf("a refused evidence: %d %s, %d appended; want 400 naming failing_cases, nothing appended", code, body, e.size(t)-before)
	}
	code, body = e.post(t, ingestQuery, "application/junit+xml", []byte(big.String()))
	if code != http.StatusCreated || e.size(t) != before+2 {
		t.Fatalf("over the details cap (%d bytes): %d %.300s, %d appended; want 201 and 2", big.Len(), code, body, e.size(t)-before)
	}
	ev := e.evidenceOf(t, body)
	var d ingest.Details
	if err := ledger.DecodeStrict(ev.Details, &d); err != nil {
		t.Fatal(err)
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, ev.Details); err != nil {
		t.Fatal(err)
	}
	if compact.Len() > ledger.MaxDetailsBytes || d.Counts.Tests != 9000 || d.CasesOmitted == nil || d.CasesOmitted.Passed == 0 ||
		d.CasesOmitted.Passed+len(d.Cases) != 9000 || d.CasesOmitted.KeptIn != "original" {
		t.Fatalf("details of %d bytes: counts %+v, %d cases kept, omitted %+v", compact.Len(), d.Counts, len(d.Cases), d.CasesOmitted)
	}
	before = e.size(t)
	bundle := []byte(`{"mediaType":"application/vnd.dev.sigstore.bundle.v0.3+json","verificationMaterial":{},"dsseEnvelope":{"payload":"e30=","payloadType":"application/vnd.in-toto+json","signatures":[{"sig":"AAAA"}]}}`)
	code, body = e.post(t, ingestQuery, "application/vnd.dev.sigstore.bundle.v0.3+json", bundle)
	if code != http.StatusConflict || !strings.Contains(string(body), "--sigstore-trusted-root") || e.size(t) != before {
		t.Fatalf("bundle without a trust setting: %d %s; want 409 naming --sigstore-trusted-root", code, body)
	}
}

// lastID is the id of the last entry of an append answer.
func (e *apiEnv) lastID(t *testing.T, answer []byte) string {
	t.Helper()
	var ans struct {
		Entries []AppendedJSON `json:"entries"`
	}
	if err := json.Unmarshal(answer, &ans); err != nil || len(ans.Entries) == 0 {
		t.Fatalf("answer %s: %v", answer, err)
	}
	return ans.Entries[len(ans.Entries)-1].ID
}

// evidenceOf reads the evidence record an ingest answer appended (its
// last entry).
func (e *apiEnv) evidenceOf(t *testing.T, answer []byte) ledger.Evidence {
	t.Helper()
	var ans struct {
		Entries []AppendedJSON `json:"entries"`
	}
	if err := json.Unmarshal(answer, &ans); err != nil || len(ans.Entries) != 2 {
		t.Fatalf("answer %s: %v", answer, err)
	}
	code, body := e.do(t, http.MethodGet, "/api/v1/evidence/"+ans.Entries[1].ID, "", nil)
	var ev EvidenceJSON
	if err := json.Unmarshal(body, &ev); code != http.StatusOK || err != nil {
		t.Fatalf("GET evidence: %d %v", code, err)
	}
	return ev.Evidence
}

func dsseEnvelopePayload(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

// TestIngestRoundTrip: evidence answered as an in-toto Statement
// (?format=in-toto), signed by a registered runner and recorded again
// through the API, has the same pins and case counts, and the runner as
// its signer and recorded_by runner.
func TestIngestRoundTrip(t *testing.T) {
	e := newRunnerEnv(t)
	code, body := e.do(t, http.MethodPost, "/api/v1/evidence", e.record, testEvidence(3))
	if code != http.StatusCreated {
		t.Fatalf("post: %d %s", code, body)
	}
	var ans AppendedJSON
	_ = json.Unmarshal(body, &ans)
	_, orig := e.do(t, http.MethodGet, "/api/v1/evidence/"+ans.ID, "", nil)
	var first EvidenceJSON
	_ = json.Unmarshal(orig, &first)
	code, st := e.do(t, http.MethodGet, "/api/v1/evidence/"+ans.ID+"?format=in-toto", "", nil)
	if code != http.StatusOK {
		t.Fatalf("in-toto: %d %s", code, st)
	}
	env := dsseEnvelope(t, e.mac, ledger.PayloadTypeInToto, st)
	code, body = e.postAs(t, e.record, "/api/v1/evidence?lane=qmv-bias-sum/v1&backend=cpu", ledger.ContentTypeDSSE, env)
	if code != http.StatusCreated {
		t.Fatalf("record again: %d %s", code, body)
	}
	again := e.evidenceOf(t, body)
	a, b := first.Evidence, again
	if fmt.Sprint(a.Subject) != fmt.Sprint(b.Subject) || a.CasesExact != b.CasesExact || a.CasesTotal != b.CasesTotal || a.Status != b.Status {
		t.Fatalf("recorded again as %+v %d/%d %s, want %+v %d/%d %s", b.Subject, b.CasesExact, b.CasesTotal, b.Status, a.Subject, a.CasesExact, a.CasesTotal, a.Status)
	}
	if b.Signer == nil || b.Signer.Runner != "ci-mac" || b.RecordedBy == nil || b.RecordedBy.Runner == nil || b.RecordedBy.Runner.Name != "ci-mac" {
		t.Fatalf("runner identity: signer %+v recorded_by %+v", b.Signer, b.RecordedBy)
	}
}
