package ledger

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

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
	Root     Hash
	Restore  bool
	FromSize uint64
	FromRoot Hash
	At       time.Time
}

// SignedState is the signed-state journal: the size and root of every
// checkpoint the log signed, one line each ("signed SIZE ROOTHEX"),
// appended (the file opened, written, fsynced and closed per line, so several processes may append) after the checkpoint's batch commits and before
// the checkpoint is answered or served, kept outside the database so that
// a restored or rolled-back database cannot carry it back. A restore the
// operator accepted is a line "restore FROMSIZE FROMROOT SIZE ROOT UNIX";
// only the lines after the last restore line bind the database. A key
// rotation (`ledger key rotate`) is a line "key SIZE VKEY": the verifier
// key VKEY signs the checkpoints of size SIZE and more. Safe for
// concurrent use.
type SignedState struct {
	path    string
	mu      sync.Mutex
	last    SignedEntry
	any     bool
	lastKey SignedEntry
	anyKey  bool
}

// OpenSignedState opens (creating, mode 0600) the journal at path. A last
// line cut short by a crash (no newline) is dropped; a malformed complete
// line is an error naming its line number.
func OpenSignedState(path string) (*SignedState, error) {
	ents, good, err := readSignedState(path)
	if errors.Is(err, fs.ErrNotExist) {
		return &SignedState{path: path}, nil
	}
	if err != nil {
		return nil, err
	}
	if st, err := os.Stat(path); err == nil && st.Size() != good {
		if err := os.Truncate(path, good); err != nil {
			return nil, fmt.Errorf("signed state: drop a torn last line: %w", err)
		}
	}
	s := &SignedState{path: path}
	for _, e := range ents {
		if e.Key != "" {
			s.lastKey, s.anyKey = e, true
		} else {
			s.last, s.any = e, true
		}
	}
	return s, nil
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
	if i := bytes.LastIndexByte(b, '\n'); i >= 0 {
		b = b[:i+1]
	} else {
		b = nil
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		e, err := parseSignedLine(sc.Text())
		if err != nil {
			return nil, 0, fmt.Errorf("signed state %s line %d: %w", filepath.Base(path), n, err)
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

func decodeHashHex(h *Hash, s string) error {
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
	if s.anyKey && s.lastKey.Key == vkey {
		return nil
	}
	return s.write(SignedEntry{Key: vkey, Size: from}, fmt.Sprintf("key %d %s\n", from, vkey))
}

// Last returns the journal's last signed or restore entry (ok false when
// it has none).
func (s *SignedState) Last() (e SignedEntry, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last, s.any
}

// Path returns the journal's file path.
func (s *SignedState) Path() string { return s.path }

// Record appends cp's size and root and fsyncs the journal. A checkpoint
// not larger than the last recorded one is not written again.
func (s *SignedState) Record(cp Checkpoint) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.any && cp.Size <= s.last.Size {
		return nil
	}
	return s.write(SignedEntry{Size: cp.Size, Root: cp.Root}, fmt.Sprintf("signed %d %s\n", cp.Size, cp.Root))
}

// RecordRestore appends a restore line: the journal's history up to
// from (its last size and root) is given up for the database's size and
// root to.
func (s *SignedState) RecordRestore(from SignedEntry, to Checkpoint, at time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := SignedEntry{Restore: true, FromSize: from.Size, FromRoot: from.Root, Size: to.Size, Root: to.Root, At: at.UTC().Truncate(time.Second)}
	return s.write(e, fmt.Sprintf("restore %d %s %d %s %d\n", from.Size, from.Root, to.Size, to.Root, at.Unix()))
}

func (s *SignedState) write(e SignedEntry, line string) error {
	_, statErr := os.Stat(s.path)
	f, err := os.OpenFile(s.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("signed state: %w", err)
	}
	var before int64 = -1
	if st, serr := f.Stat(); serr == nil {
		before = st.Size()
	}
	_, err = f.WriteString(line)
	if err == nil {
		err = f.Sync()
	}
	if err != nil && before >= 0 {
		// A short write (a full disk) would leave part of the line, and
		// the next line appended would be glued to it: the journal is
		// cut back to the lines it held.
		f.Truncate(before)
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
	if e.Key != "" {
		s.lastKey, s.anyKey = e, true
	} else {
		s.last, s.any = e, true
	}
	return nil
}
