package main

import (
	"strings"
	"testing"
)

// TestServeVerifierID: --verifier-id must be an absolute URI; a bad one
// stops `ledger serve` before it opens anything, naming the flag, and
// LEDGER_VERIFIER_ID sets the default.
func TestServeVerifierID(t *testing.T) {
	base := ServeConfig{DB: "ledger.db", Addr: "127.0.0.1:0", MaxBody: 4 << 20}
	for _, bad := range []string{"ledger.vm.b6b0185f", "https://", "/verifier", "urn:has space"} {
		c := base
		c.VerifierID = bad
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "--verifier-id") {
			t.Errorf("--verifier-id %q: %v, want an error naming --verifier-id", bad, err)
		}
	}
	for _, good := range []string{"", "https://ledger.example.com/", "urn:ledger:prod"} {
		c := base
		c.VerifierID = good
		if err := c.Validate(); err != nil {
			t.Errorf("--verifier-id %q: %v", good, err)
		}
	}
	t.Setenv("LEDGER_VERIFIER_ID", "https://ledger.example.com/")
	c, err := defaultServeConfig()
	if err != nil || c.VerifierID != "https://ledger.example.com/" {
		t.Fatalf("LEDGER_VERIFIER_ID: %q %v", c.VerifierID, err)
	}
	cmd := newServeCmd(&app{})
	if f := cmd.Flags().Lookup("verifier-id"); f == nil || f.DefValue != "https://ledger.example.com/" {
		t.Fatalf("--verifier-id flag %+v", f)
	}
}
