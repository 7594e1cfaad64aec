package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/evidence-ledger/ledger/ingest"
	"github.com/evidence-ledger/ledger/ledger"
)

// largeSuite is a JUnit report (format "junit") or a go test -json stream
// ("gotest") of n cases with short names: case 7 of every 10,000 fails
// with a message naming its number, case 10,007 with a message longer
// than ingest.MaxMessage.
func largeSuite(format string, n int) []byte {
	var b bytes.Buffer
	long := strings.Repeat("é", 3000)
	if format == "junit" {
		b.WriteString(`<?xml version="1.0" encoding="UTF-8"?>` + "\n<testsuites>\n")
		for s := 0; s*1000 < n; s++ {
			fmt.Fprintf(&b, `<testsuite name="tests.mod%03d" timestamp="2026-11-06T10:00:00" time="8.1">`+"\n", s)
			for i := s * 1000; i < min(n, (s+1)*1000); i++ {
				fmt.Fprintf(&b, `<testcase classname="tests.mod%03d.TestK%d" name="test_%d" time="0.008"`, s, i%7, i)
				switch {
				case i == 10_007:
					fmt.Fprintf(&b, `><failure message="%s"/></testcase>`+"\n", long)
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
	at := time.Date(2026, 11, 6, 10, 0, 0, 0, time.UTC)
	ts := func(i int) string { return at.Add(time.Duration(i) * time.Millisecond).Format(time.RFC3339Nano) }
	for p := 0; p*1000 < n; p++ {
		pkg := fmt.Sprintf("example.com/repo/pkg%03d", p)
		final := "pass"
		for i := p * 1000; i < min(n, (p+1)*1000); i++ {
			name := fmt.Sprintf("TestCase%d", i)
			fmt.Fprintf(&b, `{"Time":%q,"Action":"run","Package":%q,"Test":%q}`+"\n", ts(i), pkg, name)
			fmt.Fprintf(&b, `{"Time":%q,"Action":"output","Package":%q,"Test":%q,"Output":"=== RUN   %s\n"}`+"\n", ts(i), pkg, name, name)
			action, word := "pass", "PASS"
			switch {
			case i == 10_007:
				fmt.Fprintf(&b, `{"Time":%q,"Action":"output","Package":%q,"Test":%q,"Output":"    x_test.go:9: %s\n"}`+"\n", ts(i), pkg, name, long)
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

// TestRecordLargeSuite: `ledger record` of a 100,000-case JUnit report
// and of a 100,000-test go test -json stream, with --db and with
// --server (each with --max-body raised to 64 MiB), appends the original
// and the evidence; the evidence read back from the server has the
// suite's counts, names every failing case, keeps each failing case's
// message in its details (the long one cut to ingest.MaxMessage) and
// counts the passed cases it leaves out; the original comes back byte
// for byte.
func TestRecordLargeSuite(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: records 120 MB of test reports")
	}
	const n = 100_000
	dir := t.TempDir()
	db := filepath.Join(dir, "l.db")
	if _, se, code := runBin(t, "", "--db", db, "migrate"); code != 0 {
		t.Fatalf("migrate: %s", se)
	}
	tok, se, code := runBin(t, "", "--db", db, "token", "create", "--name", "ci", "--scope", "record")
	if code != 0 {
		t.Fatalf("token create: %s", se)
	}
	pins := []string{"--lane", "ci-tests/v1", "--backend", "cpu", "--repository", "github.com/example/repo", "--commit", strings.Repeat("a", 40), "--tree", strings.Repeat("b", 40), "--max-body", fmt.Sprint(64 << 20)}
	files := map[string][]byte{}
	type recorded struct{ format, via, id string }
	var ids []recorded
	for _, format := range []string{"junit", "gotest"} {
		files[format] = largeSuite(format, n)
		f := filepath.Join(dir, format+".report")
		if err := os.WriteFile(f, files[format], 0o644); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		out, se, code := runBin(t, "", append([]string{"--db", db, "--json", "record", "--format", format, f}, pins...)...)
		if code != 0 {
			t.Fatalf("record --db %s: exit %d %s", format, code, se)
		}
		t.Logf("record --db %s: %d cases, %.1f MB, %v", format, n, float64(len(files[format]))/1e6, time.Since(start).Round(time.Millisecond))
		ids = append(ids, recorded{format, "--db", lastEntry(t, out)})
	}
	srv, url := startServer(t, db, "--max-body", fmt.Sprint(64<<20))
	t.Cleanup(func() { srv.Process.Kill(); srv.Wait() })
	for _, format := range []string{"junit", "gotest"} {
		f := filepath.Join(dir, format+".report")
		// A different run of the same suite, so the record is not a replay.
		body := bytes.Replace(files[format], []byte("2026-11-06T10:00:00"), []byte("2026-11-06T09:00:00"), 1)
		if err := os.WriteFile(f, body, 0o644); err != nil {
			t.Fatal(err)
		}
		files[format+"2"] = body
		start := time.Now()
		out, se, code := runBin(t, "", append([]string{"--server", url, "--token", strings.TrimSpace(tok), "--json", "record", "--format", format, f}, pins...)...)
		if code != 0 {
			t.Fatalf("record --server %s: exit %d %s", format, code, se)
		}
		t.Logf("record --server %s: %d cases, %.1f MB, %v", format, n, float64(len(body))/1e6, time.Since(start).Round(time.Millisecond))
		ids = append(ids, recorded{format + "2", "--server", lastEntry(t, out)})
	}
	for _, r := range ids {
		var got struct {
			Evidence ledger.Evidence `json:"evidence"`
		}
		if err := json.Unmarshal([]byte(httpGet(t, url+"/api/v1/evidence/"+r.id)), &got); err != nil {
			t.Fatalf("%s %s: %v", r.via, r.format, err)
		}
		checkLargeSuiteEvidence(t, got.Evidence, n)
		// `ledger evidence show` lists every failing case of the summary.
		show, se, code := runBin(t, "", "--server", url, "evidence", "show", r.id)
		if code != 0 {
			t.Fatalf("evidence show %s %s: exit %d %s", r.via, r.format, code, se)
		}
		for _, id := range got.Evidence.FailingCases {
			if !strings.Contains(show, id) {
				t.Fatalf("evidence show %s %s does not list failing case %q:\n%s", r.via, r.format, id, show)
			}
		}
		if !strings.Contains(show, "[cut: ") {
			t.Fatalf("evidence show %s %s does not show the cut message:\n%s", r.via, r.format, show)
		}
		if raw := httpGet(t, url+"/api/v1/originals/"+r.id); raw != string(files[r.format]) {
			t.Fatalf("%s %s: the original is %d bytes, not the file's %d", r.via, r.format, len(raw), len(files[r.format]))
		}
	}
}

func lastEntry(t *testing.T, out string) string {
	t.Helper()
	var ans appendedJSON
	if err := json.Unmarshal([]byte(out), &ans); err != nil || len(ans.Entries) != 2 {
		t.Fatalf("record --json answer %q: %v", out, err)
	}
	return ans.Entries[1].ID
}

// checkLargeSuiteEvidence checks the evidence of largeSuite(_, n): see
// TestRecordLargeSuite.
func checkLargeSuiteEvidence(t *testing.T, ev ledger.Evidence, n int) {
	t.Helper()
	want := map[string]string{"10007": "…[cut: "}
	for i := 7; i < n; i += 10_000 {
		if i != 10_007 {
			want[fmt.Sprint(i)] = fmt.Sprint(i)
		}
	}
	if ev.Status != ledger.StatusFailed || ev.CasesTotal != n || ev.CasesExact != n-len(want) || len(ev.FailingCases) != len(want) {
		t.Fatalf("status %s, %d/%d exact, %d failing ids; want failed, %d of %d", ev.Status, ev.CasesExact, ev.CasesTotal, len(ev.FailingCases), n-len(want), n)
	}
	var d ingest.Details
	if err := ledger.DecodeStrict(ev.Details, &d); err != nil {
		t.Fatal(err)
	}
	found := 0
	for _, k := range d.Cases {
		if k.Outcome == ingest.Passed {
			continue
		}
		num := k.ID[strings.LastIndexAny(k.ID, "_e")+1:]
		if w, ok := want[num]; !ok || !strings.Contains(k.Message, w) || len(k.Message) > ingest.MaxMessage || !utf8.ValidString(k.Message) {
			t.Fatalf("case %s (%s): message %q, want it to contain %q within %d bytes", k.ID, k.Outcome, k.Message, w, ingest.MaxMessage)
		}
		found++
	}
	if found != len(want) || d.Counts.Tests != n {
		t.Fatalf("%d failing cases in the details of %d, want %d of %d", found, d.Counts.Tests, len(want), n)
	}
	if o := d.CasesOmitted; o == nil || o.KeptIn != "original" || o.Passed+len(d.Cases) != n {
		t.Fatalf("cases_omitted %+v with %d cases kept", o, len(d.Cases))
	}
}
