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

// A Record made by Prepared.Record is taken as prepared only while it is
// the Record PrepareOne made: a hand-built Prepared, or a Record whose
// body or kind was changed afterwards, is prepared (and refused) anew.
func TestPreparedRecordReuse(t *testing.T) {
	p, err := PrepareOne(Record{Kind: KindEvidence, Body: benchEvidenceBody(1)})
	if err != nil {
		t.Fatal(err)
	}
	got, err := PrepareOne(p.Record())
	if err != nil || got.ID != p.ID || got.Evidence != p.Evidence {
		t.Fatalf("sealed record not reused: %v %v", got.ID, err)
	}
	bad := []byte(`{"lane":"x"}`)
	forged := Prepared{Kind: KindEvidence, Body: bad, ID: p.ID, Evidence: p.Evidence}
	if _, err := PrepareOne(forged.Record()); ErrorCode(err) != CodeInvalid {
		t.Fatalf("a hand-built Prepared was not prepared anew: %v", err)
	}
	swapped := p.Record()
	swapped.Body = bad
	if _, err := PrepareOne(swapped); ErrorCode(err) != CodeInvalid {
		t.Fatalf("a sealed record with another body was not prepared anew: %v", err)
	}
	edited := p.Record()
	edited.Body = append([]byte(nil), edited.Body...)
	edited.Body[len(edited.Body)-2] = ' '
	if q, err := PrepareOne(edited); err == nil && q.ID == p.ID {
		t.Fatal("an edited body kept the prepared id")
	}
	rekinded := p.Record()
	rekinded.Kind = KindHead
	if _, err := PrepareOne(rekinded); ErrorCode(err) != CodeInvalid {
		t.Fatalf("a sealed record of another kind was not prepared anew: %v", err)
	}
}
