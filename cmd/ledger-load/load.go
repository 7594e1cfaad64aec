package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Config is one load run. Writers and Readers are goroutines; Alone is
// the writers-alone phase, Duration the mixed phase after it.
type Config struct {
	Server   string
	Token    string
	Release  string
	Writers  int
	Readers  int
	Duration time.Duration
	Alone    time.Duration
	// Client; default one with a 30 s timeout and enough idle
	// connections for every goroutine.
	Client *http.Client
}

// Validate reports the first bad setting, naming its flag.
func (c Config) Validate() error {
	switch {
	case c.Server == "":
		return errors.New("--server is required")
	case c.Token == "":
		return errors.New("--token is required (a record-scoped token)")
	case c.Release == "":
		return errors.New("--release is required (a release defined on the server)")
	case c.Writers < 1 || c.Writers > 4096:
		return errors.New("--writers must be between 1 and 4096")
	case c.Readers < 0 || c.Readers > 4096:
		return errors.New("--readers must be between 0 and 4096")
	case c.Duration <= 0 || c.Alone <= 0:
		return errors.New("--duration and --alone must be positive")
	}
	return nil
}

// Report is the outcome of a run. Latencies are milliseconds.
type Report struct {
	Started time.Time `json:"started"`
	Config  struct {
		Writers  int    `json:"writers"`
		Readers  int    `json:"readers"`
		Duration string `json:"duration"`
		Alone    string `json:"alone"`
	} `json:"config"`
	// WritesAlone and WritesMixed are records per second acknowledged in
	// each phase; Ratio is WritesMixed / WritesAlone.
	WritesAlone float64           `json:"writes_alone_per_s"`
	WritesMixed float64           `json:"writes_mixed_per_s"`
	Ratio       float64           `json:"write_ratio"`
	Errors      int64             `json:"errors"`
	Routes      map[string]*Route `json:"routes"` // mixed phase
	FirstErrors []string          `json:"first_errors,omitempty"`
}

// Route is the figures of one route in the mixed phase.
type Route struct {
	Count  int     `json:"count"`
	Errors int64   `json:"errors"`
	P50    float64 `json:"p50_ms"`
	P90    float64 `json:"p90_ms"`
	P99    float64 `json:"p99_ms"`
	Max    float64 `json:"max_ms"`
	lat    []time.Duration
}

type recorder struct {
	mu     sync.Mutex
	routes map[string]*Route
	errs   atomic.Int64
	first  []string
	on     atomic.Bool // record latencies (mixed phase)
}

func (r *recorder) add(route string, d time.Duration, err error) {
	if err != nil {
		r.errs.Add(1)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil && len(r.first) < 10 {
		r.first = append(r.first, route+": "+err.Error())
	}
	if !r.on.Load() {
		return
	}
	rt := r.routes[route]
	if rt == nil {
		rt = &Route{}
		r.routes[route] = rt
	}
	rt.lat = append(rt.lat, d)
	if err != nil {
		rt.Errors++
	}
}

// Run drives the server as c says and returns the report; an error means
// the run could not start (the server is unreachable, the release
// missing).
func Run(ctx context.Context, c Config) (*Report, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	cl := c.Client
	if cl == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConns, tr.MaxIdleConnsPerHost = c.Writers+c.Readers+8, c.Writers+c.Readers+8
		cl = &http.Client{Timeout: 30 * time.Second, Transport: tr}
	}
	rel := url.PathEscape(c.Release)
	if err := get(ctx, cl, c.Server+"/api/v1/releases/"+rel); err != nil {
		return nil, fmt.Errorf("release %s: %w", c.Release, err)
	}
	rec := &recorder{routes: map[string]*Route{}}
	rep := &Report{Started: time.Now().UTC(), Routes: rec.routes}
	rep.Config.Writers, rep.Config.Readers, rep.Config.Duration, rep.Config.Alone = c.Writers, c.Readers, c.Duration.String(), c.Alone.String()
	var acked atomic.Int64
	var ids struct {
		sync.Mutex
		v []string
	}
	var seq atomic.Int64
	base := time.Now().UnixNano()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range c.Writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				n := seq.Add(1)
				t0 := time.Now()
				id, err := post(ctx, cl, c.Server, c.Token, evidence(base, n))
				rec.add("POST /api/v1/evidence", time.Since(t0), err)
				if err == nil {
					acked.Add(1)
					ids.Lock()
					if len(ids.v) < 100_000 {
						ids.v = append(ids.v, id)
					}
					ids.Unlock()
				}
			}
		}()
	}
	time.Sleep(c.Alone)
	aloneN := acked.Load()
	rep.WritesAlone = float64(aloneN) / c.Alone.Seconds()
	rec.on.Store(true)
	readers := []struct{ route, path string }{
		{"GET /releases/{version}", "/releases/" + rel},
		{"GET /", "/"},
		{"GET /api/v1/releases/{version}/readiness", "/api/v1/releases/" + rel + "/readiness"},
		{"GET /api/v1/evidence/{id}/proof", ""},
	}
	for i := range c.Readers {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			rd := readers[i%len(readers)]
			for k := 0; ; k++ {
				select {
				case <-stop:
					return
				default:
				}
				path := rd.path
				if path == "" {
					ids.Lock()
					id := ids.v[(i*7919+k*104729)%len(ids.v)]
					ids.Unlock()
					path = "/api/v1/evidence/" + url.PathEscape(id) + "/proof"
				}
				t0 := time.Now()
				err := get(ctx, cl, c.Server+path)
				rec.add(rd.route, time.Since(t0), err)
			}
		}(i)
	}
	time.Sleep(c.Duration)
	mixedN := acked.Load() - aloneN
	close(stop)
	wg.Wait()
	rep.WritesMixed = float64(mixedN) / c.Duration.Seconds()
	if rep.WritesAlone > 0 {
		rep.Ratio = rep.WritesMixed / rep.WritesAlone
	}
	rep.Errors = rec.errs.Load()
	rep.FirstErrors = rec.first
	for _, rt := range rec.routes {
		slices.Sort(rt.lat)
		rt.Count = len(rt.lat)
		rt.P50, rt.P90, rt.P99 = pct(rt.lat, 0.50), pct(rt.lat, 0.90), pct(rt.lat, 0.99)
		if rt.Count > 0 {
			rt.Max = ms(rt.lat[rt.Count-1])
		}
	}
	return rep, nil
}

func pct(sorted []time.Duration, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.5) - 1
	return ms(sorted[max(0, min(i, len(sorted)-1))])
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// evidence is the n-th record of a run: a passed lane result with a
// commit unique to the run and n, dated n ms before the run's start (the
// server refuses times ahead of its clock).
func evidence(base, n int64) []byte {
	at := time.Unix(0, base).UTC().Add(-time.Duration(n) * time.Millisecond).Format(time.RFC3339Nano)
	b, _ := json.Marshal(map[string]any{
		"lane":    "load/v1",
		"subject": map[string]any{"repository": "load", "commit": fmt.Sprintf("%024x%016x", base, n), "tree": fmt.Sprintf("%024x%016x", n, base)},
		"backend": "external", "device": map[string]any{}, "runner": map[string]any{},
		"cases_exact": 1, "cases_total": 1, "control": "none", "status": "passed",
		"started_at": at, "finished_at": at,
	})
	return b
}

func post(ctx context.Context, cl *http.Client, server, token string, body []byte) (string, error) {
	req, err := http.NewRequestWithContext(ctx, "POST", server+"/api/v1/evidence", bytes.NewReader(body))
	if err != nil {
		return "", err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := cl.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("status %d: %.200s", resp.StatusCode, b)
	}
	var a struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(b, &a); err != nil || a.ID == "" {
		return "", fmt.Errorf("answer without an id: %.200s", b)
	}
	return a.ID, nil
}

func get(ctx context.Context, cl *http.Client, u string) error {
	req, err := http.NewRequestWithContext(ctx, "GET", u, nil)
	if err != nil {
		return err
	}
	resp, err := cl.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("status %d: %.200s", resp.StatusCode, b)
	}
	return nil
}
