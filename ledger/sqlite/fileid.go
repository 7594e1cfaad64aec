package sqlite

import (
	"fmt"
	"os"

	"github.com/evidence-ledger/ledger/ledger"
)

// FileUnchanged reports whether the database file at the path this store
// opened is still the file it opened (os.SameFile: same device and inode).
// A file moved or restored over the path while the store is open (an old
// backup put in its place) is not: the store's connections keep the old,
// unlinked file while new ones would open the new one, so the store must
// not write or sign again. The error is CodeUnavailable, telling to
// restart (it names no path: API clients see it) (start-up then checks the file at the path
// against the signed-state journal). A store opened before the check was
// possible (the file could not be read at open) always passes. Safe for
// concurrent use; one stat(2) per call.
func (s *Store) FileUnchanged() error { return s.d.fileUnchanged() }

func (d *driver) fileUnchanged() error {
	if d.file == nil {
		return nil
	}
	fi, err := os.Stat(d.opts.Path)
	if err == nil && os.SameFile(d.file, fi) {
		return nil
	}
	what := "replaced by another file"
	if err != nil {
		what = "removed"
	}
	// The answer reaches API clients: it names no server path (the
	// server's log does, through watchFile).
	return &ledger.Error{Code: ledger.CodeUnavailable, Message: fmt.Sprintf(
		"the database file was %s while the server had it open: nothing more is written or signed; the server must be restarted so that start-up checks the file now at its path", what)}
}
