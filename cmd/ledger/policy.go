package main

import (
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/evidence-ledger/ledger/client"
	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/ledger/auth"
	"github.com/evidence-ledger/ledger/verify"
	"github.com/spf13/cobra"
)

func newPolicyCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "policy",
		Short: "Register and show trust policies (the policies heads are verified under)",
		Long: `A trust policy is registered as a log leaf holding its YAML and every key
file it names, with a digest over both (ledger.PolicyRecord). A release names
its policy (policy: NAME, or policy_digest: sha256:...); the server verifies
heads under it and never under a policy a request carries.`,
	}
	cmd.AddCommand(policyApplyCmd(a), policyShowCmd(a))
	return cmd
}

func policyApplyCmd(a *app) *cobra.Command {
	var name, as string
	cmd := &cobra.Command{
		Use:   "apply FILE",
		Short: "Register the trust policy FILE and the key files it names (admin)",
		Long: `Reads FILE (the verify package's Policy YAML) and the keyrings, allowed-signers
files, trusted roots and CA pools it names (relative to FILE's directory),
checks that they load, and appends a policy leaf. With --server the --token
must have scope admin; locally, --as names an admin token of the database.

Exit codes: 0 registered, 2 error.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if name == "" {
				name = strings.TrimSuffix(filepath.Base(args[0]), filepath.Ext(args[0]))
			}
			if !ledger.ValidPolicyName(name) {
				return errExit(2, "--name %q: a policy name is 1-64 of [a-z0-9._-] starting with a letter or digit", name)
			}
			yml, files, err := verify.ReadPolicyBundle(args[0])
			if err != nil {
				return errExit(2, "policy %s: %v", args[0], err)
			}
			var sum client.PolicySummary
			if a.Server != "" {
				if a.Token == "" {
					return errExit(2, "--server needs --token (an admin token) to register a policy")
				}
				c, err := client.New(a.Server, client.Options{Token: a.Token, Timeout: a.Timeout})
				if err != nil {
					return errExit(2, "%v", err)
				}
				if sum, _, err = c.ApplyPolicy(cmd.Context(), name, yml, files); err != nil {
					return errExit(2, "apply policy: %v", err)
				}
			} else {
				if sum, err = a.applyPolicyLocal(cmd, name, as, yml, files); err != nil {
					return errExit(2, "apply policy: %v", err)
				}
			}
			if a.JSON {
				return a.printJSON(sum)
			}
			fmt.Fprintf(a.stdout, "policy %s registered: %s (entry %s)\n", sum.Name, sum.Digest, sum.ID)
			return nil
		},
	}
	cmd.Flags().StringVar(&name, "name", "", "the policy's name, as releases name it (default: FILE's base name)")
	cmd.Flags().StringVar(&as, "as", "", "local database only: the admin token whose name is recorded as the author")
	return cmd
}

// applyPolicyLocal appends the policy leaf to the local database as the
// admin token named as.
func (a *app) applyPolicyLocal(cmd *cobra.Command, name, as string, yml []byte, files map[string][]byte) (client.PolicySummary, error) {
	ctx := cmd.Context()
	l, err := a.openLedger(ctx, ledgerOptions{as: as})
	if err != nil {
		return client.PolicySummary{}, err
	}
	defer l.Close()
	ll, ok := l.(*localLedger)
	if !ok {
		return client.PolicySummary{}, fmt.Errorf("not a local ledger")
	}
	who, err := ll.actor(ctx, ledger.ScopeAdmin)
	if err != nil {
		return client.PolicySummary{}, err
	}
	rec := ledger.PolicyRecord{Name: name, Digest: ledger.PolicyDigest(string(yml), files), Policy: string(yml), Files: files, AppliedAt: time.Now().UTC(), AppliedBy: who.Name}
	body, err := ledger.CanonicalBody(&rec)
	if err != nil {
		return client.PolicySummary{}, err
	}
	res, err := ll.Append(ctx, []ledger.Record{{Kind: ledger.KindPolicy, Body: body}}, "")
	if err != nil {
		return client.PolicySummary{}, err
	}
	e := res.Entries[0]
	return client.PolicySummary{ID: e.ID, Index: e.Index, Name: rec.Name, Digest: rec.Digest, AppliedAt: rec.AppliedAt, AppliedBy: rec.AppliedBy}, nil
}

func policyShowCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "show NAME|DIGEST",
		Short: "Show the newest registered policy of a name, or the policy of a digest",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			l, err := a.openLedger(cmd.Context(), ledgerOptions{})
			if err != nil {
				return errExit(2, "open ledger: %v", err)
			}
			defer l.Close()
			var rec ledger.PolicyRecord
			if rl, ok := l.(remoteLedger); ok {
				if rec, err = rl.Policy(cmd.Context(), args[0]); err != nil {
					return errExit(2, "%v", err)
				}
			} else {
				pe, err := auth.ResolvePolicy(cmd.Context(), l, args[0], 0)
				if err != nil {
					return errExit(2, "%v", err)
				}
				rec = pe.Policy
			}
			if a.JSON {
				return a.printJSON(rec)
			}
			fmt.Fprintf(a.stdout, "policy %s %s (applied %s by %s)\n", rec.Name, rec.Digest, rec.AppliedAt.Format(time.RFC3339), orDash(rec.AppliedBy))
			names := make([]string, 0, len(rec.Files))
			for f := range rec.Files {
				names = append(names, f)
			}
			sort.Strings(names)
			for _, f := range names {
				fmt.Fprintf(a.stdout, "  file %s (%d bytes)\n", f, len(rec.Files[f]))
			}
			fmt.Fprintf(a.stdout, "%s", rec.Policy)
			return nil
		},
	}
}
