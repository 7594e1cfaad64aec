package main

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"strings"
	"testing"

	"github.com/evidence-ledger/ledger/client"
	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/ledger/sqlite"
	"github.com/evidence-ledger/ledger/runs"
	"github.com/evidence-ledger/ledger/verify"
)

// TestAgentApproveKeyIDListRemove drives the admin commands against a
// real server: `agent list` shows the registered key id; `agent approve
// --key-id` with another id is refused (exit 2, nothing approved) and
// with the registered id approves and prints it; `agent remove` revokes
// the approved key and frees the name; `agent list` prints a stored
// row's control characters escaped, never raw.
func TestAgentApproveKeyIDListRemove(t *testing.T) {
	e := newAgentEnv(t)
	ctx := context.Background()
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	kid := verify.RunnerKeyID(pub)
	c, err := client.New(e.url, client.Options{Token: e.recTok})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.NewAgent(c, "gpu1", priv).Register(ctx, runs.RegisterRequest{Name: "gpu1", PublicKey: verify.AuthorizedKey(pub), Backend: ledger.BackendCPU,
		Spec: runs.AgentSpec{Lanes: []string{quickLane}, Repository: testRepo, Commit: testCommit}, Health: "ok"}); err != nil {
		t.Fatal(err)
	}
	adm := []string{"--server", e.url, "--token", e.admin, "agent"}
	out, se, code := runBin(t, "", append(adm, "list")...)
	if code != 0 || !strings.Contains(out, "KEY ID") || !strings.Contains(out, kid) {
		t.Fatalf("agent list: %d %s %s, want the key id %s", code, out, se, kid)
	}
	other, _, _ := ed25519.GenerateKey(rand.Reader)
	_, se, code = runBin(t, "", append(adm, "approve", "gpu1", "--key-id", verify.RunnerKeyID(other))...)
	if code != 2 || !strings.Contains(se, kid) || !strings.Contains(se, "nothing was approved") {
		t.Fatalf("approve --key-id of another key: exit %d %s, want 2 naming the registered key", code, se)
	}
	if as, _ := e.admCl.Agents(ctx); len(as) != 1 || as[0].Approved {
		t.Fatalf("after a refused approval: %+v", as)
	}
	out, se, code = runBin(t, "", append(adm, "approve", "gpu1", "--key-id", kid)...)
	if code != 0 || !strings.Contains(out, "approved runner gpu1 key "+kid) {
		t.Fatalf("approve --key-id of the registered key: exit %d %s %s", code, out, se)
	}
	out, se, code = runBin(t, "", append(adm, "remove", "gpu1")...)
	if code != 0 || !strings.Contains(out, "removed agent gpu1") || !strings.Contains(out, "revoked key "+kid) {
		t.Fatalf("agent remove: exit %d %s %s", code, out, se)
	}
	if as, _ := e.admCl.Agents(ctx); len(as) != 0 {
		t.Fatalf("after remove the server lists %+v", as)
	}

	db, err := sqlite.OpenAux(e.db)
	if err != nil {
		t.Fatal(err)
	}
	rs := runs.New(db, nil)
	defer rs.Close()
	if err := rs.Register(ctx, runs.Agent{Name: "old1", KeyID: kid, PublicKey: verify.AuthorizedKey(pub), Backend: ledger.BackendCPU, Labels: map[string]string{},
		Spec: runs.AgentSpec{Lanes: []string{quickLane}, Device: ledger.Device{Model: "H200\x1b[2J"}}, Health: "ok\x1b]0;t\a"}); err != nil {
		t.Fatal(err)
	}
	out, se, code = runBin(t, "", append(adm, "list")...)
	if code != 0 || strings.ContainsAny(out, "\x1b\a") || !strings.Contains(out, `H200\x1b[2J`) {
		t.Fatalf("agent list of a hostile row: exit %d %q %s, want the escapes shown as text", code, out, se)
	}
}
