package main

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/evidence-ledger/ledger/client"
	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/runner"
	"github.com/evidence-ledger/ledger/runs"
	"github.com/evidence-ledger/ledger/verify"
)

// The staging tests: an agent sends each lane's signed envelope as the
// lane ends (POST /agent/runs/{id}/evidence); the server checks it and
// keeps it staged, in memory, until the finish of the lease that staged
// it names it. They run a real server; the in-test agents sign real
// evidence of quickLane run here on the CPU backend.

// keyedAgent registers (and approves) an in-test agent and returns it
// with its private key, for signing envelopes.
func (e *agentEnv) keyedAgent(name string) (*client.Agent, ed25519.PrivateKey) {
	e.t.Helper()
	return e.keyedAgentWith(name, nil)
}

// keyedAgentWith is keyedAgent registering with labels.
func (e *agentEnv) keyedAgentWith(name string, labels map[string]string) (*client.Agent, ed25519.PrivateKey) {
	e.t.Helper()
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	c, err := client.New(e.url, client.Options{Token: e.recTok})
	if err != nil {
		e.t.Fatal(err)
	}
	a := client.NewAgent(c, name, priv)
	if _, err := a.Register(context.Background(), runs.RegisterRequest{Name: name, PublicKey: verify.AuthorizedKey(pub), Backend: ledger.BackendCPU, Labels: labels,
		Spec: runs.AgentSpec{Lanes: []string{quickLane, slowLane}, Repository: testRepo, Commit: testCommit, Device: cpuDevice(e.t)}, Health: "ok"}); err != nil {
		e.t.Fatalf("register %s: %v", name, err)
	}
	if _, _, _, err := e.admCl.ApproveAgent(context.Background(), name, runs.ApproveRequest{}); err != nil {
		e.t.Fatal(err)
	}
	return a, priv
}

// cpuDevice is the CPU backend's device here, as `ledger agent` registers
// it and its records name it.
func cpuDevice(t *testing.T) ledger.Device {
	t.Helper()
	b, err := runner.OpenBackend("cpu")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	return b.Device()
}

// quickEnvelope runs quickLane here and returns its evidence, naming the
// run and attempt of lease l (none when l is nil), as a DSSE
// envelope signed with priv.
func quickEnvelope(t *testing.T, priv ed25519.PrivateKey, l *runs.LeaseAnswer) json.RawMessage {
	t.Helper()
	return quickEnvelopeOf(t, priv, ledger.Subject{Repository: testRepo, Commit: testCommit, Tree: testCommit}, l)
}

// quickEnvelopeOf is quickEnvelope with the evidence's subject subj.
func quickEnvelopeOf(t *testing.T, priv ed25519.PrivateKey, subj ledger.Subject, l *runs.LeaseAnswer) json.RawMessage {
	t.Helper()
	return quickEnvelopeWith(t, priv, subj, l, nil)
}

// quickEnvelopeWith is quickEnvelopeOf with the evidence changed by
// change (when not nil) before it is signed.
func quickEnvelopeWith(t *testing.T, priv ed25519.PrivateKey, subj ledger.Subject, l *runs.LeaseAnswer, change func(*ledger.Evidence)) json.RawMessage {
	t.Helper()
	b, err := runner.OpenBackend("cpu")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	res, err := runner.Run(context.Background(), b, runner.Options{Lanes: []string{quickLane},
		Subject:      subj,
		BinaryDigest: "sha256:" + strings.Repeat("ab", 32), Runner: runner.BuildRunner()})
	if err != nil {
		t.Fatal(err)
	}
	ev := res[0].Evidence
	if l != nil {
		ev.Run = &ledger.RunRef{ID: l.Run.ID, Attempt: l.Attempt}
	}
	if change != nil {
		change(&ev)
	}
	recs, err := evidenceRecords([]ledger.Evidence{ev})
	if err != nil {
		t.Fatal(err)
	}
	env, err := verify.SignEvidence(context.Background(), priv, recs[0].Body)
	if err != nil {
		t.Fatal(err)
	}
	return env
}

// TestStagedEvidenceAppendedOnlyByTheFinish: a staged envelope is not in
// the log; a staging by an agent that does not hold the lease, for a
// made-up lease, or of evidence signed by another key is refused and
// stages nothing; a finish naming a digest never staged is refused (409
// naming staged[0]) and appends nothing; the finish naming the staged
// digest appends exactly that record.
func TestStagedEvidenceAppendedOnlyByTheFinish(t *testing.T) {
	e := newAgentEnv(t)
	ctx := context.Background()
	holder, hpriv := e.keyedAgent("holder")
	other, opriv := e.keyedAgent("other")
	r := e.queue(runs.Spec{Lanes: []string{quickLane}, Backend: ledger.BackendCPU})
	l, err := holder.Poll(ctx, 2*time.Second, "ok")
	if err != nil || l == nil || l.Run.ID != r.ID {
		t.Fatalf("poll: %+v %v", l, err)
	}
	env := quickEnvelope(t, hpriv, l)
	// Refused stagings.
	if _, err := other.Stage(ctx, r.ID, runs.StageRequest{Attempt: 1, Lease: l.Lease, Envelope: quickEnvelope(t, opriv, l)}); !isCode(err, ledger.CodeConflict) {
		t.Fatalf("a staging by another agent naming the holder's lease: %v, want 409", err)
	}
	if _, err := holder.Stage(ctx, r.ID, runs.StageRequest{Attempt: 1, Lease: "lease_00000000000000000000000000000000", Envelope: env}); !isCode(err, ledger.CodeConflict) {
		t.Fatalf("a staging with a made-up lease: %v, want 409", err)
	}
	if _, err := holder.Stage(ctx, r.ID, runs.StageRequest{Attempt: 1, Lease: l.Lease, Envelope: quickEnvelope(t, opriv, l)}); !isCode(err, ledger.CodeInvalid) {
		t.Fatalf("the holder staging evidence signed by another agent's key: %v, want 400", err)
	}
	if _, err := holder.Stage(ctx, r.ID, runs.StageRequest{Attempt: 1, Lease: l.Lease}); !isCode(err, ledger.CodeInvalid) {
		t.Fatalf("a staging without an envelope: %v, want 400", err)
	}
	// A finish naming what the refused stagings sent finds nothing.
	if _, err := holder.Finish(ctx, r.ID, runs.FinishRequest{Attempt: 1, Lease: l.Lease, Status: "completed", Staged: []string{runs.EnvelopeDigest(env)}}); !isStagedConflict(err) {
		t.Fatalf("a finish naming a digest never staged: %v, want 409 naming staged[0]", err)
	}
	ans, err := holder.Stage(ctx, r.ID, runs.StageRequest{Attempt: 1, Lease: l.Lease, Envelope: env})
	if err != nil || ans.Lane != quickLane || !strings.HasPrefix(ans.Digest, "sha256:") || ans.Evidence == "" {
		t.Fatalf("stage: %+v %v", ans, err)
	}
	if ev := e.evidenceOf(quickLane); len(ev) != 0 {
		t.Fatalf("%d evidence records in the log after staging, before any finish", len(ev))
	}
	if s := e.run(r.ID); len(s.Evidence) != 0 || runs.Final(s.State) {
		t.Fatalf("after staging the run is %+v", s)
	}
	got, err := holder.Finish(ctx, r.ID, runs.FinishRequest{Attempt: 1, Lease: l.Lease, Status: "completed", Staged: []string{ans.Digest}})
	if err != nil || got.State != runs.Done || len(got.Evidence) != 1 || got.Evidence[0] != ans.Evidence {
		t.Fatalf("finish naming the staged digest: %+v %v", got, err)
	}
	ev := e.evidenceOf(quickLane)
	if len(ev) != 1 || ev[0].ID != ans.Evidence || ev[0].Evidence.Signer == nil || ev[0].Evidence.Signer.Runner != "holder" {
		t.Fatalf("want exactly the staged record, signed by holder, got %d: %+v", len(ev), ev)
	}
	// The finish is idempotent: sent again it appends nothing.
	if again, err := holder.Finish(ctx, r.ID, runs.FinishRequest{Attempt: 1, Lease: l.Lease, Status: "completed", Staged: []string{ans.Digest}}); err != nil || again.State != runs.Done {
		t.Fatalf("the same finish again: %+v %v", again, err)
	}
	if ev := e.evidenceOf(quickLane); len(ev) != 1 {
		t.Fatalf("%d records after the finish was sent twice", len(ev))
	}
}

func isStagedConflict(err error) bool {
	var le *ledger.Error
	return errors.As(err, &le) && le.Code == ledger.CodeConflict && le.Field == "staged[0]"
}

// TestCancelAfterStagingAppendsNothing: a cancel drops what was staged,
// a staging while the run is canceling is refused, and the holder's
// completed finish naming its staged digest ends the run canceled with no
// evidence.
func TestCancelAfterStagingAppendsNothing(t *testing.T) {
	e := newAgentEnv(t)
	ctx := context.Background()
	holder, priv := e.keyedAgent("holder")
	r := e.queue(runs.Spec{Lanes: []string{quickLane}, Backend: ledger.BackendCPU})
	l, err := holder.Poll(ctx, 2*time.Second, "ok")
	if err != nil || l == nil {
		t.Fatalf("poll: %+v %v", l, err)
	}
	env := quickEnvelope(t, priv, l)
	ans, err := holder.Stage(ctx, r.ID, runs.StageRequest{Attempt: 1, Lease: l.Lease, Envelope: env})
	if err != nil {
		t.Fatal(err)
	}
	if c, err := e.runCl.CancelRun(ctx, r.ID); err != nil || c.State != runs.Canceling {
		t.Fatalf("cancel: %+v %v", c, err)
	}
	if _, err := holder.Stage(ctx, r.ID, runs.StageRequest{Attempt: 1, Lease: l.Lease, Envelope: env}); !isCode(err, ledger.CodeConflict) {
		t.Fatalf("a staging while canceling: %v, want 409", err)
	}
	got, err := holder.Finish(ctx, r.ID, runs.FinishRequest{Attempt: 1, Lease: l.Lease, Status: "completed", Staged: []string{ans.Digest}})
	if err != nil || got.State != runs.Canceled || len(got.Evidence) != 0 {
		t.Fatalf("finish after the cancel: %+v %v", got, err)
	}
	if ev := e.evidenceOf(quickLane); len(ev) != 0 {
		t.Fatalf("a canceled run recorded %d staged records", len(ev))
	}
}

// TestStagedEvidenceGoneAfterServerRestart: the protocol (an in-test
// agent) and the real agent process. Staged records live in the server's
// memory: after a restart a finish naming them gets 409 naming staged[0]
// and appends nothing, and the same finish with the full envelopes
// appends them once. The real agent, its first lane staged before the
// restart, falls back to the full envelopes by itself.
func TestStagedEvidenceGoneAfterServerRestart(t *testing.T) {
	e := newAgentEnv(t)
	ctx := context.Background()
	e.srvArgs = []string{"--lease-ttl", "8s", "--poll-wait", "2s", "--addr", strings.TrimPrefix(e.url, "http://")}
	e.restart()
	holder, priv := e.keyedAgent("holder")
	r := e.queue(runs.Spec{Lanes: []string{quickLane}, Backend: ledger.BackendCPU})
	l, err := holder.Poll(ctx, 2*time.Second, "ok")
	if err != nil || l == nil {
		t.Fatalf("poll: %+v %v", l, err)
	}
	env := quickEnvelope(t, priv, l)
	ans, err := holder.Stage(ctx, r.ID, runs.StageRequest{Attempt: 1, Lease: l.Lease, Envelope: env})
	if err != nil {
		t.Fatal(err)
	}
	e.restart()
	if _, err := holder.Finish(ctx, r.ID, runs.FinishRequest{Attempt: 1, Lease: l.Lease, Status: "completed", Staged: []string{ans.Digest}}); !isStagedConflict(err) {
		t.Fatalf("a finish naming evidence staged before the restart: %v, want 409 naming staged[0]", err)
	}
	if ev := e.evidenceOf(quickLane); len(ev) != 0 {
		t.Fatalf("the refused finish appended %d records", len(ev))
	}
	got, err := holder.Finish(ctx, r.ID, runs.FinishRequest{Attempt: 1, Lease: l.Lease, Status: "completed", Evidence: []json.RawMessage{env}})
	if err != nil || got.State != runs.Done || len(got.Evidence) != 1 || got.Evidence[0] != ans.Evidence {
		t.Fatalf("the finish with the full envelope: %+v %v", got, err)
	}

	// The real agent: quickLane is staged, then the server is killed while
	// slowLane runs.
	w := e.agent("worker", true, "--max-runs", "1")
	r2 := e.queue(runs.Spec{Lanes: []string{quickLane, slowLane}, Backend: ledger.BackendCPU})
	e.waitFor(60*time.Second, "the agent staged "+quickLane, func() bool {
		return strings.Contains(w.log.String(), "agent staged a lane's evidence") || runs.Final(e.run(r2.ID).State)
	})
	// The server dies (its staged records with it) and comes back once the
	// agent's lanes have ended and its finish is being retried.
	_ = e.srv.Process.Kill()
	_ = e.srv.Wait()
	time.Sleep(1500 * time.Millisecond)
	e.start()
	done := e.waitState(r2.ID, 120*time.Second, runs.Done, runs.Failed, runs.Expired)
	if done.State != runs.Done || done.Attempt != 1 || len(done.Evidence) != 2 {
		t.Fatalf("run %+v: want done in attempt 1 with two records", done)
	}
	if !strings.Contains(w.log.String(), "staged evidence is gone from the server") {
		t.Fatalf("the agent did not fall back to the full envelopes")
	}
	for _, lane := range []string{quickLane, slowLane} {
		n := 0
		for _, x := range e.evidenceOf(lane) {
			if x.Evidence.Signer != nil && x.Evidence.Signer.Runner == "worker" {
				n++
			}
		}
		if n != 1 {
			t.Fatalf("lane %s: %d records by worker, want exactly 1", lane, n)
		}
	}
}

// TestAgentKilledAfterStagingOneSetOfEvidence: the first agent stages
// quickLane's evidence and is killed (-9) while slowLane runs; attempt 2
// on another agent records exactly one set, its own: attempt 1's staged
// record is never appended.
func TestAgentKilledAfterStagingOneSetOfEvidence(t *testing.T) {
	e := newAgentEnv(t)
	a1 := e.agent("first", true)
	r := e.queue(runs.Spec{Lanes: []string{quickLane, slowLane}, Backend: ledger.BackendCPU})
	e.waitFor(60*time.Second, "the first agent staged "+quickLane, func() bool { return strings.Contains(a1.log.String(), "agent staged a lane's evidence") })
	if err := a1.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = a1.cmd.Wait()
	e.waitState(r.ID, 30*time.Second, runs.Queued)
	e.agent("second", true)
	got := e.waitState(r.ID, 120*time.Second, runs.Done, runs.Failed, runs.Expired)
	if got.State != runs.Done || got.Attempt != 2 || got.Agent != "second" {
		t.Fatalf("run %+v: want done by second in attempt 2", got)
	}
	for i, lane := range []string{quickLane, slowLane} {
		ev := e.evidenceOf(lane)
		if len(ev) != 1 || ev[0].Evidence.Signer == nil || ev[0].Evidence.Signer.Runner != "second" || ev[0].ID != got.Evidence[i] {
			t.Fatalf("lane %s: want exactly one record, by second, got %d", lane, len(ev))
		}
	}
}

// TestRunFollowAnswersOnChange: GET /runs/{id}?wait=&since= holds the
// request while the run is unchanged, answers within a bounded time of a
// change (here a cancel), answers at the end of wait when nothing
// changed, and refuses a bad wait naming the field.
func TestRunFollowAnswersOnChange(t *testing.T) {
	e := newAgentEnv(t)
	ctx := context.Background()
	r := e.queue(runs.Spec{Lanes: []string{quickLane}, Backend: ledger.BackendCPU, Labels: map[string]string{"gpu": "none-has-this"}})
	cur, v, err := e.runCl.RunWait(ctx, r.ID, "", 0)
	if err != nil || v == "" || cur.State != runs.Queued {
		t.Fatalf("read: %+v %q %v", cur, v, err)
	}
	// Nothing changes: the answer comes when wait ends, the same version.
	start := time.Now()
	_, v2, err := e.runCl.RunWait(ctx, r.ID, v, time.Second)
	if took := time.Since(start); err != nil || v2 != v || took < 900*time.Millisecond || took > 5*time.Second {
		t.Fatalf("an unchanged run: version %q (was %q) after %s, %v; want the same after about 1s", v2, v, took, err)
	}
	// A change wakes the waiting read at once.
	type answer struct {
		run runs.Run
		at  time.Time
		err error
	}
	ch := make(chan answer, 1)
	go func() {
		got, _, err := e.runCl.RunWait(ctx, r.ID, v, 20*time.Second)
		ch <- answer{got, time.Now(), err}
	}()
	time.Sleep(500 * time.Millisecond)
	changed := time.Now()
	if _, err := e.runCl.CancelRun(ctx, r.ID); err != nil {
		t.Fatal(err)
	}
	select {
	case a := <-ch:
		lag := a.at.Sub(changed)
		t.Logf("the follow answered %s after the change", lag.Round(time.Millisecond))
		// At once, not when the 20 s wait ends; 5 s leaves room for the
		// cancel's own write on a loaded machine.
		if a.err != nil || a.run.State != runs.Canceled || lag > 5*time.Second {
			t.Fatalf("the follow answered %+v %v %s after the cancel", a.run, a.err, lag)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the follow did not answer within 10 s of the change")
	}
	// A final run is answered at once, whatever since says.
	start = time.Now()
	fin, vf, err := e.runCl.RunWait(ctx, r.ID, "00", 10*time.Second)
	if err != nil || fin.State != runs.Canceled || vf == "" || time.Since(start) > 2*time.Second {
		t.Fatalf("a final run: %+v %v after %s", fin, err, time.Since(start))
	}
	for q, field := range map[string]string{"wait=soon&since=00": "wait", "wait=-1s&since=00": "wait", "since=00": "wait", "wait=1s&since=zz": "since"} {
		resp, err := http.Get(e.url + "/api/v1/runs/" + r.ID + "?" + q)
		if err != nil {
			t.Fatal(err)
		}
		var body struct {
			Field string `json:"field"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || body.Field != field {
			t.Errorf("?%s: %d field %q, want 400 naming %s", q, resp.StatusCode, body.Field, field)
		}
	}
}
