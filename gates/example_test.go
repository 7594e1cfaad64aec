package gates_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/evidence-ledger/ledger/gates"
	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/ledger/sqlite"
)

const exampleRelease = `version: 0.9.0-example
components:
  - name: mlx
    repository: mlx
    head: f8eec2476cdb5263fb6e2a19dd71f2c8b7c0a7d3
    reviewed: fab0f39f69140393b454c32d6f4bf7a9b32f9dcc
gates:
  - id: qmv-discriminator
    kind: lane
    lane: qmv-bias-sum/v1
    component: mlx
    backends: [metal]
  - id: cuda-execution
    kind: lane
    lane: qmv-bias-sum/v1
    component: mlx
    backends: [cuda]
  - id: platform-review
    kind: manual
    role: platform-reviewer
`

// Evaluate a release: one lane run at the release's exact pins passes the
// discriminator gate; the same run does not count for the CUDA gate (other
// backend), and the manual gate waits for a sign-off.
func ExampleEvaluate() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "gates-example-")
	defer os.RemoveAll(dir)
	store, err := sqlite.Open(ctx, sqlite.Options{Path: filepath.Join(dir, "ledger.db")})
	if err != nil {
		panic(err)
	}
	defer store.Close()

	rel, err := gates.ParseRelease([]byte(exampleRelease))
	if err != nil {
		panic(err)
	}
	if _, err := gates.Apply(ctx, store, rel); err != nil {
		panic(err)
	}
	now := time.Now().UTC()
	ev, _ := json.Marshal(ledger.Evidence{
		Lane:    "qmv-bias-sum/v1",
		Subject: ledger.Subject{Repository: "mlx", Commit: "f8eec2476cdb5263fb6e2a19dd71f2c8b7c0a7d3", Tree: strings.Repeat("0", 40)},
		Backend: ledger.BackendMetal, CasesExact: 216, CasesTotal: 216, Control: ledger.ControlCaught, Status: ledger.StatusPassed,
		StartedAt: now, FinishedAt: now,
	})
	if _, err := store.Append(ctx, []ledger.Record{{Kind: ledger.KindEvidence, Body: ev}}, ""); err != nil {
		panic(err)
	}

	rd, err := gates.Evaluate(ctx, store, rel, gates.EvalOptions{})
	if err != nil {
		panic(err)
	}
	fmt.Println("ready:", rd.Ready)
	for _, g := range rd.Gates {
		fmt.Printf("%s: %s: %s\n", g.ID, g.State, g.Reason)
		for _, b := range g.Baseline {
			fmt.Println("  baseline:", b.Reason)
		}
	}
	// Output:
	// ready: false
	// qmv-discriminator: passed: 1 passing run(s) at the release's pins (min 1)
	// cuda-execution: open: 0 of 1 required passing run(s) at the release's pins; 1 other run(s) of the lane do not count (see baseline)
	//   baseline: other backend metal (gate counts cuda)
	// platform-review: open: no sign-off by a holder of role platform-reviewer for the current pins
}

// Sign a readiness verdict and verify it with the service's public key.
func ExampleVerifyVerdict() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "gates-example-")
	defer os.RemoveAll(dir)
	store, err := sqlite.Open(ctx, sqlite.Options{Path: filepath.Join(dir, "ledger.db")})
	if err != nil {
		panic(err)
	}
	defer store.Close()
	rel, _ := gates.ParseRelease([]byte(exampleRelease))
	gates.Apply(ctx, store, rel)
	rd, _ := gates.Evaluate(ctx, store, rel, gates.EvalOptions{})
	sv, err := gates.Sign(rd, store)
	if err != nil {
		panic(err)
	}
	pub, _ := os.ReadFile(filepath.Join(dir, "ledger.pub"))
	got, err := gates.VerifyVerdict([]byte(sv.Note), string(pub))
	fmt.Println(got.Version, got.Ready, got.Checkpoint.Size, err)
	_, err = gates.VerifyVerdict([]byte(strings.Replace(sv.Note, `"ready":false`, `"ready":true`, 1)), string(pub))
	fmt.Println(err != nil)
	// Output:
	// 0.9.0-example false 1 <nil>
	// true
}

// The counting rule: a failing run at the release's pins keeps the gate
// failed even after a passing run, until a holder of the release's
// approval role supersedes it with a reason; it is then baseline.
func ExampleRecordSupersede() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "gates-example-")
	defer os.RemoveAll(dir)
	store, err := sqlite.Open(ctx, sqlite.Options{Path: filepath.Join(dir, "ledger.db")})
	if err != nil {
		panic(err)
	}
	defer store.Close()
	rel, _ := gates.ParseRelease([]byte(exampleRelease + "approval_role: release-manager\n"))
	if _, err := gates.Apply(ctx, store, rel); err != nil {
		panic(err)
	}
	now := time.Now().UTC()
	run := func(exact int, status ledger.Status) string {
		ev, _ := json.Marshal(ledger.Evidence{
			Lane:    "qmv-bias-sum/v1",
			Subject: ledger.Subject{Repository: "mlx", Commit: "f8eec2476cdb5263fb6e2a19dd71f2c8b7c0a7d3", Tree: strings.Repeat("0", 40)},
			Backend: ledger.BackendMetal, CasesExact: exact, CasesTotal: 216, Control: ledger.ControlCaught, Status: status,
			StartedAt: now, FinishedAt: now.Add(time.Duration(exact) * time.Millisecond),
		})
		res, err := store.Append(ctx, []ledger.Record{{Kind: ledger.KindEvidence, Body: ev}}, "")
		if err != nil {
			panic(err)
		}
		return res.Entries[0].ID
	}
	failed := run(0, ledger.StatusFailed) // the host lost power mid-run
	run(216, ledger.StatusPassed)
	state := func() {
		rd, _ := gates.Evaluate(ctx, store, rel, gates.EvalOptions{})
		g := rd.Gates[0]
		fmt.Printf("%s: %s (%d failing)\n", g.ID, g.State, len(g.Failing))
		for _, b := range g.Baseline {
			fmt.Println("  baseline:", b.Reason[strings.Index(b.Reason, "("):])
		}
	}
	state()
	rm := gates.Actor{Name: "dana", Roles: []string{"release-manager"}}
	if _, _, err := gates.RecordSupersede(ctx, store, rel.Version, failed, "host lost power mid-run", rm, now); err != nil {
		panic(err)
	}
	state()
	// Output:
	// qmv-discriminator: failed (1 failing)
	// qmv-discriminator: passed (0 failing)
	//   baseline: (dana, release-manager): host lost power mid-run
}
