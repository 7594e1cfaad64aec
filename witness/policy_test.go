package witness_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"testing"

	"filippo.io/torchwood"
	"golang.org/x/mod/sumdb/note"

	"github.com/evidence-ledger/ledger/witness"
)

type testWitness struct {
	name   string
	vkey   string
	signer note.Signer
}

func newTestWitness(t *testing.T, name string) testWitness {
	t.Helper()
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	s, err := torchwood.NewCosignatureSigner(name, priv)
	if err != nil {
		t.Fatal(err)
	}
	return testWitness{name: name, vkey: s.Verifier().String(), signer: s}
}

func TestParsePolicyExample(t *testing.T) {
	_, logVKey, _ := note.GenerateKey(rand.Reader, "example.com/log")
	var ws []testWitness
	var b strings.Builder
	fmt.Fprintf(&b, "# comment\n  \nlog %s https://log.example\n", logVKey)
	for _, n := range []string{"X1", "X2", "X3", "Y1", "Y2", "Y3"} {
		w := newTestWitness(t, "w.example/"+n)
		ws = append(ws, w)
		fmt.Fprintf(&b, "witness\t%s %s http://127.0.0.1:1/%s\n", n, w.vkey, n)
	}
	b.WriteString("group X 2 X1 X2 X3\ngroup Y any Y1 Y2 Y3\ngroup XY all X Y\n  quorum XY  \n")
	p, err := witness.ParsePolicy([]byte(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Logs) != 1 || len(p.Witnesses) != 6 || p.Quorum != "XY" || p.Witnesses[2].URL != "http://127.0.0.1:1/X3" {
		t.Fatalf("parsed %+v", p)
	}
	for _, c := range []struct {
		cosigners []string
		met       bool
	}{
		{nil, false},
		{[]string{"X1", "X2"}, false},
		{[]string{"X1", "Y1"}, false},
		{[]string{"X1", "X2", "Y3"}, true},
		{[]string{"X1", "X3", "Y1", "Y2", "Y3"}, true},
		{[]string{"Y1", "Y2", "Y3", "X2"}, false},
		{[]string{"X1", "X1", "Y1"}, false}, // one witness counts once
		{[]string{"X", "Y"}, false},         // group names are not cosigners
	} {
		if got := p.Met(c.cosigners); got != c.met {
			t.Errorf("Met(%v) = %v, want %v", c.cosigners, got, c.met)
		}
	}

	// Check over real signed notes: log signature plus cosignatures.
	text := "example.com/log\n3\nCsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n"
	logS, logV := mustLogKey(t, "example.com/log")
	p2, err := witness.ParsePolicy([]byte(fmt.Sprintf("log %s\nwitness A %s\nwitness B %s\nwitness C %s\ngroup two 2 A B C\nquorum two\n", logV, ws[0].vkey, ws[1].vkey, ws[2].vkey)))
	if err != nil {
		t.Fatal(err)
	}
	signed, _ := note.Sign(&note.Note{Text: text}, logS, ws[0].signer, ws[2].signer)
	res, err := p2.Check(signed, nil)
	if err != nil || !res.QuorumMet || strings.Join(res.Cosigners, ",") != "A,C" {
		t.Fatalf("Check 2 of 3: %+v, %v", res, err)
	}
	one, _ := note.Sign(&note.Note{Text: text}, logS, ws[1].signer)
	if res, err := p2.Check(one, nil); !errors.Is(err, witness.ErrQuorum) || res.QuorumMet {
		t.Fatalf("Check 1 of 3: %+v, %v; want ErrQuorum", res, err)
	}
	// Cosignatures without the log's signature are refused.
	noLog, _ := note.Sign(&note.Note{Text: text}, ws[0].signer, ws[1].signer)
	if _, err := p2.Check(noLog, nil); err == nil || errors.Is(err, witness.ErrQuorum) {
		t.Fatalf("Check without log signature: %v", err)
	}
	// Another log key than the policy's is refused.
	otherS, _ := mustLogKey(t, "example.com/log")
	other, _ := note.Sign(&note.Note{Text: text}, otherS, ws[0].signer, ws[1].signer)
	if _, err := p2.Check(other, nil); err == nil {
		t.Fatal("Check accepted a checkpoint signed by another log key")
	}
	// A cosignature from a known witness that does not verify fails whole.
	bad := strings.Replace(string(signed), "— w.example/X3 ", "— w.example/X3 A", 1)
	if _, err := p2.Check([]byte(bad), nil); err == nil {
		t.Fatal("Check accepted a corrupted cosignature")
	}
}

func mustLogKey(t *testing.T, name string) (note.Signer, string) {
	t.Helper()
	skey, vkey, err := note.GenerateKey(rand.Reader, name)
	if err != nil {
		t.Fatal(err)
	}
	s, err := note.NewSigner(skey)
	if err != nil {
		t.Fatal(err)
	}
	return s, vkey
}

func TestParsePolicyErrors(t *testing.T) {
	a, b := newTestWitness(t, "a.example"), newTestWitness(t, "b.example")
	_, logV := mustLogKey(t, "example.com/log")
	wa, wb := "witness A "+a.vkey+"\n", "witness B "+b.vkey+"\n"
	for _, c := range []struct{ name, policy, want string }{
		{"no quorum", wa, "no quorum line"},
		{"two quorums", wa + "quorum A\nquorum A\n", "line 3: second quorum line (first on line 2)"},
		{"undefined quorum", wa + "quorum Z\n", "line 2: quorum is not a witness or group defined above"},
		{"forward reference", wa + "group G any A B\n" + wb + "quorum G\n", "line 2: group member 2 is not"},
		{"duplicate member", wa + "group G 1 A A\nquorum G\n", "line 2: group member 2 is listed twice"},
		{"threshold too big", wa + wb + "group G 3 A B\nquorum G\n", "line 3: group threshold 3 is not between 1 and its 2 members"},
		{"threshold zero", wa + wb + "group G 0 A B\nquorum G\n", "threshold 0"},
		{"threshold not decimal", wa + wb + "group G 01 A B\nquorum G\n", "line 3: group threshold must be"},
		{"group without members", wa + "group G any\nquorum G\n", "line 2: group wants <name>, all|any|<k> and one or more members"},
		{"duplicate name", wa + "witness A " + b.vkey + "\nquorum A\n", "line 2: witness name: already defined on line 1"},
		{"group reuses witness name", wa + "group A any A\nquorum A\n", "line 2: group name: already defined on line 1"},
		{"none as name", "witness none " + a.vkey + "\nquorum none\n", `line 1: witness name: "none" is reserved`},
		{"none as member", wa + "group G any none\nquorum G\n", "line 2: group member 1 is not"},
		{"duplicate witness key", wa + "witness B " + a.vkey + "\nquorum A\n", "line 2: witness key duplicates line 1"},
		{"duplicate log key", "log " + logV + "\nlog " + logV + "\nquorum none\n", "line 2: log key duplicates line 1"},
		{"log key as witness key", "witness A " + logV + "\nquorum A\n", "line 1: witness vkey: cosigner vkey: signature type 0x01"},
		{"witness key as log key", "log " + a.vkey + "\nquorum none\n", "line 1: log vkey"},
		{"bad url", "witness A " + a.vkey + " ftp://x\nquorum A\n", "line 1: witness url: must be an absolute http or https URL"},
		{"extra field", "witness A " + a.vkey + " http://x y\nquorum A\n", "line 1: witness wants"},
		{"unknown keyword", wa + "witnesses B x\nquorum A\n", "line 2: unknown keyword"},
		{"control character", wa + "quorum A\r\n", "control character at byte"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := witness.ParsePolicy([]byte(c.policy))
			if err == nil {
				t.Fatalf("accepted:\n%s", c.policy)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %q, want it to contain %q", err, c.want)
			}
			if strings.Contains(err.Error(), a.vkey) || strings.Contains(err.Error(), logV) {
				t.Fatalf("error echoes file content: %v", err)
			}
		})
	}
	if p, err := witness.ParsePolicy([]byte("quorum none\n")); err != nil || !p.Met(nil) {
		t.Fatalf("quorum none: %v", err)
	}
}

func FuzzParsePolicy(f *testing.F) {
	w := "witness.example+c53c8b5b+BCTQvLDUr7udXnrkcX5vE1VsoK2r7Bfw5QTYD6K5kPNr"
	f.Add([]byte("witness A " + w + " https://w.example\ngroup G any A\nquorum G\n"))
	f.Add([]byte("quorum none\n"))
	f.Add([]byte("# c\n\tlog x+1+2\nwitness none x\ngroup G 0\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := witness.ParsePolicy(b)
		if err != nil {
			return
		}
		names := []string{}
		for _, w := range p.Witnesses {
			names = append(names, w.Name)
		}
		if !p.Met(names) {
			t.Fatalf("every witness cosigning does not meet quorum %s", p.Quorum)
		}
	})
}
