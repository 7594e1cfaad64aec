package ledger

import (
	"bytes"
	"errors"
	"fmt"
	"runtime"
	"sync"
)

// MaxRecordsPerAppend caps the records of one Append call.
const MaxRecordsPerAppend = 10000

// Prepared is a record ready for the log: validated, its body canonical
// (compact canonical JSON, see CanonicalJSON), its content id (EntryID) and
// index key (EntryKey) derived. Evidence and Head hold the decoded body of
// those kinds (nil for the others) so drivers can fill their projections
// without decoding it again.
type Prepared struct {
	Kind     Kind
	Body     []byte
	ID       string
	Key      string
	Evidence *Evidence
	Head     *HeadVerification

	sealed bool // made by PrepareOne (Record may carry it)
}

// Record returns p as a Record of its canonical body. When p was made by
// PrepareOne, appending the Record (tlog.Log.Append, PrepareRecords) takes p as
// it is instead of preparing the body again, as long as the Record's Kind
// and Body are unchanged; a Prepared built by hand is prepared anew.
func (p Prepared) Record() Record {
	r := Record{Kind: p.Kind, Body: p.Body}
	if p.sealed {
		q := p
		r.prepared = &q
	}
	return r
}

// prepareParallelMin is the batch size from which PrepareRecords spreads
// the records over GOMAXPROCS goroutines; smaller batches are not long
// enough to pay for waking another processor (BENCHMARKS.md).
const prepareParallelMin = 1024

// PrepareRecords validates and canonicalizes recs, in parallel for large
// batches. The error is a CodeInvalid *Error for the first invalid record
// in order; with several records its field is prefixed by the record's
// position ("[3].lane"). Safe for concurrent use.
func PrepareRecords(recs []Record) ([]Prepared, error) {
	out := make([]Prepared, len(recs))
	errs := make([]error, len(recs))
	workers := min(runtime.GOMAXPROCS(0), len(recs)/(prepareParallelMin/2))
	if workers <= 1 {
		for i, r := range recs {
			if out[i], errs[i] = PrepareOne(r); errs[i] != nil {
				break
			}
		}
	} else {
		var wg sync.WaitGroup
		per := (len(recs) + workers - 1) / workers
		for lo := 0; lo < len(recs); lo += per {
			hi := min(len(recs), lo+per)
			wg.Go(func() {
				for i := lo; i < hi; i++ {
					if out[i], errs[i] = PrepareOne(recs[i]); errs[i] != nil {
						return
					}
				}
			})
		}
		wg.Wait()
	}
	for i, err := range errs {
		if err != nil {
			if len(recs) > 1 {
				err = prefixField(err, fmt.Sprintf("[%d]", i))
			}
			return nil, err
		}
	}
	return out, nil
}

// PrepareOne validates and canonicalizes one record (see PrepareRecords).
func PrepareOne(r Record) (Prepared, error) {
	if q := r.prepared; q != nil && q.Kind == r.Kind && bytes.Equal(q.Body, r.Body) {
		return *q, nil
	}
	if !ValidKind(r.Kind) {
		return Prepared{}, FieldError("kind", "unknown entry kind %q", r.Kind)
	}
	p := Prepared{Kind: r.Kind}
	var err error
	switch r.Kind {
	case KindEvidence:
		var e Evidence
		e, p.Body, err = prepareEvidence(r.Body, r.RecordedBy)
		p.Evidence, p.Key = &e, e.Lane
	case KindHead:
		var h HeadVerification
		h, p.Body, err = PrepareHead(r.Body)
		p.Head, p.Key = &h, h.Repository
	default:
		p.Body, err = PrepareRecord(r.Kind, r.Body)
		if err == nil {
			p.Key = EntryKey(r.Kind, p.Body)
		}
	}
	if err != nil {
		return p, err
	}
	p.ID = EntryID(r.Kind, p.Body)
	p.sealed = true
	return p, nil
}

// prefixField returns err with prefix put before its field ("[3]" and
// "lane" give "[3].lane"); errors other than *Error are returned as they
// are.
func prefixField(err error, prefix string) error {
	var le *Error
	if errors.As(err, &le) {
		c := *le
		if c.Field == "" {
			c.Field = prefix
		} else {
			c.Field = prefix + "." + c.Field
		}
		return &c
	}
	return err
}
