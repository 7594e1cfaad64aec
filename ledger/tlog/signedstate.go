package tlog

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
	"golang.org/x/mod/sumdb/note"
)

// SignedStateFile is the name of the signed-state journal in the key
// directory, beside ledger.key.
const SignedStateFile = "signed-state"

// SignedEntry is one line of the signed-state journal: a checkpoint this
// log signed (Restore false), or a restore the operator accepted with
// `ledger restore --accept-rollback` (Restore true: the journal's history
// before it was given up at FromSize/FromRoot for the database's
// Size/Root), or a key rotation (Key set: the log's key from checkpoint
// size Size on is the verifier key Key).
type SignedEntry struct {
	Key      string
	Size     uint64
	Root     ledger.Hash
	Restore  bool
	FromSize uint64
	FromRoot ledger.Hash
	At       time.Time
}

// SignedState is the signed-state journal: the size and root of every
// checkpoint the log signed, one line each ("signed SIZE ROOTHEX"),
// appended after the checkpoint's batch commits and before the checkpoint
// is answered or served, kept outside the database so that a restored or
// rolled-back database cannot carry it back. A restore the operator
// accepted is a line "restore FROMSIZE FROMROOT SIZE ROOT UNIX"; only the
// lines after the last restore line bind the database. A key rotation
// (`ledger key rotate`) is a line "key SIZE VKEY": the verifier key VKEY
// signs the checkpoints of size SIZE and more.
//
// One journal serves every process that signs for the log: the servers
// of a log on one PostgreSQL database share it (one data directory, on
// shared storage across hosts), and so do `--db` commands beside a
// server. Writers hold an exclusive flock(2) on the file PATH.lock beside
// it while they append (the file opened, written, fsynced and closed per
// line), readers a shared one; Refresh reads the lines other processes
// appended, so Last is the newest checkpoint any of them signed. Safe for
// concurrent use.
type SignedState struct {
	path    string
	mu      sync.Mutex
	last    SignedEntry
	any     bool
	lastKey SignedEntry
	anyKey  bool
	off     int64    // bytes of complete lines read
	lines   int      // complete lines read
	lockf   *os.File // PATH.lock, opened on first use; nil where it cannot be
}

// OpenSignedState opens (creating, mode 0600) the journal at path. A last
// line cut short by a crash (no newline) is dropped; a malformed complete
// line is an error naming its line number.
func OpenSignedState(path string) (*SignedState, error) {
	s := &SignedState{path: path}
	s.mu.Lock()
	defer s.mu.Unlock()
	unlock := s.flock(true)
	defer unlock()
	if err := s.refreshLocked(); err != nil {
		return nil, err
	}
	if st, err := os.Stat(path); err == nil && st.Size() != s.off {
		if err := os.Truncate(path, s.off); err != nil {
			return nil, fmt.Errorf("signed state: drop a torn last line: %w", err)
		}
	}
	return s, nil
}

// flock takes the journal's lock (exclusive for a writer) and returns its
// release. Where PATH.lock cannot be opened (a read-only directory) the
// journal is read unlocked.
func (s *SignedState) flock(exclusive bool) (unlock func()) {
	if s.lockf == nil {
		f, err := os.OpenFile(s.path+".lock", os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			return func() {}
		}
		s.lockf = f
	}
	if flockFile(s.lockf, exclusive) != nil {
		return func() {}
	}
	return func() { funlockFile(s.lockf) }
}

// Refresh reads the lines other processes appended to the journal since
// it was last read (under the shared lock), so that Last and LastKey
// answer the newest. A journal cut shorter than what was read (replaced
// or truncated) is read again from its start.
func (s *SignedState) Refresh() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	unlock := s.flock(false)
	defer unlock()
	return s.refreshLocked()
}

// refreshLocked reads the complete lines after s.off; s.mu and a flock
// are held.
func (s *SignedState) refreshLocked() error {
	f, err := os.Open(s.path)
	if errors.Is(err, fs.ErrNotExist) {
		if s.off > 0 {
			return fmt.Errorf("signed state %s: the journal was removed under the running process", s.path)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("signed state: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("signed state: %w", err)
	}
	if st.Size() < s.off {
		s.off, s.lines, s.any, s.anyKey = 0, 0, false, false
		s.last, s.lastKey = SignedEntry{}, SignedEntry{}
	}
	if st.Size() == s.off {
		return nil
	}
	b := make([]byte, st.Size()-s.off)
	if _, err := f.ReadAt(b, s.off); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("signed state: %w", err)
	}
	ents, good, err := parseSignedLines(b, s.lines, filepath.Base(s.path))
	if err != nil {
		return err
	}
	for _, e := range ents {
		if e.Key != "" {
			s.lastKey, s.anyKey = e, true
		} else {
			s.last, s.any = e, true
		}
	}
	s.off += good
	s.lines += len(ents)
	return nil
}

// ReadSignedState returns the journal's entries after its last restore
// line (that line included, first), ignoring a torn last line. A missing
// file is an error wrapping fs.ErrNotExist.
func ReadSignedState(path string) ([]SignedEntry, error) {
	ents, _, err := readSignedState(path)
	if err != nil {
		return nil, err
	}
	for i := len(ents) - 1; i >= 0; i-- {
		if ents[i].Restore {
			return ents[i:], nil
		}
	}
	return ents, nil
}

// readSignedState parses the file; good is the length of its complete lines.
func readSignedState(path string) (ents []SignedEntry, good int64, err error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, 0, fmt.Errorf("signed state: %w", err)
	}
	return parseSignedLines(b, 0, filepath.Base(path))
}

// parseSignedLines parses the complete lines of b, the journal name's
// bytes after its first `before` lines; good is their length.
func parseSignedLines(b []byte, before int, name string) (ents []SignedEntry, good int64, err error) {
	if i := bytes.LastIndexByte(b, '\n'); i >= 0 {
		b = b[:i+1]
	} else {
		b = nil
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<20)
	for n := before + 1; sc.Scan(); n++ {
		e, err := parseSignedLine(sc.Text())
		if err != nil {
			return nil, 0, fmt.Errorf("signed state %s line %d: %w", name, n, err)
		}
		ents = append(ents, e)
	}
	return ents, int64(len(b)), nil
}

func parseSignedLine(line string) (SignedEntry, error) {
	f := strings.Fields(line)
	var e SignedEntry
	var err error
	switch {
	case len(f) == 3 && f[0] == "key":
		if e.Size, err = strconv.ParseUint(f[1], 10, 64); err != nil {
			return e, errors.New("bad size")
		}
		e.Key = f[2]
		if _, err := note.NewVerifier(e.Key); err != nil {
			return e, errors.New("bad key")
		}
	case len(f) == 3 && f[0] == "signed":
		if e.Size, err = strconv.ParseUint(f[1], 10, 64); err != nil {
			return e, errors.New("bad size")
		}
		if err = decodeHashHex(&e.Root, f[2]); err != nil {
			return e, err
		}
	case len(f) == 6 && f[0] == "restore":
		e.Restore = true
		if e.FromSize, err = strconv.ParseUint(f[1], 10, 64); err != nil {
			return e, errors.New("bad from size")
		}
		if err = decodeHashHex(&e.FromRoot, f[2]); err != nil {
			return e, err
		}
		if e.Size, err = strconv.ParseUint(f[3], 10, 64); err != nil {
			return e, errors.New("bad size")
		}
		if err = decodeHashHex(&e.Root, f[4]); err != nil {
			return e, err
		}
		sec, err := strconv.ParseInt(f[5], 10, 64)
		if err != nil {
			return e, errors.New("bad time")
		}
		e.At = time.Unix(sec, 0).UTC()
	default:
		return e, errors.New("not a signed, restore or key line")
	}
	return e, nil
}

func decodeHashHex(h *ledger.Hash, s string) error {
	if len(s) != 64 {
		return errors.New("bad root")
	}
	if _, err := hex.Decode(h[:], []byte(s)); err != nil {
		return errors.New("bad root")
	}
	return nil
}

// LastKey returns the journal's last key line (ok false when it has none).
func (s *SignedState) LastKey() (e SignedEntry, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastKey, s.anyKey
}

// RecordKey appends a key line (the verifier key vkey signs the
// checkpoints of size from and more) and fsyncs the journal. The same
// key recorded last again is not written twice.
func (s *SignedState) RecordKey(from uint64, vkey string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := note.NewVerifier(vkey); err != nil || strings.ContainsAny(vkey, " \n\t") {
		return errors.New("signed state: malformed verifier key")
	}
	return s.write(SignedEntry{Key: vkey, Size: from}, fmt.Sprintf("key %d %s\n", from, vkey), func() bool { return s.anyKey && s.lastKey.Key == vkey })
}

// Last returns the journal's last signed or restore entry (ok false when
// it has none), as last read: Refresh first for what other processes
// appended since.
func (s *SignedState) Last() (e SignedEntry, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last, s.any
}

// Path returns the journal's file path.
func (s *SignedState) Path() string { return s.path }

// Record appends cp's size and root and fsyncs the journal. A checkpoint
// not larger than the last recorded one (by any process) is not written
// again.
func (s *SignedState) Record(cp ledger.Checkpoint) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.write(SignedEntry{Size: cp.Size, Root: cp.Root}, fmt.Sprintf("signed %d %s\n", cp.Size, cp.Root), func() bool { return s.any && cp.Size <= s.last.Size })
}

// RecordRestore appends a restore line: the journal's history up to
// from (its last size and root) is given up for the database's size and
// root to.
func (s *SignedState) RecordRestore(from SignedEntry, to ledger.Checkpoint, at time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := SignedEntry{Restore: true, FromSize: from.Size, FromRoot: from.Root, Size: to.Size, Root: to.Root, At: at.UTC().Truncate(time.Second)}
	return s.write(e, fmt.Sprintf("restore %d %s %d %s %d\n", from.Size, from.Root, to.Size, to.Root, at.Unix()), nil)
}

// write appends line (entry e) under the exclusive lock, after reading
// what other processes appended; skip, when it reports true then, writes
// nothing. s.mu is held.
func (s *SignedState) write(e SignedEntry, line string, skip func() bool) error {
	unlock := s.flock(true)
	defer unlock()
	if err := s.refreshLocked(); err != nil {
		return err
	}
	if skip != nil && skip() {
		return nil
	}
	_, statErr := os.Stat(s.path)
	f, err := os.OpenFile(s.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("signed state: %w", err)
	}
	if st, serr := f.Stat(); serr == nil && st.Size() != s.off {
		// A line torn by a writer that died mid-write: the next line
		// would be glued to it.
		f.Truncate(s.off)
	}
	_, err = f.WriteString(line)
	if err == nil {
		err = f.Sync()
	}
	if err != nil {
		// A short write (a full disk) would leave part of the line, and
		// the next line appended would be glued to it: the journal is
		// cut back to the lines it held.
		f.Truncate(s.off)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("signed state: %w", err)
	}
	if errors.Is(statErr, fs.ErrNotExist) {
		// A new file's directory entry is durable only once its directory is synced.
		if d, err := os.Open(filepath.Dir(s.path)); err == nil {
			d.Sync()
			d.Close()
		}
	}
	s.off += int64(len(line))
	s.lines++
	if e.Key != "" {
		s.lastKey, s.anyKey = e, true
	} else {
		s.last, s.any = e, true
	}
	return nil
}

// UseJournal makes every batch of l, before it signs, check the stored log
// against the newest entry of the journal s (read again each time, so
// what any process sharing s signed counts): the stored log must hold at
// least that many leaves and have that root at its size. A restore that
// took the database back below what some server of the log signed is
// refused there even when this process signed less (checkExtends sees
// only its own). Call it before the first append.
func (l *Log) UseJournal(s *SignedState) { l.journal.Store(s) }

// checkJournal is UseJournal's check, under the batch's write lock with
// the stored size read; reload is true when the tree was reloaded from
// the store for this batch. A failure puts the log in the tampered state
// (as checkExtends does) and is ledger.CodeUnavailable naming both sizes.
func (l *Log) checkJournal(ctx context.Context, b Batch, stored uint64, reload bool) error {
	s := l.journal.Load()
	if s == nil {
		return nil
	}
	if err := s.Refresh(); err != nil {
		return internal("read the signed-state journal", err)
	}
	last, ok := s.Last()
	if !ok || last.Size == 0 || (!reload && last == l.journalSeen) {
		// The stored log is the one this process found extending this
		// entry at its last batch.
		return nil
	}
	problem := ""
	switch {
	case stored < last.Size:
		problem = fmt.Sprintf("holds %d leaves, fewer than the size %d the log signed (in %s)", stored, last.Size, s.Path())
	case last.Size == l.tree.size():
		if l.tree.root() != last.Root {
			problem = fmt.Sprintf("has another root at size %d than the log signed (in %s)", last.Size, s.Path())
		}
	default:
		root, err := RootAt(ctx, b, last.Size)
		if err != nil {
			return internal("check the stored log against the signed-state journal", err)
		}
		if root != last.Root {
			problem = fmt.Sprintf("has another root at size %d than the log signed (in %s)", last.Size, s.Path())
		}
	}
	if problem != "" {
		l.opts.Logger.Error("tampering: the database is behind what the log signed; refusing to sign", "stored", stored, "signed", last.Size, "journal", s.Path())
		l.tamper.CompareAndSwap(nil, &TamperState{Index: last.Size - 1, Problem: "the stored log " + problem + " (the database was restored or rolled back under the running server)", Since: l.opts.Now().UTC()})
		return &ledger.Error{Code: ledger.CodeUnavailable, Message: fmt.Sprintf("refusing to sign: the stored log %s: the database was restored or rolled back, and signing over it would fork the log under the same key; restore the newest copy, or accept this one with `ledger restore --accept-rollback` after stopping the servers", problem)}
	}
	l.journalSeen = last
	return nil
}
