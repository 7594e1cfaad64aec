package web

import (
	"errors"
	"strings"
	"testing"

	"github.com/evidence-ledger/ledger/ledger"
)

// TestStageBookkeeping: one record per lane and attempt (a lane staged
// again replaces its record and its bytes), take names the first digest
// not held, drop forgets a run's sets and their bytes, and a staging past
// maxStagedBytes is refused with nothing changed.
func TestStageBookkeeping(t *testing.T) {
	var st stage
	k1 := stageKey{run: "run_a", attempt: 1, lease: "lease_1"}
	k2 := stageKey{run: "run_a", attempt: 2, lease: "lease_2"}
	rec := func(lane string, n int) laneRecord {
		return laneRecord{rec: ledger.Record{Kind: ledger.KindEvidence, Body: []byte(strings.Repeat("x", n))}, id: lane + "-id", lane: lane}
	}
	if err := st.put(k1, "sha256:01", rec("qmv-bias-sum/v1", 100)); err != nil {
		t.Fatal(err)
	}
	if err := st.put(k1, "sha256:02", rec("qmv-bias-sum/v1", 40)); err != nil {
		t.Fatal(err)
	}
	if st.bytes != 40 {
		t.Fatalf("bytes %d after a lane was staged again, want 40", st.bytes)
	}
	if _, err := st.take(k1, []string{"sha256:01"}); !isStaged(err, "staged[0]") {
		t.Fatalf("take of a replaced digest: %v, want 409 naming staged[0]", err)
	}
	if err := st.put(k2, "sha256:03", rec("alloc-footprint/v1", 10)); err != nil {
		t.Fatal(err)
	}
	// Another attempt's lease does not reach attempt 1's records.
	if _, err := st.take(k2, []string{"sha256:03", "sha256:02"}); !isStaged(err, "staged[1]") {
		t.Fatalf("take across attempts: %v, want 409 naming staged[1]", err)
	}
	got, err := st.take(k1, []string{"sha256:02"})
	if err != nil || len(got) != 1 || got[0].id != "qmv-bias-sum/v1-id" {
		t.Fatalf("take: %+v %v", got, err)
	}
	st.drop("run_a", func(k stageKey) bool { return k == k2 })
	if _, err := st.take(k1, []string{"sha256:02"}); err == nil || st.bytes != 10 {
		t.Fatalf("after dropping attempt 1: %v, bytes %d (want 10)", err, st.bytes)
	}
	st.drop("run_a", nil)
	if len(st.keys()) != 0 || st.bytes != 0 {
		t.Fatalf("after dropping the run: %d sets, %d bytes", len(st.keys()), st.bytes)
	}
	// The bound.
	if err := st.put(k1, "sha256:04", rec("qmv-bias-sum/v1", maxStagedBytes-5)); err != nil {
		t.Fatal(err)
	}
	err = st.put(k2, "sha256:05", rec("alloc-footprint/v1", 10))
	var le *ledger.Error
	if !errors.As(err, &le) || le.Code != ledger.CodeConflict || st.bytes != maxStagedBytes-5 || len(st.keys()) != 1 {
		t.Fatalf("a staging past the bound: %v, bytes %d, %d sets", err, st.bytes, len(st.keys()))
	}
	// Replacing a lane's record counts only the difference.
	if err := st.put(k1, "sha256:06", rec("qmv-bias-sum/v1", maxStagedBytes)); err != nil || st.bytes != maxStagedBytes {
		t.Fatalf("replacing within the bound: %v, bytes %d", err, st.bytes)
	}
}

func isStaged(err error, field string) bool {
	var le *ledger.Error
	return errors.As(err, &le) && le.Code == ledger.CodeConflict && le.Field == field
}

// TestNotifierWakesEveryWaiter: every channel handed out before wakeAll
// is closed by it; one handed out after waits for the next.
func TestNotifierWakesEveryWaiter(t *testing.T) {
	var n notifier
	a, b := n.woken(), n.woken()
	n.wakeAll()
	for i, ch := range []<-chan struct{}{a, b} {
		select {
		case <-ch:
		default:
			t.Fatalf("waiter %d not woken", i)
		}
	}
	c := n.woken()
	select {
	case <-c:
		t.Fatal("a waiter after the wake-up was woken by it")
	default:
	}
	n.wakeAll()
	<-c
}
