package main

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"text/tabwriter"

	"github.com/evidence-ledger/ledger/admit"
	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/ledger/auth"
	"github.com/evidence-ledger/ledger/verify"
	"github.com/spf13/cobra"
)

// runnerLedger is what the runner commands and signed recording need of a
// ledger, local or remote: the registry and the signed append.
type runnerLedger interface {
	AddRunner(ctx context.Context, name string, keyFile []byte) (auth.RunnerState, ledger.AppendedEntry, error)
	RevokeRunner(ctx context.Context, name, reason string) (auth.RunnerState, ledger.AppendedEntry, error)
	Runners(ctx context.Context) (auth.RunnerRegistry, error)
	// AppendEnvelopes verifies DSSE envelopes of evidence against the
	// registered runner keys and appends the records with their signers,
	// atomically.
	AppendEnvelopes(ctx context.Context, envelopes [][]byte, idemKey string) (*ledger.AppendResult, error)
}

func (l *localLedger) AddRunner(ctx context.Context, name string, keyFile []byte) (auth.RunnerState, ledger.AppendedEntry, error) {
	who, err := l.actor(ctx, ledger.ScopeAdmin)
	if err != nil {
		return auth.RunnerState{}, ledger.AppendedEntry{}, err
	}
	st, res, err := admit.AddRunner(ctx, l.Store, name, keyFile, who.Name)
	if err != nil {
		return auth.RunnerState{}, ledger.AppendedEntry{}, err
	}
	return st, res.Entries[0], nil
}

func (l *localLedger) RevokeRunner(ctx context.Context, name, reason string) (auth.RunnerState, ledger.AppendedEntry, error) {
	who, err := l.actor(ctx, ledger.ScopeAdmin)
	if err != nil {
		return auth.RunnerState{}, ledger.AppendedEntry{}, err
	}
	st, res, err := admit.RevokeRunner(ctx, l.Store, name, reason, who.Name)
	if err != nil {
		return auth.RunnerState{}, ledger.AppendedEntry{}, err
	}
	return st, res.Entries[0], nil
}

func (l *localLedger) Runners(ctx context.Context) (auth.RunnerRegistry, error) {
	return auth.LoadRunnerKeys(ctx, l.Store, 0)
}

// Append appends recs to the local database as POST /api/v1/evidence
// does on a server: an evidence record that is a DSSE envelope is verified
// against the local runner registry and appended with its signer; plain
// evidence that carries a signer is refused (CodeInvalid naming
// "[i].signer"), since only a verified envelope may set it. Other kinds
// pass through.
func (l *localLedger) Append(ctx context.Context, recs []ledger.Record, idemKey string) (*ledger.AppendResult, error) {
	out, err := admit.LocalRecords(ctx, l.Store, recs)
	if err != nil {
		return nil, err
	}
	return l.Store.Append(ctx, out, idemKey)
}

// AppendEnvelopes verifies each envelope against the local registry, as the
// server does for POST /api/v1/evidence, and appends the records.
func (l *localLedger) AppendEnvelopes(ctx context.Context, envelopes [][]byte, idemKey string) (*ledger.AppendResult, error) {
	recs := make([]ledger.Record, len(envelopes))
	for i, env := range envelopes {
		if e, _ := ledger.EvidenceShape(env); !e {
			return nil, ledger.FieldError(fmt.Sprintf("[%d].payloadType", i), "not a DSSE envelope")
		}
		recs[i] = ledger.Record{Kind: ledger.KindEvidence, Body: env}
	}
	return l.Append(ctx, recs, idemKey)
}

// appendSigned appends evidence bodies to l: plain when keyFile is "",
// else each signed into a DSSE envelope with the runner key in keyFile
// (verify.ParseRunnerPrivateKey) and appended through AppendEnvelopes.
func appendSigned(ctx context.Context, l theLedger, bodies [][]byte, keyFile, idemKey string) (*ledger.AppendResult, error) {
	if keyFile == "" {
		recs := make([]ledger.Record, len(bodies))
		for i, b := range bodies {
			recs[i] = ledger.Record{Kind: ledger.KindEvidence, Body: b}
		}
		return l.Append(ctx, recs, idemKey)
	}
	priv, err := loadSignKey("--sign-key", keyFile)
	if err != nil {
		return nil, err
	}
	envs := make([][]byte, len(bodies))
	for i, b := range bodies {
		if envs[i], err = verify.SignEvidence(ctx, priv, b); err != nil {
			return nil, fmt.Errorf("sign record %d: %w", i, err)
		}
	}
	return l.AppendEnvelopes(ctx, envs, idemKey)
}

// loadSignKey reads the Ed25519 private key in file
// (verify.ParseRunnerPrivateKey), given with the command-line flag flag
// ("--sign-key", "--key"), which the CodeInvalid error names; the error
// never quotes the file's content.
func loadSignKey(flag, file string) (ed25519.PrivateKey, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, ledger.FieldError(flag, "read the key: %v", err)
	}
	priv, err := verify.ParseRunnerPrivateKey(data)
	if err != nil {
		return nil, ledger.FieldError(flag, "%s: %v", file, err)
	}
	return priv, nil
}

func newRunnerCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "runner",
		Short: "Register, list and revoke runner keys (the keys whose DSSE signatures evidence may carry)",
		Long: `Runner keys are Ed25519 keys of the hosts and CI jobs that run lanes. An admin
registers each public key under a runner name (a runner-key leaf of the log);
evidence posted as a DSSE envelope signed by a registered, unrevoked key is
recorded with its signer, and a gate with signed_by counts only evidence signed
by the runners it names. Key files: an OpenSSH public key ("ssh-ed25519 AAAA...",
a .pub file) or a PEM PUBLIC KEY (PKIX Ed25519); signing keys (--sign-key of run
and record): an unencrypted OpenSSH private key or a PEM PRIVATE KEY (PKCS #8).`,
	}
	cmd.AddCommand(newRunnerAddCmd(a), newRunnerRevokeCmd(a), newRunnerListCmd(a), newRunnerKeygenCmd(a), newRunnerAuditCmd(a))
	return cmd
}

func newRunnerAddCmd(a *app) *cobra.Command {
	var as string
	add := &cobra.Command{
		Use:   "add NAME KEYFILE",
		Short: "Register KEYFILE's public key as runner NAME (admin)",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			data, err := os.ReadFile(args[1])
			if err != nil {
				return errExit(2, "read key: %v", err)
			}
			l, err := a.runnerLedger(cmd.Context(), as)
			if err != nil {
				return errExit(2, "%v", err)
			}
			defer l.Close()
			st, e, err := l.(runnerLedger).AddRunner(cmd.Context(), args[0], data)
			if err != nil {
				return errExit(2, "runner add: %v", err)
			}
			what := "registered"
			if e.Existing {
				what = "already registered:"
			}
			return a.printRunner(st, e, what)
		},
	}
	add.Flags().StringVar(&as, "as", "", "local database: the admin token's name to act as")
	return add
}

func newRunnerRevokeCmd(a *app) *cobra.Command {
	var as, reason string
	revoke := &cobra.Command{
		Use:   "revoke NAME --reason R",
		Short: "Revoke runner NAME's live key (admin); evidence it signs is refused from then on",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			l, err := a.runnerLedger(cmd.Context(), as)
			if err != nil {
				return errExit(2, "%v", err)
			}
			defer l.Close()
			st, e, err := l.(runnerLedger).RevokeRunner(cmd.Context(), args[0], reason)
			if err != nil {
				return errExit(2, "runner revoke: %v", err)
			}
			return a.printRunner(st, e, "revoked")
		},
	}
	revoke.Flags().StringVar(&as, "as", "", "local database: the admin token's name to act as")
	revoke.Flags().StringVar(&reason, "reason", "", "why the key is revoked (required)")
	return revoke
}

func newRunnerListCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List runner key registrations, live and revoked",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			l, err := a.openLedger(cmd.Context(), ledgerOptions{})
			if err != nil {
				return errExit(2, "%v", err)
			}
			defer l.Close()
			reg, err := l.Runners(cmd.Context())
			if err != nil {
				return errExit(2, "runner list: %v", err)
			}
			if a.JSON {
				return a.printJSON(reg)
			}
			tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tKEY ID\tSTATE\tADDED (INDEX, BY)")
			for _, s := range reg.Runners {
				state := "live"
				if s.Revoked {
					state = fmt.Sprintf("revoked at %d by %s: %s", s.RevokedIndex, s.RevokedBy, s.Reason)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d, %s\n", s.Name, s.KeyID, state, s.Index, s.AddedBy)
			}
			return tw.Flush()
		},
	}
}

func newRunnerKeygenCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "keygen FILE",
		Short: "Write a new Ed25519 runner key: FILE (PKCS #8 PEM, mode 0600) and FILE.pub (OpenSSH)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			pub, err := writeRunnerKey(args[0])
			if err != nil {
				return errExit(2, "runner keygen: %v", err)
			}
			fmt.Fprintf(a.stdout, "wrote %s and %s.pub (key id %s)\n", args[0], args[0], verify.RunnerKeyID(pub))
			return nil
		},
	}
}

func newRunnerAuditCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "audit",
		Short: "Check every signed evidence record's DSSE envelope again against the runner keys registered before it",
		Long: `Reads every evidence record of the log and, for each that carries a signer, checks
that the runner-key entry it names registered that key before the record and had
not revoked it, that the kept envelope verifies under the key, and that its payload
is the record. Exit 0 when every signed record checks, 1 otherwise, 2 on errors.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			l, err := a.openLedger(cmd.Context(), ledgerOptions{})
			if err != nil {
				return errExit(2, "%v", err)
			}
			defer l.Close()
			rep, err := auditSigned(cmd.Context(), l)
			if err != nil {
				return errExit(2, "runner audit: %v", err)
			}
			if a.JSON {
				if err := a.printJSON(rep); err != nil {
					return err
				}
			} else {
				fmt.Fprintf(a.stdout, "%d evidence records, %d signed, %d problems\n", rep.Records, rep.Signed, len(rep.Problems))
				for _, p := range rep.Problems {
					fmt.Fprintln(a.stdout, "  "+p)
				}
			}
			if len(rep.Problems) > 0 {
				return errExit(1, "")
			}
			return nil
		},
	}
}

// runnerLedger opens the ledger for a runner-key change: over --server the
// token's holder is the author (and needs admin scope); locally --as names
// the admin token.
func (a *app) runnerLedger(ctx context.Context, as string) (theLedger, error) {
	return a.openLedger(ctx, ledgerOptions{as: as, records: true})
}

func (a *app) printRunner(st auth.RunnerState, e ledger.AppendedEntry, what string) error {
	if a.JSON {
		return a.printJSON(map[string]any{"runner": st, "entry": appendedEntryJSON{e.ID, e.Index, e.LeafHash, e.Existing, e.Proof}})
	}
	fmt.Fprintf(a.stdout, "%s runner %s key %s  id=%s  index=%d\n", what, st.Name, st.KeyID, e.ID, e.Index)
	return nil
}

// writeRunnerKey writes a new Ed25519 key to file (PKCS #8 PEM, 0600,
// refusing to overwrite) and its OpenSSH public key to file.pub.
func writeRunnerKey(file string) (ed25519.PublicKey, error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return nil, err
	}
	f, err := os.OpenFile(file, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, err
	}
	if err := pem.Encode(f, &pem.Block{Type: "PRIVATE KEY", Bytes: der}); err != nil {
		f.Close()
		return nil, err
	}
	if err := f.Close(); err != nil {
		return nil, err
	}
	if err := os.WriteFile(file+".pub", []byte(verify.AuthorizedKey(pub)+"\n"), 0o644); err != nil {
		return nil, err
	}
	return pub, nil
}

// signedAudit is the report of `ledger runner audit`.
type signedAudit struct {
	Records  int      `json:"records"`
	Signed   int      `json:"signed"`
	Problems []string `json:"problems"`
}

// auditSigned re-verifies every signed evidence record of l against the
// registry as of the record's index.
func auditSigned(ctx context.Context, l theLedger) (signedAudit, error) {
	rep := signedAudit{Problems: []string{}}
	cp, err := l.Checkpoint(ctx)
	if err != nil {
		return rep, err
	}
	full, err := l.Runners(ctx)
	if err != nil {
		return rep, err
	}
	f := ledger.EvidenceFilter{AsOfSize: cp.Size, Limit: 1000}
	for {
		es, next, err := l.Evidence(ctx, f)
		if err != nil {
			return rep, err
		}
		for _, e := range es {
			rep.Records++
			if e.Evidence.Signer == nil {
				continue
			}
			rep.Signed++
			if len(e.Body) == 0 {
				// A remote list answer carries no body: read the entry.
				ent, err := l.Entry(ctx, e.ID)
				if err != nil {
					return rep, err
				}
				e.Entry = ent
			}
			if err := verify.ReverifySigned(ctx, e, registryBefore(full, e.Index)); err != nil {
				rep.Problems = append(rep.Problems, err.Error())
			}
		}
		if next == "" {
			return rep, nil
		}
		f.Cursor = next
	}
}

// registryBefore is reg as it stood before log index idx: registrations
// added before it, with revocations before it.
func registryBefore(reg auth.RunnerRegistry, idx uint64) auth.RunnerRegistry {
	var out auth.RunnerRegistry
	for _, s := range reg.Runners {
		if s.Index >= idx {
			continue
		}
		if s.Revoked && s.RevokedIndex >= idx {
			s.Revoked = false
		}
		out.Runners = append(out.Runners, s)
	}
	return out
}
