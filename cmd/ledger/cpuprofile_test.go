package main

import (
	"compress/gzip"
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// serve --cpuprofile writes a profile of the server's run (runtime/pprof's
// gzip-compressed protocol buffer, which go tool pprof reads), complete
// once SIGTERM has stopped it; the file is 0600 and an existing file is
// not replaced.
func TestServeCPUProfile(t *testing.T) {
	dir := t.TempDir()
	db, prof := filepath.Join(dir, "ledger.db"), filepath.Join(dir, "cpu.prof")
	cmd, url := startServer(t, db, "--cpuprofile", prof)
	for range 50 {
		if res, err := http.Get(url + "/api/v1/overview"); err == nil {
			res.Body.Close()
		}
	}
	cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("serve exited with %v after SIGTERM", err)
		}
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		t.Fatal("serve did not stop after SIGTERM")
	}
	fi, err := os.Stat(prof)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("profile mode %v, want 0600", fi.Mode().Perm())
	}
	f, err := os.Open(prof)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatalf("the profile is not gzip data: %v", err)
	}
	body, err := io.ReadAll(zr)
	if err != nil || len(body) < 64 {
		t.Fatalf("the profile is truncated: %d bytes, %v", len(body), err)
	}
	if !strings.Contains(string(body), "cpu") || !strings.Contains(string(body), "nanoseconds") {
		t.Fatal("the profile names no cpu/nanoseconds sample type")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	again := exec.CommandContext(ctx, ledgerBin, "--db", db, "serve", "--addr", "127.0.0.1:0", "--cpuprofile", prof)
	out, err := again.CombinedOutput()
	if ctx.Err() != nil || err == nil || !strings.Contains(string(out), "--cpuprofile") {
		t.Fatalf("serve over an existing profile file: %v (timed out: %v), output %q", err, ctx.Err() != nil, out)
	}
}
