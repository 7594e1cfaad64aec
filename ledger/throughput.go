package ledger

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"path"
	"reflect"
	"slices"
	"strings"
)

// ThroughputField is the evidence details member of a throughput lane's
// record (lanes named "*-throughput/vN"): the timing samples of every case
// and what they were measured on (Throughput).
const ThroughputField = "throughput"

// Throughput is what a throughput lane measured: for every case, the
// candidate's samples and, in an A/B run, the baseline's samples taken
// interleaved with them on the same device in the same run.
//
// A sample is the device (or monotonic) time of one group of
// LaunchesPerSample back-to-back products divided by that count, in
// seconds per product; sample i of the candidate and sample i of the
// baseline were taken next to each other in time, so their ratio cancels
// drift both share. Summaries (medians, intervals) are written for
// readers; the throughput gate recomputes them from the samples.
type Throughput struct {
	// Clock names what timed the samples: "cuda-events" (cuEventElapsedTime
	// around each group), "monotonic" (the host's monotonic clock), or an
	// adapter's own clock ("torch.cuda.Event", "perf_counter").
	Clock string `json:"clock"`
	// Candidate names what was measured: the kernel variant ("promoted")
	// or the implementation under test.
	Candidate string `json:"candidate"`
	// Baseline is what the candidate was compared with in the same run;
	// nil in a run of one side only.
	Baseline *ThroughputBaseline `json:"baseline,omitempty"`
	// Confidence is the coverage of every interval (0.95) and TargetRel the
	// relative half-width the run repeated samples for (0.01).
	Confidence float64 `json:"confidence"`
	TargetRel  float64 `json:"target_rel"`
	// DeviceState holds what moves timings, read before and after the run
	// ("before.clocks.sm_mhz", "after.temperature_c", "processes", ...).
	DeviceState map[string]string `json:"device_state,omitempty"`
	Cases       []ThroughputCase  `json:"cases"`
}

// ThroughputBaseline identifies the other side of an A/B run: its name (a
// kernel variant such as "narrow", or the original implementation's name)
// and its artifact pins (name -> "sha256:<hex>") when they differ from the
// record's subject.
type ThroughputBaseline struct {
	Name      string            `json:"name"`
	Artifacts map[string]string `json:"artifacts,omitempty"`
}

// ThroughputCase is one measured case: its shape (Batch vectors of K
// values times an N x K matrix of Bits-bit weights in groups of
// GroupSize, activations of DType), the samples, the check of its output
// and the runner's summaries.
type ThroughputCase struct {
	ID                string    `json:"id"`
	Batch             int       `json:"batch"`
	N                 int       `json:"n"`
	K                 int       `json:"k"`
	DType             string    `json:"dtype"`
	Bits              int       `json:"bits"`
	GroupSize         int       `json:"group_size"`
	LaunchesPerSample int       `json:"launches_per_sample"`
	CandidateS        []float64 `json:"candidate_s"`
	BaselineS         []float64 `json:"baseline_s,omitempty"`
	// Converged is true when the run stopped because every interval was
	// within TargetRel, false when its sample or time budget ended first.
	Converged bool `json:"converged"`
	// Candidate and Baseline are the median seconds per product with their
	// intervals; Ratio is the median of the paired ratios
	// baseline_s[i]/candidate_s[i] (above 1: the candidate is faster).
	CandidateMedian Interval  `json:"candidate_median"`
	BaselineMedian  *Interval `json:"baseline_median,omitempty"`
	Ratio           *Interval `json:"ratio,omitempty"`
	// Output is the check of the timed products' output against the
	// float64 reference.
	Output OutputCheck `json:"output"`
}

// Interval is an estimate with its confidence interval (Low <= Estimate
// <= High), in the unit of what it estimates.
type Interval struct {
	Estimate float64 `json:"estimate"`
	Low      float64 `json:"low"`
	High     float64 `json:"high"`
}

// OutputCheck compares a timed product's output (every batch row) with a
// float64 reference: RelL2 is ||got - ref||_2 / ||ref||_2 over all values,
// Tolerance the largest RelL2 that passes (a kernel that skips work is off
// by far more), BitExact how many of Values equal the reference rounded to
// the dtype.
type OutputCheck struct {
	RelL2     float64 `json:"rel_l2"`
	Tolerance float64 `json:"tolerance"`
	BitExact  int     `json:"bit_exact"`
	Values    int     `json:"values"`
	// BaselineRelL2 is the same measure for the baseline's output.
	BaselineRelL2 *float64 `json:"baseline_rel_l2,omitempty"`
}

// ThroughputDTypes are the dtypes a throughput case may name: runner/quant's
// DType names (a runner test keeps them equal).
var ThroughputDTypes = []string{"f16", "bf16", "f32"}

// ThroughputCaseID returns the id of a throughput case, the lane's case
// naming: "batch1/n8192/k8192/f16/b4/g64".
func ThroughputCaseID(batch, n, k int, dtype string, bits, group int) string {
	return fmt.Sprintf("batch%d/n%d/k%d/%s/b%d/g%d", batch, n, k, dtype, bits, group)
}

// jsonKind words a Go type of a decoding error as what JSON should have
// held there.
func jsonKind(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64, reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Slice, reflect.Array:
		return "a list"
	case reflect.Map, reflect.Struct, reflect.Pointer:
		return "an object"
	}
	return t.String()
}

// Limits of a throughput record: cases, samples per side of a case.
const (
	MaxThroughputCases   = 512
	MaxThroughputSamples = 1000
)

// ThroughputOf returns the throughput measurements in e's details, or nil
// when it carries none. It fails when the member is there but malformed
// (see Throughput.Validate).
func ThroughputOf(e *Evidence) (*Throughput, error) {
	if len(e.Details) == 0 {
		return nil, nil
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(e.Details, &top); err != nil {
		return nil, decodeError("details", err)
	}
	// encoding/json would match any letter case and keep the last match;
	// a reader matching exactly could then see another member than the
	// one checked here, so the member has one spelling, once.
	name, n := "", 0
	for k := range top {
		if strings.EqualFold(k, ThroughputField) {
			name, n = k, n+1
		}
	}
	switch {
	case n == 0:
		return nil, nil
	case n > 1 || name != ThroughputField:
		return nil, FieldError("details."+Clip(name), "the throughput member must be spelled %q, once", ThroughputField)
	}
	raw := top[ThroughputField]
	if string(raw) == "null" {
		return nil, nil
	}
	var t Throughput
	if err := json.Unmarshal(raw, &t); err != nil {
		return nil, decodeError("details.throughput", err)
	}
	if err := t.Validate(); err != nil {
		return nil, err
	}
	return &t, nil
}

// decodeError is a decoding error of the JSON at field f as a field error:
// a value of the wrong type names its field and what was expected.
func decodeError(f string, err error) error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		if te.Field != "" {
			f += "." + te.Field
		}
		return FieldError(f, "expected %s, got %s", jsonKind(te.Type), te.Value)
	}
	return FieldError(f, "%v", err)
}

// Validate checks the record's shape: a clock and candidate name, a
// confidence in (0, 1), 1..MaxThroughputCases cases with unique ids, each
// with positive shape values, 1..MaxThroughputSamples finite positive
// candidate samples and, with a baseline, as many baseline samples (none
// without). Errors name the field (details.throughput.cases[3].baseline_s).
func (t *Throughput) Validate() error {
	const f = "details.throughput"
	if t.Clock == "" || len(t.Clock) > 64 {
		return FieldError(f+".clock", "required, at most 64 characters")
	}
	if t.Candidate == "" || len(t.Candidate) > 128 {
		return FieldError(f+".candidate", "required, at most 128 characters")
	}
	if t.Baseline != nil && (t.Baseline.Name == "" || len(t.Baseline.Name) > 128) {
		return FieldError(f+".baseline.name", "required, at most 128 characters")
	}
	if t.Baseline != nil && t.Baseline.Name == t.Candidate {
		return FieldError(f+".baseline.name", "is the candidate %q: a throughput record compares two different builds", t.Candidate)
	}
	if !(t.Confidence > 0 && t.Confidence < 1) {
		return FieldError(f+".confidence", "must be in (0, 1), got %v", t.Confidence)
	}
	if len(t.Cases) == 0 || len(t.Cases) > MaxThroughputCases {
		return FieldError(f+".cases", "must hold 1..%d cases, got %d", MaxThroughputCases, len(t.Cases))
	}
	seen := map[string]bool{}
	for i := range t.Cases {
		c := &t.Cases[i]
		cf := fmt.Sprintf("%s.cases[%d]", f, i)
		if c.Batch < 1 || c.N < 1 || c.K < 1 || c.Bits < 1 || c.GroupSize < 1 || c.LaunchesPerSample < 1 {
			return FieldError(cf, "batch, n, k, bits, group_size and launches_per_sample must be positive")
		}
		if !slices.Contains(ThroughputDTypes, c.DType) {
			return FieldError(cf+".dtype", "must be one of %s, got %q", strings.Join(ThroughputDTypes, ", "), Clip(c.DType))
		}
		if want := ThroughputCaseID(c.Batch, c.N, c.K, c.DType, c.Bits, c.GroupSize); c.ID != want {
			return FieldError(cf+".id", "must be %q, the id of the case's own batch, n, k, dtype, bits and group_size", want)
		}
		if seen[c.ID] {
			return FieldError(cf+".id", "case %s appears twice", c.ID)
		}
		seen[c.ID] = true
		if o := c.Output; !(o.RelL2 >= 0) || !(o.Tolerance > 0) || o.Values < 1 || o.BitExact < 0 || o.BitExact > o.Values ||
			(o.BaselineRelL2 != nil && !(*o.BaselineRelL2 >= 0)) {
			return FieldError(cf+".output", "rel_l2 >= 0, tolerance > 0 and 0 <= bit_exact <= values (values >= 1) are required")
		}
		if err := checkSamples(cf+".candidate_s", c.CandidateS); err != nil {
			return err
		}
		if err := checkInterval(cf+".candidate_median", &c.CandidateMedian); err != nil {
			return err
		}
		if err := checkInterval(cf+".baseline_median", c.BaselineMedian); err != nil {
			return err
		}
		if err := checkInterval(cf+".ratio", c.Ratio); err != nil {
			return err
		}
		switch {
		case t.Baseline == nil && len(c.BaselineS) > 0:
			return FieldError(cf+".baseline_s", "samples of a baseline the record does not name")
		case t.Baseline != nil && len(c.BaselineS) != len(c.CandidateS):
			return FieldError(cf+".baseline_s", "%d samples, want %d (paired with candidate_s)", len(c.BaselineS), len(c.CandidateS))
		case t.Baseline != nil:
			if err := checkSamples(cf+".baseline_s", c.BaselineS); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkInterval checks a recorded interval (nil: absent): finite,
// non-negative, Low <= Estimate <= High.
func checkInterval(f string, iv *Interval) error {
	if iv == nil {
		return nil
	}
	finite := func(x float64) bool { return x >= 0 && x <= math.MaxFloat64 }
	if !finite(iv.Low) || !finite(iv.Estimate) || !finite(iv.High) || iv.Low > iv.Estimate || iv.Estimate > iv.High {
		return FieldError(f, "must be finite and non-negative with low <= estimate <= high, got [%v, %v, %v]", iv.Low, iv.Estimate, iv.High)
	}
	return nil
}

func checkSamples(f string, xs []float64) error {
	if len(xs) == 0 || len(xs) > MaxThroughputSamples {
		return FieldError(f, "must hold 1..%d samples, got %d", MaxThroughputSamples, len(xs))
	}
	for j, x := range xs {
		if !ValidSampleSeconds(x) {
			return FieldError(fmt.Sprintf("%s[%d]", f, j), "must be a time per product of %g..%g seconds, got %v", MinSampleSeconds, MaxSampleSeconds, x)
		}
	}
	return nil
}

// The range of one sample, in seconds per product: a picosecond (below
// any clock a lane uses) to 10,000 s. Bounded both ways, every ratio of
// two samples and every interval of them is a finite number.
const (
	MinSampleSeconds = 1e-12
	MaxSampleSeconds = 1e4
)

// ValidSampleSeconds reports whether x is a sample a throughput record may
// carry: MinSampleSeconds <= x <= MaxSampleSeconds (so not NaN).
func ValidSampleSeconds(x float64) bool {
	return x >= MinSampleSeconds && x <= MaxSampleSeconds
}

// CheckThroughputDetails checks the throughput member of evidence
// details d when there is one (ThroughputOf's checks): a record whose
// samples or shape are malformed is refused on admission, naming the
// field, rather than appended and set aside by every gate.
func CheckThroughputDetails(d []byte) error {
	_, err := throughputOfDetails(d)
	return err
}

// throughputOfDetails is ThroughputOf over details d, skipping the decode
// where d cannot hold the member: encoding/json matches member names
// case-insensitively and after unescaping, so details are skipped only
// when "throughput" is in them in no letter case and no \u escape in them
// spells one of its letters.
func throughputOfDetails(d []byte) (*Throughput, error) {
	if !escapesLetterOf(d, "throughput") && !containsFold(d, "throughput") {
		return nil, nil
	}
	return ThroughputOf(&Evidence{Details: d})
}

// checkThroughputEvidence checks e's throughput member (CheckThroughputDetails)
// and that a passed record's every case has its outputs within their
// tolerance (a case beyond it is a mismatch, which a passed record has
// none of).
func checkThroughputEvidence(e *Evidence) error {
	t, err := throughputOfDetails(e.Details)
	if err != nil || t == nil || e.Status != StatusPassed {
		return err
	}
	for i, c := range t.Cases {
		o := c.Output
		if o.RelL2 > o.Tolerance || (o.BaselineRelL2 != nil && !(*o.BaselineRelL2 <= o.Tolerance)) {
			return FieldError(fmt.Sprintf("details.throughput.cases[%d].output", i), "relative L2 error beyond the tolerance %g in a passed record", o.Tolerance)
		}
	}
	return nil
}

// escapesLetterOf reports whether b holds a JSON \uXXXX escape of an
// ASCII letter of the lower-case word w in either case (an escape of '<'
// or 'é' does not count).
func escapesLetterOf(b []byte, w string) bool {
	for i := 0; ; {
		j := bytes.Index(b[i:], []byte(`\u`))
		if j < 0 || i+j+6 > len(b) {
			return false
		}
		i += j + 2
		var r rune
		for _, h := range b[i : i+4] {
			switch {
			case h >= '0' && h <= '9':
				r = r<<4 | rune(h-'0')
			case h|0x20 >= 'a' && h|0x20 <= 'f':
				r = r<<4 | rune(h|0x20-'a'+10)
			default:
				r = -1 << 20
			}
		}
		if r >= 'A' && r <= 'z' && strings.ContainsRune(w, r|0x20) {
			return true
		}
	}
}

// containsFold reports whether b contains the ASCII lower-case word w
// (at least 2 letters) in any letter case, without allocating: it visits
// only the places of w's second letter in either case (bytes.IndexByte).
func containsFold(b []byte, w string) bool {
	for _, c := range []byte{w[1], w[1] &^ 0x20} {
		for i := 1; i < len(b); {
			j := bytes.IndexByte(b[i:], c)
			if j < 0 {
				break
			}
			p := i + j - 1
			if p+len(w) <= len(b) && bytes.EqualFold(b[p:p+len(w)], []byte(w)) {
				return true
			}
			i += j + 1
		}
	}
	return false
}

// MatchCaseGlob reports whether glob g (a path.Match pattern) selects the
// case id: g matches the id or, when g has fewer "/"-separated segments
// than the id, its leading segments ("batch1/n8192" selects every
// "batch1/n8192/..." case). A malformed g matches nothing (check it with
// path.Match(g, "") first). The throughput lanes' --cases and the
// throughput gate's select both use it.
func MatchCaseGlob(g, id string) bool {
	segs := strings.Split(id, "/")
	if n := strings.Count(g, "/") + 1; n < len(segs) {
		id = strings.Join(segs[:n], "/")
	}
	ok, _ := path.Match(g, id)
	return ok
}
