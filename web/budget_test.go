package web

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestIngestBudgetRefusesWith503: while one request holds the whole
// ingest budget (its body still arriving), another evidence post is
// refused with 503, a Retry-After header and a message naming
// --ingest-budget, and appends nothing; once the first request has
// ended, the same post is recorded. The budget is smaller than one body's
// charge: that body is admitted alone all the same.
func TestIngestBudgetRefusesWith503(t *testing.T) {
	e := newAPIEnv(t, Config{IngestBudget: 1000, IngestWait: 50 * time.Millisecond})
	srv := e.srv.Config.Handler.(*Server)

	first, _ := json.Marshal(testEvidence(0))
	pr, pw := io.Pipe()
	// Runs before the server's close, which waits for this request.
	t.Cleanup(func() { pw.CloseWithError(io.ErrUnexpectedEOF) })
	req, _ := http.NewRequest("POST", e.srv.URL+"/api/v1/evidence", pr)
	req.ContentLength = int64(len(first))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+e.record)
	done := make(chan int, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			done <- -1
			return
		}
		resp.Body.Close()
		done <- resp.StatusCode
	}()
	// The first request is charged before its body is read: wait until it
	// holds the budget.
	for deadline := time.Now().Add(10 * time.Second); srv.ingest.sem.TryAcquire(1); time.Sleep(time.Millisecond) {
		srv.ingest.sem.Release(1)
		if time.Now().After(deadline) {
			t.Fatal("a request whose body is still arriving holds none of the budget")
		}
	}

	second, _ := json.Marshal(testEvidence(1))
	hreq, _ := http.NewRequest("POST", e.srv.URL+"/api/v1/evidence", strings.NewReader(string(second)))
	hreq.Header.Set("Content-Type", "application/json")
	hreq.Header.Set("Authorization", "Bearer "+e.record)
	resp, err := http.DefaultClient.Do(hreq)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("post past the budget: %d %s, want 503", resp.StatusCode, body)
	}
	if ra := resp.Header.Get("Retry-After"); ra != "1" {
		t.Fatalf("Retry-After %q, want 1 (the budget's wait, rounded up to a second)", ra)
	}
	if ae := apiError(t, body); ae.Code != "unavailable" || !strings.Contains(ae.Message, "--ingest-budget") || !strings.Contains(ae.Message, "1000 bytes") {
		t.Fatalf("refusal %+v: want code unavailable naming --ingest-budget and its size", ae)
	}
	if n := e.size(t); n != 0 {
		t.Fatalf("a refused request appended %d leaves", n)
	}

	pw.Write(first)
	pw.Close()
	if code := <-done; code != http.StatusCreated {
		t.Fatalf("the request holding the budget: %d, want 201", code)
	}
	if code, b := e.do(t, "POST", "/api/v1/evidence", e.record, second); code != http.StatusCreated {
		t.Fatalf("the same post after the budget was given back: %d %s", code, b)
	}
	if n := e.size(t); n != 2 {
		t.Fatalf("log grew by %d, want 2", n)
	}
}

// TestIngestBudgetGivenBack: every request's charge is given back when it
// ends, whether it was recorded, refused as bad input, too large or sent
// without a declared length: afterwards the whole budget is free.
func TestIngestBudgetGivenBack(t *testing.T) {
	e := newAPIEnv(t, Config{MaxBody: 4096})
	srv := e.srv.Config.Handler.(*Server)
	good, _ := json.Marshal(testEvidence(0))
	posts := []struct {
		body    io.Reader
		chunked bool
		want    int
	}{
		{strings.NewReader(string(good)), false, http.StatusCreated},
		{strings.NewReader(`{"lane":`), false, http.StatusBadRequest},
		{strings.NewReader(strings.Repeat(" ", 5000)), false, http.StatusRequestEntityTooLarge},
		{strings.NewReader(string(good)), true, http.StatusCreated},
	}
	for i, p := range posts {
		req, _ := http.NewRequest("POST", e.srv.URL+"/api/v1/evidence", p.body)
		if p.chunked {
			req.ContentLength = -1
			req.Body = io.NopCloser(req.Body)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+e.record)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != p.want && !(p.want == http.StatusCreated && resp.StatusCode == http.StatusOK) {
			t.Fatalf("post %d: %d, want %d", i, resp.StatusCode, p.want)
		}
	}
	// A request's charge is given back after its answer is written: wait
	// for the last one to end.
	total := srv.ingest.total
	for deadline := time.Now().Add(10 * time.Second); !srv.ingest.sem.TryAcquire(total); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the budget is not given back after the requests ended")
		}
	}
	srv.ingest.sem.Release(total)
	if total != DefaultIngestBudget(4096) {
		t.Fatalf("default budget %d, want DefaultIngestBudget(--max-body) = %d", total, DefaultIngestBudget(4096))
	}
}

// TestDeclaredTooLargeRefusedAtOnce: a Content-Length over MaxBody is
// answered 413 at once, before a byte of the body is read (the body here
// never arrives).
func TestDeclaredTooLargeRefusedAtOnce(t *testing.T) {
	e := newAPIEnv(t, Config{MaxBody: 4096})
	pr, pw := io.Pipe()
	t.Cleanup(func() { pw.CloseWithError(io.ErrUnexpectedEOF) })
	req, _ := http.NewRequest("POST", e.srv.URL+"/api/v1/evidence", pr)
	req.ContentLength = 1 << 30
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+e.record)
	cl := &http.Client{Timeout: 10 * time.Second}
	resp, err := cl.Do(req)
	if err != nil {
		t.Fatalf("a declared 1 GiB body was not answered at once: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("declared 1 GiB body: %d, want 413", resp.StatusCode)
	}
}
