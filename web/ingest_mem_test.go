package web

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"net/http"
	"testing"

	"github.com/evidence-ledger/ledger/ingest"
	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/verify"
)

// BenchmarkPostMaxGoTest posts a go test -json stream just under the
// default 4 MiB body cap through the whole server (decode, checks,
// append): with -benchmem, B/op is what one maximum-size request
// allocates; -memprofile shows where.
func BenchmarkPostMaxGoTest(b *testing.B) {
	e := newAPIEnv(b, Config{})
	const size = 4<<20 - 4096
	for i := 0; b.Loop(); i++ {
		var body bytes.Buffer
		for k := 0; body.Len() < size-1000; k++ {
			fmt.Fprintf(&body, `{"Time":"2025-12-05T10:00:00Z","Action":"run","Package":"example.com/p","Test":"TestCase%d_%d"}`+"\n", i, k)
			fmt.Fprintf(&body, `{"Time":"2025-12-05T10:00:00Z","Action":"output","Package":"example.com/p","Test":"TestCase%d_%d","Output":"=== RUN\n"}`+"\n", i, k)
			fmt.Fprintf(&body, `{"Time":"2025-12-05T10:00:01Z","Action":"pass","Package":"example.com/p","Test":"TestCase%d_%d","Elapsed":0.01}`+"\n", i, k)
		}
		body.WriteString(`{"Time":"2025-12-05T10:00:02Z","Action":"pass","Package":"example.com/p","Elapsed":2}` + "\n")
		code, out := e.do(b, "POST", "/api/v1/evidence?lane=ci-tests/v1&backend=cpu&repository=example/r&commit=1111111111111111111111111111111111111111&tree=2222222222222222222222222222222222222222", e.record, body.Bytes(), "Content-Type", "application/vnd.go.test2json+jsonl")
		if code != http.StatusCreated {
			b.Fatalf("%d %s", code, out)
		}
	}
}

// BenchmarkPostMaxDSSE posts a DSSE envelope of a test-result Statement,
// signed by a registered runner key, just under the default 4 MiB body
// cap (see BenchmarkPostMaxGoTest).
func BenchmarkPostMaxDSSE(b *testing.B) {
	e := newAPIEnv(b, Config{})
	admin, _, err := e.store.CreateToken(context.Background(), "admin", ledger.ScopeAdmin, nil)
	if err != nil {
		b.Fatal(err)
	}
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	pub := verify.AuthorizedKey(priv.Public().(ed25519.PublicKey)) + " h1@host"
	if code, out := e.do(b, http.MethodPost, "/api/v1/runners", admin, map[string]string{"name": "h1", "public_key": pub}); code != http.StatusCreated {
		b.Fatalf("add runner: %d %s", code, out)
	}
	const size = (4<<20)*3/4 - 4096
	for i := 0; b.Loop(); i++ {
		var st bytes.Buffer
		fmt.Fprintf(&st, `{"_type":%q,"subject":[{"name":"example/r","digest":{"gitCommit":"%040d","gitTree":"%040d"}}],"predicateType":%q,"predicate":{"result":"PASSED","passedTests":[`,
			ingest.StatementV1, 1, 2, ingest.PredicateTestResult)
		for k := range 9000 {
			if k > 0 {
				st.WriteByte(',')
			}
			fmt.Fprintf(&st, `"pkg/sub.Test_request_%d_case_%d"`, i, k)
		}
		st.WriteString(`],"warnedTests":[],"failedTests":[],"configuration":[`)
		for k := 0; st.Len() < size-200; k++ {
			if k > 0 {
				st.WriteByte(',')
			}
			fmt.Fprintf(&st, `{"name":"config-%d-%d","uri":"https://example.com/configs/%d/settings.yaml"}`, i, k, k)
		}
		st.WriteString("]}}")
		env, err := verify.SignRunnerEnvelope(context.Background(), priv, ingest.MediaInToto, st.Bytes())
		if err != nil {
			b.Fatal(err)
		}
		code, out := e.do(b, "POST", "/api/v1/evidence?lane=ci-tests/v1&backend=cpu", e.record, env, "Content-Type", ingest.MediaDSSE)
		if code != http.StatusCreated {
			b.Fatalf("%d %s", code, out)
		}
	}
}
