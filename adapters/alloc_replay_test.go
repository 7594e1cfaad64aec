package adapters_test

import (
	"bufio"
	"compress/gzip"
	"context"
	"encoding/json"
	"io"
	"os"
	"testing"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/runner"
)

// readExchanges reads an allocator adapter's LEDGER_ALLOC_DUMP record
// (gzip when the name ends in .gz) and splits it into sessions, one per
// lane run (each opens with an info request).
func readExchanges(t *testing.T, path string) [][]runner.AllocExchange {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var r io.Reader = f
	if len(path) > 3 && path[len(path)-3:] == ".gz" {
		if r, err = gzip.NewReader(f); err != nil {
			t.Fatal(err)
		}
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	var out [][]runner.AllocExchange
	for sc.Scan() {
		var x runner.AllocExchange
		if err := json.Unmarshal(sc.Bytes(), &x); err != nil {
			t.Fatal(err)
		}
		var op struct{ Op string }
		_ = json.Unmarshal(x.Request, &op)
		if op.Op == "info" {
			out = append(out, nil)
		}
		if len(out) == 0 {
			t.Fatal("record does not open with an info request")
		}
		out[len(out)-1] = append(out[len(out)-1], x)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// checkReplay re-derives a lane's verdict from the recorded exchanges and
// compares it with the evidence recorded from the live run.
func checkReplay(t *testing.T, ev ledger.Evidence, rec []runner.AllocExchange) {
	t.Helper()
	res, err := runner.ReplayAllocLane(context.Background(), ev.Lane, rec)
	if err != nil {
		t.Fatalf("%s: replay: %v", ev.Lane, err)
	}
	if st := runner.Verdict(res, nil); st != ev.Status || res.Exact != ev.CasesExact || res.Total != ev.CasesTotal || res.Control.Outcome != ev.Control {
		t.Errorf("%s: re-derived %s %d/%d control %s; recorded %s %d/%d control %s",
			ev.Lane, st, res.Exact, res.Total, res.Control.Outcome, ev.Status, ev.CasesExact, ev.CasesTotal, ev.Control)
	}
}
