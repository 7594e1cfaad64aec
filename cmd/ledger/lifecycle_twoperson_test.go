package main

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
)

// lcTwoPersonVersion is the lifecycle test's release with the two-person
// rule (approval: {distinct_from: [waiver, signoff]}): one manual gate,
// review, signed off by adm.
const lcTwoPersonVersion = "8.0.0"

// lcReleaseRecords is what GET /api/v1/releases/{version} and its
// readiness say about who acted on a release: sign-offs, waivers and
// approvals with their authors.
type lcReleaseRecords struct {
	pins     string
	signoffs []struct {
		Gate       string `json:"gate"`
		Role       string `json:"role"`
		Author     string `json:"author"`
		PinsDigest string `json:"pins_digest"`
	}
	approvals []struct {
		ID     string `json:"id"`
		Author string `json:"author"`
		State  string `json:"state"`
		Why    string `json:"why"`
	}
	// waivers are the authors of waivers for the current pins.
	waivers map[string]bool
	// approvalLeaves counts the approval leaves (type approval).
	approvalLeaves int
}

func (e *lcEnv) releaseRecords(v string) (*lcReleaseRecords, error) {
	var def struct {
		PinsDigest string          `json:"pins_digest"`
		Signoffs   json.RawMessage `json:"signoffs"`
		Approvals  []struct{}      `json:"approvals"`
	}
	if err := e.getJSON("/api/v1/releases/"+v, &def); err != nil {
		return nil, err
	}
	rr := &lcReleaseRecords{pins: def.PinsDigest, waivers: map[string]bool{}, approvalLeaves: len(def.Approvals)}
	if err := json.Unmarshal(def.Signoffs, &rr.signoffs); err != nil {
		return nil, err
	}
	var rd struct {
		Readiness struct {
			Gates []struct {
				Waivers []struct {
					Author string `json:"author"`
					WhyNot string `json:"why_not"`
				} `json:"waivers"`
			} `json:"gates"`
			Approvals json.RawMessage `json:"approvals"`
		} `json:"readiness"`
	}
	if err := e.getJSON("/api/v1/releases/"+v+"/readiness", &rd); err != nil {
		return nil, err
	}
	for _, g := range rd.Readiness.Gates {
		for _, w := range g.Waivers {
			if w.WhyNot != "pins changed" {
				rr.waivers[w.Author] = true
			}
		}
	}
	if len(rd.Readiness.Approvals) > 0 {
		if err := json.Unmarshal(rd.Readiness.Approvals, &rr.approvals); err != nil {
			return nil, err
		}
	}
	return rr, nil
}

// checkRecordsOnce asserts, for release v: no two sign-offs are the same
// fact (gate, role, author, pins); and, for the two-person release, no
// approval is current whose author signed off or waived for the current
// pins.
func (e *lcEnv) checkRecordsOnce(v string) error {
	rr, err := e.releaseRecords(v)
	if err != nil {
		return err
	}
	seen := map[string]bool{}
	for _, s := range rr.signoffs {
		k := strings.Join([]string{s.Gate, s.Role, s.Author, s.PinsDigest}, " ")
		if seen[k] {
			return fmt.Errorf("release %s: the same sign-off (gate, role, author, pins) %q is in the log twice", v, k)
		}
		seen[k] = true
	}
	if e.m.releases[v].kind != "twoperson" {
		return nil
	}
	signed := map[string]bool{}
	for _, s := range rr.signoffs {
		if s.PinsDigest == rr.pins {
			signed[s.Author] = true
		}
	}
	for _, a := range rr.approvals {
		if a.State == "current" && (signed[a.Author] || rr.waivers[a.Author]) {
			return fmt.Errorf("release %s: approval %s by %s is current although %s signed off (%v) or waived (%v) for the current pins", v, a.ID, a.Author, a.Author, signed[a.Author], rr.waivers[a.Author])
		}
	}
	return nil
}

// opTwoPerson exercises release 8.0.0's two-person rule through the
// server or the --db CLI: adm signs off its gate twice (one sign-off
// leaf, the same entry answered); adm is refused as approver (exit 2
// naming the rule, no approval leaf); a new release manager approves and
// the approval is current; sometimes that approver then waives the gate,
// and the approval must be listed stale with the rule as the reason.
func opTwoPerson(e *lcEnv, r *rand.Rand) error {
	v := lcTwoPersonVersion
	rel, ok := e.m.releases[v]
	if !ok || r.IntN(4) == 0 {
		rel = &lcRelease{version: v, kind: "twoperson", head: pick(r, lcCommitA, lcCommitB), approvalRole: true}
		if err := e.applyRelease(r, rel, lcReleaseYAML(rel)); err != nil {
			return err
		}
	}
	api := viaAPI(r)
	as := func(want []int, name, secret string, args ...string) (string, string, int, error) {
		if api {
			return e.exec(want, "", append([]string{"--server", e.url, "--token", secret}, args...)...)
		}
		return e.exec(want, "", append(e.base(), append(args, "--as", name)...)...)
	}
	signoff := func(note string) (string, error) {
		out, _, _, err := as([]int{0}, "adm", e.adm, "--json", "release", "signoff", v, "--gate", "review", "--note", note)
		if err != nil {
			return "", err
		}
		var ans struct {
			ID string `json:"id"`
		}
		if err := json.Unmarshal([]byte(out), &ans); err != nil || ans.ID == "" {
			return "", fmt.Errorf("release signoff --json: %v: %s", err, clipOut(out))
		}
		return ans.ID, nil
	}
	first, err := signoff("ok")
	if err != nil {
		return err
	}
	again, err := signoff(fmt.Sprintf("ok again %d", e.m.next()))
	if err != nil {
		return err
	}
	if first != again {
		return fmt.Errorf("the same sign-off twice answered entries %s and %s", first, again)
	}
	before, err := e.releaseRecords(v)
	if err != nil {
		return err
	}
	_, se, _, err := as([]int{2}, "adm", e.adm, "release", "approve", v, "--note", "ship")
	if err != nil {
		return fmt.Errorf("the author of the sign-off approved: %w", err)
	}
	if !strings.Contains(se, "two-person rule") || !strings.Contains(se, "adm may not approve") {
		return fmt.Errorf("the refusal of adm's approval does not name the rule and the person: %s", clipOut(se))
	}
	after, err := e.releaseRecords(v)
	if err != nil {
		return err
	}
	if after.approvalLeaves != before.approvalLeaves {
		return fmt.Errorf("a refused approval appended: %d approvals, then %d", before.approvalLeaves, after.approvalLeaves)
	}
	name := fmt.Sprintf("mgr-%d", e.m.next())
	secret, err := e.tokenCreate(name, "admin", "release-manager")
	if err != nil {
		return err
	}
	if _, _, _, err := as([]int{0}, name, secret, "release", "approve", v, "--note", "second pair of eyes"); err != nil {
		return err
	}
	state := func() (string, string, error) {
		rr, err := e.releaseRecords(v)
		if err != nil {
			return "", "", err
		}
		for _, a := range rr.approvals {
			if a.Author == name {
				return a.State, a.Why, nil
			}
		}
		return "", "", fmt.Errorf("release %s lists no approval by %s", v, name)
	}
	if st, why, err := state(); err != nil || st != "current" {
		return fmt.Errorf("%s's approval: %s (%s) %v", name, st, why, err)
	}
	waived := r.IntN(2) == 0
	if waived {
		if _, _, _, err := as([]int{0}, name, secret, "release", "waive", v, "--gate", "review", "--reason", "belt and braces", "--expires", "14d"); err != nil {
			return err
		}
		st, why, err := state()
		if err != nil {
			return err
		}
		if st != "stale" || !strings.Contains(why, "two-person rule") || !strings.Contains(why, "the approver "+name+" also waived gate review") {
			return fmt.Errorf("%s's approval after %s waived: %s (%s); want stale under the two-person rule", name, name, st, why)
		}
	}
	e.logf("two-person %s approver %s waived=%v api=%v", v, name, waived, api)
	return nil
}
