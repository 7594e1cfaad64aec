package web

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/evidence-ledger/ledger/admit"
	"github.com/evidence-ledger/ledger/ingest"
	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/runs"
	"github.com/evidence-ledger/ledger/witness"
	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/go-chi/httprate"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Config configures a Server.
type Config struct {
	Store ledger.Store
	Log   *slog.Logger
	// AccessLog receives one Info record per request ("http request":
	// method, route pattern, status, duration_ms, token id); nil: Log.
	// Handlers never wait for it beyond its handler's Handle call, so a
	// buffered writer (internal/logbuf) keeps a slow sink off requests.
	AccessLog *slog.Logger
	// MaxBody caps request bodies in bytes (default 4 MiB).
	MaxBody int64
	// IngestBudget is the memory, in bytes, that request bodies being read
	// and decoded may take together (ingestBudget; default
	// DefaultIngestBudget(MaxBody)). A request past it waits up to
	// IngestWait (default 10s), then is answered 503 with Retry-After.
	IngestBudget int64
	IngestWait   time.Duration
	// ReadAuth makes reads (GET) require a token with scope read or higher,
	// /metrics included; /healthz then answers only ok or degraded.
	ReadAuth bool
	// AuthFailures caps failed authentications per client address per
	// minute (default 30; negative: no cap). Past the cap, requests that
	// carry credentials from that address are answered 429 without being
	// checked, until the sliding one-minute window has room again.
	AuthFailures int
	// PageBytes is the byte budget of one page of a list answer (default
	// 1 MiB): a page stops at the first record that reaches it, and hands
	// out the cursor of the rest. A page always holds at least one record.
	PageBytes int
	// MaxListings caps the list answers (evidence, entries, heads) built at
	// the same time (default 8); further ones wait for a slot or for their
	// request's end.
	MaxListings int
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Witnesser, when set, supplies the witnesses' cosignatures served with
	// checkpoints and proofs, and the witness part of /healthz.
	Witnesser *witness.Witnesser
	// RepoRoots are the directories under which an admin's request may
	// name a repository on the server's disk (repo_path); none: no request
	// reads the server's disk. See admit.ServerPath.
	RepoRoots []string
	// FileAccess, when set, is called with every server path a request
	// leads the server to open, before it is opened (admit.ServerPath is the one
	// place that happens): for audit logs and for tests that prove no
	// caller-named path is opened.
	FileAccess func(path string)
	// Runs, when set, serves the runs API and the agents' routes over this
	// run store (see package runs); nil: those routes answer 404.
	Runs *runs.Store
	// LeaseTTL is how long a run's lease lasts unless its agent extends it
	// (default 30s); PollWait caps an agent's long poll (default 25s).
	LeaseTTL time.Duration
	PollWait time.Duration
	// Integrity, when set, reports the log's tamper state (ledger.Log's
	// Tampered): while set, /healthz answers 503 degraded naming the leaf
	// (the store refuses appends and signatures itself).
	Integrity func() (ledger.TamperState, bool)
	// Sigstore is the Sigstore trust setting (trusted root and identity
	// rules) Sigstore bundles are verified with; nil refuses every bundle
	// with a 409 naming the missing setting.
	Sigstore *ingest.SigstoreConfig
}

// Server is the HTTP server's state. Its methods are safe for concurrent
// use.
type Server struct {
	cfg     Config
	store   ledger.Store
	log     *slog.Logger
	reg     *prometheus.Registry
	metrics *metrics
	router  chi.Router
	pages   *pages
	// policies caches registered policies parsed with their material, by
	// digest (*verify.Policy): a digest names immutable content.
	policies sync.Map
	refs     policyRefs
	// authFails counts failed authentications per client address.
	authFails *httprate.RateLimiter
	// appendAuth is the ingest route's token cache, guarded in each
	// append's batch (appendauth.go).
	appendAuth appendAuth
	// listings is the semaphore of list answers in progress.
	listings chan struct{}
	storage  storageHealth
	// readiness, overviews and releasePages share the costliest answers
	// among concurrent readers (freshCache).
	readiness    *freshCache[*verdict]
	overviews    *freshCache[*Overview]
	releasePages *freshCache[*releasePage]
	releases     *freshCache[*loadedRelease]
	// lastOverview is the overview's latest evidence window.
	lastOverview atomic.Pointer[overviewWindow]
	// gate is the read admission control (readGate).
	gate *readGate
	// lastCheckpoint is the latest checkpoint an append answered with,
	// encoded (checkpointJSON).
	lastCheckpoint atomic.Pointer[encodedCheckpoint]
	runs           *runState // nil without Config.Runs
	// ingest is the budget of request bodies being decoded.
	ingest *ingestBudget
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
	// healthyProbeEvery bounds the disk probes of a healthy server (each
	// writes and syncs 256 KiB beside the database).
	healthyProbeEvery = 30 * time.Second
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
// when a probe is due: every probeEvery while degraded, every
// healthyProbeEvery (and at the first call) while healthy.
func (h *storageHealth) state(ctx context.Context, p StorageProber, now time.Time) (reason string, since time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.reason == "" {
		// Healthy as far as any write showed: probe the disk now and then
		// (first at the first /healthz after start), so a server started
		// on a full disk says so before its first append fails.
		if p != nil && (h.lastProbe.IsZero() || now.Sub(h.lastProbe) >= healthyProbeEvery) {
			h.lastProbe = now
			if err := p.ProbeStorage(ctx); err != nil {
				h.since = now
				h.reason = "the database's disk takes no writes (a write probe failed)"
				if ledger.IsStorageFull(err) {
					h.reason = "storage full: the database's disk is full (a write probe failed)"
				}
			}
		}
		return h.reason, h.since
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
	if cfg.AccessLog == nil {
		cfg.AccessLog = cfg.Log
	}
	if cfg.MaxBody <= 0 {
		cfg.MaxBody = 4 << 20
	}
	if cfg.IngestBudget <= 0 {
		cfg.IngestBudget = DefaultIngestBudget(cfg.MaxBody)
	}
	if cfg.IngestWait <= 0 {
		cfg.IngestWait = ingestWait
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.AuthFailures == 0 {
		cfg.AuthFailures = 30
	}
	if cfg.PageBytes <= 0 {
		cfg.PageBytes = 1 << 20
	}
	if cfg.MaxListings <= 0 {
		cfg.MaxListings = 8
	}
	s := &Server{cfg: cfg, store: cfg.Store, log: cfg.Log, reg: prometheus.NewRegistry(), listings: make(chan struct{}, cfg.MaxListings),
		ingest: newIngestBudget(cfg.IngestBudget, cfg.IngestWait)}
	if cfg.AuthFailures > 0 {
		s.authFails = httprate.NewRateLimiter(cfg.AuthFailures, time.Minute)
	}
	s.metrics = &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ledger_http_requests_total", Help: "HTTP requests by route pattern, method and status."}, []string{"route", "method", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "ledger_http_request_duration_seconds", Help: "HTTP request latency by route pattern.", Buckets: prometheus.DefBuckets}, []string{"route"}),
		appended: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ledger_entries_appended_total", Help: "Log entries appended through the API, by kind."}, []string{"kind"}),
		logSize:  prometheus.NewGauge(prometheus.GaugeOpts{Name: "ledger_log_size", Help: "Leaves in the log at the latest checkpoint seen by this server."}),
	}
	s.reg.MustRegister(s.metrics.requests, s.metrics.duration, s.metrics.appended, s.metrics.logSize,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	s.readiness, s.overviews = newFreshCache[*verdict](s), newFreshCache[*Overview](s)
	s.releasePages, s.releases = newFreshCache[*releasePage](s), newFreshCache[*loadedRelease](s)
	s.gate = newReadGate()
	if err := s.initPages(); err != nil {
		return nil, err
	}
	if cfg.Runs != nil {
		if cfg.LeaseTTL <= 0 {
			cfg.LeaseTTL = 30 * time.Second
		}
		if cfg.PollWait <= 0 {
			cfg.PollWait = 25 * time.Second
		}
		s.cfg = cfg
		s.runs = &runState{store: cfg.Runs, ttl: cfg.LeaseTTL, pollWait: cfg.PollWait, wake: make(chan struct{})}
	}
	s.router = s.routes()
	return s, nil
}

// ServeHTTP implements http.Handler. A request that may carry a body
// gets a hold on the ingest budget, charged when its body is read
// (readBody) and given back when it ends.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		s.router.ServeHTTP(w, r)
		return
	}
	c := &bodyCharge{b: s.ingest}
	defer c.release()
	s.router.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), chargeKey, c)))
}

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

// noteToken records the authenticated token's id for the access log.
func noteToken(r *http.Request, t ledger.Token) {
	if info, ok := r.Context().Value(accessKey).(*accessInfo); ok {
		info.tokenID = t.ID
	}
}

// clientKey is the rate-limit key of r's client: its address from
// RemoteAddr (the IPv6 /64 prefix), not a forwarded header a client can
// set.
func clientKey(r *http.Request) string {
	ip, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		ip = r.RemoteAddr
	}
	return httprate.CanonicalizeIP(ip)
}

// authBlocked returns a CodeRateLimited error when r's client address has
// used up its failed authentications of the window.
func (s *Server) authBlocked(r *http.Request) error {
	if s.authFails == nil {
		return nil
	}
	if _, rate, err := s.authFails.Status(clientKey(r)); err == nil && rate >= float64(s.cfg.AuthFailures) {
		return ledger.Errorf(ledger.CodeRateLimited, "too many failed authentications from this address: wait a minute and retry with a valid token")
	}
	return nil
}

// authFailed counts one failed authentication of r's client address.
func (s *Server) authFailed(w http.ResponseWriter, r *http.Request) {
	if s.authFails != nil {
		s.authFails.OnLimit(w, r, clientKey(r))
	}
}

// authCheck authenticates secret for r, counting failures against the
// client address and refusing (429) once the address is over its cap.
func (s *Server) authCheck(w http.ResponseWriter, r *http.Request, secret string) (ledger.Token, error) {
	if err := s.authBlocked(r); err != nil {
		return ledger.Token{}, err
	}
	t, err := s.store.Authenticate(r.Context(), secret)
	if err != nil {
		if c := ledger.ErrorCode(err); c == ledger.CodeUnauthorized || c == ledger.CodeForbidden {
			s.authFailed(w, r)
		}
		return t, err
	}
	noteToken(r, t)
	return t, nil
}

func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request) {
	cp, err := s.store.Checkpoint(r.Context())
	if err != nil {
		s.writeJSON(w, http.StatusServiceUnavailable, map[string]any{"status": "unavailable", "error": "store not readable"})
		return
	}
	figures := s.healthFigures(w, r)
	if s.cfg.Integrity != nil {
		if ts, bad := s.cfg.Integrity(); bad {
			out := map[string]any{"status": "degraded", "reason": "tampering: the full verification found a stored leaf that fails its check; appends, readiness verdicts and approvals are refused"}
			if figures {
				out["reason"] = fmt.Sprintf("tampering: leaf %d %s; appends, readiness verdicts and approvals are refused until the database is repaired (run `ledger audit`)", ts.Index, ts.Problem)
				out["tampered_index"], out["since"], out["log_size"] = ts.Index, ts.Since.Format(time.RFC3339), cp.Size
			}
			s.writeJSON(w, http.StatusServiceUnavailable, out)
			return
		}
	}
	prober, _ := s.store.(StorageProber)
	reason, since := s.storage.state(r.Context(), prober, s.cfg.Now())
	if !figures {
		if reason != "" {
			s.writeJSON(w, http.StatusServiceUnavailable, map[string]any{"status": "degraded"})
			return
		}
		s.writeJSON(w, http.StatusOK, map[string]any{"status": "ok"})
		return
	}
	out := map[string]any{"status": "ok", "log_size": cp.Size}
	if wh := s.witnessHealth(); wh != nil {
		out["witness"] = wh
	}
	if reason != "" {
		out["status"], out["reason"], out["since"] = "degraded", reason, since.UTC().Format(time.RFC3339)
		s.writeJSON(w, http.StatusServiceUnavailable, out)
		return
	}
	s.writeJSON(w, http.StatusOK, out)
}

// healthFigures reports whether /healthz may show figures (log size,
// witness state) to r: always without --read-auth, else only to a token
// with scope read or higher. Anonymous callers under --read-auth get the
// state alone.
func (s *Server) healthFigures(w http.ResponseWriter, r *http.Request) bool {
	if !s.cfg.ReadAuth {
		return true
	}
	t, ok, err := s.authenticate(w, r)
	return err == nil && ok && t.Scope.Allows(ledger.ScopeRead)
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
	if r.Context().Err() != nil && errors.Is(err, r.Context().Err()) {
		// The client went away (or its deadline passed): nobody reads an
		// answer, and it is not a server failure. Logged as what it is;
		// the access line records 499, nginx's "client closed request".
		s.log.Info("request ended by the client", "method", r.Method, "path", r.URL.Path)
		w.WriteHeader(499)
		return
	}
	st, body := errorBody(err)
	if body.Code == ledger.CodeStorageFull {
		s.storage.degrade(body.Message, s.cfg.Now())
	}
	var te *ledger.TamperError
	switch {
	case body.Code == ledger.CodeUnavailable && !errors.As(err, &te) && w.Header().Get("Retry-After") != "" || errorRetries(err):
		// Load shedding or a database that is away: the answer says when
		// to retry; not a failure of the server's own.
		s.log.Warn("request refused for now", "method", r.Method, "path", r.URL.Path, "err", err)
	case st >= 500:
		s.log.Error("request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	}
	if st == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="ledger"`)
	}
	if st == http.StatusTooManyRequests {
		w.Header().Set("Retry-After", "60")
	}
	setRetryAfter(w, st, err)
	s.writeJSON(w, st, body)
}

// readBody reads a request body capped at MaxBody, within the ingest
// budget: it is charged for the declared Content-Length (MaxBody when
// none is declared) before reading, then for the bytes read (bodyCharge).
// A request the budget has no room for is refused, CodeUnavailable with a
// Retry-After header, before a byte of its body is read.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	if r.ContentLength > s.cfg.MaxBody {
		// Declared too large: refused before anything is charged or read.
		return nil, ledger.Errorf(ledger.CodeTooLarge, "request body is larger than the limit of %d bytes (Content-Length %d): send fewer records per request, or raise the server's --max-body", s.cfg.MaxBody, r.ContentLength)
	}
	want := s.cfg.MaxBody
	if r.ContentLength >= 0 {
		want = min(r.ContentLength, want)
	}
	c, _ := r.Context().Value(chargeKey).(*bodyCharge)
	if c != nil {
		if err := c.charge(r.Context(), IngestFactor*want); err != nil {
			if ledger.ErrorCode(err) == ledger.CodeUnavailable {
				w.Header().Set("Retry-After", strconv.Itoa(retryAfter(s.ingest.wait)))
			}
			return nil, err
		}
	}
	r.Body = http.MaxBytesReader(w, r.Body, s.cfg.MaxBody)
	// One buffer of the declared size (and bytes.Buffer's read margin)
	// instead of io.ReadAll's doublings.
	buf := bytes.NewBuffer(make([]byte, 0, min(want, 64<<10)+bytes.MinRead))
	if r.ContentLength >= 0 {
		buf = bytes.NewBuffer(make([]byte, 0, want+bytes.MinRead))
	}
	_, err := buf.ReadFrom(r.Body)
	b := buf.Bytes()
	if c != nil && err == nil {
		c.lower(IngestFactor * int64(len(b)))
	}
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

// requireJSON accepts a request without Content-Type, or one whose media
// type is application/json or a +json suffix type. Media types are parsed
// with mime.ParseMediaType and compared case-insensitively (RFC 9110
// section 8.3.1); a charset parameter must be utf-8 (RFC 8259 section 8.1).
func requireJSON(r *http.Request) error {
	ct := r.Header.Get("Content-Type")
	if ct == "" {
		return nil
	}
	mt, params, err := mime.ParseMediaType(ct)
	if err != nil {
		return ledger.Errorf(ledger.CodeUnsupported, "Content-Type is not a media type (RFC 9110 section 8.3): send application/json")
	}
	if mt != "application/json" && !strings.HasSuffix(mt, "+json") {
		return ledger.Errorf(ledger.CodeUnsupported, "Content-Type %q is not supported here: send application/json", clipText(mt))
	}
	if cs, ok := params["charset"]; ok && !strings.EqualFold(cs, "utf-8") {
		return ledger.Errorf(ledger.CodeUnsupported, "charset %q is not supported: JSON is UTF-8", clipText(cs))
	}
	return nil
}

// bearerSecret returns the token of an Authorization header value of the
// Bearer scheme. The scheme name is case-insensitive (RFC 9110 section
// 11.1, RFC 6750 section 2.1); one or more spaces separate it from the
// token.
func bearerSecret(h string) (string, bool) {
	scheme, rest, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	secret := strings.TrimSpace(rest)
	return secret, secret != ""
}

// clipText shortens s for an error message.
func clipText(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
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
// Failures count against the client address (see Config.AuthFailures).
func (s *Server) authenticate(w http.ResponseWriter, r *http.Request) (ledger.Token, bool, error) {
	h := r.Header.Get("Authorization")
	if h == "" {
		return ledger.Token{}, false, nil
	}
	secret, ok := bearerSecret(h)
	if !ok {
		if err := s.authBlocked(r); err != nil {
			return ledger.Token{}, false, err
		}
		s.authFailed(w, r)
		return ledger.Token{}, false, ledger.Errorf(ledger.CodeUnauthorized, "Authorization header must be \"Bearer <token>\"")
	}
	t, err := s.authCheck(w, r, secret)
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
			if need == ledger.ScopeRead && !s.cfg.ReadAuth && r.Header.Get("Authorization") == "" {
				next.ServeHTTP(w, r)
				return
			}
			t, ok := s.admitToken(w, r, need)
			if !ok {
				return
			}
			next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), tokenKey, t)))
		})
	}
}

// admitToken authenticates r's bearer token and checks that its scope allows
// need, answering r itself (401, 403, 429) when not.
func (s *Server) admitToken(w http.ResponseWriter, r *http.Request, need ledger.Scope) (ledger.Token, bool) {
	t, ok, err := s.authenticate(w, r)
	if err != nil {
		s.writeError(w, r, err)
		return t, false
	}
	p := admit.Anon()
	if ok {
		p = admit.ByToken(t)
	}
	if err := admit.Require(p, need); err != nil {
		s.writeError(w, r, err)
		return t, false
	}
	return t, true
}
