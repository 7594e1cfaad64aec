package verify

import (
	"bytes"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/hiddeco/sshsig"
)

// TestCorpusFIDO checks the FIDO-signed commits and tags of ssh-fido/
// against git's letters and principals, and the flags and counter against
// the ones the corpus decoded from each signature; the namespace-"file"
// signature made with the same FIDO key verifies in its own namespace.
func TestCorpusFIDO(t *testing.T) {
	c := corpusDir(t)
	for _, repo := range []struct{ name, signers string }{
		{"bdd__runitor", "ALLOWED_SIGNERS"},
		{"Jookia__gitsshkey", "allowed_signers"},
	} {
		dir := filepath.Join(c, "ssh-fido", repo.name)
		as, err := LoadAllowedSigners(filepath.Join(dir, repo.signers))
		if err != nil {
			t.Fatal(err)
		}
		check := func(kind, id, want, principal, key, flags, counter string, r Result, err error) {
			if r.Letter != want || r.Signer != principal || r.Key != key {
				t.Errorf("%s %s %s: %s %q %s, git %s %q %s (%v)", repo.name, kind, id, r.Letter, r.Signer, r.Key, want, principal, key, err)
			}
			checkLetterErr(t, id, r, err)
			got := ""
			if r.SK != nil {
				got = fmt.Sprintf("%#02x/%d", r.SK.Flags, r.SK.Counter)
			}
			if wantSK := fmt.Sprintf("%s/%s", flags, counter); flags != "" && got != wantSK {
				t.Errorf("%s %s %s: sk flags/counter %s, want %s", repo.name, kind, id, got, wantSK)
			} else if flags == "" && r.SK != nil {
				t.Errorf("%s %s %s: sk fields %+v on a plain key", repo.name, kind, id, r.SK)
			}
		}
		rows := readTSV(t, filepath.Join(dir, "verdicts.tsv"))
		requireAllListed(t, filepath.Join(dir, "commits"), len(rows))
		for _, row := range rows {
			raw := readFile(t, filepath.Join(dir, "commits", row["sha"]+".commit"))
			r, err := VerifyObject(raw, "commit", &Options{Now: corpusNow, AllowedSigners: as, ExpectedID: row["sha"]})
			flags := row["fido_flags"]
			if flags != "" {
				flags = fmt.Sprintf("%#02x", mustHexByte(t, flags))
			}
			check("commit", row["sha"], row["verdict"], row["principal"], row["key_fingerprint"], flags, row["fido_counter"], r, err)
		}
		tagDir := filepath.Join(dir, "tags")
		if !fileExists(tagDir) {
			continue
		}
		tags := readTSV(t, filepath.Join(tagDir, "verdicts.tsv"))
		requireAllListed(t, filepath.Join(tagDir, "objects"), len(tags))
		for _, row := range tags {
			raw := readFile(t, filepath.Join(tagDir, "objects", row["tag_sha"]+".tag"))
			r, err := VerifyObject(raw, "tag", &Options{Now: corpusNow, AllowedSigners: as, ExpectedID: row["tag_sha"]})
			check("tag", row["tag_sha"], row["verdict"], row["signer"], row["key"], fmt.Sprintf("%#02x", mustHexByte(t, row["fido_flags"])), row["fido_counter"], r, err)
		}
	}
	// The namespace-"file" signature: good in its namespace with the sk key.
	fs := filepath.Join(c, "ssh-fido", "Jookia__gitsshkey", "file-signature")
	sig, err := sshsig.Unarmor(readFile(t, filepath.Join(fs, "TEST_FILE.sig")))
	if err != nil {
		t.Fatal(err)
	}
	data := readFile(t, filepath.Join(fs, "TEST_FILE"))
	pub := skAware(sig.PublicKey)
	if err := sshsig.Verify(bytes.NewReader(data), sig, pub, sig.HashAlgorithm, "file"); err != nil {
		t.Errorf("file signature: %v", err)
	}
	if sk, ok := pub.(*skKey); !ok || sk.last == nil || !sk.last.UserPresent {
		t.Errorf("file signature: sk fields not reported")
	}
	// As a git signature (namespace "git") it is bad.
	o := &Object{ID: "f", Type: "commit", Payload: data, Signature: readFile(t, filepath.Join(fs, "TEST_FILE.sig")), Format: "ssh"}
	if r := VerifyParsed(o, &Options{}); r.Letter != "B" || r.Verdict != ledger.VerdictBad {
		t.Errorf("file signature as a git signature: %s %s, want B", r.Letter, r.Verdict)
	}
}

func mustHexByte(t *testing.T, s string) byte {
	t.Helper()
	var b byte
	if _, err := fmt.Sscanf(s, "0x%02x", &b); err != nil {
		t.Fatalf("flags %q: %v", s, err)
	}
	return b
}
