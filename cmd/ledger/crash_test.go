package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/evidence-ledger/ledger/ledger/sqlite"
)

func crashEvidence(n int64) []byte {
	start := time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC).Add(time.Duration(n) * time.Millisecond)
	ev := map[string]any{
		"lane":    "crash-soak/v1",
		"subject": map[string]any{"repository": "soak", "commit": fmt.Sprintf("%040x", n+1), "tree": fmt.Sprintf("%040x", n+2)},
		"backend": "external", "device": map[string]any{}, "runner": map[string]any{},
		"cases_exact": 1, "cases_total": 1, "control": "none", "status": "passed",
		"started_at": start.Format(time.RFC3339Nano), "finished_at": start.Format(time.RFC3339Nano),
	}
	b, _ := json.Marshal(ev)
	return b
}

// TestCrashDurability appends continuously through the API from several
// clients while the server is killed with SIGKILL at random moments, or
// every third round stopped with SIGTERM (it must exit 0). After each
// stop every acknowledged record must be present and the audit must
// pass. LEDGER_CRASH_ROUNDS raises the number of rounds (default 20) for a
// soak (make soak).
func TestCrashDurability(t *testing.T) {
	rounds := 20
	if v, err := strconv.Atoi(os.Getenv("LEDGER_CRASH_ROUNDS")); err == nil && v > 0 {
		rounds = v
	}
	dir := t.TempDir()
	db := filepath.Join(dir, "ledger.db")
	secret, stderr, code := runBin(t, "", "--db", db, "token", "create", "--name", "ci", "--scope", "record")
	if code != 0 {
		t.Fatalf("token create: %s", stderr)
	}
	token := strings.TrimSpace(secret)
	var seq atomic.Int64
	acked := map[string]bool{}
	var mu sync.Mutex
	rng := rand.New(rand.NewPCG(1, 2))
	terms := 0
	for r := 0; r < rounds; r++ {
		srv, base := startServer(t, db)
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for c := 0; c < 4; c++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				cl := &http.Client{Timeout: 10 * time.Second}
				for {
					select {
					case <-stop:
						return
					default:
					}
					n := seq.Add(1)
					req, _ := http.NewRequest("POST", base+"/api/v1/evidence", bytes.NewReader(crashEvidence(n)))
					req.Header.Set("Authorization", "Bearer "+token)
					req.Header.Set("Content-Type", "application/json")
					resp, err := cl.Do(req)
					if err != nil {
						return // the server was killed
					}
					var a struct {
						ID string `json:"id"`
					}
					json.NewDecoder(resp.Body).Decode(&a)
					resp.Body.Close()
					if resp.StatusCode == http.StatusCreated && a.ID != "" {
						mu.Lock()
						acked[a.ID] = true
						mu.Unlock()
					}
				}
			}()
		}
		time.Sleep(time.Duration(30+rng.IntN(250)) * time.Millisecond)
		// Every third round is a graceful restart: SIGTERM must drain the
		// appends in flight and exit 0; the others crash with SIGKILL.
		graceful := r%3 == 2
		if graceful {
			srv.Process.Signal(syscall.SIGTERM)
			done := make(chan error, 1)
			go func() { done <- srv.Wait() }()
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("round %d: SIGTERM: the server exited with %v, want 0", r, err)
				}
			case <-time.After(30 * time.Second):
				srv.Process.Kill()
				t.Fatalf("round %d: the server did not exit within 30 s of SIGTERM", r)
			}
			terms++
		} else {
			srv.Process.Kill() // SIGKILL
			srv.Wait()
		}
		close(stop)
		wg.Wait()

		// After the crash: every acknowledged record is present, audit passes.
		st, err := sqlite.Open(context.Background(), sqlite.Options{Path: db, ReadOnly: true})
		if err != nil {
			t.Fatalf("round %d: reopen: %v", r, err)
		}
		mu.Lock()
		for id := range acked {
			if _, err := st.Entry(context.Background(), id); err != nil {
				t.Fatalf("round %d: acknowledged record %s lost: %v", r, id, err)
			}
		}
		mu.Unlock()
		st.Close()
		out, _, code := runBin(t, "", "--db", db, "audit")
		if code != 0 {
			t.Fatalf("round %d: audit failed: %s", r, out)
		}
	}
	if len(acked) < rounds {
		t.Fatalf("only %d appends acknowledged in %d rounds: the test did not exercise the server", len(acked), rounds)
	}
	t.Logf("%d rounds (%d SIGTERM, %d SIGKILL), %d acknowledged appends, 0 lost, audit clean", rounds, terms, rounds-terms, len(acked))
}
