package ledger

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"
)

// benchEvidenceBody is an evidence record shaped like the ingest
// benchmarks' (web BenchmarkHTTPAppendBatch100).
func benchEvidenceBody(n int) []byte {
	start := time.Date(2025, 11, 29, 10, 0, 0, 0, time.UTC).Add(time.Duration(n) * time.Second)
	b, _ := json.Marshal(map[string]any{
		"lane": "qmv-bias-sum/v1",
		"subject": map[string]any{
			"repository": "github.com/ml-explore/mlx",
			"commit":     fmt.Sprintf("%040x", n+1),
			"tree":       fmt.Sprintf("%040x", n+7),
			"artifacts":  map[string]string{"libmlx.so": fmt.Sprintf("sha256:%064x", n)},
		},
		"backend": "cpu", "device": map[string]any{"model": "test cpu", "cores": 2}, "runner": map[string]any{"version": "test"},
		"cases_exact": 216, "cases_total": 216, "control": "caught", "status": "passed",
		"started_at": start.Format(time.RFC3339Nano), "finished_at": start.Add(time.Second).Format(time.RFC3339Nano),
		"details": map[string]any{"n": n, "note": "bias sums exact"},
	})
	return b
}

// BenchmarkPrepareEvidence: strict decoding, validation and canonical
// encoding of one record (what every appended record costs before the
// writer).
func BenchmarkPrepareEvidence(b *testing.B) {
	bodies := make([][]byte, 1024)
	for i := range bodies {
		bodies[i] = benchEvidenceBody(i)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, _, err := PrepareEvidence(bodies[i%len(bodies)]); err != nil {
			b.Fatal(err)
		}
	}
}
