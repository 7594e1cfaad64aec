package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/evidence-ledger/ledger/admit"
	"github.com/evidence-ledger/ledger/client"
	"github.com/evidence-ledger/ledger/ingest"
	"github.com/evidence-ledger/ledger/ledger"
	"github.com/spf13/cobra"
)

// recordFlags supply what a format lacks (package ingest's Params).
type recordFlags struct {
	format, lane, backend, repository, commit, tree string
	artifacts                                       []string
	fromGit                                         bool
}

func newRecordCmd(a *app) *cobra.Command {
	var idem, signKey string
	var f recordFlags
	var maxBody int64
	cmd := &cobra.Command{
		Use:   "record FILE|-",
		Short: "Append evidence (ledger JSON, JUnit XML, TestNG XML, go test -json, in-toto, DSSE, Sigstore bundle) to the ledger, atomically",
		Long: `Append evidence records to the log. With --server the records go through the
HTTP API (POST /api/v1/evidence, needs a token of scope record; the server
decodes and verifies the input); otherwise they are appended to the local
database given by --db. An array is appended atomically: all records or none.
Identical records already in the log are not appended again.

--format is evidence (the ledger's JSON), junit, testng (TestNG's
testng-results.xml), gotest (go test -json), in-toto, dsse or sigstore-bundle
(a Sigstore bundle of a DSSE-signed in-toto Statement); auto (the default)
detects it from the file (XML whose root is <testng-results> is testng). Every format but
evidence is kept byte for byte as an "original" entry that the evidence names
by id and digest, and needs --lane and --backend; --repository, --commit and
--tree (or --from-git, the current checkout) unless the input carries them;
--artifact NAME=sha256:HEX pins artifacts. An input whose own subject
disagrees with the flags is refused.
With --sign-key FILE each ledger JSON record is signed as a DSSE envelope with
that runner key and recorded with its signer (the key must be registered:
ledger runner add).

Each recorded evidence entry is printed with its decoded status and counts:
  recorded  id=…  index=12  leaf=…  status=failed cases 214/216 exact, failing: a, b

Exit codes: 0 recorded, 2 bad input or any error (nothing was appended).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var data []byte
			var err error
			switch {
			case a.Server == "":
				data, err = readRecordInput(args[0], maxBody)
			case args[0] == "-":
				data, err = io.ReadAll(io.LimitReader(os.Stdin, 1<<30))
			default:
				data, err = os.ReadFile(args[0])
			}
			if err != nil {
				return errExit(2, "read evidence: %v", err)
			}
			if len(bytes.TrimSpace(data)) == 0 {
				return errExit(2, "%s is empty: want evidence JSON, JUnit or TestNG XML, a go test -json stream, an in-toto Statement or a DSSE envelope", args[0])
			}
			format := f.format
			if format == "auto" || format == "" {
				if format, err = ingest.Detect(args[0], data); err != nil {
					return errExit(2, "record %s: %v%s", args[0], err, jsonBreak(data))
				}
			}
			if format == ingest.FormatDSSE && !ingest.IsInTotoEnvelope(data) {
				format = ingest.FormatEvidence // envelopes of the ledger's own evidence
			}
			mediaType, err := ingest.MediaTypeOf(format)
			if err != nil {
				return errExit(2, "%v", err)
			}
			p, err := f.params(args[0])
			if err != nil {
				return errExit(2, "record %s: %v", args[0], err)
			}
			l, err := a.openLedger(cmd.Context(), ledgerOptions{})
			if err != nil {
				return errExit(2, "%v", err)
			}
			defer l.Close()
			var res *ledger.AppendResult
			switch {
			case format == ingest.FormatEvidence:
				res, err = recordNative(cmd.Context(), l, data, signKey, idem)
			case signKey != "":
				return errExit(2, "--sign-key signs ledger JSON records; a %s input is recorded as it was produced (sign it with its producer's key)", format)
			default:
				res, err = recordFormat(cmd.Context(), l, format, mediaType, data, p, f.artifacts, idem)
			}
			if err != nil {
				hint := flagHint(err, format)
				if format != ingest.FormatGoTest && format != ingest.FormatJUnit && format != ingest.FormatTestNG {
					hint += jsonBreak(data)
				}
				return errExit(2, "record %s: %v%s", args[0], err, hint)
			}
			if a.JSON {
				return a.printJSON(appendedOf(res))
			}
			summaries := 0
			for _, e := range res.Entries {
				state := "recorded"
				if e.Existing {
					state = "already present"
				}
				kind := ""
				switch {
				case e.Kind == ledger.KindOriginal:
					kind = "  (original)"
				case e.Kind == ledger.KindEvidence && summaries < maxRecordSummaries:
					summaries++
					kind = evidenceSummary(cmd.Context(), l, e.ID)
				}
				fmt.Fprintf(a.stdout, "%s  id=%s  index=%d  leaf=%s%s\n", state, e.ID, e.Index, e.LeafHash, kind)
			}
			fmt.Fprintf(a.stdout, "checkpoint: size=%d root=%s\n", res.Checkpoint.Size, res.Checkpoint.Root)
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&idem, "idempotency-key", "", "replaying the same key returns the original result and appends nothing")
	fl.StringVar(&f.format, "format", "auto", "input format: auto, "+strings.Join(ingest.FormatNames(), ", "))
	fl.StringVar(&f.lane, "lane", "", "lane the run belongs to (name/vN), for formats that lack one")
	fl.StringVar(&f.backend, "backend", "", "backend the run used ("+ledger.BackendList()+")")
	fl.StringVar(&f.repository, "repository", "", "repository the run tested")
	fl.StringVar(&f.commit, "commit", "", "commit id the run tested (40 or 64 hex)")
	fl.StringVar(&f.tree, "tree", "", "tree id of that commit")
	fl.StringArrayVar(&f.artifacts, "artifact", nil, "artifact pin NAME=sha256:HEX (repeatable)")
	fl.BoolVar(&f.fromGit, "from-git", false, "take repository, commit and tree from the git checkout in the current directory (refused when the work tree is dirty)")
	maxBody = defaultMaxBody
	fl.Var((*sizeValue)(&maxBody), "max-body", "with --db: the largest input recorded, in bytes or with a unit (8MiB, 64MiB) (the server's default --max-body; decoding takes several times the input's size in memory)")
	fl.StringVar(&signKey, "sign-key", "", "sign each ledger JSON record as a DSSE envelope with this registered runner key (see ledger runner)")
	return cmd
}

// subjectFlags names the record flags that set each field of an input's
// subject and lane when the format lacks them.
var subjectFlags = map[string]string{
	"subject.repository": "--repository, or --from-git in the checkout the run tested",
	"subject.commit":     "--commit, or --from-git in the checkout the run tested",
	"subject.tree":       "--tree, or --from-git in the checkout the run tested",
	"lane":               "--lane",
	"backend":            "--backend",
}

// flagHint is " (set it with --repository …)" when err is a field error of
// a field a record flag sets, for an input of a format other than the
// ledger's own JSON (whose records carry every field themselves); else "".
func flagHint(err error, format string) string {
	var le *ledger.Error
	if format == ingest.FormatEvidence || !errors.As(err, &le) {
		return ""
	}
	if f, ok := subjectFlags[le.Field]; ok {
		return " (set it with " + f + ")"
	}
	return ""
}

// jsonBreak says where data, when it is meant as one JSON value (it
// starts with '{' or '['), stops being JSON: "; the JSON ends early at byte
// 1234 of 1234 (truncated?)" or "; the JSON breaks at byte 17 of 1234:
// invalid character …". It is "" for valid JSON and for other input.
func jsonBreak(data []byte) string {
	b := bytes.TrimSpace(bytes.TrimPrefix(data, []byte("\xef\xbb\xbf")))
	if len(b) == 0 || (b[0] != '{' && b[0] != '[') {
		return ""
	}
	var v any
	err := json.Unmarshal(b, &v)
	var se *json.SyntaxError
	if err == nil || !errors.As(err, &se) {
		return ""
	}
	off := len(data) - len(bytes.TrimLeft(data, " \t\r\n\xef\xbb\xbf")) + int(se.Offset)
	if strings.Contains(se.Error(), "unexpected end") {
		return fmt.Sprintf("; the JSON ends early at byte %d of %d (truncated?)", off, len(data))
	}
	return fmt.Sprintf("; the JSON breaks at byte %d of %d: %v", off, len(data), se)
}

// maxRecordSummaries is how many evidence entries of one record get their
// status read back and printed; a larger batch prints the rest by id.
const maxRecordSummaries = 50

// maxFailingShown is how many failing case ids a record summary names.
const maxFailingShown = 5

// evidenceSummary reads back the evidence entry id as the ledger decoded
// it and returns "  status=failed cases 214/216 exact, failing: a, b" for
// the record line, "" when it cannot be read (the record itself stands).
func evidenceSummary(ctx context.Context, l theLedger, id string) string {
	e, err := l.Entry(ctx, id)
	if err != nil {
		return ""
	}
	ev, err := ledger.ParseEvidence(e.Body)
	if err != nil {
		return ""
	}
	return "  " + statusLine(ev)
}

// statusLine is "status=failed cases 214/216 exact, failing: a, b (and 3
// more)" for ev, naming at most maxFailingShown failing cases.
func statusLine(ev ledger.Evidence) string {
	s := fmt.Sprintf("status=%s cases %d/%d exact", ev.Status, ev.CasesExact, ev.CasesTotal)
	if n := len(ev.FailingCases); n > 0 {
		shown := ev.FailingCases[:min(n, maxFailingShown)]
		s += ", failing: " + strings.Join(shown, ", ")
		if n > len(shown) {
			s += fmt.Sprintf(" (and %d more)", n-len(shown))
		}
	}
	return s
}

// defaultMaxBody is the input cap of a local record: the default
// --max-body of ledger serve, so that a file the default server takes is
// taken locally too, and decoding it stays within the memory the server
// budgets for one request (web.IngestFactor times the input).
const defaultMaxBody = 4 << 20

// readRecordInput reads the input name ("-": stdin) of a local record, refusing
// one over max bytes before reading it (a file) or as soon as max bytes
// are passed (stdin), with an error naming it, its size and --max-body.
func readRecordInput(name string, max int64) ([]byte, error) {
	over := func(size string) error {
		return fmt.Errorf("%s is %s bytes, over the cap of %d bytes for a local record: raise it with --max-body (a server takes what its own --max-body allows)", name, size, max)
	}
	var r io.Reader = os.Stdin
	if name != "-" {
		fh, err := os.Open(name)
		if err != nil {
			return nil, err
		}
		defer fh.Close()
		if fi, err := fh.Stat(); err == nil && fi.Mode().IsRegular() && fi.Size() > max {
			return nil, over(strconv.FormatInt(fi.Size(), 10))
		}
		r = fh
	}
	data, err := io.ReadAll(io.LimitReader(r, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > max {
		return nil, over("more than " + strconv.FormatInt(max, 10))
	}
	return data, nil
}

// params turns the flags into ingest.Params; --from-git fills repository,
// commit and tree from the checkout in the working directory, refusing a
// dirty work tree: a change to a tracked file, or an untracked file that
// is not ignored (as `ledger run` and Go's vcs.modified judge it), the
// recorded input itself excepted.
func (f *recordFlags) params(input string) (ingest.Params, error) {
	p := ingest.Params{Lane: f.lane, Backend: ledger.Backend(f.backend), Repository: f.repository, Commit: f.commit, Tree: f.tree}
	arts, err := ingest.ParseArtifacts(f.artifacts)
	if err != nil {
		return p, err
	}
	p.Artifacts = arts
	if !f.fromGit {
		return p, nil
	}
	git := func(args ...string) (string, error) {
		out, err := exec.Command("git", args...).Output()
		if err != nil {
			return "", ledger.FieldError("from-git", "git %s failed: %v", strings.Join(args, " "), err)
		}
		return strings.TrimSpace(string(out)), nil
	}
	if err := gitCheckout(); err != nil {
		return p, err
	}
	commit, err := git("rev-parse", "HEAD")
	if err != nil {
		return p, err
	}
	tree, err := git("rev-parse", "HEAD^{tree}")
	if err != nil {
		return p, err
	}
	statusOut, err := exec.Command("git", "status", "--porcelain", "-z").Output()
	if err != nil {
		return p, ledger.FieldError("from-git", "git status --porcelain failed: %v", err)
	}
	status := string(statusOut) // not trimmed: an entry starts with its status letters or a space
	if dirty := dirtyPaths(status, input); len(dirty) > 0 {
		return p, ledger.FieldError("from-git", "the work tree is dirty (%s): evidence about a dirty tree never counts; commit or remove them, and write reports outside the checkout or to an ignored path", strings.Join(dirty, ", "))
	}
	repo := f.repository
	if repo == "" {
		origin, _ := git("config", "--get", "remote.origin.url")
		if origin == "" {
			return p, ledger.FieldError("repository", "--from-git found no remote.origin.url: give --repository")
		}
		if repo, err = repositoryOfRemote(origin); err != nil {
			return p, err
		}
	}
	for _, c := range []struct{ name, flag, git string }{{"commit", f.commit, commit}, {"tree", f.tree, tree}} {
		if c.flag != "" && c.flag != c.git {
			return p, ledger.FieldError(c.name, "--%s %s disagrees with the checkout's %s", c.name, clipFlag(c.flag), c.git)
		}
	}
	p.Repository, p.Commit, p.Tree = repo, commit, tree
	return p, nil
}

// gitCheckout says what is missing when the working directory cannot give
// --from-git its pins: git itself, a git checkout around the directory, or
// a commit at HEAD; each error names the flags to pass instead.
func gitCheckout() error {
	const instead = "give --repository, --commit and --tree instead of --from-git"
	if _, err := exec.LookPath("git"); err != nil {
		return ledger.FieldError("from-git", "git is not installed or not on PATH: %s", instead)
	}
	dir, _ := os.Getwd()
	if out, err := exec.Command("git", "rev-parse", "--is-inside-work-tree").Output(); err != nil || strings.TrimSpace(string(out)) != "true" {
		return ledger.FieldError("from-git", "%s is not inside a git checkout (a work tree): run ledger record in the checkout the run tested, or %s", clipFlag(dir), instead)
	}
	if err := exec.Command("git", "rev-parse", "--verify", "--quiet", "HEAD^{commit}").Run(); err != nil {
		return ledger.FieldError("from-git", "the git checkout at %s has no commit yet (HEAD names none): commit the tested sources first, or %s", clipFlag(dir), instead)
	}
	return nil
}

func clipFlag(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}

// recordNative records the ledger's own JSON (an object or an array),
// signed with the runner key in signKey when it is set. Locally, every
// record first passes the refusals POST /api/v1/evidence applies
// (admit.Local), so the local database takes exactly what a server would.
func recordNative(ctx context.Context, l theLedger, data []byte, signKey, idem string) (*ledger.AppendResult, error) {
	trimmed := bytes.TrimSpace(data)
	var raws []json.RawMessage
	if trimmed[0] == '[' {
		var err error
		if raws, err = ledger.SplitArray(trimmed); err != nil {
			return nil, err
		}
		if len(raws) == 0 {
			return nil, ledger.FieldError("", "empty array, nothing to record")
		}
	} else {
		raws = []json.RawMessage{trimmed}
	}
	if local, ok := l.(*localLedger); ok {
		if err := admit.Local(ctx, local.Store, raws, trimmed[0] != '['); err != nil {
			return nil, err
		}
	}
	bodies := make([][]byte, len(raws))
	for i, r := range raws {
		bodies[i] = r
	}
	return appendSigned(ctx, l, bodies, signKey, idem)
}

// recordFormat records an input of another format: through a server, the
// bytes as they are (the server decodes, verifies and checks them); locally,
// admitted here as the local administrator through the server's one path
// (admit.Ingest: the local runner-key registry, the decode, the checks),
// then appended as one batch, the original first.
func recordFormat(ctx context.Context, l theLedger, format, mediaType string, data []byte, p ingest.Params, artifacts []string, idem string) (*ledger.AppendResult, error) {
	switch l := l.(type) {
	case remoteLedger:
		return l.Ingest(ctx, mediaType, data, client.IngestParams{Lane: p.Lane, Backend: string(p.Backend),
			Repository: p.Repository, Commit: p.Commit, Tree: p.Tree, Artifacts: artifacts}, idem)
	case *localLedger:
		_, recs, err := admit.Ingest(ctx, l.Store, admit.Administrator(), format, data, p)
		if err != nil {
			return nil, err
		}
		return l.Store.Append(ctx, recs, idem)
	}
	return nil, fmt.Errorf("record %s: unknown ledger", format)
}

// repositoryOfRemote is the repository name --from-git records for the
// checkout's origin remote: ledger.NormalizeRepository of a URL
// ("https://github.com/acme/app.git" and "git@github.com:acme/app" give
// "github.com/acme/app"). A local path or file:// URL (a clone of a clone)
// names no repository: it is refused (CodeInvalid naming repository),
// asking for --repository, rather than recorded as a path.
func repositoryOfRemote(origin string) (string, error) {
	o := strings.TrimSpace(origin)
	local := strings.HasPrefix(o, "/") || strings.HasPrefix(o, ".") || strings.HasPrefix(o, "file:") || strings.HasPrefix(o, "~") ||
		(len(o) > 1 && o[1] == ':' && !strings.Contains(o, "@")) // C:\ paths
	repo := ledger.NormalizeRepository(o)
	if local || !strings.Contains(repo, "/") || !strings.Contains(strings.SplitN(repo, "/", 2)[0], ".") {
		return "", ledger.FieldError("repository", "--from-git: the origin remote %q is a local path, not a repository's URL: give --repository with the repository's name (e.g. github.com/acme/app)", clipFlag(o))
	}
	return repo, nil
}

// dirtyPaths lists what makes a work tree dirty in the output of `git
// status --porcelain -z` run in the working directory (paths relative to
// the top of the checkout): every entry but the untracked file input
// (the file being recorded). At most 3 paths are named, then "N more".
func dirtyPaths(status, input string) []string {
	top := ""
	if out, err := exec.Command("git", "rev-parse", "--show-toplevel").Output(); err == nil {
		top = strings.TrimSpace(string(out))
	}
	in, _ := filepath.Abs(input)
	if r, err := filepath.EvalSymlinks(in); err == nil {
		in = r
	}
	var out []string
	n := 0
	for _, e := range strings.Split(status, "\x00") {
		if len(e) < 4 {
			continue
		}
		path := e[3:]
		if strings.HasPrefix(e, "?? ") && top != "" {
			if p, err := filepath.EvalSymlinks(filepath.Join(top, path)); err == nil && p == in {
				continue
			}
		}
		if n++; n <= 3 {
			out = append(out, clipFlag(path))
		}
	}
	if n > 3 {
		out = append(out, fmt.Sprintf("%d more", n-3))
	}
	return out
}
