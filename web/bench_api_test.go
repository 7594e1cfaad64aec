package web

import (
	"bytes"
	"encoding/json"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
)

// BenchmarkHTTPAppendConcurrent16: single-record durable appends through
// HTTP from 16 concurrent clients (compare with
// ledger/sqlite.BenchmarkRawInsertPerRowTx run in the same invocation).
func BenchmarkHTTPAppendConcurrent16(b *testing.B) {
	e := newAPIEnv(b, Config{})
	var n atomic.Int64
	bodies := make(chan []byte, 64)
	go func() {
		for {
			j, _ := json.Marshal(testEvidence(int(n.Add(1))))
			bodies <- j
		}
	}()
	cl := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 32}}
	b.ResetTimer()
	var wg sync.WaitGroup
	var done atomic.Int64
	for w := 0; w < 16; w++ {
		wg.Add(1)
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
				resp.Body.Close()
				if resp.StatusCode != 201 {
					b.Errorf("status %d", resp.StatusCode)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
}

// BenchmarkHTTPAppendBatch100: 100 records per request (target >= 20,000
// records/s on a 2-core machine).
func BenchmarkHTTPAppendBatch100(b *testing.B) {
	e := newAPIEnv(b, Config{MaxBody: 64 << 20})
	n := 0
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		batch := make([]any, 100)
		for j := range batch {
			batch[j] = testEvidence(n)
			n++
		}
		body, _ := json.Marshal(batch)
		b.StartTimer()
		req, _ := http.NewRequest("POST", e.srv.URL+"/api/v1/evidence", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+e.record)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 201 {
			b.Fatalf("status %d", resp.StatusCode)
		}
	}
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "records/s")
}
