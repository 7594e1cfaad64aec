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

func init() {
	register(func(a *app) *cobra.Command {
		var idem string
		cmd := &cobra.Command{
			Use:   "record FILE|-",
			Short: "Append evidence (a JSON object or an array of them) to the ledger, atomically",
			Long: `Append evidence records to the log. With --server the records go through the
HTTP API (POST /api/v1/evidence, needs a token of scope record); otherwise
they are appended to the local database given by --db. An array is appended
atomically: all records or none. Identical records already in the log are not
appended again.

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
				type item struct {
					ID       string      `json:"id"`
					Index    uint64      `json:"index"`
					LeafHash ledger.Hash `json:"leaf_hash"`
					Existing bool        `json:"existing"`
				}
				var items []item
				var cp ledger.Checkpoint
				var raw json.RawMessage
				if a.Server != "" {
					if _, err := a.call(cmd.Context(), "POST", "/api/v1/evidence", trimmed, "application/json", map[string]string{"Idempotency-Key": idem}, &raw); err != nil {
						return errExit(2, "record: %v", err)
					}
					var multi struct {
						Entries    []item            `json:"entries"`
						Checkpoint ledger.Checkpoint `json:"checkpoint"`
					}
					var single struct {
						item
						Checkpoint ledger.Checkpoint `json:"checkpoint"`
					}
					if trimmed[0] == '[' {
						json.Unmarshal(raw, &multi)
						items, cp = multi.Entries, multi.Checkpoint
					} else {
						json.Unmarshal(raw, &single)
						items, cp = []item{single.item}, single.Checkpoint
					}
				} else {
					var raws []json.RawMessage
					if trimmed[0] == '[' {
						var err error
						if raws, err = ledger.SplitArray(trimmed); err != nil {
							return errExit(2, "record %s: %v", args[0], err)
						}
						if len(raws) == 0 {
							return errExit(2, "record %s: empty array, nothing to record", args[0])
						}
					} else {
						raws = []json.RawMessage{trimmed}
					}
					recs := make([]ledger.Record, len(raws))
					for i, r := range raws {
						recs[i] = ledger.Record{Kind: ledger.KindEvidence, Body: r}
					}
					st, err := a.openStore(cmd.Context())
					if err != nil {
						return errExit(2, "%v", err)
					}
					defer st.Close()
					res, err := st.Append(cmd.Context(), recs, idem)
					if err != nil {
						return errExit(2, "record %s: %v", args[0], err)
					}
					for _, e := range res.Entries {
						items = append(items, item{e.ID, e.Index, e.LeafHash, e.Existing})
					}
					cp = res.Checkpoint
					raw, _ = json.Marshal(res)
				}
				if a.JSON {
					fmt.Fprintln(a.stdout, string(raw))
					return nil
				}
				for _, it := range items {
					state := "recorded"
					if it.Existing {
						state = "already present"
					}
					fmt.Fprintf(a.stdout, "%s  id=%s  index=%d  leaf=%s\n", state, it.ID, it.Index, it.LeafHash)
				}
				fmt.Fprintf(a.stdout, "checkpoint: size=%d root=%s\n", cp.Size, cp.Root)
				return nil
			},
		}
		cmd.Flags().StringVar(&idem, "idempotency-key", "", "replaying the same key returns the original result and appends nothing")
		return cmd
	})
}
