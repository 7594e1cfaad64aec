package gates

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/evidence-ledger/ledger/ledger"
	"golang.org/x/mod/sumdb/note"
)

// SignedVerdict is a readiness verdict with its signature: Note is a signed
// note (golang.org/x/mod/sumdb/note) whose text is the canonical JSON of
// Readiness followed by a newline, signed with the log's key. Store Note
// (or this whole object as JSON) and check it with VerifyVerdict.
type SignedVerdict struct {
	Readiness *Readiness `json:"readiness"`
	Note      string     `json:"note"`
}

// TextSHA256 returns the hex SHA-256 of the signed text (the canonical
// verdict JSON and its newline).
func (v SignedVerdict) TextSHA256() string {
	text, _, _ := strings.Cut(v.Note, "\n\n")
	h := sha256.Sum256([]byte(text + "\n"))
	return hex.EncodeToString(h[:])
}

// VerdictText returns the canonical text of a readiness verdict: its
// canonical JSON (ledger.CanonicalBody) and a newline.
func VerdictText(r *Readiness) (string, error) {
	b, err := ledger.CanonicalBody(r)
	if err != nil {
		return "", fmt.Errorf("encode verdict: %w", err)
	}
	return string(b) + "\n", nil
}

// Sign signs the readiness verdict with the log key (keys.SignNote over
// VerdictText).
func Sign(r *Readiness, keys ledger.Keys) (SignedVerdict, error) {
	text, err := VerdictText(r)
	if err != nil {
		return SignedVerdict{}, err
	}
	n, err := keys.SignNote(text)
	if err != nil {
		return SignedVerdict{}, err
	}
	return SignedVerdict{Readiness: r, Note: n}, nil
}

// Verification errors, checkable with errors.Is.
var (
	// ErrVerdictSignature: the signature does not verify with the key, or the
	// note carries other or extra signatures.
	ErrVerdictSignature = errors.New("verdict signature does not verify")
	// ErrVerdictMalformed: not a signed note holding a canonical verdict.
	ErrVerdictMalformed = errors.New("malformed verdict")
)

// VerifyVerdict checks a signed verdict against the verifier key (the
// content of ledger.pub: "name+hash+base64"). data is either the signed
// note itself or a SignedVerdict JSON object. Any change fails: the text
// must verify, carry exactly one signature, use canonical base64, and be
// the canonical encoding of the verdict it decodes to; a JSON wrapper's
// readiness must equal the signed one. It returns the signed verdict.
func VerifyVerdict(data []byte, verifierKey string) (*Readiness, error) {
	msg := data
	var wrapped SignedVerdict
	trim := bytes.TrimSpace(data)
	var probe map[string]json.RawMessage
	// A raw note also starts with '{' (its text is JSON) but is followed by
	// its signature lines, so it does not parse as one JSON object.
	if len(trim) > 0 && trim[0] == '{' && json.Unmarshal(trim, &probe) == nil {
		if err := ledger.DecodeStrict(trim, &wrapped); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrVerdictMalformed, err)
		}
		if wrapped.Note == "" {
			return nil, fmt.Errorf("%w: JSON has no note", ErrVerdictMalformed)
		}
		msg = []byte(wrapped.Note)
	}
	v, err := note.NewVerifier(strings.TrimSpace(verifierKey))
	if err != nil {
		return nil, fmt.Errorf("verifier key: %w", err)
	}
	n, err := note.Open(msg, note.VerifierList(v))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrVerdictSignature, err)
	}
	if len(n.Sigs) != 1 || len(n.UnverifiedSigs) != 0 {
		return nil, fmt.Errorf("%w: want exactly one signature by %s, got %d verified and %d unknown", ErrVerdictSignature, v.Name(), len(n.Sigs), len(n.UnverifiedSigs))
	}
	if _, err := base64.StdEncoding.Strict().DecodeString(n.Sigs[0].Base64); err != nil {
		return nil, fmt.Errorf("%w: signature is not canonical base64", ErrVerdictSignature)
	}
	var rd Readiness
	if err := ledger.DecodeStrict([]byte(n.Text), &rd); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrVerdictMalformed, err)
	}
	again, err := VerdictText(&rd)
	if err != nil || again != n.Text {
		return nil, fmt.Errorf("%w: signed text is not the canonical verdict encoding", ErrVerdictMalformed)
	}
	if wrapped.Readiness != nil {
		wt, err := VerdictText(wrapped.Readiness)
		if err != nil || wt != n.Text {
			return nil, fmt.Errorf("%w: the JSON readiness differs from the signed text", ErrVerdictSignature)
		}
	}
	return &rd, nil
}

// Replay re-evaluates a verdict against store: the checkpoint of its size
// must have its root, the release definition entry it names must lie inside
// that checkpoint, and evaluating that definition as of that size at its
// ComputedAt must give the same verdict. It returns the replayed verdict and
// the differences (none when it matches).
func Replay(ctx context.Context, store ledger.Reader, rd *Readiness) (*Readiness, []string, error) {
	cp, err := store.CheckpointAt(ctx, rd.Checkpoint.Size)
	if err != nil {
		return nil, nil, fmt.Errorf("checkpoint %d: %w", rd.Checkpoint.Size, err)
	}
	if cp.Root != rd.Checkpoint.Root {
		return nil, []string{fmt.Sprintf("checkpoint %d has root %s in this ledger, verdict names %s", cp.Size, cp.Root, rd.Checkpoint.Root)}, nil
	}
	e, err := store.Entry(ctx, rd.Release.ID)
	if err != nil {
		return nil, nil, fmt.Errorf("release entry %s: %w", rd.Release.ID, err)
	}
	if e.Index != rd.Release.Index || e.Index >= cp.Size {
		return nil, []string{fmt.Sprintf("release entry %s is at index %d, verdict says %d (checkpoint size %d)", e.ID, e.Index, rd.Release.Index, cp.Size)}, nil
	}
	rel, err := DecodeRelease(e)
	if err != nil {
		return nil, nil, err
	}
	again, err := Evaluate(ctx, store, rel, EvalOptions{Now: rd.ComputedAt, AsOfSize: rd.Checkpoint.Size})
	if err != nil {
		return nil, nil, err
	}
	return again, diffVerdicts(rd, again), nil
}

func diffVerdicts(a, b *Readiness) []string {
	var out []string
	if a.Ready != b.Ready {
		out = append(out, fmt.Sprintf("ready: verdict %v, replay %v", a.Ready, b.Ready))
	}
	if a.PinsDigest != b.PinsDigest {
		out = append(out, fmt.Sprintf("pins digest: verdict %s, replay %s", a.PinsDigest, b.PinsDigest))
	}
	bg := map[string]GateResult{}
	for _, g := range b.Gates {
		bg[g.ID] = g
	}
	for _, g := range a.Gates {
		h, ok := bg[g.ID]
		if !ok {
			out = append(out, "gate "+g.ID+": not in the replay")
			continue
		}
		if g.State != h.State || g.Reason != h.Reason {
			out = append(out, fmt.Sprintf("gate %s: verdict %s (%s), replay %s (%s)", g.ID, g.State, g.Reason, h.State, h.Reason))
			continue
		}
		x, _ := json.Marshal(g)
		y, _ := json.Marshal(h)
		if !bytes.Equal(x, y) {
			out = append(out, "gate "+g.ID+": same state and reason, different evidence lists")
		}
	}
	if len(a.Gates) != len(b.Gates) {
		out = append(out, fmt.Sprintf("gates: verdict has %d, replay %d", len(a.Gates), len(b.Gates)))
	}
	if len(out) == 0 {
		x, _ := VerdictText(a)
		y, _ := VerdictText(b)
		if x != y {
			out = append(out, "verdict texts differ")
		}
	}
	return out
}
