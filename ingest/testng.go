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
)

// TestNG's own report, testng-results.xml, is what its XMLReporter writes
// (github.com/testng-team/testng at 5737e18, testng-core/src/main/java/
// org/testng/reporters/):
//
//   - The root <testng-results> carries passed, failed, skipped, ignored,
//     total and, when not zero, retried (AbstractXmlReporter.java
//     writeSummaryCount, lines 169-180). They count test methods only:
//     passed is the test context's passed tests, failed its failed tests,
//     skipped its skipped tests that were not retried, retried those that
//     were, ignored the excluded methods that are tests
//     (computeCountForSuite, lines 182-213), and total is the sum of the
//     five (Count.total, lines 222-224). Configuration methods
//     (@BeforeMethod, @AfterClass...) are in none of them.
//   - Each <suite> holds its <groups> and one <test> per <test> tag; each
//     <test> a <class name=> per class, and each <class> one <test-method>
//     per result: the test context's passed, failed and skipped tests,
//     then its passed, skipped and failed configurations, then the tests
//     that failed within their success percentage (XMLSuiteResultWriter.java
//     writeAllToBuffer, lines 68-81). A configuration method has
//     is-config="true" (lines 191-194).
//   - status is PASS, FAIL, SKIP or SUCCESS_PERCENTAGE_FAILURE (lines
//     174-187); a result that TestNG retried (an IRetryAnalyzer asked for
//     another attempt) is written with status SKIP and retried="true" (lines
//     158-161), and the attempt after it is a result of its own.
//   - A data provider's parameters are <params><param index=N><value>
//     CDATA</value></param></params>, a null one <value is-null="true"/>
//     (lines 257-282); a throwable is <exception class=> with <message>
//     (when the exception has one) and a short or full stack trace (lines
//     284-315); Reporter.log lines are <reporter-output><line>.
//   - An ignored method is written nowhere but in the counts.

// testngCounts is the root's count attributes; a counter the root lacks
// is nil.
type testngCounts struct {
	total, passed, failed, skipped, ignored, retried *int
}

func (c *testngCounts) set(name, value string) {
	n := atoi(value)
	switch name {
	case "total":
		c.total = &n
	case "passed":
		c.passed = &n
	case "failed":
		c.failed = &n
	case "skipped":
		c.skipped = &n
	case "ignored":
		c.ignored = &n
	case "retried":
		c.retried = &n
	}
}

func deref(p *int) int {
	if p == nil {
		return 0
	}
	return *p
}

// testngMethod is one <test-method> as read: the attributes that decide
// its case and the message of its exception.
type testngMethod struct {
	name, signature, status string
	config, retried         bool
	durationMS              string
	params                  []string
	message                 string
	line                    int
}

// retries is a method's retried attempts: how many, and the message of
// the last.
type retries struct {
	n       int
	message string
}

// testngDecoder walks a testng-results.xml token by token, so its memory
// is that of the cases found, not of the document.
type testngDecoder struct {
	ctx  context.Context
	dec  *xml.Decoder
	ids  *caseIDs
	r    *Run
	left int // elements until the next check of ctx
	// pending is, per case id before numbering, the retried attempts not
	// yet followed by the method's next result.
	pending      map[string]*retries
	passedFound  int
	retriedFound int
	configErrors int
}

// DecodeTestNG reads TestNG's testng-results.xml (see the comment above
// testngCounts for what TestNG writes, with its source). Each
// <test-method> that is not a configuration method and not a retried
// attempt is one case with id "suite > test > class > name", followed by
// its data-provider parameters in brackets ("name[a, b]", a null one
// "null", each cut to paramMax bytes) so that invocations stay apart;
// a repeated id is numbered as every format's is (caseIDs). Outcomes:
// PASS passed, FAIL failed, SKIP skipped; PASS after retried attempts of
// the same id is flaky (failed, then passed on a retry; its message the
// last retried attempt's), FAIL or SKIP
// after them keeps its outcome with a note; SUCCESS_PERCENTAGE_FAILURE is
// flaky (a failure the method's successPercentage tolerates; TestNG
// counts it in none of the root's counters). A configuration method that
// failed is an error case "... > name (configuration)" (TestNG exits
// with failure for it); other configuration methods are not cases. The
// message of a case is its exception's <message>, else the exception's
// class. Started and Finished are the suites' started-at and finished-at
// where they are in UTC (TestNG's default format names a zone by its
// abbreviation, which does not say one offset).
//
// The declared counts are the root's: tests = total - retried - ignored
// (the methods that ran to a result; ignored ones are written nowhere)
// plus the failed configuration methods found, failures = failed,
// errors = the failed configuration methods found (TestNG counts none),
// skipped = skipped, and passed and retried compared as they are (a
// method that passed on a retry is one of TestNG's passed). A root
// without a total attribute declares nothing.
//
// Malformed XML and XML that is not TestNG's are CodeInvalid errors
// naming field "xml" (an unknown status names its line); no error quotes
// the input beyond a clipped attribute value. Decoding stops with
// ctx.Err() once ctx is done (checked every cancelStep input bytes and
// every cancelStep elements). It is safe for concurrent use.
func DecodeTestNG(ctx context.Context, body []byte) (*Run, error) {
	d := &testngDecoder{ctx: ctx, dec: newXMLDecoder(ctx, body), ids: newCaseIDs(), r: &Run{},
		left: cancelStep, pending: map[string]*retries{}}
	start, err := d.root()
	if err != nil {
		return nil, err
	}
	if start.Name.Local != "testng-results" {
		return nil, ledger.FieldError("xml", "root element <%s> is not TestNG's: want <testng-results>", clip(start.Name.Local))
	}
	var counts testngCounts
	for _, a := range start.Attr {
		counts.set(a.Name.Local, a.Value)
	}
	if err := d.walk(); err != nil {
		return nil, err
	}
	if err := d.trailer(); err != nil {
		return nil, err
	}
	for id, p := range d.pending {
		d.r.Notes = append(d.r.Notes, "retried: "+id+" has "+strconv.Itoa(p.n)+" retried attempt(s) and no result after them")
	}
	if counts.total != nil {
		ignored, retried := deref(counts.ignored), deref(counts.retried)
		d.r.Declared = &Declared{Tests: *counts.total - retried - ignored + d.configErrors, Failures: deref(counts.failed),
			Errors: d.configErrors, Skipped: deref(counts.skipped), Passed: counts.passed, Retried: &retried,
			Ignored: counts.ignored, passedFound: d.passedFound, retriedFound: d.retriedFound}
	}
	return d.r, nil
}

// root reads to the first element and returns it.
func (d *testngDecoder) root() (xml.StartElement, error) {
	for {
		tok, err := d.dec.Token()
		if err != nil {
			return xml.StartElement{}, xmlError(d.ctx, err, d.dec)
		}
		if se, ok := tok.(xml.StartElement); ok {
			return se, nil
		}
	}
}

// trailer reads past the root's end: only whitespace, comments and
// processing instructions may follow.
func (d *testngDecoder) trailer() error {
	for {
		tok, err := d.dec.Token()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return xmlError(d.ctx, err, d.dec)
		}
		switch t := tok.(type) {
		case xml.CharData:
			if len(bytes.TrimSpace(t)) != 0 {
				return ledger.FieldError("xml", "text after the root element")
			}
		case xml.StartElement:
			return ledger.FieldError("xml", "a second root element")
		}
	}
}

// token is the decoder's next token, ctx checked every cancelStep calls.
func (d *testngDecoder) token() (xml.Token, error) {
	if d.left--; d.left <= 0 {
		if err := d.ctx.Err(); err != nil {
			return nil, err
		}
		d.left = cancelStep
	}
	tok, err := d.dec.Token()
	if err != nil {
		return nil, xmlError(d.ctx, err, d.dec)
	}
	return tok, nil
}

// walk reads the root's content to its end: suites, tests, classes and
// their test methods, by the parent each is in; every other element
// (groups, reporter output, attributes) is read past.
func (d *testngDecoder) walk() error {
	stack := []string{"testng-results"}
	var suite, test, class idPrefix
	for len(stack) > 0 {
		tok, err := d.token()
		if err != nil {
			return err
		}
		switch t := tok.(type) {
		case xml.EndElement:
			stack = stack[:len(stack)-1]
		case xml.StartElement:
			parent := stack[len(stack)-1]
			switch {
			case t.Name.Local == "suite" && parent == "testng-results":
				suite = idPrefix{}.extend(attr(t, "name"))
				d.suiteTimes(t)
				if url := attr(t, "url"); url != "" {
					d.r.Notes = append(d.r.Notes, "suite "+clip(attr(t, "name"))+" is written to a file of its own ("+clip(url)+"): its results are not in this file")
				}
			case t.Name.Local == "test" && parent == "suite":
				test = suite.extend(attr(t, "name"))
				if url := attr(t, "url"); url != "" {
					d.r.Notes = append(d.r.Notes, "test "+clip(attr(t, "name"))+" is written to a file of its own ("+clip(url)+"): its results are not in this file")
				}
			case t.Name.Local == "class" && parent == "test":
				name := attr(t, "name")
				if pkg := attr(t, "package"); pkg != "" && pkg != "[default]" {
					name = pkg + "." + name // XMLReporterConfig's split class and package names
				}
				class = test.extend(name)
			case t.Name.Local == "test-method" && parent == "class":
				line, _ := d.dec.InputPos()
				m, err := d.method(t)
				if err != nil {
					return err
				}
				m.line = line
				if err := d.add(class, m); err != nil {
					return err
				}
				continue // method read the element to its end
			}
			stack = append(stack, t.Name.Local)
		}
	}
	return nil
}

// suiteTimes widens the run's span to a suite's started-at and
// finished-at where both are in UTC.
func (d *testngDecoder) suiteTimes(t xml.StartElement) {
	start, ok1 := testngTime(attr(t, "started-at"))
	end, ok2 := testngTime(attr(t, "finished-at"))
	if !ok1 || !ok2 {
		return
	}
	if d.r.Started.IsZero() || start.Before(d.r.Started) {
		d.r.Started = start
	}
	if end.After(d.r.Finished) {
		d.r.Finished = end
	}
}

// testngTime reads TestNG's timestamp ("yyyy-MM-dd'T'HH:mm:ss z" by
// default, XMLReporterConfig.FMT_DEFAULT) when its zone is UTC, GMT or Z,
// or an RFC 3339 time; any other zone abbreviation is no time.
func testngTime(s string) (time.Time, bool) {
	s = strings.TrimSpace(s)
	for _, z := range []string{" UTC", " GMT", "Z"} {
		if base, ok := strings.CutSuffix(s, z); ok {
			if t, err := time.Parse("2006-01-02T15:04:05.999999999", base); err == nil {
				return t.UTC(), true
			}
		}
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t.UTC(), true
	}
	return time.Time{}, false
}

func attr(t xml.StartElement, name string) string {
	v := ""
	for _, a := range t.Attr {
		if a.Name.Local == name {
			v = a.Value
		}
	}
	return v
}

// paramMax is how many bytes of one data-provider parameter a case id
// keeps; a longer one is cut and marked "…".
const paramMax = 64

// method reads one <test-method> to its end.
func (d *testngDecoder) method(start xml.StartElement) (testngMethod, error) {
	m := testngMethod{}
	for _, a := range start.Attr {
		switch a.Name.Local {
		case "name":
			m.name = a.Value
		case "signature":
			m.signature = a.Value
		case "status":
			m.status = strings.TrimSpace(a.Value)
		case "is-config":
			m.config = strings.TrimSpace(a.Value) == "true"
		case "retried":
			m.retried = strings.TrimSpace(a.Value) == "true"
		case "duration-ms":
			m.durationMS = a.Value
		}
	}
	// path is the element names inside the method, innermost last.
	var path []string
	var value, message *messageText
	var exception string
	for {
		tok, err := d.token()
		if err != nil {
			return m, err
		}
		switch t := tok.(type) {
		case xml.StartElement:
			path = append(path, t.Name.Local)
			switch {
			case len(path) == 3 && path[0] == "params" && path[1] == "param" && t.Name.Local == "value":
				if attr(t, "is-null") == "true" {
					m.params = append(m.params, "null")
				} else {
					value = &messageText{}
				}
			case len(path) == 1 && t.Name.Local == "exception":
				exception = attr(t, "class")
			case len(path) == 2 && path[0] == "exception" && t.Name.Local == "message" && message == nil:
				message = &messageText{}
			}
		case xml.CharData:
			switch {
			case value != nil && len(path) == 3:
				value.addBytes(t)
			case message != nil && len(path) == 2 && path[1] == "message":
				message.addBytes(t)
			}
		case xml.EndElement:
			if len(path) == 0 {
				switch {
				case message != nil && message.n > 0:
					m.message = message.text()
				case exception != "":
					m.message = cutMessage(exception, len(exception))
				}
				return m, nil
			}
			if len(path) == 3 && value != nil {
				m.params = append(m.params, paramText(value))
				value = nil
			}
			path = path[:len(path)-1]
		}
	}
}

// paramText is a parameter's value for a case id: trimmed, cut to
// paramMax bytes on a UTF-8 boundary and marked "…" when longer.
func paramText(v *messageText) string {
	s := strings.ToValidUTF8(strings.TrimSpace(string(v.b)), "\uFFFD")
	if len(s) <= paramMax && v.n <= len(v.b) {
		return s
	}
	keep := min(len(s), paramMax)
	for keep > 0 && keep < len(s) && s[keep]&0xC0 == 0x80 {
		keep--
	}
	return s[:keep] + "…"
}

// add records method m of the class whose id prefix is class.
func (d *testngDecoder) add(class idPrefix, m testngMethod) error {
	name := strings.TrimSpace(m.name)
	if name == "" {
		name = strings.TrimSpace(m.signature)
	}
	if len(m.params) > 0 {
		name += "[" + strings.Join(m.params, ", ") + "]"
	}
	if m.config {
		if m.status != "FAIL" {
			return nil
		}
		d.configErrors++
		id := d.ids.nextUnder(class, name+" (configuration)")
		d.r.Cases = append(d.r.Cases, Case{ID: id, Outcome: Errored, Duration: millis(m.durationMS), Message: m.message})
		return nil
	}
	key := class.extend(name).id()
	if m.retried {
		p := d.pending[key]
		if p == nil {
			p = &retries{}
			d.pending[key] = p
		}
		p.n++
		p.message = m.message
		d.retriedFound++
		return nil
	}
	k := Case{Duration: millis(m.durationMS), Message: m.message}
	switch m.status {
	case "PASS":
		k.Outcome = Passed
		d.passedFound++
	case "FAIL":
		k.Outcome = Failed
	case "SKIP":
		k.Outcome = Skipped
	case "SUCCESS_PERCENTAGE_FAILURE":
		k.Outcome = Flaky
	default:
		return ledger.FieldError("xml", "the test-method at line %d has status %q: want PASS, FAIL, SKIP or SUCCESS_PERCENTAGE_FAILURE", m.line, clip(m.status))
	}
	k.ID = d.ids.nextUnder(class, name)
	p := d.pending[key]
	delete(d.pending, key)
	switch {
	case k.Outcome == Flaky:
		d.r.Notes = append(d.r.Notes, "flaky: "+k.ID+" failed within its successPercentage")
	case p != nil && k.Outcome == Passed:
		k.Outcome = Flaky
		k.Message = p.message // what the retried attempt failed with
		d.r.Notes = append(d.r.Notes, "flaky: "+k.ID+" failed, then passed on a retry ("+strconv.Itoa(p.n)+" retried attempt(s))")
	case p != nil:
		d.r.Notes = append(d.r.Notes, "rerun: "+k.ID+" was retried "+strconv.Itoa(p.n)+" time(s) and still did not pass")
	}
	if k.Outcome == Passed {
		k.Message = ""
	}
	d.r.Cases = append(d.r.Cases, k)
	return nil
}

// millis is a duration-ms attribute in seconds.
func millis(s string) float64 {
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil || n < 0 || n > 1e12 {
		return 0
	}
	return float64(n) / 1000
}

// xmlRoot returns the local name of body's root element, "" when body
// has none before malformed XML or its end, or when ctx is done first.
func xmlRoot(ctx context.Context, body []byte) string {
	dec := newXMLDecoder(ctx, body)
	for {
		tok, err := dec.Token()
		if err != nil {
			return ""
		}
		if se, ok := tok.(xml.StartElement); ok {
			return se.Name.Local
		}
	}
}
