package gates

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
)

// Recorder is what recording a release, waiver or sign-off needs: the
// current definition (Queries) and the append (LogWriter). A ledger.Store
// is one.
type Recorder interface {
	ledger.LogWriter
	ledger.Queries
}

// Approver is what RecordApproval needs: a Recorder that also reads the
// log (to evaluate) and signs the verdict. A ledger.Store is one.
type Approver interface {
	Recorder
	ledger.LogReader
	ledger.Keys
}

// Apply appends rel as a new release definition (ledger.KindRelease, keyed
// by version) after validating it. DefinedAt is set to now when zero, so
// every application is a distinct record and the history of what was bound
// when stays auditable. It returns the appended entry.
func Apply(ctx context.Context, store Recorder, rel *Release) (ledger.Entry, error) {
	if err := rel.validate(); err != nil {
		return ledger.Entry{}, err
	}
	// Applying the definition that is already current appends nothing and
	// returns the current entry (re-running `make run` is a no-op).
	if cur, e, err := LoadRelease(ctx, store, rel.Version); err == nil && sameDefinition(cur, rel) {
		rel.EntryID, rel.EntryIndex, rel.DefinedAt, rel.DefinedBy = e.ID, e.Index, cur.DefinedAt, cur.DefinedBy
		return e, nil
	}
	if rel.DefinedAt.IsZero() {
		rel.DefinedAt = time.Now().UTC()
	}
	rel.DefinedAt = rel.DefinedAt.UTC()
	body, err := json.Marshal(rel)
	if err != nil {
		return ledger.Entry{}, fmt.Errorf("encode release: %w", err)
	}
	e, err := appendOne(ctx, store, ledger.KindRelease, body)
	if err != nil {
		return e, err
	}
	rel.EntryID, rel.EntryIndex = e.ID, e.Index
	return e, nil
}

func appendOne(ctx context.Context, store ledger.LogWriter, k ledger.Kind, body []byte) (ledger.Entry, error) {
	res, err := store.Append(ctx, []ledger.Record{{Kind: k, Body: body}}, "")
	if err != nil {
		return ledger.Entry{}, err
	}
	return res.Entries[0].Entry, nil
}

// DecodeRelease decodes a release definition entry's body and validates it.
func DecodeRelease(e ledger.Entry) (*Release, error) {
	if e.Kind != ledger.KindRelease {
		return nil, ledger.FieldError("kind", "entry %s is a %s, not a release", e.ID, e.Kind)
	}
	var rel Release
	if err := json.Unmarshal(e.Body, &rel); err != nil {
		return nil, fmt.Errorf("decode release entry %s: %w", e.ID, err)
	}
	if err := rel.validate(); err != nil {
		return nil, fmt.Errorf("release entry %s: %w", e.ID, err)
	}
	rel.EntryID, rel.EntryIndex = e.ID, e.Index
	return &rel, nil
}

// LoadRelease returns the latest definition of version and its entry, or a
// CodeNotFound error.
func LoadRelease(ctx context.Context, store ledger.Queries, version string) (*Release, ledger.Entry, error) {
	return loadReleaseAt(ctx, store, version, 0)
}

func loadReleaseAt(ctx context.Context, store ledger.Queries, version string, asOf uint64) (*Release, ledger.Entry, error) {
	if !ValidVersion(version) {
		return nil, ledger.Entry{}, ledger.FieldError("version", "not a valid release version: %q", version)
	}
	es, _, err := store.Entries(ctx, ledger.EntryFilter{Kind: ledger.KindRelease, Key: version, Limit: 1, AsOfSize: asOf})
	if err != nil {
		return nil, ledger.Entry{}, err
	}
	if len(es) == 0 {
		return nil, ledger.Entry{}, ledger.NotFound("release %q is not defined", version)
	}
	rel, err := DecodeRelease(es[0])
	return rel, es[0], err
}

// ReleaseHistory returns every definition of version, newest first, read
// to the last page.
func ReleaseHistory(ctx context.Context, store ledger.Queries, version string) ([]ledger.Entry, error) {
	var out []ledger.Entry
	err := forEachEntry(ctx, store, ledger.EntryFilter{Kind: ledger.KindRelease, Key: version}, func(e ledger.Entry) error {
		out = append(out, e)
		return nil
	})
	return out, err
}

// ListReleases returns the latest definition of every release version,
// most recently defined first.
func ListReleases(ctx context.Context, store ledger.Queries) ([]*Release, error) {
	var out []*Release
	seen := map[string]bool{}
	err := forEachEntry(ctx, store, ledger.EntryFilter{Kind: ledger.KindRelease}, func(e ledger.Entry) error {
		v := ledger.EntryKey(e.Kind, e.Body)
		if seen[v] {
			return nil
		}
		seen[v] = true
		rel, err := DecodeRelease(e)
		if err != nil {
			return err
		}
		out = append(out, rel)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Waiver is the body of a waiver record (ledger.KindWaiver, keyed by
// version): an attributed, reasoned, expiring exception to one gate, bound
// to the release's pins digest when it was recorded.
type Waiver struct {
	Version    string    `json:"version"`
	Gate       string    `json:"gate"`
	Reason     string    `json:"reason"`
	Author     string    `json:"author"`
	Expires    time.Time `json:"expires"`
	PinsDigest string    `json:"pins_digest"`
	CreatedAt  time.Time `json:"created_at"`
}

// Signoff is the body of a manual gate sign-off (ledger.KindApproval with
// Type "signoff"): the holder of Role signs off gate Gate for the pins
// digest. It is not the release approval.
type Signoff struct {
	Version    string    `json:"version"`
	Type       string    `json:"type"` // "signoff"
	Gate       string    `json:"gate"`
	Role       string    `json:"role"`
	Author     string    `json:"author"`
	Note       string    `json:"note,omitempty"`
	PinsDigest string    `json:"pins_digest"`
	CreatedAt  time.Time `json:"created_at"`
}

// Approval is the body of the final release approval (ledger.KindApproval
// with Type "approval"). It names the readiness verdict it was granted on:
// the checkpoint, the SHA-256 of the verdict's canonical text and the
// verdict's Decision with its digest. A verdict at a later checkpoint whose
// decision differs lists the approval as stale (ApprovalState): it no
// longer counts.
type Approval struct {
	Version       string        `json:"version"`
	Type          string        `json:"type"` // "approval"
	Author        string        `json:"author"`
	Note          string        `json:"note,omitempty"`
	PinsDigest    string        `json:"pins_digest"`
	ReleaseEntry  string        `json:"release_entry"`
	Checkpoint    CheckpointRef `json:"checkpoint"`
	VerdictSHA256 string        `json:"verdict_sha256"`
	// Decision and DecisionDigest (Decision.Digest) are what was approved.
	Decision       *Decision `json:"decision,omitempty"`
	DecisionDigest string    `json:"decision_digest,omitempty"`
	CreatedAt      time.Time `json:"created_at"`
}

// The Type values of approval-kind records.
const (
	TypeSignoff  = "signoff"
	TypeApproval = "approval"
)

// Actor is who records a waiver, sign-off or approval: the name of the
// authenticated token and the roles it holds.
type Actor struct {
	Name  string
	Roles []string
}

// MaxWaiverDuration caps how far ahead a waiver may expire.
const MaxWaiverDuration = 365 * 24 * time.Hour

// MaxNote caps waiver and supersede reasons and sign-off and approval
// notes, in bytes of UTF-8 (control characters other than tab and line
// breaks are refused; see ledger.CheckText).
const MaxNote = 4000

// RecordWaiver appends a waiver of gate for the release's current pins.
// The gate must exist, the reason must be non-empty and expires must lie in
// the future (at most MaxWaiverDuration ahead of now). Errors: CodeInvalid,
// CodeNotFound.
func RecordWaiver(ctx context.Context, store Recorder, version, gate, reason string, expires time.Time, by Actor, now time.Time) (Waiver, ledger.Entry, error) {
	rel, _, err := LoadRelease(ctx, store, version)
	if err != nil {
		return Waiver{}, ledger.Entry{}, err
	}
	if _, ok := rel.gate(gate); !ok {
		return Waiver{}, ledger.Entry{}, ledger.FieldError("gate", "release %s has no gate %q", version, gate)
	}
	reason = strings.TrimSpace(reason)
	if err := ledger.CheckText("reason", reason, MaxNote, true, true); err != nil {
		return Waiver{}, ledger.Entry{}, err
	}
	if by.Name == "" {
		return Waiver{}, ledger.Entry{}, ledger.FieldError("author", "required")
	}
	if !expires.After(now) {
		return Waiver{}, ledger.Entry{}, ledger.FieldError("expires", "must be in the future, got %s", expires.UTC().Format(time.RFC3339))
	}
	if expires.Sub(now) > MaxWaiverDuration {
		return Waiver{}, ledger.Entry{}, ledger.FieldError("expires", "at most %s ahead", MaxWaiverDuration)
	}
	w := Waiver{Version: version, Gate: gate, Reason: reason, Author: by.Name, Expires: expires.UTC(), PinsDigest: rel.PinsDigest(), CreatedAt: now.UTC()}
	body, _ := json.Marshal(w)
	e, err := appendOne(ctx, store, ledger.KindWaiver, body)
	return w, e, err
}

// RecordSignoff appends a sign-off of manual gate by an actor holding the
// gate's role, bound to the current pins. A sign-off identical to one
// already in the log is one fact and is not appended again: when the log
// holds a sign-off of the same release, gate, role, author (by.Name) and
// pins digest, that sign-off and its entry are returned with Existing set
// (its note and time stand; the note given now is not recorded). Two
// concurrent identical sign-offs may both be appended; they count once.
// Errors: CodeInvalid (no such manual gate), CodeForbidden (role
// missing), CodeNotFound.
func RecordSignoff(ctx context.Context, store Recorder, version, gate, note string, by Actor, now time.Time) (Signoff, ledger.AppendedEntry, error) {
	rel, _, err := LoadRelease(ctx, store, version)
	if err != nil {
		return Signoff{}, ledger.AppendedEntry{}, err
	}
	g, ok := rel.gate(gate)
	if !ok || g.Kind != KindManual {
		return Signoff{}, ledger.AppendedEntry{}, ledger.FieldError("gate", "release %s has no manual gate %q", version, gate)
	}
	if !slices.Contains(by.Roles, g.Role) {
		return Signoff{}, ledger.AppendedEntry{}, ledger.Errorf(ledger.CodeForbidden, "gate %s needs a sign-off by a token holding role %q; %q holds %v", gate, g.Role, by.Name, by.Roles)
	}
	if err := ledger.CheckText("note", note, MaxNote, false, true); err != nil {
		return Signoff{}, ledger.AppendedEntry{}, err
	}
	s := Signoff{Version: version, Type: TypeSignoff, Gate: gate, Role: g.Role, Author: by.Name, Note: strings.TrimSpace(note), PinsDigest: rel.PinsDigest(), CreatedAt: now.UTC()}
	if old, e, ok, err := sameSignoff(ctx, store, s); err != nil || ok {
		return old, ledger.AppendedEntry{Entry: e, Existing: ok}, err
	}
	body, _ := json.Marshal(s)
	e, err := appendOne(ctx, store, ledger.KindApproval, body)
	return s, ledger.AppendedEntry{Entry: e}, err
}

// errFound stops a walk of the log that found what it looked for.
var errFound = errors.New("found")

// sameSignoff returns the newest sign-off in the log identical to s
// (same version, gate, role, author and pins digest) and its entry; ok is
// false when there is none. A sign-off record that does not decode is an
// error naming its entry.
func sameSignoff(ctx context.Context, store ledger.Queries, s Signoff) (Signoff, ledger.Entry, bool, error) {
	var found Signoff
	var fe ledger.Entry
	err := forEachEntry(ctx, store, ledger.EntryFilter{Kind: ledger.KindApproval, Key: s.Version}, func(e ledger.Entry) error {
		_, o, err := decodeApproval(e)
		switch {
		case err != nil:
			return err
		case o != nil && o.Gate == s.Gate && o.Role == s.Role && o.Author == s.Author && o.PinsDigest == s.PinsDigest:
			found, fe = *o, e
			return errFound
		}
		return nil
	})
	if errors.Is(err, errFound) {
		return found, fe, true, nil
	}
	return Signoff{}, ledger.Entry{}, false, err
}

// RecordApproval evaluates the release now and, only when it is ready,
// appends the final approval naming the verdict. When not ready it returns
// a CodePrecondition error listing every gate that is not passed or waived,
// together with the readiness. Approval needs the release's ApprovalRole
// when one is set (CodeForbidden otherwise). When the release has a
// two-person rule (Release.Approval) and by wrote a record it names for
// the current pins, the approval is refused with a CodeForbidden error
// wrapping ErrTwoPerson that names the rule, by and the records, together
// with the readiness; nothing is appended.
func RecordApproval(ctx context.Context, store Approver, version, note string, by Actor, now time.Time) (Approval, ledger.Entry, *SignedVerdict, error) {
	rel, _, err := LoadRelease(ctx, store, version)
	if err != nil {
		return Approval{}, ledger.Entry{}, nil, err
	}
	if rel.ApprovalRole != "" && !slices.Contains(by.Roles, rel.ApprovalRole) {
		return Approval{}, ledger.Entry{}, nil, ledger.Errorf(ledger.CodeForbidden, "approving release %s needs role %q; %q holds %v", version, rel.ApprovalRole, by.Name, by.Roles)
	}
	if by.Name == "" {
		return Approval{}, ledger.Entry{}, nil, ledger.FieldError("author", "required")
	}
	if err := ledger.CheckText("note", note, MaxNote, false, true); err != nil {
		return Approval{}, ledger.Entry{}, nil, err
	}
	rd, err := Evaluate(ctx, store, rel, EvalOptions{Now: now})
	if err != nil {
		return Approval{}, ledger.Entry{}, nil, err
	}
	sv, err := Sign(rd, store)
	if err != nil {
		return Approval{}, ledger.Entry{}, nil, err
	}
	if !rd.Ready {
		return Approval{}, ledger.Entry{}, &sv, &ledger.Error{Code: ledger.CodePrecondition, Message: "release " + version + " is not ready: " + strings.Join(rd.Blockers(), "; ")}
	}
	if err := rel.Approval.refusal(version, by.Name, rd.ruled); err != nil {
		return Approval{}, ledger.Entry{}, &sv, err
	}
	d := rd.Decision()
	a := Approval{Version: version, Type: TypeApproval, Author: by.Name, Note: strings.TrimSpace(note), PinsDigest: rd.PinsDigest,
		ReleaseEntry: rd.Release.ID, Checkpoint: rd.Checkpoint, VerdictSHA256: sv.TextSHA256(), Decision: &d, DecisionDigest: d.Digest(), CreatedAt: now.UTC()}
	body, _ := json.Marshal(a)
	e, err := appendOne(ctx, store, ledger.KindApproval, body)
	return a, e, &sv, err
}

func (r *Release) gate(id string) (*Gate, bool) {
	for i := range r.Gates {
		if r.Gates[i].ID == id {
			return &r.Gates[i], true
		}
	}
	return nil, false
}

// Approvals returns the final approvals and manual sign-offs recorded for
// version, newest first, read to the last page. A record that does not
// decode is an error naming its entry.
func Approvals(ctx context.Context, store ledger.Queries, version string) ([]Approval, []Signoff, error) {
	var as []Approval
	var ss []Signoff
	err := forEachEntry(ctx, store, ledger.EntryFilter{Kind: ledger.KindApproval, Key: version}, func(e ledger.Entry) error {
		a, s, err := decodeApproval(e)
		switch {
		case err != nil:
			return err
		case a != nil:
			as = append(as, *a)
		default:
			ss = append(ss, *s)
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	return as, ss, nil
}

// sameDefinition reports whether a and b define the same release, ignoring
// when and by whom they were defined.
func sameDefinition(a, b *Release) bool {
	ca, cb := *a, *b
	ca.DefinedAt, cb.DefinedAt = time.Time{}, time.Time{}
	ca.DefinedBy, cb.DefinedBy = "", ""
	ca.EntryID, cb.EntryID = "", ""
	ca.EntryIndex, cb.EntryIndex = 0, 0
	ja, err1 := json.Marshal(&ca)
	jb, err2 := json.Marshal(&cb)
	return err1 == nil && err2 == nil && bytes.Equal(ja, jb)
}
