package main

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/evidence-ledger/ledger/ledger/keys"
	"github.com/evidence-ledger/ledger/ledger/postgres"
	"github.com/evidence-ledger/ledger/ledger/sqlite"
	"github.com/evidence-ledger/ledger/ledger/tlog"
	"golang.org/x/mod/sumdb/note"
)

// openChecked opens the database db (a SQLite path or a PostgreSQL URL,
// see openDriverStore) to sign over it (the server and every local command
// that may append), refusing bad state first:
//   - a SQLite file PRAGMA quick_check finds damaged;
//   - a missing ledger.key when the database already holds signed leaves
//     (a key is generated only for a new log);
//   - a key that did not sign the latest checkpoint, a database behind or
//     disagreeing with the signed-state journal, a tail that fails its
//     check (tlog.Log.CheckStart).
//
// The store records every new checkpoint in the journal (keyDir's
// signed-state) before answering the append that made it. With
// acceptRollback, a database behind or disagreeing with the journal is
// opened anyway and returned with the *tlog.StartError (only `ledger
// restore --accept-rollback` asks for it).
func openChecked(ctx context.Context, db, keyDir string, log *slog.Logger, acceptRollback bool, idemTTL time.Duration) (*Store, *tlog.SignedState, error) {
	dbExists := false
	if isPostgres(db) {
		dbExists = true // its size is read below when the key is missing
	} else {
		path, err := sqlitePath(db)
		if err != nil {
			return nil, nil, err
		}
		if _, err := os.Stat(path); err == nil {
			dbExists = true
			// Looked at before the check opens the file: SQLite applies a
			// -wal it finds and removes it at close.
			_, werr := os.Stat(path + "-wal")
			if err := sqlite.CheckFile(ctx, path, false); err != nil {
				if errors.Is(err, sqlite.ErrCorrupt) {
					hint := ""
					if werr == nil {
						hint = " A -wal file was beside it: if a backup was just put in its place, that -wal came from the old database and SQLite applied it to the backup; put the backup back and remove the -wal and -shm files left beside it first."
					}
					return nil, nil, fmt.Errorf("refusing to open: %v; restore the newest backup (`ledger audit` says more).%s", err, hint)
				}
				return nil, nil, err
			}
		}
	}
	// After the file check: a damaged file is reported as such first.
	if !acceptRollback {
		if err := refuseForeignDataDir(ctx, db, keyDir, log); err != nil {
			return nil, nil, err
		}
	}
	if _, err := os.Stat(filepath.Join(keyDir, keys.KeyFile)); errors.Is(err, fs.ErrNotExist) && dbExists {
		n, err := signedSizeNoKey(ctx, db, log)
		if err != nil {
			return nil, nil, err
		}
		if n > 0 {
			return nil, nil, fmt.Errorf("refusing to open: %s is missing but the database holds a log of %d signed leaves: restore the log's key from its backup (a new key would sign over the old log as another log; a log changes its key only by `ledger key rotate`, which needs the old key)", filepath.Join(keyDir, keys.KeyFile), n)
		}
	}
	_, kerr := os.Stat(filepath.Join(keyDir, keys.KeyFile))
	key, err := keys.Load(keyDir, true)
	if err != nil {
		return nil, nil, err
	}
	if errors.Is(kerr, fs.ErrNotExist) {
		// A key made now belongs to this database: a second database in
		// the directory is refused even before this one signs a leaf.
		if err := writeKeyOwner(keyDir, db); err != nil {
			return nil, nil, err
		}
	}
	state, err := tlog.OpenSignedState(filepath.Join(keyDir, tlog.SignedStateFile))
	if err != nil {
		return nil, nil, err
	}
	st, err := openDriverStore(ctx, db, storeOptions{key: key, keyDir: keyDir, log: log, onCheckpoint: state.Record, idemTTL: idemTTL})
	if err != nil {
		return nil, nil, err
	}
	latest, err := st.CheckStart(ctx, st, state)
	var se *tlog.StartError
	if err != nil {
		if acceptRollback && errors.As(err, &se) && se.Rollback {
			return st, state, err
		}
		st.Close()
		if errors.As(err, &se) {
			return nil, nil, fmt.Errorf("refusing to serve or sign: %w", err)
		}
		return nil, nil, err
	}
	if latest.Size == 0 {
		return st, state, nil
	}
	if err := state.Record(latest); err != nil {
		st.Close()
		return nil, nil, err
	}
	return st, state, nil
}

// refuseForeignDataDir refuses, before anything is created or written,
// a database that holds no signed log (a SQLite file not there yet or
// empty, a PostgreSQL database with no checkpoint) whose data directory
// keyDir holds the signing key and signed-state journal of a log that has
// signed leaves: another ledger's, or this database's own before it was
// lost. Signing with that key over a new log would fork the log it
// belongs to; giving the database a key of its own needs a data directory
// of its own. Only `ledger restore --accept-rollback` passes such a
// database on (it records the loss).
func refuseForeignDataDir(ctx context.Context, db, keyDir string, log *slog.Logger) error {
	if owner := keyOwner(keyDir); owner != "" && owner != ownerName(db) && ownerExists(owner) {
		if n, err := dbSignedSize(ctx, db, log); err != nil || n > 0 {
			return err // a database with a log of its own: the key check judges it
		}
		return fmt.Errorf("refusing to open %s: it holds no log, and its data directory %s holds the signing key made for %s (%s names it). "+
			"A second ledger needs a data directory of its own: create %s (found by the database's name from then on), or pass --data-dir DIR (LEDGER_DATA_DIR)",
			dbName(db), keyDir, owner, KeyOwnerFile, ownDirHint(db))
	}
	ents, err := tlog.ReadSignedState(filepath.Join(keyDir, tlog.SignedStateFile))
	if errors.Is(err, fs.ErrNotExist) || (err == nil && len(ents) == 0) {
		return nil
	}
	if err != nil {
		return err
	}
	var signed uint64
	for _, e := range ents {
		signed = max(signed, e.Size)
	}
	if signed == 0 {
		return nil
	}
	if !isPostgres(db) {
		path, err := sqlitePath(db)
		if err != nil {
			return err
		}
		if fi, err := os.Stat(path); err == nil && fi.Size() > 0 {
			if n, err := signedSizeNoKey(ctx, db, log); err != nil || n > 0 {
				return err
			}
		} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	} else if n, err := signedSizeNoKey(ctx, db, log); err != nil || n > 0 {
		return err
	}
	return fmt.Errorf("refusing to open %s: it holds no log, but its data directory %s holds the signing key and signed-state journal of a log that signed %d leaves. "+
		"If this is a second ledger, give it a data directory of its own: create %s (found by the database's name from then on), or pass --data-dir DIR (LEDGER_DATA_DIR). "+
		"If it replaces that log's database, put the newest backup in its place, or accept the loss with `ledger restore --accept-rollback`",
		dbName(db), keyDir, signed, ownDirHint(db))
}

// KeyOwnerFile, beside ledger.key, names the database the key was made
// for (ownerName).
const KeyOwnerFile = "ledger.key.owner"

// keyOwner returns the database keyDir's key was made for, "" when not
// recorded (a key made before the file existed, or by another tool).
func keyOwner(keyDir string) string {
	b, err := os.ReadFile(filepath.Join(keyDir, KeyOwnerFile))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// ownerName names db in KeyOwnerFile: a SQLite file's absolute path, or
// "postgres:" and PostgreSQL's host:port/database (never a password).
func ownerName(db string) string {
	if isPostgres(db) {
		return "postgres:" + dbName(db)
	}
	p, _ := sqlitePath(db)
	if abs, err := filepath.Abs(p); err == nil {
		return abs
	}
	return p
}

// ownerExists reports whether the database a key was made for may still
// hold its log: a SQLite file that exists, or any PostgreSQL database
// (which this process cannot look for).
func ownerExists(owner string) bool {
	if strings.HasPrefix(owner, "postgres:") {
		return true
	}
	_, err := os.Stat(owner)
	return err == nil
}

// writeKeyOwner records in keyDir that its key was made for db.
func writeKeyOwner(keyDir, db string) error {
	if err := keys.WriteAtomic(filepath.Join(keyDir, KeyOwnerFile), []byte(ownerName(db)+"\n"), 0o644); err != nil {
		return fmt.Errorf("record the key's database: %w", err)
	}
	return nil
}

// dbSignedSize is the signed size of db's log, 0 for a SQLite file that
// does not exist or is empty.
func dbSignedSize(ctx context.Context, db string, log *slog.Logger) (uint64, error) {
	if !isPostgres(db) {
		path, err := sqlitePath(db)
		if err != nil {
			return 0, err
		}
		fi, err := os.Stat(path)
		if errors.Is(err, fs.ErrNotExist) || err == nil && fi.Size() == 0 {
			return 0, nil
		}
		if err != nil {
			return 0, err
		}
	}
	return signedSizeNoKey(ctx, db, log)
}

// ownDirHint names the data directory a SQLite database finds by its name
// (sqliteDataDir), or a placeholder for PostgreSQL.
func ownDirHint(db string) string {
	if !isPostgres(db) {
		if p, err := sqlitePath(db); err == nil && ownDataDir(p) != "" {
			return "the directory " + ownDataDir(p)
		}
	}
	return "a directory of its own"
}

// signedSizeNoKey returns the size of the latest stored checkpoint of the
// database db, read with a throwaway key (the log's own is missing).
func signedSizeNoKey(ctx context.Context, db string, log *slog.Logger) (uint64, error) {
	if isPostgres(db) {
		return postgres.SignedSizeNoKey(ctx, db)
	}
	skey, _, err := note.GenerateKey(rand.Reader, "ledger.probe")
	if err != nil {
		return 0, err
	}
	k, err := keys.Parse(skey)
	if err != nil {
		return 0, err
	}
	st, err := openDriverStore(ctx, db, storeOptions{key: k, log: log, readOnly: true})
	if err != nil {
		return 0, err
	}
	defer st.Close()
	cp, err := st.Checkpoint(ctx)
	if err != nil {
		return 0, err
	}
	return cp.Size, nil
}

// openPublic opens the database db read-only with the verifier key file
// pubPath alone (no private key).
func openPublic(ctx context.Context, db, pubPath string, log *slog.Logger) (*Store, string, error) {
	vkey, err := readVerifierKey(pubPath)
	if err != nil {
		return nil, "", err
	}
	// A key-chain file (one key a line, `ledger key chain`) anchors at its
	// first key.
	if ks := strings.Fields(vkey); len(ks) > 1 {
		vkey = ks[0]
	}
	k, err := keys.Public(vkey)
	if err != nil {
		return nil, "", fmt.Errorf("--key %s: %w", pubPath, err)
	}
	st, err := openDriverStore(ctx, db, storeOptions{key: k, log: log, readOnly: true})
	if err != nil {
		return nil, "", err
	}
	return st, vkey, nil
}
