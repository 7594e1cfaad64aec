package web

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"runtime"

	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/evidence-ledger/ledger/internal/logbuf"
	"github.com/evidence-ledger/ledger/ledger/sqlite"
	"github.com/evidence-ledger/ledger/ledger/storetest/teststore"
)

// served is cfg with the access log `ledger serve` writes (text lines
// through a logbuf.Writer), into io.Discard: an ingest benchmark measures
// the server as it is run, not slog.Default's unbuffered line per request.
func served(b *testing.B, cfg Config) Config {
	var w *logbuf.Writer
	cfg.AccessLog, w = logbuf.AccessLogger(io.Discard, slog.LevelInfo)
	b.Cleanup(func() { w.Close() })
	return cfg
}

// postAll POSTs b.N bodies to /api/v1/evidence from clients concurrent
// clients, each reading its answer (as a client does, which also keeps its
// connection), and fails the benchmark on any status but 201.
func postAll(b *testing.B, e *apiEnv, clients int, bodies <-chan []byte) {
	postAllTo(b, []*apiEnv{e}, clients, bodies)
}

// postAllTo is postAll with client c posting to envs[c%len(envs)].
func postAllTo(b *testing.B, envs []*apiEnv, clients int, bodies <-chan []byte) {
	cl := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: clients}}
	var wg sync.WaitGroup
	var done atomic.Int64
	for c := 0; c < clients; c++ {
		wg.Add(1)
		e := envs[c%len(envs)]
		go func() {
			defer wg.Done()
			for done.Add(1) <= int64(b.N) {
				req, _ := http.NewRequest("POST", e.srv.URL+"/api/v1/evidence", bytes.NewReader(<-bodies))
				req.Header.Set("Authorization", "Bearer "+e.record)
				req.Header.Set("Content-Type", "application/json")
				resp, err := cl.Do(req)
				if err != nil {
					b.Error(err)
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 201 {
					b.Errorf("status %d", resp.StatusCode)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// BenchmarkHTTPAppendConcurrent16: single-record durable appends through
// HTTP from 16 concurrent clients (compare with
// ledger/sqlite.BenchmarkRawInsertPerRowTx run in the same invocation).
func BenchmarkHTTPAppendConcurrent16(b *testing.B) {
	e := newAPIEnv(b, served(b, Config{}))
	var n atomic.Int64
	bodies := make(chan []byte, 64)
	go func() {
		for {
			j, _ := json.Marshal(testEvidence(int(n.Add(1))))
			bodies <- j
		}
	}()
	b.ResetTimer()
	postAll(b, e, 16, bodies)
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
}

// BenchmarkHTTPAppendBatch100: 100 records per request (the ingest target
// is in BENCHMARKS.md), from one client sending one batch after another, and from 4 clients at once (CI pipelines upload in parallel;
// their batches then share transactions and fsyncs).
func BenchmarkHTTPAppendBatch100(b *testing.B) {
	for _, clients := range []int{1, 4} {
		b.Run(fmt.Sprintf("clients=%d", clients), func(b *testing.B) {
			e := newAPIEnv(b, served(b, Config{MaxBody: 64 << 20}))
			// Every request body is made before the timer starts: the body
			// generator is not the system under test, and on two cores it
			// would take CPU from the server.
			bodies := make(chan []byte, b.N)
			for i := 0; i < b.N; i++ {
				batch := make([]any, 100)
				for j := range batch {
					batch[j] = testEvidence(i*100 + j)
				}
				body, _ := json.Marshal(batch)
				bodies <- body
			}
			runtime.GC()
			b.ResetTimer()
			postAll(b, e, clients, bodies)
			b.ReportMetric(float64(100*b.N)/b.Elapsed().Seconds(), "records/s")
		})
	}
}

// BenchmarkHTTPAppendTwoServers: the same ingest through two servers, each
// with its own store and sequencer on one PostgreSQL database (as two
// `ledger serve` behind a load balancer), half the clients on each:
// single-record appends from 16 clients and 100-record batches from 4.
// Skipped on SQLite (LEDGER_TEST_STORE=postgres runs it).
func BenchmarkHTTPAppendTwoServers(b *testing.B) {
	two := func(b *testing.B, cfg Config) []*apiEnv {
		e := newAPIEnv(b, cfg)
		st2 := teststore.OpenSecond(b, e.store)
		cfg.Store = st2
		s2, err := New(cfg)
		if err != nil {
			b.Fatal(err)
		}
		hs := httptest.NewServer(s2)
		b.Cleanup(hs.Close)
		return []*apiEnv{e, {srv: hs, store: st2, record: e.record, read: e.read}}
	}
	b.Run("single/clients=16", func(b *testing.B) {
		envs := two(b, served(b, Config{}))
		var n atomic.Int64
		bodies := make(chan []byte, 64)
		go func() {
			for {
				j, _ := json.Marshal(testEvidence(int(n.Add(1))))
				bodies <- j
			}
		}()
		b.ResetTimer()
		postAllTo(b, envs, 16, bodies)
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
	})
	b.Run("batch100/clients=4", func(b *testing.B) {
		envs := two(b, served(b, Config{MaxBody: 64 << 20}))
		bodies := make(chan []byte, b.N)
		for i := 0; i < b.N; i++ {
			batch := make([]any, 100)
			for j := range batch {
				batch[j] = testEvidence(i*100 + j)
			}
			body, _ := json.Marshal(batch)
			bodies <- body
		}
		runtime.GC()
		b.ResetTimer()
		postAllTo(b, envs, 4, bodies)
		b.ReportMetric(float64(100*b.N)/b.Elapsed().Seconds(), "records/s")
	})
}

// BenchmarkRawInsertPerRowTx is the baseline of the ingest targets,
// measured in the same binary and run as the HTTP benchmarks: a raw
// modernc.org/sqlite insert of the same row (the leaf bytes with its
// evidence projection columns), one transaction per row, WAL, synchronous=FULL.
func BenchmarkRawInsertPerRowTx(b *testing.B) {
	path := filepath.Join(b.TempDir(), "raw.db")
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)&_pragma=busy_timeout(10000)&_txlock=immediate")
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	if err := sqlite.Migrate(context.Background(), db); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		body, _ := json.Marshal(testEvidence(i))
		h := sha256.Sum256(body)
		tx, err := db.Begin()
		if err != nil {
			b.Fatal(err)
		}
		if _, err := tx.Exec("INSERT INTO leaves(idx, id, kind, key, recorded_at, leaf, leaf_hash, backend, status, repository, commit_id) VALUES (?,?,?,?,?,?,?,?,?,?,?)", i, fmt.Sprint(i), "evidence", "qmv-bias-sum/v1", 0, body, h[:], "cpu", "passed", "r", fmt.Sprintf("%040x", i)); err != nil {
			b.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
}
