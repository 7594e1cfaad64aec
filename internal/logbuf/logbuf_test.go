package logbuf

import (
	"bytes"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// syncBuf is a sink safe for the flusher and the test to share.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestCloseFlushesEveryLineInOrder: lines from concurrent writers all
// reach the sink by Close, whole, each writer's in its order.
func TestCloseFlushesEveryLineInOrder(t *testing.T) {
	var sink syncBuf
	w := New(&sink, 1<<20, time.Hour) // no timed flush: only Close writes
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 500 {
				fmt.Fprintf(w, "g%d line %d\n", g, i)
			}
		}()
	}
	wg.Wait()
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	next := map[string]int{}
	lines := strings.Split(strings.TrimSuffix(sink.String(), "\n"), "\n")
	if len(lines) != 2000 {
		t.Fatalf("%d lines reached the sink, want 2000", len(lines))
	}
	for _, l := range lines {
		var g string
		var i int
		if _, err := fmt.Sscanf(l, "%s line %d", &g, &i); err != nil || next[g] != i {
			t.Fatalf("line %q out of order or torn (want %s line %d)", l, g, next[g])
		}
		next[g]++
	}
	fmt.Fprintf(w, "after close\n")
	if !strings.HasSuffix(sink.String(), "after close\n") {
		t.Fatal("a write after Close did not reach the sink")
	}
	if err := w.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// TestFlushesWithoutClose: a line reaches the sink on the flusher's
// schedule, with no Close or Flush call.
func TestFlushesWithoutClose(t *testing.T) {
	var sink syncBuf
	w := New(&sink, 1<<16, time.Millisecond)
	defer w.Close()
	fmt.Fprintf(w, "hello\n")
	deadline := time.Now().Add(10 * time.Second)
	for sink.String() != "hello\n" {
		if time.Now().After(deadline) {
			t.Fatalf("sink holds %q, want the line flushed by the flusher", sink.String())
		}
		time.Sleep(time.Millisecond)
	}
}

// blockingSink blocks every Write until release is closed.
type blockingSink struct {
	syncBuf
	release chan struct{}
}

func (b *blockingSink) Write(p []byte) (int, error) {
	<-b.release
	return b.syncBuf.Write(p)
}

// TestSlowSinkNeverBlocksWrites: with the sink stuck, writes far past
// the buffer's size all return; what did not fit is dropped and counted
// in a line of its own once the sink moves again.
func TestSlowSinkNeverBlocksWrites(t *testing.T) {
	sink := &blockingSink{release: make(chan struct{})}
	w := New(sink, 4096, time.Millisecond)
	line := strings.Repeat("x", 99) + "\n"
	done := make(chan struct{})
	go func() {
		for range 1000 { // 100 KB into a 4 KB buffer
			w.Write([]byte(line))
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Write blocked on a stuck sink")
	}
	close(sink.release)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	out := sink.String()
	kept := strings.Count(out, line)
	if kept == 0 || kept >= 1000 {
		t.Fatalf("%d of 1000 lines kept through a 4 KB buffer over a stuck sink", kept)
	}
	dropped := 0
	for _, m := range regexp.MustCompile(`logbuf: (\d+) log lines dropped`).FindAllStringSubmatch(out, -1) {
		n, _ := strconv.Atoi(m[1])
		dropped += n
	}
	if dropped != 1000-kept {
		t.Fatalf("the sink was told of %d dropped lines, want %d", dropped, 1000-kept)
	}
}
