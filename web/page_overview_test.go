package web

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/evidence-ledger/ledger/gates"
	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/runs"
	"github.com/evidence-ledger/ledger/witness"
)

// pgReadyYAML is a release over the seeded evidence whose one gate the
// promoted CPU run passes: ready, not approved.
const pgReadyYAML = `version: 0.40.0
title: ready release
components:
  - name: core
    repository: ` + pgRepo + `
    reviewed: ` + pgCommit + `
    head: ` + pgCommit + `
artifacts:
  libmlx.so: ` + pgDigest + `
gates:
  - id: qmv-cpu
    kind: lane
    lane: qmv-bias-sum/v1
    component: core
    backends: [cpu]
`

// TestOverviewNeedsAttention: the overview opens with what needs a
// reviewer (the failed gate of 0.32.1, linked to the gate), then the
// releases most urgent first (0.32.1, failed, before 0.40.0, ready,
// although 0.40.0 was defined later and the API lists it first), then the
// lanes grouped by repository; /releases lists the same order.
func TestOverviewNeedsAttention(t *testing.T) {
	st := pgStore(t)
	pgSeed(t, st)
	pgRelease(t, st, pgReleaseYAML)
	pgRelease(t, st, pgReadyYAML)
	other := pgQMV(false, ledger.BackendCPU, pgDigest, pgT0.Add(40*time.Hour))
	other.Subject.Repository = "github.com/example/app"
	pgAppend(t, st, ledger.KindEvidence, other)
	s := pgServer(t, st)
	_, body := pgGet(t, s, "/")
	att, rel, lanes := strings.Index(body, `id="h-attention"`), strings.Index(body, `id="h-releases"`), strings.Index(body, `id="h-lanes"`)
	if att < 0 || !(att < rel && rel < lanes) || att > strings.Index(body, "<h1>Overview</h1>")+200 {
		t.Fatalf("the overview does not open with Needs attention, then releases, then lanes (%d, %d, %d)", att, rel, lanes)
	}
	pgContains(t, "needs attention", body, `<li class="att-failed" data-attention="failed"><a href="/releases/0.32.1#gate-heads">0.32.1 gate heads failed</a>`)
	order := regexp.MustCompile(`<tr data-release="([^"]+)">`).FindAllStringSubmatch(body, -1)
	if len(order) != 2 || order[0][1] != "0.32.1" || order[1][1] != "0.40.0" {
		t.Errorf("release order %v, want 0.32.1 (failed) before 0.40.0 (ready)", order)
	}
	pgContains(t, "overview releases", body, "not approved")
	// Lanes by repository: one group per repository, sorted.
	groups := regexp.MustCompile(`class="repo-h">Repository <code class="wrap">([^<]+)</code>`).FindAllStringSubmatch(body, -1)
	if len(groups) != 2 || groups[0][1] != "github.com/example/app" || groups[1][1] != pgRepo {
		t.Errorf("lane groups %v, want github.com/example/app then %s", groups, pgRepo)
	}
	// The API keeps its order: newest definition first.
	var ov Overview
	code, js := pgGet(t, s, "/api/v1/overview")
	if err := json.Unmarshal([]byte(js), &ov); code != 200 || err != nil || len(ov.Releases) != 2 || ov.Releases[0].Version != "0.40.0" {
		t.Errorf("API overview order changed: %d %v %+v", code, err, ov.Releases)
	}
	code, list := pgGet(t, s, "/releases")
	if code != 200 {
		t.Fatalf("/releases: %d", code)
	}
	if o := regexp.MustCompile(`<tr data-release="([^"]+)">`).FindAllStringSubmatch(list, -1); len(o) != 2 || o[0][1] != "0.32.1" {
		t.Errorf("/releases order %v", o)
	}
}

// TestOverviewWaitingRun: a queued run asking for labels no approved agent
// has is listed under Needs attention with why; an empty ledger says that
// nothing needs attention.
func TestOverviewWaitingRun(t *testing.T) {
	e := newRunFormEnv(t)
	res, err := http.Get(e.srv.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if strings.Contains(string(b), `data-attention="waiting"`) {
		t.Fatal("a waiting run is listed before any was queued")
	}
	r, err := e.rs.Create(context.Background(), runs.Spec{Lanes: []string{"qmv-bias-sum/v1"}, Backend: ledger.BackendCUDA, Labels: map[string]string{"gpu": "b200"}, Repository: runFormRepo, Commit: e.commit}, "manager")
	if err != nil {
		t.Fatal(err)
	}
	res, err = http.Get(e.srv.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(res.Body)
	res.Body.Close()
	pgContains(t, "overview", string(b), `data-attention="waiting"><a href="/runs#run-`+r.ID+`">`, "no approved agent serves cuda qmv-bias-sum/v1 with labels gpu=b200")

	_, empty := pgGet(t, pgServer(t, pgStore(t)), "/")
	pgContains(t, "empty overview", empty, "Nothing needs you now")
}

// TestWitnessAttention: a checkpoint without its quorum, a witness behind
// the log and a witness that refused the log's checkpoint each need
// attention; a witnessed log with every witness caught up needs none.
func TestWitnessAttention(t *testing.T) {
	if got := witnessAttention(nil, 10); got != nil {
		t.Errorf("no witnesses: %v", got)
	}
	ok := &witness.Status{Quorum: "2", Witnessed: true, Witnesses: []witness.WitnessStatus{{Name: "a", CosignedSize: 10}, {Name: "b", CosignedSize: 10}}}
	if got := witnessAttention(ok, 10); len(got) != 0 {
		t.Errorf("witnessed and caught up: %v", got)
	}
	bad := &witness.Status{Quorum: "2", Witnesses: []witness.WitnessStatus{{Name: "a", CosignedSize: 7, LastError: "timeout"}, {Name: "b", Refused: true, LastError: "inconsistent"}}}
	got := witnessAttention(bad, 10)
	kinds := map[string]string{}
	for _, a := range got {
		kinds[a.Title] = a.Kind + ": " + a.Text
	}
	if len(got) != 3 || !strings.HasPrefix(kinds["checkpoint unwitnessed"], "witness: quorum 2 not met") ||
		kinds["witness a is behind"] != "witness: cosigned size 7 of 10: timeout" ||
		!strings.HasPrefix(kinds["witness b refused the log's checkpoint"], "tampered: ") {
		t.Errorf("attention %v", kinds)
	}
}

// TestOverviewApprovalState: an approved release shows who approved it and
// sorts last; once a failing run at its pins makes the approval stale, the
// overview lists the stale approval under Needs attention.
func TestOverviewApprovalState(t *testing.T) {
	st := pgStore(t)
	pgSeed(t, st)
	pgRelease(t, st, pgReleaseYAML)
	pgRelease(t, st, pgReadyYAML)
	if _, _, _, err := gates.RecordApproval(context.Background(), st, "0.40.0", "ship", gates.Actor{Name: "alice"}, time.Now()); err != nil {
		t.Fatal(err)
	}
	s := pgServer(t, st)
	_, body := pgGet(t, s, "/")
	pgContains(t, "approved", body, `<span class="badge state-passed">approved</span> <span class="note">by alice`)
	if strings.Contains(body, `data-attention="stale"`) {
		t.Error("a current approval is listed as needing attention")
	}
	_, rel := pgGet(t, s, "/releases/0.40.0")
	pgContains(t, "release header", rel, `<div id="approvals" class="approval-head">`, `<strong>Approved</strong> <span class="badge state-passed">current</span> by alice`)
	pgAppend(t, st, ledger.KindEvidence, pgQMV(true, ledger.BackendCPU, pgDigest, pgT0.Add(50*time.Hour)))
	_, body = pgGet(t, s, "/")
	pgContains(t, "stale", body, `data-attention="stale"><a href="/releases/0.40.0#approvals">0.40.0 approval by alice is stale</a>`, `<span class="badge state-failed">stale</span>`)
}
