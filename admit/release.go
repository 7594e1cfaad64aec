package admit

import (
	"context"
	"errors"
	"time"

	"github.com/evidence-ledger/ledger/gates"
	"github.com/evidence-ledger/ledger/ledger"
)

// Actor is the gates.Actor p acts as on a release: its token's name and
// roles. CodeUnauthorized when p carries no token (ReviewerChange).
func Actor(p Principal) (gates.Actor, error) {
	if !p.hasToken() {
		return gates.Actor{}, &Refusal{Rule: ReviewerChange, Err: ledger.Errorf(ledger.CodeUnauthorized, "this request needs a bearer token")}
	}
	return ActorOf(p.Token), nil
}

// ActorOf is the gates.Actor of token t.
func ActorOf(t ledger.Token) gates.Actor { return gates.Actor{Name: t.Name, Roles: t.Roles} }

// Waiver admits and appends by's waiver of gate of release version
// (gates.RecordWaiver: attributed, expiring, bound to the release's pins).
func Waiver(ctx context.Context, st gates.Recorder, by gates.Actor, version, gate, reason string, expires, now time.Time) (gates.Waiver, ledger.Entry, error) {
	return gates.RecordWaiver(ctx, st, version, gate, reason, expires, by, now)
}

// Signoff admits and appends by's sign-off of manual gate of release
// version (gates.RecordSignoff: by must hold the gate's role). The same
// sign-off again (same release, gate, role, author and pins) appends
// nothing: the existing sign-off is returned with Existing set.
func Signoff(ctx context.Context, st gates.Recorder, by gates.Actor, version, gate, note string, now time.Time) (gates.Signoff, ledger.AppendedEntry, error) {
	return gates.RecordSignoff(ctx, st, version, gate, note, by, now)
}

// Approval admits and appends by's final approval of release version
// (gates.RecordApproval): refused with CodePrecondition and the signed
// verdict when the release is not ready (ManagerNotReady), CodeForbidden
// when by lacks the release's approval role, and CodeForbidden with the
// signed verdict when the release's two-person rule (gates.ApprovalRule)
// excludes by because by waived, signed off or superseded for the
// current pins (ManagerNotReady: the release is not ready for by's
// approval; errors.Is(err, gates.ErrTwoPerson)). The approval names the
// verdict it approved, so it lapses when the verdict changes, or when by
// later writes a record the two-person rule names (ManagerStale, decided
// by gates' readiness with the same rule).
func Approval(ctx context.Context, st gates.Approver, by gates.Actor, version, note string, now time.Time) (gates.Approval, ledger.Entry, *gates.SignedVerdict, error) {
	a, e, sv, err := gates.RecordApproval(ctx, st, version, note, by, now)
	if ledger.ErrorCode(err) == ledger.CodePrecondition || errors.Is(err, gates.ErrTwoPerson) {
		err = refuse(ManagerNotReady, err)
	}
	return a, e, sv, err
}

// Supersede admits and appends by's supersede of record entry for release
// version (gates.RecordSupersede).
func Supersede(ctx context.Context, st gates.Superseder, by gates.Actor, version, entry, reason string, now time.Time) (gates.Supersede, ledger.Entry, error) {
	return gates.RecordSupersede(ctx, st, version, entry, reason, by, now)
}
