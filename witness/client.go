package witness

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"

	"golang.org/x/mod/sumdb/note"

	"github.com/evidence-ledger/ledger/ledger"
)

// Client asks one witness to cosign checkpoints (c2sp.org/tlog-witness,
// add-checkpoint). A Client is safe for concurrent use; the witness itself
// serializes requests for one log.
type Client struct {
	// Name is the witness's name in the policy (used in errors).
	Name string
	// URL is the witness's submission prefix; requests go to
	// URL + "/add-checkpoint".
	URL string
	// Verifier checks the cosignatures the witness returns.
	Verifier note.Verifier
	// HTTP is the client used; nil means one with a 10 s timeout.
	HTTP *http.Client
}

// The errors of an add-checkpoint request, as the witness answered
// (c2sp.org/tlog-witness). A *StatusError wraps one of them; errors.Is
// tells them apart.
var (
	ErrBadRequest = errors.New("bad request (400)")
	// ErrForbidden: no signature on the checkpoint verifies against a log
	// key the witness trusts (403). litewitness also answers 403 for an
	// origin it does not know.
	ErrForbidden = errors.New("checkpoint signature not trusted (403)")
	// ErrUnknownLog: the witness does not know the checkpoint's origin (404).
	ErrUnknownLog = errors.New("unknown log (404)")
	// ErrBadProof: the consistency proof from the witness's size does not
	// verify (422): the checkpoint is not an extension of what the witness
	// cosigned, that is a fork, unless the proof itself is wrong.
	ErrBadProof = errors.New("consistency proof refused (422)")
	// ErrUnavailable: the witness could not be reached or answered 5xx.
	ErrUnavailable = errors.New("unavailable")
)

// StatusError is a refused add-checkpoint request: the witness, the HTTP
// status and a short printable excerpt of its answer.
type StatusError struct {
	Witness string
	Code    int
	Message string
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("witness %s answered %d: %s", e.Witness, e.Code, e.Message)
}

// Unwrap returns the sentinel error of the status code.
func (e *StatusError) Unwrap() error {
	switch {
	case e.Code == http.StatusBadRequest:
		return ErrBadRequest
	case e.Code == http.StatusForbidden:
		return ErrForbidden
	case e.Code == http.StatusNotFound:
		return ErrUnknownLog
	case e.Code == http.StatusUnprocessableEntity:
		return ErrBadProof
	case e.Code >= 500:
		return ErrUnavailable
	}
	return nil
}

// ConflictError is a 409 Conflict: the old size sent is not the size of
// the last checkpoint the witness cosigned for the log. Known is that size
// when the witness said it (Content-Type text/x.tlog.size); KnownSet is
// false when the answer carried none (a witness answers so for a
// checkpoint of its known size with another root).
type ConflictError struct {
	Witness  string
	Known    uint64
	KnownSet bool
}

func (e *ConflictError) Error() string {
	if !e.KnownSet {
		return fmt.Sprintf("witness %s answered 409 Conflict without a size", e.Witness)
	}
	return fmt.Sprintf("witness %s answered 409 Conflict: it cosigned size %d", e.Witness, e.Known)
}

const maxWitnessResponse = 64 << 10

// AddCheckpoint sends the signed checkpoint with the consistency proof from
// oldSize (the size this client believes the witness last cosigned; 0 and
// an empty proof for a log it never saw) and returns the witness's valid
// cosignature lines ("— name base64\n", verified with c.Verifier over the
// checkpoint text). A 409 is a *ConflictError, other refusals a
// *StatusError; a network failure or 5xx wraps ErrUnavailable. The proof
// has at most 63 hashes (the specification's limit).
func (c *Client) AddCheckpoint(ctx context.Context, oldSize uint64, proof []ledger.Hash, signed []byte) ([]byte, error) {
	if len(proof) > 63 {
		return nil, fmt.Errorf("witness %s: consistency proof of %d hashes (at most 63)", c.Name, len(proof))
	}
	text, _, err := splitNote(signed)
	if err != nil {
		return nil, err
	}
	var body bytes.Buffer
	fmt.Fprintf(&body, "old %d\n", oldSize)
	for _, h := range proof {
		body.WriteString(base64.StdEncoding.EncodeToString(h[:]))
		body.WriteByte('\n')
	}
	body.WriteByte('\n')
	body.Write(signed)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(c.URL, "/")+"/add-checkpoint", &body)
	if err != nil {
		return nil, fmt.Errorf("witness %s: %w", c.Name, err)
	}
	hc := c.HTTP
	if hc == nil {
		hc = defaultHTTP
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("witness %s: %w: %v", c.Name, ErrUnavailable, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxWitnessResponse+1))
	if err != nil {
		return nil, fmt.Errorf("witness %s: %w: read answer: %v", c.Name, ErrUnavailable, err)
	}
	if len(b) > maxWitnessResponse {
		return nil, fmt.Errorf("witness %s: answer larger than %d bytes", c.Name, maxWitnessResponse)
	}
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusConflict:
		ce := &ConflictError{Witness: c.Name}
		mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
		s, ok := strings.CutSuffix(string(b), "\n")
		if n, err := strconv.ParseUint(s, 10, 64); mt == "text/x.tlog.size" && ok && err == nil && strconv.FormatUint(n, 10) == s {
			ce.Known, ce.KnownSet = n, true
		}
		return nil, ce
	default:
		return nil, &StatusError{Witness: c.Name, Code: resp.StatusCode, Message: excerpt(b)}
	}
	// The answer is signature lines; verify them over the checkpoint text.
	n, err := note.Open(append(append(text[:len(text):len(text)], '\n'), b...), note.VerifierList(c.Verifier))
	if err != nil {
		return nil, fmt.Errorf("witness %s: cosignature: %w", c.Name, openError(err))
	}
	var out []byte
	for _, s := range n.Sigs {
		out = fmt.Appendf(out, "— %s %s\n", s.Name, s.Base64)
	}
	return out, nil
}

var defaultHTTP = &http.Client{Timeout: 10 * time.Second}

// excerpt returns at most 120 printable ASCII bytes of b, for an error.
func excerpt(b []byte) string {
	var sb strings.Builder
	for _, c := range bytes.TrimSpace(b) {
		if sb.Len() >= 120 {
			sb.WriteString("...")
			break
		}
		if c < 0x20 || c > 0x7e {
			c = ' '
		}
		sb.WriteByte(c)
	}
	return sb.String()
}
