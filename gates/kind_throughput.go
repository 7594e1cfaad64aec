package gates

import (
	"fmt"
	"math"
	"path"
	"slices"
	"sort"
	"strings"

	"github.com/evidence-ledger/ledger/internal/stats"
	"github.com/evidence-ledger/ledger/ledger"
)

// KindThroughput is the kind of gates over A/B throughput records: the
// candidate is no slower than the gate's threshold allows against the
// baseline it was measured next to, judged from the samples.
const KindThroughput = "throughput"

// DefaultThroughputLane is the lane of a throughput gate that names none
// (the default runner's qmv throughput lane, runner.ThroughputLane).
const DefaultThroughputLane = "qmv-throughput/v1"

// ThroughputMinConfidence is the least coverage of the ratio intervals a
// throughput gate judges by: a record stating a lower confidence is judged
// at this one, so a record cannot narrow its own intervals.
const ThroughputMinConfidence = 0.95

// Limits of a throughput gate's fields.
const (
	maxThroughputSelect = 64
	maxThroughputThresh = 10
)

var throughputKind = kindSpec{
	name:        KindThroughput,
	fields:      []string{"lane", "component", "at", "backends", "artifacts", "signed_by", "runner", "agent_labels", "baseline", "baseline_artifacts", "threshold", "select", "cases"},
	defaultLane: DefaultThroughputLane,
	validate:    validateThroughput,
	evaluate:    (*evaluator).throughput,
	rule: "At the pins, a run on the listed backends with status failed keeps the gate failed until superseded or waived; inconclusive, error, partial and duplicate runs " +
		"and runs whose negative control was not caught are baseline. A passed run is judged from its samples, never its summaries: " +
		"per selected case, the median of the paired ratios baseline_s[i]/candidate_s[i] with its order-statistic interval (at the record's confidence, at least 0.95; " +
		"at least 6 pairs). A case meets the threshold when the interval's low end is at or above it, regressed when its high end is below it, " +
		"and is inconclusive otherwise. A run with a regressed case keeps the gate failed like a failed run; " +
		"a run whose every selected case meets the threshold passes it; a run compared against another baseline (name or baseline artifacts), " +
		"with no selected case or fewer than cases, is baseline with the reason; an inconclusive run is baseline and leaves the gate open.",
}

func validateThroughput(g *Gate, f string) error {
	if len(g.Backends) == 0 {
		return ledger.FieldError(f+".backends", "throughput gates list the backends whose runs count")
	}
	if strings.TrimSpace(g.Baseline) == "" || len(g.Baseline) > 128 {
		return ledger.FieldError(f+".baseline", "required: the baseline name the runs compared against (details.throughput.baseline.name), at most 128 characters")
	}
	for _, name := range sortedKeys(g.BaselineArtifacts) {
		if strings.TrimSpace(name) == "" || len(name) > 256 {
			return ledger.FieldError(f+".baseline_artifacts", "artifact names must be 1-256 characters, got %q", name)
		}
		if d := g.BaselineArtifacts[name]; !ledger.ValidDigest(d) {
			return ledger.FieldError(f+".baseline_artifacts."+name, "must be sha256:<64 lowercase hex>, got %q", d)
		}
	}
	if !(g.Threshold > 0 && g.Threshold <= maxThroughputThresh) {
		return ledger.FieldError(f+".threshold", "required: the lowest acceptable speed ratio baseline/candidate, in (0, %d] (0.98: at most 2 %% slower), got %v", maxThroughputThresh, g.Threshold)
	}
	if g.Lane != "" && !strings.HasSuffix(ledger.LaneName(g.Lane), "-throughput") {
		return ledger.FieldError(f+".lane", "a throughput gate judges a throughput lane (named *-throughput/vN, e.g. %s), got %q", DefaultThroughputLane, g.Lane)
	}
	if g.Cases > ledger.MaxThroughputCases {
		return ledger.FieldError(f+".cases", "at most %d (the most cases a throughput record holds), got %d", ledger.MaxThroughputCases, g.Cases)
	}
	if len(g.Select) > maxThroughputSelect {
		return ledger.FieldError(f+".select", "at most %d case globs, got %d", maxThroughputSelect, len(g.Select))
	}
	for j, s := range g.Select {
		if s == "" || len(s) > 256 {
			return ledger.FieldError(fmt.Sprintf("%s.select[%d]", f, j), "must be a case-id glob of 1-256 characters")
		}
		if _, err := path.Match(s, ""); err != nil {
			return ledger.FieldError(fmt.Sprintf("%s.select[%d]", f, j), "bad glob %q: %v", s, err)
		}
		if strings.Contains("/"+s+"/", "//") {
			return ledger.FieldError(fmt.Sprintf("%s.select[%d]", f, j), "glob %q has an empty segment (a leading, trailing or double /): it matches no case id", s)
		}
	}
	return nil
}

func sortedKeys(m map[string]string) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// ThroughputVerdict is how one throughput record, or a throughput gate by
// its decisive record, compares with the gate's threshold.
type ThroughputVerdict string

// The throughput verdicts.
const (
	ThroughputMeets        ThroughputVerdict = "meets"
	ThroughputRegressed    ThroughputVerdict = "regressed"
	ThroughputInconclusive ThroughputVerdict = "inconclusive"
)

// ThroughputResult is the decisive case of a throughput gate's decisive
// record, for display: the regressed case with the lowest ratio, the
// widest inconclusive case, or the meeting case with the lowest interval
// low end (the worst).
type ThroughputResult struct {
	Verdict ThroughputVerdict `json:"verdict"`
	// Entry is the id of the record judged.
	Entry string `json:"entry"`
	// Case is the decisive case's id; Ratio the median of its paired
	// ratios baseline/candidate with the interval (Low, High zero when
	// Pairs is too few for one).
	Case  string          `json:"case"`
	Ratio ledger.Interval `json:"ratio"`
	Pairs int             `json:"pairs"`
	// Threshold is the gate's; Cases the number of selected cases judged.
	Threshold float64 `json:"threshold"`
	Cases     int     `json:"cases"`
	// Candidate and Baseline are the names the record compared.
	Candidate string `json:"candidate"`
	Baseline  string `json:"baseline"`
}

// Text is the result in words: "speed ratio 1.004 [0.999, 1.009] >= 0.98,
// worst of 162 cases, promoted vs narrow".
func (r *ThroughputResult) Text() string {
	vs := fmt.Sprintf("%s vs %s", r.Candidate, r.Baseline)
	switch r.Verdict {
	case ThroughputMeets:
		return fmt.Sprintf("speed ratio %s >= %g, worst of %d cases, %s", ratioText(r.Ratio, r.Pairs), r.Threshold, r.Cases, vs)
	case ThroughputRegressed:
		return fmt.Sprintf("%s: speed ratio %s < %g, %s", r.Case, ratioText(r.Ratio, r.Pairs), r.Threshold, vs)
	}
	return fmt.Sprintf("inconclusive: %s: speed ratio %s against %g (%d pairs), %s", r.Case, ratioText(r.Ratio, r.Pairs), r.Threshold, r.Pairs, vs)
}

func ratioText(iv ledger.Interval, pairs int) string {
	if pairs < stats.MinSamples || (iv.Low == 0 && iv.High == 0) {
		return fmt.Sprintf("%.3f [no interval]", iv.Estimate)
	}
	return fmt.Sprintf("%.3f [%.3f, %.3f]", iv.Estimate, iv.Low, iv.High)
}

// caseJudgement is one selected case's ratio and verdict.
type caseJudgement struct {
	id      string
	iv      ledger.Interval
	pairs   int
	verdict ThroughputVerdict
	why     string // for an inconclusive case: why
}

// judgeCase judges case c of a record at confidence conf against thr from
// its samples alone.
func judgeCase(c *ledger.ThroughputCase, conf, thr float64) caseJudgement {
	j := caseJudgement{id: c.ID, verdict: ThroughputInconclusive}
	if len(c.BaselineS) == 0 {
		j.why = "no baseline samples"
		return j
	}
	rs := stats.Ratios(c.BaselineS, c.CandidateS)
	j.pairs = len(rs)
	j.iv.Estimate = stats.Median(rs)
	if len(rs) < stats.MinSamples {
		j.why = fmt.Sprintf("%d pair(s), fewer than %d", len(rs), stats.MinSamples)
		return j
	}
	iv, ok := stats.MedianCI(rs, conf)
	if !ok {
		j.why = fmt.Sprintf("%d pairs give no %.0f %% interval", len(rs), conf*100)
		return j
	}
	j.iv = ledger.Interval(iv)
	switch {
	case iv.Low >= thr:
		j.verdict = ThroughputMeets
	case iv.High < thr:
		j.verdict = ThroughputRegressed
	default:
		j.why = fmt.Sprintf("the interval straddles %g", thr)
	}
	return j
}

// judgeThroughput judges record e for gate g: why it is baseline (another
// baseline, no selected case, too few), or its verdict with the decisive
// case.
func judgeThroughput(e *ledger.Evidence, g *Gate, id string) (res *ThroughputResult, why string) {
	t, err := ledger.ThroughputOf(e)
	switch {
	case err != nil:
		return nil, "malformed throughput record: " + err.Error()
	case t == nil:
		return nil, "no throughput measurements (details.throughput)"
	case t.Baseline == nil:
		return nil, fmt.Sprintf("a run of one side only: no baseline (the gate compares with %q)", g.Baseline)
	case t.Baseline.Name != g.Baseline:
		return nil, fmt.Sprintf("compared against baseline %q, the gate's is %q", t.Baseline.Name, g.Baseline)
	}
	for _, name := range sortedKeys(g.BaselineArtifacts) {
		want := g.BaselineArtifacts[name]
		got, ok := t.Baseline.Artifacts[name]
		if !ok {
			return nil, fmt.Sprintf("baseline does not carry artifact %s (the gate binds %s)", name, shortDigest(want))
		}
		if got != want {
			return nil, fmt.Sprintf("baseline artifact %s %s (the gate binds %s)", name, shortDigest(got), shortDigest(want))
		}
	}
	conf := max(t.Confidence, ThroughputMinConfidence)
	var js []caseJudgement
	for i := range t.Cases {
		if selected(g.Select, t.Cases[i].ID) {
			js = append(js, judgeCase(&t.Cases[i], conf, g.Threshold))
		}
	}
	switch {
	case len(js) == 0:
		return nil, fmt.Sprintf("no case matches select (%s)", strings.Join(g.Select, ", "))
	case len(js) < g.Cases:
		return nil, fmt.Sprintf("%d selected case(s), the gate needs %d", len(js), g.Cases)
	}
	d := decisive(js)
	return &ThroughputResult{Verdict: d.verdict, Entry: id, Case: d.id, Ratio: d.iv, Pairs: d.pairs, Threshold: g.Threshold,
		Cases: len(js), Candidate: t.Candidate, Baseline: t.Baseline.Name}, ""
}

// selected reports whether case id matches one of the globs (every case
// when there are none).
func selected(globs []string, id string) bool {
	if len(globs) == 0 {
		return true
	}
	return slices.ContainsFunc(globs, func(g string) bool { return ledger.MatchCaseGlob(g, id) })
}

// decisive returns the case that decides a record: the regressed case with
// the lowest ratio when any regressed; else, when any is inconclusive, one
// without an interval or the widest; else the meeting case with the lowest
// interval low end.
func decisive(js []caseJudgement) caseJudgement {
	best, rank := -1, func(j caseJudgement) int {
		switch j.verdict {
		case ThroughputRegressed:
			return 2
		case ThroughputInconclusive:
			return 1
		}
		return 0
	}
	worse := func(a, b caseJudgement) bool { // a decides before b
		if ra, rb := rank(a), rank(b); ra != rb {
			return ra > rb
		}
		switch a.verdict {
		case ThroughputRegressed:
			return a.iv.Estimate < b.iv.Estimate
		case ThroughputInconclusive:
			return width(a) > width(b)
		}
		return a.iv.Low < b.iv.Low
	}
	for i := range js {
		if best < 0 || worse(js[i], js[best]) {
			best = i
		}
	}
	return js[best]
}

// width is an inconclusive case's relative interval width; +Inf without
// an interval.
func width(j caseJudgement) float64 {
	if j.pairs < stats.MinSamples || (j.iv.Low == 0 && j.iv.High == 0) {
		return math.Inf(1)
	}
	return stats.Interval(j.iv).RelHalfWidth()
}

func (ev *evaluator) throughput(g *Gate) (GateResult, error) {
	var res GateResult
	b := ev.bindingOf(g)
	bl := &baselines{limit: ev.baseLim}
	cands, runs, err := ev.laneCandidates(g, b)
	if err != nil {
		return res, err
	}
	var failing []FailingRef
	var meets, regressed, inconclusive *ThroughputResult
	var inconclusiveWhy string
	dups := 0
	for _, c := range cands {
		e := c.e
		if c.why != "" {
			bl.add(e, c.why)
			continue
		}
		if d := runs.duplicate(&e); d != "" {
			bl.add(e, d)
			dups++
			continue
		}
		if !slices.Contains(g.Backends, string(e.Evidence.Backend)) {
			bl.add(e, fmt.Sprintf("other backend %s (gate counts %s)", e.Evidence.Backend, strings.Join(g.Backends, ", ")))
			continue
		}
		switch st := e.Evidence.Status; {
		case st == ledger.StatusFailed:
			failing = appendFailing(failing, e, fmt.Sprintf("status failed at the release's pins (%d/%d cases)", e.Evidence.CasesExact, e.Evidence.CasesTotal))
			continue
		case st != ledger.StatusPassed:
			bl.add(e, fmt.Sprintf("status %s", st))
			continue
		case e.Evidence.Control == ledger.ControlNotCaught:
			bl.add(e, "negative control not caught (the timing cannot tell a slower kernel)")
			continue
		}
		r, why := judgeThroughput(&e.Evidence, g, e.ID)
		if why != "" {
			bl.add(e, why)
			continue
		}
		rf := ref(e)
		rf.Summary = r.Text()
		switch r.Verdict {
		case ThroughputRegressed:
			failing = appendFailing(failing, e, r.Text())
			if regressed == nil {
				regressed = r
			}
		case ThroughputMeets:
			if meets == nil || r.Ratio.Low < meets.Ratio.Low {
				meets = r
			}
			if len(res.Satisfying) < 50 {
				res.Satisfying = append(res.Satisfying, rf)
			}
		default:
			bl.add(e, r.Text())
			if inconclusive == nil {
				inconclusive, inconclusiveWhy = r, r.Text()
			}
		}
	}
	if err := ev.sampleBaseline(g.Lane, b, bl, nil); err != nil {
		return res, err
	}
	res.Baseline = bl.list
	others := len(bl.list) + bl.more
	switch {
	case len(failing) > 0:
		f := failing[0]
		res.State, res.Failing, res.Throughput = StateFailed, failing, regressed
		res.Reason = fmt.Sprintf("%d run(s) at the release's pins failed or regressed (each keeps the gate failed until superseded or waived); newest %s on %s: %s", len(failing), short(f.ID), f.Backend, f.Reason)
	case meets != nil:
		res.State, res.Throughput = StatePassed, meets
		res.Reason = fmt.Sprintf("%d passing run(s) at the release's pins; %s (%s, %d pairs)", len(res.Satisfying), meets.Text(), meets.Case, meets.Pairs) + dupNote(dups)
	case inconclusive != nil:
		res.State, res.Throughput = StateOpen, inconclusive
		res.Reason = inconclusiveWhy + "; the interval must lie wholly at or above the threshold (more samples or a quieter host narrow it)" + dupNote(dups)
		res.Missing = append(res.Missing, ev.throughputMissing(g, b))
	default:
		res.State = StateOpen
		res.Missing = append(res.Missing, ev.throughputMissing(g, b))
		res.Reason = "no passing throughput run at the release's pins"
		if others > 0 {
			res.Reason += fmt.Sprintf("; %d other run(s) of the lane do not count (see baseline)", others)
		}
		res.Reason += dupNote(dups)
	}
	return res, nil
}

func appendFailing(fs []FailingRef, e ledger.EvidenceEntry, reason string) []FailingRef {
	if len(fs) >= 50 {
		return fs
	}
	return append(fs, FailingRef{EvidenceRef: ref(e), Reason: reason})
}

// throughputMissing is the run a throughput gate lacks, in words.
func (ev *evaluator) throughputMissing(g *Gate, b binding) string {
	what := fmt.Sprintf("a passed run of %s at %s %s %s", g.Lane, b.comp.Name, atName(g.At), short(b.commit))
	if len(b.required) > 0 {
		what += " with " + ev.artifactList(b.required)
	}
	return fmt.Sprintf("%s on %s, compared against %s, every selected case's speed ratio interval at or above %g", what, strings.Join(g.Backends, " or "), g.Baseline, g.Threshold)
}
