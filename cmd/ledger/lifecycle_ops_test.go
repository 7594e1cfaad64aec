package main

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"html"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/evidence-ledger/ledger/client"
	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/runs"
	"github.com/evidence-ledger/ledger/verify"
)

// lcModel is what the lifecycle test has done to one ledger, as far as
// the next operations need it. A backup keeps a copy; a restore of that
// backup brings the copy back.
type lcModel struct {
	releases   map[string]*lcRelease
	evidence   []lcEvidence
	superseded map[string]bool // version + " " + evidence id
	tokens     []*lcToken
	runners    []*lcRunner
	agents     []*lcAgent
	policies   int
	heads      int      // head verifications recorded
	rotations  int      // key rotations
	verdicts   []string // signed verdict files
	seq        *int     // makes names and times unique; shared by clones (never rolled back)
	backup     *lcBackup
	idem       *lcIdem // the last append made with an idempotency key
}

// lcIdem is an append made with an idempotency key, to replay.
type lcIdem struct {
	key, body, id string
	api           bool
}

type lcRelease struct {
	version, kind, head string // kind: lane, manual, heads or twoperson
	approvalRole        bool
}

type lcEvidence struct{ id, commit, lane string }

type lcToken struct {
	name, secret, scope string
	revoked             bool
}

type lcRunner struct {
	name, key string
	revoked   bool
}

type lcAgent struct {
	name string
	priv ed25519.PrivateKey
}

type lcBackup struct {
	db        string // a SQLite file
	m         *lcModel
	rotations int // key rotations before the backup
}

func newLCModel() *lcModel {
	return &lcModel{releases: map[string]*lcRelease{}, superseded: map[string]bool{}, seq: new(int)}
}

func (m *lcModel) clone() *lcModel {
	c := *m
	c.releases = map[string]*lcRelease{}
	for k, v := range m.releases {
		r := *v
		c.releases[k] = &r
	}
	c.evidence = slices.Clone(m.evidence)
	c.superseded = map[string]bool{}
	for k, v := range m.superseded {
		c.superseded[k] = v
	}
	c.tokens = nil
	for _, t := range m.tokens {
		x := *t
		c.tokens = append(c.tokens, &x)
	}
	c.runners = nil
	for _, r := range m.runners {
		x := *r
		c.runners = append(c.runners, &x)
	}
	c.agents = slices.Clone(m.agents)
	c.verdicts = slices.Clone(m.verdicts)
	return &c
}

func (m *lcModel) next() int { *m.seq++; return *m.seq }

// lcOp is one operation the generator draws: the leaf kinds it can write
// (the coverage test compares their union with ledger.Kinds()).
type lcOp struct {
	name   string
	weight int
	kinds  []ledger.Kind
	do     func(e *lcEnv, r *rand.Rand) error
}

// lcOps is every operation of the lifecycle test.
var lcOps = []lcOp{
	{"evidence-json", 10, []ledger.Kind{ledger.KindEvidence}, opEvidenceJSON},
	{"evidence-junit", 4, []ledger.Kind{ledger.KindOriginal, ledger.KindEvidence}, opEvidenceJUnit},
	{"evidence-testng", 2, []ledger.Kind{ledger.KindOriginal, ledger.KindEvidence}, opEvidenceTestNG},
	{"evidence-gotest", 4, []ledger.Kind{ledger.KindOriginal, ledger.KindEvidence}, opEvidenceGoTest},
	{"evidence-intoto", 3, []ledger.Kind{ledger.KindOriginal, ledger.KindEvidence}, opEvidenceInToto},
	{"evidence-dsse-intoto", 3, []ledger.Kind{ledger.KindOriginal, ledger.KindEvidence, ledger.KindRunnerKey}, opEvidenceDSSEInToto},
	{"evidence-dsse-native", 3, []ledger.Kind{ledger.KindEvidence, ledger.KindRunnerKey}, opEvidenceDSSENative},
	{"evidence-dsse-provenance", 2, []ledger.Kind{ledger.KindOriginal, ledger.KindEvidence, ledger.KindRunnerKey}, opEvidenceDSSEProvenance},
	{"evidence-throughput", 3, []ledger.Kind{ledger.KindEvidence, ledger.KindRunnerKey}, opEvidenceThroughput},
	{"runner-add", 2, []ledger.Kind{ledger.KindRunnerKey}, opRunnerAdd},
	{"runner-revoke", 1, []ledger.Kind{ledger.KindRunnerKey}, opRunnerRevoke},
	{"token-create", 3, []ledger.Kind{ledger.KindToken, ledger.KindEvidence}, opTokenCreate},
	{"token-revoke", 2, []ledger.Kind{ledger.KindTokenRevocation}, opTokenRevoke},
	{"policy-apply", 1, []ledger.Kind{ledger.KindPolicy}, opPolicyApply},
	{"heads-verify", 3, []ledger.Kind{ledger.KindPolicy, ledger.KindRelease, ledger.KindHead, ledger.KindEvidence}, opHeadsVerify},
	{"release-apply", 4, []ledger.Kind{ledger.KindRelease}, opReleaseApply},
	{"waive", 3, []ledger.Kind{ledger.KindWaiver, ledger.KindRelease}, opWaive},
	{"signoff", 3, []ledger.Kind{ledger.KindApproval, ledger.KindRelease}, opSignoff},
	{"approve", 3, []ledger.Kind{ledger.KindApproval, ledger.KindRelease}, opApprove},
	{"manual-approve", 3, []ledger.Kind{ledger.KindRelease, ledger.KindApproval}, opManualApprove},
	{"supersede", 2, []ledger.Kind{ledger.KindSupersede, ledger.KindEvidence, ledger.KindRelease}, opSupersede},
	{"verdict", 3, nil, opVerdict},
	{"agent-run", 3, []ledger.Kind{ledger.KindRunnerKey, ledger.KindEvidence, ledger.KindRunOutcome}, opAgentRun},
	{"run-cancel", 1, []ledger.Kind{ledger.KindRunOutcome}, opRunCancel},
	{"run-expire", 1, []ledger.Kind{ledger.KindRunnerKey, ledger.KindRunOutcome}, opRunExpire},
	{"key-rotate", 1, []ledger.Kind{ledger.KindKeyRotation}, opKeyRotate},
	{"backup", 1, nil, opBackup},
	{"restore", 1, []ledger.Kind{ledger.KindLog}, opRestore},
	{"restart", 1, nil, opRestart},
	{"idempotent-replay", 2, []ledger.Kind{ledger.KindEvidence}, opIdempotentReplay},
	{"dashboard-form", 3, []ledger.Kind{ledger.KindWaiver, ledger.KindApproval, ledger.KindSupersede, ledger.KindRelease}, opDashboardForm},
	{"run-local", 2, []ledger.Kind{ledger.KindEvidence, ledger.KindRunnerKey}, opRunLocal},
	{"agent-remove", 1, []ledger.Kind{ledger.KindRunnerKey}, opAgentRemove},
	{"two-person", 2, []ledger.Kind{ledger.KindRelease, ledger.KindApproval, ledger.KindWaiver, ledger.KindToken}, opTwoPerson},
}

func lcOpByName(name string) (lcOp, bool) {
	for _, o := range lcOps {
		if o.name == name {
			return o, true
		}
	}
	return lcOp{}, false
}

// pick returns one of xs chosen by r.
func pick[T any](r *rand.Rand, xs ...T) T { return xs[r.IntN(len(xs))] }

// viaAPI decides whether an operation goes through the server or the
// local database (the --db CLI), when it can do either.
func viaAPI(r *rand.Rand) bool { return r.IntN(3) != 0 }

func (e *lcEnv) writeFile(name string, body []byte) string {
	p := filepath.Join(e.dir, "files", name)
	os.MkdirAll(filepath.Dir(p), 0o755)
	os.WriteFile(p, body, 0o644)
	return p
}

// record appends with `ledger record` through the server (as tok) or
// locally, and returns the appended entries.
func (e *lcEnv) record(api bool, tok, stdin string, args ...string) ([]appendedEntryJSON, error) {
	var out string
	var err error
	full := append([]string{"--json", "record"}, args...)
	if api {
		out, _, err = e.remote(0, tok, stdin, full...)
	} else {
		out, _, err = e.cli(0, stdin, full...)
	}
	if err != nil {
		return nil, err
	}
	var ans appendedJSON
	if err := json.Unmarshal([]byte(out), &ans); err != nil {
		return nil, fmt.Errorf("record --json answer: %v: %s", err, out)
	}
	return ans.Entries, nil
}

// noteEvidence keeps the ids of appended evidence (the last entry of an
// ingest is the evidence; the first the original).
func (e *lcEnv) noteEvidence(es []appendedEntryJSON, commit, lane string) {
	if len(es) == 0 {
		return
	}
	e.m.evidence = append(e.m.evidence, lcEvidence{id: es[len(es)-1].ID, commit: commit, lane: lane})
}

// lcEvidenceJSON is a native record of lane at commit; failing ones
// carry a failing case.
func lcEvidenceJSON(lane, commit string, n int, failed bool) string {
	at := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(n) * time.Second).Format(time.RFC3339)
	ev := map[string]any{
		"lane": lane, "backend": "cpu", "cases_exact": 216, "cases_total": 216, "control": "caught", "status": "passed",
		"subject":    map[string]any{"repository": lcCoreRepo, "commit": commit, "tree": lcTree},
		"started_at": at, "finished_at": at,
	}
	if failed {
		ev["status"], ev["cases_exact"], ev["failing_cases"] = "failed", 200, []string{"f16/b4/g64/three-way"}
	}
	b, _ := json.Marshal(ev)
	return string(b)
}

func lcPins(commit string) []string {
	return []string{"--lane", "ci-tests/v1", "--backend", "cpu", "--repository", lcCoreRepo, "--commit", commit, "--tree", lcTree}
}

func opEvidenceJSON(e *lcEnv, r *rand.Rand) error {
	commit, failed, api := pick(r, lcCommitA, lcCommitB), r.IntN(4) == 0, viaAPI(r)
	lane := pick(r, "qmv-bias-sum/v1", "alloc-footprint/v1")
	es, err := e.record(api, e.rec, lcEvidenceJSON(lane, commit, e.m.next(), failed), "-")
	if err != nil {
		return err
	}
	e.noteEvidence(es, commit, lane)
	e.logf("evidence-json %s at %s failed=%v api=%v: %d entries", lane, commit[:4], failed, api, len(es))
	return nil
}

// opEvidenceJUnit records a JUnit report of two cases, or one of a few
// hundred (a large-ish suite), with up to three failures each carrying a
// message (text that HTML escaping changes included); the evidence read
// back names every failing case and keeps each one's message in its
// details.
func opEvidenceJUnit(e *lcEnv, r *rand.Rand) error {
	commit, api, n := pick(r, lcCommitA, lcCommitB), viaAPI(r), e.m.next()
	failures, extra := 0, 0
	if r.IntN(4) == 0 {
		failures = 1 + r.IntN(3)
	}
	if r.IntN(3) == 0 {
		extra = 50 + r.IntN(350)
	}
	var cases strings.Builder
	fmt.Fprintf(&cases, "  <testcase classname=\"pkg\" name=\"TestA%d\" time=\"0.5\"/>\n", n)
	fmt.Fprintf(&cases, "  <testcase classname=\"pkg\" name=\"TestB\" time=\"0.5\"/>\n")
	for k := range extra {
		fmt.Fprintf(&cases, "  <testcase classname=\"pkg.K%d\" name=\"test_%d\" time=\"0.001\"/>\n", k%5, k)
	}
	want := map[string]string{} // failing case id -> what its message must say
	for k := range failures {
		fmt.Fprintf(&cases, "  <testcase classname=\"pkg\" name=\"TestF%d\" time=\"0.1\"><failure message=\"boom %d &lt;x&amp;y&gt;\">trace %d</failure></testcase>\n", k, k, n)
		want[fmt.Sprintf("pkg > TestF%d", k)] = fmt.Sprintf("boom %d <x&y>\ntrace %d", k, n)
	}
	x := fmt.Sprintf(`<?xml version="1.0" encoding="UTF-8"?>
<testsuite name="pkg" tests="%d" failures="%d" errors="0" skipped="0" timestamp="2026-11-29T10:%02d:%02d" time="1">
%s</testsuite>
`, 2+extra+failures, failures, n/60%60, n%60, cases.String())
	f := e.writeFile(fmt.Sprintf("junit-%d.xml", n), []byte(x))
	es, err := e.record(api, e.rec, "", append([]string{"--format", "junit", f}, lcPins(commit)...)...)
	if err != nil {
		return err
	}
	e.noteEvidence(es, commit, "ci-tests/v1")
	e.logf("evidence-junit at %s api=%v: %d cases, %d failing, %d entries", commit[:4], api, 2+extra+failures, failures, len(es))
	if len(es) == 0 {
		return nil
	}
	var got struct {
		Evidence ledger.Evidence `json:"evidence"`
	}
	if err := e.getJSON("/api/v1/evidence/"+es[len(es)-1].ID, &got); err != nil {
		return err
	}
	var d struct {
		Cases []struct{ ID, Outcome, Message string } `json:"cases"`
	}
	if err := json.Unmarshal(got.Evidence.Details, &d); err != nil {
		return fmt.Errorf("evidence-junit details: %v", err)
	}
	if len(got.Evidence.FailingCases) != failures || got.Evidence.CasesTotal != 2+extra+failures {
		return fmt.Errorf("evidence-junit: %d failing case ids of %d cases, want %d of %d", len(got.Evidence.FailingCases), got.Evidence.CasesTotal, failures, 2+extra+failures)
	}
	for _, c := range d.Cases {
		if w, ok := want[c.ID]; ok {
			if c.Outcome != "failed" || c.Message != w {
				return fmt.Errorf("evidence-junit: case %s is %s with message %q, want failed with %q", c.ID, c.Outcome, c.Message, w)
			}
			delete(want, c.ID)
		}
	}
	if len(want) > 0 {
		return fmt.Errorf("evidence-junit: failing cases missing from the details: %v", want)
	}
	return nil
}

// opEvidenceTestNG records TestNG's testng-results.xml: a data-provider
// method of a few invocations, a configuration method, and at times a
// retried attempt (passing after it: flaky) or a failure; the evidence
// read back has the status and counts the file's own root says.
func opEvidenceTestNG(e *lcEnv, r *rand.Rand) error {
	commit, api, n := pick(r, lcCommitA, lcCommitB), viaAPI(r), e.m.next()
	invocations, retried, failed := 1+r.IntN(4), r.IntN(3) == 0, r.IntN(4) == 0
	var m strings.Builder
	m.WriteString(`<test-method is-config="true" name="setUp" status="PASS"/>` + "\n")
	if retried {
		m.WriteString(`<test-method name="add" status="SKIP" retried="true"><params><param index="0"><value><![CDATA[0]]></value></param></params></test-method>` + "\n")
	}
	for k := range invocations {
		fmt.Fprintf(&m, `<test-method name="add" status="PASS"><params><param index="0"><value><![CDATA[%d]]></value></param></params></test-method>`+"\n", k)
	}
	nFailed := 0
	if failed {
		nFailed = 1
		fmt.Fprintf(&m, `<test-method name="div%d" status="FAIL"><exception class="java.lang.ArithmeticException"><message><![CDATA[/ by zero]]></message></exception></test-method>`+"\n", n)
	}
	nRetried := 0
	if retried {
		nRetried = 1
	}
	x := fmt.Sprintf(`<?xml version="1.0" encoding="UTF-8"?>
<testng-results ignored="0" total="%d" passed="%d" failed="%d" skipped="0" retried="%d">
<suite name="s%d" started-at="2026-11-29T10:%02d:%02d UTC" finished-at="2026-11-29T10:%02d:%02d UTC"><test name="t"><class name="com.acme.CalcTest">
%s</class></test></suite>
</testng-results>
`, invocations+nFailed+nRetried, invocations, nFailed, nRetried, n, n/60%60, n%60, n/60%60, n%60, m.String())
	f := e.writeFile(fmt.Sprintf("testng-%d.xml", n), []byte(x))
	es, err := e.record(api, e.rec, "", append([]string{"--format", "testng", f}, lcPins(commit)...)...)
	if err != nil {
		return err
	}
	e.noteEvidence(es, commit, "ci-tests/v1")
	e.logf("evidence-testng at %s api=%v: %d invocations, retried=%v failed=%v, %d entries", commit[:4], api, invocations, retried, failed, len(es))
	if len(es) == 0 {
		return nil
	}
	var got struct {
		Evidence ledger.Evidence `json:"evidence"`
	}
	if err := e.getJSON("/api/v1/evidence/"+es[len(es)-1].ID, &got); err != nil {
		return err
	}
	var d struct {
		CountMismatch string `json:"count_mismatch"`
	}
	if err := json.Unmarshal(got.Evidence.Details, &d); err != nil {
		return fmt.Errorf("evidence-testng details: %v", err)
	}
	want := ledger.StatusPassed
	switch {
	case failed:
		want = ledger.StatusFailed
	case retried:
		want = ledger.StatusInconclusive // the retried invocation is flaky
	}
	if d.CountMismatch != "" || got.Evidence.Status != want || got.Evidence.CasesTotal != invocations+nFailed {
		return fmt.Errorf("evidence-testng: status %s, %d cases, mismatch %q; want %s, %d cases and none", got.Evidence.Status, got.Evidence.CasesTotal, d.CountMismatch, want, invocations+nFailed)
	}
	return nil
}

func opEvidenceGoTest(e *lcEnv, r *rand.Rand) error {
	commit, api, n := pick(r, lcCommitA, lcCommitB), viaAPI(r), e.m.next()
	at := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC).Add(time.Duration(n) * time.Second).Format(time.RFC3339)
	action := pick(r, "pass", "pass", "fail")
	stream := fmt.Sprintf(`{"Time":"%[1]s","Action":"start","Package":"p"}
{"Time":"%[1]s","Action":"run","Package":"p","Test":"TestA%[2]d"}
{"Time":"%[1]s","Action":"output","Package":"p","Test":"TestA%[2]d","Output":"line\n"}
{"Time":"%[1]s","Action":"%[3]s","Package":"p","Test":"TestA%[2]d","Elapsed":1}
{"Time":"%[1]s","Action":"%[3]s","Package":"p","Elapsed":1}
`, at, n, action)
	f := e.writeFile(fmt.Sprintf("stream-%d.json", n), []byte(stream))
	es, err := e.record(api, e.rec, "", append([]string{"--format", "gotest", f}, lcPins(commit)...)...)
	if err != nil {
		return err
	}
	e.noteEvidence(es, commit, "ci-tests/v1")
	e.logf("evidence-gotest %s at %s api=%v: %d entries", action, commit[:4], api, len(es))
	return nil
}

func lcStatement(commit string, n int, passed bool) string {
	res, failed := "PASSED", `[]`
	if !passed {
		res, failed = "FAILED", `["b"]`
	}
	return `{"_type":"https://in-toto.io/Statement/v1","subject":[{"name":"` + lcCoreRepo + `","digest":{"gitCommit":"` + commit +
		`","gitTree":"` + lcTree + `"}}],"predicateType":"https://in-toto.io/attestation/test-result/v0.1","predicate":{"result":"` + res +
		`","passedTests":["a` + fmt.Sprint(n) + `"],"warnedTests":[],"failedTests":` + failed + `}}`
}

func opEvidenceInToto(e *lcEnv, r *rand.Rand) error {
	commit, api, n, passed := pick(r, lcCommitA, lcCommitB), viaAPI(r), e.m.next(), r.IntN(4) != 0
	f := e.writeFile(fmt.Sprintf("statement-%d.json", n), []byte(lcStatement(commit, n, passed)))
	es, err := e.record(api, e.rec, "", append([]string{"--format", "in-toto", f}, lcPins(commit)...)...)
	if err != nil {
		return err
	}
	e.noteEvidence(es, commit, "ci-tests/v1")
	e.logf("evidence-intoto passed=%v at %s api=%v: %d entries", passed, commit[:4], api, len(es))
	return nil
}

// liveRunner returns a live registered runner key, registering one when
// there is none.
func (e *lcEnv) liveRunner(r *rand.Rand) (*lcRunner, error) {
	var live []*lcRunner
	for _, x := range e.m.runners {
		if !x.revoked {
			live = append(live, x)
		}
	}
	if len(live) > 0 {
		return pick(r, live...), nil
	}
	if err := opRunnerAdd(e, r); err != nil {
		return nil, err
	}
	return e.m.runners[len(e.m.runners)-1], nil
}

func runnerPriv(path string) (ed25519.PrivateKey, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return verify.ParseRunnerPrivateKey(b)
}

func opEvidenceDSSEInToto(e *lcEnv, r *rand.Rand) error {
	rn, err := e.liveRunner(r)
	if err != nil {
		return err
	}
	priv, err := runnerPriv(rn.key)
	if err != nil {
		return err
	}
	commit, api, n := pick(r, lcCommitA, lcCommitB), viaAPI(r), e.m.next()
	env, err := verify.SignRunnerEnvelope(context.Background(), priv, ledger.PayloadTypeInToto, []byte(lcStatement(commit, n, r.IntN(4) != 0)))
	if err != nil {
		return err
	}
	f := e.writeFile(fmt.Sprintf("statement-%d.dsse.json", n), env)
	es, err := e.record(api, e.rec, "", append([]string{"--format", "dsse", f}, lcPins(commit)...)...)
	if err != nil {
		return err
	}
	e.noteEvidence(es, commit, "ci-tests/v1")
	e.logf("evidence-dsse-intoto by %s at %s api=%v: %d entries", rn.name, commit[:4], api, len(es))
	return nil
}

// lcLib is the artifact the lane releases bind and their provenance gate
// is about; lcBuilder the builder id that gate allows.
const (
	lcLib     = "libcore.so"
	lcLibSum  = "sha256:1111111111111111111111111111111111111111111111111111111111111111"
	lcBuilder = "https://ci.example/builder@v1"
)

// opEvidenceDSSEProvenance records SLSA provenance v1 of libcore.so signed
// by a live runner key: from the allowed builder or another, at commit A
// or B.
func opEvidenceDSSEProvenance(e *lcEnv, r *rand.Rand) error {
	rn, err := e.liveRunner(r)
	if err != nil {
		return err
	}
	priv, err := runnerPriv(rn.key)
	if err != nil {
		return err
	}
	commit, api, n := pick(r, lcCommitA, lcCommitB), viaAPI(r), e.m.next()
	builder := pick(r, lcBuilder, "https://other.example/builder@v1")
	st := `{"_type":"https://in-toto.io/Statement/v1","subject":[{"name":"` + lcLib + `","digest":{"sha256":"` + strings.TrimPrefix(lcLibSum, "sha256:") +
		`"}}],"predicateType":"https://slsa.dev/provenance/v1","predicate":{"buildDefinition":{"buildType":"https://ci.example/build@v1","externalParameters":{"n":` + fmt.Sprint(n) +
		`},"resolvedDependencies":[{"uri":"git+https://` + lcCoreRepo + `@refs/heads/main","digest":{"gitCommit":"` + commit + `"}}]},"runDetails":{"builder":{"id":"` + builder + `"}}}}`
	env, err := verify.SignRunnerEnvelope(context.Background(), priv, ledger.PayloadTypeInToto, []byte(st))
	if err != nil {
		return err
	}
	f := e.writeFile(fmt.Sprintf("provenance-%d.dsse.json", n), env)
	es, err := e.record(api, e.rec, "", "--format", "dsse", f, "--lane", "provenance/v1", "--backend", "cpu", "--tree", lcTree)
	if err != nil {
		return err
	}
	e.noteEvidence(es, commit, "provenance/v1")
	e.logf("evidence-dsse-provenance by %s builder %s at %s api=%v: %d entries", rn.name, builder, commit[:4], api, len(es))
	return nil
}

// lcThroughputJSON is a native throughput record (qmv-throughput/v1,
// promoted vs narrow) at commit: two batch cases of 12 paired samples
// whose speed ratio baseline/candidate is ratio (a spread of 0.1 %), or
// of 1 % around it when noisy; failed ones have status failed.
func lcThroughputJSON(commit string, n int, ratio float64, noisy, failed bool) string {
	at := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(n) * time.Second).Format(time.RFC3339)
	spread := 0.001
	if noisy {
		spread = 0.05
	}
	var cases []map[string]any
	for b, id := range []string{"batch1/n64/k64/f16/b4/g64", "batch2/n64/k64/f16/b4/g64"} {
		var cand, base []float64
		for i := range 12 {
			c := 1e-5 * (1 + float64((i*7+n)%5)/100)
			cand = append(cand, c)
			base = append(base, c*ratio*(1+spread*float64(i%5-2)))
		}
		cases = append(cases, map[string]any{"id": id, "batch": b + 1, "n": 64, "k": 64, "dtype": "f16", "bits": 4, "group_size": 64,
			"launches_per_sample": 10, "candidate_s": cand, "baseline_s": base, "converged": !noisy,
			"candidate_median": map[string]float64{"estimate": 1e-5, "low": 1e-5, "high": 1e-5},
			"output":           map[string]any{"rel_l2": 0, "tolerance": 1e-3, "bit_exact": 64 * (b + 1), "values": 64 * (b + 1)}})
	}
	ev := map[string]any{
		"lane": "qmv-throughput/v1", "backend": "cpu", "cases_exact": 2, "cases_total": 2, "control": "caught", "status": "passed",
		"subject":    map[string]any{"repository": lcCoreRepo, "commit": commit, "tree": lcTree},
		"started_at": at, "finished_at": at,
		"details": map[string]any{ledger.ThroughputField: map[string]any{"clock": "monotonic", "candidate": "promoted",
			"baseline": map[string]any{"name": "narrow"}, "confidence": 0.95, "target_rel": 0.01, "cases": cases}},
	}
	if failed {
		ev["status"], ev["cases_exact"], ev["failing_cases"] = "failed", 1, []string{"batch2/n64/k64/f16/b4/g64"}
	}
	b, _ := json.Marshal(ev)
	return string(b)
}

// opEvidenceThroughput records a throughput record at commit A or B that
// passes the lane releases' throughput gate (speed ratio 1.2), regresses
// it (0.9), is inconclusive (1 % around 0.98) or failed; signed by a live
// runner key or not.
func opEvidenceThroughput(e *lcEnv, r *rand.Rand) error {
	commit, api, n := pick(r, lcCommitA, lcCommitB), viaAPI(r), e.m.next()
	ratio, noisy, failed := pick(r, 1.2, 1.2, 0.9), r.IntN(5) == 0, r.IntN(8) == 0
	if noisy {
		ratio = 0.98
	}
	args := []string{"-"}
	signer := "unsigned"
	if r.IntN(2) == 0 {
		rn, err := e.liveRunner(r)
		if err != nil {
			return err
		}
		args, signer = []string{"--sign-key", rn.key, "-"}, rn.name
	}
	es, err := e.record(api, e.rec, lcThroughputJSON(commit, n, ratio, noisy, failed), args...)
	if err != nil {
		return err
	}
	e.noteEvidence(es, commit, "qmv-throughput/v1")
	e.logf("evidence-throughput ratio %v noisy=%v failed=%v %s at %s api=%v", ratio, noisy, failed, signer, commit[:4], api)
	return nil
}

func opEvidenceDSSENative(e *lcEnv, r *rand.Rand) error {
	rn, err := e.liveRunner(r)
	if err != nil {
		return err
	}
	commit, api := pick(r, lcCommitA, lcCommitB), viaAPI(r)
	es, err := e.record(api, e.rec, lcEvidenceJSON("qmv-bias-sum/v1", commit, e.m.next(), r.IntN(4) == 0), "--sign-key", rn.key, "-")
	if err != nil {
		return err
	}
	e.noteEvidence(es, commit, "qmv-bias-sum/v1")
	e.logf("evidence-dsse-native by %s at %s api=%v", rn.name, commit[:4], api)
	return nil
}

func opRunnerAdd(e *lcEnv, r *rand.Rand) error {
	n := e.m.next()
	name := fmt.Sprintf("lab-%d", n)
	key := filepath.Join(e.dir, "files", name+".key")
	os.MkdirAll(filepath.Dir(key), 0o755)
	if _, _, _, err := e.exec([]int{0}, "", "runner", "keygen", key); err != nil {
		return err
	}
	var err error
	api := viaAPI(r)
	if api {
		_, _, err = e.remote(0, e.adm, "", "runner", "add", name, key+".pub")
	} else {
		_, _, err = e.cli(0, "", "runner", "add", "--as", "adm", name, key+".pub")
	}
	if err != nil {
		return err
	}
	e.m.runners = append(e.m.runners, &lcRunner{name: name, key: key})
	e.logf("runner-add %s api=%v", name, api)
	return nil
}

func opRunnerRevoke(e *lcEnv, r *rand.Rand) error {
	var live []*lcRunner
	for _, x := range e.m.runners {
		if !x.revoked {
			live = append(live, x)
		}
	}
	if len(live) == 0 {
		if err := opRunnerAdd(e, r); err != nil {
			return err
		}
		live = append(live, e.m.runners[len(e.m.runners)-1])
	}
	rn, api := pick(r, live...), viaAPI(r)
	var err error
	if api {
		_, _, err = e.remote(0, e.adm, "", "runner", "revoke", "--reason", "lab rebuilt", rn.name)
	} else {
		_, _, err = e.cli(0, "", "runner", "revoke", "--as", "adm", "--reason", "lab rebuilt", rn.name)
	}
	if err != nil {
		return err
	}
	rn.revoked = true
	e.logf("runner-revoke %s api=%v", rn.name, api)
	return nil
}

func opTokenCreate(e *lcEnv, r *rand.Rand) error {
	n := e.m.next()
	name := fmt.Sprintf("tok-%d", n)
	scope := pick(r, "read", "record", "run", "admin")
	var roles []string
	if r.IntN(2) == 0 {
		roles = append(roles, pick(r, "reviewer", "release-manager"))
	}
	args := []string{"token", "create", "--name", name, "--scope", scope}
	for _, ro := range roles {
		args = append(args, "--role", ro)
	}
	if r.IntN(3) == 0 {
		args = append(args, "--expires", "720h")
	}
	if r.IntN(3) == 0 {
		args = append(args, "--repository", lcCoreRepo, "--backend", "cpu")
	}
	out, _, err := e.cli(0, "", args...)
	if err != nil {
		return err
	}
	tk := &lcToken{name: name, secret: strings.TrimSpace(out), scope: scope}
	e.m.tokens = append(e.m.tokens, tk)
	e.logf("token-create %s scope %s roles %v", name, scope, roles)
	// A record (or admin) token records at once through the server.
	if scope == "record" || scope == "admin" {
		commit := pick(r, lcCommitA, lcCommitB)
		es, err := e.record(true, tk.secret, lcEvidenceJSON("qmv-bias-sum/v1", commit, e.m.next(), false), "-")
		if err != nil {
			return err
		}
		e.noteEvidence(es, commit, "qmv-bias-sum/v1")
	}
	return nil
}

func opTokenRevoke(e *lcEnv, r *rand.Rand) error {
	var live []*lcToken
	for _, x := range e.m.tokens {
		if !x.revoked {
			live = append(live, x)
		}
	}
	if len(live) == 0 {
		if err := opTokenCreate(e, r); err != nil {
			return err
		}
		live = append(live, e.m.tokens[len(e.m.tokens)-1])
	}
	tk := pick(r, live...)
	if _, _, err := e.cli(0, "", "token", "revoke", tk.name); err != nil {
		return err
	}
	tk.revoked = true
	e.logf("token-revoke %s", tk.name)
	// A revoked token records nothing.
	if tk.scope == "record" || tk.scope == "admin" {
		if _, _, err := e.remote(2, tk.secret, lcEvidenceJSON("qmv-bias-sum/v1", lcCommitA, e.m.next(), false), "record", "-"); err != nil {
			return fmt.Errorf("a revoked token recorded: %w", err)
		}
	}
	return nil
}

// applyPolicy registers a variant of the fixture's trust policy as "core".
func (e *lcEnv) applyPolicy(r *rand.Rand) error {
	n := e.m.next()
	b, _ := os.ReadFile(e.fix.policy)
	f := filepath.Join(filepath.Dir(e.fix.policy), fmt.Sprintf("core-%s-%d.yaml", e.store, n))
	if err := os.WriteFile(f, append(b, []byte(fmt.Sprintf("# variant %d\n", n))...), 0o644); err != nil {
		return err
	}
	api := viaAPI(r)
	var err error
	if api {
		_, _, err = e.remote(0, e.adm, "", "policy", "apply", f, "--name", "core")
	} else {
		_, _, err = e.cli(0, "", "policy", "apply", f, "--name", "core", "--as", "adm")
	}
	if err != nil {
		return err
	}
	e.m.policies++
	e.logf("policy-apply core variant %d api=%v", n, api)
	return nil
}

func opPolicyApply(e *lcEnv, r *rand.Rand) error { return e.applyPolicy(r) }

// applyRelease records a release definition through the server or
// locally.
func (e *lcEnv) applyRelease(r *rand.Rand, rel *lcRelease, yaml string) error {
	f := e.writeFile(fmt.Sprintf("release-%d.yaml", e.m.next()), []byte(yaml))
	api := viaAPI(r)
	var err error
	if api {
		_, _, err = e.remote(0, e.adm, "", "release", "apply", f)
	} else {
		_, _, err = e.cli(0, "", "release", "apply", f)
	}
	if err != nil {
		return err
	}
	e.m.releases[rel.version] = rel
	e.logf("release-apply %s (%s) head %s approval_role=%v api=%v", rel.version, rel.kind, rel.head[:4], rel.approvalRole, api)
	return nil
}

func lcReleaseYAML(rel *lcRelease) string {
	var b strings.Builder
	fmt.Fprintf(&b, "version: %s\n", rel.version)
	if rel.approvalRole {
		b.WriteString("approval_role: release-manager\n")
	}
	fmt.Fprintf(&b, "components:\n  - name: core\n    repository: %s\n    reviewed: %s\n    head: %s\n", lcCoreRepo, lcCommitB, rel.head)
	b.WriteString("gates:\n")
	if rel.kind == "manual" || rel.kind == "twoperson" {
		b.WriteString("  - id: review\n    kind: manual\n    role: release-manager\n")
		if rel.kind == "twoperson" {
			b.WriteString("approval:\n  distinct_from: [waiver, signoff]\n")
		}
		return b.String()
	}
	b.WriteString("  - id: qmv\n    kind: lane\n    lane: qmv-bias-sum/v1\n    component: core\n    backends: [cpu]\n")
	b.WriteString("  - id: ci\n    kind: lane\n    lane: ci-tests/v1\n    component: core\n    backends: [cpu]\n")
	b.WriteString("  - id: review\n    kind: manual\n    role: reviewer\n")
	fmt.Fprintf(&b, "  - id: built\n    kind: provenance\n    component: core\n    artifact: %s\n    builders: [%q]\n", lcLib, lcBuilder)
	b.WriteString("  - id: speed\n    kind: throughput\n    component: core\n    backends: [cpu]\n    baseline: narrow\n    threshold: 0.98\n    select: [\"batch*/*\"]\n")
	fmt.Fprintf(&b, "artifacts:\n  %s: %s\n", lcLib, lcLibSum)
	return b.String()
}

// laneRelease returns a lane release to act on, defining one when there
// is none.
func (e *lcEnv) laneRelease(r *rand.Rand) (*lcRelease, error) {
	var rels []*lcRelease
	for _, v := range slices.Sorted(mapKeys(e.m.releases)) {
		if rel := e.m.releases[v]; rel.kind == "lane" {
			rels = append(rels, rel)
		}
	}
	if len(rels) > 0 {
		return pick(r, rels...), nil
	}
	if err := opReleaseApply(e, r); err != nil {
		return nil, err
	}
	return e.laneRelease(r)
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// opReleaseApply defines a lane release (one of three versions) or
// redefines one: another head commit, with or without an approval role.
func opReleaseApply(e *lcEnv, r *rand.Rand) error {
	v := pick(r, "2.0.0", "2.1.0", "2.2.0")
	rel := &lcRelease{version: v, kind: "lane", head: pick(r, lcCommitA, lcCommitB), approvalRole: r.IntN(2) == 0}
	return e.applyRelease(r, rel, lcReleaseYAML(rel))
}

func opWaive(e *lcEnv, r *rand.Rand) error {
	rel, err := e.laneRelease(r)
	if err != nil {
		return err
	}
	gate, api := pick(r, "qmv", "ci", "review"), viaAPI(r)
	args := []string{"release", "waive", rel.version, "--gate", gate, "--reason", "lab outage", "--expires", pick(r, "72h", "14d", "1h")}
	if api {
		_, _, err = e.remote(0, e.adm, "", args...)
	} else {
		_, _, err = e.cli(0, "", append(args, "--as", "adm")...)
	}
	if err != nil {
		return err
	}
	e.logf("waive %s gate %s api=%v", rel.version, gate, api)
	return nil
}

func opSignoff(e *lcEnv, r *rand.Rand) error {
	rel, err := e.laneRelease(r)
	if err != nil {
		return err
	}
	api := viaAPI(r)
	args := []string{"release", "signoff", rel.version, "--gate", "review", "--note", "reviewed"}
	if api {
		_, _, err = e.remote(0, e.rec, "", args...)
	} else {
		_, _, err = e.cli(0, "", append(args, "--as", "ci")...)
	}
	if err != nil {
		return err
	}
	e.logf("signoff %s api=%v", rel.version, api)
	return nil
}

// opApprove approves a lane release: accepted when it is ready (exit 0),
// refused when not (exit 1); both are valid outcomes.
func opApprove(e *lcEnv, r *rand.Rand) error {
	rel, err := e.laneRelease(r)
	if err != nil {
		return err
	}
	api := viaAPI(r)
	args := []string{"release", "approve", rel.version, "--note", "ship"}
	var code int
	if api {
		_, _, code, err = e.exec([]int{0, 1}, "", append([]string{"--server", e.url, "--token", e.adm}, args...)...)
	} else {
		_, _, code, err = e.exec([]int{0, 1}, "", append(e.base(), append(args, "--as", "adm")...)...)
	}
	if err != nil {
		return err
	}
	e.logf("approve %s api=%v: exit %d", rel.version, api, code)
	return nil
}

// opManualApprove defines (or redefines) a release whose only gate is a
// manual one, signs it off and approves it: the approval must be
// accepted (issue 29 item 1 is an approval followed by an audit).
func opManualApprove(e *lcEnv, r *rand.Rand) error {
	v := pick(r, "9.0.0", "9.1.0")
	rel, ok := e.m.releases[v]
	if !ok || r.IntN(3) == 0 {
		rel = &lcRelease{version: v, kind: "manual", head: pick(r, lcCommitA, lcCommitB), approvalRole: true}
		if err := e.applyRelease(r, rel, lcReleaseYAML(rel)); err != nil {
			return err
		}
	}
	api := viaAPI(r)
	var err error
	if api {
		if _, _, err = e.remote(0, e.adm, "", "release", "signoff", v, "--gate", "review", "--note", "ok"); err == nil {
			_, _, err = e.remote(0, e.adm, "", "release", "approve", v, "--note", "ship")
		}
	} else {
		if _, _, err = e.cli(0, "", "release", "signoff", v, "--gate", "review", "--note", "ok", "--as", "adm"); err == nil {
			_, _, err = e.cli(0, "", "release", "approve", v, "--note", "ship", "--as", "adm")
		}
	}
	if err != nil {
		return err
	}
	e.logf("manual-approve %s api=%v", v, api)
	return nil
}

// opSupersede retracts an evidence record at a lane release's pins,
// recording a failing one first when there is none to retract.
func opSupersede(e *lcEnv, r *rand.Rand) error {
	rel, err := e.laneRelease(r)
	if err != nil {
		return err
	}
	if !rel.approvalRole {
		rel = &lcRelease{version: rel.version, kind: "lane", head: rel.head, approvalRole: true}
		if err := e.applyRelease(r, rel, lcReleaseYAML(rel)); err != nil {
			return err
		}
	}
	var cands []lcEvidence
	for _, ev := range e.m.evidence {
		if ev.commit == rel.head && (ev.lane == "qmv-bias-sum/v1" || ev.lane == "ci-tests/v1") && !e.m.superseded[rel.version+" "+ev.id] {
			cands = append(cands, ev)
		}
	}
	if len(cands) == 0 {
		es, err := e.record(true, e.rec, lcEvidenceJSON("qmv-bias-sum/v1", rel.head, e.m.next(), true), "-")
		if err != nil {
			return err
		}
		e.noteEvidence(es, rel.head, "qmv-bias-sum/v1")
		cands = append(cands, e.m.evidence[len(e.m.evidence)-1])
	}
	ev, api := pick(r, cands...), viaAPI(r)
	args := []string{"supersede", rel.version, ev.id, "--reason", "the host's GPU had an ECC fault"}
	if api {
		_, _, err = e.remote(0, e.adm, "", args...)
	} else {
		_, _, err = e.cli(0, "", append(args, "--as", "adm")...)
	}
	if err != nil {
		return err
	}
	e.m.superseded[rel.version+" "+ev.id] = true
	e.logf("supersede %s %s api=%v", rel.version, ev.id, api)
	return nil
}

// opVerdict asks the server for a release's signed readiness verdict and
// keeps it for the replay invariant.
func opVerdict(e *lcEnv, r *rand.Rand) error {
	vs := slices.Sorted(mapKeys(e.m.releases))
	if len(vs) == 0 {
		return opReleaseApply(e, r)
	}
	v := pick(r, vs...)
	f := filepath.Join(e.dir, "files", fmt.Sprintf("verdict-%d.note", e.m.next()))
	_, _, code, err := e.exec([]int{0, 1}, "", "--server", e.url, "--token", e.rec, "release", "check", v, "--verdict", f)
	if err != nil {
		return err
	}
	if _, err := os.Stat(f); err != nil {
		return fmt.Errorf("release check %s --verdict wrote no verdict: %v", v, err)
	}
	e.m.verdicts = append(e.m.verdicts, f)
	e.logf("verdict %s: exit %d", v, code)
	return nil
}

// opHeadsVerify has the server verify the fixture's signed head and the
// tree equivalence from uploaded objects, under the registered policy
// that release 7.0.0 names (registering both first when needed).
func opHeadsVerify(e *lcEnv, r *rand.Rand) error {
	if e.m.policies == 0 {
		if err := e.applyPolicy(r); err != nil {
			return err
		}
	}
	if _, ok := e.m.releases["7.0.0"]; !ok || r.IntN(5) == 0 {
		rel := &lcRelease{version: "7.0.0", kind: "heads", head: e.fix.head}
		y := "version: 7.0.0\npolicy: core\ncomponents:\n  - name: core\n    repository: " + lcHeadsRepo + "\n    reviewed: " + e.fix.reviewed + "\n    head: " + e.fix.head +
			"\n    pins: [go.sum]\ngates:\n  - id: heads\n    kind: signed-heads\n  - id: tree\n    kind: tree-equivalence\n"
		if err := e.applyRelease(r, rel, y); err != nil {
			return err
		}
	}
	what := r.IntN(3)
	if e.m.heads == 0 {
		what = 0
	}
	switch what {
	case 0:
		e.m.heads++
		if _, _, err := e.remote(0, e.rec, "", "verify", "head", "--repo", e.fix.repo, "--ref", "main", "--release", "7.0.0"); err != nil {
			return err
		}
		e.logf("verify head --release 7.0.0")
	case 1:
		if _, _, err := e.remote(0, e.rec, "", "verify", "tree", "--repo", e.fix.repo, "--release", "7.0.0"); err != nil {
			return err
		}
		e.logf("verify tree --release 7.0.0")
	default:
		if _, _, err := e.cli(0, "", "verify", "tree", "--repo", e.fix.repo, "--head", e.fix.head, "--reviewed", e.fix.reviewed, "--pins", "go.sum",
			"--record", "--repository", lcHeadsRepo); err != nil {
			return err
		}
		e.logf("verify tree --record (local)")
	}
	return nil
}

// agent returns an approved agent, registering and approving one when
// there is none.
func (e *lcEnv) agent(r *rand.Rand) (*client.Agent, *lcAgent, error) {
	c, err := client.New(e.url, client.Options{Token: e.rec})
	if err != nil {
		return nil, nil, err
	}
	if len(e.m.agents) > 0 {
		a := pick(r, e.m.agents...)
		return client.NewAgent(c, a.name, a.priv), a, nil
	}
	pub, priv, err := ed25519.GenerateKey(nil)
	if err != nil {
		return nil, nil, err
	}
	a := &lcAgent{name: fmt.Sprintf("host-%d", e.m.next()), priv: priv}
	ag := client.NewAgent(c, a.name, priv)
	ctx := context.Background()
	if _, err := ag.Register(ctx, runs.RegisterRequest{Name: a.name, PublicKey: verify.AuthorizedKey(pub), Backend: ledger.BackendCPU,
		Spec: runs.AgentSpec{Lanes: []string{quickLane}, Repository: testRepo, Commit: testCommit, Device: cpuDevice(e.t)}, Health: "ok"}); err != nil {
		return nil, nil, fmt.Errorf("agent register: %w", err)
	}
	if _, _, err := e.remote(0, e.adm, "", "agent", "approve", a.name); err != nil {
		return nil, nil, err
	}
	e.m.agents = append(e.m.agents, a)
	e.logf("agent %s registered and approved", a.name)
	return ag, a, nil
}

// lease queues a run of quickLane and has agent ag take it.
func (e *lcEnv) lease(ag *client.Agent, maxAttempts int) (*runs.LeaseAnswer, error) {
	ctx := context.Background()
	rc, err := client.New(e.url, client.Options{Token: e.run})
	if err != nil {
		return nil, err
	}
	run, err := rc.CreateRun(ctx, runs.Spec{Lanes: []string{quickLane}, Backend: ledger.BackendCPU, MaxAttempts: maxAttempts})
	if err != nil {
		return nil, fmt.Errorf("queue a run: %w", err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		l, err := ag.Poll(ctx, time.Second, "ok")
		if err != nil {
			return nil, fmt.Errorf("agent poll: %w", err)
		}
		if l == nil {
			continue
		}
		if l.Run.ID == run.ID {
			return l, nil
		}
		// Another run (one queued before a restore, say): let it go
		// by finishing it as an infrastructure failure.
		if _, err := ag.Finish(ctx, l.Run.ID, runs.FinishRequest{Attempt: l.Attempt, Lease: l.Lease, Status: "infrastructure", Message: "not this test's run"}); err != nil {
			return nil, fmt.Errorf("finish another run %s: %w", l.Run.ID, err)
		}
	}
	return nil, fmt.Errorf("run %s was not leased in 20s", run.ID)
}

func (e *lcEnv) waitRun(id string, d time.Duration, states ...string) (runs.Run, error) {
	rc, err := client.New(e.url, client.Options{Token: e.run})
	if err != nil {
		return runs.Run{}, err
	}
	deadline := time.Now().Add(d)
	for {
		got, err := rc.Run(context.Background(), id)
		if err != nil {
			return got, err
		}
		// A final run is done once its outcome is a leaf.
		if slices.Contains(states, got.State) && (!runs.Final(got.State) || got.OutcomeEntry != "") {
			return got, nil
		}
		if time.Now().After(deadline) {
			return got, fmt.Errorf("run %s is %s (outcome entry %q) after %s, want %v with its outcome entry", id, got.State, got.OutcomeEntry, d, states)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// opAgentRun runs a run through an agent: queued, leased, heartbeat,
// finished with signed evidence of quickLane.
func opAgentRun(e *lcEnv, r *rand.Rand) error {
	ag, a, err := e.agent(r)
	if err != nil {
		return err
	}
	l, err := e.lease(ag, 0)
	if err != nil {
		return err
	}
	ctx := context.Background()
	if _, err := ag.Heartbeat(ctx, l.Run.ID, runs.HeartbeatRequest{Attempt: l.Attempt, Lease: l.Lease}); err != nil {
		return fmt.Errorf("heartbeat: %w", err)
	}
	env := quickEnvelopeOf(e.t, a.priv, ledger.Subject{Repository: testRepo, Commit: testCommit, Tree: testCommit}, l)
	fin := runs.FinishRequest{Attempt: l.Attempt, Lease: l.Lease, Status: "completed", Evidence: []json.RawMessage{env}}
	staged := r.IntN(2) == 0
	if staged {
		// The lane's envelope sent as it ends; the finish names it.
		ans, err := ag.Stage(ctx, l.Run.ID, runs.StageRequest{Attempt: l.Attempt, Lease: l.Lease, Envelope: env})
		if err != nil {
			return fmt.Errorf("stage: %w", err)
		}
		fin.Evidence, fin.Staged = nil, []string{ans.Digest}
	}
	got, err := ag.Finish(ctx, l.Run.ID, fin)
	if err != nil {
		return fmt.Errorf("finish: %w", err)
	}
	if !runs.Final(got.State) || got.OutcomeEntry == "" {
		return fmt.Errorf("finished run %s is %s with outcome entry %q", got.ID, got.State, got.OutcomeEntry)
	}
	e.logf("agent-run %s by %s staged=%v: %s", got.ID, a.name, staged, got.State)
	return nil
}

// opRunCancel queues a run no agent serves, with or without a case
// selection for the throughput lane, and cancels it; the outcome leaf
// records the selection the run asked for, and none for a run without
// one.
func opRunCancel(e *lcEnv, r *rand.Rand) error {
	rc, err := client.New(e.url, client.Options{Token: e.run})
	if err != nil {
		return err
	}
	ctx := context.Background()
	spec := runs.Spec{Lanes: []string{quickLane}, Backend: ledger.BackendCPU, Labels: map[string]string{"gpu": "none-has-this"}}
	if r.IntN(2) == 0 {
		spec.Lanes = append(spec.Lanes, "qmv-throughput/v1")
		spec.CaseSelection = ledger.CaseSelection{Cases: []string{pick(r, "batch1/n4096/k4096/f32/b4/g64", "batch2/n8192", "batch*/n4096/*/f16")},
			CaseBudget: pick(r, "", "1s", "2m0s"), MaxSamples: pick(r, 0, 6, 1000)}
	}
	run, err := rc.CreateRun(ctx, spec)
	if err != nil {
		return fmt.Errorf("queue a run: %w", err)
	}
	if !slices.Equal(run.Cases, spec.Cases) || run.CaseBudget != spec.CaseBudget || run.MaxSamples != spec.MaxSamples {
		return fmt.Errorf("run %s carries selection %+v, queued with %+v", run.ID, run.CaseSelection, spec.CaseSelection)
	}
	if viaAPI(r) {
		_, err = rc.CancelRun(ctx, run.ID)
	} else {
		_, _, err = e.remote(0, e.run, "", "runs", "cancel", run.ID)
	}
	if err != nil {
		return fmt.Errorf("cancel: %w", err)
	}
	got, err := e.waitRun(run.ID, 10*time.Second, runs.Canceled)
	if err != nil {
		return err
	}
	if got.OutcomeEntry == "" {
		return fmt.Errorf("canceled run %s has no outcome entry", run.ID)
	}
	ent, err := rc.Entry(ctx, got.OutcomeEntry)
	if err != nil {
		return fmt.Errorf("outcome entry of run %s: %w", run.ID, err)
	}
	var o ledger.RunOutcome
	if _, _, err := ledger.PrepareRunOutcome(ent.Body); err != nil || json.Unmarshal(ent.Body, &o) != nil {
		return fmt.Errorf("outcome entry of run %s: %v: %s", run.ID, err, ent.Body)
	}
	if !slices.Equal(o.Cases, spec.Cases) || o.CaseBudget != spec.CaseBudget || o.MaxSamples != spec.MaxSamples {
		return fmt.Errorf("outcome of run %s records selection %+v, the run asked for %+v", run.ID, o.CaseSelection, spec.CaseSelection)
	}
	e.logf("run-cancel %s (selection %q)", run.ID, spec.CaseSelection.Text())
	return nil
}

// opRunExpire has an agent take a run of one attempt and never extend
// its lease: the run expires and its outcome is a leaf.
func opRunExpire(e *lcEnv, r *rand.Rand) error {
	ag, a, err := e.agent(r)
	if err != nil {
		return err
	}
	l, err := e.lease(ag, 1)
	if err != nil {
		return err
	}
	got, err := e.waitRun(l.Run.ID, 20*time.Second, runs.Expired, runs.Failed)
	if err != nil {
		return err
	}
	if got.OutcomeEntry == "" {
		return fmt.Errorf("expired run %s has no outcome entry", got.ID)
	}
	e.logf("run-expire %s by %s: %s", got.ID, a.name, got.State)
	return nil
}

// opKeyRotate rotates the log's signing key with the server stopped, as
// the README says, and starts it again with a witness of the new key.
func opKeyRotate(e *lcEnv, r *rand.Rand) error {
	if err := e.stop(); err != nil {
		return err
	}
	out, _, err := e.cli(0, "", "--json", "key", "rotate")
	if err != nil {
		return err
	}
	var rot rotation
	if err := json.Unmarshal([]byte(out), &rot); err != nil {
		return fmt.Errorf("key rotate --json: %v: %s", err, out)
	}
	// The checkpoint of the rotation's batch is the old key's last.
	e.rotationSizes[rot.Index+1] = true
	if err := e.newWitness(); err != nil {
		return err
	}
	e.m.rotations++
	e.logf("key-rotate")
	if err := e.start(); err != nil {
		return err
	}
	// The rotation's own checkpoint is signed by the old key, which the
	// new witness does not know (an operator adds the new key to the
	// witnesses it has): one append makes a checkpoint of the new key.
	return opEvidenceJSON(e, r)
}

// opBackup takes a backup (SQLite: ledger backup; PostgreSQL: ledger
// copy to a SQLite file) and keeps the model as it is now beside it.
func opBackup(e *lcEnv, r *rand.Rand) error {
	n := e.m.next()
	var file string
	if e.store == "sqlite" {
		dest := filepath.Join(e.dir, fmt.Sprintf("backup-%d", n)) + string(filepath.Separator)
		if _, _, err := e.cli(0, "", "backup", dest); err != nil {
			return err
		}
		file = filepath.Join(dest, "ledger.db")
	} else {
		file = filepath.Join(e.dir, fmt.Sprintf("backup-%d.db", n))
		if _, _, _, err := e.exec([]int{0}, "", "--data-dir", e.dataDir, "copy", "--from", e.db, "--to", file); err != nil {
			return err
		}
	}
	e.m.backup = &lcBackup{db: file, m: e.m.clone(), rotations: e.m.rotations}
	e.logf("backup to %s", file)
	return nil
}

// opRestore puts the last backup in place of the database (the server
// stopped), accepts it with restore --accept-rollback (a log leaf) and
// starts the server again; the model goes back to the backup's.
func opRestore(e *lcEnv, r *rand.Rand) error {
	if e.m.backup == nil {
		return opBackup(e, r)
	}
	b := e.m.backup
	if b.rotations != e.m.rotations {
		// Finding: restore --accept-rollback refuses a backup taken
		// before a key rotation ("the latest checkpoint does not
		// verify with the key ..."): the rotation retired the key that
		// signed the backup's checkpoints and the restored log lacks
		// the rotation leaf. Until a restore can carry the rotation
		// over, a backup taken since the rotation is restored instead.
		e.noteKnown("restore --accept-rollback refuses a backup taken before a key rotation (its checkpoints are signed by the retired key): a backup taken since is restored instead")
		if err := opBackup(e, r); err != nil {
			return err
		}
		b = e.m.backup
	}
	// The log goes on past the backup, so that there is a rollback to
	// accept.
	if err := opEvidenceJSON(e, r); err != nil {
		return err
	}
	if err := e.noteKinds(); err != nil {
		return err
	}
	if err := e.stop(); err != nil {
		return err
	}
	if e.store == "sqlite" {
		for _, sfx := range []string{"-wal", "-shm"} {
			os.Remove(e.db + sfx)
		}
		data, err := os.ReadFile(b.db)
		if err != nil {
			return err
		}
		if err := os.WriteFile(e.db, data, 0o600); err != nil {
			return err
		}
	} else {
		pg := newPGDatabase(e.t)
		if _, _, _, err := e.exec([]int{0}, "", "--data-dir", e.dataDir, "copy", "--from", b.db, "--to", pg); err != nil {
			return err
		}
		e.db = pg
	}
	out, _, err := e.cli(0, "", "restore", "--accept-rollback", "--by", "operator", "--reason", "lifecycle restore")
	if err != nil {
		return err
	}
	// Checkpoints clients saved beyond the restored size are of the
	// history the restore left.
	var rs lcAudit
	if au, _, err := e.cli(0, "", "--json", "audit"); err != nil {
		return err
	} else if err := json.Unmarshal([]byte(au), &rs); err != nil || rs.Leaves == 0 {
		return fmt.Errorf("audit --json: %v: %s", err, au)
	}
	for i := range e.saved {
		if e.saved[i].size >= rs.Leaves {
			e.saved[i].forked = true
		}
	}
	e.m = b.m.clone()
	e.m.backup = b
	if err := e.newWitness(); err != nil {
		return err
	}
	e.logf("restore of %s: %s", b.db, strings.TrimSpace(out))
	return e.start()
}

func opRestart(e *lcEnv, r *rand.Rand) error {
	if err := e.stop(); err != nil {
		return err
	}
	e.logf("restart")
	return e.start()
}

var lcFormEntryRe = regexp.MustCompile(`<select id="x-entry" name="entry" required><option value="([^"]+)"`)

var lcFormRe = regexp.MustCompile(`<form method="post" action="([^"]+)" id="(waiver|signoff|supersede|approval)-form"[^>]*>\s*<h3>[^<]*</h3>\s*<input type="hidden" name="csrf" value="([^"]+)">`)

// opDashboardForm posts one of the release page's forms (waiver, sign-off,
// approval) as a browser would: the page's CSRF cookie and field, and a
// token typed into the form.
func opDashboardForm(e *lcEnv, r *rand.Rand) error {
	rel, err := e.laneRelease(r)
	if err != nil {
		return err
	}
	if vs := slices.Sorted(mapKeys(e.m.releases)); r.IntN(2) == 0 {
		rel = e.m.releases[pick(r, vs...)]
	}
	jar, _ := cookiejar.New(nil)
	hc := &http.Client{Jar: jar, Timeout: time.Minute, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := hc.Get(e.url + "/releases/" + rel.version)
	if err != nil {
		return err
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET /releases/%s: %d %s", rel.version, resp.StatusCode, clipOut(string(page)))
	}
	forms := map[string][2]string{}
	for _, m := range lcFormRe.FindAllStringSubmatch(string(page), -1) {
		forms[m[2]] = [2]string{html.UnescapeString(m[1]), html.UnescapeString(m[3])}
	}
	which := pick(r, "waiver", "signoff", "approval", "supersede")
	if rel.kind == "heads" && which == "signoff" {
		which = "waiver"
	}
	entry := ""
	if which == "supersede" {
		// Only a release with an approval role and a failing record
		// shows the form.
		m := lcFormEntryRe.FindStringSubmatch(string(page))
		if _, ok := forms["supersede"]; !ok || m == nil || !rel.approvalRole {
			which = "waiver"
		} else {
			entry = html.UnescapeString(m[1])
		}
	}
	f, ok := forms[which]
	if !ok {
		return fmt.Errorf("release page %s has no %s form (forms: %v)", rel.version, which, slices.Sorted(mapKeys(forms)))
	}
	v := url.Values{"csrf": {f[1]}}
	want := []int{http.StatusSeeOther}
	switch which {
	case "waiver":
		gate := "review"
		if rel.kind == "heads" {
			gate = "heads"
		}
		v.Set("gate", gate)
		v.Set("reason", "waived from the dashboard")
		v.Set("expires", time.Now().UTC().AddDate(0, 0, 3).Format("2006-01-02"))
		v.Set("token", e.adm)
	case "signoff":
		v.Set("gate", "review")
		v.Set("note", "signed off from the dashboard")
		v.Set("token", e.adm)
	case "supersede":
		v.Set("entry", entry)
		v.Set("reason", "the host lost power mid-run")
		v.Set("token", e.adm)
	case "approval":
		v.Set("note", "approved from the dashboard")
		v.Set("token", e.adm)
		want = append(want, http.StatusConflict) // not ready
		if rel.kind == "twoperson" {
			want = append(want, http.StatusForbidden) // adm waived or signed off
		}
	}
	resp, err = hc.PostForm(e.url+f[0], v)
	if err != nil {
		return err
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !slices.Contains(want, resp.StatusCode) {
		return fmt.Errorf("POST %s (%s form): %d, want %v: %s", f[0], which, resp.StatusCode, want, clipOut(string(body)))
	}
	if which == "supersede" {
		e.m.superseded[rel.version+" "+entry] = true
	}
	e.logf("dashboard %s form on %s: %d", which, rel.version, resp.StatusCode)
	return nil
}

// opRunLocal runs a quick lane with `ledger run` and records its
// evidence (to the server or the local database; sometimes signed by a
// registered runner key).
func opRunLocal(e *lcEnv, r *rand.Rand) error {
	args := []string{"run", "--backend", "cpu", "--lane", quickLane, "--repository", lcCoreRepo, "--commit", pick(r, lcCommitA, lcCommitB), "--tree", lcTree, "--dirty", "false"}
	signed := r.IntN(2) == 0
	if signed {
		rn, err := e.liveRunner(r)
		if err != nil {
			return err
		}
		args = append(args, "--sign-key", rn.key)
	}
	api := viaAPI(r)
	var err error
	if api {
		_, _, err = e.remote(0, e.rec, "", args...)
	} else {
		_, _, err = e.cli(0, "", args...)
	}
	if err != nil {
		return err
	}
	e.logf("run-local %s signed=%v api=%v", quickLane, signed, api)
	return nil
}

// opAgentRemove removes an agent (its approved key revoked: a runner-key
// leaf) and registers nothing new.
func opAgentRemove(e *lcEnv, r *rand.Rand) error {
	if len(e.m.agents) == 0 {
		if _, _, err := e.agent(r); err != nil {
			return err
		}
	}
	i := r.IntN(len(e.m.agents))
	a := e.m.agents[i]
	if _, _, err := e.remote(0, e.adm, "", "agent", "remove", a.name); err != nil {
		return err
	}
	e.m.agents = slices.Delete(slices.Clone(e.m.agents), i, i+1)
	e.logf("agent-remove %s", a.name)
	return nil
}

// opIdempotentReplay records with an idempotency key, or replays the last
// such append (same key, token and body): the replay answers the first
// append's entry and appends nothing.
func opIdempotentReplay(e *lcEnv, r *rand.Rand) error {
	id := e.m.idem
	if id == nil || r.IntN(3) == 0 {
		commit, n := pick(r, lcCommitA, lcCommitB), e.m.next()
		id = &lcIdem{key: fmt.Sprintf("lifecycle-%d", n), body: lcEvidenceJSON("qmv-bias-sum/v1", commit, n, false), api: viaAPI(r)}
		es, err := e.record(id.api, e.rec, id.body, "--idempotency-key", id.key, "-")
		if err != nil {
			return err
		}
		if len(es) != 1 {
			return fmt.Errorf("record with an idempotency key appended %d entries", len(es))
		}
		id.id = es[0].ID
		e.noteEvidence(es, commit, "qmv-bias-sum/v1")
		e.m.idem = id
		e.logf("idempotent record %s key %s api=%v", id.id, id.key, id.api)
		return nil
	}
	before, err := e.checkpoint()
	if err != nil {
		return err
	}
	es, err := e.record(id.api, e.rec, id.body, "--idempotency-key", id.key, "-")
	if err != nil {
		return err
	}
	after, err := e.checkpoint()
	if err != nil {
		return err
	}
	if len(es) != 1 || es[0].ID != id.id || after.Size != before.Size {
		return fmt.Errorf("replay of idempotency key %s: entries %+v, log size %d -> %d; want entry %s and nothing appended", id.key, es, before.Size, after.Size, id.id)
	}
	e.logf("idempotent replay of key %s api=%v", id.key, id.api)
	return nil
}
