package main

import (
	"fmt"
	"sort"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// strictTree makes every command of the tree under root refuse what it does
// not know, with exit 2 and a suggestion: a command group (a command with
// subcommands and no action of its own) given an unknown subcommand, and
// any command given an unknown flag. Without it cobra prints a group's help
// and exits 0 for `ledger release chek`, so `ledger release chek X || exit 1`
// would pass. A group called with no arguments still prints its help and
// exits 0; `ledger help TOPIC` of an unknown topic exits 2 as well. Call it once, after every command (cobra's help and completion
// included) is added.
func strictTree(root *cobra.Command) {
	root.SetFlagErrorFunc(flagError)
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		c.SuggestionsMinimumDistance = 2
		switch {
		case c.HasSubCommands() && c.Run == nil && c.RunE == nil:
			c.Args = unknownSubcommand
			c.RunE = func(cmd *cobra.Command, args []string) error { return cmd.Help() }
			c.DisableFlagsInUseLine = true
		case c.HasSubCommands():
			// A command that runs itself and groups subcommands (ledger
			// agent): a first argument close to a subcommand's name is a
			// mistyped subcommand; anything else is checked as before.
			own := c.Args
			c.Args = func(cmd *cobra.Command, args []string) error {
				if len(args) > 0 && len(cmd.SuggestionsFor(args[0])) > 0 {
					return unknownSubcommand(cmd, args)
				}
				if own == nil {
					return nil
				}
				return own(cmd, args)
			}
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
	for _, h := range root.Commands() {
		if h.Name() != "help" || h.Run == nil {
			continue
		}
		show := h.Run
		h.Run = nil
		h.RunE = func(c *cobra.Command, args []string) error {
			cmd, rest, err := c.Root().Find(args)
			if err == nil && cmd != nil && len(rest) > 0 {
				return errExit(2, "unknown help topic %q for %q%s", rest[0], cmd.CommandPath(), didYouMean(cmd.SuggestionsFor(rest[0])))
			}
			show(c, args)
			return nil
		}
	}
}

// unknownSubcommand is the Args check of a command group: any positional
// argument is an unknown subcommand, refused with exit 2 and the closest
// subcommand names.
func unknownSubcommand(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	return errExit(2, "unknown command %q for %q%s", args[0], cmd.CommandPath(), didYouMean(cmd.SuggestionsFor(args[0])))
}

// didYouMean formats suggestions as `; did you mean "a" or "b"?`, "" for
// none.
func didYouMean(names []string) string {
	if len(names) == 0 {
		return ""
	}
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = fmt.Sprintf("%q", n)
	}
	return "; did you mean " + strings.Join(q, " or ") + "?"
}

// flagError turns a flag parse error into exit 2, naming the command and,
// for an unknown flag, the command's flags closest to it.
func flagError(cmd *cobra.Command, err error) error {
	msg := err.Error()
	var name string
	if n, ok := strings.CutPrefix(msg, "unknown flag: --"); ok {
		name = n
	} else if n, ok := strings.CutPrefix(msg, "unknown shorthand flag: "); ok {
		// "unknown shorthand flag: 'x' in -xyz"
		if len(n) >= 3 && n[0] == '\'' {
			name = n[1:2]
		}
	}
	if name != "" {
		msg += fmt.Sprintf(" for %q", cmd.CommandPath()) + didYouMean(flagSuggestions(cmd, name))
		if !strings.Contains(msg, "did you mean") {
			msg += fmt.Sprintf(" (see %s --help)", cmd.CommandPath())
		}
	}
	return errExit(2, "%s", msg)
}

// flagSuggestions are the flags of cmd (its own and inherited) whose
// names are within edit distance 2 of name, or that start with it, as
// "--flag", closest first.
func flagSuggestions(cmd *cobra.Command, name string) []string {
	type cand struct {
		name string
		d    int
	}
	var cs []cand
	seen := map[string]bool{}
	visit := func(f *pflag.Flag) {
		if seen[f.Name] || f.Hidden {
			return
		}
		seen[f.Name] = true
		d := levenshtein(strings.ToLower(name), strings.ToLower(f.Name))
		if d <= 2 || (len(name) > 1 && strings.HasPrefix(f.Name, name)) {
			cs = append(cs, cand{"--" + f.Name, d})
		}
	}
	cmd.Flags().VisitAll(visit)
	cmd.InheritedFlags().VisitAll(visit)
	sort.SliceStable(cs, func(i, j int) bool { return cs[i].d < cs[j].d })
	out := make([]string, 0, 3)
	for i := 0; i < len(cs) && i < 3; i++ {
		out = append(out, cs[i].name)
	}
	return out
}

// levenshtein is the edit distance between a and b, in bytes.
func levenshtein(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
