package main

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/evidence-ledger/ledger/client"
	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/runner"
	"github.com/evidence-ledger/ledger/runs"
	"github.com/evidence-ledger/ledger/verify"
	"github.com/spf13/cobra"
)

// agentConfig holds the flags of `ledger agent`.
type agentConfig struct {
	Name          string
	Key           string
	Backend       string
	Labels        []string
	Lanes         []string
	RepoPath      string
	Repository    string
	Commit        string
	Tree          string
	Dirty         string
	PollWait      time.Duration
	Heartbeat     time.Duration
	ExpectDevices int
	MaxRuns       int
}

func newAgentCmd(a *app) *cobra.Command {
	var c agentConfig
	cmd := &cobra.Command{
		Use:   "agent --server URL --token T --key agent.key --backend cpu|cuda [--label k=v]...",
		Short: "Run lanes queued on a ledger server on this host's hardware (an agent), or approve and list agents",
		Long: `ledger agent registers this host with the server (its name, key, backend,
labels, the lanes in its own configuration and the hardware its health probe
found), waits for a run whose backend, labels and lanes it serves, takes its
lease, probes the hardware, runs the lanes from its own build (never a
command from the server), and records one evidence record per lane as a DSSE
envelope signed with --key. A supervisor goroutine extends the lease
independently of the lanes; when the server answers that the run is being
canceled, the lane stops at the next case boundary and the attempt is
reported canceled, recording nothing.

The key must be approved by an admin first (ledger agent approve NAME
--key-id ID --spec D, with the key_id and spec this command logs at start,
which approves this registration only): an unapproved
agent is registered but gets no run. The name (default: the host name) is
owned by the first key that registers it: another key is refused until an
admin runs ledger agent remove NAME, and once approved the agent's backend,
labels, repository, device model, memory and count cannot change.
--repository defaults to the checkout's origin remote (normalized:
host/owner/name) and must be the repository the runs name; the agent
records evidence of that repository and its --commit only.
--token is a record token; its lane, backend and repository scope bound the
runs the agent is given.

Exit status: 0 after --max-runs runs (or on interrupt), 2 on usage errors.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return a.runAgent(cmd.Context(), c) },
	}
	f := cmd.Flags()
	host, _ := os.Hostname()
	f.StringVar(&c.Name, "name", agentName(host), "agent name (a runner name: 1-64 of [a-z0-9._-]; default: the host name, lower-cased, other characters dropped)")
	f.StringVar(&c.Key, "key", "", "the agent's Ed25519 private key (see ledger runner keygen); required")
	f.StringVar(&c.Backend, "backend", "cpu", "backend this agent runs (registered: "+strings.Join(runner.BackendNames(), ", ")+")")
	f.StringArrayVar(&c.Labels, "label", nil, "agent label key=value (repeatable), matched against a run's required labels")
	f.StringArrayVar(&c.Lanes, "lane", nil, "lane this agent runs (repeatable; default: every registered lane)")
	f.StringVar(&c.RepoPath, "repo-path", ".", "checkout of the source, used for git when the binary lacks build info")
	f.StringVar(&c.Repository, "repository", "", "repository of the subject (default: git remote origin, else the module path)")
	f.StringVar(&c.Commit, "commit", "", "source commit id (overrides build info)")
	f.StringVar(&c.Tree, "tree", "", "tree id of the source commit (default: from git)")
	f.StringVar(&c.Dirty, "dirty", "", "force the dirty flag (true|false; default: derived)")
	durationVar(f, &c.PollWait, "poll-wait", 20*time.Second, "how long one poll for a run waits (the server caps it)")
	durationVar(f, &c.Heartbeat, "heartbeat", 0, "how often a held lease is extended, which bounds how late a cancel is seen (at least 100ms; 0 or more than a third of the lease: a third of the lease)")
	f.IntVar(&c.ExpectDevices, "expect-devices", 0, "health probe: the number of devices this host must have (cuda: counted by nvidia-smi; 0: at least one)")
	f.IntVar(&c.MaxRuns, "max-runs", 0, "exit after this many runs (0: run until interrupted)")
	cmd.AddCommand(newAgentApproveCmd(a), newAgentRemoveCmd(a), newAgentListCmd(a))
	return cmd
}

// agentName turns a host name into a runner name.
func agentName(host string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(host) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '.' || r == '-' || r == '_' {
			b.WriteRune(r)
		}
	}
	s := strings.TrimLeft(b.String(), "._-")
	if s == "" {
		s = "agent"
	}
	return s[:min(len(s), 64)]
}

// serverClient is the client of --server, which these commands need.
func (a *app) serverClient(needToken bool) (*client.Client, error) {
	if a.Server == "" {
		return nil, errExit(2, "this command talks to a server: give --server URL (env LEDGER_SERVER)")
	}
	if needToken && a.Token == "" {
		return nil, errExit(2, "--server needs --token (or LEDGER_TOKEN)")
	}
	c, err := client.New(a.Server, client.Options{Token: a.Token, Timeout: a.Timeout})
	if err != nil {
		return nil, errExit(2, "%v", err)
	}
	return c, nil
}

// agent is one running `ledger agent`.
type agent struct {
	a    *app
	c    agentConfig
	api  *client.Agent
	priv ed25519.PrivateKey
	subj ledger.Subject
	spec runs.AgentSpec
	bin  string // digest of the agent's program, hashed once at start
}

// check checks c's flags and returns its labels and lanes (every
// registered lane when --lane is not given); errors exit 2 naming the flag.
func (c agentConfig) check() (map[string]string, []string, error) {
	if c.Key == "" {
		return nil, nil, errExit(2, "--key is required: the agent's Ed25519 private key (ledger runner keygen FILE writes one)")
	}
	if !ledger.ValidRunnerName(c.Name) {
		return nil, nil, errExit(2, "--name %q: must be 1-64 of [a-z0-9._-] starting alphanumeric", c.Name)
	}
	if c.Heartbeat < 0 || c.Heartbeat > 0 && c.Heartbeat < minHeartbeat {
		return nil, nil, errExit(2, "--heartbeat %s: must be 0 (a third of the lease) or at least %s", c.Heartbeat, minHeartbeat)
	}
	labels, err := runs.ParseLabels(c.Labels)
	if err != nil {
		return nil, nil, errExit(2, "--label: %v", err)
	}
	if !slices.Contains(runner.BackendNames(), c.Backend) {
		return nil, nil, errExit(2, "--backend %q: registered backends are %s", c.Backend, strings.Join(runner.BackendNames(), ", "))
	}
	lanes := c.Lanes
	if len(lanes) == 0 {
		for _, l := range runner.Lanes() {
			lanes = append(lanes, l.Name())
		}
	}
	for _, l := range lanes {
		if _, err := runner.LookupLane(l); err != nil {
			return nil, nil, errExit(2, "--lane: %v", err)
		}
	}
	return labels, lanes, nil
}

func (a *app) runAgent(ctx context.Context, c agentConfig) error {
	labels, lanes, err := c.check()
	if err != nil {
		return err
	}
	priv, err := loadSignKey("--key", c.Key)
	if err != nil {
		return errExit(2, "%v", err)
	}
	cl, err := a.serverClient(true)
	if err != nil {
		return err
	}
	so := runner.SubjectOptions{RepoPath: c.RepoPath, Repository: c.Repository, Commit: c.Commit, Tree: c.Tree}
	switch c.Dirty {
	case "":
	case "true", "false":
		d := c.Dirty == "true"
		so.Dirty = &d
	default:
		return errExit(2, "--dirty must be true or false, got %q", c.Dirty)
	}
	subj, err := runner.ResolveSubject(ctx, so)
	if err != nil {
		return errExit(2, "subject: %v", err)
	}
	if subj.Dirty {
		a.log.Warn("the source checkout is dirty: this agent's evidence is recorded dirty, which no release gate counts; run it from a clean checkout of the commit it was built from", "repository", subj.Repository, "commit", subj.Commit)
	}
	binDigest, err := programDigest()
	if err != nil {
		return errExit(2, "%v", err)
	}
	ag := &agent{a: a, c: c, api: client.NewAgent(cl, c.Name, priv), priv: priv, subj: subj, bin: binDigest}
	health, spec := ag.probe()
	spec.Lanes, spec.Repository, spec.Commit = lanes, subj.Repository, subj.Commit
	ag.spec = spec
	pub := priv.Public().(ed25519.PublicKey)
	reg, err := ag.api.Register(ctx, runs.RegisterRequest{Name: c.Name, PublicKey: verify.AuthorizedKey(pub), Backend: ledger.Backend(c.Backend), Labels: labels, Spec: spec, Health: health})
	if err != nil {
		return errExit(2, "agent register: %v", err)
	}
	a.log.Info("agent registered", "name", c.Name, "key_id", reg.KeyID, "spec", reg.SpecDigest, "approved", reg.Approved, "backend", c.Backend, "labels", runs.SortedLabels(labels), "health", health)
	if !reg.Approved {
		a.log.Warn("agent key not approved yet: an admin runs `ledger agent approve " + c.Name + " --key-id " + reg.KeyID + " --spec " + reg.SpecDigest + "`; polling until then")
	}
	done := 0
	backoff := time.Second
	var repeats pollErrors
	for ctx.Err() == nil && (c.MaxRuns == 0 || done < c.MaxRuns) {
		lease, err := ag.api.Poll(ctx, c.PollWait, health)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			if n, ok := repeats.note(err.Error(), time.Now()); ok {
				a.log.Warn("agent poll failed", "err", err, "same_since_last_warning", n)
			} else {
				a.log.Debug("agent poll failed", "err", err)
			}
			select {
			case <-ctx.Done():
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 10*time.Second)
			continue
		}
		backoff = time.Second
		repeats = pollErrors{}
		if lease == nil {
			continue
		}
		health = ag.runLease(ctx, lease)
		done++
	}
	return nil
}

// programDigest is the "sha256:<hex>" digest of the running program, the
// artifact "bin/ledger" its evidence pins.
func programDigest() (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("locate the running binary: %w", err)
	}
	d, err := runner.FileDigest(exe)
	if err != nil {
		return "", fmt.Errorf("hash the running binary: %w", err)
	}
	return d, nil
}

// pollErrors decides which failed polls an agent warns about: a new
// error at once, the same error again at most once a minute (an agent
// waiting for its approval would otherwise warn at every retry). Not safe
// for concurrent use.
type pollErrors struct {
	last   string
	warned time.Time
	since  int // the same error, not warned about, since the last warning
}

// pollWarnEvery is how often the same poll error is warned about again.
const pollWarnEvery = time.Minute

// note records err at now and reports whether to warn, with how many of
// the same error went unwarned since the last warning.
func (p *pollErrors) note(err string, now time.Time) (int, bool) {
	if err != p.last || now.Sub(p.warned) >= pollWarnEvery {
		n := p.since
		if err != p.last {
			n = 0
		}
		p.last, p.warned, p.since = err, now, 0
		return n, true
	}
	p.since++
	return 0, false
}
