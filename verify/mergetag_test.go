package verify

import (
	"bytes"
	"errors"
	"testing"
)

// withMergetag adds tag as a mergetag header after the committer line,
// continuation lines prefixed by a space (git's commit.c, add_merge_tag).
func withMergetag(commit, tag []byte) []byte {
	i := bytes.Index(commit, []byte("\n\n"))
	var b bytes.Buffer
	b.Write(commit[:i+1])
	b.WriteString("mergetag ")
	b.Write(bytes.ReplaceAll(bytes.TrimSuffix(tag, []byte("\n")), []byte("\n"), []byte("\n ")))
	b.WriteString("\n")
	b.Write(commit[i+1:])
	return b.Bytes()
}

func TestMergetag(t *testing.T) {
	alice, mallory := sshKey(t), sshKey(t)
	as, err := ParseAllowedSigners([]byte("alice " + authorizedLine(alice.PublicKey()) + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	opts := &Options{Now: fixtureT0, AllowedSigners: as}
	tag := signObject("tag", unsignedTag(fixtureT0, "v2.0.0"), sshSigner(t, alice, "git"))
	badTag := bytes.Replace(tag, []byte("release v2.0.0"), []byte("release v6.6.6"), 1)
	otherTag := signObject("tag", unsignedTag(fixtureT0, "v2.0.0"), sshSigner(t, mallory, "git"))
	body := unsignedCommit(fixtureT0, "fixture message: merge tag v2.0.0")
	cases := []struct {
		name string
		tag  []byte
		want error
	}{
		{"good", tag, nil},
		{"tampered", badTag, ErrBadSignature},
		{"unknown signer", otherTag, ErrUnknownKey},
	}
	for _, tc := range cases {
		raw := signObject("commit", withMergetag(body, tc.tag), sshSigner(t, alice, "git"))
		r, err := VerifyObject(raw, "commit", opts)
		if len(r.MergeTags) != 1 {
			t.Fatalf("%s: %d mergetags parsed", tc.name, len(r.MergeTags))
		}
		if r.MergeTags[0].Object != ObjectID("tag", tc.tag) {
			t.Errorf("%s: mergetag id %s, want %s", tc.name, r.MergeTags[0].Object, ObjectID("tag", tc.tag))
		}
		if r.Letter != "G" {
			t.Errorf("%s: commit letter %s, want G (its own signature is good)", tc.name, r.Letter)
		}
		if tc.want == nil && err != nil || tc.want != nil && !errors.Is(err, tc.want) {
			t.Errorf("%s: error %v, want %v", tc.name, err, tc.want)
		}
	}
}
