package web

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/evidence-ledger/ledger/admit"
	"github.com/evidence-ledger/ledger/ingest"
	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/ledger/tlog"
	"github.com/evidence-ledger/ledger/runs"
	"github.com/evidence-ledger/ledger/witness"
	"github.com/go-chi/chi/v5"
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
	// CaseLanes are the lanes that select cases with their case ids (the
	// server's build's, runner.CaseLanes): a queued run's case selection
	// is checked against them (admit.QueueRun). nil: a run that asks for
	// a case selection is refused.
	CaseLanes runs.CaseLanes
	// LeaseTTL is how long a run's lease lasts unless its agent extends it
	// (default 30s); PollWait caps an agent's long poll (default 25s).
	LeaseTTL time.Duration
	PollWait time.Duration
	// Integrity, when set, reports the log's tamper state (tlog.Log's
	// Tampered): while set, /healthz answers 503 degraded naming the leaf
	// (the store refuses appends and signatures itself).
	Integrity func() (tlog.TamperState, bool)
	// Sigstore is the Sigstore trust setting (trusted root and identity
	// rules) Sigstore bundles are verified with; nil refuses every bundle
	// with a 409 naming the missing setting.
	Sigstore *ingest.SigstoreConfig
	// VerifierID is the verifier.id of the readiness verdict as a SLSA
	// verification summary (?format=vsa) and as a simple verification
	// result (?format=svr): an absolute URI (CheckVerifierID). Empty:
	// DefaultVerifierID of the log's origin.
	VerifierID string
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
	appendAuth admit.TokenCache
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
	if cfg.VerifierID == "" {
		origin, _, _ := strings.Cut(cfg.Store.VerifierKey(), "+")
		cfg.VerifierID = DefaultVerifierID(origin)
	}
	if err := CheckVerifierID(cfg.VerifierID); err != nil {
		return nil, err
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
