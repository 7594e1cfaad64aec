package main

import (
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/evidence-ledger/ledger/runs"
	"github.com/spf13/cobra"
)

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
