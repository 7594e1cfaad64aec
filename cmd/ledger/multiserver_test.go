package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/ledger/keys"
	"github.com/evidence-ledger/ledger/ledger/postgres"
	"github.com/evidence-ledger/ledger/ledger/storetest/pgtest"
)

// ackedAppend is what a server's 201 answer promised.
type ackedAppend struct {
	index uint64
	size  uint64
	root  ledger.Hash
}

// TestTwoServersOnePostgres runs two real `ledger serve` processes on one
// PostgreSQL database, 16 writers appending through each, and kills
// either server with SIGKILL at random moments (restarting it at once)
// for LEDGER_MULTI_SECONDS (default 15; `make multiserver` runs 60).
// Afterwards every acknowledged record is in the log at the index its
// answer named, every acknowledged checkpoint is the stored one of its
// size (one linear history), the audit is clean, and no append was
// answered with an error: the servers never fail each other's batches
// (the sequencer lock), they only wait for them.
func TestTwoServersOnePostgres(t *testing.T) {
	secs := 15
	if v, err := strconv.Atoi(os.Getenv("LEDGER_MULTI_SECONDS")); err == nil && v > 0 {
		secs = v
	}
	dsn := pgtest.NewDatabase(t)
	// One log, one data directory: both servers hold its key and share
	// its signed-state journal (each with its own witness state).
	dir := t.TempDir()
	dirs := [2]string{dir, dir}
	secret, stderr, code := runBin(t, "", "--db", dsn, "--data-dir", dir, "token", "create", "--name", "ci", "--scope", "record")
	if code != 0 {
		t.Fatalf("token create: %s", stderr)
	}
	token := strings.TrimSpace(secret)
	var srvs [2]*exec.Cmd
	var bases [2]atomic.Pointer[string]
	start := func(i int) {
		cmd, base := startServer(t, dsn, "--data-dir", dirs[i])
		srvs[i] = cmd
		bases[i].Store(&base)
	}
	start(0)
	start(1)

	var (
		mu       sync.Mutex
		acked    = map[string]ackedAppend{}
		perSrv   [2]atomic.Int64
		bad      []string
		seq      atomic.Int64
		stop     = make(chan struct{})
		wg       sync.WaitGroup
		dialErrs atomic.Int64
	)
	for s := range 2 {
		for range 16 {
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
					n := seq.Add(1)
					req, _ := http.NewRequest("POST", *bases[s].Load()+"/api/v1/evidence", bytes.NewReader(crashEvidence(n)))
					req.Header.Set("Authorization", "Bearer "+token)
					req.Header.Set("Content-Type", "application/json")
					resp, err := cl.Do(req)
					if err != nil { // the server was killed (or is restarting)
						dialErrs.Add(1)
						time.Sleep(10 * time.Millisecond)
						continue
					}
					body, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					var a struct {
						ID         string            `json:"id"`
						Index      uint64            `json:"index"`
						Checkpoint ledger.Checkpoint `json:"checkpoint"`
					}
					if resp.StatusCode != http.StatusCreated || json.Unmarshal(body, &a) != nil || a.ID == "" {
						mu.Lock()
						bad = append(bad, resp.Status+" "+string(body[:min(len(body), 300)]))
						mu.Unlock()
						continue
					}
					mu.Lock()
					acked[a.ID] = ackedAppend{a.Index, a.Checkpoint.Size, a.Checkpoint.Root}
					mu.Unlock()
					perSrv[s].Add(1)
				}
			}()
		}
	}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 18))
	deadline := time.Now().Add(time.Duration(secs) * time.Second)
	kills := 0
	for time.Now().Before(deadline) {
		time.Sleep(time.Duration(300+rng.IntN(1200)) * time.Millisecond)
		i := rng.IntN(2)
		srvs[i].Process.Kill() // SIGKILL, mid-batch or not
		srvs[i].Wait()
		kills++
		start(i)
	}
	close(stop)
	wg.Wait()
	for i := range srvs {
		srvs[i].Process.Kill()
		srvs[i].Wait()
	}

	if len(bad) > 0 {
		t.Fatalf("%d appends answered with an error, e.g. %s", len(bad), bad[0])
	}
	if perSrv[0].Load() == 0 || perSrv[1].Load() == 0 {
		t.Fatalf("acknowledged appends per server: %d and %d: both must have appended", perSrv[0].Load(), perSrv[1].Load())
	}
	ctx := context.Background()
	k, err := keys.Load(dirs[0], false)
	if err != nil {
		t.Fatal(err)
	}
	st, err := postgres.Open(ctx, postgres.Options{DSN: dsn, Key: k, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	idx := map[uint64]string{}
	for id, a := range acked {
		e, err := st.Entry(ctx, id)
		if err != nil {
			t.Fatalf("acknowledged record %s lost: %v", id, err)
		}
		if e.Index != a.index {
			t.Fatalf("record %s was acknowledged at index %d but is stored at %d", id, a.index, e.Index)
		}
		if other, dup := idx[a.index]; dup {
			t.Fatalf("index %d acknowledged for %s and %s", a.index, other, id)
		}
		idx[a.index] = id
		cp, err := st.CheckpointAt(ctx, a.size)
		if err != nil || cp.Root != a.root {
			t.Fatalf("the checkpoint of size %d acknowledged with %s is not the stored one (%s, %v): the history forked", a.size, id, cp.Root, err)
		}
	}
	rep, err := st.Audit(ctx)
	if err != nil || !rep.OK {
		t.Fatalf("audit: %+v %v", rep, err)
	}
	if out, _, code := runBin(t, "", "--db", dsn, "--data-dir", dirs[1], "audit"); code != 0 {
		t.Fatalf("ledger audit: %s", out)
	}
	t.Logf("%d s, %d SIGKILLs, %d + %d acknowledged appends (two servers), %d refused connections while down, log of %d leaves, %d checkpoints: 0 lost, no error answers, audit clean",
		secs, kills, perSrv[0].Load(), perSrv[1].Load(), dialErrs.Load(), rep.Leaves, rep.Checkpoints)
}
