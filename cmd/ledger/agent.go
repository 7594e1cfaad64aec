package main

import (
	"bufio"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/ledger/client"
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
	f.DurationVar(&c.PollWait, "poll-wait", 20*time.Second, "how long one poll for a run waits (the server caps it)")
	f.DurationVar(&c.Heartbeat, "heartbeat", 0, "how often a held lease is extended, which bounds how late a cancel is seen (at least 100ms; 0 or more than a third of the lease: a third of the lease)")
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

func newAgentApproveCmd(a *app) *cobra.Command {
	var req runs.ApproveRequest
	cmd := &cobra.Command{
		Use:   "approve NAME [--key-id SHA256:...] [--spec sha256:...]",
		Short: "Approve the registration of agent NAME (admin; a runner-key leaf of kind agent)",
		Long: `ledger agent approve approves the key agent NAME registered with, and with it
the build and hardware it declared (repository, commit, lanes, backend,
labels, device), and prints what it approved. Check the registration first:
ledger agent list shows its key id and spec digest, which the agent also logs
at start ("agent registered ... key_id=SHA256:... spec=sha256:..."). Pass
them as --key-id and --spec: the server then refuses the approval, appending
nothing, when the registration carries another key or was changed since
(a waiting agent may register again with another repository). Without
them the registration is approved as the server finds it. A registration
is never taken over by another key while it waits (409); remove one you do
not trust with ledger agent remove NAME.

Exit status: 0 approved (or already), 2 refused or on usage errors.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.serverClient(true)
			if err != nil {
				return err
			}
			st, e, ag, err := c.ApproveAgent(cmd.Context(), args[0], req)
			if err != nil {
				return errExit(2, "agent approve: %v", err)
			}
			if a.JSON {
				return a.printJSON(map[string]any{"runner": st, "entry": appendedEntryJSON{e.ID, e.Index, e.LeafHash, e.Existing, e.Proof}, "agent": ag})
			}
			what := "approved"
			if e.Existing {
				what = "already approved:"
			}
			if err := a.printRunner(st, e, what); err != nil {
				return err
			}
			g := ag.Visible()
			fmt.Fprintf(a.stdout, "  spec %s\n  repository %s  commit %s  backend %s  labels %s\n  lanes %s\n  device %s  count %d  memory %d  host %s\n",
				ag.SpecDigest, g.Spec.Repository, g.Spec.Commit, g.Backend, orDash(runs.SortedLabels(g.Labels)), strings.Join(g.Spec.Lanes, ","),
				g.Spec.Device.Model, g.Spec.DeviceCount, g.Spec.MemoryBytes, g.Spec.Host)
			if req.SpecDigest == "" && !e.Existing {
				fmt.Fprintf(a.stderr, "note: approved the registration as the server found it; pass --spec %s next time to approve only the registration you checked\n", ag.SpecDigest)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&req.KeyID, "key-id", "", "the key id (SHA256:...) the agent logged; the approval is refused when the registration carries another")
	cmd.Flags().StringVar(&req.SpecDigest, "spec", "", "the spec digest (sha256: and 64 hex) ledger agent list shows; the approval is refused when the registration changed since")
	return cmd
}

func newAgentRemoveCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "remove NAME",
		Short: "Remove agent NAME (admin): revoke its approved key, if any (a leaf), and delete its registration",
		Long: `ledger agent remove frees the name NAME: when the agent is approved its key
is revoked (a runner-key leaf; a revoked key is never approved again, so the
agent restarts with a new key from ledger runner keygen), and its
registration is deleted, so the next registration of NAME, with any key,
waits for ledger agent approve again. It is the way to replace a waiting
registration whose key is not the agent's, and to re-approve an agent whose
hardware changed (the server refuses an approved agent's registration that
changes its backend, labels, device model, memory or count).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.serverClient(true)
			if err != nil {
				return err
			}
			out, err := c.RemoveAgent(cmd.Context(), args[0])
			if err != nil {
				return errExit(2, "agent remove: %v", err)
			}
			if a.JSON {
				return a.printJSON(out)
			}
			fmt.Fprintf(a.stdout, "removed agent %s", out.Name)
			if out.Revoked != "" {
				fmt.Fprintf(a.stdout, "  revoked key %s  id=%s", out.Revoked, out.Entry)
			}
			fmt.Fprintln(a.stdout)
			return nil
		},
	}
}

func newAgentListCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List the registered agents: key id, spec, last heartbeat, health, current run",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.serverClient(false)
			if err != nil {
				return err
			}
			list, err := c.Agents(cmd.Context())
			if err != nil {
				return errExit(2, "agent list: %v", err)
			}
			if a.JSON {
				return a.printJSON(map[string]any{"agents": list})
			}
			tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tKEY ID\tSPEC\tAPPROVED\tONLINE\tBACKEND\tLABELS\tREPOSITORY\tCOMMIT\tLANES\tDEVICE\tHEALTH\tLAST SEEN\tRUN")
			for _, info := range list {
				// The server sends visible text; a table never carries a
				// control character, whatever server it came from.
				g := info.Agent.Visible()
				approved := fmt.Sprint(g.Approved)
				if g.Approved && info.ApprovedSpec != "" && info.ApprovedSpec != info.SpecDigest {
					approved = "true (spec changed since: approved " + runs.Visible(info.ApprovedSpec) + ")"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%v\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", g.Name, g.KeyID, runs.Visible(g.SpecDigest), approved, info.Online, g.Backend, orDash(runs.SortedLabels(g.Labels)),
					g.Spec.Repository, g.Spec.Commit, strings.Join(g.Spec.Lanes, ","), g.Spec.Device.Model, g.Health, g.LastSeen.Format(time.RFC3339), g.CurrentRun)
			}
			return tw.Flush()
		},
	}
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
	for ctx.Err() == nil && (c.MaxRuns == 0 || done < c.MaxRuns) {
		lease, err := ag.api.Poll(ctx, c.PollWait, health)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			a.log.Warn("agent poll failed", "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 10*time.Second)
			continue
		}
		backoff = time.Second
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

// probe is the hardware health probe: the backend opens (for cuda: a
// device, its driver and memory), the device count (cuda: nvidia-smi)
// meets --expect-devices, and the host's cores and memory. It returns
// "ok" or what failed, and the spec found.
func (ag *agent) probe() (string, runs.AgentSpec) {
	spec := runs.AgentSpec{CPUs: runtime.NumCPU(), MemoryBytes: hostMemory(), Runner: runner.BuildRunner()}
	spec.Host, _ = os.Hostname()
	b, err := runner.OpenBackend(ag.c.Backend)
	if err != nil {
		return "backend " + ag.c.Backend + " does not open: " + err.Error(), spec
	}
	spec.Device = b.Device()
	_ = b.Close()
	spec.DeviceCount = 1
	if ag.c.Backend == "cuda" {
		n, mem, err := nvidiaSMI()
		if err == nil {
			spec.DeviceCount = n
			if mem > 0 && spec.Device.Attrs != nil {
				spec.Device.Attrs["smi_memory_mib"] = strconv.FormatUint(mem, 10)
			}
		} else if ag.c.ExpectDevices > 1 {
			return "cannot count devices: " + err.Error(), spec
		}
	}
	if ag.c.ExpectDevices > 0 && spec.DeviceCount != ag.c.ExpectDevices {
		return fmt.Sprintf("expected %d devices, found %d", ag.c.ExpectDevices, spec.DeviceCount), spec
	}
	return "ok", spec
}

// nvidiaSMI counts the GPUs nvidia-smi lists and returns the first one's
// total memory in MiB.
func nvidiaSMI() (int, uint64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits").Output()
	if err != nil {
		return 0, 0, fmt.Errorf("nvidia-smi: %w", err)
	}
	lines := strings.Fields(strings.TrimSpace(string(out)))
	var mem uint64
	if len(lines) > 0 {
		mem, _ = strconv.ParseUint(lines[0], 10, 64)
	}
	return len(lines), mem, nil
}

// hostMemory is MemTotal of /proc/meminfo in bytes (0 where absent).
func hostMemory() uint64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "MemTotal:"); ok {
			kb, _ := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb * 1024
		}
	}
	return 0
}

// minHeartbeat is the shortest lease extension interval: each heartbeat
// is a signed request and a row update on the server.
const minHeartbeat = 100 * time.Millisecond

// errCanceled and errLeaseLost end a lease's workload.
var (
	errCanceled  = errors.New("the run was canceled")
	errLeaseLost = errors.New("the lease was lost")
)

// supervise extends lease l every --heartbeat (at most, and by default,
// a third of its length) until work ends, and at once when started is
// closed (the first lane reported progress: the run shows running from
// then), sending the progress take returns; it stops the workload with
// errCanceled when the server answers canceling, and with errLeaseLost
// when the server refuses the lease. Transport errors are retried on the
// next tick.
func (ag *agent) supervise(ctx, work context.Context, stop context.CancelCauseFunc, l *runs.LeaseAnswer, started <-chan struct{}, take func() *runs.Progress, log *slog.Logger) {
	every := max(time.Duration(l.LeaseTTLMS)*time.Millisecond/3, minHeartbeat)
	switch h := ag.c.Heartbeat; {
	case h > every:
		log.Info("--heartbeat is more than a third of the lease: extending every third", "heartbeat", h.String(), "every", every.String())
	case h > 0:
		every = h
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-work.Done():
			return
		case <-started:
			started = nil
		case <-t.C:
		}
		hb, err := ag.api.Heartbeat(ctx, l.Run.ID, runs.HeartbeatRequest{Attempt: l.Attempt, Lease: l.Lease, Progress: take()})
		var le *ledger.Error
		switch {
		case errors.As(err, &le) && le.Code == ledger.CodeConflict:
			log.Warn("agent lost the lease", "err", err)
			stop(errLeaseLost)
			return
		case err != nil:
			log.Warn("agent heartbeat failed (retrying)", "err", err)
		case hb.Cancel:
			log.Info("run canceled: stopping at the next case boundary")
			stop(errCanceled)
			return
		}
	}
}

// runLease runs one leased attempt and returns the health verdict of its
// probe. The supervisor goroutine extends the lease (see supervise),
// whatever the lanes do, and stops the workload when the server says
// canceling or refuses the lease.
func (ag *agent) runLease(ctx context.Context, l *runs.LeaseAnswer) string {
	log := ag.a.log.With("run", l.Run.ID, "attempt", l.Attempt)
	log.Info("agent took a run", "lanes", strings.Join(l.Run.Lanes, ","), "backend", l.Run.Backend)
	work, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	var mu sync.Mutex
	var prog *runs.Progress
	started := make(chan struct{})
	var once sync.Once
	setProgress := func(p runs.Progress) {
		mu.Lock()
		prog = &p
		mu.Unlock()
		once.Do(func() { close(started) })
	}
	take := func() *runs.Progress { mu.Lock(); defer mu.Unlock(); p := prog; prog = nil; return p }
	superDone := make(chan struct{})
	go func() {
		defer close(superDone)
		ag.supervise(ctx, work, stop, l, started, take, log)
	}()
	var st *stager
	finish := func(req runs.FinishRequest) { ag.finish(ctx, l, st, req, log) }
	health, _ := ag.probe()
	if health != "ok" {
		stop(nil)
		<-superDone
		finish(runs.FinishRequest{Status: "error", Message: "health probe: " + health})
		return health
	}
	for _, lane := range l.Run.Lanes {
		if !slices.Contains(ag.spec.Lanes, lane) && !slices.Contains(ag.spec.Lanes, ledger.LaneName(lane)) {
			stop(nil)
			<-superDone
			finish(runs.FinishRequest{Status: "error", Message: "lane " + lane + " is not in this agent's configuration"})
			return health
		}
	}
	b, err := runner.OpenBackend(ag.c.Backend)
	if err != nil {
		stop(nil)
		<-superDone
		finish(runs.FinishRequest{Status: "error", Message: "open backend: " + err.Error()})
		return "backend does not open: " + err.Error()
	}
	defer b.Close()
	lanesDone := 0
	var cur string
	st = ag.newStager(ctx, work, l, log)
	results, rerr := runner.Run(work, b, runner.Options{Lanes: l.Run.Lanes, Subject: ag.subj, Runner: runner.BuildRunner(), BinaryDigest: ag.bin,
		LaneDone: st.laneDone,
		Progress: func(lane string, done, total int) {
			if lane != cur {
				if cur != "" {
					lanesDone++
				}
				cur = lane
			}
			setProgress(runs.Progress{Lane: lane, Done: done, Total: total, LanesDone: lanesDone})
		}})
	cause := context.Cause(work)
	if cause != nil || rerr != nil || ctx.Err() != nil {
		st.abandon()
	}
	staged, serr := st.wait()
	stop(nil)
	<-superDone
	switch {
	case errors.Is(cause, errLeaseLost):
		log.Warn("lease lost: the attempt's results are dropped, nothing is recorded")
		return health
	case errors.Is(cause, errCanceled):
		finish(runs.FinishRequest{Status: "canceled", Message: "canceled at a case boundary"})
		return health
	case ctx.Err() != nil:
		return health // interrupted: the lease expires and the run is queued again
	case rerr != nil:
		finish(runs.FinishRequest{Status: "error", Message: "run: " + rerr.Error()})
		return health
	}
	finish(completed(len(results), staged, serr))
	return health
}

// completed is the finish of an attempt whose lanes all ran: the staged
// lanes by digest, the others in full; an error finish when a lane's
// evidence could not be signed.
func completed(lanes int, staged []stagedLane, err error) runs.FinishRequest {
	if err == nil && lanes != len(staged) {
		err = fmt.Errorf("%d lanes ran, %d were signed", lanes, len(staged))
	}
	if err != nil {
		return runs.FinishRequest{Status: "error", Message: err.Error()}
	}
	req := runs.FinishRequest{Status: "completed"}
	for _, sl := range staged {
		if sl.digest != "" {
			req.Staged = append(req.Staged, sl.digest)
		} else {
			req.Evidence = append(req.Evidence, sl.env)
		}
	}
	return req
}

// finish posts the finish of lease l, retrying transport and internal
// errors (5 tries); when the server no longer holds what st staged (409
// naming staged[i]: it restarted), it sends the same evidence again with
// every envelope in full.
func (ag *agent) finish(ctx context.Context, l *runs.LeaseAnswer, st *stager, req runs.FinishRequest, log *slog.Logger) {
	req.Attempt, req.Lease = l.Attempt, l.Lease
	for try := range 5 {
		_, err := ag.api.Finish(ctx, l.Run.ID, req)
		if err == nil {
			log.Info("agent finished the attempt", "status", req.Status, "staged", len(req.Staged))
			return
		}
		var le *ledger.Error
		if errors.As(err, &le) && le.Code == ledger.CodeConflict && strings.HasPrefix(le.Field, "staged[") && st != nil {
			log.Warn("agent's staged evidence is gone from the server: sending the envelopes in the finish", "err", err)
			if req.Evidence, err = st.envelopes(); err != nil {
				req = runs.FinishRequest{Attempt: l.Attempt, Lease: l.Lease, Status: "error", Message: err.Error()}
			}
			req.Staged = nil
			continue
		}
		if errors.As(err, &le) && le.Code != ledger.CodeInternal {
			log.Error("agent finish refused", "err", err)
			return
		}
		log.Warn("agent finish failed (retrying)", "err", err, "try", try+1)
		time.Sleep(time.Duration(try+1) * 500 * time.Millisecond)
	}
}

// stager signs each lane's evidence as the lane ends and stages the
// envelope on the server (POST /agent/runs/{id}/evidence) while the next
// lanes run, so that the finish names staged records instead of carrying
// and having the server check them all at the end. A lane whose staging
// fails is sent in full in the finish. Its methods are safe for
// concurrent use.
type stager struct {
	ag   *agent
	ctx  context.Context
	stop context.CancelFunc
	work context.Context
	l    *runs.LeaseAnswer
	log  *slog.Logger
	wg   sync.WaitGroup
	mu   sync.Mutex
	done []stagedLane
	err  error
}

// stagedLane is one lane's signed envelope and, once staged, the digest
// the server answered ("" when it was not staged).
type stagedLane struct {
	env    json.RawMessage
	digest string
}

func (ag *agent) newStager(ctx, work context.Context, l *runs.LeaseAnswer, log *slog.Logger) *stager {
	sctx, stop := context.WithCancel(ctx)
	return &stager{ag: ag, ctx: sctx, stop: stop, work: work, l: l, log: log}
}

// laneDone is runner.Options.LaneDone: it reserves the lane's slot (lane
// order) and signs and stages its evidence on a goroutine.
func (st *stager) laneDone(lr runner.LaneRun) {
	if st.work.Err() != nil {
		return // canceled or lost: nothing of this attempt is recorded
	}
	st.mu.Lock()
	i := len(st.done)
	st.done = append(st.done, stagedLane{})
	st.mu.Unlock()
	ev := lr.Evidence
	// The record names the attempt it is run for: the server records it
	// for no other run or attempt.
	ev.Run = &ledger.RunRef{ID: st.l.Run.ID, Attempt: st.l.Attempt}
	st.wg.Go(func() {
		recs, err := evidenceRecords([]ledger.Evidence{ev})
		var env json.RawMessage
		if err == nil {
			env, err = verify.SignEvidence(st.ctx, st.ag.priv, recs[0].Body)
		}
		if err != nil {
			st.mu.Lock()
			st.err = errors.Join(st.err, fmt.Errorf("sign %s: %w", lr.Lane, err))
			st.mu.Unlock()
			return
		}
		ans, err := st.ag.api.Stage(st.ctx, st.l.Run.ID, runs.StageRequest{Attempt: st.l.Attempt, Lease: st.l.Lease, Envelope: env})
		switch {
		case err == nil:
			st.log.Info("agent staged a lane's evidence", "lane", lr.Lane, "digest", ans.Digest)
		case st.ctx.Err() == nil:
			st.log.Warn("agent could not stage a lane's evidence: it goes in the finish", "lane", lr.Lane, "err", err)
		}
		st.mu.Lock()
		st.done[i] = stagedLane{env: env, digest: ans.Digest}
		if err != nil {
			st.done[i].digest = ""
		}
		st.mu.Unlock()
	})
}

// abandon stops the stagings in flight: the attempt records nothing.
func (st *stager) abandon() { st.stop() }

// wait waits for every lane's signing and staging and returns the lanes
// in the order they ended, or the first signing error.
func (st *stager) wait() ([]stagedLane, error) {
	st.wg.Wait()
	st.stop()
	st.mu.Lock()
	defer st.mu.Unlock()
	return slices.Clone(st.done), st.err
}

// envelopes is every lane's envelope, for a finish that carries them all.
func (st *stager) envelopes() ([]json.RawMessage, error) {
	lanes, err := st.wait()
	if err != nil {
		return nil, err
	}
	out := make([]json.RawMessage, len(lanes))
	for i, sl := range lanes {
		out[i] = sl.env
	}
	return out, nil
}
