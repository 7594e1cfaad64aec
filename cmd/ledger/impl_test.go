package main

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// refAdapterConfig builds cmd/ledger-ref-adapter and writes an
// implementation file with "reference" (original: "reference-narrow").
func refAdapterConfig(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "ledger-ref-adapter")
	if out, err := exec.Command("go", "build", "-o", bin, "../ledger-ref-adapter").CombinedOutput(); err != nil {
		t.Fatalf("build the reference adapter: %v\n%s", err, out)
	}
	entry := func(name, variant, commit, extra string) string {
		return fmt.Sprintf("  - name: %s\n    command: [%q, --variant, %s]\n    backend: cpu\n    repository: example.com/runtime\n    commit: %s\n    tree: %s\n    artifacts: {ledger-ref-adapter: ledger-ref-adapter}\n%s",
			name, bin, variant, commit, strings.Repeat("e", 40), extra)
	}
	cfg := "implementations:\n" + entry("reference", "promoted", strings.Repeat("c", 40), "    original: reference-narrow\n") +
		entry("reference-narrow", "narrow", strings.Repeat("d", 40), "")
	path := filepath.Join(dir, "implementations.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestRunImplReference: `ledger run --impl reference` runs both qmv lanes
// through the protocol: 216/216 and 5508/5508 passed with the narrow
// control caught, the original build recorded as failed negative evidence
// (156/216), exit 0; the original alone as the implementation exits 1; an
// unknown implementation or an allocator lane exits 2.
func TestRunImplReference(t *testing.T) {
	cfg := refAdapterConfig(t)
	db := filepath.Join(t.TempDir(), "l.db")
	out, errOut, code := runBin(t, "", "--db", db, "run", "--impl", "reference", "--impls", cfg)
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	for _, want := range []string{
		"reference         impl      qmv-bias-sum/v1        216/216    caught   passed",
		"reference-narrow  original  qmv-bias-sum/v1        156/216    caught   failed",
		"reference         impl      qmv-bias-sum-paths/v1  5508/5508  caught   passed",
		"recorded 4 evidence records",
	} {
		if !strings.Contains(out, want) {
			t.Fatalf("output lacks %q:\n%s", want, out)
		}
	}
	if out, _, code := runBin(t, "", "--db", db, "audit"); code != 0 {
		t.Fatalf("audit: %s", out)
	}
	out, _, code = runBin(t, "", "--db", db, "run", "--impl", "reference-narrow", "--impls", cfg, "--lane", "qmv-bias-sum", "--no-record")
	if code != 1 || !strings.Contains(out, "156/216") {
		t.Fatalf("narrow as the implementation: exit %d\n%s", code, out)
	}
	if _, errOut, code := runBin(t, "", "--db", db, "run", "--impl", "nope", "--impls", cfg); code != 2 || !strings.Contains(errOut, `unknown implementation "nope"`) {
		t.Fatalf("unknown implementation: exit %d %s", code, errOut)
	}
	if _, errOut, code := runBin(t, "", "--db", db, "run", "--impl", "reference", "--impls", cfg, "--lane", "alloc-snapshot"); code != 2 || !strings.Contains(errOut, "adapter protocol") {
		t.Fatalf("allocator lane: exit %d %s", code, errOut)
	}
}

// TestImplEvidenceCountsForLaneGate: evidence of `ledger run --impl` is
// about the implementation's pins, so a release that binds the
// implementation's commit, tree and artifact digest is ready once the
// lane passed; a release binding another digest of that artifact keeps
// the gate open and says why.
func TestImplEvidenceCountsForLaneGate(t *testing.T) {
	cfg := refAdapterConfig(t)
	digest, err := fileSHA256(filepath.Join(filepath.Dir(cfg), "ledger-ref-adapter"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	db := filepath.Join(dir, "l.db")
	release := func(version, d string) string {
		p := filepath.Join(dir, version+".yaml")
		y := fmt.Sprintf(`version: %s
components:
  - name: runtime
    repository: example.com/runtime
    reviewed: %s
    head: %s
    tree: %s
artifacts:
  ledger-ref-adapter: %s
gates:
  - id: qmv-discriminator
    kind: lane
    lane: qmv-bias-sum/v1
    component: runtime
    backends: [cpu]
    artifacts: [ledger-ref-adapter]
    cases: 216
`, version, strings.Repeat("c", 40), strings.Repeat("c", 40), strings.Repeat("e", 40), d)
		if err := os.WriteFile(p, []byte(y), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, r := range [][2]string{{"1.0.0", digest}, {"1.0.1", "sha256:" + strings.Repeat("0", 64)}} {
		if out, errOut, code := runBin(t, "", "--db", db, "release", "apply", release(r[0], r[1])); code != 0 {
			t.Fatalf("apply %s: %d %s %s", r[0], code, out, errOut)
		}
	}
	if _, _, code := runBin(t, "", "--db", db, "release", "check", "1.0.0"); code != 1 {
		t.Fatalf("check before the run: exit %d, want 1", code)
	}
	if out, errOut, code := runBin(t, "", "--db", db, "run", "--impl", "reference", "--impls", cfg, "--lane", "qmv-bias-sum"); code != 0 {
		t.Fatalf("run: %d\n%s\n%s", code, out, errOut)
	}
	if out, errOut, code := runBin(t, "", "--db", db, "release", "check", "1.0.0"); code != 0 {
		t.Fatalf("check 1.0.0 after the run: exit %d\n%s%s", code, out, errOut)
	}
	out, errOut, code := runBin(t, "", "--db", db, "release", "check", "1.0.1")
	if code != 1 || !strings.Contains(out+errOut, "other artifact ledger-ref-adapter") {
		t.Fatalf("check 1.0.1: exit %d\n%s%s", code, out, errOut)
	}
}

func fileSHA256(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	s := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(s[:]), nil
}
