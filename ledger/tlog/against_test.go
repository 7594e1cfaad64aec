package tlog_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/evidence-ledger/ledger/ledger/tlog"
	"github.com/evidence-ledger/ledger/witness/witnesstest"
)

func memLog(t *testing.T, name string, n int) *witnesstest.MemLog {
	t.Helper()
	l, err := witnesstest.NewMemLog(name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.AppendN("main", n); err != nil {
		t.Fatal(err)
	}
	return l
}

// saveAt returns the log's checkpoint of size size as a client saved it.
func saveAt(t *testing.T, l *witnesstest.MemLog, size uint64, src string) tlog.SavedCheckpoint {
	t.Helper()
	cp, err := l.CheckpointAt(context.Background(), size)
	if err != nil {
		t.Fatal(err)
	}
	return tlog.SavedCheckpoint{Source: src, Note: []byte(cp.Note)}
}

func TestAuditAgainst(t *testing.T) {
	ctx := context.Background()
	// The history clients saw: checkpoints at 3, 7 and 12.
	l := memLog(t, "ledger.test.against", 3)
	l.AppendN("main", 4)
	l.AppendN("main", 5)
	s3, s7, s12 := saveAt(t, l, 3, "c3"), saveAt(t, l, 7, "c7"), saveAt(t, l, 12, "c12")
	l.AppendN("main", 2) // the log moves on to 14

	fork := func(at uint64, n int) *witnesstest.MemLog {
		f, err := l.Fork(at)
		if err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			f.AppendN("fork", n)
		}
		return f
	}
	missing := fork(14, 0)
	missing.DeleteCheckpoint(7)

	cases := []struct {
		name           string
		log            *witnesstest.MemLog
		saved          []tlog.SavedCheckpoint
		want           []tlog.AgainstStatus
		consistentUpTo uint64
		partsBy        uint64
	}{
		{"extends all", l, []tlog.SavedCheckpoint{s3, s7, s12}, []tlog.AgainstStatus{"ok", "ok", "ok"}, 12, 0},
		{"rollback to 5", fork(5, 0), []tlog.SavedCheckpoint{s3, s7, s12}, []tlog.AgainstStatus{"ok", "rollback", "rollback"}, 3, 7},
		// Restored at 5 and appended past every saved size: a fork.
		{"restore then append", fork(5, 20), []tlog.SavedCheckpoint{s12, s3, s7}, []tlog.AgainstStatus{"fork", "ok", "fork"}, 3, 7},
		{"fork at 10", fork(10, 4), []tlog.SavedCheckpoint{s3, s7, s12}, []tlog.AgainstStatus{"ok", "ok", "fork"}, 7, 12},
		{"fork at the saved size", fork(11, 1), []tlog.SavedCheckpoint{s12}, []tlog.AgainstStatus{"fork"}, 0, 12},
		{"deleted checkpoint row", missing, []tlog.SavedCheckpoint{s3, s7, s12}, []tlog.AgainstStatus{"ok", "missing_checkpoint", "ok"}, 12, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rep, err := tlog.AuditAgainst(ctx, c.log, l.VerifierKey(), c.saved)
			if err != nil {
				t.Fatal(err)
			}
			wantOK := true
			for i, w := range c.want {
				if rep.Results[i].Status != w {
					t.Errorf("%s: %s (%s), want %s", rep.Results[i].Source, rep.Results[i].Status, rep.Results[i].Problem, w)
				}
				if w != tlog.AgainstOK {
					wantOK = false
					if rep.Results[i].Problem == "" {
						t.Errorf("%s: no problem text", rep.Results[i].Source)
					}
				}
			}
			if rep.OK != wantOK || rep.ConsistentUpTo != c.consistentUpTo || rep.PartsBy != c.partsBy {
				t.Errorf("report ok %v consistent up to %d parts by %d, want %v %d %d", rep.OK, rep.ConsistentUpTo, rep.PartsBy, wantOK, c.consistentUpTo, c.partsBy)
			}
		})
	}
}

func TestAuditAgainstKeys(t *testing.T) {
	ctx := context.Background()
	l := memLog(t, "ledger.test.keys", 6)
	s6 := saveAt(t, l, 6, "c6")
	other := memLog(t, "ledger.test.keys", 6) // same name, another key
	otherName := memLog(t, "ledger.test.elsewhere", 6)

	// The user's key is not the log's: every checkpoint says so.
	rep, err := tlog.AuditAgainst(ctx, l, other.VerifierKey(), []tlog.SavedCheckpoint{s6})
	if err != nil {
		t.Fatal(err)
	}
	if rep.OK || rep.Results[0].Status != tlog.AgainstKeyMismatch || !strings.Contains(rep.Problem, "latest checkpoint") {
		t.Fatalf("wrong key: %+v", rep)
	}
	rep, _ = tlog.AuditAgainst(ctx, l, otherName.VerifierKey(), []tlog.SavedCheckpoint{s6})
	if rep.OK || rep.Results[0].Status != tlog.AgainstKeyMismatch {
		t.Fatalf("key of another name: %+v", rep)
	}
	// A replaced log key: the log now signs with another key of the same
	// name; clients' saved checkpoints still verify with the old key, the
	// log's latest does not.
	replaced, _ := witnesstest.NewMemLogWithKey(other.SignerKey())
	replaced.AppendN("main", 6)
	rep, _ = tlog.AuditAgainst(ctx, replaced, l.VerifierKey(), []tlog.SavedCheckpoint{s6})
	if rep.OK || rep.Problem == "" {
		t.Fatalf("replaced key: %+v", rep)
	}

	// Edited, malformed and foreign saved checkpoints.
	edited := bytes.Replace(s6.Note, []byte("\n6\n"), []byte("\n5\n"), 1)
	for name, c := range map[string]struct {
		b    []byte
		want tlog.AgainstStatus
	}{
		"edited size":    {edited, tlog.AgainstBadSignature},
		"not a note":     {[]byte("hello"), tlog.AgainstMalformed},
		"other log":      {saveAt(t, otherName, 6, "x").Note, tlog.AgainstKeyMismatch},
		"same name, key": {saveAt(t, other, 6, "x").Note, tlog.AgainstKeyMismatch},
	} {
		rep, _ := tlog.AuditAgainst(ctx, l, l.VerifierKey(), []tlog.SavedCheckpoint{{Source: name, Note: c.b}})
		r := rep.Results[0]
		if rep.OK || r.Status != c.want {
			t.Errorf("%s: %s (%s), want %s", name, r.Status, r.Problem, c.want)
		}
		if strings.Contains(r.Problem, string(c.b)) || (len(c.b) > 20 && strings.Contains(r.Problem, string(c.b[:20]))) {
			t.Errorf("%s: problem echoes the file: %s", name, r.Problem)
		}
	}
	if _, err := tlog.AuditAgainst(ctx, l, "not a key", nil); err == nil {
		t.Fatal("malformed verifier key accepted")
	}
}

func TestParseSavedCheckpoint(t *testing.T) {
	l := memLog(t, "ledger.test.parse", 2)
	cp, _ := l.Checkpoint(context.Background())
	js, _ := json.Marshal(cp)
	proof := "c2sp.org/tlog-proof@v1\nindex 0\nAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\n\n" + cp.Note
	for name, b := range map[string][]byte{"note": []byte(cp.Note), "json": js, "tlog-proof": []byte(proof)} {
		got, err := tlog.ParseSavedCheckpoint(b)
		if err != nil || string(got) != cp.Note {
			t.Errorf("%s: %q, %v", name, got, err)
		}
	}
	for _, bad := range []string{"", "{}", `{"note":1}`, "c2sp.org/tlog-proof@v1\nindex 0\n", "one line"} {
		if _, err := tlog.ParseSavedCheckpoint([]byte(bad)); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
