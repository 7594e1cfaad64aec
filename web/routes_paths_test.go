package web

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/evidence-ledger/ledger/gates"
	"github.com/evidence-ledger/ledger/ledger"
	"github.com/go-chi/chi/v5"
)

// jsonNames collects the JSON member names of the types, recursively
// through structs, slices, maps and pointers.
func jsonNames(into map[string]bool, types ...reflect.Type) {
	seen := map[reflect.Type]bool{}
	var walk func(reflect.Type)
	walk = func(t reflect.Type) {
		for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Map || t.Kind() == reflect.Array {
			t = t.Elem()
		}
		if t.Kind() != reflect.Struct || seen[t] {
			return
		}
		seen[t] = true
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "-" || !f.IsExported() {
				continue
			}
			if name == "" {
				name = f.Name
			}
			into[name] = true
			walk(f.Type)
		}
	}
	for _, t := range types {
		walk(t)
	}
}

// TestNoRouteOpensCallersPath walks every route of the router (chi.Walk
// over the one route table) with a record token and with an admin token,
// and sends path strings — the absolute path of a sentinel file outside
// the repository root, traversals to it, a file URL, a real repository
// outside the root — in every path parameter, in every query parameter
// and JSON member any request type of the API knows, and as form fields.
// It fails if the server opens any file in the sentinel's directories
// (inotify on Linux), if Config.FileAccess sees a path outside the
// configured root (or any path at all for the record token), or if an
// answer quotes the sentinel's content.
func TestNoRouteOpensCallersPath(t *testing.T) {
	f := newUploadFixture(t) // a real repository, outside the root
	root := t.TempDir()
	outside := t.TempDir()
	sentinel := filepath.Join(outside, "sentinel")
	const secret = "SENTINEL-CONTENT-7f3a"
	if err := os.WriteFile(sentinel, []byte(secret+":x:0:0\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var accessed []string
	e := newUploadEnv(t, Config{RepoRoots: []string{root}, FileAccess: func(p string) {
		mu.Lock()
		accessed = append(accessed, p)
		mu.Unlock()
	}})
	e.applyPolicy(t, "p", f.policyYAML, map[string][]byte{"signers": f.signers})
	e.defineRelease(t, f.releaseYAML("1.0", f.head, "p"))
	srv, err := New(Config{Store: e.store, RepoRoots: []string{root}, FileAccess: func(p string) {
		mu.Lock()
		accessed = append(accessed, p)
		mu.Unlock()
	}})
	if err != nil {
		t.Fatal(err)
	}
	// bases make a request valid enough to reach the handler's later steps.
	bases := map[string][]map[string]any{
		"/api/v1/heads/verify": {{"policy": "p"}, {"release": "1.0"}, {"release": "1.0", "objects": headObjects(t, f.dir, "main")}},
		"/api/v1/trees/verify": {{"release": "1.0"}},
		"/api/v1/policies":     {{"name": "x", "policy": f.policyYAML}},
	}
	events := openWatch(t, outside, f.dir, filepath.Join(f.dir, ".git"), filepath.Join(f.dir, ".git", "objects"))
	relRepo, _ := filepath.Rel(root, f.dir)
	values := []string{
		sentinel,
		strings.Repeat("../", 12) + strings.TrimPrefix(sentinel, "/"),
		"file://" + sentinel,
		filepath.ToSlash(relRepo),
	}
	names := map[string]bool{}
	jsonNames(names, reflect.TypeFor[VerifyHeadRequest](), reflect.TypeFor[VerifyTreeRequest](), reflect.TypeFor[ApplyPolicyRequest](),
		reflect.TypeFor[WaiverRequest](), reflect.TypeFor[SignoffRequest](), reflect.TypeFor[ApprovalRequest](),
		reflect.TypeFor[ledger.Evidence](), reflect.TypeFor[ledger.HeadVerification](), reflect.TypeFor[gates.Release](), reflect.TypeFor[ledger.PolicyRecord]())
	for _, n := range []string{"path", "file", "dir", "root", "url", "config", "keyring", "allowed_signers", "trusted_root", "ca_pool", "policy_file", "repo", "db", "template", "cursor", "since", "as_of", "size", "from", "to", "index", "csrf", "token"} {
		names[n] = true
	}
	var nameList []string
	for n := range names {
		nameList = append(nameList, n)
	}
	sort.Strings(nameList)
	type route struct{ method, pattern string }
	var routes []route
	if err := chi.Walk(srv.Router(), func(method, pattern string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		routes = append(routes, route{method, pattern})
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(routes) < 30 {
		t.Fatalf("chi.Walk found %d routes", len(routes))
	}
	requests := 0
	send := func(tok, method, target, ctype string, body []byte) {
		req := httptest.NewRequest(method, target, bytes.NewReader(body))
		if ctype != "" {
			req.Header.Set("Content-Type", ctype)
		}
		req.Header.Set("Authorization", "Bearer "+tok)
		w := httptest.NewRecorder()
		srv.ServeHTTP(w, req)
		requests++
		if strings.Contains(w.Body.String(), secret) {
			t.Errorf("%s %s: the answer quotes the sentinel file", method, target)
		}
	}
	for _, tok := range []struct{ name, secret string }{{"record", e.record}, {"admin", e.admin}} {
		mu.Lock()
		accessed = nil
		mu.Unlock()
		for _, rt := range routes {
			for _, v := range values {
				p := rt.pattern
				for _, param := range []string{"{id}", "{version}", "{index}", "{ref}"} {
					p = strings.ReplaceAll(p, param, url.PathEscape(v))
				}
				p = strings.ReplaceAll(p, "*", url.PathEscape(v))
				q := url.Values{}
				for _, n := range nameList {
					q.Set(n, v)
				}
				send(tok.secret, rt.method, p+"?"+q.Encode(), "", nil)
				if rt.method != http.MethodPost && rt.method != http.MethodPut {
					continue
				}
				send(tok.secret, rt.method, p, "application/x-www-form-urlencoded", []byte(q.Encode()))
				for _, m := range []map[string]any{{"objects": []map[string]any{{"type": "commit", "id": v, "data": v}}}, {"files": map[string]string{v: v}}, {"subject": map[string]any{"repository": v}}, {"pins": []string{v}}} {
					b, _ := json.Marshal(m)
					send(tok.secret, rt.method, p, "application/json", b)
				}
				if rt.pattern == "/api/v1/evidence" {
					// Every format package ingest decodes, its path-like
					// members and an XML external entity naming v.
					for ct, body := range ingestPathBodies(v) {
						send(tok.secret, rt.method, p+"?lane=ci/v1&backend=cpu&repository=r&commit="+strings.Repeat("a", 40)+"&tree="+strings.Repeat("b", 40), ct, []byte(body))
					}
				}
				for _, n := range nameList {
					for _, val := range []any{v} {
						for _, base := range append([]map[string]any{{}}, bases[rt.pattern]...) {
							m := map[string]any{}
							for k, bv := range base {
								m[k] = bv
							}
							m[n] = val
							b, _ := json.Marshal(m)
							send(tok.secret, rt.method, p, "application/json", b)
						}
					}
				}
			}
		}
		if n := events(); n != 0 {
			t.Errorf("%s token: %d opens or reads of files outside the repository root", tok.name, n)
		}
		mu.Lock()
		for _, a := range accessed {
			if rel, err := filepath.Rel(root, a); tok.name == "record" || err != nil || strings.HasPrefix(rel, "..") {
				t.Errorf("%s token: the server resolved %s", tok.name, a)
			}
		}
		mu.Unlock()
	}
	t.Logf("%d routes, %d requests, %d member names", len(routes), requests, len(nameList))
	// The watch itself works: reading the sentinel is seen.
	if _, err := os.ReadFile(sentinel); err != nil {
		t.Fatal(err)
	}
	if n := events(); n == 0 && runtime.GOOS == "linux" {
		t.Fatal("inotify saw no event for a read of the sentinel: the watch proves nothing")
	}
}

// ingestPathBodies are inputs of each ingest format that name path v
// where a producer puts a file name: JUnit's file attributes and an
// external entity, test2json's package and output, an in-toto subject's
// name and uri, a DSSE envelope of that Statement, a Sigstore bundle's
// certificate and a --sigstore-policy style member.
func ingestPathBodies(v string) map[string]string {
	q, _ := json.Marshal(v)
	st := `{"_type":"https://in-toto.io/Statement/v1","subject":[{"name":` + string(q) + `,"uri":` + string(q) + `,"digest":{"sha256":"` + strings.Repeat("0", 64) + `"}}],"predicateType":"https://in-toto.io/attestation/test-result/v0.1","predicate":{"result":"PASSED","passedTests":[` + string(q) + `],"warnedTests":[],"failedTests":[],"configuration":[{"uri":` + string(q) + `}]}}`
	x := strings.NewReplacer("&", "&amp;", "<", "&lt;", `"`, "&quot;").Replace(v)
	return map[string]string{
		"application/junit+xml":                         `<?xml version="1.0"?><!DOCTYPE testsuites [<!ENTITY x SYSTEM "` + x + `">]><testsuites><testsuite name="s" file="` + x + `" tests="1"><testcase name="&x;" classname="c" file="` + x + `"/></testsuite></testsuites>`,
		"application/vnd.go.test2json+jsonl":            `{"Action":"run","Package":` + string(q) + `,"Test":"T"}` + "\n" + `{"Action":"output","Package":` + string(q) + `,"Test":"T","Output":` + string(q) + `}` + "\n" + `{"Action":"pass","Package":` + string(q) + `,"Test":"T"}` + "\n",
		"application/vnd.in-toto+json":                  st,
		"application/vnd.dsse.envelope.v1+json":         `{"payloadType":"application/vnd.in-toto+json","payload":"` + base64.StdEncoding.EncodeToString([]byte(st)) + `","signatures":[{"keyid":` + string(q) + `,"sig":"AAAA"}]}`,
		"application/vnd.dev.sigstore.bundle.v0.3+json": `{"mediaType":"application/vnd.dev.sigstore.bundle.v0.3+json","verificationMaterial":{"certificate":{"rawBytes":"AAAA"},"trusted_root":` + string(q) + `},"dsseEnvelope":{"payloadType":"application/vnd.in-toto+json","payload":"` + base64.StdEncoding.EncodeToString([]byte(st)) + `","signatures":[{"sig":"AAAA"}]}}`,
	}
}
