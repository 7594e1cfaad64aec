package web

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
)

const junitFixture = `<?xml version="1.0" encoding="ISO-8859-1"?>
<testsuites tests="3" failures="1" errors="0" skipped="1">
  <testsuite name="pkg" tests="3" failures="1" skipped="1" timestamp="2026-11-29T10:00:00" time="1.5">
    <testcase classname="pkg" name="TestA &amp; caf` + "\xe9" + `" time="0.5"/>
    <testcase classname="pkg" name="TestB" time="1"><failure message="boom"><![CDATA[<script>alert(1)</script>]]></failure></testcase>
    <testcase classname="pkg" name="TestC"><skipped/></testcase>
  </testsuite>
</testsuites>
`

func (e *apiEnv) post(t *testing.T, path, contentType string, body []byte) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, e.srv.URL+path, bytes.NewReader(body))
	req.Header.Set("Content-Type", contentType)
	req.Header.Set("Authorization", "Bearer "+e.record)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, out
}

const ingestQuery = "/api/v1/evidence?lane=ci-tests/v1&backend=cpu&repository=github.com/example/repo" +
	"&commit=aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa&tree=bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"

// TestIngestJUnitAPI posts JUnit XML in a declared Latin-1 encoding: the
// original is kept byte for byte, the evidence names it and has the
// file's counts, the page shows it escaped; bad input appends nothing.
func TestIngestJUnitAPI(t *testing.T) {
	e := newAPIEnv(t, Config{})
	code, body := e.post(t, ingestQuery, "application/junit+xml", []byte(junitFixture))
	if code != http.StatusCreated {
		t.Fatalf("POST junit: %d %s", code, body)
	}
	var ans struct {
		Entries []AppendedJSON `json:"entries"`
	}
	if err := json.Unmarshal(body, &ans); err != nil || len(ans.Entries) != 2 {
		t.Fatalf("answer %s: %v", body, err)
	}
	evID := ans.Entries[1].ID
	code, body = e.do(t, http.MethodGet, "/api/v1/evidence/"+evID, "", nil)
	var ev EvidenceJSON
	if err := json.Unmarshal(body, &ev); code != 200 || err != nil {
		t.Fatalf("GET evidence: %d %v", code, err)
	}
	if ev.Evidence.CasesTotal != 2 || ev.Evidence.CasesExact != 1 || ev.Evidence.Status != "failed" {
		t.Fatalf("evidence %+v", ev.Evidence)
	}
	var d struct {
		Original struct{ ID, Digest string }
		Counts   struct{ Tests, Passed, Failed, Skipped int }
		Cases    []struct{ ID string }
	}
	if err := json.Unmarshal(ev.Evidence.Details, &d); err != nil {
		t.Fatal(err)
	}
	if d.Original.ID != ans.Entries[0].ID || d.Counts.Tests != 3 || d.Counts.Skipped != 1 || d.Cases[0].ID != "pkg > TestA & café" {
		t.Fatalf("details %+v", d)
	}
	for _, id := range []string{evID, ans.Entries[0].ID} {
		code, raw := e.do(t, http.MethodGet, "/api/v1/originals/"+id, "", nil)
		if code != 200 || string(raw) != junitFixture {
			t.Fatalf("GET original via %s: %d, bytes equal %v", id, code, string(raw) == junitFixture)
		}
	}
	code, page := e.do(t, http.MethodGet, "/originals/"+evID, "", nil)
	if code != 200 || !strings.Contains(string(page), "Not UTF-8 text") {
		t.Fatalf("original page of a Latin-1 file: %d", code)
	}
	utf8Doc := strings.Replace(strings.Replace(junitFixture, "ISO-8859-1", "UTF-8", 1), "\xe9", "é", 1)
	code, body = e.post(t, ingestQuery, "application/xml", []byte(utf8Doc))
	if code != http.StatusCreated || json.Unmarshal(body, &ans) != nil {
		t.Fatalf("POST UTF-8 junit: %d %s", code, body)
	}
	code, page = e.do(t, http.MethodGet, "/originals/"+ans.Entries[0].ID, "", nil)
	if code != 200 || !strings.Contains(string(page), "&lt;script&gt;alert(1)") || strings.Contains(string(page), "<script>alert") {
		t.Fatalf("original page: %d\n%s", code, page)
	}

	size := e.size(t)
	for _, tc := range []struct {
		name, path, ct, body string
		code                 int
		want                 string
	}{
		{"malformed", ingestQuery, "application/junit+xml", "<testsuites><testsuite>", 400, "malformed XML"},
		{"not junit", ingestQuery, "application/xml", "<suites/>", 400, "not JUnit"},
		{"unsupported", ingestQuery, "text/plain", "hello", 415, "not supported"},
		{"no lane", "/api/v1/evidence?backend=cpu", "application/junit+xml", junitFixture, 400, "lane"},
		{"bad artifact", ingestQuery + "&artifact=lib.so=sha256:12", "application/junit+xml", junitFixture, 400, "artifact"},
		{"truncated stream", ingestQuery, "application/vnd.go.test2json+jsonl", `{"Action":"run","Package":"p","Test":"T"}` + "\n" + `{"Action":"pa`, 201, ""},
		{"dsse without keys", ingestQuery, "application/vnd.dsse.envelope.v1+json", `{"payloadType":"application/vnd.in-toto+json","payload":"e30=","signatures":[{"keyid":"","sig":"AAAA"}]}`, 400, "signed by no registered runner key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := e.size(t)
			code, body := e.post(t, tc.path, tc.ct, []byte(tc.body))
			if code != tc.code || !strings.Contains(string(body), tc.want) {
				t.Fatalf("%d %s, want %d naming %q", code, body, tc.code, tc.want)
			}
			if code >= 400 && e.size(t) != before {
				t.Fatalf("a refused body appended")
			}
		})
	}
	if e.size(t) != size+2 {
		t.Fatalf("log grew by %d, want 2 (the cut-off stream and its original)", e.size(t)-size)
	}
}
