package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/evidence-ledger/ledger/client"
	"github.com/evidence-ledger/ledger/gates"
	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/ledger/sqlite"
	"github.com/evidence-ledger/ledger/web"
)

// env is a real web server over a temporary SQLite store, with tokens.
type env struct {
	store  *sqlite.Store
	url    string
	record string // secret of a token of scope record
	read   string // scope read
	admin  string // scope admin, role platform-reviewer
	base   uint64 // the log size after the tokens' leaves (tokens are leaves)
}

func newEnv(t testing.TB, cfg web.Config) *env {
	t.Helper()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, sqlite.Options{Path: filepath.Join(t.TempDir(), "ledger.db")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	cfg.Store = st
	s, err := web.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(s)
	t.Cleanup(hs.Close)
	e := &env{store: st, url: hs.URL}
	for _, tk := range []struct {
		dst   *string
		name  string
		scope ledger.Scope
		roles []string
	}{{&e.record, "ci", ledger.ScopeRecord, nil}, {&e.read, "reader", ledger.ScopeRead, nil}, {&e.admin, "rm", ledger.ScopeAdmin, []string{"platform-reviewer"}}} {
		if *tk.dst, _, err = st.CreateToken(ctx, tk.name, tk.scope, tk.roles); err != nil {
			t.Fatal(err)
		}
	}
	cp, err := st.Checkpoint(ctx)
	if err != nil {
		t.Fatal(err)
	}
	e.base = cp.Size
	return e
}

func (e *env) client(t testing.TB, token string) *client.Client {
	t.Helper()
	c, err := client.New(e.url, client.Options{Token: token, Timeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// evidence returns the canonical body of a valid evidence record; n makes
// it distinct, lane and backend vary with it.
func evidence(t testing.TB, n int) ledger.Record {
	t.Helper()
	start := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC).Add(time.Duration(n) * time.Second)
	lanes := []string{"qmv-bias-sum/v1", "alloc-snapshot/v1"}
	backends := []ledger.Backend{ledger.BackendCPU, ledger.BackendCUDA, ledger.BackendExternal}
	ev := ledger.Evidence{
		Lane:       lanes[n%len(lanes)],
		Subject:    ledger.Subject{Repository: "example/core", Commit: fmt.Sprintf("%040x", n+1), Tree: fmt.Sprintf("%040x", n+7)},
		Backend:    backends[n%len(backends)],
		CasesExact: 216, CasesTotal: 216, Control: ledger.ControlCaught, Status: ledger.StatusPassed,
		StartedAt: start, FinishedAt: start.Add(time.Second),
	}
	b, err := ledger.CanonicalBody(&ev)
	if err != nil {
		t.Fatal(err)
	}
	return ledger.Record{Kind: ledger.KindEvidence, Body: b}
}

func head(t testing.TB, n int) ledger.Record {
	t.Helper()
	h := ledger.HeadVerification{Repository: "example/core", Ref: "refs/heads/main", Object: fmt.Sprintf("%040x", n+1), ObjectType: "commit",
		Commit: fmt.Sprintf("%040x", n+1), Verdict: ledger.VerdictUnsigned, Decision: ledger.DecisionNoPolicy,
		VerifiedAt: time.Date(2026, 11, 29, 10, 0, n, 0, time.UTC)}
	b, err := ledger.CanonicalBody(&h)
	if err != nil {
		t.Fatal(err)
	}
	return ledger.Record{Kind: ledger.KindHead, Body: b}
}

// TestLogMethods: every ledger.LogWriter and ledger.LogReader method of the
// client answers what the store behind the server answers.
func TestLogMethods(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, web.Config{})
	c := e.client(t, e.record)
	recs := []ledger.Record{evidence(t, 0), evidence(t, 1), evidence(t, 2)}
	res, err := c.Append(ctx, recs, "batch-1")
	if err != nil {
		t.Fatal(err)
	}
	cp, err := e.store.Checkpoint(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.Checkpoint != cp || len(res.Entries) != 3 {
		t.Fatalf("append answer: checkpoint %+v (store %+v), %d entries", res.Checkpoint, cp, len(res.Entries))
	}
	for i, ae := range res.Entries {
		want, err := e.store.Entry(ctx, ae.ID)
		if err != nil {
			t.Fatal(err)
		}
		if ae.Existing || ae.Index != want.Index || ae.LeafHash != want.LeafHash || ae.Kind != ledger.KindEvidence || ae.Index != e.base+uint64(i) {
			t.Fatalf("entry %d: %+v, store has %+v", i, ae.Entry, want)
		}
		got, err := c.Entry(ctx, ae.ID)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("Entry(%s):\n got %+v\nwant %+v", ae.ID, got, want)
		}
		if got, err = c.EntryAt(ctx, ae.Index); err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("EntryAt(%d): %+v, %v; want %+v", ae.Index, got, err, want)
		}
		p, err := c.InclusionProof(ctx, ae.Index, 0)
		wantP, _ := e.store.InclusionProof(ctx, ae.Index, 0)
		if err != nil || !reflect.DeepEqual(p, wantP) || !reflect.DeepEqual(p, ae.Proof) {
			t.Fatalf("InclusionProof(%d): %+v, %v; store %+v", ae.Index, p, err, wantP)
		}
	}
	// A replay with the same key appends nothing and answers the original.
	again, err := c.Append(ctx, recs, "batch-1")
	if err != nil || again.Checkpoint.Size != e.base+3 || again.Entries[1].ID != res.Entries[1].ID {
		t.Fatalf("replay: %+v, %v", again, err)
	}
	// An identical record without a key is reported as existing.
	dup, err := c.Append(ctx, recs[:1], "")
	if err != nil || !dup.Entries[0].Existing || dup.Entries[0].ID != res.Entries[0].ID {
		t.Fatalf("identical record: %+v, %v", dup, err)
	}
	if _, err := c.Append(ctx, []ledger.Record{evidence(t, 3)}, ""); err != nil {
		t.Fatal(err)
	}

	got, err := c.Checkpoint(ctx)
	want, _ := e.store.Checkpoint(ctx)
	b := e.base
	if err != nil || got != want || got.Size != b+4 {
		t.Fatalf("Checkpoint: %+v, %v; store %+v", got, err, want)
	}
	old, err := c.CheckpointAt(ctx, b+3)
	wantOld, _ := e.store.CheckpointAt(ctx, b+3)
	if err != nil || old != wantOld || old.Size != b+3 {
		t.Fatalf("CheckpointAt(3): %+v, %v; store %+v", old, err, wantOld)
	}
	cons, err := c.ConsistencyProof(ctx, b+3, b+4)
	wantCons, _ := e.store.ConsistencyProof(ctx, b+3, b+4)
	if err != nil || !reflect.DeepEqual(cons, wantCons) || cons.FromRoot != old.Root || cons.ToRoot != got.Root {
		t.Fatalf("ConsistencyProof(3, 4): %+v, %v; store %+v", cons, err, wantCons)
	}
	if p, err := c.InclusionProof(ctx, b+1, b+3); err != nil || p.TreeSize != b+3 || p.Root != old.Root {
		t.Fatalf("InclusionProof(1, 3): %+v, %v", p, err)
	}
}

// collect pages through a query to the end and returns the ids in order.
func collect[E any](t *testing.T, page func(cursor string) ([]E, string, error), id func(E) string) []string {
	t.Helper()
	var ids []string
	cursor := ""
	for pages := 0; ; pages++ {
		if pages > 100 {
			t.Fatal("paging does not end")
		}
		es, next, err := page(cursor)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range es {
			ids = append(ids, id(e))
		}
		if next == "" {
			return ids
		}
		cursor = next
	}
}

// TestQueriesPageToEnd: Evidence, Heads and Entries through the client
// page to the end with the same entries, in the same order, as the store
// gives, with filters and AsOfSize honoured.
func TestQueriesPageToEnd(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, web.Config{})
	c := e.client(t, e.read)
	var recs []ledger.Record
	for i := range 23 {
		recs = append(recs, evidence(t, i))
		if i%3 == 0 {
			recs = append(recs, head(t, i))
		}
	}
	if _, err := e.store.Append(ctx, recs, ""); err != nil {
		t.Fatal(err)
	}
	evID := func(e ledger.EvidenceEntry) string { return e.ID }
	for _, f := range []ledger.EvidenceFilter{
		{Limit: 5},
		{Limit: 4, Lane: "alloc-snapshot/v1"},
		{Limit: 3, Backend: ledger.BackendCUDA},
		{Limit: 6, AsOfSize: 17},
		{Limit: 2000},
	} {
		remote := collect(t, func(cur string) ([]ledger.EvidenceEntry, string, error) {
			f := f
			f.Cursor = cur
			return c.Evidence(ctx, f)
		}, evID)
		local := collect(t, func(cur string) ([]ledger.EvidenceEntry, string, error) {
			f := f
			f.Cursor = cur
			return e.store.Evidence(ctx, f)
		}, evID)
		if len(local) == 0 || !reflect.DeepEqual(remote, local) {
			t.Fatalf("Evidence(%+v): client %d ids %v, store %d ids %v", f, len(remote), remote, len(local), local)
		}
		if f == (ledger.EvidenceFilter{Limit: 5}) && len(remote) != 23 {
			t.Fatalf("all evidence: %d, want 23", len(remote))
		}
	}
	// Evidence bodies decode to the same records.
	page, _, err := c.Evidence(ctx, ledger.EvidenceFilter{Limit: 1})
	want, _, _ := e.store.Evidence(ctx, ledger.EvidenceFilter{Limit: 1})
	if err != nil || !reflect.DeepEqual(page[0].Evidence, want[0].Evidence) || page[0].RecordedAt != want[0].RecordedAt || page[0].LeafHash != want[0].LeafHash {
		t.Fatalf("evidence entry: %+v, %v; store %+v", page, err, want)
	}

	hdID := func(e ledger.HeadEntry) string { return e.ID }
	for _, f := range []ledger.HeadFilter{{Limit: 3}, {Limit: 2, AsOfSize: 12}, {Limit: 5, Repository: "example/core"}} {
		remote := collect(t, func(cur string) ([]ledger.HeadEntry, string, error) {
			f := f
			f.Cursor = cur
			return c.Heads(ctx, f)
		}, hdID)
		local := collect(t, func(cur string) ([]ledger.HeadEntry, string, error) {
			f := f
			f.Cursor = cur
			return e.store.Heads(ctx, f)
		}, hdID)
		if len(local) == 0 || !reflect.DeepEqual(remote, local) {
			t.Fatalf("Heads(%+v): client %v, store %v", f, remote, local)
		}
	}

	enID := func(e ledger.Entry) string { return e.ID }
	for _, f := range []ledger.EntryFilter{{Kind: ledger.KindHead, Limit: 3}, {Kind: ledger.KindEvidence, Key: "qmv-bias-sum/v1", Limit: 5, AsOfSize: 20}} {
		remote := collect(t, func(cur string) ([]ledger.Entry, string, error) {
			f := f
			f.Cursor = cur
			return c.Entries(ctx, f)
		}, enID)
		local := collect(t, func(cur string) ([]ledger.Entry, string, error) {
			f := f
			f.Cursor = cur
			return e.store.Entries(ctx, f)
		}, enID)
		if len(local) == 0 || !reflect.DeepEqual(remote, local) {
			t.Fatalf("Entries(%+v): client %v, store %v", f, remote, local)
		}
	}
	got, _, err := c.Entries(ctx, ledger.EntryFilter{Kind: ledger.KindHead, Limit: 1})
	wantE, _, _ := e.store.Entries(ctx, ledger.EntryFilter{Kind: ledger.KindHead, Limit: 1})
	if err != nil || !reflect.DeepEqual(got, wantE) {
		t.Fatalf("Entries entry: %+v, %v; store %+v", got, err, wantE)
	}
}

// TestErrorMapping: API error answers come back as the *ledger.Error the
// store gives locally (code, field, message; ErrNotFound for 404), for
// 400, 401, 403, 404, 409 and 413.
func TestErrorMapping(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, web.Config{})
	c := e.client(t, e.record)

	sameAsLocal := func(name string, remote, local error, code ledger.Code) {
		t.Helper()
		var re, le *ledger.Error
		if !errors.As(remote, &re) || !errors.As(local, &le) {
			t.Fatalf("%s: remote %T %v, local %T %v: want *ledger.Error both", name, remote, remote, local, local)
		}
		if re.Code != code || le.Code != code || re.Field != le.Field || re.Error() != le.Error() {
			t.Fatalf("%s:\nremote %q code %s field %q\n local %q code %s field %q", name, re, re.Code, re.Field, le, le.Code, le.Field)
		}
		if errors.Is(remote, ledger.ErrNotFound) != errors.Is(local, ledger.ErrNotFound) {
			t.Fatalf("%s: errors.Is(ErrNotFound) differs: remote %v local %v", name, errors.Is(remote, ledger.ErrNotFound), errors.Is(local, ledger.ErrNotFound))
		}
	}

	// 400 naming a field.
	var bad map[string]any
	json.Unmarshal(evidence(t, 0).Body, &bad)
	bad["subject"].(map[string]any)["commit"] = "not-hex"
	badBody, _ := json.Marshal(bad)
	badRecs := []ledger.Record{evidence(t, 1), {Kind: ledger.KindEvidence, Body: badBody}}
	_, rerr := c.Append(ctx, badRecs, "")
	_, lerr := e.store.Append(ctx, badRecs, "")
	sameAsLocal("400", rerr, lerr, ledger.CodeInvalid)
	if le := rerr.(*ledger.Error); !strings.Contains(le.Field, "subject.commit") {
		t.Fatalf("400 field %q does not name subject.commit", le.Field)
	}
	// 404, with ErrNotFound in the chain.
	_, rerr = c.Entry(ctx, strings.Repeat("0", 32))
	_, lerr = e.store.Entry(ctx, strings.Repeat("0", 32))
	sameAsLocal("404", rerr, lerr, ledger.CodeNotFound)
	if !errors.Is(rerr, ledger.ErrNotFound) {
		t.Fatal("404 does not wrap ledger.ErrNotFound")
	}
	_, rerr = c.EntryAt(ctx, 99)
	_, lerr = e.store.EntryAt(ctx, 99)
	sameAsLocal("404 at index", rerr, lerr, ledger.CodeNotFound)
	// 409: an idempotency key replayed with other records.
	if _, err := c.Append(ctx, []ledger.Record{evidence(t, 2)}, "key-409"); err != nil {
		t.Fatal(err)
	}
	_, rerr = c.Append(ctx, []ledger.Record{evidence(t, 3)}, "key-409")
	// The server scopes a key to the token that sent it, so the local
	// store's key space is another: replay it there the same way.
	if _, err := e.store.Append(ctx, []ledger.Record{evidence(t, 2)}, "key-409-local"); err != nil {
		t.Fatal(err)
	}
	_, lerr = e.store.Append(ctx, []ledger.Record{evidence(t, 3)}, "key-409-local")
	sameAsLocal("409", rerr, lerr, ledger.CodeConflict)
	// 401 without a token, 403 with a token of too small a scope.
	if _, err := e.client(t, "").Append(ctx, []ledger.Record{evidence(t, 4)}, ""); ledger.ErrorCode(err) != ledger.CodeUnauthorized {
		t.Fatalf("no token: %v (code %s), want unauthorized", err, ledger.ErrorCode(err))
	}
	if _, err := e.client(t, "wrong-secret").Checkpoint(ctx); ledger.ErrorCode(err) != ledger.CodeUnauthorized {
		t.Fatalf("bad token: %v, want unauthorized", err)
	}
	if _, err := e.client(t, e.read).Append(ctx, []ledger.Record{evidence(t, 4)}, ""); ledger.ErrorCode(err) != ledger.CodeForbidden {
		t.Fatalf("read token: %v, want forbidden", err)
	}
	// A record of another kind is refused before anything is sent.
	before, _ := e.store.Checkpoint(ctx)
	_, err := c.Append(ctx, []ledger.Record{evidence(t, 5), head(t, 5)}, "")
	var le *ledger.Error
	if !errors.As(err, &le) || le.Code != ledger.CodeInvalid || le.Field != "[1].kind" {
		t.Fatalf("head record: %v, want invalid [1].kind", err)
	}
	if after, _ := e.store.Checkpoint(ctx); after.Size != before.Size {
		t.Fatalf("a refused batch appended: size %d -> %d", before.Size, after.Size)
	}
	// Query parameters the server refuses.
	if _, _, err := c.Entries(ctx, ledger.EntryFilter{Kind: "bogus"}); ledger.ErrorCode(err) != ledger.CodeInvalid {
		t.Fatalf("bad kind: %v", err)
	}

	// 413 from a server with a small body cap.
	small := newEnv(t, web.Config{MaxBody: 2048})
	var big []ledger.Record
	for i := range 20 {
		big = append(big, evidence(t, i))
	}
	_, err = small.client(t, small.record).Append(ctx, big, "")
	if !errors.As(err, &le) || le.Code != ledger.CodeTooLarge || !strings.Contains(le.Message, "2048") {
		t.Fatalf("over the cap: %v, want too_large naming the limit", err)
	}
	if cp, _ := small.store.Checkpoint(ctx); cp.Size != small.base {
		t.Fatalf("over the cap appended %d leaves", cp.Size-small.base)
	}
}

// TestNonAPIAnswers: an answer without an API error body (a proxy's page)
// gets the status's code and does not echo the body; a 2xx answer that
// does not decode is an error; a forged leaf is refused.
func TestNonAPIAnswers(t *testing.T) {
	ctx := context.Background()
	var status int
	var body string
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(status)
		fmt.Fprint(w, body)
	}))
	defer hs.Close()
	c, err := client.New(hs.URL, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		status int
		body   string
		code   ledger.Code
	}{
		{http.StatusBadGateway, "<html>secret upstream page</html>", ledger.CodeInternal},
		{http.StatusRequestEntityTooLarge, "<html>nginx: too large</html>", ledger.CodeTooLarge},
		{http.StatusNotFound, "", ledger.CodeNotFound},
		{http.StatusMethodNotAllowed, `{"code":"method_not_allowed","message":"PUT is not allowed"}`, ledger.CodeInternal},
	} {
		status, body = tc.status, tc.body
		_, err := c.Checkpoint(ctx)
		if ledger.ErrorCode(err) != tc.code || strings.Contains(err.Error(), "secret") || strings.Contains(err.Error(), "nginx") {
			t.Fatalf("%d %q: %v (code %s), want %s without the body", tc.status, tc.body, err, ledger.ErrorCode(err), tc.code)
		}
	}
	status, body = 200, "not json"
	if _, err := c.Checkpoint(ctx); err == nil || !strings.Contains(err.Error(), "decode answer") {
		t.Fatalf("undecodable answer: %v", err)
	}
	status, body = 200, `{"entry":{"index":0,"id":"ab","kind":"evidence","leaf_hash":"`+strings.Repeat("0", 64)+`"},"leaf":"forged"}`
	if _, err := c.Entry(ctx, "ab"); ledger.ErrorCode(err) != ledger.CodeInternal || !strings.Contains(err.Error(), "leaf hash") {
		t.Fatalf("forged leaf: %v", err)
	}
	small, _ := client.New(hs.URL, client.Options{MaxResponse: 16})
	status, body = 200, `{"origin":"`+strings.Repeat("x", 100)+`"}`
	if _, err := small.Checkpoint(ctx); err == nil || !strings.Contains(err.Error(), "longer than 16 bytes") {
		t.Fatalf("long answer: %v", err)
	}
}

// TestTimeoutAndCancel: a server that never answers is abandoned after the
// client's timeout, or when the caller's context is cancelled or past its
// deadline, each reported as such.
func TestTimeoutAndCancel(t *testing.T) {
	release := make(chan struct{})
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer hs.Close()
	defer close(release)

	c, err := client.New(hs.URL, client.Options{Timeout: 150 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = c.Checkpoint(context.Background())
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("hung server: %v, want a timeout", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("timeout took %v", d)
	}

	patient, _ := client.New(hs.URL, client.Options{Timeout: time.Hour})
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	if _, err := patient.Append(ctx, []ledger.Record{evidence(t, 0)}, ""); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: %v, want context.Canceled", err)
	}
	dctx, dcancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer dcancel()
	if _, _, err := patient.Evidence(dctx, ledger.EvidenceFilter{}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("deadline: %v, want context.DeadlineExceeded", err)
	}
}

func TestNewRefusesBadURLs(t *testing.T) {
	for _, u := range []string{"", "localhost:8080", "ftp://host/", "http://", "http://user:pw@host/", "://x"} {
		if _, err := client.New(u, client.Options{}); ledger.ErrorCode(err) != ledger.CodeInvalid {
			t.Errorf("New(%q): %v, want invalid", u, err)
		} else if strings.Contains(err.Error(), "pw") {
			t.Errorf("New(%q) echoes the password: %v", u, err)
		}
	}
	c, err := client.New("http://127.0.0.1:1/prefix/", client.Options{})
	if err != nil || c.URL() != "http://127.0.0.1:1/prefix" {
		t.Fatalf("New with a prefix: %v, URL %q", err, c.URL())
	}
}

const releaseYAML = `version: 3.1.0
components:
  - name: core
    repository: example/core
    reviewed: bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb
    head: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa
gates:
  - id: qmv
    kind: lane
    lane: qmv-bias-sum/v1
    component: core
    backends: [cpu]
  - id: platform
    kind: manual
    role: platform-reviewer
`

// TestReleaseMethods: definitions, readiness, waivers, sign-offs and
// approvals through the client, authored by the token, with the refusal of
// an unready approval carrying its verdict.
func TestReleaseMethods(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, web.Config{})
	c := e.client(t, e.admin)
	if _, err := c.Readiness(ctx, "3.1.0"); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("readiness of an undefined release: %v", err)
	}
	if _, _, err := c.DefineRelease(ctx, "3.0.0", []byte(releaseYAML)); ledger.ErrorCode(err) != ledger.CodeInvalid {
		t.Fatalf("version mismatch: %v", err)
	}
	if _, _, err := e.client(t, e.record).DefineRelease(ctx, "3.1.0", []byte(releaseYAML)); ledger.ErrorCode(err) != ledger.CodeForbidden {
		t.Fatalf("define with a record token: %v", err)
	}
	rel, en, err := c.DefineRelease(ctx, "3.1.0", []byte(releaseYAML))
	if err != nil || rel.Version != "3.1.0" || rel.DefinedBy != "rm" || en.Kind != ledger.KindRelease || rel.EntryID != en.ID {
		t.Fatalf("define: %+v %+v %v", rel, en, err)
	}
	stored, err := e.store.Entry(ctx, en.ID)
	if err != nil || stored.Index != en.Index {
		t.Fatalf("defined entry not in the store: %v", err)
	}
	rs, err := c.Releases(ctx)
	if err != nil || len(rs) != 1 || rs[0].EntryID != en.ID {
		t.Fatalf("releases: %+v %v", rs, err)
	}
	sv, err := c.Readiness(ctx, "3.1.0")
	if err != nil || sv.Readiness.Ready || sv.Note == "" {
		t.Fatalf("readiness: %+v %v", sv, err)
	}
	if _, err := gates.VerifyVerdict([]byte(sv.Note), e.store.VerifierKey()); err != nil {
		t.Fatalf("the server's verdict does not verify with its key: %v", err)
	}
	_, _, refused, err := c.Approve(ctx, "3.1.0", "")
	if ledger.ErrorCode(err) != ledger.CodePrecondition || refused == nil || refused.Readiness.Ready {
		t.Fatalf("approve unready: %v, verdict %+v", err, refused)
	}
	so, soe, err := c.Signoff(ctx, "3.1.0", "platform", "reviewed")
	if err != nil || so.Author != "rm" || so.Gate != "platform" || soe.ID == "" {
		t.Fatalf("signoff: %+v %+v %v", so, soe, err)
	}
	if _, _, err := c.Signoff(ctx, "3.1.0", "nope", ""); ledger.ErrorCode(err) != ledger.CodeInvalid {
		t.Fatalf("signoff of an unknown gate: %v", err)
	}
	w, we, err := c.Waive(ctx, "3.1.0", "qmv", "cpu lane runs next week", time.Now().Add(72*time.Hour))
	if err != nil || w.Author != "rm" || w.Gate != "qmv" || we.ID == "" {
		t.Fatalf("waive: %+v %+v %v", w, we, err)
	}
	ap, ape, apv, err := c.Approve(ctx, "3.1.0", "ship it")
	if err != nil || ap.Author != "rm" || ape.ID == "" || apv == nil || !apv.Readiness.Ready {
		t.Fatalf("approve: %+v %+v %+v %v", ap, ape, apv, err)
	}
	rel, en2, aps, sos, err := c.Release(ctx, "3.1.0")
	if err != nil || rel.Version != "3.1.0" || en2.ID != en.ID || len(aps) != 1 || len(sos) != 1 {
		t.Fatalf("release: %+v %+v %d approvals %d sign-offs %v", rel, en2, len(aps), len(sos), err)
	}
}
