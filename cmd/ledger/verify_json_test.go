package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// corpusPath returns ../shared/corpus beside the repository root, skipping
// when it is absent.
func corpusPath(t *testing.T) string {
	t.Helper()
	c, err := filepath.Abs(filepath.Join("..", "..", "..", "shared", "corpus"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(c, "README.md")); err != nil {
		t.Skipf("shared corpus not found at %s; skipping", c)
	}
	return c
}

type verifyJSON struct {
	Letter string `json:"git_letter"`
	Signer string `json:"signer"`
	SK     *struct {
		Flags   int  `json:"flags"`
		Counter int  `json:"counter"`
		UP      bool `json:"user_present"`
		UV      bool `json:"user_verified"`
	} `json:"sk"`
	Path []struct {
		C string `json:"certifier"`
		D string `json:"certified"`
	} `json:"certification_path"`
	Tlog *struct {
		LogIndex int64    `json:"log_index"`
		Verified []string `json:"verified"`
	} `json:"tlog"`
}

func verifyCommitJSON(t *testing.T, args ...string) verifyJSON {
	t.Helper()
	out, se, code := runBin(t, "", append([]string{"--json", "verify", "commit"}, args...)...)
	if code != 0 {
		t.Fatalf("verify commit %v: exit %d\n%s%s", args, code, out, se)
	}
	var rs []verifyJSON
	if err := json.Unmarshal([]byte(out), &rs); err != nil || len(rs) != 1 {
		t.Fatalf("verify commit --json: %v\n%s", err, out)
	}
	return rs[0]
}

// TestVerifyCommitJSONNamesTheEvidence: `ledger verify commit --json`
// names the FIDO flags and counter of an sk signature, the certification
// path of a key valid by the web of trust (--trust on the master keys),
// and the Rekor entry verified for a gitsign commit.
func TestVerifyCommitJSONNamesTheEvidence(t *testing.T) {
	c := corpusPath(t)
	fido := filepath.Join(c, "ssh-fido", "Jookia__gitsshkey")
	r := verifyCommitJSON(t, "--allowed-signers", filepath.Join(fido, "allowed_signers"), "--now", "2026-11-29T12:00:00Z",
		filepath.Join(fido, "commits", "4b90f8b3209a37660b43d96aa892438afe696c1a.commit"))
	if r.Letter != "G" || r.SK == nil || r.SK.Flags != 5 || r.SK.Counter != 10941 || !r.SK.UP || !r.SK.UV {
		t.Errorf("fido: %+v sk %+v, want G, flags 0x05 (UP+UV), counter 10941", r, r.SK)
	}

	wot := filepath.Join(c, "wot")
	raw, err := os.ReadFile(filepath.Join(wot, "verdicts.tsv"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(raw)), "\n")
	head := strings.Split(lines[0], "\t")
	col := map[string]int{}
	for i, h := range head {
		col[h] = i
	}
	var sha, primary string
	for _, l := range lines[1:] {
		f := strings.Split(l, "\t")
		if f[col["verdict_main_ultimate"]] == "G" && f[col["verdict_notrust"]] == "U" {
			sha, primary = f[col["sha"]], f[col["primary_key_fpr"]]
			break
		}
	}
	if sha == "" {
		t.Fatal("no commit valid by certification in wot/verdicts.tsv")
	}
	args := []string{"--keyring", filepath.Join(wot, "keys", "archlinux-keyring-subset.gpg"), "--now", "2026-11-29T12:00:00Z"}
	trust, err := os.ReadFile(filepath.Join(wot, "keys", "ownertrust-main-ultimate.txt"))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(strings.TrimSpace(string(trust)), "\n") {
		fp, _, _ := strings.Cut(l, ":")
		args = append(args, "--trust", fp)
	}
	r = verifyCommitJSON(t, append(args, filepath.Join(wot, "commits", sha+".commit"))...)
	if r.Letter != "G" || len(r.Path) == 0 || r.Path[len(r.Path)-1].D != primary || !strings.Contains(string(trust), r.Path[0].C) {
		t.Errorf("wot %s: letter %s path %+v, want G and a path from a main key to %s", sha, r.Letter, r.Path, primary)
	}

	x := filepath.Join(c, "x509")
	out, se, code := runBin(t, "", "--json", "verify", "commit", "--trusted-root", filepath.Join(x, "trusted-roots", "root-signing", "trusted_root.json"),
		filepath.Join(x, "commits", "c47e8bf5c86212dc9b6db0e3ec4df27a978b3d6e.commit"))
	var rs []verifyJSON
	if err := json.Unmarshal([]byte(out), &rs); err != nil || len(rs) != 1 || code != 0 {
		t.Fatalf("gitsign: exit %d %v\n%s%s", code, err, out, se)
	}
	if rs[0].Tlog == nil || rs[0].Tlog.LogIndex != 10985260 || len(rs[0].Tlog.Verified) == 0 {
		t.Errorf("gitsign: tlog %+v, want log index 10985260 verified", rs[0].Tlog)
	}
}
