package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/ledger/storetest/pgtest"
	"github.com/evidence-ledger/ledger/witness/witnesstest"
)

// lcEnv is one ledger under the lifecycle model test: its database (a
// SQLite file or a PostgreSQL database), its data directory (key and
// signed-state journal), a real `ledger serve` on it, a real litewitness
// cosigning its checkpoints, and the model of what was done to it.
type lcEnv struct {
	t       *testing.T
	store   string // "sqlite" or "postgres"
	dir     string
	dataDir string
	db      string
	fix     *lcFixture

	srv    *exec.Cmd
	srvErr *lockedBuffer
	url    string
	// srvLogs is the log of every server process started, checked for
	// errors by check.
	srvLogs  []*lockedBuffer
	logsSeen int // srvLogs already checked
	// rotationSizes are the sizes of the checkpoints key rotations
	// ended with (signed by the retired key).
	rotationSizes map[uint64]bool
	known         map[string]bool // known findings logged
	// firstPub is the log's first verifier key (a client pinned it);
	// saved are the checkpoints clients kept, each with whether a later
	// restore forked the log before it.
	firstPub string
	saved    []lcSaved

	adm, rec, run string // secrets of the base tokens (admin, record, run)

	witness    *witnesstest.Litewitness
	policyFile string
	witnessGen int

	m *lcModel
	// seen counts the leaves of each kind the log held at a check or
	// before a restore.
	seen map[ledger.Kind]int
	// trace is what each step did, printed with a failure.
	trace []string
	step  int
}

// lcSaved is a checkpoint a client saved.
type lcSaved struct {
	file   string
	size   uint64
	forked bool // a restore to a smaller size was accepted after it
}

// lcFixture is what every ledger of one test shares: a git repository
// with an SSH-signed head and the trust policy that trusts its key.
type lcFixture struct {
	repo, reviewed, head string
	policy               string // policy.yaml (names the signers file beside it)
	junit, stream        string // files
}

const (
	lcCoreRepo  = "example/core"
	lcHeadsRepo = "example.com/acme/core"
)

var (
	lcCommitA = strings.Repeat("a", 40)
	lcCommitB = strings.Repeat("b", 40)
	lcTree    = strings.Repeat("c", 40)
)

func newLCFixture(t *testing.T) *lcFixture {
	t.Helper()
	for _, tool := range []string{"git", "ssh-keygen"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed: the lifecycle test verifies a signed head", tool)
		}
	}
	dir := t.TempDir()
	key := filepath.Join(dir, "key")
	if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "ci", "-f", key).CombinedOutput(); err != nil {
		t.Fatalf("ssh-keygen: %v %s", err, out)
	}
	pub, _ := os.ReadFile(key + ".pub")
	os.WriteFile(filepath.Join(dir, "signers"), []byte("release-bot "+string(pub)), 0o644)
	f := &lcFixture{policy: filepath.Join(dir, "core.yaml")}
	os.WriteFile(f.policy, []byte("version: 1\nrules:\n  - repositories: [\""+lcHeadsRepo+"\"]\n    refs: [\"refs/heads/*\"]\n    schemes: [ssh]\n    ssh:\n      allowed_signers: signers\n"), 0o644)
	f.repo = filepath.Join(dir, "core")
	os.MkdirAll(filepath.Join(f.repo, "src"), 0o755)
	gitT(t, f.repo, "init", "-q", "-b", "main")
	os.WriteFile(filepath.Join(f.repo, "src", "main.go"), []byte("package main\n"), 0o644)
	os.WriteFile(filepath.Join(f.repo, "go.sum"), []byte("a v1\n"), 0o644)
	gitT(t, f.repo, "add", ".")
	gitT(t, f.repo, "commit", "-q", "-m", "reviewed")
	f.reviewed = gitT(t, f.repo, "rev-parse", "HEAD")
	os.WriteFile(filepath.Join(f.repo, "go.sum"), []byte("a v2\n"), 0o644)
	gitT(t, f.repo, "-c", "gpg.format=ssh", "-c", "user.signingkey="+key, "commit", "-q", "-S", "-am", "bump pin")
	f.head = gitT(t, f.repo, "rev-parse", "HEAD")
	f.junit = filepath.Join(dir, "report.xml")
	os.WriteFile(f.junit, []byte(cliJUnit), 0o644)
	f.stream = filepath.Join(dir, "stream.json")
	os.WriteFile(f.stream, []byte(cliStream), 0o644)
	return f
}

// newLCEnv makes a new, empty ledger on store with its three base
// tokens, a witness and a running server.
func newLCEnv(t *testing.T, store string, fix *lcFixture) (*lcEnv, error) {
	e := &lcEnv{t: t, store: store, dir: t.TempDir(), fix: fix, m: newLCModel(), seen: map[ledger.Kind]int{}, rotationSizes: map[uint64]bool{}, known: map[string]bool{}}
	e.dataDir = filepath.Join(e.dir, "data")
	os.MkdirAll(e.dataDir, 0o700)
	if store == "postgres" {
		e.db = pgtest.NewDatabase(t)
	} else {
		e.db = filepath.Join(e.dataDir, "ledger.db")
	}
	// An empty ledger audits (issue 29 item 2).
	if _, _, err := e.cli(0, "", "migrate"); err != nil {
		return e, err
	}
	if _, _, err := e.cli(0, "", "audit"); err != nil {
		return e, fmt.Errorf("audit of an empty ledger: %w", err)
	}
	var err error
	if e.adm, err = e.tokenCreate("adm", "admin", "release-manager", "reviewer"); err != nil {
		return e, err
	}
	if e.rec, err = e.tokenCreate("ci", "record", "reviewer"); err != nil {
		return e, err
	}
	if e.run, err = e.tokenCreate("release", "run"); err != nil {
		return e, err
	}
	pub, err := os.ReadFile(filepath.Join(e.dataDir, "ledger.pub"))
	if err != nil {
		return e, err
	}
	e.firstPub = filepath.Join(e.dir, "first.pub")
	if err := os.WriteFile(e.firstPub, pub, 0o644); err != nil {
		return e, err
	}
	if err := e.newWitness(); err != nil {
		return e, err
	}
	return e, e.start()
}

func (e *lcEnv) logf(format string, args ...any) {
	e.trace = append(e.trace, fmt.Sprintf("step %d: ", e.step)+fmt.Sprintf(format, args...))
}

// base is the global flags that name the local ledger.
func (e *lcEnv) base() []string { return []string{"--db", e.db, "--data-dir", e.dataDir} }

// exec runs the ledger binary; a want of -1 accepts any exit status.
func (e *lcEnv) exec(want []int, stdin string, args ...string) (string, string, int, error) {
	cmd := exec.Command(ledgerBin, args...)
	var so, se bytes.Buffer
	cmd.Stdout, cmd.Stderr = &so, &se
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		return "", "", -1, err
	}
	for _, w := range want {
		if w == code || w == -1 {
			return so.String(), se.String(), code, nil
		}
	}
	return so.String(), se.String(), code, fmt.Errorf("ledger %s: exit %d, want %v\nstdout: %s\nstderr: %s", strings.Join(redact(args), " "), code, want, clipOut(so.String()), clipOut(se.String()))
}

func clipOut(s string) string {
	if len(s) > 4000 {
		return s[:4000] + "..."
	}
	return s
}

// redact hides token secrets in a printed command line.
func redact(args []string) []string {
	out := append([]string{}, args...)
	for i := range out {
		if i > 0 && out[i-1] == "--token" {
			out[i] = "***"
		}
	}
	return out
}

// cli runs a local (--db) command that must exit want.
func (e *lcEnv) cli(want int, stdin string, args ...string) (string, string, error) {
	so, se, _, err := e.exec([]int{want}, stdin, append(e.base(), args...)...)
	return so, se, err
}

// remote runs a --server command as token tok that must exit want.
func (e *lcEnv) remote(want int, tok, stdin string, args ...string) (string, string, error) {
	so, se, _, err := e.exec([]int{want}, stdin, append([]string{"--server", e.url, "--token", tok, "--data-dir", e.dataDir}, args...)...)
	return so, se, err
}

func (e *lcEnv) tokenCreate(name, scope string, roles ...string) (string, error) {
	args := []string{"token", "create", "--name", name, "--scope", scope}
	for _, r := range roles {
		args = append(args, "--role", r)
	}
	out, _, err := e.cli(0, "", args...)
	return strings.TrimSpace(out), err
}

// newWitness starts a fresh litewitness for the log's current key and
// writes the witness policy the server is started with. A fresh one is
// needed after a key rotation (the old witness knows only the old key:
// an operator would run witnessctl add-key) and after an accepted
// restore (the old witness rightly refuses the fork).
func (e *lcEnv) newWitness() error {
	vkb, err := os.ReadFile(filepath.Join(e.dataDir, "ledger.pub"))
	if err != nil {
		return err
	}
	vkey := strings.TrimSpace(string(vkb))
	origin, _, _ := strings.Cut(vkey, "+")
	if e.witness != nil {
		e.witness.Kill()
	}
	e.witnessGen++
	name := fmt.Sprintf("witness.test/lc%d", e.witnessGen)
	e.witness = witnesstest.NewLitewitness(e.t, name, origin, vkey)
	e.policyFile = filepath.Join(e.dir, fmt.Sprintf("witnesses-%d.policy", e.witnessGen))
	return os.WriteFile(e.policyFile, []byte("log "+vkey+"\n"+e.witness.PolicyLine()+"quorum "+name+"\n"), 0o644)
}

// start starts `ledger serve` (short leases, so that expiry is quick).
func (e *lcEnv) start() error {
	args := append(e.base(), "serve", "--addr", "127.0.0.1:0", "--lease-ttl", "2s", "--poll-wait", "1s", "--witness-policy", e.policyFile)
	cmd := exec.Command(ledgerBin, args...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	buf := &lockedBuffer{}
	cmd.Stderr = buf
	if err := cmd.Start(); err != nil {
		return err
	}
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if u, ok := strings.CutPrefix(sc.Text(), "ledger: serving on "); ok {
				lines <- strings.TrimRight(u, "/")
			}
		}
	}()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case u := <-lines:
		e.srv, e.srvErr, e.url = cmd, buf, u
		e.srvLogs = append(e.srvLogs, buf)
		srv := cmd
		e.t.Cleanup(func() { srv.Process.Kill() })
		go func() { <-exited }()
		return nil
	case err := <-exited:
		return fmt.Errorf("ledger serve exited at start: %v\n%s", err, clipOut(buf.String()))
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		return fmt.Errorf("ledger serve did not start in 30s: %s", clipOut(buf.String()))
	}
}

// stop stops the server gracefully (SIGTERM); it must exit.
func (e *lcEnv) stop() error {
	if e.srv == nil {
		return nil
	}
	srv := e.srv
	e.srv = nil
	_ = srv.Process.Signal(syscall.SIGTERM)
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if err := srv.Process.Signal(syscall.Signal(0)); err != nil {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	srv.Process.Kill()
	return fmt.Errorf("ledger serve did not stop within 20s of SIGTERM")
}

func (e *lcEnv) close() {
	if e.srv != nil {
		e.srv.Process.Kill()
		e.srv = nil
	}
	if e.witness != nil {
		e.witness.Kill()
	}
}

// get GETs path from the server and returns status and body.
func (e *lcEnv) get(path string) (int, []byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, e.url+path, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("GET %s: %w", path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// getJSON GETs an API path that must answer 200 and decodes it.
func (e *lcEnv) getJSON(path string, out any) error {
	code, b, err := e.get(path)
	if err != nil {
		return err
	}
	if code != http.StatusOK {
		return fmt.Errorf("GET %s: %d %s", path, code, clipOut(string(b)))
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return fmt.Errorf("GET %s: %v: %s", path, err, clipOut(string(b)))
		}
	}
	return nil
}

func (e *lcEnv) checkpoint() (ledger.Checkpoint, error) {
	var cp ledger.Checkpoint
	err := e.getJSON("/api/v1/log/checkpoint", &cp)
	return cp, err
}

// leaves reads every leaf of the log through the API
// (/api/v1/log/leaves/N, each kind's reader), up to the checkpoint's size.
func (e *lcEnv) leaves() ([]ledger.Entry, error) {
	cp, err := e.checkpoint()
	if err != nil {
		return nil, err
	}
	all := make([]ledger.Entry, 0, cp.Size)
	for i := uint64(0); i < cp.Size; i++ {
		var ans struct {
			Entry ledger.Entry `json:"entry"`
		}
		if err := e.getJSON(fmt.Sprintf("/api/v1/log/leaves/%d", i), &ans); err != nil {
			return nil, err
		}
		all = append(all, ans.Entry)
	}
	return all, nil
}
