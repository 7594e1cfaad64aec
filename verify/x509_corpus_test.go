package verify

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/evidence-ledger/ledger/ledger"
)

func TestCorpusX509(t *testing.T) {
	c := corpusDir(t)
	dir := filepath.Join(c, "x509")
	tr, err := LoadTrustedRoot(filepath.Join(dir, "trusted-roots", "root-signing", "trusted_root.json"))
	if err != nil {
		t.Fatal(err)
	}
	rows := readTSV(t, filepath.Join(dir, "verdicts.tsv"))
	kinds := map[string]int{}
	for _, row := range rows {
		sha := row["sha"]
		raw := readFile(t, filepath.Join(dir, "commits", sha+".commit"))
		kinds[row["kind"]]++
		// Without any trust anchor: the CMS signature is good, the CA unknown.
		bare, err := VerifyObject(raw, "commit", &Options{Now: corpusNow, ExpectedID: sha})
		// The letter is git's (git_gpgsm_verdict: N for gitsign, which
		// gpgsm cannot handle, U for S/MIME); the verdict is our own.
		if bare.Scheme != "x509" || bare.Letter != row["git_gpgsm_verdict"] || bare.Verdict != ledger.VerdictUnknownKey || !errors.Is(err, ErrUnknownCA) {
			t.Errorf("%s (%s) without roots: scheme %s letter %s (git %s) verdict %s err %v; want x509, git's letter, unknown_key, ErrUnknownCA",
				sha, row["kind"], bare.Scheme, bare.Letter, row["git_gpgsm_verdict"], bare.Verdict, err)
		}
		if bare.Signer != row["leaf_cert_san"] {
			t.Errorf("%s: SAN %q, want %q", sha, bare.Signer, row["leaf_cert_san"])
		}
		if got, want := bare.TlogEntry, row["embedded_rekor_entry_1.3.6.1.4.1.57264.3.1"] == "yes"; got != want {
			t.Errorf("%s: tlog entry %v, want %v", sha, got, want)
		}
		r, err := VerifyObject(raw, "commit", &Options{Now: corpusNow, ExpectedID: sha, TrustedRoot: tr})
		switch row["kind"] {
		case "gitsign":
			if r.Letter != "G" || err != nil || !r.ChainVerified {
				t.Errorf("%s gitsign: letter %s err %v; want G against the Sigstore trusted root", sha, r.Letter, err)
			}
			if r.Issuer != row["fulcio_oidc_issuer"] {
				t.Errorf("%s: OIDC issuer %q, want %q", sha, r.Issuer, row["fulcio_oidc_issuer"])
			}
			if r.SignedAt.Before(mustTime(t, row["leaf_not_before"])) || r.SignedAt.After(mustTime(t, row["leaf_not_after"])) {
				t.Errorf("%s: signed at %s outside the leaf validity %s..%s", sha, r.SignedAt, row["leaf_not_before"], row["leaf_not_after"])
			}
		case "smime":
			// The Sigstore root does not cover S/MIME CAs: still unknown CA.
			if r.Letter != row["git_gpgsm_verdict"] || !errors.Is(err, ErrUnknownCA) {
				t.Errorf("%s smime: letter %s err %v; want %s ErrUnknownCA", sha, r.Letter, err, row["git_gpgsm_verdict"])
			}
			if r.Key != row["git_gpgsm_key"] {
				t.Errorf("%s smime: key %s, want gpgsm's %s", sha, r.Key, row["git_gpgsm_key"])
			}
		default:
			t.Errorf("%s: unknown kind %q", sha, row["kind"])
		}
	}
	t.Logf("x509 commits by kind: %v", kinds)
	requireAllListed(t, filepath.Join(dir, "commits"), len(rows))
}
