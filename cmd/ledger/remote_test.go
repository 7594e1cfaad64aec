package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"
)

// TestRemoteTimeout: a server that never answers fails a command after
// --timeout (exit 2, naming the timeout), and a LEDGER_TIMEOUT that does
// not parse is refused before any work.
func TestRemoteTimeout(t *testing.T) {
	release := make(chan struct{})
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer hs.Close()
	defer close(release)
	start := time.Now()
	_, errOut, code := runBin(t, "", "--server", hs.URL, "--timeout", "300ms", "release", "check", "1.0.0")
	if code != 2 || !strings.Contains(errOut, "Timeout") {
		t.Fatalf("hung server: exit %d, stderr %q; want 2 naming the timeout", code, errOut)
	}
	if d := time.Since(start); d > 15*time.Second {
		t.Fatalf("the command took %v against a 300ms timeout", d)
	}
	cmd := exec.Command(ledgerBin, "--server", hs.URL, "release", "check", "1.0.0")
	cmd.Env = append(os.Environ(), "LEDGER_TIMEOUT=soon")
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), "LEDGER_TIMEOUT") {
		t.Fatalf("bad LEDGER_TIMEOUT: %v %s", err, out)
	}
}

// TestRemoteLikeLocal: the same commands against a server and against a
// local database print the same shapes (record --json, release show), and
// the options that make no sense remotely are refused before any work.
func TestRemoteLikeLocal(t *testing.T) {
	dir := t.TempDir()
	local := filepath.Join(dir, "local.db")
	served := filepath.Join(dir, "served", "ledger.db")
	secret, _, code := runBin(t, "", "--db", served, "token", "create", "--name", "rm", "--scope", "admin", "--role", "platform-reviewer")
	if code != 0 {
		t.Fatal("token create failed")
	}
	secret = strings.TrimSpace(secret)
	if _, _, code := runBin(t, "", "--db", local, "token", "create", "--name", "rm", "--scope", "admin", "--role", "platform-reviewer"); code != 0 {
		t.Fatal("token create failed")
	}
	srv, url := startServer(t, served)
	defer func() { srv.Process.Kill(); srv.Wait() }()
	relFile := filepath.Join(dir, "release.yaml")
	os.WriteFile(relFile, []byte(releaseCLIYAML), 0o644)

	both := func(want int, stdin string, args ...string) (remote, loc string) {
		t.Helper()
		ro, re, rc := runBin(t, stdin, append([]string{"--server", url, "--token", secret}, args...)...)
		lo, le, lc := runBin(t, stdin, append([]string{"--db", local}, args...)...)
		if rc != want || lc != want {
			t.Fatalf("%v: remote exit %d (%s%s), local exit %d (%s%s), want %d", args, rc, ro, re, lc, lo, le, want)
		}
		return ro, lo
	}
	keys := func(s string) []string {
		t.Helper()
		var m map[string]json.RawMessage
		if err := json.Unmarshal([]byte(s), &m); err != nil {
			t.Fatalf("not a JSON object: %v\n%s", err, s)
		}
		var ks []string
		for k, v := range m {
			ks = append(ks, k)
			if k == "entries" {
				var es []map[string]any
				json.Unmarshal(v, &es)
				for ek := range es[0] {
					ks = append(ks, "entries."+ek)
				}
			}
		}
		sort.Strings(ks)
		return ks
	}
	ro, lo := both(0, releaseEvidence(strings.Repeat("a", 40)), "--json", "record", "-")
	if kr, kl := keys(ro), keys(lo); !reflect.DeepEqual(kr, kl) || len(kr) < 4 {
		t.Fatalf("record --json shapes differ:\nremote %v\n local %v", kr, kl)
	}
	remote := func(want int, args ...string) string {
		t.Helper()
		o, e, code := runBin(t, "", append([]string{"--server", url, "--token", secret}, args...)...)
		if code != want {
			t.Fatalf("ledger --server %v: exit %d, want %d\n%s%s", args, code, want, o, e)
		}
		return o + e
	}
	remote(0, "release", "apply", relFile)
	if _, _, code := runBin(t, "", "--db", local, "release", "apply", relFile, "--as", "rm"); code != 0 {
		t.Fatal("local apply failed")
	}
	ro, lo = both(0, "", "release", "show", "3.1.0")
	for _, want := range []string{"release 3.1.0", "1 definition(s)", "component core", "gate qmv", "gate platform"} {
		if !strings.Contains(ro, want) || !strings.Contains(lo, want) {
			t.Fatalf("release show lacks %q:\nremote:\n%s\nlocal:\n%s", want, ro, lo)
		}
	}
	ro, lo = both(0, "", "--json", "release", "show", "3.1.0")
	if kr, kl := keys(ro), keys(lo); !reflect.DeepEqual(kr, kl) {
		t.Fatalf("release show --json shapes differ:\nremote %v\n local %v", kr, kl)
	}
	if out := remote(2, "release", "waive", "3.1.0", "--gate", "qmv", "--reason", "r", "--expires", "24h", "--as", "rm"); !strings.Contains(out, "--as") {
		t.Fatalf("--as with --server: %s", out)
	}
	o, e, code := runBin(t, "", "--server", url, "run", "--backend", "cpu", "--commit", strings.Repeat("a", 40), "--tree", strings.Repeat("b", 40), "--repository", "x")
	if code != 2 || !strings.Contains(e, "--token") || strings.Contains(o, "LANE") {
		t.Fatalf("run --server without a token: exit %d\n%s%s; want 2 before running", code, o, e)
	}
}
