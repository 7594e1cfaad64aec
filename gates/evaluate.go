package gates

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
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
}

// Blockers returns "gate (state): reason" for every gate that is neither
// passed nor waived.
func (r *Readiness) Blockers() []string {
	var out []string
	for _, g := range r.Gates {
		if g.State != StatePassed && g.State != StateWaived {
			out = append(out, fmt.Sprintf("%s (%s): %s", g.ID, g.State, g.Reason))
		}
	}
	return out
}

// TreeEquivalenceDetails is the Details object of tree-equivalence
// evidence, the shape `ledger verify` records: lane tree-equivalence/v1,
// backend external, subject commit = the signed head (subject tree = its
// tree), one case, status passed when equivalent. Reviewed is the reviewed
// source commit compared against; Equivalent is true when the head's tree
// equals the reviewed tree after normalizing only the paths matching Pins;
// OutsidePins lists paths that differ outside those globs (empty when
// equivalent).
//
//	{"reviewed": "<commit>", "equivalent": true, "outside_pins": [], "pins": ["Package.resolved"]}
type TreeEquivalenceDetails struct {
	Reviewed    string   `json:"reviewed"`
	Equivalent  *bool    `json:"equivalent"`
	OutsidePins []string `json:"outside_pins"`
	Pins        []string `json:"pins,omitempty"`
}

// TrajectoryDetails is the Details object of trajectory evidence (lane
// trajectory/v1 by default, backend external): one generated token id
// sequence of a named trajectory (fixture prompt) in one decoding mode on
// one runtime backend.
//
//	{"trajectory": "gemma-qat4-b1", "mode": "automatic", "backend": "paged", "tokens": [2, 651, ...]}
type TrajectoryDetails struct {
	Trajectory string  `json:"trajectory"`
	Mode       string  `json:"mode"`
	Backend    string  `json:"backend"`
	Tokens     []int64 `json:"tokens"`
}

// maxPages caps the pages (of 1000) read per evidence query; a gate over
// more records than that at one commit reports it in its reason.
const maxPages = 10

type evaluator struct {
	ctx      context.Context
	store    ledger.Store
	rel      *Release
	now      time.Time
	asOf     uint64
	baseLim  int
	waivers  []waiverEntry
	signoffs []signoffEntry

	mu    sync.Mutex
	pages map[string]*evidencePage
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
// concurrent appends do not change the answer. Errors are store errors or
// CodeNotFound when AsOfSize names no checkpoint.
func Evaluate(ctx context.Context, store ledger.Store, rel *Release, opts EvalOptions) (*Readiness, error) {
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
	cp, err := store.CheckpointAt(ctx, opts.AsOfSize)
	if err != nil {
		return nil, err
	}
	ev := &evaluator{ctx: ctx, store: store, rel: rel, now: opts.Now.UTC(), asOf: cp.Size, baseLim: opts.BaselineLimit, pages: map[string]*evidencePage{}}
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
	return rd, nil
}

// evalParallelism is how many gates are evaluated at once; each holds at
// most one read connection of the store at a time.
const evalParallelism = 4

// gate evaluates one gate without waivers.
func (ev *evaluator) gate(g *Gate) (GateResult, error) {
	var res GateResult
	var err error
	switch g.Kind {
	case KindLane:
		res, err = ev.lane(g)
	case KindSignedHeads:
		res, err = ev.signedHeads(g)
	case KindTreeEquivalence:
		res, err = ev.treeEquivalence(g)
	case KindTrajectory:
		res, err = ev.trajectory(g)
	case KindMatrix:
		res, err = ev.matrix(g)
	case KindManual:
		res = ev.manual(g)
	}
	res.ID, res.Kind, res.Title = g.ID, g.Kind, g.Title
	return res, err
}

func (ev *evaluator) loadRecords() error {
	ws, _, err := ev.store.Entries(ev.ctx, ledger.EntryFilter{Kind: ledger.KindWaiver, Key: ev.rel.Version, AsOfSize: ev.asOf, Limit: 1000})
	if err != nil {
		return err
	}
	for _, e := range ws {
		var w Waiver
		if json.Unmarshal(e.Body, &w) == nil {
			ev.waivers = append(ev.waivers, waiverEntry{e, w})
		}
	}
	as, _, err := ev.store.Entries(ev.ctx, ledger.EntryFilter{Kind: ledger.KindApproval, Key: ev.rel.Version, AsOfSize: ev.asOf, Limit: 1000})
	if err != nil {
		return err
	}
	for _, e := range as {
		var s Signoff
		if json.Unmarshal(e.Body, &s) == nil && s.Type == TypeSignoff {
			ev.signoffs = append(ev.signoffs, signoffEntry{e, s})
		}
	}
	return nil
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

// forEachEvidence calls fn for the evidence matching f (newest first, as of
// the evaluation size), reading at most maxPages pages. It reports whether
// records were left unread.
func (ev *evaluator) forEachEvidence(f ledger.EvidenceFilter, fn func(ledger.EvidenceEntry) bool) (bool, error) {
	f.AsOfSize, f.Limit = ev.asOf, 1000
	for page := 0; page < maxPages; page++ {
		es, next, err := ev.evidence(f)
		if err != nil {
			return false, err
		}
		for _, e := range es {
			if !fn(e) {
				return false, nil
			}
		}
		if next == "" {
			return false, nil
		}
		f.Cursor = next
	}
	return true, nil
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

// pinMismatch returns why e is not about the release's exact pins for a
// gate over commit/tree and artifacts, or "" when every pin matches.
func (ev *evaluator) pinMismatch(e *ledger.Evidence, comp Component, at, commit, tree string, artifacts []string) string {
	s := e.Subject
	if s.Commit != commit {
		switch {
		case at != "reviewed" && s.Commit == comp.Reviewed:
			return fmt.Sprintf("about %s's reviewed source %s, not its signed head %s", comp.Name, short(s.Commit), short(commit))
		case at == "reviewed" && s.Commit == comp.Head:
			return fmt.Sprintf("about %s's signed head %s, not its reviewed source %s", comp.Name, short(s.Commit), short(commit))
		}
		return fmt.Sprintf("other commit %s (release binds %s %s)", short(s.Commit), comp.Name, short(commit))
	}
	if s.Repository != comp.Repository {
		return fmt.Sprintf("other repository %q (release binds %s to %q)", s.Repository, comp.Name, comp.Repository)
	}
	if tree != "" && s.Tree != tree {
		return fmt.Sprintf("other tree %s (release binds %s)", short(s.Tree), short(tree))
	}
	if s.Dirty {
		return "dirty tree (uncommitted changes when it ran)"
	}
	for _, a := range artifacts {
		want := ev.rel.Artifacts[a]
		got, ok := s.Artifacts[a]
		if !ok {
			return fmt.Sprintf("does not carry artifact %s", a)
		}
		if got != want {
			return fmt.Sprintf("other artifact %s %s (release binds %s)", a, shortDigest(got), shortDigest(want))
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
func (ev *evaluator) quality(e *ledger.Evidence, g *Gate, requireControl bool) (reason string, failed bool) {
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
	case g.freshness > 0 && ev.now.Sub(e.FinishedAt) > g.freshness:
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

func (ev *evaluator) lane(g *Gate) (GateResult, error) {
	var res GateResult
	comp, _ := ev.rel.Component(g.Component)
	commit, tree := ev.rel.commitFor(g)
	minRuns := max(g.MinRuns, 1)
	bl := &baselines{limit: ev.baseLim}
	perBackend := map[string]int{}
	var failing []ledger.EvidenceEntry
	truncated, err := ev.forEachEvidence(ledger.EvidenceFilter{Lane: g.Lane, Commit: commit}, func(e ledger.EvidenceEntry) bool {
		if r := ev.pinMismatch(&e.Evidence, comp, g.At, commit, tree, g.Artifacts); r != "" {
			bl.add(e, r)
			return true
		}
		if !slices.Contains(g.Backends, string(e.Evidence.Backend)) {
			bl.add(e, fmt.Sprintf("other backend %s (gate counts %s)", e.Evidence.Backend, strings.Join(g.Backends, ", ")))
			return true
		}
		r, failed := ev.quality(&e.Evidence, g, true)
		if failed {
			failing = append(failing, e)
		}
		if r != "" {
			bl.add(e, r)
			return true
		}
		perBackend[string(e.Evidence.Backend)]++
		if len(res.Satisfying) < 50 {
			res.Satisfying = append(res.Satisfying, ref(e))
		}
		return true
	})
	if err != nil {
		return res, err
	}
	if err := ev.sampleBaseline(g, comp, commit, tree, bl, nil); err != nil {
		return res, err
	}
	res.Baseline = bl.list
	total := 0
	for _, b := range g.Backends {
		total += perBackend[b]
	}
	what := fmt.Sprintf("run of %s at %s %s %s", g.Lane, comp.Name, atName(g.At), short(commit))
	if len(g.Artifacts) > 0 {
		what += " with " + ev.artifactList(g.Artifacts)
	}
	switch {
	case len(failing) > 0:
		res.State = StateFailed
		res.Reason = fmt.Sprintf("%d run(s) at the release's pins failed; newest %s on %s: %d/%d exact", len(failing), failing[0].ID, failing[0].Evidence.Backend, failing[0].Evidence.CasesExact, failing[0].Evidence.CasesTotal)
	case g.AllBackends:
		ok := true
		for _, b := range g.Backends {
			if n := perBackend[b]; n < minRuns {
				ok = false
				res.Missing = append(res.Missing, fmt.Sprintf("%d more passing %s on %s (clean, all cases exact, control caught)", minRuns-n, what, b))
			}
		}
		if ok {
			res.State, res.Reason = StatePassed, fmt.Sprintf("%d passing run(s) at the release's pins on every listed backend (%s; min %d each)", total, strings.Join(g.Backends, ", "), minRuns)
		}
	case total >= minRuns:
		res.State, res.Reason = StatePassed, fmt.Sprintf("%d passing run(s) at the release's pins (min %d)", total, minRuns)
	default:
		res.Missing = append(res.Missing, fmt.Sprintf("%d more passing %s on %s (clean, all cases exact, control caught)", minRuns-total, what, strings.Join(g.Backends, " or ")))
	}
	if res.State == "" {
		res.State = StateOpen
		res.Reason = fmt.Sprintf("%d of %d required passing run(s) at the release's pins", total, minRuns)
		if g.AllBackends {
			var have []string
			for _, b := range g.Backends {
				have = append(have, fmt.Sprintf("%s %d/%d", b, perBackend[b], minRuns))
			}
			res.Reason = fmt.Sprintf("passing runs at the release's pins per backend: %s (every listed backend needs %d)", strings.Join(have, ", "), minRuns)
		}
		if n := len(bl.list) + bl.more; n > 0 {
			res.Reason += fmt.Sprintf("; %d other run(s) of the lane do not count (see baseline)", n)
		}
	}
	if truncated {
		res.Reason += fmt.Sprintf(" (only the newest %d runs at this commit were read)", maxPages*1000)
	}
	return res, nil
}

// sampleBaseline lists the newest runs of the gate's lane at other pins
// (at most the baseline limit are read), for context: they never count.
// keep, when non-nil, filters the records considered.
func (ev *evaluator) sampleBaseline(g *Gate, comp Component, commit, tree string, bl *baselines, keep func(*ledger.Evidence) bool) error {
	es, _, err := ev.evidence(ledger.EvidenceFilter{Lane: g.Lane, AsOfSize: ev.asOf, Limit: ev.baseLim})
	if err != nil {
		return err
	}
	for _, e := range es {
		if keep != nil && !keep(&e.Evidence) {
			continue
		}
		if r := ev.pinMismatch(&e.Evidence, comp, g.At, commit, tree, g.Artifacts); r != "" {
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

func headRef(h ledger.HeadEntry) EvidenceRef {
	v := h.Head
	s := fmt.Sprintf("%s %s: %s, %s", v.Repository, short(v.Commit), v.Verdict, v.Decision)
	if v.Signer != "" {
		s += ", signer " + v.Signer
	}
	if v.Scheme != "" {
		s += " (" + v.Scheme + ")"
	}
	return EvidenceRef{ID: h.ID, Index: h.Index, Summary: s}
}

func (ev *evaluator) signedHeads(g *Gate) (GateResult, error) {
	var res GateResult
	var failed []string
	notVerified := 0
	for _, c := range ev.components(g) {
		hs, _, err := ev.store.Heads(ev.ctx, ledger.HeadFilter{Commit: c.Head, AsOfSize: ev.asOf, Limit: 100})
		if err != nil {
			return res, err
		}
		var decided bool
		for _, h := range hs {
			v := h.Head
			if v.Commit != c.Head {
				continue
			}
			if v.Repository != c.Repository {
				res.Baseline = append(res.Baseline, BaselineRef{EvidenceRef: headRef(h), Reason: fmt.Sprintf("verified as repository %q, release binds %s to %q", v.Repository, c.Name, c.Repository)})
				continue
			}
			if ev.rel.PolicyDigest != "" && v.Policy != ev.rel.PolicyDigest {
				res.Baseline = append(res.Baseline, BaselineRef{EvidenceRef: headRef(h), Reason: fmt.Sprintf("verified under policy %s, release requires %s", shortDigest(v.Policy), shortDigest(ev.rel.PolicyDigest))})
				continue
			}
			decided = true
			switch {
			case c.Tree != "" && v.Tree != "" && v.Tree != c.Tree:
				failed = append(failed, fmt.Sprintf("%s: the verified head's tree %s is not the release's tree pin %s", c.Name, short(v.Tree), short(c.Tree)))
				res.Baseline = append(res.Baseline, BaselineRef{EvidenceRef: headRef(h), Reason: "tree differs from the release's tree pin"})
			case v.Verdict == ledger.VerdictGood && v.Decision == ledger.DecisionTrusted:
				res.Satisfying = append(res.Satisfying, headRef(h))
			case v.Verdict == ledger.VerdictUnsigned:
				// An unsigned head is not a bad signature: the gate stays
				// open until the head is signed and verified again.
				res.Missing = append(res.Missing, fmt.Sprintf("a signature on %s's head %s: it is unsigned (sign it, then `ledger verify head --record`)", c.Name, short(c.Head)))
				res.Baseline = append(res.Baseline, BaselineRef{EvidenceRef: headRef(h), Reason: "the head is unsigned"})
			default:
				why := fmt.Sprintf("%s head %s: verdict %s, decision %s", c.Name, short(c.Head), v.Verdict, v.Decision)
				if v.Reason != "" {
					why += " (" + v.Reason + ")"
				}
				failed = append(failed, why)
				res.Baseline = append(res.Baseline, BaselineRef{EvidenceRef: headRef(h), Reason: "newest verification is not good and trusted"})
			}
			break // the newest applicable verification decides
		}
		if !decided {
			notVerified++
			res.Missing = append(res.Missing, fmt.Sprintf("a verification of %s's signed head %s (%s) that is good and trusted", c.Name, c.Head, c.Repository))
		}
	}
	n := len(ev.components(g))
	switch {
	case len(failed) > 0:
		res.State, res.Reason = StateFailed, strings.Join(failed, "; ")
	case len(res.Missing) > 0:
		res.State, res.Reason = StateOpen, fmt.Sprintf("%d of %d signed heads verified good and trusted; %d not verified yet, %d unsigned", len(res.Satisfying), n, notVerified, len(res.Missing)-notVerified)
	default:
		res.State, res.Reason = StatePassed, fmt.Sprintf("all %d signed heads verified good and trusted", n)
	}
	return res, nil
}

func (ev *evaluator) treeEquivalence(g *Gate) (GateResult, error) {
	var res GateResult
	var failed []string
	n := 0
	for _, c := range ev.components(g) {
		n++
		if c.Head == c.Reviewed {
			res.Satisfying = append(res.Satisfying, EvidenceRef{Summary: c.Name + ": the signed head is the reviewed commit"})
			continue
		}
		bl := &baselines{limit: ev.baseLim}
		var decided bool
		_, err := ev.forEachEvidence(ledger.EvidenceFilter{Lane: g.Lane, Commit: c.Head}, func(e ledger.EvidenceEntry) bool {
			if r := ev.pinMismatch(&e.Evidence, c, "head", c.Head, c.Tree, nil); r != "" {
				bl.add(e, r)
				return true
			}
			var d TreeEquivalenceDetails
			if err := json.Unmarshal(e.Evidence.Details, &d); err != nil || d.Equivalent == nil || d.Reviewed == "" {
				bl.add(e, "details lack reviewed/equivalent (see gates.TreeEquivalenceDetails)")
				return true
			}
			if d.Reviewed != c.Reviewed {
				bl.add(e, fmt.Sprintf("compares against %s, release's reviewed source is %s", short(d.Reviewed), short(c.Reviewed)))
				return true
			}
			if e.Evidence.Status == ledger.StatusError || e.Evidence.Status == ledger.StatusInconclusive {
				bl.add(e, "status "+string(e.Evidence.Status))
				return true
			}
			decided = true
			if *d.Equivalent && len(d.OutsidePins) == 0 && e.Evidence.Status == ledger.StatusPassed {
				r := ref(e)
				r.Summary = fmt.Sprintf("%s: head %s equals reviewed %s apart from pins", c.Name, short(c.Head), short(c.Reviewed))
				res.Satisfying = append(res.Satisfying, r)
			} else {
				why := fmt.Sprintf("%s: head %s differs from reviewed %s", c.Name, short(c.Head), short(c.Reviewed))
				if len(d.OutsidePins) > 0 {
					why += " outside its pins: " + strings.Join(d.OutsidePins, ", ")
				}
				failed = append(failed, why)
				bl.add(e, "shows a difference outside the pins")
			}
			return false // the newest applicable record decides
		})
		if err != nil {
			return res, err
		}
		res.Baseline = append(res.Baseline, bl.list...)
		if !decided {
			res.Missing = append(res.Missing, fmt.Sprintf("%s evidence that %s's signed head %s equals reviewed source %s apart from its pins", g.Lane, c.Name, short(c.Head), short(c.Reviewed)))
		}
	}
	switch {
	case len(failed) > 0:
		res.State, res.Reason = StateFailed, strings.Join(failed, "; ")
	case len(res.Missing) > 0:
		res.State, res.Reason = StateOpen, fmt.Sprintf("%d of %d components shown tree-equivalent; %d without evidence", n-len(res.Missing), n, len(res.Missing))
	default:
		res.State, res.Reason = StatePassed, fmt.Sprintf("all %d signed heads equal their reviewed sources apart from pins", n)
	}
	return res, nil
}

type cellRun struct {
	e      ledger.EvidenceEntry
	tokens []int64
}

func (ev *evaluator) trajectory(g *Gate) (GateResult, error) {
	var res GateResult
	comp, _ := ev.rel.Component(g.Component)
	commit, tree := ev.rel.commitFor(g)
	modes, backends := g.Modes, g.Backends
	if len(modes) == 0 {
		modes = []string{""}
	}
	if len(backends) == 0 {
		backends = []string{""}
	}
	wanted := map[string]bool{}
	for _, t := range g.Trajectories {
		wanted[t] = true
	}
	cells := map[[3]string]cellRun{}
	bl := &baselines{limit: ev.baseLim}
	truncated, err := ev.forEachEvidence(ledger.EvidenceFilter{Lane: g.Lane, Commit: commit}, func(e ledger.EvidenceEntry) bool {
		var d TrajectoryDetails
		if err := json.Unmarshal(e.Evidence.Details, &d); err != nil || d.Trajectory == "" {
			bl.add(e, "details lack trajectory/mode/backend/tokens (see gates.TrajectoryDetails)")
			return true
		}
		if !wanted[d.Trajectory] {
			return true
		}
		if r := ev.pinMismatch(&e.Evidence, comp, g.At, commit, tree, g.Artifacts); r != "" {
			bl.add(e, r)
			return true
		}
		if !slices.Contains(modes, d.Mode) || !slices.Contains(backends, d.Backend) {
			return true
		}
		if e.Evidence.Status == ledger.StatusError {
			bl.add(e, "status error")
			return true
		}
		k := [3]string{d.Trajectory, d.Mode, d.Backend}
		if _, ok := cells[k]; !ok {
			cells[k] = cellRun{e, d.Tokens}
		}
		return true
	})
	if err != nil {
		return res, err
	}
	if err := ev.sampleBaseline(g, comp, commit, tree, bl, func(e *ledger.Evidence) bool {
		var d TrajectoryDetails
		return json.Unmarshal(e.Details, &d) == nil && wanted[d.Trajectory]
	}); err != nil {
		return res, err
	}
	label := func(m, b string) string {
		return strings.Trim(m+"/"+b, "/")
	}
	var divs []Divergence
	for _, t := range g.Trajectories {
		var base *cellRun
		var baseLabel string
		for _, b := range backends {
			for _, m := range modes {
				c, ok := cells[[3]string{t, m, b}]
				if !ok {
					res.Missing = append(res.Missing, fmt.Sprintf("trajectory %s mode %s backend %s at %s %s", t, m, b, comp.Name, short(commit)))
					continue
				}
				r := ref(c.e)
				r.Summary = fmt.Sprintf("%s %s: %d tokens", t, label(m, b), len(c.tokens))
				res.Satisfying = append(res.Satisfying, r)
				if base == nil {
					cc := c
					base, baseLabel = &cc, label(m, b)
					continue
				}
				if d, diverged := firstDivergence(base.tokens, c.tokens); diverged {
					d.Trajectory, d.A, d.B = t, baseLabel, label(m, b)
					divs = append(divs, d)
				}
			}
		}
	}
	res.Baseline = bl.list
	switch {
	case len(divs) > 0:
		res.State = StateFailed
		d := divs[0]
		res.Divergence = &d
		var parts []string
		for _, d := range divs {
			parts = append(parts, d.String())
		}
		res.Reason = strings.Join(parts, "; ")
		res.Missing = append(res.Missing, fmt.Sprintf("identical trajectories across %s", strings.Join(slices.DeleteFunc(append(slices.Clone(g.Modes), g.Backends...), func(s string) bool { return s == "" }), ", ")))
	case len(res.Missing) > 0:
		res.State, res.Reason = StateOpen, fmt.Sprintf("%d trajectory runs missing at the release's pins", len(res.Missing))
	default:
		res.State, res.Reason = StatePassed, fmt.Sprintf("all %d trajectory runs identical", len(res.Satisfying))
	}
	if truncated {
		res.Reason += fmt.Sprintf(" (only the newest %d runs at this commit were read)", maxPages*1000)
	}
	return res, nil
}

// String describes the divergence: "gemma: automatic/paged differs from
// ordinary/paged at index 30 (token 1234 vs 5678)".
func (d Divergence) String() string {
	if d.Index < 0 {
		return fmt.Sprintf("%s: %s and %s agree on their common prefix but differ in length", d.Trajectory, d.B, d.A)
	}
	return fmt.Sprintf("%s: %s differs from %s at index %d (token %d vs %d)", d.Trajectory, d.B, d.A, d.Index, *d.TokenB, *d.TokenA)
}

// firstDivergence compares two token sequences. It returns the first
// zero-based index where they differ with both tokens; Index -1 when one is
// a strict prefix of the other; diverged false when equal.
func firstDivergence(a, b []int64) (Divergence, bool) {
	n := min(len(a), len(b))
	for i := 0; i < n; i++ {
		if a[i] != b[i] {
			ta, tb := a[i], b[i]
			return Divergence{Index: i, TokenA: &ta, TokenB: &tb}, true
		}
	}
	if len(a) != len(b) {
		return Divergence{Index: -1}, true
	}
	return Divergence{}, false
}

func (ev *evaluator) matrix(g *Gate) (GateResult, error) {
	var res GateResult
	comp, _ := ev.rel.Component(g.Component)
	commit, tree := ev.rel.commitFor(g)
	passing := map[string]ledger.EvidenceEntry{}
	failing := map[string]ledger.EvidenceEntry{}
	bl := &baselines{limit: ev.baseLim}
	truncated, err := ev.forEachEvidence(ledger.EvidenceFilter{Lane: g.Lane, Commit: commit}, func(e ledger.EvidenceEntry) bool {
		if r := ev.pinMismatch(&e.Evidence, comp, g.At, commit, tree, g.Artifacts); r != "" {
			bl.add(e, r)
			return true
		}
		var d map[string]any
		_ = json.Unmarshal(e.Evidence.Details, &d)
		key := make([]string, len(g.Dimensions))
		for i, dim := range g.Dimensions {
			v, ok := d[dim.Name]
			var s string
			switch {
			case ok:
				s = fmt.Sprint(v)
			case dim.Name == "backend":
				s = string(e.Evidence.Backend)
			default:
				bl.add(e, fmt.Sprintf("details carry no %q value", dim.Name))
				return true
			}
			if !slices.Contains(dim.Values, s) {
				return true // a cell outside this matrix
			}
			key[i] = dim.Name + "=" + s
		}
		k := strings.Join(key, " ")
		r, failed := ev.quality(&e.Evidence, g, false)
		switch {
		case failed:
			if _, ok := failing[k]; !ok {
				failing[k] = e
			}
		case r != "":
			bl.add(e, k+": "+r)
		default:
			if _, ok := passing[k]; !ok {
				passing[k] = e
			}
		}
		return true
	})
	if err != nil {
		return res, err
	}
	if err := ev.sampleBaseline(g, comp, commit, tree, bl, nil); err != nil {
		return res, err
	}
	var failedCells []string
	total := 0
	eachCell(g.Dimensions, func(cell string) {
		total++
		if e, ok := failing[cell]; ok {
			failedCells = append(failedCells, fmt.Sprintf("%s (%s: %d/%d exact)", cell, e.ID, e.Evidence.CasesExact, e.Evidence.CasesTotal))
			return
		}
		if e, ok := passing[cell]; ok {
			r := ref(e)
			r.Summary = cell + ": " + r.Summary
			res.Satisfying = append(res.Satisfying, r)
			return
		}
		if len(res.Missing) < 200 {
			res.Missing = append(res.Missing, cell)
		} else if len(res.Missing) == 200 {
			res.Missing = append(res.Missing, "… more cells")
		}
	})
	res.Baseline = bl.list
	missing := total - len(res.Satisfying) - len(failedCells)
	switch {
	case len(failedCells) > 0:
		res.State, res.Reason = StateFailed, fmt.Sprintf("%d cell(s) failed at the release's pins: %s", len(failedCells), strings.Join(failedCells, "; "))
	case missing > 0:
		res.State, res.Reason = StateOpen, fmt.Sprintf("%d of %d cells have passing evidence at %s %s; %d missing", len(res.Satisfying), total, comp.Name, short(commit), missing)
	default:
		res.State, res.Reason = StatePassed, fmt.Sprintf("all %d cells have passing evidence", total)
	}
	if truncated {
		res.Reason += fmt.Sprintf(" (only the newest %d runs at this commit were read)", maxPages*1000)
	}
	return res, nil
}

// eachCell calls fn with "a=x b=y ..." for every combination of dims, in
// declaration order.
func eachCell(dims []Dimension, fn func(string)) {
	idx := make([]int, len(dims))
	for {
		parts := make([]string, len(dims))
		for i, d := range dims {
			parts[i] = d.Name + "=" + d.Values[idx[i]]
		}
		fn(strings.Join(parts, " "))
		i := len(dims) - 1
		for ; i >= 0; i-- {
			idx[i]++
			if idx[i] < len(dims[i].Values) {
				break
			}
			idx[i] = 0
		}
		if i < 0 {
			return
		}
	}
}

func (ev *evaluator) manual(g *Gate) GateResult {
	var res GateResult
	pins := ev.rel.PinsDigest()
	for _, se := range ev.signoffs {
		s := se.s
		if s.Gate != g.ID {
			continue
		}
		r := EvidenceRef{ID: se.ID, Index: se.Index, Summary: fmt.Sprintf("signed off by %s (%s) at %s", s.Author, s.Role, s.CreatedAt.Format(time.RFC3339))}
		if s.Note != "" {
			r.Summary += ": " + s.Note
		}
		switch {
		case s.Role != g.Role:
			res.Baseline = append(res.Baseline, BaselineRef{EvidenceRef: r, Reason: fmt.Sprintf("signed with role %s, gate needs %s", s.Role, g.Role)})
		case s.PinsDigest != pins:
			res.Baseline = append(res.Baseline, BaselineRef{EvidenceRef: r, Reason: "signed off for other pins (" + shortDigest(s.PinsDigest) + ")"})
		default:
			res.Satisfying = append(res.Satisfying, r)
		}
	}
	if len(res.Satisfying) > 0 {
		res.State, res.Reason = StatePassed, res.Satisfying[0].Summary
		return res
	}
	res.State = StateOpen
	res.Reason = fmt.Sprintf("no sign-off by a holder of role %s for the current pins", g.Role)
	res.Missing = []string{fmt.Sprintf("a sign-off by a token holding role %s (POST /api/v1/releases/%s/signoffs or ledger release signoff)", g.Role, ev.rel.Version)}
	return res
}
