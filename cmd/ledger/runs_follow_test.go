package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/runs"
)

// TestRemoteRunGivesUpOnLostServer: `ledger run --remote` follows a run
// while the server answers; once every read has failed for
// --give-up-after it exits 2 naming the run (which goes on on the server),
// instead of retrying for ever.
func TestRemoteRunGivesUpOnLostServer(t *testing.T) {
	e := newAgentEnv(t)
	cmd := exec.Command(ledgerBin, "--server", e.url, "--token", e.runTok, "run", "--remote", "--backend", "cpu", "--lane", quickLane, "--give-up-after", "1s")
	var so, se lockedBuffer
	cmd.Stdout, cmd.Stderr = &so, &se
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	e.waitFor(30*time.Second, "the run queued", func() bool { return strings.Contains(se.String(), "queued run ") })
	e.srv.Process.Kill()
	e.srv.Wait()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		ee, ok := err.(*exec.ExitError)
		if !ok || ee.ExitCode() != 2 || !strings.Contains(se.String(), "lost the server for 1s while following run run_") {
			t.Fatalf("exit %v, stderr %s", err, se.String())
		}
	case <-time.After(20 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("still following 20 s after the server died: %s", se.String())
	}
}

// lockedBuffer is a bytes.Buffer safe to read while a process writes it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestRemoteRunPollsAServerWithoutWait: against a server whose run
// answers carry no version (one from before the long poll), `ledger run
// --remote` polls the run, about every 100 ms, never asking it to wait,
// and exits with the run's status once it is final.
func TestRemoteRunPollsAServerWithoutWait(t *testing.T) {
	var mu sync.Mutex
	var reads []time.Time
	var waited bool
	run := runs.Run{ID: "run_" + strings.Repeat("ab", 16), State: runs.Queued, Backend: ledger.BackendCPU, Lanes: []string{quickLane}, Labels: map[string]string{}, Attempts: []ledger.RunAttempt{}, Evidence: []string{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.Method == http.MethodPost && r.URL.Path == "/api/v1/runs":
			w.WriteHeader(http.StatusCreated)
			_ = json.NewEncoder(w).Encode(map[string]any{"run": run})
		case r.Method == http.MethodGet && r.URL.Path == "/api/v1/runs/"+run.ID:
			mu.Lock()
			reads = append(reads, time.Now())
			waited = waited || r.URL.Query().Has("wait")
			cur := run
			if len(reads) >= 4 {
				cur.State, cur.Attempt, cur.Agent = runs.Done, 1, "old"
			}
			mu.Unlock()
			_ = json.NewEncoder(w).Encode(map[string]any{"run": cur})
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	out, se, code := runBin(t, "", "--server", srv.URL, "--token", "lgr_test", "run", "--remote", "--backend", "cpu", "--lane", quickLane)
	if code != 0 || !strings.Contains(out, "done") {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, se)
	}
	mu.Lock()
	defer mu.Unlock()
	if waited || len(reads) != 4 {
		t.Fatalf("%d reads, asked to wait: %v; want 4 plain reads", len(reads), waited)
	}
	for i := 2; i < len(reads); i++ {
		if gap := reads[i].Sub(reads[i-1]); gap < 80*time.Millisecond {
			t.Fatalf("read %d came %s after the one before: want the 100 ms poll", i, gap)
		}
	}
}

// TestRemoteRunUnknownLaneRefused: run --remote with a lane this build
// does not have exits 2 naming it (as a local run does) and queues
// nothing, instead of waiting queued for an agent without a word.
func TestRemoteRunUnknownLaneRefused(t *testing.T) {
	e := newAgentEnv(t)
	_, se, code := runBin(t, "", "--server", e.url, "--token", e.runTok, "run", "--remote", "--backend", "cpu", "--lane", "nope/v1")
	if code != 2 || !strings.Contains(se, "nope/v1") {
		t.Fatalf("run --remote --lane nope/v1: exit %d, stderr %s; want 2 naming the lane", code, se)
	}
	rs, err := e.runCl.Runs(context.Background(), "", 0)
	if err != nil || len(rs) != 0 {
		t.Fatalf("runs after the refusal: %d %v; want none queued", len(rs), err)
	}
}

// TestRemoteRunRepositoryRefused: run --remote --repository with a value
// no agent can declare (a path, a URL query, a .git suffix) gets the
// server's 400 naming repository, exit 2, and queues nothing.
func TestRemoteRunRepositoryRefused(t *testing.T) {
	e := newAgentEnv(t)
	for _, repo := range []string{"/etc/passwd", "github.com/a/b?x=1", "github.com/x/y.git"} {
		_, se, code := runBin(t, "", "--server", e.url, "--token", e.runTok, "run", "--remote", "--backend", "cpu", "--lane", quickLane, "--repository", repo)
		if code != 2 || !strings.Contains(se, "repository") || !strings.Contains(se, "must be") {
			t.Fatalf("run --remote --repository %s: exit %d, stderr %s; want 2 naming repository", repo, code, se)
		}
	}
	rs, err := e.runCl.Runs(context.Background(), "", 0)
	if err != nil || len(rs) != 0 {
		t.Fatalf("runs after the refusals: %d %v; want none queued", len(rs), err)
	}
}
