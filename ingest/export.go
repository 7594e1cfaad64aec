package ingest

import (
	"encoding/json"
	"fmt"
	"net/url"
	"sort"
	"strings"

	"github.com/evidence-ledger/ledger/ledger"
)

// ExportStatement answers evidence as an in-toto Statement v1 with the
// test-result predicate: the subjects are the repository (gitCommit and
// gitTree digests, named by the repository) and every artifact pin
// (sha256); result is PASSED for a passed run, WARNED for an inconclusive
// one and FAILED otherwise. The test lists are the cases the evidence
// kept in its details when it was ingested (skipped cases are left out:
// the predicate has no list for them; flaky and incomplete cases are
// warned, errors failed); for the ledger's own evidence, whose details
// name no cases, they are the failing case ids plus numbered placeholder
// ids ("case 1", ...) so that the counts survive a round trip. The
// configuration the spec requires is ExportConfiguration. Recording the
// Statement again gives the same pins and case counts.
func ExportStatement(ev ledger.Evidence) Statement {
	st := Statement{Type: StatementV1, PredicateType: PredicateTestResult}
	st.Subject = append(st.Subject, ResourceDescriptor{Name: ev.Subject.Repository,
		Digest: map[string]string{"gitCommit": ev.Subject.Commit, "gitTree": ev.Subject.Tree}})
	names := make([]string, 0, len(ev.Subject.Artifacts))
	for n := range ev.Subject.Artifacts {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		st.Subject = append(st.Subject, ResourceDescriptor{Name: n, Digest: map[string]string{"sha256": strings.TrimPrefix(ev.Subject.Artifacts[n], "sha256:")}})
	}
	tr := TestResult{PassedTests: []string{}, WarnedTests: []string{}, FailedTests: []string{}}
	switch ev.Status {
	case ledger.StatusPassed:
		tr.Result = "PASSED"
	case ledger.StatusInconclusive:
		tr.Result = "WARNED"
	default:
		tr.Result = "FAILED"
	}
	var d Details
	if len(ev.Details) > 0 && json.Unmarshal(ev.Details, &d) == nil && d.Format != "" {
		for _, c := range d.Cases {
			switch c.Outcome {
			case Passed:
				tr.PassedTests = append(tr.PassedTests, c.ID)
			case Flaky, Incomplete:
				tr.WarnedTests = append(tr.WarnedTests, c.ID)
			case Failed, Errored:
				tr.FailedTests = append(tr.FailedTests, c.ID)
			}
		}
	} else {
		for i := 0; i < ev.CasesExact; i++ {
			tr.PassedTests = append(tr.PassedTests, fmt.Sprintf("case %d", i+1))
		}
		tr.FailedTests = append(tr.FailedTests, ev.FailingCases...)
		for i := len(ev.FailingCases); i < ev.CasesTotal-ev.CasesExact; i++ {
			tr.FailedTests = append(tr.FailedTests, fmt.Sprintf("case %d", ev.CasesExact+i+1))
		}
		if ev.Status == ledger.StatusInconclusive {
			tr.WarnedTests, tr.FailedTests = tr.FailedTests, []string{}
		}
	}
	for _, rd := range ExportConfiguration(ev) {
		b, _ := json.Marshal(rd)
		tr.Configuration = append(tr.Configuration, b)
	}
	st.Predicate, _ = json.Marshal(tr)
	return st
}

// ConfigDescriptor is a ResourceDescriptor of a test-result predicate's
// configuration, with the annotations a lane run's descriptors carry.
type ConfigDescriptor struct {
	Name        string            `json:"name"`
	URI         string            `json:"uri,omitempty"`
	Digest      map[string]string `json:"digest,omitempty"`
	Annotations map[string]any    `json:"annotations,omitempty"`
}

// ExportConfiguration is the configuration of a lane run, from the
// evidence's own pins, as the test-result predicate v0.1 requires it (a
// list of ResourceDescriptors, at least one):
//   - "lane": uri "ledger:lane/<lane>" (the lane's name and version,
//     which name the lane definition the run followed);
//   - "backend": uri "ledger:backend/<backend>", annotated with the
//     device (model, driver, cores, attrs) when the evidence names one;
//   - "runner", when the evidence names the runner build: uri
//     "ledger:runner/<version>" when it has a version, digest gitCommit
//     when its commit is 40 or 64 hex digits (else the commit as an
//     annotation).
//
// Nothing the evidence does not pin is invented: a run recorded from
// JUnit names no runner and no device.
func ExportConfiguration(ev ledger.Evidence) []ConfigDescriptor {
	cfg := []ConfigDescriptor{{Name: "lane", URI: "ledger:lane/" + ev.Lane}}
	be := ConfigDescriptor{Name: "backend", URI: "ledger:backend/" + url.PathEscape(string(ev.Backend))}
	if d := ev.Device; d.Model != "" || d.Driver != "" || d.Cores != 0 || len(d.Attrs) > 0 {
		be.Annotations = map[string]any{"device": d}
	}
	cfg = append(cfg, be)
	if r := ev.Runner; r.Version != "" || r.Commit != "" {
		rd := ConfigDescriptor{Name: "runner"}
		if r.Version != "" {
			rd.URI = "ledger:runner/" + url.PathEscape(r.Version)
		}
		switch c := strings.ToLower(r.Commit); {
		case (len(c) == 40 || len(c) == 64) && ledger.LowerHex(c):
			rd.Digest = map[string]string{"gitCommit": c}
		case c != "":
			rd.Annotations = map[string]any{"commit": r.Commit}
		}
		cfg = append(cfg, rd)
	}
	return cfg
}
