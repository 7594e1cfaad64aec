package ledger

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// PrepareRecords over many records (spread over goroutines) gives what one
// goroutine gives, and the first invalid record's error.
func TestPrepareRecordsParallel(t *testing.T) {
	n := 2*prepareParallelMin + 5
	recs := make([]Record, n)
	for i := range recs {
		recs[i] = Record{Kind: KindEvidence, Body: benchEvidenceBody(i)}
	}
	got, err := PrepareRecords(recs)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range recs {
		want, err := PrepareOne(r)
		if err != nil || got[i].ID != want.ID || string(got[i].Body) != string(want.Body) {
			t.Fatalf("record %d: %s vs %s (%v)", i, got[i].ID, want.ID, err)
		}
	}
	bad := func(i int) { recs[i] = Record{Kind: KindEvidence, Body: []byte(`{"lane":"x"}`)} }
	bad(n - 3)
	bad(prepareParallelMin + 7)
	_, err = PrepareRecords(recs)
	var le *Error
	if !errors.As(err, &le) || !strings.HasPrefix(le.Field, fmt.Sprintf("[%d]", prepareParallelMin+7)) {
		t.Fatalf("error %v; want the record at %d named", err, prepareParallelMin+7)
	}
}
