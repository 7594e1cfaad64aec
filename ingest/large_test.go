package ingest

import (
	"bytes"
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/evidence-ledger/ledger/ledger"
)

// largeN is the size of the large suites: 100,000 cases.
const largeN = 100_000

// largeLongMessage is the text of the one failure whose message is longer
// than MaxMessage (a multi-byte character straddles the cut).
var largeLongMessage = strings.Repeat("é", 3000)

// largeJUnit is a JUnit report of n cases in suites of 1,000, shaped as
// pytest and Surefire write them (short names, a time each): case 7 of
// every 10,000 fails with a message and a trace, case 10,007 is an error
// whose message is longer than MaxMessage, case 5 is skipped with a
// reason. The declared counts agree with the cases.
func largeJUnit(n int) []byte {
	var b bytes.Buffer
	failed, errored := 0, 0
	for i := 0; i < n; i++ {
		switch {
		case i == 10_007:
			errored++
		case i%10_000 == 7:
			failed++
		}
	}
	fmt.Fprintf(&b, `<?xml version="1.0" encoding="UTF-8"?>`+"\n"+`<testsuites name="pytest" tests="%d" failures="%d" errors="%d" skipped="1" time="812.4">`+"\n", n, failed, errored)
	for s := 0; s*1000 < n; s++ {
		fmt.Fprintf(&b, `<testsuite name="tests.mod%03d" tests="%d" timestamp="2026-11-06T10:00:00" time="8.1">`+"\n", s, min(1000, n-s*1000))
		for i := s * 1000; i < min(n, (s+1)*1000); i++ {
			fmt.Fprintf(&b, `<testcase classname="tests.mod%03d.TestK%d" name="test_%d" time="0.008"`, s, i%7, i)
			switch {
			case i == 10_007:
				fmt.Fprintf(&b, `><error message="%s" type="RuntimeError">raise RuntimeError</error></testcase>`+"\n", largeLongMessage)
			case i%10_000 == 7:
				fmt.Fprintf(&b, `><failure message="assert %d == 0" type="AssertionError">tests/mod%03d.py:12: AssertionError &lt;case %d&gt;</failure></testcase>`+"\n", i, s, i)
			case i == 5:
				b.WriteString(`><skipped message="needs a GPU" type="pytest.skip"/></testcase>` + "\n")
			default:
				b.WriteString("/>\n")
			}
		}
		b.WriteString("</testsuite>\n")
	}
	b.WriteString("</testsuites>\n")
	return b.Bytes()
}

// largeGoTest is a go test -json stream of n tests in packages of 1,000,
// as go test -json writes it (start, run, the === RUN and --- PASS
// output lines, pass, the package's PASS/ok lines): test 7 of every
// 10,000 fails after logging two lines, test 10,007 logs a line longer
// than MaxMessage.
func largeGoTest(n int) []byte {
	var b bytes.Buffer
	at := time.Date(2026, 11, 6, 10, 0, 0, 0, time.UTC)
	ts := func(i int) string { return at.Add(time.Duration(i) * time.Millisecond).Format(time.RFC3339Nano) }
	for p := 0; p*1000 < n; p++ {
		pkg := fmt.Sprintf("example.com/repo/pkg%03d", p)
		fmt.Fprintf(&b, `{"Time":%q,"Action":"start","Package":%q}`+"\n", ts(p*1000), pkg)
		pkgFailed := false
		for i := p * 1000; i < min(n, (p+1)*1000); i++ {
			name := fmt.Sprintf("TestCase%d", i)
			fmt.Fprintf(&b, `{"Time":%q,"Action":"run","Package":%q,"Test":%q}`+"\n", ts(i), pkg, name)
			fmt.Fprintf(&b, `{"Time":%q,"Action":"output","Package":%q,"Test":%q,"Output":"=== RUN   %s\n"}`+"\n", ts(i), pkg, name, name)
			action := "pass"
			switch {
			case i == 10_007:
				fmt.Fprintf(&b, `{"Time":%q,"Action":"output","Package":%q,"Test":%q,"Output":"    x_test.go:9: %s\n"}`+"\n", ts(i), pkg, name, largeLongMessage)
				action = "fail"
			case i%10_000 == 7:
				fmt.Fprintf(&b, `{"Time":%q,"Action":"output","Package":%q,"Test":%q,"Output":"    x_test.go:12: got %d, want 0\n"}`+"\n", ts(i), pkg, name, i)
				fmt.Fprintf(&b, `{"Time":%q,"Action":"output","Package":%q,"Test":%q,"Output":"    x_test.go:13: \u003ctolerance exceeded\u003e\n"}`+"\n", ts(i), pkg, name)
				action = "fail"
			}
			if action == "fail" {
				pkgFailed = true
			}
			word := map[string]string{"pass": "PASS", "fail": "FAIL"}[action]
			fmt.Fprintf(&b, `{"Time":%q,"Action":"output","Package":%q,"Test":%q,"Output":"--- %s: %s (0.01s)\n"}`+"\n", ts(i), pkg, name, word, name)
			fmt.Fprintf(&b, `{"Time":%q,"Action":%q,"Package":%q,"Test":%q,"Elapsed":0.01}`+"\n", ts(i), action, pkg, name)
		}
		final, word := "pass", "ok  "
		if pkgFailed {
			final, word = "fail", "FAIL"
		}
		fmt.Fprintf(&b, `{"Time":%q,"Action":"output","Package":%q,"Output":"%s\t%s\t1.2s\n"}`+"\n", ts((p+1)*1000), pkg, word, pkg)
		fmt.Fprintf(&b, `{"Time":%q,"Action":%q,"Package":%q,"Elapsed":1.2}`+"\n", ts((p+1)*1000), final, pkg)
	}
	return b.Bytes()
}

// checkLarge checks the evidence res holds for a large suite of n cases
// made by largeJUnit or largeGoTest: the counts, every failing case in
// failing_cases and in the details with its message, the long message
// cut, the passed cases left out counted, the details under the cap and
// the original the input byte for byte.
func checkLarge(t *testing.T, res *Result, body []byte, n int) {
	t.Helper()
	ev := res.Evidence[0]
	wantFailing := []string{}
	for i := 7; i < n; i += 10_000 {
		wantFailing = append(wantFailing, fmt.Sprint(i))
	}
	if ev.Status != ledger.StatusFailed || ev.CasesTotal != n-skippedIn(res) || ev.CasesExact != ev.CasesTotal-len(wantFailing) {
		t.Fatalf("status %s, %d/%d exact; want failed with %d failing of %d", ev.Status, ev.CasesExact, ev.CasesTotal, len(wantFailing), n)
	}
	if len(ev.FailingCases) != len(wantFailing) {
		t.Fatalf("failing_cases %v, want %d", ev.FailingCases, len(wantFailing))
	}
	if len(ev.Details) > ledger.MaxDetailsBytes {
		t.Fatalf("details are %d bytes, over the cap", len(ev.Details))
	}
	_, d := outcomes(t, res)
	if d.Counts.Tests != n || d.Counts.Failed+d.Counts.Errors != len(wantFailing) {
		t.Fatalf("counts %+v, want %d tests, %d failing", d.Counts, n, len(wantFailing))
	}
	msgs := map[string]string{}
	for _, c := range d.Cases {
		if c.Outcome != Passed {
			msgs[c.ID] = c.Message
		}
	}
	for _, num := range wantFailing {
		var id string
		for _, f := range ev.FailingCases {
			if strings.HasSuffix(f, "_"+num) || strings.HasSuffix(f, "TestCase"+num) {
				id = f
			}
		}
		m, ok := msgs[id]
		if id == "" || !ok {
			t.Fatalf("failing case %s: not in failing_cases (%q) or not in the details", num, id)
		}
		if num == "10007" {
			if len(m) > MaxMessage || !strings.HasSuffix(m, " bytes]") || !strings.Contains(m, "…[cut: ") || !utf8.ValidString(m) || !strings.Contains(m, "éé") {
				t.Fatalf("the long message of %s is not cut to %d bytes with a marker: %d bytes %q", id, MaxMessage, len(m), m[max(0, len(m)-60):])
			}
			continue
		}
		if !strings.Contains(m, num) || !strings.Contains(m, "0") {
			t.Fatalf("failing case %s: message %q does not say what failed", id, m)
		}
	}
	if d.CasesOmitted == nil || d.CasesOmitted.KeptIn != "original" || d.CasesOmitted.Passed == 0 ||
		d.CasesOmitted.Passed+len(d.Cases) != n || d.CasesOmitted.Messages != 0 {
		t.Fatalf("cases_omitted %+v with %d cases kept, want the passed ones left out counted, kept in the original", d.CasesOmitted, len(d.Cases))
	}
	if !bytes.Equal(res.Original.Content, body) || res.Original.Digest != d.Original.Digest {
		t.Fatal("the original is not the input byte for byte")
	}
}

func skippedIn(res *Result) int {
	n := 0
	if bytes.Contains(res.Original.Content, []byte("<skipped")) {
		n = 1
	}
	return n
}

// TestLargeSuites: a 100,000-case JUnit report and a 100,000-test go
// test -json stream decode into evidence whose details are under the cap
// and keep every failure with its message (checkLarge); the time and the
// bytes allocated are logged.
func TestLargeSuites(t *testing.T) {
	for _, c := range []struct {
		format string
		body   []byte
	}{{FormatJUnit, largeJUnit(largeN)}, {FormatGoTest, largeGoTest(largeN)}} {
		t.Run(c.format, func(t *testing.T) {
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			start := time.Now()
			res, err := DecodeFormat(context.Background(), c.format, c.body, testParams())
			took := time.Since(start)
			runtime.ReadMemStats(&after)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s: %d cases in %.1f MB decoded in %v, %.0f MB allocated, details %d bytes", c.format, largeN,
				float64(len(c.body))/1e6, took.Round(time.Millisecond), float64(after.TotalAlloc-before.TotalAlloc)/1e6, len(res.Evidence[0].Details))
			checkLarge(t, res, c.body, largeN)
		})
	}
}

// TestManyFailingCases: a report of 6,000 failing cases with messages
// names the first ledger.MaxFailingCases in failing_cases and counts the
// rest in the details; the details stay under the cap, keeping every
// failing case and as many messages as fit, counting those left out.
func TestManyFailingCases(t *testing.T) {
	const n = 6000
	var b bytes.Buffer
	b.WriteString(`<testsuite name="s">`)
	for i := range n {
		fmt.Fprintf(&b, `<testcase name="t%d"><failure message="%s"/></testcase>`, i, strings.Repeat("m", 900))
	}
	b.WriteString(`</testsuite>`)
	res, err := DecodeFormat(context.Background(), FormatJUnit, b.Bytes(), testParams())
	if err != nil {
		t.Fatal(err)
	}
	ev := res.Evidence[0]
	_, d := outcomes(t, res)
	if len(ev.FailingCases) != ledger.MaxFailingCases || d.FailingOmitted != n-ledger.MaxFailingCases {
		t.Fatalf("%d failing_cases, %d counted as left out; want %d and %d", len(ev.FailingCases), d.FailingOmitted, ledger.MaxFailingCases, n-ledger.MaxFailingCases)
	}
	withMsg := 0
	for _, c := range d.Cases {
		if c.Message != "" {
			withMsg++
		}
	}
	if len(d.Cases) != n || d.CasesOmitted == nil || d.CasesOmitted.Messages != n-withMsg || withMsg == 0 || withMsg == n || d.CasesOmitted.Failed != 0 {
		t.Fatalf("%d cases kept, %d with a message, omitted %+v", len(d.Cases), withMsg, d.CasesOmitted)
	}
	if len(ev.Details) > ledger.MaxDetailsBytes {
		t.Fatalf("details are %d bytes", len(ev.Details))
	}
}

// TestCaseMessages: the message of each JUnit outcome element (its
// message attribute, then its text) and of a go test's output lines
// (framing lines left out) is the case's; a passed case has none.
func TestCaseMessages(t *testing.T) {
	junit := `<testsuite name="s">
<testcase name="f"><failure message="boom">trace line</failure><system-out>noise</system-out></testcase>
<testcase name="e"><failure message="second"/><error message="err">&lt;stack&gt;</error></testcase>
<testcase name="k"><skipped message="no GPU"/></testcase>
<testcase name="fl"><flakyFailure message="timing"/></testcase>
<testcase name="b"><failure><![CDATA[only text]]></failure></testcase>
<testcase name="p"><system-out>x</system-out></testcase>
</testsuite>`
	run, err := DecodeJUnit(context.Background(), []byte(junit))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"s > f": "boom\ntrace line", "s > e": "err\n<stack>", "s > k": "no GPU", "s > fl": "timing", "s > b": "only text", "s > p": ""}
	for _, c := range run.Cases {
		if c.Message != want[c.ID] {
			t.Errorf("%s (%s): message %q, want %q", c.ID, c.Outcome, c.Message, want[c.ID])
		}
	}
	stream := `{"Action":"run","Package":"p","Test":"TestA"}
{"Action":"output","Package":"p","Test":"TestA","Output":"=== RUN   TestA\n"}
{"Action":"output","Package":"p","Test":"TestA","Output":"    a_test.go:3: got 1\n"}
{"Action":"output","Package":"p","Test":"TestA","Output":"--- FAIL: TestA (0.00s)\n"}
{"Action":"fail","Package":"p","Test":"TestA"}
{"Action":"run","Package":"p","Test":"TestB"}
{"Action":"output","Package":"p","Test":"TestB","Output":"    b_test.go:3: log\n"}
{"Action":"pass","Package":"p","Test":"TestB"}
{"Action":"output","Package":"p","Output":"FAIL\n"}
{"Action":"fail","Package":"p"}
{"Action":"output","Package":"q","Output":"panic: boom\n"}
{"Action":"fail","Package":"q"}
`
	run, err = DecodeGoTest(context.Background(), []byte(stream))
	if err != nil {
		t.Fatal(err)
	}
	want = map[string]string{"p > TestA": "a_test.go:3: got 1", "p > TestB": "", "q > (package)": "panic: boom"}
	for _, c := range run.Cases {
		if c.Message != want[c.ID] {
			t.Errorf("%s (%s): message %q, want %q", c.ID, c.Outcome, c.Message, want[c.ID])
		}
	}
}

// TestCutMessage: a message over MaxMessage bytes is cut on a UTF-8
// boundary to MaxMessage bytes with the marker naming its length; one
// within it is kept whole.
func TestCutMessage(t *testing.T) {
	if got := cutMessage("short", 5); got != "short" {
		t.Fatalf("short message: %q", got)
	}
	for _, s := range []string{strings.Repeat("a", 5000), strings.Repeat("€", 1000), "a" + strings.Repeat("😀", 600)} {
		got := cutMessage(s, len(s))
		if len(got) > MaxMessage || !utf8.ValidString(got) || !strings.HasSuffix(got, fmt.Sprintf("…[cut: %d bytes]", len(s))) {
			t.Fatalf("cut of %d bytes: %d bytes %q", len(s), len(got), got[max(0, len(got)-40):])
		}
	}
	m := &messageText{}
	for range 1000 {
		m.add("line of output\n")
	}
	if got := m.text(); len(got) > MaxMessage || !strings.HasSuffix(got, "…[cut: 15000 bytes]") {
		t.Fatalf("collected message: %d bytes, ends %q", len(got), got[max(0, len(got)-40):])
	}
}
