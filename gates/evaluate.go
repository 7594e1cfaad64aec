package gates

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
)

// EvalOptions controls Evaluate.
type EvalOptions struct {
	// Now is the evaluation time for waiver expiry and freshness; default
	// time.Now().
	Now time.Time
	// AsOfSize evaluates the ledger as it was at the checkpoint of this size
	// (entries with index < AsOfSize); 0 means the latest checkpoint.
	AsOfSize uint64
	// BaselineLimit caps the baseline runs listed per gate (default 10). It
	// only shortens lists; it never changes a state.
	BaselineLimit int
}

// CheckpointRef names the checkpoint a verdict was computed at.
type CheckpointRef struct {
	Size uint64      `json:"size"`
	Root ledger.Hash `json:"root"`
}

// ReleaseRef names the release definition entry a verdict evaluated.
type ReleaseRef struct {
	ID    string `json:"id"`
	Index uint64 `json:"index"`
}

// Readiness is the reasoned answer to "is this release ready?": every
// gate's state with its reason, satisfying evidence, what is missing,
// baseline evidence and waivers, computed as of Checkpoint. Ready is true
// iff every gate is passed or waived. Counts has one entry per state.
type Readiness struct {
	Version    string        `json:"version"`
	Release    ReleaseRef    `json:"release"`
	PinsDigest string        `json:"pins_digest"`
	Ready      bool          `json:"ready"`
	Gates      []GateResult  `json:"gates"`
	Checkpoint CheckpointRef `json:"checkpoint"`
	ComputedAt time.Time     `json:"computed_at"`
	Counts     map[State]int `json:"counts"`
	// Approvals are the final approvals recorded as of Checkpoint, newest
	// first, each current or stale against this verdict's Decision;
	// Approved is true when one is current.
	Approvals []ApprovalState `json:"approvals,omitempty"`
	Approved  bool            `json:"approved,omitempty"`
	// Witnessing, when the release requires a witnessed checkpoint
	// (Release.RequireWitnessed) and none is at hand, says why; Ready is
	// then false.
	Witnessing string `json:"witnessing,omitempty"`

	// ruled are the records whose authors the release's two-person rule
	// (Release.Approval) keeps from approving, as of Checkpoint; set by
	// Evaluate, not part of the verdict's JSON.
	ruled []handRecord
}

// Blockers returns "gate (state): reason" for every gate that is neither
// passed nor waived.
func (r *Readiness) Blockers() []string {
	var out []string
	if r.Witnessing != "" {
		out = append(out, "checkpoint (unwitnessed): "+r.Witnessing)
	}
	for _, g := range r.Gates {
		if g.State != StatePassed && g.State != StateWaived {
			out = append(out, fmt.Sprintf("%s (%s): %s", g.ID, g.State, g.Reason))
		}
	}
	return out
}

// evaluator is one evaluation of a release as of a tree size. Gates are
// evaluated concurrently; the fields other than mu and pages are read-only
// once loadRecords has run.
type evaluator struct {
	ctx      context.Context
	store    ledger.Reader
	rel      *Release
	now      time.Time
	asOf     uint64
	baseLim  int
	waivers  []waiverEntry
	signoffs []signoffEntry
	// approvals are the final approvals recorded as of the size, newest
	// first; supersedes the supersede records for the current pins by the
	// id of the entry they retract.
	approvals  []approvalEntry
	supersedes map[string]supersedeEntry
	// supersedeList is every supersede record for the current pins,
	// newest first (the two-person rule reads their authors).
	supersedeList []supersedeEntry
	// bound are the names of the release's bound artifacts, sorted (the
	// order mismatches are reported in).
	bound []string
	// policy is the digest head verifications must carry: policy_digest,
	// else the digest of the newest registered policy the release names as
	// of the size; noPolicy says why none could be resolved (also when the
	// release binds none: then no head verification counts).
	policy, noPolicy string

	mu    sync.Mutex
	pages map[string]*evidencePage
	// runners is the runner-key registry for signed_by (signer.go).
	runners runnerCache
	// runOutcomes are the run-outcome entries for runner: agent.
	runOutcomes runCache
}

// evidencePage is one cached answer of store.Evidence.
type evidencePage struct {
	once    sync.Once
	entries []ledger.EvidenceEntry
	next    string
	err     error
}

// evidence answers store.Evidence, memoized for the evaluation: gates over
// the same lane and commit (a lane gate per backend, say) share queries.
// The entries are shared: callers must not modify them.
func (ev *evaluator) evidence(f ledger.EvidenceFilter) ([]ledger.EvidenceEntry, string, error) {
	key := fmt.Sprintf("%s\x00%s\x00%s\x00%s\x00%s\x00%d\x00%d", f.Lane, f.Backend, f.Commit, f.ArtifactDigest, f.Cursor, f.AsOfSize, f.Limit)
	ev.mu.Lock()
	p, ok := ev.pages[key]
	if !ok {
		p = &evidencePage{}
		ev.pages[key] = p
	}
	ev.mu.Unlock()
	p.once.Do(func() { p.entries, p.next, p.err = ev.store.Evidence(ev.ctx, f) })
	return p.entries, p.next, p.err
}

type waiverEntry struct {
	ledger.Entry
	w Waiver
}

type signoffEntry struct {
	ledger.Entry
	s Signoff
}

// Evaluate computes the readiness of rel from the ledger as of a checkpoint
// (the latest, or opts.AsOfSize). Every query is bounded by that size, so
// concurrent appends do not change the answer, and every query a state
// depends on is read to its last page. Errors are store errors, CodeNotFound
// when AsOfSize names no checkpoint, and an error naming the entry (id and
// index) when a waiver or approval record in the log does not decode.
func Evaluate(ctx context.Context, store ledger.Reader, rel *Release, opts EvalOptions) (*Readiness, error) {
	if opts.Now.IsZero() {
		opts.Now = time.Now()
	}
	if opts.BaselineLimit <= 0 {
		opts.BaselineLimit = 10
	}
	// Validate a copy: validation fills defaults, and rel may be shared by
	// concurrent callers.
	c := *rel
	c.Gates = slices.Clone(rel.Gates)
	rel = &c
	if err := rel.validate(); err != nil {
		return nil, err
	}
	asOf, wroot, unwitnessed := witnessedSize(store, rel, opts.AsOfSize)
	cp, err := store.CheckpointAt(ctx, asOf)
	if wroot != nil && (err != nil || cp.Root != *wroot) {
		// The witnessed checkpoint is not this log's (a restore accepted
		// after it was cosigned): evaluate the latest, not ready.
		unwitnessed = fmt.Sprintf("the release requires a witnessed checkpoint and the last witnessed one (size %d) is not in this log's history", asOf)
		cp, err = store.CheckpointAt(ctx, opts.AsOfSize)
	}
	if err != nil {
		return nil, err
	}
	ev := &evaluator{ctx: ctx, store: store, rel: rel, now: opts.Now.UTC(), asOf: cp.Size, baseLim: opts.BaselineLimit, pages: map[string]*evidencePage{}}
	for a := range rel.Artifacts {
		ev.bound = append(ev.bound, a)
	}
	sort.Strings(ev.bound)
	if err := ev.loadRecords(); err != nil {
		return nil, err
	}
	rd := &Readiness{
		Version: rel.Version, Release: ReleaseRef{ID: rel.EntryID, Index: rel.EntryIndex}, PinsDigest: rel.PinsDigest(),
		Checkpoint: CheckpointRef{Size: cp.Size, Root: cp.Root}, ComputedAt: ev.now,
		Counts: map[State]int{StatePassed: 0, StateFailed: 0, StateOpen: 0, StateWaived: 0},
	}
	rd.Ready = true
	results := make([]GateResult, len(rel.Gates))
	errs := make([]error, len(rel.Gates))
	sem := make(chan struct{}, evalParallelism)
	var wg sync.WaitGroup
	for i := range rel.Gates {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			results[i], errs[i] = ev.gate(&rel.Gates[i])
		}()
	}
	wg.Wait()
	for i, res := range results {
		if errs[i] != nil {
			return nil, fmt.Errorf("gate %s: %w", rel.Gates[i].ID, errs[i])
		}
		ev.applyWaivers(&res, rd.PinsDigest)
		rd.Counts[res.State]++
		if res.State != StatePassed && res.State != StateWaived {
			rd.Ready = false
		}
		rd.Gates = append(rd.Gates, res)
	}
	if unwitnessed != "" {
		rd.Ready, rd.Witnessing = false, unwitnessed
	}
	rd.ruled = ev.ruledRecords()
	rd.Approvals, rd.Approved = ev.approvalStates(rd.Decision(), rd.ruled)
	return rd, nil
}

// witnessedSize returns the size to evaluate rel at: asOf, except that a
// release requiring a witnessed checkpoint is evaluated at the newest one
// that met the quorum (asOf 0), or at asOf when that is covered by it.
// root, when not nil, is the witnessed root the checkpoint of size must
// have; reason, when not "", is why no witnessed checkpoint is at hand.
func witnessedSize(store ledger.Reader, rel *Release, asOf uint64) (size uint64, root *ledger.Hash, reason string) {
	if !rel.RequireWitnessed {
		return asOf, nil, ""
	}
	wl, ok := store.(ledger.WitnessedLog)
	if !ok {
		return asOf, nil, "the release requires a witnessed checkpoint and this ledger runs no witnesses (serve --witness-policy)"
	}
	ws, wr, ok := wl.LastWitnessed()
	switch {
	case !ok || ws == 0:
		return asOf, nil, "the release requires a witnessed checkpoint and no checkpoint has met the witness quorum yet"
	case asOf == 0:
		return ws, &wr, ""
	case asOf > ws:
		return asOf, nil, fmt.Sprintf("the release requires a witnessed checkpoint and size %d is beyond the last witnessed one (%d)", asOf, ws)
	}
	return asOf, nil, ""
}

// evalParallelism is how many gates are evaluated at once; each holds at
// most one read connection of the store at a time.
const evalParallelism = 4

// gate evaluates one gate without waivers.
func (ev *evaluator) gate(g *Gate) (GateResult, error) {
	k := kindOf(g.Kind)
	res, err := k.evaluate(ev, g)
	res.ID, res.Kind, res.Title, res.Rule = g.ID, g.Kind, g.Title, k.rule
	return res, err
}

// loadRecords reads every waiver, manual sign-off, approval and supersede
// of the release as of the evaluation size.
func (ev *evaluator) loadRecords() error {
	err := forEachEntry(ev.ctx, ev.store, ledger.EntryFilter{Kind: ledger.KindWaiver, Key: ev.rel.Version, AsOfSize: ev.asOf}, func(e ledger.Entry) error {
		w, err := decodeWaiver(e)
		if err == nil {
			ev.waivers = append(ev.waivers, waiverEntry{e, w})
		}
		return err
	})
	if err != nil {
		return err
	}
	err = forEachEntry(ev.ctx, ev.store, ledger.EntryFilter{Kind: ledger.KindApproval, Key: ev.rel.Version, AsOfSize: ev.asOf}, func(e ledger.Entry) error {
		a, s, err := decodeApproval(e)
		switch {
		case err != nil:
		case s != nil:
			ev.signoffs = append(ev.signoffs, signoffEntry{e, *s})
		default:
			ev.approvals = append(ev.approvals, approvalEntry{e, *a})
		}
		return err
	})
	if err != nil {
		return err
	}
	if err := ev.resolvePolicy(); err != nil {
		return err
	}
	return ev.loadSupersedes()
}

// applyWaivers lists every waiver of the gate (newest first) and turns a
// gate that is not passed into waived when one applies: same pins digest,
// not expired.
func (ev *evaluator) applyWaivers(res *GateResult, pins string) {
	var applying *WaiverInfo
	for _, we := range ev.waivers {
		w := we.w
		if w.Gate != res.ID {
			continue
		}
		wi := WaiverInfo{ID: we.ID, Gate: w.Gate, Reason: w.Reason, Author: w.Author, Expires: w.Expires, CreatedAt: w.CreatedAt, Applies: true}
		switch {
		case w.PinsDigest != pins:
			wi.Applies, wi.WhyNot = false, "pins changed"
		case !w.Expires.After(ev.now):
			wi.Applies, wi.WhyNot = false, "expired"
		}
		res.Waivers = append(res.Waivers, wi)
		if wi.Applies && applying == nil {
			applying = &res.Waivers[len(res.Waivers)-1]
		}
	}
	if applying != nil && res.State != StatePassed {
		res.Reason = fmt.Sprintf("waived by %s until %s: %s (without the waiver: %s: %s)", applying.Author, applying.Expires.Format(time.RFC3339), applying.Reason, res.State, res.Reason)
		res.State = StateWaived
	}
}

// forEachEvidence calls fn for the evidence matching f, newest first, as
// of the evaluation size, page after page to the last one or until fn
// returns false.
func (ev *evaluator) forEachEvidence(f ledger.EvidenceFilter, fn func(ledger.EvidenceEntry) bool) error {
	f.AsOfSize, f.Limit, f.Cursor = ev.asOf, pageLimit, ""
	for {
		es, next, err := ev.evidence(f)
		if err != nil {
			return err
		}
		for _, e := range es {
			if !fn(e) {
				return nil
			}
		}
		if next == "" {
			return nil
		}
		f.Cursor = next
	}
}

// forEachHead calls fn for the head verifications matching f, newest
// first, as of the evaluation size, page after page to the last one or
// until fn returns false. The first page is short (headFirstPage): a head
// is verified a few times, so one short page usually holds every
// verification the gate reads.
func (ev *evaluator) forEachHead(f ledger.HeadFilter, fn func(ledger.HeadEntry) bool) error {
	f.AsOfSize, f.Limit, f.Cursor = ev.asOf, headFirstPage, ""
	for ; ; f.Limit = pageLimit {
		hs, next, err := ev.store.Heads(ev.ctx, f)
		if err != nil {
			return err
		}
		for _, h := range hs {
			if !fn(h) {
				return nil
			}
		}
		if next == "" {
			return nil
		}
		f.Cursor = next
	}
}

func ref(e ledger.EvidenceEntry) EvidenceRef {
	ev := e.Evidence
	s := fmt.Sprintf("%d/%d exact, control %s, %s, %s@%s", ev.CasesExact, ev.CasesTotal, ev.Control, ev.Status, short(ev.Subject.Commit), ev.Backend)
	if ev.Subject.Dirty {
		s += ", dirty"
	}
	return EvidenceRef{ID: e.ID, Index: e.Index, Lane: ev.Lane, Backend: ev.Backend, Status: ev.Status, Summary: s}
}

func short(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// binding is what evidence for one gate must be about: the component, the
// commit and tree (tree "" when not pinned) and the bound artifacts the
// gate is about (each must be carried at its bound digest).
type binding struct {
	comp         Component
	at           string
	commit, tree string
	required     []string
}

// bindingOf returns the binding of gate g: its component's commit and tree
// (head or reviewed, per at) and the artifacts it is about: the gate's
// artifacts when it lists any, else its component's.
func (ev *evaluator) bindingOf(g *Gate) binding {
	comp, _ := ev.rel.Component(g.Component)
	commit, tree := ev.rel.commitFor(g)
	req := g.Artifacts
	if len(req) == 0 {
		req = comp.Artifacts
	}
	return binding{comp: comp, at: g.At, commit: commit, tree: tree, required: req}
}

// headBinding is the binding of records about comp's signed head that are
// not about any artifact (tree equivalence).
func headBinding(comp Component) binding {
	return binding{comp: comp, at: "head", commit: comp.Head, tree: comp.Tree}
}

// excluded returns why evidence e does not count under b: another pin
// (pinMismatch), a claim of a verdict only the server computes
// (laneClaim) or a supersede of it for the current pins; "" when it
// counts.
func (ev *evaluator) excluded(e *ledger.EvidenceEntry, b binding) string {
	if r := ev.pinMismatch(&e.Evidence, b); r != "" {
		return r
	}
	if r := laneClaim(&e.Evidence); r != "" {
		return r
	}
	if r, ok := ev.supersededBy(e.ID); ok {
		return r
	}
	return ""
}

// pinMismatch returns why e is not about the release's exact pins under b,
// or "" when every pin matches: repository, commit, tree (when pinned),
// clean work tree, the bound digest of every release artifact e names, and
// every artifact b requires.
func (ev *evaluator) pinMismatch(e *ledger.Evidence, b binding) string {
	s, comp := e.Subject, b.comp
	if s.Commit != b.commit {
		switch {
		case b.at != "reviewed" && s.Commit == comp.Reviewed:
			return fmt.Sprintf("about %s's reviewed source %s, not its signed head %s", comp.Name, short(s.Commit), short(b.commit))
		case b.at == "reviewed" && s.Commit == comp.Head:
			return fmt.Sprintf("about %s's signed head %s, not its reviewed source %s", comp.Name, short(s.Commit), short(b.commit))
		}
		return fmt.Sprintf("other commit %s (release binds %s %s)", short(s.Commit), comp.Name, short(b.commit))
	}
	if s.Repository != comp.Repository {
		return fmt.Sprintf("other repository %q (release binds %s to %q)", s.Repository, comp.Name, comp.Repository)
	}
	if b.tree != "" && s.Tree != b.tree {
		return fmt.Sprintf("other tree %s (release binds %s)", short(s.Tree), short(b.tree))
	}
	if s.Dirty {
		return "dirty tree (uncommitted changes when it ran)"
	}
	for _, a := range ev.bound {
		if got, ok := s.Artifacts[a]; ok && got != ev.rel.Artifacts[a] {
			return fmt.Sprintf("other artifact %s %s (release binds %s)", a, shortDigest(got), shortDigest(ev.rel.Artifacts[a]))
		}
	}
	for _, a := range b.required {
		if _, ok := s.Artifacts[a]; !ok {
			return fmt.Sprintf("does not carry bound artifact %s (release binds %s)", a, shortDigest(ev.rel.Artifacts[a]))
		}
	}
	return ""
}

func shortDigest(d string) string {
	if len(d) > 7+12 {
		return d[:19] + "…"
	}
	return d
}

// quality returns why a run at the exact pins does not pass a lane gate,
// or "" when it passes; failed is true for a real failure (status failed).
func (ev *evaluator) quality(ee *ledger.EvidenceEntry, g *Gate, requireControl bool) (reason string, failed bool) {
	e := &ee.Evidence
	switch {
	case e.Status == ledger.StatusFailed:
		return fmt.Sprintf("failed at the release's pins: %d/%d exact", e.CasesExact, e.CasesTotal), true
	case e.Control == ledger.ControlNotCaught:
		return "negative control not caught (inconclusive)", false
	case e.Status != ledger.StatusPassed:
		return fmt.Sprintf("status %s (%d/%d exact)", e.Status, e.CasesExact, e.CasesTotal), false
	case e.CasesTotal == 0 || e.CasesExact != e.CasesTotal:
		return fmt.Sprintf("not all cases exact: %d/%d", e.CasesExact, e.CasesTotal), false
	case g.Cases > 0 && e.CasesTotal != g.Cases:
		return fmt.Sprintf("ran %d cases, the lane has %d", e.CasesTotal, g.Cases), false
	case requireControl && e.Control != ledger.ControlCaught:
		return "no negative control (the gate requires a caught control)", false
	case g.freshness > 0 && ev.now.Sub(freshFrom(e, ee.RecordedAt)) > g.freshness:
		if at := freshFrom(e, ee.RecordedAt); !at.Equal(e.FinishedAt) {
			return fmt.Sprintf("stale: recorded %s (finished_at %s is later), older than %s", at.Format(time.RFC3339), e.FinishedAt.Format(time.RFC3339), g.Freshness), false
		}
		return fmt.Sprintf("stale: finished %s, older than %s", e.FinishedAt.Format(time.RFC3339), g.Freshness), false
	}
	return "", false
}

type baselines struct {
	list  []BaselineRef
	seen  map[uint64]bool
	limit int
	more  int
}

func (b *baselines) add(e ledger.EvidenceEntry, reason string) {
	if b.seen == nil {
		b.seen = map[uint64]bool{}
	}
	if b.seen[e.Index] {
		return
	}
	b.seen[e.Index] = true
	if len(b.list) >= b.limit {
		b.more++
		return
	}
	b.list = append(b.list, BaselineRef{EvidenceRef: ref(e), Reason: reason})
}

// sampleBaseline lists the newest runs of the gate's lane at other pins
// (at most the baseline limit are read), for context: they never count.
// keep, when non-nil, filters the records considered.
func (ev *evaluator) sampleBaseline(lane string, b binding, bl *baselines, keep func(*ledger.Evidence) bool) error {
	es, _, err := ev.evidence(ledger.EvidenceFilter{Lane: lane, AsOfSize: ev.asOf, Limit: ev.baseLim})
	if err != nil {
		return err
	}
	for _, e := range es {
		if keep != nil && !keep(&e.Evidence) {
			continue
		}
		if r := ev.pinMismatch(&e.Evidence, b); r != "" {
			bl.add(e, r)
		}
	}
	return nil
}

func atName(at string) string {
	if at == "reviewed" {
		return "reviewed source"
	}
	return "signed head"
}

func (ev *evaluator) artifactList(names []string) string {
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = n + "=" + shortDigest(ev.rel.Artifacts[n])
	}
	return strings.Join(parts, ", ")
}

func (ev *evaluator) components(g *Gate) []Component {
	if len(g.Components) == 0 {
		return ev.rel.Components
	}
	var out []Component
	for _, n := range g.Components {
		c, _ := ev.rel.Component(n)
		out = append(out, c)
	}
	return out
}
