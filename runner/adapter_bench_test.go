package runner_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/runner"
)

// BenchmarkAdapterOverhead compares, interleaved in one loop, a qmv lane
// run in process on the CPU backend (runner.Run) with the same lane run
// through the protocol against cmd/ledger-ref-adapter, which serves the
// same CPU kernel (runner.RunImpl, adapter start and hello included). Both
// pin the same small file as the binary so hashing is equal. Metrics:
// inprocess-ms/op, adapter-ms/op and their ratio (whole calls), and
// lane-wall-adapter/inprocess, the ratio of the lanes' own wall times
// (LaneRun.Wall: without the adapter's start and hello, which happen once
// per run). Sub-benchmark "both" runs the two lanes in one call, as
// `ledger run --impl` does by default.
func BenchmarkAdapterOverhead(b *testing.B) {
	dir := b.TempDir()
	bin := filepath.Join(dir, "ledger-ref-adapter")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/ledger-ref-adapter").CombinedOutput(); err != nil {
		b.Fatalf("build: %v\n%s", err, out)
	}
	small := filepath.Join(dir, "bin")
	if err := os.WriteFile(small, []byte("x"), 0o644); err != nil {
		b.Fatal(err)
	}
	cfg, err := runner.ParseImplConfig([]byte(fmt.Sprintf("implementations:\n  - name: ref\n    command: [%q]\n    backend: cpu\n", bin)), dir)
	if err != nil {
		b.Fatal(err)
	}
	subj := ledger.Subject{Repository: "example.com/impl", Commit: testCommit, Tree: testTree}
	ctl := cpuBackend(b)
	for _, lanes := range [][]string{{runner.LaneQMV}, {runner.LaneQMVPaths}, {runner.LaneQMV, runner.LaneQMVPaths}} {
		name := lanes[0]
		if len(lanes) > 1 {
			name = "both"
		}
		b.Run(name, func(b *testing.B) {
			var tin, tad, lin, lad time.Duration
			for i := 0; i < b.N; i++ {
				t0 := time.Now()
				runs, err := runner.Run(context.Background(), ctl, runner.Options{Lanes: lanes, Subject: subj, BinaryPath: small})
				tin += time.Since(t0)
				for _, r := range runs {
					lin += r.Wall
				}
				if err != nil || len(runs) != len(lanes) || runs[0].Evidence.Status != ledger.StatusPassed {
					b.Fatalf("in process: %v", err)
				}
				t1 := time.Now()
				ir, err := runner.RunImpl(context.Background(), cfg, "ref", runner.ImplOptions{Lanes: lanes, Subject: subj, Control: ctl, BinaryPath: small})
				tad += time.Since(t1)
				for _, r := range ir {
					lad += r.Wall
				}
				if err != nil || len(ir) != len(lanes) || ir[len(ir)-1].Evidence.Status != ledger.StatusPassed {
					b.Fatalf("adapter: %v", err)
				}
			}
			n := float64(b.N)
			b.ReportMetric(float64(tin.Microseconds())/1e3/n, "inprocess-ms/op")
			b.ReportMetric(float64(tad.Microseconds())/1e3/n, "adapter-ms/op")
			b.ReportMetric(float64(tad)/float64(tin), "adapter/inprocess")
			b.ReportMetric(float64(lad)/float64(lin), "lane-wall-adapter/inprocess")
		})
	}
}
