package web

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/runner"
	"github.com/evidence-ledger/ledger/runs"
)

// runsCasesEnv is a server with a run store and the build's case lanes
// (runner.CaseLanes), on SQLite or PostgreSQL (LEDGER_TEST_STORE), and a
// run-scope token.
func runsCasesEnv(t *testing.T) (srv *httptest.Server, tok string) {
	t.Helper()
	st := pgStore(t)
	db, pg := st.AuxDB(t)
	rs := runs.New(db, nil)
	if pg {
		rs = runs.NewPostgres(db, nil)
	}
	s, err := New(Config{Store: st, Runs: rs, CaseLanes: runner.CaseLanes(), Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	srv = httptest.NewServer(s)
	t.Cleanup(srv.Close)
	tok, _, err = st.CreateToken(context.Background(), "release", ledger.ScopeRun, nil)
	if err != nil {
		t.Fatal(err)
	}
	return srv, tok
}

func runsCall(t *testing.T, srv *httptest.Server, tok, method, path, body string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

// TestCreateRunCarriesCaseSelection: POST /api/v1/runs with cases,
// case_budget and max_samples queues a run that shows them (in the
// create answer, GET /api/v1/runs/{id} and the list); a run without them
// shows none of the members.
func TestCreateRunCarriesCaseSelection(t *testing.T) {
	srv, tok := runsCasesEnv(t)
	code, b := runsCall(t, srv, tok, http.MethodPost, "/api/v1/runs",
		`{"lanes": ["qmv-throughput/v1"], "backend": "cpu", "cases": ["batch1/n4096/k4096/f32/b4/g64", "batch2/n8192"], "case_budget": "90s", "max_samples": 50}`)
	if code != http.StatusCreated {
		t.Fatalf("create: %d %s", code, b)
	}
	var created RunAnswer
	if err := json.Unmarshal(b, &created); err != nil {
		t.Fatal(err)
	}
	want := ledger.CaseSelection{Cases: []string{"batch1/n4096/k4096/f32/b4/g64", "batch2/n8192"}, CaseBudget: "1m30s", MaxSamples: 50}
	check := func(where string, r runs.Run) {
		t.Helper()
		if !slices.Equal(r.Cases, want.Cases) || r.CaseBudget != want.CaseBudget || r.MaxSamples != want.MaxSamples {
			t.Fatalf("%s: selection %+v, want %+v", where, r.CaseSelection, want)
		}
	}
	check("create answer", created.Run)
	code, b = runsCall(t, srv, tok, http.MethodGet, "/api/v1/runs/"+created.Run.ID, "")
	var got RunAnswer
	if code != http.StatusOK || json.Unmarshal(b, &got) != nil {
		t.Fatalf("get: %d %s", code, b)
	}
	check("GET /api/v1/runs/{id}", got.Run)
	var raw struct {
		Run map[string]any `json:"run"`
	}
	if err := json.Unmarshal(b, &raw); err != nil || raw.Run["case_budget"] != "1m30s" {
		t.Fatalf("the run's JSON has no case_budget member 1m30s: %s", b)
	}
	code, b = runsCall(t, srv, tok, http.MethodGet, "/api/v1/runs", "")
	var list struct{ Runs []runs.Run }
	if code != http.StatusOK || json.Unmarshal(b, &list) != nil || len(list.Runs) != 1 {
		t.Fatalf("list: %d %s", code, b)
	}
	check("GET /api/v1/runs", list.Runs[0])

	// The lane named without its version selects cases too.
	if code, b := runsCall(t, srv, tok, http.MethodPost, "/api/v1/runs", `{"lanes": ["qmv-throughput", "alloc-footprint/v1"], "backend": "cpu", "cases": ["batch4"]}`); code != http.StatusCreated {
		t.Fatalf("create with an unversioned lane: %d %s", code, b)
	}
	code, b = runsCall(t, srv, tok, http.MethodPost, "/api/v1/runs", `{"lanes": ["alloc-footprint/v1"], "backend": "cpu"}`)
	if code != http.StatusCreated {
		t.Fatalf("create without a selection: %d %s", code, b)
	}
	for _, m := range []string{`"cases"`, `"case_budget"`, `"max_samples"`} {
		if strings.Contains(string(b), m) {
			t.Fatalf("a run without a selection shows %s: %s", m, b)
		}
	}
}

// TestCreateRunRefusesBadCaseSelection: a selection the lanes cannot run
// is refused with 400 naming the field, and nothing is queued.
func TestCreateRunRefusesBadCaseSelection(t *testing.T) {
	srv, tok := runsCasesEnv(t)
	for _, tc := range []struct{ body, field string }{
		{`{"lanes": ["qmv-throughput/v1"], "backend": "cpu", "cases": ["batch1/n4096", "batch9"]}`, "cases[1]"},
		{`{"lanes": ["qmv-throughput/v1"], "backend": "cpu", "cases": ["batch1/[n"]}`, "cases[0]"},
		{`{"lanes": ["qmv-throughput/v1"], "backend": "cpu", "cases": ["batch1//n4096"]}`, "cases[0]"},
		{`{"lanes": ["qmv-throughput/v1"], "backend": "cpu", "cases": [""]}`, "cases[0]"},
		{`{"lanes": ["qmv-throughput/v1"], "backend": "cpu", "max_samples": 5}`, "max_samples"},
		{`{"lanes": ["qmv-throughput/v1"], "backend": "cpu", "max_samples": 1001}`, "max_samples"},
		{`{"lanes": ["qmv-throughput/v1"], "backend": "cpu", "case_budget": "11m"}`, "case_budget"},
		{`{"lanes": ["qmv-throughput/v1"], "backend": "cpu", "case_budget": "0s"}`, "case_budget"},
		{`{"lanes": ["qmv-throughput/v1"], "backend": "cpu", "case_budget": 5}`, ""},
		{`{"lanes": ["alloc-footprint/v1"], "backend": "cpu", "cases": ["batch1"]}`, "cases"},
		{`{"lanes": ["alloc-footprint/v1", "qmv-bias-sum/v1"], "backend": "cpu", "max_samples": 50}`, "max_samples"},
		{`{"lanes": ["alloc-footprint/v1"], "backend": "cpu", "case_budget": "1s"}`, "case_budget"},
	} {
		code, b := runsCall(t, srv, tok, http.MethodPost, "/api/v1/runs", tc.body)
		var e APIError
		if code != http.StatusBadRequest || json.Unmarshal(b, &e) != nil || tc.field != "" && e.Field != tc.field {
			t.Errorf("%s: %d %s, want 400 naming %q", tc.body, code, b, tc.field)
		}
	}
	code, b := runsCall(t, srv, tok, http.MethodGet, "/api/v1/runs", "")
	if code != http.StatusOK || strings.Contains(string(b), `"id"`) {
		t.Fatalf("a refused run was queued: %d %s", code, b)
	}
}
