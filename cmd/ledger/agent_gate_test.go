package main

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/runs"
)

// TestAgentGateCountsOnlyRunEvidence: a gate with runner: agent passes on
// the evidence an approved agent recorded for a run it held, and an
// agent's key cannot record around the runs: its signed evidence posted
// to POST /api/v1/evidence (for a lane it never declared, with no run
// behind it) is refused 403 naming the signer, nothing is appended, and
// the release stays not ready until the run's evidence is there.
func TestAgentGateCountsOnlyRunEvidence(t *testing.T) {
	e := newAgentEnv(t)
	ctx := context.Background()
	holder, hpriv := e.keyedAgent("holder")
	check := e.agentGateRelease("7.0.0", testRepo)
	size := e.logSize
	// The agent's key around the runs: refused, nothing appended.
	before := size()
	req, _ := http.NewRequest(http.MethodPost, e.url+"/api/v1/evidence", strings.NewReader(string(quickEnvelope(t, hpriv, nil))))
	req.Header.Set("Authorization", "Bearer "+e.recTok)
	req.Header.Set("Content-Type", ledger.ContentTypeDSSE)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var ans struct {
		Field string `json:"field"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&ans)
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden || ans.Field != ledger.SignerField {
		t.Fatalf("agent-signed evidence posted outside a run: %d %+v; want 403 naming signer", resp.StatusCode, ans)
	}
	if after := size(); after != before {
		t.Fatalf("the refused post appended: size %d -> %d", before, after)
	}
	if o := check(1); !strings.Contains(o, "NOT READY") {
		t.Fatalf("check before any run: %s", o)
	}

	// A run that names no repository or commit: the agent's evidence must
	// still be of the build it declared (testRepo at testCommit).
	r := e.queue(runs.Spec{Lanes: []string{quickLane}, Backend: ledger.BackendCPU})
	l, err := holder.Poll(ctx, 2*time.Second, "ok")
	if err != nil || l == nil || l.Run.ID != r.ID || l.Run.Repository != "" || l.Run.Commit != "" {
		t.Fatalf("poll: %+v %v", l, err)
	}
	before = size()
	for _, c := range []struct {
		subj  ledger.Subject
		field string
	}{
		{ledger.Subject{Repository: "github.com/victim/other", Commit: testCommit, Tree: testCommit}, "evidence[0].subject.repository"},
		{ledger.Subject{Repository: testRepo, Commit: strings.Repeat("4", 40), Tree: testCommit}, "evidence[0].subject.commit"},
	} {
		_, err := holder.Finish(ctx, r.ID, runs.FinishRequest{Attempt: 1, Lease: l.Lease, Status: "completed", Evidence: []json.RawMessage{quickEnvelopeOf(t, hpriv, c.subj, l)}})
		var le *ledger.Error
		if !errors.As(err, &le) || le.Code != ledger.CodeInvalid || le.Field != c.field {
			t.Fatalf("finish with evidence of %s@%s, not the agent's declared build: %v; want 400 naming %s", c.subj.Repository, c.subj.Commit, err, c.field)
		}
	}
	if after := size(); after != before {
		t.Fatalf("the refused finishes appended: size %d -> %d", before, after)
	}
	// The same agent's run of its own build: the gate passes.
	got, err := holder.Finish(ctx, r.ID, runs.FinishRequest{Attempt: 1, Lease: l.Lease, Status: "completed", Evidence: []json.RawMessage{quickEnvelope(t, hpriv, l)}})
	if err != nil || got.State != runs.Done {
		t.Fatalf("finish: %+v %v", got, err)
	}
	if o := check(0); !strings.Contains(o, "READY") {
		t.Fatalf("check after the agent's run: %s", o)
	}
}
