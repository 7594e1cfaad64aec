package web

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/evidence-ledger/ledger/ledger/storetest/teststore"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/transparency-dev/merkle/proof"
	"github.com/transparency-dev/merkle/rfc6962"
	"golang.org/x/mod/sumdb/note"
)

type apiEnv struct {
	srv    *httptest.Server
	store  *teststore.Store
	record string // token secret with scope record
	read   string // token secret with scope read
	// base is the log size after the tokens' leaves (tokens are leaves):
	// size() counts from it.
	base uint64
}

func newAPIEnv(t testing.TB, cfg Config) *apiEnv {
	t.Helper()
	ctx := context.Background()
	st := teststore.Open(t, teststore.Options{})
	cfg.Store = st
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(s)
	t.Cleanup(hs.Close)
	rec, _, err := st.CreateToken(ctx, "ci", ledger.ScopeRecord, nil)
	if err != nil {
		t.Fatal(err)
	}
	rd, _, err := st.CreateToken(ctx, "reader", ledger.ScopeRead, nil)
	if err != nil {
		t.Fatal(err)
	}
	e := &apiEnv{srv: hs, store: st, record: rec, read: rd}
	e.base = e.size(t)
	return e
}

func testEvidence(n int) map[string]any {
	start := time.Date(2025, 11, 29, 10, 0, 0, 0, time.UTC).Add(time.Duration(n) * time.Second)
	return map[string]any{
		"lane": "qmv-bias-sum/v1",
		"subject": map[string]any{
			"repository": "github.com/ml-explore/mlx",
			"commit":     fmt.Sprintf("%040x", n+1),
			"tree":       fmt.Sprintf("%040x", n+7),
			"artifacts":  map[string]string{"libmlx.so": fmt.Sprintf("sha256:%064x", n)},
		},
		"backend": "cpu", "device": map[string]any{"model": "test cpu", "cores": 2}, "runner": map[string]any{"version": "test"},
		"cases_exact": 216, "cases_total": 216, "control": "caught", "status": "passed",
		"started_at": start.Format(time.RFC3339Nano), "finished_at": start.Add(time.Second).Format(time.RFC3339Nano),
	}
}

func (e *apiEnv) do(t testing.TB, method, path, token string, body any, hdr ...string) (int, []byte) {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case []byte:
		rd = bytes.NewReader(b)
	case string:
		rd = strings.NewReader(b)
	default:
		j, _ := json.Marshal(b)
		rd = bytes.NewReader(j)
	}
	req, _ := http.NewRequest(method, e.srv.URL+path, rd)
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, out
}

func (e *apiEnv) size(t testing.TB) uint64 {
	cp, err := e.store.Checkpoint(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return cp.Size - e.base
}

func TestPostEvidenceAndProof(t *testing.T) {
	e := newAPIEnv(t, Config{})
	code, body := e.do(t, "POST", "/api/v1/evidence", e.record, testEvidence(1))
	if code != http.StatusCreated {
		t.Fatalf("POST: %d %s", code, body)
	}
	var res struct {
		AppendedJSON
		Checkpoint ledger.Checkpoint `json:"checkpoint"`
	}
	if err := json.Unmarshal(body, &res); err != nil {
		t.Fatal(err)
	}
	b0 := e.base // the tokens' leaves come first
	if res.ID == "" || res.Index != b0 || res.Checkpoint.Size != b0+1 {
		t.Fatalf("bad answer %s", body)
	}
	v, _ := note.NewVerifier(e.store.VerifierKey())
	if _, err := note.Open([]byte(res.Checkpoint.Note), note.VerifierList(v)); err != nil {
		t.Fatalf("checkpoint signature: %v", err)
	}
	// Batch of 3, then the proof of the first against size 4.
	batch := []any{testEvidence(2), testEvidence(3), testEvidence(4)}
	code, body = e.do(t, "POST", "/api/v1/evidence", e.record, batch)
	if code != http.StatusCreated {
		t.Fatalf("batch: %d %s", code, body)
	}
	code, body = e.do(t, "GET", fmt.Sprintf("/api/v1/evidence/%s/proof?size=%d", res.ID, b0+4), "", nil)
	if code != 200 {
		t.Fatalf("proof: %d %s", code, body)
	}
	var pr struct {
		Proof      ledger.InclusionProof `json:"proof"`
		Checkpoint ledger.Checkpoint     `json:"checkpoint"`
	}
	json.Unmarshal(body, &pr)
	hs := make([][]byte, len(pr.Proof.Hashes))
	for i := range hs {
		hs[i] = pr.Proof.Hashes[i][:]
	}
	if err := proof.VerifyInclusion(rfc6962.DefaultHasher, b0, b0+4, res.LeafHash[:], hs, pr.Checkpoint.Root[:]); err != nil {
		t.Fatalf("proof does not verify: %v", err)
	}
	// The leaf bytes served hash to the leaf hash.
	code, body = e.do(t, "GET", "/api/v1/evidence/"+res.ID, "", nil)
	var got EvidenceJSON
	json.Unmarshal(body, &got)
	if code != 200 || ledger.LeafHash([]byte(got.Leaf)) != res.LeafHash {
		t.Fatalf("GET evidence: %d leaf hash mismatch", code)
	}
	// Consistency 1 -> 4.
	code, body = e.do(t, "GET", fmt.Sprintf("/api/v1/log/proof/consistency?from=%d&to=%d", b0+1, b0+4), "", nil)
	var cp ledger.ConsistencyProof
	json.Unmarshal(body, &cp)
	chs := make([][]byte, len(cp.Hashes))
	for i := range chs {
		chs[i] = cp.Hashes[i][:]
	}
	if code != 200 || proof.VerifyConsistency(rfc6962.DefaultHasher, b0+1, b0+4, chs, res.Checkpoint.Root[:], pr.Checkpoint.Root[:]) != nil {
		t.Fatalf("consistency: %d %s", code, body)
	}
}

func TestIdempotency(t *testing.T) {
	e := newAPIEnv(t, Config{})
	code, first := e.do(t, "POST", "/api/v1/evidence", e.record, testEvidence(1), "Idempotency-Key", "run-42")
	if code != 201 {
		t.Fatalf("%d %s", code, first)
	}
	code, again := e.do(t, "POST", "/api/v1/evidence", e.record, testEvidence(1), "Idempotency-Key", "run-42")
	var replay AppendedJSON
	json.Unmarshal(again, &replay)
	if code != 200 || !replay.Existing {
		t.Fatalf("replay: %d %s", code, again)
	}
	// Identical resubmission without a key also appends nothing.
	code, _ = e.do(t, "POST", "/api/v1/evidence", e.record, testEvidence(1))
	if code != 200 || e.size(t) != 1 {
		t.Fatalf("resubmission appended: %d size %d", code, e.size(t))
	}
	code, body := e.do(t, "POST", "/api/v1/evidence", e.record, testEvidence(2), "Idempotency-Key", "run-42")
	if code != 409 || e.size(t) != 1 {
		t.Fatalf("reused key with other body: %d %s", code, body)
	}
}

func TestBadRequestsAppendNothing(t *testing.T) {
	e := newAPIEnv(t, Config{MaxBody: 4096})
	bad := testEvidence(3)
	bad["cases_exact"] = 300
	unknown := testEvidence(4)
	unknown["colour"] = "red"
	passedUncaught := testEvidence(5)
	passedUncaught["control"] = "not_caught"
	badDigest := testEvidence(6)
	badDigest["subject"].(map[string]any)["artifacts"] = map[string]string{"x": "sha256:XYZ"}
	upperCommit := testEvidence(7)
	upperCommit["subject"].(map[string]any)["commit"] = strings.ToUpper(fmt.Sprintf("%040x", 0xabcdef))
	cases := []struct {
		name   string
		token  string
		body   any
		status int
		field  string
	}{
		{"no token", "", testEvidence(1), 401, ""},
		{"read token", e.read, testEvidence(1), 403, ""},
		{"bad token", "lgr_nope", testEvidence(1), 401, ""},
		{"malformed", e.record, `{"lane":`, 400, ""},
		{"not object", e.record, `42`, 400, ""},
		{"empty array", e.record, `[]`, 400, ""},
		{"counts", e.record, bad, 400, "cases_exact"},
		{"unknown field", e.record, unknown, 400, "colour"},
		{"passed but control not caught", e.record, passedUncaught, 400, "status"},
		{"bad digest", e.record, badDigest, 400, "subject.artifacts.x"},
		{"uppercase commit", e.record, upperCommit, 400, "subject.commit"},
		{"atomic batch", e.record, []any{testEvidence(8), bad}, 400, "[1].cases_exact"},
		{"too large", e.record, `{"lane":"` + strings.Repeat("a", 5000) + `"}`, 413, ""},
		{"trailing", e.record, `{} {}`, 400, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, body := e.do(t, "POST", "/api/v1/evidence", c.token, c.body)
			if code != c.status {
				t.Fatalf("status %d, want %d: %s", code, c.status, body)
			}
			var ae APIError
			if err := json.Unmarshal(body, &ae); err != nil || ae.Code == "" || ae.Message == "" {
				t.Fatalf("error body is not {code, message}: %s", body)
			}
			if c.field != "" && ae.Field != c.field {
				t.Fatalf("field %q, want %q (%s)", ae.Field, c.field, ae.Message)
			}
			if code == 413 && !strings.Contains(ae.Message, "limit of 4096 bytes") {
				t.Fatalf("413 message does not give the limit: %q", ae.Message)
			}
			if e.size(t) != 0 {
				t.Fatalf("something was appended")
			}
		})
	}
}

func TestListFiltersAndPagination(t *testing.T) {
	e := newAPIEnv(t, Config{ReadAuth: true})
	var batch []any
	for i := 0; i < 25; i++ {
		ev := testEvidence(i)
		if i%5 == 0 {
			ev["backend"] = "cuda"
			ev["status"] = "failed"
			ev["cases_exact"] = 156
			ev["failing_cases"] = []string{"f16/b4/g64/three-way"}
		}
		batch = append(batch, ev)
	}
	if code, body := e.do(t, "POST", "/api/v1/evidence", e.record, batch); code != 201 {
		t.Fatalf("%d %s", code, body)
	}
	if code, _ := e.do(t, "GET", "/api/v1/evidence", "", nil); code != 401 {
		t.Fatalf("read auth not enforced: %d", code)
	}
	type page struct {
		Evidence []EvidenceJSON `json:"evidence"`
		Next     string         `json:"next_cursor"`
	}
	get := func(q string) page {
		code, body := e.do(t, "GET", "/api/v1/evidence?"+q, e.read, nil)
		if code != 200 {
			t.Fatalf("%s: %d %s", q, code, body)
		}
		var p page
		json.Unmarshal(body, &p)
		return p
	}
	if p := get("backend=cuda"); len(p.Evidence) != 5 {
		t.Fatalf("backend filter: %d", len(p.Evidence))
	}
	if p := get("status=passed&backend=cpu"); len(p.Evidence) != 20 {
		t.Fatalf("status filter: %d", len(p.Evidence))
	}
	if p := get(fmt.Sprintf("commit=%040x", 4)); len(p.Evidence) != 1 || p.Evidence[0].Evidence.Subject.Commit != fmt.Sprintf("%040x", 4) {
		t.Fatalf("commit filter: %+v", p.Evidence)
	}
	if p := get(fmt.Sprintf("artifact=sha256:%064x", 7)); len(p.Evidence) != 1 {
		t.Fatalf("artifact filter: %d", len(p.Evidence))
	}
	seen := map[string]bool{}
	cursor := ""
	for pages := 0; ; pages++ {
		p := get("limit=10&cursor=" + cursor)
		for _, ev := range p.Evidence {
			if seen[ev.ID] {
				t.Fatalf("duplicate across pages")
			}
			seen[ev.ID] = true
		}
		if p.Next == "" {
			break
		}
		cursor = p.Next
		if pages > 5 {
			t.Fatal("pagination does not end")
		}
	}
	if len(seen) != 25 {
		t.Fatalf("pagination saw %d of 25", len(seen))
	}
	for _, q := range []string{"limit=0", "since=yesterday", "backend=gpu", "commit=ab", "cursor=x"} {
		code, body := e.do(t, "GET", "/api/v1/evidence?"+q, e.read, nil)
		if code != 400 {
			t.Fatalf("%s: %d %s", q, code, body)
		}
	}
}

// TestConcurrentAPIAppends: 32 goroutines appending through the API at once:
// zero errors, zero lost, audit passes.
func TestConcurrentAPIAppends(t *testing.T) {
	e := newAPIEnv(t, Config{})
	const workers, each = 32, 10
	var wg sync.WaitGroup
	var mu sync.Mutex
	ids := map[string]bool{}
	errs := make(chan string, workers*each)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < each; i++ {
				code, body := e.do(t, "POST", "/api/v1/evidence", e.record, testEvidence(w*1000+i))
				if code != 201 {
					errs <- fmt.Sprintf("%d %s", code, body)
					continue
				}
				var a AppendedJSON
				json.Unmarshal(body, &a)
				mu.Lock()
				ids[a.ID] = true
				mu.Unlock()
			}
		}(w)
	}
	wg.Wait()
	close(errs)
	for msg := range errs {
		t.Error(msg)
	}
	if len(ids) != workers*each || e.size(t) != workers*each {
		t.Fatalf("acknowledged %d, log size %d, want %d", len(ids), e.size(t), workers*each)
	}
	for id := range ids {
		if _, err := e.store.Entry(context.Background(), id); err != nil {
			t.Fatalf("acknowledged %s lost: %v", id, err)
		}
	}
	rep, err := e.store.Audit(context.Background())
	if err != nil || !rep.OK {
		t.Fatalf("audit: %+v %v", rep, err)
	}
}

func TestHealthAndMetrics(t *testing.T) {
	e := newAPIEnv(t, Config{})
	if code, body := e.do(t, "GET", "/healthz", "", nil); code != 200 || !strings.Contains(string(body), "ok") {
		t.Fatalf("healthz: %d %s", code, body)
	}
	e.do(t, "POST", "/api/v1/evidence", e.record, testEvidence(1))
	code, body := e.do(t, "GET", "/metrics", "", nil)
	if code != 200 || !strings.Contains(string(body), `ledger_entries_appended_total{kind="evidence"} 1`) {
		t.Fatalf("metrics: %d %s", code, body)
	}
	if code, body := e.do(t, "GET", "/api/v1/nope", "", nil); code != 404 || !strings.Contains(string(body), "not_found") {
		t.Fatalf("unknown route: %d %s", code, body)
	}
}
