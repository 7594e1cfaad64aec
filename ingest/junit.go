package ingest

import (
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
	"golang.org/x/net/html/charset"
)

// JUnit XML is read with encoding/xml into the structs below rather than
// with github.com/joshdk/go-junit: that library drops the file's declared
// counts (which the ledger must compare with the cases found), knows
// nothing of Maven Surefire's flakyFailure / rerunFailure elements (a
// rerun that passed is flaky, not passed), and reads no declared
// encoding other than UTF-8. The element and attribute names follow the
// de-facto schema the producers share (Ant's JUnit task, Surefire's
// surefire-test-report.xsd, and the attributes pytest, go-junit-report,
// gotestsum, jest-junit, mocha, scalatest, cargo-nextest, PHPUnit, Swift,
// bazel, Catch2 and TestNG write).

type xmlSuites struct {
	XMLName  xml.Name
	Tests    string     `xml:"tests,attr"`
	Failures string     `xml:"failures,attr"`
	Errors   string     `xml:"errors,attr"`
	Skipped  string     `xml:"skipped,attr"`
	Disabled string     `xml:"disabled,attr"`
	Suites   []xmlSuite `xml:"testsuite"`
}

type xmlSuite struct {
	Name      string     `xml:"name,attr"`
	Tests     string     `xml:"tests,attr"`
	Failures  string     `xml:"failures,attr"`
	Errors    string     `xml:"errors,attr"`
	Skipped   string     `xml:"skipped,attr"`
	Skips     string     `xml:"skips,attr"`
	Disabled  string     `xml:"disabled,attr"`
	Timestamp string     `xml:"timestamp,attr"`
	Time      string     `xml:"time,attr"`
	Suites    []xmlSuite `xml:"testsuite"`
	Cases     []xmlCase  `xml:"testcase"`
}

type xmlCase struct {
	Name         string   `xml:"name,attr"`
	Classname    string   `xml:"classname,attr"`
	Time         string   `xml:"time,attr"`
	Failures     elements `xml:"failure"`
	Errors       elements `xml:"error"`
	Skipped      elements `xml:"skipped"`
	FlakyFailure elements `xml:"flakyFailure"`
	FlakyError   elements `xml:"flakyError"`
	RerunFailure elements `xml:"rerunFailure"`
	RerunError   elements `xml:"rerunError"`
}

// elements counts the child elements of one name and keeps nothing of
// them: a case is read for which outcome elements it has and how many.
// (A slice of empty structs per name would cost each case 24 bytes per
// name, and a file of many cases several times its size while the slice
// of cases grows.)
type elements int

// UnmarshalXML counts one element and reads past its content.
func (n *elements) UnmarshalXML(d *xml.Decoder, start xml.StartElement) error {
	*n++
	return d.Skip()
}

// DecodeJUnit reads a JUnit XML document: a <testsuites> root or a bare
// <testsuite> root, suites nested to any depth, any encoding the XML
// declaration names (through golang.org/x/net/html/charset), the five XML
// entities and character references. Each <testcase> is one case with id
// "suite > nested suite > classname > name" (classname left out when it
// repeats the suite's name). The declared counts are the root's
// attributes when it has a tests attribute, else the sum over the
// top-level suites that have one. Malformed XML and XML that is not JUnit
// are CodeInvalid errors naming field "xml"; no error quotes the input
// beyond an element name. Decoding stops with ctx.Err() soon after ctx
// is done (the input is read in steps of cancelStep bytes and cases
// walked in steps of cancelStep cases, each step checking ctx). It is
// safe for concurrent use.
func DecodeJUnit(ctx context.Context, body []byte) (*Run, error) {
	dec := newXMLDecoder(ctx, body)
	// The root element is read once, into the shape its name calls for:
	// a bare <testsuite> root is one suite.
	var start xml.StartElement
	for {
		tok, err := dec.Token()
		if err != nil {
			return nil, xmlError(ctx, err, dec)
		}
		if se, ok := tok.(xml.StartElement); ok {
			start = se
			break
		}
	}
	var root xmlSuites
	var bare *xmlSuite
	if start.Name.Local == "testsuite" {
		bare = &xmlSuite{}
		if err := dec.DecodeElement(bare, &start); err != nil {
			return nil, xmlError(ctx, err, dec)
		}
		root.XMLName = start.Name
	} else if err := dec.DecodeElement(&root, &start); err != nil {
		return nil, xmlError(ctx, err, dec)
	}
	// Nothing but whitespace, comments and processing instructions may follow.
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, xmlError(ctx, err, dec)
		}
		switch t := tok.(type) {
		case xml.CharData:
			if len(bytes.TrimSpace(t)) != 0 {
				return nil, ledger.FieldError("xml", "text after the root element")
			}
		case xml.StartElement:
			return nil, ledger.FieldError("xml", "a second root element")
		}
	}
	r := &Run{}
	ids := newCaseIDs()
	var suites []xmlSuite
	switch root.XMLName.Local {
	case "testsuites":
		suites = root.Suites
	case "testsuite":
		suites = []xmlSuite{*bare}
		root = xmlSuites{}
	default:
		return nil, ledger.FieldError("xml", "root element <%s> is not JUnit: want <testsuites> or <testsuite>", clip(root.XMLName.Local))
	}
	r.Declared = declared(root, suites)
	w := &walker{ctx: ctx, ids: ids, r: r}
	for i := range suites {
		if err := w.walk(&suites[i], idPrefix{}); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// cancelStep is how many input bytes, test2json lines or cases a decoder
// handles between two checks of its context: a check is a non-blocking
// receive, so the cost is nil next to the work, and a canceled request
// stops within microseconds.
const cancelStep = 4096

// ctxReader reads body for an xml.Decoder, failing with ctx.Err() once
// ctx is done (checked every cancelStep bytes). It implements
// io.ByteReader so the decoder reads it without a bufio.Reader.
type ctxReader struct {
	ctx  context.Context
	r    *bytes.Reader
	left int
}

func (c *ctxReader) check() error {
	if c.left--; c.left > 0 {
		return nil
	}
	c.left = cancelStep
	return c.ctx.Err()
}

func (c *ctxReader) ReadByte() (byte, error) {
	if err := c.check(); err != nil {
		return 0, err
	}
	return c.r.ReadByte()
}

func (c *ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

func newXMLDecoder(ctx context.Context, body []byte) *xml.Decoder {
	dec := xml.NewDecoder(&ctxReader{ctx: ctx, r: bytes.NewReader(body), left: cancelStep})
	dec.CharsetReader = charset.NewReaderLabel
	return dec
}

// walker turns decoded suites into cases, checking ctx every cancelStep
// cases.
type walker struct {
	ctx  context.Context
	ids  *caseIDs
	r    *Run
	left int
}

// declared reads the file's own counts: each counter from the
// <testsuites> root's attribute where it has one, else summed over the
// top-level suites that have it (producers differ in which level they
// annotate: jest-junit puts no skipped attribute on the root). Skipped
// includes disabled (and nose's "skips"). It is nil when no level declares
// tests.
func declared(root xmlSuites, suites []xmlSuite) *Declared {
	pick := func(rootAttr string, suiteAttr func(xmlSuite) []string) (int, bool) {
		if strings.TrimSpace(rootAttr) != "" {
			return atoi(rootAttr), true
		}
		n, any := 0, false
		for _, s := range suites {
			for _, a := range suiteAttr(s) {
				if strings.TrimSpace(a) != "" {
					n, any = n+atoi(a), true
				}
			}
		}
		return n, any
	}
	tests, ok := pick(root.Tests, func(s xmlSuite) []string { return []string{s.Tests} })
	if !ok {
		return nil
	}
	d := &Declared{Tests: tests}
	d.Failures, _ = pick(root.Failures, func(s xmlSuite) []string { return []string{s.Failures} })
	d.Errors, _ = pick(root.Errors, func(s xmlSuite) []string { return []string{s.Errors} })
	rootSkipped := root.Skipped
	if rootSkipped != "" && root.Disabled != "" {
		rootSkipped = strconv.Itoa(atoi(root.Skipped) + atoi(root.Disabled))
	} else if rootSkipped == "" {
		rootSkipped = root.Disabled
	}
	d.Skipped, _ = pick(rootSkipped, func(s xmlSuite) []string { return []string{s.Skipped, s.Skips, s.Disabled} })
	return d
}

func (w *walker) walk(s *xmlSuite, path idPrefix) error {
	r := w.r
	suite := strings.TrimSpace(s.Name)
	path = path.extend(suite)
	if t, ok := parseJUnitTime(s.Timestamp); ok {
		end := t.Add(time.Duration(seconds(s.Time) * float64(time.Second)))
		if r.Started.IsZero() || t.Before(r.Started) {
			r.Started = t
		}
		if end.After(r.Finished) {
			r.Finished = end
		}
	}
	for _, c := range s.Cases {
		if w.left--; w.left <= 0 {
			if err := w.ctx.Err(); err != nil {
				return err
			}
			w.left = cancelStep
		}
		cn := strings.TrimSpace(c.Classname)
		if cn == suite {
			cn = "" // classname left out when it repeats the suite's name
		}
		k := Case{ID: w.ids.nextUnder(path, cn, c.Name), Duration: seconds(c.Time)}
		switch {
		case c.Errors > 0:
			k.Outcome = Errored
		case c.Failures > 0:
			k.Outcome = Failed
		case c.FlakyFailure+c.FlakyError > 0:
			k.Outcome = Flaky
			r.Notes = append(r.Notes, "flaky: "+k.ID+" failed, then passed on a rerun")
		case c.Skipped > 0:
			k.Outcome = Skipped
		default:
			k.Outcome = Passed
		}
		if n := int(c.RerunFailure + c.RerunError); n > 0 && k.Outcome != Flaky {
			r.Notes = append(r.Notes, "rerun: "+k.ID+" was rerun "+strconv.Itoa(n)+" time(s) and still did not pass")
		}
		r.Cases = append(r.Cases, k)
	}
	for i := range s.Suites {
		if err := w.walk(&s.Suites[i], path); err != nil {
			return err
		}
	}
	return nil
}

// xmlError maps a decoder error to a CodeInvalid error naming "xml",
// or to ctx.Err() when the decode stopped because ctx is done.
func xmlError(ctx context.Context, err error, dec *xml.Decoder) error {
	if cerr := ctx.Err(); cerr != nil && errors.Is(err, cerr) {
		return cerr
	}
	var se *xml.SyntaxError
	switch {
	case errors.As(err, &se):
		return ledger.FieldError("xml", "malformed XML at line %d", se.Line)
	case errors.Is(err, io.EOF):
		return ledger.FieldError("xml", "not an XML document: no root element")
	}
	line, _ := dec.InputPos()
	return ledger.FieldError("xml", "malformed XML at line %d", line)
}

func atoi(s string) int {
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil || n < 0 {
		return 0
	}
	return n
}

// seconds parses a JUnit time attribute: seconds as a decimal, with the
// thousands separators some Surefire locales write ("1,234.5").
func seconds(s string) float64 {
	f, err := strconv.ParseFloat(strings.ReplaceAll(strings.TrimSpace(s), ",", ""), 64)
	if err != nil || f < 0 || f > 1e9 {
		return 0
	}
	return f
}

// parseJUnitTime reads a timestamp attribute: ISO 8601 with or without a
// zone and fraction (no zone is taken as UTC, as Ant's task writes it).
func parseJUnitTime(s string) (time.Time, bool) {
	s = strings.TrimSpace(s)
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05.999999999", "2006-01-02 15:04:05.999999999", "2006-01-02T15:04:05.999999999Z0700"} {
		// A parsed time is the suite's, whatever its year: evidence
		// validation then refuses one before 1970 or in the future,
		// naming started_at (it is never replaced by the receiving time).
		// Only Go's zero time, which some producers write for "unknown",
		// is no time.
		if t, err := time.Parse(layout, s); err == nil && !t.IsZero() {
			return t.UTC(), true
		}
	}
	return time.Time{}, false
}
