package verify

import (
	"encoding/asn1"
	"encoding/json"
	"encoding/pem"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/digitorus/pkcs7"
	"github.com/evidence-ledger/ledger/ledger"
	rekorpb "github.com/sigstore/protobuf-specs/gen/pb-go/rekor/v1"
	"google.golang.org/protobuf/proto"
)

// TestCorpusGitsignTlog verifies every embedded Rekor entry of the x509
// corpus offline against the public-good trusted root (both gitsign
// layouts occur), checks that the policy's require_tlog follows, and that
// an entry does not verify for another signature (the leaf certificate of
// another commit) nor against a trusted root without that log.
func TestCorpusGitsignTlog(t *testing.T) {
	c := corpusDir(t)
	dir := filepath.Join(c, "x509")
	tr, err := LoadTrustedRoot(filepath.Join(dir, "trusted-roots", "root-signing", "trusted_root.json"))
	if err != nil {
		t.Fatal(err)
	}
	// The same root without its transparency logs.
	var doc map[string]any
	if err := json.Unmarshal(readFile(t, filepath.Join(dir, "trusted-roots", "root-signing", "trusted_root.json")), &doc); err != nil {
		t.Fatal(err)
	}
	delete(doc, "tlogs")
	b, _ := json.Marshal(doc)
	noLogs := filepath.Join(t.TempDir(), "trusted_root.json")
	if err := os.WriteFile(noLogs, b, 0o600); err != nil {
		t.Fatal(err)
	}
	gh, err := LoadTrustedRoot(noLogs)
	if err != nil {
		t.Fatal(err)
	}
	rule := &PolicyRule{Schemes: []string{"x509"}, X509: &X509Trust{TrustedRoot: "r", RequireTlog: true, Identities: []X509Identity{{SAN: "*", Issuer: "*"}}}}
	var p7s []*pkcs7.PKCS7
	withEntry, verified := 0, map[string]int{}
	for _, row := range readTSV(t, filepath.Join(dir, "verdicts.tsv")) {
		if row["kind"] != "gitsign" {
			continue
		}
		raw := readFile(t, filepath.Join(dir, "commits", row["sha"]+".commit"))
		r, _ := VerifyObject(raw, "commit", &Options{Now: corpusNow, ExpectedID: row["sha"], TrustedRoot: tr})
		rule.X509.Identities[0] = X509Identity{SAN: "*", Issuer: r.Issuer}
		d, derr := rule.Decide(r)
		if row["embedded_rekor_entry_1.3.6.1.4.1.57264.3.1"] != "yes" {
			if r.Tlog != nil || r.TlogError != "" || d == ledger.DecisionTrusted {
				t.Errorf("%s: no entry, yet tlog %+v / %q, require_tlog %s", row["sha"], r.Tlog, r.TlogError, d)
			}
			continue
		}
		withEntry++
		if r.Tlog == nil || len(r.Tlog.Verified) == 0 || !r.Tlog.CertificateValid {
			t.Errorf("%s: embedded entry not verified: %+v %s", row["sha"], r.Tlog, r.TlogError)
			continue
		}
		for _, v := range r.Tlog.Verified {
			verified[v]++
		}
		if d != ledger.DecisionTrusted {
			t.Errorf("%s: require_tlog decided %s (%v)", row["sha"], d, derr)
		}
		// The same entry against a root without the log.
		rg, _ := VerifyObject(raw, "commit", &Options{Now: corpusNow, TrustedRoot: gh})
		if rg.Tlog != nil || rg.TlogError == "" {
			t.Errorf("%s: entry verified against a trusted root without logs: %+v", row["sha"], rg.Tlog)
		}
		o, err := ParseObject(raw, "commit", "")
		if err != nil {
			t.Fatal(err)
		}
		blk, _ := pem.Decode(o.Signature)
		p7, err := pkcs7.Parse(blk.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		p7s = append(p7s, p7)
	}
	if withEntry != 7 {
		t.Errorf("%d gitsign commits embed an entry, want 7", withEntry)
	}
	t.Logf("entries verified: %v", verified)
	// Tampered entries (protobuf layout): a changed log index or
	// integration time breaks the signed entry timestamp, a changed proof
	// hash the inclusion proof; the policy then refuses.
	for i, p7 := range p7s {
		leaf := p7.GetOnlySigner()
		for _, tc := range []struct {
			name   string
			change func(*rekorpb.TransparencyLogEntry)
			lost   string
		}{
			{"log index", func(e *rekorpb.TransparencyLogEntry) { e.LogIndex++ }, "set"},
			{"integrated time", func(e *rekorpb.TransparencyLogEntry) { e.IntegratedTime -= 3600 }, "set"},
			{"proof hash", func(e *rekorpb.TransparencyLogEntry) { e.InclusionProof.Hashes[0][0] ^= 1 }, "inclusion_proof"},
		} {
			restore, ok := tamperProto(t, p7, tc.change)
			if !ok {
				continue // the legacy layout
			}
			e, err := verifyTlog(p7, leaf, tr)
			restore()
			if e != nil && slices.Contains(e.Verified, tc.lost) {
				t.Errorf("entry %d with a changed %s: %s still verified (%+v)", i, tc.name, tc.lost, e)
			}
			if tc.lost == "set" && e != nil && e.CertificateValid {
				t.Errorf("entry %d with a changed %s: integration time still counted as authenticated", i, tc.name)
			}
			// The other check still holds: the change is seen by the one
			// that covers it, not by a parse failure.
			kept := map[string]string{"set": "inclusion_proof", "inclusion_proof": "set"}[tc.lost]
			if e == nil || !slices.Contains(e.Verified, kept) {
				t.Errorf("entry %d with a changed %s: %s no longer verifies either (%+v, %v)", i, tc.name, kept, e, err)
			}
		}
	}
	// Binding: an entry checked with another signature's certificate fails.
	for i := range p7s {
		other := p7s[(i+1)%len(p7s)].GetOnlySigner()
		if e, err := verifyTlog(p7s[i], other, tr); err == nil {
			t.Errorf("entry %d verified with another commit's certificate: %+v", i, e)
		} else if strings.Contains(err.Error(), "no Sigstore") {
			t.Errorf("entry %d: %v", i, err)
		}
	}
}

// tamperProto changes the embedded TransparencyLogEntry of p7 in place and
// returns a function restoring it; false when p7 has the legacy layout.
func tamperProto(t *testing.T, p7 *pkcs7.PKCS7, change func(*rekorpb.TransparencyLogEntry)) (func(), bool) {
	t.Helper()
	attrs := p7.Signers[0].UnauthenticatedAttributes
	for i := range attrs {
		if !attrs[i].Type.Equal(oidRekorEntry) || len(attrs[i].Value.Bytes) == 0 || attrs[i].Value.Bytes[0] != asn1.TagOctetString {
			continue
		}
		orig := attrs[i].Value.Bytes
		tle, err := protoEntry(orig)
		if err != nil {
			t.Fatal(err)
		}
		change(tle)
		b, err := proto.Marshal(tle)
		if err != nil {
			t.Fatal(err)
		}
		der, err := asn1.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		attrs[i].Value.Bytes = der
		return func() { attrs[i].Value.Bytes = orig }, true
	}
	return nil, false
}
