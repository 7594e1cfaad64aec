package web

import (
	"net/http"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/evidence-ledger/ledger/runs"
	"github.com/go-chi/chi/v5"
	"gopkg.in/yaml.v3"
)

// TestOpenAPIMatchesRouter: every /api/v1 route of the router is described
// in web/openapi.yaml and every described operation is routed.
func TestOpenAPIMatchesRouter(t *testing.T) {
	e := newAPIEnv(t, Config{})
	var doc struct {
		OpenAPI string                            `yaml:"openapi"`
		Paths   map[string]map[string]interface{} `yaml:"paths"`
	}
	if err := yaml.Unmarshal(openAPI, &doc); err != nil {
		t.Fatalf("openapi.yaml: %v", err)
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.") {
		t.Fatalf("openapi version %q", doc.OpenAPI)
	}
	described := map[string]bool{}
	for p, ops := range doc.Paths {
		for m := range ops {
			if m == "parameters" {
				continue
			}
			described[strings.ToUpper(m)+" "+p] = true
		}
	}
	routed := map[string]bool{}
	srv, _ := New(Config{Store: e.store})
	err := chi.Walk(srv.Router(), func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		if rest, ok := strings.CutPrefix(route, "/api/v1"); ok && rest != "/*" {
			rest = strings.TrimSuffix(rest, "/")
			if strings.HasSuffix(rest, "/*") {
				rest = strings.TrimSuffix(rest, "*") + "{path}"
			}
			routed[method+" "+rest] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var missing, stale []string
	for r := range routed {
		if !described[r] {
			missing = append(missing, r)
		}
	}
	for d := range described {
		if !routed[d] {
			stale = append(stale, d)
		}
	}
	sort.Strings(missing)
	sort.Strings(stale)
	if len(missing) > 0 || len(stale) > 0 {
		t.Fatalf("openapi.yaml out of date:\n routed but not described: %v\n described but not routed: %v", missing, stale)
	}
	code, body := e.do(t, "GET", "/api/v1/openapi.yaml", "", nil)
	if code != 200 || !strings.Contains(string(body), "openapi:") {
		t.Fatalf("served openapi: %d", code)
	}
}

// TestAPIQueryNamesMatchOpenAPI: the query names checkQuery lets through
// (apiQueryNames) are exactly those web/openapi.yaml documents at some
// route, inline or through components/parameters.
func TestAPIQueryNamesMatchOpenAPI(t *testing.T) {
	var doc any
	if err := yaml.Unmarshal(openAPI, &doc); err != nil {
		t.Fatalf("openapi.yaml: %v", err)
	}
	documented := map[string]bool{}
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			if x["in"] == "query" {
				if n, ok := x["name"].(string); ok {
					documented[n] = true
				}
			}
			for _, c := range x {
				walk(c)
			}
		case []any:
			for _, c := range x {
				walk(c)
			}
		}
	}
	walk(doc)
	for n := range documented {
		if !apiQueryNames[n] {
			t.Errorf("openapi.yaml documents query parameter %q, which checkQuery refuses", n)
		}
	}
	for n := range apiQueryNames {
		if !documented[n] {
			t.Errorf("checkQuery lets %q through, but openapi.yaml documents it at no route", n)
		}
	}
}

// TestOpenAPIApproveBodyMatchesRequest: the approve route's request body
// in web/openapi.yaml, which refuses other members, lists exactly the
// JSON members of runs.ApproveRequest.
func TestOpenAPIApproveBodyMatchesRequest(t *testing.T) {
	var doc struct {
		Paths map[string]map[string]yaml.Node `yaml:"paths"`
	}
	if err := yaml.Unmarshal(openAPI, &doc); err != nil {
		t.Fatalf("openapi.yaml: %v", err)
	}
	var op struct {
		RequestBody struct {
			Content map[string]struct {
				Schema struct {
					AdditionalProperties *bool          `yaml:"additionalProperties"`
					Properties           map[string]any `yaml:"properties"`
				} `yaml:"schema"`
			} `yaml:"content"`
		} `yaml:"requestBody"`
	}
	node := doc.Paths["/agents/{name}/approve"]["post"]
	if err := node.Decode(&op); err != nil {
		t.Fatalf("openapi.yaml /agents/{name}/approve: %v", err)
	}
	schema := op.RequestBody.Content["application/json"].Schema
	var got []string
	for k := range schema.Properties {
		got = append(got, k)
	}
	want := map[string]bool{}
	jsonNames(want, reflect.TypeOf(runs.ApproveRequest{}))
	var wantList []string
	for k := range want {
		wantList = append(wantList, k)
	}
	slices.Sort(got)
	slices.Sort(wantList)
	if !slices.Equal(got, wantList) || schema.AdditionalProperties == nil || *schema.AdditionalProperties {
		t.Fatalf("openapi.yaml /agents/{name}/approve body members %v (additionalProperties %v), runs.ApproveRequest has %v", got, schema.AdditionalProperties, wantList)
	}
}
