package main

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/evidence-ledger/ledger/client"
	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/ledger/sqlite"
	"github.com/evidence-ledger/ledger/runs"
	"github.com/evidence-ledger/ledger/verify"
)

const victimRepo = "github.com/victim/other"

// logSize is the size of the server's log, read from its checkpoint.
func (e *agentEnv) logSize() uint64 {
	e.t.Helper()
	var cp struct {
		Size uint64 `json:"size"`
	}
	if code := getJSON(e.t, e.url+"/api/v1/log/checkpoint", &cp); code != http.StatusOK {
		e.t.Fatalf("GET /api/v1/log/checkpoint: %d", code)
	}
	return cp.Size
}

// agentGateRelease applies a release whose one gate needs evidence of
// quickLane on cpu of repo at testCommit produced by an agent, and
// returns a function that runs `ledger release check` and its output.
func (e *agentEnv) agentGateRelease(version, repo string) func(want int) string {
	e.t.Helper()
	return e.agentGateReleaseWith(version, repo, "")
}

// agentGateReleaseWith is agentGateRelease with extra added to the gate's
// flow mapping (", agent_labels: {gpu: h200}").
func (e *agentEnv) agentGateReleaseWith(version, repo, extra string) func(want int) string {
	e.t.Helper()
	rel := `version: ` + version + `
components:
  - {name: core, repository: ` + repo + `, reviewed: ` + testCommit + `, head: ` + testCommit + `}
gates:
  - {id: footprint, kind: lane, lane: ` + quickLane + `, component: core, backends: [cpu], runner: agent` + extra + `}
`
	relFile := filepath.Join(e.t.TempDir(), "release.yaml")
	if err := os.WriteFile(relFile, []byte(rel), 0o644); err != nil {
		e.t.Fatal(err)
	}
	adm := []string{"--server", e.url, "--token", e.admin}
	if o, se, code := runBin(e.t, "", append(adm, "release", "apply", relFile)...); code != 0 {
		e.t.Fatalf("release apply: exit %d %s%s", code, o, se)
	}
	return func(want int) string {
		e.t.Helper()
		o, se, code := runBin(e.t, "", append(adm, "release", "check", version)...)
		if code != want {
			e.t.Fatalf("release check %s: exit %d, want %d\n%s%s", version, code, want, o, se)
		}
		return o
	}
}

// TestAgentRegistrationMustDeclareBuild: an agent records evidence of
// the build it declared, so a registration through the real server that
// declares no repository or commit (or a repository URL, not its name) is
// refused naming the field, registering nothing; and a registration row
// stored without them (as before registration refused one), even once
// approved, records nothing: its finish carrying evidence of another
// repository is refused, the log does not grow and a `runner: agent` gate
// of that repository stays not ready.
func TestAgentRegistrationMustDeclareBuild(t *testing.T) {
	e := newAgentEnv(t)
	ctx := context.Background()
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	c, err := client.New(e.url, client.Options{Token: e.recTok})
	if err != nil {
		t.Fatal(err)
	}
	ag := client.NewAgent(c, "blank", priv)
	for _, tc := range []struct {
		repo, commit, field, says string
	}{
		{"", testCommit, "spec.repository", "required"},
		{"   ", testCommit, "spec.repository", "required"},
		{testRepo, "", "spec.commit", "required"},
		{testRepo, "HEAD", "spec.commit", "required"},
		{"https://" + victimRepo + ".git", testCommit, "spec.repository", victimRepo},
	} {
		_, err := ag.Register(ctx, runs.RegisterRequest{Name: "blank", PublicKey: verify.AuthorizedKey(pub), Backend: ledger.BackendCPU,
			Spec: runs.AgentSpec{Lanes: []string{quickLane}, Repository: tc.repo, Commit: tc.commit}, Health: "ok"})
		le, ok := asLedgerError(err)
		if !ok || le.Code != ledger.CodeInvalid || le.Field != tc.field || !strings.Contains(le.Message, tc.says) {
			t.Fatalf("register with repository %q commit %q: %v; want 400 naming %s (%q)", tc.repo, tc.commit, err, tc.field, tc.says)
		}
	}
	if as, err := e.admCl.Agents(ctx); err != nil || len(as) != 0 {
		t.Fatalf("refused registrations stored agents: %+v %v", as, err)
	}

	// A row without a build, stored as an older server would have.
	db, err := sqlite.OpenAux(e.db)
	if err != nil {
		t.Fatal(err)
	}
	rs := runs.New(db, nil)
	defer rs.Close()
	if err := rs.Register(ctx, runs.Agent{Name: "blank", KeyID: verify.RunnerKeyID(pub), PublicKey: verify.AuthorizedKey(pub), Backend: ledger.BackendCPU,
		Labels: map[string]string{}, Spec: runs.AgentSpec{Lanes: []string{quickLane}}, Health: "ok"}); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := e.admCl.ApproveAgent(ctx, "blank", runs.ApproveRequest{}); err != nil {
		t.Fatal(err)
	}
	check := e.agentGateRelease("8.0.0", victimRepo)
	check(1)
	r := e.queue(runs.Spec{Lanes: []string{quickLane}, Backend: ledger.BackendCPU})
	l, err := ag.Poll(ctx, 2*time.Second, "ok")
	if err != nil || l == nil || l.Run.ID != r.ID {
		t.Fatalf("poll: %+v %v", l, err)
	}
	before := e.logSize()
	for _, subj := range []ledger.Subject{
		{Repository: victimRepo, Commit: testCommit, Tree: testCommit},
		{Repository: testRepo, Commit: testCommit, Tree: testCommit},
	} {
		_, err = ag.Finish(ctx, r.ID, runs.FinishRequest{Attempt: 1, Lease: l.Lease, Status: "completed", Evidence: []json.RawMessage{quickEnvelopeOf(t, priv, subj, l)}})
		if le, ok := asLedgerError(err); !ok || le.Code != ledger.CodeInvalid || le.Field != "evidence[0].subject" || !strings.Contains(le.Message, "declared no build") {
			t.Fatalf("finish of an agent that declared no build, evidence of %s: %v; want 400 naming evidence[0].subject", subj.Repository, err)
		}
	}
	if after := e.logSize(); after != before {
		t.Fatalf("refused finishes appended: size %d -> %d", before, after)
	}
	if o := check(1); !strings.Contains(o, "NOT READY") {
		t.Fatalf("check after the refused finish: %s", o)
	}
}

// TestAgentApproveBindsSpec: an approval is of the registration the admin
// checked. A waiting agent that registers again with another repository
// after `agent list` showed it makes `agent approve --spec` of the listed
// digest fail (exit 2 naming the new repository, nothing appended,
// still unapproved); approving the digest of what is registered now
// approves it and prints what it approved; a malformed --spec, or a prefix
// of the digest, is refused.
func TestAgentApproveBindsSpec(t *testing.T) {
	e := newAgentEnv(t)
	ctx := context.Background()
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	kid := verify.RunnerKeyID(pub)
	c, err := client.New(e.url, client.Options{Token: e.recTok})
	if err != nil {
		t.Fatal(err)
	}
	ag := client.NewAgent(c, "gpu1", priv)
	register := func(repo string) runs.Agent {
		t.Helper()
		got, err := ag.Register(ctx, runs.RegisterRequest{Name: "gpu1", PublicKey: verify.AuthorizedKey(pub), Backend: ledger.BackendCPU,
			Spec: runs.AgentSpec{Lanes: []string{quickLane}, Repository: repo, Commit: testCommit}, Health: "ok"})
		if err != nil {
			t.Fatalf("register with %s: %v", repo, err)
		}
		return got
	}
	first := register(testRepo)
	adm := []string{"--server", e.url, "--token", e.admin, "agent"}
	out, se, code := runBin(t, "", append(adm, "list")...)
	listed := first.SpecDigest
	if code != 0 || !strings.Contains(out, "SPEC") || !strings.Contains(out, listed) || !strings.Contains(out, testRepo) || !strings.Contains(out, quickLane) {
		t.Fatalf("agent list: exit %d %s %s; want spec %s, repository and lanes", code, out, se, listed)
	}
	swapped := register(victimRepo)
	if swapped.SpecDigest == first.SpecDigest {
		t.Fatal("registrations of two repositories have one spec digest")
	}
	before := e.logSize()
	_, se, code = runBin(t, "", append(adm, "approve", "gpu1", "--key-id", kid, "--spec", listed)...)
	if code != 2 || !strings.Contains(se, "nothing was approved") || !strings.Contains(se, victimRepo) || !strings.Contains(se, "is not agent \"gpu1\"'s current spec digest") || !strings.Contains(se, "ledger agent list") {
		t.Fatalf("approve --spec of the listed registration after it changed: exit %d %s; want 2 naming %s", code, se, victimRepo)
	}
	// The current digest is read from agent list, not copied from the
	// refusal.
	if strings.Contains(se, strings.TrimPrefix(swapped.SpecDigest, "sha256:")[:16]) {
		t.Fatalf("the refusal prints the registration's current spec digest: %s", se)
	}
	// A prefix of the registration's own digest does not do either: the
	// agent chooses both registrations, so a cut digest is open to a
	// birthday collision.
	for _, bad := range []string{"abc", "sha256:" + strings.Repeat("z", 16), strings.Repeat("a", 65), swapped.SpecDigest[:23], swapped.SpecDigest[:len(swapped.SpecDigest)-1]} {
		if _, se, code = runBin(t, "", append(adm, "approve", "gpu1", "--spec", bad)...); code != 2 || !strings.Contains(se, "spec_digest") {
			t.Fatalf("approve --spec %s: exit %d %s; want 2 naming spec_digest", bad, code, se)
		}
	}
	if after := e.logSize(); after != before {
		t.Fatalf("refused approvals appended: size %d -> %d", before, after)
	}
	if as, _ := e.admCl.Agents(ctx); len(as) != 1 || as[0].Approved {
		t.Fatalf("after refused approvals: %+v", as)
	}
	out, se, code = runBin(t, "", append(adm, "approve", "gpu1", "--key-id", kid, "--spec", swapped.SpecDigest)...)
	if code != 0 || !strings.Contains(out, "approved runner gpu1 key "+kid) || !strings.Contains(out, "repository "+victimRepo) || !strings.Contains(out, swapped.SpecDigest) {
		t.Fatalf("approve --spec of the registration as it is: exit %d %s %s", code, out, se)
	}
	if strings.Contains(se, "note:") {
		t.Fatalf("approve with --spec printed the no-spec note: %s", se)
	}
	// The approval leaf records the spec approved.
	rl, err := e.admCl.Runners(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if live, ok := rl.Live("gpu1"); !ok || live.SpecDigest != swapped.SpecDigest {
		leafSpec := live.SpecDigest
		t.Fatalf("the approval leaf records spec %q (live %v), want %s", leafSpec, ok, swapped.SpecDigest)
	}
	// Approved, the repository is frozen: the first one is refused now.
	if _, err := ag.Register(ctx, runs.RegisterRequest{Name: "gpu1", PublicKey: verify.AuthorizedKey(pub), Backend: ledger.BackendCPU,
		Spec: runs.AgentSpec{Lanes: []string{quickLane}, Repository: testRepo, Commit: testCommit}, Health: "ok"}); !isCode(err, ledger.CodeConflict) {
		t.Fatalf("an approved agent registering another repository: %v, want 409", err)
	}

	// A new commit keeps the approval, and the list says the spec changed.
	if _, err := ag.Register(ctx, runs.RegisterRequest{Name: "gpu1", PublicKey: verify.AuthorizedKey(pub), Backend: ledger.BackendCPU,
		Spec: runs.AgentSpec{Lanes: []string{quickLane}, Repository: victimRepo, Commit: strings.Repeat("5", 40)}, Health: "ok"}); err != nil {
		t.Fatalf("an approved agent registering a new commit: %v", err)
	}
	if out, se, code = runBin(t, "", append(adm, "list")...); code != 0 || !strings.Contains(out, "spec changed since: approved "+swapped.SpecDigest) {
		t.Fatalf("agent list after the commit changed: exit %d %s %s; want the approved spec named", code, out, se)
	}
	// A key that can never be approved is refused at registration: the
	// approved key under another name, and, after remove, the revoked key.
	reg := func(name string) error {
		_, err := client.NewAgent(c, name, priv).Register(ctx, runs.RegisterRequest{Name: name, PublicKey: verify.AuthorizedKey(pub), Backend: ledger.BackendCPU,
			Spec: runs.AgentSpec{Lanes: []string{quickLane}, Repository: testRepo, Commit: testCommit}, Health: "ok"})
		return err
	}
	if err := reg("gpu1-alias"); !isCode(err, ledger.CodeConflict) || !strings.Contains(err.Error(), `runner "gpu1"'s`) {
		t.Fatalf("the approved key registered under another name: %v, want 409", err)
	}
	if _, se, code = runBin(t, "", append(adm, "remove", "gpu1")...); code != 0 {
		t.Fatalf("agent remove: %d %s", code, se)
	}
	if err := reg("gpu1"); !isCode(err, ledger.CodeConflict) || !strings.Contains(err.Error(), "revoked") {
		t.Fatalf("the revoked key registering again: %v, want 409 naming the revocation", err)
	}

	// Without --spec the CLI approves what it finds and says so.
	e.signedAgent("cpu2", false)
	_, se, code = runBin(t, "", append(adm, "approve", "cpu2")...)
	if code != 0 || !strings.Contains(se, "note: approved the registration as the server found it") || !strings.Contains(se, "--spec sha256:") {
		t.Fatalf("approve without --spec: exit %d %s; want a note naming --spec", code, se)
	}
}

func asLedgerError(err error) (*ledger.Error, bool) {
	var le *ledger.Error
	return le, errors.As(err, &le)
}

// TestAgentPollEndsHeldLease: an agent runs one run at a time, so a poll
// by an agent that holds a lease ends that lease at once: the attempt is
// an infrastructure failure naming the poll, the run is queued again (and
// here given straight back as attempt 2), and the old lease's finish is
// refused with nothing recorded. One agent never holds two leases.
func TestAgentPollEndsHeldLease(t *testing.T) {
	e := newAgentEnv(t)
	ctx := context.Background()
	holder, hpriv := e.keyedAgent("holder")
	a := e.queue(runs.Spec{Lanes: []string{quickLane}, Backend: ledger.BackendCPU})
	b := e.queue(runs.Spec{Lanes: []string{quickLane}, Backend: ledger.BackendCPU})
	l1, err := holder.Poll(ctx, 2*time.Second, "ok")
	if err != nil || l1 == nil || l1.Run.ID != a.ID {
		t.Fatalf("first poll: %+v %v", l1, err)
	}
	l2, err := holder.Poll(ctx, 2*time.Second, "ok")
	if err != nil || l2 == nil || l2.Run.ID != a.ID || l2.Attempt != 2 {
		t.Fatalf("second poll while holding %s: %+v %v; want %s again as attempt 2", a.ID, l2, err, a.ID)
	}
	got := e.run(a.ID)
	if len(got.Attempts) != 1 || got.Attempts[0].Outcome != "infrastructure" || !strings.Contains(got.Attempts[0].Reason, "polled for a new run") {
		t.Fatalf("run after the second poll: %+v; want attempt 1 an infrastructure failure naming the poll", got)
	}
	if s := e.run(b.ID).State; s != runs.Queued {
		t.Fatalf("run %s is %s: one agent took two leases", b.ID, s)
	}
	before := e.logSize()
	if _, err := holder.Finish(ctx, a.ID, runs.FinishRequest{Attempt: 1, Lease: l1.Lease, Status: "completed", Evidence: []json.RawMessage{quickEnvelope(t, hpriv, l1)}}); !isCode(err, ledger.CodeConflict) {
		t.Fatalf("finish of the lease the poll ended: %v, want 409", err)
	}
	if after := e.logSize(); after != before {
		t.Fatalf("the refused finish appended: size %d -> %d", before, after)
	}
	if fin, err := holder.Finish(ctx, a.ID, runs.FinishRequest{Attempt: 2, Lease: l2.Lease, Status: "completed", Evidence: []json.RawMessage{quickEnvelope(t, hpriv, l2)}}); err != nil || fin.State != runs.Done {
		t.Fatalf("finish of attempt 2: %+v %v", fin, err)
	}
}

// TestAgentOnPlainRunnerName: a plain runner's key registering as an
// agent under the runner's name is refused (409 naming the plain runner:
// it would wait for an approval that never comes). An agent that
// registered before its name and key were added as a plain runner is not
// approved by that, and its polls are refused naming the plain runner and
// the way out, not a useless approve command.
func TestAgentOnPlainRunnerName(t *testing.T) {
	e := newAgentEnv(t)
	ctx := context.Background()
	c, _ := client.New(e.url, client.Options{Token: e.recTok})
	register := func(name string) (*client.Agent, ed25519.PublicKey, error) {
		pub, priv, _ := ed25519.GenerateKey(rand.Reader)
		ag := client.NewAgent(c, name, priv)
		_, err := ag.Register(ctx, runs.RegisterRequest{Name: name, PublicKey: verify.AuthorizedKey(pub), Backend: ledger.BackendCPU,
			Spec: runs.AgentSpec{Lanes: []string{quickLane}, Repository: testRepo, Commit: testCommit}, Health: "ok"})
		return ag, pub, err
	}
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	if _, _, err := e.admCl.AddRunner(ctx, "ci1", []byte(verify.AuthorizedKey(pub))); err != nil {
		t.Fatal(err)
	}
	_, err := client.NewAgent(c, "ci1", priv).Register(ctx, runs.RegisterRequest{Name: "ci1", PublicKey: verify.AuthorizedKey(pub), Backend: ledger.BackendCPU,
		Spec: runs.AgentSpec{Lanes: []string{quickLane}, Repository: testRepo, Commit: testCommit}, Health: "ok"})
	if le, ok := asLedgerError(err); !ok || le.Code != ledger.CodeConflict || !strings.Contains(le.Message, "plain runner") {
		t.Fatalf("registration with a plain runner's name and key: %v; want 409 naming the plain runner", err)
	}
	ag, pub2, err := register("ci2")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.admCl.AddRunner(ctx, "ci2", []byte(verify.AuthorizedKey(pub2))); err != nil {
		t.Fatal(err)
	}
	_, err = ag.Poll(ctx, time.Second, "ok")
	if le, ok := asLedgerError(err); !ok || le.Code != ledger.CodeForbidden || !strings.Contains(le.Message, "plain runner") || !strings.Contains(le.Message, "ledger runner revoke ci2") {
		t.Fatalf("poll by an agent on a plain runner's name: %v; want 403 naming the plain runner", err)
	}
}

// TestAgentEvidenceBoundToItsAttempt: an agent's evidence names the run
// and attempt it was run for (evidence.run), and a finish or staging takes
// only evidence of the attempt whose lease the agent holds, run after that
// attempt could begin. Run A's recorded envelope offered again for run B,
// evidence naming no run, evidence of another attempt of the same run,
// evidence started before run B was queued and evidence finished in the
// future are each refused 400 naming the member, and nothing is
// appended; B's own evidence is recorded as a new record.
func TestAgentEvidenceBoundToItsAttempt(t *testing.T) {
	e := newAgentEnv(t)
	ctx := context.Background()
	holder, hpriv := e.keyedAgent("holder")
	subj := ledger.Subject{Repository: testRepo, Commit: testCommit, Tree: testCommit}
	a := e.queue(runs.Spec{Lanes: []string{quickLane}, Backend: ledger.BackendCPU})
	la, err := holder.Poll(ctx, 2*time.Second, "ok")
	if err != nil || la == nil || la.Run.ID != a.ID {
		t.Fatalf("poll A: %+v %v", la, err)
	}
	envA := quickEnvelope(t, hpriv, la)
	if fin, err := holder.Finish(ctx, a.ID, runs.FinishRequest{Attempt: 1, Lease: la.Lease, Status: "completed", Evidence: []json.RawMessage{envA}}); err != nil || fin.State != runs.Done || len(fin.Evidence) != 1 {
		t.Fatalf("finish A: %+v %v", fin, err)
	}
	b := e.queue(runs.Spec{Lanes: []string{quickLane}, Backend: ledger.BackendCPU})
	lb, err := holder.Poll(ctx, 2*time.Second, "ok")
	if err != nil || lb == nil || lb.Run.ID != b.ID {
		t.Fatalf("poll B: %+v %v", lb, err)
	}
	queuedB := e.run(b.ID).CreatedAt
	refused := []struct {
		what, field, says string
		env               json.RawMessage
	}{
		{"run A's recorded envelope", "run", a.ID, envA},
		{"evidence naming no run", "run", "required", quickEnvelope(t, hpriv, nil)},
		{"evidence of attempt 2 of run B", "run", "attempt 2", quickEnvelopeWith(t, hpriv, subj, lb, func(ev *ledger.Evidence) { ev.Run.Attempt = 2 })},
		{"evidence started before B was queued", "started_at", "before attempt 1", quickEnvelopeWith(t, hpriv, subj, lb, func(ev *ledger.Evidence) {
			ev.StartedAt = queuedB.Add(-3 * time.Minute)
		})},
		{"evidence finished in the future", "finished_at", "after the server's clock", quickEnvelopeWith(t, hpriv, subj, lb, func(ev *ledger.Evidence) {
			ev.FinishedAt = time.Now().Add(5 * time.Minute)
		})},
	}
	for _, c := range refused {
		before := e.logSize()
		_, err := holder.Finish(ctx, b.ID, runs.FinishRequest{Attempt: 1, Lease: lb.Lease, Status: "completed", Evidence: []json.RawMessage{c.env}})
		if le, ok := asLedgerError(err); !ok || le.Code != ledger.CodeInvalid || le.Field != "evidence[0]."+c.field || !strings.Contains(le.Message, c.says) {
			t.Fatalf("finish of B with %s: %v; want 400 naming evidence[0].%s and saying %q", c.what, err, c.field, c.says)
		}
		_, err = holder.Stage(ctx, b.ID, runs.StageRequest{Attempt: 1, Lease: lb.Lease, Envelope: c.env})
		if le, ok := asLedgerError(err); !ok || le.Code != ledger.CodeInvalid || le.Field != "envelope."+c.field {
			t.Fatalf("staging for B of %s: %v; want 400 naming envelope.%s", c.what, err, c.field)
		}
		if after := e.logSize(); after != before {
			t.Fatalf("%s: the refused finish appended: size %d -> %d", c.what, before, after)
		}
	}
	if got := e.run(b.ID); got.State == runs.Done || len(got.Attempts) != 0 {
		t.Fatalf("run B after the refused finishes: %+v", got)
	}
	fin, err := holder.Finish(ctx, b.ID, runs.FinishRequest{Attempt: 1, Lease: lb.Lease, Status: "completed", Evidence: []json.RawMessage{quickEnvelope(t, hpriv, lb)}})
	if err != nil || fin.State != runs.Done || len(fin.Evidence) != 1 {
		t.Fatalf("finish B with its own evidence: %+v %v", fin, err)
	}
	if ra := e.run(a.ID); fin.Evidence[0] == ra.Evidence[0] {
		t.Fatalf("runs A and B name the same evidence %s", fin.Evidence[0])
	}
	resp, err := http.Get(e.url + "/evidence/" + fin.Evidence[0])
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(page), b.ID+"</code></a>, attempt 1") {
		t.Fatalf("evidence page of run B's record: %d; want it to name run %s attempt 1", resp.StatusCode, b.ID)
	}
	for _, id := range []string{a.ID, b.ID} {
		ev := e.evidenceOf(quickLane)
		found := false
		for _, x := range ev {
			found = found || (x.Evidence.Run != nil && x.Evidence.Run.ID == id && x.Evidence.Run.Attempt == 1)
		}
		if !found {
			t.Fatalf("no recorded evidence names run %s attempt 1", id)
		}
	}
}

// TestAgentLabelsGate: a gate with agent_labels counts only evidence of an
// agent whose approval recorded those labels. A run finished by an
// approved agent labelled gpu=a100 leaves the gate open, naming the label
// it lacks; the same lane run by an agent labelled gpu=h200 passes it.
// The approval leaf carries the agent's labels (runner list --json).
func TestAgentLabelsGate(t *testing.T) {
	e := newAgentEnv(t)
	ctx := context.Background()
	check := e.agentGateReleaseWith("7.1.0", testRepo, ", agent_labels: {gpu: h200}")
	a100, apriv := e.keyedAgentWith("a100", map[string]string{"gpu": "a100"})
	r := e.queue(runs.Spec{Lanes: []string{quickLane}, Backend: ledger.BackendCPU})
	l, err := a100.Poll(ctx, 2*time.Second, "ok")
	if err != nil || l == nil || l.Run.ID != r.ID {
		t.Fatalf("poll a100: %+v %v", l, err)
	}
	if fin, err := a100.Finish(ctx, r.ID, runs.FinishRequest{Attempt: 1, Lease: l.Lease, Status: "completed", Evidence: []json.RawMessage{quickEnvelope(t, apriv, l)}}); err != nil || fin.State != runs.Done {
		t.Fatalf("finish a100: %+v %v", fin, err)
	}
	if o := check(1); !strings.Contains(o, "NOT READY") || !strings.Contains(o, "without gpu=h200 (agent_labels)") {
		t.Fatalf("check after the a100 agent's run: %s", o)
	}
	h200, hpriv := e.keyedAgentWith("h200", map[string]string{"gpu": "h200", "zone": "b"})
	r = e.queue(runs.Spec{Lanes: []string{quickLane}, Backend: ledger.BackendCPU, Labels: map[string]string{"gpu": "h200"}})
	l, err = h200.Poll(ctx, 2*time.Second, "ok")
	if err != nil || l == nil || l.Run.ID != r.ID {
		t.Fatalf("poll h200: %+v %v", l, err)
	}
	if fin, err := h200.Finish(ctx, r.ID, runs.FinishRequest{Attempt: 1, Lease: l.Lease, Status: "completed", Evidence: []json.RawMessage{quickEnvelope(t, hpriv, l)}}); err != nil || fin.State != runs.Done {
		t.Fatalf("finish h200: %+v %v", fin, err)
	}
	if o := check(0); !strings.Contains(o, "READY") {
		t.Fatalf("check after the h200 agent's run: %s", o)
	}
	o, se, code := runBin(t, "", "--server", e.url, "--token", e.admin, "runner", "list", "--json")
	if code != 0 || !strings.Contains(o, `"gpu":"h200"`) && !strings.Contains(o, `"gpu": "h200"`) {
		t.Fatalf("runner list --json: exit %d %s%s; want the h200 approval's labels", code, o, se)
	}
}
