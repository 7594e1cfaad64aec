// Command tessera-posix is the Tessera side of the ledger-vs-Tessera
// benchmark (scripts/bench-vs-tessera.sh): a minimal tlog-tiles
// personality on github.com/transparency-dev/tessera v1.0.4 with its POSIX
// storage driver in one directory.
//
// POST /add appends the request body (1 to 65,535 bytes) as one entry and
// answers 200 with the entry's index in decimal. Two acknowledgement modes:
//
//   - sequencing: the answer is sent once the entry's batch (at most
//     --batch-size entries, closed after --batch-age, 10 ms by default) is
//     sequenced and integrated into the tiles on disk (fsync'd); no
//     checkpoint need cover it yet.
//   - publication: the answer is sent once a signed checkpoint published
//     by the log (every --checkpoint-interval, 100 ms by default in this
//     mode) commits to the entry, through tessera's PublicationAwaiter
//     polling the checkpoint every --await-poll; the body is then the
//     index, a newline and the checkpoint.
//
// Checkpoints are signed with a note signer (Ed25519, golang.org/x/mod's
// sumdb/note) whose key is generated at start. GET /checkpoint, /tile/ and
// /entries/ serve the log's files. On start it prints
// "tessera-posix: serving on http://HOST:PORT/" to stdout; SIGINT or
// SIGTERM stops it after tessera's shutdown (pending batches integrated,
// the last checkpoint published).
//
// Usage:
//
//	tessera-posix --dir /tmp/log --mode sequencing --addr 127.0.0.1:0
package main

import (
	"context"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/transparency-dev/tessera"
	"github.com/transparency-dev/tessera/storage/posix"
	"golang.org/x/mod/sumdb/note"
)

// Config is one server: its storage directory, listening address and
// tessera's batching and checkpoint settings.
type Config struct {
	Dir                string
	Addr               string
	Mode               string        // "sequencing" or "publication"
	BatchSize          uint          // entries per sequenced batch, at most
	BatchAge           time.Duration // a batch is sequenced this long after its first entry, at the latest
	CheckpointInterval time.Duration // 0: 1 s in sequencing mode, 100 ms in publication mode
	AwaitPoll          time.Duration // publication mode: checkpoint poll period of the awaiter
	Origin             string        // the checkpoint's origin line and the signer's name
	GCInterval         time.Duration // removal of obsolete partial tiles and bundles; 0 disables it
	Antispam           bool          // tessera's in-memory duplicate suppression
}

// Validate reports the first bad setting, naming its flag.
func (c *Config) Validate() error {
	switch {
	case c.Dir == "":
		return errors.New("--dir is required (the POSIX log's directory)")
	case c.Mode != "sequencing" && c.Mode != "publication":
		return fmt.Errorf("--mode must be sequencing or publication, got %q", c.Mode)
	case c.BatchSize < 1 || c.BatchSize > 1<<16:
		return fmt.Errorf("--batch-size must be between 1 and 65536, got %d", c.BatchSize)
	case c.BatchAge <= 0:
		return fmt.Errorf("--batch-age must be positive, got %s", c.BatchAge)
	case c.CheckpointInterval != 0 && c.CheckpointInterval < 100*time.Millisecond:
		return fmt.Errorf("--checkpoint-interval must be at least 100ms (tessera's POSIX minimum), got %s", c.CheckpointInterval)
	case c.AwaitPoll <= 0:
		return fmt.Errorf("--await-poll must be positive, got %s", c.AwaitPoll)
	case c.Origin == "":
		return errors.New("--origin must not be empty")
	case c.GCInterval < 0:
		return fmt.Errorf("--gc-interval must not be negative, got %s", c.GCInterval)
	}
	if c.CheckpointInterval == 0 {
		c.CheckpointInterval = time.Second
		if c.Mode == "publication" {
			c.CheckpointInterval = 100 * time.Millisecond
		}
	}
	return nil
}

func main() {
	var c Config
	flag.StringVar(&c.Dir, "dir", "", "directory of the POSIX log (created if absent; required)")
	flag.StringVar(&c.Addr, "addr", "127.0.0.1:0", "listening address (port 0: any free port)")
	flag.StringVar(&c.Mode, "mode", "sequencing", "acknowledge on `sequencing` or on publication")
	flag.UintVar(&c.BatchSize, "batch-size", 256, "entries per sequenced batch, at most")
	flag.DurationVar(&c.BatchAge, "batch-age", 10*time.Millisecond, "longest wait of a batch's first entry before it is sequenced")
	flag.DurationVar(&c.CheckpointInterval, "checkpoint-interval", 0, "checkpoint publication period (default 1s in sequencing mode, 100ms in publication mode)")
	flag.DurationVar(&c.AwaitPoll, "await-poll", 10*time.Millisecond, "publication mode: how often the awaiter reads the checkpoint")
	flag.StringVar(&c.Origin, "origin", "bench.example/tessera-posix", "checkpoint origin and signer name")
	flag.DurationVar(&c.GCInterval, "gc-interval", time.Minute, "period of the partial tile and bundle removal (0 disables it)")
	flag.BoolVar(&c.Antispam, "antispam", false, "enable tessera's in-memory antispam (duplicate suppression)")
	flag.Parse()
	if err := c.Validate(); err != nil {
		fmt.Fprintln(os.Stderr, "tessera-posix:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	ready := func(addr string) { fmt.Printf("tessera-posix: serving on http://%s/\n", addr) }
	if err := serve(ctx, c, ready); err != nil {
		fmt.Fprintln(os.Stderr, "tessera-posix:", err)
		os.Exit(1)
	}
}

// serve runs the server until ctx is done, then shuts tessera down;
// ready is called with the listening address once requests are served.
func serve(ctx context.Context, c Config, ready func(addr string)) error {
	if err := os.MkdirAll(c.Dir, 0o755); err != nil {
		return fmt.Errorf("--dir: %w", err)
	}
	skey, _, err := note.GenerateKey(rand.Reader, c.Origin)
	if err != nil {
		return fmt.Errorf("generating the checkpoint key: %w", err)
	}
	signer, err := note.NewSigner(skey)
	if err != nil {
		return fmt.Errorf("checkpoint signer: %w", err)
	}
	driver, err := posix.New(ctx, posix.Config{Path: c.Dir})
	if err != nil {
		return fmt.Errorf("POSIX storage in %s: %w", c.Dir, err)
	}
	opts := tessera.NewAppendOptions().
		WithCheckpointSigner(signer).
		WithCheckpointInterval(c.CheckpointInterval).
		WithCheckpointRepublishInterval(max(time.Minute, c.CheckpointInterval)).
		WithBatching(c.BatchSize, c.BatchAge).
		WithGarbageCollectionInterval(c.GCInterval)
	if c.Antispam {
		opts = opts.WithAntispam(tessera.DefaultAntispamInMemorySize, nil)
	}
	// The appender's background jobs outlive the HTTP server's context so
	// that shutdown can integrate what is pending.
	bg, cancel := context.WithCancel(context.Background())
	defer cancel()
	appender, shutdown, reader, err := tessera.NewAppender(bg, driver, opts)
	if err != nil {
		return fmt.Errorf("tessera appender: %w", err)
	}
	var awaiter *tessera.PublicationAwaiter
	if c.Mode == "publication" {
		awaiter = tessera.NewPublicationAwaiter(bg, reader.ReadCheckpoint, c.AwaitPoll)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /add", func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, tessera.DefaultEntrySizeLimit))
		if err != nil || len(b) == 0 {
			http.Error(w, "the body must be one entry of 1 to 65535 bytes", http.StatusBadRequest)
			return
		}
		future := appender.Add(r.Context(), tessera.NewEntry(b))
		var idx tessera.Index
		var cp []byte
		if awaiter != nil {
			idx, cp, err = awaiter.Await(r.Context(), future)
		} else {
			idx, err = future()
		}
		if err != nil {
			if errors.Is(err, tessera.ErrPushback) {
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			}
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		out := strconv.AppendUint(make([]byte, 0, 24+len(cp)), idx.Index, 10)
		if cp != nil {
			out = append(append(out, '\n'), cp...)
		}
		w.Write(out)
	})
	files := http.FileServer(http.Dir(c.Dir))
	mux.Handle("GET /checkpoint", files)
	mux.Handle("GET /tile/", files)
	mux.Handle("GET /entries/", files)
	ln, err := net.Listen("tcp", c.Addr)
	if err != nil {
		return fmt.Errorf("--addr: %w", err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	ready(ln.Addr().String())
	select {
	case <-ctx.Done():
	case err := <-errc:
		return err
	}
	sctx, scancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer scancel()
	srv.Shutdown(sctx)
	return shutdown(sctx)
}
