package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
)

// treeCommand is one command of the tree: its path of names below root
// and whether it groups subcommands.
type treeCommand struct {
	path  []string
	group bool
	subs  []string
}

// commandTree lists every visible command under root, root included.
func commandTree(root *cobra.Command) []treeCommand {
	var out []treeCommand
	var walk func(c *cobra.Command, path []string)
	walk = func(c *cobra.Command, path []string) {
		if c.Hidden {
			return
		}
		tc := treeCommand{path: path, group: c.HasSubCommands()}
		for _, s := range c.Commands() {
			if !s.Hidden {
				tc.subs = append(tc.subs, s.Name())
			}
			walk(s, append(append([]string(nil), path...), s.Name()))
		}
		out = append(out, tc)
	}
	walk(root, nil)
	return out
}

// TestCommandTreeRefusesUnknown walks the whole command tree through the
// built binary: for every command with subcommands, an unknown subcommand
// exits 2 with "unknown command" on stderr, and a misspelled one names
// the subcommand meant; for every command, an unknown flag exits 2 with
// "unknown flag". Nothing unknown exits 0, so `ledger release chek X ||
// exit 1` stops a pipeline.
func TestCommandTreeRefusesUnknown(t *testing.T) {
	tree := commandTree(newRootCmd())
	if len(tree) < 40 {
		t.Fatalf("the walk found %d commands; want the whole tree", len(tree))
	}
	groups := 0
	for _, c := range tree {
		name := "ledger " + strings.Join(c.path, " ")
		if c.group {
			groups++
			args := append(append([]string(nil), c.path...), "zzqx", "1.0.0")
			_, se, code := runBin(t, "", args...)
			if code != 2 || !strings.Contains(se, `unknown command "zzqx" for "`+strings.TrimSpace(name)+`"`) {
				t.Errorf("%s zzqx: exit %d, stderr %q; want exit 2 naming the unknown command", name, code, se)
			}
			// A misspelling of the first subcommand (one letter dropped)
			// is refused with a suggestion naming it.
			sub := c.subs[0]
			if len(sub) >= 4 {
				typo := sub[:len(sub)-2] + sub[len(sub)-1:]
				_, se, code := runBin(t, "", append(append([]string(nil), c.path...), typo)...)
				if code != 2 || !strings.Contains(se, "did you mean") || !strings.Contains(se, `"`+sub+`"`) {
					t.Errorf("%s %s: exit %d, stderr %q; want exit 2 suggesting %q", name, typo, code, se, sub)
				}
			}
		}
		args := append(append([]string(nil), c.path...), "--zzqx-nope")
		_, se, code := runBin(t, "", args...)
		if code != 2 || !strings.Contains(se, "unknown flag: --zzqx-nope") {
			t.Errorf("%s --zzqx-nope: exit %d, stderr %q; want exit 2 naming the unknown flag", name, code, se)
		}
	}
	if groups < 8 {
		t.Fatalf("the walk found %d command groups", groups)
	}
}

// TestMistypedSubcommandsExit2: the mistypes of issue 32 exit 2 with the
// command meant, and a misspelled flag names the flag meant.
func TestMistypedSubcommandsExit2(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"release", "chek", "0.9.0"}, `unknown command "chek" for "ledger release"; did you mean "check"?`},
		{[]string{"runner", "lst"}, `did you mean "list"?`},
		{[]string{"token", "lst"}, `did you mean "list"?`},
		{[]string{"verify", "hed"}, `did you mean "head"?`},
		{[]string{"runs", "lst"}, `did you mean "list"?`},
		{[]string{"evidence", "shwo", "x"}, `did you mean "show"?`},
		{[]string{"chek"}, `unknown command "chek" for "ledger"`},
		{[]string{"help", "release", "chek"}, `unknown help topic "chek" for "ledger release"; did you mean "check"?`},
		{[]string{"record", "--repositry", "x", "f.xml"}, `unknown flag: --repositry for "ledger record"; did you mean "--repository"?`},
		{[]string{"release", "check", "--onyl", "failed", "1.0.0"}, `did you mean "--only"?`},
		{[]string{"token", "create", "--expires", "30x"}, `"30x" is not a duration such as`},
	} {
		out, se, code := runBin(t, "", c.args...)
		if code != 2 || !strings.Contains(se, c.want) || out != "" {
			t.Errorf("ledger %s: exit %d, stdout %q, stderr %q; want exit 2 and %q", strings.Join(c.args, " "), code, out, se, c.want)
		}
	}
	if out, _, code := runBin(t, "", "help", "release", "check"); code != 0 || !strings.Contains(out, "--only") {
		t.Errorf("ledger help release check: exit %d, %q", code, out)
	}
	// A group with no arguments still prints its help, exit 0.
	if out, _, code := runBin(t, "", "release"); code != 0 || !strings.Contains(out, "Available Commands") {
		t.Errorf("ledger release: exit %d, %q", code, out)
	}
}

// TestVersion: --version prints the module version and, when the build
// recorded them, the VCS commit.
func TestVersion(t *testing.T) {
	out, se, code := runBin(t, "", "--version")
	if code != 0 || !regexp.MustCompile(`^ledger (\(devel\)|v\d+\.\d+\.\d+\S*)( commit [0-9a-f]{40}.*)? go1\.\d+`).MatchString(out) {
		t.Fatalf("--version: exit %d, %q %q", code, out, se)
	}
	bi := &debug.BuildInfo{GoVersion: "go1.26.11", Main: debug.Module{Path: "github.com/evidence-ledger/ledger", Version: "(devel)"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: strings.Repeat("ab", 20)}, {Key: "vcs.time", Value: "2026-12-06T09:00:00Z"}, {Key: "vcs.modified", Value: "true"}}}
	if got, want := formatVersion(bi), "(devel) commit "+strings.Repeat("ab", 20)+" (2026-12-06T09:00:00Z)+modified go1.26.11"; got != want {
		t.Fatalf("formatVersion = %q, want %q", got, want)
	}
	bi.Main.Version, bi.Settings = "v0.9.0", nil
	if got := formatVersion(bi); got != "v0.9.0 go1.26.11" {
		t.Fatalf("formatVersion of a tagged build = %q", got)
	}
}

// TestParseDurationDays: every duration flag takes days.
func TestParseDurationDays(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"30d": 720 * time.Hour, "1.5d": 36 * time.Hour, "1d12h": 36 * time.Hour, "90s": 90 * time.Second,
		"2h30m": 150 * time.Minute, "0": 0, "-1d": -24 * time.Hour,
	} {
		got, err := parseDuration(in)
		if err != nil || got != want {
			t.Errorf("parseDuration(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"d", "30x", "", "1dd", "soon", "1.2.3d"} {
		if _, err := parseDuration(in); err == nil || !strings.Contains(err.Error(), "a duration such as") {
			t.Errorf("parseDuration(%q): %v; want an error naming the shape", in, err)
		}
	}
}

// TestTokenRefusesServerWithoutDB: with a server named (LEDGER_SERVER)
// and no database, `ledger token` refuses, exit 2, rather than making a
// token in a default local database the server never reads; with --db it
// works as always.
func TestTokenRefusesServerWithoutDB(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command(ledgerBin, "token", "create", "--name", "x", "--scope", "read")
	cmd.Dir = dir
	cmd.Env = append(slices.DeleteFunc(os.Environ(), func(e string) bool { return strings.HasPrefix(e, "LEDGER_DB=") }), "LEDGER_SERVER=http://127.0.0.1:1")
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), "--db PATH") {
		t.Fatalf("token create with LEDGER_SERVER and no --db: %v %s", err, out)
	}
	if _, err := os.Stat(filepath.Join(dir, "var")); err == nil {
		t.Fatal("a local database was made anyway")
	}
	cmd = exec.Command(ledgerBin, "--db", filepath.Join(dir, "t.db"), "token", "create", "--name", "x", "--scope", "read")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "LEDGER_SERVER=http://127.0.0.1:1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("token create with --db: %v %s", err, out)
	}
}
