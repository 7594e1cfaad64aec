package main

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/runs"
	"github.com/evidence-ledger/ledger/verify"
)

// TestRunEvidenceShapeErrorsNamed: a finish or staging whose envelope
// carries a malformed record (an attempt of 0, a run id of the wrong
// shape, a finish before the start) or names other hardware than the
// agent was approved with (device model, memory) is refused 400 naming the member
// under its element (evidence[i]. for a finish, envelope. for a staging),
// and nothing is recorded.
func TestRunEvidenceShapeErrorsNamed(t *testing.T) {
	e := newAgentEnv(t)
	ctx := context.Background()
	holder, hpriv := e.keyedAgent("holder")
	r := e.queue(runs.Spec{Lanes: []string{quickLane}, Backend: ledger.BackendCPU})
	l, err := holder.Poll(ctx, 2*time.Second, "ok")
	if err != nil || l == nil || l.Run.ID != r.ID {
		t.Fatalf("poll: %+v %v", l, err)
	}
	good := quickEnvelope(t, hpriv, l)
	_, payload, err := ledger.DecodeEnvelope(good)
	if err != nil {
		t.Fatal(err)
	}
	resign := func(change func(map[string]any)) json.RawMessage {
		var m map[string]any
		if err := json.Unmarshal(payload, &m); err != nil {
			t.Fatal(err)
		}
		change(m)
		b, _ := json.Marshal(m)
		env, err := verify.SignRunnerEnvelope(ctx, hpriv, ledger.PayloadTypeEvidence, b)
		if err != nil {
			t.Fatal(err)
		}
		return env
	}
	for _, c := range []struct {
		name, field string
		change      func(map[string]any)
	}{
		{"attempt 0", "run.attempt", func(m map[string]any) { m["run"] = map[string]any{"id": r.ID, "attempt": 0} }},
		{"bad run id", "run.id", func(m map[string]any) { m["run"] = map[string]any{"id": "run_x", "attempt": 1} }},
		{"finished before started", "finished_at", func(m map[string]any) { m["finished_at"] = "2001-01-01T00:00:00Z" }},
		{"another device", "device.model", func(m map[string]any) { m["device"].(map[string]any)["model"] = "AMD Instinct MI300X" }},
		{"memory spelled otherwise", "device.attrs.memory_bytes", func(m map[string]any) {
			d := m["device"].(map[string]any)
			d["attrs"] = map[string]any{"Memory_Bytes ": "1"}
		}},
		{"other memory", "device.attrs.memory_bytes", func(m map[string]any) {
			d := m["device"].(map[string]any)
			d["attrs"] = map[string]any{"memory_bytes": "1"}
		}},
	} {
		env := resign(c.change)
		_, err := holder.Finish(ctx, r.ID, runs.FinishRequest{Attempt: l.Attempt, Lease: l.Lease, Status: "completed", Evidence: []json.RawMessage{env}})
		le, ok := asLedgerError(err)
		if !ok || le.Code != ledger.CodeInvalid || !strings.HasPrefix(le.Field, "evidence[0].") || !strings.HasSuffix(le.Field, c.field) {
			t.Errorf("finish, %s: %v (field %q); want 400 naming evidence[0]...%s", c.name, err, fieldOf(le), c.field)
		}
		_, err = holder.Stage(ctx, r.ID, runs.StageRequest{Attempt: l.Attempt, Lease: l.Lease, Envelope: env})
		le, ok = asLedgerError(err)
		if !ok || le.Code != ledger.CodeInvalid || !strings.HasPrefix(le.Field, "envelope.") || !strings.HasSuffix(le.Field, c.field) {
			t.Errorf("staging, %s: %v (field %q); want 400 naming envelope...%s", c.name, err, fieldOf(le), c.field)
		}
	}
	if got := e.run(r.ID); got.State != runs.Leased || len(e.evidenceOf(quickLane)) != 0 {
		t.Fatalf("after the refused finishes: state %s, %d records", got.State, len(e.evidenceOf(quickLane)))
	}
}

func fieldOf(le *ledger.Error) string {
	if le == nil {
		return ""
	}
	return le.Field
}

// TestLocalRecordRefusesAgentEnvelopes: `ledger record --db` refuses an
// envelope signed by an approved agent's key, as POST /api/v1/evidence
// does (an agent records only through its runs), and one whose signed
// payload names a run, and appends nothing.
func TestLocalRecordRefusesAgentEnvelopes(t *testing.T) {
	e := newAgentEnv(t)
	_, hpriv := e.keyedAgent("holder")
	lease := &runs.LeaseAnswer{Run: runs.Run{ID: "run_" + strings.Repeat("ab", 16)}, Attempt: 1}
	noRun, withRun := quickEnvelope(t, hpriv, nil), quickEnvelope(t, hpriv, lease)
	_ = e.srv.Process.Signal(syscall.SIGTERM)
	_ = e.srv.Wait()
	before := logSize(t, e.db)
	for _, c := range []struct {
		name, want string
		env        json.RawMessage
	}{
		{"no run", "signatures[0]", noRun},
		{"naming a run", "run", withRun},
	} {
		_, se, code := runBin(t, string(c.env), "--db", e.db, "record", "-")
		if code == 0 || !strings.Contains(se, c.want) || !strings.Contains(se, "agent") {
			t.Errorf("local record of an agent's envelope, %s: exit %d %s; want refused naming %s", c.name, code, se, c.want)
		}
	}
	if after := logSize(t, e.db); after != before {
		t.Fatalf("log grew from %d to %d", before, after)
	}
}

// TestConcurrentPollsTakeOneLease: eight polls at once from one agent,
// with three runs queued, leave it holding one lease (an agent runs one
// run at a time), never two.
func TestConcurrentPollsTakeOneLease(t *testing.T) {
	e := newAgentEnv(t)
	ctx := context.Background()
	holder, _ := e.keyedAgent("holder")
	var ids []string
	for range 3 {
		ids = append(ids, e.queue(runs.Spec{Lanes: []string{quickLane}, Backend: ledger.BackendCPU}).ID)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	leases := 0
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := holder.Poll(ctx, time.Second, "ok")
			if err != nil {
				t.Error(err)
			}
			if l != nil {
				mu.Lock()
				leases++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	held := 0
	for _, id := range ids {
		if r := e.run(id); r.State == runs.Leased || r.State == runs.Running {
			held++
		}
	}
	// A poll ends what the agent held before it, so polls that came later
	// may have ended an earlier poll's lease: more may have answered, one
	// is held at the end.
	if leases < 1 || held != 1 {
		t.Fatalf("8 concurrent polls: %d leases answered, %d runs leased at the end; want one leased", leases, held)
	}
}

// TestAgentTextCleanedAndProgressChecked: a heartbeat's progress must be
// progress of the run (its lane one of the run's, counts not negative,
// done at most total): otherwise 400 naming the member and nothing
// stored. A finish message with control and bidirectional characters is
// kept in the run-outcome leaf with them replaced by spaces, and `ledger
// runs show` prints no raw control character.
func TestAgentTextCleanedAndProgressChecked(t *testing.T) {
	e := newAgentEnv(t)
	ctx := context.Background()
	holder, _ := e.keyedAgent("holder")
	r := e.queue(runs.Spec{Lanes: []string{quickLane}, Backend: ledger.BackendCPU, MaxAttempts: 1})
	l, err := holder.Poll(ctx, 2*time.Second, "ok")
	if err != nil || l == nil {
		t.Fatalf("poll: %+v %v", l, err)
	}
	for _, c := range []struct {
		field string
		p     runs.Progress
	}{
		{"progress.lane", runs.Progress{Lane: "x\x1b]0;PWNED\a\u202e", Done: 1, Total: 2}},
		{"progress.lane", runs.Progress{Lane: slowLane, Done: 1, Total: 2}},
		{"progress.lane", runs.Progress{Lane: quickLane + "\x1b]0;PWNED\a\u202eEVIL", Done: 1, Total: 2}},
		{"progress.lane", runs.Progress{Lane: ledger.LaneName(quickLane) + "/v999", Done: 1, Total: 2}},
		{"progress.lane", runs.Progress{Lane: quickLane + strings.Repeat("x", 1000), Done: 1, Total: 2}},
		{"progress", runs.Progress{Lane: quickLane, Done: -1, Total: 2}},
		{"progress.done", runs.Progress{Lane: quickLane, Done: 3, Total: 2}},
		{"progress.lanes_done", runs.Progress{Lane: quickLane, LanesDone: 2}},
		{"progress.total", runs.Progress{Lane: quickLane, Done: 1 << 62, Total: 1<<63 - 1}},
	} {
		_, err := holder.Heartbeat(ctx, r.ID, runs.HeartbeatRequest{Attempt: l.Attempt, Lease: l.Lease, Progress: &c.p})
		if le, ok := asLedgerError(err); !ok || le.Code != ledger.CodeInvalid || le.Field != c.field {
			t.Errorf("heartbeat with progress %+v: %v; want 400 naming %s", c.p, err, c.field)
		}
	}
	good := runs.Progress{Lane: ledger.LaneName(quickLane), Done: 1, Total: 2}
	if _, err := holder.Heartbeat(ctx, r.ID, runs.HeartbeatRequest{Attempt: l.Attempt, Lease: l.Lease, Progress: &good}); err != nil {
		t.Fatalf("heartbeat with good progress: %v", err)
	}
	if got := e.run(r.ID); got.Progress != good {
		t.Fatalf("progress stored: %+v, want %+v", got.Progress, good)
	}
	msg := "boom\x1b]0;PWNED\a\u202eXYZ\nline2"
	if _, err := holder.Finish(ctx, r.ID, runs.FinishRequest{Attempt: l.Attempt, Lease: l.Lease, Status: "error", Message: msg}); err != nil {
		t.Fatal(err)
	}
	got := e.run(r.ID)
	if len(got.Attempts) != 1 || got.Attempts[0].Reason != "boom ]0;PWNED  XYZ line2" {
		t.Fatalf("attempt reason stored: %+v", got.Attempts)
	}
	out, se, code := runBin(t, "", "--server", e.url, "--token", e.admin, "runs", "show", r.ID)
	if code != 0 || strings.ContainsAny(out, "\x1b\a\u202e") || !strings.Contains(out, "PWNED") {
		t.Fatalf("runs show: %d %q %s", code, out, se)
	}
}
