package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Report is the outcome of a run. Rates are per second of the measured
// window, latencies milliseconds, CPU seconds of the server process.
type Report struct {
	Target  string    `json:"target"`
	Clients int       `json:"clients"`
	Window  float64   `json:"window_s"`
	Started time.Time `json:"started"`
	// Acks is the acknowledgements completed in the window, AcksTotal
	// those of the whole run (warm-up and the requests in flight when the
	// window closed included): the entries the log holds from this run.
	Acks      int64   `json:"acks"`
	AcksTotal int64   `json:"acks_total"`
	AcksPerS  float64 `json:"acks_per_s"`
	P50       float64 `json:"p50_ms"`
	P99       float64 `json:"p99_ms"`
	Max       float64 `json:"max_ms"`
	// ServerCPU is utime+stime of --pid over the window (0 without
	// --pid); CPUPerAck is ServerCPU / Acks in microseconds.
	ServerCPU float64 `json:"server_cpu_s"`
	CPUPerAck float64 `json:"server_cpu_per_ack_us"`
	// ClientCPU is this process's own CPU over the whole run: on a shared
	// machine it competes with the server.
	ClientCPU   float64  `json:"client_cpu_s"`
	EntryBytes  int      `json:"entry_bytes"`
	Errors      int64    `json:"errors"`
	FirstErrors []string `json:"first_errors,omitempty"`
	LoadAvg     string   `json:"loadavg"`
}

// Run drives c.Server as c says. An error means the run could not be
// measured (the server's /proc entry unreadable); failed requests are
// counted in the report instead.
func Run(ctx context.Context, c Config) (*Report, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns, tr.MaxIdleConnsPerHost = c.Clients+8, c.Clients+8
	cl := &http.Client{Timeout: 60 * time.Second, Transport: tr}
	url := strings.TrimSuffix(c.Server, "/") + "/add"
	if c.Target == "ledger" {
		url = strings.TrimSuffix(c.Server, "/") + "/api/v1/evidence"
	}
	rep := &Report{Target: c.Target, Clients: c.Clients, Started: time.Now().UTC(), EntryBytes: c.Size}
	base := time.Now().UnixNano()
	var (
		seq, total, errs atomic.Int64
		mu               sync.Mutex
		lat              []time.Duration
		first            []string
	)
	t0 := time.Now()
	winStart, winEnd := t0.Add(c.Warmup), t0.Add(c.Warmup+c.Duration)
	cpuStart, cpuEnd := -1.0, -1.0
	var wg sync.WaitGroup
	for range c.Clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []time.Duration
			for time.Now().Before(winEnd) {
				body := Entry(base, seq.Add(1), c.Size)
				s := time.Now()
				err := post(ctx, cl, url, c.Token, c.Target, body)
				e := time.Now()
				if err != nil {
					if errs.Add(1) <= 10 {
						mu.Lock()
						first = append(first, err.Error())
						mu.Unlock()
					}
					// A failing server is not hammered in a hot loop.
					time.Sleep(10 * time.Millisecond)
					continue
				}
				total.Add(1)
				// An ack counts in the window it completes in (what a
				// rate is); its latency is measured from its request.
				if !e.Before(winStart) && !e.After(winEnd) {
					mine = append(mine, e.Sub(s))
				}
			}
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		}()
	}
	var cpuErr error
	time.Sleep(time.Until(winStart))
	if c.PID > 0 {
		cpuStart, cpuErr = procCPU(c.PID)
	}
	time.Sleep(time.Until(winEnd))
	if c.PID > 0 && cpuErr == nil {
		cpuEnd, cpuErr = procCPU(c.PID)
	}
	rep.LoadAvg = loadAvg()
	wg.Wait()
	if cpuErr != nil {
		return nil, cpuErr
	}
	slices.Sort(lat)
	rep.Window = c.Duration.Seconds()
	rep.Acks, rep.AcksTotal = int64(len(lat)), total.Load()
	rep.AcksPerS = float64(rep.Acks) / rep.Window
	rep.P50, rep.P99 = pct(lat, 0.50), pct(lat, 0.99)
	if len(lat) > 0 {
		rep.Max = ms(lat[len(lat)-1])
	}
	if c.PID > 0 {
		rep.ServerCPU = cpuEnd - cpuStart
		if rep.Acks > 0 {
			rep.CPUPerAck = rep.ServerCPU / float64(rep.Acks) * 1e6
		}
	}
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		rep.ClientCPU = float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
	}
	rep.Errors, rep.FirstErrors = errs.Load(), first
	return rep, nil
}

// minSize is the smallest --size: the evidence record without padding
// is at most this long (n below 10^10).
const minSize = 480

// Entry is the n-th entry of a run started at base (Unix ns): an evidence
// record of a passed lane result, distinct by n, dated n µs before base
// (the ledger refuses times ahead of its clock), whose details note pads
// it to size bytes (or more, for a size below minSize).
func Entry(base, n int64, size int) []byte {
	at := time.Unix(0, base).UTC().Add(-time.Duration(n) * time.Microsecond).Format(time.RFC3339Nano)
	rec := map[string]any{
		"lane": "bench-tessera/v1",
		"subject": map[string]any{
			"repository": "github.com/evidence-ledger/bench",
			"commit":     fmt.Sprintf("%024x%016x", base, n),
			"tree":       fmt.Sprintf("%024x%016x", n, base),
		},
		"backend": "cpu", "device": map[string]any{"model": "bench cpu", "cores": 2}, "runner": map[string]any{"version": "bench"},
		"cases_exact": 216, "cases_total": 216, "control": "caught", "status": "passed",
		"started_at": at, "finished_at": at,
		"details": map[string]any{"n": n, "note": ""},
	}
	b, _ := json.Marshal(rec)
	if pad := size - len(b); pad > 0 {
		rec["details"] = map[string]any{"n": n, "note": strings.Repeat("x", pad)}
		b, _ = json.Marshal(rec)
	}
	return b
}

func post(ctx context.Context, cl *http.Client, url, token, target string, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, "POST", url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := cl.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	switch {
	case target == "ledger" && (resp.StatusCode == http.StatusCreated || resp.StatusCode == http.StatusOK):
		if !bytes.Contains(b, []byte(`"id"`)) {
			return fmt.Errorf("answer without an id: %.200s", b)
		}
		return nil
	case target == "tessera" && resp.StatusCode == http.StatusOK:
		line, _, _ := bytes.Cut(b, []byte("\n"))
		if _, err := strconv.ParseUint(string(line), 10, 64); err != nil {
			return fmt.Errorf("answer without an index: %.200s", b)
		}
		return nil
	}
	return fmt.Errorf("status %d: %.200s", resp.StatusCode, b)
}

// procCPU is utime+stime of process pid in seconds (/proc/PID/stat
// fields 14 and 15, in clock ticks of 1/100 s, Linux's USER_HZ).
func procCPU(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("--pid: %w", err)
	}
	// The command name (field 2) may hold spaces; fields after it
	// start past its closing parenthesis.
	i := bytes.LastIndexByte(b, ')')
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("--pid: /proc/%d/stat has %d fields after the name", pid, len(f))
	}
	ut, err1 := strconv.ParseUint(f[11], 10, 64)
	st, err2 := strconv.ParseUint(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("--pid: /proc/%d/stat: utime %q stime %q", pid, f[11], f[12])
	}
	return float64(ut+st) / 100, nil
}

func loadAvg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	return strings.Join(f[:min(3, len(f))], " ")
}

func pct(sorted []time.Duration, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.5) - 1
	return ms(sorted[max(0, min(i, len(sorted)-1))])
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
