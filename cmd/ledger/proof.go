package main

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/mod/sumdb/note"

	"github.com/evidence-ledger/ledger/client"
	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/ledger/tlogproof"
	"github.com/evidence-ledger/ledger/witness"
)

func newProofCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{Use: "proof", Short: "Fetch and verify offline proofs of log entries (c2sp.org/tlog-proof)"}

	var key, policyPath, leafPath string
	verify := &cobra.Command{
		Use:   "verify FILE",
		Short: "Verify a tlog-proof offline, with the log's public key and optionally a witness policy",
		Long: `Verify a c2sp.org/tlog-proof with no server: the checkpoint's signature with
--key (default: ledger.pub in the data directory), the entry's leaf bytes (the
proof's extra data, or --leaf) against the inclusion path, and, with
--witness-policy (a c2sp.org/tlog-policy file), the witnesses' cosignatures and
the quorum.

Exit codes: 0 verified, 1 the proof does not verify, 2 error.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runProofVerify(a, args[0], key, policyPath, leafPath)
		},
	}
	verify.Flags().StringVar(&key, "key", "", "the log's public verifier key file (default: ledger.pub in the data directory)")
	verify.Flags().StringVar(&policyPath, "witness-policy", "", "a c2sp.org/tlog-policy file: require its quorum of cosignatures")
	verify.Flags().StringVar(&leafPath, "leaf", "", "the entry's exact leaf bytes (default: the proof's extra data)")

	var outPath string
	get := &cobra.Command{
		Use:   "get ID",
		Short: "Fetch the tlog-proof of an evidence entry from --server",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := client.New(a.Server, client.Options{Token: a.Token, Timeout: a.Timeout})
			if err != nil {
				return errExit(2, "proof get: %v", err)
			}
			raw, err := c.TLogProof(cmd.Context(), args[0])
			if err != nil {
				return errExit(2, "proof get: %v", err)
			}
			if outPath == "" || outPath == "-" {
				_, err := a.stdout.Write(raw)
				return err
			}
			if err := os.WriteFile(outPath, raw, 0o644); err != nil {
				return errExit(2, "proof get: %v", err)
			}
			return nil
		},
	}
	get.Flags().StringVarP(&outPath, "output", "o", "", "write the proof to this file (default: stdout)")
	cmd.AddCommand(verify, get)
	return cmd
}

// runProofVerify is `ledger proof verify`: exit 0 verified, 1 not, 2 error.
func runProofVerify(a *app, file, key, policyPath, leafPath string) error {
	vkey, err := readVerifierKey(a.keyPath(key))
	if err != nil {
		return errExit(2, "proof verify: %v", err)
	}
	// --key may be a key chain (one verifier key a line, `ledger key
	// chain`): the proof's checkpoint may be signed by any of its keys.
	var vs []note.Verifier
	for _, k := range strings.Fields(vkey) {
		v, err := note.NewVerifier(k)
		if err != nil {
			return errExit(2, "proof verify: --key: %v", err)
		}
		vs = append(vs, v)
	}
	if len(vs) == 0 {
		return errExit(2, "proof verify: --key: no verifier key in %s", a.keyPath(key))
	}
	var pol *witness.Policy
	if policyPath != "" {
		b, err := readCapped(policyPath)
		if err != nil {
			return errExit(2, "proof verify: --witness-policy: %v", err)
		}
		if pol, err = witness.ParsePolicy(b); err != nil {
			return errExit(2, "proof verify: --witness-policy %s: %v", policyPath, err)
		}
	}
	var leaf []byte
	if leafPath != "" {
		if leaf, err = readCapped(leafPath); err != nil {
			return errExit(2, "proof verify: --leaf: %v", err)
		}
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return errExit(2, "proof verify: %v", err)
	}
	var res tlogproof.Result
	var verr error
	for _, v := range vs {
		if res, verr = tlogproof.Verify(b, leaf, v, pol); verr == nil || errors.Is(verr, witness.ErrQuorum) {
			break
		}
	}
	if verr != nil && !errors.Is(verr, witness.ErrQuorum) {
		fmt.Fprintf(a.stdout, "proof FAILED: %v\n", verr)
		return &exitError{code: 1}
	}
	if a.JSON {
		out := map[string]any{"ok": verr == nil, "result": res}
		if l, err := ledger.DecodeLeaf(res.Leaf); err == nil {
			out["leaf"] = l
		}
		if verr != nil {
			out["problem"] = verr.Error()
		}
		a.printJSON(out)
	} else {
		fmt.Fprintf(a.stdout, "entry %d (leaf hash %s) is in log %s at size %d, root %s\n", res.Index, res.LeafHash, res.Origin, res.Size, res.Root)
		if pol != nil {
			fmt.Fprintf(a.stdout, "cosigned by %d witnesses (%s); quorum %s met: %v\n", len(res.Cosigners), strings.Join(res.Cosigners, ", "), pol.Quorum, res.QuorumMet)
		}
		if verr != nil {
			fmt.Fprintf(a.stdout, "proof FAILED: %v\n", verr)
		}
	}
	if verr != nil {
		return &exitError{code: 1}
	}
	return nil
}
