package web

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/evidence-ledger/ledger/admit"
	"github.com/evidence-ledger/ledger/ingest"
	"github.com/evidence-ledger/ledger/ledger"
	"github.com/go-chi/chi/v5"
	"golang.org/x/sync/semaphore"
)

// evidenceFormat is the format the Content-Type of a POST
// /api/v1/evidence names (ingest's media types; none, application/json
// and other +json types are the ledger's own JSON, which requireJSON then
// checks). A DSSE envelope is in-toto or native by its payload type
// (inTotoEnvelope).
func evidenceFormat(r *http.Request) (string, error) {
	mt := mediaType(r)
	if mt == "" || mt == "application/json" {
		return ingest.FormatEvidence, nil
	}
	f, err := ingest.FormatOf(r.Header.Get("Content-Type"))
	if err != nil {
		if strings.HasSuffix(mt, "+json") {
			return ingest.FormatEvidence, nil // requireJSON answers it
		}
		return "", err
	}
	return f, nil
}

// ingestParams reads what a format lacks from the query string of
// POST /api/v1/evidence: lane, backend, repository, commit, tree, and
// artifact=NAME=sha256:HEX (repeatable); and the server's Sigstore trust
// setting for bundles.
func (s *Server) ingestParams(r *http.Request) (ingest.Params, error) {
	q := r.URL.Query()
	p := ingest.Params{Lane: q.Get("lane"), Backend: ledger.Backend(q.Get("backend")),
		Repository: q.Get("repository"), Commit: q.Get("commit"), Tree: q.Get("tree"), Now: s.cfg.Now(),
		SigstoreTrust: s.cfg.Sigstore}
	if t, ok := TokenFrom(r.Context()); ok {
		p.Token = t.Name
	}
	arts, err := ingest.ParseArtifacts(q["artifact"])
	if err != nil {
		return p, err
	}
	p.Artifacts = arts
	return p, nil
}

// ingestRecords admits body of format (not the native one) as the
// request's principal (admit.Ingest) and returns the records of one
// atomic append, the original first. Nothing is returned to append on any
// error.
func (s *Server) ingestRecords(r *http.Request, format string, body []byte) ([]ledger.Record, error) {
	p, err := s.ingestParams(r)
	if err != nil {
		return nil, err
	}
	_, recs, err := admit.Ingest(r.Context(), s.store, principalOf(r), format, body, p)
	return recs, err
}

// originalByID loads the original an id names: an original entry's own
// id, or an evidence entry's id whose details name an original (checked
// against the named digest).
func (s *Server) originalByID(r *http.Request, id string) (ledger.Entry, ledger.Original, error) {
	e, err := s.store.Entry(r.Context(), id)
	if err != nil {
		return e, ledger.Original{}, err
	}
	var want string
	if e.Kind == ledger.KindEvidence {
		ev, err := ledger.ParseEvidence(e.Body)
		if err != nil {
			return e, ledger.Original{}, err
		}
		var d struct {
			Original *ingest.OriginalRef `json:"original"`
		}
		if len(ev.Details) == 0 || json.Unmarshal(ev.Details, &d) != nil || d.Original == nil {
			return e, ledger.Original{}, ledger.NotFound("evidence %q names no original: it was recorded as the ledger's own JSON", id)
		}
		want = d.Original.Digest
		if e, err = s.store.Entry(r.Context(), d.Original.ID); err != nil {
			return e, ledger.Original{}, err
		}
	}
	if e.Kind != ledger.KindOriginal {
		return e, ledger.Original{}, ledger.NotFound("entry %q is a %s entry, not an original", id, e.Kind)
	}
	var o ledger.Original
	if err := json.Unmarshal(e.Body, &o); err != nil {
		return e, o, err
	}
	if want != "" && o.Digest != want {
		return e, o, ledger.Errorf(ledger.CodeInternal, "original %s does not have the digest its evidence names", e.ID)
	}
	return e, o, nil
}

// handleGetOriginal serves the exact bytes of an original (GET
// /api/v1/originals/{id}; id of the original or of evidence decoded from
// it) as an attachment of its media type, with its digest in the
// Digest header (RFC 3230 "sha-256=" base64 form) and X-Ledger-Entry.
func (s *Server) handleGetOriginal(w http.ResponseWriter, r *http.Request) {
	e, o, err := s.originalByID(r, chi.URLParam(r, "id"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	hexsum := strings.TrimPrefix(o.Digest, "sha256:")
	sum, _ := hex.DecodeString(hexsum)
	w.Header().Set("Content-Type", o.MediaType)
	w.Header().Set("Content-Disposition", fmt.Sprintf(`attachment; filename="%s.%s"`, e.ID, originalExt(o.Format)))
	w.Header().Set("Digest", "sha-256="+base64.StdEncoding.EncodeToString(sum))
	w.Header().Set("X-Ledger-Entry", e.ID)
	w.Header().Set("Content-Length", strconv.Itoa(len(o.Content)))
	w.WriteHeader(http.StatusOK)
	w.Write(o.Content)
}

func originalExt(format string) string {
	switch format {
	case ingest.FormatJUnit, ingest.FormatTestNG:
		return "xml"
	case ingest.FormatGoTest:
		return "jsonl"
	}
	return "json"
}

// IngestFactor is how many bytes of memory the server may need, at its
// peak, for each byte of a request body it reads and decodes: the body
// itself, the decoded input, the records and leaves built from it, the
// garbage collector's headroom over them, and the garbage of the requests
// that held the budget before (given back when they end, collected
// later). It is measured, not derived: scripts/ingestmem sends 16
// concurrent maximum-size bodies of every input format to a real server
// and reads its peak resident set (RELIABILITY.md, "Ingest memory", has
// the figures); the factor is the largest cost per admitted body byte
// seen (DSSE envelopes, about 48: the body, the verified payload, the
// Statement, the original's base64 body and leaf, the evidence; the
// runner-key check and the store each canonicalize the payload or the
// record again), with a third more for the spread between runs.
const IngestFactor = 64

// DefaultIngestBudget is the ingest budget a server with body cap
// maxBody gets unless configured: room for two maximum-size bodies being
// decoded at once (Config.IngestBudget), any number of small ones beside
// them. Decoding is CPU work: more at once would not record them sooner
// on a machine of a few cores.
func DefaultIngestBudget(maxBody int64) int64 { return 2 * IngestFactor * maxBody }

// ingestWait is how long a request waits for room in the ingest budget
// before it is refused (503 with Retry-After), unless Config.IngestWait
// says otherwise.
const ingestWait = 10 * time.Second

// ingestBudget is the server's budget of memory for request bodies being
// read and decoded: a weighted semaphore of Config.IngestBudget bytes. A
// request is charged IngestFactor times its declared Content-Length (the
// body cap when it declares none) before its body is read, the charge is
// lowered to IngestFactor times the bytes actually read, and all of it is
// given back when the request ends (Server.ServeHTTP). A charge larger
// than the whole budget is cut to the budget, so one maximum-size body is
// always admitted alone. Safe for concurrent use.
type ingestBudget struct {
	sem   *semaphore.Weighted
	total int64
	wait  time.Duration
}

func newIngestBudget(total int64, wait time.Duration) *ingestBudget {
	return &ingestBudget{sem: semaphore.NewWeighted(total), total: total, wait: wait}
}

// bodyCharge is one request's hold on the ingest budget. Its methods are
// called from the request's goroutine only.
type bodyCharge struct {
	b    *ingestBudget
	held int64
}

const chargeKey ctxKey = 3

// charge takes n more bytes of the budget for the request of ctx (its
// total cut to the budget), waiting at most the budget's wait. It fails
// with ctx's error when the client went away, else with a CodeUnavailable
// error naming the budget.
func (c *bodyCharge) charge(ctx context.Context, n int64) error {
	n = min(n, c.b.total-c.held)
	if n <= 0 {
		return nil
	}
	wctx, cancel := context.WithTimeout(ctx, c.b.wait)
	defer cancel()
	if err := c.b.sem.Acquire(wctx, n); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return ledger.Errorf(ledger.CodeUnavailable, "the server's ingest budget of %s (--ingest-budget, memory for request bodies being decoded) is in use by other requests: nothing was recorded; retry after %s",
			sizeText(c.b.total), secondsText(retryAfter(c.b.wait)))
	}
	c.held += n
	return nil
}

// lower gives back all but n bytes of the charge.
func (c *bodyCharge) lower(n int64) {
	if n = max(n, 0); n < c.held {
		c.b.sem.Release(c.held - n)
		c.held = n
	}
}

// release gives the whole charge back.
func (c *bodyCharge) release() { c.lower(0) }

// retryAfter is the Retry-After, in whole seconds, a request refused by a
// budget that waits d gets: at least 1.
func retryAfter(d time.Duration) int { return max(1, int((d+time.Second-1)/time.Second)) }

func secondsText(n int) string {
	if n == 1 {
		return "1 second"
	}
	return strconv.Itoa(n) + " seconds"
}

// sizeText writes n bytes in MiB, or in bytes below one MiB.
func sizeText(n int64) string {
	if n < 1<<20 {
		return strconv.FormatInt(n, 10) + " bytes"
	}
	return strconv.FormatFloat(float64(n)/(1<<20), 'f', -1, 64) + " MiB"
}
