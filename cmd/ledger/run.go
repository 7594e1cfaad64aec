package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/evidence-ledger/ledger/admit"
	"github.com/evidence-ledger/ledger/internal/stats"
	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/runner"
	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"golang.org/x/term"
)

// runConfig holds the flags of `ledger run`.
type runConfig struct {
	Backend    string
	Lanes      []string
	RepoPath   string
	Repository string
	Commit     string
	Tree       string
	Dirty      string // "", "true" or "false"
	NoRecord   bool
	List       bool
	Impl       string        // external implementation to run (impl.go)
	ImplFile   string        // its configuration file
	SignKey    string        // runner key that signs what is recorded (runner.go)
	Remote     bool          // queue the run on --server for an agent (runs.go)
	Labels     []string      // agent labels a remote run requires
	GiveUp     time.Duration // how long a remote run is followed while the server does not answer
	// Cases, CaseBudget and MaxSamples select and bound the cases of a
	// lane that selects cases (qmv-throughput); caseFlags names those of
	// the three flags the command line set.
	Cases      []string
	CaseBudget time.Duration
	MaxSamples int
	caseFlags  []string
}

func newRunCmd(a *app) *cobra.Command {
	var c runConfig
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run hardware validation lanes and record one evidence record per lane",
		Long: `Run runs validation lanes (described in docs/reference/lanes.md) on a backend, decides each from its
independent reference and negative control, prints a summary table and records
one evidence record per lane run: into the local database (--db), or to a
server (--server URL --token T, POST /api/v1/evidence).

The subject (source commit, tree, dirty flag) comes from the binary's build
info, else from git in --repo-path; --commit/--tree/--repository override it.

Exit status: 0 when every lane passed, 1 when any lane failed, was
inconclusive or errored, 2 on usage or recording errors.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			for _, name := range []string{"cases", "case-budget", "max-samples"} {
				if cmd.Flags().Changed(name) {
					c.caseFlags = append(c.caseFlags, name)
				}
			}
			return a.runLanes(cmd.Context(), c)
		},
	}
	f := cmd.Flags()
	f.StringVar(&c.Backend, "backend", "cpu", "backend to run on (registered: "+strings.Join(runner.BackendNames(), ", ")+")")
	f.StringArrayVar(&c.Lanes, "lane", nil, "lane to run (name or name/vN; repeatable; default: every lane not marked on request)")
	f.StringVar(&c.RepoPath, "repo-path", ".", "checkout of the source, used for git when the binary lacks build info")
	f.StringVar(&c.Repository, "repository", "", "repository of the subject (default: git remote origin, else the module path)")
	f.StringVar(&c.Commit, "commit", "", "source commit id (overrides build info)")
	f.StringVar(&c.Tree, "tree", "", "tree id of the source commit (default: from git)")
	f.StringVar(&c.Dirty, "dirty", "", "force the dirty flag (true|false; default: derived)")
	f.BoolVar(&c.NoRecord, "no-record", false, "run and print, record nothing")
	f.BoolVar(&c.List, "list", false, "list the lanes and exit")
	f.StringVar(&c.SignKey, "sign-key", "", "sign each record as a DSSE envelope with this registered runner key (see ledger runner)")
	f.StringSliceVar(&c.Cases, "cases", nil, "with --lane qmv-throughput: run only the cases whose id matches one of these globs (GLOB,...; path.Match patterns such as 'batch1/n8192/*/f16/b4/*'; fewer segments match the leading ones: 'batch1/n8192')")
	durationVar(f, &c.CaseBudget, "case-budget", 5*time.Second, "with --lane qmv-throughput: time limit of measuring one case")
	f.IntVar(&c.MaxSamples, "max-samples", 200, fmt.Sprintf("with --lane qmv-throughput: most samples per arm of one case (%d..%d)", stats.MinSamples, ledger.MaxThroughputSamples))
	addImplFlags(f, &c)
	f.BoolVar(&c.Remote, "remote", false, "queue the run on --server for an agent (ledger agent) and follow it; exit status as for a local run, 3 when the run was canceled or expired")
	f.StringArrayVar(&c.Labels, "label", nil, "with --remote: agent label key=value the run requires (repeatable)")
	durationVar(f, &c.GiveUp, "give-up-after", 30*time.Second, "with --remote: stop following (exit 2; the run goes on) when every read of the run has failed for this long")
	return cmd
}

func (a *app) runLanes(ctx context.Context, c runConfig) error {
	if c.List {
		for _, l := range runner.Lanes() {
			on := ""
			if runner.IsOnRequest(l) {
				on = " (on request: runs only when named with --lane)"
			}
			fmt.Fprintf(a.stdout, "%-24s %s%s\n", l.Name(), l.Summary(), on)
		}
		return nil
	}
	if c.Impl != "" && !c.Remote {
		return a.runImpl(ctx, c)
	}
	if err := c.checkCaseFlags(); err != nil {
		return err
	}
	// A remote run's lanes are checked here too: agents run the lanes of
	// their builds, and a lane this build does not know would wait queued
	// for an agent that has it, without a word.
	for _, name := range c.Lanes {
		if _, err := runner.LookupLane(name); err != nil {
			return errExit(2, "%v", err)
		}
	}
	if c.Remote {
		return a.runRemote(ctx, c)
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
		a.log.Warn("the work tree is dirty: this evidence will not count for gates", "commit", subj.Commit)
	}
	l, err := a.openRecorder(ctx, c.NoRecord)
	if err != nil {
		return err
	}
	if l != nil {
		defer l.Close()
	}
	b, err := runner.OpenBackend(c.Backend)
	if err != nil {
		return errExit(2, "%v", err)
	}
	defer b.Close()

	prog := a.newProgress()
	runs, err := runner.Run(ctx, b, runner.Options{Lanes: c.Lanes, Subject: subj, Runner: runner.BuildRunner(), Progress: prog.update,
		Cases: c.Cases, CaseBudget: c.CaseBudget, MaxSamples: c.MaxSamples})
	prog.done()
	if err != nil {
		return errExit(2, "run: %v", err)
	}
	evs := make([]ledger.Evidence, len(runs))
	for i, r := range runs {
		evs[i] = r.Evidence
	}
	if err := a.recordAndPrint(ctx, l, evs, c.SignKey, func() { printRunTable(a.stdout, runs) }); err != nil {
		return err
	}
	for _, r := range runs {
		if r.Evidence.Status != ledger.StatusPassed {
			return errExit(1, "")
		}
	}
	return nil
}

// checkCaseFlags refuses --cases, --case-budget and --max-samples (those
// set on the command line) when no selected lane selects cases, and with
// values out of range, naming the flag. With --remote the run carries
// them (caseSelection) and the server checks them again.
func (c runConfig) checkCaseFlags() error {
	if len(c.caseFlags) == 0 {
		return nil
	}
	flag := "--" + c.caseFlags[0]
	sel := runner.DefaultLanes()
	if len(c.Lanes) > 0 {
		sel = nil
		for _, name := range c.Lanes {
			l, err := runner.LookupLane(name)
			if err != nil {
				return errExit(2, "--lane: %v", err)
			}
			sel = append(sel, l)
		}
	}
	if !slices.ContainsFunc(sel, runner.SelectsCases) {
		return errExit(2, "%s applies only to lanes that select cases (%s): add --lane %s", flag, runner.ThroughputLane, ledger.LaneName(runner.ThroughputLane))
	}
	if slices.Contains(c.caseFlags, "cases") && (len(c.Cases) == 0 || slices.Contains(c.Cases, "")) {
		return errExit(2, "--cases: an empty glob; leave the flag out to run every case")
	}
	if _, err := runner.SelectThroughputCases(c.Cases); err != nil {
		return errExit(2, "--cases: %v", err)
	}
	if c.CaseBudget <= 0 {
		return errExit(2, "--case-budget %s: must be positive", c.CaseBudget)
	}
	if c.MaxSamples < stats.MinSamples || c.MaxSamples > ledger.MaxThroughputSamples {
		return errExit(2, "--max-samples %d: must be %d..%d (fewer samples give no 95 %% interval of the median)", c.MaxSamples, stats.MinSamples, ledger.MaxThroughputSamples)
	}
	if c.CaseBudget > ledger.MaxCaseBudget {
		return errExit(2, "--case-budget %s: at most %s per case", c.CaseBudget, ledger.MaxCaseBudget)
	}
	return nil
}

// caseSelection is the case selection a --remote run carries: the case
// flags the command line set (checkCaseFlags), the others left to the
// agent's lanes' defaults, which are the flags' defaults.
func (c runConfig) caseSelection() ledger.CaseSelection {
	var s ledger.CaseSelection
	for _, f := range c.caseFlags {
		switch f {
		case "cases":
			s.Cases = c.Cases
		case "case-budget":
			s.CaseBudget = c.CaseBudget.String()
		case "max-samples":
			s.MaxSamples = c.MaxSamples
		}
	}
	return s
}

// openRecorder opens the ledger a run records into (nil with --no-record)
// before the lanes run, so that a wrong --server, --token or --db fails
// before the work rather than after it.
func (a *app) openRecorder(ctx context.Context, noRecord bool) (theLedger, error) {
	if noRecord {
		return nil, nil
	}
	l, err := a.openLedger(ctx, ledgerOptions{records: true})
	if err != nil {
		return nil, errExit(2, "%v", err)
	}
	return l, nil
}

// recordAndPrint appends evs to l (unless l is nil) and prints the run:
// JSON of the evidence and the append answer with --json, else the table
// printTable writes and where the records went.
func (a *app) recordAndPrint(ctx context.Context, l theLedger, evs []ledger.Evidence, signKey string, printTable func()) error {
	var recorded *appendedJSON
	if l != nil {
		var err error
		if recorded, err = appendEvidence(ctx, l, evs, signKey); err != nil {
			return errExit(2, "record: %v", err)
		}
	}
	if a.JSON {
		return a.printJSON(map[string]any{"evidence": evs, "recorded": recorded})
	}
	printTable()
	if l != nil {
		fmt.Fprintf(a.stdout, "recorded %d evidence records to %s\n", len(evs), l.Where())
	}
	return nil
}

// appendEvidence appends evs to l atomically, each signed with the runner
// key in signKey when it is not "", and returns the answer as the commands
// print it.
func appendEvidence(ctx context.Context, l theLedger, evs []ledger.Evidence, signKey string) (*appendedJSON, error) {
	recs, err := evidenceRecords(evs)
	if err != nil {
		return nil, err
	}
	bodies := make([][]byte, len(recs))
	raws := make([]json.RawMessage, len(recs))
	for i, r := range recs {
		bodies[i], raws[i] = r.Body, r.Body
	}
	// Locally, the records are admitted as `ledger record --db` admits
	// them; a server admits what it is sent.
	if local, ok := l.(*localLedger); ok {
		if err := admit.Local(ctx, local.Store, raws, false); err != nil {
			return nil, err
		}
	}
	res, err := appendSigned(ctx, l, bodies, signKey, "")
	if err != nil {
		return nil, err
	}
	out := appendedOf(res)
	return &out, nil
}

func printRunTable(w io.Writer, runs []runner.LaneRun) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "LANE\tCASES\tCONTROL\tSTATUS\tTIME")
	for _, r := range runs {
		ev := r.Evidence
		fmt.Fprintf(tw, "%s\t%d/%d\t%s\t%s\t%s\n", r.Lane, ev.CasesExact, ev.CasesTotal, ev.Control, ev.Status, r.Wall.Round(time.Millisecond))
	}
	_ = tw.Flush()
	for _, r := range runs {
		if r.Err != nil {
			fmt.Fprintf(w, "%s: error: %v\n", r.Lane, r.Err)
		} else if n := len(r.Evidence.FailingCases); n > 0 {
			fmt.Fprintf(w, "%s: %d failing cases, first %s\n", r.Lane, n, r.Evidence.FailingCases[0])
		}
		printThroughputSummary(w, r.Lane, &r.Evidence)
	}
}

// printThroughputSummary writes one line for a throughput record: how many
// cases converged and the case whose speed ratio (baseline seconds over
// candidate seconds; above 1: the candidate is faster) has the lowest 95 %
// interval bound, with both medians in µs per product. Records without throughput details print nothing.
func printThroughputSummary(w io.Writer, lane string, ev *ledger.Evidence) {
	tp, err := ledger.ThroughputOf(ev)
	if err != nil || tp == nil || len(tp.Cases) == 0 {
		return
	}
	conv := 0
	var worst *ledger.ThroughputCase
	for i := range tp.Cases {
		c := &tp.Cases[i]
		if c.Converged {
			conv++
		}
		if c.Ratio != nil && (worst == nil || c.Ratio.Low < worst.Ratio.Low) {
			worst = c
		}
	}
	fmt.Fprintf(w, "%s: %d/%d cases within %.3g %% (%s clock)", lane, conv, len(tp.Cases), tp.TargetRel*100, tp.Clock)
	if worst != nil && tp.Baseline != nil {
		fmt.Fprintf(w, "; lowest speed ratio %s vs %s %.3f [%.3f, %.3f] at %s",
			tp.Candidate, tp.Baseline.Name, worst.Ratio.Estimate, worst.Ratio.Low, worst.Ratio.High, worst.ID)
		if worst.BaselineMedian != nil {
			fmt.Fprintf(w, " (%.4g µs vs %.4g µs per product)", worst.CandidateMedian.Estimate*1e6, worst.BaselineMedian.Estimate*1e6)
		}
	}
	fmt.Fprintln(w)
}

// progress shows lane progress: a progress bar on a terminal, plain lines
// (one per lane, when it finishes) otherwise.
type progress struct {
	w    io.Writer
	tty  bool
	lane string
	bar  *progressbar.ProgressBar
	// every, when positive, makes a non-terminal progress print the
	// running lane's count at most this often, as it changes.
	every time.Duration
	last  time.Time
	shown int
}

func (a *app) newProgress() *progress {
	p := &progress{w: a.stderr}
	if f, ok := a.stderr.(*os.File); ok && term.IsTerminal(int(f.Fd())) && !a.JSON {
		p.tty = true
	}
	return p
}

func (p *progress) update(lane string, done, total int) {
	if lane != p.lane {
		p.finishLane()
		p.lane = lane
		if p.tty {
			p.bar = progressbar.NewOptions(total, progressbar.OptionSetWriter(p.w), progressbar.OptionSetDescription(fmt.Sprintf("%-22s", lane)),
				progressbar.OptionShowCount(), progressbar.OptionSetWidth(30), progressbar.OptionThrottle(50*time.Millisecond),
				progressbar.OptionClearOnFinish())
		} else {
			fmt.Fprintf(p.w, "running %s (%d units)\n", lane, total)
			p.last, p.shown = time.Now(), done
		}
	}
	if p.bar != nil {
		_ = p.bar.Set(done)
		return
	}
	if p.every > 0 && done != p.shown && (time.Since(p.last) >= p.every || done == total) {
		p.last, p.shown = time.Now(), done
		fmt.Fprintf(p.w, "  %s %d/%d\n", lane, done, total)
	}
}

func (p *progress) finishLane() {
	if p.bar != nil {
		_ = p.bar.Finish()
		p.bar = nil
	}
}

func (p *progress) done() { p.finishLane() }
