package main

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"database/sql"
	"errors"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/evidence-ledger/ledger/client"
	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/runs"
	"github.com/evidence-ledger/ledger/verify"
)

// TestCopiedLedgerKeepsAgentHardware approves an agent labelled gpu=h200,
// moves the ledger with `ledger copy` and serves the copy: the agent's
// registration moved with it, so re-registering with other labels or
// another device is refused (409) as on the source. With the agents row
// deleted (a store restored without it), a registration other than the
// one approved is refused too, and the one approved is taken, still
// approved.
func TestCopiedLedgerKeepsAgentHardware(t *testing.T) {
	e := newAgentEnv(t)
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	approved := runs.RegisterRequest{Name: "h1", PublicKey: verify.AuthorizedKey(pub), Backend: ledger.BackendCPU,
		Labels: map[string]string{"gpu": "h200"},
		Spec: runs.AgentSpec{Lanes: []string{quickLane}, Repository: testRepo, Commit: testCommit,
			Device: ledger.Device{Model: "H200", Cores: 132}}, Health: "ok"}
	register := func(change func(*runs.RegisterRequest)) (runs.Agent, error) {
		req := approved
		req.Labels = map[string]string{"gpu": "h200"}
		if change != nil {
			change(&req)
		}
		c, err := client.New(e.url, client.Options{Token: e.recTok})
		if err != nil {
			t.Fatal(err)
		}
		return client.NewAgent(c, "h1", priv).Register(context.Background(), req)
	}
	if _, err := register(nil); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := e.admCl.ApproveAgent(context.Background(), "h1", runs.ApproveRequest{}); err != nil {
		t.Fatal(err)
	}
	otherLabels := func(r *runs.RegisterRequest) { r.Labels = map[string]string{"gpu": "a100"} }
	otherDevice := func(r *runs.RegisterRequest) { r.Spec.Device.Model = "A100" }
	refused := func(what string, change func(*runs.RegisterRequest), field string) {
		t.Helper()
		_, err := register(change)
		var le *ledger.Error
		if !errors.As(err, &le) || le.Code != ledger.CodeConflict || le.Field != field {
			t.Fatalf("%s: want 409 naming %s, got %v", what, field, err)
		}
	}
	refused("source, other labels", otherLabels, "labels")

	_ = e.srv.Process.Signal(syscall.SIGTERM)
	_ = e.srv.Wait()
	cp := filepath.Join(e.dir, "copy.db")
	out, se, code := runBin(t, "", "--data-dir", e.dir, "copy", "--from", e.db, "--to", "sqlite://"+cp)
	if code != 0 || !strings.Contains(out, "1 agents") {
		t.Fatalf("copy: %d %s %s", code, out, se)
	}
	e.db = cp
	e.start()
	refused("copy, other labels", otherLabels, "labels")
	refused("copy, other device", otherDevice, "spec.device.model")
	if _, err := register(func(r *runs.RegisterRequest) { r.Spec.Commit = strings.Repeat("ab", 20) }); err != nil {
		t.Fatalf("copy, a new build on the same hardware: %v", err)
	}

	// The row gone: only the registration approved is taken.
	_ = e.srv.Process.Signal(syscall.SIGTERM)
	_ = e.srv.Wait()
	db, err := sql.Open("sqlite", "file:"+cp)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("DELETE FROM agents"); err != nil {
		t.Fatal(err)
	}
	db.Close()
	e.start()
	refused("no row, other labels", otherLabels, "labels")
	refused("no row, other device", otherDevice, "spec")
	refused("no row, another build", func(r *runs.RegisterRequest) { r.Spec.Commit = strings.Repeat("cd", 20) }, "spec")
	got, err := register(nil)
	if err != nil || !got.Approved {
		t.Fatalf("no row, the registration approved: approved=%v %v", got.Approved, err)
	}
	refused("row back, other device", otherDevice, "spec.device.model")
}
