package witnesstest

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"

	"github.com/evidence-ledger/ledger/witness"
)

// torchwoodTools are the packages built from the module's tool directives
// (go.mod pins filippo.io/torchwood v0.6.1).
const (
	litewitnessPkg = "filippo.io/torchwood/cmd/litewitness"
	witnessctlPkg  = "filippo.io/torchwood/cmd/witnessctl"
)

var (
	buildOnce sync.Once
	binDir    string
	buildErr  error
	mainUsed  bool
)

// Main runs a test binary's tests and removes the litewitness binaries
// built for them; call it from TestMain. Without it, each test that
// starts a litewitness builds the binaries into its own temporary
// directory.
func Main(m *testing.M) {
	mainUsed = true
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// binaries builds litewitness and witnessctl once per test binary.
func binaries(t testing.TB) (litewitness, witnessctl string) {
	t.Helper()
	if !mainUsed {
		dir := t.TempDir()
		if err := build(dir); err != nil {
			t.Fatal(err)
		}
		return filepath.Join(dir, "litewitness"), filepath.Join(dir, "witnessctl")
	}
	buildOnce.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "witnesstest-bin-")
		if buildErr == nil {
			buildErr = build(binDir)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return filepath.Join(binDir, "litewitness"), filepath.Join(binDir, "witnessctl")
}

// build builds litewitness and witnessctl (the versions go.mod pins) into dir.
func build(dir string) error {
	cmd := exec.Command("go", "build", "-o", dir+string(filepath.Separator), litewitnessPkg, witnessctlPkg)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build litewitness: %v\n%s", err, out)
	}
	return nil
}

// RequireSSHAgent skips the test when ssh-agent is not on PATH:
// litewitness takes its key only from an ssh-agent.
func RequireSSHAgent(t testing.TB) string {
	t.Helper()
	p, err := exec.LookPath("ssh-agent")
	if err != nil {
		t.Skip("ssh-agent not found on PATH: litewitness holds its witness key in an ssh-agent (apt-get install openssh-client)")
	}
	return p
}

// Litewitness is a litewitness process on 127.0.0.1 with its own
// ssh-agent, key and SQLite state, configured to witness one log.
type Litewitness struct {
	Name string
	// VKey is the witness's cosignature/v1 verifier key.
	VKey string
	// URL is the submission prefix, http://127.0.0.1:<port>.
	URL string

	t      testing.TB
	bin    string
	db     string
	sock   string
	addr   string
	fp     string
	mu     sync.Mutex // guards cmd and done
	cmd    *exec.Cmd
	done   chan struct{}
	outMu  sync.Mutex // guards stderr
	stderr *bytes.Buffer
}

// NewLitewitness makes a witness called name for the log with origin and
// note verifier key logVKey (witnessctl add-log, add-key), starts its
// ssh-agent holding a fresh Ed25519 key, and starts litewitness on a free
// loopback port. Everything stops when the test ends.
func NewLitewitness(t testing.TB, name, origin, logVKey string) *Litewitness {
	t.Helper()
	agentBin := RequireSSHAgent(t)
	lw, ctl := binaries(t)
	// A short directory: unix socket paths are limited to about 100 bytes.
	dir, err := os.MkdirTemp("", "lw")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	w := &Litewitness{Name: name, t: t, bin: lw, db: filepath.Join(dir, "witness.db"), sock: filepath.Join(dir, "agent.sock")}

	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	if w.VKey, err = witness.CosignatureVerifierKey(name, pub); err != nil {
		t.Fatal(err)
	}
	sshPub, err := ssh.NewPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	w.fp = ssh.FingerprintSHA256(sshPub)

	agentCmd := exec.Command(agentBin, "-D", "-a", w.sock)
	if err := agentCmd.Start(); err != nil {
		t.Fatalf("start ssh-agent: %v", err)
	}
	t.Cleanup(func() { agentCmd.Process.Kill(); agentCmd.Wait() })
	conn := waitDial(t, "unix", w.sock)
	if err := agent.NewClient(conn).Add(agent.AddedKey{PrivateKey: priv, Comment: name}); err != nil {
		t.Fatalf("add witness key to ssh-agent: %v", err)
	}
	conn.Close()

	for _, args := range [][]string{
		{"add-log", "-db", w.db, "-origin", origin},
		{"add-key", "-db", w.db, "-origin", origin, "-key", logVKey},
	} {
		if out, err := exec.Command(ctl, args...).CombinedOutput(); err != nil {
			t.Fatalf("witnessctl %s: %v\n%s", args[0], err, out)
		}
	}
	w.addr = freeAddr(t)
	w.URL = "http://" + w.addr
	w.Start()
	t.Cleanup(w.Kill)
	return w
}

// Start starts litewitness (again) on its address and waits until it
// accepts connections.
func (w *Litewitness) Start() {
	w.t.Helper()
	w.mu.Lock()
	if w.cmd != nil {
		w.mu.Unlock()
		w.t.Fatalf("litewitness %s already running", w.Name)
	}
	w.outMu.Lock()
	w.stderr = &bytes.Buffer{}
	w.outMu.Unlock()
	cmd := exec.Command(w.bin, "-name", w.Name, "-db", w.db, "-ssh-agent", w.sock, "-key", w.fp, "-listen", w.addr)
	cmd.Stderr = &lockedWriter{mu: &w.outMu, w: w.stderr}
	if err := cmd.Start(); err != nil {
		w.mu.Unlock()
		w.t.Fatalf("start litewitness: %v", err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	w.cmd, w.done = cmd, done
	w.mu.Unlock()
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", w.addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
			return
		}
		select {
		case <-done:
			w.t.Fatalf("litewitness %s exited at start: %s", w.Name, w.Stderr())
		default:
		}
		if time.Now().After(deadline) {
			w.t.Fatalf("litewitness %s did not listen on %s: %s", w.Name, w.addr, w.Stderr())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Kill stops litewitness with SIGKILL (kill -9) and waits for it to exit;
// it does nothing when litewitness is not running.
func (w *Litewitness) Kill() {
	w.mu.Lock()
	cmd, done := w.cmd, w.done
	w.cmd = nil
	w.mu.Unlock()
	if cmd == nil {
		return
	}
	cmd.Process.Signal(syscall.SIGKILL)
	<-done
}

// LoggedVKey returns the verifier key litewitness logged at start
// ("verifier key vkey=...").
func (w *Litewitness) LoggedVKey() string {
	m := regexp.MustCompile(`vkey=(\S+)`).FindStringSubmatch(w.Stderr())
	if m == nil {
		return ""
	}
	return m[1]
}

// Stderr returns what the current (or last) litewitness process logged.
func (w *Litewitness) Stderr() string {
	w.outMu.Lock()
	defer w.outMu.Unlock()
	return w.stderr.String()
}

// PolicyLine returns the witness's tlog-policy line.
func (w *Litewitness) PolicyLine() string {
	return fmt.Sprintf("witness %s %s %s\n", w.Name, w.VKey, w.URL)
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func waitDial(t testing.TB, network, addr string) net.Conn {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.Dial(network, addr)
		if err == nil {
			return c
		}
		if time.Now().After(deadline) {
			t.Fatalf("dial %s %s: %v", network, addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// freeAddr returns a loopback address with a port that was free a moment
// ago (litewitness does not report the port it bound, so it cannot be 0).
func freeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}
