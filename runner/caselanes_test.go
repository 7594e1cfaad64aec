package runner_test

import (
	"slices"
	"testing"

	"github.com/evidence-ledger/ledger/internal/stats"
	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/runner"
)

// TestCaseLanes: the lanes a server checks a queued run's case selection
// against are the lanes that select cases, each with its full case list,
// and the vocabulary's sample floor is the statistics'.
func TestCaseLanes(t *testing.T) {
	cl := runner.CaseLanes()
	ids, ok := cl[runner.ThroughputLane]
	if len(cl) != 1 || !ok || len(ids) != len(runner.ThroughputCases()) || len(ids) != 162 {
		t.Fatalf("CaseLanes = %d lanes, %s with %d ids", len(cl), runner.ThroughputLane, len(ids))
	}
	for _, c := range runner.ThroughputCases() {
		if !slices.Contains(ids, c.ID) {
			t.Fatalf("case %s is not listed", c.ID)
		}
	}
	if ledger.MinThroughputSamples != stats.MinSamples {
		t.Fatalf("ledger.MinThroughputSamples %d != stats.MinSamples %d", ledger.MinThroughputSamples, stats.MinSamples)
	}
}
