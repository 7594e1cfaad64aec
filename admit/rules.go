package admit

import (
	"errors"

	"github.com/evidence-ledger/ledger/ledger"
)

// RuleID names one "must never" clause of TRUST.md's actor table.
type RuleID string

// The rules of TRUST.md's actor table, one per "must never be able to"
// clause, in the table's order.
const (
	CIPolicy           RuleID = "ci-job/policy"                  // choose the trust policy a head is judged by
	CIClaim            RuleID = "ci-job/unchecked-claim"         // make a gate pass with a claim the server did not check
	CIScope            RuleID = "ci-job/scope"                   // record outside its scope
	CIFiles            RuleID = "ci-job/server-files"            // read files on the server
	AgentCommand       RuleID = "agent/server-command"           // run a command the server sends it
	AgentUndeclared    RuleID = "agent/undeclared"               // record for a lane or backend it did not declare
	AgentLease         RuleID = "agent/lease"                    // finish a lease it does not hold
	ReviewerChange     RuleID = "reviewer/change"                // change anything
	ManagerNotReady    RuleID = "release-manager/not-ready"      // approve a release that is not ready
	ManagerStale       RuleID = "release-manager/stale-approval" // keep an approval alive after its verdict changed
	AdminEditLeaf      RuleID = "admin/edit-leaf"                // edit or delete a leaf unnoticed
	OperatorRollback   RuleID = "operator/rollback"              // roll back, fork or drop the log's tail unnoticed
	OperatorProjection RuleID = "operator/projection"            // get a verdict or approval by editing a projection row
	WitnessFork        RuleID = "witness/fork"                   // be made to cosign a rollback or a fork
)

// Rule is one row of TRUST.md's actor table: the actor, one clause of
// its "must never be able to" column, and where the ledger enforces it
// (package.Function names; admission rules are this package's).
type Rule struct {
	ID      RuleID
	Actor   string // TRUST.md's actor column, as written there
	MustNot string // one clause of the "must never be able to" column, as written there
	Where   []string
}

// Rules is TRUST.md's actor table, one row per "must never" clause. A
// Refusal's Rule is the ID of one of them.
var Rules = []Rule{
	{CIPolicy, "CI job", "choose the trust policy a head is judged by",
		[]string{"admit.HeadPolicy (a head verification names no policy file, and no policy beside its release)", "gates.LoadRelease (the release names a registered policy)"}},
	{CIClaim, "CI job", `make a gate pass with a claim the server did not check (a posted "equivalent", a head verdict, a count it did not run)`,
		[]string{"admit.Admit", "admit.Decoded", "admit.Local", "admit.LocalRecords", "gates.RefuseServerMarkers", "gates.RefuseDecodedMarkers", "ledger.RefuseRunClaim"}},
	{CIScope, "CI job", "record outside its scope",
		[]string{"admit.Admit", "admit.Decoded", "admit.IngestScope", "admit.RepositoryInScope", "admit.RunInScope", "admit.CancelInScope", "admit.AgentInScope", "admit.AgentServes", "ledger.Token.Covers"}},
	{CIFiles, "CI job", "read files on the server",
		[]string{"admit.RepoPath (an admin token only)", "admit.ServerPath (under a configured --repo-root only)"}},
	{AgentCommand, "agent on a hardware host", "run a command the server sends it",
		[]string{"runs.Spec (a run names lanes, never commands; strictly decoded)", "agent (runs only its own configuration)"}},
	{AgentUndeclared, "agent on a hardware host", "record for a lane or backend it did not declare",
		[]string{"admit.RunEvidence", "admit.AgentServes", "admit.RefuseAgentSigner", "admit.RefuseAgentSignature", "admit.Ingest"}},
	{AgentLease, "agent on a hardware host", "finish a lease it does not hold",
		[]string{"admit.LeaseHolder", "admit.CheckAttempt", "runs.Store.CheckLease (the lease must be the agent's current one)"}},
	{ReviewerChange, "reviewer", "change anything",
		[]string{"admit.Require (every write route needs a record, run or admin token)", "admit.RequireForm", "admit.RequireAs", "admit.Actor"}},
	{ManagerNotReady, "release manager", "approve a release that is not ready",
		[]string{"admit.Approval", "gates.RecordApproval (also: a release's two-person rule, gates.ApprovalRule, refuses an approver who waived, signed off or superseded for the current pins)"}},
	{ManagerStale, "release manager", "keep an approval alive after the verdict it approved has changed",
		[]string{"admit.Approval", "gates.Evaluate (an approval is current only while the verdict it names is, and while its author wrote no record the release's two-person rule names)"}},
	{AdminEditLeaf, "admin", "edit or delete a leaf without `ledger audit` (and every witness) noticing",
		[]string{"ledger audit", "log engine (signed checkpoints over the Merkle tree)"}},
	{OperatorRollback, "server operator", "roll the log back, fork it, or drop its tail without a witness or a client holding an older checkpoint noticing (with one server or several)",
		[]string{"ledger audit --against", "signed-state journal", "witness cosigning"}},
	{OperatorProjection, "server operator", "get a signed verdict or an approval out of the server by editing a projection row (a column, an index) rather than a leaf",
		[]string{"verified reads and the full scan (projection rows checked against their leaves)"}},
	{WitnessFork, "witness", "be made to cosign a rollback or a fork",
		[]string{"witness (cosigns only consistent extensions of its last checkpoint)"}},
}

// RuleByID returns the row of Rules with id.
func RuleByID(id RuleID) (Rule, bool) {
	for _, r := range Rules {
		if r.ID == id {
			return r, true
		}
	}
	return Rule{}, false
}

// Refusal is admission's refusal: the application error the caller
// answers with (its Code maps to the HTTP status, its Field names the
// member refused) and the rule of Rules that refused it. errors.As finds
// the *ledger.Error through it.
type Refusal struct {
	Rule RuleID
	Err  *ledger.Error
}

// Error is the wrapped error's text, unchanged.
func (r *Refusal) Error() string { return r.Err.Error() }

// Unwrap returns the *ledger.Error.
func (r *Refusal) Unwrap() error { return r.Err }

// RuleOf returns the rule that refused err, when admission refused it.
func RuleOf(err error) (RuleID, bool) {
	var r *Refusal
	if errors.As(err, &r) {
		return r.Rule, true
	}
	return "", false
}

// refuse attributes err to rule: a *ledger.Error becomes a *Refusal; any
// other error (nil included) is returned as it is.
func refuse(rule RuleID, err error) error {
	if err == nil {
		return nil
	}
	if le, ok := err.(*ledger.Error); ok {
		return &Refusal{Rule: rule, Err: le}
	}
	return err
}

// prefixed puts prefix before the field of a *ledger.Error or a
// *Refusal ("[2]." and "lane" give "[2].lane"); any other error is
// returned as it is.
func prefixed(err error, prefix string) error {
	if prefix == "" {
		return err
	}
	switch e := err.(type) {
	case *ledger.Error:
		c := *e
		c.Field = prefix + c.Field
		return &c
	case *Refusal:
		c := *e.Err
		c.Field = prefix + c.Field
		return &Refusal{Rule: e.Rule, Err: &c}
	}
	return err
}
