package web

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/evidence-ledger/ledger/ledger/storetest/teststore"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/go-chi/chi/v5"
)

// hostileEnv is a server on a temporary store with tokens of every scope
// and a short read timeout (slow bodies), logging into a buffer.
type hostileEnv struct {
	*apiEnv
	admin string
	logs  *syncBuffer
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

const hostileMaxBody = 256 << 10

func newHostileEnv(t *testing.T, cfg Config) *hostileEnv {
	return newHostileEnvTimeout(t, cfg, 300*time.Millisecond)
}

// newHostileEnvTimeout is newHostileEnv with the server's read timeout.
func newHostileEnvTimeout(t *testing.T, cfg Config, readTimeout time.Duration) *hostileEnv {
	t.Helper()
	ctx := context.Background()
	st := teststore.Open(t, teststore.Options{})
	logs := &syncBuffer{}
	cfg.Store, cfg.Log = st, slog.New(slog.NewTextHandler(logs, nil))
	if cfg.MaxBody == 0 {
		cfg.MaxBody = hostileMaxBody
	}
	if cfg.AuthFailures == 0 {
		cfg.AuthFailures = -1
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewUnstartedServer(s)
	hs.Config.ReadTimeout = readTimeout
	hs.Start()
	t.Cleanup(hs.Close)
	tok := func(name string, sc ledger.Scope) string {
		sec, _, err := st.CreateToken(ctx, name, sc, []string{"release-manager", "qa"})
		if err != nil {
			t.Fatal(err)
		}
		return sec
	}
	return &hostileEnv{apiEnv: &apiEnv{srv: hs, store: st, record: tok("ci", ledger.ScopeRecord), read: tok("reader", ledger.ScopeRead)}, admin: tok("admin", ledger.ScopeAdmin), logs: logs}
}

// route is one method and pattern of the router.
type route struct{ method, pattern string }

// allRoutes walks the router: a route added to routes.go is in the table
// below without anyone listing it.
func allRoutes(t *testing.T, s *Server) []route {
	var out []route
	err := chi.Walk(s.Router(), func(method, pattern string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		out = append(out, route{method, pattern})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(out) < 30 {
		t.Fatalf("router walk found only %d routes", len(out))
	}
	return out
}

// concrete fills a pattern's parameters with value (already escaped for
// a path).
func concrete(pattern, value string) string {
	p := pattern
	for _, name := range []string{"{id}", "{version}", "{index}"} {
		p = strings.ReplaceAll(p, name, value)
	}
	return strings.ReplaceAll(p, "*", value)
}

// hostileBodies are request bodies no route may accept. Each must get a
// 4xx, and none may append.
func hostileBodies() map[string][]byte {
	deep := strings.Repeat("[", 100000) + strings.Repeat("]", 100000)
	huge := "[" + strings.Repeat("0,", 100000) + "0]"
	return map[string][]byte{
		"oversize":        append([]byte(`{"lane":"`), append(bytes.Repeat([]byte("a"), hostileMaxBody+1), `"}`...)...),
		"wrong types":     []byte(`{"lane":1,"subject":"x","cases_total":"many","gate":[],"reason":{},"version":true,"repo_path":7,"entry":null,"note":1}`),
		"not an object":   []byte(`"just a string"`),
		"number":          []byte(`12345678901234567890123456789`),
		"invalid UTF-8":   []byte("{\"lane\":\"\xff\xfe\",\"reason\":\"\xc3\x28\",\"gate\":\"\xed\xa0\x80\"}"),
		"deep nesting":    []byte(`{"details":` + deep + `}`),
		"deep array":      []byte(deep),
		"huge array":      []byte(huge),
		"NUL":             []byte(`{"lane":"qmv\u0000/v1","subject":{"repository":"a\u0000b"},"gate":"g\u0000","reason":"r\u0000","repository":"x\u0000","version":"1\u0000"}`),
		"control chars":   []byte("{\"reason\":\"a\\u001bb\",\"gate\":\"\\u0007\",\"repository\":\"r\\u0085\"}"),
		"traversal":       []byte(`{"repo_path":"../../../../etc","policy_path":"/etc/passwd","repository":"../../etc/passwd","version":"../../x","entry":"../../../etc/passwd","gate":"../x"}`),
		"truncated":       []byte(`{"lane":"qmv-bias-sum/v1","subject":{`),
		"duplicate field": []byte(`{"lane":"a/v1","lane":"b/v1"}`),
		"empty":           nil,
	}
}

// hostileValues are path and query values; each must give a 4xx or a
// success that appends nothing, never a 5xx.
var hostileValues = []string{
	"9223372036854775808", "18446744073709551616", "-1", "0", "1e9", "0x10", "%201",
	"..%2F..%2F..%2Fetc%2Fpasswd", "..", "%00", "a%00b", "%FF%FE", "%C3%28",
	strings.Repeat("9", 400), strings.Repeat("a", 8000), "%1B%5B31m", "c1.OTIyMzM3MjAzNjg1NDc3NTgwOA",
}

var queryNames = []string{"size", "from", "to", "index", "limit", "as_of", "cursor", "kind", "key", "lane", "backend",
	"status", "repository", "commit", "artifact", "since", "format", "verdict", "a", "b", "done"}

func isAPI(pattern string) bool { return strings.HasPrefix(pattern, "/api/") }

// checkAnswer asserts a hostile request's answer: no 5xx; every API 4xx a
// JSON {code, message}; the log unchanged.
func (e *hostileEnv) checkAnswer(t *testing.T, what string, rt route, code int, body []byte, before uint64, want4xx bool) {
	t.Helper()
	if code >= 500 {
		t.Errorf("%s %s (%s): %d %.300s", rt.method, rt.pattern, what, code, body)
		return
	}
	if want4xx && (code < 400 || code >= 500) {
		t.Errorf("%s %s (%s): %d, want a 4xx: %.300s", rt.method, rt.pattern, what, code, body)
		return
	}
	if code >= 400 && isAPI(rt.pattern) {
		var ae APIError
		if err := json.Unmarshal(body, &ae); err != nil || ae.Code == "" || ae.Message == "" {
			t.Errorf("%s %s (%s): %d without a JSON error: %.300s", rt.method, rt.pattern, what, code, body)
		}
	}
	if after := e.size(t); after != before {
		t.Errorf("%s %s (%s): the log grew from %d to %d", rt.method, rt.pattern, what, before, after)
	}
}

// TestHostileInputEveryRoute sends every route of the router hostile
// path values, query parameters and bodies (oversize, wrong types,
// invalid UTF-8, deep nesting, huge arrays, NUL and control characters,
// traversal strings, truncated JSON), with a token of every scope, and
// checks each answer: a 4xx (a JSON error on the API) for every write,
// never a 5xx on any route, and the log's checkpoint size unchanged.
func TestHostileInputEveryRoute(t *testing.T) {
	e := newHostileEnv(t, Config{})
	s := e.srv.Config.Handler.(*Server)
	routes := allRoutes(t, s)
	client := &http.Client{Timeout: 10 * time.Second}
	send := func(method, path, token, ctype string, body []byte) (int, []byte) {
		t.Helper()
		var rd io.Reader
		if body != nil {
			rd = bytes.NewReader(body)
		}
		req, err := http.NewRequest(method, e.srv.URL+path, rd)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		if ctype != "" {
			req.Header.Set("Content-Type", ctype)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		res, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(res.Body, 1<<20))
		return res.StatusCode, b
	}
	before := e.size(t)
	cases := 0
	tally := newHostileTally()
	for _, rt := range routes {
		// Path parameters.
		for _, v := range hostileValues {
			for _, tok := range []string{"", e.admin} {
				code, body := send(rt.method, concrete(rt.pattern, v), tok, "application/json", nil)
				e.checkAnswer(t, "path "+v, rt, code, body, before, rt.method != http.MethodGet)
				tally.add(rt, "path", code)
				cases++
			}
		}
		if rt.method == http.MethodGet {
			for _, name := range queryNames {
				for _, v := range hostileValues {
					code, body := send(rt.method, concrete(rt.pattern, "qmv-bias-sum%2Fv1")+"?"+name+"="+v, e.read, "", nil)
					e.checkAnswer(t, name+"="+v, rt, code, body, before, false)
					tally.add(rt, "query", code)
					cases++
				}
			}
			continue
		}
		for what, body := range hostileBodies() {
			for _, tok := range []string{e.admin, e.record} {
				for _, ct := range []string{"application/json", "application/x-www-form-urlencoded"} {
					b := body
					if ct != "application/json" && body != nil {
						b = []byte("gate=" + string(body) + "&reason=" + string(body) + "&csrf=x&token=" + tok)
					}
					code, out := send(rt.method, concrete(rt.pattern, "1.0.0"), tok, ct, b)
					e.checkAnswer(t, what+" as "+ct, rt, code, out, before, true)
					tally.add(rt, "body", code)
					cases++
				}
			}
		}
	}
	// The ingest formats of POST /api/v1/evidence: every hostile body and
	// every format's own hostile inputs, under every ingest content type,
	// with the flags a format needs.
	evidence := route{http.MethodPost, "/api/v1/evidence"}
	q := "/api/v1/evidence?lane=ci-tests/v1&backend=cpu&repository=r&commit=" + strings.Repeat("a", 40) + "&tree=" + strings.Repeat("b", 40)
	for _, ct := range ingestContentTypes {
		bodies := hostileBodies()
		for what, b := range hostileIngestBodies() {
			bodies[what] = b
		}
		for what, body := range bodies {
			code, out := send(http.MethodPost, q, e.record, ct, body)
			e.checkAnswer(t, what+" as "+ct, evidence, code, out, before, true)
			tally.add(evidence, "body", code)
			cases++
		}
	}
	if tally.total != cases {
		t.Errorf("tally counted %d of %d requests", tally.total, cases)
	}
	t.Logf("%d routes, %d hostile requests, log size %d before and after", len(routes), cases, e.size(t))
	t.Logf("hostile-input answers (a Markdown table for RELIABILITY.md):\n%s", tally.table())
}

// hostileTally counts the hostile requests' answers per route, per kind
// of input (path value, query parameter, body) and per status class, and
// over all routes per exact status.
type hostileTally struct {
	total    int
	order    []route
	byRoute  map[route]*[3][4]int // kind (path, query, body) x class (2xx, 3xx, 4xx, 5xx)
	byStatus map[int]int
}

func newHostileTally() *hostileTally {
	return &hostileTally{byRoute: map[route]*[3][4]int{}, byStatus: map[int]int{}}
}

var hostileKinds = []string{"path", "query", "body"}

func (h *hostileTally) add(rt route, kind string, code int) {
	c, ok := h.byRoute[rt]
	if !ok {
		c = new([3][4]int)
		h.byRoute[rt] = c
		h.order = append(h.order, rt)
	}
	k := slices.Index(hostileKinds, kind)
	class := min(max(code/100-2, 0), 3)
	c[k][class]++
	h.byStatus[code]++
	h.total++
}

// table renders the tally: one row per route (cells "2xx/3xx/4xx/5xx" per
// kind of input, "-" where none was sent), then one row per status.
func (h *hostileTally) table() string {
	var b strings.Builder
	b.WriteString("| route | path values 2xx/3xx/4xx/5xx | query parameters 2xx/3xx/4xx/5xx | bodies 2xx/3xx/4xx/5xx |\n|---|---|---|---|\n")
	for _, rt := range h.order {
		c := h.byRoute[rt]
		fmt.Fprintf(&b, "| `%s %s` |", rt.method, rt.pattern)
		for k := range hostileKinds {
			if c[k] == [4]int{} {
				b.WriteString(" - |")
				continue
			}
			fmt.Fprintf(&b, " %d/%d/%d/%d |", c[k][0], c[k][1], c[k][2], c[k][3])
		}
		b.WriteString("\n")
	}
	codes := slices.Sorted(maps.Keys(h.byStatus))
	b.WriteString("\n| status | answers |\n|---|---|\n")
	for _, code := range codes {
		fmt.Fprintf(&b, "| %d %s | %d |\n", code, http.StatusText(code), h.byStatus[code])
	}
	fmt.Fprintf(&b, "| all | %d |\n", h.total)
	return b.String()
}

// ingestContentTypes are the media types POST /api/v1/evidence decodes
// with package ingest (and their aliases).
var ingestContentTypes = []string{"application/junit+xml", "application/xml", "text/xml", "application/vnd.go.test2json+jsonl",
	"application/x-ndjson", "application/vnd.in-toto+json", "application/vnd.dsse.envelope.v1+json",
	"application/vnd.dev.sigstore.bundle.v0.3+json", "application/vnd.dev.sigstore.bundle+json; version=0.1"}

// hostileIngestBodies are inputs aimed at the ingest decoders: entity
// expansion, external entities, deep XML, a DOCTYPE naming a server file,
// an envelope whose payload is not base64 or not a Statement, a Statement
// of no subject, a bundle with no content. Each must be refused whole.
func hostileIngestBodies() map[string][]byte {
	laughs := `<?xml version="1.0"?><!DOCTYPE l [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;"><!ENTITY c "&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;"><!ENTITY d "&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;">]><testsuite name="&d;"><testcase name="&d;"/></testsuite>`
	return map[string][]byte{
		"entity expansion":             []byte(laughs),
		"external entity":              []byte(`<?xml version="1.0"?><!DOCTYPE t [<!ENTITY x SYSTEM "file:///etc/passwd">]><testsuite name="&x;"><testcase name="&x;"/></testsuite>`),
		"deep XML":                     []byte(strings.Repeat("<testsuite>", 50000) + strings.Repeat("</testsuite>", 50000)),
		"XML, no testcase":             []byte(`<testsuites><testsuite name="s" tests="0"/></testsuites><extra/>`),
		"envelope, payload not base64": []byte(`{"payloadType":"application/vnd.in-toto+json","payload":"!!!","signatures":[{"keyid":"","sig":"AAAA"}]}`),
		"envelope, no signatures":      []byte(`{"payloadType":"application/vnd.in-toto+json","payload":"e30=","signatures":[]}`),
		"statement, no subject":        []byte(`{"_type":"https://in-toto.io/Statement/v1","subject":[],"predicateType":"https://in-toto.io/attestation/test-result/v0.1","predicate":{}}`),
		"bundle, no content":           []byte(`{"mediaType":"application/vnd.dev.sigstore.bundle.v0.3+json","verificationMaterial":{}}`),
		"test2json, no action":         []byte(`{"Package":"p"}` + "\n" + `{"Test":"T"}` + "\n"),
	}
}

// TestSlowBodyEveryWriteRoute trickles a body slower than the server's
// read timeout into every write route: each answers a 4xx or drops the
// connection, and nothing is appended.
func TestSlowBodyEveryWriteRoute(t *testing.T) {
	e := newHostileEnv(t, Config{})
	s := e.srv.Config.Handler.(*Server)
	before := e.size(t)
	n := 0
	for _, rt := range allRoutes(t, s) {
		if rt.method == http.MethodGet || rt.method == http.MethodHead {
			continue
		}
		pr, pw := io.Pipe()
		go func() {
			pw.Write([]byte(`{"lane":"qmv-bias-sum/v1",`))
			for i := 0; i < 12; i++ {
				time.Sleep(50 * time.Millisecond)
				if _, err := pw.Write([]byte(" ")); err != nil {
					return
				}
			}
			pw.Write([]byte(`"status":"passed"}`))
			pw.Close()
		}()
		req, _ := http.NewRequest(rt.method, e.srv.URL+concrete(rt.pattern, "1.0.0"), pr)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+e.admin)
		res, err := http.DefaultClient.Do(req)
		n++
		if err != nil {
			// The server closed the connection after its read deadline.
			continue
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		e.checkAnswer(t, "slow body", rt, res.StatusCode, b, before, true)
	}
	if n == 0 {
		t.Fatal("no write routes")
	}
	if after := e.size(t); after != before {
		t.Fatalf("slow bodies appended: %d -> %d", before, after)
	}
}

// TestQueryIntegersOutOfRange: every integer parameter over the stores'
// signed 64-bit range is a 400 naming the parameter (it was a 500).
func TestQueryIntegersOutOfRange(t *testing.T) {
	e := newHostileEnv(t, Config{})
	code, body := e.do(t, "POST", "/api/v1/evidence", e.record, testEvidence(1))
	if code != http.StatusCreated {
		t.Fatalf("seed: %d %s", code, body)
	}
	var seeded struct{ ID string }
	json.Unmarshal(body, &seeded)
	big := "9223372036854775808"
	for _, c := range []struct{ path, field string }{
		{"/api/v1/log/checkpoint?size=" + big, "size"},
		{"/api/v1/log/proof/inclusion?index=0&size=" + big, "size"},
		{"/api/v1/log/proof/inclusion?index=" + big, "index"},
		{"/api/v1/log/proof/consistency?from=" + big, "from"},
		{"/api/v1/log/proof/consistency?from=0&to=" + big, "to"},
		{"/api/v1/log/leaves/" + big, "index"},
		{"/api/v1/evidence?as_of=" + big, "as_of"},
		{"/api/v1/log/entries?kind=evidence&as_of=" + big, "as_of"},
		{"/api/v1/heads?as_of=" + big, "as_of"},
		{"/api/v1/evidence/" + seeded.ID + "/proof?size=" + big, "size"},
		{"/api/v1/evidence?limit=1001", "limit"},
		{"/api/v1/evidence?limit=" + big, "limit"},
	} {
		code, body := e.do(t, "GET", c.path, "", nil)
		var ae APIError
		json.Unmarshal(body, &ae)
		if code != http.StatusBadRequest || ae.Field != c.field {
			t.Errorf("GET %s: %d field %q, want 400 naming %q: %s", c.path, code, ae.Field, c.field, body)
		}
	}
}

// TestHeaderParsingRFC: media types are case-insensitive and parsed with
// their parameters; the Bearer scheme is case-insensitive (RFC 9110
// sections 8.3.1 and 11.1, RFC 6750 section 2.1); malformed ones are
// refused.
func TestHeaderParsingRFC(t *testing.T) {
	e := newHostileEnv(t, Config{})
	for i, c := range []struct {
		ctype, auth string
		want        int
	}{
		{"Application/JSON", "Bearer ", http.StatusCreated},
		{"application/json; charset=UTF-8", "bearer ", http.StatusCreated},
		{"APPLICATION/VND.LEDGER+JSON", "BEARER  ", http.StatusCreated},
		{"application/json; charset=latin1", "Bearer ", http.StatusUnsupportedMediaType},
		{"application/json; charset", "Bearer ", http.StatusUnsupportedMediaType},
		{"text/plain", "Bearer ", http.StatusUnsupportedMediaType},
		{"application/x-unknown+xml", "Bearer ", http.StatusUnsupportedMediaType},
		{"Application/VND.In-Toto+JSON; charset=utf-8", "Bearer ", http.StatusBadRequest}, // an ingest type: evidence JSON is not a Statement
		{"application/junit+xml; x=\"unterminated", "Bearer ", http.StatusUnsupportedMediaType},
		{"application/json", "Basic ", http.StatusUnauthorized},
		{"application/json", "Bearer", http.StatusUnauthorized},
	} {
		var req *http.Request
		b, _ := json.Marshal(testEvidence(100 + i))
		req, _ = http.NewRequest("POST", e.srv.URL+"/api/v1/evidence", bytes.NewReader(b))
		req.Header.Set("Content-Type", c.ctype)
		auth := c.auth
		if strings.HasSuffix(auth, " ") {
			auth += e.record
		}
		req.Header.Set("Authorization", auth)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		out, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != c.want {
			t.Errorf("Content-Type %q, Authorization %q: %d, want %d: %s", c.ctype, c.auth, res.StatusCode, c.want, out)
		}
	}
}

// TestIdentifiersRefuseControlCharacters: NUL and other control
// characters in any identifier of a record are a 400 naming the field,
// and over-long free text is refused with the cap in the message.
func TestIdentifiersRefuseControlCharacters(t *testing.T) {
	e := newHostileEnv(t, Config{MaxBody: 4 << 20})
	set := func(path string, v any) map[string]any {
		ev := testEvidence(7)
		parts := strings.Split(path, ".")
		m := ev
		for _, p := range parts[:len(parts)-1] {
			m = m[p].(map[string]any)
		}
		m[parts[len(parts)-1]] = v
		return ev
	}
	for _, c := range []struct {
		path  string
		value any
		field string
	}{
		{"subject.repository", "github.com/a\x00b", "subject.repository"},
		{"subject.repository", "github.com/a\nb", "subject.repository"},
		{"subject.repository", "github.com/a\u0085b", "subject.repository"},
		{"device.model", "cpu\x1b[31m", "device.model"},
		{"device.model", "NVIDIA \u202eH200", "device.model"},
		{"subject.repository", "github.com/a\u2066b", "subject.repository"},
		{"runner.version", "1.0\x00", "runner.version"},
		{"runner.version", strings.Repeat("v", ledger.MaxShortText+1), "runner.version"},
		{"device.driver", strings.Repeat("d", ledger.MaxIdentifier+1), "device.driver"},
		{"details", map[string]any{"x": strings.Repeat("a", ledger.MaxDetailsBytes)}, "details"},
		{"details", nest(ledger.MaxDetailsDepth + 1), "details"},
		// Invalid UTF-8 ahead of nesting past the cap.
		{"details", json.RawMessage("{\"\xac\":" + strings.Repeat("[", ledger.MaxDetailsDepth+5) + strings.Repeat("]", ledger.MaxDetailsDepth+5) + "}"), "details"},
	} {
		before := e.size(t)
		code, body := e.do(t, "POST", "/api/v1/evidence", e.record, set(c.path, c.value))
		var ae APIError
		json.Unmarshal(body, &ae)
		if code != http.StatusBadRequest || ae.Field != c.field {
			t.Errorf("%s = %.40q: %d field %q, want 400 naming %s: %.200s", c.path, fmt.Sprint(c.value), code, ae.Field, c.field, body)
		}
		if e.size(t) != before {
			t.Errorf("%s: the log grew", c.path)
		}
	}
	// At the caps, the record is accepted.
	ok := set("details", nest(ledger.MaxDetailsDepth))
	ok["runner"] = map[string]any{"version": strings.Repeat("v", ledger.MaxShortText)}
	if code, body := e.do(t, "POST", "/api/v1/evidence", e.record, ok); code != http.StatusCreated {
		t.Errorf("record at the caps: %d %s", code, body)
	}
}

// nest returns a details object nesting depth levels deep (the object
// itself is level 1).
func nest(depth int) map[string]any {
	m := map[string]any{"leaf": 1}
	for i := 1; i < depth; i++ {
		m = map[string]any{"n": m}
	}
	return m
}

// TestFailedAuthRateLimit: past Config.AuthFailures failures in a minute,
// an address gets 429 with Retry-After, even with a good token, while a
// good token used before the limit keeps working and other addresses are
// not affected (the limiter is keyed by address).
func TestFailedAuthRateLimit(t *testing.T) {
	e := newHostileEnv(t, Config{AuthFailures: 5, ReadAuth: true})
	if code, _ := e.do(t, "GET", "/api/v1/log/checkpoint", e.read, nil); code != 200 {
		t.Fatalf("good token: %d", code)
	}
	for i := 0; i < 5; i++ {
		if code, _ := e.do(t, "GET", "/api/v1/log/checkpoint", fmt.Sprintf("bad-%d", i), nil); code != http.StatusUnauthorized {
			t.Fatalf("bad token %d: %d, want 401", i, code)
		}
	}
	req, _ := http.NewRequest("GET", e.srv.URL+"/api/v1/log/checkpoint", nil)
	req.Header.Set("Authorization", "Bearer "+e.read)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	var ae APIError
	json.Unmarshal(body, &ae)
	if res.StatusCode != http.StatusTooManyRequests || res.Header.Get("Retry-After") == "" || ae.Code != ledger.CodeRateLimited {
		t.Fatalf("after 5 failures: %d %q %s, want 429 rate_limited with Retry-After", res.StatusCode, res.Header.Get("Retry-After"), body)
	}
	// Another address has its own count.
	r := httptest.NewRequest("GET", "/api/v1/log/checkpoint", nil)
	r.RemoteAddr = "192.0.2.7:5555"
	r.Header.Set("Authorization", "Bearer "+e.read)
	w := httptest.NewRecorder()
	e.srv.Config.Handler.ServeHTTP(w, r)
	if w.Code != 200 {
		t.Fatalf("another address: %d %s", w.Code, w.Body)
	}
}

// TestAccessLog: every request is logged with method, route pattern,
// status, duration and the token's id; the secret never appears.
func TestAccessLog(t *testing.T) {
	e := newHostileEnv(t, Config{})
	code, _ := e.do(t, "POST", "/api/v1/evidence", e.record, testEvidence(3))
	if code != http.StatusCreated {
		t.Fatal(code)
	}
	e.do(t, "GET", "/api/v1/evidence/abc/proof", "", nil)
	e.do(t, "GET", "/api/v1/log/checkpoint", "not-a-token-secret", nil)
	tok, err := e.store.Authenticate(context.Background(), e.record)
	if err != nil {
		t.Fatal(err)
	}
	logs := e.logs.String()
	for _, want := range []string{
		`msg="http request" method=POST route=/api/v1/evidence status=201`,
		"token=" + tok.ID,
		`route=/api/v1/evidence/{id}/proof status=404`,
		`route=/api/v1/log/checkpoint status=401`,
		"duration_ms=",
	} {
		if !strings.Contains(logs, want) {
			t.Errorf("access log lacks %q:\n%s", want, logs)
		}
	}
	for _, secret := range []string{e.record, e.read, e.admin, "not-a-token-secret"} {
		if strings.Contains(logs, secret) {
			t.Fatalf("a token secret is in the log")
		}
	}
}

// TestReadAuthCoversMetricsAndHealth: under --read-auth /metrics needs a
// read token, and /healthz tells an anonymous caller ok without figures.
func TestReadAuthCoversMetricsAndHealth(t *testing.T) {
	e := newHostileEnv(t, Config{ReadAuth: true})
	e.do(t, "POST", "/api/v1/evidence", e.record, testEvidence(4))
	if code, _ := e.do(t, "GET", "/metrics", "", nil); code != http.StatusUnauthorized {
		t.Errorf("anonymous /metrics: %d, want 401", code)
	}
	if code, body := e.do(t, "GET", "/metrics", e.read, nil); code != 200 || !strings.Contains(string(body), "ledger_http_requests_total") {
		t.Errorf("/metrics with a read token: %d", code)
	}
	code, body := e.do(t, "GET", "/healthz", "", nil)
	var h map[string]any
	json.Unmarshal(body, &h)
	if code != 200 || h["status"] != "ok" || len(h) != 1 {
		t.Errorf("anonymous /healthz: %d %s, want only the status", code, body)
	}
	code, body = e.do(t, "GET", "/healthz", e.read, nil)
	h = nil
	json.Unmarshal(body, &h)
	if code != 200 || h["log_size"] == nil {
		t.Errorf("/healthz with a read token: %d %s, want the figures", code, body)
	}
	open := newHostileEnv(t, Config{})
	if code, _ := open.do(t, "GET", "/metrics", "", nil); code != 200 {
		t.Errorf("/metrics without --read-auth: %d", code)
	}
}

// FuzzBearerSecret: a token is taken only from the Bearer scheme, in any
// case, and never carries the separating or trailing spaces.
func FuzzBearerSecret(f *testing.F) {
	for _, s := range []string{"Bearer abc", "bearer  abc ", "BEARER x", "Basic abc", "Bearer", "Bearer ", "Bearerabc", "\x00 x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, h string) {
		secret, ok := bearerSecret(h)
		if !ok {
			if secret != "" {
				t.Fatalf("%q: refused but secret %q", h, secret)
			}
			return
		}
		scheme, _, _ := strings.Cut(h, " ")
		if !strings.EqualFold(scheme, "bearer") || secret == "" || secret != strings.TrimSpace(secret) || !strings.Contains(h, secret) {
			t.Fatalf("%q: took secret %q", h, secret)
		}
	})
}

// FuzzRequireJSON: a Content-Type is accepted only when its media type,
// case-folded, is application/json or a +json type with no charset but
// UTF-8; refusals are 415 errors.
func FuzzRequireJSON(f *testing.F) {
	for _, s := range []string{"application/json", "Application/JSON; charset=UTF-8", "application/vnd.x+json", "text/plain", "application/json; charset=latin1", "application/json;;", "", "\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, ct string) {
		r := httptest.NewRequest("POST", "/", nil)
		r.Header["Content-Type"] = []string{ct}
		err := requireJSON(r)
		if ct == "" {
			return
		}
		if err != nil {
			if ledger.ErrorCode(err) != ledger.CodeUnsupported {
				t.Fatalf("%q: %v is not a 415", ct, err)
			}
			return
		}
		mt := strings.ToLower(strings.TrimSpace(strings.SplitN(ct, ";", 2)[0]))
		if mt != "application/json" && !strings.HasSuffix(mt, "+json") {
			t.Fatalf("%q accepted", ct)
		}
	})
}

// FuzzQueryUint: an accepted value is a decimal integer in min..maxIndex
// that parses back to the same number; every refusal names the field.
func FuzzQueryUint(f *testing.F) {
	for _, s := range []string{"0", "1", "9223372036854775807", "9223372036854775808", "-1", "+1", "007", "1e3", ""} {
		f.Add(s, uint64(1))
	}
	f.Fuzz(func(t *testing.T, v string, min uint64) {
		n, err := queryUint(v, "size", min, true)
		if err != nil {
			var le *ledger.Error
			if !errors.As(err, &le) || le.Code != ledger.CodeInvalid || le.Field != "size" {
				t.Fatalf("%q: %v does not name the field", v, err)
			}
			return
		}
		back, perr := strconv.ParseUint(v, 10, 64)
		if perr != nil || back != n || n < min || n > maxIndex {
			t.Fatalf("%q accepted as %d (min %d)", v, n, min)
		}
	})
}
