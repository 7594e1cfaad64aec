// Package gates decides release readiness from the ledger.
//
// A release (see Release, parsed strictly from YAML by ParseRelease) binds a
// version to exact pins: for each component the signed head commit, the
// reviewed source commit and optionally their trees, plus bound artifacts
// (name -> "sha256:<64 hex>"). Its gates are requirements whose state is
// computed, never set by hand:
//
//   - lane: runs of a lane (name/vN) on listed backends, at the component's
//     head commit (and tree when given), carrying every artifact the gate
//     is about at its bound digest, clean, all cases exact and the
//     negative control caught;
//   - signed-heads: each component's head verified good and trusted
//     (ledger.HeadVerification records, kind "head") under the trust policy
//     the release binds; a release that binds none counts no verification
//     and the gate stays open (ReasonNoPolicy);
//   - tree-equivalence: evidence of lane tree-equivalence/v1 (see
//     ledger.TreeEquivalence and ledger.JudgeTreeEquivalence), computed by
//     the server (TreeClaim) at the component's current pin paths for this
//     release and component (ledger.TreeEquivalence.BindingMismatch), that
//     each signed head equals its reviewed source apart from those paths;
//   - trajectory: token sequences recorded as external evidence (see
//     ledger.Trajectory) identical across listed modes and backends; a
//     divergence names ledger.FirstDivergence (the first zero-based position
//     whose tokens differ or where one sequence has ended) and both tokens;
//   - matrix: every combination of listed dimension values has passing
//     evidence whose details carry those values;
//   - manual: a sign-off recorded by a token holding a named role;
//   - provenance: verified SLSA provenance of a bound artifact built by an
//     allowed builder from the component's commit;
//   - throughput: A/B runs of a throughput lane (ledger.Throughput) whose
//     paired samples put every selected case's median speed ratio
//     baseline/candidate, with its interval (internal/stats), at or above
//     the gate's threshold (ThroughputResult is the decisive case).
//
// Each kind is defined in one file (kind_lane.go, kind_heads.go, ...): the
// fields it uses, its validation and its evaluation, listed once in the
// kinds table.
//
// Binding is exact and every pin binds every gate: evidence counts only
// when its repository, commit, tree (when pinned) and clean flag equal the
// release's, every bound artifact it names has the bound digest, and it
// carries every bound artifact the gate is about (the gate's artifacts,
// else its component's). Other evidence is listed as baseline with the
// reason it does not count; nothing is satisfied by proximity.
//
// One counting rule (CountingRule; each kind's reading is KindRule) holds
// for every kind: at the exact pins one failing record keeps the gate
// failed until a supersede leaf (RecordSupersede: attributed, reasoned, by
// the release's approval role, bound to the pins) retracts it or the gate
// is waived; otherwise the passing records count. Failing records are
// listed in GateResult.Failing.
//
// Waivers (RecordWaiver) exempt one gate for one set of pins (PinsDigest)
// until an expiry; they lapse when the pins change. Manual-gate sign-offs
// (RecordSignoff) are separate from the final release approval
// (RecordApproval), which is accepted only when the release is ready and
// names the Decision it approved; a later verdict whose decision differs
// lists it as stale (Readiness.Approvals) and it no longer counts. A
// release may set the two-person rule (ApprovalRule, `approval:
// {distinct_from: [waiver, signoff]}`): whoever waived, signed off (or
// superseded, when named) for the current pins may not approve, and an
// approval whose author does so later is stale. The same sign-off twice
// (same gate, role, author and pins) is one record (RecordSignoff).
//
// Evaluate computes a Readiness as of a checkpoint; Sign signs its canonical
// JSON with the log key (a signed note) and VerifyVerdict checks it, so a
// verdict can be verified and replayed later.
//
// Every query a gate's state depends on is read to its last page; a
// waiver or approval record that does not decode is an error naming its
// entry, never skipped.
//
// Functions here are safe for concurrent use when the store passed in is.
package gates
