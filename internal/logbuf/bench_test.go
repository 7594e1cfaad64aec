package logbuf

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// BenchmarkAccessLine: one access-log record (the server's attributes)
// through a slog text handler into a file, written directly (one write
// per line) and through a Writer (1 MiB, 5 ms), as `ledger serve` does;
// 16 goroutines at once, as the HTTP benchmarks' clients.
func BenchmarkAccessLine(b *testing.B) {
	for _, c := range []struct {
		name string
		wrap func(io.Writer) (io.Writer, func() error)
	}{
		{"direct", func(w io.Writer) (io.Writer, func() error) { return w, func() error { return nil } }},
		{"logbuf", func(w io.Writer) (io.Writer, func() error) { l := New(w, 1<<20, 5*time.Millisecond); return l, l.Close }},
	} {
		b.Run(c.name, func(b *testing.B) {
			f, err := os.Create(filepath.Join(b.TempDir(), "access.log"))
			if err != nil {
				b.Fatal(err)
			}
			defer f.Close()
			w, closeW := c.wrap(f)
			log := slog.New(slog.NewTextHandler(w, nil))
			ctx := context.Background()
			b.SetParallelism(8)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					log.LogAttrs(ctx, slog.LevelInfo, "http request",
						slog.String("method", "POST"), slog.String("route", "/api/v1/evidence"), slog.Int("status", 201),
						slog.Float64("duration_ms", 1.234), slog.String("token", "tok_0123456789ab"))
				}
			})
			if err := closeW(); err != nil {
				b.Fatal(err)
			}
		})
	}
}
