package web

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/witness"
	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Config configures a Server.
type Config struct {
	Store ledger.Store
	Log   *slog.Logger
	// MaxBody caps request bodies in bytes (default 4 MiB).
	MaxBody int64
	// ReadAuth makes reads (GET) require a token with scope read or higher.
	ReadAuth bool
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Witnesser, when set, supplies the witnesses' cosignatures served with
	// checkpoints and proofs, and the witness part of /healthz.
	Witnesser *witness.Witnesser
}

// Server is the HTTP server's state. Its methods are safe for concurrent
// use.
type Server struct {
	cfg       Config
	store     ledger.Store
	log       *slog.Logger
	reg       *prometheus.Registry
	metrics   *metrics
	router    chi.Router
	pages     *pages
	storage   storageHealth
	readiness readinessCache
}

// storageHealth is the degraded state /healthz reports after a write
// failed on a full disk (CodeStorageFull). It clears by itself: /healthz
// asks the store to probe its disk (StorageProber) at most once per
// probeEvery while degraded, and a store without a probe clears after
// degradedFor. Safe for concurrent use.
type storageHealth struct {
	mu        sync.Mutex
	reason    string // empty: healthy
	since     time.Time
	lastProbe time.Time
}

// StorageProber is implemented by stores that can check, without
// touching the log, that their disk takes writes again (sqlite.Store).
type StorageProber interface {
	ProbeStorage(ctx context.Context) error
}

const (
	probeEvery  = time.Second
	degradedFor = time.Minute
)

func (h *storageHealth) degrade(reason string, now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.reason == "" {
		h.since = now
	}
	h.reason = reason
}

// state returns the current reason ("" when healthy), probing p first
// when degraded and a probe is due.
func (h *storageHealth) state(ctx context.Context, p StorageProber, now time.Time) (reason string, since time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.reason == "" {
		return "", time.Time{}
	}
	switch {
	case p != nil && now.Sub(h.lastProbe) >= probeEvery:
		h.lastProbe = now
		if p.ProbeStorage(ctx) == nil {
			h.reason = ""
		}
	case p == nil && now.Sub(h.since) >= degradedFor:
		h.reason = ""
	}
	return h.reason, h.since
}

type metrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	appended *prometheus.CounterVec
	logSize  prometheus.Gauge
}

// New builds a Server and its routes. It fails when the dashboard templates
// do not parse.
func New(cfg Config) (*Server, error) {
	if cfg.Store == nil {
		return nil, errors.New("web: nil store")
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.MaxBody <= 0 {
		cfg.MaxBody = 4 << 20
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	s := &Server{cfg: cfg, store: cfg.Store, log: cfg.Log, reg: prometheus.NewRegistry()}
	s.metrics = &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ledger_http_requests_total", Help: "HTTP requests by route pattern, method and status."}, []string{"route", "method", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "ledger_http_request_duration_seconds", Help: "HTTP request latency by route pattern.", Buckets: prometheus.DefBuckets}, []string{"route"}),
		appended: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ledger_entries_appended_total", Help: "Log entries appended through the API, by kind."}, []string{"kind"}),
		logSize:  prometheus.NewGauge(prometheus.GaugeOpts{Name: "ledger_log_size", Help: "Leaves in the log at the latest checkpoint seen by this server."}),
	}
	s.reg.MustRegister(s.metrics.requests, s.metrics.duration, s.metrics.appended, s.metrics.logSize,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if err := s.initPages(); err != nil {
		return nil, err
	}
	s.router = s.routes()
	return s, nil
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.router.ServeHTTP(w, r) }

// Router returns the chi router (for route listings in tests).
func (s *Server) Router() chi.Router { return s.router }

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

func (s *Server) instrument(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		ww := middleware.NewWrapResponseWriter(w, r.ProtoMajor)
		next.ServeHTTP(ww, r)
		route := chi.RouteContext(r.Context()).RoutePattern()
		if route == "" {
			route = "unmatched"
		}
		s.metrics.requests.WithLabelValues(route, r.Method, http.StatusText(ww.Status())).Inc()
		s.metrics.duration.WithLabelValues(route).Observe(time.Since(start).Seconds())
	})
}

func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request) {
	cp, err := s.store.Checkpoint(r.Context())
	if err != nil {
		s.writeJSON(w, http.StatusServiceUnavailable, map[string]any{"status": "unavailable", "error": "store not readable"})
		return
	}
	out := map[string]any{"status": "ok", "log_size": cp.Size}
	if wh := s.witnessHealth(); wh != nil {
		out["witness"] = wh
	}
	prober, _ := s.store.(StorageProber)
	if reason, since := s.storage.state(r.Context(), prober, s.cfg.Now()); reason != "" {
		out["status"], out["reason"], out["since"] = "degraded", reason, since.UTC().Format(time.RFC3339)
		s.writeJSON(w, http.StatusServiceUnavailable, out)
		return
	}
	s.writeJSON(w, http.StatusOK, out)
}

// writeJSON writes v with status, rendering into a buffer first.
func (s *Server) writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		s.log.Error("encode response", "err", err)
		status, b = http.StatusInternalServerError, []byte(`{"code":"internal","message":"internal error"}`)
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}

// writeJSONCompact writes v without indentation, for append answers: they
// carry an inclusion proof per record, and indentation would multiply their
// size and encoding work on the ingest path.
func (s *Server) writeJSONCompact(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		s.log.Error("encode response", "err", err)
		status, b = http.StatusInternalServerError, []byte(`{"code":"internal","message":"internal error"}`)
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}

// writeError answers err as JSON {code, message, field} through the error
// table; internal errors are logged with detail.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	st, body := errorBody(err)
	if body.Code == ledger.CodeStorageFull {
		s.storage.degrade(body.Message, s.cfg.Now())
	}
	if st >= 500 {
		s.log.Error("request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	}
	if st == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="ledger"`)
	}
	s.writeJSON(w, st, body)
}

// readBody reads a request body capped at MaxBody.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	r.Body = http.MaxBytesReader(w, r.Body, s.cfg.MaxBody)
	b, err := io.ReadAll(r.Body)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, ledger.Errorf(ledger.CodeTooLarge, "request body is larger than the limit of %d bytes: send fewer records per request, or raise the server's --max-body", s.cfg.MaxBody)
		}
		return nil, ledger.FieldError("", "read body: %v", err)
	}
	return b, nil
}

// decodeJSON reads a capped body and decodes it strictly into v.
func (s *Server) decodeJSON(w http.ResponseWriter, r *http.Request, v any) error {
	if err := requireJSON(r); err != nil {
		return err
	}
	b, err := s.readBody(w, r)
	if err != nil {
		return err
	}
	return ledger.DecodeStrict(b, v)
}

func requireJSON(r *http.Request) error {
	ct := r.Header.Get("Content-Type")
	if ct == "" {
		return nil
	}
	mt := strings.TrimSpace(strings.SplitN(ct, ";", 2)[0])
	if mt != "application/json" && !strings.HasSuffix(mt, "+json") {
		return ledger.Errorf(ledger.CodeUnsupported, "Content-Type %q is not supported here: send application/json", mt)
	}
	return nil
}

// idempotencyKey returns the request's Idempotency-Key scoped to the
// token that sent it ("" when none is given): another token reusing the
// same key gets its own answer, never the first token's. Errors name
// the header (at most 256 bytes, no control characters).
func idempotencyKey(r *http.Request) (string, error) {
	k := r.Header.Get("Idempotency-Key")
	if k == "" {
		return "", nil
	}
	if len(k) > 256 {
		return "", ledger.FieldError("Idempotency-Key", "at most 256 bytes")
	}
	for _, c := range k {
		if c < 0x20 || c == 0x7f {
			return "", ledger.FieldError("Idempotency-Key", "control characters are not allowed")
		}
	}
	t, _ := TokenFrom(r.Context())
	return "token:" + t.ID + "\n" + k, nil
}

type ctxKey int

const tokenKey ctxKey = 1

// TokenFrom returns the authenticated token of the request, if any.
func TokenFrom(ctx context.Context) (ledger.Token, bool) {
	t, ok := ctx.Value(tokenKey).(ledger.Token)
	return t, ok
}

// authenticate resolves the bearer token of r (ok=false when none given).
func (s *Server) authenticate(r *http.Request) (ledger.Token, bool, error) {
	h := r.Header.Get("Authorization")
	if h == "" {
		return ledger.Token{}, false, nil
	}
	secret, ok := strings.CutPrefix(h, "Bearer ")
	if !ok || strings.TrimSpace(secret) == "" {
		return ledger.Token{}, false, ledger.Errorf(ledger.CodeUnauthorized, "Authorization header must be \"Bearer <token>\"")
	}
	t, err := s.store.Authenticate(r.Context(), strings.TrimSpace(secret))
	if err != nil {
		return t, false, err
	}
	return t, true, nil
}

// require is middleware demanding a token whose scope allows need. Reads
// (need == read) pass without a token unless ReadAuth is set.
func (s *Server) require(need ledger.Scope) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			t, ok, err := s.authenticate(r)
			if err != nil {
				s.writeError(w, r, err)
				return
			}
			if !ok {
				if need == ledger.ScopeRead && !s.cfg.ReadAuth {
					next.ServeHTTP(w, r)
					return
				}
				s.writeError(w, r, ledger.Errorf(ledger.CodeUnauthorized, "this request needs a bearer token with scope %q (create one with `ledger token create --scope %s --name NAME`)", need, need))
				return
			}
			if !t.Scope.Allows(need) {
				s.writeError(w, r, ledger.Errorf(ledger.CodeForbidden, "token %q has scope %q; this request needs %q", t.Name, t.Scope, need))
				return
			}
			next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), tokenKey, t)))
		})
	}
}
