package sqlite

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/evidence-ledger/ledger/ledger"
)

// prepareAll over many records (spread over goroutines) gives what one
// goroutine gives, and the first invalid record's error.
func TestPrepareAllParallel(t *testing.T) {
	n := 2*prepareParallelMin + 5
	recs := make([]ledger.Record, n)
	for i := range recs {
		recs[i] = evRecord(t, sampleEvidence(i))
	}
	got, err := prepareAll(recs)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range recs {
		want, err := prepare(r)
		if err != nil || got[i].id != want.id || string(got[i].body) != string(want.body) {
			t.Fatalf("record %d: %s vs %s (%v)", i, got[i].id, want.id, err)
		}
	}
	bad := func(i int) { recs[i] = ledger.Record{Kind: ledger.KindEvidence, Body: []byte(`{"lane":"x"}`)} }
	bad(n - 3)
	bad(prepareParallelMin + 7)
	_, err = prepareAll(recs)
	var le *ledger.Error
	if !errors.As(err, &le) || !strings.HasPrefix(le.Field, fmt.Sprintf("[%d]", prepareParallelMin+7)) {
		t.Fatalf("error %v; want the record at %d named", err, prepareParallelMin+7)
	}
}
