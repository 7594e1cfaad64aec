package gates

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/evidence-ledger/ledger/ledger"
)

// pageLimit is the page size gates ask the store for: the largest a
// ledger.Queries filter allows. Gates read every page; the size only sets
// how many round trips that takes.
const pageLimit = 1000

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
// its kind: it names the entry, never quotes the body.
func decodeError(e ledger.Entry, what string, err error) error {
	return fmt.Errorf("%s entry %s (index %d) does not decode: %w", what, e.ID, e.Index, err)
}

// decodeWaiver decodes a waiver entry's body.
func decodeWaiver(e ledger.Entry) (Waiver, error) {
	var w Waiver
	if err := json.Unmarshal(e.Body, &w); err != nil {
		return Waiver{}, decodeError(e, "waiver", err)
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
		return nil, nil, decodeError(e, "approval", err)
	}
	switch probe.Type {
	case TypeApproval:
		var a Approval
		if err := json.Unmarshal(e.Body, &a); err != nil {
			return nil, nil, decodeError(e, "approval", err)
		}
		return &a, nil, nil
	case TypeSignoff:
		var s Signoff
		if err := json.Unmarshal(e.Body, &s); err != nil {
			return nil, nil, decodeError(e, "sign-off", err)
		}
		return nil, &s, nil
	}
	return nil, nil, decodeError(e, "approval", fmt.Errorf("type must be %q or %q", TypeApproval, TypeSignoff))
}
