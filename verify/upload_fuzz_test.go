package verify

import (
	"testing"
)

// FuzzTreeObjects feeds arbitrary bytes as the head's root tree (with its
// true id, so that they reach the tree parser) and as a commit: the walk
// must return a report or an error, never panic or loop.
func FuzzTreeObjects(f *testing.F) {
	f.Add([]byte("100644 a\x00"+string(make([]byte, 20))), []byte("tree "+fixtureTree+"\nauthor A <a> 1 +0000\ncommitter A <a> 1 +0000\n\nm\n"))
	f.Add([]byte("40000 d\x00"+string(make([]byte, 20))+"100644 d\x00"+string(make([]byte, 20))), []byte("x"))
	f.Add([]byte("160000 sub\x00"+string(make([]byte, 20))+"120000 ln\x00"+string(make([]byte, 19))), []byte{})
	f.Fuzz(func(t *testing.T, tree, commit []byte) {
		treeID, _ := HashObject(FormatSHA1, "tree", tree)
		head := []byte("tree " + treeID + "\nauthor A <a> 1 +0000\ncommitter A <a> 1 +0000\n\nhead\n")
		headID, _ := HashObject(FormatSHA1, "commit", head)
		revID, _ := HashObject(FormatSHA1, "commit", commit)
		objs := []RawObject{{"commit", headID, head}, {"tree", treeID, tree}, {"commit", revID, commit}}
		rep, _, err := TreeEquivalenceObjects(TreeUpload{Head: headID, Reviewed: revID, Objects: objs, Pins: []string{"a"}})
		if err == nil && rep.Head != headID {
			t.Fatalf("report names head %s", rep.Head)
		}
		_, _ = VerifyUploadedHead(HeadUpload{Repository: "r", Ref: "refs/heads/main", Objects: []RawObject{{"commit", revID, commit}}})
	})
}
