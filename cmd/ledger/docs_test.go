package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode"
)

// walkthroughs are the per-role pages of docs/ whose shell blocks
// TestDocsWalkthroughs runs, in order, against a fresh ledger.
var walkthroughs = []string{
	"docs/ci.md",
	"docs/reviewer.md",
	"docs/release-manager.md",
	"docs/hardware-host.md",
	"docs/operator.md",
}

// docBlock is one fenced block of a Markdown page: its info string, its
// first content line (1-based, in the page), its lines, and, for a block
// the docs test does not run, the reason its `<!-- not run: REASON -->`
// marker gives.
type docBlock struct {
	info   string
	line   int
	lines  []string
	notRun string
}

// notRunMarker is the comment that, on the line before a ```sh fence (blank
// lines between allowed), keeps the block out of the docs test with a reason.
var notRunMarker = regexp.MustCompile(`^<!--\s*not run:\s*(.+?)\s*-->$`)

// parseBlocks returns the fenced blocks of a Markdown page in order. An
// unclosed fence is an error naming its line.
func parseBlocks(text string) ([]docBlock, error) {
	var blocks []docBlock
	var cur *docBlock
	marker := ""
	for i, l := range strings.Split(text, "\n") {
		if cur != nil {
			if strings.TrimSpace(l) == "```" {
				blocks = append(blocks, *cur)
				cur = nil
				continue
			}
			cur.lines = append(cur.lines, l)
			continue
		}
		if info, ok := strings.CutPrefix(l, "```"); ok {
			cur = &docBlock{info: strings.TrimSpace(info), line: i + 2, notRun: marker}
			marker = ""
			continue
		}
		if m := notRunMarker.FindStringSubmatch(strings.TrimSpace(l)); m != nil {
			marker = m[1]
		} else if strings.TrimSpace(l) != "" {
			marker = ""
		}
	}
	if cur != nil {
		return nil, fmt.Errorf("line %d: fenced block not closed", cur.line-1)
	}
	return blocks, nil
}

// commandCount is the number of commands in a shell block: its lines that
// are neither blank nor comments, a line ending in a backslash joined to
// the next, a here-document's body not counted.
func commandCount(lines []string) int {
	n, cont, heredoc := 0, false, ""
	for _, l := range lines {
		t := strings.TrimSpace(l)
		switch {
		case heredoc != "":
			if t == heredoc {
				heredoc = ""
			}
			continue
		case cont:
		case t == "" || strings.HasPrefix(t, "#"):
			continue
		default:
			n++
		}
		cont = strings.HasSuffix(t, `\`)
		if m := regexp.MustCompile(`<<-?\s*'?"?(\w+)'?"?`).FindStringSubmatch(t); m != nil {
			heredoc = m[1]
		}
	}
	return n
}

// TestDocsWalkthroughs runs every ```sh block of each role's walkthrough,
// in order, with the built `ledger` first on PATH, in a fresh directory
// holding links to the repository's examples/ and testdata/, against a
// fresh SQLite ledger (var/ledger.db) served by `ledger serve` on a free
// port: LEDGER_SERVER is its URL and LEDGER_TOKEN an admin token with the
// role release-manager, as `make run` leaves them. Blocks share the shell
// variables and working directory of the blocks before them. A command that
// exits non-zero fails the test naming the page, the line and the block's
// output; a block marked `<!-- not run: REASON -->` (hardware, a second
// host, a long-running service) is skipped and reported with its reason.
func TestDocsWalkthroughs(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	for _, page := range walkthroughs {
		t.Run(filepath.Base(page), func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join(root, page))
			if err != nil {
				t.Fatal(err)
			}
			blocks, err := parseBlocks(string(b))
			if err != nil {
				t.Fatalf("%s: %v", page, err)
			}
			runDocPage(t, root, page, blocks)
		})
	}
}

func runDocPage(t *testing.T, root, page string, blocks []docBlock) {
	dir := t.TempDir()
	for _, d := range []string{"examples", "testdata"} {
		if err := os.Symlink(filepath.Join(root, d), filepath.Join(dir, d)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "var"), 0o755); err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(dir, "var", "ledger.db")
	out, errOut, code := runBin(t, "", "--db", db, "token", "create", "--name", "docs-admin", "--scope", "admin", "--role", "release-manager")
	if code != 0 {
		t.Fatalf("admin token: %s", errOut)
	}
	token := strings.TrimSpace(out)
	srv, url := startServer(t, db)
	t.Cleanup(func() { srv.Process.Signal(syscall.SIGTERM); srv.Wait() })

	// The shell state (exported variables and the working directory)
	// carried from one block to the next; the server's URL and token are
	// in it, not in the environment, so that a block may unset them.
	state := filepath.Join(t.TempDir(), "state.sh")
	env := []string{
		"PATH=" + filepath.Dir(ledgerBin) + string(os.PathListSeparator) + os.Getenv("PATH"),
		"HOME=" + dir,
		"LANG=C.UTF-8",
		"GIT_CONFIG_NOSYSTEM=1",
		"TMPDIR=" + os.TempDir(),
	}
	initial := "export LEDGER_SERVER=" + shellQuote(url) + " LEDGER_TOKEN=" + shellQuote(token) + "\ncd " + shellQuote(dir) + "\n"
	if err := os.WriteFile(state, []byte(initial), 0o600); err != nil {
		t.Fatal(err)
	}
	var groups []int
	t.Cleanup(func() {
		for _, g := range groups {
			syscall.Kill(-g, syscall.SIGKILL)
		}
	})
	ran, cmds := 0, 0
	var skipped []string
	for _, bl := range blocks {
		if bl.info != "sh" {
			continue
		}
		if bl.notRun != "" {
			skipped = append(skipped, fmt.Sprintf("%s:%d: %s", page, bl.line, bl.notRun))
			continue
		}
		ran++
		cmds += commandCount(bl.lines)
		// Line 1 restores the state, exports every variable a block sets
		// (set -a) and sets the error trap, so line N+1
		// of the script is line N of the block.
		script := "source " + shellQuote(state) + "; set -a -eE -o pipefail; trap 'echo \"docs test: exit $? at block line $((LINENO))\" >&2' ERR\n" +
			strings.Join(bl.lines, "\n") +
			"\n{ export -p; echo \"cd $(printf %q \"$PWD\")\"; } > " + shellQuote(state) + "\n"
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		cmd := exec.CommandContext(ctx, "bash", "-c", script)
		cmd.Env = env
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
		cmd.WaitDelay = 5 * time.Second
		var buf bytes.Buffer
		cmd.Stdout, cmd.Stderr = &buf, &buf
		start := time.Now()
		err := cmd.Start()
		if err == nil {
			groups = append(groups, cmd.Process.Pid)
			err = cmd.Wait()
		}
		cancel()
		if err != nil {
			line := bl.line
			if m := regexp.MustCompile(`docs test: exit \d+ at block line (\d+)`).FindStringSubmatch(buf.String()); m != nil {
				var n int
				fmt.Sscan(m[1], &n)
				line = bl.line + n - 2
			}
			t.Fatalf("%s:%d: %v (after %s)\ncommand: %s\noutput:\n%s", page, line, err, time.Since(start).Round(time.Millisecond),
				blockLine(bl, line), buf.String())
		}
	}
	if ran == 0 {
		t.Fatalf("%s: no ```sh block ran", page)
	}
	t.Logf("%s: %d commands in %d blocks ran; %d blocks not run", page, cmds, ran, len(skipped))
	for _, s := range skipped {
		t.Logf("not run: %s", s)
	}
}

// blockLine returns the page's line n if it is in the block.
func blockLine(bl docBlock, n int) string {
	i := n - bl.line
	if i < 0 || i >= len(bl.lines) {
		return "(line outside the block)"
	}
	return bl.lines[i]
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// TestDocsLinks checks every relative link of README.md and docs/: the file
// it names exists and, for a link into a Markdown page, the page has a
// heading of that anchor (GitHub's slugs).
func TestDocsLinks(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	pages := []string{filepath.Join(root, "README.md")}
	filepath.WalkDir(filepath.Join(root, "docs"), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".md") {
			pages = append(pages, p)
		}
		return nil
	})
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	n := 0
	for _, p := range pages {
		text, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, p)
		for i, l := range strings.Split(stripCode(string(text)), "\n") {
			for _, m := range link.FindAllStringSubmatch(l, -1) {
				target := m[1]
				if regexp.MustCompile(`^[a-z][a-z0-9+.-]*:`).MatchString(target) {
					continue
				}
				n++
				file, anchor, _ := strings.Cut(target, "#")
				dest := p
				if file != "" {
					dest = filepath.Join(filepath.Dir(p), file)
				}
				if _, err := os.Stat(dest); err != nil {
					t.Errorf("%s:%d: link %s: %v", rel, i+1, target, err)
					continue
				}
				if anchor != "" && strings.HasSuffix(dest, ".md") && !hasAnchor(t, dest, anchor) {
					t.Errorf("%s:%d: link %s: no heading with that anchor", rel, i+1, target)
				}
			}
		}
	}
	t.Logf("%d relative links in %d pages checked", n, len(pages))
}

// stripCode blanks fenced blocks and inline code spans, keeping the line
// count, so that text in code is not read as links.
func stripCode(text string) string {
	var b strings.Builder
	in := false
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, "```") {
			in = !in
			b.WriteString("\n")
			continue
		}
		if in {
			b.WriteString("\n")
			continue
		}
		b.WriteString(regexp.MustCompile("`[^`]*`").ReplaceAllString(l, "``") + "\n")
	}
	return b.String()
}

// hasAnchor reports whether the Markdown page has a heading whose GitHub
// slug is anchor: lower case, punctuation other than - and _ dropped,
// spaces as -, a repeated slug numbered -1, -2...
func hasAnchor(t *testing.T, page, anchor string) bool {
	f, err := os.Open(page)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	seen := map[string]int{}
	in := false
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		l := sc.Text()
		if strings.HasPrefix(l, "```") {
			in = !in
		}
		h, ok := strings.CutPrefix(l, "#")
		if in || !ok {
			continue
		}
		h = strings.TrimLeft(h, "#")
		if !strings.HasPrefix(h, " ") {
			continue
		}
		s := slug(strings.TrimSpace(h))
		if k := seen[s]; k > 0 {
			seen[s] = k + 1
			s = fmt.Sprintf("%s-%d", s, k)
		} else {
			seen[s] = 1
		}
		if s == anchor {
			return true
		}
	}
	return false
}

func slug(h string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsNumber(r) || unicode.IsMark(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}
