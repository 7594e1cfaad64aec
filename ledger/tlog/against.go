package tlog

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/transparency-dev/merkle/proof"
	"github.com/transparency-dev/merkle/rfc6962"
	"golang.org/x/mod/sumdb/note"
)

// SavedCheckpoint is a signed checkpoint someone else kept: a client's
// saved copy, a CI artifact, a witness's latest. Source names where it came
// from (a file name or URL) for the report; Note is the signed note.
type SavedCheckpoint struct {
	Source string
	Note   []byte
}

// ParseSavedCheckpoint extracts the signed checkpoint note from what a
// client may have saved: the note itself, the JSON of
// /api/v1/log/checkpoint (its "note" field) or a c2sp.org/tlog-proof (the
// checkpoint after its inclusion path). It checks only the shape, not the
// signature (see AuditAgainst).
func ParseSavedCheckpoint(b []byte) ([]byte, error) {
	t := bytes.TrimLeft(b, " \t\r\n")
	switch {
	case bytes.HasPrefix(t, []byte("{")):
		var v struct {
			Note string `json:"note"`
		}
		if err := json.Unmarshal(t, &v); err != nil || v.Note == "" {
			return nil, errors.New("saved checkpoint: JSON without a \"note\" string")
		}
		return []byte(v.Note), nil
	case bytes.HasPrefix(t, []byte("c2sp.org/tlog-proof@v1\n")):
		_, cp, ok := bytes.Cut(t, []byte("\n\n"))
		if !ok || len(cp) == 0 {
			return nil, errors.New("saved checkpoint: tlog-proof without a checkpoint")
		}
		return cp, nil
	}
	if !bytes.Contains(b, []byte("\n\n")) {
		return nil, errors.New("saved checkpoint: not a signed note, checkpoint JSON or tlog-proof")
	}
	return b, nil
}

// CheckpointReader is the part of ledger.LogReader that AuditAgainst reads: a
// store, or an HTTP client of a server's /api/v1/log routes (everything
// it answers is checked against the public key, so the server need not be
// trusted).
type CheckpointReader interface {
	Checkpoint(ctx context.Context) (ledger.Checkpoint, error)
	CheckpointAt(ctx context.Context, size uint64) (ledger.Checkpoint, error)
	ConsistencyProof(ctx context.Context, from, to uint64) (ledger.ConsistencyProof, error)
}

// AgainstStatus is the verdict on one saved checkpoint.
type AgainstStatus string

// The verdicts of AuditAgainst.
const (
	// AgainstOK: the log extends the saved checkpoint (same root at that
	// size, consistency proof to the latest checkpoint) and holds its
	// checkpoint of that size.
	AgainstOK AgainstStatus = "ok"
	// AgainstMalformed: the saved file is not a checkpoint note.
	AgainstMalformed AgainstStatus = "malformed"
	// AgainstKeyMismatch: the checkpoint names another key (or origin)
	// than the verifier key given: the key given is not the log's, or the
	// log's key was replaced.
	AgainstKeyMismatch AgainstStatus = "key_mismatch"
	// AgainstBadSignature: the checkpoint names the given key but its
	// signature does not verify: the saved text was edited.
	AgainstBadSignature AgainstStatus = "bad_signature"
	// AgainstRollback: the log has fewer leaves than the saved checkpoint:
	// rolled back (a restored backup) or its tail cut.
	AgainstRollback AgainstStatus = "rollback"
	// AgainstFork: the log has another root at the saved size, or is not a
	// consistent extension of it: the histories part at or before that
	// size.
	AgainstFork AgainstStatus = "fork"
	// AgainstMissingCheckpoint: the log extends the saved checkpoint but no
	// longer holds a checkpoint of its size (a deleted checkpoint row; a
	// client asking for it gets 404).
	AgainstMissingCheckpoint AgainstStatus = "missing_checkpoint"
)

// AgainstResult is the verdict on one saved checkpoint.
type AgainstResult struct {
	Source  string        `json:"source"`
	Size    uint64        `json:"size"`
	Root    ledger.Hash   `json:"root"`
	Status  AgainstStatus `json:"status"`
	Problem string        `json:"problem,omitempty"`
}

// AgainstReport is the result of AuditAgainst. OK is true only when every
// saved checkpoint is AgainstOK. Size and Root are the log's latest signed
// checkpoint. ConsistentUpTo is the largest saved size the log extends
// (0 when none); PartsBy, when not 0, is the smallest saved size it does
// not extend (a fork or rollback): the histories part after ConsistentUpTo
// and at or before PartsBy (only checkpoints someone saved bound it: the
// more are saved, the closer the bound).
type AgainstReport struct {
	OK             bool            `json:"ok"`
	Size           uint64          `json:"size"`
	Root           ledger.Hash     `json:"root"`
	ConsistentUpTo uint64          `json:"consistent_up_to"`
	PartsBy        uint64          `json:"parts_by,omitempty"`
	Problem        string          `json:"problem,omitempty"`
	Results        []AgainstResult `json:"results"`
}

// AuditAgainst proves that log extends each saved checkpoint, using only
// the log's public verifier key vkey (a signed-note vkey, e.g. the
// contents of ledger.pub). Each saved checkpoint must verify with vkey and
// name vkey's origin; then the log's latest checkpoint (which must verify
// with vkey too) must be at least as large, have a consistency proof from
// the saved root (RFC 6962, checked with transparency-dev/merkle), and
// hold a checkpoint of the saved size with the same root. It returns an
// error only when vkey is malformed or the log cannot be read; every
// finding is in the report. It reads the log through CheckpointReader only and is
// safe to call on a log that is being appended to.
//
// vkey may hold several verifier keys, one a line (a key chain, as `ledger
// key chain` prints it after a key rotation): a checkpoint signed by any of
// them is accepted. They must share one name (the origin).
func AuditAgainst(ctx context.Context, log CheckpointReader, vkey string, saved []SavedCheckpoint) (AgainstReport, error) {
	var v []note.Verifier
	for _, k := range strings.Fields(vkey) {
		kv, err := note.NewVerifier(k)
		if err != nil {
			return AgainstReport{}, fmt.Errorf("verifier key: %w", err)
		}
		if len(v) > 0 && kv.Name() != v[0].Name() {
			return AgainstReport{}, fmt.Errorf("verifier keys: %s and %s name different logs", v[0].Name(), kv.Name())
		}
		v = append(v, kv)
	}
	if len(v) == 0 {
		return AgainstReport{}, errors.New("verifier key: none given")
	}
	cur, err := log.Checkpoint(ctx)
	empty := false
	if ledger.ErrorCode(err) == ledger.CodeNotFound {
		// A log with no checkpoint (a new or emptied database read with
		// the public key alone) holds size 0: every saved checkpoint of a
		// larger size shows a rollback.
		empty, err = true, nil
		cur = ledger.Checkpoint{}
		copy(cur.Root[:], rfc6962.DefaultHasher.EmptyRoot())
	}
	if err != nil {
		return AgainstReport{}, fmt.Errorf("read latest checkpoint: %w", err)
	}
	rep := AgainstReport{OK: true, Size: cur.Size, Root: cur.Root}
	if empty {
		// Nothing signed to check.
	} else if _, _, st, msg := openCheckpoint([]byte(cur.Note), v); st != AgainstOK {
		rep.OK = false
		rep.Problem = "the log's latest checkpoint (size " + strconv.FormatUint(cur.Size, 10) + "): " + msg
	}
	for _, s := range saved {
		r := auditOne(ctx, log, v, cur, s)
		if r.Status != AgainstOK {
			rep.OK = false
		}
		rep.Results = append(rep.Results, r)
	}
	// Bound the parting point by the sizes of the saved checkpoints.
	sorted := append([]AgainstResult(nil), rep.Results...)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].Size < sorted[j].Size })
	for _, r := range sorted {
		switch r.Status {
		case AgainstOK, AgainstMissingCheckpoint:
			if rep.PartsBy == 0 || r.Size < rep.PartsBy {
				rep.ConsistentUpTo = max(rep.ConsistentUpTo, r.Size)
			}
		case AgainstFork, AgainstRollback:
			if rep.PartsBy == 0 {
				rep.PartsBy = r.Size
			}
		}
	}
	return rep, nil
}

func auditOne(ctx context.Context, log CheckpointReader, v []note.Verifier, cur ledger.Checkpoint, s SavedCheckpoint) AgainstResult {
	r := AgainstResult{Source: s.Source}
	size, root, st, msg := openCheckpoint(s.Note, v)
	r.Size, r.Root, r.Status, r.Problem = size, root, st, msg
	if st != AgainstOK {
		return r
	}
	if size > cur.Size {
		r.Status = AgainstRollback
		r.Problem = fmt.Sprintf("the log has %d leaves, the saved checkpoint %d: the log was rolled back or its tail cut", cur.Size, size)
		return r
	}
	// The latest root must be a consistent extension of the saved root.
	if size == cur.Size {
		if root != cur.Root {
			r.Status = AgainstFork
			r.Problem = fmt.Sprintf("at size %d the log has another root than the saved checkpoint: the histories part at or before size %d", size, size)
			return r
		}
	} else if size > 0 {
		p, err := log.ConsistencyProof(ctx, size, cur.Size)
		if err != nil {
			r.Status = AgainstFork
			r.Problem = fmt.Sprintf("no consistency proof from size %d to %d: %v", size, cur.Size, err)
			return r
		}
		hs := make([][]byte, len(p.Hashes))
		for i := range p.Hashes {
			hs[i] = p.Hashes[i][:]
		}
		if err := proof.VerifyConsistency(rfc6962.DefaultHasher, size, cur.Size, hs, root[:], cur.Root[:]); err != nil {
			r.Status = AgainstFork
			r.Problem = fmt.Sprintf("the log's checkpoint of size %d does not extend the saved one of size %d (consistency proof fails): the histories part at or before size %d", cur.Size, size, size)
			return r
		}
	}
	// The log must still hold the checkpoint of that size, with that root.
	if size == 0 {
		return r
	}
	held, err := log.CheckpointAt(ctx, size)
	switch {
	case errors.Is(err, ledger.ErrNotFound) || ledger.ErrorCode(err) == ledger.CodeNotFound:
		r.Status = AgainstMissingCheckpoint
		r.Problem = fmt.Sprintf("the log extends the saved checkpoint but holds no checkpoint of size %d (deleted?)", size)
	case err != nil:
		r.Status = AgainstMissingCheckpoint
		r.Problem = fmt.Sprintf("read the log's checkpoint of size %d: %v", size, err)
	case held.Root != root:
		r.Status = AgainstFork
		r.Problem = fmt.Sprintf("the log's stored checkpoint of size %d has another root than the saved one", size)
	}
	return r
}

// openCheckpoint verifies a checkpoint note with v and parses its text
// (c2sp.org/tlog-checkpoint: origin, size, base64 root, optional extension
// lines); the origin must be v's name. Messages never quote the note.
func openCheckpoint(b []byte, vs []note.Verifier) (size uint64, root ledger.Hash, st AgainstStatus, msg string) {
	v := vs[0]
	n, err := note.Open(b, note.VerifierList(vs...))
	if err != nil {
		var inv *note.InvalidSignatureError
		var unv *note.UnverifiedNoteError
		switch {
		case errors.As(err, &inv):
			return 0, ledger.Hash{}, AgainstBadSignature, "the signature of key " + v.Name() + " does not verify: the checkpoint was edited"
		case errors.As(err, &unv):
			for _, s := range unv.Note.UnverifiedSigs {
				if s.Name == v.Name() {
					given := make([]string, len(vs))
					for i, kv := range vs {
						given[i] = fmt.Sprintf("%08x", kv.KeyHash())
					}
					return 0, ledger.Hash{}, AgainstKeyMismatch, fmt.Sprintf("signed by another key named %s (key id %08x; the key given has %s)", s.Name, s.Hash, strings.Join(given, ", "))
				}
			}
			return 0, ledger.Hash{}, AgainstKeyMismatch, "no signature by a key named " + v.Name() + " (the key given): another log's checkpoint, or the wrong key"
		}
		return 0, ledger.Hash{}, AgainstMalformed, "not a signed note"
	}
	lines := strings.SplitN(n.Text, "\n", 4)
	if len(lines) < 4 {
		return 0, ledger.Hash{}, AgainstMalformed, "checkpoint text has fewer than three lines"
	}
	size, err = strconv.ParseUint(lines[1], 10, 64)
	if err != nil || strconv.FormatUint(size, 10) != lines[1] {
		return 0, ledger.Hash{}, AgainstMalformed, "checkpoint size is not a decimal number"
	}
	rb, err := base64.StdEncoding.DecodeString(lines[2])
	if err != nil || len(rb) != len(root) {
		return 0, ledger.Hash{}, AgainstMalformed, "checkpoint root is not 32 bytes of base64"
	}
	copy(root[:], rb)
	if lines[0] != v.Name() {
		return size, root, AgainstKeyMismatch, "checkpoint origin is not the key's name"
	}
	return size, root, AgainstOK, ""
}
