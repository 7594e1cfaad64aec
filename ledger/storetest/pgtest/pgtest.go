// Package pgtest gives tests a real PostgreSQL: one throwaway cluster per
// test binary (initdb into a temporary directory, the server listening
// only on a Unix socket in that directory, fsync off), started by the
// first test that asks, and a fresh database per test.
//
// When PostgreSQL is not installed (no initdb on PATH, nor in
// LEDGER_PG_BIN), tests that ask are skipped with a message saying so,
// unless LEDGER_REQUIRE_POSTGRES=1, which makes them fail instead (CI sets
// it). Run as root, the cluster runs as the postgres user (or nobody):
// PostgreSQL refuses to run as root.
//
// A package whose tests use it calls Main from its TestMain, which stops
// the cluster and removes its directory when the tests end; the server
// is also killed when the test binary dies (Pdeathsig). Safe for
// concurrent use by parallel tests.
package pgtest

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" driver
)

// cluster is the running server.
type cluster struct {
	dir    string // temporary directory: data/ and the socket
	port   int
	cmd    *exec.Cmd
	admin  *sql.DB
	exited chan struct{}
}

var (
	startOnce sync.Once
	cl        *cluster
	startErr  error
	errAbsent = errors.New("PostgreSQL is not installed (no initdb on PATH or in LEDGER_PG_BIN)")
	dbSeq     atomic.Int64
)

// Required reports whether LEDGER_REQUIRE_POSTGRES=1 asks tests to fail,
// not skip, when PostgreSQL is absent.
func Required() bool { return os.Getenv("LEDGER_REQUIRE_POSTGRES") == "1" }

// Main runs the tests of m and then stops the cluster (when one was
// started) and exits with their status. Call it from TestMain.
func Main(m *testing.M) {
	code := m.Run()
	Stop()
	os.Exit(code)
}

// Stop stops the cluster and removes its directory; later calls to
// NewDatabase fail. Safe to call when none was started.
func Stop() {
	startOnce.Do(func() { startErr = errors.New("pgtest: stopped") })
	if cl == nil {
		return
	}
	cl.admin.Close()
	cl.cmd.Process.Signal(syscall.SIGQUIT) // immediate shutdown
	select {
	case <-cl.exited:
	case <-time.After(10 * time.Second):
		cl.cmd.Process.Kill()
		<-cl.exited
	}
	os.RemoveAll(cl.dir)
	cl = nil
}

// NewDatabase returns the DSN (a postgres:// URL over the cluster's Unix
// socket, user postgres, no password) of a new, empty database, dropped
// at the end of t. It starts the cluster on first use; it skips t when
// PostgreSQL is absent (fails it under LEDGER_REQUIRE_POSTGRES=1) and
// fails t when the cluster does not start.
func NewDatabase(t testing.TB) string {
	t.Helper()
	c, err := start()
	if errors.Is(err, errAbsent) {
		if Required() {
			t.Fatalf("LEDGER_REQUIRE_POSTGRES=1 but %v", err)
		}
		t.Skipf("skipping: %v; install Debian's postgresql (or set LEDGER_PG_BIN) to run this test on PostgreSQL", err)
	}
	if err != nil {
		t.Fatalf("start PostgreSQL: %v", err)
	}
	name := fmt.Sprintf("t%d_%d", os.Getpid(), dbSeq.Add(1))
	if _, err := c.admin.Exec("CREATE DATABASE " + name); err != nil {
		t.Fatalf("create database: %v", err)
	}
	t.Cleanup(func() {
		if cl == c {
			c.admin.Exec("DROP DATABASE IF EXISTS " + name + " WITH (FORCE)")
		}
	})
	return c.dsn(name)
}

// Available reports whether a cluster runs or can be started.
func Available() bool {
	_, err := start()
	return err == nil
}

func (c *cluster) dsn(db string) string {
	q := url.Values{"host": {c.dir}, "port": {strconv.Itoa(c.port)}, "user": {"postgres"}, "sslmode": {"disable"}}
	return "postgres:///" + db + "?" + q.Encode()
}

func start() (*cluster, error) {
	startOnce.Do(func() { cl, startErr = startCluster() })
	return cl, startErr
}

// binDir finds the directory of initdb and postgres.
func binDir() (string, error) {
	if d := os.Getenv("LEDGER_PG_BIN"); d != "" {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d, nil
		}
		return "", errAbsent
	}
	p, err := exec.LookPath("initdb")
	if err != nil {
		// Debian's binaries are not on PATH; the newest version wins.
		found, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
		if len(found) == 0 {
			return "", errAbsent
		}
		slices.SortFunc(found, func(a, b string) int { return cmp.Compare(pgVersion(a), pgVersion(b)) })
		return filepath.Dir(found[len(found)-1]), nil
	}
	if r, err := filepath.EvalSymlinks(p); err == nil {
		p = r
	}
	return filepath.Dir(p), nil
}

// runAs is the credential the server runs with: the postgres user (or
// nobody) when this process is root, nil otherwise.
func runAs() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	for _, name := range []string{"postgres", "nobody"} {
		u, err := user.Lookup(name)
		if err != nil {
			continue
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), NoSetGroups: true}, nil
	}
	return nil, errors.New("running as root and there is neither a postgres nor a nobody user to run PostgreSQL as")
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func startCluster() (*cluster, error) {
	bin, err := binDir()
	if err != nil {
		return nil, err
	}
	cred, err := runAs()
	if err != nil {
		return nil, err
	}
	// A short directory: a Unix socket path has at most 107 bytes.
	dir, err := os.MkdirTemp("", "ledger-pg-")
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*cluster, error) {
		os.RemoveAll(dir)
		return nil, err
	}
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			return fail(err)
		}
	}
	os.Chmod(dir, 0o755)
	port, err := freePort()
	if err != nil {
		return fail(err)
	}
	data := filepath.Join(dir, "data")
	initdb := exec.Command(filepath.Join(bin, "initdb"), "-D", data, "-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8", "--locale=C")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := initdb.CombinedOutput(); err != nil {
		return fail(fmt.Errorf("initdb: %v: %s", err, lastLines(out)))
	}
	logf, err := os.Create(filepath.Join(dir, "server.log"))
	if err != nil {
		return fail(err)
	}
	cmd := exec.Command(filepath.Join(bin, "postgres"), "-D", data, "-k", dir, "-p", strconv.Itoa(port),
		"-c", "listen_addresses=", "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
		"-c", "max_connections=400", "-c", "shared_buffers=64MB")
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fail(fmt.Errorf("start postgres: %w", err))
	}
	c := &cluster{dir: dir, port: port, cmd: cmd, exited: make(chan struct{})}
	go func() { cmd.Wait(); logf.Close(); close(c.exited) }()
	c.admin, err = sql.Open("pgx", c.dsn("postgres"))
	if err != nil {
		cmd.Process.Kill()
		return fail(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err = c.admin.PingContext(ctx)
		cancel()
		if err == nil {
			break
		}
		select {
		case <-c.exited:
			log, _ := os.ReadFile(filepath.Join(dir, "server.log"))
			return fail(fmt.Errorf("postgres exited: %s", lastLines(log)))
		default:
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			<-c.exited
			return fail(fmt.Errorf("postgres did not answer within 30 s: %v", err))
		}
		time.Sleep(50 * time.Millisecond)
	}
	return c, nil
}

// pgVersion is the major version in a /usr/lib/postgresql/<v>/bin path.
func pgVersion(p string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(p))))
	return v
}

func lastLines(b []byte) string {
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}
