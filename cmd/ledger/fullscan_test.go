package main

import (
	"bytes"
	"database/sql"
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
)

// TestFullScanCatchesMiddleEdit edits a leaf below the journal's last
// size (which the start-up tail check does not read) on a stopped copy,
// starts the real server and wants the background full verification to
// put it in the tampered state: /healthz degraded naming the leaf and
// appends refused with 503. With --full-scan=false the same copy serves
// ok and appends (the scan is what catches it).
func TestFullScanCatchesMiddleEdit(t *testing.T) {
	tmpl := integrityTemplate(t, 40)
	db := copyDir(t, tmpl)
	secret, se, code := runBin(t, "", "--db", db, "token", "create", "--name", "ci2", "--scope", "record")
	if code != 0 {
		t.Fatalf("token create: %s", se)
	}
	token := strings.TrimSpace(secret)
	sqlExec(t, db, "UPDATE leaves SET leaf = CAST(replace(CAST(leaf AS TEXT), '\"status\":\"passed\"', '\"status\":\"failed\"') AS BLOB) WHERE idx = 7")
	h, _ := sql.Open("sqlite", "file:"+db)
	var raw []byte
	h.QueryRow("SELECT leaf FROM leaves WHERE idx = 7").Scan(&raw)
	lh := ledger.LeafHash(raw)
	h.Exec("UPDATE leaves SET leaf_hash = ? WHERE idx = 7", lh[:])
	h.Close()

	post := func(base string, n int64) (int, string) {
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
	health := func(base string) (int, map[string]any) {
		var out map[string]any
		resp, err := http.Get(base + "/healthz")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		_ = json.Unmarshal(b, &out)
		return resp.StatusCode, out
	}

	t.Run("scan-off", func(t *testing.T) {
		off := copyDir(t, filepath.Dir(db))
		srv, base := startServer(t, off, "--full-scan=false")
		defer func() { srv.Process.Kill(); srv.Wait() }()
		time.Sleep(500 * time.Millisecond)
		if c, out := health(base); c != 200 || out["status"] != "ok" {
			t.Fatalf("healthz with the scan off: %d %v", c, out)
		}
		if c, b := post(base, 500); c/100 != 2 {
			t.Fatalf("append with the scan off: %d %s", c, b)
		}
	})

	srv, base := startServer(t, db)
	defer func() { srv.Process.Kill(); srv.Wait() }()
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, out := health(base)
		if c == 503 && out["status"] == "degraded" {
			if r, _ := out["reason"].(string); !strings.Contains(r, "leaf 7 ") || out["tampered_index"] != float64(7) {
				t.Fatalf("healthz degraded without naming leaf 7: %v", out)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("healthz never degraded: %d %v", c, out)
		}
		time.Sleep(50 * time.Millisecond)
	}
	c, b := post(base, 501)
	if c != 503 || !strings.Contains(b, "refusing to sign") || !strings.Contains(b, "leaf 7") || strings.Contains(b, `"status":"failed"`) {
		t.Fatalf("append on the tampered log: %d %s", c, b)
	}
}
