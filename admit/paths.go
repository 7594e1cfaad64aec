package admit

import (
	"os"
	"path/filepath"
	"strings"

	"github.com/evidence-ledger/ledger/ledger"
)

// HeadPolicy refuses (CodeInvalid naming the field, CIPolicy) a head
// verification request that chooses its own trust policy: a policy file
// path (policyPath) is never accepted, and a registered policy (policy)
// only outside a release (release ""), whose policy binds otherwise.
func HeadPolicy(policyPath, policy, release string) error {
	switch {
	case policyPath != "":
		return &Refusal{Rule: CIPolicy, Err: ledger.FieldError("policy_path", "not accepted: the server reads no policy file; an admin registers policies (`ledger policy apply`) and the release names one")}
	case release != "" && policy != "":
		return &Refusal{Rule: CIPolicy, Err: ledger.FieldError("policy", "not accepted with release: the release binds its policy")}
	}
	return nil
}

// RepoPath refuses (CodeForbidden naming "repo_path", CIFiles) a
// principal without an admin token that names a repository on the
// server's disk: a CI job uploads the head's objects instead.
func RepoPath(p Principal) error {
	if !p.hasToken() || !p.Token.Scope.Allows(ledger.ScopeAdmin) {
		return &Refusal{Rule: CIFiles, Err: &ledger.Error{Code: ledger.CodeForbidden, Field: "repo_path", Message: "reading a repository on the server's disk needs an admin token; upload the head's objects instead"}}
	}
	return nil
}

// ServerPath is the one function through which a request's string becomes
// a path on the server's disk: p, the value of field, names a repository
// relative to one of roots (the server's --repo-root directories, tried
// in order). It refuses, with a
// CodeInvalid error naming field and never quoting any file, an empty or
// absolute p, one with a ".." element, NUL or backslash, one under no
// configured root, and one whose symlinks resolve outside its root; the
// repository itself must be at p and stay there (isRepoDir), so that
// git's upward search, a gitfile or object alternates cannot leave the
// root.
// observe (when not nil) is called with each candidate before it is
// touched. With no roots it is refused with CodeForbidden (CIFiles). It
// returns the resolved path.
func ServerPath(roots []string, observe func(string), field, p string) (string, error) {
	if len(roots) == 0 {
		return "", &Refusal{Rule: CIFiles, Err: &ledger.Error{Code: ledger.CodeForbidden, Field: field, Message: "this server reads no repository from its disk (no --repo-root configured); upload the objects instead"}}
	}
	if p == "" || filepath.IsAbs(p) || strings.HasPrefix(p, "/") || strings.ContainsAny(p, "\x00\\") {
		return "", ledger.FieldError(field, "must be a path relative to a repository root (--repo-root)")
	}
	for _, el := range strings.Split(p, "/") {
		if el == ".." {
			return "", ledger.FieldError(field, "must not contain \"..\"")
		}
	}
	for _, root := range roots {
		rootReal, err := filepath.EvalSymlinks(root)
		if err != nil {
			continue
		}
		cand := filepath.Join(rootReal, filepath.FromSlash(p))
		if observe != nil {
			observe(cand)
		}
		real, err := filepath.EvalSymlinks(cand)
		if err != nil {
			continue
		}
		if rel, err := filepath.Rel(rootReal, real); err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
			return "", ledger.FieldError(field, "resolves outside its repository root (a symlink leaves it)")
		}
		if !isRepoDir(real) {
			return "", ledger.FieldError(field, "is not a git repository (no .git, or HEAD and objects of a bare one)")
		}
		return real, nil
	}
	return "", ledger.FieldError(field, "no repository at that path under the configured repository roots")
}

// isRepoDir reports whether p holds a repository that stays inside p: a
// .git directory (not a symlink, not a gitfile pointing elsewhere) or a
// bare repository's HEAD and objects directory, with no object alternates
// (objects/info/alternates may name any directory on the disk).
func isRepoDir(p string) bool {
	gitDir := p
	if fi, err := os.Lstat(filepath.Join(p, ".git")); err == nil {
		if !fi.IsDir() {
			return false
		}
		gitDir = filepath.Join(p, ".git")
	}
	if _, err := os.Lstat(filepath.Join(gitDir, "HEAD")); err != nil {
		return false
	}
	fi, err := os.Lstat(filepath.Join(gitDir, "objects"))
	if err != nil || !fi.IsDir() {
		return false
	}
	_, err = os.Lstat(filepath.Join(gitDir, "objects", "info", "alternates"))
	return err != nil
}
