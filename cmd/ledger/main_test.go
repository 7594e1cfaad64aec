package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/evidence-ledger/ledger/ledger/storetest/pgtest"
)

// ledgerBin is the real binary, built once for the CLI tests.
var ledgerBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "ledger-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	ledgerBin = filepath.Join(dir, "ledger")
	out, err := exec.Command("go", "build", "-o", ledgerBin, ".").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "build ledger: %v\n%s", err, out)
		os.Exit(2)
	}
	code := m.Run()
	pgtest.Stop()
	os.RemoveAll(dir)
	os.Exit(code)
}

// runBin runs the ledger binary and returns stdout, stderr and exit code.
func runBin(t testing.TB, stdin string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(ledgerBin, args...)
	var so, se bytes.Buffer
	cmd.Stdout, cmd.Stderr = &so, &se
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return so.String(), se.String(), code
}

// startServer starts `ledger serve` on a random loopback port and returns
// the process and its base URL.
func startServer(t testing.TB, db string, extra ...string) (*exec.Cmd, string) {
	t.Helper()
	args := append([]string{"--db", db, "serve", "--addr", "127.0.0.1:0"}, extra...)
	cmd := exec.Command(ledgerBin, args...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var errBuf bytes.Buffer
	cmd.Stderr = &syncWriter{w: &errBuf}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if u, ok := strings.CutPrefix(sc.Text(), "ledger: serving on "); ok {
				lines <- strings.TrimRight(u, "/")
			}
		}
	}()
	select {
	case u := <-lines:
		return cmd, u
	case <-time.After(20 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("server did not start: %s", errBuf.String())
	}
	return nil, ""
}

type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}
