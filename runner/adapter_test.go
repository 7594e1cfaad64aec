package runner_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/evidence-ledger/ledger/backends/cpu"
	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/runner"
)

// TestMain lets the test binary act as an adapter: with
// LEDGER_TEST_ADAPTER=MODE[:CASE] set it serves the protocol on stdin and
// stdout with the CPU backend, broken as MODE says for CASE, and exits.
func TestMain(m *testing.M) {
	if mode, ok := os.LookupEnv("LEDGER_TEST_ADAPTER"); ok {
		serve := fakeAdapter
		if strings.HasPrefix(mode, "timing-") {
			serve = fakeTimingAdapter // adapter_throughput_test.go
		}
		if err := serve(mode); err != nil {
			fmt.Fprintln(os.Stderr, "fake adapter:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// fakeAdapter is a reference adapter with one injected fault:
//
//	ok                  correct (promoted kernel)
//	narrow              the original kernel
//	wrong-bits:ID       flips the lowest bit of row 0 for case ID
//	crash:ID            exits with status 3 on receiving case ID
//	crash-always        exits with status 3 on every case
//	hang:ID             never answers case ID
//	short:ID            answers case ID with N-1 values
//	wrong-id:ID         answers case ID under another id
//	garbage:ID          answers case ID with a frame of unknown type
//	truncated:ID        writes half of case ID's answer, then exits
//	error:ID            answers case ID with an error frame
//	unsupported:ID      answers case ID with an unsupported frame
//	bad-hello           answers the hello with another protocol version
//	rewrite             rewrites its artifact lib.so (in the config's
//	                    directory, the adapter's working directory's
//	                    {dir} in the mode) on receiving its first case
//	other-commit        claims a source commit of the subject's repository other than the subject's
func fakeAdapter(mode string) error {
	mode, target, _ := strings.Cut(mode, ":")
	b, err := cpu.New()
	if err != nil {
		return err
	}
	in := bufio.NewReader(os.Stdin)
	out := bufio.NewWriter(os.Stdout)
	if _, _, err := runner.ReadFrame(in); err != nil {
		return err
	}
	proto := runner.AdapterProtocol
	if mode == "bad-hello" {
		proto = "ledger-adapter/0"
	}
	h := runner.AdapterHello{Protocol: proto, Implementation: "fake-" + mode, Version: "1", Device: ledger.Device{Model: "test"}}
	if mode == "other-commit" {
		h.Source = &runner.HelloSource{Repository: "https://example.com/impl.git", Commit: strings.Repeat("f", 40)}
	}
	hb, _ := json.Marshal(h)
	if err := runner.WriteFrame(out, runner.FrameHello, hb); err != nil {
		return err
	}
	out.Flush()
	rewritten := false
	for {
		typ, payload, err := runner.ReadFrame(in)
		if err != nil || typ == runner.FrameBye {
			out.Flush()
			return nil
		}
		id, req, err := runner.DecodeCase(payload)
		if err != nil {
			return err
		}
		if mode == "rewrite" && !rewritten {
			if err := os.WriteFile(filepath.Join(target, "lib.so"), []byte("another artifact"), 0o644); err != nil {
				return err
			}
			rewritten = true
		}
		hit := id == target || mode == "crash-always"
		req.Variant = runner.Promoted
		if mode == "narrow" {
			req.Variant = runner.Narrow
		}
		if hit {
			switch mode {
			case "crash", "crash-always":
				out.Flush()
				os.Exit(3)
			case "hang":
				out.Flush()
				time.Sleep(time.Hour)
			case "wrong-id":
				id = id + "x"
			case "garbage":
				runner.WriteFrame(out, 'Z', []byte("??"))
				out.Flush()
				continue
			case "error":
				runner.WriteFrame(out, runner.FrameError, runner.EncodeText(id, "device lost"))
				out.Flush()
				continue
			case "unsupported":
				runner.WriteFrame(out, runner.FrameUnsupported, runner.EncodeText(id, "no such kernel"))
				out.Flush()
				continue
			}
		}
		y, err := b.QMV(context.Background(), req)
		if err != nil {
			return err
		}
		if hit {
			switch mode {
			case "wrong-bits":
				y.Set(0, y.At(0)^1)
			case "short":
				if y.B16 != nil {
					y.B16 = y.B16[:len(y.B16)-1]
				} else {
					y.B32 = y.B32[:len(y.B32)-1]
				}
			case "truncated":
				var buf bytes.Buffer
				runner.WriteFrame(&buf, runner.FrameOutput, runner.EncodeOutput(id, y))
				out.Write(buf.Bytes()[:buf.Len()/2])
				out.Flush()
				os.Exit(0)
			}
		}
		if err := runner.WriteFrame(out, runner.FrameOutput, runner.EncodeOutput(id, y)); err != nil {
			return err
		}
		if in.Buffered() == 0 {
			out.Flush()
		}
	}
}

const (
	testCommit = "1111111111111111111111111111111111111111"
	testTree   = "2222222222222222222222222222222222222222"
)

// fakeConfig configures the test binary as adapter "fake" in mode, with
// an original in origMode when origMode is not empty.
func fakeConfig(t *testing.T, mode, origMode string) *runner.ImplConfig {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	art := filepath.Join(dir, "lib.so")
	if err := os.WriteFile(art, []byte("the artifact"), 0o644); err != nil {
		t.Fatal(err)
	}
	entry := func(name, mode, orig string) string {
		s := fmt.Sprintf(`  - name: %s
    command: [%q, "-test.run=^$"]
    backend: cpu
    repository: example.com/impl
    commit: %s
    tree: %s
    env: ["LEDGER_TEST_ADAPTER=%s"]
    case_timeout: 5s
    hello_timeout: 20s
    artifacts: {libimpl.so: lib.so}
`, name, exe, testCommit, testTree, strings.ReplaceAll(mode, "{dir}", dir))
		if orig != "" {
			s += "    original: " + orig + "\n"
		}
		return s
	}
	y := "implementations:\n"
	if origMode != "" {
		y += entry("fake", mode, "fake-original") + entry("fake-original", origMode, "")
	} else {
		y += entry("fake", mode, "")
	}
	cfg, err := runner.ParseImplConfig([]byte(y), dir)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func runFake(t *testing.T, cfg *runner.ImplConfig, lanes ...string) []runner.ImplRun {
	t.Helper()
	subj := ledger.Subject{Repository: "example.com/impl", Commit: testCommit, Tree: testTree}
	if len(lanes) == 0 {
		lanes = []string{runner.LaneQMV}
	}
	runs, err := runner.RunImpl(context.Background(), cfg, "fake", runner.ImplOptions{Lanes: lanes, Subject: subj, OriginalSubject: subj,
		Control: cpuBackend(t), Stderr: testWriter{t}, Runner: ledger.RunnerBuild{Version: "test"}})
	if err != nil {
		t.Fatal(err)
	}
	return runs
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Logf("adapter stderr: %s", bytes.TrimSpace(p))
	return len(p), nil
}

func caseNote(t *testing.T, ev ledger.Evidence, id string) (result, note string) {
	t.Helper()
	var d struct {
		Cases []ledger.CaseResult `json:"cases"`
	}
	if err := json.Unmarshal(ev.Details, &d); err != nil {
		t.Fatal(err)
	}
	for _, c := range d.Cases {
		if c.ID == id {
			return c.Result, c.Note
		}
	}
	t.Fatalf("case %s not in the details", id)
	return "", ""
}

// TestImplReferencePasses: a correct adapter passes 216/216 through the
// protocol, the CPU narrow control gives exactly 156/216, and the
// evidence pins the implementation's subject, artifact, the control
// kernel and the lane, with the device from the hello.
func TestImplReferencePasses(t *testing.T) {
	runs := runFake(t, fakeConfig(t, "ok", ""))
	if len(runs) != 1 {
		t.Fatalf("%d runs", len(runs))
	}
	ev := runs[0].Evidence
	if ev.Status != ledger.StatusPassed || ev.CasesExact != 216 || ev.CasesTotal != 216 || ev.Control != ledger.ControlCaught {
		t.Fatalf("got %s %d/%d control %s", ev.Status, ev.CasesExact, ev.CasesTotal, ev.Control)
	}
	var d struct {
		Control struct {
			Details struct {
				Exact, Total int
			}
		}
	}
	if err := json.Unmarshal(ev.Details, &d); err != nil || d.Control.Details.Exact != 156 || d.Control.Details.Total != 216 {
		t.Fatalf("narrow control %d/%d (%v)", d.Control.Details.Exact, d.Control.Details.Total, err)
	}
	if ev.Subject.Repository != "example.com/impl" || ev.Subject.Commit != testCommit {
		t.Fatalf("subject %+v", ev.Subject)
	}
	sum := sha256.Sum256([]byte("the artifact"))
	want := "sha256:" + hex.EncodeToString(sum[:])
	if ev.Subject.Artifacts["libimpl.so"] != want {
		t.Fatalf("artifact pin %q, want %q", ev.Subject.Artifacts["libimpl.so"], want)
	}
	for _, k := range []string{"bin/ledger", "backends/cpu/qmv.go", "lane/" + runner.LaneQMV} {
		if ev.Subject.Artifacts[k] == "" {
			t.Fatalf("no pin %s in %v", k, ev.Subject.Artifacts)
		}
	}
	if ev.Device.Model != "test" || ev.Device.Attrs["implementation"] != "fake-ok" || ev.Device.Attrs["adapter.protocol"] != runner.AdapterProtocol {
		t.Fatalf("device %+v", ev.Device)
	}
}

// TestImplBrokenAdapters: every injected fault makes the lane failed or
// error, never passed, and names the broken case.
func TestImplBrokenAdapters(t *testing.T) {
	const id = "f16/b4/g64/three-way"
	for _, tc := range []struct {
		mode       string
		status     ledger.Status
		result     string
		noteHas    string
		exactAtMst int
	}{
		{"wrong-bits", ledger.StatusFailed, "mismatch", "row 0", 215},
		{"crash", ledger.StatusError, "error", "exit status 3", 215},
		{"hang", ledger.StatusError, "error", "no answer within 5s", 215},
		{"short", ledger.StatusError, "error", "answer has 7 values", 215},
		{"wrong-id", ledger.StatusError, "error", "answers must come in order", 215},
		{"garbage", ledger.StatusError, "error", "malformed answer", 215},
		{"truncated", ledger.StatusError, "error", "malformed frame", 215},
		{"error", ledger.StatusError, "error", "device lost", 215},
		{"unsupported", ledger.StatusFailed, "unsupported", "no such kernel", 215},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			if tc.mode == "hang" && testing.Short() {
				t.Skip("waits for the case timeout")
			}
			runs := runFake(t, fakeConfig(t, tc.mode+":"+id, ""))
			ev := runs[0].Evidence
			if ev.Status != tc.status || ev.Status == ledger.StatusPassed {
				t.Fatalf("status %s, want %s", ev.Status, tc.status)
			}
			if ev.CasesExact != tc.exactAtMst || len(ev.FailingCases) != 216-tc.exactAtMst || ev.FailingCases[0] != id {
				t.Fatalf("%d/%d exact, failing %v", ev.CasesExact, ev.CasesTotal, ev.FailingCases)
			}
			res, note := caseNote(t, ev, id)
			if res != tc.result || !strings.Contains(note, tc.noteHas) {
				t.Fatalf("case %s: %s %q, want %s containing %q", id, res, note, tc.result, tc.noteHas)
			}
		})
	}
}

// TestImplCrashAlways: an adapter that dies on every case is restarted a
// bounded number of times; every case is an error and the lane is error.
func TestImplCrashAlways(t *testing.T) {
	ev := runFake(t, fakeConfig(t, "crash-always", ""))[0].Evidence
	if ev.Status != ledger.StatusError || ev.CasesExact != 0 || len(ev.FailingCases) != 216 {
		t.Fatalf("status %s %d/%d, %d failing", ev.Status, ev.CasesExact, ev.CasesTotal, len(ev.FailingCases))
	}
	if r, note := caseNote(t, ev, ev.FailingCases[len(ev.FailingCases)-1]); r != "error" || !strings.Contains(note, "not run") {
		t.Fatalf("last case: %s %q", r, note)
	}
}

// TestImplBadHello: an adapter speaking another protocol version is
// refused before any case runs.
func TestImplBadHello(t *testing.T) {
	subj := ledger.Subject{Repository: "example.com/impl", Commit: testCommit, Tree: testTree}
	_, err := runner.RunImpl(context.Background(), fakeConfig(t, "bad-hello", ""), "fake", runner.ImplOptions{Subject: subj, Control: cpuBackend(t), Stderr: testWriter{t}})
	if err == nil || !strings.Contains(err.Error(), "ledger-adapter/0") {
		t.Fatalf("err = %v", err)
	}
}

// TestImplHelloCommitMismatch: an adapter whose hello claims another
// commit of the subject's repository is refused before any case.
func TestImplHelloCommitMismatch(t *testing.T) {
	subj := ledger.Subject{Repository: "example.com/impl", Commit: testCommit, Tree: testTree}
	_, err := runner.RunImpl(context.Background(), fakeConfig(t, "other-commit", ""), "fake", runner.ImplOptions{Subject: subj, Control: cpuBackend(t), Stderr: testWriter{t}})
	if err == nil || !strings.Contains(err.Error(), "reports commit ffff") {
		t.Fatalf("err = %v", err)
	}
}

// TestImplOriginal: an original build serving the narrow kernel is
// recorded as failed negative evidence (156/216, the predicted ids), and
// the implementation's control is caught; an "original" that is in fact
// correct makes the implementation's run inconclusive.
func TestImplOriginal(t *testing.T) {
	runs := runFake(t, fakeConfig(t, "ok", "narrow"))
	if len(runs) != 2 || runs[1].Role != "original" {
		t.Fatalf("runs %+v", runs)
	}
	if ev := runs[0].Evidence; ev.Status != ledger.StatusPassed || ev.Control != ledger.ControlCaught {
		t.Fatalf("impl: %s control %s", ev.Status, ev.Control)
	}
	if ev := runs[1].Evidence; ev.Status != ledger.StatusFailed || ev.CasesExact != 156 || len(ev.FailingCases) != 60 {
		t.Fatalf("original: %s %d/%d", ev.Status, ev.CasesExact, ev.CasesTotal)
	}
	runs = runFake(t, fakeConfig(t, "ok", "ok"))
	if ev := runs[0].Evidence; ev.Status != ledger.StatusInconclusive || ev.Control != ledger.ControlNotCaught {
		t.Fatalf("impl with a correct original: %s control %s", ev.Status, ev.Control)
	}
}

// TestImplNarrowAsImpl: the original kernel presented as the
// implementation fails exactly the 60 predicted cases.
func TestImplNarrowAsImpl(t *testing.T) {
	ev := runFake(t, fakeConfig(t, "narrow", ""))[0].Evidence
	if ev.Status != ledger.StatusFailed || ev.CasesExact != 156 {
		t.Fatalf("%s %d/%d", ev.Status, ev.CasesExact, ev.CasesTotal)
	}
}

// TestImplArtifactChanged: an artifact rewritten while the adapter runs
// makes the run an error.
func TestImplArtifactChanged(t *testing.T) {
	cfg := fakeConfig(t, "rewrite:{dir}", "")
	im, _ := cfg.Lookup("fake")
	pins, err := im.Pins()
	if err != nil {
		t.Fatal(err)
	}
	subj := ledger.Subject{Repository: "example.com/impl", Commit: testCommit, Tree: testTree}
	runs, err := runner.RunImpl(context.Background(), cfg, "fake", runner.ImplOptions{Lanes: []string{runner.LaneQMVPaths}, Subject: subj, Control: cpuBackend(t), Stderr: testWriter{t}})
	if err != nil {
		t.Fatal(err)
	}
	ev := runs[0].Evidence
	if ev.Status != ledger.StatusError || !strings.Contains(string(ev.Details), "artifacts_changed") {
		t.Fatalf("status %s", ev.Status)
	}
	if ev.Subject.Artifacts["libimpl.so"] != pins["libimpl.so"] {
		t.Fatal("the evidence must pin the digest taken before the run")
	}
}

// TestImplConfigErrors: bad configurations are refused naming the field.
func TestImplConfigErrors(t *testing.T) {
	for _, tc := range []struct{ yaml, want string }{
		{"implementations: []", "no implementations"},
		{"implementations:\n  - name: a\n    backend: cpu\n", "command"},
		{"implementations:\n  - name: a\n    command: [x]\n    backend: tpu\n", "backend"},
		{"implementations:\n  - name: a b\n    command: [x]\n    backend: cpu\n", "name"},
		{"implementations:\n  - name: a\n    command: [x]\n    backend: cpu\n    commit: XYZ\n", "commit"},
		{"implementations:\n  - name: a\n    command: [x]\n    backend: cpu\n    artifacts: {bin/x: p}\n", "artifacts"},
		{"implementations:\n  - name: a\n    command: [x]\n    backend: cpu\n    original: b\n", "original"},
		{"implementations:\n  - name: a\n    command: [x]\n    backend: cpu\n  - name: a\n    command: [x]\n    backend: cpu\n", "twice"},
		{"implementations:\n  - name: a\n    command: [x]\n    backend: cpu\n    colour: red\n", "colour"},
	} {
		if _, err := runner.ParseImplConfig([]byte(tc.yaml), t.TempDir()); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: err = %v, want it to name %q", tc.yaml, err, tc.want)
		}
	}
}

// TestImplNotQMVLane: allocator lanes do not run through adapters.
func TestImplNotQMVLane(t *testing.T) {
	subj := ledger.Subject{Repository: "example.com/impl", Commit: testCommit, Tree: testTree}
	_, err := runner.RunImpl(context.Background(), fakeConfig(t, "ok", ""), "fake", runner.ImplOptions{Lanes: []string{runner.LaneAllocSnap}, Subject: subj, Control: cpuBackend(t)})
	if err == nil || !strings.Contains(err.Error(), "adapter protocol") {
		t.Fatalf("err = %v", err)
	}
}
