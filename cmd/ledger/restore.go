package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/user"
	"strings"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/ledger/tlog"
	"github.com/spf13/cobra"
)

// LogEvent is the body of a KindLog leaf: an act on the log itself.
// Event "adopt": a database was accepted where no signed-state journal
// was (FromSize 0: what the log had signed is unknown here). Event
// "restore": the database was replaced by a copy of size ToSize
// (root ToRoot) after the log had signed FromSize (root FromRoot); the
// leaves and checkpoints after ToSize that were signed are given up, and
// the histories part after ToSize.
type LogEvent struct {
	Event    string      `json:"event"`
	FromSize uint64      `json:"from_size"`
	FromRoot ledger.Hash `json:"from_root"`
	ToSize   uint64      `json:"to_size"`
	ToRoot   ledger.Hash `json:"to_root"`
	By       string      `json:"by"`
	Reason   string      `json:"reason,omitempty"`
}

// runRestore accepts a database that is behind or disagrees with the
// signed-state journal: it audits the database whole, appends one "log"
// leaf recording the restore (what the journal had signed, what the
// database holds, who accepted it and why), then writes a restore line to
// the journal. It appends nothing when the database agrees with the
// journal.
func runRestore(ctx context.Context, a *app, by, reason string) (string, error) {
	st, state, err := openChecked(ctx, a.DB, a.dataDir(), a.log, true, 0)
	var se *tlog.StartError
	if err == nil {
		st.Close()
		return "nothing to accept: the database agrees with the last checkpoint this log signed", nil
	}
	if !errors.As(err, &se) || !se.Rollback || st == nil {
		return "", err
	}
	defer st.Close()
	rep, err := st.Audit(ctx)
	if err != nil {
		return "", err
	}
	if !rep.OK {
		return "", fmt.Errorf("the restored database does not audit (%s): restore another copy", rep.Problem)
	}
	from, _ := state.Last()
	event := "restore"
	if se.NoJournal {
		event = "adopt"
	}
	to, err := st.Checkpoint(ctx)
	if err != nil {
		return "", err
	}
	body, err := json.Marshal(LogEvent{Event: event, FromSize: from.Size, FromRoot: from.Root, ToSize: to.Size, ToRoot: to.Root, By: by, Reason: reason})
	if err != nil {
		return "", err
	}
	res, err := st.Append(ctx, []ledger.Record{{Kind: ledger.KindLog, Body: body}}, "")
	if err != nil {
		return "", fmt.Errorf("record the restore: %w", err)
	}
	if err := state.RecordRestore(from, res.Checkpoint, time.Now()); err != nil {
		return "", err
	}
	return fmt.Sprintf("restore accepted: the log had signed size %d (root %s); the database holds size %d (root %s). Recorded as leaf %d (checkpoint size %d) and in %s. Witnesses and clients holding a checkpoint beyond size %d see the histories part there", from.Size, from.Root, to.Size, to.Root, res.Entries[0].Index, res.Checkpoint.Size, state.Path(), to.Size), nil
}

func newRestoreCmd(a *app) *cobra.Command {
	var accept bool
	var by, reason string
	cmd := &cobra.Command{
		Use:   "restore --accept-rollback",
		Short: "Accept a restored database that is behind the last checkpoint this log signed, recording the restore as a leaf",
		Long: `After a restore from a backup, the server refuses to start when the database is
behind (or disagrees with) the last checkpoint the log signed, which it keeps
in the signed-state journal beside ledger.key: signing over it would fork the
log under the same key. Put the newest copy in place first. When no newer copy
exists, accept this one with --accept-rollback: the database is audited whole,
one "log" leaf records the restore (the size and root the log had signed, the
size and root it goes on from, --by, --reason) and the journal records it.
Nothing else is appended. Witnesses keep refusing checkpoints that do not
extend what they cosigned, and ` + "`ledger audit --against`" + ` a saved checkpoint
beyond the restored size names the size where the histories part: the restore
is visible, as it must be.

Exit codes: 0 accepted (or nothing to accept), 2 refused or error.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if !accept {
				return errExit(2, "restore: --accept-rollback is required: it gives up the checkpoints signed beyond the database's size, visibly")
			}
			if a.Server != "" {
				return errExit(2, "restore acts on the database itself: run it where the database is, with --db (not --server)")
			}
			if by == "" {
				if u, err := user.Current(); err == nil {
					by = u.Username
				}
			}
			if strings.TrimSpace(by) == "" {
				return errExit(2, "restore: --by is required (who accepts the restore)")
			}
			msg, err := runRestore(cmd.Context(), a, by, reason)
			if err != nil {
				return errExit(2, "restore: %v", err)
			}
			fmt.Fprintln(a.stdout, msg)
			return nil
		},
	}
	cmd.Flags().BoolVar(&accept, "accept-rollback", false, "accept a database behind the last signed checkpoint (required)")
	cmd.Flags().StringVar(&by, "by", "", "who accepts the restore (default: the OS user)")
	cmd.Flags().StringVar(&reason, "reason", "", "why (recorded in the leaf)")
	return cmd
}
