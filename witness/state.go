package witness

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
)

// state is what a Witnesser keeps between rounds and across restarts.
type state struct {
	V                int                      `json:"v"`
	Origin           string                   `json:"origin"`
	Witnesses        map[string]*witnessState `json:"witnesses"`
	Latest           *Cosigned                `json:"latest,omitempty"`
	LastWitnessed    *Cosigned                `json:"last_witnessed,omitempty"`
	UnwitnessedSince *time.Time               `json:"unwitnessed_since,omitempty"`
}

// witnessState is one witness's part of the state.
type witnessState struct {
	// VKey is the witness key the state was built with; a policy with
	// another key for the name starts that witness afresh.
	VKey string `json:"vkey"`
	// Size is the size the witness last cosigned, as far as this log
	// knows (from a cosignature or a 409 answer); 0 when unknown.
	Size uint64 `json:"size"`
	// CosignedSize and CosignedRoot name the checkpoint of Cosignature.
	CosignedSize uint64      `json:"cosigned_size"`
	CosignedRoot ledger.Hash `json:"cosigned_root"`
	// Cosignature is the witness's signature line(s) on that checkpoint.
	Cosignature string    `json:"cosignature,omitempty"`
	CosignedAt  time.Time `json:"cosigned_at,omitzero"`
	LastAttempt time.Time `json:"last_attempt,omitzero"`
	LastError   string    `json:"last_error,omitempty"`
	// Refused is set when the witness's last answer refused the
	// checkpoint as inconsistent with what it cosigned (a fork or a
	// rollback of this log).
	Refused bool `json:"refused,omitempty"`
}

const stateVersion = 1

// loadState reads the state file at path; a missing file is an empty
// state. The file must be of the log with origin origin.
func loadState(path, origin string) (*state, error) {
	st := &state{V: stateVersion, Origin: origin, Witnesses: map[string]*witnessState{}}
	if path == "" {
		return st, nil
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return st, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read witness state: %w", err)
	}
	var got state
	if err := json.Unmarshal(b, &got); err != nil {
		return nil, fmt.Errorf("witness state %s: not valid JSON", path)
	}
	if got.V != stateVersion {
		return nil, fmt.Errorf("witness state %s: version %d, want %d", path, got.V, stateVersion)
	}
	if got.Origin != origin {
		return nil, fmt.Errorf("witness state %s: belongs to another log origin", path)
	}
	if got.Witnesses == nil {
		got.Witnesses = map[string]*witnessState{}
	}
	return &got, nil
}

// save writes the state to path atomically and durably: a temporary file
// in the same directory, fsynced, renamed over path, and the directory
// fsynced.
func (st *state) save(path string) error {
	if path == "" {
		return nil
	}
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, ".witness-state-*")
	if err != nil {
		return fmt.Errorf("write witness state: %w", err)
	}
	tmp := f.Name()
	defer os.Remove(tmp)
	if _, err := f.Write(append(b, '\n')); err != nil {
		f.Close()
		return fmt.Errorf("write witness state: %w", err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("write witness state: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write witness state: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write witness state: %w", err)
	}
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}
