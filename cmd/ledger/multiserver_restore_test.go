package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/ledger/keys"
	"github.com/evidence-ledger/ledger/ledger/storetest/pgtest"
	"github.com/evidence-ledger/ledger/ledger/tlog"
)

// restoreSeq numbers the evidence of the restore tests (distinct records).
var restoreSeq atomic.Int64

// appendN appends n records through the server at base and returns the
// last answer's checkpoint (what a client saves); a non-201 answer fails t.
func appendN(t *testing.T, base, token string, n int) ledger.Checkpoint {
	t.Helper()
	var cp ledger.Checkpoint
	for range n {
		status, body := postRestoreEvidence(t, base, token)
		if status != http.StatusCreated {
			t.Fatalf("append: %d %s", status, body)
		}
		var a struct {
			Checkpoint ledger.Checkpoint `json:"checkpoint"`
		}
		if err := json.Unmarshal([]byte(body), &a); err != nil {
			t.Fatal(err)
		}
		cp = a.Checkpoint
	}
	return cp
}

func postRestoreEvidence(t *testing.T, base, token string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", base+"/api/v1/evidence", bytes.NewReader(crashEvidence(1_000_000+restoreSeq.Add(1))))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp.StatusCode, string(b)
}

// stopServer stops a server started by startServer with SIGTERM.
func stopServer(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	cmd.Process.Signal(syscall.SIGTERM)
	cmd.Wait()
}

// serveRefusedTimeout runs `ledger serve` and wants it to refuse to start: exit
// 2 within 30 s, its stderr returned. A server that starts fails t.
func serveRefusedTimeout(t *testing.T, dsn string, extra ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	args := append([]string{"--db", dsn, "serve", "--addr", "127.0.0.1:0"}, extra...)
	cmd := exec.CommandContext(ctx, ledgerBin, args...)
	var so, se bytes.Buffer
	cmd.Stdout, cmd.Stderr = &so, &se
	err := cmd.Run()
	if strings.Contains(so.String(), "serving on") {
		t.Fatalf("ledger serve %v started (and would sign): %s", extra, so.String())
	}
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 {
		t.Fatalf("ledger serve %v: %v (want exit 2): %s", extra, err, se.String())
	}
	return se.String()
}

// pgDump dumps the database at dsn into a file (custom format) and
// returns a function that restores it in place (pg_restore --clean).
func pgDump(t *testing.T, dsn string) (restore func()) {
	t.Helper()
	found, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pg_dump")
	dump := "pg_dump"
	if len(found) > 0 {
		dump = found[len(found)-1]
	}
	file := filepath.Join(t.TempDir(), "log.dump")
	if out, err := exec.Command(dump, "-Fc", "-f", file, "-d", dsn).CombinedOutput(); err != nil {
		t.Fatalf("pg_dump: %v %s", err, out)
	}
	return func() {
		t.Helper()
		if out, err := exec.Command(filepath.Join(filepath.Dir(dump), "pg_restore"), "--clean", "--if-exists", "-d", dsn, file).CombinedOutput(); err != nil {
			t.Fatalf("pg_restore: %v %s", err, out)
		}
	}
}

// TestMultiServerRestoreNoFork is the restore of issue 29 item 4 with two
// real `ledger serve` processes on one real PostgreSQL: server B appends
// 20 and stops; server A appends 20; a dump is taken (size 41); A appends
// 20 more and the client saves the size-61 checkpoint; the dump is
// restored. Neither server may then sign a checkpoint of the restored
// database (it would be a second root for size 61):
//
//   - servers that each keep their own copy of the journal: A refuses (its
//     journal holds 61) and B refuses too, naming the checkpoints the
//     other server signed that its journal never saw;
//   - servers sharing one journal: B, running through the restore,
//     refuses its next append (503, naming size 61) and refuses to start
//     again; `ledger restore --accept-rollback` records the restore as a
//     "log" leaf, after which both servers start and sign again and
//     `ledger audit` passes.
func TestMultiServerRestoreNoFork(t *testing.T) {
	setup := func(t *testing.T) (dsn, dirA, token string) {
		dsn = pgtest.NewDatabase(t)
		dirA = t.TempDir()
		secret, stderr, code := runBin(t, "", "--db", dsn, "--data-dir", dirA, "token", "create", "--name", "ci", "--scope", "record")
		if code != 0 {
			t.Fatalf("token create: %s", stderr)
		}
		return dsn, dirA, strings.TrimSpace(secret)
	}

	t.Run("own journals", func(t *testing.T) {
		dsn, dirA, token := setup(t)
		dirB := t.TempDir()
		for _, f := range []string{keys.KeyFile, keys.PubFile, tlog.SignedStateFile} {
			b, err := os.ReadFile(filepath.Join(dirA, f))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dirB, f), b, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		b, baseB := startServer(t, dsn, "--data-dir", dirB)
		appendN(t, baseB, token, 20)
		stopServer(t, b)
		// A's journal never saw B's 20 checkpoints: had A started, the
		// journals would part from here, and a restore below what one of
		// them signed would look like a longer log to the other.
		msg := serveRefusedTimeout(t, dsn, "--data-dir", dirA)
		if !strings.Contains(msg, "another journal") || !strings.Contains(msg, "size 1") || !strings.Contains(msg, "size 21") {
			t.Fatalf("server A refused without naming the checkpoints its journal never saw: %s", msg)
		}
		// The operator's way out is explicit and recorded.
		if out, stderr, code := runBin(t, "", "--db", dsn, "--data-dir", dirA, "restore", "--accept-rollback", "--by", "ops"); code != 0 {
			t.Fatalf("restore --accept-rollback: %s %s", out, stderr)
		}
		a, baseA := startServer(t, dsn, "--data-dir", dirA)
		defer func() { a.Process.Kill(); a.Wait() }()
		if cp := appendN(t, baseA, token, 1); cp.Size != 23 {
			t.Fatalf("size %d after the adopt leaf and one append, want 23", cp.Size)
		}
	})

	t.Run("shared journal", func(t *testing.T) {
		dsn, dir, token := setup(t)
		// Both servers hold the log's one data directory: the key and the
		// signed-state journal (witness state apart).
		b, baseB := startServer(t, dsn, "--data-dir", dir, "--file-check-every", "0")
		defer func() { b.Process.Kill(); b.Wait() }()
		appendN(t, baseB, token, 20)
		a, baseA := startServer(t, dsn, "--data-dir", dir)
		appendN(t, baseA, token, 20)
		restore := pgDump(t, dsn)
		saved := appendN(t, baseA, token, 20)
		if saved.Size != 61 {
			t.Fatalf("size %d after 61 appends", saved.Size)
		}
		stopServer(t, a)
		restore()
		// B signed only up to 20 itself; the database (41) extends that,
		// but the log signed 61.
		status, body := postRestoreEvidence(t, baseB, token)
		if status != http.StatusServiceUnavailable || !strings.Contains(body, "61") {
			t.Fatalf("server B appended over the restored database: %d %s", status, body)
		}
		stopServer(t, b)
		for _, who := range []string{"A", "B"} {
			if msg := serveRefusedTimeout(t, dsn, "--data-dir", dir); !strings.Contains(msg, "size 61") {
				t.Fatalf("server %s refused without naming size 61: %s", who, msg)
			}
		}
		out, stderr, code := runBin(t, "", "--db", dsn, "--data-dir", dir, "restore", "--accept-rollback", "--by", "ops", "--reason", "restore test")
		if code != 0 {
			t.Fatalf("restore --accept-rollback: %s %s", out, stderr)
		}
		b2, baseB2 := startServer(t, dsn, "--data-dir", dir)
		defer func() { b2.Process.Kill(); b2.Wait() }()
		a2, baseA2 := startServer(t, dsn, "--data-dir", dir)
		defer func() { a2.Process.Kill(); a2.Wait() }()
		appendN(t, baseB2, token, 3)
		cp := appendN(t, baseA2, token, 3)
		if cp.Size != 41+1+6 {
			t.Fatalf("size %d after the restore leaf and 6 appends, want 48", cp.Size)
		}
		resp, err := http.Get(baseA2 + "/api/v1/log/leaves/41")
		if err != nil {
			t.Fatal(err)
		}
		leaf, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(leaf), `"log"`) || !strings.Contains(string(leaf), "restore") {
			t.Fatalf("leaf 41 is not the restore's log leaf: %s", leaf)
		}
		stopServer(t, a2)
		stopServer(t, b2)
		if out, stderr, code := runBin(t, "", "--db", dsn, "--data-dir", dir, "audit"); code != 0 {
			t.Fatalf("ledger audit: %s %s", out, stderr)
		}
	})
}
