package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// start runs serve on a fresh directory in the given mode and returns its
// base URL; the server is stopped when the test ends.
func start(t *testing.T, mode string) string {
	t.Helper()
	c := Config{Dir: t.TempDir(), Addr: "127.0.0.1:0", Mode: mode, BatchSize: 256, BatchAge: 10 * time.Millisecond,
		AwaitPoll: 10 * time.Millisecond, Origin: "test.example/log", GCInterval: time.Minute}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	addr := make(chan string, 1)
	done := make(chan error, 1)
	go func() { done <- serve(ctx, c, func(a string) { addr <- a }) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
	select {
	case a := <-addr:
		return "http://" + a
	case err := <-done:
		t.Fatalf("serve: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("server did not start in 10s")
	}
	return ""
}

func add(t *testing.T, url string, body []byte) (int, string) {
	t.Helper()
	resp, err := http.Post(url+"/add", "application/octet-stream", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestSequencingAcksIndices(t *testing.T) {
	url := start(t, "sequencing")
	seen := map[uint64]bool{}
	for i := range 3 {
		code, body := add(t, url, fmt.Appendf(nil, "entry %d", i))
		if code != http.StatusOK {
			t.Fatalf("add %d: status %d: %s", i, code, body)
		}
		idx, err := strconv.ParseUint(body, 10, 64)
		if err != nil || seen[idx] || idx > 2 {
			t.Fatalf("add %d: answer %q: want a new index below 3", i, body)
		}
		seen[idx] = true
	}
	if code, body := add(t, url, nil); code != http.StatusBadRequest {
		t.Errorf("empty entry: status %d (%s), want 400", code, body)
	}
}

func TestPublicationAckCarriesCoveringCheckpoint(t *testing.T) {
	url := start(t, "publication")
	code, body := add(t, url, []byte("published entry"))
	if code != http.StatusOK {
		t.Fatalf("status %d: %s", code, body)
	}
	idx, cp, ok := strings.Cut(body, "\n")
	if !ok {
		t.Fatalf("answer %q: want the index, a newline and the checkpoint", body)
	}
	lines := strings.Split(cp, "\n")
	if len(lines) < 4 || lines[0] != "test.example/log" {
		t.Fatalf("checkpoint %q: want the origin test.example/log first", cp)
	}
	size, err := strconv.ParseUint(lines[1], 10, 64)
	i, err2 := strconv.ParseUint(idx, 10, 64)
	if err != nil || err2 != nil || size <= i {
		t.Fatalf("checkpoint size %q does not cover index %q", lines[1], idx)
	}
	if !strings.Contains(cp, "\n\n— test.example/log ") {
		t.Errorf("checkpoint %q: no signature line of test.example/log", cp)
	}
}

func TestValidateNamesFlag(t *testing.T) {
	for _, tc := range []struct {
		mut  func(*Config)
		flag string
	}{
		{func(c *Config) { c.Dir = "" }, "--dir"},
		{func(c *Config) { c.Mode = "later" }, "--mode"},
		{func(c *Config) { c.BatchSize = 0 }, "--batch-size"},
		{func(c *Config) { c.CheckpointInterval = time.Millisecond }, "--checkpoint-interval"},
	} {
		c := Config{Dir: "d", Mode: "sequencing", BatchSize: 1, BatchAge: time.Millisecond, AwaitPoll: time.Millisecond, Origin: "o"}
		tc.mut(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.flag) {
			t.Errorf("%s: error %v does not name it", tc.flag, err)
		}
	}
}
