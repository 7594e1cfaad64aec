package verify

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
)

// VerifyHeadOptions selects the head to verify and the policy to apply.
type VerifyHeadOptions struct {
	RepoPath string // a git working tree or bare repository (SHA-1 object format)
	// Repository names the repository in the record and for policy
	// matching; default: the URL of remote "origin" normalized by
	// ledger.NormalizeRepository (host/owner/name), else the absolute path.
	Repository string
	// Ref is a full ref name (refs/heads/main), a short branch or tag name,
	// "HEAD", or an object id. A ref to an annotated tag verifies the tag.
	Ref string
	// Policy decides trust; nil gives DecisionNoPolicy and a verdict made
	// with no trusted keys.
	Policy *Policy
	// Now is the verification time (OpenPGP expiry and revocation); zero
	// means time.Now().
	Now time.Time
	// Options, when set, is used instead of the policy rule's material (the
	// policy still decides). Its Now is overridden by Now when Now is set.
	Options *Options
}

// VerifyHead reads the head's object from the repository's object store
// exactly as git hashed it, verifies its signature and applies the policy.
// The returned record is filled even when the head is untrusted; the error
// is non-nil only when the head cannot be read (missing repository or ref,
// ErrUnsupportedObjectFormat, an object whose bytes do not hash to its id:
// ErrMalformed). It is safe for concurrent use on distinct or read-only
// repositories.
func VerifyHead(ctx context.Context, o VerifyHeadOptions) (ledger.HeadVerification, error) {
	var hv ledger.HeadVerification
	if err := ctx.Err(); err != nil {
		return hv, err
	}
	repo, err := openRepo(o.RepoPath)
	if err != nil {
		return hv, err
	}
	name := o.Repository
	if name == "" {
		name = repoName(repo, o.RepoPath)
	}
	ref := o.Ref
	if ref == "" {
		ref = "HEAD"
	}
	refName, h, err := resolveRef(repo, ref)
	if err != nil {
		return hv, err
	}
	obj, err := readObject(repo, h)
	if err != nil {
		return hv, err
	}
	now := o.Now
	if now.IsZero() {
		now = time.Now()
	}
	rule := o.Policy.Match(name, refName)
	var opts Options
	switch {
	case o.Options != nil:
		opts = *o.Options
	case rule != nil:
		opts = *rule.Options()
	}
	opts.Now = now
	res := VerifyParsed(obj, &opts)
	hv = ledger.HeadVerification{
		Repository: name, Ref: refName, Object: obj.ID, ObjectType: obj.Type,
		Scheme: res.Scheme, Signer: res.Signer, Issuer: res.Issuer, Key: res.Key,
		Verdict: res.Verdict, GitLetter: res.Letter, VerifiedAt: now.UTC(), SignedAt: res.SignedAt,
	}
	// Peel tags to the commit and its tree.
	commit := obj
	for depth := 0; commit.Type == "tag"; depth++ {
		if depth > 8 {
			return hv, &Error{Object: obj.ID, Kind: ErrMalformed, Detail: "tag chain deeper than 8"}
		}
		if commit, err = readObject(repo, plumbing.NewHash(commit.Target)); err != nil {
			return hv, err
		}
	}
	hv.Commit, hv.Tree = commit.ID, commit.Tree
	if o.Policy != nil {
		hv.Policy = o.Policy.Digest
	}
	var reason error = res.Err
	if rule == nil {
		hv.Decision = ledger.DecisionNoPolicy
		if o.Policy != nil {
			reason = errors.Join(res.Err, &Error{Object: obj.ID, Kind: ErrNoPolicy, Detail: fmt.Sprintf("repository %s ref %s (is the repository named as the policy names it? pass --repository)", name, refName)})
		}
	} else {
		hv.Decision, reason = rule.Decide(res)
	}
	if reason != nil {
		hv.Reason = reason.Error()
	} else {
		hv.Reason = fmt.Sprintf("%s signature by %s verified (%s)", res.Scheme, res.Signer, res.Letter)
	}
	return hv, nil
}

// openRepo opens a repository and refuses object formats other than SHA-1.
func openRepo(p string) (*git.Repository, error) {
	if p == "" {
		return nil, fmt.Errorf("repository path is empty")
	}
	// DetectDotGit walks up from p like git does from a subdirectory; a path
	// that does not exist must not silently resolve to an enclosing repository.
	if _, err := os.Stat(p); err != nil {
		return nil, fmt.Errorf("open repository %s: %w", p, err)
	}
	repo, err := git.PlainOpenWithOptions(p, &git.PlainOpenOptions{DetectDotGit: true})
	if err != nil {
		if strings.Contains(strings.ToLower(err.Error()), "objectformat") || strings.Contains(err.Error(), "sha256") {
			return nil, wrapErr(ErrUnsupportedObjectFormat, err, "open %s", p)
		}
		return nil, fmt.Errorf("open repository %s: %w", p, err)
	}
	cfg, err := repo.Config()
	if err != nil {
		return nil, fmt.Errorf("read config of %s: %w", p, err)
	}
	if f := strings.ToLower(string(cfg.Extensions.ObjectFormat)); f != "" && f != "sha1" {
		return nil, newErr(ErrUnsupportedObjectFormat, "repository %s uses object format %s; only sha1 is supported", p, f)
	}
	if f := cfg.Raw.Section("extensions").Option("objectformat"); f != "" && !strings.EqualFold(f, "sha1") {
		return nil, newErr(ErrUnsupportedObjectFormat, "repository %s uses object format %s; only sha1 is supported", p, f)
	}
	return repo, nil
}

func repoName(repo *git.Repository, p string) string {
	if rem, err := repo.Remote("origin"); err == nil && len(rem.Config().URLs) > 0 {
		return ledger.NormalizeRepository(rem.Config().URLs[0])
	}
	if abs, err := filepath.Abs(p); err == nil {
		return abs
	}
	return p
}

// resolveRef returns the full ref name (or the id given) and the object id
// the ref points at, without peeling annotated tags.
func resolveRef(repo *git.Repository, ref string) (string, plumbing.Hash, error) {
	cands := []string{ref}
	if !strings.HasPrefix(ref, "refs/") && ref != "HEAD" {
		cands = append(cands, "refs/heads/"+ref, "refs/tags/"+ref, "refs/remotes/"+ref)
	}
	for _, c := range cands {
		r, err := repo.Reference(plumbing.ReferenceName(c), true)
		if err == nil {
			name := c
			if c == "HEAD" {
				if sym, err := repo.Reference(plumbing.HEAD, false); err == nil && sym.Type() == plumbing.SymbolicReference {
					name = sym.Target().String()
				}
			}
			return name, r.Hash(), nil
		}
	}
	if validHexID(strings.ToLower(ref)) && len(ref) == 40 {
		return ref, plumbing.NewHash(ref), nil
	}
	// Abbreviated ids and revision expressions (peeled to a commit).
	if h, err := repo.ResolveRevision(plumbing.Revision(ref)); err == nil {
		return ref, *h, nil
	}
	return "", plumbing.ZeroHash, ledger.NotFound("ref %q not found", ref)
}

// readObject reads the raw bytes of a commit or tag from the object store
// and parses them, checking that they hash to h.
func readObject(repo *git.Repository, h plumbing.Hash) (*Object, error) {
	eo, err := repo.Storer.EncodedObject(plumbing.AnyObject, h)
	if err != nil {
		return nil, fmt.Errorf("read object %s: %w", h, err)
	}
	typ := eo.Type().String()
	if eo.Type() != plumbing.CommitObject && eo.Type() != plumbing.TagObject {
		return nil, &Error{Object: h.String(), Kind: ErrMalformed, Detail: "object is a " + typ + ", want commit or tag"}
	}
	rd, err := eo.Reader()
	if err != nil {
		return nil, fmt.Errorf("read object %s: %w", h, err)
	}
	defer rd.Close()
	raw, err := io.ReadAll(rd)
	if err != nil {
		return nil, fmt.Errorf("read object %s: %w", h, err)
	}
	return ParseObject(raw, typ, h.String())
}

// ReadObject returns the raw bytes and type of a commit or tag named by rev
// (see VerifyHeadOptions.Ref) in the repository at repoPath.
func ReadObject(repoPath, rev string) (raw []byte, objType string, err error) {
	repo, err := openRepo(repoPath)
	if err != nil {
		return nil, "", err
	}
	_, h, err := resolveRef(repo, rev)
	if err != nil {
		return nil, "", err
	}
	o, err := readObject(repo, h)
	if err != nil {
		return nil, "", err
	}
	return o.Raw, o.Type, nil
}
