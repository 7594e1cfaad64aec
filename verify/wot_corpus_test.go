package verify

import (
	"bufio"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// readOwnertrust reads gpg --export-ownertrust lines (FPR:LEVEL:) and
// returns the fingerprints.
func readOwnertrust(t *testing.T, path string) []string { return readOwnertrustB(t, path) }

func readOwnertrustB(t testing.TB, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		if l == "" || l[0] == '#' {
			continue
		}
		fp, _, _ := strings.Cut(l, ":")
		out = append(out, fp)
	}
	return out
}

// unixField parses "<seconds> <zone>" as the corpus records signer times.
func unixField(t *testing.T, s string) time.Time {
	t.Helper()
	f := strings.Fields(s)
	sec, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil {
		t.Fatalf("time %q: %v", s, err)
	}
	return time.Unix(sec, 0).UTC()
}

// TestCorpusWebOfTrust checks the Arch Linux keyring commits and tags
// against gpg's letters (via git) under each trust setup of the corpus:
// no ownertrust, the main keys ultimately trusted (their certifications
// make packager keys valid), the main keys as introducers (pacman's model,
// where git reads gpg's marginal validity as G), the signer's own key
// trusted, and the same at commit time. The certification path named
// must start at a main key and end at the signer's primary key.
func TestCorpusWebOfTrust(t *testing.T) {
	c := corpusDir(t)
	dir := filepath.Join(c, "wot")
	ring, warns, err := LoadKeyringWarn(filepath.Join(dir, "keys", "archlinux-keyring-subset.gpg"))
	if err != nil {
		t.Fatal(err)
	}
	if len(ring) != 41 {
		t.Fatalf("keyring: %d certificates, want 41 (warnings %v)", len(ring), warns)
	}
	main := readOwnertrust(t, filepath.Join(dir, "keys", "ownertrust-main-ultimate.txt"))
	if len(main) != 12 {
		t.Fatalf("%d main keys, want 12", len(main))
	}
	var intro []Introducer
	for _, f := range main {
		intro = append(intro, Introducer{Fingerprint: f})
	}
	isMain := map[string]bool{}
	for _, f := range main {
		isMain[normFpr(f)] = true
	}
	for _, set := range []struct {
		dir, kind, idCol, timeCol string
	}{
		{dir, "commit", "sha", "committer_time"},
		{filepath.Join(dir, "tags"), "tag", "tag_sha", "tagger_time"},
	} {
		rows := readTSV(t, filepath.Join(set.dir, "verdicts.tsv"))
		objDir := filepath.Join(set.dir, "commits")
		if set.kind == "tag" {
			objDir = filepath.Join(set.dir, "objects")
		}
		requireAllListed(t, objDir, len(rows))
		counts := map[string]int{}
		for _, row := range rows {
			id := row[set.idCol]
			raw := readFile(t, filepath.Join(objDir, id+"."+set.kind))
			signedAt := unixField(t, row[set.timeCol])
			configs := []struct {
				col  string
				opts Options
			}{
				{"verdict_notrust", Options{Now: corpusNow}},
				{"verdict_main_ultimate", Options{Now: corpusNow, TrustedFingerprints: main}},
				{"verdict_pacman_marginal", Options{Now: corpusNow, Introducers: intro}},
				{"verdict_signer_ultimate", Options{Now: corpusNow, TrustedFingerprints: []string{row["primary_key_fpr"]}}},
				{"verdict_notrust_at_commit_time", Options{Now: signedAt}},
				{"verdict_main_ultimate_at_commit_time", Options{Now: signedAt, TrustedFingerprints: main}},
				{"verdict_signer_ultimate_at_commit_time", Options{Now: signedAt, TrustedFingerprints: []string{row["primary_key_fpr"]}}},
			}
			for _, cfg := range configs {
				want := row[cfg.col]
				if want == "" {
					continue
				}
				opts := cfg.opts
				opts.Keyring, opts.ExpectedID = ring, id
				if cfg.col == "verdict_signer_ultimate" || cfg.col == "verdict_signer_ultimate_at_commit_time" {
					if row["primary_key_fpr"] == "" {
						opts.TrustedFingerprints = nil
					}
				}
				r, err := VerifyObject(raw, set.kind, &opts)
				counts[cfg.col+"/"+want]++
				if r.Letter != want {
					t.Errorf("%s %s [%s]: letter %s, git %s (%v)", set.kind, id, cfg.col, r.Letter, want, err)
					continue
				}
				checkLetterErr(t, id+" "+cfg.col, r, err)
				if r.Letter == "G" && (cfg.col == "verdict_main_ultimate" || cfg.col == "verdict_pacman_marginal") && !isMain[r.PrimaryKeyOr()] {
					p := r.CertificationPath
					if len(p) == 0 || !isMain[p[0].Certifier] || p[len(p)-1].Certified != normFpr(row["primary_key_fpr"]) {
						t.Errorf("%s %s [%s]: certification path %+v does not lead from a main key to %s", set.kind, id, cfg.col, p, row["primary_key_fpr"])
					} else if !strings.Contains(row["main_certs_good"], p[0].Certifier[24:]) {
						t.Errorf("%s %s [%s]: path starts at %s, which gpg does not list among the good main certifications %s", set.kind, id, cfg.col, p[0].Certifier, row["main_certs_good"])
					}
				}
			}
		}
		t.Logf("%s: %d objects %v", set.kind, len(rows), counts)
	}
}

// BenchmarkWebOfTrust verifies the Arch keyring corpus commits with the
// main keys trusted (validity by certification, the web-of-trust path) and
// with each signer's own key trusted (no path search), per commit.
func BenchmarkWebOfTrust(b *testing.B) {
	c := corpusDir(b)
	dir := filepath.Join(c, "wot")
	ring, _, err := LoadKeyringWarn(filepath.Join(dir, "keys", "archlinux-keyring-subset.gpg"))
	if err != nil {
		b.Fatal(err)
	}
	main := readOwnertrustB(b, filepath.Join(dir, "keys", "ownertrust-main-ultimate.txt"))
	rows := readTSV(b, filepath.Join(dir, "verdicts.tsv"))
	type obj struct {
		raw    []byte
		signer string
	}
	var objs []obj
	for _, row := range rows {
		objs = append(objs, obj{readFile(b, filepath.Join(dir, "commits", row["sha"]+".commit")), row["primary_key_fpr"]})
	}
	for _, mode := range []string{"certified", "direct"} {
		b.Run(mode, func(b *testing.B) {
			for b.Loop() {
				for _, o := range objs {
					opts := &Options{Now: corpusNow, Keyring: ring, TrustedFingerprints: main}
					if mode == "direct" {
						opts.TrustedFingerprints = []string{o.signer}
					}
					VerifyObject(o.raw, "commit", opts)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(objs)), "ns/commit")
		})
	}
}
