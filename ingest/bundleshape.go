package ingest

import (
	"bytes"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"

	"github.com/evidence-ledger/ledger/ledger"
)

// jsonValues is how many well-formed JSON values body holds one after
// another (a .jsonl file of bundles holds one a line), counting up to the
// first that does not parse.
func jsonValues(body []byte) int {
	dec := json.NewDecoder(bytes.NewReader(body))
	n := 0
	for {
		var v json.RawMessage
		if dec.Decode(&v) != nil {
			return n
		}
		n++
	}
}

// bundleBytesFields are the bundle's JSON members whose values are
// protobuf bytes (base64 in the protobuf JSON mapping) in
// protobuf-specs' bundle, envelope, common and rekor messages.
var bundleBytesFields = map[string]bool{
	"signedTimestamp": true, "rawBytes": true, "signature": true, "sig": true,
	"payload": true, "digest": true, "canonicalizedBody": true,
	"signedEntryTimestamp": true, "rootHash": true, "keyId": true, "hint": true,
}

// base64Wrapped is base64 text broken into lines (MIME and `base64`'s
// 76-column output).
var base64Wrapped = regexp.MustCompile(`^[A-Za-z0-9+/=_-]+(\r?\n[A-Za-z0-9+/=_-]+)+\r?\n?$`)

// unwrapBase64 is body with the line breaks removed from every bytes
// member (bundleBytesFields) whose base64 text is line-wrapped, and the
// JSON path of the first such member ("" when there is none, and then
// body is returned as is). The protobuf JSON mapping decodes standard or
// URL-safe base64 with or without padding; line breaks carry no bits, so
// the decoded bytes, which the signatures cover, are the same.
func unwrapBase64(body []byte) ([]byte, string) {
	var doc any
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber() // int64 members (logIndex, integratedTime) keep every digit
	if dec.Decode(&doc) != nil {
		return body, ""
	}
	first := ""
	var walk func(v any, path string) any
	walk = func(v any, path string) any {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				p := path + "." + k
				if s, ok := e.(string); ok && bundleBytesFields[k] && base64Wrapped.MatchString(s) {
					x[k] = strings.NewReplacer("\r", "", "\n", "").Replace(s)
					if first == "" || p < first {
						first = p
					}
					continue
				}
				x[k] = walk(e, p)
			}
		case []any:
			for i, e := range x {
				x[i] = walk(e, fmt.Sprintf("%s[%d]", path, i))
			}
		}
		return v
	}
	walk(doc, "")
	if first == "" {
		return body, ""
	}
	out, err := json.Marshal(doc)
	if err != nil {
		return body, ""
	}
	return out, strings.TrimPrefix(first, ".")
}

// checkChain refuses a bundle whose verificationMaterial carries an
// x509CertificateChain that is empty, or that holds a root (self-signed
// CA) certificate anywhere but last: bundle.proto has the leaf first and
// each next member the issuer of the one before, and signers "MUST NOT"
// include roots; verifiers "SHOULD" ignore one that old v0.1 bundles
// carry at the end, which this does (the root always comes from the
// trusted root). Both refusals are CodeUnauthorized naming the chain; a
// bundle without the member passes.
func checkChain(body []byte) error {
	var raw struct {
		VM struct {
			Chain *struct {
				Certificates []struct {
					RawBytes string `json:"rawBytes"`
				} `json:"certificates"`
			} `json:"x509CertificateChain"`
		} `json:"verificationMaterial"`
	}
	if json.Unmarshal(body, &raw) != nil || raw.VM.Chain == nil {
		return nil
	}
	field := "verificationMaterial.x509CertificateChain.certificates"
	if len(raw.VM.Chain.Certificates) == 0 {
		return &ledger.Error{Code: ledger.CodeUnauthorized, Field: field,
			Message: "the certificate chain is empty: the bundle carries no signing certificate"}
	}
	for i, c := range raw.VM.Chain.Certificates {
		der, err := base64.StdEncoding.DecodeString(c.RawBytes)
		if err != nil {
			continue // sigstore-go parsed it: its reading stands
		}
		cert, err := x509.ParseCertificate(der)
		if err != nil {
			continue
		}
		last := i == len(raw.VM.Chain.Certificates)-1
		if !last && cert.IsCA && bytes.Equal(cert.RawSubject, cert.RawIssuer) && cert.CheckSignatureFrom(cert) == nil {
			return &ledger.Error{Code: ledger.CodeUnauthorized, Field: fmt.Sprintf("%s[%d]", field, i),
				Message: "the certificate chain carries a root (self-signed CA) certificate before the certificates it should issue: a bundle carries the signing certificate and its intermediates, the root comes from the trusted root"}
		}
	}
	return nil
}
