package main

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"
)

// TestRunThroughputFlags: the case flags are refused, naming the flag,
// where no selected lane selects cases and out of range (with --remote
// too, which carries them);
// --list marks the throughput lane on request; one CPU case runs, and the
// text table says its convergence and speed ratio.
func TestRunThroughputFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--cases", "batch1/*"}, "--cases applies only to lanes that select cases"},
		{[]string{"--lane", "alloc-footprint", "--max-samples", "50"}, "--max-samples applies only to lanes that select cases"},
		{[]string{"--lane", "qmv-througput", "--cases", "batch1/*"}, `--lane: unknown lane "qmv-througput"`},
		{[]string{"--lane", "qmv-throughput", "--cases", "batch7/*"}, `--cases: case globs ["batch7/*"] match none`},
		{[]string{"--lane", "qmv-throughput", "--max-samples", "1001"}, "--max-samples 1001: must be 6..1000"},
		{[]string{"--lane", "qmv-throughput", "--max-samples", "1"}, "--max-samples 1: must be 6..1000"},
		{[]string{"--lane", "qmv-throughput", "--cases", "batch1/n4096,nosuch"}, `"nosuch" matches none`},
		{[]string{"--lane", "qmv-throughput", "--cases", ""}, "--cases: an empty glob"},
		{[]string{"--lane", "qmv-throughput", "--case-budget", "0s"}, "--case-budget 0s: must be positive"},
		{[]string{"--lane", "qmv-throughput", "--case-budget", "soon"}, `"soon" is not a duration`},
		// --remote carries the case flags: they are refused only where no
		// selected lane selects cases or out of range, and otherwise pass
		// on to the queueing (here refused for --no-record, after them).
		{[]string{"--remote", "--cases", "batch1/*"}, "--cases applies only to lanes that select cases"},
		{[]string{"--remote", "--lane", "alloc-footprint", "--max-samples", "50"}, "--max-samples applies only to lanes that select cases"},
		{[]string{"--lane", "qmv-throughput", "--remote", "--cases", "batch7/*"}, `--cases: case globs ["batch7/*"] match none`},
		{[]string{"--lane", "qmv-throughput", "--remote", "--case-budget", "11m"}, "--case-budget 11m0s: at most 10m0s per case"},
		{[]string{"--lane", "qmv-throughput", "--case-budget", "1000000h"}, "--case-budget 1000000h0m0s: at most 10m0s per case"},
		{[]string{"--lane", "qmv-throughput", "--remote", "--cases", "batch1/*", "--case-budget", "1s", "--max-samples", "20"}, "--remote runs the agent's own lanes: --impl, --no-record and --sign-key do not apply"},
	} {
		_, se, code := runBin(t, "", append([]string{"run", "--no-record"}, tc.args...)...)
		if code != 2 || !strings.Contains(se, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 with %q", tc.args, code, se, tc.want)
		}
	}
	so, _, code := runBin(t, "", "run", "--list")
	if code != 0 || !strings.Contains(so, "qmv-throughput/v1") || strings.Count(so, "on request") != 1 {
		t.Fatalf("--list: exit %d\n%s", code, so)
	}
	if testing.Short() {
		return
	}
	so, se, code := runBin(t, "", "--json", "run", "--no-record", "--repo-path", "../..", "--lane", "qmv-throughput",
		"--cases", "batch1/n4096/k4096/f16/b4", "--case-budget", "1s", "--max-samples", "60")
	var out struct {
		Evidence []struct {
			Status  string          `json:"status"`
			Lane    string          `json:"lane"`
			Details json.RawMessage `json:"details"`
		} `json:"evidence"`
	}
	if err := json.Unmarshal([]byte(so), &out); err != nil || len(out.Evidence) != 1 || out.Evidence[0].Lane != "qmv-throughput/v1" {
		t.Fatalf("exit %d: %v\n%s\n%s", code, err, so, se)
	}
	var det struct {
		Throughput struct {
			Cases []struct {
				ID         string    `json:"id"`
				CandidateS []float64 `json:"candidate_s"`
			} `json:"cases"`
		} `json:"throughput"`
	}
	if err := json.Unmarshal(out.Evidence[0].Details, &det); err != nil || len(det.Throughput.Cases) != 1 ||
		det.Throughput.Cases[0].ID != "batch1/n4096/k4096/f16/b4/g64" || len(det.Throughput.Cases[0].CandidateS) > 60 {
		t.Fatalf("details: %v %s", err, out.Evidence[0].Details)
	}
	so, se, code = runBin(t, "", "run", "--no-record", "--repo-path", "../..", "--lane", "qmv-throughput",
		"--cases", "batch1/n4096/k4096/f32/b4", "--case-budget", "1s")
	// Exit 1 is a run whose control was not caught on a loaded machine;
	// the summary line is printed either way.
	if code > 1 || !regexp.MustCompile(`qmv-throughput/v1: [01]/1 cases within 1 % \(monotonic clock\); lowest speed ratio promoted vs narrow [0-9.]+ \[[0-9.]+, [0-9.]+\] at batch1/n4096/k4096/f32/b4/g64 \([0-9.e+]+ µs vs [0-9.e+]+ µs per product\)`).MatchString(so) {
		t.Fatalf("text run: exit %d\n%s\n%s", code, so, se)
	}
}

// TestEvidenceShowThroughput: `ledger evidence show`'s text for a
// throughput record (the committed GPU run's) gives the summary, a line
// per case with both medians and the ratio interval, and the device state.
func TestEvidenceShowThroughput(t *testing.T) {
	run := throughputRun(t)
	if len(run) == 0 {
		t.Skipf("%s is absent", throughputRunFile)
	}
	var b strings.Builder
	printThroughputCases(&b, &run[0])
	out := b.String()
	for _, want := range []string{
		"throughput: 27/27 cases within 1 % (cuda-events clock); lowest speed ratio promoted vs narrow",
		"CASE", "promoted µs", "narrow µs", "SPEED RATIO [95 % interval]",
		"device state:", "before.qmv.batch_kernel: x4 kernel",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
	if !regexp.MustCompile(`(?m)^  batch1/n8192/k8192/f16/b4/g64 +[0-9.]+ +[0-9.]+ +[0-9.]+ \[[0-9.]+, [0-9.]+\] +10 +true$`).MatchString(out) {
		t.Errorf("no B1 8192² f16 line in:\n%s", out)
	}
}
