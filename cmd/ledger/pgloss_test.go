package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/evidence-ledger/ledger/ledger/storetest/pgtest"
)

// TestPostgresConnectionLoss runs a real `ledger serve` on a real
// PostgreSQL with 8 writers appending through it while every other
// connection to the database is terminated (pg_terminate_backend, what a
// PostgreSQL restart or a failover does to the server's pool) ten times.
// The server must stay up (no panic); an append or read that meets a lost
// connection is answered 503 with Retry-After and a message naming the
// database, never an opaque 500; appends succeed again once the pool has
// reconnected; every acknowledged record is in the log at the index its
// answer named; and `ledger audit` passes.
func TestPostgresConnectionLoss(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	dir := t.TempDir()
	secret, stderr, code := runBin(t, "", "--db", dsn, "--data-dir", dir, "token", "create", "--name", "ci", "--scope", "record")
	if code != 0 {
		t.Fatalf("token create: %s", stderr)
	}
	token := strings.TrimSpace(secret)
	srv, base := startServer(t, dsn, "--data-dir", dir, "--full-scan-every", "300ms", "--full-scan-pause", "0s")
	exited := make(chan struct{})
	go func() { srv.Wait(); close(exited) }()
	defer func() { srv.Process.Kill(); <-exited }()
	alive := func() bool {
		select {
		case <-exited:
			return false
		default:
			return true
		}
	}

	admin, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	admin.SetMaxOpenConns(1)

	var (
		mu        sync.Mutex
		acked     = map[string]uint64{}
		bad       []string
		unavail   atomic.Int64
		seq       atomic.Int64
		stop      = make(chan struct{})
		wg        sync.WaitGroup
		sinceKill atomic.Int64 // acknowledged appends since the last termination
	)
	post := func(cl *http.Client, n int64) {
		req, _ := http.NewRequest("POST", base+"/api/v1/evidence", bytes.NewReader(crashEvidence(n)))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := cl.Do(req)
		if err != nil {
			mu.Lock()
			bad = append(bad, "no answer: "+err.Error())
			mu.Unlock()
			return
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		switch resp.StatusCode {
		case http.StatusCreated:
			var a struct {
				ID    string `json:"id"`
				Index uint64 `json:"index"`
			}
			if json.Unmarshal(body, &a) != nil || a.ID == "" {
				mu.Lock()
				bad = append(bad, "201 without an id: "+string(body))
				mu.Unlock()
				return
			}
			mu.Lock()
			acked[a.ID] = a.Index
			mu.Unlock()
			sinceKill.Add(1)
		case http.StatusServiceUnavailable:
			unavail.Add(1)
			if resp.Header.Get("Retry-After") == "" || !strings.Contains(string(body), "database") {
				mu.Lock()
				bad = append(bad, "503 without Retry-After or without naming the database: "+string(body))
				mu.Unlock()
			}
			time.Sleep(20 * time.Millisecond)
		default:
			mu.Lock()
			bad = append(bad, resp.Status+" "+string(body[:min(len(body), 300)]))
			mu.Unlock()
		}
	}
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl := &http.Client{Timeout: 30 * time.Second}
			for {
				select {
				case <-stop:
					return
				default:
				}
				post(cl, seq.Add(1))
				// Reads meet the lost connections too.
				for _, path := range []string{"/api/v1/log/checkpoint", "/api/v1/log/leaves/0", "/api/v1/evidence?limit=5"} {
					resp, err := cl.Get(base + path)
					if err != nil {
						continue
					}
					b, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusServiceUnavailable {
						mu.Lock()
						bad = append(bad, "GET "+path+": "+resp.Status+" "+string(b[:min(len(b), 300)]))
						mu.Unlock()
					}
				}
			}
		}()
	}
	ctx := context.Background()
	terminated := 0
	for round := range 10 {
		deadline := time.Now().Add(20 * time.Second)
		for sinceKill.Load() < 20 {
			if !alive() {
				close(stop)
				wg.Wait()
				t.Fatalf("round %d: the server died after its connections were terminated (%s)", round, srv.ProcessState)
			}
			if time.Now().After(deadline) {
				close(stop)
				wg.Wait()
				t.Fatalf("round %d: fewer than 20 appends acknowledged in 20 s after the connections were terminated (%d); %d bad answers, e.g. %s", round, sinceKill.Load(), len(bad), strings.Join(bad[:min(len(bad), 5)], "\n"))
			}
			time.Sleep(10 * time.Millisecond)
		}
		sinceKill.Store(0)
		var n int
		if err := admin.QueryRowContext(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()`).Scan(&n); err != nil {
			t.Fatalf("pg_terminate_backend: %v", err)
		}
		terminated += n
	}
	// The server recovers: a last round of appends after the final
	// termination must succeed.
	deadline := time.Now().Add(20 * time.Second)
	for sinceKill.Load() < 20 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	if sinceKill.Load() < 20 {
		t.Fatalf("appends did not recover after the last termination: %d acknowledged", sinceKill.Load())
	}
	if !alive() {
		t.Fatalf("the server died (%s)", srv.ProcessState)
	}
	if len(bad) > 0 {
		t.Fatalf("%d bad answers, e.g. %s", len(bad), strings.Join(bad[:min(len(bad), 5)], "\n"))
	}
	if terminated == 0 {
		t.Fatal("no connection was terminated: the test exercised nothing")
	}

	for id, idx := range acked {
		var got uint64
		if err := admin.QueryRowContext(ctx, "SELECT idx FROM leaves WHERE id = $1", id).Scan(&got); err != nil {
			t.Fatalf("acknowledged record %s lost: %v", id, err)
		}
		if got != idx {
			t.Fatalf("record %s was acknowledged at index %d but is stored at %d", id, idx, got)
		}
	}
	srv.Process.Signal(syscall.SIGTERM)
	<-exited
	if out, stderr, code := runBin(t, "", "--db", dsn, "--data-dir", dir, "audit"); code != 0 {
		t.Fatalf("ledger audit (exit %d): %s %s", code, out, stderr)
	}
	t.Logf("%d connections terminated over 10 rounds, %d acknowledged appends, %d answered 503 during the loss, 0 lost, audit clean", terminated, len(acked), unavail.Load())
}
