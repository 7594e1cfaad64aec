package ingest

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
)

const corpus = "../../shared/corpus"

func corpusDir(t *testing.T, sub string) string {
	t.Helper()
	d := filepath.Join(corpus, sub)
	if _, err := os.Stat(d); err != nil {
		t.Skipf("shared corpus %s is absent (%v): skipping", d, err)
	}
	return d
}

func testParams() Params {
	return Params{Lane: "ci-tests/v1", Backend: ledger.BackendCPU, Repository: "github.com/example/repo",
		Commit: strings.Repeat("a", 40), Tree: strings.Repeat("b", 40), Now: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)}
}

// knownMismatch lists the corpus files whose own counts disagree with their
// cases, and how: container-structure-test declares 8 tests around 3
// testcases; gotestsum adds a synthetic TestMain case with a <failure>
// element that its suite does not count as a test and its root counts as
// an error (not a failure).
var knownMismatch = map[string]string{
	"container-structure-test--test.xml": "tests declared 8, found 3",
	"gotestsum--junitxml-report.xml":     "tests declared 59, found 60; errors declared 1, found 0",
}

// TestJUnitCorpus records every producer file of the corpus and checks that
// the counts found equal the file's own, that the record validates, and
// that the original is kept byte for byte and named by the evidence.
func TestJUnitCorpus(t *testing.T) {
	dir := corpusDir(t, "junit")
	files, _ := filepath.Glob(filepath.Join(dir, "*.xml"))
	if len(files) < 15 {
		t.Fatalf("only %d JUnit files in %s", len(files), dir)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			body, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			res, err := Decode(context.Background(), "application/xml", body, testParams())
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			checkOriginal(t, res, body)
			var d Details
			if err := ledger.DecodeStrict(res.Evidence[0].Details, &d); err != nil {
				t.Fatalf("details: %v", err)
			}
			if d.Declared == nil {
				t.Fatalf("no declared counts read")
			}
			if want := knownMismatch[filepath.Base(f)]; d.CountMismatch != want {
				t.Fatalf("count mismatch %q, want %q", d.CountMismatch, want)
			}
			if d.CountMismatch != "" && res.Evidence[0].Status == ledger.StatusPassed {
				t.Fatalf("a file whose counts disagree recorded as passed")
			}
			if d.Counts.Tests == 0 {
				t.Fatalf("no cases")
			}
		})
	}
}

func checkOriginal(t *testing.T, res *Result, body []byte) {
	t.Helper()
	if len(res.Records) != 2 || res.Records[0].Kind != ledger.KindOriginal || res.Records[1].Kind != ledger.KindEvidence {
		t.Fatalf("records: %+v", res.Records)
	}
	o, _, err := ledger.PrepareOriginal(res.Records[0].Body)
	if err != nil {
		t.Fatal(err)
	}
	if string(o.Content) != string(body) {
		t.Fatalf("original is not the input byte for byte")
	}
	if _, _, err := ledger.PrepareEvidence(res.Records[1].Body); err != nil {
		t.Fatalf("evidence does not validate: %v", err)
	}
	var d Details
	if err := ledger.DecodeStrict(res.Evidence[0].Details, &d); err != nil {
		t.Fatal(err)
	}
	orig, _ := ledger.PrepareRecord(ledger.KindOriginal, res.Records[0].Body)
	if d.Original.ID != ledger.EntryID(ledger.KindOriginal, orig) || d.Original.Digest != o.Digest {
		t.Fatalf("evidence names original %+v, want id %s digest %s", d.Original, ledger.EntryID(ledger.KindOriginal, orig), o.Digest)
	}
}

// TestJUnitEdgeCases gives each edge case its documented outcome.
func TestJUnitEdgeCases(t *testing.T) {
	dir := corpusDir(t, "junit/edge-cases")
	for _, tc := range []struct {
		file                                   string
		err                                    string // "" when it records
		tests, passed, failed, errors, skipped int
	}{
		{file: "corrupt-xml.xml", err: "malformed XML"},
		{file: "non-junit.xml", err: "root element <suites> is not JUnit"},
		{file: "testsuite-in-testsuite.xml", tests: 5, passed: 5},
		{file: "testsuite-root.xml", tests: 5, passed: 5},
		{file: "unsupported-unicode.xml", tests: 7, passed: 1, failed: 2, errors: 2, skipped: 2},
		{file: "with-xml-entities.xml", tests: 4, failed: 1, errors: 1, skipped: 2},
	} {
		t.Run(tc.file, func(t *testing.T) {
			body, err := os.ReadFile(filepath.Join(dir, tc.file))
			if err != nil {
				t.Fatal(err)
			}
			res, err := DecodeFormat(context.Background(), FormatJUnit, body, testParams())
			if tc.err != "" {
				var le *ledger.Error
				if err == nil || !errors.As(err, &le) || le.Code != ledger.CodeInvalid || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want invalid %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			checkOriginal(t, res, body)
			var d Details
			_ = ledger.DecodeStrict(res.Evidence[0].Details, &d)
			c := d.Counts
			if c.Tests != tc.tests || c.Passed != tc.passed || c.Failed != tc.failed || c.Errors != tc.errors || c.Skipped != tc.skipped {
				t.Fatalf("counts %+v", c)
			}
		})
	}
}
