package verify

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// gitLab is a scratch repository, a gpg home and a directory for keys,
// where a test builds objects with the real tools and asks git for its
// verdict on them.
type gitLab struct {
	t         *testing.T
	dir       string // scratch directory for keys and signatures
	repo      string // the git repository
	gnupgHome string
	tree      string // the empty tree, written to the repository
}

// needTools skips the test, naming the tool, when one is not installed.
func needTools(t *testing.T, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed: skipping the comparison with git (%v)", tool, err)
		}
	}
}

func newGitLab(t *testing.T) *gitLab {
	t.Helper()
	needTools(t, "git")
	d := t.TempDir()
	l := &gitLab{t: t, dir: d, repo: filepath.Join(d, "repo"), gnupgHome: filepath.Join(d, "gnupg")}
	if err := os.MkdirAll(l.gnupgHome, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { exec.Command("gpgconf", "--homedir", l.gnupgHome, "--kill", "gpg-agent").Run() })
	l.run(nil, "git", "init", "-q", l.repo)
	l.tree = strings.TrimSpace(string(l.run(nil, "git", "-C", l.repo, "hash-object", "-t", "tree", "-w", "--stdin")))
	return l
}

func (l *gitLab) env() []string {
	return append(os.Environ(), "GNUPGHOME="+l.gnupgHome, "GIT_CONFIG_NOSYSTEM=1", "HOME="+l.dir, "TZ=UTC", "LC_ALL=C")
}

// run runs a command and fails the test when it fails.
func (l *gitLab) run(stdin []byte, name string, args ...string) []byte {
	l.t.Helper()
	out, errOut, err := l.try(stdin, name, args...)
	if err != nil {
		l.t.Fatalf("%s %s: %v\n%s%s", name, strings.Join(args, " "), err, out, errOut)
	}
	return out
}

// try runs a command and returns its stdout, stderr and error.
func (l *gitLab) try(stdin []byte, name string, args ...string) ([]byte, []byte, error) {
	cmd := exec.Command(name, args...)
	cmd.Env = l.env()
	cmd.Dir = l.dir
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	return out.Bytes(), errOut.Bytes(), err
}

func (l *gitLab) path(name string) string { return filepath.Join(l.dir, name) }

func (l *gitLab) write(name string, data []byte) string {
	l.t.Helper()
	p := l.path(name)
	if err := os.WriteFile(p, data, 0o600); err != nil {
		l.t.Fatal(err)
	}
	return p
}

// store writes raw as an object of type typ into the repository, exactly
// as given (hash-object --literally), and returns its id.
func (l *gitLab) store(typ string, raw []byte) string {
	l.t.Helper()
	return strings.TrimSpace(string(l.run(raw, "git", "-C", l.repo, "hash-object", "-t", typ, "-w", "--literally", "--stdin")))
}

// commit returns an unsigned root commit body; committer is the whole
// ident value (name, e-mail and date), so tests can break the date.
func (l *gitLab) commit(committer, msg string) []byte {
	return fmt.Appendf(nil, "tree %s\nauthor A U Thor <author@example.com> 1700000000 +0000\ncommitter %s\n\n%s\n", l.tree, committer, msg)
}

func ident(at time.Time) string {
	return fmt.Sprintf("C O Mitter <committer@example.com> %d +0000", at.Unix())
}

// gitVerdict is git's own answer for a commit: %G? and %GS from git log,
// with the allowed-signers file (may be "") and the lab's gpg home.
func (l *gitLab) gitVerdict(id, allowedSigners string) (letter, signer string) {
	l.t.Helper()
	args := []string{"-C", l.repo}
	if allowedSigners != "" {
		args = append(args, "-c", "gpg.ssh.allowedSignersFile="+allowedSigners)
	}
	args = append(args, "log", "-1", "--no-walk", "--format=%G?%x00%GS", id)
	out := l.run(nil, "git", args...)
	letter, signer, _ = strings.Cut(strings.TrimRight(string(out), "\n"), "\x00")
	return letter, signer
}

// gitVerifyTag is git verify-tag's exit status (true: 0) for a tag.
func (l *gitLab) gitVerifyTag(id, allowedSigners string) bool {
	args := []string{"-C", l.repo, "-c", "gpg.ssh.allowedSignersFile=" + allowedSigners, "verify-tag", "--raw", id}
	_, _, err := l.try(nil, "git", args...)
	return err == nil
}
