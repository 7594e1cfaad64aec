package runner_test

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/evidence-ledger/ledger/backends/cpu"
	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/runner"
)

// tputCase is the one case the throughput tests run: 4096 x 4096, 4-bit
// float16, batch 1.
const tputCase = "batch1/n4096/k4096/f16/b4/g64"

// fakeTimingAdapter answers the timing frames with the CPU backend's
// outputs and synthetic samples (1 ms per product, 2 ms with repeat 2,
// with a small deterministic spread), broken as mode says:
//
//	timing-ok              correct
//	timing-none            no timing capability in its hello
//	timing-nan             a NaN sample
//	timing-negative        a negative sample
//	timing-fewer           one sample fewer than asked for
//	timing-count           a count field one above the samples sent
//	timing-clock           an empty clock name
//	timing-id              samples for another case id
//	timing-ready-short     a ready frame with N-1 values
//	timing-wrong-output    outputs with every value zero
//	timing-error           answers the time frame with an error frame
func fakeTimingAdapter(mode string) error {
	b, err := cpu.New()
	if err != nil {
		return err
	}
	in := bufio.NewReader(os.Stdin)
	out := bufio.NewWriter(os.Stdout)
	if _, _, err := runner.ReadFrame(in); err != nil {
		return err
	}
	h := runner.AdapterHello{Protocol: runner.AdapterProtocol, Implementation: "fake-" + mode, Version: "1",
		Device: ledger.Device{Model: "test"}, Timing: mode != "timing-none", State: map[string]string{"clocks.sm_mhz": "1980"}}
	hb, _ := json.Marshal(h)
	if err := runner.WriteFrame(out, runner.FrameHello, hb); err != nil {
		return err
	}
	out.Flush()
	calls := 0
	for {
		typ, payload, err := readAny(in)
		if err != nil || typ == runner.FrameBye {
			out.Flush()
			return nil
		}
		var ans []byte
		ansTyp := byte(0)
		switch typ {
		case runner.FramePrepare:
			id, req, xs, err := runner.DecodePrepare(payload)
			if err != nil {
				return err
			}
			req.Variant = runner.Promoted
			var rows []runner.Vec
			for _, x := range xs {
				rr := *req
				rr.X = x
				y, err := b.QMV(context.Background(), &rr)
				if err != nil {
					return err
				}
				switch mode {
				case "timing-wrong-output":
					y = runner.NewVec(req.DType, req.N)
				case "timing-ready-short":
					y.B16 = y.B16[:req.N-1]
				}
				rows = append(rows, y)
			}
			ansTyp, ans = runner.FrameReady, runner.EncodeReady(id, rows)
		case runner.FrameTime:
			id, n, repeat, err := runner.DecodeTime(payload)
			if err != nil {
				return err
			}
			ts := runner.TimingSamples{Clock: "fake-clock", Launches: 4, Samples: make([]float64, n)}
			for i := range ts.Samples {
				calls++
				ts.Samples[i] = 1e-3 * float64(repeat) * (1 + 1e-4*float64(calls%7))
			}
			ansTyp = runner.FrameSamples
			switch mode {
			case "timing-nan":
				ts.Samples[n-1] = math.NaN()
			case "timing-negative":
				ts.Samples[0] = -1e-3
			case "timing-fewer":
				ts.Samples = ts.Samples[:n-1]
			case "timing-clock":
				ts.Clock = ""
			case "timing-id":
				id += "x"
			case "timing-error":
				ansTyp = runner.FrameError
			}
			ans = runner.EncodeSamples(id, ts)
			if mode == "timing-count" {
				binary.LittleEndian.PutUint32(ans[2+len(id)+1+len(ts.Clock)+4:], uint32(n+1))
			}
			if ansTyp == runner.FrameError {
				ans = runner.EncodeText(id, "device lost")
			}
		default:
			return fmt.Errorf("unexpected frame %q", typ)
		}
		if err := runner.WriteFrame(out, ansTyp, ans); err != nil {
			return err
		}
		out.Flush()
	}
}

// readAny reads a frame of up to MaxPreparePayload bytes.
func readAny(r *bufio.Reader) (byte, []byte, error) {
	var h [5]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return 0, nil, err
	}
	n := binary.LittleEndian.Uint32(h[1:])
	if n > runner.MaxPreparePayload {
		return 0, nil, fmt.Errorf("frame too large")
	}
	p := make([]byte, n)
	_, err := io.ReadFull(r, p)
	return h[0], p, err
}

func runImplThroughputT(t *testing.T, cfg *runner.ImplConfig, name string, o runner.ImplOptions) ([]runner.ImplRun, error) {
	t.Helper()
	subj := ledger.Subject{Repository: "example.com/impl", Commit: testCommit, Tree: testTree}
	o.Lanes = []string{runner.ThroughputLane}
	o.Subject, o.OriginalSubject = subj, subj
	if o.Cases == nil {
		o.Cases = []string{tputCase}
	}
	o.Stderr = testWriter{t}
	o.Runner = ledger.RunnerBuild{Version: "test"}
	return runner.RunImpl(context.Background(), cfg, name, o)
}

// TestImplThroughputFake: an adapter with correct outputs and steady
// samples passes one-sided (no baseline), with its clock, launches, the
// hello's state and a caught control.
func TestImplThroughputFake(t *testing.T) {
	runs, err := runImplThroughputT(t, fakeConfig(t, "timing-ok", ""), "fake", runner.ImplOptions{CaseBudget: time.Second, MaxSamples: 20})
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 1 || runs[0].Role != "impl" {
		t.Fatalf("%d runs", len(runs))
	}
	ev := runs[0].Evidence
	if ev.Status != ledger.StatusPassed || ev.Control != ledger.ControlCaught || ev.CasesExact != 1 || ev.Lane != runner.ThroughputLane {
		t.Fatalf("%s %s %d/%d\n%s", ev.Lane, ev.Status, ev.CasesExact, ev.CasesTotal, ev.Details)
	}
	tp, err := ledger.ThroughputOf(&ev)
	if err != nil || tp == nil {
		t.Fatalf("throughput: %v %v", tp, err)
	}
	c := tp.Cases[0]
	if tp.Baseline != nil || c.BaselineS != nil || tp.Clock != "fake-clock" || tp.Candidate != "fake" || c.LaunchesPerSample != 4 || c.ID != tputCase {
		t.Fatalf("throughput %+v", tp)
	}
	if tp.DeviceState["before.clocks.sm_mhz"] != "1980" || tp.DeviceState["device.model"] != "test" {
		t.Fatalf("device state %v", tp.DeviceState)
	}
	if c.Output.RelL2 > c.Output.Tolerance || c.Output.Values != 4096 {
		t.Fatalf("output %+v", c.Output)
	}
	if ev.Subject.Artifacts["lane/"+runner.ThroughputLane] == "" || ev.Subject.Artifacts["libimpl.so"] == "" {
		t.Fatalf("pins %v", ev.Subject.Artifacts)
	}
}

// TestImplThroughputBrokenAdapters: garbage samples, wrong counts, ids
// and clocks give an error record naming the frame; a wrong output gives
// failed; an adapter without timing is refused before any record.
func TestImplThroughputBrokenAdapters(t *testing.T) {
	for _, tc := range []struct {
		mode, want string
	}{
		{"timing-nan", "samples frame"},
		{"timing-negative", "sample 0 is -0.001"},
		{"timing-fewer", "samples frame holds 4 samples, asked for 5"},
		{"timing-count", "sample count 6 does not match 40 sample bytes"},
		{"timing-clock", "clock name must be"},
		{"timing-id", "samples frame names case"},
		{"timing-ready-short", "ready frame has 4095 values"},
		{"timing-error", "the adapter answered error: device lost"},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			runs, err := runImplThroughputT(t, fakeConfig(t, tc.mode, ""), "fake", runner.ImplOptions{CaseBudget: time.Second, MaxSamples: 10})
			if err != nil {
				t.Fatal(err)
			}
			ev := runs[0].Evidence
			if ev.Status != ledger.StatusError || runs[0].Err == nil || !strings.Contains(runs[0].Err.Error(), tc.want) {
				t.Fatalf("%s: %v, want an error containing %q\n%s", ev.Status, runs[0].Err, tc.want, ev.Details)
			}
			if !strings.Contains(string(ev.Details), "fake") {
				t.Fatalf("the error does not name the implementation: %s", ev.Details)
			}
		})
	}
	t.Run("timing-wrong-output", func(t *testing.T) {
		runs, err := runImplThroughputT(t, fakeConfig(t, "timing-wrong-output", ""), "fake", runner.ImplOptions{CaseBudget: time.Second, MaxSamples: 10})
		if err != nil {
			t.Fatal(err)
		}
		ev := runs[0].Evidence
		if ev.Status != ledger.StatusFailed || len(ev.FailingCases) != 1 || ev.FailingCases[0] != tputCase {
			t.Fatalf("%s failing %v\n%s", ev.Status, ev.FailingCases, ev.Details)
		}
		if r, note := caseNote(t, ev, tputCase); r != "mismatch" || !strings.Contains(note, "beyond") && !strings.Contains(note, "> tolerance") {
			t.Fatalf("case %s: %s", r, note)
		}
	})
	t.Run("timing-none", func(t *testing.T) {
		_, err := runImplThroughputT(t, fakeConfig(t, "timing-none", ""), "fake", runner.ImplOptions{})
		if err == nil || !strings.Contains(err.Error(), "timing capability") {
			t.Fatalf("got %v, want a refusal naming the timing capability", err)
		}
	})
	t.Run("options", func(t *testing.T) {
		cfg := fakeConfig(t, "timing-ok", "")
		for _, o := range []runner.ImplOptions{{Cases: []string{"batch9/*"}}, {Cases: []string{"["}}, {MaxSamples: 1001}, {CaseBudget: -time.Second}} {
			if _, err := runImplThroughputT(t, cfg, "fake", o); err == nil {
				t.Fatalf("options %+v accepted", o)
			}
		}
		subj := ledger.Subject{Repository: "example.com/impl", Commit: testCommit, Tree: testTree}
		_, err := runner.RunImpl(context.Background(), cfg, "fake", runner.ImplOptions{Lanes: []string{runner.ThroughputLane, runner.LaneQMV}, Subject: subj})
		if err == nil || !strings.Contains(err.Error(), "runs alone") {
			t.Fatalf("mixed lanes: %v", err)
		}
	})
}

// TestImplThroughputReference runs qmv-throughput/v1 through
// cmd/ledger-ref-adapter (the promoted kernel) against its original
// reference-narrow on one 4096 x 4096 case: one record that validates,
// names the original with its pinned artifacts, holds paired samples on
// the monotonic clock, and catches the control (the candidate launched
// twice per product).
func TestImplThroughputReference(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and times the reference adapter")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "ledger-ref-adapter")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/ledger-ref-adapter").CombinedOutput(); err != nil {
		t.Fatalf("build the reference adapter: %v\n%s", err, out)
	}
	y := fmt.Sprintf(`implementations:
  - name: reference
    command: [%[1]q, --rotate-mib, "64"]
    backend: cpu
    artifacts: {ledger-ref-adapter: ledger-ref-adapter}
    original: reference-narrow
  - name: reference-narrow
    command: [%[1]q, --variant, narrow, --rotate-mib, "64"]
    backend: cpu
    artifacts: {ledger-ref-adapter: ledger-ref-adapter}
`, bin)
	cfg, err := runner.ParseImplConfig([]byte(y), dir)
	if err != nil {
		t.Fatal(err)
	}
	runs, err := runImplThroughputT(t, cfg, "reference", runner.ImplOptions{CaseBudget: 8 * time.Second, MaxSamples: 300})
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 1 {
		t.Fatalf("%d records, want 1 (the original's samples are in the candidate's)", len(runs))
	}
	ev := runs[0].Evidence
	if runs[0].Err != nil || ev.Status == ledger.StatusError || ev.Status == ledger.StatusFailed {
		t.Fatalf("%s: %v\n%s", ev.Status, runs[0].Err, ev.Details)
	}
	tp, err := ledger.ThroughputOf(&ev)
	if err != nil || tp == nil {
		t.Fatalf("throughput: %v %v", tp, err)
	}
	digest, err := runner.FileDigest(bin)
	if err != nil {
		t.Fatal(err)
	}
	if tp.Baseline == nil || tp.Baseline.Name != "reference-narrow" || tp.Baseline.Artifacts["ledger-ref-adapter"] != digest {
		t.Fatalf("baseline %+v, want reference-narrow with artifact %s", tp.Baseline, digest)
	}
	c := tp.Cases[0]
	if tp.Clock != "monotonic" || tp.Candidate != "reference" || len(c.BaselineS) != len(c.CandidateS) || c.Ratio == nil || c.Output.BaselineRelL2 == nil {
		t.Fatalf("throughput %+v case %+v", tp, c)
	}
	t.Logf("%s: candidate %.3g s, baseline %.3g s, ratio %.3f [%.3f, %.3f], n %d, converged %v; control %s",
		c.ID, c.CandidateMedian.Estimate, c.BaselineMedian.Estimate, c.Ratio.Estimate, c.Ratio.Low, c.Ratio.High, len(c.CandidateS), c.Converged, ev.Control)
	if ev.Control != ledger.ControlCaught || ev.Status != ledger.StatusPassed {
		t.Fatalf("control %s, status %s\n%s", ev.Control, ev.Status, ev.Details)
	}
}
