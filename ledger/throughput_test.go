package ledger

import (
	"math"
	"strings"
	"testing"
)

// TestValidSampleSeconds: a sample is a time per product of 1 ps to
// 10,000 s, so every ratio of two samples is finite.
func TestValidSampleSeconds(t *testing.T) {
	for _, x := range []float64{1e-12, 18.6e-6, 1, 1e4} {
		if !ValidSampleSeconds(x) {
			t.Errorf("%v refused", x)
		}
	}
	for _, x := range []float64{0, -1, 5e-324, 1e-13, 1e4 + 1, 1e308, math.Inf(1), math.NaN()} {
		if ValidSampleSeconds(x) {
			t.Errorf("%v accepted", x)
		}
	}
	if r := MaxSampleSeconds / MinSampleSeconds; math.IsInf(r, 0) {
		t.Fatal("the extreme ratio overflows")
	}
	if err := CheckThroughputDetails([]byte(`{"cases":[]}`)); err != nil {
		t.Fatalf("details without throughput: %v", err)
	}
	err := CheckThroughputDetails([]byte(`{"throughput":{"clock":"c","candidate":"p","confidence":0.95,"cases":[{"id":"batch1/n1/k1/f16/b4/g64","batch":1,"n":1,"k":1,"dtype":"f16","bits":4,"group_size":64,"launches_per_sample":1,"candidate_s":[1e300],"output":{"rel_l2":0,"tolerance":0.02,"bit_exact":1,"values":1}}]}}`))
	if e, ok := err.(*Error); !ok || e.Field != "details.throughput.cases[0].candidate_s[0]" {
		t.Fatalf("1e300 s: %v; want refused naming the sample", err)
	}
}

// TestThroughputAdmission: the throughput member is found however its
// name is spelled (letter case, \u escapes), a value of the wrong JSON
// type is a field error, a case id must be its own fields' id and appear
// once, the candidate and baseline differ, and a passed record has every
// output within tolerance.
func TestThroughputAdmission(t *testing.T) {
	const okCase = `{"id":"batch1/n4096/k4096/f32/b4/g64","batch":1,"n":4096,"k":4096,"dtype":"f32","bits":4,"group_size":64,"launches_per_sample":1,"candidate_s":[1e-5,1e-5,1e-5,1e-5,1e-5,1e-5],"baseline_s":[1e-5,1e-5,1e-5,1e-5,1e-5,1e-5],"output":{"rel_l2":1e-7,"tolerance":0.001,"bit_exact":4096,"values":4096}}`
	tp := func(name, cases string) []byte {
		return []byte(`{"` + name + `":{"clock":"c","candidate":"promoted","baseline":{"name":"narrow"},"confidence":0.95,"cases":[` + cases + `]}}`)
	}
	if err := CheckThroughputDetails(tp("throughput", okCase)); err != nil {
		t.Fatalf("a well-formed record: %v", err)
	}
	bad := strings.Replace(okCase, `"candidate_s":[1e-5,`, `"candidate_s":[-1,`, 1)
	for _, name := range []string{"throughput", `\u0074hroughput`} {
		err := CheckThroughputDetails(tp(name, bad))
		if e, ok := err.(*Error); !ok || e.Field != "details.throughput.cases[0].candidate_s[0]" {
			t.Errorf("member %s with a negative sample: %v; want refused naming the sample", name, err)
		}
	}
	for _, tc := range []struct{ old, new, field string }{
		{`"candidate_s":[1e-5,`, `"candidate_s":["1e-5",`, "details.throughput.cases.candidate_s"},
		{`"batch":1`, `"batch":"1"`, "details.throughput.cases.batch"},
		{`"id":"batch1/n4096/k4096/f32/b4/g64"`, `"id":"batch1/n4096/k4096/f32/b4/g64/copy1"`, "details.throughput.cases[0].id"},
		{`"dtype":"f32"`, `"dtype":"float32"`, "details.throughput.cases[0].dtype"},
		{`"values":4096}`, `"values":0}`, "details.throughput.cases[0].output"},
		{`"output":`, `"ratio":{"estimate":1,"low":1.2,"high":1.1},"output":`, "details.throughput.cases[0].ratio"},
	} {
		err := CheckThroughputDetails(tp("throughput", strings.Replace(okCase, tc.old, tc.new, 1)))
		if e, ok := err.(*Error); !ok || e.Field != tc.field {
			t.Errorf("%s: %v; want refused naming %s", tc.new, err, tc.field)
		}
	}
	// The member in another letter case, alone or beside a valid one, is
	// refused: a reader matching names exactly would see other data.
	for _, d := range []string{
		`{"Throughput":{"clock":"c"},"throughput":` + string(tp("x", okCase))[5:len(tp("x", okCase))-1] + `}`,
		string(tp("THROUGHPUT", okCase)),
	} {
		if err := CheckThroughputDetails([]byte(d)); err == nil || !strings.Contains(err.Error(), `must be spelled "throughput", once`) {
			t.Errorf("%.60s: %v; want refused", d, err)
		}
	}
	if err := CheckThroughputDetails(tp("throughput", okCase+","+okCase)); err == nil || !strings.Contains(err.Error(), "appears twice") {
		t.Errorf("a case twice: %v", err)
	}
	same := []byte(strings.Replace(string(tp("throughput", okCase)), `"candidate":"promoted"`, `"candidate":"narrow"`, 1))
	if err := CheckThroughputDetails(same); err == nil || !strings.Contains(err.Error(), "baseline.name") {
		t.Errorf("candidate = baseline: %v", err)
	}
	// A passed record with an output beyond its tolerance is refused; a
	// failed one carries it.
	off := tp("throughput", strings.Replace(okCase, `"rel_l2":1e-7`, `"rel_l2":0.9`, 1))
	e := &Evidence{Status: StatusPassed, Details: off}
	if err := checkThroughputEvidence(e); err == nil || !strings.Contains(err.Error(), "tolerance") {
		t.Errorf("passed with an output beyond tolerance: %v", err)
	}
	e.Status = StatusFailed
	if err := checkThroughputEvidence(e); err != nil {
		t.Errorf("failed with an output beyond tolerance: %v", err)
	}
}

// TestContainsFold: the word is found in any letter case and position,
// and not where it is absent or cut short.
func TestContainsFold(t *testing.T) {
	for in, want := range map[string]bool{
		"throughput": true, `{"THROUGHPUT":1}`: true, "xxtHrOuGhPuTxx": true, "hthroughput": true,
		"": false, "t": false, "throughpu": false, "hroughput": false, "the through put": false, `{"cases":[]}`: false,
	} {
		if got := containsFold([]byte(in), "throughput"); got != want {
			t.Errorf("containsFold(%q) = %v, want %v", in, got, want)
		}
	}
}

// TestEscapesLetterOf: an escape of a letter of the word counts in either
// case; escapes of other characters (the '<' json.Marshal escapes) do not.
func TestEscapesLetterOf(t *testing.T) {
	for in, want := range map[string]bool{
		`{"\u0074hroughput":1}`: true, `{"THROUG\u0048PUT":1}`: true, `\u0050`: true,
		`{"m":"a \u003cb\u003e"}`: false, `\u00e9`: false, `\u007`: false, `\u`: false, `\uzzzz`: false, `plain`: false,
	} {
		if got := escapesLetterOf([]byte(in), "throughput"); got != want {
			t.Errorf("escapesLetterOf(%q) = %v, want %v", in, got, want)
		}
	}
}
