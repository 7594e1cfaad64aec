package web

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/evidence-ledger/ledger/gates"
	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/verify"
	"github.com/secure-systems-lab/go-securesystemslib/dsse"
)

// runnerEnv is an API on a temporary database with an admin token, a
// registered runner ci-mac (and other-runner), and release 9.9.9 whose one
// lane gate counts only evidence signed by ci-mac.
type runnerEnv struct {
	*apiEnv
	admin      string
	mac, other ed25519.PrivateKey
}

func newRunnerEnv(t *testing.T) *runnerEnv {
	t.Helper()
	e := &runnerEnv{apiEnv: newAPIEnv(t, Config{})}
	admin, _, err := e.store.CreateToken(context.Background(), "admin", ledger.ScopeAdmin, nil)
	if err != nil {
		t.Fatal(err)
	}
	e.admin = admin
	e.mac, e.other = newKey(t), newKey(t)
	e.addRunner(t, "ci-mac", e.mac)
	e.addRunner(t, "other-runner", e.other)
	commit := fmt.Sprintf("%040x", 2) // testEvidence(1)'s
	rel := fmt.Sprintf(`version: 9.9.9
components:
  - {name: core, repository: github.com/ml-explore/mlx, reviewed: %s, head: %s}
gates:
  - {id: qmv, kind: lane, lane: qmv-bias-sum/v1, component: core, backends: [cpu], cases: 216, signed_by: [ci-mac]}
`, commit, commit)
	if code, body := e.do(t, http.MethodPut, "/api/v1/releases/9.9.9", e.admin, rel, "Content-Type", "application/yaml"); code != http.StatusCreated && code != http.StatusOK {
		t.Fatalf("define release: %d %s", code, body)
	}
	return e
}

func newKey(t *testing.T) ed25519.PrivateKey {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return priv
}

func (e *runnerEnv) addRunner(t *testing.T, name string, priv ed25519.PrivateKey) {
	t.Helper()
	pub := verify.AuthorizedKey(priv.Public().(ed25519.PublicKey)) + " " + name + "@host"
	if code, body := e.do(t, http.MethodPost, "/api/v1/runners", e.admin, map[string]string{"name": name, "public_key": pub}); code != http.StatusCreated {
		t.Fatalf("add runner %s: %d %s", name, code, body)
	}
}

func sign(t *testing.T, priv ed25519.PrivateKey, ev map[string]any) []byte {
	t.Helper()
	body, _ := json.Marshal(ev)
	env, err := verify.SignEvidence(context.Background(), priv, body)
	if err != nil {
		t.Fatal(err)
	}
	return env
}

// gate returns release 9.9.9's qmv gate and whether the release is ready.
func (e *runnerEnv) gate(t *testing.T) (gates.GateResult, bool) {
	t.Helper()
	code, body := e.do(t, http.MethodGet, "/api/v1/releases/9.9.9/readiness", "", nil)
	if code != http.StatusOK {
		t.Fatalf("readiness: %d %s", code, body)
	}
	var sv gates.SignedVerdict
	if err := json.Unmarshal(body, &sv); err != nil || sv.Readiness == nil || len(sv.Readiness.Gates) != 1 {
		t.Fatalf("readiness: %v %s", err, body)
	}
	return sv.Readiness.Gates[0], sv.Readiness.Ready
}

// TestDSSEEnvelopeExploits: with a record token over the real HTTP API,
// every forged or misdirected signature is refused with a 4xx naming the
// member and appends nothing, or is recorded as baseline with the reason;
// the release stays not ready until evidence signed by the runner the gate
// names arrives, and a revoked key takes its evidence back to baseline.
func TestDSSEEnvelopeExploits(t *testing.T) {
	e := newRunnerEnv(t)
	ev := testEvidence(1)
	ctx := context.Background()

	// A registered key signed a different payload type: re-signed
	// properly over that type, so only the type is wrong.
	evBody, _ := json.Marshal(ev)
	intoto := dsseEnvelope(t, e.mac, "application/vnd.in-toto+json", evBody)

	// Tampered: a valid envelope by ci-mac whose payload is then changed
	// (another backend), or whose payload type is changed after signing.
	good := sign(t, e.mac, ev)
	var tampered ledger.Envelope
	json.Unmarshal(good, &tampered)
	changed := testEvidence(1)
	changed["subject"].(map[string]any)["commit"] = fmt.Sprintf("%040x", 99)
	cb, _ := json.Marshal(changed)
	tampered.Payload = base64.StdEncoding.EncodeToString(cb)
	tamperedBytes, _ := json.Marshal(tampered)
	var retyped ledger.Envelope
	json.Unmarshal(good, &retyped)
	retyped.PayloadType = "application/json"
	retypedBytes, _ := json.Marshal(retyped)
	var flipped ledger.Envelope
	json.Unmarshal(good, &flipped)
	sig, _ := base64.StdEncoding.DecodeString(flipped.Signatures[0].Sig)
	sig[0] ^= 1
	flipped.Signatures[0].Sig = base64.StdEncoding.EncodeToString(sig)
	flippedBytes, _ := json.Marshal(flipped)

	// A plain record carrying a signer copied from a real one.
	plainSigner := testEvidence(1)
	plainSigner["signer"] = map[string]any{"runner": "ci-mac", "key_id": verify.RunnerKeyID(e.mac.Public().(ed25519.PublicKey)), "key_entry": strings.Repeat("a", 32), "envelope": json.RawMessage(good)}
	// A signed payload that itself claims a signer.
	nested := testEvidence(1)
	nested["signer"] = plainSigner["signer"]
	nb, _ := json.Marshal(nested)
	nestedEnv := dsseEnvelope(t, e.mac, ledger.PayloadTypeEvidence, nb)

	refused := []struct {
		name, field string
		body        any
		ct          string
		status      int
	}{
		{"unregistered key", "signatures", sign(t, newKey(t), ev), ledger.ContentTypeDSSE, 400},
		{"unregistered key, shape detected", "signatures", sign(t, newKey(t), ev), "application/json", 400},
		{"tampered payload", "signatures[0]", tamperedBytes, ledger.ContentTypeDSSE, 400},
		{"payload type changed after signing", "payloadType", retypedBytes, ledger.ContentTypeDSSE, 400},
		{"flipped signature bit", "signatures[0]", flippedBytes, ledger.ContentTypeDSSE, 400},
		{"wrong payload type", "payloadType", intoto, ledger.ContentTypeDSSE, 400},
		{"no signatures", "signatures", `{"payloadType":"` + ledger.PayloadTypeEvidence + `","payload":"` + base64.StdEncoding.EncodeToString(evBody) + `","signatures":[]}`, ledger.ContentTypeDSSE, 400},
		{"payload not evidence", "payload.lane", dsseEnvelope(t, e.mac, ledger.PayloadTypeEvidence, []byte(`{"lane":"x"}`)), ledger.ContentTypeDSSE, 400},
		{"signed payload claims a signer", "payload.signer", nestedEnv, ledger.ContentTypeDSSE, 400},
		{"plain record sets signer", "signer", plainSigner, "application/json", 400},
		{"plain record under the DSSE type", "payloadType", testEvidence(1), ledger.ContentTypeDSSE, 400},
		{"plain record sets signer spelled with an escape", "signer", strings.Replace(mustJSON(plainSigner), `"signer"`, `"sign\u0065r"`, 1), "application/json", 400},
		{"tampered second of a batch", "[1].signatures[0]", "[" + string(good) + "," + string(tamperedBytes) + "]", ledger.ContentTypeDSSE, 400},
	}
	for _, c := range refused {
		before := e.size(t)
		code, body := e.do(t, http.MethodPost, "/api/v1/evidence", e.record, c.body, "Content-Type", c.ct)
		var ae APIError
		json.Unmarshal(body, &ae)
		if code != c.status || ae.Field != c.field {
			t.Errorf("%s: %d field %q (%s); want %d naming %q", c.name, code, ae.Field, body, c.status, c.field)
		}
		if e.size(t) != before {
			t.Errorf("%s: appended something", c.name)
		}
		if strings.Contains(string(body), base64.StdEncoding.EncodeToString(e.mac)) {
			t.Errorf("%s: the answer echoes a key", c.name)
		}
	}
	if g, ready := e.gate(t); ready || g.State != gates.StateOpen {
		t.Fatalf("after the refusals: %s ready=%v", g.State, ready)
	}

	// Only admins register runner keys.
	pub := verify.AuthorizedKey(newKey(t).Public().(ed25519.PublicKey))
	if code, _ := e.do(t, http.MethodPost, "/api/v1/runners", e.record, map[string]string{"name": "sneaky", "public_key": pub}); code != http.StatusForbidden {
		t.Errorf("record token registering a runner key: %d; want 403", code)
	}
	if code, _ := e.do(t, http.MethodPost, "/api/v1/runners/ci-mac/revoke", e.record, map[string]string{"reason": "x"}); code != http.StatusForbidden {
		t.Errorf("record token revoking a runner key: %d; want 403", code)
	}

	// Recorded but not counted: unsigned, and signed by a runner the gate
	// does not name.
	for _, c := range []struct {
		name, reason string
		body         any
	}{
		{"unsigned", "unsigned", testEvidence(1)},
		{"other runner", "signed by runner other-runner, not by ci-mac", sign(t, e.other, testEvidence(1))},
	} {
		if code, body := e.do(t, http.MethodPost, "/api/v1/evidence", e.record, c.body); code != http.StatusCreated {
			t.Fatalf("%s: %d %s", c.name, code, body)
		}
		g, ready := e.gate(t)
		if ready || g.State != gates.StateOpen || !baselineHas(g, c.reason) {
			t.Errorf("%s: %s ready=%v baseline %+v; want open with baseline %q", c.name, g.State, ready, g.Baseline, c.reason)
		}
	}

	// A signer that reached the log without the API's verification (here
	// appended to the store directly: a forged row, a path that skipped the
	// check) names ci-mac's registration correctly, but its envelope was
	// signed by another key: the gate checks the signature and does not
	// count it.
	reg0, err := ledger.LoadRunnerKeys(ctx, e.store, 0)
	if err != nil {
		t.Fatal(err)
	}
	mac, _ := reg0.Live("ci-mac")
	forgedEv := testEvidence(1)
	fb, _ := json.Marshal(forgedEv)
	var forgedEnv ledger.Envelope
	json.Unmarshal(dsseEnvelope(t, e.other, ledger.PayloadTypeEvidence, fb), &forgedEnv)
	forgedEnv.Signatures[0].KeyID = mac.KeyID
	feb, _ := json.Marshal(forgedEnv)
	forgedEv["signer"] = map[string]any{"runner": "ci-mac", "key_id": mac.KeyID, "key_entry": mac.Entry, "envelope": json.RawMessage(feb)}
	if _, err := e.store.Append(ctx, []ledger.Record{{Kind: ledger.KindEvidence, Body: []byte(mustJSON(forgedEv))}}, ""); err != nil {
		t.Fatalf("the store refused a well-formed forged signer: %v", err)
	}
	if g, ready := e.gate(t); ready || g.State != gates.StateOpen || !baselineHas(g, "no signature of the envelope verifies") {
		t.Errorf("forged signer in the log: %s ready=%v baseline %+v; want baseline, not counted", g.State, ready, g.Baseline)
	}

	// Signed by ci-mac: counts, and the record carries its signer and the
	// envelope, which the runner audit checks again.
	code, body := e.do(t, http.MethodPost, "/api/v1/evidence", e.record, good, "Content-Type", ledger.ContentTypeDSSE)
	if code != http.StatusCreated {
		t.Fatalf("signed by ci-mac: %d %s", code, body)
	}
	var ans AppendedJSON
	json.Unmarshal(body, &ans)
	if g, ready := e.gate(t); !ready || g.State != gates.StatePassed {
		t.Fatalf("signed by ci-mac: %s (%s) ready=%v", g.State, g.Reason, ready)
	}
	ent, err := e.store.Entry(ctx, ans.ID)
	if err != nil {
		t.Fatal(err)
	}
	stored, err := ledger.ParseEvidence(ent.Body)
	if err != nil || stored.Signer == nil || stored.Signer.Runner != "ci-mac" || stored.Signer.KeyID != verify.RunnerKeyID(e.mac.Public().(ed25519.PublicKey)) {
		t.Fatalf("stored signer: %+v %v", stored.Signer, err)
	}
	if code, page := e.do(t, http.MethodGet, "/evidence/"+ans.ID, "", nil); code != http.StatusOK || !strings.Contains(string(page), "runner <strong>ci-mac</strong>") {
		t.Errorf("evidence page: %d; want it to name the signer", code)
	}
	reg, err := ledger.LoadRunnerKeys(ctx, e.store, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := verify.ReverifySigned(ctx, ledger.EvidenceEntry{Entry: ent, Evidence: stored}, reg); err != nil {
		t.Fatalf("reverify: %v", err)
	}

	// Revoked: the key's evidence is baseline again, and new envelopes
	// signed by it are refused naming the revocation.
	if code, body := e.do(t, http.MethodPost, "/api/v1/runners/ci-mac/revoke", e.admin, map[string]string{"reason": "host reimaged"}); code != http.StatusCreated {
		t.Fatalf("revoke: %d %s", code, body)
	}
	if g, ready := e.gate(t); ready || g.State != gates.StateOpen || !baselineHas(g, "revoked at index") {
		t.Errorf("after revocation: %s ready=%v baseline %+v; want open with the revoked key's run as baseline", g.State, ready, g.Baseline)
	}
	before := e.size(t)
	code, body = e.do(t, http.MethodPost, "/api/v1/evidence", e.record, sign(t, e.mac, testEvidence(2)), "Content-Type", ledger.ContentTypeDSSE)
	if code != http.StatusBadRequest || !strings.Contains(string(body), "revoked") || e.size(t) != before {
		t.Errorf("envelope signed by a revoked key: %d %s", code, body)
	}
}

func baselineHas(g gates.GateResult, reason string) bool {
	for _, b := range g.Baseline {
		if strings.Contains(b.Reason, reason) {
			return true
		}
	}
	return false
}

// dsseEnvelope signs payload under payloadType with priv through the DSSE
// library, so a test can build envelopes the ledger's own signer refuses
// to make.
func dsseEnvelope(t *testing.T, priv ed25519.PrivateKey, payloadType string, payload []byte) []byte {
	t.Helper()
	pae := dsse.PAE(payloadType, payload)
	env := ledger.Envelope{PayloadType: payloadType, Payload: base64.StdEncoding.EncodeToString(payload),
		Signatures: []ledger.EnvelopeSignature{{KeyID: verify.RunnerKeyID(priv.Public().(ed25519.PublicKey)), Sig: base64.StdEncoding.EncodeToString(ed25519.Sign(priv, pae))}}}
	b, _ := json.Marshal(env)
	return b
}

// TestRunnerRegistryRoutes: registration refusals name the field or the
// conflict, the list shows live and revoked keys, and adding the live key
// again appends nothing.
func TestRunnerRegistryRoutes(t *testing.T) {
	e := newRunnerEnv(t)
	macPub := verify.AuthorizedKey(e.mac.Public().(ed25519.PublicKey))
	cases := []struct {
		name   string
		body   map[string]string
		status int
		want   string
	}{
		{"bad name", map[string]string{"name": "Bad Name", "public_key": verify.AuthorizedKey(newKey(t).Public().(ed25519.PublicKey))}, 400, `"field": "name"`},
		{"not a key", map[string]string{"name": "x", "public_key": "hello /etc/passwd"}, 400, `"field": "public_key"`},
		{"rsa-like type", map[string]string{"name": "x", "public_key": "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAAAgQ=="}, 400, `"field": "public_key"`},
		{"same key, other name", map[string]string{"name": "x", "public_key": macPub}, 409, "already registered"},
		{"second key for a live name", map[string]string{"name": "ci-mac", "public_key": verify.AuthorizedKey(newKey(t).Public().(ed25519.PublicKey))}, 409, "revoke it first"},
	}
	for _, c := range cases {
		before := e.size(t)
		code, body := e.do(t, http.MethodPost, "/api/v1/runners", e.admin, c.body)
		if code != c.status || !strings.Contains(string(body), c.want) || e.size(t) != before {
			t.Errorf("%s: %d %s; want %d with %q and nothing appended", c.name, code, body, c.status, c.want)
		}
		if strings.Contains(string(body), "passwd") {
			t.Errorf("%s: the answer echoes the input", c.name)
		}
	}
	before := e.size(t)
	if code, body := e.do(t, http.MethodPost, "/api/v1/runners", e.admin, map[string]string{"name": "ci-mac", "public_key": macPub}); code != http.StatusOK || e.size(t) != before {
		t.Errorf("adding the live key again: %d %s; want 200 and nothing appended", code, body)
	}
	if code, _ := e.do(t, http.MethodPost, "/api/v1/runners/nobody/revoke", e.admin, map[string]string{"reason": "x"}); code != http.StatusNotFound {
		t.Errorf("revoking an unknown runner: %d; want 404", code)
	}
	if code, body := e.do(t, http.MethodPost, "/api/v1/runners/ci-mac/revoke", e.admin, map[string]string{"reason": ""}); code != http.StatusBadRequest || !strings.Contains(string(body), `"field": "reason"`) {
		t.Errorf("revocation without a reason: %d %s", code, body)
	}
	e.do(t, http.MethodPost, "/api/v1/runners/ci-mac/revoke", e.admin, map[string]string{"reason": "rotated"})
	code, body := e.do(t, http.MethodGet, "/api/v1/runners", "", nil)
	var reg ledger.RunnerRegistry
	if code != http.StatusOK || json.Unmarshal(body, &reg) != nil || len(reg.Runners) != 2 || !reg.Runners[0].Revoked || reg.Runners[0].Reason != "rotated" || reg.Runners[1].Revoked {
		t.Fatalf("list: %d %s", code, body)
	}
	// Re-registering a revoked key is refused; a new key for the name is not.
	if code, _ := e.do(t, http.MethodPost, "/api/v1/runners", e.admin, map[string]string{"name": "ci-mac", "public_key": macPub}); code != http.StatusConflict {
		t.Errorf("re-adding a revoked key: %d; want 409", code)
	}
	e.addRunner(t, "ci-mac", newKey(t))
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}
