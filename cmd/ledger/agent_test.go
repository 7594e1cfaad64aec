package main

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/evidence-ledger/ledger/client"
	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/runs"
	"github.com/evidence-ledger/ledger/verify"
)

// The agent tests run a real `ledger serve` and real `ledger agent`
// processes on loopback, with short leases (--lease-ttl 5s: a heartbeat
// every 1.7 s, so one may come 3 s late on a loaded CI machine) so that
// expiry is quick.

const (
	testCommit = "0123456789abcdef0123456789abcdef01234567"
	testRepo   = "github.com/evidence-ledger/ledger"
	// slowLane takes seconds on the CPU backend (5,508 cases), so a kill or
	// a cancel lands while it runs; quickLane takes milliseconds.
	slowLane  = "qmv-bias-sum-paths/v1"
	quickLane = "alloc-footprint/v1"
)

type agentEnv struct {
	t       *testing.T
	dir     string
	db      string
	url     string
	srv     *exec.Cmd
	admin   string
	runTok  string
	recTok  string
	admCl   *client.Client
	runCl   *client.Client
	srvArgs []string
	agents  map[string]*agentProc // by name, their logs printed when the test fails
}

func newAgentEnv(t *testing.T) *agentEnv {
	t.Helper()
	if testing.Short() {
		t.Skip("agent tests start real server and agent processes: skipped with -short")
	}
	e := &agentEnv{t: t, dir: t.TempDir(), agents: map[string]*agentProc{}}
	e.db = filepath.Join(e.dir, "ledger.db")
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		for name, a := range e.agents {
			t.Logf("log of agent %s:\n%s", name, a.log.String())
		}
	})
	e.admin = e.token("adm", "admin")
	e.runTok = e.token("release", "run")
	e.recTok = e.token("agents", "record")
	e.srvArgs = []string{"--lease-ttl", "5s", "--poll-wait", "2s"}
	e.start()
	return e
}

func (e *agentEnv) token(name, scope string) string {
	e.t.Helper()
	out, se, code := runBin(e.t, "", "--db", e.db, "token", "create", "--name", name, "--scope", scope)
	if code != 0 {
		e.t.Fatalf("token create: %s", se)
	}
	return strings.TrimSpace(out)
}

func (e *agentEnv) start() {
	e.t.Helper()
	e.srv, e.url = startServer(e.t, e.db, e.srvArgs...)
	srv := e.srv
	e.t.Cleanup(func() { srv.Process.Kill(); srv.Wait() })
	var err error
	if e.admCl, err = client.New(e.url, client.Options{Token: e.admin}); err != nil {
		e.t.Fatal(err)
	}
	if e.runCl, err = client.New(e.url, client.Options{Token: e.runTok}); err != nil {
		e.t.Fatal(err)
	}
}

// restart stops the server (SIGTERM, graceful) and starts it again on the
// same database.
func (e *agentEnv) restart() {
	e.t.Helper()
	_ = e.srv.Process.Signal(syscall.SIGTERM)
	_ = e.srv.Wait()
	e.start()
}

func (e *agentEnv) keygen(name string) string {
	e.t.Helper()
	key := filepath.Join(e.dir, name+".key")
	if _, se, code := runBin(e.t, "", "runner", "keygen", key); code != 0 {
		e.t.Fatalf("keygen: %s", se)
	}
	return key
}

type agentProc struct {
	cmd *exec.Cmd
	log *lockedBuffer // stdout and stderr, safe to read while the agent writes
}

// agent starts `ledger agent` NAME with a new key and labels; approve
// approves it once it registered.
func (e *agentEnv) agent(name string, approve bool, extra ...string) *agentProc {
	e.t.Helper()
	key := e.keygen(name)
	args := append([]string{"--server", e.url, "--token", e.recTok, "agent", "--name", name, "--key", key, "--backend", "cpu",
		"--commit", testCommit, "--tree", testCommit, "--repository", testRepo, "--dirty", "false", "--poll-wait", "1s", "--heartbeat", "300ms"}, extra...)
	cmd := exec.Command(ledgerBin, args...)
	buf := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = buf, buf
	if err := cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	p := &agentProc{cmd: cmd, log: buf}
	e.agents[name] = p
	e.waitFor(20*time.Second, "agent "+name+" registers", func() bool {
		as, _ := e.admCl.Agents(context.Background())
		for _, a := range as {
			if a.Name == name {
				return true
			}
		}
		return false
	})
	if approve {
		if _, se, code := runBin(e.t, "", "--server", e.url, "--token", e.admin, "agent", "approve", name); code != 0 {
			e.t.Fatalf("agent approve %s: %s", name, se)
		}
	}
	return p
}

func (e *agentEnv) waitFor(d time.Duration, what string, cond func() bool) {
	e.t.Helper()
	end := time.Now().Add(d)
	for !cond() {
		if time.Now().After(end) {
			e.t.Fatalf("timed out after %s waiting until %s", d, what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (e *agentEnv) queue(spec runs.Spec) runs.Run {
	e.t.Helper()
	r, err := e.runCl.CreateRun(context.Background(), spec)
	if err != nil {
		e.t.Fatalf("queue run: %v", err)
	}
	return r
}

func (e *agentEnv) run(id string) runs.Run {
	e.t.Helper()
	r, err := e.runCl.Run(context.Background(), id)
	if err != nil {
		e.t.Fatalf("get run: %v", err)
	}
	return r
}

func (e *agentEnv) waitState(id string, d time.Duration, states ...string) runs.Run {
	e.t.Helper()
	var r runs.Run
	end := time.Now().Add(d)
	for {
		r = e.run(id)
		if slices.Contains(states, r.State) {
			return r
		}
		if runs.Final(r.State) {
			e.t.Fatalf("run %s became %s, not %s: %+v", id, r.State, strings.Join(states, " or "), r)
		}
		if time.Now().After(end) {
			e.t.Fatalf("timed out after %s waiting until run %s is %s: it is %+v", d, id, strings.Join(states, " or "), r)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// evidenceOf counts the evidence records of lane in the log.
func (e *agentEnv) evidenceOf(lane string) []ledger.EvidenceEntry {
	e.t.Helper()
	es, _, err := e.admCl.Evidence(context.Background(), ledger.EvidenceFilter{Lane: lane, Limit: 100})
	if err != nil {
		e.t.Fatal(err)
	}
	return es
}

func TestAgentLabelsMatch(t *testing.T) {
	e := newAgentEnv(t)
	e.agent("host-a", true, "--label", "gpu=a100")
	e.agent("host-b", true, "--label", "gpu=h200", "--label", "rack=7")
	r := e.queue(runs.Spec{Lanes: []string{quickLane}, Backend: ledger.BackendCPU, Labels: map[string]string{"gpu": "h200"}})
	got := e.waitState(r.ID, 60*time.Second, runs.Done, runs.Failed)
	if got.State != runs.Done || got.Agent != "host-b" || len(got.Attempts) != 1 || got.Attempts[0].Agent != "host-b" {
		t.Fatalf("run %+v: want done by host-b, the agent whose labels match", got)
	}
	ev := e.evidenceOf(quickLane)
	if len(ev) != 1 || ev[0].Evidence.Signer == nil || ev[0].Evidence.Signer.Runner != "host-b" {
		t.Fatalf("evidence: want one record signed by host-b, got %+v", ev)
	}
	// The dashboard lists the run with its evidence, and the agents.
	for page, want := range map[string][]string{"/runs": {got.ID[:16], got.Evidence[0][:10]}, "/agents": {"host-a", "host-b", "gpu=h200"}} {
		body := httpGet(t, e.url+page)
		for _, w := range want {
			if !strings.Contains(body, w) {
				t.Errorf("page %s does not show %q", page, w)
			}
		}
	}
	// A run no agent's labels satisfy stays queued.
	none := e.queue(runs.Spec{Lanes: []string{quickLane}, Backend: ledger.BackendCPU, Labels: map[string]string{"gpu": "mi300"}})
	time.Sleep(3 * time.Second)
	if s := e.run(none.ID).State; s != runs.Queued {
		t.Fatalf("a run no agent matches is %s, want queued", s)
	}
}

func httpGet(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %d", url, resp.StatusCode)
	}
	return string(b)
}

func TestAgentKilledLeaseExpiresSecondAgentFinishes(t *testing.T) {
	e := newAgentEnv(t)
	a1 := e.agent("first", true)
	r := e.queue(runs.Spec{Lanes: []string{slowLane}, Backend: ledger.BackendCPU})
	e.waitState(r.ID, 60*time.Second, runs.Running)
	if err := a1.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = a1.cmd.Wait()
	killed := time.Now()
	// The lease (5 s) expires and the run is queued again as attempt 2.
	back := e.waitState(r.ID, 30*time.Second, runs.Queued)
	t.Logf("lease expiry detected %s after the kill", time.Since(killed).Round(time.Millisecond))
	if len(back.Attempts) != 1 || back.Attempts[0].Outcome != "infrastructure" || back.Attempts[0].Agent != "first" {
		t.Fatalf("after the kill: %+v, want attempt 1 recorded as an infrastructure failure", back)
	}
	e.agent("second", true)
	got := e.waitState(r.ID, 120*time.Second, runs.Done, runs.Failed, runs.Expired)
	if got.State != runs.Done || got.Attempt != 2 || got.Agent != "second" || len(got.Attempts) != 2 || got.Attempts[1].Outcome != "finished" {
		t.Fatalf("run %+v: want done by second in attempt 2", got)
	}
	ev := e.evidenceOf(slowLane)
	if len(ev) != 1 || ev[0].Evidence.Signer.Runner != "second" || ev[0].ID != got.Evidence[0] {
		t.Fatalf("want exactly one evidence record, by second, got %d", len(ev))
	}
}

func TestAgentCancelStopsRunningLane(t *testing.T) {
	e := newAgentEnv(t)
	e.agent("worker", true)
	r := e.queue(runs.Spec{Lanes: []string{slowLane, "alloc-snapshot/v1", quickLane}, Backend: ledger.BackendCPU})
	e.waitState(r.ID, 60*time.Second, runs.Running)
	asked := time.Now()
	c, err := e.runCl.CancelRun(context.Background(), r.ID)
	if err != nil || c.State != runs.Canceling {
		t.Fatalf("cancel: %+v %v", c, err)
	}
	// Bound: a heartbeat (lease/3) plus one case plus the finish; generous
	// for a loaded 2-core machine.
	got := e.waitState(r.ID, 15*time.Second, runs.Canceled, runs.Done, runs.Failed)
	t.Logf("canceled %s after the request", time.Since(asked).Round(time.Millisecond))
	if got.State != runs.Canceled || len(got.Evidence) != 0 || got.OutcomeEntry == "" {
		t.Fatalf("run %+v: want canceled with no evidence and an outcome leaf", got)
	}
	if ev := e.evidenceOf(slowLane); len(ev) != 0 {
		t.Fatalf("a canceled run recorded %d evidence records", len(ev))
	}
	// A queued run is canceled at once.
	q := e.queue(runs.Spec{Lanes: []string{quickLane}, Backend: ledger.BackendCPU, Labels: map[string]string{"gpu": "none-has-this"}})
	if c, err := e.runCl.CancelRun(context.Background(), q.ID); err != nil || c.State != runs.Canceled {
		t.Fatalf("cancel of a queued run: %+v %v", c, err)
	}
}

func TestServerRestartKeepsQueuedAndLeasedRuns(t *testing.T) {
	e := newAgentEnv(t)
	// The restarted server listens where the first one did, so the agent
	// (which knows one URL) reaches it again.
	e.srvArgs = []string{"--lease-ttl", "20s", "--poll-wait", "2s", "--addr", strings.TrimPrefix(e.url, "http://")}
	e.restart()
	queued := e.queue(runs.Spec{Lanes: []string{quickLane}, Backend: ledger.BackendCPU, Labels: map[string]string{"gpu": "later"}})
	e.agent("worker", true, "--max-runs", "1")
	leased := e.queue(runs.Spec{Lanes: []string{slowLane}, Backend: ledger.BackendCPU})
	e.waitState(leased.ID, 60*time.Second, runs.Running, runs.Leased)
	e.restart()
	if s := e.run(queued.ID).State; s != runs.Queued {
		t.Fatalf("after a restart the queued run is %s", s)
	}
	if r := e.run(leased.ID); r.Attempt != 1 || r.Agent != "worker" || runs.Final(r.State) && r.State != runs.Done {
		t.Fatalf("after a restart the leased run is %+v", r)
	}
	// The agent keeps extending the same lease and finishes attempt 1.
	got := e.waitState(leased.ID, 120*time.Second, runs.Done, runs.Failed, runs.Expired)
	if got.State != runs.Done || got.Attempt != 1 {
		t.Fatalf("run %+v: want done in attempt 1 across the restart", got)
	}
}

// signedAgent registers an in-test agent (its key made here) through the
// real server, and approves it when approve is set.
func (e *agentEnv) signedAgent(name string, approve bool) *client.Agent {
	e.t.Helper()
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	c, err := client.New(e.url, client.Options{Token: e.recTok})
	if err != nil {
		e.t.Fatal(err)
	}
	a := client.NewAgent(c, name, priv)
	_, err = a.Register(context.Background(), runs.RegisterRequest{Name: name, PublicKey: verify.AuthorizedKey(pub), Backend: ledger.BackendCPU,
		Spec: runs.AgentSpec{Lanes: []string{quickLane, slowLane}, Repository: testRepo, Commit: testCommit}, Health: "ok"})
	if err != nil {
		e.t.Fatalf("register %s: %v", name, err)
	}
	if approve {
		if _, _, _, err := e.admCl.ApproveAgent(context.Background(), name, runs.ApproveRequest{}); err != nil {
			e.t.Fatal(err)
		}
	}
	return a
}

func isCode(err error, c ledger.Code) bool {
	var le *ledger.Error
	return errors.As(err, &le) && le.Code == c
}

func TestForgedFinishRefused(t *testing.T) {
	e := newAgentEnv(t)
	ctx := context.Background()
	holder := e.signedAgent("holder", true)
	other := e.signedAgent("other", true)
	r := e.queue(runs.Spec{Lanes: []string{quickLane}, Backend: ledger.BackendCPU})
	lease, err := holder.Poll(ctx, 2*time.Second, "ok")
	if err != nil || lease == nil || lease.Run.ID != r.ID {
		t.Fatalf("poll: %+v %v", lease, err)
	}
	// Another approved agent that names the holder's lease: refused.
	for _, req := range []runs.FinishRequest{
		{Attempt: 1, Lease: lease.Lease, Status: "completed"},
		{Attempt: 1, Lease: lease.Lease, Status: "error", Message: "forged"},
	} {
		if _, err := other.Finish(ctx, r.ID, req); !isCode(err, ledger.CodeConflict) || !strings.Contains(err.Error(), "belongs to another agent or attempt") {
			t.Fatalf("a finish by another agent with the holder's lease: %v, want 409 lease not held, naming another agent", err)
		}
	}
	// The holder with a made-up lease or another attempt: refused.
	if _, err := holder.Finish(ctx, r.ID, runs.FinishRequest{Attempt: 1, Lease: "lease_00000000000000000000000000000000", Status: "error"}); !isCode(err, ledger.CodeConflict) {
		t.Fatalf("a finish with a made-up lease: %v", err)
	}
	if _, err := holder.Finish(ctx, r.ID, runs.FinishRequest{Attempt: 2, Lease: lease.Lease, Status: "error"}); !isCode(err, ledger.CodeConflict) {
		t.Fatalf("a finish of an attempt not held: %v", err)
	}
	// Evidence signed by the holder's key cannot come from elsewhere
	// either: a completed finish must carry envelopes signed by the
	// finishing agent, one per lane.
	if _, err := holder.Finish(ctx, r.ID, runs.FinishRequest{Attempt: 1, Lease: lease.Lease, Status: "completed"}); !isCode(err, ledger.CodeInvalid) {
		t.Fatalf("a completed finish without evidence: %v, want 400", err)
	}
	// After the lease expires, the holder's own finish is refused too, and
	// nothing was recorded.
	e.waitState(r.ID, 30*time.Second, runs.Queued)
	if _, err := holder.Finish(ctx, r.ID, runs.FinishRequest{Attempt: 1, Lease: lease.Lease, Status: "error"}); !isCode(err, ledger.CodeConflict) {
		t.Fatalf("a finish of an expired lease: %v", err)
	}
	if ev := e.evidenceOf(quickLane); len(ev) != 0 {
		t.Fatalf("%d evidence records after refused finishes", len(ev))
	}
}

func TestUnapprovedAgentGetsNothing(t *testing.T) {
	e := newAgentEnv(t)
	ctx := context.Background()
	r := e.queue(runs.Spec{Lanes: []string{quickLane}, Backend: ledger.BackendCPU})
	un := e.signedAgent("stranger", false)
	lease, err := un.Poll(ctx, time.Second, "ok")
	if !isCode(err, ledger.CodeForbidden) || lease != nil {
		t.Fatalf("poll by an unapproved agent: %+v %v, want 403", lease, err)
	}
	if _, err := un.Heartbeat(ctx, r.ID, runs.HeartbeatRequest{Attempt: 1, Lease: "x"}); !isCode(err, ledger.CodeForbidden) {
		t.Fatalf("heartbeat by an unapproved agent: %v, want 403", err)
	}
	// A real agent process that is never approved takes nothing either.
	e.agent("unapproved-proc", false)
	time.Sleep(3 * time.Second)
	if s := e.run(r.ID).State; s != runs.Queued {
		t.Fatalf("the run is %s with only unapproved agents, want queued", s)
	}
	// Approving a name re-registered with another key does not approve it:
	// the approved key is the registered one, and a request signed by a
	// key other than the approved one is refused.
	_, impostor, _ := ed25519.GenerateKey(rand.Reader)
	c, _ := client.New(e.url, client.Options{Token: e.recTok})
	if _, _, _, err := e.admCl.ApproveAgent(ctx, "stranger", runs.ApproveRequest{}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.NewAgent(c, "stranger", impostor).Poll(ctx, time.Second, "ok"); !isCode(err, ledger.CodeUnauthorized) {
		t.Fatalf("a request signed by another key than the approved one: %v, want 401", err)
	}
}

// TestAgentTakesOnlyDeclaredLanes: an approved agent is given only runs of
// lanes in its own declared configuration, on its backend, of its build's
// commit.
func TestAgentTakesOnlyDeclaredLanes(t *testing.T) {
	e := newAgentEnv(t)
	ctx := context.Background()
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	c, _ := client.New(e.url, client.Options{Token: e.recTok})
	a := client.NewAgent(c, "narrow", priv)
	if _, err := a.Register(ctx, runs.RegisterRequest{Name: "narrow", PublicKey: verify.AuthorizedKey(pub), Backend: ledger.BackendCPU,
		Spec: runs.AgentSpec{Lanes: []string{quickLane}, Repository: testRepo, Commit: testCommit}, Health: "ok"}); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := e.admCl.ApproveAgent(ctx, "narrow", runs.ApproveRequest{}); err != nil {
		t.Fatal(err)
	}
	other := e.queue(runs.Spec{Lanes: []string{slowLane}, Backend: ledger.BackendCPU})
	both := e.queue(runs.Spec{Lanes: []string{quickLane, slowLane}, Backend: ledger.BackendCPU})
	cuda := e.queue(runs.Spec{Lanes: []string{quickLane}, Backend: ledger.BackendCUDA})
	wrongCommit := e.queue(runs.Spec{Lanes: []string{quickLane}, Backend: ledger.BackendCPU, Commit: strings.Repeat("f", 40)})
	if l, err := a.Poll(ctx, time.Second, "ok"); err != nil || l != nil {
		t.Fatalf("the agent was given a run it did not declare: %+v %v", l, err)
	}
	for _, id := range []string{other.ID, both.ID, cuda.ID, wrongCommit.ID} {
		if s := e.run(id).State; s != runs.Queued {
			t.Errorf("run %s is %s, want queued", id, s)
		}
	}
	mine := e.queue(runs.Spec{Lanes: []string{quickLane}, Backend: ledger.BackendCPU, Commit: testCommit})
	if l, err := a.Poll(ctx, time.Second, "ok"); err != nil || l == nil || l.Run.ID != mine.ID {
		t.Fatalf("the agent was not given the run it serves: %+v %v", l, err)
	}
}

// TestAgentUsageErrors: bad agent flags exit 2 naming the flag, before
// anything is registered.
func TestAgentUsageErrors(t *testing.T) {
	key := filepath.Join(t.TempDir(), "a.key")
	if _, se, code := runBin(t, "", "runner", "keygen", key); code != 0 {
		t.Fatalf("keygen: %s", se)
	}
	bad := filepath.Join(t.TempDir(), "bad.key")
	if err := os.WriteFile(bad, []byte("not a key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--name", "a"}, "--key is required"},
		{[]string{"--key", bad, "--name", "a"}, "--key: " + bad},
		{[]string{"--key", bad + ".missing", "--name", "a"}, "--key: read the key"},
		{[]string{"--key", key, "--name", "Bad Name"}, "--name"},
		{[]string{"--key", key, "--name", "a", "--heartbeat", "-1s"}, "--heartbeat -1s: must be 0 (a third of the lease) or at least 100ms"},
		{[]string{"--key", key, "--name", "a", "--heartbeat", "1ns"}, "--heartbeat 1ns: must be 0"},
		{[]string{"--key", key, "--name", "a", "--backend", "tpu"}, "--backend \"tpu\""},
	} {
		args := append([]string{"--server", "http://127.0.0.1:1", "--token", "x", "agent"}, c.args...)
		_, se, code := runBin(t, "", args...)
		if code != 2 || !strings.Contains(se, c.want) {
			t.Errorf("ledger %s: exit %d, stderr %q; want exit 2 naming %q", strings.Join(args, " "), code, se, c.want)
		}
	}
}

// TestPollErrorsWarnOncePerMinute: a new poll error is warned about at
// once, the same one again only after a minute (with the count of those
// in between), another one at once.
func TestPollErrorsWarnOncePerMinute(t *testing.T) {
	var p pollErrors
	t0 := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	if _, ok := p.note("403 not approved", t0); !ok {
		t.Fatal("the first error is not warned about")
	}
	for i := 1; i <= 30; i++ {
		if _, ok := p.note("403 not approved", t0.Add(time.Duration(i)*time.Second)); ok {
			t.Fatalf("the same error warned about again after %ds", i)
		}
	}
	if n, ok := p.note("403 not approved", t0.Add(time.Minute)); !ok || n != 30 {
		t.Fatalf("after a minute: warn %v with %d repeats, want true with 30", ok, n)
	}
	if _, ok := p.note("connection refused", t0.Add(time.Minute+time.Second)); !ok {
		t.Fatal("a different error is not warned about at once")
	}
}
