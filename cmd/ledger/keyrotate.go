package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/evidence-ledger/ledger/client"
	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/ledger/keys"
	"github.com/evidence-ledger/ledger/ledger/tlog"
	"github.com/spf13/cobra"
	"golang.org/x/mod/sumdb/note"
)

// rotation is what `ledger key rotate` did.
type rotation struct {
	Origin       string `json:"origin"`
	OldKey       string `json:"old_key"`
	NewKey       string `json:"new_key"`
	Index        uint64 `json:"rotation_index"`
	TakeoverSize uint64 `json:"takeover_size"`
	Resumed      bool   `json:"resumed"`
}

// runKeyRotate rotates the log's signing key in keyDir (the server
// stopped):
//  1. the new key (same name, the log origin) is written to
//     ledger.key.next (0600, O_EXCL, fsynced), or taken from there when a
//     rotation was interrupted before its leaf was committed;
//  2. the log is opened as for signing (openChecked) and Log.Rotate
//     appends the key-rotation leaf, signed by both keys, in a batch of
//     its own whose checkpoint the old key signs and the journal records;
//  3. the leaf is checked (ParseKeyRotation), the journal records the key
//     change, ledger.pub is replaced atomically, and ledger.key.next is
//     renamed over ledger.key (the old private key is gone: nothing needs
//     it again, and a kept copy could only forge).
//
// Run again after a crash, it finishes from the step it reached: when the
// log already holds the rotation to ledger.key.next, only step 3 runs.
func runKeyRotate(ctx context.Context, a *app) (rotation, error) {
	dir := a.dataDir()
	nextPath := filepath.Join(dir, tlog.NextKeyFile)
	var next keys.Key
	var nextText string
	if b, err := os.ReadFile(nextPath); err == nil {
		if next, err = keys.Parse(strings.TrimSpace(string(b))); err != nil {
			return rotation{}, fmt.Errorf("%s: %v", nextPath, err)
		}
		if r, done, err := rotatedTo(ctx, a, next.VerifierKey); err != nil {
			return rotation{}, err
		} else if done {
			r.Resumed = true
			return r, finishRotation(dir, r)
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return rotation{}, fmt.Errorf("read %s: %w", nextPath, err)
	}
	st, _, err := openChecked(ctx, a.DB, dir, a.log, false, 0)
	if err != nil {
		return rotation{}, err
	}
	defer st.Close()
	oldKey := st.VerifierKey()
	if next.Signer == nil {
		if next, nextText, err = keys.Generate(st.Origin()); err != nil {
			return rotation{}, err
		}
		if err := keys.WriteNew(nextPath, []byte(nextText+"\n"), 0o600); err != nil {
			return rotation{}, err
		}
	}
	e, cp, err := st.Log.Rotate(ctx, next.Signer, next.VerifierKey)
	if err != nil {
		return rotation{}, fmt.Errorf("append the rotation: %w", err)
	}
	kr, err := ledger.ParseKeyRotation(e.Body, e.Index, st.Origin(), oldKey)
	if err != nil {
		return rotation{}, fmt.Errorf("the rotation leaf %d does not verify (%v): the key files are left as they were; run `ledger audit`", e.Index, err)
	}
	if kr.TakeoverSize != cp.Size+1 {
		return rotation{}, fmt.Errorf("the rotation leaf %d has takeover size %d but its checkpoint is of size %d", e.Index, kr.TakeoverSize, cp.Size)
	}
	if err := st.Close(); err != nil {
		return rotation{}, err
	}
	r := rotation{Origin: st.Origin(), OldKey: oldKey, NewKey: next.VerifierKey, Index: e.Index, TakeoverSize: kr.TakeoverSize}
	return r, finishRotation(dir, r)
}

// rotatedTo reports whether the log's key chain already ends at vkey
// (a rotation whose leaf was committed but whose key files were not
// swapped), reading the database with the public key alone.
func rotatedTo(ctx context.Context, a *app, vkey string) (rotation, bool, error) {
	k, err := keys.Public(vkey)
	if err != nil {
		return rotation{}, false, err
	}
	st, err := openDriverStore(ctx, a.DB, storeOptions{key: k, log: a.log, readOnly: true})
	if err != nil {
		return rotation{}, false, err
	}
	defer st.Close()
	cp, err := st.Checkpoint(ctx)
	if err != nil {
		return rotation{}, false, err
	}
	rots, err := ledger.RotationLeaves(ctx, st, cp.Size)
	if err != nil || len(rots) == 0 {
		return rotation{}, false, err
	}
	chain, err := ledger.BuildKeyChain(st.Origin(), vkey, rots)
	if err != nil {
		return rotation{}, false, fmt.Errorf("the log's key chain does not verify: %v", err)
	}
	if chain.Head() != vkey {
		return rotation{}, false, nil
	}
	last := chain[len(chain)-1]
	return rotation{Origin: st.Origin(), OldKey: chain[len(chain)-2].Key, NewKey: vkey, Index: uint64(last.RotationIndex), TakeoverSize: last.From}, true, nil
}

// finishRotation records the key change in the journal, replaces
// ledger.pub atomically and renames ledger.key.next over ledger.key.
func finishRotation(dir string, r rotation) error {
	state, err := tlog.OpenSignedState(filepath.Join(dir, tlog.SignedStateFile))
	if err != nil {
		return err
	}
	if err := state.RecordKey(r.TakeoverSize, r.NewKey); err != nil {
		return err
	}
	if err := keys.WriteAtomic(filepath.Join(dir, keys.PubFile), []byte(r.NewKey+"\n"), 0o644); err != nil {
		return err
	}
	if err := os.Rename(filepath.Join(dir, tlog.NextKeyFile), filepath.Join(dir, keys.KeyFile)); err != nil {
		return fmt.Errorf("put the new key in place: %w", err)
	}
	return keys.SyncDir(dir)
}

// witnessAdvice is what an operator must tell each witness after a
// rotation.
func witnessAdvice(r rotation) string {
	return fmt.Sprintf(`Witnesses verify the log's checkpoints with the log's key: a witness still
configured with the old key refuses every checkpoint of size %d or more.
Tell each witness the new key before the server signs again, e.g. for
litewitness:
  go tool witnessctl add-key -db lw.db -origin %s -key %s
(and remove the old key once it cosigned the rotation's checkpoint, size %d).
Clients that pinned the old key follow the rotation leaf (index %d: the old
key vouches for the new one): `+"`ledger key chain --key OLD.pub`"+` prints the chain.`, r.TakeoverSize, r.Origin, r.NewKey, r.TakeoverSize-1, r.Index)
}

// keyChainOf returns the log's verified key chain, from --server (GET
// /api/v1/log/keys, each rotation's signatures checked here) or the
// local database, and checks that the trusted key anchor is in it.
func keyChainOf(ctx context.Context, a *app, anchor string) (ledger.KeyChain, error) {
	var (
		chain ledger.KeyChain
		cp    ledger.Checkpoint
	)
	if a.Server != "" {
		c, err := client.New(a.Server, client.Options{Token: a.Token, Timeout: a.Timeout})
		if err != nil {
			return nil, err
		}
		kc, err := c.LogKeys(ctx)
		if err != nil {
			return nil, err
		}
		if len(kc.Keys) == 0 {
			return nil, fmt.Errorf("the server lists no key for its log")
		}
		listed := kc.Keys[len(kc.Keys)-1].Key
		v, err := note.NewVerifier(listed)
		if err != nil {
			return nil, fmt.Errorf("the server's key %q: %v", listed, err)
		}
		rots := make([]ledger.RotationLeaf, len(kc.Rotations))
		for i, r := range kc.Rotations {
			rots[i] = ledger.RotationLeaf{Index: r.Index, Body: r.Body}
		}
		if chain, err = ledger.BuildKeyChain(v.Name(), listed, rots); err != nil {
			return nil, err
		}
		if len(chain) != len(kc.Keys) || chain.Head() != listed {
			return nil, fmt.Errorf("the server's key list (%d keys, last %s) is not the chain its rotation leaves build (%d keys, last %s)", len(kc.Keys), ledger.KeyID(listed), len(chain), ledger.KeyID(chain.Head()))
		}
		if cp, err = c.Checkpoint(ctx); err != nil {
			return nil, err
		}
	} else {
		st, _, err := openPublicKey(ctx, a.DB, anchor, a.log)
		if err != nil {
			return nil, err
		}
		defer st.Close()
		cp, err = st.Checkpoint(ctx)
		if ledger.ErrorCode(err) == ledger.CodeNotFound {
			return ledger.KeyChain{{Key: anchor, From: 0, RotationIndex: -1}}, nil // nothing signed yet
		}
		if err != nil {
			return nil, err
		}
		rots, err := ledger.RotationLeaves(ctx, st, cp.Size)
		if err != nil {
			return nil, err
		}
		if chain, err = ledger.BuildKeyChain(st.Origin(), anchor, rots); err != nil {
			return nil, err
		}
	}
	if chain.Index(anchor) < 0 {
		return nil, fmt.Errorf("the key given (%s) is not in the log's key chain (first %s): another log, or a replaced key", ledger.KeyID(anchor), ledger.KeyID(chain[0].Key))
	}
	// The chain must be the one that signs the log: its last key verifies
	// the latest checkpoint.
	if cp.Size > 0 {
		hv, err := note.NewVerifier(chain.Head())
		if err != nil {
			return nil, err
		}
		if _, err := note.Open([]byte(cp.Note), note.VerifierList(hv)); err != nil {
			return nil, fmt.Errorf("the log's latest checkpoint (size %d) does not verify with the chain's last key %s: the log is signed by a key the chain does not hold (re-created, or another log)", cp.Size, ledger.KeyID(chain.Head()))
		}
	}
	return chain, nil
}

func newKeyCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{Use: "key", Short: "The log's signing key: rotate it, show its chain"}
	rotate := &cobra.Command{
		Use:   "rotate",
		Short: "Replace the log's signing key, recorded as a key-rotation leaf signed by the old key and the new",
		Long: `Rotate the log's Ed25519 signing key (stop the server first). A new key with
the same name (the log origin) is made and kept in ledger.key.next; one
key-rotation leaf is appended holding the old and the new verifier keys, the
size from which the new key signs, and both keys' signatures over the same
message. Its checkpoint is the last the old key signs; every later checkpoint
is signed by the new key. Then the signed-state journal records the key
change, ledger.pub is replaced, and ledger.key.next is renamed over
ledger.key: the old private key is removed (back it up offline beforehand if
policy demands; the ledger never needs it again).

Run it again after an interruption: it finishes the rotation from where it
stopped. A server still running with the old key refuses to sign once it sees
the rotation.

Exit codes: 0 rotated, 2 refused or error.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if a.Server != "" {
				return errExit(2, "key rotate acts on the key files and the database: run it where they are, with --db (not --server)")
			}
			if !isPostgres(a.DB) {
				path, err := sqlitePath(a.DB)
				if err == nil {
					_, err = os.Stat(path)
				}
				if err != nil {
					return errExit(2, "key rotate: database %s: %v", a.DB, err)
				}
			}
			r, err := runKeyRotate(cmd.Context(), a)
			if err != nil {
				return errExit(2, "key rotate: %v", err)
			}
			if a.JSON {
				return a.printJSON(r)
			}
			verb := "rotated"
			if r.Resumed {
				verb = "finished the interrupted rotation"
			}
			fmt.Fprintf(a.stdout, "%s: the log %s is signed by %s from size %d on (rotation leaf %d; the old key %s signed up to size %d)\n%s\n",
				verb, r.Origin, ledger.KeyID(r.NewKey), r.TakeoverSize, r.Index, ledger.KeyID(r.OldKey), r.TakeoverSize-1, witnessAdvice(r))
			return nil
		},
	}
	var key string
	chain := &cobra.Command{
		Use:   "chain",
		Short: "Print the log's verified key chain, one verifier key a line, trusting only --key",
		Long: `Print the log's signing keys, first to last, one verifier key a line (a file
--key of ` + "`audit --against`" + ` and ` + "`proof verify`" + ` accepts). The chain is read from
--server (GET /api/v1/log/keys) or the local database and verified here: every
rotation must be signed by the key before it and the key after it, and the key
in --key (default: the data directory's ledger.pub) must be in the chain. A
client that pinned the old key learns the new one this way.

Exit codes: 0 printed, 2 error or the key is not in the chain.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			anchor, err := readVerifierKey(a.keyPath(key))
			if err != nil {
				return errExit(2, "key chain: %v", err)
			}
			if ks := strings.Fields(anchor); len(ks) > 0 {
				anchor = ks[0]
			}
			c, err := keyChainOf(cmd.Context(), a, anchor)
			if err != nil {
				return errExit(2, "key chain: %v", err)
			}
			if a.JSON {
				return a.printJSON(c)
			}
			for _, e := range c {
				fmt.Fprintln(a.stdout, e.Key)
			}
			return nil
		},
	}
	chain.Flags().StringVar(&key, "key", "", "a verifier key file the caller trusts (default: ledger.pub in the data directory)")
	cmd.AddCommand(rotate, chain)
	return cmd
}

// openPublicKey opens the database (either driver) read-only with the
// verifier key vkey.
func openPublicKey(ctx context.Context, db, vkey string, log *slog.Logger) (*Store, string, error) {
	k, err := keys.Public(vkey)
	if err != nil {
		return nil, "", err
	}
	st, err := openDriverStore(ctx, db, storeOptions{key: k, log: log, readOnly: true})
	if err != nil {
		return nil, "", err
	}
	return st, vkey, nil
}
