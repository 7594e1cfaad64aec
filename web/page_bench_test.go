package web

import (
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/evidence-ledger/ledger/admit"
	"github.com/evidence-ledger/ledger/gates"
	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/ledger/sqlite"
	"github.com/evidence-ledger/ledger/runs"
	"github.com/evidence-ledger/ledger/verify"
)

// pgBenchRelease seeds a release with 50 lane gates and 10,000 evidence
// records: 200 per gate's lane, of which 4 are at the release's pins (one
// per backend: cpu passes, the others are baseline for a cpu-only gate) and
// the rest about older commits (baseline).
func pgBenchRelease(b testing.TB) *Server {
	return pgServer(b, pgBenchStore(b))
}

// pgBenchStore is pgBenchRelease's store.
func pgBenchStore(b testing.TB) ledger.Store {
	st := pgStore(b)
	const gatesN, perLane = 50, 200
	var y strings.Builder
	y.WriteString("version: bench\ncomponents:\n  - name: core\n    repository: " + pgRepo + "\n    reviewed: " + pgCommit + "\n    head: " + pgCommit + "\nartifacts:\n  libmlx.so: " + pgDigest + "\ngates:\n")
	backends := []ledger.Backend{ledger.BackendCPU, ledger.BackendCUDA, ledger.BackendMetal, ledger.BackendExternal}
	var batch []any
	for g := 0; g < gatesN; g++ {
		lane := fmt.Sprintf("bench-lane-%02d/v1", g)
		fmt.Fprintf(&y, "  - id: gate-%02d\n    kind: lane\n    lane: %s\n    component: core\n    backends: [cpu]\n    artifacts: [libmlx.so]\n", g, lane)
		for i := 0; i < perLane; i++ {
			e := pgQMV(i%7 == 0, backends[i%4], pgDigest, pgT0.Add(time.Duration(g*perLane+i)*time.Second))
			e.Lane = lane
			e.Details = nil
			if i >= 4 {
				e.Subject.Commit = fmt.Sprintf("%040x", i)
			}
			batch = append(batch, e)
			if len(batch) == 1000 {
				pgAppend(b, st, ledger.KindEvidence, batch...)
				batch = batch[:0]
			}
		}
	}
	pgRelease(b, st, y.String())
	return st
}

// BenchmarkReleasePage renders /releases/{version} for a release with 50
// gates over a ledger of 10,000 evidence records (evaluation included).
func BenchmarkReleasePage(b *testing.B) {
	s := pgBenchRelease(b)
	code, body := pgGet(b, s, "/releases/bench")
	if code != 200 || strings.Count(body, `<tbody class="gate"`) != 50 {
		b.Fatalf("release page: %d, %d gates", code, strings.Count(body, `<tbody class="gate"`))
	}
	b.ResetTimer()
	for b.Loop() {
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, httptest.NewRequest("GET", "/releases/bench", nil))
		if rec.Code != 200 {
			b.Fatal(rec.Code)
		}
	}
}

// BenchmarkOverviewPage renders / over the same ledger.
func BenchmarkOverviewPage(b *testing.B) {
	s := pgBenchRelease(b)
	b.ResetTimer()
	for b.Loop() {
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
		if rec.Code != 200 {
			b.Fatal(rec.Code)
		}
	}
}

// BenchmarkLanePage renders one lane's history page (200 runs).
func BenchmarkLanePage(b *testing.B) {
	s := pgBenchRelease(b)
	b.ResetTimer()
	for b.Loop() {
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, httptest.NewRequest("GET", "/lanes/bench-lane-07/v1", nil))
		if rec.Code != 200 {
			b.Fatal(rec.Code)
		}
	}
}

// BenchmarkReleaseEvaluate is the gates.Evaluate share of the release page
// (the same 50 gates over 10,000 records), to tell evaluation from page work.
func BenchmarkReleaseEvaluate(b *testing.B) {
	s := pgBenchRelease(b)
	ctx := b.Context()
	rel, _, err := gates.LoadRelease(ctx, s.store, "bench")
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		if _, err := gates.Evaluate(ctx, s.store, rel, gates.EvalOptions{}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReleaseRender is the template share: executing the release
// template over an already evaluated release.
func BenchmarkReleaseRender(b *testing.B) {
	s := pgBenchRelease(b)
	req := httptest.NewRequest("GET", "/releases/bench", nil)
	p, err := s.loadReleasePage(req, "bench")
	if err != nil {
		b.Fatal(err)
	}
	p.Forms = s.releaseForms(httptest.NewRecorder(), req, "bench", formValues{})
	b.ResetTimer()
	for b.Loop() {
		rec := httptest.NewRecorder()
		s.render(rec, req, 200, "release", p)
	}
}

// BenchmarkReleasePageRuns is BenchmarkReleasePage on a server with a run
// store: the run form's plan (agents, runner-key registry, active runs)
// is computed and its section rendered for every request. Four approved
// cpu agents at the pins are online and 20 runs are active; the 50 gates
// need no run (the fixture's runs at the pins fail them), so the plan
// lists them on one line.
func BenchmarkReleasePageRuns(b *testing.B) {
	st := pgBenchStore(b)
	ctx := b.Context()
	path := filepath.Join(b.TempDir(), "runs.db")
	rdb, err := sqlite.Open(ctx, sqlite.Options{Path: path})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { rdb.Close() })
	db, err := sqlite.OpenAux(path)
	if err != nil {
		b.Fatal(err)
	}
	rs := runs.New(db, nil)
	b.Cleanup(func() { rs.Close() })
	var lanes []string
	for g := 0; g < 50; g++ {
		lanes = append(lanes, fmt.Sprintf("bench-lane-%02d/v1", g))
	}
	for i := 0; i < 4; i++ {
		_, priv, _ := ed25519.GenerateKey(rand.Reader)
		pub := verify.AuthorizedKey(priv.Public().(ed25519.PublicKey))
		name := fmt.Sprintf("cpu-%d", i)
		if err := rs.Register(ctx, runs.Agent{Name: name, KeyID: verify.RunnerKeyID(priv.Public().(ed25519.PublicKey)), PublicKey: pub, Backend: ledger.BackendCPU,
			Labels: map[string]string{}, Spec: runs.AgentSpec{Lanes: lanes, Repository: pgRepo, Commit: pgCommit}, Health: "ok"}); err != nil {
			b.Fatal(err)
		}
		if _, _, err := admit.AddKey(ctx, st.(admit.KeyLog), name, []byte(pub), "admin", ledger.RunnerKindAgent, "", nil); err != nil {
			b.Fatal(err)
		}
	}
	for i := 0; i < 20; i++ {
		spec := runs.Spec{Lanes: []string{fmt.Sprintf("other-%02d/v1", i)}, Backend: ledger.BackendCPU}
		if err := spec.Validate(); err != nil {
			b.Fatal(err)
		}
		if _, err := rs.Create(ctx, spec, "ci"); err != nil {
			b.Fatal(err)
		}
	}
	s, err := New(Config{Store: st, Runs: rs, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	code, body := pgGet(b, s, "/releases/bench")
	if code != 200 || !strings.Contains(body, "Nothing to run for: gate-00 (") {
		b.Fatalf("release page: %d, plan rows %v; want no gate to run", code, planStates(body))
	}
	b.ResetTimer()
	for b.Loop() {
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, httptest.NewRequest("GET", "/releases/bench", nil))
		if rec.Code != 200 {
			b.Fatal(rec.Code)
		}
	}
}
