package main

import (
	"encoding/json"
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
