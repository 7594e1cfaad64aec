package web

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/evidence-ledger/ledger/ledger/storetest/teststore"

	"github.com/evidence-ledger/ledger/gates"
	"github.com/evidence-ledger/ledger/ledger"
)

// Fixtures shared by the page tests, the browser tests and the benchmark:
// a real SQLite store in a temporary directory, seeded through Append.

const (
	pgRepo     = "github.com/ml-explore/mlx"
	pgCommit   = "0a1b2c3d4e5f60718293a4b5c6d7e8f901234567"
	pgTree     = "1122334455667788990011223344556677889900"
	pgCommitB  = "fedcba9876543210fedcba9876543210fedcba98"
	pgDigest   = "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
	pgDigestB  = "sha256:60303ae22b998861bce3b28f33eec1be758a213c86c93c076dbe9f558c11c752"
	pgQMVLane  = "qmv-bias-sum/v1"
	pgSnapLane = "alloc-snapshot/v1"
)

var pgT0 = time.Date(2026, 11, 2, 9, 0, 0, 0, time.UTC)

// pgStore opens a fresh store (SQLite, or PostgreSQL under
// LEDGER_TEST_STORE=postgres); it is closed at cleanup.
func pgStore(t testing.TB) *teststore.Store {
	t.Helper()
	return teststore.Open(t, teststore.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
}

// pgServer builds the web server over st.
func pgServer(t testing.TB, st ledger.Store) *Server {
	t.Helper()
	var logOut io.Writer = io.Discard
	if testing.Verbose() {
		logOut = os.Stderr
	}
	s, err := New(Config{Store: st, Log: slog.New(slog.NewTextHandler(logOut, nil))})
	if err != nil {
		t.Fatalf("web.New: %v", err)
	}
	return s
}

// pgAppend appends records of kind k (bodies marshalled from v) and returns
// the entries.
func pgAppend(t testing.TB, st ledger.Store, k ledger.Kind, vs ...any) []ledger.AppendedEntry {
	t.Helper()
	recs := make([]ledger.Record, len(vs))
	for i, v := range vs {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		recs[i] = ledger.Record{Kind: k, Body: b}
	}
	res, err := st.Append(context.Background(), recs, "")
	if err != nil {
		t.Fatalf("append %s: %v", k, err)
	}
	return res.Entries
}

// pgQMVCases builds the 216 core case results of the qmv lane: the narrow
// bias sum fails exactly {f16, bf16} x bits 2..6 x 3 group sizes x
// {three-way, overflow} (60 cases, WORKLOADS.md section 2); the promoted
// one passes all.
func pgQMVCases(narrow bool) (cases []ledger.CaseResult, failing []string) {
	for _, d := range []string{"f16", "bf16", "f32"} {
		for _, b := range []int{2, 3, 4, 5, 6, 8} {
			for _, g := range []int{32, 64, 128} {
				for _, p := range []string{"exact-control", "masked-control", "three-way", "overflow"} {
					id := fmt.Sprintf("%s/b%d/g%d/%s", d, b, g, p)
					c := ledger.CaseResult{ID: id, Result: "exact", Expected: "0x4700", Got: "0x4700"}
					if narrow && d != "f32" && b != 8 && (p == "three-way" || p == "overflow") {
						c.Result, c.Got = "mismatch", "0x7c00"
						failing = append(failing, id)
					}
					cases = append(cases, c)
				}
			}
		}
	}
	return cases, failing
}

// pgQMV returns a qmv lane run: narrow (156/216, failed) or promoted
// (216/216, passed), control caught, finished at.
func pgQMV(narrow bool, backend ledger.Backend, digest string, at time.Time) ledger.Evidence {
	cases, failing := pgQMVCases(narrow)
	details, _ := json.Marshal(map[string]any{
		"variant_under_test": map[bool]string{true: "narrow", false: "promoted"}[narrow],
		"cases":              cases,
		"control":            map[string]any{"summary": "narrow: 156/216 exact, 60 failing (predicted 60)"},
	})
	e := ledger.Evidence{
		Lane:    pgQMVLane,
		Subject: ledger.Subject{Repository: pgRepo, Commit: pgCommit, Tree: pgTree, Artifacts: map[string]string{"libmlx.so": digest}},
		Backend: backend, Device: ledger.Device{Model: "AMD EPYC 9654", Cores: 2, Attrs: map[string]string{"os": "linux"}},
		Runner:     ledger.RunnerBuild{Version: "v0.4.0", Commit: pgCommitB},
		CasesExact: 216 - len(failing), CasesTotal: 216, FailingCases: failing,
		Control: ledger.ControlCaught, Status: ledger.StatusPassed,
		StartedAt: at.Add(-90 * time.Second), FinishedAt: at, Details: details,
	}
	if narrow {
		e.Status = ledger.StatusFailed
	}
	return e
}

// pgSnapshot returns an alloc-snapshot run whose control was not caught
// (inconclusive).
func pgSnapshot(at time.Time) ledger.Evidence {
	return ledger.Evidence{
		Lane:    pgSnapLane,
		Subject: ledger.Subject{Repository: pgRepo, Commit: pgCommit, Tree: pgTree},
		Backend: ledger.BackendCPU, CasesExact: 20000, CasesTotal: 20000,
		Control: ledger.ControlNotCaught, Status: ledger.StatusInconclusive,
		StartedAt: at.Add(-time.Minute), FinishedAt: at,
	}
}

// pgTrajectory returns trajectory evidence with tokens.
func pgTrajectory(mode string, tokens []int, at time.Time) ledger.Evidence {
	details, _ := json.Marshal(map[string]any{"trajectory": "qwen3-0.6b/greedy-64", "mode": mode, "backend": "cuda", "tokens": tokens})
	return ledger.Evidence{
		Lane:    "trajectory/v1",
		Subject: ledger.Subject{Repository: pgRepo, Commit: pgCommit, Tree: pgTree},
		Backend: ledger.BackendExternal, CasesExact: 1, CasesTotal: 1, Control: ledger.ControlNone, Status: ledger.StatusPassed,
		StartedAt: at.Add(-time.Second), FinishedAt: at, Details: details,
	}
}

// pgHead returns a head verification.
func pgHead(verdict ledger.Verdict, decision ledger.Decision, at time.Time) ledger.HeadVerification {
	return ledger.HeadVerification{
		Repository: pgRepo, Ref: "refs/heads/main", Object: pgCommit, ObjectType: "commit", Commit: pgCommit, Tree: pgTree,
		Scheme: "ssh", Signer: "release@example.org", Key: "SHA256:2bd806c97f0e00af1a1fc3328fa763a9269723c8db8fac4f93af71db186d6e90",
		Verdict: verdict, GitLetter: "G", Decision: decision, Reason: "signed by an allowed signer", Policy: pgPolicy, VerifiedAt: at,
	}
}

// pgGet fetches path from h and returns the status and body.
func pgGet(t testing.TB, h http.Handler, path string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	return rec.Code, rec.Body.String()
}

// pgContains fails t for each want missing from body.
func pgContains(t testing.TB, what, body string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(body, w) {
			t.Errorf("%s: missing %q", what, w)
		}
	}
}

// pgPolicy is the trust policy digest pgReleaseYAML binds and pgHead's
// verifications were made under.
const pgPolicy = "sha256:5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c"

// pgReleaseYAML is a release over the seeded evidence, bound to pgPolicy:
// core's head is pgCommit (signed, verified good by pgSeed), app is a second component
// whose head nobody verified, libmlx.so is bound to pgDigest (so the narrow
// run on pgDigestB is baseline).
const pgReleaseYAML = `version: 0.32.1
title: qmv bias-sum promotion
policy_digest: ` + pgPolicy + `
components:
  - name: core
    repository: ` + pgRepo + `
    branch: main
    reviewed: ` + pgCommitB + `
    head: ` + pgCommit + `
    pins: [Package.resolved]
  - name: app
    repository: github.com/example/app
    reviewed: 2222222222222222222222222222222222222222
    head: 2222222222222222222222222222222222222222
artifacts:
  libmlx.so: ` + pgDigest + `
gates:
  - id: qmv-cpu
    kind: lane
    title: qmv discriminator on CPU
    lane: qmv-bias-sum/v1
    component: core
    backends: [cpu]
    artifacts: [libmlx.so]
  - id: snapshot
    kind: lane
    lane: alloc-snapshot/v1
    component: core
    backends: [cpu]
  - id: footprint
    kind: lane
    lane: alloc-footprint/v1
    component: core
    backends: [cpu]
  - id: heads
    kind: signed-heads
  - id: tree
    kind: tree-equivalence
    components: [core]
  - id: platform
    kind: manual
    role: platform-reviewer
`

// pgRelease parses and applies a release definition.
func pgRelease(t testing.TB, st ledger.Store, yaml string) {
	t.Helper()
	rel, err := gates.ParseRelease([]byte(yaml))
	if err != nil {
		t.Fatalf("parse release: %v", err)
	}
	if _, err := gates.Apply(context.Background(), st, rel); err != nil {
		t.Fatalf("apply release: %v", err)
	}
}
