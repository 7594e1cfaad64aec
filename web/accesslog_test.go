package web

import (
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/evidence-ledger/ledger/internal/logbuf"
)

// TestAccessLogBuffered: with Config.AccessLog set (as `ledger serve`
// sets it, over a logbuf.Writer), the request lines go there and not to
// Log, every one of them is in the sink once the buffer is closed, and
// no secret is among them.
func TestAccessLogBuffered(t *testing.T) {
	sink := &syncBuffer{}
	buf := logbuf.New(sink, 1<<20, time.Hour) // flushed only by Close
	e := newHostileEnv(t, Config{AccessLog: slog.New(slog.NewTextHandler(buf, nil))})
	for i := range 20 {
		if code, b := e.do(t, "POST", "/api/v1/evidence", e.record, testEvidence(100+i)); code != http.StatusCreated {
			t.Fatalf("POST %d: %d %s", i, code, b)
		}
	}
	e.do(t, "GET", "/api/v1/log/checkpoint", "not-a-token-secret", nil)
	if err := buf.Close(); err != nil {
		t.Fatal(err)
	}
	logs := sink.String()
	if n := strings.Count(logs, `msg="http request" method=POST route=/api/v1/evidence status=201`); n != 20 {
		t.Fatalf("%d of 20 POST lines in the access log after Close:\n%s", n, logs)
	}
	if !strings.Contains(logs, `route=/api/v1/log/checkpoint status=401`) {
		t.Fatalf("the refused request is not in the access log:\n%s", logs)
	}
	if strings.Contains(e.logs.String(), "http request") {
		t.Fatalf("request lines went to Log as well as AccessLog:\n%s", e.logs.String())
	}
	for _, secret := range []string{e.record, "not-a-token-secret"} {
		if strings.Contains(logs, secret) {
			t.Fatal("a token secret is in the access log")
		}
	}
}
