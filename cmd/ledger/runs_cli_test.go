package main

import (
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestRemoteRunLaneResultsAndNoAgentWarning: `ledger run --remote` prints
// each lane's result as its evidence arrives and next to the evidence id
// at the end, as `ledger runs show` does; a run whose labels no approved
// agent has gets a warning instead of waiting silently.
func TestRemoteRunLaneResultsAndNoAgentWarning(t *testing.T) {
	e := newAgentEnv(t)
	e.agent("host-b", true, "--label", "gpu=h200")
	out, se, code := runBin(t, "", "--server", e.url, "--token", e.runTok, "run", "--remote", "--backend", "cpu", "--lane", quickLane, "--label", "gpu=h200")
	laneLine := regexp.MustCompile(`lane ` + regexp.QuoteMeta(quickLane) + `: (passed|failed|inconclusive|error), cases \d+/\d+ exact`)
	if code != 0 || !laneLine.MatchString(se) || !laneLine.MatchString(out) || strings.Contains(se, "warning:") {
		t.Fatalf("run --remote: exit %d\nstdout %s\nstderr %s", code, out, se)
	}
	m := regexp.MustCompile(`queued run (run_[0-9a-f]+)`).FindStringSubmatch(se)
	if m == nil {
		t.Fatalf("no run id in %s", se)
	}
	show, se, code := runBin(t, "", "--server", e.url, "--token", e.admin, "runs", "show", m[1])
	if code != 0 || !regexp.MustCompile(`evidence [0-9a-f]+  `+laneLine.String()).MatchString(show) {
		t.Fatalf("runs show: exit %d\n%s%s", code, show, se)
	}

	cmd := exec.Command(ledgerBin, "--server", e.url, "--token", e.runTok, "run", "--remote", "--backend", "cpu", "--lane", quickLane, "--label", "gpu=mi300")
	var so, serr lockedBuffer
	cmd.Stdout, cmd.Stderr = &so, &serr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	e.waitFor(30*time.Second, "the no-agent warning", func() bool {
		return strings.Contains(serr.String(), "warning: no approved agent matches run run_") && strings.Contains(serr.String(), "labels gpu=mi300")
	})
}
