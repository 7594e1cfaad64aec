package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/evidence-ledger/ledger/witness/witnesstest"
)

// getJSON GETs base+path and decodes the JSON answer into out.
func getJSON(t *testing.T, url string, out any) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if out != nil && resp.StatusCode == 200 {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("GET %s: %v: %s", url, err, b)
		}
	}
	return resp.StatusCode
}

func getBytes(t *testing.T, url string) []byte {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %d %s", url, resp.StatusCode, b)
	}
	return b
}

func postEvidence(t *testing.T, base, token string, n int64) string {
	t.Helper()
	req, _ := http.NewRequest("POST", base+"/api/v1/evidence", bytes.NewReader(crashEvidence(n)))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 != 2 {
		t.Fatalf("append: %d %s", resp.StatusCode, b)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("append took %v: it must not wait for witnesses", d)
	}
	var res struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(b, &res); err != nil || res.ID == "" {
		t.Fatalf("append answer: %v: %s", err, b)
	}
	return res.ID
}

type witnessStatus struct {
	Witnessed        bool      `json:"witnessed"`
	UnwitnessedSince time.Time `json:"unwitnessed_since"`
	Latest           *struct {
		Size      uint64   `json:"size"`
		Cosigners []string `json:"cosigners"`
	} `json:"latest"`
	Witnesses []struct {
		Name    string `json:"name"`
		Refused bool   `json:"refused"`
	} `json:"witnesses"`
}

// waitWitnessed polls /api/v1/log/witnesses until a round has seen size
// and its outcome is witnessed.
func waitWitnessed(t *testing.T, base string, size uint64, witnessed bool) witnessStatus {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var st witnessStatus
		getJSON(t, base+"/api/v1/log/witnesses", &st)
		if st.Latest != nil && st.Latest.Size == size && st.Witnessed == witnessed {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("no round at size %d witnessed=%v: %+v", size, witnessed, st)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestWitnessedServeProofAndAuditAgainst runs the real ledger binary with
// a real litewitness: cosigned checkpoints, a tlog-proof verified offline
// (ledger proof verify and x/mod/sumdb/tlog), a witness down that stops
// no append, audit --against saved checkpoints, and a restore-then-append
// fork that the witness refuses and audit --against names.
func TestWitnessedServeProofAndAuditAgainst(t *testing.T) {
	witnesstest.RequireSSHAgent(t)
	dir := t.TempDir()
	db := filepath.Join(dir, "data", "ledger.db")
	secret, se, code := runBin(t, "", "--db", db, "token", "create", "--name", "ci", "--scope", "record")
	if code != 0 {
		t.Fatalf("token create: %s", se)
	}
	token := strings.TrimSpace(secret)
	pub := filepath.Join(dir, "data", "ledger.pub")
	vkb, err := os.ReadFile(pub)
	if err != nil {
		t.Fatal(err)
	}
	vkey := strings.TrimSpace(string(vkb))
	origin, _, _ := strings.Cut(vkey, "+")
	lw := witnesstest.NewLitewitness(t, "witness.test/e2e", origin, vkey)
	policy := filepath.Join(dir, "witnesses.policy")
	os.WriteFile(policy, []byte("log "+vkey+"\n"+lw.PolicyLine()+"quorum witness.test/e2e\n"), 0o644)

	srv, base := startServer(t, db, "--witness-policy", policy)
	defer func() { srv.Process.Kill(); srv.Wait() }()

	// The token's leaf is entry 0 (tokens are leaves): two records make
	// size 3.
	var ids []string
	for i := range 2 {
		ids = append(ids, postEvidence(t, base, token, int64(i)))
	}
	waitWitnessed(t, base, 3, true)
	var cp struct {
		Size      uint64   `json:"size"`
		Note      string   `json:"note"`
		Cosigners []string `json:"cosigners"`
	}
	getJSON(t, base+"/api/v1/log/checkpoint", &cp)
	if cp.Size != 3 || strings.Join(cp.Cosigners, ",") != "witness.test/e2e" || !strings.Contains(cp.Note, "— witness.test/e2e ") {
		t.Fatalf("checkpoint with cosignatures: %+v", cp)
	}
	saved3 := filepath.Join(dir, "checkpoint-3.json")
	os.WriteFile(saved3, getBytes(t, base+"/api/v1/log/checkpoint"), 0o644)
	var health struct {
		Witness struct {
			Witnessed bool `json:"witnessed"`
		} `json:"witness"`
	}
	getJSON(t, base+"/healthz", &health)
	if !health.Witness.Witnessed {
		t.Fatalf("healthz: %+v", health)
	}

	// The tlog-proof of the first record, verified offline twice.
	proofFile := filepath.Join(dir, ids[0]+".tlog-proof")
	if _, se, code := runBin(t, "", "--server", base, "proof", "get", ids[0], "-o", proofFile); code != 0 {
		t.Fatalf("proof get: %s", se)
	}
	out, se, code := runBin(t, "", "proof", "verify", proofFile, "--key", pub, "--witness-policy", policy)
	if code != 0 || !strings.Contains(out, "entry 1 ") || !strings.Contains(out, "met: true") {
		t.Fatalf("proof verify: %d %s %s", code, out, se)
	}
	pb, _ := os.ReadFile(proofFile)
	if err := checkWithSumdbTlog(pb, vkey); err != nil {
		t.Fatalf("x/mod/sumdb/tlog rejects the proof: %v", err)
	}
	tampered := bytes.Replace(pb, []byte("index 1\n"), []byte("index 2\n"), 1)
	os.WriteFile(proofFile+".bad", tampered, 0o644)
	if out, _, code := runBin(t, "", "proof", "verify", proofFile+".bad", "--key", pub); code != 1 || !strings.Contains(out, "FAILED") {
		t.Fatalf("tampered proof: %d %s", code, out)
	}

	// Backup at size 3 (what a restore will bring back).
	backup := filepath.Join(dir, "backup") + string(filepath.Separator)
	if out, se, code := runBin(t, "", "--db", db, "backup", backup); code != 0 {
		t.Fatalf("backup: %s %s", out, se)
	}
	for i := 3; i < 6; i++ {
		postEvidence(t, base, token, int64(i))
	}
	waitWitnessed(t, base, 6, true)
	saved6 := filepath.Join(dir, "checkpoint-6.json")
	os.WriteFile(saved6, getBytes(t, base+"/api/v1/log/checkpoint"), 0o644)

	// The witness goes down: appends go on, the log is unwitnessed.
	lw.Kill()
	postEvidence(t, base, token, 6)
	st := waitWitnessed(t, base, 7, false)
	if st.UnwitnessedSince.IsZero() {
		t.Fatalf("status: %+v", st)
	}
	var h2 struct {
		Witness map[string]any `json:"witness"`
	}
	getJSON(t, base+"/healthz", &h2)
	if h2.Witness["witnessed"] != false || h2.Witness["unwitnessed_since"] == nil {
		t.Fatalf("healthz while unwitnessed: %v", h2)
	}
	lw.Start()
	postEvidence(t, base, token, 7)
	waitWitnessed(t, base, 8, true)

	// audit --against, through the server and on the database.
	for _, where := range [][]string{{"--server", base}, {"--db", db}} {
		args := append(append([]string{}, where...), "audit", "--against", saved3, "--against", saved6, "--key", pub)
		if out, se, code := runBin(t, "", args...); code != 0 || strings.Count(out, "ok ") != 2 {
			t.Fatalf("audit --against %v: %d %s %s", where, code, out, se)
		}
	}
	// A tampered saved checkpoint and a wrong key fail.
	b6, _ := os.ReadFile(saved6)
	os.WriteFile(saved6+".bad", bytes.Replace(b6, []byte(`\n6\n`), []byte(`\n5\n`), 1), 0o644)
	if out, _, code := runBin(t, "", "--server", base, "audit", "--against", saved6+".bad", "--key", pub); code != 1 || !strings.Contains(out, "bad_signature") {
		t.Fatalf("tampered saved checkpoint: %d %s", code, out)
	}
	otherDB := filepath.Join(dir, "other", "ledger.db")
	runBin(t, "", "--db", otherDB, "migrate")
	if out, _, code := runBin(t, "", "--server", base, "audit", "--against", saved6, "--key", filepath.Join(dir, "other", "ledger.pub")); code != 1 || !strings.Contains(out, "key_mismatch") {
		t.Fatalf("wrong key: %d %s", code, out)
	}

	// Restore the backup (size 3) in place and append: the server refuses
	// to start, naming both sizes and the command; once the restore is
	// accepted (a leaf records it), the witness refuses the fork, and
	// audit --against names where the histories part.
	srv.Process.Kill()
	srv.Wait()
	restoreInPlace(t, filepath.Join(backup, "ledger.db"), db)
	if _, se, code := runBin(t, string(crashEvidence(100)), "--db", db, "record", "-"); code == 0 || !strings.Contains(se, "(size 3) is behind the last checkpoint this log signed (size 8") || !strings.Contains(se, "ledger restore --accept-rollback") {
		t.Fatalf("append on the restored copy was not refused: %d %s", code, se)
	}
	if out, se, code := runBin(t, "", "--db", db, "serve", "--addr", "127.0.0.1:0"); code != 2 || !strings.Contains(se, "behind the last checkpoint") {
		t.Fatalf("serve on the restored copy: %d %s %s", code, out, se)
	}
	out, se, code = runBin(t, "", "--db", db, "restore", "--accept-rollback", "--by", "operator", "--reason", "disk lost")
	if code != 0 || !strings.Contains(out, "restore accepted: the log had signed size 8") || !strings.Contains(out, "leaf 3") {
		t.Fatalf("restore --accept-rollback: %d %s %s", code, out, se)
	}
	for i := 100; i < 104; i++ {
		if _, se, code := runBin(t, string(crashEvidence(int64(i))), "--db", db, "record", "-"); code != 0 {
			t.Fatalf("record on the accepted copy: %s", se)
		}
	}
	srv2, base2 := startServer(t, db, "--witness-policy", policy)
	defer func() { srv2.Process.Kill(); srv2.Wait() }()
	var leaf3 struct {
		Entry struct {
			Kind string          `json:"kind"`
			Body json.RawMessage `json:"body"`
		} `json:"entry"`
	}
	getJSON(t, base2+"/api/v1/log/leaves/3", &leaf3)
	var ev LogEvent
	json.Unmarshal(leaf3.Entry.Body, &ev)
	if leaf3.Entry.Kind != "log" || ev.Event != "restore" || ev.FromSize != 8 || ev.ToSize != 3 || ev.By != "operator" || ev.Reason != "disk lost" {
		t.Fatalf("the restore leaf: %+v %s", leaf3, leaf3.Entry.Body)
	}
	st = waitWitnessed(t, base2, 8, false)
	if !st.Witnesses[0].Refused {
		t.Fatalf("the witness did not refuse the fork: %+v", st)
	}
	out, _, code = runBin(t, "", "--server", base2, "audit", "--against", saved3, "--against", saved6, "--key", pub)
	if code != 1 || !strings.Contains(out, "FAILED "+saved6+": fork") || !strings.Contains(out, "part after size 3 and at or before size 6") {
		t.Fatalf("audit --against after restore-then-append: %d %s", code, out)
	}
}

// restoreInPlace puts the stopped database's backup copy src in place of
// db, as the README's restore procedure says (the -wal and -shm files
// removed first).
func restoreInPlace(t *testing.T, src, db string) {
	t.Helper()
	for _, sfx := range []string{"-wal", "-shm"} {
		os.Remove(db + sfx)
	}
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(db, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// checkWithSumdbTlog verifies a tlog-proof with golang.org/x/mod/sumdb
// (note and tlog) only, parsing it by hand.
func checkWithSumdbTlog(b []byte, vkey string) error {
	head, signed, _ := strings.Cut(string(b), "\n\n")
	lines := strings.Split(head, "\n")
	leaf, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(lines[1], "extra "))
	if err != nil {
		return err
	}
	index, err := strconv.ParseInt(strings.TrimPrefix(lines[2], "index "), 10, 64)
	if err != nil {
		return err
	}
	var rp tlog.RecordProof
	for _, l := range lines[3:] {
		h, err := tlog.ParseHash(l)
		if err != nil {
			return err
		}
		rp = append(rp, h)
	}
	v, err := note.NewVerifier(vkey)
	if err != nil {
		return err
	}
	n, err := note.Open([]byte(signed), note.VerifierList(v))
	if err != nil {
		return err
	}
	cl := strings.Split(n.Text, "\n")
	size, _ := strconv.ParseInt(cl[1], 10, 64)
	root, err := tlog.ParseHash(cl[2])
	if err != nil {
		return err
	}
	return tlog.CheckRecord(rp, size, root, index, tlog.RecordHash(leaf))
}
