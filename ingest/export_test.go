package ingest

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
	trv0 "github.com/in-toto/attestation/go/predicates/test_result/v0"
	attv1 "github.com/in-toto/attestation/go/v1"
	"google.golang.org/protobuf/encoding/protojson"
)

// TestExportRoundTrip exports evidence as an in-toto Statement and records
// it again, unsigned and as a DSSE envelope signed by the same runner key:
// the pins, the case counts and the runner identity survive.
func TestExportRoundTrip(t *testing.T) {
	p := testParams()
	p.Artifacts = map[string]string{"lib.so": "sha256:" + strings.Repeat("1", 64), "model.bin": "sha256:" + strings.Repeat("2", 64)}
	junit := []byte(`<testsuite name="s" tests="4" failures="1" skipped="1" timestamp="2026-11-29T10:00:00" time="2">
<testcase name="a"/><testcase name="b"><failure/></testcase><testcase name="c"><skipped/></testcase><testcase name="d"/></testsuite>`)
	res, err := DecodeFormat(context.Background(), FormatJUnit, junit, p)
	if err != nil {
		t.Fatal(err)
	}
	native := ledger.Evidence{Lane: "ci-tests/v1", Subject: ledger.Subject{Repository: "github.com/example/repo", Commit: strings.Repeat("a", 40), Tree: strings.Repeat("b", 40),
		Artifacts: map[string]string{"x": "sha256:" + strings.Repeat("3", 64)}}, Backend: ledger.BackendCPU, CasesExact: 214, CasesTotal: 216,
		FailingCases: []string{"k1"}, Control: ledger.ControlCaught, Status: ledger.StatusFailed,
		StartedAt: time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC), FinishedAt: time.Date(2026, 11, 29, 0, 1, 0, 0, time.UTC)}
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	keys := testRegistry(t, map[string]ed25519.PublicKey{"gpu-runner-1": pub})

	for name, ev := range map[string]ledger.Evidence{"junit": res.Evidence[0], "native": native} {
		t.Run(name, func(t *testing.T) {
			st, err := json.Marshal(ExportStatement(ev))
			if err != nil {
				t.Fatal(err)
			}
			// Only what the format lacks: lane and backend.
			again := Params{Lane: ev.Lane, Backend: ev.Backend}
			for _, format := range []string{FormatInToto, FormatDSSE} {
				body := st
				if format == FormatDSSE {
					body = signEnvelope(t, runnerSigner(priv), MediaInToto, st)
				}
				res, err := decodeWith(context.Background(), keys, format, body, again)
				if err != nil {
					t.Fatalf("%s: record again: %v", format, err)
				}
				got := res.Evidence[0]
				if !reflect.DeepEqual(got.Subject, ev.Subject) || got.CasesExact != ev.CasesExact || got.CasesTotal != ev.CasesTotal || got.Status != ev.Status {
					t.Fatalf("%s: recorded again as %+v %d/%d %s, want %+v %d/%d %s", format, got.Subject, got.CasesExact, got.CasesTotal, got.Status,
						ev.Subject, ev.CasesExact, ev.CasesTotal, ev.Status)
				}
				if format == FormatDSSE {
					_, d := outcomes(t, res)
					if d.Identity == nil || d.Identity.Name != "gpu-runner-1" {
						t.Fatalf("identity %+v", d.Identity)
					}
					// Exported once more from the re-recorded evidence: the same statement.
					if st2, _ := json.Marshal(ExportStatement(got)); name == "junit" && string(st2) != string(st) {
						t.Fatalf("second export differs:\n%s\n%s", st, st2)
					}
				}
			}
		})
	}
	_ = fmt.Sprint
}

// TestExportConfiguration: the exported test-result predicate carries the
// configuration the spec requires, from the evidence's own pins (lane,
// backend with its device, runner build), and the Statement and every
// configuration ResourceDescriptor validate with the in-toto attestation
// library (Statement.Validate, the test-result proto decoded strictly,
// ResourceDescriptor.Validate); evidence without runner or device pins
// gets no invented descriptor.
func TestExportConfiguration(t *testing.T) {
	base := ledger.Evidence{Lane: "qmv-bias-sum/v1", Subject: ledger.Subject{Repository: "github.com/example/repo", Commit: strings.Repeat("a", 40), Tree: strings.Repeat("b", 40)},
		Backend: ledger.BackendCUDA, CasesExact: 2, CasesTotal: 2, Status: ledger.StatusPassed}
	full := base
	full.Device = ledger.Device{Model: "NVIDIA H100", Driver: "550.54", Cores: 132}
	full.Runner = ledger.RunnerBuild{Version: "v1.4.0", Commit: strings.Repeat("c", 40)}
	odd := base
	odd.Runner = ledger.RunnerBuild{Commit: "not-a-hash"}
	for _, c := range []struct {
		name string
		ev   ledger.Evidence
		want []string
	}{
		{"full", full, []string{"lane ledger:lane/qmv-bias-sum/v1 ", "backend ledger:backend/cuda ", "runner ledger:runner/v1.4.0 gitCommit:" + strings.Repeat("c", 40)}},
		{"bare", base, []string{"lane ledger:lane/qmv-bias-sum/v1 ", "backend ledger:backend/cuda "}},
		{"runner commit not a hash", odd, []string{"lane ledger:lane/qmv-bias-sum/v1 ", "backend ledger:backend/cuda ", "runner  "}},
	} {
		t.Run(c.name, func(t *testing.T) {
			b, err := json.Marshal(ExportStatement(c.ev))
			if err != nil {
				t.Fatal(err)
			}
			var st attv1.Statement
			if err := protojson.Unmarshal(b, &st); err != nil {
				t.Fatalf("in-toto attestation library: %v\n%s", err, b)
			}
			if err := st.Validate(); err != nil {
				t.Fatalf("Statement.Validate: %v\n%s", err, b)
			}
			pb, _ := protojson.Marshal(st.GetPredicate())
			var tr trv0.TestResult
			if err := protojson.Unmarshal(pb, &tr); err != nil {
				t.Fatalf("test-result predicate: %v\n%s", err, pb)
			}
			var got []string
			for i, rd := range tr.GetConfiguration() {
				if err := rd.Validate(); err != nil {
					t.Fatalf("configuration[%d]: %v", i, err)
				}
				d := ""
				for k, v := range rd.GetDigest() {
					d = k + ":" + v
				}
				got = append(got, rd.GetName()+" "+rd.GetUri()+" "+d)
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Fatalf("configuration %q, want %q", got, c.want)
			}
			if c.name == "full" {
				dev := tr.GetConfiguration()[1].GetAnnotations().GetFields()["device"].GetStructValue().GetFields()
				if dev["model"].GetStringValue() != "NVIDIA H100" || dev["driver"].GetStringValue() != "550.54" || dev["cores"].GetNumberValue() != 132 {
					t.Fatalf("device annotation %v", tr.GetConfiguration()[1].GetAnnotations())
				}
			}
		})
	}
}
