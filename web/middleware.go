package web

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
)

func securityHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Content-Security-Policy", "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
		next.ServeHTTP(w, r)
	})
}

func (s *Server) recoverer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				s.log.Error("panic in handler", "path", r.URL.Path, "panic", v)
				s.writeError(w, r, ledger.Errorf(ledger.CodeInternal, "panic"))
			}
		}()
		next.ServeHTTP(w, r)
	})
}

// accessInfo is what the inner handlers tell the access log: the id of
// the token that authenticated the request. The token's secret never
// reaches it.
type accessInfo struct{ tokenID string }

const accessKey ctxKey = 2

// instrument counts and times every request by route pattern, and writes
// the access log: one Info record per request through Config.AccessLog
// with method, route (the pattern, not the path: paths carry ids and query
// strings), status, duration and the authenticated token's id.
func (s *Server) instrument(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		ww := middleware.NewWrapResponseWriter(w, r.ProtoMajor)
		info := &accessInfo{}
		next.ServeHTTP(ww, r.WithContext(context.WithValue(r.Context(), accessKey, info)))
		route := chi.RouteContext(r.Context()).RoutePattern()
		if route == "" {
			route = "unmatched"
		}
		d := time.Since(start)
		s.metrics.requests.WithLabelValues(route, r.Method, http.StatusText(ww.Status())).Inc()
		s.metrics.duration.WithLabelValues(route).Observe(d.Seconds())
		s.cfg.AccessLog.LogAttrs(r.Context(), slog.LevelInfo, "http request",
			slog.String("method", r.Method), slog.String("route", route), slog.Int("status", ww.Status()),
			slog.Float64("duration_ms", float64(d.Microseconds())/1000), slog.String("token", info.tokenID))
	})
}
