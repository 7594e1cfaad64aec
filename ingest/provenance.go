package ingest

import (
	"bytes"
	"encoding/json"
	"errors"
	"slices"
	"strings"

	"github.com/evidence-ledger/ledger/ledger"
)

// The SLSA provenance predicate types (slsa.dev/spec/v1.0/provenance and
// slsa.dev/spec/v0.2/provenance; v0.2 is what slsa-github-generator's
// generic generator writes).
const (
	PredicateSLSAProvenanceV1  = "https://slsa.dev/provenance/v1"
	PredicateSLSAProvenanceV02 = "https://slsa.dev/provenance/v0.2"
)

// ProvenanceLane is the lane family whose lanes (provenance/v1, ...)
// accept SLSA provenance Statements, and only those.
const ProvenanceLane = "provenance"

// IsProvenance reports whether predicateType is a SLSA provenance
// predicate type the ledger reads facts from.
func IsProvenance(predicateType string) bool {
	return predicateType == PredicateSLSAProvenanceV1 || predicateType == PredicateSLSAProvenanceV02
}

// LanePredicates returns the in-toto predicate types lane accepts: the
// SLSA provenance types for a lane of the ProvenanceLane family
// ("provenance/v1"), the test-result predicate for every other lane.
// Params.PredicateType, when set, replaces this rule.
func LanePredicates(lane string) []string {
	if name, _, _ := strings.Cut(lane, "/"); name == ProvenanceLane {
		return []string{PredicateSLSAProvenanceV1, PredicateSLSAProvenanceV02}
	}
	return []string{PredicateTestResult}
}

// acceptsPredicate returns nil when p's lane accepts predicateType
// (Params.PredicateType, else LanePredicates), or a CodeInvalid error
// naming "predicateType" and what the lane expects.
func (p Params) acceptsPredicate(predicateType string) error {
	want := LanePredicates(p.Lane)
	if p.PredicateType != "" {
		want = []string{p.PredicateType}
	}
	if slices.Contains(want, predicateType) || slices.Contains(want, AnyPredicate) {
		return nil
	}
	return ledger.FieldError("predicateType", "the lane expects %s, the statement is %s", clip(strings.Join(want, " or ")), clip(predicateType))
}

// slsaV1 is the part of a SLSA provenance v1 predicate the ledger reads.
type slsaV1 struct {
	BuildDefinition struct {
		BuildType            string               `json:"buildType"`
		ExternalParameters   json.RawMessage      `json:"externalParameters"`
		InternalParameters   json.RawMessage      `json:"internalParameters"`
		ResolvedDependencies []ResourceDescriptor `json:"resolvedDependencies"`
	} `json:"buildDefinition"`
	RunDetails struct {
		Builder struct {
			ID string `json:"id"`
		} `json:"builder"`
	} `json:"runDetails"`
}

// slsaV02 is the part of a SLSA provenance v0.2 predicate the ledger reads.
type slsaV02 struct {
	Builder struct {
		ID string `json:"id"`
	} `json:"builder"`
	BuildType  string `json:"buildType"`
	Invocation struct {
		ConfigSource struct {
			URI    string            `json:"uri"`
			Digest map[string]string `json:"digest"`
		} `json:"configSource"`
		Parameters json.RawMessage `json:"parameters"`
	} `json:"invocation"`
}

// maxProvenanceFact is the longest builder id, build type, source URI or
// ref a provenance record keeps, in bytes.
const maxProvenanceFact = 1024

// extractProvenance reads the build facts of a SLSA provenance Statement
// st: the builder id, the build type, the source and the external
// parameters (ledger.Provenance; VerifiedBy is set by the caller, who
// verified the signature). The source is, for v1, the first resolved
// dependency with a gitCommit (or sha1) digest, else GitHub's
// externalParameters.workflow repository and ref with the
// internalParameters' GITHUB_SHA; for v0.2, invocation.configSource's uri
// and sha1 (or gitCommit) digest. A predicate whose members have the
// wrong JSON types, or a source commit that is not 40 or 64 lowercase
// hex digits, is a CodeInvalid error naming the member.
func extractProvenance(st *Statement) (*ledger.Provenance, error) {
	pv := &ledger.Provenance{PredicateType: st.PredicateType}
	var params json.RawMessage
	switch st.PredicateType {
	case PredicateSLSAProvenanceV1:
		var v slsaV1
		if err := json.Unmarshal(st.Predicate, &v); err != nil {
			return nil, predicateError(err)
		}
		bd := v.BuildDefinition
		pv.BuilderID, pv.BuildType, params = v.RunDetails.Builder.ID, bd.BuildType, bd.ExternalParameters
		for _, d := range bd.ResolvedDependencies {
			c := d.Digest["gitCommit"]
			if c == "" {
				c = d.Digest["sha1"]
			}
			if c != "" {
				pv.Source = sourceOf(d.URI, c)
				break
			}
		}
		if pv.Source.Commit == "" {
			pv.Source = githubSource(bd.ExternalParameters, bd.InternalParameters)
		}
	case PredicateSLSAProvenanceV02:
		var v slsaV02
		if err := json.Unmarshal(st.Predicate, &v); err != nil {
			return nil, predicateError(err)
		}
		cs := v.Invocation.ConfigSource
		c := cs.Digest["sha1"]
		if c == "" {
			c = cs.Digest["gitCommit"]
		}
		pv.BuilderID, pv.BuildType, params = v.Builder.ID, v.BuildType, v.Invocation.Parameters
		pv.Source = sourceOf(cs.URI, c)
	default:
		return nil, ledger.Errorf(ledger.CodeInternal, "not a provenance predicate type: %s", clip(st.PredicateType))
	}
	if pv.Source.Commit != "" && !ledger.ValidObjectID(pv.Source.Commit) {
		return nil, ledger.FieldError("predicate.source.commit", "want 40 or 64 lowercase hex digits, got %q", clip(pv.Source.Commit))
	}
	for _, f := range []struct{ name, v string }{{"builder id", pv.BuilderID}, {"build type", pv.BuildType},
		{"source uri", pv.Source.URI}, {"source ref", pv.Source.Ref}} {
		if len(f.v) > maxProvenanceFact {
			return nil, ledger.FieldError("predicate", "the %s is longer than %d bytes", f.name, maxProvenanceFact)
		}
	}
	if p := bytes.TrimSpace(params); len(p) > 0 && !bytes.Equal(p, []byte("null")) {
		var buf bytes.Buffer
		if json.Compact(&buf, p) == nil && buf.Len() <= ledger.ProvenanceParamsMax {
			pv.ExternalParameters = buf.Bytes()
		} else {
			pv.ParamsOmitted = len(p)
		}
	}
	return pv, nil
}

// predicateError names the predicate member a JSON type error is about.
func predicateError(err error) error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) && te.Field != "" {
		return ledger.FieldError("predicate."+te.Field, "want a JSON %s", te.Type.Kind())
	}
	return ledger.FieldError("predicate", "not a SLSA provenance predicate: malformed JSON")
}

// sourceOf is the source a git URI ("git+https://github.com/o/r@refs/tags/v1")
// and a commit name.
func sourceOf(uri, commit string) ledger.ProvenanceSource {
	s := ledger.ProvenanceSource{URI: uri, Commit: commit}
	rest := strings.TrimPrefix(uri, "git+")
	if i := strings.Index(rest, "://"); i >= 0 {
		rest = rest[i+3:]
	}
	if at := strings.LastIndex(rest, "@"); at >= 0 {
		rest, s.Ref = rest[:at], rest[at+1:]
	}
	s.Repository = strings.TrimSuffix(strings.TrimSuffix(rest, "/"), ".git")
	return s
}

// githubSource is the source of a GitHub Actions build type's
// provenance: externalParameters.workflow.repository and .ref, with the
// commit from internalParameters.github.sha or GITHUB_SHA.
func githubSource(external, internal json.RawMessage) ledger.ProvenanceSource {
	var ext struct {
		Workflow struct {
			Repository string `json:"repository"`
			Ref        string `json:"ref"`
		} `json:"workflow"`
	}
	var in struct {
		GitHub struct {
			SHA string `json:"sha"`
		} `json:"github"`
		SHA  string `json:"GITHUB_SHA"`
		Repo string `json:"GITHUB_REPOSITORY"`
		Ref  string `json:"GITHUB_REF"`
	}
	_ = json.Unmarshal(external, &ext)
	_ = json.Unmarshal(internal, &in)
	commit := in.GitHub.SHA
	if commit == "" {
		commit = in.SHA
	}
	repo, ref := ext.Workflow.Repository, ext.Workflow.Ref
	if repo == "" && in.Repo != "" {
		repo = "https://github.com/" + in.Repo
	}
	if ref == "" {
		ref = in.Ref
	}
	if repo == "" && commit == "" {
		return ledger.ProvenanceSource{}
	}
	s := sourceOf(repo, commit)
	s.Ref = ref
	return s
}
