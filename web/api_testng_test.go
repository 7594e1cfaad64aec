package web

import (
	"encoding/json"
	"net/http"
	"os"
	"strings"
	"testing"
)

// TestIngestTestNGAPI posts TestNG's testng-results.xml (package ingest's
// test file of data providers, retried attempts and configuration
// methods, whose counts are worked out there) as TestNG's media type and
// as generic XML: both record it as testng with the file's own counts
// (the second post is the same records, already present),
// the original served back as XML; a file whose root counts disagree is
// inconclusive, and malformed or unknown-status input appends nothing.
func TestIngestTestNGAPI(t *testing.T) {
	doc, err := os.ReadFile("../ingest/testdata/testng/dataprovider-retried.xml")
	if err != nil {
		t.Fatal(err)
	}
	e := newAPIEnv(t, Config{})
	type details struct {
		Format        string
		Original      struct{ ID, Format string }
		Counts        struct{ Tests, Passed, Failed, Errors, Skipped, Flaky int }
		Declared      struct{ Tests, Failures, Skipped, Passed, Retried, Ignored int }
		CountMismatch string `json:"count_mismatch"`
	}
	record := func(ct string, body []byte) (EvidenceJSON, details, []AppendedJSON) {
		t.Helper()
		code, out := e.post(t, ingestQuery, ct, body)
		var ans struct {
			Entries []AppendedJSON `json:"entries"`
		}
		// The same bytes again (as another XML media type) are the same
		// records: already present, 200.
		if (code != http.StatusCreated && code != http.StatusOK) || json.Unmarshal(out, &ans) != nil || len(ans.Entries) != 2 {
			t.Fatalf("POST %s: %d %s", ct, code, out)
		}
		code, out = e.do(t, http.MethodGet, "/api/v1/evidence/"+ans.Entries[1].ID, "", nil)
		var ev EvidenceJSON
		var d details
		if code != 200 || json.Unmarshal(out, &ev) != nil || json.Unmarshal(ev.Evidence.Details, &d) != nil {
			t.Fatalf("GET evidence: %d %s", code, out)
		}
		return ev, d, ans.Entries
	}
	for _, ct := range []string{"application/vnd.testng+xml", "application/xml"} {
		ev, d, entries := record(ct, doc)
		if ev.Evidence.Status != "failed" || ev.Evidence.CasesTotal != 7 || ev.Evidence.CasesExact != 4 || len(ev.Evidence.FailingCases) != 3 {
			t.Fatalf("%s: evidence %+v", ct, ev.Evidence)
		}
		if d.Format != "testng" || d.Original.Format != "testng" || d.CountMismatch != "" ||
			d.Counts.Tests != 8 || d.Counts.Passed != 4 || d.Counts.Failed != 2 || d.Counts.Skipped != 1 || d.Counts.Flaky != 1 ||
			d.Declared.Tests != 8 || d.Declared.Passed != 5 || d.Declared.Retried != 3 || d.Declared.Ignored != 1 {
			t.Fatalf("%s: details %+v", ct, d)
		}
		req, _ := http.NewRequest(http.MethodGet, e.srv.URL+"/api/v1/originals/"+entries[0].ID, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/vnd.testng+xml" ||
			!strings.HasSuffix(resp.Header.Get("Content-Disposition"), `.xml"`) {
			t.Fatalf("original: %d %q %q", resp.StatusCode, resp.Header.Get("Content-Type"), resp.Header.Get("Content-Disposition"))
		}
	}
	off := strings.Replace(string(doc), `total="12"`, `total="13"`, 1)
	ev, d, _ := record("application/vnd.testng+xml", []byte(off))
	if d.CountMismatch != "tests declared 9, found 8" || ev.Evidence.Status != "failed" {
		t.Fatalf("a file whose total disagrees: %s, %q", ev.Evidence.Status, d.CountMismatch)
	}
	passing := `<testng-results total="2" passed="1" failed="0" skipped="0"><suite name="s"><test name="t"><class name="C">` +
		`<test-method name="a" status="PASS"/></class></test></suite></testng-results>`
	if ev, d, _ := record("application/vnd.testng+xml", []byte(passing)); ev.Evidence.Status != "inconclusive" || d.CountMismatch != "tests declared 2, found 1" {
		t.Fatalf("a passing file whose total disagrees: %s, %q", ev.Evidence.Status, d.CountMismatch)
	}
	for _, tc := range []struct{ name, body, want string }{
		{"malformed", `<testng-results total="1"><suite>`, "malformed XML"},
		{"unknown status", "<testng-results><suite><test><class>\n<test-method name=\"a\" status=\"MAYBE\"/></class></test></suite></testng-results>", "line 2 has status"},
		{"not testng", `<testsuites/>`, "not TestNG"},
	} {
		before := e.size(t)
		code, out := e.post(t, ingestQuery, "application/vnd.testng+xml", []byte(tc.body))
		if code != http.StatusBadRequest || !strings.Contains(string(out), tc.want) || e.size(t) != before {
			t.Fatalf("%s: %d %s, want 400 naming %q and nothing appended", tc.name, code, out, tc.want)
		}
	}
}
