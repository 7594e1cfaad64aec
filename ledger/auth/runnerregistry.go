package auth

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"github.com/evidence-ledger/ledger/ledger"
	"slices"
	"time"
)

// RunnerState is one registration of a runner key folded with its
// revocation: the key, the entry that added it and, when revoked, the
// revocation.
type RunnerState struct {
	Name      string    `json:"name"`
	Kind      string    `json:"kind,omitempty"`
	KeyID     string    `json:"key_id"`
	PublicKey string    `json:"public_key"`
	Entry     string    `json:"entry"`
	Index     uint64    `json:"index"`
	AddedBy   string    `json:"added_by"`
	AddedAt   time.Time `json:"added_at"`
	// SpecDigest is the spec digest the approval of an agent key
	// recorded (ledger.RunnerKey.SpecDigest), "" for a runner key.
	SpecDigest string `json:"spec_digest,omitempty"`
	// Labels are the labels the approval of an agent key recorded
	// (ledger.RunnerKey.Labels), nil for a runner key.
	Labels  map[string]string `json:"labels,omitempty"`
	Revoked bool              `json:"revoked"`
	// RevokedIndex, RevokedBy, RevokedAt and Reason describe the
	// revocation when Revoked.
	RevokedIndex uint64    `json:"revoked_index,omitempty"`
	RevokedBy    string    `json:"revoked_by,omitempty"`
	RevokedAt    time.Time `json:"revoked_at,omitzero"`
	Reason       string    `json:"reason,omitempty"`
}

// RunnerRegistry is the state of every runner key registration, oldest
// first. The fold is deterministic over the log order: an add for a name
// that has a live key, or of a key id registered before (live or revoked),
// is ignored; a revoke applies to the name's live key when its key_id
// matches, and is ignored otherwise. A RunnerRegistry is a value: safe to
// share once built.
type RunnerRegistry struct {
	Runners []RunnerState `json:"runners"`
}

// Live returns the name's live (registered, not revoked) key.
func (r RunnerRegistry) Live(name string) (RunnerState, bool) {
	for _, s := range r.Runners {
		if s.Name == name && !s.Revoked {
			return s, true
		}
	}
	return RunnerState{}, false
}

// ByEntry returns the registration added by the entry with content id id.
func (r RunnerRegistry) ByEntry(id string) (RunnerState, bool) {
	for _, s := range r.Runners {
		if s.Entry == id {
			return s, true
		}
	}
	return RunnerState{}, false
}

// ByKeyID returns the registration of key id (there is at most one).
func (r RunnerRegistry) ByKeyID(id string) (RunnerState, bool) {
	for _, s := range r.Runners {
		if s.KeyID == id {
			return s, true
		}
	}
	return RunnerState{}, false
}

// Check returns why a registry change k would be ignored by the fold (a
// ledger.CodeConflict or ledger.CodeNotFound *Error), or nil when it applies.
func (r RunnerRegistry) Check(k ledger.RunnerKey) error {
	switch k.Action {
	case ledger.RunnerAdd:
		if s, ok := r.ByKeyID(k.KeyID); ok {
			state := "live"
			if s.Revoked {
				state = "revoked"
			}
			return ledger.Errorf(ledger.CodeConflict, "key %s is already registered (%s) for runner %q: register a new key", k.KeyID, state, s.Name)
		}
		if s, ok := r.Live(k.Name); ok {
			return ledger.Errorf(ledger.CodeConflict, "runner %q already has live key %s: revoke it first", k.Name, s.KeyID)
		}
	case ledger.RunnerRevoke:
		s, ok := r.Live(k.Name)
		if !ok {
			return ledger.NotFound("runner %q has no live key", k.Name)
		}
		if s.KeyID != k.KeyID {
			return ledger.Errorf(ledger.CodeConflict, "runner %q's live key is %s, not %s", k.Name, s.KeyID, k.KeyID)
		}
	}
	return nil
}

// apply folds one entry into r.
func (r *RunnerRegistry) apply(e ledger.Entry) error {
	var k ledger.RunnerKey
	if err := json.Unmarshal(e.Body, &k); err != nil {
		return fmt.Errorf("runner-key entry %s (index %d): %w", e.ID, e.Index, err)
	}
	if r.Check(k) != nil {
		return nil
	}
	switch k.Action {
	case ledger.RunnerAdd:
		r.Runners = append(r.Runners, RunnerState{Name: k.Name, Kind: k.Kind, KeyID: k.KeyID, PublicKey: k.PublicKey, Entry: e.ID, Index: e.Index, AddedBy: k.By, AddedAt: k.At, SpecDigest: k.SpecDigest, Labels: k.Labels})
	case ledger.RunnerRevoke:
		for i := range r.Runners {
			s := &r.Runners[i]
			if s.Name == k.Name && !s.Revoked {
				s.Revoked, s.RevokedIndex, s.RevokedBy, s.RevokedAt, s.Reason = true, e.Index, k.By, k.At, k.Reason
			}
		}
	}
	return nil
}

// LoadRunnerKeys folds every runner-key entry of the log as of tree size
// asOf (0: the latest) into a registry, reading every page. Errors are the
// store's, or one naming an entry that does not decode.
func LoadRunnerKeys(ctx context.Context, q ledger.Queries, asOf uint64) (RunnerRegistry, error) {
	var all []ledger.Entry
	f := ledger.EntryFilter{Kind: ledger.KindRunnerKey, AsOfSize: asOf, Limit: 1000}
	for {
		es, next, err := q.Entries(ctx, f)
		if err != nil {
			return RunnerRegistry{}, err
		}
		all = append(all, es...)
		if next == "" {
			break
		}
		f.Cursor = next
	}
	slices.SortFunc(all, func(a, b ledger.Entry) int { return cmp.Compare(a.Index, b.Index) })
	var r RunnerRegistry
	for _, e := range all {
		if err := r.apply(e); err != nil {
			return RunnerRegistry{}, err
		}
	}
	return r, nil
}
