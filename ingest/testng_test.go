package ingest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
)

// The files in testdata/testng are written for these tests, in the shape
// TestNG's XMLReporter writes (github.com/testng-team/testng at 5737e18:
// testng-core/src/main/java/org/testng/reporters/XMLReporter.java,
// AbstractXmlReporter.java, XMLSuiteResultWriter.java; the element and
// attribute names of testng-core-api/.../XMLReporterConfig.java). The
// repository has no testng-results.xml of its own; what they were compared
// against:
//
//   - configuration-ignored.xml reproduces the report of TestNG's own test
//     XmlReporterTest.ensureConfigurationMethodsAreNotCountedAsSkippedInXmlReports
//     (GITHUB-2886, testng-core/src/test/java/test/reports/XmlReporterTest.java
//     lines 93-115: JekyllTestSample and HydeTestSample, one @Test each, a
//     @BeforeSuite in their base class, and SimpleIgnoredSample's one
//     ignored method), whose asserted counts are the root's here: ignored 1,
//     total 3, passed 2, failed 0. By hand: 2 test methods, both PASS, 1
//     configuration method (not counted); tests declared 3-0-1 = 2, found 2.
//   - dataprovider-retried.xml has what XMLSuiteResultWriter writes for data
//     providers (params/param/value CDATA, a null value is-null="true",
//     lines 257-282), retried attempts (status SKIP retried="true", lines
//     158-161, counted in the root's retried and total, not skipped:
//     AbstractXmlReporter lines 192-202), configuration methods, groups,
//     exceptions with and without a message, two suites (one in a zone TestNG
//     writes as an abbreviation), and a method invoked twice with no
//     parameters. By hand: passed 5 (add[1, 2], add[2, 3] after its retry,
//     ok, ok, ping), failed 2 (add[null, 1], div[4, 0] after two retries),
//     skipped 1 (skipMe), retried 3, ignored 1: total 12; 8 cases, of which
//     add[2, 3] is flaky, so the details count passed 4, failed 2, skipped 1,
//     flaky 1.
//   - failed-configuration.xml: a @BeforeClass that failed and the two test
//     methods TestNG then skipped (root skipped 2, total 2): 2 skipped cases
//     and the configuration method as an error case; declared tests 2+1,
//     errors 1.
//
// The root attributes of quality-time's TestNG collector tests
// (ICTU/quality-time, testng test cases) were read for the attribute
// spellings (ignored present, retried absent when zero).

func readTestNG(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "testng", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func testngDetails(t *testing.T, res *Result) Details {
	t.Helper()
	var d Details
	if err := json.Unmarshal(res.Evidence[0].Details, &d); err != nil {
		t.Fatal(err)
	}
	return d
}

func TestTestNGFiles(t *testing.T) {
	for _, c := range []struct {
		file          string
		status        ledger.Status
		counts        Counts
		declared      string // the declared counts as JSON
		ids           map[string]Outcome
		messages      map[string]string
		notes         int
		started, done string
	}{
		{file: "configuration-ignored.xml", status: ledger.StatusPassed,
			counts:   Counts{Tests: 2, Passed: 2},
			declared: `{"tests":2,"failures":0,"errors":0,"skipped":0,"passed":2,"retried":0,"ignored":1}`,
			ids: map[string]Outcome{
				"Command line suite > Command line test > test.reports.issue2886.JekyllTestSample > testMethod": Passed,
				"Command line suite > Command line test > test.reports.issue2886.HydeTestSample > testMethod":   Passed,
			},
			started: "2026-11-30T09:00:00Z", done: "2026-11-30T09:00:01Z"},
		{file: "dataprovider-retried.xml", status: ledger.StatusFailed,
			counts:   Counts{Tests: 8, Passed: 4, Failed: 2, Skipped: 1, Flaky: 1},
			declared: `{"tests":8,"failures":2,"errors":0,"skipped":1,"passed":5,"retried":3,"ignored":1}`,
			ids: map[string]Outcome{
				"Regression > api > com.acme.CalcTest > add[1, 2]":    Passed,
				"Regression > api > com.acme.CalcTest > add[2, 3]":    Flaky,
				"Regression > api > com.acme.CalcTest > add[null, 1]": Failed,
				"Regression > api > com.acme.CalcTest > div[4, 0]":    Failed,
				"Regression > api > com.acme.CalcTest > skipMe":       Skipped,
				"Regression > api > com.acme.OtherTest > ok":          Passed,
				"Regression > api > com.acme.OtherTest > ok #2":       Passed,
				"Smoke > smoke > com.acme.SmokeTest > ping":           Passed,
			},
			messages: map[string]string{
				"Regression > api > com.acme.CalcTest > add[null, 1]": "java.lang.NullPointerException",
				"Regression > api > com.acme.CalcTest > div[4, 0]":    "/ by zero",
				"Regression > api > com.acme.CalcTest > skipMe":       "not on this platform",
				"Regression > api > com.acme.CalcTest > add[2, 3]":    "expected [5] but found [4]",
			},
			notes:   2,
			started: "2026-11-30T09:00:00Z", done: "2026-11-30T09:00:05Z"},
		{file: "failed-configuration.xml", status: ledger.StatusFailed,
			counts:   Counts{Tests: 3, Errors: 1, Skipped: 2},
			declared: `{"tests":3,"failures":0,"errors":1,"skipped":2,"passed":0,"retried":0,"ignored":0}`,
			ids: map[string]Outcome{
				"Default suite > Default test > com.acme.DbTest > first":                   Skipped,
				"Default suite > Default test > com.acme.DbTest > second":                  Skipped,
				"Default suite > Default test > com.acme.DbTest > connect (configuration)": Errored,
			},
			messages: map[string]string{
				"Default suite > Default test > com.acme.DbTest > connect (configuration)": "Connection refused",
				"Default suite > Default test > com.acme.DbTest > first":                   "Skipped because of a failed configuration: connect",
			},
			started: "2026-11-30T11:00:00Z", done: "2026-11-30T11:00:00Z"},
	} {
		t.Run(c.file, func(t *testing.T) {
			body := readTestNG(t, c.file)
			if f, err := Detect(c.file, body); err != nil || f != FormatTestNG {
				t.Fatalf("Detect: %q, %v", f, err)
			}
			res, err := DecodeFormat(context.Background(), FormatTestNG, body, testParams())
			if err != nil {
				t.Fatal(err)
			}
			d := testngDetails(t, res)
			if d.CountMismatch != "" {
				t.Fatalf("count mismatch %q", d.CountMismatch)
			}
			if d.Counts != c.counts {
				t.Fatalf("counts %+v, want %+v", d.Counts, c.counts)
			}
			if got, _ := json.Marshal(d.Declared); string(got) != c.declared {
				t.Fatalf("declared %s, want %s", got, c.declared)
			}
			ev := res.Evidence[0]
			if ev.Status != c.status {
				t.Fatalf("status %s, want %s", ev.Status, c.status)
			}
			if d.Format != FormatTestNG || res.Original.Format != FormatTestNG || res.Original.MediaType != MediaTestNG {
				t.Fatalf("format %q, original %q %q", d.Format, res.Original.Format, res.Original.MediaType)
			}
			got := map[string]Outcome{}
			msgs := map[string]string{}
			for _, k := range d.Cases {
				got[k.ID] = k.Outcome
				msgs[k.ID] = k.Message
			}
			if fmt.Sprint(got) != fmt.Sprint(c.ids) {
				t.Fatalf("cases %v\nwant %v", got, c.ids)
			}
			for id, m := range c.messages {
				if msgs[id] != m {
					t.Fatalf("message of %s %q, want %q", id, msgs[id], m)
				}
			}
			if len(d.Notes) != c.notes {
				t.Fatalf("notes %q, want %d", d.Notes, c.notes)
			}
			if s, f := ev.StartedAt.Format(time.RFC3339), ev.FinishedAt.Format(time.RFC3339); s != c.started || f != c.done {
				t.Fatalf("span %s..%s, want %s..%s", s, f, c.started, c.done)
			}
			// The same file sent as generic XML or as JUnit is TestNG's.
			for _, mt := range []string{"application/xml", "text/xml", MediaJUnit, MediaTestNG} {
				res2, err := Decode(context.Background(), mt, body, testParams())
				if err != nil || res2.Format != FormatTestNG || !bytes.Equal(res2.Records[1].Body, res.Records[1].Body) {
					t.Fatalf("as %s: %v, format %v", mt, err, res2)
				}
			}
		})
	}
}

// TestTestNGRootCounts: a file whose own counts disagree with its methods
// is inconclusive (or failed, when a case failed), naming each counter
// that disagrees.
func TestTestNGRootCounts(t *testing.T) {
	base := string(readTestNG(t, "configuration-ignored.xml"))
	root := `<testng-results ignored="1" total="3" passed="2" failed="0" skipped="0">`
	for _, c := range []struct{ root, mismatch string }{
		{`<testng-results ignored="1" total="4" passed="2" failed="0" skipped="0">`, "tests declared 3, found 2"},
		{`<testng-results ignored="1" total="3" passed="3" failed="0" skipped="0">`, "passed declared 3, found 2"},
		{`<testng-results ignored="1" total="3" passed="2" failed="1" skipped="0">`, "failures declared 1, found 0"},
		{`<testng-results ignored="0" total="3" passed="2" failed="0" skipped="1">`, "tests declared 3, found 2; skipped declared 1, found 0"},
		{`<testng-results ignored="0" total="3" passed="2" failed="0" skipped="0" retried="1">`, "retried declared 1, found 0"},
		{`<testng-results>`, ""}, // no total: nothing declared
	} {
		body := strings.Replace(base, root, c.root, 1)
		res, err := DecodeFormat(context.Background(), FormatTestNG, []byte(body), testParams())
		if err != nil {
			t.Fatal(err)
		}
		d := testngDetails(t, res)
		if d.CountMismatch != c.mismatch {
			t.Fatalf("%s: mismatch %q, want %q", c.root, d.CountMismatch, c.mismatch)
		}
		want := ledger.StatusInconclusive
		if c.mismatch == "" {
			want = ledger.StatusPassed
		}
		if res.Evidence[0].Status != want {
			t.Fatalf("%s: status %s, want %s", c.root, res.Evidence[0].Status, want)
		}
	}
}

// TestTestNGOutcomes covers what the files do not: success-percentage
// failures, retried attempts with no result after them, retries that end
// skipped, long parameters, split class and package names.
func TestTestNGOutcomes(t *testing.T) {
	long := strings.Repeat("é", 100)
	body := `<testng-results total="5" passed="1" failed="0" skipped="1" retried="2">
<suite name="s"><test name="t"><class name="C" package="p">
<test-method name="m" status="SUCCESS_PERCENTAGE_FAILURE"><exception class="E"><message>tolerated</message></exception></test-method>
<test-method name="r" status="SKIP" retried="true"/>
<test-method name="r" status="SKIP"/>
<test-method name="lost" status="SKIP" retried="true"/>
<test-method name="p" status="PASS"><params><param index="0"><value><![CDATA[` + long + `]]></value></param></params></test-method>
</class></test></suite></testng-results>`
	res, err := DecodeFormat(context.Background(), FormatTestNG, []byte(body), testParams())
	if err != nil {
		t.Fatal(err)
	}
	d := testngDetails(t, res)
	got := map[string]Outcome{}
	for _, k := range d.Cases {
		got[k.ID] = k.Outcome
	}
	longID := "s > t > p.C > p[" + strings.Repeat("é", 32) + "…]"
	want := map[string]Outcome{"s > t > p.C > m": Flaky, "s > t > p.C > r": Skipped, longID: Passed}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("cases %v, want %v", got, want)
	}
	// The success-percentage failure is in none of TestNG's counters: total
	// 5 is p, r, r's retried attempt, lost's and the skipped r.
	if d.CountMismatch != "" || res.Evidence[0].Status != ledger.StatusInconclusive {
		t.Fatalf("mismatch %q, status %s", d.CountMismatch, res.Evidence[0].Status)
	}
	if len(d.Notes) != 3 || !strings.Contains(strings.Join(d.Notes, "\n"), "lost has 1 retried attempt(s) and no result after them") {
		t.Fatalf("notes %q", d.Notes)
	}
}

// TestTestNGRefused: malformed and foreign XML is refused naming "xml"
// (and the line where it can), never quoting the input; nothing decodes.
func TestTestNGRefused(t *testing.T) {
	secret := strings.Repeat("s3cr3t", 50)
	for _, c := range []struct{ body, want string }{
		{`<testng-results total="1"><suite name="` + secret + `">`, "malformed XML"},
		{`<testsuites tests="1"/>`, "root element <testsuites> is not TestNG's"},
		{`<testng-results/><testng-results/>`, "a second root element"},
		{`<testng-results/>` + secret, "text after the root element"},
		{"<testng-results><suite><test><class>\n<test-method name=\"a\" status=\"" + secret + "\"/></class></test></suite></testng-results>", "the test-method at line 2 has status"},
		{`<?xml version="1.0"?>`, "no root element"},
		{`<!DOCTYPE x [<!ENTITY e "` + secret + `">]><testng-results>&e;</testng-results>`, "malformed XML"},
	} {
		_, err := DecodeFormat(context.Background(), FormatTestNG, []byte(c.body), testParams())
		var le *ledger.Error
		if err == nil || !errors.As(err, &le) || le.Code != ledger.CodeInvalid || le.Field != "xml" || !strings.Contains(err.Error(), c.want) {
			t.Fatalf("%.60q: error %v, want an invalid xml error with %q", c.body, err, c.want)
		}
		if strings.Contains(err.Error(), secret) {
			t.Fatalf("error quotes the input: %v", err)
		}
	}
}

// largeTestNG is a testng-results.xml of n test methods in 10 classes,
// each with reporter output the decoder reads past; every 10,000th
// (from 7) fails, the one of 10,007 with a message longer than
// MaxMessage (checkLarge).
func largeTestNG(n int) []byte {
	var b bytes.Buffer
	failed := 0
	for i := 7; i < n; i += 10_000 {
		failed++
	}
	fmt.Fprintf(&b, `<?xml version="1.0" encoding="UTF-8"?>`+"\n"+`<testng-results ignored="0" total="%d" passed="%d" failed="%d" skipped="0">`+"\n", n, n-failed, failed)
	b.WriteString(`<suite name="big" started-at="2026-11-30T09:00:00 UTC" finished-at="2026-11-30T09:10:00 UTC"><test name="t">` + "\n")
	long := largeLongMessage
	for c := range 10 {
		fmt.Fprintf(&b, `<class name="pkg.Class%d">`+"\n", c)
		for i := c; i < n; i += 10 {
			if (i-7)%10_000 == 0 && i >= 7 {
				msg := fmt.Sprintf("test_%d: expected [0] but found [1]", i)
				if i == 10_007 {
					msg = long
				}
				fmt.Fprintf(&b, `<test-method name="test_%d" status="FAIL" duration-ms="1"><exception class="java.lang.AssertionError"><message><![CDATA[%s]]></message></exception></test-method>`+"\n", i, msg)
				continue
			}
			fmt.Fprintf(&b, `<test-method name="test_%d" status="PASS" duration-ms="1"><reporter-output><line><![CDATA[output of test %d, padding padding padding]]></line></reporter-output></test-method>`+"\n", i, i)
		}
		b.WriteString("</class>\n")
	}
	b.WriteString("</test></suite>\n</testng-results>\n")
	return b.Bytes()
}

// TestTestNGLarge: 100,000 methods decode with their exact counts, within
// the details cap, each long message cut, in memory bounded by a small
// multiple of the input (the same bound the JUnit decoder is held to by
// the server's ingest budget, web.IngestFactor 64).
func TestTestNGLarge(t *testing.T) {
	const n = 100_000
	body := largeTestNG(n)
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	res, err := DecodeFormat(context.Background(), FormatTestNG, body, testParams())
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 40*uint64(len(body)) {
		t.Fatalf("decoding %d bytes allocated %d bytes", len(body), alloc)
	}
	checkLarge(t, res, body, n)
	d := testngDetails(t, res)
	if d.CountMismatch != "" {
		t.Fatalf("mismatch %q", d.CountMismatch)
	}
}

// TestTestNGCanceled: a canceled context stops the decoder with its error.
func TestTestNGCanceled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := DecodeTestNG(ctx, largeTestNG(20_000)); !errors.Is(err, context.Canceled) {
		t.Fatalf("error %v, want context.Canceled", err)
	}
}

func FuzzTestNG(f *testing.F) {
	f.Add([]byte(`<testng-results total="1" passed="1"><suite name="s"><test name="t"><class name="c"><test-method name="a" status="PASS"/></class></test></suite></testng-results>`))
	f.Add([]byte(`<testng-results total="2" failed="1" retried="1"><suite><test><class name="c"><test-method name="a" status="SKIP" retried="true"/><test-method name="a" status="FAIL"><params><param index="0"><value is-null="true"/></param></params><exception class="E"><message>m</message></exception></test-method></class></test></suite></testng-results>`))
	f.Add([]byte(`<testng-results><suite><test><class><test-method is-config="true" status="FAIL" name="b"/></class></test></suite></testng-results>`))
	f.Fuzz(func(t *testing.T, data []byte) { fuzzDecode(t, FormatTestNG, data, testParams()) })
}
