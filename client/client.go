package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
)

// DefaultTimeout bounds one request when Options.Timeout is 0: long enough
// for a batch append or a readiness evaluation of a large release, short
// enough that a hung server does not hang a CI job.
const DefaultTimeout = 2 * time.Minute

// DefaultMaxResponse caps an answer's body in bytes when
// Options.MaxResponse is 0 (a page of 1,000 evidence records is a few MiB).
const DefaultMaxResponse = 64 << 20

// Options configures a Client.
type Options struct {
	// Token is the bearer token sent with every request ("" sends none:
	// reads of a server without --read-auth need none).
	Token string
	// Timeout bounds each request, from dialling to the end of the body
	// (default DefaultTimeout). A context deadline shorter than it wins.
	Timeout time.Duration
	// MaxResponse caps an answer's body in bytes (default
	// DefaultMaxResponse); a longer answer is an error.
	MaxResponse int64
	// Transport carries the requests (default http.DefaultTransport).
	Transport http.RoundTripper
}

// Client talks to one ledger server. Its methods are safe for concurrent
// use.
type Client struct {
	base        *url.URL
	token       string
	hc          *http.Client
	maxResponse int64
}

// New returns a Client of the server at baseURL (scheme http or https,
// host, optional path prefix; "/api/v1" is appended). It fails when baseURL
// does not parse or has another scheme.
func New(baseURL string, o Options) (*Client, error) {
	u, err := url.Parse(strings.TrimSpace(baseURL))
	if err != nil {
		return nil, ledger.FieldError("server", "not a URL: %v", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return nil, ledger.FieldError("server", "want an http:// or https:// URL with a host, got %q", baseURL)
	}
	if u.User != nil {
		return nil, ledger.FieldError("server", "must not carry credentials: give the token separately")
	}
	u.Path = strings.TrimRight(u.Path, "/") + "/api/v1"
	u.RawQuery, u.Fragment = "", ""
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.MaxResponse <= 0 {
		o.MaxResponse = DefaultMaxResponse
	}
	return &Client{base: u, token: o.Token, hc: &http.Client{Timeout: o.Timeout, Transport: o.Transport}, maxResponse: o.MaxResponse}, nil
}

// URL returns the server's base URL as given to New (without /api/v1).
func (c *Client) URL() string {
	u := *c.base
	u.Path = strings.TrimSuffix(u.Path, "/api/v1")
	return u.String()
}

// request is one API call.
type request struct {
	method, path string     // path below /api/v1, already escaped
	query        url.Values // may be nil
	body         []byte     // nil: no body
	contentType  string
	header       map[string]string
}

// do performs req and decodes a 2xx JSON answer into out (when non-nil; a
// *[]byte out receives the answer's bytes as they are). A
// non-2xx answer becomes the *ledger.Error of apiError; errOut, when
// non-nil, also receives the error answer's JSON (approvals refused as not
// ready carry the verdict).
func (c *Client) do(ctx context.Context, req request, out, errOut any) error {
	u := *c.base
	u.Path += req.path
	u.RawPath = ""
	if len(req.query) > 0 {
		u.RawQuery = req.query.Encode()
	}
	var body io.Reader
	if req.body != nil {
		body = bytes.NewReader(req.body)
	}
	hr, err := http.NewRequestWithContext(ctx, req.method, u.String(), body)
	if err != nil {
		return fmt.Errorf("%s %s: %w", req.method, req.path, err)
	}
	hr.Header.Set("Accept", "application/json")
	if req.contentType != "" {
		hr.Header.Set("Content-Type", req.contentType)
	}
	if c.token != "" {
		hr.Header.Set("Authorization", "Bearer "+c.token)
	}
	for k, v := range req.header {
		if v != "" {
			hr.Header.Set(k, v)
		}
	}
	resp, err := c.hc.Do(hr)
	if err != nil {
		return err // a *url.Error, naming the method and URL
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, c.maxResponse+1))
	if err != nil {
		return fmt.Errorf("%s %s: read answer: %w", req.method, u.Redacted(), err)
	}
	if int64(len(b)) > c.maxResponse {
		return fmt.Errorf("%s %s: answer is longer than %d bytes", req.method, u.Redacted(), c.maxResponse)
	}
	if resp.StatusCode/100 != 2 {
		if errOut != nil {
			_ = json.Unmarshal(b, errOut)
		}
		return apiError(resp.StatusCode, b)
	}
	if raw, ok := out.(*[]byte); ok {
		*raw = b
		return nil
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return fmt.Errorf("%s %s: decode answer: %w", req.method, u.Redacted(), err)
		}
	}
	return nil
}

// codeOf is the inverse of web's status table, for answers that carry no
// API error body (a proxy's 502, say).
var codeOf = map[int]ledger.Code{
	http.StatusBadRequest:            ledger.CodeInvalid,
	http.StatusUnauthorized:          ledger.CodeUnauthorized,
	http.StatusForbidden:             ledger.CodeForbidden,
	http.StatusNotFound:              ledger.CodeNotFound,
	http.StatusConflict:              ledger.CodeConflict,
	http.StatusRequestEntityTooLarge: ledger.CodeTooLarge,
	http.StatusUnsupportedMediaType:  ledger.CodeUnsupported,
}

// knownCodes are the codes an API error body may carry that ledger.Error
// knows; any other code is replaced by the status's.
var knownCodes = map[ledger.Code]bool{
	ledger.CodeInvalid: true, ledger.CodeNotFound: true, ledger.CodeConflict: true, ledger.CodeUnauthorized: true,
	ledger.CodeForbidden: true, ledger.CodeTooLarge: true, ledger.CodeUnsupported: true, ledger.CodeInternal: true,
	ledger.CodePrecondition: true,
}

// apiError turns a non-2xx answer into the *ledger.Error the server's store
// returned: same code, field and message (the API writes the message with
// the field in front, as ledger.Error.Error does, so it is taken off
// again). A 404 wraps ledger.ErrNotFound, as ledger.NotFound does. An
// answer without an API error body gets the status's code and a message
// naming the status; its body is not echoed.
func apiError(status int, body []byte) *ledger.Error {
	var ae struct {
		Code    ledger.Code `json:"code"`
		Message string      `json:"message"`
		Field   string      `json:"field"`
	}
	e := &ledger.Error{}
	if json.Unmarshal(body, &ae) == nil && ae.Code != "" && ae.Message != "" {
		e.Code, e.Field, e.Message = ae.Code, ae.Field, ae.Message
		if ae.Field != "" {
			e.Message = strings.TrimPrefix(ae.Message, ae.Field+": ")
		}
	} else {
		e.Message = fmt.Sprintf("server answered %d %s", status, http.StatusText(status))
	}
	if !knownCodes[e.Code] {
		if c, ok := codeOf[status]; ok {
			e.Code = c
		} else {
			e.Code = ledger.CodeInternal
		}
	}
	if e.Code == ledger.CodeNotFound {
		e.Err = ledger.ErrNotFound
	}
	return e
}
