package web

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

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

// PredicateSVR is the predicate type of a simple verification result
// (in-toto attestation framework, spec/predicates/svr.md, v0.2).
const PredicateSVR = "https://in-toto.io/attestation/svr/v0.2"

// SVR is the simple verification result predicate v0.2: verifier.id an
// absolute URI, verifier.policies the policies applied (required, [] when
// none), timeCreated when the verification ran, properties the passing
// properties verified.
type SVR struct {
	Verifier    SVRVerifier `json:"verifier"`
	TimeCreated time.Time   `json:"timeCreated"`
	Properties  []string    `json:"properties"`
}

// SVRVerifier is the verifier of an SVR.
type SVRVerifier struct {
	ID       string      `json:"id"`
	Policies []VSAPolicy `json:"policies"`
}

// The properties a readiness SVR asserts: PropertyReleaseReady when the
// release is ready, and PropertyGatePassed followed by the gate id for
// each gate that passed (a waived gate is not verified, so not listed).
const (
	PropertyReleaseReady = "LEDGER_RELEASE_READY"
	PropertyGatePassed   = "LEDGER_GATE_PASSED:"
)

// ReadinessSVR is the readiness verdict of rel as an in-toto Statement
// with the simple verification result predicate v0.2: the subjects of
// ReadinessVSA; verifier.id verifierID; verifier.policies the one policy
// of ReadinessVSA (the release definition entry with its pins digest);
// timeCreated the verdict's computed_at; properties the passing
// properties (PropertyReleaseReady, PropertyGatePassed). An SVR has no
// failed result: a release that is not ready lists no
// PropertyReleaseReady, only the gates that passed.
func ReadinessSVR(verifierID string, rel *gates.Release, rd *gates.Readiness) ingest.Statement {
	st := ingest.Statement{Type: ingest.StatementV1, PredicateType: PredicateSVR, Subject: readinessSubjects(rel)}
	v := SVR{Verifier: SVRVerifier{ID: verifierID, Policies: []VSAPolicy{readinessPolicy(rd)}}, TimeCreated: rd.ComputedAt.UTC(), Properties: []string{}}
	if rd.Ready {
		v.Properties = append(v.Properties, PropertyReleaseReady)
	}
	for _, g := range rd.Gates {
		if g.State == gates.StatePassed {
			v.Properties = append(v.Properties, PropertyGatePassed+g.ID)
		}
	}
	st.Predicate, _ = json.Marshal(v)
	return st
}

// DefaultVerifierID is the verifier.id a server uses when none is set:
// "urn:ledger:" and the log's origin (the name of the key that signs
// checkpoints and verdicts), path-escaped.
func DefaultVerifierID(origin string) string { return "urn:ledger:" + url.PathEscape(origin) }

// CheckVerifierID reports whether id can be a verifier.id: an absolute
// URI (RFC 3986: a scheme), at most 1024 bytes, of printable ASCII, with
// a host when its scheme is http or https, and no fragment.
func CheckVerifierID(id string) error {
	if id == "" || len(id) > 1024 {
		return fmt.Errorf("verifier id: must be an absolute URI of 1 to 1024 bytes, got %d bytes", len(id))
	}
	for i := 0; i < len(id); i++ {
		if id[i] <= ' ' || id[i] >= 0x7f {
			return fmt.Errorf("verifier id %q: byte %d is not printable ASCII", clipText(id), i)
		}
	}
	u, err := url.Parse(id)
	if err != nil {
		return fmt.Errorf("verifier id %q: not a URI: %v", clipText(id), err)
	}
	switch {
	case !u.IsAbs():
		return fmt.Errorf("verifier id %q: not an absolute URI (no scheme, such as https: or urn:)", clipText(id))
	case (u.Scheme == "http" || u.Scheme == "https") && u.Host == "":
		return fmt.Errorf("verifier id %q: an %s URI needs a host", clipText(id), u.Scheme)
	case u.Fragment != "" || strings.HasSuffix(id, "#"):
		return fmt.Errorf("verifier id %q: must not have a fragment", clipText(id))
	}
	return nil
}

// serveReadinessFormat answers GET /api/v1/releases/{version}/readiness
// ?format=junit with ReadinessJUnit, ?format=vsa with ReadinessVSA and
// ?format=svr with ReadinessSVR, both in a DSSE envelope signed with the
// log key (ServiceEnvelope) and with the server's verifier id
// (Config.VerifierID); it reports whether it answered (false for format
// "" or json).
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
	case "vsa", "svr":
		st := ReadinessVSA(s.cfg.VerifierID, rel, rd)
		if f == "svr" {
			st = ReadinessSVR(s.cfg.VerifierID, rel, rd)
		}
		b, err := signedStatement(s.store, st)
		if err != nil {
			s.writeError(w, r, err)
			return true
		}
		w.Header().Set("Content-Type", ledger.ContentTypeDSSE)
		w.WriteHeader(http.StatusOK)
		w.Write(append(b, '\n'))
		return true
	default:
		s.writeError(w, r, ledger.FieldError("format", "must be json, junit, vsa or svr, got %q", clipText(f)))
		return true
	}
}
