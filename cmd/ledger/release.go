package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/evidence-ledger/ledger/gates"
	"github.com/evidence-ledger/ledger/ledger"
	"github.com/spf13/cobra"
)

// Exit codes of `ledger release check`.
const (
	exitReady    = 0
	exitNotReady = 1
	exitErr      = 2
)

func newReleaseCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "release",
		Short: "Define releases, check readiness, waive gates, sign off and approve",
		Long: `Release readiness is computed from the ledger, never set by hand.

Commands work on the local database (--db) or, with --server URL, through the API
(authenticated by --token). Locally, who acts is named with --as TOKEN_NAME: a live token whose
name becomes the author and whose roles are checked, exactly as over the API.

Sign-offs and approval are different things: a sign-off satisfies one manual gate and needs the
gate's role; the approval is the final decision on the whole release, accepted only when every
gate is passed or waived.`,
	}
	cmd.AddCommand(releaseApply(a), releaseCheck(a), releaseWaive(a), releaseSignoff(a), releaseApprove(a), releaseVerifyVerdict(a), releaseShow(a))
	return cmd
}

func releaseApply(a *app) *cobra.Command {
	var as string
	c := &cobra.Command{
		Use:   "apply FILE",
		Short: "Record a release definition (YAML) as a new ledger entry",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			data, err := os.ReadFile(args[0])
			if err != nil {
				return errExit(exitErr, "read release: %v", err)
			}
			rel, err := gates.ParseRelease(data)
			if err != nil {
				return errExit(exitErr, "%s: %v", args[0], err)
			}
			l, err := a.openLedger(ctx, ledgerOptions{as: as})
			if err != nil {
				return errExit(exitErr, "%v", err)
			}
			defer l.Close()
			rel, e, err := l.DefineRelease(ctx, rel.Version, data)
			if err != nil {
				return errExit(exitErr, "%v", err)
			}
			if a.JSON {
				return a.printJSON(map[string]any{"version": rel.Version, "id": e.ID, "index": e.Index, "pins_digest": rel.PinsDigest()})
			}
			fmt.Fprintf(a.stdout, "release %s defined: entry %s at index %d, pins %s\n", rel.Version, e.ID, e.Index, rel.PinsDigest())
			return nil
		},
	}
	c.Flags().StringVar(&as, "as", "", "name recorded as the definer (local only)")
	return c
}

func releaseCheck(a *app) *cobra.Command {
	var verdictOut string
	var only, gateIDs []string
	c := &cobra.Command{
		Use:   "check VERSION",
		Short: "Evaluate readiness: exit 0 ready, 1 not ready, 2 error",
		Long: `Evaluate the release's readiness at the latest checkpoint, print each gate's state and
reason, and exit 0 when the release is ready, 1 when it is not, 2 on an error.

--only STATES (passed, waived, open, failed; comma-separated or repeated) and --gate ID
(repeatable) choose which gates are printed. They filter the printed gates only: the exit
code is computed from the whole verdict, every gate included, so
"ledger release check 0.9.0 --only failed" exits 1 for a release with an open gate and no
failed one. --json and --verdict carry the whole signed verdict.`,
		Example: `  ledger release check 0.9.0 --only failed,open
  ledger release check 0.9.0 --gate cuda-numerics --gate sbom`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			show, err := gateFilter(only)
			if err != nil {
				return err
			}
			l, err := a.openLedger(ctx, ledgerOptions{})
			if err != nil {
				return errExit(exitErr, "%v", err)
			}
			defer l.Close()
			sv, err := l.Readiness(ctx, args[0])
			if err != nil {
				return errExit(exitErr, "%v", err)
			}
			if verdictOut != "" {
				if err := os.WriteFile(verdictOut, []byte(sv.Note), 0o644); err != nil {
					return errExit(exitErr, "write verdict: %v", err)
				}
			}
			if a.JSON {
				if err := a.printJSON(sv); err != nil {
					return errExit(exitErr, "%v", err)
				}
			} else {
				if err := knownGates(sv.Readiness, gateIDs); err != nil {
					return err
				}
				printReadinessOf(a.stdout, sv.Readiness, func(g gates.GateResult) bool {
					return show[g.State] && (len(gateIDs) == 0 || slices.Contains(gateIDs, g.ID))
				})
			}
			if !sv.Readiness.Ready {
				return &exitError{code: exitNotReady}
			}
			return nil
		},
	}
	c.Flags().StringVar(&verdictOut, "verdict", "", "also write the signed verdict (a signed note) to this file")
	c.Flags().StringSliceVar(&only, "only", nil, "print only gates in these states: passed, waived, open, failed (the exit code still reads every gate)")
	c.Flags().StringArrayVar(&gateIDs, "gate", nil, "print only this gate (repeatable; the exit code still reads every gate)")
	return c
}

// gateFilter returns the set of gate states --only names (every state when
// it names none), or an exit-2 error naming a state it does not know.
func gateFilter(only []string) (map[gates.State]bool, error) {
	all := []gates.State{gates.StatePassed, gates.StateWaived, gates.StateOpen, gates.StateFailed}
	show := map[gates.State]bool{}
	for _, s := range only {
		st := gates.State(strings.ToLower(strings.TrimSpace(s)))
		if !slices.Contains(all, st) {
			return nil, errExit(exitErr, "--only %q: want passed, waived, open or failed (comma-separated)", s)
		}
		show[st] = true
	}
	if len(show) == 0 {
		for _, st := range all {
			show[st] = true
		}
	}
	return show, nil
}

// knownGates refuses (exit 2) a --gate that names no gate of rd, with the
// closest gate ids.
func knownGates(rd *gates.Readiness, ids []string) error {
	for _, id := range ids {
		found := false
		var near []string
		for _, g := range rd.Gates {
			if g.ID == id {
				found = true
				break
			}
			if levenshtein(id, g.ID) <= 2 || strings.Contains(g.ID, id) {
				near = append(near, g.ID)
			}
		}
		if !found {
			return errExit(exitErr, "--gate %q: release %s has no such gate%s", id, rd.Version, didYouMean(near))
		}
	}
	return nil
}

// printReadiness writes rd's headline and every gate.
func printReadiness(w io.Writer, rd *gates.Readiness) {
	printReadinessOf(w, rd, func(gates.GateResult) bool { return true })
}

// printReadinessOf writes rd's headline (always, counting every gate) and
// the gates for which show is true.
func printReadinessOf(w io.Writer, rd *gates.Readiness, show func(gates.GateResult) bool) {
	state := "NOT READY"
	if rd.Ready {
		state = "READY"
	}
	fmt.Fprintf(w, "release %s: %s (passed %d, waived %d, open %d, failed %d) at checkpoint %d %s\n", rd.Version, state,
		rd.Counts[gates.StatePassed], rd.Counts[gates.StateWaived], rd.Counts[gates.StateOpen], rd.Counts[gates.StateFailed], rd.Checkpoint.Size, rd.Checkpoint.Root)
	hidden := 0
	for _, g := range rd.Gates {
		if !show(g) {
			hidden++
			continue
		}
		fmt.Fprintf(w, "  %-7s %-28s %s\n", g.State, g.ID, g.Reason)
		if g.Divergence != nil {
			fmt.Fprintf(w, "          first divergence: %s\n", g.Divergence)
		}
		for _, f := range g.Failing {
			fmt.Fprintf(w, "          failing %s", f.ID)
			if f.Lane != "" {
				fmt.Fprintf(w, " (%s", f.Lane)
				if f.Backend != "" {
					fmt.Fprintf(w, " on %s", f.Backend)
				}
				fmt.Fprint(w, ")")
			}
			fmt.Fprintf(w, ": %s", f.Reason)
			if f.Pair != "" {
				fmt.Fprintf(w, " [trajectory %s, compared with %s]", f.Trajectory, f.Pair)
			}
			fmt.Fprintln(w)
		}
		for _, m := range g.Missing {
			fmt.Fprintf(w, "          missing: %s\n", m)
		}
		for i, b := range g.Baseline {
			if i == 3 {
				fmt.Fprintf(w, "          … %d more baseline\n", len(g.Baseline)-3)
				break
			}
			fmt.Fprintf(w, "          baseline %s: %s\n", b.ID, b.Reason)
		}
		for _, wv := range g.Waivers {
			st := "applies"
			if !wv.Applies {
				st = "lapsed: " + wv.WhyNot
			}
			fmt.Fprintf(w, "          waiver %s by %s until %s (%s): %s\n", wv.ID, wv.Author, wv.Expires.Format(time.RFC3339), st, wv.Reason)
		}
	}
	if hidden > 0 {
		fmt.Fprintf(w, "  (%d of %d gates not shown by --only/--gate)\n", hidden, len(rd.Gates))
	}
	if rd.Witnessing != "" {
		fmt.Fprintf(w, "  checkpoint not witnessed: %s\n", rd.Witnessing)
	}
	if len(rd.Approvals) == 0 {
		fmt.Fprintln(w, "  approvals: none")
	}
	for _, ap := range rd.Approvals {
		fmt.Fprintf(w, "  approval %s by %s at %s (checkpoint %d): %s", ap.ID, ap.Author, ap.CreatedAt.Format(time.RFC3339), ap.Checkpoint.Size, ap.State)
		if ap.Why != "" {
			fmt.Fprintf(w, ": %s", ap.Why)
		}
		fmt.Fprintln(w)
	}
}

// parseExpiry accepts RFC 3339 or a duration from now ("72h", "14d";
// parseDuration).
func parseExpiry(s string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	d, err := parseDuration(s)
	if err != nil || d <= 0 {
		return time.Time{}, fmt.Errorf("--expires must be RFC 3339 or a positive duration (72h, 14d), got %q", s)
	}
	return now.Add(d), nil
}

func releaseWaive(a *app) *cobra.Command {
	var gate, reason, expires, as string
	c := &cobra.Command{
		Use:   "waive VERSION --gate ID --reason TEXT --expires WHEN",
		Short: "Record an expiring waiver of one gate for the release's current pins",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			exp, err := parseExpiry(expires, time.Now())
			if err != nil {
				return errExit(exitErr, "%v", err)
			}
			l, err := a.openLedger(ctx, ledgerOptions{as: as})
			if err != nil {
				return errExit(exitErr, "%v", err)
			}
			defer l.Close()
			w, e, err := l.Waive(ctx, args[0], gate, reason, exp)
			if err != nil {
				return errExit(exitErr, "%v", err)
			}
			if a.JSON {
				return a.printJSON(map[string]any{"id": e.ID, "index": e.Index, "waiver": w})
			}
			fmt.Fprintf(a.stdout, "waiver of %s for release %s recorded, expires %s\n", gate, args[0], exp.UTC().Format(time.RFC3339))
			return nil
		},
	}
	c.Flags().StringVar(&gate, "gate", "", "gate id (required)")
	c.Flags().StringVar(&reason, "reason", "", "why the gate is waived (required)")
	c.Flags().StringVar(&expires, "expires", "", "expiry: RFC 3339 or a duration from now such as 72h or 14d (required)")
	c.Flags().StringVar(&as, "as", "", "local only: the token name that authors the waiver")
	return c
}

func releaseSignoff(a *app) *cobra.Command {
	var gate, note, as string
	c := &cobra.Command{
		Use:   "signoff VERSION --gate ID",
		Short: "Sign off a manual gate (needs a token holding the gate's role); not the release approval",
		Long: `Signs off a manual gate for the release's current pins, as the token (--server) or the live token
named by --as (local). The same sign-off again (same gate, role, author and pins) is one fact: it
appends nothing and answers the entry of the sign-off already recorded (its note stands).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			l, err := a.openLedger(ctx, ledgerOptions{as: as})
			if err != nil {
				return errExit(exitErr, "%v", err)
			}
			defer l.Close()
			so, e, err := l.Signoff(ctx, args[0], gate, note)
			if err != nil {
				return errExit(exitErr, "%v", err)
			}
			if a.JSON {
				return a.printJSON(map[string]any{"id": e.ID, "index": e.Index, "signoff": so})
			}
			fmt.Fprintf(a.stdout, "gate %s of release %s signed off by %s: entry %s at index %d\n", gate, args[0], so.Author, e.ID, e.Index)
			return nil
		},
	}
	c.Flags().StringVar(&gate, "gate", "", "manual gate id (required)")
	c.Flags().StringVar(&note, "note", "", "what was reviewed")
	c.Flags().StringVar(&as, "as", "", "local only: the token name that signs off (must hold the gate's role)")
	return c
}

func releaseApprove(a *app) *cobra.Command {
	var note, as string
	c := &cobra.Command{
		Use:   "approve VERSION",
		Short: "Record the final release approval; refused (exit 1) unless the release is ready",
		Long: `Records the final approval of the release, naming the readiness verdict it approves. Refused
with exit 1 while the release is not ready, and with exit 2 when the approver lacks the release's
approval role or, under the release's two-person rule (approval: {distinct_from: [...]}), wrote a
waiver, sign-off or supersede the rule names for the current pins: another person must approve.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			l, err := a.openLedger(ctx, ledgerOptions{as: as})
			if err != nil {
				return errExit(exitErr, "%v", err)
			}
			defer l.Close()
			ap, e, sv, err := l.Approve(ctx, args[0], note)
			if ledger.ErrorCode(err) == ledger.CodePrecondition {
				return errExit(exitNotReady, "%v", err)
			}
			if err != nil {
				return errExit(exitErr, "%v", err)
			}
			if a.JSON {
				return a.printJSON(map[string]any{"id": e.ID, "index": e.Index, "approval": ap, "readiness": sv})
			}
			fmt.Fprintf(a.stdout, "release %s approved\n", args[0])
			return nil
		},
	}
	c.Flags().StringVar(&note, "note", "", "approval note")
	c.Flags().StringVar(&as, "as", "", "local only: the token name that approves")
	return c
}

func releaseVerifyVerdict(a *app) *cobra.Command {
	var keyFile string
	var replay bool
	c := &cobra.Command{
		Use:   "verify-verdict FILE",
		Short: "Verify a signed readiness verdict (and with --replay/--db, re-evaluate it at its checkpoint)",
		Long: `Verifies the signature of a verdict written by 'ledger release check --verdict FILE' (a signed
note) or the JSON of GET /api/v1/releases/{version}/readiness, with the service public key
(ledger.pub in the data directory, or --key). Any change to the file fails. With --replay (or an
explicit --db) the evaluation is replayed on that database as of the verdict's checkpoint and
compared. Exit 0 verified (and replayed equal), 1 verification or replay mismatch, 2 error.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			data, err := os.ReadFile(args[0])
			if err != nil {
				return errExit(exitErr, "read verdict: %v", err)
			}
			if keyFile == "" {
				keyFile = filepath.Join(a.dataDir(), "ledger.pub")
			}
			key, err := os.ReadFile(keyFile)
			if err != nil {
				return errExit(exitErr, "read public key: %v", err)
			}
			var s *Store
			if replay || cmd.Flags().Changed("db") {
				if s, err = a.openStore(ctx); err != nil {
					return errExit(exitErr, "%v", err)
				}
				defer s.Close()
			}
			rd, err := gates.VerifyVerdict(data, string(key))
			if errors.Is(err, gates.ErrVerdictSignature) && s != nil {
				// A verdict signed before a key rotation verifies with
				// the key that signed the log at the verdict's
				// checkpoint, taken from the log's verified key chain
				// (which must hold the given key).
				rd, err = verifyVerdictChain(data, strings.TrimSpace(string(key)), s.Log.KeyChain(), err)
			}
			if err != nil {
				if errors.Is(err, gates.ErrVerdictSignature) || errors.Is(err, gates.ErrVerdictMalformed) {
					return errExit(exitNotReady, "verdict does not verify: %v", err)
				}
				return errExit(exitErr, "%v", err)
			}
			result := map[string]any{"verified": true, "version": rd.Version, "ready": rd.Ready, "checkpoint": rd.Checkpoint}
			if s != nil {
				_, diffs, err := gates.Replay(ctx, s, rd)
				if err != nil {
					return errExit(exitErr, "replay: %v", err)
				}
				result["replayed"], result["differences"] = true, diffs
				if len(diffs) > 0 {
					if a.JSON {
						a.printJSON(result)
					}
					return errExit(exitNotReady, "replay differs: %s", strings.Join(diffs, "; "))
				}
			}
			if a.JSON {
				return a.printJSON(result)
			}
			fmt.Fprintf(a.stdout, "verdict verified: release %s ready=%v at checkpoint %d %s\n", rd.Version, rd.Ready, rd.Checkpoint.Size, rd.Checkpoint.Root)
			if result["replayed"] == true {
				fmt.Fprintln(a.stdout, "replay at that checkpoint gives the same verdict")
			}
			return nil
		},
	}
	c.Flags().StringVar(&keyFile, "key", "", "verifier key file (default: ledger.pub in the data directory)")
	c.Flags().BoolVar(&replay, "replay", false, "replay the evaluation on --db and compare")
	return c
}

// verifyVerdictChain verifies a verdict signed by another key of the
// log's chain: accepted only when that key was not yet retired at the
// verdict's checkpoint size (it is the key that signed the log at that
// size or a later one: a verdict asked for right after a rotation names
// the rotation's checkpoint, which the old key signed, and is signed by
// the new key), and the chain holds key (the verifier key the caller
// trusts). It returns first when no key does.
func verifyVerdictChain(data []byte, key string, chain ledger.KeyChain, first error) (*gates.Readiness, error) {
	if chain.Index(key) < 0 {
		return nil, first
	}
	for i, k := range chain.Keys() {
		if k == key {
			continue
		}
		if rd, err := gates.VerifyVerdict(data, k); err == nil && i >= chain.Index(chain.KeyFor(rd.Checkpoint.Size)) {
			return rd, nil
		}
	}
	return nil, first
}

func releaseShow(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "show [VERSION]",
		Short: "Show a release definition with its history, approvals and sign-offs (no VERSION: list releases)",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			l, err := a.openLedger(ctx, ledgerOptions{})
			if err != nil {
				return errExit(exitErr, "%v", err)
			}
			defer l.Close()
			if len(args) == 0 {
				rs, err := l.Releases(ctx)
				if err != nil {
					return errExit(exitErr, "%v", err)
				}
				if a.JSON {
					return a.printJSON(rs)
				}
				for _, r := range rs {
					fmt.Fprintf(a.stdout, "%-16s %2d components %2d gates  entry %s  %s\n", r.Version, len(r.Components), len(r.Gates), r.EntryID, r.Title)
				}
				return nil
			}
			rel, e, aps, sos, err := l.Release(ctx, args[0])
			if err != nil {
				return errExit(exitErr, "%v", err)
			}
			hist, err := definitions(ctx, l, args[0])
			if err != nil {
				return errExit(exitErr, "%v", err)
			}
			if a.JSON {
				return a.printJSON(map[string]any{"release": rel, "entry": e.ID, "index": e.Index, "pins_digest": rel.PinsDigest(), "definitions": hist, "approvals": aps, "signoffs": sos})
			}
			fmt.Fprintf(a.stdout, "release %s (%s)\n  entry %s at index %d, %d definition(s), pins %s\n", rel.Version, rel.Title, e.ID, e.Index, hist, rel.PinsDigest())
			for _, c := range rel.Components {
				fmt.Fprintf(a.stdout, "  component %-14s head %s reviewed %s %s\n", c.Name, c.Head, c.Reviewed, c.Repository)
			}
			names := make([]string, 0, len(rel.Artifacts))
			for n := range rel.Artifacts {
				names = append(names, n)
			}
			slices.Sort(names)
			for _, n := range names {
				fmt.Fprintf(a.stdout, "  artifact  %-14s %s\n", n, rel.Artifacts[n])
			}
			if rel.Approval != nil {
				fmt.Fprintf(a.stdout, "  two-person rule: %s (their authors may not approve)\n", rel.Approval)
			}
			for _, g := range rel.Gates {
				fmt.Fprintf(a.stdout, "  gate %-28s %-16s %s\n", g.ID, g.Kind, g.Title)
			}
			for _, s := range sos {
				fmt.Fprintf(a.stdout, "  sign-off %s by %s (%s) at %s\n", s.Gate, s.Author, s.Role, s.CreatedAt.Format(time.RFC3339))
			}
			for _, ap := range aps {
				fmt.Fprintf(a.stdout, "  APPROVED by %s at %s (checkpoint %d)\n", ap.Author, ap.CreatedAt.Format(time.RFC3339), ap.Checkpoint.Size)
			}
			return nil
		},
	}
}

// definitions counts the definitions of release version in the log, paging
// to the end.
func definitions(ctx context.Context, r ledger.Queries, version string) (int, error) {
	n, cursor := 0, ""
	for {
		es, next, err := r.Entries(ctx, ledger.EntryFilter{Kind: ledger.KindRelease, Key: version, Cursor: cursor, Limit: 1000})
		if err != nil {
			return 0, err
		}
		n += len(es)
		if next == "" {
			return n, nil
		}
		cursor = next
	}
}
