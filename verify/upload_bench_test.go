package verify

import (
	"fmt"
	"testing"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing/filemode"
)

// benchTreeRepo is a repository of 40 directories of 50 files each
// (2,000 files), whose head changes go.sum (a pin) and one file of one
// directory.
func benchTreeRepo(b *testing.B) (dir, head, reviewed string) {
	b.Helper()
	dir = b.TempDir()
	repo, err := git.PlainInit(dir, false)
	if err != nil {
		b.Fatal(err)
	}
	base := map[string]fileSpec{"go.sum": {filemode.Regular, "v1\n"}}
	for d := 0; d < 40; d++ {
		for f := 0; f < 50; f++ {
			base[fmt.Sprintf("pkg%02d/sub/file%02d.go", d, f)] = fileSpec{filemode.Regular, fmt.Sprintf("package p%d // %d\n", d, f)}
		}
	}
	changed := map[string]fileSpec{}
	for k, v := range base {
		changed[k] = v
	}
	changed["go.sum"] = fileSpec{filemode.Regular, "v2\n"}
	changed["pkg07/sub/file03.go"] = fileSpec{filemode.Regular, "package p7 // changed\n"}
	t := &testing.T{} // storeTree and storeCommit take a *testing.T; they fail only on a storage error
	rev := storeCommit(t, repo.Storer, storeTree(t, repo.Storer, base), "reviewed")
	hd := storeCommit(t, repo.Storer, storeTree(t, repo.Storer, changed), "head")
	return dir, hd.String(), rev.String()
}

// BenchmarkTreeLocal and BenchmarkTreeUploaded compare the repository
// walk of `ledger verify tree` with the server's walk of uploaded objects
// (which reads only the differing subtrees); BenchmarkTreeCollect is the
// client's cost of collecting those objects.
func BenchmarkTreeLocal(b *testing.B) {
	dir, head, rev := benchTreeRepo(b)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := TreeEquivalence(dir, head, rev, []string{"go.sum"}); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkTreeUploaded(b *testing.B) {
	dir, head, rev := benchTreeRepo(b)
	u, err := CollectTree(dir, head, rev)
	if err != nil {
		b.Fatal(err)
	}
	u.Pins = []string{"go.sum"}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, _, err := TreeEquivalenceObjects(u); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(u.Objects)), "objects")
}

func BenchmarkTreeCollect(b *testing.B) {
	dir, head, rev := benchTreeRepo(b)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := CollectTree(dir, head, rev); err != nil {
			b.Fatal(err)
		}
	}
}
