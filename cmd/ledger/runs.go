package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/evidence-ledger/ledger/client"
	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/runner"
	"github.com/evidence-ledger/ledger/runs"
	"github.com/spf13/cobra"
)

// followWait is how long one read of a followed run waits for a change.
const followWait = 5 * time.Second

// runRemote is `ledger run --remote`: queue the run on --server, follow
// its progress until it is final, print it and exit with its status (0
// done, 1 failed, 3 canceled or expired).
func (a *app) runRemote(ctx context.Context, c runConfig) error {
	if c.Impl != "" || c.NoRecord || c.SignKey != "" {
		return errExit(2, "--remote runs the agent's own lanes: --impl, --no-record and --sign-key do not apply")
	}
	labels, err := runs.ParseLabels(c.Labels)
	if err != nil {
		return errExit(2, "--label: %v", err)
	}
	// Lanes are queued by their full name/vN (runLanes checked them):
	// agents declare the lanes of their builds so, and a run naming a
	// lane without its version would wait for an agent that declares it
	// that way.
	var lanes []string
	for _, name := range c.Lanes {
		l, err := runner.LookupLane(name)
		if err != nil {
			return errExit(2, "--lane: %v", err)
		}
		lanes = append(lanes, l.Name())
	}
	if len(lanes) == 0 {
		for _, l := range runner.DefaultLanes() {
			lanes = append(lanes, l.Name())
		}
	}
	cl, err := a.serverClient(true)
	if err != nil {
		return err
	}
	run, err := cl.CreateRun(ctx, runs.Spec{Lanes: lanes, Backend: ledger.Backend(c.Backend), Labels: labels, Repository: c.Repository, Commit: c.Commit,
		CaseSelection: c.caseSelection()})
	if err != nil {
		return errExit(2, "queue run: %v", err)
	}
	queued := fmt.Sprintf("%s on %s", strings.Join(run.Lanes, ","), run.Backend)
	if t := run.Visible().CaseSelection.Text(); t != "" {
		queued += "; " + t
	}
	fmt.Fprintf(a.stderr, "queued run %s (%s)\n", runs.Visible(run.ID), runs.Visible(queued))
	a.warnNoAgent(ctx, cl, run)
	prog := a.newProgress()
	prog.every = remoteProgressEvery
	run, err = a.followRun(ctx, cl, run, c.GiveUp, prog)
	if err != nil {
		return err
	}
	prog.done()
	if a.JSON {
		if err := a.printJSON(map[string]any{"run": run}); err != nil {
			return err
		}
	} else {
		printRun(a.stdout, run, laneResults(ctx, cl, run.Evidence))
	}
	switch run.State {
	case runs.Done:
		return nil
	case runs.Failed:
		return errExit(1, "")
	}
	return errExit(3, "run %s %s", run.ID, run.State)
}

// followRun reads run until it is final, updating prog, and returns it.
// The server answers a read with wait and since as soon as the run
// changes; a server without it answers at once with no version, and the
// run is then polled every 100 ms. It gives up (exit 2) when every read
// has failed for giveUp, and on interrupt.
func (a *app) followRun(ctx context.Context, cl *client.Client, run runs.Run, giveUp time.Duration, prog *progress) (runs.Run, error) {
	reported := map[string]bool{} // evidence ids whose lane result was printed
	var failing time.Time         // when the reads of the run began to fail
	version, waits, first := "", true, true
	wait := followWait
	if a.Timeout > 0 {
		wait = min(wait, a.Timeout/2) // one read must end within --timeout
	}
	for !runs.Final(run.State) {
		pause := 100 * time.Millisecond
		if first || waits && version != "" && failing.IsZero() {
			pause = 0
		}
		first = false
		select {
		case <-ctx.Done():
			prog.done()
			return run, errExit(2, "interrupted: run %s goes on (ledger runs cancel %s stops it)", run.ID, run.ID)
		case <-time.After(pause):
		}
		next, v, err := cl.RunWait(ctx, run.ID, version, wait)
		switch {
		case err != nil && ctx.Err() != nil:
			continue
		case err != nil:
			if failing.IsZero() {
				failing = time.Now()
			}
			if time.Since(failing) >= giveUp {
				prog.done()
				return run, errExit(2, "lost the server for %s while following run %s (last error: %v): the run goes on there; `ledger runs show %s` reads it later", giveUp, run.ID, err, run.ID)
			}
			a.log.Warn("follow run", "err", err)
			continue
		}
		failing, waits, version, run = time.Time{}, v != "", v, next
		if run.Progress.Lane != "" {
			prog.update(runs.Visible(run.Progress.Lane), run.Progress.Done, run.Progress.Total)
		}
		a.reportLanes(ctx, cl, run, reported, prog)
	}
	return run, nil
}

// remoteProgressEvery is how often `run --remote` prints a progress line
// for the running lane when stderr is not a terminal.
const remoteProgressEvery = 2 * time.Second

// reportLanes prints, on stderr, the result of each lane whose evidence
// appeared in run since the last call (reported holds the ids printed).
func (a *app) reportLanes(ctx context.Context, cl *client.Client, run runs.Run, reported map[string]bool, prog *progress) {
	var fresh []string
	for _, id := range run.Evidence {
		if !reported[id] {
			reported[id] = true
			fresh = append(fresh, id)
		}
	}
	if len(fresh) == 0 {
		return
	}
	res := laneResults(ctx, cl, fresh)
	prog.finishLane()
	for _, id := range fresh {
		if ev, ok := res[id]; ok {
			fmt.Fprintf(a.stderr, "lane %s: %s (evidence %s)\n", runs.Visible(ev.Lane), laneResult(ev), id)
		} else {
			fmt.Fprintf(a.stderr, "lane result recorded: evidence %s\n", id)
		}
	}
}

// maxLaneResults bounds the evidence entries read back for one run's
// lane results.
const maxLaneResults = 100

// laneResults reads the evidence entries ids from the server, keyed by id;
// an entry that cannot be read (a token without read access, a server
// gone) is left out, and its id is printed alone.
func laneResults(ctx context.Context, cl *client.Client, ids []string) map[string]ledger.Evidence {
	out := map[string]ledger.Evidence{}
	for i, id := range ids {
		if i == maxLaneResults {
			break
		}
		e, err := cl.Entry(ctx, id)
		if err != nil || e.Kind != ledger.KindEvidence {
			continue
		}
		if ev, err := ledger.ParseEvidence(e.Body); err == nil {
			out[id] = ev
		}
	}
	return out
}

// laneResult is "failed, cases 214/216 exact, control caught" for ev.
func laneResult(ev ledger.Evidence) string {
	s := fmt.Sprintf("%s, cases %d/%d exact", ev.Status, ev.CasesExact, ev.CasesTotal)
	if ev.Control != "" && ev.Control != ledger.ControlNone {
		s += ", control " + string(ev.Control)
	}
	if n := len(ev.FailingCases); n > 0 {
		s += fmt.Sprintf(", %d failing (first %s)", n, runs.Visible(ev.FailingCases[0]))
	}
	return s
}

// warnNoAgent warns on stderr when no approved agent the server knows
// could take run (agentTakes), or when those that could are all offline:
// the run would wait in the queue without a word. An agent list the token
// may not read is passed over (logged at debug level).
func (a *app) warnNoAgent(ctx context.Context, cl *client.Client, run runs.Run) {
	ags, err := cl.Agents(ctx)
	if err != nil {
		a.log.Debug("list agents", "err", err)
		return
	}
	matching, online := 0, 0
	for _, ag := range ags {
		if !ag.Approved || !agentTakes(ag.Agent, run) {
			continue
		}
		matching++
		if ag.Online {
			online++
		}
	}
	want := fmt.Sprintf("backend %s", run.Backend)
	if len(run.Labels) > 0 {
		want += ", labels " + runs.SortedLabels(runs.VisibleMap(run.Labels))
	}
	switch {
	case matching == 0:
		fmt.Fprintf(a.stderr, "warning: no approved agent matches run %s (%s, lanes %s): it waits in the queue until one registers and is approved (ledger agent list; ledger agent approve NAME)\n", run.ID, want, strings.Join(runs.VisibleAll(run.Lanes), ","))
	case online == 0:
		fmt.Fprintf(a.stderr, "warning: the %d approved agent(s) matching run %s (%s) are offline: it waits in the queue until one polls\n", matching, run.ID, want)
	}
}

// agentTakes reports whether agent ag could take run r as the server's
// poll decides (admit.AgentServes) less the agent token's scope, which
// the agent list does not show: backend, labels and build (runs.Serves),
// the repository, and every lane in the agent's own configuration.
func agentTakes(ag runs.Agent, r runs.Run) bool {
	if !runs.Serves(r, ag.Backend, ag.Labels, ag.Spec.Commit) {
		return false
	}
	if r.Repository != "" && r.Repository != ag.Spec.Repository {
		return false
	}
	for _, l := range r.Lanes {
		if !slices.Contains(ag.Spec.Lanes, l) && !slices.Contains(ag.Spec.Lanes, ledger.LaneName(l)) {
			return false
		}
	}
	return true
}

// printRun writes r; results, when they hold an evidence id of r, give
// that lane's result next to the id.
func printRun(w io.Writer, r runs.Run, results map[string]ledger.Evidence) {
	r = r.Visible()
	fmt.Fprintf(w, "run %s: %s (backend %s, lanes %s", r.ID, r.State, r.Backend, strings.Join(r.Lanes, ","))
	if len(r.Labels) > 0 {
		fmt.Fprintf(w, ", labels %s", runs.SortedLabels(r.Labels))
	}
	if t := r.CaseSelection.Text(); t != "" {
		fmt.Fprintf(w, ", %s", t)
	}
	fmt.Fprintf(w, ")\n  attempt %d of at most %d", r.Attempt, r.MaxAttempts)
	if r.Agent != "" {
		fmt.Fprintf(w, ", agent %s", r.Agent)
	}
	if r.Progress.Lane != "" && !runs.Final(r.State) {
		fmt.Fprintf(w, ", %s %d/%d", r.Progress.Lane, r.Progress.Done, r.Progress.Total)
	}
	fmt.Fprintln(w)
	for _, at := range r.Attempts {
		line := fmt.Sprintf("  attempt %d by %s: %s", at.Attempt, at.Agent, at.Outcome)
		if at.Reason != "" {
			line += " (" + at.Reason + ")"
		}
		fmt.Fprintln(w, line)
	}
	for _, id := range r.Evidence {
		if ev, ok := results[id]; ok {
			fmt.Fprintf(w, "  evidence %s  lane %s: %s\n", id, runs.Visible(ev.Lane), laneResult(ev))
			continue
		}
		fmt.Fprintf(w, "  evidence %s\n", id)
	}
	if r.OutcomeEntry != "" {
		fmt.Fprintf(w, "  outcome entry %s\n", r.OutcomeEntry)
	}
}

func newRunsCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "runs",
		Short: "List, show and cancel runs queued on --server (ledger run --remote queues them)",
	}
	var state string
	var limit int
	list := &cobra.Command{
		Use:   "list",
		Short: "List runs, newest first",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := a.serverClient(false)
			if err != nil {
				return err
			}
			rs, err := cl.Runs(cmd.Context(), state, limit)
			if err != nil {
				return errExit(2, "runs list: %v", err)
			}
			if a.JSON {
				return a.printJSON(map[string]any{"runs": rs})
			}
			tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tSTATE\tBACKEND\tLANES\tSELECTION\tATTEMPT\tAGENT\tPROGRESS\tCREATED")
			for _, r := range rs {
				r = r.Visible()
				p := ""
				if r.Progress.Lane != "" {
					p = fmt.Sprintf("%s %d/%d", r.Progress.Lane, r.Progress.Done, r.Progress.Total)
				}
				sel := r.CaseSelection.Text()
				if sel == "" {
					sel = "-"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d/%d\t%s\t%s\t%s\n", r.ID, r.State, r.Backend, strings.Join(r.Lanes, ","), sel, r.Attempt, r.MaxAttempts, r.Agent, p, r.CreatedAt.Format(time.RFC3339))
			}
			return tw.Flush()
		},
	}
	list.Flags().StringVar(&state, "state", "", "only runs in this state (or active)")
	list.Flags().IntVar(&limit, "limit", 100, "at most this many runs")
	show := &cobra.Command{
		Use:   "show ID",
		Short: "Show one run: state, attempts, progress, and each lane's evidence with its result",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := a.serverClient(false)
			if err != nil {
				return err
			}
			r, err := cl.Run(cmd.Context(), args[0])
			if err != nil {
				return errExit(2, "runs show: %v", err)
			}
			if a.JSON {
				return a.printJSON(map[string]any{"run": r})
			}
			printRun(a.stdout, r, laneResults(cmd.Context(), cl, r.Evidence))
			return nil
		},
	}
	cancel := &cobra.Command{
		Use:   "cancel ID",
		Short: "Cancel a run: a queued one at once, a running one at its next case boundary (scope run)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := a.serverClient(true)
			if err != nil {
				return err
			}
			r, err := cl.CancelRun(cmd.Context(), args[0])
			if err != nil {
				return errExit(2, "runs cancel: %v", err)
			}
			if a.JSON {
				return a.printJSON(map[string]any{"run": r})
			}
			printRun(a.stdout, r, nil)
			return nil
		},
	}
	cmd.AddCommand(list, show, cancel)
	return cmd
}
