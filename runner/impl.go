package runner

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
	"gopkg.in/yaml.v3"
)

// Implementation is one configured external implementation: a kernel
// outside the ledger (MLX, PyTorch, a vendor library) reached through an
// adapter process that speaks the adapter protocol (AdapterProtocol).
//
// Relative paths (Dir, RepoPath, Artifacts, AdapterSources) are resolved
// against the directory of the configuration file; ${VAR} in them is
// expanded from the environment. Command runs in Dir (default: that
// directory) without a shell.
type Implementation struct {
	// Name is how `ledger run --impl NAME` selects it.
	Name string `yaml:"name"`
	// Command is the adapter's argv.
	Command []string `yaml:"command"`
	// Backend is where the implementation's kernel runs: cpu, cuda or
	// metal (recorded as the evidence's backend).
	Backend ledger.Backend `yaml:"backend"`
	// Repository, Commit and Tree are the implementation's source pins,
	// the evidence's subject. The command line overrides them; RepoPath,
	// a checkout of the implementation, lets the ledger read them (and
	// the dirty flag) with git and check a configured commit.
	Repository string `yaml:"repository"`
	Commit     string `yaml:"commit"`
	Tree       string `yaml:"tree"`
	RepoPath   string `yaml:"repo_path"`
	// Artifacts are the files the release binds (name -> path): the
	// ledger hashes each one itself before and after the run and pins
	// "name" -> sha256 in the subject.
	Artifacts map[string]string `yaml:"artifacts"`
	// AdapterSources are the adapter's own source files, pinned as
	// "adapter/<path>" the same way.
	AdapterSources []string `yaml:"adapter_sources"`
	// Original names another configured implementation: the original
	// (defective) build of this one. It runs the same cases in the same
	// run, must fail exactly the predicted narrow-kernel cases, and its
	// own evidence is recorded beside this one's as negative evidence.
	Original string `yaml:"original"`
	// Env is added to the adapter's environment (KEY=VALUE).
	Env []string `yaml:"env"`
	// Dir is the adapter's working directory.
	Dir string `yaml:"dir"`
	// HelloTimeout, CaseTimeout: see AdapterSpec (defaults 120 s, 30 s).
	HelloTimeout time.Duration `yaml:"hello_timeout"`
	CaseTimeout  time.Duration `yaml:"case_timeout"`

	base string // directory of the configuration file
}

// ImplConfig is a file of implementations:
//
//	implementations:
//	  - name: reference
//	    command: [../bin/ledger-ref-adapter]
//	    backend: cpu
//	    ...
type ImplConfig struct {
	Implementations []*Implementation `yaml:"implementations"`
}

// LoadImplConfig reads and validates an implementation file (YAML; unknown
// fields are errors). Errors name the implementation and the field.
func LoadImplConfig(path string) (*ImplConfig, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("implementations: %w", err)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	return ParseImplConfig(raw, filepath.Dir(abs))
}

// ParseImplConfig parses and validates implementation YAML whose relative
// paths resolve against base.
func ParseImplConfig(raw []byte, base string) (*ImplConfig, error) {
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true)
	var c ImplConfig
	if err := dec.Decode(&c); err != nil {
		return nil, fmt.Errorf("implementations: %v", err)
	}
	if len(c.Implementations) == 0 {
		return nil, fmt.Errorf("implementations: no implementations")
	}
	seen := map[string]bool{}
	for i, im := range c.Implementations {
		if im == nil {
			return nil, fmt.Errorf("implementations[%d]: empty entry", i)
		}
		im.base = base
		if err := im.validate(); err != nil {
			return nil, fmt.Errorf("implementations[%d]: %w", i, err)
		}
		if seen[im.Name] {
			return nil, fmt.Errorf("implementations[%d].name: %q is configured twice", i, im.Name)
		}
		seen[im.Name] = true
	}
	for i, im := range c.Implementations {
		if im.Original == "" {
			continue
		}
		o, err := c.Lookup(im.Original)
		if err != nil {
			return nil, fmt.Errorf("implementations[%d].original: %w", i, err)
		}
		if o == im || o.Original != "" {
			return nil, fmt.Errorf("implementations[%d].original: %q must be another implementation without an original of its own", i, im.Original)
		}
	}
	return &c, nil
}

func (im *Implementation) validate() error {
	if !implNameRe.MatchString(im.Name) {
		return fmt.Errorf("name: %q must be letters, digits and ._+@:- (at most 128)", clipText(im.Name))
	}
	if len(im.Command) == 0 || im.Command[0] == "" {
		return fmt.Errorf("%s: command: required (the adapter's argv)", im.Name)
	}
	switch im.Backend {
	case ledger.BackendCPU, ledger.BackendCUDA, ledger.BackendMetal:
	default:
		return fmt.Errorf("%s: backend: must be cpu, cuda or metal, got %q", im.Name, clipText(string(im.Backend)))
	}
	if im.Commit != "" && !ledger.ValidObjectID(im.Commit) {
		return fmt.Errorf("%s: commit: must be 40 or 64 lowercase hex digits", im.Name)
	}
	if im.Tree != "" && !ledger.ValidObjectID(im.Tree) {
		return fmt.Errorf("%s: tree: must be 40 or 64 lowercase hex digits", im.Name)
	}
	for name, p := range im.Artifacts {
		probe := ledger.Subject{Repository: "x", Commit: strings.Repeat("0", 40), Tree: strings.Repeat("0", 40),
			Artifacts: map[string]string{name: "sha256:" + strings.Repeat("0", 64)}}
		if err := probe.Validate(""); err != nil || strings.HasPrefix(name, "adapter/") || strings.HasPrefix(name, "lane/") ||
			strings.HasPrefix(name, "bin/") || strings.HasPrefix(name, "backends/") {
			return fmt.Errorf("%s: artifacts: %q is not a valid artifact name (reserved prefixes: adapter/, lane/, bin/, backends/)", im.Name, clipText(name))
		}
		if p == "" {
			return fmt.Errorf("%s: artifacts.%s: path required", im.Name, name)
		}
	}
	for _, e := range im.Env {
		if k, _, ok := strings.Cut(e, "="); !ok || k == "" {
			return fmt.Errorf("%s: env: %q must be KEY=VALUE", im.Name, clipText(k))
		}
	}
	if im.HelloTimeout < 0 || im.CaseTimeout < 0 {
		return fmt.Errorf("%s: hello_timeout and case_timeout must be positive durations", im.Name)
	}
	return nil
}

// Lookup returns the implementation called name.
func (c *ImplConfig) Lookup(name string) (*Implementation, error) {
	var names []string
	for _, im := range c.Implementations {
		if im.Name == name {
			return im, nil
		}
		names = append(names, im.Name)
	}
	return nil, fmt.Errorf("unknown implementation %q (configured: %s)", name, strings.Join(names, ", "))
}

// path resolves a configured path.
func (im *Implementation) path(p string) string {
	p = os.ExpandEnv(p)
	if p == "" || filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(im.base, p)
}

// Spec returns the adapter spec of the implementation.
func (im *Implementation) Spec() AdapterSpec {
	dir := im.base
	if im.Dir != "" {
		dir = im.path(im.Dir)
	}
	return AdapterSpec{Command: append([]string(nil), im.Command...), Dir: dir, Env: append([]string(nil), im.Env...),
		HelloTimeout: im.HelloTimeout, CaseTimeout: im.CaseTimeout}
}

// Pins hashes the implementation's artifacts and adapter sources and
// returns them as subject artifacts (name -> "sha256:<hex>"; adapter
// sources as "adapter/<path relative to the configuration>"). A missing
// or unreadable file is an error naming it.
func (im *Implementation) Pins() (map[string]string, error) {
	out := map[string]string{}
	for name, p := range im.Artifacts {
		d, err := FileDigest(im.path(p))
		if err != nil {
			return nil, fmt.Errorf("%s: artifact %s: %w", im.Name, name, err)
		}
		out[name] = d
	}
	for _, p := range im.AdapterSources {
		full := im.path(p)
		d, err := FileDigest(full)
		if err != nil {
			return nil, fmt.Errorf("%s: adapter source: %w", im.Name, err)
		}
		rel, err := filepath.Rel(im.base, full)
		if err != nil || strings.HasPrefix(rel, "..") {
			rel = filepath.Base(full)
		}
		out["adapter/"+filepath.ToSlash(rel)] = d
	}
	return out, nil
}

// ImplSubjectOptions override an implementation's configured source pins
// (from the command line).
type ImplSubjectOptions struct {
	Repository, Commit, Tree string
	Dirty                    *bool
}

// ResolveSubject returns the implementation's source subject (without
// artifacts): overrides first, then the configuration; with RepoPath the
// commit, tree and dirty flag are read with git in that checkout and a
// configured or given commit must equal its HEAD. It fails when no
// repository, commit or tree is known.
func (im *Implementation) ResolveSubject(ctx context.Context, o ImplSubjectOptions) (ledger.Subject, error) {
	pick := func(a, b string) string {
		if a != "" {
			return a
		}
		return b
	}
	s := ledger.Subject{Repository: pick(o.Repository, im.Repository), Commit: strings.ToLower(pick(o.Commit, im.Commit)), Tree: strings.ToLower(pick(o.Tree, im.Tree))}
	if o.Dirty != nil {
		s.Dirty = *o.Dirty
	}
	if im.RepoPath != "" {
		dir := im.path(im.RepoPath)
		head, err := git(ctx, dir, "rev-parse", "--verify", "HEAD")
		if err != nil {
			return s, fmt.Errorf("%s: repo_path: %w", im.Name, err)
		}
		if s.Commit != "" && s.Commit != head {
			return s, fmt.Errorf("%s: commit %s is not the checkout's HEAD %s", im.Name, s.Commit, head)
		}
		s.Commit = head
		tree, err := git(ctx, dir, "rev-parse", "--verify", head+"^{tree}")
		if err != nil {
			return s, fmt.Errorf("%s: repo_path: %w", im.Name, err)
		}
		if s.Tree != "" && s.Tree != tree {
			return s, fmt.Errorf("%s: tree %s is not the tree %s of commit %s", im.Name, s.Tree, tree, head)
		}
		s.Tree = tree
		if o.Dirty == nil {
			st, err := git(ctx, dir, "status", "--porcelain")
			if err != nil {
				return s, fmt.Errorf("%s: repo_path: %w", im.Name, err)
			}
			s.Dirty = st != ""
		}
		if s.Repository == "" {
			if u, err := git(ctx, dir, "remote", "get-url", "origin"); err == nil && u != "" {
				s.Repository = ledger.NormalizeRepository(u)
			}
		}
	}
	if s.Repository == "" || s.Commit == "" || s.Tree == "" {
		return s, fmt.Errorf("%s: the implementation's repository, commit and tree are needed (configure repository/commit/tree or repo_path, or pass --repository --commit --tree)", im.Name)
	}
	if err := s.Validate("subject."); err != nil {
		return s, fmt.Errorf("%s: %w", im.Name, err)
	}
	return s, nil
}

// sortedKeys returns m's keys in order.
func sortedKeys(m map[string]string) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}
