package web

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/evidence-ledger/ledger/ingest"
	"github.com/evidence-ledger/ledger/ledger"
)

// TestSigstorePublicKeyBundleAPI posts sigstore-go's public-key bundle (a
// managed key's message signature, an RFC 3161 timestamp, no log entry)
// to POST /api/v1/evidence on servers whose --sigstore-policy names that
// key: with timestamp_only it is recorded (201); without, it is refused
// (401) naming the missing log entry; a policy naming a certificate
// identity refuses it naming the public key. Nothing is appended on a
// refusal.
func TestSigstorePublicKeyBundleAPI(t *testing.T) {
	dir := filepath.Join("..", "..", "shared", "corpus", "x509", "sigstore-go")
	body, err := os.ReadFile(filepath.Join(dir, "public-key-validity.sigstore.json"))
	if err != nil {
		t.Skipf("sigstore-go corpus absent (%v): ../shared/corpus/x509/sigstore-go", err)
	}
	key, err := os.ReadFile(filepath.Join(dir, "public-key-validity.pem"))
	if err != nil {
		t.Fatal(err)
	}
	indented := "      " + strings.ReplaceAll(strings.TrimSpace(string(key)), "\n", "\n      ")
	keys := "public_keys:\n  - name: release-key\n    pem: |\n" + indented + "\n"
	query := ingestQuery + "&artifact=hello=sha256:6ae8a75555209fd6c44157c0aed8016e763ff435a19cf186f76863140143ff72"
	for _, tc := range []struct {
		name, policy string
		code         int
		reason       string
	}{
		{"key and timestamp_only", keys + "rules:\n  - {public_key: release-key, timestamp_only: true}\n", http.StatusCreated, ""},
		{"key, log entry required", keys + "rules:\n  - {public_key: release-key}\n", http.StatusUnauthorized, "no transparency-log entry, and the lane's policy requires one"},
		{"certificate identity", "rules:\n  - {issuer: https://x.example, san_regexp: '.*', timestamp_only: true}\n", http.StatusUnauthorized, "allows no public key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pf := filepath.Join(t.TempDir(), "policy.yaml")
			if err := os.WriteFile(pf, []byte(tc.policy), 0o644); err != nil {
				t.Fatal(err)
			}
			cfg, err := ingest.LoadSigstoreConfig(filepath.Join(dir, "trusted-roots", "public-key-validity.json"), pf)
			if err != nil {
				t.Fatal(err)
			}
			e := newAPIEnv(t, Config{Sigstore: cfg})
			before := e.size(t)
			code, out := e.post(t, query, ingest.MediaSigstoreBundle, body)
			if code != tc.code || !strings.Contains(string(out), tc.reason) {
				t.Fatalf("%d %.400s; want %d naming %q", code, out, tc.code, tc.reason)
			}
			if tc.code == http.StatusCreated {
				if e.size(t) != before+2 {
					t.Fatalf("recorded %d entries: %.400s", e.size(t)-before, out)
				}
				var d ingest.Details
				if err := ledger.DecodeStrict(e.evidenceOf(t, out).Details, &d); err != nil {
					t.Fatal(err)
				}
				if d.Identity == nil || d.Identity.Kind != "sigstore-public-key" || d.Identity.Name != "release-key" {
					t.Fatalf("runner identity %+v, want the policy's key release-key", d.Identity)
				}
			} else if e.size(t) != before {
				t.Fatalf("a refusal appended %d entries", e.size(t)-before)
			}
		})
	}
}
