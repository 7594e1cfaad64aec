package main

import (
	"context"
	"fmt"
	"io"
	"path"
	"text/tabwriter"
	"time"

	"github.com/evidence-ledger/ledger/internal/stats"
	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/runner"
	"github.com/spf13/pflag"
)

// addImplFlags adds the external-implementation flags of `ledger run`.
func addImplFlags(f *pflag.FlagSet, c *runConfig) {
	f.StringVar(&c.Impl, "impl", "", "run the qmv lanes against this configured external implementation through its adapter (docs/reference/implementations.md); --repository/--commit/--tree/--dirty then describe the implementation")
	f.StringVar(&c.ImplFile, "impls", envOr("LEDGER_IMPLEMENTATIONS", "implementations.yaml"), "implementation configuration file (env LEDGER_IMPLEMENTATIONS)")
}

// runImpl is `ledger run --impl NAME`.
func (a *app) runImpl(ctx context.Context, c runConfig) error {
	for _, g := range c.Cases {
		if _, err := path.Match(g, ""); err != nil {
			return errExit(2, "--cases %q: %v", g, err)
		}
	}
	if c.CaseBudget <= 0 {
		return errExit(2, "--case-budget %s: must be positive", c.CaseBudget)
	}
	if c.MaxSamples < stats.MinSamples || c.MaxSamples > ledger.MaxThroughputSamples {
		return errExit(2, "--max-samples %d: must be %d..%d (fewer samples give no 95 %% interval of the median)", c.MaxSamples, stats.MinSamples, ledger.MaxThroughputSamples)
	}
	cfg, err := runner.LoadImplConfig(c.ImplFile)
	if err != nil {
		return errExit(2, "%v", err)
	}
	im, err := cfg.Lookup(c.Impl)
	if err != nil {
		return errExit(2, "%v", err)
	}
	so := runner.ImplSubjectOptions{Repository: c.Repository, Commit: c.Commit, Tree: c.Tree}
	switch c.Dirty {
	case "":
	case "true", "false":
		d := c.Dirty == "true"
		so.Dirty = &d
	default:
		return errExit(2, "--dirty must be true or false, got %q", c.Dirty)
	}
	subj, err := im.ResolveSubject(ctx, so)
	if err != nil {
		return errExit(2, "subject: %v", err)
	}
	var osubj ledger.Subject
	if im.Original != "" {
		orig, err := cfg.Lookup(im.Original)
		if err != nil {
			return errExit(2, "%v", err)
		}
		if osubj, err = orig.ResolveSubject(ctx, runner.ImplSubjectOptions{}); err != nil {
			return errExit(2, "original subject: %v", err)
		}
	}
	if subj.Dirty {
		a.log.Warn("the implementation's work tree is dirty: this evidence will not count for gates", "commit", subj.Commit)
	}
	l, err := a.openRecorder(ctx, c.NoRecord)
	if err != nil {
		return err
	}
	if l != nil {
		defer l.Close()
	}
	ctl, err := runner.OpenBackend(string(ledger.BackendCPU))
	if err != nil {
		return errExit(2, "%v", err)
	}
	defer ctl.Close()
	prog := a.newProgress()
	runs, err := runner.RunImpl(ctx, cfg, c.Impl, runner.ImplOptions{Lanes: c.Lanes, Subject: subj, OriginalSubject: osubj,
		Control: ctl, Runner: runner.BuildRunner(), Stderr: a.stderr, Progress: prog.update,
		Cases: c.Cases, CaseBudget: c.CaseBudget, MaxSamples: c.MaxSamples})
	prog.done()
	if err != nil {
		return errExit(2, "run: %v", err)
	}
	evs := make([]ledger.Evidence, len(runs))
	for i, r := range runs {
		evs[i] = r.Evidence
	}
	if err := a.recordAndPrint(ctx, l, evs, c.SignKey, func() { printImplTable(a.stdout, runs) }); err != nil {
		return err
	}
	// The original build's records are negative evidence: they are meant
	// to fail. The exit status follows the implementation's own records.
	for _, r := range runs {
		if r.Role == "impl" && r.Evidence.Status != ledger.StatusPassed {
			return errExit(1, "")
		}
	}
	return nil
}

func printImplTable(w io.Writer, runs []runner.ImplRun) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "IMPLEMENTATION\tROLE\tLANE\tCASES\tCONTROL\tSTATUS\tTIME")
	for _, r := range runs {
		ev := r.Evidence
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d/%d\t%s\t%s\t%s\n", r.Implementation, r.Role, r.Lane, ev.CasesExact, ev.CasesTotal, ev.Control, ev.Status, r.Wall.Round(time.Millisecond))
	}
	_ = tw.Flush()
	for _, r := range runs {
		printThroughput(w, r)
		if r.Err != nil {
			fmt.Fprintf(w, "%s %s: error: %v\n", r.Implementation, r.Lane, r.Err)
		} else if n := len(r.Evidence.FailingCases); n > 0 {
			fmt.Fprintf(w, "%s %s: %d failing cases, first %s\n", r.Implementation, r.Lane, n, r.Evidence.FailingCases[0])
		}
	}
}

// printThroughput prints each measured case of a throughput record: the
// medians (seconds per product) and, in an A/B run, the ratio
// baseline/candidate with its interval.
func printThroughput(w io.Writer, r runner.ImplRun) {
	tp, err := ledger.ThroughputOf(&r.Evidence)
	if err != nil || tp == nil {
		return
	}
	for _, c := range tp.Cases {
		fmt.Fprintf(w, "%s %s: %s %.4g s (n %d, %s)", r.Implementation, c.ID, tp.Candidate, c.CandidateMedian.Estimate, len(c.CandidateS), tp.Clock)
		if tp.Baseline != nil && c.BaselineMedian != nil && c.Ratio != nil {
			fmt.Fprintf(w, ", %s %.4g s, ratio %.3f [%.3f, %.3f]", tp.Baseline.Name, c.BaselineMedian.Estimate, c.Ratio.Estimate, c.Ratio.Low, c.Ratio.High)
		}
		fmt.Fprintln(w)
	}
}
