package main

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
)

func TestEntryDistinctOfSize(t *testing.T) {
	seen := map[string]bool{}
	for n := int64(1); n <= 100; n++ {
		b := Entry(1_700_000_000_000_000_000, n, 600)
		if len(b) != 600 {
			t.Fatalf("entry %d: %d bytes, want 600", n, len(b))
		}
		if !json.Valid(b) || seen[string(b)] {
			t.Fatalf("entry %d: invalid JSON or a duplicate: %s", n, b)
		}
		seen[string(b)] = true
	}
	if b := Entry(1_700_000_000_000_000_123, 9_999_999_999, minSize); len(b) > minSize {
		t.Errorf("unpadded entry is %d bytes, over minSize %d", len(b), minSize)
	}
}

func TestProcCPUOfSelf(t *testing.T) {
	s, err := procCPU(os.Getpid())
	if err != nil || s < 0 {
		t.Fatalf("procCPU(self) = %v, %v", s, err)
	}
	if _, err := procCPU(1 << 30); err == nil || !strings.Contains(err.Error(), "--pid") {
		t.Errorf("absent pid: error %v does not name --pid", err)
	}
}

func TestValidateNamesFlag(t *testing.T) {
	ok := Config{Target: "tessera", Server: "http://127.0.0.1:1", Clients: 1, Duration: 1, Size: 600}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		mut  func(*Config)
		flag string
	}{
		{func(c *Config) { c.Target = "x" }, "--target"},
		{func(c *Config) { c.Server = "--clients" }, "--server"},
		{func(c *Config) { c.Target = "ledger" }, "--token"},
		{func(c *Config) { c.Clients = 0 }, "--clients"},
		{func(c *Config) { c.Size = 10 }, "--size"},
	} {
		c := ok
		tc.mut(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.flag) {
			t.Errorf("%s: error %v does not name it", tc.flag, err)
		}
	}
}
