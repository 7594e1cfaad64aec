package web

import (
	"context"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestClientGoneIsNotAServerError: an error that is the request's own
// context ending (the client disconnected, a decode stopped for it) is
// answered 499 and logged at info level, not as a 500 "request failed";
// an error that only wraps some other canceled context is still a
// server error.
func TestClientGoneIsNotAServerError(t *testing.T) {
	var logBuf syncBuffer
	s, err := New(Config{Store: newAPIEnv(t, Config{}).store, Log: slog.New(slog.NewTextHandler(&logBuf, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r := httptest.NewRequest("POST", "/api/v1/evidence", nil).WithContext(ctx)
	w := httptest.NewRecorder()
	s.writeError(w, r, fmt.Errorf("decode junit: %w", context.Canceled))
	if w.Code != 499 || strings.Contains(logBuf.String(), "request failed") {
		t.Fatalf("client gone: %d, log %q", w.Code, logBuf.String())
	}
	w = httptest.NewRecorder()
	s.writeError(w, httptest.NewRequest("POST", "/api/v1/evidence", nil), fmt.Errorf("decode junit: %w", context.Canceled))
	if w.Code != 500 || !strings.Contains(logBuf.String(), "request failed") {
		t.Fatalf("a canceled context that is not the request's: %d, log %q", w.Code, logBuf.String())
	}
}
