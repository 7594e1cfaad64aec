package main

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/evidence-ledger/ledger/runner"
	"io"
	"os"
	"strings"
	"time"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/evidence-ledger/ledger/client"
	"github.com/evidence-ledger/ledger/gates"
	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/verify"
	"github.com/sigstore/sigstore-go/pkg/root"
	"github.com/spf13/cobra"
)

// materialFlags are the verification material of verify commit|tag.
type materialFlags struct {
	keyrings       []string
	trusted        []string
	allowedSigners string
	trustedRoot    string
	caPool         string
	now            string
	certifiedBy    []string // OpenPGP introducers (issue 16)
	depth          int
}

func (m *materialFlags) add(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringArrayVar(&m.keyrings, "keyring", nil, "OpenPGP public keyring file, armoured or binary (repeatable)")
	f.StringArrayVar(&m.trusted, "trust", nil, "trusted OpenPGP primary-key fingerprint (repeatable); others read U")
	f.StringVar(&m.allowedSigners, "allowed-signers", "", "SSH allowed-signers file (git's gpg.ssh.allowedSignersFile format)")
	f.StringVar(&m.trustedRoot, "trusted-root", "", "Sigstore trusted_root.json for gitsign (X.509) signatures")
	f.StringVar(&m.caPool, "ca-pool", "", "PEM CA certificates for S/MIME signatures")
	f.StringVar(&m.now, "now", "", "verification time, RFC 3339 (default: now); OpenPGP expiry and revocation are judged at it")
	f.StringArrayVar(&m.certifiedBy, "certified-by", nil, "OpenPGP introducer fingerprint (repeatable): keys it certified read G, as a policy's certified_by")
	f.IntVar(&m.depth, "depth", 0, "certification path length for --certified-by (default 1)")
}

func parseNow(s string) (time.Time, error) {
	if s == "" {
		return time.Now(), nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("--now %q: want RFC 3339 (2026-11-29T00:00:00Z)", s)
	}
	return t, nil
}

func (m *materialFlags) options(stderr io.Writer) (*verify.Options, error) {
	now, err := parseNow(m.now)
	if err != nil {
		return nil, err
	}
	o := &verify.Options{Now: now, TrustedFingerprints: m.trusted}
	if m.depth < 0 || m.depth > 8 || (m.depth != 0 && len(m.certifiedBy) == 0) {
		return nil, fmt.Errorf("--depth %d: want 1 to 8, with --certified-by", m.depth)
	}
	for _, f := range m.certifiedBy {
		o.Introducers = append(o.Introducers, verify.Introducer{Fingerprint: f, Depth: m.depth})
	}
	for _, k := range m.keyrings {
		var el openpgp.EntityList
		var warns []string
		if el, warns, err = verify.LoadKeyringWarn(k); err != nil {
			return nil, fmt.Errorf("keyring %s: %w", k, err)
		}
		for _, w := range warns {
			fmt.Fprintf(stderr, "warning: keyring %s: %s\n", k, w)
		}
		o.Keyring = append(o.Keyring, el...)
	}
	if m.allowedSigners != "" {
		if o.AllowedSigners, err = verify.LoadAllowedSigners(m.allowedSigners); err != nil {
			return nil, err
		}
		for _, sk := range o.AllowedSigners.Skipped {
			fmt.Fprintf(stderr, "warning: allowed signers %s line %d skipped, as ssh-keygen skips it: %s\n", m.allowedSigners, sk.Line, sk.Reason)
		}
	}
	if m.trustedRoot != "" {
		var tr *root.TrustedRoot
		if tr, err = verify.LoadTrustedRoot(m.trustedRoot); err != nil {
			return nil, err
		}
		o.TrustedRoot = tr
	}
	if m.caPool != "" {
		var p *x509.CertPool
		if p, err = verify.LoadCAPool(m.caPool); err != nil {
			return nil, err
		}
		o.CAPool = p
	}
	return o, nil
}

func newVerifyCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "verify",
		Short: "Verify signed heads, commits and tags, and tree equivalence",
		Long: `Verify git signatures (OpenPGP, SSH, X.509/gitsign) on raw object bytes and
compare a signed head's tree with the reviewed source.

Exit codes: 0 verified (trusted / letter G / equivalent), 1 verified but not
good or not trusted or not equivalent, 2 bad input or any error.`,
	}
	cmd.AddCommand(verifyHeadCmd(a), verifyObjectCmd(a, "commit"), verifyObjectCmd(a, "tag"), verifyTreeCmd(a))
	return cmd
}

func verifyHeadCmd(a *app) *cobra.Command {
	var repoPath, ref, repoName, policyPath, now, release, component, policyName string
	var record bool
	cmd := &cobra.Command{
		Use:   "head",
		Short: "Verify the signature on a repository head and apply the trust policy",
		Long: `Verify the commit (or annotated tag) a ref points at, as git hashed it, and
decide trust with the policy file (see the verify package's Policy for its
YAML). --record appends the result to the local ledger (--db) as a head record.

With --server, the head's raw objects (the commit, or the tag and the commit
it tags) are uploaded instead: the server recomputes their ids, verifies the
signature under the policy --release binds (or the registered policy
--policy-name names) and records its own verification. No policy file is
sent; --policy is refused.

Exit codes: 0 trusted, 1 untrusted or no policy rule, 2 error.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if a.Server != "" {
				if policyPath != "" || record || now != "" {
					return errExit(2, "with --server the server verifies, under the release's or a registered policy, at its own clock, and records: drop --policy, --record and --now (use --release or --policy-name)")
				}
				return a.uploadHead(cmd, repoPath, repoName, ref, release, component, policyName)
			}
			if release != "" || component != "" || policyName != "" {
				return errExit(2, "--release, --component and --policy-name need --server (the server holds the registered policies)")
			}
			t, err := parseNow(now)
			if err != nil {
				return errExit(2, "%v", err)
			}
			var pol *verify.Policy
			if policyPath != "" {
				// Loaded as the bundle `ledger policy apply` registers, so
				// the recorded digest is the registered policy's digest.
				yml, files, err := verify.ReadPolicyBundle(policyPath)
				if err == nil {
					pol, err = verify.PolicyFromBundle(yml, files)
				}
				if err != nil {
					return errExit(2, "policy: %v", err)
				}
			}
			hv, err := verify.VerifyHead(cmd.Context(), verify.VerifyHeadOptions{RepoPath: repoPath, Repository: repoName, Ref: ref, Policy: pol, Now: t})
			if err != nil {
				return errExit(2, "verify head: %v", err)
			}
			var entryID string
			if record {
				// Through --server the client refuses a head record: a
				// server records only the heads it verified itself (POST
				// /api/v1/heads/verify), never a client's verdict.
				l, err := a.openLedger(cmd.Context(), ledgerOptions{})
				if err != nil {
					return errExit(2, "open ledger: %v", err)
				}
				defer l.Close()
				body, err := ledger.CanonicalBody(hv)
				if err != nil {
					return errExit(2, "record head: %v", err)
				}
				res, err := l.Append(cmd.Context(), []ledger.Record{{Kind: ledger.KindHead, Body: body}}, "")
				if err != nil {
					return errExit(2, "record head: %v", err)
				}
				if len(res.Entries) > 0 {
					entryID = res.Entries[0].ID
				}
			}
			if a.JSON {
				out := struct {
					ledger.HeadVerification
					Entry string `json:"entry,omitempty"`
				}{hv, entryID}
				if err := a.printJSON(out); err != nil {
					return errExit(2, "%v", err)
				}
			} else {
				fmt.Fprintf(a.stdout, "%s %s %s %s: verdict %s, policy %s (git %%G?: %s)\n", hv.Repository, hv.Ref, hv.ObjectType, hv.Object, hv.Verdict, hv.Decision, hv.GitLetter)
				if hv.Scheme != "" {
					fmt.Fprintf(a.stdout, "  scheme=%s signer=%q key=%s\n", hv.Scheme, hv.Signer, hv.Key)
				}
				if hv.Reason != "" {
					fmt.Fprintf(a.stdout, "  %s\n", hv.Reason)
				}
				if entryID != "" {
					fmt.Fprintf(a.stdout, "  recorded as %s\n", entryID)
				}
			}
			if hv.Decision != ledger.DecisionTrusted {
				return errExit(1, "")
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&repoPath, "repo", ".", "path of the git repository")
	f.StringVar(&ref, "ref", "HEAD", "ref to verify (refs/heads/main, a branch or tag name, HEAD, or an object id)")
	f.StringVar(&repoName, "repository", "", "repository name for the record and policy matching (default: origin URL, else the path)")
	f.StringVar(&policyPath, "policy", "", "trust policy YAML file")
	f.StringVar(&now, "now", "", "verification time, RFC 3339 (default: now)")
	f.BoolVar(&record, "record", false, "append the verification to the local ledger (--db)")
	f.StringVar(&release, "release", "", "with --server: the release whose bound policy judges the head")
	f.StringVar(&component, "component", "", "with --server --release: the component (default: the release's only one); names the repository")
	f.StringVar(&policyName, "policy-name", "", "with --server, outside a release: a registered policy's name or digest")
	return cmd
}

// uploadHead sends the head's objects to the server, which verifies and
// records them (client.VerifyHead), and prints the server's verification.
func (a *app) uploadHead(cmd *cobra.Command, repoPath, repoName, ref, release, component, policyName string) error {
	if a.Token == "" {
		return errExit(2, "--server needs --token (or LEDGER_TOKEN) with scope record")
	}
	src, err := verify.CollectHead(repoPath, repoName, ref)
	if err != nil {
		return errExit(2, "read head: %v", err)
	}
	c, err := client.New(a.Server, client.Options{Token: a.Token, Timeout: a.Timeout})
	if err != nil {
		return errExit(2, "%v", err)
	}
	up := client.HeadUpload{Ref: src.Ref, Release: release, Component: component, Policy: policyName, ObjectFormat: src.Format}
	if repoName != "" || release == "" {
		up.Repository = src.Repository // with a release, the server names it after the component
	}
	for _, o := range src.Objects {
		up.Objects = append(up.Objects, client.Object{Type: o.Type, ID: o.ID, Data: o.Data})
	}
	hv, e, err := c.VerifyHead(cmd.Context(), up)
	if err != nil {
		return errExit(2, "verify head on %s: %v", a.Server, err)
	}
	if a.JSON {
		out := struct {
			ledger.HeadVerification
			Entry string `json:"entry,omitempty"`
		}{hv, e.ID}
		if err := a.printJSON(out); err != nil {
			return errExit(2, "%v", err)
		}
	} else {
		fmt.Fprintf(a.stdout, "%s %s %s %s: verdict %s, policy %s (git %%G?: %s), verified by %s\n", hv.Repository, hv.Ref, hv.ObjectType, hv.Object, hv.Verdict, hv.Decision, hv.GitLetter, a.Server)
		if hv.Scheme != "" {
			fmt.Fprintf(a.stdout, "  scheme=%s signer=%q key=%s\n", hv.Scheme, hv.Signer, hv.Key)
		}
		if hv.Reason != "" {
			fmt.Fprintf(a.stdout, "  %s\n", hv.Reason)
		}
		fmt.Fprintf(a.stdout, "  policy %s; recorded as %s\n", hv.Policy, e.ID)
	}
	if hv.Decision != ledger.DecisionTrusted {
		return errExit(1, "")
	}
	return nil
}

func verifyObjectCmd(a *app, typ string) *cobra.Command {
	var m materialFlags
	var repoPath string
	cmd := &cobra.Command{
		Use:   typ + " OBJECT...",
		Short: "Verify the signature of " + typ + " objects, printing git's %G? letter",
		Long: `Each OBJECT is a file holding the raw object bytes (as git cat-file ` + typ + `
prints them; a file named <id>.` + typ + ` is checked against that id) or a
revision in --repo. Prints one line per object: letter, id, scheme, signer,
key and the reason, or a JSON array with --json.

Exit codes: 0 every object G, 1 some object not G, 2 error.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			base, err := m.options(a.stderr)
			if err != nil {
				return errExit(2, "%v", err)
			}
			var results []verify.Result
			allGood := true
			for _, arg := range args {
				opts := *base
				raw, err := os.ReadFile(arg)
				objType := typ
				if err == nil {
					name := arg[strings.LastIndexAny(arg, `/\`)+1:]
					if id, ok := strings.CutSuffix(name, "."+typ); ok && len(id) == 40 {
						opts.ExpectedID = id
					}
				} else if errors.Is(err, os.ErrNotExist) {
					if raw, objType, err = verify.ReadObject(repoPath, arg); err != nil {
						return errExit(2, "%s: %v", arg, err)
					}
					if objType != typ {
						return errExit(2, "%s is a %s, not a %s", arg, objType, typ)
					}
				} else {
					return errExit(2, "%s: %v", arg, err)
				}
				r, verr := verify.VerifyObject(raw, objType, &opts)
				if verr != nil {
					allGood = false
				}
				results = append(results, r)
			}
			if a.JSON {
				if err := a.printJSON(results); err != nil {
					return errExit(2, "%v", err)
				}
			} else {
				for _, r := range results {
					fmt.Fprintf(a.stdout, "%s %s %s signer=%q key=%s", r.Letter, r.Object, orDash(r.Scheme), r.Signer, orDash(r.Key))
					if r.Reason != "" {
						fmt.Fprintf(a.stdout, " (%s)", r.Reason)
					}
					fmt.Fprintln(a.stdout)
				}
			}
			if !allGood {
				return errExit(1, "")
			}
			return nil
		},
	}
	m.add(cmd)
	cmd.Flags().StringVar(&repoPath, "repo", ".", "repository for OBJECT arguments that are revisions")
	return cmd
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func verifyTreeCmd(a *app) *cobra.Command {
	var repoPath, head, reviewed, repoName, release, component string
	var pins []string
	var record bool
	cmd := &cobra.Command{
		Use:   "tree",
		Short: "Check that the head's tree equals the reviewed tree apart from pin paths",
		Long: `Compare the trees of --head and --reviewed. Every difference (added,
removed, modified, mode, type, submodule, renamed) is listed with whether it
lies in a --pins glob (path.Match; "dir/**" or a directory covers its
contents). Mode 100664 counts as 100644; submodules compare by pinned commit.

With --server and --release, the server computes it instead: the release's
component names the head, the reviewed commit and the pins; the two commits
and the tree objects along every differing path are uploaded, and the server
hashes them, compares and records tree-equivalence evidence marked as
computed by the server (the only kind a tree-equivalence gate counts).

Exit codes: 0 equivalent, 1 a difference outside the pins, 2 error.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if release != "" {
				if a.Server == "" {
					return errExit(2, "--release needs --server: the server computes and records the comparison")
				}
				if len(pins) > 0 || record || repoName != "" {
					return errExit(2, "with --release the release declares the pins and the repository, and the server records: drop --pins, --record and --repository")
				}
				return a.uploadTree(cmd, repoPath, head, reviewed, release, component)
			}
			if head == "" || reviewed == "" {
				return errExit(2, "--head and --reviewed are required")
			}
			if record && repoName == "" {
				return errExit(2, "--record needs --repository NAME (the component's repository as the release names it)")
			}
			started := time.Now().UTC()
			rep, err := verify.TreeEquivalence(repoPath, head, reviewed, pins)
			if err != nil {
				return errExit(2, "verify tree: %v", err)
			}
			if a.JSON {
				if err := a.printJSON(rep); err != nil {
					return errExit(2, "%v", err)
				}
			} else {
				fmt.Fprintf(a.stdout, "head %s (tree %s)\nreviewed %s (tree %s)\n", rep.Head, rep.HeadTree, rep.Reviewed, rep.ReviewedTree)
				for _, d := range rep.Differences {
					where := "in pins"
					if !d.InPins {
						where = "OUTSIDE pins"
					}
					p := d.Path
					if d.OldPath != "" {
						p = d.OldPath + " -> " + d.Path
					}
					fmt.Fprintf(a.stdout, "  %-9s %s [%s]\n", d.Kind, p, where)
				}
				verdict := "equivalent"
				if !rep.Equivalent {
					verdict = fmt.Sprintf("NOT equivalent: %d difference(s) outside the pins", rep.OutsidePins)
				}
				fmt.Fprintln(a.stdout, verdict)
			}
			if record {
				id, err := a.recordTreeEquivalence(cmd.Context(), rep, repoName, started)
				if err != nil {
					return errExit(2, "record tree equivalence: %v", err)
				}
				if !a.JSON {
					fmt.Fprintf(a.stdout, "recorded as %s (lane %s)\n", id, ledger.TreeEquivalenceLane)
				}
			}
			if !rep.Equivalent {
				return errExit(1, "")
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.BoolVar(&record, "record", false, "record the result as tree-equivalence/v1 evidence (to --server with --token, else the local --db)")
	f.StringVar(&repoName, "repository", "", "repository name recorded in the evidence subject (required with --record)")
	f.StringVar(&repoPath, "repo", ".", "path of the git repository")
	f.StringVar(&head, "head", "", "the signed head revision")
	f.StringVar(&reviewed, "reviewed", "", "the reviewed source revision")
	f.StringArrayVar(&pins, "pins", nil, "dependency-pin path glob (repeatable)")
	f.StringVar(&release, "release", "", "with --server: the release whose component, commits and pins apply; the server computes and records")
	f.StringVar(&component, "component", "", "with --release: the component (default: the release's only one)")
	return cmd
}

// uploadTree reads the release's component from the server, collects its
// head and reviewed commits and the differing trees from the local
// repository, and has the server compute and record tree equivalence.
func (a *app) uploadTree(cmd *cobra.Command, repoPath, head, reviewed, release, component string) error {
	if a.Token == "" {
		return errExit(2, "--server needs --token (or LEDGER_TOKEN) with scope record")
	}
	c, err := client.New(a.Server, client.Options{Token: a.Token, Timeout: a.Timeout})
	if err != nil {
		return errExit(2, "%v", err)
	}
	rel, _, _, _, err := c.Release(cmd.Context(), release)
	if err != nil {
		return errExit(2, "release %s: %v", release, err)
	}
	var comp *gates.Component
	for i := range rel.Components {
		if rel.Components[i].Name == component || component == "" && len(rel.Components) == 1 {
			comp = &rel.Components[i]
		}
	}
	if comp == nil {
		return errExit(2, "release %s: give --component (one of its %d components)", release, len(rel.Components))
	}
	if head != "" && head != comp.Head || reviewed != "" && reviewed != comp.Reviewed {
		return errExit(2, "release %s binds %s head %s and reviewed %s; --head/--reviewed differ", release, comp.Name, comp.Head, comp.Reviewed)
	}
	u, err := verify.CollectTree(repoPath, comp.Head, comp.Reviewed)
	if err != nil {
		return errExit(2, "read trees: %v", err)
	}
	up := client.TreeUpload{Release: release, Component: comp.Name, ObjectFormat: u.Format}
	for _, o := range u.Objects {
		up.Objects = append(up.Objects, client.Object{Type: o.Type, ID: o.ID, Data: o.Data})
	}
	rep, _, e, err := c.VerifyTree(cmd.Context(), up)
	if err != nil {
		return errExit(2, "verify tree on %s: %v", a.Server, err)
	}
	if a.JSON {
		out := struct {
			client.TreeReport
			Entry string `json:"entry"`
		}{rep, e.ID}
		if err := a.printJSON(out); err != nil {
			return errExit(2, "%v", err)
		}
	} else {
		fmt.Fprintf(a.stdout, "head %s (tree %s)\nreviewed %s (tree %s)\npins %s (declared by release %s)\n", rep.Head, rep.HeadTree, rep.Reviewed, rep.ReviewedTree, strings.Join(rep.Pins, ", "), release)
		for _, d := range rep.Differences {
			where := "in pins"
			if !d.InPins {
				where = "OUTSIDE pins"
			}
			fmt.Fprintf(a.stdout, "  %-9s %s [%s]\n", d.Kind, d.Path, where)
		}
		verdict := "equivalent"
		if !rep.Equivalent {
			verdict = fmt.Sprintf("NOT equivalent: %d difference(s) outside the pins", rep.OutsidePins)
		}
		fmt.Fprintf(a.stdout, "%s; computed and recorded by %s as %s (%d objects uploaded)\n", verdict, a.Server, e.ID, len(up.Objects))
	}
	if !rep.Equivalent {
		return errExit(1, "")
	}
	return nil
}

// recordTreeEquivalence appends the tree-equivalence evidence record of
// rep (ledger.TreeEquivalence.Evidence) about the signed head, to the
// ledger openLedger gives (--server or the local database). It returns the
// entry id.
func (a *app) recordTreeEquivalence(ctx context.Context, rep verify.TreeReport, repository string, started time.Time) (string, error) {
	te := ledger.TreeEquivalence{Reviewed: rep.Reviewed, Equivalent: &rep.Equivalent, OutsidePins: []string{}, Pins: rep.Pins, Differences: len(rep.Differences)}
	for _, d := range rep.Differences {
		if !d.InPins {
			te.OutsidePins = append(te.OutsidePins, d.Path)
		}
	}
	if a.Server == "" {
		// Appended to the database directly, it is the ledger's own
		// computation from the repository; posted to a server it is a
		// claim, which gates keep as baseline (gates.TreeClaim).
		te.ComputedBy = ledger.ComputedByServer
	}
	ev, err := te.Evidence(ledger.Subject{Repository: repository, Commit: rep.Head, Tree: rep.HeadTree}, runner.BuildRunner(), started, time.Now())
	if err != nil {
		return "", err
	}
	body, err := json.Marshal(&ev)
	if err != nil {
		return "", err
	}
	l, err := a.openLedger(ctx, ledgerOptions{records: true})
	if err != nil {
		return "", err
	}
	defer l.Close()
	res, err := l.Append(ctx, []ledger.Record{{Kind: ledger.KindEvidence, Body: body}}, "")
	if err != nil {
		return "", err
	}
	return res.Entries[0].ID, nil
}
