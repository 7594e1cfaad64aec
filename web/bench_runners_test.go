package web

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"io"
	"net/http"
	"testing"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/verify"
)

// BenchmarkPostEvidence100: one client posting batches of 100 records,
// plain and as DSSE envelopes signed by a registered runner key (verified
// on every append). Signing happens before the timer; compare the two in
// one invocation with -count.
func BenchmarkPostEvidence100(b *testing.B) {
	for _, signed := range []bool{false, true} {
		name := "plain"
		if signed {
			name = "signed"
		}
		b.Run(name, func(b *testing.B) {
			e := newAPIEnv(b, Config{})
			admin, _, _ := e.store.CreateToken(context.Background(), "admin", ledger.ScopeAdmin, nil)
			_, priv, _ := ed25519.GenerateKey(nil)
			pub := verify.AuthorizedKey(priv.Public().(ed25519.PublicKey))
			if code, body := e.do(b, http.MethodPost, "/api/v1/runners", admin, map[string]string{"name": "bench", "public_key": pub}); code != http.StatusCreated {
				b.Fatalf("%d %s", code, body)
			}
			bodies := make([][]byte, b.N)
			for i := range bodies {
				var buf bytes.Buffer
				buf.WriteByte('[')
				for j := 0; j < 100; j++ {
					if j > 0 {
						buf.WriteByte(',')
					}
					rec, _ := json.Marshal(testEvidence(i*100 + j))
					if signed {
						rec, _ = verify.SignEvidence(context.Background(), priv, rec)
					}
					buf.Write(rec)
				}
				buf.WriteByte(']')
				bodies[i] = buf.Bytes()
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				req, _ := http.NewRequest(http.MethodPost, e.srv.URL+"/api/v1/evidence", bytes.NewReader(bodies[i]))
				req.Header.Set("Authorization", "Bearer "+e.record)
				req.Header.Set("Content-Type", "application/json")
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusCreated {
					b.Fatalf("status %d", resp.StatusCode)
				}
			}
			b.ReportMetric(float64(100*b.N)/b.Elapsed().Seconds(), "records/s")
		})
	}
}
