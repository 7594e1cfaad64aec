package web

import (
	"bytes"
	"encoding/json"
	"errors"
	"mime"
	"net/http"
	"strconv"
	"strings"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/ledger/tlog"
)

// writeJSON writes v with status, rendering into a buffer first.
func (s *Server) writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		s.log.Error("encode response", "err", err)
		status, b = http.StatusInternalServerError, []byte(`{"code":"internal","message":"internal error"}`)
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}

// writeJSONCompact writes v without indentation, for append answers: they
// carry an inclusion proof per record, and indentation would multiply their
// size and encoding work on the ingest path.
func (s *Server) writeJSONCompact(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		s.log.Error("encode response", "err", err)
		status, b = http.StatusInternalServerError, []byte(`{"code":"internal","message":"internal error"}`)
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}

// writeError answers err as JSON {code, message, field} through the error
// table; internal errors are logged with detail.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	if r.Context().Err() != nil && errors.Is(err, r.Context().Err()) {
		// The client went away (or its deadline passed): nobody reads an
		// answer, and it is not a server failure. Logged as what it is;
		// the access line records 499, nginx's "client closed request".
		s.log.Info("request ended by the client", "method", r.Method, "path", r.URL.Path)
		w.WriteHeader(499)
		return
	}
	st, body := errorBody(err)
	if body.Code == ledger.CodeStorageFull {
		s.storage.degrade(body.Message, s.cfg.Now())
	}
	var te *tlog.TamperError
	switch {
	case body.Code == ledger.CodeUnavailable && !errors.As(err, &te) && w.Header().Get("Retry-After") != "" || errorRetries(err):
		// Load shedding or a database that is away: the answer says when
		// to retry; not a failure of the server's own.
		s.log.Warn("request refused for now", "method", r.Method, "path", r.URL.Path, "err", err)
	case st >= 500:
		s.log.Error("request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	}
	if st == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="ledger"`)
	}
	if st == http.StatusTooManyRequests {
		w.Header().Set("Retry-After", "60")
	}
	setRetryAfter(w, st, err)
	s.writeJSON(w, st, body)
}

// readBody reads a request body capped at MaxBody, within the ingest
// budget: it is charged for the declared Content-Length (MaxBody when
// none is declared) before reading, then for the bytes read (bodyCharge).
// A request the budget has no room for is refused, CodeUnavailable with a
// Retry-After header, before a byte of its body is read.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	if r.ContentLength > s.cfg.MaxBody {
		// Declared too large: refused before anything is charged or read.
		return nil, ledger.Errorf(ledger.CodeTooLarge, "request body is larger than the limit of %d bytes (Content-Length %d): send fewer records per request, or raise the server's --max-body", s.cfg.MaxBody, r.ContentLength)
	}
	want := s.cfg.MaxBody
	if r.ContentLength >= 0 {
		want = min(r.ContentLength, want)
	}
	c, _ := r.Context().Value(chargeKey).(*bodyCharge)
	if c != nil {
		if err := c.charge(r.Context(), IngestFactor*want); err != nil {
			if ledger.ErrorCode(err) == ledger.CodeUnavailable {
				w.Header().Set("Retry-After", strconv.Itoa(retryAfter(s.ingest.wait)))
			}
			return nil, err
		}
	}
	r.Body = http.MaxBytesReader(w, r.Body, s.cfg.MaxBody)
	// One buffer of the declared size (and bytes.Buffer's read margin)
	// instead of io.ReadAll's doublings.
	buf := bytes.NewBuffer(make([]byte, 0, min(want, 64<<10)+bytes.MinRead))
	if r.ContentLength >= 0 {
		buf = bytes.NewBuffer(make([]byte, 0, want+bytes.MinRead))
	}
	_, err := buf.ReadFrom(r.Body)
	b := buf.Bytes()
	if c != nil && err == nil {
		c.lower(IngestFactor * int64(len(b)))
	}
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, ledger.Errorf(ledger.CodeTooLarge, "request body is larger than the limit of %d bytes: send fewer records per request, or raise the server's --max-body", s.cfg.MaxBody)
		}
		return nil, ledger.FieldError("", "read body: %v", err)
	}
	return b, nil
}

// decodeJSON reads a capped body and decodes it strictly into v.
func (s *Server) decodeJSON(w http.ResponseWriter, r *http.Request, v any) error {
	if err := requireJSON(r); err != nil {
		return err
	}
	b, err := s.readBody(w, r)
	if err != nil {
		return err
	}
	return ledger.DecodeStrict(b, v)
}

// requireJSON accepts a request without Content-Type, or one whose media
// type is application/json or a +json suffix type. Media types are parsed
// with mime.ParseMediaType and compared case-insensitively (RFC 9110
// section 8.3.1); a charset parameter must be utf-8 (RFC 8259 section 8.1).
func requireJSON(r *http.Request) error {
	ct := r.Header.Get("Content-Type")
	if ct == "" {
		return nil
	}
	mt, params, err := mime.ParseMediaType(ct)
	if err != nil {
		return ledger.Errorf(ledger.CodeUnsupported, "Content-Type is not a media type (RFC 9110 section 8.3): send application/json")
	}
	if mt != "application/json" && !strings.HasSuffix(mt, "+json") {
		return ledger.Errorf(ledger.CodeUnsupported, "Content-Type %q is not supported here: send application/json", clipText(mt))
	}
	if cs, ok := params["charset"]; ok && !strings.EqualFold(cs, "utf-8") {
		return ledger.Errorf(ledger.CodeUnsupported, "charset %q is not supported: JSON is UTF-8", clipText(cs))
	}
	return nil
}

// clipText shortens s for an error message.
func clipText(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

// idempotencyKey returns the request's Idempotency-Key scoped to the
// token that sent it ("" when none is given): another token reusing the
// same key gets its own answer, never the first token's. Errors name
// the header (at most 256 bytes, no control characters).
func idempotencyKey(r *http.Request) (string, error) {
	k := r.Header.Get("Idempotency-Key")
	if k == "" {
		return "", nil
	}
	if len(k) > 256 {
		return "", ledger.FieldError("Idempotency-Key", "at most 256 bytes")
	}
	for _, c := range k {
		if c < 0x20 || c == 0x7f {
			return "", ledger.FieldError("Idempotency-Key", "control characters are not allowed")
		}
	}
	t, _ := TokenFrom(r.Context())
	return "token:" + t.ID + "\n" + k, nil
}
