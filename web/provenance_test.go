package web

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/evidence-ledger/ledger/ingest"
	"github.com/evidence-ledger/ledger/ledger"
)

// provStatement is a SLSA provenance v1 Statement: artifact name at
// digest (64 hex), built by builder from repo's commit.
func provStatement(t *testing.T, name, digest, builder, repo, commit string) []byte {
	t.Helper()
	b, err := json.Marshal(map[string]any{
		"_type":         ingest.StatementV1,
		"subject":       []map[string]any{{"name": name, "digest": map[string]string{"sha256": digest}}},
		"predicateType": ingest.PredicateSLSAProvenanceV1,
		"predicate": map[string]any{
			"buildDefinition": map[string]any{
				"buildType":            "https://actions.github.io/buildtypes/workflow/v1",
				"externalParameters":   map[string]any{"workflow": map[string]string{"repository": "https://" + repo, "ref": "refs/heads/main", "path": ".github/workflows/release.yml"}},
				"resolvedDependencies": []map[string]any{{"uri": "git+https://" + repo + "@refs/heads/main", "digest": map[string]string{"gitCommit": commit}}},
			},
			"runDetails": map[string]any{"builder": map[string]string{"id": builder}},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestProvenanceGateThroughAPI: a release's provenance gate passes only on
// provenance signed by a registered runner key (a DSSE envelope the test
// signs) for the artifact's bound digest, from an allowed builder, at the
// component's reviewed commit; provenance from another builder, of
// another commit or about another digest is baseline with the reason; a
// bare (unsigned) provenance Statement and a native record carrying
// details.provenance are refused naming the field, nothing appended.
func TestProvenanceGateThroughAPI(t *testing.T) {
	e := newRunnerEnv(t)
	const repo, builder = "github.com/ml-explore/mlx", "https://github.com/ml-explore/mlx/.github/workflows/release.yml@refs/heads/main"
	reviewed, head := fmt.Sprintf("%040x", 0x51), fmt.Sprintf("%040x", 0x52)
	lib, other := strings.Repeat("c", 64), strings.Repeat("d", 64)
	rel := fmt.Sprintf(`version: 5.0.0
components:
  - {name: core, repository: %s, reviewed: %s, head: %s}
artifacts:
  libmlx.so: sha256:%s
gates:
  - {id: built, kind: provenance, component: core, artifact: libmlx.so, builders: [%q]}
`, repo, reviewed, head, lib, builder)
	if code, body := e.do(t, http.MethodPut, "/api/v1/releases/5.0.0", e.admin, rel, "Content-Type", "application/yaml"); code != http.StatusCreated && code != http.StatusOK {
		t.Fatalf("define release: %d %s", code, body)
	}
	path := "/api/v1/evidence?" + url.Values{"lane": {"provenance/v1"}, "backend": {"external"}, "tree": {strings.Repeat("e", 40)}}.Encode()
	post := func(ct string, body []byte) (int, []byte) {
		return e.postAs(t, e.admin, path, ct, body)
	}
	signed := func(st []byte) []byte { return dsseEnvelope(t, e.mac, ledger.PayloadTypeInToto, st) }
	gate := func() (string, map[string]string) {
		state, bl, _ := e.readiness(t, "5.0.0").gate(t, "built")
		return state, bl
	}

	// Refused: unsigned provenance, and a posted native record carrying
	// the server's provenance facts.
	good := provStatement(t, "libmlx.so", lib, builder, repo, reviewed)
	forged, _ := json.Marshal(map[string]any{"lane": "provenance/v1", "backend": "external", "status": "passed",
		"subject":     map[string]any{"repository": repo, "commit": reviewed, "tree": "", "artifacts": map[string]string{"libmlx.so": "sha256:" + lib}},
		"cases_exact": 1, "cases_total": 1, "control": "none", "started_at": "2026-12-01T00:00:00Z", "finished_at": "2026-12-01T00:00:00Z",
		"details": map[string]any{"PROVENANCE": map[string]any{"builder_id": builder, "verified_by": "runner-key", "source": map[string]string{"commit": reviewed}}}})
	for _, tc := range []struct {
		name, ct, path, field string
		body                  []byte
	}{
		{"unsigned Statement", "application/vnd.in-toto+json", path, "predicateType", good},
		{"native record with details.provenance", "application/json", "/api/v1/evidence", "details.provenance", forged},
	} {
		before := e.size(t)
		code, body := e.postAs(t, e.admin, tc.path, tc.ct, tc.body)
		var ae struct{ Field string }
		_ = json.Unmarshal(body, &ae)
		if code != http.StatusBadRequest || ae.Field != tc.field {
			t.Fatalf("%s: %d %s; want 400 naming %s", tc.name, code, body, tc.field)
		}
		if e.size(t) != before {
			t.Fatalf("%s: appended", tc.name)
		}
	}

	// Verified, but not counted: each with its reason.
	for _, tc := range []struct {
		name, why string
		st        []byte
	}{
		{"another builder", "not a builder the gate allows", provStatement(t, "libmlx.so", lib, "https://evil.example/builder", repo, reviewed)},
		{"another commit", "built from commit", provStatement(t, "libmlx.so", lib, builder, repo, head)},
		{"another artifact digest", "other artifact libmlx.so", provStatement(t, "libmlx.so", other, builder, repo, reviewed)},
		{"another repository", "built from repository", provStatement(t, "libmlx.so", lib, builder, "github.com/evil/fork", reviewed)},
	} {
		q := path
		if tc.name == "another commit" || tc.name == "another repository" {
			// The record's pins are the release's; only the provenance's
			// source differs.
			q += "&" + url.Values{"repository": {repo}, "commit": {reviewed}}.Encode()
		}
		code, body := e.postAs(t, e.admin, q, ledger.ContentTypeDSSE, signed(tc.st))
		if code != http.StatusCreated {
			t.Fatalf("%s: %d %s", tc.name, code, body)
		}
		id := e.lastID(t, body)
		state, bl := gate()
		if state != "open" || !strings.Contains(bl[id], tc.why) {
			t.Fatalf("%s: gate %s, baseline %q; want open with %q", tc.name, state, bl[id], tc.why)
		}
		if e.readiness(t, "5.0.0").Readiness.Ready {
			t.Fatalf("%s: ready", tc.name)
		}
	}

	// The right provenance: ready, with the server's facts in the record.
	code, body := post(ledger.ContentTypeDSSE, signed(good))
	if code != http.StatusCreated {
		t.Fatalf("good: %d %s", code, body)
	}
	goodID := e.lastID(t, body)
	ev := e.evidenceOf(t, body)
	pv := ledger.ProvenanceOf(&ev)
	if pv == nil || pv.BuilderID != builder || pv.Source.Commit != reviewed || pv.Source.Repository != repo || pv.VerifiedBy != "runner-key" ||
		pv.Source.Ref != "refs/heads/main" || !strings.Contains(string(pv.ExternalParameters), "release.yml") || ev.Subject.Artifacts["libmlx.so"] != "sha256:"+lib {
		t.Fatalf("provenance facts %+v, subject %+v", pv, ev.Subject)
	}
	if state, _ := gate(); state != "passed" || !e.readiness(t, "5.0.0").Readiness.Ready {
		t.Fatalf("good provenance: gate %s", state)
	}

	// Revoking the runner key that signed it revokes the provenance it
	// vouched for, as for signed_by: the record becomes baseline, naming
	// the revocation, and the release is no longer ready.
	if code, body := e.do(t, http.MethodPost, "/api/v1/runners/ci-mac/revoke", e.admin, map[string]string{"reason": "key leaked"}); code != http.StatusCreated {
		t.Fatalf("revoke: %d %s", code, body)
	}
	if state, bl := gate(); state != "open" || !strings.Contains(bl[goodID], "revoked") || e.readiness(t, "5.0.0").Readiness.Ready {
		t.Fatalf("after the signing key's revocation: gate %s, baseline %q; want open naming the revocation", state, bl[goodID])
	}
}

// TestProvenanceSigstoreBundleThroughAPI: slsa-github-generator's own
// provenance (Sigstore bundles of the shared corpus, from slsa-verifier's
// testdata, verified offline against the public-good trusted root) passes
// a provenance gate naming its builder, the artifact's digest and the
// source commit; SLSA v0.2 (generic generator v2.1.0) and v1 (BYOB
// delegator v2.1.0). The same bundle under a gate naming another builder
// is baseline with the reason.
func TestProvenanceSigstoreBundleThroughAPI(t *testing.T) {
	c := corpusRoot(t)
	tr, err := ingest.LoadTrustedRoot(filepath.Join(c, "x509", "sigstore-go", "trusted-roots", "trusted-root-public-good.json"))
	if err != nil {
		t.Fatal(err)
	}
	e := &runnerEnv{apiEnv: newAPIEnv(t, Config{Sigstore: &ingest.SigstoreConfig{TrustedRoot: tr, Rules: []ingest.SigstoreRule{
		{Lane: "provenance/v1", Issuer: "https://token.actions.githubusercontent.com", SANRegexp: `^https://github\.com/slsa-framework/`}}}})}
	admin, _, err := e.store.CreateToken(t.Context(), "admin", ledger.ScopeAdmin, nil)
	if err != nil {
		t.Fatal(err)
	}
	const commit = "4d329c75e7ec1725f7c9ce917a8799d408d06be3" // slsa-framework/example-package tag v14
	generic := "https://github.com/slsa-framework/slsa-github-generator/.github/workflows/generator_generic_slsa3.yml@refs/tags/v2.1.0"
	delegator := "https://github.com/slsa-framework/example-trw/.github/workflows/builder_high-perms_slsa3.yml@refs/tags/v2.1.0"
	rel := fmt.Sprintf(`version: 6.0.0
components:
  - {name: pkg, repository: github.com/slsa-framework/example-package, reviewed: %[1]s, head: %[1]s}
artifacts:
  gha_generic-binary-linux-amd64-v14: sha256:376e7e01348585b6e6643bc6663146b9d525d9b41228bf180eaeb4d4a3706caa
  gha_delegator-binary-linux-amd64-v14: sha256:5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03
gates:
  - {id: generic, kind: provenance, component: pkg, artifact: gha_generic-binary-linux-amd64-v14, builders: [%[2]q]}
  - {id: delegator, kind: provenance, component: pkg, artifact: gha_delegator-binary-linux-amd64-v14, source: head, builders: [%[3]q]}
  - {id: strict, kind: provenance, component: pkg, artifact: gha_generic-binary-linux-amd64-v14, builders: [%[3]q]}
`, commit, generic, delegator)
	if code, body := e.do(t, http.MethodPut, "/api/v1/releases/6.0.0", admin, rel, "Content-Type", "application/yaml"); code != http.StatusCreated && code != http.StatusOK {
		t.Fatalf("define release: %d %s", code, body)
	}
	path := "/api/v1/evidence?" + url.Values{"lane": {"provenance/v1"}, "backend": {"external"}, "tree": {strings.Repeat("e", 40)}}.Encode()
	ids := map[string]string{}
	for _, f := range []string{"gha_generic-v2.1.0-binary-linux-amd64-push-v14.intoto.jsonl", "gha_delegator-v2.1.0-binary-linux-amd64-push-v14.build.slsa"} {
		b, err := os.ReadFile(filepath.Join(c, "attest", "slsa-verifier", f))
		if err != nil {
			t.Fatal(err)
		}
		code, body := e.postAs(t, admin, path, ingest.MediaSigstoreBundle, b)
		if code != http.StatusCreated {
			t.Fatalf("%s: %d %s", f, code, body)
		}
		ev := e.evidenceOf(t, body)
		pv := ledger.ProvenanceOf(&ev)
		if pv == nil || pv.VerifiedBy != "sigstore-certificate" || pv.Source.Commit != commit || pv.Source.Repository != "github.com/slsa-framework/example-package" {
			t.Fatalf("%s: provenance %+v", f, pv)
		}
		ids[f] = e.lastID(t, body)
	}
	rd := e.readiness(t, "6.0.0")
	for _, id := range []string{"generic", "delegator"} {
		if state, _, _ := rd.gate(t, id); state != "passed" {
			t.Fatalf("gate %s: %s %+v", id, state, rd)
		}
	}
	state, bl, _ := rd.gate(t, "strict")
	if state != "open" || !strings.Contains(bl[ids["gha_generic-v2.1.0-binary-linux-amd64-push-v14.intoto.jsonl"]], "not a builder the gate allows") {
		t.Fatalf("strict gate %s, baseline %v", state, bl)
	}
}
