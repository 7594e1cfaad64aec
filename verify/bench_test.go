package verify

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ProtonMail/go-crypto/openpgp"
	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
)

// signedRepo is a generated repository of signed commits, half OpenPGP
// and half SSH, alternating, with the material git needs to check them.
type signedRepo struct {
	dir       string // the repository
	gnupgHome string // gpg home with the OpenPGP key imported, ultimately trusted
	signers   string // allowed-signers file
	head      plumbing.Hash
	opts      *Options
	n         int
}

// buildSignedRepo writes n signed commits into a fresh repository under dir.
func buildSignedRepo(tb testing.TB, dir string, n int) *signedRepo {
	tb.Helper()
	sr := &signedRepo{dir: filepath.Join(dir, "repo"), gnupgHome: filepath.Join(dir, "gnupg"), signers: filepath.Join(dir, "allowed_signers"), n: n}
	repo, err := git.PlainInit(sr.dir, false)
	if err != nil {
		tb.Fatal(err)
	}
	pgp := pgpKey(tb, "Release Bot", fixtureT0, 0)
	sshK := sshKey(tb)
	s := repo.Storer
	tree := storeRaw(tb, s, plumbing.TreeObject, nil)
	parent := ""
	for i := 0; i < n; i++ {
		at := fixtureT0.Add(time.Duration(i+1) * time.Minute)
		var b bytes.Buffer
		fmt.Fprintf(&b, "tree %s\n", tree)
		if parent != "" {
			fmt.Fprintf(&b, "parent %s\n", parent)
		}
		fmt.Fprintf(&b, "author Release Bot <release-bot@example.com> %d +0000\ncommitter Release Bot <release-bot@example.com> %d +0000\n\ncommit %d\n", at.Unix(), at.Unix(), i)
		var raw []byte
		if i%2 == 0 {
			raw = signObject("commit", b.Bytes(), pgpSigner(tb, pgp, at, 0))
		} else {
			raw = signObject("commit", b.Bytes(), sshSigner(tb, sshK, "git"))
		}
		parent = storeRaw(tb, s, plumbing.CommitObject, raw).String()
	}
	sr.head = plumbing.NewHash(parent)
	if err := s.SetReference(plumbing.NewHashReference("refs/heads/main", sr.head)); err != nil {
		tb.Fatal(err)
	}
	if err := s.SetReference(plumbing.NewSymbolicReference(plumbing.HEAD, "refs/heads/main")); err != nil {
		tb.Fatal(err)
	}
	line := "release-bot " + authorizedLine(sshK.PublicKey()) + "\n"
	if err := os.WriteFile(sr.signers, []byte(line), 0o644); err != nil {
		tb.Fatal(err)
	}
	as, err := ParseAllowedSigners([]byte(line))
	if err != nil {
		tb.Fatal(err)
	}
	sr.opts = &Options{Now: time.Now(), Keyring: openpgp.EntityList{pgp}, TrustedFingerprints: []string{fpr(pgp.PrimaryKey.Fingerprint)}, AllowedSigners: as}
	// The gpg side: import the public key and give it ultimate trust.
	var pub bytes.Buffer
	if err := pgp.Serialize(&pub); err != nil {
		tb.Fatal(err)
	}
	if err := os.MkdirAll(sr.gnupgHome, 0o700); err != nil {
		tb.Fatal(err)
	}
	// gpg starts an agent for the home; stop it when the home goes away.
	if tt, ok := tb.(*testing.T); ok {
		tt.Cleanup(sr.stopAgent)
	}
	if out, err := sr.gpg(&pub, "--batch", "--import"); err != nil {
		tb.Skipf("gpg --import failed (%v): %s", err, out)
	}
	trust := bytes.NewBufferString(fpr(pgp.PrimaryKey.Fingerprint) + ":6:\n")
	if out, err := sr.gpg(trust, "--batch", "--import-ownertrust"); err != nil {
		tb.Skipf("gpg --import-ownertrust failed (%v): %s", err, out)
	}
	return sr
}

// stopAgent stops the gpg-agent gpg may have started for sr.gnupgHome.
func (sr *signedRepo) stopAgent() {
	exec.Command("gpgconf", "--homedir", sr.gnupgHome, "--kill", "gpg-agent").Run()
}

func (sr *signedRepo) gpg(stdin io.Reader, args ...string) ([]byte, error) {
	cmd := exec.Command("gpg", args...)
	cmd.Env = append(os.Environ(), "GNUPGHOME="+sr.gnupgHome)
	if stdin != nil {
		cmd.Stdin = stdin
	}
	return cmd.CombinedOutput()
}

// gitLetters runs git log --format='%H %G?' and returns the letters by id.
func (sr *signedRepo) gitLetters(tb testing.TB) map[string]string {
	tb.Helper()
	cmd := exec.Command("git", "-c", "gpg.ssh.allowedSignersFile="+sr.signers, "log", "--format=%H %G?", "main")
	cmd.Dir = sr.dir
	cmd.Env = append(os.Environ(), "GNUPGHOME="+sr.gnupgHome, "GIT_CONFIG_NOSYSTEM=1", "HOME="+filepath.Dir(sr.dir))
	out, err := cmd.Output()
	if err != nil {
		tb.Fatalf("git log: %v", err)
	}
	m := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		id, letter, _ := strings.Cut(l, " ")
		m[id] = letter
	}
	return m
}

// verifyAll walks the history from head and verifies every commit with
// workers goroutines, returning the letters by id.
func (sr *signedRepo) verifyAll(tb testing.TB, workers int) map[string]string {
	repo, err := git.PlainOpen(sr.dir)
	if err != nil {
		tb.Fatal(err)
	}
	var objs []*Object
	for h := sr.head; ; {
		o, err := readObject(repo, h)
		if err != nil {
			tb.Fatal(err)
		}
		objs = append(objs, o)
		if len(o.Parents) == 0 {
			break
		}
		h = plumbing.NewHash(o.Parents[0])
	}
	letters := make([]string, len(objs))
	var wg sync.WaitGroup
	next := make(chan int, len(objs))
	for i := range objs {
		next <- i
	}
	close(next)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				letters[i] = VerifyParsed(objs[i], sr.opts).Letter
			}
		}()
	}
	wg.Wait()
	m := make(map[string]string, len(objs))
	for i, o := range objs {
		m[o.ID] = letters[i]
	}
	return m
}

func haveGitAndGPG(tb testing.TB) {
	tb.Helper()
	for _, tool := range []string{"git", "gpg", "ssh-keygen"} {
		if _, err := exec.LookPath(tool); err != nil {
			tb.Skipf("%s not installed: skipping the comparison with git", tool)
		}
	}
}

func compareLetters(tb testing.TB, ours, gits map[string]string, n int) {
	tb.Helper()
	if len(ours) != n || len(gits) != n {
		tb.Fatalf("verified %d commits, git listed %d, want %d", len(ours), len(gits), n)
	}
	for id, l := range gits {
		if ours[id] != l {
			tb.Fatalf("commit %s: ours %s, git %s", id, ours[id], l)
		}
	}
}

// TestGeneratedRepoMatchesGit is the small, always-run version of the
// benchmark's verdict check: 40 commits, half OpenPGP, half SSH.
func TestGeneratedRepoMatchesGit(t *testing.T) {
	haveGitAndGPG(t)
	sr := buildSignedRepo(t, t.TempDir(), 40)
	gits := sr.gitLetters(t)
	compareLetters(t, sr.verifyAll(t, 2), gits, 40)
	for id, l := range gits {
		if l != "G" {
			t.Fatalf("git says %s for %s; the generated commits must all be G", l, id)
		}
	}
}

var (
	benchOnce sync.Once
	benchRepo *signedRepo
	benchDir  string
)

// benchSignedRepo generates the benchmark repository once per run
// (LEDGER_BENCH_COMMITS commits, default 10000) in a temporary directory
// removed by TestMain.
func benchSignedRepo(b *testing.B) *signedRepo {
	benchOnce.Do(func() {
		n := 10000
		if v, err := strconv.Atoi(os.Getenv("LEDGER_BENCH_COMMITS")); err == nil && v > 0 {
			n = v
		}
		dir, err := os.MkdirTemp("", "verify-bench")
		if err != nil {
			b.Fatal(err)
		}
		benchDir = dir
		start := time.Now()
		benchRepo = buildSignedRepo(b, dir, n)
		b.Logf("generated %d signed commits in %s", n, time.Since(start).Round(time.Millisecond))
	})
	if benchRepo == nil {
		b.Skip("benchmark repository could not be generated")
	}
	return benchRepo
}

func TestMain(m *testing.M) {
	code := m.Run()
	if benchDir != "" {
		if benchRepo != nil {
			benchRepo.stopAgent()
		}
		os.RemoveAll(benchDir)
	}
	os.Exit(code)
}

// BenchmarkVerifyRepository verifies every commit of the generated
// repository (reading each object from the store, checking its id, parsing
// and verifying), sequentially and with one worker per CPU.
func BenchmarkVerifyRepository(b *testing.B) {
	sr := benchSignedRepo(b)
	for _, workers := range []int{1, runtime.GOMAXPROCS(0)} {
		b.Run(fmt.Sprintf("workers=%d", workers), func(b *testing.B) {
			for b.Loop() {
				sr.verifyAll(b, workers)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(sr.n), "ns/commit")
		})
	}
}

// BenchmarkGitLogSignatures runs git log --format='%H %G?' over the same
// repository (git spawns gpg or ssh-keygen per commit) and checks that
// git's letters equal ours.
func BenchmarkGitLogSignatures(b *testing.B) {
	haveGitAndGPG(b)
	sr := benchSignedRepo(b)
	var gits map[string]string
	for b.Loop() {
		gits = sr.gitLetters(b)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(sr.n), "ns/commit")
	b.StopTimer()
	compareLetters(b, sr.verifyAll(b, 1), gits, sr.n)
}
