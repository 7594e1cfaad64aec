package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestServeSigstoreSetting: --sigstore-trusted-root and --sigstore-policy
// go together; a server started with both loads them (a bad policy file
// or a file that is not a trusted root stops it, naming the flag or the
// policy file's member: a bad identity, a public key that is not one, a
// rule naming a key the file does not give), and
// without them it still serves, refusing bundles (web tests).
func TestServeSigstoreSetting(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "ledger.db")
	base := ServeConfig{DB: db, Addr: "127.0.0.1:0", MaxBody: 4 << 20}
	for _, c := range []ServeConfig{
		func() ServeConfig { c := base; c.SigstoreTrustedRoot = "root.json"; return c }(),
		func() ServeConfig { c := base; c.SigstorePolicy = "rules.yaml"; return c }(),
	} {
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "go together") {
			t.Errorf("%+v: %v, want the pair required", c, err)
		}
	}
	root := filepath.Join("..", "..", "..", "shared", "corpus", "x509", "sigstore-go", "trusted-roots", "trusted-root-public-good.json")
	if _, err := os.Stat(root); err != nil {
		t.Skipf("sigstore-go corpus absent (%v): the load is not checked", err)
	}
	good := filepath.Join(dir, "rules.yaml")
	os.WriteFile(good, []byte("rules:\n  - {lane: provenance/v1, issuer: https://token.actions.githubusercontent.com, san_regexp: '^https://github\\.com/'}\n"), 0o644)
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte("rules:\n  - {issuer: x}\n"), 0o644)
	badKey := filepath.Join(dir, "badkey.yaml")
	os.WriteFile(badKey, []byte("public_keys:\n  - {name: release-key, pem: not-a-key}\nrules:\n  - {public_key: release-key, timestamp_only: true}\n"), 0o644)
	unknownKey := filepath.Join(dir, "unknownkey.yaml")
	os.WriteFile(unknownKey, []byte("rules:\n  - {public_key: release-key}\n"), 0o644)
	for _, tc := range []struct {
		root, policy, want string
	}{
		{good, good, "sigstore-trusted-root"}, // a rules file is not a trusted root
		{root, bad, "rules[0].san"},
		{root, badKey, "public_keys[0].pem"},
		{root, unknownKey, "rules[0].public_key"},
	} {
		c := base
		c.SigstoreTrustedRoot, c.SigstorePolicy = tc.root, tc.policy
		err := RunServe(context.Background(), c)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("root %s, policy %s: %v; want an error naming %s", filepath.Base(tc.root), filepath.Base(tc.policy), err, tc.want)
		}
	}
}
