package verify

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/ledger/auth"
	"golang.org/x/crypto/ssh"
)

func testRunnerKey(t *testing.T) (ed25519.PublicKey, ed25519.PrivateKey) {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return pub, priv
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

// TestRunnerKeyFormats: the documented public and private key formats parse
// to the same key; other key types, encrypted keys and garbage are refused
// without quoting the input.
func TestRunnerKeyFormats(t *testing.T) {
	pub, priv := testRunnerKey(t)
	spki, _ := x509.MarshalPKIXPublicKey(pub)
	sshPub, _ := ssh.NewPublicKey(pub)
	for name, data := range map[string][]byte{
		"openssh line with comment": append(ssh.MarshalAuthorizedKey(sshPub)[:len(ssh.MarshalAuthorizedKey(sshPub))-1], " ci@host\n"...),
		"openssh line":              []byte(AuthorizedKey(pub)),
		"pem pkix":                  pemBlock("PUBLIC KEY", spki),
	} {
		got, err := ParseRunnerPublicKey(data)
		if err != nil || !got.Equal(pub) {
			t.Errorf("%s: %v", name, err)
		}
	}
	ec, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	ecSPKI, _ := x509.MarshalPKIXPublicKey(&ec.PublicKey)
	ecSSH, _ := ssh.NewPublicKey(&ec.PublicKey)
	for name, data := range map[string][]byte{
		"ecdsa pem":     pemBlock("PUBLIC KEY", ecSPKI),
		"ecdsa openssh": ssh.MarshalAuthorizedKey(ecSSH),
		"garbage":       []byte("secret-token-value"),
		"two keys":      []byte(AuthorizedKey(pub) + "\n" + AuthorizedKey(pub) + "\n"),
		"private pem":   pemBlock("PRIVATE KEY", []byte("x")),
	} {
		if _, err := ParseRunnerPublicKey(data); err == nil || strings.Contains(err.Error(), "secret-token-value") {
			t.Errorf("%s: %v; want refused without echo", name, err)
		}
	}

	pkcs8, _ := x509.MarshalPKCS8PrivateKey(priv)
	opensshPriv, err := ssh.MarshalPrivateKey(priv, "ci")
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{"pkcs8": pemBlock("PRIVATE KEY", pkcs8), "openssh": pem.EncodeToMemory(opensshPriv)} {
		got, err := ParseRunnerPrivateKey(data)
		if err != nil || !got.Equal(priv) {
			t.Errorf("private %s: %v", name, err)
		}
	}
	enc, err := ssh.MarshalPrivateKeyWithPassphrase(priv, "ci", []byte("pw"))
	if err != nil {
		t.Fatal(err)
	}
	ecPriv, _ := x509.MarshalPKCS8PrivateKey(ec)
	for name, data := range map[string][]byte{"encrypted": pem.EncodeToMemory(enc), "ecdsa": pemBlock("PRIVATE KEY", ecPriv), "garbage": []byte("secret-token-value")} {
		if _, err := ParseRunnerPrivateKey(data); err == nil || strings.Contains(err.Error(), "secret-token-value") {
			t.Errorf("private %s: %v; want refused", name, err)
		}
	}
	// The key id is the OpenSSH fingerprint, and the domain check agrees.
	if id, err := ledger.SSHKeyFingerprint(AuthorizedKey(pub)); err != nil || id != RunnerKeyID(pub) || id != ssh.FingerprintSHA256(sshPub) {
		t.Errorf("fingerprints: %s %v, %s", id, err, RunnerKeyID(pub))
	}
}

func testEvidenceJSON(commit string) []byte {
	return []byte(`{"lane":"qmv-bias-sum/v1","subject":{"repository":"mlx","commit":"` + commit + `","tree":"` + strings.Repeat("0", 40) + `"},` +
		`"backend":"metal","cases_exact":216,"cases_total":216,"control":"caught","status":"passed",` +
		`"started_at":"2026-11-29T10:00:00Z","finished_at":"2026-11-29T10:00:05Z"}`)
}

func registry(name string, pub ed25519.PublicKey, revoked bool) auth.RunnerRegistry {
	return auth.RunnerRegistry{Runners: []auth.RunnerState{{Name: name, KeyID: RunnerKeyID(pub), PublicKey: AuthorizedKey(pub), Entry: strings.Repeat("ab", 16), Index: 3, Revoked: revoked, RevokedIndex: 9}}}
}

// TestEvidenceEnvelope: a signed record verifies and comes back with its
// signer, which the store's validation accepts; every corrupted variant
// (each byte of the signature flipped, payload edited, payload type
// changed, wrong key, revoked key, no keys) is refused with its sentinel
// and a field, and a record whose signer does not match its envelope is
// refused by the store's validation.
func TestEvidenceEnvelope(t *testing.T) {
	ctx := context.Background()
	pub, priv := testRunnerKey(t)
	ev := testEvidenceJSON(strings.Repeat("1", 40))
	env, err := SignEvidence(ctx, priv, ev)
	if err != nil {
		t.Fatal(err)
	}
	reg := registry("ci-mac", pub, false)
	body, err := VerifyEvidenceEnvelope(ctx, env, reg)
	if err != nil {
		t.Fatal(err)
	}
	e, canon, err := ledger.PrepareEvidence(body)
	if err != nil || e.Signer == nil || e.Signer.Runner != "ci-mac" || e.Signer.KeyEntry != reg.Runners[0].Entry {
		t.Fatalf("signed record: %+v %v", e.Signer, err)
	}
	if err := ReverifySigned(ctx, ledger.EvidenceEntry{Entry: ledger.Entry{ID: "x", Index: 5, Body: canon}, Evidence: e}, reg); err != nil {
		t.Fatalf("reverify: %v", err)
	}
	if err := ReverifySigned(ctx, ledger.EvidenceEntry{Entry: ledger.Entry{ID: "x", Index: 2, Body: canon}, Evidence: e}, auth.RunnerRegistry{}); err == nil {
		t.Fatal("reverify against a registry without the key passed")
	}

	var parsed ledger.Envelope
	json.Unmarshal(env, &parsed)
	mutate := func(f func(*ledger.Envelope)) []byte {
		c := parsed
		c.Signatures = append([]ledger.EnvelopeSignature(nil), parsed.Signatures...)
		f(&c)
		b, _ := json.Marshal(c)
		return b
	}
	sig, _ := base64.StdEncoding.DecodeString(parsed.Signatures[0].Sig)
	for i := range sig {
		for _, bit := range []byte{1, 0x80} {
			s := append([]byte(nil), sig...)
			s[i] ^= bit
			b := mutate(func(e *ledger.Envelope) { e.Signatures[0].Sig = base64.StdEncoding.EncodeToString(s) })
			if _, err := VerifyEvidenceEnvelope(ctx, b, reg); !errors.Is(err, ErrEnvelopeSignature) {
				t.Fatalf("signature byte %d bit %x flipped: %v", i, bit, err)
			}
		}
	}
	other, otherPriv := testRunnerKey(t)
	otherEnv, _ := SignEvidence(ctx, otherPriv, ev)
	edited := mutate(func(e *ledger.Envelope) {
		e.Payload = base64.StdEncoding.EncodeToString(testEvidenceJSON(strings.Repeat("2", 40)))
	})
	noKeyID := mutate(func(e *ledger.Envelope) {
		e.Payload = base64.StdEncoding.EncodeToString(testEvidenceJSON(strings.Repeat("2", 40)))
		e.Signatures[0].KeyID = ""
	})
	for name, c := range map[string]struct {
		env      []byte
		reg      auth.RunnerRegistry
		sentinel error
		field    string
	}{
		"payload edited":           {edited, reg, ErrEnvelopeSignature, "signatures[0]"},
		"payload edited, no keyid": {noKeyID, reg, ErrUnknownRunnerKey, "signatures"},
		"other key":                {otherEnv, reg, ErrUnknownRunnerKey, "signatures"},
		"revoked key":              {env, registry("ci-mac", pub, true), ErrRevokedRunnerKey, "signatures[0]"},
		"no keys":                  {env, auth.RunnerRegistry{}, ErrUnknownRunnerKey, "signatures"},
		"other key registered":     {env, registry("x", other, false), ErrUnknownRunnerKey, "signatures"},
	} {
		_, err := VerifyEvidenceEnvelope(ctx, c.env, c.reg)
		var le *ledger.Error
		if !errors.Is(err, c.sentinel) || !errors.As(err, &le) || le.Field != c.field {
			t.Errorf("%s: %v; want %v naming %s", name, err, c.sentinel, c.field)
		}
	}
	retyped := mutate(func(e *ledger.Envelope) { e.PayloadType = "application/vnd.in-toto+json" })
	if _, err := VerifyEvidenceEnvelope(ctx, retyped, reg); err == nil || !strings.Contains(err.Error(), "payloadType") {
		t.Errorf("payload type changed: %v", err)
	}

	// The store refuses a signer whose envelope is not the record.
	var rec map[string]json.RawMessage
	json.Unmarshal(body, &rec)
	rec["cases_exact"], rec["status"] = json.RawMessage("215"), json.RawMessage(`"failed"`)
	forged, _ := json.Marshal(rec)
	if _, _, err := ledger.PrepareEvidence(forged); err == nil || !strings.Contains(err.Error(), "signer.envelope") {
		t.Errorf("record edited under its envelope: %v", err)
	}
}

// TestRunnerRegistryFold: adds and revocations fold in log order; an add
// of a live name or a known key and a revoke of another key are ignored.
func TestRunnerRegistryFold(t *testing.T) {
	a, _ := testRunnerKey(t)
	b, _ := testRunnerKey(t)
	at := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	k := func(action, name string, pub ed25519.PublicKey, reason string) ledger.RunnerKey {
		r := ledger.RunnerKey{Action: action, Name: name, KeyID: RunnerKeyID(pub), By: "admin", At: at, Reason: reason}
		if action == ledger.RunnerAdd {
			r.PublicKey = AuthorizedKey(pub)
		}
		return r
	}
	var reg auth.RunnerRegistry
	var log memQueries
	steps := []struct {
		k       ledger.RunnerKey
		applies bool
	}{
		{k(ledger.RunnerAdd, "mac", a, ""), true},
		{k(ledger.RunnerAdd, "mac", b, ""), false},     // live name
		{k(ledger.RunnerAdd, "linux", a, ""), false},   // known key
		{k(ledger.RunnerRevoke, "mac", b, "x"), false}, // not its key
		{k(ledger.RunnerRevoke, "mac", a, "lost"), true},
		{k(ledger.RunnerAdd, "mac", a, ""), false}, // revoked key
		{k(ledger.RunnerAdd, "mac", b, ""), true},
	}
	for i, s := range steps {
		if err := s.k.Validate(); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if got := reg.Check(s.k) == nil; got != s.applies {
			t.Fatalf("step %d: applies %v, want %v", i, got, s.applies)
		}
		// Every step is appended; the fold ignores those that do not apply.
		body, err := ledger.CanonicalBody(&s.k)
		if err != nil {
			t.Fatal(err)
		}
		log = append(log, ledger.Entry{ID: ledger.EntryID(ledger.KindRunnerKey, body), Index: uint64(i), Kind: ledger.KindRunnerKey, Body: body})
		if reg, err = auth.LoadRunnerKeys(context.Background(), log, 0); err != nil {
			t.Fatal(err)
		}
	}
	if len(reg.Runners) != 2 || !reg.Runners[0].Revoked || reg.Runners[0].Reason != "lost" || reg.Runners[1].Revoked {
		t.Fatalf("registry: %+v", reg.Runners)
	}
	if live, ok := reg.Live("mac"); !ok || live.KeyID != RunnerKeyID(b) {
		t.Fatalf("live mac: %+v", live)
	}
	bad := k(ledger.RunnerAdd, "mac", a, "")
	bad.KeyID = RunnerKeyID(b)
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "key_id") {
		t.Errorf("key id of another key: %v", err)
	}
}

// memQueries is an in-memory log of entries, oldest first, answering
// Entries newest first in pages of two (so the fold reads every page).
type memQueries []ledger.Entry

func (m memQueries) Entries(_ context.Context, f ledger.EntryFilter) ([]ledger.Entry, string, error) {
	var out []ledger.Entry
	for i := len(m) - 1; i >= 0; i-- {
		if m[i].Kind == f.Kind {
			out = append(out, m[i])
		}
	}
	start := 0
	if f.Cursor != "" {
		fmt.Sscan(f.Cursor, &start)
	}
	end := min(start+2, len(out))
	next := ""
	if end < len(out) {
		next = fmt.Sprint(end)
	}
	return out[start:end], next, nil
}

func (memQueries) Evidence(context.Context, ledger.EvidenceFilter) ([]ledger.EvidenceEntry, string, error) {
	return nil, "", nil
}

func (memQueries) Heads(context.Context, ledger.HeadFilter) ([]ledger.HeadEntry, string, error) {
	return nil, "", nil
}

// FuzzVerifyEvidenceEnvelope: no input panics, and an input is accepted
// only when its record validates with a signer whose envelope is the
// input's canonical form and names the one registered key.
func FuzzVerifyEvidenceEnvelope(f *testing.F) {
	seed := make([]byte, ed25519.SeedSize)
	priv := ed25519.NewKeyFromSeed(seed)
	pub := priv.Public().(ed25519.PublicKey)
	env, err := SignEvidence(context.Background(), priv, testEvidenceJSON(strings.Repeat("1", 40)))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(env)
	f.Add([]byte(`{"payloadType":"` + ledger.PayloadTypeEvidence + `","payload":"e30=","signatures":[{"sig":"AA=="}]}`))
	f.Add([]byte(`{"payloadType":1}`))
	f.Add([]byte(`[]`))
	reg := registry("ci-mac", pub, false)
	f.Fuzz(func(t *testing.T, data []byte) {
		body, err := VerifyEvidenceEnvelope(context.Background(), data, reg)
		if err != nil {
			return
		}
		e, _, err := ledger.PrepareEvidence(body)
		if err != nil {
			t.Fatalf("accepted envelope gives a record the store refuses: %v", err)
		}
		canon, _ := ledger.CanonicalJSON(data)
		if e.Signer == nil || e.Signer.KeyID != RunnerKeyID(pub) || string(e.Signer.Envelope) != string(canon) {
			t.Fatalf("accepted envelope: signer %+v", e.Signer)
		}
	})
}
