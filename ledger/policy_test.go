package ledger

import (
	"strings"
	"testing"
	"time"
)

func TestPolicyRecordValidate(t *testing.T) {
	files := map[string][]byte{"keys/a.asc": []byte("key material")}
	good := PolicyRecord{Name: "release-signers", Policy: "version: 1\n", Files: files, AppliedAt: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)}
	good.Digest = PolicyDigest(good.Policy, good.Files)
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	if PolicyDigest(good.Policy, nil) == good.Digest || PolicyDigest(good.Policy, map[string][]byte{"keys/a.asc": []byte("other key")}) == good.Digest {
		t.Error("the digest does not cover the files")
	}
	if PolicyDigest(good.Policy, map[string][]byte{}) != PolicyDigest(good.Policy, nil) {
		t.Error("no files and an empty map digest differently")
	}
	for _, tc := range []struct {
		field string
		edit  func(p *PolicyRecord)
	}{
		{"name", func(p *PolicyRecord) { p.Name = "../etc/passwd" }},
		{"name", func(p *PolicyRecord) { p.Name = "/etc/policy.yaml" }},
		{"name", func(p *PolicyRecord) { p.Name = "Release" }},
		{"policy", func(p *PolicyRecord) { p.Policy = " \n" }},
		{"files", func(p *PolicyRecord) { p.Files = map[string][]byte{"": nil} }},
		{"applied_at", func(p *PolicyRecord) { p.AppliedAt = time.Time{} }},
		{"digest", func(p *PolicyRecord) { p.Files = map[string][]byte{"keys/a.asc": []byte("swapped key")} }},
		{"digest", func(p *PolicyRecord) { p.Digest = "sha256:" + strings.Repeat("0", 64) }},
	} {
		p := good
		tc.edit(&p)
		err := p.Validate()
		if e, ok := err.(*Error); !ok || e.Field != tc.field || e.Code != CodeInvalid {
			t.Errorf("%s: %v", tc.field, err)
		}
		if err != nil && strings.Contains(err.Error(), "key material") {
			t.Errorf("%s: the error quotes a file: %v", tc.field, err)
		}
	}
	body, err := CanonicalBody(&good)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := PrepareRecord(KindPolicy, body); err != nil {
		t.Errorf("a valid policy record: %v", err)
	}
	if EntryKey(KindPolicy, body) != "release-signers" {
		t.Errorf("policy key %q", EntryKey(KindPolicy, body))
	}
	if _, err := PrepareRecord(KindPolicy, []byte(`{"name":"x","digest":"sha256:00","policy":"v","applied_at":"2026-12-01T00:00:00Z","extra":1}`)); err == nil {
		t.Error("an unknown field in a policy record")
	}
}
