package gates

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/evidence-ledger/ledger/ledger"
)

// pageLimit is the page size gates ask the store for: the largest a
// ledger.Queries filter allows. Gates read every page; the size only sets
// how many round trips that takes.
const pageLimit = 1000

// headFirstPage is the size of the first page of head verifications a
// signed-heads gate reads, before pages of pageLimit.
const headFirstPage = 100

// forEachEntry calls fn for every entry matching f, newest first, page
// after page to the last one (f.Cursor is where it starts). It stops at
// the first error, from the store or from fn.
func forEachEntry(ctx context.Context, q ledger.Queries, f ledger.EntryFilter, fn func(ledger.Entry) error) error {
	f.Limit = pageLimit
	for {
		es, next, err := q.Entries(ctx, f)
		if err != nil {
			return err
		}
		for _, e := range es {
			if err := fn(e); err != nil {
				return err
			}
		}
		if next == "" {
			return nil
		}
		f.Cursor = next
	}
}

// decodeError is the error of a log entry whose body does not decode as
// its kind. Its message names the entry and, where the decoder says, the
// field; it never quotes the body (the cause, which may, is only
// wrapped).
type decodeError struct {
	what  string
	id    string
	index uint64
	field string
	err   error
}

func newDecodeError(e ledger.Entry, what string, err error) error {
	d := &decodeError{what: what, id: e.ID, index: e.Index, err: err}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		d.field = te.Field
	}
	return d
}

func (d *decodeError) Error() string {
	msg := fmt.Sprintf("%s entry %s (index %d) does not decode", d.what, d.id, d.index)
	if d.field != "" {
		msg += ": bad field " + d.field
	}
	return msg
}

func (d *decodeError) Unwrap() error { return d.err }

// decodeWaiver decodes a waiver entry's body.
func decodeWaiver(e ledger.Entry) (Waiver, error) {
	var w Waiver
	if err := json.Unmarshal(e.Body, &w); err != nil {
		return Waiver{}, newDecodeError(e, "waiver", err)
	}
	return w, nil
}

// decodeApproval decodes an approval-kind entry's body: a final approval
// (Type "approval") or a manual sign-off (Type "signoff"); exactly one of
// the results is non-nil. Any other Type is an error.
func decodeApproval(e ledger.Entry) (*Approval, *Signoff, error) {
	var probe struct {
		Type string `json:"type"`
	}
	if err := json.Unmarshal(e.Body, &probe); err != nil {
		return nil, nil, newDecodeError(e, "approval", err)
	}
	switch probe.Type {
	case TypeApproval:
		var a Approval
		if err := json.Unmarshal(e.Body, &a); err != nil {
			return nil, nil, newDecodeError(e, "approval", err)
		}
		return &a, nil, nil
	case TypeSignoff:
		var s Signoff
		if err := json.Unmarshal(e.Body, &s); err != nil {
			return nil, nil, newDecodeError(e, "sign-off", err)
		}
		return nil, &s, nil
	}
	return nil, nil, &decodeError{what: "approval", id: e.ID, index: e.Index, field: "type"}
}
