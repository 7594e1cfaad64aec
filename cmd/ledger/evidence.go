package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/web"
	"github.com/spf13/cobra"
)

// evidenceReader is what `ledger evidence` reads: the local database
// through tlog.VerifiedStore (every leaf checked, as the server reads it)
// or the server's API.
type evidenceReader interface {
	Evidence(ctx context.Context, f ledger.EvidenceFilter) ([]ledger.EvidenceEntry, string, error)
	Entry(ctx context.Context, id string) (ledger.Entry, error)
}

// openEvidenceReader opens the ledger of --db or --server for reading and
// returns its evidence reader and a close function.
func (a *app) openEvidenceReader(ctx context.Context) (evidenceReader, func() error, error) {
	l, err := a.openLedger(ctx, ledgerOptions{})
	if err != nil {
		return nil, nil, err
	}
	if ll, ok := l.(*localLedger); ok {
		return ll.checked(), l.Close, nil
	}
	return l, l.Close, nil
}

func newEvidenceCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "evidence",
		Short: "List and show evidence (the local --db, or --server)",
	}
	var f ledger.EvidenceFilter
	var backend, status, since string
	list := &cobra.Command{
		Use:   "list",
		Short: "List evidence newest first, with the filters of GET /api/v1/evidence",
		Long: `List evidence newest first: id, recorded time, lane, backend, status, cases exact/total
and the subject. The filters are those of GET /api/v1/evidence; a page holds at most
--limit entries, and when more remain the last line names the --cursor of the next page.
--json prints the API's answer: {"evidence": [...], "next_cursor": "..."}.`,
		Example: `  ledger evidence list --lane ci-tests/v1 --status failed
  ledger --server https://ledger.example --token $T evidence list --repository github.com/acme/rt --limit 20`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f.Backend, f.Status = ledger.Backend(backend), ledger.Status(status)
			if f.Backend != "" && !f.Backend.Valid() {
				return errExit(2, "--backend: must be one of %s", ledger.BackendList())
			}
			switch f.Status {
			case "", ledger.StatusPassed, ledger.StatusFailed, ledger.StatusInconclusive, ledger.StatusError:
			default:
				return errExit(2, "--status: must be passed, failed, inconclusive or error, got %q", status)
			}
			if f.Limit < 1 || f.Limit > 1000 {
				return errExit(2, "--limit: must be an integer in 1..1000, got %d", f.Limit)
			}
			if since != "" {
				t, err := time.Parse(time.RFC3339, since)
				if err != nil {
					return errExit(2, "--since: must be an RFC 3339 time such as 2026-11-29T00:00:00Z, got %q", since)
				}
				f.Since = t
			}
			r, closeFn, err := a.openEvidenceReader(cmd.Context())
			if err != nil {
				return errExit(2, "%v", err)
			}
			defer closeFn()
			es, next, err := r.Evidence(cmd.Context(), f)
			if err != nil {
				return errExit(2, "evidence list: %v", flagged(err))
			}
			if a.JSON {
				out := struct {
					Evidence   []web.EvidenceJSON `json:"evidence"`
					NextCursor string             `json:"next_cursor"`
				}{Evidence: make([]web.EvidenceJSON, len(es)), NextCursor: next}
				for i, e := range es {
					out.Evidence[i] = web.EvidenceJSON{ID: e.ID, Index: e.Index, RecordedAt: e.RecordedAt, LeafHash: e.LeafHash, Evidence: e.Evidence}
				}
				return a.printJSON(out)
			}
			printEvidenceList(a.stdout, es)
			if next != "" {
				fmt.Fprintf(a.stdout, "more: --cursor %s\n", next)
			}
			return nil
		},
	}
	fl := list.Flags()
	fl.StringVar(&f.Lane, "lane", "", "only this lane (name/vN)")
	fl.StringVar(&backend, "backend", "", "only this backend ("+ledger.BackendList()+")")
	fl.StringVar(&f.Repository, "repository", "", "only evidence about this repository")
	fl.StringVar(&f.Commit, "commit", "", "only evidence about this commit (40 or 64 hex)")
	fl.StringVar(&f.ArtifactDigest, "artifact", "", "only evidence pinning this artifact digest (sha256:…)")
	fl.StringVar(&status, "status", "", "only this status: passed, failed, inconclusive or error")
	fl.StringVar(&since, "since", "", "only evidence recorded at or after this RFC 3339 time")
	fl.Uint64Var(&f.AsOfSize, "as-of", 0, "read the log as of this tree size (0: the whole log)")
	fl.IntVar(&f.Limit, "limit", 50, "at most this many entries (1..1000)")
	fl.StringVar(&f.Cursor, "cursor", "", "the cursor of the next page, as the previous page printed it")

	show := &cobra.Command{
		Use:   "show ID",
		Short: "Show one evidence entry: pins, status, counts, control, signer, failing cases and their messages",
		Long: `Show one evidence entry: its subject (repository, commit, tree, artifact pins), lane and
backend, status, cases exact/total, negative control, who signed and recorded it, and the
failing cases with their failure messages where the ingested file carried them.
--json prints the API's answer of GET /api/v1/evidence/{id}, with the exact leaf bytes.`,
		Example: `  ledger evidence show 3f2a9c…`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			r, closeFn, err := a.openEvidenceReader(cmd.Context())
			if err != nil {
				return errExit(2, "%v", err)
			}
			defer closeFn()
			e, err := r.Entry(cmd.Context(), args[0])
			if err != nil {
				if id := args[0]; len(id) < 32 && strings.Trim(id, "0123456789abcdef") == "" && ledger.ErrorCode(err) == ledger.CodeNotFound {
					return errExit(2, "evidence show: %v: an entry id is 32 hex digits (pages and release check show the first 12); find the whole id with ledger evidence list", err)
				}
				return errExit(2, "evidence show: %v", err)
			}
			if e.Kind != ledger.KindEvidence {
				return errExit(2, "evidence show: entry %q is a %s entry, not evidence", args[0], e.Kind)
			}
			ev, err := ledger.ParseEvidence(e.Body)
			if err != nil {
				return errExit(2, "evidence show: %v", err)
			}
			if a.JSON {
				return a.printJSON(web.EvidenceJSON{ID: e.ID, Index: e.Index, RecordedAt: e.RecordedAt, LeafHash: e.LeafHash, Evidence: ev, Leaf: string(e.Raw)})
			}
			printEvidence(a.stdout, ledger.EvidenceEntry{Entry: e, Evidence: ev})
			return nil
		},
	}
	cmd.AddCommand(list, show)
	return cmd
}

// flagged names the flag behind an API field error of the evidence
// filters (the query parameter "artifact" is set by --artifact, "as_of" by
// --as-of); other errors are returned as they are.
func flagged(err error) error {
	var le *ledger.Error
	if !errors.As(err, &le) || le.Field == "" {
		return err
	}
	return fmt.Errorf("--%s: %s", strings.ReplaceAll(le.Field, "_", "-"), strings.TrimPrefix(err.Error(), le.Field+": "))
}

// printEvidenceList writes one line per entry.
func printEvidenceList(w io.Writer, es []ledger.EvidenceEntry) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tRECORDED\tLANE\tBACKEND\tSTATUS\tCASES\tSUBJECT")
	for _, e := range es {
		ev := e.Evidence
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d/%d\t%s@%s\n", e.ID, e.RecordedAt.UTC().Format(time.RFC3339), ev.Lane, ev.Backend, ev.Status, ev.CasesExact, ev.CasesTotal, ev.Subject.Repository, short(ev.Subject.Commit))
	}
	tw.Flush()
	if len(es) == 0 {
		fmt.Fprintln(w, "(no evidence matches)")
	}
}

// short is the first 12 characters of a hex id.
func short(s string) string {
	if len(s) > 12 {
		return s[:12]
	}
	return s
}

// printEvidence writes one entry as labelled lines, then its failing cases
// with their messages.
func printEvidence(w io.Writer, e ledger.EvidenceEntry) {
	ev := e.Evidence
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	row := func(k, format string, args ...any) { fmt.Fprintf(tw, "%s\t"+format+"\n", append([]any{k}, args...)...) }
	row("id", "%s", e.ID)
	row("index", "%d (recorded %s)", e.Index, e.RecordedAt.UTC().Format(time.RFC3339))
	row("lane", "%s on %s", ev.Lane, ev.Backend)
	row("status", "%s: cases %d/%d exact", ev.Status, ev.CasesExact, ev.CasesTotal)
	row("control", "%s", ev.Control)
	row("repository", "%s", ev.Subject.Repository)
	dirty := ""
	if ev.Subject.Dirty {
		dirty = " (dirty work tree)"
	}
	row("commit", "%s%s", ev.Subject.Commit, dirty)
	row("tree", "%s", ev.Subject.Tree)
	names := make([]string, 0, len(ev.Subject.Artifacts))
	for n := range ev.Subject.Artifacts {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		row("artifact", "%s %s", n, ev.Subject.Artifacts[n])
	}
	if d := ev.Device; d.Model != "" || d.Driver != "" {
		row("device", "%s", strings.TrimSpace(d.Model+" "+d.Driver))
	}
	if ev.Runner.Version != "" || ev.Runner.Commit != "" {
		row("runner build", "%s", strings.TrimSpace(ev.Runner.Version+" "+ev.Runner.Commit))
	}
	if ev.Run != nil {
		row("run", "%s attempt %d", ev.Run.ID, ev.Run.Attempt)
	}
	if !ev.StartedAt.IsZero() {
		row("ran", "%s .. %s", ev.StartedAt.UTC().Format(time.RFC3339), ev.FinishedAt.UTC().Format(time.RFC3339))
	}
	if s := ev.Signer; s != nil {
		row("signer", "runner %s, key %s (key entry %s)", s.Runner, s.KeyID, s.KeyEntry)
	} else {
		row("signer", "none (not a signed envelope)")
	}
	switch rb := ev.RecordedBy; {
	case rb == nil:
		row("recorded by", "not named (recorded to the local database, not through the API)")
	case rb.Token != nil:
		row("recorded by", "token %s (%s)", rb.Token.Name, rb.Token.ID)
	case rb.Runner != nil:
		row("recorded by", "runner %s, key %s", rb.Runner.Name, rb.Runner.KeyID)
	}
	tw.Flush()
	printThroughputCases(w, &ev)
	if len(ev.FailingCases) == 0 {
		return
	}
	msgs := caseMessages(ev.Details)
	fmt.Fprintf(w, "failing cases (%d):\n", len(ev.FailingCases))
	for _, id := range ev.FailingCases {
		if m := msgs[id]; m != "" {
			fmt.Fprintf(w, "  %s: %s\n", id, indentRest(m, "    "))
		} else {
			fmt.Fprintf(w, "  %s\n", id)
		}
	}
}

// caseMessages reads the failure messages of details.cases[] (the
// "message" member of an ingested case, else the "note" of a runner's
// ledger.CaseResult), keyed by case id; empty when details carry none.
func caseMessages(details json.RawMessage) map[string]string {
	var d struct {
		Cases []struct {
			ID      string `json:"id"`
			Message string `json:"message"`
			Note    string `json:"note"`
		} `json:"cases"`
	}
	if len(details) == 0 || json.Unmarshal(details, &d) != nil {
		return nil
	}
	out := make(map[string]string, len(d.Cases))
	for _, c := range d.Cases {
		m := c.Message
		if m == "" {
			m = c.Note
		}
		if m != "" {
			out[c.ID] = strings.TrimSpace(strings.Map(printable, m))
		}
	}
	return out
}

// printable drops the control characters of a recorded message (a
// terminal escape in a test's output must not reach the reader's
// terminal), keeping newlines and tabs.
func printable(r rune) rune {
	if r == '\n' || r == '\t' {
		return r
	}
	if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
		return -1
	}
	return r
}

// indentRest indents every line of s after the first by prefix.
func indentRest(s, prefix string) string {
	return strings.ReplaceAll(s, "\n", "\n"+prefix)
}

// printThroughputCases writes a throughput record's summary line
// (printThroughputSummary), one line per case (medians in µs per product,
// the speed ratio with its interval, samples per arm, converged) and the
// device state it recorded; records without throughput details print
// nothing.
func printThroughputCases(w io.Writer, ev *ledger.Evidence) {
	tp, err := ledger.ThroughputOf(ev)
	if err != nil || tp == nil {
		return
	}
	printThroughputSummary(w, "throughput", ev)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "  CASE\t%s µs\t", tp.Candidate)
	if tp.Baseline != nil {
		fmt.Fprintf(tw, "%s µs\tSPEED RATIO [%g %% interval]\t", tp.Baseline.Name, tp.Confidence*100)
	}
	fmt.Fprintln(tw, "SAMPLES\tCONVERGED")
	for _, c := range tp.Cases {
		fmt.Fprintf(tw, "  %s\t%.4g\t", c.ID, c.CandidateMedian.Estimate*1e6)
		if tp.Baseline != nil {
			if c.BaselineMedian != nil && c.Ratio != nil {
				fmt.Fprintf(tw, "%.4g\t%.3f [%.3f, %.3f]\t", c.BaselineMedian.Estimate*1e6, c.Ratio.Estimate, c.Ratio.Low, c.Ratio.High)
			} else {
				fmt.Fprint(tw, "-\t-\t")
			}
		}
		fmt.Fprintf(tw, "%d\t%t\n", len(c.CandidateS), c.Converged)
	}
	_ = tw.Flush()
	keys := make([]string, 0, len(tp.DeviceState))
	for k := range tp.DeviceState {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	if len(keys) > 0 {
		fmt.Fprintln(w, "device state:")
		for _, k := range keys {
			fmt.Fprintf(w, "  %s: %s\n", k, tp.DeviceState[k])
		}
	}
}
