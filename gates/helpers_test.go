package gates

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/ledger/storetest/teststore"
)

var (
	t0 = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

	headA     = strings.Repeat("a1", 20)
	reviewedA = strings.Repeat("b2", 20)
	treeA     = strings.Repeat("c3", 20)
	headB     = strings.Repeat("d4", 20)
	otherC    = strings.Repeat("e5", 20)
	digestLib = "sha256:" + strings.Repeat("11", 32)
	digestOld = "sha256:" + strings.Repeat("47", 32)
	// digestPolicy is the trust policy testYAML binds; recordHead
	// records verifications under it unless told otherwise.
	digestPolicy = "sha256:" + strings.Repeat("9a", 32)
)

// openStore opens an empty store whose clock is t0: SQLite, or
// PostgreSQL under LEDGER_TEST_STORE=postgres (see teststore).
func openStore(t testing.TB) *teststore.Store {
	t.Helper()
	return teststore.Open(t, teststore.Options{Now: func() time.Time { return t0 }})
}

const testYAML = `version: 1.0.0-test
components:
  - name: core
    repository: example/core
    branch: release/1.0
    reviewed: ` + "b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2" + `
    head: ` + "a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1" + `
    tree: ` + "c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3" + `
    pins: [Package.resolved, "deps/*.lock"]
  - name: app
    repository: example/app
    reviewed: ` + "d4d4d4d4d4d4d4d4d4d4d4d4d4d4d4d4d4d4d4d4" + `
    head: ` + "d4d4d4d4d4d4d4d4d4d4d4d4d4d4d4d4d4d4d4d4" + `
artifacts:
  lib: sha256:1111111111111111111111111111111111111111111111111111111111111111
gates:
  - id: qmv
    kind: lane
    title: qmv discriminator
    lane: qmv-bias-sum/v1
    component: core
    backends: [metal, cpu]
    artifacts: [lib]
  - id: heads
    kind: signed-heads
  - id: tree
    kind: tree-equivalence
  - id: traj
    kind: trajectory
    component: core
    trajectories: [gemma]
    modes: [ordinary, automatic]
    backends: [contiguous, paged]
  - id: fleet
    kind: matrix
    lane: fleet/v1
    component: core
    dimensions:
      - {name: model, values: [gemma, qwen]}
      - {name: backend, values: [metal, cuda]}
  - id: platform
    kind: manual
    role: platform-reviewer
policy_digest: sha256:` + "9a9a9a9a9a9a9a9a9a9a9a9a9a9a9a9a9a9a9a9a9a9a9a9a9a9a9a9a9a9a9a9a" + `
`

func testRelease(t testing.TB) *Release {
	t.Helper()
	r, err := ParseRelease([]byte(testYAML))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// only returns a copy of rel with just the gate id.
func only(rel *Release, id string) *Release {
	c := *rel
	g, _ := rel.gate(id)
	c.Gates = []Gate{*g}
	return &c
}

func passing(lane string) ledger.Evidence {
	return ledger.Evidence{
		Lane:    lane,
		Subject: ledger.Subject{Repository: "example/core", Commit: headA, Tree: treeA, Artifacts: map[string]string{"lib": digestLib}},
		Backend: ledger.BackendMetal, CasesExact: 216, CasesTotal: 216, Control: ledger.ControlCaught, Status: ledger.StatusPassed,
		StartedAt: t0.Add(-time.Hour), FinishedAt: t0.Add(-time.Hour + time.Minute),
	}
}

func record(t testing.TB, s ledger.Store, evs ...ledger.Evidence) []ledger.Entry {
	t.Helper()
	var recs []ledger.Record
	for _, e := range evs {
		b, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, ledger.Record{Kind: ledger.KindEvidence, Body: b})
	}
	res, err := s.Append(context.Background(), recs, "")
	if err != nil {
		t.Fatal(err)
	}
	var out []ledger.Entry
	for _, e := range res.Entries {
		out = append(out, e.Entry)
	}
	return out
}

func recordHead(t testing.TB, s ledger.Store, h ledger.HeadVerification) {
	t.Helper()
	if h.VerifiedAt.IsZero() {
		h.VerifiedAt = t0
	}
	if h.Object == "" {
		h.Object = h.Commit
	}
	if h.ObjectType == "" {
		h.ObjectType = "commit"
	}
	if h.Policy == "" {
		h.Policy = digestPolicy
	}
	b, _ := json.Marshal(h)
	if _, err := s.Append(context.Background(), []ledger.Record{{Kind: ledger.KindHead, Body: b}}, ""); err != nil {
		t.Fatal(err)
	}
}

func apply(t testing.TB, s ledger.Store, rel *Release) {
	t.Helper()
	rel.DefinedAt = time.Time{}
	if _, err := Apply(context.Background(), s, rel); err != nil {
		t.Fatal(err)
	}
}

func evaluate(t testing.TB, s ledger.Store, rel *Release) *Readiness {
	t.Helper()
	rd, err := Evaluate(context.Background(), s, rel, EvalOptions{Now: t0})
	if err != nil {
		t.Fatal(err)
	}
	return rd
}

func trajectoryEv(traj, mode, backend string, tokens []int64) ledger.Evidence {
	e := passing(DefaultTrajectoryLane)
	e.Backend = ledger.BackendExternal
	e.CasesExact, e.CasesTotal, e.Control = 1, 1, ledger.ControlNone
	e.Subject.Artifacts = nil
	d, _ := json.Marshal(ledger.Trajectory{Name: traj, Mode: mode, Backend: backend, Tokens: tokens})
	e.Details = d
	return e
}
