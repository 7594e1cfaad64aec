package ledger

import "encoding/json"

// ProvenanceField is the evidence details member that carries the build
// facts the server extracted from a verified SLSA provenance Statement
// (Provenance). Only the server sets it: a posted record carrying it is
// refused (gates.RefuseServerMarkers).
const ProvenanceField = "provenance"

// Provenance is what the server read from the verified bytes of a SLSA
// provenance Statement (https://slsa.dev/provenance/v1 or v0.2): the
// builder id, the build type, the source the build ran from, the build's
// external parameters (kept when they fit ProvenanceParamsMax bytes) and
// how the Statement's signature was verified ("runner-key" for a DSSE
// envelope signed by a registered runner key, "sigstore-certificate" for
// a Sigstore bundle). The record's artifact pins are the Statement's
// subjects.
type Provenance struct {
	PredicateType      string           `json:"predicate_type"`
	BuilderID          string           `json:"builder_id"`
	BuildType          string           `json:"build_type,omitempty"`
	Source             ProvenanceSource `json:"source"`
	ExternalParameters json.RawMessage  `json:"external_parameters,omitempty"`
	// ParamsOmitted is the size in bytes of external parameters too large
	// to keep (0 when they are kept or absent).
	ParamsOmitted int    `json:"external_parameters_omitted,omitempty"`
	VerifiedBy    string `json:"verified_by"`
}

// ProvenanceSource is the source a provenance says the build ran from:
// the repository as host/owner/name ("github.com/acme/app"), the URI as
// the provenance gives it, the ref ("refs/tags/v14") and the commit (40
// or 64 lowercase hex digits); any may be "" when the provenance does not
// say.
type ProvenanceSource struct {
	Repository string `json:"repository,omitempty"`
	URI        string `json:"uri,omitempty"`
	Ref        string `json:"ref,omitempty"`
	Commit     string `json:"commit,omitempty"`
}

// ProvenanceParamsMax is the largest external-parameters object, in
// bytes of JSON, a record keeps.
const ProvenanceParamsMax = 4096

// ProvenanceOf returns the provenance facts in e's details, or nil when
// it carries none (or they do not decode).
func ProvenanceOf(e *Evidence) *Provenance {
	if len(e.Details) == 0 {
		return nil
	}
	var probe struct {
		P *Provenance `json:"provenance"`
	}
	if json.Unmarshal(e.Details, &probe) != nil {
		return nil
	}
	return probe.P
}
