package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/ledger/auth"
	"github.com/evidence-ledger/ledger/verify"
)

// TestRunnerCommandsLocal: on a local database an admin token (--as)
// registers a runner key made by `runner keygen`; `run --sign-key` and
// `record --sign-key` record evidence with that runner as signer; `runner
// audit` checks every signed record; a record token may not register keys;
// after `runner revoke` signing with the key is refused and nothing is
// appended.
func TestRunnerCommandsLocal(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "ledger.db")
	for _, tok := range [][]string{{"adm", "admin"}, {"ci", "record"}} {
		if _, errOut, code := runBin(t, "", "--db", db, "token", "create", "--name", tok[0], "--scope", tok[1]); code != 0 {
			t.Fatalf("token create: %s", errOut)
		}
	}
	key := filepath.Join(dir, "runner.key")
	if _, errOut, code := runBin(t, "", "runner", "keygen", key); code != 0 {
		t.Fatalf("keygen: %s", errOut)
	}
	if fi, err := os.Stat(key); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v %v", fi, err)
	}
	if _, _, code := runBin(t, "", "runner", "keygen", key); code != 2 {
		t.Fatal("keygen overwrote an existing key")
	}
	if _, errOut, code := runBin(t, "", "--db", db, "runner", "add", "--as", "ci", "lab-1", key+".pub"); code != 2 || !strings.Contains(errOut, "admin") {
		t.Fatalf("record token registering a key: exit %d %s", code, errOut)
	}
	if _, errOut, code := runBin(t, "", "--db", db, "runner", "add", "--as", "adm", "lab-1", key+".pub"); code != 0 {
		t.Fatalf("runner add: %s", errOut)
	}
	if out, _, code := runBin(t, "", "--db", db, "--json", "runner", "add", "--as", "adm", "lab-1", key+".pub"); code != 0 || !strings.Contains(out, `"Existing": true`) && !strings.Contains(out, `"existing": true`) {
		t.Fatalf("adding the same key again: exit %d %s", code, out)
	}

	out, errOut, code := runBin(t, "", "--db", db, "run", "--backend", "cpu", "--lane", "alloc-footprint", "--repo-path", "../..",
		"--repository", "github.com/evidence-ledger/ledger", "--sign-key", key)
	if code != 0 {
		t.Fatalf("run --sign-key: exit %d %s %s", code, out, errOut)
	}
	ev := `{"lane":"qmv-bias-sum/v1","subject":{"repository":"mlx","commit":"` + strings.Repeat("1", 40) + `","tree":"` + strings.Repeat("2", 40) + `"},` +
		`"backend":"metal","cases_exact":216,"cases_total":216,"control":"caught","status":"passed","started_at":"2026-11-29T10:00:00Z","finished_at":"2026-11-29T10:00:05Z"}`
	evFile := filepath.Join(dir, "ev.json")
	os.WriteFile(evFile, []byte(ev), 0o644)
	if _, errOut, code := runBin(t, "", "--db", db, "record", "--sign-key", key, evFile); code != 0 {
		t.Fatalf("record --sign-key: %s", errOut)
	}

	// An envelope made elsewhere records as it does over the API; a plain
	// record carrying a signer (copied from a signed one) is refused.
	keyBytes, _ := os.ReadFile(key)
	priv, err := verify.ParseRunnerPrivateKey(keyBytes)
	if err != nil {
		t.Fatal(err)
	}
	env, err := verify.SignEvidence(context.Background(), priv, []byte(strings.Replace(ev, "10:00:05", "10:00:07", 1)))
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(evFile, env, 0o644)
	if _, errOut, code := runBin(t, "", "--db", db, "record", evFile); code != 0 {
		t.Fatalf("record an envelope: %s", errOut)
	}
	out, _, _ = runBin(t, "", "--db", db, "--json", "record", evFile)
	var ans appendedJSON
	json.Unmarshal([]byte(out), &ans)
	if len(ans.Entries) != 1 || !ans.Entries[0].Existing {
		t.Fatalf("the same envelope again: %s", out)
	}
	forged := strings.TrimSuffix(strings.Replace(ev, "10:00:05", "10:00:08", 1), "}") + `,"signer":{"runner":"lab-1","key_id":"SHA256:` + strings.Repeat("A", 43) +
		`","key_entry":"` + strings.Repeat("a", 32) + `","envelope":` + string(env) + `}}`
	os.WriteFile(evFile, []byte(forged), 0o644)
	if _, errOut, code := runBin(t, "", "--db", db, "record", evFile); code != 2 || !strings.Contains(errOut, "signer") {
		t.Fatalf("plain record with a signer: exit %d %s", code, errOut)
	}

	out, _, code = runBin(t, "", "--db", db, "--json", "runner", "audit")
	var rep signedAudit
	if code != 0 || json.Unmarshal([]byte(out), &rep) != nil || rep.Signed != 3 || rep.Records != 3 || len(rep.Problems) != 0 {
		t.Fatalf("runner audit: exit %d %s", code, out)
	}
	out, _, _ = runBin(t, "", "--db", db, "--json", "runner", "list")
	var reg auth.RunnerRegistry
	if json.Unmarshal([]byte(out), &reg) != nil || len(reg.Runners) != 1 || reg.Runners[0].AddedBy != "adm" {
		t.Fatalf("runner list: %s", out)
	}

	// An in-toto Statement signed by the same key, recorded locally: one
	// registry and one verifier, the record carries the runner as signer,
	// and the runner audit checks its envelope again.
	stmt := `{"_type":"https://in-toto.io/Statement/v1","subject":[{"name":"mlx","digest":{"gitCommit":"` + strings.Repeat("1", 40) + `","gitTree":"` + strings.Repeat("2", 40) +
		`"}}],"predicateType":"https://in-toto.io/attestation/test-result/v0.1","predicate":{"result":"PASSED","passedTests":["a","b"],"warnedTests":[],"failedTests":[]}}`
	stEnv, err := verify.SignRunnerEnvelope(context.Background(), priv, ledger.PayloadTypeInToto, []byte(stmt))
	if err != nil {
		t.Fatal(err)
	}
	stFile := filepath.Join(dir, "st.dsse.json")
	os.WriteFile(stFile, stEnv, 0o644)
	if out, errOut, code := runBin(t, "", "--db", db, "record", stFile, "--lane", "ci-tests/v1", "--backend", "cpu"); code != 0 || !strings.Contains(out, "(original)") {
		t.Fatalf("record a signed in-toto envelope: exit %d %s %s", code, out, errOut)
	}
	out, _, code = runBin(t, "", "--db", db, "--json", "runner", "audit")
	if code != 0 || json.Unmarshal([]byte(out), &rep) != nil || rep.Signed != 4 || len(rep.Problems) != 0 {
		t.Fatalf("runner audit with an in-toto record: exit %d %s", code, out)
	}

	if _, errOut, code := runBin(t, "", "--db", db, "runner", "revoke", "--as", "adm", "lab-1"); code != 2 || !strings.Contains(errOut, "reason") {
		t.Fatalf("revoke without a reason: exit %d %s", code, errOut)
	}
	if _, errOut, code := runBin(t, "", "--db", db, "runner", "revoke", "--as", "adm", "--reason", "lab rebuilt", "lab-1"); code != 0 {
		t.Fatalf("revoke: %s", errOut)
	}
	before, _, _ := runBin(t, "", "--db", db, "--json", "runner", "list")
	os.WriteFile(evFile, []byte(strings.Replace(ev, "10:00:05", "10:00:06", 1)), 0o644)
	if _, errOut, code := runBin(t, "", "--db", db, "record", "--sign-key", key, evFile); code != 2 || !strings.Contains(errOut, "revoked") {
		t.Fatalf("record signed by a revoked key: exit %d %s", code, errOut)
	}
	// The records signed before the revocation still audit: the key was
	// live when they were appended.
	if out, _, code := runBin(t, "", "--db", db, "--json", "runner", "audit"); code != 0 {
		t.Fatalf("runner audit after revocation: exit %d %s", code, out)
	}
	if after, _, _ := runBin(t, "", "--db", db, "--json", "runner", "list"); after != before {
		t.Fatal("the refused record changed the registry")
	}
}

// TestRunnerKeysFromOpenSSHAndOpenSSL: keys made by ssh-keygen (OpenSSH
// .pub and private key) and by openssl (PEM PUBLIC KEY, PKCS #8) register
// and sign, and the key id is the fingerprint ssh-keygen -l prints.
// Skipped where either tool is absent.
func TestRunnerKeysFromOpenSSHAndOpenSSL(t *testing.T) {
	for _, tool := range []string{"ssh-keygen", "openssl"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed", tool)
		}
	}
	dir := t.TempDir()
	db := filepath.Join(dir, "ledger.db")
	if _, errOut, code := runBin(t, "", "--db", db, "token", "create", "--name", "adm", "--scope", "admin"); code != 0 {
		t.Fatal(errOut)
	}
	sshKey, sslKey := filepath.Join(dir, "ssh"), filepath.Join(dir, "ssl.pem")
	for _, c := range [][]string{
		{"ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "lab@host", "-f", sshKey},
		{"openssl", "genpkey", "-algorithm", "ed25519", "-out", sslKey},
		{"openssl", "pkey", "-in", sslKey, "-pubout", "-out", sslKey + ".pub"},
	} {
		if out, err := exec.Command(c[0], c[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v %s", c, err, out)
		}
	}
	fp, err := exec.Command("ssh-keygen", "-lf", sshKey+".pub").Output()
	if err != nil {
		t.Fatal(err)
	}
	for i, k := range []string{sshKey, sslKey} {
		name := []string{"lab-ssh", "lab-ssl"}[i]
		out, errOut, code := runBin(t, "", "--db", db, "runner", "add", "--as", "adm", name, k+".pub")
		if code != 0 {
			t.Fatalf("add %s: %s", name, errOut)
		}
		if i == 0 && !strings.Contains(string(fp), strings.Fields(out)[4]) {
			t.Errorf("key id %q is not ssh-keygen's fingerprint %q", strings.Fields(out)[4], fp)
		}
		ev := filepath.Join(dir, name+".json")
		os.WriteFile(ev, []byte(`{"lane":"x/v1","subject":{"repository":"r","commit":"`+strings.Repeat("1", 40)+`","tree":"`+strings.Repeat("2", 40)+
			`"},"backend":"cpu","cases_exact":1,"cases_total":1,"control":"none","status":"passed","started_at":"2026-11-29T10:00:0`+string(rune('0'+i))+`Z","finished_at":"2026-11-29T10:00:09Z"}`), 0o644)
		if _, errOut, code := runBin(t, "", "--db", db, "record", "--sign-key", k, ev); code != 0 {
			t.Fatalf("record signed with the %s key: %s", name, errOut)
		}
	}
	if out, _, code := runBin(t, "", "--db", db, "--json", "runner", "audit"); code != 0 || !strings.Contains(out, `"signed": 2`) {
		t.Fatalf("audit: %d %s", code, out)
	}
}
