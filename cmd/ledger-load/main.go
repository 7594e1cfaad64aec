// Command ledger-load is the load generator of the reliability suite: it
// drives a running `ledger serve` with concurrent writers (POST
// /api/v1/evidence, one record each) and readers (the release page, the
// overview, readiness and inclusion proofs of entries it appended), first
// writers alone, then writers and readers together, and prints one JSON
// report: per phase the write throughput (records/s), and per route the
// count, errors and latency percentiles (ms).
//
// Usage:
//
//	ledger-load --server http://127.0.0.1:8080 --token SECRET --release 0.9.0 \
//	    --writers 64 --readers 64 --duration 60s --alone 20s
//
// Any non-2xx answer or transport error counts as an error; the exit code
// is 1 when there was any, 2 on a usage error.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"time"
)

func main() {
	var c Config
	flag.StringVar(&c.Server, "server", "http://127.0.0.1:8080", "base URL of the ledger server")
	flag.StringVar(&c.Token, "token", os.Getenv("LEDGER_TOKEN"), "record-scoped bearer token (env LEDGER_TOKEN)")
	flag.StringVar(&c.Release, "release", "", "release version whose page and readiness the readers fetch (required)")
	flag.IntVar(&c.Writers, "writers", 64, "concurrent writers")
	flag.IntVar(&c.Readers, "readers", 64, "concurrent readers")
	flag.DurationVar(&c.Duration, "duration", 60*time.Second, "length of the mixed phase")
	flag.DurationVar(&c.Alone, "alone", 20*time.Second, "length of the writers-alone phase before it")
	flag.Parse()
	if err := c.Validate(); err != nil {
		fmt.Fprintln(os.Stderr, "ledger-load:", err)
		os.Exit(2)
	}
	rep, err := Run(context.Background(), c)
	if err != nil {
		fmt.Fprintln(os.Stderr, "ledger-load:", err)
		os.Exit(2)
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	enc.Encode(rep)
	if rep.Errors > 0 {
		os.Exit(1)
	}
}
