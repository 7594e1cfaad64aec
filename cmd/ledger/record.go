package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/spf13/cobra"
)

func newRecordCmd(a *app) *cobra.Command {
	var idem, signKey string
	cmd := &cobra.Command{
		Use:   "record FILE|-",
		Short: "Append evidence (a JSON object or an array of them) to the ledger, atomically",
		Long: `Append evidence records to the log. With --server the records go through the
HTTP API (POST /api/v1/evidence, needs a token of scope record); otherwise
they are appended to the local database given by --db. An array is appended
atomically: all records or none. Identical records already in the log are not
appended again. With --sign-key FILE each record is signed as a DSSE envelope
with that runner key and recorded with its signer (the key must be registered:
ledger runner add).

Exit codes: 0 recorded, 2 bad input or any error (nothing was appended).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var data []byte
			var err error
			if args[0] == "-" {
				data, err = io.ReadAll(io.LimitReader(os.Stdin, 1<<30))
			} else {
				data, err = os.ReadFile(args[0])
			}
			if err != nil {
				return errExit(2, "read evidence: %v", err)
			}
			trimmed := bytes.TrimSpace(data)
			if len(trimmed) == 0 {
				return errExit(2, "%s is empty: want an evidence JSON object or array", args[0])
			}
			var raws []json.RawMessage
			if trimmed[0] == '[' {
				if raws, err = ledger.SplitArray(trimmed); err != nil {
					return errExit(2, "record %s: %v", args[0], err)
				}
				if len(raws) == 0 {
					return errExit(2, "record %s: empty array, nothing to record", args[0])
				}
			} else {
				raws = []json.RawMessage{trimmed}
			}
			bodies := make([][]byte, len(raws))
			for i, r := range raws {
				bodies[i] = r
			}
			l, err := a.openLedger(cmd.Context(), ledgerOptions{})
			if err != nil {
				return errExit(2, "%v", err)
			}
			defer l.Close()
			res, err := appendSigned(cmd.Context(), l, bodies, signKey, idem)
			if err != nil {
				return errExit(2, "record %s: %v", args[0], err)
			}
			if a.JSON {
				return a.printJSON(appendedOf(res))
			}
			for _, e := range res.Entries {
				state := "recorded"
				if e.Existing {
					state = "already present"
				}
				fmt.Fprintf(a.stdout, "%s  id=%s  index=%d  leaf=%s\n", state, e.ID, e.Index, e.LeafHash)
			}
			fmt.Fprintf(a.stdout, "checkpoint: size=%d root=%s\n", res.Checkpoint.Size, res.Checkpoint.Root)
			return nil
		},
	}
	cmd.Flags().StringVar(&idem, "idempotency-key", "", "replaying the same key returns the original result and appends nothing")
	cmd.Flags().StringVar(&signKey, "sign-key", "", "sign each record as a DSSE envelope with this registered runner key (see ledger runner)")
	return cmd
}
