package web

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"testing"
)

// TestCheckpointHistory pages GET /api/v1/log/checkpoints to the end:
// every signed size once, newest first, then an empty cursor; a forged
// cursor is a 400 naming it.
func TestCheckpointHistory(t *testing.T) {
	e := newAPIEnv(t, Config{})
	// The environment's tokens are leaves too (each with its checkpoint).
	cp0, err := e.store.Checkpoint(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	base := cp0.Size
	for i := range 5 {
		if code, body := e.do(t, "POST", "/api/v1/evidence", e.record, testEvidence(i)); code != http.StatusCreated {
			t.Fatalf("POST: %d %s", code, body)
		}
	}
	var sizes []uint64
	cur := ""
	for pages := 0; ; pages++ {
		if pages > 5 {
			t.Fatal("paging does not end")
		}
		code, body := e.do(t, "GET", "/api/v1/log/checkpoints?limit=2&cursor="+url.QueryEscape(cur), "", nil)
		var page struct {
			Checkpoints []struct {
				Size uint64 `json:"size"`
				Note string `json:"note"`
			} `json:"checkpoints"`
			Next string `json:"next_cursor"`
		}
		if err := json.Unmarshal(body, &page); err != nil || code != 200 || len(page.Checkpoints) > 2 {
			t.Fatalf("page: %d %s", code, body)
		}
		for _, cp := range page.Checkpoints {
			if cp.Note == "" {
				t.Fatalf("checkpoint %d without its note", cp.Size)
			}
			sizes = append(sizes, cp.Size)
		}
		if page.Next == "" {
			break
		}
		cur = page.Next
	}
	if uint64(len(sizes)) != base+5 || sizes[0] != base+5 || sizes[len(sizes)-1] != 1 {
		t.Fatalf("sizes %v, want %d..1", sizes, base+5)
	}
	for i := 1; i < len(sizes); i++ {
		if sizes[i] != sizes[i-1]-1 {
			t.Fatalf("sizes %v: not every checkpoint, newest first", sizes)
		}
	}
	code, body := e.do(t, "GET", "/api/v1/log/checkpoints?cursor=bogus", "", nil)
	var ae APIError
	json.Unmarshal(body, &ae)
	if code != 400 || ae.Field != "cursor" {
		t.Fatalf("forged cursor: %d %s", code, body)
	}
}
