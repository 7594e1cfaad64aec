package web

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/evidence-ledger/ledger/ingest"
	"github.com/evidence-ledger/ledger/ledger"
)

// largeSuiteN is the size of the large suites: 100,000 cases.
const largeSuiteN = 100_000

// largeSuiteJUnit is a JUnit report of n cases in suites of 1,000 with
// short names (pytest's shape): case 7 of every 10,000 fails with a
// message, case 10,007 errors with a message longer than
// ingest.MaxMessage.
func largeSuiteJUnit(n int) []byte {
	var b bytes.Buffer
	b.WriteString(`<?xml version="1.0" encoding="UTF-8"?>` + "\n<testsuites>\n")
	for s := 0; s*1000 < n; s++ {
		fmt.Fprintf(&b, `<testsuite name="tests.mod%03d" timestamp="2026-11-06T10:00:00" time="8.1">`+"\n", s)
		for i := s * 1000; i < min(n, (s+1)*1000); i++ {
			fmt.Fprintf(&b, `<testcase classname="tests.mod%03d.TestK%d" name="test_%d" time="0.008"`, s, i%7, i)
			switch {
			case i == 10_007:
				fmt.Fprintf(&b, `><error message="%s"/></testcase>`+"\n", strings.Repeat("é", 3000))
			case i%10_000 == 7:
				fmt.Fprintf(&b, `><failure message="assert %d == 0">tests/mod%03d.py:12: AssertionError</failure></testcase>`+"\n", i, s)
			default:
				b.WriteString("/>\n")
			}
		}
		b.WriteString("</testsuite>\n")
	}
	b.WriteString("</testsuites>\n")
	return b.Bytes()
}

// largeSuiteGoTest is a go test -json stream of n tests in packages of
// 1,000, as go test -json writes it: test 7 of every 10,000 fails after
// logging a line, test 10,007 logs a line longer than ingest.MaxMessage.
func largeSuiteGoTest(n int) []byte {
	var b bytes.Buffer
	at := time.Date(2026, 11, 6, 10, 0, 0, 0, time.UTC)
	ts := func(i int) string { return at.Add(time.Duration(i) * time.Millisecond).Format(time.RFC3339Nano) }
	for p := 0; p*1000 < n; p++ {
		pkg := fmt.Sprintf("example.com/repo/pkg%03d", p)
		fmt.Fprintf(&b, `{"Time":%q,"Action":"start","Package":%q}`+"\n", ts(p*1000), pkg)
		final := "pass"
		for i := p * 1000; i < min(n, (p+1)*1000); i++ {
			name := fmt.Sprintf("TestCase%d", i)
			fmt.Fprintf(&b, `{"Time":%q,"Action":"run","Package":%q,"Test":%q}`+"\n", ts(i), pkg, name)
			fmt.Fprintf(&b, `{"Time":%q,"Action":"output","Package":%q,"Test":%q,"Output":"=== RUN   %s\n"}`+"\n", ts(i), pkg, name, name)
			action, word := "pass", "PASS"
			switch {
			case i == 10_007:
				fmt.Fprintf(&b, `{"Time":%q,"Action":"output","Package":%q,"Test":%q,"Output":"    x_test.go:9: %s\n"}`+"\n", ts(i), pkg, name, strings.Repeat("é", 3000))
				action, word, final = "fail", "FAIL", "fail"
			case i%10_000 == 7:
				fmt.Fprintf(&b, `{"Time":%q,"Action":"output","Package":%q,"Test":%q,"Output":"    x_test.go:12: got %d, want 0\n"}`+"\n", ts(i), pkg, name, i)
				action, word, final = "fail", "FAIL", "fail"
			}
			fmt.Fprintf(&b, `{"Time":%q,"Action":"output","Package":%q,"Test":%q,"Output":"--- %s: %s (0.01s)\n"}`+"\n", ts(i), pkg, name, word, name)
			fmt.Fprintf(&b, `{"Time":%q,"Action":%q,"Package":%q,"Test":%q,"Elapsed":0.01}`+"\n", ts(i), action, pkg, name)
		}
		fmt.Fprintf(&b, `{"Time":%q,"Action":%q,"Package":%q,"Elapsed":1.2}`+"\n", ts((p+1)*1000), final, pkg)
	}
	return b.Bytes()
}

// largeSuiteFailing is the number in the name of each failing case of the
// large suites, and what its message must contain.
func largeSuiteFailing(n int) map[string]string {
	want := map[string]string{}
	for i := 7; i < n; i += 10_000 {
		want[fmt.Sprint(i)] = fmt.Sprint(i)
	}
	want["10007"] = "…[cut: "
	return want
}

// TestLargeSuiteAPI: a 100,000-case JUnit report (7.5 MB) and a
// 100,000-test go test -json stream (54 MB) record through POST
// /api/v1/evidence on a server whose --max-body admits them, and are
// refused at the default 4 MiB body cap naming --max-body. The evidence
// has the suite's counts, names every failing case, and its details keep
// each failing case with its message (the long one cut to
// ingest.MaxMessage) and count the passed cases left out; the original
// comes back byte for byte.
func TestLargeSuiteAPI(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: posts 60 MB of test reports")
	}
	small := newAPIEnv(t, Config{})
	e := newAPIEnv(t, Config{MaxBody: 64 << 20})
	for _, c := range []struct {
		format, mediaType string
		body              []byte
	}{{"junit", ingest.MediaJUnit, largeSuiteJUnit(largeSuiteN)}, {"gotest", ingest.MediaGoTest, largeSuiteGoTest(largeSuiteN)}} {
		t.Run(c.format, func(t *testing.T) {
			if code, body := small.post(t, ingestQuery, c.mediaType, c.body); code != http.StatusRequestEntityTooLarge || !strings.Contains(string(body), "--max-body") {
				t.Fatalf("%d bytes at the default body cap: %d %s", len(c.body), code, body)
			}
			start := time.Now()
			code, body := e.post(t, ingestQuery, c.mediaType, c.body)
			took := time.Since(start)
			if code != http.StatusCreated {
				t.Fatalf("POST %d bytes: %d %.300s", len(c.body), code, body)
			}
			t.Logf("%s: %d cases, %.1f MB, recorded in %v", c.format, largeSuiteN, float64(len(c.body))/1e6, took.Round(time.Millisecond))
			var ans struct {
				Entries []AppendedJSON `json:"entries"`
			}
			if err := json.Unmarshal(body, &ans); err != nil || len(ans.Entries) != 2 {
				t.Fatalf("answer %.300s: %v", body, err)
			}
			code, body = e.do(t, http.MethodGet, "/api/v1/evidence/"+ans.Entries[1].ID, "", nil)
			var ev EvidenceJSON
			if err := json.Unmarshal(body, &ev); code != 200 || err != nil {
				t.Fatalf("GET evidence: %d %v", code, err)
			}
			checkLargeSuite(t, ev.Evidence, largeSuiteN)
			code, raw := e.do(t, http.MethodGet, "/api/v1/originals/"+ans.Entries[1].ID, "", nil)
			if code != 200 || !bytes.Equal(raw, c.body) {
				t.Fatalf("GET original: %d, %d bytes, equal %v", code, len(raw), bytes.Equal(raw, c.body))
			}
		})
	}
}

// checkLargeSuite checks the evidence of a large suite of n cases
// (largeSuiteJUnit, largeSuiteGoTest): see TestLargeSuiteAPI.
func checkLargeSuite(t *testing.T, ev ledger.Evidence, n int) {
	t.Helper()
	want := largeSuiteFailing(n)
	if ev.Status != ledger.StatusFailed || ev.CasesTotal != n || ev.CasesExact != n-len(want) || len(ev.FailingCases) != len(want) {
		t.Fatalf("status %s, %d/%d exact, %d failing ids; want failed, %d of %d", ev.Status, ev.CasesExact, ev.CasesTotal, len(ev.FailingCases), n-len(want), n)
	}
	var d ingest.Details
	if err := ledger.DecodeStrict(ev.Details, &d); err != nil {
		t.Fatal(err)
	}
	if d.Counts.Tests != n || d.Counts.Passed != n-len(want) {
		t.Fatalf("counts %+v", d.Counts)
	}
	found := 0
	for _, k := range d.Cases {
		if k.Outcome == ingest.Passed {
			continue
		}
		num := k.ID[strings.LastIndexAny(k.ID, "_e")+1:]
		if !strings.Contains(k.Message, want[num]) || len(k.Message) > ingest.MaxMessage || !utf8.ValidString(k.Message) {
			t.Fatalf("case %s (%s): message %q, want it to contain %q within %d bytes", k.ID, k.Outcome, k.Message, want[num], ingest.MaxMessage)
		}
		found++
	}
	if found != len(want) {
		t.Fatalf("%d failing cases in the details, want %d", found, len(want))
	}
	if o := d.CasesOmitted; o == nil || o.KeptIn != "original" || o.Passed+len(d.Cases) != n || o.Messages != 0 {
		t.Fatalf("cases_omitted %+v with %d cases kept", o, len(d.Cases))
	}
}
