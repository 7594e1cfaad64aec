package tlog

import (
	"github.com/evidence-ledger/ledger/ledger"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestSignedStateJournal: recorded sizes read back in order, a smaller
// or equal size is not written again, a torn last line is dropped on
// open, a malformed complete line is an error naming its line, and
// ReadSignedState starts at the last restore line.
func TestSignedStateJournal(t *testing.T) {
	path := filepath.Join(t.TempDir(), SignedStateFile)
	s, err := OpenSignedState(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := s.Last(); ok {
		t.Fatal("a new journal has a last entry")
	}
	for _, n := range []uint64{1, 3, 3, 2, 5} {
		if err := s.Record(ledger.Checkpoint{Size: n, Root: ledger.Hash{byte(n)}}); err != nil {
			t.Fatal(err)
		}
	}
	ents, err := ReadSignedState(path)
	if err != nil || len(ents) != 3 || ents[2].Size != 5 || ents[2].Root != (ledger.Hash{5}) {
		t.Fatalf("entries %+v %v", ents, err)
	}
	if st, _ := os.Stat(path); st.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v", st.Mode().Perm())
	}
	// A crash in the middle of a line.
	f, _ := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	f.WriteString("signed 6 0000")
	f.Close()
	s, err = OpenSignedState(path)
	if err != nil {
		t.Fatal(err)
	}
	if last, _ := s.Last(); last.Size != 5 {
		t.Fatalf("last after a torn line: %+v", last)
	}
	if b, _ := os.ReadFile(path); strings.Contains(string(b), "signed 6") {
		t.Fatal("the torn line was kept")
	}
	if err := s.RecordRestore(SignedEntry{Size: 5, Root: ledger.Hash{5}}, ledger.Checkpoint{Size: 2, Root: ledger.Hash{2}}, time.Unix(1700000000, 0)); err != nil {
		t.Fatal(err)
	}
	s.Record(ledger.Checkpoint{Size: 3, Root: ledger.Hash{9}})
	ents, err = ReadSignedState(path)
	if err != nil || len(ents) != 2 || !ents[0].Restore || ents[0].FromSize != 5 || ents[0].Size != 2 || ents[1].Size != 3 || ents[1].Root != (ledger.Hash{9}) {
		t.Fatalf("after a restore: %+v %v", ents, err)
	}
	os.WriteFile(path, []byte("signed 1 "+ledger.Hash{1}.String()+"\nsigned x y\n"), 0o600)
	if _, err := OpenSignedState(path); err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Fatalf("malformed line: %v", err)
	}
}
