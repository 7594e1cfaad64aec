package witness_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"golang.org/x/mod/sumdb/note"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/witness"
)

// TestClientAnswers maps each witness answer of c2sp.org/tlog-witness to
// its error; the server here is a stand-in for the status codes only (the
// protocol itself is tested against litewitness).
func TestClientAnswers(t *testing.T) {
	tw := newTestWitness(t, "w.example")
	other := newTestWitness(t, "w.example")
	logS, _ := mustLogKey(t, "example.com/log")
	signed, _ := note.Sign(&note.Note{Text: cpText}, logS)
	cosign := func(s note.Signer) string {
		b, _ := note.Sign(&note.Note{Text: cpText}, s)
		return string(b[strings.LastIndex(string(b), "\n\n")+2:])
	}
	var gotBody string
	type answer struct {
		code  int
		ctype string
		body  string
	}
	var ans answer
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/w/add-checkpoint" {
			http.Error(w, "wrong route", http.StatusMethodNotAllowed)
			return
		}
		b, _ := io.ReadAll(r.Body)
		gotBody = string(b)
		if ans.ctype != "" {
			w.Header().Set("Content-Type", ans.ctype)
		}
		w.WriteHeader(ans.code)
		io.WriteString(w, ans.body)
	}))
	defer srv.Close()
	c := &witness.Client{Name: "W", URL: srv.URL + "/w/", Verifier: mustCosigVerifier(t, tw.vkey)}
	proof := []ledger.Hash{{1}, {2}}

	ans = answer{200, "", cosign(tw.signer)}
	sig, err := c.AddCheckpoint(context.Background(), 7, proof, signed)
	if err != nil || !strings.HasPrefix(string(sig), "— w.example ") {
		t.Fatalf("200: %q, %v", sig, err)
	}
	wantBody := "old 7\nAQAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\nAgAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\n\n" + string(signed)
	if gotBody != wantBody {
		t.Fatalf("request body\n%q\nwant\n%q", gotBody, wantBody)
	}

	for _, c2 := range []struct {
		name string
		ans  answer
		is   error
		size int64 // -1: no ConflictError; -2: ConflictError without size
	}{
		{"409 with size", answer{409, "text/x.tlog.size", "12\n"}, nil, 12},
		{"409 without size", answer{409, "text/plain", "root mismatch\n"}, nil, -2},
		{"409 malformed size", answer{409, "text/x.tlog.size", "012\n"}, nil, -2},
		{"400", answer{400, "", "invalid input"}, witness.ErrBadRequest, -1},
		{"403", answer{403, "", "invalid signature"}, witness.ErrForbidden, -1},
		{"404", answer{404, "", "unknown log"}, witness.ErrUnknownLog, -1},
		{"422", answer{422, "", "bad consistency proof"}, witness.ErrBadProof, -1},
		{"503", answer{503, "", "down"}, witness.ErrUnavailable, -1},
		{"200 from another key", answer{200, "", cosign(other.signer)}, nil, -1},
		{"200 garbage", answer{200, "", "hello\n"}, nil, -1},
		{"200 empty", answer{200, "", ""}, nil, -1},
		{"200 huge", answer{200, "", strings.Repeat("x", 70<<10)}, nil, -1},
	} {
		ans = c2.ans
		_, err := c.AddCheckpoint(context.Background(), 7, proof, signed)
		if err == nil {
			t.Errorf("%s: no error", c2.name)
			continue
		}
		var ce *witness.ConflictError
		switch {
		case c2.size >= 0:
			if !errors.As(err, &ce) || !ce.KnownSet || ce.Known != uint64(c2.size) {
				t.Errorf("%s: %v", c2.name, err)
			}
		case c2.size == -2:
			if !errors.As(err, &ce) || ce.KnownSet {
				t.Errorf("%s: %v", c2.name, err)
			}
		case c2.is != nil && !errors.Is(err, c2.is):
			t.Errorf("%s: %v, want %v", c2.name, err, c2.is)
		}
	}

	// A witness that cannot be reached.
	srv.Close()
	if _, err := c.AddCheckpoint(context.Background(), 7, proof, signed); !errors.Is(err, witness.ErrUnavailable) {
		t.Fatalf("closed server: %v", err)
	}
	if _, err := c.AddCheckpoint(context.Background(), 7, make([]ledger.Hash, 64), signed); err == nil {
		t.Fatal("64-hash proof sent")
	}
}

func mustCosigVerifier(t *testing.T, vkey string) note.Verifier {
	t.Helper()
	v, err := witness.NewCosignatureVerifier(vkey)
	if err != nil {
		t.Fatal(err)
	}
	return v
}
