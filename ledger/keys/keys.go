// Package keys loads and generates the log's signing key: an Ed25519
// signed-note key (golang.org/x/mod/sumdb/note) kept in a directory as
// ledger.key (the signer key, mode 0600) and ledger.pub (the verifier
// key). cmd/ledger loads the key and hands the signer to the store, so
// store drivers never touch key files.
package keys

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/mod/sumdb/note"
)

// The file names inside a key directory.
const (
	KeyFile = "ledger.key"
	PubFile = "ledger.pub"
)

// Key is the log's signing identity: the note signer, whose Name is the
// log origin (the first line of every checkpoint), and the matching
// verifier key "name+hash+base64(alg||pub)". Safe for concurrent use.
type Key struct {
	Signer      note.Signer
	VerifierKey string
}

// Load reads the signing key in dir. With create, a missing key is
// generated (dir is created 0700, ledger.key written 0600 with O_EXCL and
// fsynced, ledger.pub 0644); without it a missing key is an error. A key
// file readable by group or others is refused. Errors name the file, never
// its content.
func Load(dir string, create bool) (Key, error) {
	kp := filepath.Join(dir, KeyFile)
	b, err := os.ReadFile(kp)
	if errors.Is(err, fs.ErrNotExist) && create {
		skey, err := generate(dir)
		if err != nil {
			return Key{}, err
		}
		b = []byte(skey)
	} else if err != nil {
		return Key{}, fmt.Errorf("read signing key %s: %w", kp, err)
	}
	if st, err := os.Stat(kp); err == nil && st.Mode().Perm()&0o077 != 0 {
		return Key{}, fmt.Errorf("signing key %s has mode %v: must not be readable by group or others (chmod 600)", kp, st.Mode().Perm())
	}
	k, err := Parse(strings.TrimSpace(string(b)))
	if err != nil {
		return Key{}, fmt.Errorf("signing key %s: %w", kp, err)
	}
	return k, nil
}

// Parse makes a Key of a signer key "PRIVATE+KEY+name+hash+base64(alg||seed)"
// (note.GenerateKey's first result). Only Ed25519 keys are accepted.
func Parse(skey string) (Key, error) {
	signer, err := note.NewSigner(skey)
	if err != nil {
		return Key{}, fmt.Errorf("parse signing key: %w", err)
	}
	vkey, err := verifierFromSigner(skey)
	if err != nil {
		return Key{}, err
	}
	return Key{Signer: signer, VerifierKey: vkey}, nil
}

// generate writes a new key pair into dir and returns the signer key. The
// key name is "ledger.<host>.<8 hex>", the host name reduced to what a
// note key name may hold.
func generate(dir string) (string, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("create key directory: %w", err)
	}
	var rnd [4]byte
	rand.Read(rnd[:])
	host, _ := os.Hostname()
	host = strings.Map(func(r rune) rune {
		if r == '+' || r == ' ' || r == '\n' || r < 0x21 || r > 0x7e {
			return '-'
		}
		return r
	}, host)
	if host == "" {
		host = "localhost"
	}
	skey, vkey, err := note.GenerateKey(rand.Reader, fmt.Sprintf("ledger.%s.%x", host, rnd))
	if err != nil {
		return "", fmt.Errorf("generate signing key: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(dir, KeyFile), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return "", fmt.Errorf("write signing key: %w", err)
	}
	_, err = f.WriteString(skey + "\n")
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", fmt.Errorf("write signing key: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, PubFile), []byte(vkey+"\n"), 0o644); err != nil {
		return "", fmt.Errorf("write verifier key: %w", err)
	}
	return skey, nil
}

// verifierFromSigner derives the verifier key "name+hash+base64(alg||pub)"
// from a signer key "PRIVATE+KEY+name+hash+base64(alg||priv)".
func verifierFromSigner(skey string) (string, error) {
	parts := strings.SplitN(skey, "+", 5)
	if len(parts) != 5 {
		return "", errors.New("derive verifier key: malformed signer key")
	}
	raw, err := base64.StdEncoding.DecodeString(parts[4])
	if err != nil || len(raw) != 1+ed25519.SeedSize || raw[0] != 1 {
		return "", errors.New("derive verifier key: not an Ed25519 signer key")
	}
	pub := ed25519.NewKeyFromSeed(raw[1:]).Public().(ed25519.PublicKey)
	vk, err := note.NewEd25519VerifierKey(parts[2], pub)
	if err != nil {
		return "", fmt.Errorf("derive verifier key: %w", err)
	}
	return vk, nil
}

// Generate makes a new Ed25519 signer key named name and returns it as a
// Key with its signer key text ("PRIVATE+KEY+name+hash+base64"); nothing
// is written. A rotation keeps the log's name (its origin), so the new
// key differs from the old one in its key hash and public key only.
func Generate(name string) (Key, string, error) {
	skey, _, err := note.GenerateKey(rand.Reader, name)
	if err != nil {
		return Key{}, "", fmt.Errorf("generate signing key: %w", err)
	}
	k, err := Parse(skey)
	if err != nil {
		return Key{}, "", err
	}
	return k, skey, nil
}

// WriteNew writes b to path, which must not exist (O_EXCL), with mode
// perm, fsyncs it and its directory. Errors name the file, never b.
func WriteNew(path string, b []byte, perm os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
		return fmt.Errorf("write %s: %w", path, err)
	}
	return SyncDir(filepath.Dir(path))
}

// WriteAtomic replaces path with b (mode perm) atomically: b goes to a
// temporary file in path's directory, which is fsynced and renamed over
// path, and the directory is fsynced; a crash leaves the old or the new
// content, never a mix. Errors name the file, never b.
func WriteAtomic(path string, b []byte, perm os.FileMode) error {
	tmp := path + ".tmp"
	os.Remove(tmp)
	if err := WriteNew(tmp, b, perm); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("replace %s: %w", path, err)
	}
	return SyncDir(filepath.Dir(path))
}

// SyncDir fsyncs the directory dir, making the renames and creations in
// it durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	err = d.Sync()
	d.Close()
	if err != nil {
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	return nil
}
