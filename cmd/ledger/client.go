package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// apiError is the JSON error body of the API.
type apiError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Field   string `json:"field"`
}

// call sends a request to the server at a.Server and decodes a JSON answer
// into out (when non-nil). Non-2xx answers become errors naming the API
// error code, field and message.
func (a *app) call(ctx context.Context, method, path string, body []byte, contentType string, hdr map[string]string, out any) (int, error) {
	if a.Server == "" {
		return 0, fmt.Errorf("--server is not set")
	}
	url := strings.TrimRight(a.Server, "/") + path
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return 0, fmt.Errorf("bad --server %q: %v", a.Server, err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if a.Token != "" {
		req.Header.Set("Authorization", "Bearer "+a.Token)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	cl := &http.Client{Timeout: 5 * time.Minute}
	resp, err := cl.Do(req)
	if err != nil {
		return 0, fmt.Errorf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 256<<20))
	if err != nil {
		return resp.StatusCode, fmt.Errorf("%s %s: read answer: %v", method, url, err)
	}
	if resp.StatusCode/100 != 2 {
		var ae apiError
		if json.Unmarshal(b, &ae) == nil && ae.Code != "" {
			if ae.Field != "" && !strings.HasPrefix(ae.Message, ae.Field) {
				return resp.StatusCode, fmt.Errorf("server answered %d %s: %s: %s", resp.StatusCode, ae.Code, ae.Field, ae.Message)
			}
			return resp.StatusCode, fmt.Errorf("server answered %d %s: %s", resp.StatusCode, ae.Code, ae.Message)
		}
		return resp.StatusCode, fmt.Errorf("server answered %d: %s", resp.StatusCode, strings.TrimSpace(string(b)))
	}
	if out != nil {
		if raw, ok := out.(*json.RawMessage); ok {
			*raw = append((*raw)[:0], b...)
			return resp.StatusCode, nil
		}
		if err := json.Unmarshal(b, out); err != nil {
			return resp.StatusCode, fmt.Errorf("decode answer of %s %s: %v", method, url, err)
		}
	}
	return resp.StatusCode, nil
}
