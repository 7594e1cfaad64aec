package main

import (
	"context"
	"fmt"
	"time"

	"github.com/evidence-ledger/ledger/admit"
	"github.com/evidence-ledger/ledger/client"
	"github.com/evidence-ledger/ledger/gates"
	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/ledger/tlog"
)

// theLedger is what the commands that record and read through a ledger get:
// the local database (localLedger) or a ledger server (remoteLedger, the
// HTTP client), chosen once by openLedger from --server, so a command's
// body is the same for both. Release actions act as the --as token locally
// and as the --token token remotely; in both the token's name is the author
// and its roles and scope are checked.
type theLedger interface {
	ledger.LogWriter
	ledger.Reader
	runnerLedger
	// DefineRelease records def (release YAML or JSON) as release version.
	DefineRelease(ctx context.Context, version string, def []byte) (*gates.Release, ledger.Entry, error)
	// Releases returns the latest definition of every release.
	Releases(ctx context.Context) ([]*gates.Release, error)
	// Release returns a release's latest definition, its entry, approvals
	// and sign-offs.
	Release(ctx context.Context, version string) (*gates.Release, ledger.Entry, []gates.Approval, []gates.Signoff, error)
	// Readiness evaluates a release at the latest checkpoint and signs the
	// verdict with the log key.
	Readiness(ctx context.Context, version string) (*gates.SignedVerdict, error)
	Waive(ctx context.Context, version, gate, reason string, expires time.Time) (gates.Waiver, ledger.Entry, error)
	Signoff(ctx context.Context, version, gate, note string) (gates.Signoff, ledger.Entry, error)
	// Approve records the final approval; a release that is not ready is
	// refused with CodePrecondition and the verdict that refused it.
	Approve(ctx context.Context, version, note string) (gates.Approval, ledger.Entry, *gates.SignedVerdict, error)
	// Supersede retracts record entry (evidence or a head) for release
	// version's current pins, with reason (gates.RecordSupersede).
	Supersede(ctx context.Context, version, entry, reason string) (gates.Supersede, ledger.Entry, error)
	// Where names the ledger for messages: the database path or the URL.
	Where() string
	Close() error
}

var (
	_ theLedger = (*localLedger)(nil)
	_ theLedger = remoteLedger{}
)

// ledgerOptions are what a command tells openLedger.
type ledgerOptions struct {
	// as names the token a local release action acts as (--as).
	as string
	// records: the command appends, so a server needs a token; checked
	// before any work is done.
	records bool
}

// openLedger returns the server's ledger when --server is set, else the
// local database (see openStore for when it may be created).
func (a *app) openLedger(ctx context.Context, o ledgerOptions) (theLedger, error) {
	if a.Server == "" {
		st, err := a.openStore(ctx)
		if err != nil {
			return nil, err
		}
		return &localLedger{Store: st, path: dbName(a.DB), as: o.as}, nil
	}
	if o.as != "" {
		return nil, ledger.FieldError("as", "--as names a token of the local database; with --server the --token's holder is the author")
	}
	if o.records && a.Token == "" {
		return nil, ledger.FieldError("token", "--server needs --token (or LEDGER_TOKEN) to record")
	}
	c, err := client.New(a.Server, client.Options{Token: a.Token, Timeout: a.Timeout})
	if err != nil {
		return nil, err
	}
	return remoteLedger{c}, nil
}

// remoteLedger is a ledger server through the HTTP client.
type remoteLedger struct{ *client.Client }

func (r remoteLedger) Where() string { return r.URL() }
func (r remoteLedger) Close() error  { return nil }

// localLedger is the local database; release actions run the gates
// functions on it as the token named by as, whose scope is checked as the
// API checks a bearer token's.
type localLedger struct {
	*Store
	path string
	as   string
}

func (l *localLedger) Where() string { return l.path }

// actor resolves l.as to a live token's name and roles, and checks that
// its scope allows need, as the API's scope check does (waivers and
// approvals need admin, sign-offs record).
func (l *localLedger) actor(ctx context.Context, need ledger.Scope) (gates.Actor, error) {
	if l.as == "" {
		return gates.Actor{}, ledger.FieldError("as", "--as TOKEN_NAME is required locally (the token's name is the author; its roles are checked)")
	}
	ts, err := l.Tokens(ctx)
	if err != nil {
		return gates.Actor{}, err
	}
	for _, t := range ts {
		if t.Name == l.as && t.RevokedAt == nil {
			if err := admit.RequireAs(t, need); err != nil {
				return gates.Actor{}, err
			}
			return admit.ActorOf(t), nil
		}
	}
	return gates.Actor{}, ledger.Errorf(ledger.CodeUnauthorized, "no live token named %q (create it with `ledger token create --name %s ...`)", l.as, l.as)
}

func (l *localLedger) DefineRelease(ctx context.Context, version string, def []byte) (*gates.Release, ledger.Entry, error) {
	rel, err := gates.ParseRelease(def)
	if err != nil {
		return nil, ledger.Entry{}, err
	}
	if rel.Version != version {
		return nil, ledger.Entry{}, ledger.FieldError("version", "the definition defines %q, not %q", rel.Version, version)
	}
	rel.DefinedBy = l.as
	e, err := gates.Apply(ctx, l.Store, rel)
	if err != nil {
		return nil, ledger.Entry{}, err
	}
	rel.EntryID, rel.EntryIndex = e.ID, e.Index
	return rel, e, nil
}

func (l *localLedger) Releases(ctx context.Context) ([]*gates.Release, error) {
	return gates.ListReleases(ctx, l.Store)
}

func (l *localLedger) Release(ctx context.Context, version string) (*gates.Release, ledger.Entry, []gates.Approval, []gates.Signoff, error) {
	rel, e, err := gates.LoadRelease(ctx, l.Store, version)
	if err != nil {
		return nil, ledger.Entry{}, nil, nil, err
	}
	aps, sos, err := gates.Approvals(ctx, l.Store, version)
	if err != nil {
		return nil, ledger.Entry{}, nil, nil, err
	}
	return rel, e, aps, sos, nil
}

func (l *localLedger) Readiness(ctx context.Context, version string) (*gates.SignedVerdict, error) {
	rel, _, err := gates.LoadRelease(ctx, l.Store, version)
	if err != nil {
		return nil, err
	}
	rd, err := gates.Evaluate(ctx, l.checked(), rel, gates.EvalOptions{})
	if err != nil {
		return nil, err
	}
	sv, err := gates.Sign(rd, l.Store)
	if err != nil {
		return nil, err
	}
	return &sv, nil
}

func (l *localLedger) Waive(ctx context.Context, version, gate, reason string, expires time.Time) (gates.Waiver, ledger.Entry, error) {
	who, err := l.actor(ctx, ledger.ScopeAdmin)
	if err != nil {
		return gates.Waiver{}, ledger.Entry{}, err
	}
	return admit.Waiver(ctx, l.Store, who, version, gate, reason, expires, time.Now())
}

func (l *localLedger) Signoff(ctx context.Context, version, gate, note string) (gates.Signoff, ledger.Entry, error) {
	who, err := l.actor(ctx, ledger.ScopeRecord)
	if err != nil {
		return gates.Signoff{}, ledger.Entry{}, err
	}
	so, e, err := admit.Signoff(ctx, l.Store, who, version, gate, note, time.Now())
	return so, e.Entry, err
}

func (l *localLedger) Approve(ctx context.Context, version, note string) (gates.Approval, ledger.Entry, *gates.SignedVerdict, error) {
	who, err := l.actor(ctx, ledger.ScopeAdmin)
	if err != nil {
		return gates.Approval{}, ledger.Entry{}, nil, err
	}
	return admit.Approval(ctx, l.checked(), who, version, note, time.Now())
}

// checked is the store with every leaf it reads checked (tlog.VerifiedStore),
// as the server reads it: verdicts and approvals are never computed over
// edited leaves.
func (l *localLedger) checked() *tlog.VerifiedStore {
	return tlog.NewVerifiedStore(l.Store, l.Store.Log, nil)
}

// appendedJSON is the --json shape of an append, for a local or a remote
// ledger alike: the API's answer to a batch (POST /api/v1/evidence).
type appendedJSON struct {
	Entries    []appendedEntryJSON `json:"entries"`
	Checkpoint ledger.Checkpoint   `json:"checkpoint"`
}

type appendedEntryJSON struct {
	ID             string                `json:"id"`
	Index          uint64                `json:"index"`
	LeafHash       ledger.Hash           `json:"leaf_hash"`
	Existing       bool                  `json:"existing"`
	InclusionProof ledger.InclusionProof `json:"inclusion_proof"`
}

func appendedOf(res *ledger.AppendResult) appendedJSON {
	out := appendedJSON{Checkpoint: res.Checkpoint}
	for _, e := range res.Entries {
		out.Entries = append(out.Entries, appendedEntryJSON{e.ID, e.Index, e.LeafHash, e.Existing, e.Proof})
	}
	return out
}

// evidenceRecords returns the evidence records of evs, canonical.
func evidenceRecords(evs []ledger.Evidence) ([]ledger.Record, error) {
	recs := make([]ledger.Record, len(evs))
	for i := range evs {
		body, err := ledger.CanonicalBody(&evs[i])
		if err != nil {
			return nil, fmt.Errorf("evidence %d: %w", i, err)
		}
		recs[i] = ledger.Record{Kind: ledger.KindEvidence, Body: body}
	}
	return recs, nil
}
