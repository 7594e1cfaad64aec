package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// twoPersonCLIYAML is release version with two manual gates (role
// reviewer), approval role release-manager and, when rule is set, the
// two-person rule over waivers and sign-offs.
func twoPersonCLIYAML(version string, rule bool) string {
	y := "version: " + version + "\napproval_role: release-manager\n"
	if rule {
		y += "approval:\n  distinct_from: [waiver, signoff]\n"
	}
	return y + "components:\n  - {name: core, repository: example/core, reviewed: " + strings.Repeat("b", 40) + ", head: " + strings.Repeat("a", 40) + "}\n" +
		"gates:\n  - {id: review, kind: manual, role: reviewer}\n  - {id: ci, kind: manual, role: reviewer}\n"
}

// TestReleaseTwoPersonCLI drives the two-person rule and the one-fact
// sign-off through the real binary on --db: the same sign-off twice is
// one leaf; the author of a waiver and a sign-off is refused as approver
// (exit 2 naming the rule and the person) while the rule is set, and not
// without it; another person approves; a waiver by that approver
// afterwards leaves the approval stale, with the reason.
func TestReleaseTwoPersonCLI(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "ledger.db")
	expect := func(want int, args ...string) (string, string) {
		t.Helper()
		out, errOut, code := runBin(t, "", append([]string{"--db", db}, args...)...)
		if code != want {
			t.Fatalf("ledger %v: exit %d, want %d\nstdout: %s\nstderr: %s", args, code, want, out, errOut)
		}
		return out, errOut
	}
	for _, v := range []struct {
		version string
		rule    bool
	}{{"5.0.0", true}, {"5.1.0", false}} {
		f := filepath.Join(dir, v.version+".yaml")
		os.WriteFile(f, []byte(twoPersonCLIYAML(v.version, v.rule)), 0o644)
		expect(0, "release", "apply", f)
	}
	if out, _ := expect(0, "release", "show", "5.0.0"); !strings.Contains(out, "two-person rule: approval.distinct_from: [waiver, signoff]") {
		t.Fatalf("release show does not name the two-person rule: %s", out)
	}
	expect(0, "token", "create", "--name", "ann", "--scope", "admin", "--role", "release-manager", "--role", "reviewer")
	expect(0, "token", "create", "--name", "bob", "--scope", "admin", "--role", "release-manager")

	signoffID := func(note string) string {
		t.Helper()
		out, _ := expect(0, "--json", "release", "signoff", "5.0.0", "--gate", "review", "--as", "ann", "--note", note)
		var ans struct {
			ID string `json:"id"`
		}
		if err := json.Unmarshal([]byte(out), &ans); err != nil || ans.ID == "" {
			t.Fatalf("signoff --json: %v %s", err, out)
		}
		return ans.ID
	}
	if a, b := signoffID("read the diff"), signoffID("read it again"); a != b {
		t.Fatalf("the same sign-off twice: entries %s and %s", a, b)
	}
	out, _ := expect(0, "--json", "release", "show", "5.0.0")
	var shown struct {
		Signoffs []json.RawMessage `json:"signoffs"`
	}
	if err := json.Unmarshal([]byte(out), &shown); err != nil || len(shown.Signoffs) != 1 {
		t.Fatalf("the same sign-off twice made %d leaves (%v)", len(shown.Signoffs), err)
	}
	if out, _ := expect(0, "release", "signoff", "5.0.0", "--gate", "review", "--as", "ann"); !strings.Contains(out, "signed off by ann: entry ") {
		t.Fatalf("signoff output: %s", out)
	}

	expect(0, "release", "waive", "5.0.0", "--gate", "ci", "--reason", "the CI host is down", "--expires", "14d", "--as", "ann")
	_, se := expect(2, "release", "approve", "5.0.0", "--as", "ann")
	for _, want := range []string{"two-person rule (approval.distinct_from: [waiver, signoff])", "ann waived gate ci", "signed off gate review", "ann may not approve"} {
		if !strings.Contains(se, want) {
			t.Errorf("refusal %q lacks %q", se, want)
		}
	}
	expect(0, "release", "approve", "5.0.0", "--as", "bob", "--note", "second pair of eyes")
	out, _ = expect(0, "release", "check", "5.0.0")
	if !strings.Contains(out, "by bob") || !strings.Contains(out, "): current") {
		t.Fatalf("check after bob's approval: %s", out)
	}
	expect(0, "release", "waive", "5.0.0", "--gate", "review", "--reason", "belt and braces", "--expires", "14d", "--as", "bob")
	out, _ = expect(0, "release", "check", "5.0.0")
	if !strings.Contains(out, "): stale: two-person rule (approval.distinct_from: [waiver, signoff]): the approver bob also waived gate review") {
		t.Fatalf("check after bob's waiver: %s", out)
	}
	out, _ = expect(0, "--json", "release", "check", "5.0.0")
	var rd struct {
		Readiness struct {
			Approved bool `json:"approved"`
		} `json:"readiness"`
	}
	if err := json.Unmarshal([]byte(out), &rd); err != nil || rd.Readiness.Approved {
		t.Fatalf("approved after the approver's waiver: %v %s", err, out)
	}

	// Without the rule one person waives, signs off and approves.
	expect(0, "release", "signoff", "5.1.0", "--gate", "review", "--as", "ann")
	expect(0, "release", "waive", "5.1.0", "--gate", "ci", "--reason", "the CI host is down", "--expires", "14d", "--as", "ann")
	expect(0, "release", "approve", "5.1.0", "--as", "ann")
}
