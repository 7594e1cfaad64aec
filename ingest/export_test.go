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
