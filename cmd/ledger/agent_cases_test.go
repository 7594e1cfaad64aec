package main

import (
	"context"
	"encoding/json"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/runs"
)

// TestAgentRunsQueuedCaseSelection: `ledger run --remote --lane
// qmv-throughput --cases G --case-budget 1s` queues a run that carries the
// selection; a real agent process on the CPU backend runs exactly the
// selected case, the run, `ledger runs show` and its outcome leaf say
// what was asked for, and the evidence's details.throughput.cases holds
// that one case.
func TestAgentRunsQueuedCaseSelection(t *testing.T) {
	e := newAgentEnv(t)
	e.agent("timer", true)
	const sel = "batch1/n4096/k4096/f32/b4/g64"
	// One case with a 1 s budget ends in seconds; every case at the
	// default 5 s would take many minutes, so a selection lost on the way
	// fails here rather than at go test's timeout.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, ledgerBin, "--server", e.url, "--token", e.runTok, "--json", "run", "--remote", "--backend", "cpu",
		"--lane", "qmv-throughput", "--cases", sel, "--case-budget", "1s")
	var sob, seb strings.Builder
	cmd.Stdout, cmd.Stderr = &sob, &seb
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("the queued run of one case did not end within 2 minutes (did the agent run every case?)\n%s", seb.String())
	}
	so, se, code := sob.String(), seb.String(), cmd.ProcessState.ExitCode()
	if err != nil && code == -1 {
		t.Fatal(err)
	}
	var out struct {
		Run runs.Run `json:"run"`
	}
	if err := json.Unmarshal([]byte(so), &out); err != nil {
		t.Fatalf("run --remote: exit %d: %v\n%s\n%s", code, err, so, se)
	}
	r := out.Run
	if !runs.Final(r.State) || r.OutcomeEntry == "" || len(r.Evidence) != 1 {
		t.Fatalf("run --remote: exit %d, run %+v\n%s", code, r, se)
	}
	if !slices.Equal(r.Cases, []string{sel}) || r.CaseBudget != "1s" || r.MaxSamples != 0 {
		t.Fatalf("the run carries %+v, want cases [%s] and case budget 1s only", r.CaseSelection, sel)
	}
	if !strings.Contains(se, "queued run "+r.ID+" (qmv-throughput/v1 on cpu; cases "+sel+"; case budget 1s)") {
		t.Errorf("the queue line does not say the selection:\n%s", se)
	}
	show, se, code := runBin(t, "", "--server", e.url, "--token", e.runTok, "runs", "show", r.ID)
	if code != 0 || !strings.Contains(show, "cases "+sel+"; case budget 1s") {
		t.Errorf("runs show: exit %d\n%s\n%s", code, show, se)
	}
	list, _, code := runBin(t, "", "--server", e.url, "--token", e.runTok, "runs", "list")
	if code != 0 || !strings.Contains(list, "cases "+sel+"; case budget 1s") {
		t.Errorf("runs list: exit %d\n%s", code, list)
	}

	if body := httpGet(t, e.url+"/runs"); !strings.Contains(body, "cases "+sel+"; case budget 1s") {
		t.Errorf("the /runs page does not show the selection")
	}
	ev := e.evidenceOf("qmv-throughput/v1")
	if len(ev) != 1 || ev[0].ID != r.Evidence[0] {
		t.Fatalf("want one qmv-throughput/v1 record, the run's, got %d", len(ev))
	}
	var det struct {
		Throughput struct {
			Cases []struct {
				ID string `json:"id"`
			} `json:"cases"`
		} `json:"throughput"`
	}
	if err := json.Unmarshal(ev[0].Evidence.Details, &det); err != nil || len(det.Throughput.Cases) != 1 || det.Throughput.Cases[0].ID != sel {
		t.Fatalf("details.throughput.cases: %v %s", err, ev[0].Evidence.Details)
	}
	if ev[0].Evidence.CasesTotal != 1 {
		t.Errorf("cases_total %d, want 1", ev[0].Evidence.CasesTotal)
	}

	ent, err := e.admCl.Entry(context.Background(), r.OutcomeEntry)
	if err != nil {
		t.Fatal(err)
	}
	var o ledger.RunOutcome
	if err := json.Unmarshal(ent.Body, &o); err != nil || !slices.Equal(o.Cases, []string{sel}) || o.CaseBudget != "1s" {
		t.Fatalf("the outcome leaf does not record the selection: %v %s", err, ent.Body)
	}
}
