package main

import (
	"database/sql"
	"encoding/json"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
)

// TestTokenCreateScopedAndExpiring: `ledger token create` with an evidence
// scope and an expiry makes a token whose leaf the audit covers; bad flags
// are refused naming the flag; revocation is a leaf too.
func TestTokenCreateScopedAndExpiring(t *testing.T) {
	db := filepath.Join(t.TempDir(), "data", "ledger.db")
	before := time.Now().UTC()
	out, se, code := runBin(t, "", "--db", db, "--json", "token", "create", "--name", "ci-cuda", "--scope", "record",
		"--repository", "github.com/ml-explore/mlx", "--lane", "qmv-bias-sum", "--lane", "qmv-bias-sum-paths/v1", "--backend", "cuda,cpu", "--expires", "720h")
	if code != 0 {
		t.Fatalf("token create: %d %s", code, se)
	}
	var res struct {
		Token  ledger.Token `json:"token"`
		Secret string       `json:"secret"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	tk := res.Token
	if strings.Join(tk.Repositories, ",") != "github.com/ml-explore/mlx" || strings.Join(tk.Lanes, ",") != "qmv-bias-sum,qmv-bias-sum-paths/v1" ||
		len(tk.Backends) != 2 || tk.Backends[0] != "cpu" || tk.Backends[1] != "cuda" || !strings.HasPrefix(res.Secret, "lgr_") {
		t.Fatalf("token: %+v", tk)
	}
	if tk.ExpiresAt == nil || tk.ExpiresAt.Sub(before) < 720*time.Hour || tk.ExpiresAt.Sub(before) > 721*time.Hour {
		t.Fatalf("expiry %v, want 720h from %v", tk.ExpiresAt, before)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--expires", "-5m"}, "--expires must be a positive duration"},
		{[]string{"--expires", "soon"}, "invalid argument"},
		{[]string{"--backend", "tpu"}, "backend: must be one of"},
		{[]string{"--lane", "Bad Lane"}, "lane: must be a lane name"},
	} {
		args := append([]string{"--db", db, "token", "create", "--name", "other", "--scope", "record"}, c.args...)
		if _, se, code := runBin(t, "", args...); code != 2 || !strings.Contains(se, c.want) {
			t.Errorf("%v: %d %q, want 2 naming %q", c.args, code, se, c.want)
		}
	}
	out, _, code = runBin(t, "", "--db", db, "token", "list")
	if code != 0 || !strings.Contains(out, "repo=github.com/ml-explore/mlx lane=qmv-bias-sum,qmv-bias-sum-paths/v1 backend=cpu,cuda") || !strings.Contains(out, tk.ExpiresAt.Format("2006-01-02T15:04:05Z")) {
		t.Fatalf("token list: %d %s", code, out)
	}
	if _, se, code := runBin(t, "", "--db", db, "token", "revoke", "ci-cuda"); code != 0 {
		t.Fatalf("revoke: %s", se)
	}
	if out, se, code := runBin(t, "", "--db", db, "audit"); code != 0 || !strings.Contains(out, "audit passed: 2 leaves") {
		t.Fatalf("audit: %d %s %s", code, out, se)
	}
}

// TestServeRefusesEditedTokenRow: a running `ledger serve` checks the
// tokens row of every request against its token leaf, so a scope widened
// by raw SQL in the database under it is refused at the next request (the
// client exits 2 naming the mismatch, not the secret) and nothing is
// recorded.
func TestServeRefusesEditedTokenRow(t *testing.T) {
	db := filepath.Join(t.TempDir(), "ledger.db")
	secret, se, code := runBin(t, "", "--db", db, "token", "create", "--name", "ci-other", "--scope", "record", "--repository", "github.com/other/repo")
	if code != 0 {
		t.Fatalf("token create: %s", se)
	}
	secret = strings.TrimSpace(secret)
	srv, url := startServer(t, db)
	defer func() { srv.Process.Kill(); srv.Wait() }()
	record := func() (string, int) {
		_, se, code := runBin(t, releaseEvidence(strings.Repeat("a", 40)), "--server", url, "--token", secret, "record", "-")
		return se, code
	}
	if se, code := record(); code != 2 || !strings.Contains(se, "out of the scope") {
		t.Fatalf("out of scope before the edit: %d %s", code, se)
	}
	h, err := sql.Open("sqlite", "file:"+db+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.Exec(`UPDATE tokens SET repositories = '[]' WHERE name = 'ci-other'`); err != nil {
		t.Fatal(err)
	}
	h.Close()
	se, code = record()
	if code != 2 || !strings.Contains(se, "does not match its token leaf") || !strings.Contains(se, "repositories differs") || strings.Contains(se, secret[4:20]) {
		t.Fatalf("after widening the row's scope: %d %s", code, se)
	}
	resp, err := http.Get(url + "/api/v1/log/checkpoint")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var cp ledger.Checkpoint
	if err := json.NewDecoder(resp.Body).Decode(&cp); err != nil || cp.Size != 1 {
		t.Fatalf("log size %d (%v), want 1 (the token leaf alone)", cp.Size, err)
	}
}
