package main

import (
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/ledger/storetest/pgtest"
)

func newPGDatabase(t *testing.T) string { return pgtest.NewDatabase(t) }

// check asserts the invariants of TRUST.md rule 8 on the ledger as it is
// now: the audit passes; a backup audits; a copy to the other store
// audits with the same root; every signed verdict replays; a restarted
// server serves every page and verdict without a 5xx; a real witness
// cosigns the latest checkpoint. It leaves the server running.
func (e *lcEnv) check() error {
	if err := e.stop(); err != nil {
		return err
	}
	out, _, err := e.cli(0, "", "audit")
	if err != nil {
		return fmt.Errorf("audit: %w", err)
	}
	if !strings.Contains(out, "audit passed") {
		return fmt.Errorf("audit output: %s", out)
	}
	n := e.m.next()
	// ledger backup (SQLite only: it is VACUUM INTO) audits.
	if e.store == "sqlite" {
		dest := filepath.Join(e.dir, fmt.Sprintf("check-backup-%d", n)) + string(filepath.Separator)
		if _, _, err := e.cli(0, "", "backup", dest); err != nil {
			return fmt.Errorf("backup: %w", err)
		}
		if _, _, _, err := e.exec([]int{0}, "", "--db", filepath.Join(dest, "ledger.db"), "--data-dir", e.dataDir, "audit"); err != nil {
			return fmt.Errorf("audit of the backup: %w", err)
		}
	}
	// ledger copy to the other store audits with the same root.
	var to string
	switch {
	case e.store == "postgres":
		to = filepath.Join(e.dir, fmt.Sprintf("check-copy-%d.db", n))
	case pgtest.Available():
		to = newPGDatabase(e.t)
	default:
		to = filepath.Join(e.dir, fmt.Sprintf("check-copy-%d.db", n))
	}
	out, _, _, err = e.exec([]int{0}, "", "--data-dir", e.dataDir, "copy", "--from", e.db, "--to", to)
	if err != nil {
		return fmt.Errorf("copy: %w", err)
	}
	if strings.Count(out, "ok=true") != 2 {
		return fmt.Errorf("copy output: %s", out)
	}
	srcAudit, _, err := e.cli(0, "", "--json", "audit")
	if err != nil {
		return err
	}
	dstAudit, _, _, err := e.exec([]int{0}, "", "--db", to, "--data-dir", e.dataDir, "--json", "audit")
	if err != nil {
		return fmt.Errorf("audit of the copy: %w", err)
	}
	if a, b := auditRoot(srcAudit), auditRoot(dstAudit); a == "" || a != b {
		return fmt.Errorf("the copy's audit root %q differs from the source's %q:\n%s\n%s", b, a, dstAudit, srcAudit)
	}
	// Every signed verdict replays at its checkpoint.
	for _, v := range e.m.verdicts {
		if _, _, err := e.cli(0, "", "release", "verify-verdict", "--replay", v); err != nil {
			return fmt.Errorf("verify-verdict --replay %s: %w", filepath.Base(v), err)
		}
	}
	if err := e.start(); err != nil {
		return fmt.Errorf("restart: %w", err)
	}
	if err := e.checkFullScan(); err != nil {
		return err
	}
	if err := e.checkPages(); err != nil {
		return err
	}
	if err := e.checkWitnessed(); err != nil {
		return err
	}
	if err := e.checkAgainst(); err != nil {
		return err
	}
	if err := e.checkReaders(); err != nil {
		return err
	}
	return e.checkServerLogs()
}

// lcVerdict is the part of a readiness answer two readers must agree on.
type lcVerdict struct {
	Ready      bool   `json:"ready"`
	Approved   bool   `json:"approved"`
	PinsDigest string `json:"pins_digest"`
	Checkpoint struct {
		Size uint64 `json:"size"`
		Root string `json:"root"`
	} `json:"checkpoint"`
	Gates []struct {
		ID    string `json:"id"`
		State string `json:"state"`
	} `json:"gates"`
}

func parseLCVerdict(b []byte) (lcVerdict, error) {
	var w struct {
		Readiness *lcVerdict `json:"readiness"`
	}
	if err := json.Unmarshal(b, &w); err == nil && w.Readiness != nil {
		return *w.Readiness, nil
	}
	var v lcVerdict
	err := json.Unmarshal(b, &v)
	return v, err
}

// checkReaders runs the CLI's readers on the local database (every one
// must answer), checks each release's sign-offs and approvals
// (checkRecordsOnce) and has each release's readiness evaluated both by
// the server and locally: the two must agree, gate by gate.
func (e *lcEnv) checkReaders() error {
	reads := [][]string{{"release", "show"}, {"token", "list"}, {"runner", "list"}, {"key", "chain"}}
	if e.m.policies > 0 {
		reads = append(reads, []string{"policy", "show", "core"})
	}
	for _, v := range slices.Sorted(mapKeys(e.m.releases)) {
		reads = append(reads, []string{"release", "show", v})
	}
	for _, r := range reads {
		if _, _, err := e.cli(0, "", r...); err != nil {
			return err
		}
	}
	for _, r := range [][]string{{"agent", "list"}, {"runs", "list"}} {
		if _, _, err := e.remote(0, e.adm, "", r...); err != nil {
			return err
		}
	}
	for _, v := range slices.Sorted(mapKeys(e.m.releases)) {
		if err := e.checkRecordsOnce(v); err != nil {
			return err
		}
		_, b, err := e.get("/api/v1/releases/" + v + "/readiness")
		if err != nil {
			return err
		}
		srv, err := parseLCVerdict(b)
		if err != nil {
			return fmt.Errorf("readiness of %s: %v: %s", v, err, clipOut(string(b)))
		}
		out, _, _, err := e.exec([]int{0, 1}, "", append(e.base(), "--json", "release", "check", v)...)
		if err != nil {
			return err
		}
		loc, err := parseLCVerdict([]byte(out))
		if err != nil {
			return fmt.Errorf("release check --json %s: %v: %s", v, err, clipOut(out))
		}
		if srv.Checkpoint.Size == 0 || len(srv.Gates) == 0 || loc.Checkpoint.Size == 0 || len(loc.Gates) == 0 {
			return fmt.Errorf("release %s: a readiness answer without checkpoint or gates:\nserver: %s\nlocal:  %s", v, clipOut(string(b)), clipOut(out))
		}
		sj, _ := json.Marshal(srv)
		lj, _ := json.Marshal(loc)
		if string(sj) != string(lj) {
			return fmt.Errorf("release %s: the server's readiness and the local evaluation differ:\nserver: %s\nlocal:  %s", v, sj, lj)
		}
	}
	return nil
}

// checkAgainst saves the server's checkpoint as a client would and has
// `ledger audit --against` prove, with the key chain learnt from the
// first key alone, that the log extends every saved checkpoint, and
// names the fork (or the rollback, while the log is shorter) for each one
// saved before an accepted restore to a smaller size (the last three of
// those).
func (e *lcEnv) checkAgainst() error {
	code, b, err := e.get("/api/v1/log/checkpoint")
	if err != nil || code != 200 {
		return fmt.Errorf("GET /api/v1/log/checkpoint: %d %v", code, err)
	}
	var cp ledger.Checkpoint
	if err := json.Unmarshal(b, &cp); err != nil {
		return err
	}
	f := filepath.Join(e.dir, "files", fmt.Sprintf("checkpoint-%d-%d.json", cp.Size, e.m.next()))
	if err := os.WriteFile(f, b, 0o644); err != nil {
		return err
	}
	e.saved = append(e.saved, lcSaved{file: f, size: cp.Size})
	chain, _, err := e.cli(0, "", "key", "chain", "--key", e.firstPub)
	if err != nil {
		return fmt.Errorf("key chain from the first key: %w", err)
	}
	chainFile := filepath.Join(e.dir, "files", fmt.Sprintf("chain-%d.pub", e.m.next()))
	if err := os.WriteFile(chainFile, []byte(chain), 0o644); err != nil {
		return err
	}
	args := []string{"audit", "--key", chainFile}
	var forked []lcSaved
	for _, s := range e.saved {
		if s.forked {
			forked = append(forked, s)
		} else {
			args = append(args, "--against", s.file)
		}
	}
	for _, where := range [][]string{e.base(), {"--server", e.url, "--data-dir", e.dataDir}} {
		if _, _, _, err := e.exec([]int{0}, "", append(slices.Clone(where), args...)...); err != nil {
			return fmt.Errorf("audit --against the saved checkpoints: %w", err)
		}
	}
	for _, s := range forked[max(0, len(forked)-3):] {
		out, _, _, err := e.exec([]int{1}, "", append(e.base(), "audit", "--key", chainFile, "--against", s.file)...)
		// A fork, or a rollback while the log is shorter than it.
		if err != nil || !strings.Contains(out, "fork") && !strings.Contains(out, "rolled back") {
			return fmt.Errorf("audit --against a checkpoint (size %d) of the history a restore left does not name the fork or rollback: %v %s", s.size, err, out)
		}
	}
	if _, _, err := e.cli(0, "", "runner", "audit"); err != nil {
		return fmt.Errorf("runner audit: %w", err)
	}
	return nil
}

// checkFullScan waits until the restarted server's background full
// verification (every leaf, the tree, every projection row) passed.
func (e *lcEnv) checkFullScan() error {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		l := e.srvErr.String()
		switch {
		case strings.Contains(l, "full verification passed"):
			return nil
		case strings.Contains(l, "full verification could not finish") || strings.Contains(l, "tamper"):
			return fmt.Errorf("the restarted server's full verification failed:\n%s", clipOut(l))
		case time.Now().After(deadline):
			return fmt.Errorf("the restarted server's full verification did not pass within 2 minutes:\n%s", clipOut(l))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

var lcWitnessKeyRe = regexp.MustCompile(`witness round failed" err="witness round: checkpoint of size (\d+): no signature from a known key"`)

// noteKnown logs a known finding once per ledger.
func (e *lcEnv) noteKnown(what string) {
	if !e.known[what] {
		e.known[what] = true
		e.t.Logf("lifecycle: known finding, not failed: %s", what)
	}
}

// checkServerLogs fails on an error logged by any server since the last
// check: a valid sequence of operations makes none.
func (e *lcEnv) checkServerLogs() error {
	var bad []string
	for _, b := range e.srvLogs[e.logsSeen:] {
		for _, line := range strings.Split(b.String(), "\n") {
			if !strings.Contains(line, "level=ERROR") {
				continue
			}
			// Finding (logged, not failed): a server stopped while its
			// full verification starts logs the canceled checkpoint
			// read as an error.
			if strings.Contains(line, `msg="full verification: read the checkpoint" err=`) && strings.HasSuffix(strings.TrimSpace(line), `context canceled"`) {
				e.noteKnown("a graceful stop during the full verification's start logs level=ERROR \"full verification: read the checkpoint\" err=\"context canceled\"")
				continue
			}
			// Finding (logged, not failed): after a key rotation the
			// server's first witness round submits the rotation's
			// checkpoint, signed by the retired key, which the
			// witness policy's log key (the new one) does not verify.
			if m := lcWitnessKeyRe.FindStringSubmatch(line); m != nil {
				if n, _ := strconv.ParseUint(m[1], 10, 64); e.rotationSizes[n] {
					e.noteKnown("after a key rotation the first witness round fails on the rotation's checkpoint (signed by the retired key): level=ERROR \"witness round failed\" ... no signature from a known key")
					continue
				}
			}
			bad = append(bad, line)
		}
	}
	// The running server's log is checked again next time.
	e.logsSeen = len(e.srvLogs) - 1
	if len(bad) > 0 {
		return fmt.Errorf("the servers logged %d errors:\n%s", len(bad), clipOut(strings.Join(bad, "\n")))
	}
	return nil
}

// lcAudit is what `ledger --json audit` answers.
type lcAudit struct {
	OK     bool   `json:"ok"`
	Leaves uint64 `json:"leaves"`
	Root   string `json:"root"`
}

// auditRoot is the size and root of a passed audit's --json answer, ""
// for another answer.
func auditRoot(out string) string {
	var a lcAudit
	if json.Unmarshal([]byte(out), &a) != nil || !a.OK || a.Root == "" {
		return ""
	}
	return fmt.Sprint(a.Leaves, " ", a.Root)
}

// checkPages GETs every dashboard page and API read of what the ledger
// holds: nothing may answer 5xx, and what exists must answer 200.
func (e *lcEnv) checkPages() error {
	es, err := e.leaves()
	if err != nil {
		return err
	}
	paths := []string{"/", "/evidence", "/heads", "/runs", "/agents", "/releases", "/healthz", "/metrics", "/checkpoint",
		"/api/v1/releases", "/api/v1/evidence", "/api/v1/heads", "/api/v1/runners", "/api/v1/policies", "/api/v1/runs", "/api/v1/agents",
		"/api/v1/overview", "/api/v1/log/keys", "/api/v1/log/key", "/api/v1/log/checkpoints", "/api/v1/log/witnesses", "/api/v1/openapi.yaml",
		"/lanes/qmv-bias-sum/v1", "/lanes/ci-tests/v1", "/lanes/" + quickLane, "/api/v1/lanes/qmv-bias-sum/v1", "/api/v1/lanes/ci-tests/v1"}
	for _, k := range ledger.Kinds() {
		paths = append(paths, "/api/v1/log/entries?kind="+string(k))
	}
	for _, v := range slices.Sorted(mapKeys(e.m.releases)) {
		paths = append(paths, "/releases/"+v, "/api/v1/releases/"+v, "/api/v1/releases/"+v+"/readiness",
			"/api/v1/releases/"+v+"/readiness?format=junit", "/api/v1/releases/"+v+"/readiness?format=vsa")
	}
	// The log's first level-0 tile (c2sp.org/tlog-tiles): full or partial.
	if n := uint64(len(es)); n >= 256 {
		paths = append(paths, "/tile/0/000")
	} else if n > 0 {
		paths = append(paths, fmt.Sprintf("/tile/0/000.p/%d", n))
	}
	if e.m.policies > 0 {
		paths = append(paths, "/api/v1/policies/core")
	}
	for _, en := range es {
		paths = append(paths, "/entries/"+en.ID, "/api/v1/log/entries/"+en.ID)
		switch en.Kind {
		case ledger.KindEvidence:
			paths = append(paths, "/evidence/"+en.ID, "/api/v1/evidence/"+en.ID, "/api/v1/evidence/"+en.ID+"/proof",
				"/api/v1/evidence/"+en.ID+"?format=in-toto", "/api/v1/evidence/"+en.ID+"?format=dsse")
		case ledger.KindOriginal:
			paths = append(paths, "/originals/"+en.ID, "/api/v1/originals/"+en.ID)
		case ledger.KindRunOutcome:
			var o ledger.RunOutcome
			if json.Unmarshal(en.Body, &o) == nil && o.Run != "" {
				paths = append(paths, "/api/v1/runs/"+url.PathEscape(o.Run))
			}
		}
	}
	var bad []string
	for _, p := range paths {
		code, b, err := e.get(p)
		if err != nil {
			return err
		}
		if code != 200 && !(p == "/releases" && code == 303) {
			bad = append(bad, fmt.Sprintf("GET %s: %d %s", p, code, clipOut(string(b))[:min(300, len(clipOut(string(b))))]))
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("%d of %d pages failed:\n%s", len(bad), len(paths), strings.Join(bad, "\n"))
	}
	return nil
}

// checkWitnessed waits until the witness cosigned the latest checkpoint.
func (e *lcEnv) checkWitnessed() error {
	cp, err := e.checkpoint()
	if err != nil {
		return err
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		var st witnessStatus
		if err := e.getJSON("/api/v1/log/witnesses", &st); err != nil {
			return err
		}
		if st.Latest != nil && st.Latest.Size >= cp.Size && st.Witnessed {
			return nil
		}
		if time.Now().After(deadline) {
			b, _ := json.Marshal(st)
			return fmt.Errorf("the witness did not cosign size %d within 30s: %s\nwitness log: %s", cp.Size, b, clipOut(e.witness.Stderr()))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// kindsSeen returns the set of kinds in the log.
func (e *lcEnv) kindsSeen() (map[ledger.Kind]int, error) {
	es, err := e.leaves()
	if err != nil {
		return nil, err
	}
	seen := map[ledger.Kind]int{}
	for _, en := range es {
		seen[en.Kind]++
	}
	return seen, nil
}
