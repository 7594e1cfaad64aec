package web

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
)

// bigEvidence is evidence n whose details are one string of size bytes.
func bigEvidence(n, size int) map[string]any {
	ev := testEvidence(n)
	ev["details"] = map[string]any{"log": strings.Repeat("x", size)}
	return ev
}

// TestBoundedAnswers records twenty evidence records at the details cap
// (and checks that one over it is refused), then runs concurrent list
// answers and evidence pages over them while sampling the heap. It proves
// the README's bound: a list page is at most Config.PageBytes plus one
// record, an evidence page holds at most the page caps, and the heap stays
// under the stated bound however many such requests run at once (the old
// answers built 20 MiB pages in memory, 8 concurrent ones needing about
// 1 GiB). It prints the measured sizes and heap peak.
func TestBoundedAnswers(t *testing.T) {
	if testing.Short() {
		t.Skip("records 20 MiB of evidence")
	}
	e := newHostileEnvTimeout(t, Config{MaxBody: 4 << 20}, time.Minute)
	detail := ledger.MaxDetailsBytes - 64
	if code, body := e.do(t, "POST", "/api/v1/evidence", e.record, bigEvidence(0, 3800000)); code != http.StatusBadRequest || !strings.Contains(string(body), `"details"`) {
		t.Fatalf("3.8 MB details: %d %.200s, want 400 naming details", code, body)
	}
	t0 := time.Now()
	var ids []string
	for i := 1; i <= 20; i++ {
		code, body := e.do(t, "POST", "/api/v1/evidence", e.record, bigEvidence(i, detail))
		if code != http.StatusCreated {
			t.Fatalf("record %d: %d %.200s", i, code, body)
		}
		var a AppendedJSON
		json.Unmarshal(body, &a)
		ids = append(ids, a.ID)
	}
	t.Logf("recorded 20 records in %v", time.Since(t0))
	t0 = time.Now()
	srv := e.srv.Config.Handler.(*Server)
	// A page ends after the record that reaches the budget; a record of
	// /log/entries carries its details twice (the leaf and the body).
	pageCap := int64(srv.cfg.PageBytes + 2*ledger.MaxDetailsBytes + 128<<10)

	// Paging by cursor reads every record once, each page within its cap.
	seen := map[string]bool{}
	cursor, pages := "", 0
	for {
		code, body := e.do(t, "GET", "/api/v1/evidence?limit=20&cursor="+cursor, "", nil)
		if code != 200 {
			t.Fatalf("page %d: %d %.200s", pages, code, body)
		}
		if int64(len(body)) > pageCap {
			t.Fatalf("page %d is %d bytes, over the cap %d", pages, len(body), pageCap)
		}
		var p struct {
			Evidence []EvidenceJSON `json:"evidence"`
			Next     string         `json:"next_cursor"`
		}
		if err := json.Unmarshal(body, &p); err != nil {
			t.Fatal(err)
		}
		for _, ev := range p.Evidence {
			if seen[ev.ID] {
				t.Fatalf("record %s on two pages", ev.ID)
			}
			seen[ev.ID] = true
		}
		pages++
		if cursor = p.Next; cursor == "" {
			break
		}
	}
	if len(seen) != 20 {
		t.Fatalf("paging read %d records, want 20", len(seen))
	}

	t.Logf("paged in %v", time.Since(t0))
	t0 = time.Now()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := ms.HeapInuse
	var peak atomic.Uint64
	stop := make(chan struct{})
	var sampler sync.WaitGroup
	sampler.Add(1)
	go func() {
		defer sampler.Done()
		var m runtime.MemStats
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			runtime.ReadMemStats(&m)
			if m.HeapInuse > peak.Load() {
				peak.Store(m.HeapInuse)
			}
		}
	}()
	var maxList, maxPage, maxEntries atomic.Int64
	fetch := func(path string, into *atomic.Int64) error {
		res, err := http.Get(e.srv.URL + path)
		if err != nil {
			return err
		}
		defer res.Body.Close()
		n, err := io.Copy(io.Discard, res.Body)
		if err != nil || res.StatusCode != 200 {
			return fmt.Errorf("GET %s: %d %v", path, res.StatusCode, err)
		}
		for {
			old := into.Load()
			if n <= old || into.CompareAndSwap(old, n) {
				break
			}
		}
		return nil
	}
	const workers, rounds = 16, 2
	var wg sync.WaitGroup
	errs := make(chan error, workers*rounds*3)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for r := 0; r < rounds; r++ {
				errs <- fetch("/api/v1/evidence?limit=20", &maxList)
				errs <- fetch("/api/v1/log/entries?kind=evidence&limit=20", &maxEntries)
				errs <- fetch("/evidence/"+ids[(w+r)%len(ids)], &maxPage)
			}
		}(w)
	}
	wg.Wait()
	close(stop)
	sampler.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("concurrent phase %v", time.Since(t0))
	grow := int64(peak.Load()) - int64(base)
	t.Logf("20 records of %d-byte details; %d pages to read them by cursor; largest answers: evidence list %d bytes, entries list %d bytes, evidence page %d bytes; heap in use %d MiB before, peak growth %d MiB under %d concurrent clients",
		detail, pages, maxList.Load(), maxEntries.Load(), maxPage.Load(), base>>20, grow>>20, workers)
	if maxList.Load() > pageCap || maxEntries.Load() > pageCap {
		t.Errorf("a list answer is over the cap %d", pageCap)
	}
	if maxPage.Load() > 512<<10 {
		t.Errorf("an evidence page is %d bytes, over 512 KiB", maxPage.Load())
	}
	if bound := int64(boundedHeap(srv)); grow > bound {
		t.Errorf("heap grew %d MiB, over the stated bound %d MiB", grow>>20, bound>>20)
	}
}

// boundedHeap is the README's bound on the heap the list answers and
// evidence pages hold at once, with the garbage collector's headroom
// (GOGC=100 lets the heap reach twice the live data): Config.MaxListings
// answers, each holding one chunk (plus the store's look-ahead row) of
// records at up to three copies each (row bytes, decoded record,
// encoding), plus concurrent evidence pages at four copies of one record.
func boundedHeap(s *Server) uint64 {
	rec := uint64(ledger.MaxDetailsBytes + 64<<10)
	lists := uint64(s.cfg.MaxListings) * uint64(s.listChunk()+1) * 3 * rec
	pages := 16 * 4 * rec
	return 2 * (lists + pages)
}

// TestPagesByBudgetAndCount: small records page by count; the cursors of
// pages cut by the byte budget continue where they stopped, so paging
// with any budget reads the same records in the same order as one big
// page.
func TestPagesByBudgetAndCount(t *testing.T) {
	e := newHostileEnv(t, Config{PageBytes: 3000})
	for i := 0; i < 30; i++ {
		if code, body := e.do(t, "POST", "/api/v1/evidence", e.record, bigEvidence(i, 100*i)); code != http.StatusCreated {
			t.Fatalf("%d: %d %s", i, code, body)
		}
	}
	all, _, err := e.store.Evidence(t.Context(), ledger.EvidenceFilter{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	for _, limit := range []int{1, 7, 50} {
		var got []string
		cursor, pages := "", 0
		for {
			code, body := e.do(t, "GET", fmt.Sprintf("/api/v1/evidence?limit=%d&cursor=%s", limit, cursor), "", nil)
			if code != 200 {
				t.Fatalf("%d %s", code, body)
			}
			var p struct {
				Evidence []EvidenceJSON `json:"evidence"`
				Next     string         `json:"next_cursor"`
			}
			if err := json.Unmarshal(body, &p); err != nil {
				t.Fatal(err)
			}
			if len(p.Evidence) == 0 || len(p.Evidence) > limit {
				t.Fatalf("limit %d: a page of %d", limit, len(p.Evidence))
			}
			if len(p.Evidence) > 1 && len(body) > 3000+4000 {
				t.Fatalf("limit %d: a page of %d records is %d bytes", limit, len(p.Evidence), len(body))
			}
			for _, ev := range p.Evidence {
				got = append(got, ev.ID)
			}
			pages++
			if cursor = p.Next; cursor == "" {
				break
			}
		}
		if len(got) != len(all) {
			t.Fatalf("limit %d: %d records over %d pages, want %d", limit, len(got), pages, len(all))
		}
		for i := range all {
			if got[i] != all[i].ID {
				t.Fatalf("limit %d: record %d is %s, want %s", limit, i, got[i], all[i].ID)
			}
		}
		t.Logf("limit %d: %d pages", limit, pages)
	}
}
