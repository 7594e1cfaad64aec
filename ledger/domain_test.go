package ledger

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestBackends(t *testing.T) {
	all := Backends()
	if len(all) != 4 || all[0] != BackendCPU || all[3] != BackendExternal {
		t.Fatalf("Backends() = %v", all)
	}
	all[0] = "tpu"
	if Backends()[0] != BackendCPU {
		t.Fatal("Backends returns the package's own array")
	}
	for _, b := range Backends() {
		if !b.Valid() {
			t.Errorf("%s not valid", b)
		}
		if !strings.Contains(BackendList(), string(b)) {
			t.Errorf("BackendList %q lacks %s", BackendList(), b)
		}
	}
	for _, b := range []Backend{"", "CPU", "tpu", "cpu "} {
		if b.Valid() {
			t.Errorf("%q valid", b)
		}
	}
	e := Evidence{Lane: "x/v1", Subject: Subject{Repository: "r", Commit: strings.Repeat("a", 40), Tree: strings.Repeat("b", 40)}, Backend: "tpu"}
	if err := e.Validate(); err == nil || !strings.Contains(err.Error(), "backend: must be one of cpu, cuda, metal, external") {
		t.Errorf("Validate with backend tpu: %v", err)
	}
}

func TestDecodeTrajectory(t *testing.T) {
	for _, tc := range []struct {
		details string
		want    *Trajectory // nil: an error naming field
		field   string
	}{
		{`{"trajectory": "g", "mode": "m", "backend": "b", "tokens": [1, 2, 3]}`, &Trajectory{"g", "m", "b", []int64{1, 2, 3}}, ""},
		{`{"trajectory": "g", "tokens": [], "other": {"x": 1}}`, &Trajectory{Name: "g", Tokens: []int64{}}, ""},
		{`{"trajectory": "g", "tokens": [9223372036854775807]}`, &Trajectory{Name: "g", Tokens: []int64{9223372036854775807}}, ""},
		{``, nil, "details"},
		{`{"tokens": [1]}`, nil, "details.trajectory"},
		{`{"trajectory": "", "tokens": [1]}`, nil, "details.trajectory"},
		{`{"trajectory": "g"}`, nil, "details.tokens"},
		{`{"trajectory": "g", "tokens": null}`, nil, "details.tokens"},
		{`{"trajectory": "g", "tokens": ["1"]}`, nil, "details.tokens"},
		{`{"trajectory": "g", "tokens": [1.5]}`, nil, "details.tokens"},
		{`{"trajectory": "g", "tokens": [9223372036854775808]}`, nil, "details.tokens"},
		{`{"trajectory": "g", "mode": 3, "tokens": [1]}`, nil, "details.mode"},
		{`{"trajectory": 7, "tokens": [1]}`, nil, "details.trajectory"},
		{`[1]`, nil, "details"},
	} {
		got, err := DecodeTrajectory(json.RawMessage(tc.details))
		if tc.want == nil {
			var le *Error
			if err == nil || !errors.As(err, &le) || le.Field != tc.field || le.Code != CodeInvalid {
				t.Errorf("%s: err %v; want CodeInvalid naming %s", tc.details, err, tc.field)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tc.details, err)
			continue
		}
		a, _ := json.Marshal(got)
		b, _ := json.Marshal(tc.want)
		if string(a) != string(b) {
			t.Errorf("%s: got %s, want %s", tc.details, a, b)
		}
	}
}

func TestFirstDivergence(t *testing.T) {
	for _, tc := range []struct {
		a, b []int64
		want int
	}{
		{nil, nil, NoDivergence},
		{[]int64{}, nil, NoDivergence},
		{[]int64{1, 2}, []int64{1, 2}, NoDivergence},
		{[]int64{1, 2}, []int64{1, 3}, 1},
		{[]int64{5}, []int64{1, 3}, 0},
		{[]int64{1}, []int64{1, 2}, 1},
		{[]int64{1, 2}, []int64{1}, 1},
		{nil, []int64{1}, 0},
	} {
		if got := FirstDivergence(tc.a, tc.b); got != tc.want {
			t.Errorf("FirstDivergence(%v, %v) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
		if got := FirstDivergence(tc.b, tc.a); got != tc.want {
			t.Errorf("FirstDivergence(%v, %v) = %d, want %d (symmetric)", tc.b, tc.a, got, tc.want)
		}
	}
	if p := TokenAt([]int64{4, 5}, 1); p == nil || *p != 5 {
		t.Errorf("TokenAt(.., 1) = %v", p)
	}
	if TokenAt([]int64{4}, 1) != nil || TokenAt(nil, -1) != nil {
		t.Error("TokenAt past the end is not nil")
	}
}

func TestJudgeTreeEquivalence(t *testing.T) {
	reviewed := strings.Repeat("b2", 20)
	ev := func(details string, st Status) *Evidence {
		return &Evidence{Status: st, Details: json.RawMessage(details)}
	}
	for _, tc := range []struct {
		name    string
		e       *Evidence
		decides bool
		equal   bool
		why     string
	}{
		{"equivalent", ev(`{"reviewed": "`+reviewed+`", "equivalent": true, "outside_pins": []}`, StatusPassed), true, true, ""},
		{"differs", ev(`{"reviewed": "`+reviewed+`", "equivalent": false, "outside_pins": ["src/a.c"]}`, StatusFailed), true, false, ""},
		{"equivalent but outside paths", ev(`{"reviewed": "`+reviewed+`", "equivalent": true, "outside_pins": ["x"]}`, StatusPassed), true, false, ""},
		{"equivalent but failed status", ev(`{"reviewed": "`+reviewed+`", "equivalent": true}`, StatusFailed), true, false, ""},
		{"other reviewed", ev(`{"reviewed": "`+strings.Repeat("e5", 20)+`", "equivalent": true}`, StatusPassed), false, false, "compares against e5e5e5e5e5e5"},
		{"error status", ev(`{"reviewed": "`+reviewed+`", "equivalent": true}`, StatusError), false, false, "status error"},
		{"inconclusive", ev(`{"reviewed": "`+reviewed+`", "equivalent": true}`, StatusInconclusive), false, false, "status inconclusive"},
		{"no equivalent", ev(`{"reviewed": "`+reviewed+`"}`, StatusPassed), false, false, "details lack"},
		{"no reviewed", ev(`{"equivalent": true}`, StatusPassed), false, false, "details lack"},
		{"no details", ev(``, StatusPassed), false, false, "details lack"},
	} {
		f := JudgeTreeEquivalence(tc.e, reviewed)
		if f.Decides != tc.decides || f.Equal != tc.equal || !strings.Contains(f.Why, tc.why) {
			t.Errorf("%s: %+v; want decides %v equal %v why %q", tc.name, f, tc.decides, tc.equal, tc.why)
		}
	}
}

func TestTreeEquivalenceEvidence(t *testing.T) {
	reviewed := strings.Repeat("b2", 20)
	subj := Subject{Repository: "example/core", Commit: strings.Repeat("a1", 20), Tree: strings.Repeat("c3", 20)}
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.FixedZone("x", 3600))
	for _, equal := range []bool{true, false} {
		te := TreeEquivalence{Reviewed: reviewed, Equivalent: &equal, Pins: []string{"Package.resolved"}, Differences: 2}
		if !equal {
			te.OutsidePins = []string{"src/a.c"}
		}
		e, err := te.Evidence(subj, RunnerBuild{Version: "t"}, start, start.Add(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if err := e.Validate(); err != nil {
			t.Fatalf("equal=%v: the evidence does not validate: %v", equal, err)
		}
		if e.Lane != TreeEquivalenceLane || e.Backend != BackendExternal || e.StartedAt.Location() != time.UTC {
			t.Errorf("equal=%v: lane %s backend %s start %v", equal, e.Lane, e.Backend, e.StartedAt)
		}
		f := JudgeTreeEquivalence(&e, reviewed)
		if !f.Decides || f.Equal != equal {
			t.Errorf("equal=%v: the record it builds judges as %+v", equal, f)
		}
		if !strings.Contains(string(e.Details), `"outside_pins":[`) {
			t.Errorf("equal=%v: details %s lack an outside_pins array", equal, e.Details)
		}
	}
}

func TestTreeEquivalenceBindingMismatch(t *testing.T) {
	at := TreeEquivalence{Pins: []string{"src/*", "go.sum"}, Release: "2.0", Component: "core"}
	for _, c := range []struct {
		name               string
		te                 TreeEquivalence
		release, component string
		pins               []string
		want               string
	}{
		{"same pins in another order, repeated", at, "2.0", "core", []string{"go.sum", "src/*", "go.sum"}, ""},
		{"narrower pins", at, "2.0", "core", []string{"go.sum"}, "computed at pins [go.sum src/*]; release 2.0 pins core at [go.sum]"},
		{"no pins now", at, "2.0", "core", nil, "computed at pins [go.sum src/*]; release 2.0 pins core at []"},
		{"computed without pins", TreeEquivalence{}, "2.0", "core", []string{"go.sum"}, "computed at pins []; release 2.0 pins core at [go.sum]"},
		{"nil and empty alike", TreeEquivalence{Pins: []string{}}, "2.0", "core", nil, ""},
		{"another release", at, "2.1", "core", []string{"go.sum", "src/*"}, "computed for release 2.0, not 2.1"},
		{"another component", at, "2.0", "app", []string{"go.sum", "src/*"}, "computed for component core, not app of release 2.0"},
		{"record naming no release or component", TreeEquivalence{Pins: []string{"go.sum"}}, "2.1", "app", []string{"go.sum"}, ""},
	} {
		if got := c.te.BindingMismatch(c.release, c.component, c.pins); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}
