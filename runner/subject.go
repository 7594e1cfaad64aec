package runner

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"runtime/debug"
	"strings"

	"github.com/evidence-ledger/ledger/ledger"
)

// SubjectOptions give the source identity explicitly; empty fields are
// filled from the binary's build info and from git run in RepoPath.
type SubjectOptions struct {
	RepoPath   string // a checkout of the source that was built ("" = ".")
	Repository string // e.g. "https://github.com/evidence-ledger/ledger"
	Commit     string // 40 or 64 hex digits
	Tree       string // the commit's tree id
	// Dirty forces the dirty flag; nil derives it (build info
	// vcs.modified, else `git status --porcelain` in RepoPath).
	Dirty *bool
}

// ResolveSubject determines the subject of the code that is running:
//   - commit: o.Commit, else the binary's build info vcs.revision, else
//     `git rev-parse HEAD` in RepoPath;
//   - dirty: o.Dirty, else build info vcs.modified, else whether
//     `git status --porcelain` lists anything;
//   - tree: o.Tree, else `git rev-parse <commit>^{tree}` in RepoPath;
//   - repository: o.Repository, else `git remote get-url origin` normalized
//     by ledger.NormalizeRepository (host/owner/name), else the
//     main module path from build info.
//
// It fails with a clear message when no commit or tree can be found (for
// example a checkout without commits and no flags).
func ResolveSubject(ctx context.Context, o SubjectOptions) (ledger.Subject, error) {
	repo := o.RepoPath
	if repo == "" {
		repo = "."
	}
	s := ledger.Subject{Repository: o.Repository, Commit: o.Commit, Tree: o.Tree}
	var modSet bool
	var modified bool
	var modulePath string
	if bi, ok := debug.ReadBuildInfo(); ok {
		modulePath = bi.Main.Path
		for _, kv := range bi.Settings {
			switch kv.Key {
			case "vcs.revision":
				if s.Commit == "" {
					s.Commit = kv.Value
					if o.Dirty == nil {
						modSet = true
					}
				}
			case "vcs.modified":
				modified = kv.Value == "true"
			}
		}
	}
	if s.Commit == "" {
		out, err := git(ctx, repo, "rev-parse", "--verify", "HEAD")
		if err != nil {
			return s, fmt.Errorf("no source commit: the binary has no VCS build info and %w (pass --commit and --tree)", err)
		}
		s.Commit = out
	}
	switch {
	case o.Dirty != nil:
		s.Dirty = *o.Dirty
	case modSet:
		s.Dirty = modified
	default:
		out, err := git(ctx, repo, "status", "--porcelain")
		if err != nil {
			return s, fmt.Errorf("dirty check: %w (pass --dirty)", err)
		}
		s.Dirty = out != ""
	}
	if s.Tree == "" {
		out, err := git(ctx, repo, "rev-parse", "--verify", s.Commit+"^{tree}")
		if err != nil {
			return s, fmt.Errorf("tree of commit %s: %w (pass --tree)", s.Commit, err)
		}
		s.Tree = out
	}
	if s.Repository == "" {
		if out, err := git(ctx, repo, "remote", "get-url", "origin"); err == nil && out != "" {
			s.Repository = ledger.NormalizeRepository(out)
		} else if modulePath != "" {
			s.Repository = modulePath
		}
	}
	s.Commit, s.Tree = strings.ToLower(s.Commit), strings.ToLower(s.Tree)
	if err := s.Validate("subject."); err != nil {
		return s, err
	}
	return s, nil
}

func git(ctx context.Context, dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "git", append([]string{"-C", dir}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		msg := strings.TrimSpace(stderr.String())
		if msg == "" {
			msg = err.Error()
		}
		return "", fmt.Errorf("git %s in %s: %s", strings.Join(args, " "), dir, msg)
	}
	return strings.TrimSpace(string(out)), nil
}

// BuildRunner returns the runner build identity from the binary's build
// info: the main module version and vcs.revision (empty when absent).
func BuildRunner() ledger.RunnerBuild {
	var rb ledger.RunnerBuild
	if bi, ok := debug.ReadBuildInfo(); ok {
		rb.Version = bi.Main.Version
		for _, kv := range bi.Settings {
			if kv.Key == "vcs.revision" {
				rb.Commit = kv.Value
			}
		}
	}
	return rb
}
