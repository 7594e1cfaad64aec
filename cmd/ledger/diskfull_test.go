package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/evidence-ledger/ledger/ledger/sqlite"
)

// smallFS mounts a tmpfs of sizeMiB under a temporary directory (root
// only) and returns its path; it is unmounted at cleanup. Without it the
// test is skipped with a loud message, or fails when
// LEDGER_REQUIRE_DISKFULL=1 (CI).
func smallFS(t *testing.T, sizeMiB int) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "small")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("mount", "-t", "tmpfs", "-o", fmt.Sprintf("size=%dm,mode=0700", sizeMiB), "tmpfs", dir).CombinedOutput()
	if err != nil {
		msg := fmt.Sprintf("DISK-FULL TEST SKIPPED: cannot mount a %d MiB tmpfs (needs root): %v %s", sizeMiB, err, bytes.TrimSpace(out))
		if os.Getenv("LEDGER_REQUIRE_DISKFULL") == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	t.Cleanup(func() { exec.Command("umount", "-l", dir).Run() })
	return dir
}

// fillFS writes a filler file that leaves about leave bytes free on the
// file system of dir.
func fillFS(t *testing.T, dir string, leave int64) string {
	t.Helper()
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	free := int64(st.Bavail) * st.Bsize
	path := filepath.Join(dir, "filler")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 1<<20)
	for n := free - leave; n > 0; n -= int64(len(chunk)) {
		if _, err := f.Write(chunk[:min(int64(len(chunk)), n)]); err != nil {
			t.Fatalf("filler: %v", err)
		}
	}
	return path
}

// The database's disk fills up under a running server: appends answer
// 507 storage_full naming the cause (never an opaque 500), /healthz says
// degraded with the reason, `ledger backup` onto the full disk fails and
// leaves nothing behind; once space is freed /healthz recovers by
// itself, appends succeed, the backup retry succeeds, every acknowledged
// record is present and the audit passes.
func TestDiskFull(t *testing.T) {
	dir := smallFS(t, 24)
	db := filepath.Join(dir, "ledger.db")
	secret, stderr, code := runBin(t, "", "--db", db, "token", "create", "--name", "ci", "--scope", "record")
	if code != 0 {
		t.Fatalf("token create: %s", stderr)
	}
	token := strings.TrimSpace(secret)
	srv, base := startServer(t, db)
	defer func() { srv.Process.Kill(); srv.Wait() }()
	cl := &http.Client{Timeout: 30 * time.Second}
	post := func(n int64) (int, map[string]any) {
		var ev map[string]any
		json.Unmarshal(crashEvidence(n), &ev)
		ev["details"] = map[string]any{"pad": strings.Repeat("x", 16<<10), "n": n}
		b, _ := json.Marshal(ev)
		req, _ := http.NewRequest("POST", base+"/api/v1/evidence", bytes.NewReader(b))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := cl.Do(req)
		if err != nil {
			t.Fatalf("post %d: %v", n, err)
		}
		defer resp.Body.Close()
		var body map[string]any
		json.NewDecoder(resp.Body).Decode(&body)
		return resp.StatusCode, body
	}
	health := func() (int, map[string]any) {
		resp, err := cl.Get(base + "/healthz")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var body map[string]any
		json.NewDecoder(resp.Body).Decode(&body)
		return resp.StatusCode, body
	}
	var acked []string
	if st, body := post(0); st != http.StatusCreated {
		t.Fatalf("first append: %d %v", st, body)
	} else {
		acked = append(acked, body["id"].(string))
	}
	filler := fillFS(t, dir, 2<<20)
	n := int64(1)
	var full map[string]any
	for ; n < 2000; n++ {
		st, body := post(n)
		if st == http.StatusCreated {
			acked = append(acked, body["id"].(string))
			continue
		}
		if st != http.StatusInsufficientStorage || body["code"] != "storage_full" || !strings.Contains(fmt.Sprint(body["message"]), "disk") {
			t.Fatalf("append %d on a full disk: %d %v, want 507 storage_full naming the disk", n, st, body)
		}
		full = body
		break
	}
	if full == nil {
		t.Fatal("the disk never filled up: the test did not exercise a full disk")
	}
	t.Logf("after %d appends: %v", len(acked), full)
	if st, body := health(); st != http.StatusServiceUnavailable || body["status"] != "degraded" || !strings.Contains(fmt.Sprint(body["reason"]), "disk") {
		t.Fatalf("/healthz on a full disk: %d %v, want 503 degraded with the reason", st, body)
	}

	// Backup onto the full disk: fails, leaves nothing behind.
	dest := filepath.Join(dir, "backup", "copy.db")
	if _, stderr, code := runBin(t, "", "--db", db, "backup", dest); code == 0 {
		t.Fatal("backup onto a full disk succeeded")
	} else {
		t.Logf("backup on a full disk: exit %d: %s", code, strings.TrimSpace(stderr))
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "backup", "*copy.db*")); len(left) > 0 {
		t.Fatalf("failed backup left %v behind", left)
	}

	// Space comes back: health recovers by itself, appends and the backup
	// retry succeed.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, body := health()
		if st == http.StatusOK && body["status"] == "ok" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/healthz did not recover after space was freed: %d %v", st, body)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if st, body := post(n + 1); st != http.StatusCreated {
		t.Fatalf("append after space was freed: %d %v", st, body)
	} else {
		acked = append(acked, body["id"].(string))
	}
	if out, stderr, code := runBin(t, "", "--db", db, "backup", dest); code != 0 {
		t.Fatalf("backup retry: exit %d: %s %s", code, out, stderr)
	}
	srv.Process.Signal(syscall.SIGTERM)
	srv.Wait()
	st, err := sqlite.Open(context.Background(), sqlite.Options{Path: db, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range acked {
		if _, err := st.Entry(context.Background(), id); err != nil {
			t.Errorf("acknowledged record %s lost: %v", id, err)
		}
	}
	st.Close()
	if out, _, code := runBin(t, "", "--db", db, "audit"); code != 0 {
		t.Fatalf("audit after the disk filled: %s", out)
	}
}

// TestDiskFullAtStart: a server started on a disk that is already full
// says degraded at its first /healthz, before any append failed.
func TestDiskFullAtStart(t *testing.T) {
	dir := smallFS(t, 24)
	db := filepath.Join(dir, "ledger.db")
	if _, stderr, code := runBin(t, "", "--db", db, "token", "create", "--name", "ci", "--scope", "record"); code != 0 {
		t.Fatalf("token create: %s", stderr)
	}
	fillFS(t, dir, 64<<10)
	srv, base := startServer(t, db)
	defer func() { srv.Process.Kill(); srv.Wait() }()
	resp, err := http.Get(base + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	var body map[string]any
	json.NewDecoder(resp.Body).Decode(&body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || body["status"] != "degraded" || !strings.Contains(fmt.Sprint(body["reason"]), "disk") {
		t.Fatalf("/healthz of a server started on a full disk: %d %v, want 503 degraded naming the disk", resp.StatusCode, body)
	}
}
