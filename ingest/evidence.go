package ingest

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"strconv"
	"strings"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
)

// OriginalRef is how evidence names the original it was decoded from.
type OriginalRef struct {
	ID        string `json:"id"`
	Digest    string `json:"digest"`
	Format    string `json:"format"`
	MediaType string `json:"media_type"`
}

// Details is the shape of the evidence details an ingested record carries.
// Cases are the run's cases that fit within ledger.MaxDetailsBytes (see
// Details.summarize): every failing case first, with its message where
// there is room; CasesOmitted counts those left out, which the original
// keeps. FailingOmitted is how many failing case ids the evidence's
// failing_cases leaves out past ledger.MaxFailingCases (the first ones in
// the input's order are kept).
type Details struct {
	Format        string      `json:"format"`
	Original      OriginalRef `json:"original"`
	Counts        Counts      `json:"counts"`
	Declared      *Declared   `json:"declared,omitempty"`
	CountMismatch string      `json:"count_mismatch,omitempty"`
	Truncated     bool        `json:"truncated,omitempty"`
	Notes         []string    `json:"notes,omitempty"`
	PredicateType string      `json:"predicate_type,omitempty"`
	Identity      *Identity   `json:"runner_identity,omitempty"`
	// Provenance is set only by the server, from a verified provenance
	// Statement (ledger.ProvenanceField).
	Provenance     *ledger.Provenance `json:"provenance,omitempty"`
	Cases          []Case             `json:"cases"`
	CasesOmitted   *CasesOmitted      `json:"cases_omitted,omitempty"`
	FailingOmitted int                `json:"failing_cases_omitted,omitempty"`
}

// OriginalEntryID is the entry id the original gets in the log.
func OriginalEntryID(o ledger.Original) (string, error) {
	b, err := originalBody(o)
	if err != nil {
		return "", err
	}
	return ledger.EntryID(ledger.KindOriginal, b), nil
}

// originalBody is the canonical body the store hashes for o: the bytes
// ledger.PrepareRecord(ledger.KindOriginal, ...) returns for it, after
// the same checks in the same order, written straight into one buffer of
// the final size. Going through PrepareRecord would encode the content to
// base64, decode it back and encode it again, about five times the
// original's size in allocations for one result.
func originalBody(o ledger.Original) ([]byte, error) {
	// The ledger's checks of format and media type, on a one-byte
	// stand-in for the content.
	probe := ledger.NewOriginal(o.Format, o.MediaType, []byte{0})
	pb, err := json.Marshal(&probe)
	if err != nil {
		return nil, err
	}
	if _, err := ledger.PrepareRecord(ledger.KindOriginal, pb); err != nil {
		return nil, err
	}
	if len(o.Content) == 0 {
		return nil, ledger.FieldError("content", "required: the original's bytes, base64")
	}
	want := ledger.NewOriginal(o.Format, o.MediaType, o.Content)
	if o.Digest != want.Digest {
		return nil, ledger.FieldError("digest", "is not the SHA-256 of content")
	}
	if o.Size != want.Size {
		return nil, ledger.FieldError("size", "is %d, content has %d bytes", o.Size, want.Size)
	}
	// The field order and spelling of ledger.Original's JSON encoding,
	// strings unescaped for HTML as the ledger's canonical encoder leaves
	// them.
	format, media, digest := jsonString(o.Format), jsonString(o.MediaType), jsonString(o.Digest)
	size := strconv.Itoa(o.Size)
	n := len(`{"format":,"media_type":,"digest":,"size":,"content":""}`) + len(format) + len(media) + len(digest) + len(size) + base64.StdEncoding.EncodedLen(len(o.Content))
	b := make([]byte, 0, n)
	b = append(b, `{"format":`...)
	b = append(b, format...)
	b = append(b, `,"media_type":`...)
	b = append(b, media...)
	b = append(b, `,"digest":`...)
	b = append(b, digest...)
	b = append(b, `,"size":`...)
	b = append(b, size...)
	b = append(b, `,"content":"`...)
	b = base64.StdEncoding.AppendEncode(b, o.Content)
	return append(b, `"}`...), nil
}

// jsonString is s as a JSON string, without HTML escaping.
func jsonString(s string) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.Encode(s) // a string always encodes
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}

// subject merges the run's own subject with the flags; a disagreement is
// refused naming the flag.
func (p Params) subject(r *Run) (ledger.Subject, error) {
	s := ledger.Subject{Repository: p.Repository, Commit: p.Commit, Tree: p.Tree, Artifacts: map[string]string{}}
	for k, v := range p.Artifacts {
		s.Artifacts[k] = v
	}
	if r.Subject != nil {
		own := r.Subject
		for _, f := range []struct{ name, flag, own string }{
			{"repository", p.Repository, own.Repository}, {"commit", p.Commit, own.Commit}, {"tree", p.Tree, own.Tree},
		} {
			if f.own != "" && f.flag != "" && f.own != f.flag {
				return s, ledger.FieldError(f.name, "the input's subject says %q, the flag says %q", clip(f.own), clip(f.flag))
			}
		}
		if own.Repository != "" {
			s.Repository = own.Repository
		}
		if own.Commit != "" {
			s.Commit = own.Commit
		}
		if own.Tree != "" {
			s.Tree = own.Tree
		}
		for name, d := range own.Artifacts {
			if flag, ok := p.Artifacts[name]; ok && flag != d {
				return s, ledger.FieldError("artifact", "the input's subject pins %q to %s, the flag to %s", clip(name), clip(d), clip(flag))
			}
			s.Artifacts[name] = d
		}
	}
	if len(s.Artifacts) == 0 {
		s.Artifacts = nil
	}
	return s, nil
}

// evidence builds the evidence record of run r read from orig, whose
// entry id is id (OriginalEntryID). The rule:
// cases_total counts every case that was not skipped and cases_exact the
// passed ones; the status is error for a cut-off input, failed when any
// case failed or errored, inconclusive when a case was flaky or
// incomplete, when no case ran or when the file's own counts disagree with
// the cases found, and passed otherwise. failing_cases names every
// failing case (failed, error, flaky, incomplete) up to
// ledger.MaxFailingCases, the first in the input's order; the details
// keep the cases that fit (Details).
func (p Params) evidence(r *Run, orig ledger.Original, id string) (ledger.Evidence, error) {
	var ev ledger.Evidence
	if !ledger.ValidLane(p.Lane) {
		return ev, ledger.FieldError("lane", "required for %s input (name/vN), got %q", orig.Format, clip(p.Lane))
	}
	if !p.Backend.Valid() {
		return ev, ledger.FieldError("backend", "required for %s input: one of %s, got %q", orig.Format, ledger.BackendList(), clip(string(p.Backend)))
	}
	subj, err := p.subject(r)
	if err != nil {
		return ev, err
	}
	if r.Provenance != nil {
		// Provenance counts only from verified bytes: the decoder that
		// verified the signature set the identity.
		if r.Identity == nil || r.Identity.Kind == "" {
			return ev, ledger.FieldError("predicateType", "SLSA provenance is recorded only from a verified signature (a DSSE envelope of a registered runner key, a Sigstore bundle)")
		}
		r.Provenance.VerifiedBy = r.Identity.Kind
	}
	c := r.Tally()
	d := Details{Format: orig.Format, Original: OriginalRef{ID: id, Digest: orig.Digest, Format: orig.Format, MediaType: orig.MediaType},
		Counts: c, Declared: r.Declared, CountMismatch: r.Declared.mismatch(c), Truncated: r.Truncated, Notes: keptNotes(r.Notes),
		PredicateType: r.PredicateType, Identity: r.Identity, Provenance: r.Provenance}
	var failingIDs []string
	for _, k := range r.Cases {
		if failing(k.Outcome) {
			if len(failingIDs) == ledger.MaxFailingCases {
				d.FailingOmitted++
				continue
			}
			failingIDs = append(failingIDs, k.ID)
		}
	}
	if err := d.summarize(r); err != nil {
		return ev, err
	}
	details, err := json.Marshal(d)
	if err != nil {
		return ev, err
	}
	ev = ledger.Evidence{Lane: p.Lane, Subject: subj, Backend: p.Backend, Control: ledger.ControlNone,
		CasesExact: c.Passed, CasesTotal: c.Tests - c.Skipped, FailingCases: failingIDs, Details: details,
		StartedAt: r.Started, FinishedAt: r.Finished, Signer: r.Signer}
	switch {
	case r.Truncated:
		ev.Status = ledger.StatusError
	case c.Failed > 0 || c.Errors > 0:
		ev.Status = ledger.StatusFailed
	case c.Flaky > 0 || c.Incomplete > 0 || ev.CasesTotal == 0 || d.CountMismatch != "":
		ev.Status = ledger.StatusInconclusive
	default:
		ev.Status = ledger.StatusPassed
	}
	if ev.StartedAt.IsZero() || ev.FinishedAt.IsZero() {
		now := p.Now
		if now.IsZero() {
			now = time.Now()
		}
		ev.StartedAt, ev.FinishedAt = now, now
	}
	if ev.FinishedAt.Before(ev.StartedAt) {
		ev.FinishedAt = ev.StartedAt
	}
	if err := ev.Validate(); err != nil {
		return ev, err
	}
	ev.Normalize()
	return ev, nil
}

// ParseArtifacts reads artifact pins given as "NAME=sha256:HEX" (the
// --artifact flag, the artifact query parameter) into a map; a malformed
// or repeated pin is a CodeInvalid error naming "artifact".
func ParseArtifacts(pins []string) (map[string]string, error) {
	if len(pins) == 0 {
		return nil, nil
	}
	out := make(map[string]string, len(pins))
	for _, p := range pins {
		name, d, ok := strings.Cut(p, "=")
		if !ok || name == "" || !ledger.ValidDigest(d) {
			return nil, ledger.FieldError("artifact", "want NAME=sha256:<64 lowercase hex>, got %q", clip(p))
		}
		if old, dup := out[name]; dup && old != d {
			return nil, ledger.FieldError("artifact", "artifact %q is pinned twice", clip(name))
		}
		out[name] = d
	}
	return out, nil
}
