package main

import (
	"context"
	"fmt"
	"time"

	"github.com/evidence-ledger/ledger/admit"
	"github.com/evidence-ledger/ledger/gates"
	"github.com/evidence-ledger/ledger/ledger"
	"github.com/spf13/cobra"
)

func newSupersedeCmd(a *app) *cobra.Command {
	var reason, as string
	c := &cobra.Command{
		Use:   "supersede VERSION RECORD_ID --reason TEXT",
		Short: "Retract one evidence or head record for a release's current pins (an infrastructure fault, a run on the wrong host)",
		Long: `Appends a supersede leaf: the record RECORD_ID (evidence or a head verification) no longer
counts for any gate of release VERSION at its current pins, failing or passing; it is listed as
baseline with the author, role and reason. It is the only way a failing record at the pins stops
failing its gate short of a waiver (see "Which evidence counts" in docs/reference/release-yaml.md). It lapses when the
release's pins change.

It needs an admin token holding the release's approval_role when the release names one: locally
the token named by --as, with --server the --token's holder. Exit 0 recorded, 2 error or refused.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			l, err := a.openLedger(ctx, ledgerOptions{as: as, records: true})
			if err != nil {
				return errExit(exitErr, "%v", err)
			}
			defer l.Close()
			sp, e, err := l.Supersede(ctx, args[0], args[1], reason)
			if err != nil {
				return errExit(exitErr, "%v", err)
			}
			if a.JSON {
				return a.printJSON(map[string]any{"id": e.ID, "index": e.Index, "supersede": sp})
			}
			role := ""
			if sp.Role != "" {
				role = " (role " + sp.Role + ")"
			}
			fmt.Fprintf(a.stdout, "%s record %s superseded for release %s (pins %s) by %s%s: entry %s at index %d\n  reason: %s\n",
				sp.EntryKind, sp.Entry, sp.Version, sp.PinsDigest, sp.Author, role, e.ID, e.Index, sp.Reason)
			return nil
		},
	}
	c.Flags().StringVar(&reason, "reason", "", "why the record does not speak for the pins (required)")
	c.Flags().StringVar(&as, "as", "", "local only: the admin token name that authors the supersede (must hold the release's approval role)")
	return c
}

// Supersede records, as the --as token, a supersede of record entry for
// release version's current pins (admin scope, as over the API).
func (l *localLedger) Supersede(ctx context.Context, version, entry, reason string) (gates.Supersede, ledger.Entry, error) {
	who, err := l.actor(ctx, ledger.ScopeAdmin)
	if err != nil {
		return gates.Supersede{}, ledger.Entry{}, err
	}
	return admit.Supersede(ctx, l.checked(), who, version, entry, reason, time.Now())
}
