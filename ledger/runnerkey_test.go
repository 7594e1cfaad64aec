package ledger

import (
	"encoding/base64"
	"errors"
	"strings"
	"testing"
	"time"
)

// TestEvidenceShape: envelopes and server-only members are found at the
// top level only.
func TestEvidenceShape(t *testing.T) {
	for _, c := range []struct {
		in             string
		env, hasSigner bool
	}{
		{`{"lane":"x/v1"}`, false, false},
		{`{"payloadType":"t","payload":"","signatures":[]}`, true, false},
		{`{"lane":"x/v1","signer":{}}`, false, true},
		{`{"lane":"x/v1","details":{"payloadType":"t","signer":1}}`, false, false},
		{`{"payloadType":`, false, false},
		{`["payloadType"]`, false, false},
	} {
		env, s := EvidenceShape([]byte(c.in))
		if env != c.env || s != c.hasSigner {
			t.Errorf("%s: envelope %v signer %v; want %v %v", c.in, env, s, c.env, c.hasSigner)
		}
	}
}

// TestRunnerKeyValidate: each bad field of a runner-key record is named.
func TestRunnerKeyValidate(t *testing.T) {
	const pub = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIDtqJ7zOtqQtYqOo0CpvDXNlMhV3HeJDpjrASKGLWdop"
	id, err := SSHKeyFingerprint(pub)
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	good := RunnerKey{Action: RunnerAdd, Name: "ci-mac", KeyID: id, PublicKey: pub, By: "admin", At: at}
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	for field, mut := range map[string]func(*RunnerKey){
		"name":       func(k *RunnerKey) { k.Name = "CI Mac" },
		"key_id":     func(k *RunnerKey) { k.KeyID = "SHA256:" + strings.Repeat("A", 43) },
		"public_key": func(k *RunnerKey) { k.PublicKey = pub + " comment" },
		"action":     func(k *RunnerKey) { k.Action = "rotate" },
		"reason":     func(k *RunnerKey) { k.Reason = "why" },
		"by":         func(k *RunnerKey) { k.By = "" },
		"at":         func(k *RunnerKey) { k.At = time.Time{} },
	} {
		k := good
		mut(&k)
		err := k.Validate()
		if e, ok := err.(*Error); !ok || e.Field != field {
			t.Errorf("%s: %v; want an error naming it", field, err)
		}
	}
	rev := RunnerKey{Action: RunnerRevoke, Name: "ci-mac", KeyID: id, By: "admin", At: at}
	if err := rev.Validate(); err == nil || !strings.Contains(err.Error(), "reason") {
		t.Errorf("revoke without reason: %v", err)
	}
	rev.Reason, rev.PublicKey = "lost", pub
	if err := rev.Validate(); err == nil || !strings.Contains(err.Error(), "public_key") {
		t.Errorf("revoke with a key: %v", err)
	}
	if _, _, err := PrepareRunnerKey([]byte(`{"action":"add","extra":1}`)); err == nil || !strings.Contains(err.Error(), "extra") {
		t.Errorf("unknown member: %v", err)
	}
}

// TestInTotoSignerBinds: a record whose signer keeps an in-toto envelope
// must be about exactly the Statement's subjects: another commit, another
// tree, another digest of a named artifact, or an artifact the Statement
// does not name is refused naming the member; the matching record passes.
// (The signature itself is checked by package verify and by the gates.)
func TestInTotoSignerBinds(t *testing.T) {
	commit, tree, art := strings.Repeat("1", 40), strings.Repeat("2", 40), "sha256:"+strings.Repeat("3", 64)
	stmt := `{"_type":"https://in-toto.io/Statement/v1","subject":[{"name":"repo","digest":{"gitCommit":"` + commit + `","gitTree":"` + tree +
		`"}},{"name":"lib.so","digest":{"sha256":"` + strings.Repeat("3", 64) + `"}}],"predicateType":"p","predicate":{}}`
	env := `{"payloadType":"` + PayloadTypeInToto + `","payload":"` + base64.StdEncoding.EncodeToString([]byte(stmt)) + `","signatures":[{"keyid":"k","sig":"AAAA"}]}`
	at := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	mk := func(f func(e *Evidence)) Evidence {
		e := Evidence{Lane: "ci/v1", Subject: Subject{Repository: "repo", Commit: commit, Tree: tree, Artifacts: map[string]string{"lib.so": art}},
			Backend: BackendCPU, CasesExact: 1, CasesTotal: 1, Control: ControlNone, Status: StatusPassed, StartedAt: at, FinishedAt: at,
			Signer: &Signer{Runner: "ci-mac", KeyID: "SHA256:" + strings.Repeat("A", 43), KeyEntry: strings.Repeat("a", 32), Envelope: []byte(env)}}
		f(&e)
		return e
	}
	if err := func() error { e := mk(func(*Evidence) {}); return e.Validate() }(); err != nil {
		t.Fatalf("matching record: %v", err)
	}
	for _, c := range []struct {
		name, field string
		f           func(e *Evidence)
	}{
		{"other commit", "signer.envelope.payload.subject[0]", func(e *Evidence) { e.Subject.Commit = strings.Repeat("4", 40) }},
		{"other tree", "signer.envelope.payload.subject[0]", func(e *Evidence) { e.Subject.Tree = strings.Repeat("4", 40) }},
		{"other digest", "signer.envelope.payload.subject[1]", func(e *Evidence) { e.Subject.Artifacts["lib.so"] = "sha256:" + strings.Repeat("4", 64) }},
		{"unnamed artifact", "subject.artifacts", func(e *Evidence) { e.Subject.Artifacts["extra.so"] = art }},
	} {
		e := mk(c.f)
		err := e.Validate()
		var le *Error
		if !errors.As(err, &le) || le.Field != c.field {
			t.Errorf("%s: err = %v, want the field %s named", c.name, err, c.field)
		}
	}
}
