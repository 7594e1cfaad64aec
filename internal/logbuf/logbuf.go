package logbuf

import (
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"
)

// Writer buffers whole writes (one log line each, as a slog handler
// makes them) in memory and writes them to its sink from one goroutine,
// every Interval or sooner when the buffer is half full. A write that
// would take the buffer past Size bytes is dropped, never waited for;
// the number dropped is written to the sink as a line of its own at the
// next flush. Lines still buffered when the process dies without Close
// (a crash, SIGKILL) are lost: at most Size bytes, normally the last
// Interval's lines. Safe for concurrent use.
type Writer struct {
	sink     io.Writer
	size     int
	interval time.Duration

	mu      sync.Mutex
	buf     []byte
	dropped int
	closed  bool
	once    sync.Once
	wake    chan struct{}
	done    chan struct{}
	stopped chan struct{}

	flushMu sync.Mutex // serializes writes to sink
	spare   []byte
	err     error // the first error the sink returned
}

// New returns a Writer over sink holding at most size bytes (at least
// 4096) and flushing every interval (at least 1 ms), and starts its
// flushing goroutine; Close stops it.
func New(sink io.Writer, size int, interval time.Duration) *Writer {
	size = max(size, 4096)
	interval = max(interval, time.Millisecond)
	w := &Writer{sink: sink, size: size, interval: interval, buf: make([]byte, 0, size), spare: make([]byte, 0, size),
		wake: make(chan struct{}, 1), done: make(chan struct{}), stopped: make(chan struct{})}
	go w.run()
	return w
}

// Write buffers p whole, or drops it when the buffer cannot hold it; it
// never blocks on the sink and always returns len(p), nil. After Close,
// p is written to the sink directly.
func (w *Writer) Write(p []byte) (int, error) {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		w.flushMu.Lock()
		defer w.flushMu.Unlock()
		return w.sink.Write(p)
	}
	if len(w.buf)+len(p) > w.size {
		w.dropped++
		w.mu.Unlock()
		return len(p), nil
	}
	w.buf = append(w.buf, p...)
	half := len(w.buf) >= w.size/2
	w.mu.Unlock()
	if half {
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
	return len(p), nil
}

func (w *Writer) run() {
	defer close(w.stopped)
	t := time.NewTicker(w.interval)
	defer t.Stop()
	for {
		select {
		case <-w.done:
			return
		case <-t.C:
		case <-w.wake:
		}
		w.Flush()
	}
}

// Flush writes what is buffered to the sink and returns the first error
// the sink has returned, if any. It waits for the sink.
func (w *Writer) Flush() error { return w.flush(false) }

// flush takes the buffer (and, when final, marks w closed in the same
// step, so no write is left behind) and writes it to the sink.
func (w *Writer) flush(final bool) error {
	w.flushMu.Lock()
	defer w.flushMu.Unlock()
	w.mu.Lock()
	out, dropped := w.buf, w.dropped
	w.buf, w.dropped = w.spare[:0], 0
	if final {
		w.closed = true
	}
	w.mu.Unlock()
	if len(out) > 0 {
		if _, err := w.sink.Write(out); err != nil && w.err == nil {
			w.err = err
		}
	}
	if dropped > 0 {
		if _, err := fmt.Fprintf(w.sink, "logbuf: %d log lines dropped: the log's sink did not keep up\n", dropped); err != nil && w.err == nil {
			w.err = err
		}
	}
	w.spare = out[:0]
	return w.err
}

// Close stops the flushing goroutine and flushes what is buffered; later
// writes go to the sink directly. It returns Flush's error. Calling Close
// more than once is safe; later calls return nil.
func (w *Writer) Close() error {
	err := error(nil)
	w.once.Do(func() {
		close(w.done)
		<-w.stopped
		err = w.flush(true)
	})
	return err
}

// AccessLogger is the access log `ledger serve` writes: a slog text
// handler at level over a Writer on sink of 1 MiB flushed every 5 ms.
// The caller closes the Writer at shutdown (it flushes what is
// buffered). The web package's HTTP benchmarks use it too, so that they
// measure the server as it is run.
func AccessLogger(sink io.Writer, level slog.Leveler) (*slog.Logger, *Writer) {
	w := New(sink, 1<<20, 5*time.Millisecond)
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level})), w
}
