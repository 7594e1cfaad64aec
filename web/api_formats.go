package web

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/evidence-ledger/ledger/gates"
	"github.com/evidence-ledger/ledger/ingest"
	"github.com/evidence-ledger/ledger/ledger"
)

// serveEvidenceFormat answers GET /api/v1/evidence/{id}?format=in-toto:
// the evidence as an in-toto Statement v1 with the test-result predicate
// (ingest.ExportStatement), Content-Type application/vnd.in-toto+json;
// format=dsse: that Statement in a DSSE envelope (payloadType
// application/vnd.in-toto+json) signed with the log key
// (ServiceEnvelope), Content-Type application/vnd.dsse.envelope.v1+json.
// It reports whether it answered (false for format "" or json).
func (s *Server) serveEvidenceFormat(w http.ResponseWriter, r *http.Request, e ledger.EvidenceEntry) bool {
	switch f := r.URL.Query().Get("format"); f {
	case "", "json":
		return false
	case "in-toto":
		b, err := json.Marshal(ingest.ExportStatement(e.Evidence))
		if err != nil {
			s.writeError(w, r, err)
			return true
		}
		w.Header().Set("Content-Type", ingest.MediaInToto)
		w.WriteHeader(http.StatusOK)
		w.Write(append(b, '\n'))
		return true
	case "dsse":
		b, err := signedStatement(s.store, ingest.ExportStatement(e.Evidence))
		if err != nil {
			s.writeError(w, r, err)
			return true
		}
		w.Header().Set("Content-Type", ledger.ContentTypeDSSE)
		w.WriteHeader(http.StatusOK)
		w.Write(append(b, '\n'))
		return true
	default:
		s.writeError(w, r, ledger.FieldError("format", "must be json, in-toto or dsse, got %q", clipText(f)))
		return true
	}
}

// JUnit shapes of a readiness verdict: one testsuite named after the
// release, one testcase per gate (classname the gate kind); a gate that is
// neither passed nor waived is a failure whose message is its reason, a
// waived gate is skipped with the waiver's reason.
type junitSuites struct {
	XMLName  xml.Name     `xml:"testsuites"`
	Name     string       `xml:"name,attr"`
	Tests    int          `xml:"tests,attr"`
	Failures int          `xml:"failures,attr"`
	Errors   int          `xml:"errors,attr"`
	Skipped  int          `xml:"skipped,attr"`
	Suites   []junitSuite `xml:"testsuite"`
}

type junitSuite struct {
	Name      string      `xml:"name,attr"`
	Tests     int         `xml:"tests,attr"`
	Failures  int         `xml:"failures,attr"`
	Errors    int         `xml:"errors,attr"`
	Skipped   int         `xml:"skipped,attr"`
	Timestamp string      `xml:"timestamp,attr"`
	Props     []junitProp `xml:"properties>property"`
	Cases     []junitCase `xml:"testcase"`
}

type junitProp struct {
	Name  string `xml:"name,attr"`
	Value string `xml:"value,attr"`
}

type junitCase struct {
	Name      string     `xml:"name,attr"`
	Classname string     `xml:"classname,attr"`
	Failure   *junitNote `xml:"failure"`
	Skipped   *junitNote `xml:"skipped"`
}

type junitNote struct {
	Message string `xml:"message,attr"`
	Type    string `xml:"type,attr,omitempty"`
	Text    string `xml:",chardata"`
}

// ReadinessJUnit renders a readiness verdict as JUnit XML (see junitSuites)
// so that CI dashboards that read JUnit show the release's gates. The
// properties carry the release version, pins digest, readiness and the
// checkpoint the verdict was computed at.
func ReadinessJUnit(rd *gates.Readiness) ([]byte, error) {
	suite := junitSuite{Name: "release " + rd.Version, Timestamp: rd.ComputedAt.UTC().Format("2006-01-02T15:04:05Z"),
		Props: []junitProp{{"version", rd.Version}, {"pins_digest", rd.PinsDigest}, {"ready", strconv.FormatBool(rd.Ready)},
			{"checkpoint_size", strconv.FormatUint(rd.Checkpoint.Size, 10)}}}
	for _, g := range rd.Gates {
		c := junitCase{Name: g.ID, Classname: g.Kind}
		switch g.State {
		case gates.StatePassed:
		case gates.StateWaived:
			c.Skipped = &junitNote{Message: "waived: " + g.Reason}
			suite.Skipped++
		default:
			c.Failure = &junitNote{Message: g.Reason, Type: string(g.State), Text: fmt.Sprintf("gate %s is %s: %s", g.ID, g.State, g.Reason)}
			suite.Failures++
		}
		suite.Cases = append(suite.Cases, c)
		suite.Tests++
	}
	doc := junitSuites{Name: "release " + rd.Version, Tests: suite.Tests, Failures: suite.Failures, Skipped: suite.Skipped, Suites: []junitSuite{suite}}
	var buf bytes.Buffer
	buf.WriteString(xml.Header)
	enc := xml.NewEncoder(&buf)
	enc.Indent("", "  ")
	if err := enc.Encode(doc); err != nil {
		return nil, err
	}
	buf.WriteByte('\n')
	return buf.Bytes(), nil
}

// serveReadinessFormat answers GET /api/v1/releases/{version}/readiness
// ?format=junit with ReadinessJUnit, and ?format=vsa with ReadinessVSA in
// a DSSE envelope signed with the log key (ServiceEnvelope); it reports
// whether it answered (false for format "" or json).
func (s *Server) serveReadinessFormat(w http.ResponseWriter, r *http.Request, rel *gates.Release, rd *gates.Readiness) bool {
	switch f := r.URL.Query().Get("format"); f {
	case "", "json":
		return false
	case "junit":
		b, err := ReadinessJUnit(rd)
		if err != nil {
			s.writeError(w, r, err)
			return true
		}
		w.Header().Set("Content-Type", "application/xml; charset=utf-8")
		w.WriteHeader(http.StatusOK)
		w.Write(b)
		return true
	case "vsa":
		origin, _, _ := strings.Cut(s.store.VerifierKey(), "+")
		b, err := signedStatement(s.store, ReadinessVSA(origin, rel, rd))
		if err != nil {
			s.writeError(w, r, err)
			return true
		}
		w.Header().Set("Content-Type", ledger.ContentTypeDSSE)
		w.WriteHeader(http.StatusOK)
		w.Write(append(b, '\n'))
		return true
	default:
		s.writeError(w, r, ledger.FieldError("format", "must be json, junit or vsa, got %q", clipText(f)))
		return true
	}
}
