package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/evidence-ledger/ledger/client"
	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/runs"
)

// TestLeaseBoundToItsToken: an approved agent's lease is held with the
// token it polled with. The same agent key with another record token
// cannot heartbeat, stage under or finish it (403 naming the token the
// lease was taken with, nothing appended); with its own token it can.
func TestLeaseBoundToItsToken(t *testing.T) {
	e := newAgentEnv(t)
	ctx := context.Background()
	holder, priv := e.keyedAgent("holder")
	other := e.token("other-ci", "record")
	c, err := client.New(e.url, client.Options{Token: other})
	if err != nil {
		t.Fatal(err)
	}
	same := client.NewAgent(c, "holder", priv) // the holder's key, another token
	r := e.queue(runs.Spec{Lanes: []string{quickLane}, Backend: ledger.BackendCPU, MaxAttempts: 1})
	l, err := holder.Poll(ctx, 2*time.Second, "ok")
	if err != nil || l == nil || l.Run.ID != r.ID {
		t.Fatalf("poll: %+v %v", l, err)
	}
	env := quickEnvelope(t, priv, l)
	refused := func(what string, err error) {
		t.Helper()
		if !isCode(err, ledger.CodeForbidden) || !strings.Contains(err.Error(), "token") {
			t.Fatalf("%s with another token: %v, want 403 naming the lease's token", what, err)
		}
	}
	_, err = same.Heartbeat(ctx, r.ID, runs.HeartbeatRequest{Attempt: l.Attempt, Lease: l.Lease})
	refused("heartbeat", err)
	_, err = same.Stage(ctx, r.ID, runs.StageRequest{Attempt: l.Attempt, Lease: l.Lease, Envelope: env})
	refused("stage", err)
	_, err = same.Finish(ctx, r.ID, runs.FinishRequest{Attempt: l.Attempt, Lease: l.Lease, Status: "completed", Evidence: []json.RawMessage{env}})
	refused("finish", err)
	if got := e.run(r.ID); got.State != runs.Leased && got.State != runs.Running {
		t.Fatalf("run after refused requests: %s", got.State)
	}
	if _, err := holder.Finish(ctx, r.ID, runs.FinishRequest{Attempt: l.Attempt, Lease: l.Lease, Status: "completed", Evidence: []json.RawMessage{env}}); err != nil {
		t.Fatalf("finish with the lease's own token: %v", err)
	}
	if got := e.run(r.ID); got.State != runs.Done {
		t.Fatalf("run after the holder's finish: %s", got.State)
	}
}
