package gates

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
)

// A run is counted once however many records carry it (TRUST.md rule 1: a
// record token must not make the ledger believe a count it did not run).
// Two records are the same run when they share a run key:
//
//   - "dsse:" + signer key id + SHA-256 of the DSSE payload bytes, for a
//     signed record: re-posting a runner's envelope, with other or extra
//     signatures around the same payload, is the same signed run;
//   - "body:" + SHA-256 of the record apart from recorded_by and signer,
//     for every record: the same evidence recorded again by another token,
//     or a signed run's body re-posted unsigned, is the same run.
//
// Of the records sharing a key, the first recorded (lowest log index) is
// the run; every later one is a duplicate, listed as baseline with the
// record it repeats.

// runKeys returns e's run keys (see above). A signed record whose kept
// envelope does not decode gets no "dsse:" key; it cannot pass a signed_by
// gate anyway (signerMismatch checks the envelope).
func runKeys(e *ledger.Evidence) []string {
	keys := make([]string, 0, 2)
	if s := e.Signer; s != nil {
		if d, ok := payloadDigest(s.Envelope); ok {
			keys = append(keys, "dsse:"+s.KeyID+":"+d)
		}
	}
	c := *e
	c.Signer, c.RecordedBy, c.Details = nil, nil, nil
	b, err := ledger.EvidenceJSON(nil, &c)
	if err != nil {
		return keys
	}
	h := sha256.New()
	h.Write(b)
	h.Write([]byte{0})
	h.Write(e.Details)
	return append(keys, "body:"+hex.EncodeToString(h.Sum(nil)))
}

// payloadDigest returns the hex SHA-256 of the decoded payload of the DSSE
// envelope env (DSSE v1.0 envelope.md: the payload is base64, standard or
// URL alphabet, padded or not), and whether env decoded.
func payloadDigest(env json.RawMessage) (string, bool) {
	var probe struct {
		Payload string `json:"payload"`
	}
	if json.Unmarshal(env, &probe) != nil || probe.Payload == "" {
		return "", false
	}
	p := strings.TrimRight(probe.Payload, "=")
	enc := base64.RawStdEncoding
	if strings.ContainsAny(p, "-_") {
		enc = base64.RawURLEncoding
	}
	b, err := enc.DecodeString(p)
	if err != nil {
		return "", false
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), true
}

// runSet decides which of a gate's candidate records are duplicates of an
// earlier record of the same run. Not safe for concurrent use; one per
// gate evaluation.
type runSet struct {
	cands []*ledger.EvidenceEntry // registered, keys not yet computed
	first map[string]runFirst     // run key -> first record carrying it
	keys  map[uint64][]string     // log index -> its run keys
}

type runFirst struct {
	index uint64
	id    string
}

func newRunSet() *runSet {
	return &runSet{first: map[string]runFirst{}, keys: map[uint64][]string{}}
}

// add registers e as a candidate. Its run keys are computed when a
// duplicate is first asked for, and only when two or more candidates are
// registered (one record alone repeats nothing): readiness reads many
// gates of one record each.
func (rs *runSet) add(e *ledger.EvidenceEntry) {
	rs.cands = append(rs.cands, e)
}

func (rs *runSet) index() {
	for _, e := range rs.cands {
		ks := runKeys(&e.Evidence)
		rs.keys[e.Index] = ks
		for _, k := range ks {
			if f, ok := rs.first[k]; !ok || e.Index < f.index {
				rs.first[k] = runFirst{index: e.Index, id: e.ID}
			}
		}
	}
	rs.cands = nil
}

// duplicate returns why the candidate e does not count as a run of its
// own (it repeats an earlier record), or "" when it is the first record of
// each of its runs.
func (rs *runSet) duplicate(e *ledger.EvidenceEntry) string {
	if len(rs.keys) == 0 && len(rs.cands) < 2 {
		return ""
	}
	if len(rs.cands) > 0 {
		rs.index()
	}
	for _, k := range rs.keys[e.Index] {
		f := rs.first[k]
		if f.index == e.Index {
			continue
		}
		if strings.HasPrefix(k, "dsse:") {
			return fmt.Sprintf(DuplicatePrefix+"%s: the same payload signed by key %s, recorded again (one run counts once)", f.id, e.Evidence.Signer.KeyID)
		}
		return fmt.Sprintf(DuplicatePrefix+"%s: the same evidence, recorded again%s (one run counts once)", f.id, recordedBy(e.Evidence.RecordedBy))
	}
	return ""
}

// DuplicatePrefix starts the baseline reason of a record that repeats an
// earlier record of the same run; the dashboard and clients may match it.
const DuplicatePrefix = "duplicate of "

func recordedBy(r *ledger.Recorder) string {
	if r == nil || r.Token == nil {
		return ""
	}
	return fmt.Sprintf(" by token %s (%s)", r.Token.Name, r.Token.ID)
}

// freshFrom is when run e is fresh from for a freshness bound: the earlier
// of its finished_at and the time its leaf was recorded, so that no stored
// record, whatever its finished_at, is fresher than when the log received
// it. A zero recordedAt (a record not read from a log) leaves finished_at.
func freshFrom(e *ledger.Evidence, recordedAt time.Time) time.Time {
	if !recordedAt.IsZero() && recordedAt.Before(e.FinishedAt) {
		return recordedAt
	}
	return e.FinishedAt
}
