package main

import (
	"bytes"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
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
	e.waitFor(10*time.Second, "the run queued", func() bool { return strings.Contains(se.String(), "queued run ") })
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
