package gates

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
)

// Supersede is the body of a supersede record (ledger.KindSupersede, keyed
// by version): the holder of the release's approval role retracts one
// evidence or head record for the release's pins, with a reason (an
// infrastructure fault, a run on the wrong host). A superseded record no
// longer counts for any gate of the release, failing or passing; it is
// listed as baseline with the supersede's author and reason. Like a
// waiver it is bound to PinsDigest and lapses when the pins change.
type Supersede struct {
	Version    string      `json:"version"`
	Entry      string      `json:"entry"`
	EntryIndex uint64      `json:"entry_index"`
	EntryKind  ledger.Kind `json:"entry_kind"`
	Reason     string      `json:"reason"`
	Author     string      `json:"author"`
	Role       string      `json:"role,omitempty"`
	PinsDigest string      `json:"pins_digest"`
	CreatedAt  time.Time   `json:"created_at"`
}

// Superseder is what RecordSupersede needs: a Recorder that also reads log
// entries by id. A ledger.Store is one.
type Superseder interface {
	Recorder
	ledger.LogReader
}

// RecordSupersede appends a supersede of the evidence or head record with
// id entry for the release's current pins. The actor must hold the
// release's approval role when it names one (callers such as the HTTP API
// also require admin scope). Errors: CodeInvalid naming the field (no such
// entry, not evidence or a head, empty or over-long reason), CodeForbidden
// (role missing), CodeConflict (already superseded for these pins),
// CodeNotFound (no such release).
func RecordSupersede(ctx context.Context, store Superseder, version, entry, reason string, by Actor, now time.Time) (Supersede, ledger.Entry, error) {
	rel, _, err := LoadRelease(ctx, store, version)
	if err != nil {
		return Supersede{}, ledger.Entry{}, err
	}
	if rel.ApprovalRole != "" && !slices.Contains(by.Roles, rel.ApprovalRole) {
		return Supersede{}, ledger.Entry{}, ledger.Errorf(ledger.CodeForbidden, "superseding a record of release %s needs role %q; %q holds %v", version, rel.ApprovalRole, by.Name, by.Roles)
	}
	if by.Name == "" {
		return Supersede{}, ledger.Entry{}, ledger.FieldError("author", "required")
	}
	reason = strings.TrimSpace(reason)
	if err := ledger.CheckText("reason", reason, MaxNote, true, true); err != nil {
		return Supersede{}, ledger.Entry{}, err
	}
	if entry == "" || len(entry) > 128 {
		return Supersede{}, ledger.Entry{}, ledger.FieldError("entry", "required: the id of the evidence or head record to supersede")
	}
	e, err := store.Entry(ctx, entry)
	if ledger.ErrorCode(err) == ledger.CodeNotFound {
		return Supersede{}, ledger.Entry{}, ledger.FieldError("entry", "no log entry with id %q", entry)
	}
	if err != nil {
		return Supersede{}, ledger.Entry{}, err
	}
	if e.Kind != ledger.KindEvidence && e.Kind != ledger.KindHead {
		return Supersede{}, ledger.Entry{}, ledger.FieldError("entry", "entry %s is a %s record; only evidence and head records can be superseded", e.ID, e.Kind)
	}
	pins := rel.PinsDigest()
	dup := forEachEntry(ctx, store, ledger.EntryFilter{Kind: ledger.KindSupersede, Key: version}, func(le ledger.Entry) error {
		s, err := decodeSupersede(le)
		if err != nil {
			return err
		}
		if s.Entry == e.ID && s.PinsDigest == pins {
			return ledger.Errorf(ledger.CodeConflict, "entry %s is already superseded for these pins by %s", e.ID, le.ID)
		}
		return nil
	})
	if dup != nil {
		return Supersede{}, ledger.Entry{}, dup
	}
	s := Supersede{Version: version, Entry: e.ID, EntryIndex: e.Index, EntryKind: e.Kind, Reason: reason, Author: by.Name, Role: rel.ApprovalRole, PinsDigest: pins, CreatedAt: now.UTC()}
	body, _ := json.Marshal(s)
	le, err := appendOne(ctx, store, ledger.KindSupersede, body)
	return s, le, err
}

// Supersedes returns the supersede records of version, newest first, read
// to the last page. A record that does not decode is an error naming its
// entry.
func Supersedes(ctx context.Context, store ledger.Queries, version string) ([]Supersede, error) {
	var out []Supersede
	err := forEachEntry(ctx, store, ledger.EntryFilter{Kind: ledger.KindSupersede, Key: version}, func(e ledger.Entry) error {
		s, err := decodeSupersede(e)
		if err == nil {
			out = append(out, s)
		}
		return err
	})
	return out, err
}

func decodeSupersede(e ledger.Entry) (Supersede, error) {
	var s Supersede
	if err := json.Unmarshal(e.Body, &s); err != nil {
		return Supersede{}, newDecodeError(e, "supersede", err)
	}
	return s, nil
}

type supersedeEntry struct {
	ledger.Entry
	s Supersede
}

// loadSupersedes reads the supersede records of the release as of the
// evaluation size; those for the current pins apply (the oldest one per
// superseded entry is kept in supersedes, every one in supersedeList).
func (ev *evaluator) loadSupersedes() error {
	pins := ev.rel.PinsDigest()
	ev.supersedes = map[string]supersedeEntry{}
	return forEachEntry(ev.ctx, ev.store, ledger.EntryFilter{Kind: ledger.KindSupersede, Key: ev.rel.Version, AsOfSize: ev.asOf}, func(e ledger.Entry) error {
		s, err := decodeSupersede(e)
		if err == nil && s.PinsDigest == pins {
			ev.supersedes[s.Entry] = supersedeEntry{e, s} // newest first: the last kept is the oldest
			ev.supersedeList = append(ev.supersedeList, supersedeEntry{e, s})
		}
		return err
	})
}
