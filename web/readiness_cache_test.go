package web

import (
	"context"
	"encoding/json"
	"sync"
	"testing"

	"github.com/evidence-ledger/ledger/ledger"
)

// Concurrent readiness readers at one checkpoint share verdicts (all at
// that checkpoint); an append (a new checkpoint) is seen by the next
// reader at once, by the API and the release page alike.
func TestReadinessCacheFollowsCheckpoint(t *testing.T) {
	st := pgStore(t)
	pgSeed(t, st)
	pgRelease(t, st, pgReleaseYAML)
	s := pgServer(t, st)
	size := func() uint64 {
		code, body := pgGet(t, s, "/api/v1/releases/0.32.1/readiness")
		if code != 200 {
			t.Errorf("readiness: %d %s", code, body)
			return 0
		}
		var v struct {
			Readiness struct {
				Checkpoint struct {
					Size uint64 `json:"size"`
				} `json:"checkpoint"`
			} `json:"readiness"`
		}
		if err := json.Unmarshal([]byte(body), &v); err != nil {
			t.Error(err)
		}
		return v.Readiness.Checkpoint.Size
	}
	before := size()
	if before == 0 {
		t.Fatal("the fixture log is empty")
	}
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if got := size(); got != before {
				t.Errorf("concurrent reader at size %d, want %d", got, before)
			}
		}()
	}
	wg.Wait()
	b, _ := json.Marshal(testEvidence(77))
	if _, err := st.Append(context.Background(), []ledger.Record{{Kind: ledger.KindEvidence, Body: b}}, ""); err != nil {
		t.Fatal(err)
	}
	if got := size(); got != before+1 {
		t.Fatalf("readiness after an append names checkpoint %d, want %d: a cached verdict hid the append", got, before+1)
	}
}
