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

// xmlCase is one <testcase>: its name, classname and time attributes,
// how many of each outcome element it has, and the message of the element
// that decides its outcome (xmlCase.outcome). It is read by its own
// UnmarshalXML, which keeps only those: the text of other children
// (system-out, properties) is read past, and of the outcome elements only
// the first of each name is read for a message, at most MaxMessage bytes
// of it.
type xmlCase struct {
	Name         string
	Classname    string
	Time         string
	Failures     int
	Errors       int
	Skipped      int
	FlakyFailure int
	FlakyError   int
	RerunFailure int
	RerunError   int
	Message      string
}

// outcome is the case's outcome by the elements it has: an error, else a
// failure, else a flaky failure or error (failed, then passed on a
// rerun), else skipped, else passed.
func (c *xmlCase) outcome() Outcome {
	switch {
	case c.Errors > 0:
		return Errored
	case c.Failures > 0:
		return Failed
	case c.FlakyFailure+c.FlakyError > 0:
		return Flaky
	case c.Skipped > 0:
		return Skipped
	}
	return Passed
}

// UnmarshalXML reads one <testcase> element (see xmlCase). Attributes and
// child elements are matched by local name, any namespace; a repeated
// attribute's last value counts.
func (c *xmlCase) UnmarshalXML(d *xml.Decoder, start xml.StartElement) error {
	for _, a := range start.Attr {
		switch a.Name.Local {
		case "name":
			c.Name = a.Value
		case "classname":
			c.Classname = a.Value
		case "time":
			c.Time = a.Value
		}
	}
	var msgs [4]string // error, failure, flaky, skipped: the first element's message of each
	for {
		tok, err := d.Token()
		if err != nil {
			return err
		}
		switch t := tok.(type) {
		case xml.EndElement:
			switch c.outcome() {
			case Errored:
				c.Message = msgs[0]
			case Failed:
				c.Message = msgs[1]
			case Flaky:
				c.Message = msgs[2]
			case Skipped:
				c.Message = msgs[3]
			}
			return nil
		case xml.StartElement:
			var n *int
			slot := -1
			switch t.Name.Local {
			case "error":
				n, slot = &c.Errors, 0
			case "failure":
				n, slot = &c.Failures, 1
			case "flakyFailure":
				n, slot = &c.FlakyFailure, 2
			case "flakyError":
				n, slot = &c.FlakyError, 2
			case "skipped":
				n, slot = &c.Skipped, 3
			case "rerunFailure":
				n = &c.RerunFailure
			case "rerunError":
				n = &c.RerunError
			}
			if n != nil {
				*n++
			}
			if slot < 0 || msgs[slot] != "" {
				if err := d.Skip(); err != nil {
					return err
				}
				continue
			}
			m, err := elementMessage(d, t)
			if err != nil {
				return err
			}
			msgs[slot] = m
		}
	}
}

// elementMessage reads the element start opened to its end and returns
// its message (joinMessage): the message attribute and the text inside
// it, at any depth.
func elementMessage(d *xml.Decoder, start xml.StartElement) (string, error) {
	var attr string
	for _, a := range start.Attr {
		if a.Name.Local == "message" {
			attr = a.Value
		}
	}
	body := &messageText{}
	for depth := 0; ; {
		tok, err := d.Token()
		if err != nil {
			return "", err
		}
		switch t := tok.(type) {
		case xml.StartElement:
			depth++
		case xml.EndElement:
			if depth == 0 {
				return joinMessage(attr, body), nil
			}
			depth--
		case xml.CharData:
			body.addBytes(t)
		}
	}
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
		k := Case{ID: w.ids.nextUnder(path, cn, c.Name), Duration: seconds(c.Time), Outcome: c.outcome(), Message: c.Message}
		if k.Outcome == Flaky {
			r.Notes = append(r.Notes, "flaky: "+k.ID+" failed, then passed on a rerun")
		}
		if n := c.RerunFailure + c.RerunError; n > 0 && k.Outcome != Flaky {
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
