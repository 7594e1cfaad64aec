// Command bench-load is the closed-loop load client of the ledger-vs-Tessera
// benchmark (scripts/bench-vs-tessera.sh). C clients each send one entry,
// wait for its acknowledgement, and send the next, for a warm-up and then
// a measured window; it prints one JSON Report.
//
// --target ledger posts each entry as an evidence record to
// POST /api/v1/evidence with a record-scoped bearer token (an answer of
// 201 or 200 is an acknowledgement); --target tessera posts the same
// bytes to POST /add of cmd/tessera-posix (200 with the index). Every
// entry is a distinct evidence record of --size bytes (the lane result of
// cmd/ledger-load with a details note padding it).
//
// With --pid, the CPU time (utime+stime of /proc/PID/stat) the server
// process used in the measured window is reported, and divided by the
// acknowledgements in it.
//
// Usage:
//
//	bench-load --target ledger --server http://127.0.0.1:8080 --token SECRET \
//	    --clients 64 --duration 15s --pid 1234
//
// Exit code 1 when any request failed, 2 on a usage error.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"os"
	"time"
)

func main() {
	var c Config
	flag.StringVar(&c.Target, "target", "", "ledger or tessera (required)")
	flag.StringVar(&c.Server, "server", "", "base URL of the server (required)")
	flag.StringVar(&c.Token, "token", os.Getenv("LEDGER_TOKEN"), "ledger: record-scoped bearer token (env LEDGER_TOKEN)")
	flag.IntVar(&c.Clients, "clients", 64, "concurrent closed-loop clients")
	flag.DurationVar(&c.Duration, "duration", 15*time.Second, "length of the measured window")
	flag.DurationVar(&c.Warmup, "warmup", 2*time.Second, "length of the unmeasured warm-up before it")
	flag.IntVar(&c.PID, "pid", 0, "server process whose CPU time is measured (0: none)")
	flag.IntVar(&c.Size, "size", 600, "bytes per entry")
	flag.Parse()
	if err := c.Validate(); err != nil {
		fmt.Fprintln(os.Stderr, "bench-load:", err)
		os.Exit(2)
	}
	rep, err := Run(context.Background(), c)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench-load:", err)
		os.Exit(2)
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	enc.Encode(rep)
	if rep.Errors > 0 {
		os.Exit(1)
	}
}

// Config is one load run.
type Config struct {
	Target   string // "ledger" or "tessera"
	Server   string // base URL, no trailing slash needed
	Token    string // ledger only
	Clients  int
	Duration time.Duration // measured window
	Warmup   time.Duration // before the window, not measured
	PID      int           // server process; 0 for none
	Size     int           // bytes per entry
}

// Validate reports the first bad setting, naming its flag.
func (c Config) Validate() error {
	switch {
	case c.Target != "ledger" && c.Target != "tessera":
		return fmt.Errorf("--target must be ledger or tessera, got %q", c.Target)
	case !validServer(c.Server):
		return fmt.Errorf("--server must be an http:// or https:// base URL, got %q", c.Server)
	case c.Target == "ledger" && c.Token == "":
		return errors.New("--token is required for --target ledger (a record-scoped token)")
	case c.Clients < 1 || c.Clients > 4096:
		return fmt.Errorf("--clients must be between 1 and 4096, got %d", c.Clients)
	case c.Duration <= 0:
		return fmt.Errorf("--duration must be positive, got %s", c.Duration)
	case c.Warmup < 0:
		return fmt.Errorf("--warmup must not be negative, got %s", c.Warmup)
	case c.PID < 0:
		return fmt.Errorf("--pid must not be negative, got %d", c.PID)
	case c.Size < minSize || c.Size > 65535:
		return fmt.Errorf("--size must be between %d and 65535 bytes, got %d", minSize, c.Size)
	}
	return nil
}

func validServer(s string) bool {
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != ""
}
