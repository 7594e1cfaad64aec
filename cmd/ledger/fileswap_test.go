package main

import (
	"bytes"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// swapSetup makes a live database with 3 records, an older backup of it
// (the 3 records) and then 2 more records in the live one; it returns
// the live path, the backup's path and the record token.
func swapSetup(t *testing.T) (db, old, secret string) {
	t.Helper()
	dir := t.TempDir()
	db = filepath.Join(dir, "live", "ledger.db")
	out, se, code := runBin(t, "", "--db", db, "token", "create", "--name", "ci", "--scope", "record")
	if code != 0 {
		t.Fatalf("token create: %s", se)
	}
	secret = strings.TrimSpace(out)
	srv, base := startServer(t, db)
	for i := range 3 {
		postEvidence(t, base, secret, int64(i))
	}
	srv.Process.Kill()
	srv.Wait()
	old = filepath.Join(dir, "old", "ledger.db")
	if out, se, code := runBin(t, "", "--db", db, "backup", old); code != 0 {
		t.Fatalf("backup: %s %s", out, se)
	}
	return db, old, secret
}

// restoreOver moves the backup over the live database path and removes
// the live -wal and -shm, as a restore done by hand would.
func restoreOver(t *testing.T, old, db string) {
	t.Helper()
	if err := os.Rename(old, db); err != nil {
		t.Fatal(err)
	}
	os.Remove(db + "-wal")
	os.Remove(db + "-shm")
}

func postStatus(t *testing.T, base, token string, n int64) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", base+"/api/v1/evidence", bytes.NewReader(crashEvidence(n)))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestAppendRefusedAfterFileReplaced: a backup moved over the database of
// a running server (the file-check watchdog off) gets no append: 503
// naming the replaced file, and the restarted server refuses the
// rolled-back file as before.
func TestAppendRefusedAfterFileReplaced(t *testing.T) {
	db, old, secret := swapSetup(t)
	srv, base := startServer(t, db, "--file-check-every", "0")
	defer func() { srv.Process.Kill(); srv.Wait() }()
	postEvidence(t, base, secret, 3)
	postEvidence(t, base, secret, 4)
	restoreOver(t, old, db)
	code, body := postStatus(t, base, secret, 5)
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "was replaced by another file") || !strings.Contains(body, "restart") {
		t.Fatalf("append after the file was replaced: %d %s", code, body)
	}
	srv.Process.Kill()
	srv.Wait()
	serveRefused(t, db, "--accept-rollback")
}

// TestServeStopsWhenFileReplaced: with the watchdog on, the server stops
// by itself (exit 2) soon after its database file was replaced, naming
// the file, rather than serve from connections split between two files.
func TestServeStopsWhenFileReplaced(t *testing.T) {
	db, old, secret := swapSetup(t)
	srv, base := startServer(t, db, "--file-check-every", "100ms")
	postEvidence(t, base, secret, 3)
	restoreOver(t, old, db)
	done := make(chan error, 1)
	go func() { done <- srv.Wait() }()
	select {
	case err := <-done:
		ee, ok := err.(interface{ ExitCode() int })
		if !ok || ee.ExitCode() != 2 {
			t.Fatalf("server ended with %v, want exit 2", err)
		}
	case <-time.After(10 * time.Second):
		srv.Process.Kill()
		t.Fatal("server still running 10 s after its database file was replaced")
	}
	se := srv.Stderr.(*syncWriter)
	se.mu.Lock()
	msg := se.w.(*bytes.Buffer).String()
	se.mu.Unlock()
	if !strings.Contains(msg, "was replaced by another file") || !strings.Contains(msg, db) {
		t.Fatalf("server's stop does not name the replaced file: %s", msg)
	}
}

// TestOverwriteInPlaceCaught: an older backup copied over the database
// file in place (same inode; with and without its -wal and -shm removed)
// under a running server. Within the watchdog's interval (100 ms here)
// the server finds that the stored log is behind what it signed: from
// then on appends get 503, /healthz is degraded and the tampered marker
// is left for the restart. Before that, the server's connections may
// still see the old WAL and acknowledge an append or two into the mixed
// file (logged, not failed: that window is the README's limitation).
// Before the watchdog compared the stored log with what was signed,
// appends went on with 201 for ever and signed a second root for sizes
// already signed.
func TestOverwriteInPlaceCaught(t *testing.T) {
	for _, keepWAL := range []bool{false, true} {
		t.Run(map[bool]string{false: "wal removed", true: "wal kept"}[keepWAL], func(t *testing.T) {
			db, old, secret := swapSetup(t)
			srv, base := startServer(t, db, "--file-check-every", "100ms")
			defer func() { srv.Process.Kill(); srv.Wait() }()
			for i := range 4 {
				postEvidence(t, base, secret, int64(10+i))
			}
			b, err := os.ReadFile(old)
			if err != nil {
				t.Fatal(err)
			}
			if !keepWAL {
				os.Remove(db + "-wal")
				os.Remove(db + "-shm")
			}
			f, err := os.OpenFile(db, os.O_WRONLY|os.O_TRUNC, 0)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.Write(b); err != nil {
				t.Fatal(err)
			}
			f.Close()
			deadline := time.Now().Add(10 * time.Second)
			acked := 0
			for i := 0; ; i++ {
				code, body := postStatus(t, base, secret, int64(100+i))
				if code == http.StatusCreated {
					acked++
				} else if code != http.StatusServiceUnavailable && code != http.StatusInternalServerError {
					t.Fatalf("append after the overwrite: %d %s", code, body)
				}
				resp, err := http.Get(base + "/healthz")
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode == http.StatusServiceUnavailable && code != http.StatusCreated {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("10 s after the overwrite: last append %d %s, healthz %d, %d appends acknowledged", code, body, resp.StatusCode, acked)
				}
				time.Sleep(50 * time.Millisecond)
			}
			t.Logf("%d appends acknowledged before the overwrite was found", acked)
			if code, body := postStatus(t, base, secret, 999); code != http.StatusServiceUnavailable {
				t.Fatalf("append after the finding: %d %s", code, body)
			}
			waitTamperMarker(t, filepath.Dir(db))
		})
	}
}

// TestStaleWALHint: a backup renamed over a database whose -wal is left
// beside it (the server killed, so the -wal still holds frames): SQLite
// applies that -wal to the backup; when the result is corrupt, the
// refusal says to remove the -wal and -shm left from the old file.
func TestStaleWALHint(t *testing.T) {
	db, old, secret := swapSetup(t)
	srv, base := startServer(t, db, "--full-scan=false")
	for i := range 30 {
		postEvidence(t, base, secret, int64(10+i))
	}
	srv.Process.Kill()
	srv.Wait()
	if _, err := os.Stat(db + "-wal"); err != nil {
		t.Skipf("no -wal left after kill -9: %v", err)
	}
	if err := os.Rename(old, db); err != nil {
		t.Fatal(err)
	}
	_, se, code := runBin(t, "", "--db", db, "serve", "--addr", "127.0.0.1:0")
	if code != 2 {
		t.Fatalf("serve on a backup under a stale -wal: exit %d: %s", code, se)
	}
	if strings.Contains(se, "corrupt") && !strings.Contains(se, "remove the -wal and -shm files") {
		t.Fatalf("a corrupt file with a -wal beside it, and no word of the -wal: %s", se)
	}
	t.Logf("serve refused: %s", strings.TrimSpace(se))
}
