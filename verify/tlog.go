package verify

import (
	"crypto/sha256"
	"crypto/x509"
	"encoding/asn1"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"time"

	"github.com/digitorus/pkcs7"
	protocommon "github.com/sigstore/protobuf-specs/gen/pb-go/common/v1"
	rekorpb "github.com/sigstore/protobuf-specs/gen/pb-go/rekor/v1"
	"github.com/sigstore/sigstore-go/pkg/root"
	"github.com/sigstore/sigstore-go/pkg/tlog"
	"github.com/sigstore/sigstore/pkg/signature"
	"google.golang.org/protobuf/proto"
)

// TlogEntry is a Rekor transparency-log entry embedded in a gitsign
// signature and verified offline: its body is rebuilt from the signature
// itself (a hashedrekord v0.0.1 of the CMS signature, the SHA-256 of its
// signed attributes and the signing certificate, as gitsign uploads it),
// so a verified entry is about this signature and no other. LogIndex and
// IntegratedTime are authenticated by the signed entry timestamp only:
// when Verified lacks "set" they are the entry's own claims.
type TlogEntry struct {
	LogID          string    `json:"log_id"` // hex SHA-256 of the log's public key
	LogIndex       int64     `json:"log_index"`
	IntegratedTime time.Time `json:"integrated_time"`
	// Verified names what checked out against the trusted root's
	// transparency-log key: "set" (the signed entry timestamp),
	// "inclusion_proof" (a Merkle inclusion proof to a signed checkpoint),
	// or both.
	Verified []string `json:"verified"`
	// CertificateValid reports that the integrated time, authenticated by
	// the signed entry timestamp (an inclusion proof does not cover it),
	// lies within the signing certificate's validity (Fulcio certificates
	// live minutes).
	CertificateValid bool `json:"certificate_valid"`
}

// Rekor CMS unsigned attributes. gitsign embeds a serialized
// rekor.v1.TransparencyLogEntry (canonicalized body cleared) under
// 1.3.6.1.4.1.57264.3.1 (sigstore/gitsign internal/rekor/oid, following
// sigstore/rekor#1390); early gitsign releases stored the fields one per
// attribute under 1.3.6.1.4.1.57264.3.0-3.8, the layout read here as
// legacy.
var (
	oidRekorArc = asn1.ObjectIdentifier{1, 3, 6, 1, 4, 1, 57264, 3}
)

// verifyTlog verifies the Rekor entry embedded in the signer's unsigned
// attributes against tm's transparency logs. It returns nil, nil when no
// entry is embedded.
func verifyTlog(p7 *pkcs7.PKCS7, leaf *x509.Certificate, tm root.TrustedMaterial) (*TlogEntry, error) {
	attrs := map[int]asn1.RawValue{}
	for _, a := range p7.Signers[0].UnauthenticatedAttributes {
		if len(a.Type) == len(oidRekorArc)+1 && a.Type[:len(oidRekorArc)].Equal(oidRekorArc) {
			attrs[a.Type[len(oidRekorArc)]] = a.Value
		}
	}
	v, ok := attrs[1]
	if !ok {
		return nil, nil
	}
	if tm == nil {
		return nil, errors.New("no Sigstore trusted root to verify it against")
	}
	var tle *rekorpb.TransparencyLogEntry
	var err error
	if len(v.Bytes) > 0 && v.Bytes[0] == asn1.TagOctetString {
		tle, err = protoEntry(v.Bytes)
	} else {
		tle, err = legacyEntry(attrs)
	}
	if err != nil {
		return nil, err
	}
	body, err := hashedRekordBody(p7, leaf)
	if err != nil {
		return nil, err
	}
	tle.CanonicalizedBody = body
	tle.KindVersion = &rekorpb.KindVersion{Kind: "hashedrekord", Version: "0.0.1"}
	entry, err := tlog.ParseTransparencyLogEntry(tle)
	if err != nil {
		return nil, fmt.Errorf("rekor entry: %w", err)
	}
	out := &TlogEntry{LogID: hex.EncodeToString(tle.GetLogId().GetKeyId()), LogIndex: tle.LogIndex, IntegratedTime: entry.IntegratedTime().UTC()}
	logs := tm.RekorLogs()
	var errs []error
	if entry.HasInclusionPromise() {
		if err := tlog.VerifySET(entry, logs); err != nil {
			errs = append(errs, fmt.Errorf("signed entry timestamp: %w", err))
		} else {
			out.Verified = append(out.Verified, "set")
		}
	}
	if entry.HasInclusionProof() {
		if err := verifyInclusion(entry, logs, out.LogID); err != nil {
			errs = append(errs, fmt.Errorf("inclusion proof: %w", err))
		} else {
			out.Verified = append(out.Verified, "inclusion_proof")
		}
	}
	if len(out.Verified) == 0 {
		if len(errs) == 0 {
			return nil, errors.New("rekor entry carries neither a signed entry timestamp nor an inclusion proof")
		}
		return nil, errors.Join(errs...)
	}
	it := out.IntegratedTime
	out.CertificateValid = out.Verified[0] == "set" && !it.Before(leaf.NotBefore) && !it.After(leaf.NotAfter)
	return out, nil
}

func verifyInclusion(entry *tlog.Entry, logs map[string]*root.TransparencyLog, logID string) error {
	tl, ok := logs[logID]
	if !ok {
		return fmt.Errorf("log %s is not in the trusted root", logID)
	}
	v, err := signature.LoadVerifier(tl.PublicKey, tl.SignatureHashFunc)
	if err != nil {
		return err
	}
	return tlog.VerifyInclusion(entry, v)
}

// protoEntry reads the serialized TransparencyLogEntry of the current
// gitsign layout (an OCTET STRING holding the protobuf bytes).
func protoEntry(der []byte) (*rekorpb.TransparencyLogEntry, error) {
	var b []byte
	if rest, err := asn1.Unmarshal(der, &b); err != nil || len(rest) != 0 {
		return nil, fmt.Errorf("rekor entry attribute is not one OCTET STRING")
	}
	var tle rekorpb.TransparencyLogEntry
	if err := proto.Unmarshal(b, &tle); err != nil {
		return nil, fmt.Errorf("rekor entry protobuf: %w", err)
	}
	return &tle, nil
}

// legacyEntry reads the one-field-per-attribute layout: 3.0 integrated
// time, 3.1 log id (hex), 3.2 log index, 3.3 signed entry timestamp, 3.4
// checkpoint, 3.5 proof hashes (hex), 3.6 root hash (hex), 3.7 tree size,
// 3.8 the entry's index in the tree.
func legacyEntry(attrs map[int]asn1.RawValue) (*rekorpb.TransparencyLogEntry, error) {
	var it, index int64
	var logID string
	var set []byte
	for _, f := range []struct {
		n   int
		dst any
	}{{0, &it}, {1, &logID}, {2, &index}, {3, &set}} {
		v, ok := attrs[f.n]
		if !ok {
			return nil, fmt.Errorf("rekor attribute 1.3.6.1.4.1.57264.3.%d missing", f.n)
		}
		if _, err := asn1.Unmarshal(v.Bytes, f.dst); err != nil {
			return nil, fmt.Errorf("rekor attribute 1.3.6.1.4.1.57264.3.%d: %w", f.n, err)
		}
	}
	id, err := hex.DecodeString(logID)
	if err != nil {
		return nil, fmt.Errorf("rekor log id: %w", err)
	}
	tle := &rekorpb.TransparencyLogEntry{LogIndex: index, LogId: &protocommon.LogId{KeyId: id}, IntegratedTime: it,
		InclusionPromise: &rekorpb.InclusionPromise{SignedEntryTimestamp: set}}
	if _, ok := attrs[4]; !ok {
		return tle, nil
	}
	var checkpoint, rootHex string
	var hashes []string
	var size, proofIndex int64
	for _, f := range []struct {
		n   int
		dst any
	}{{4, &checkpoint}, {5, &hashes}, {6, &rootHex}, {7, &size}, {8, &proofIndex}} {
		v, ok := attrs[f.n]
		if !ok {
			return nil, fmt.Errorf("rekor attribute 1.3.6.1.4.1.57264.3.%d missing", f.n)
		}
		if _, err := asn1.Unmarshal(v.Bytes, f.dst); err != nil {
			return nil, fmt.Errorf("rekor attribute 1.3.6.1.4.1.57264.3.%d: %w", f.n, err)
		}
	}
	ip := &rekorpb.InclusionProof{LogIndex: proofIndex, TreeSize: size, Checkpoint: &rekorpb.Checkpoint{Envelope: checkpoint}}
	if ip.RootHash, err = hex.DecodeString(rootHex); err != nil {
		return nil, fmt.Errorf("rekor root hash: %w", err)
	}
	for _, h := range hashes {
		b, err := hex.DecodeString(h)
		if err != nil {
			return nil, fmt.Errorf("rekor proof hash: %w", err)
		}
		ip.Hashes = append(ip.Hashes, b)
	}
	tle.InclusionProof = ip
	return tle, nil
}

// cmsAttribute mirrors a CMS Attribute for re-encoding signed attributes.
type cmsAttribute struct {
	Type  asn1.ObjectIdentifier
	Value asn1.RawValue `asn1:"set"`
}

// hashedRekordBody is the canonical hashedrekord v0.0.1 body gitsign
// records: the SHA-256 of the DER SET OF signed attributes (what the CMS
// signature covers, RFC 5652 5.4), the signature, and the PEM leaf.
// The JSON keys are in RFC 8785 order, as Rekor canonicalizes them.
func hashedRekordBody(p7 *pkcs7.PKCS7, leaf *x509.Certificate) ([]byte, error) {
	si := p7.Signers[0]
	var attrs []cmsAttribute
	for _, a := range si.AuthenticatedAttributes {
		attrs = append(attrs, cmsAttribute{a.Type, a.Value})
	}
	enc, err := asn1.Marshal(struct {
		A []cmsAttribute `asn1:"set"`
	}{attrs})
	if err != nil {
		return nil, err
	}
	var seq asn1.RawValue
	if _, err := asn1.Unmarshal(enc, &seq); err != nil {
		return nil, err
	}
	digest := sha256.Sum256(seq.Bytes)
	type content struct {
		Content string `json:"content"`
	}
	body := struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Spec       struct {
			Data struct {
				Hash struct {
					Algorithm string `json:"algorithm"`
					Value     string `json:"value"`
				} `json:"hash"`
			} `json:"data"`
			Signature struct {
				Content   string  `json:"content"`
				PublicKey content `json:"publicKey"`
			} `json:"signature"`
		} `json:"spec"`
	}{APIVersion: "0.0.1", Kind: "hashedrekord"}
	body.Spec.Data.Hash.Algorithm = "sha256"
	body.Spec.Data.Hash.Value = hex.EncodeToString(digest[:])
	body.Spec.Signature.Content = base64.StdEncoding.EncodeToString(si.EncryptedDigest)
	body.Spec.Signature.PublicKey.Content = base64.StdEncoding.EncodeToString(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: leaf.Raw}))
	return json.Marshal(body)
}
