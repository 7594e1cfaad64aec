package ingest

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"testing"

	"github.com/evidence-ledger/ledger/ledger"
)

// fuzzDecode decodes data as format and checks what any decoder must
// hold: no panic; on success the records are the original, byte for
// byte, then evidence that validates and names it; on failure an error
// that never quotes more than a clipped fragment of the input.
func fuzzDecode(t *testing.T, format string, data []byte, p Params) {
	fuzzDecodeWith(t, nil, format, data, p)
}

// fuzzDecodeWith is fuzzDecode with keys verifying a DSSE envelope first
// (decodeWith).
func fuzzDecodeWith(t *testing.T, keys envelopeKeys, format string, data []byte, p Params) {
	res, err := decodeWith(context.Background(), keys, format, data, p)
	if err != nil {
		if len(data) > 200 && bytes.Contains([]byte(err.Error()), data) {
			t.Fatalf("error echoes the input")
		}
		return
	}
	if len(res.Records) != 2 || res.Records[0].Kind != ledger.KindOriginal {
		t.Fatalf("records %+v", res.Records)
	}
	o, _, err := ledger.PrepareOriginal(res.Records[0].Body)
	if err != nil || !bytes.Equal(o.Content, data) {
		t.Fatalf("original: %v, equal %v", err, bytes.Equal(o.Content, data))
	}
	if _, _, err := ledger.PrepareEvidence(res.Records[1].Body); err != nil {
		t.Fatalf("evidence does not validate: %v", err)
	}
}

func FuzzJUnit(f *testing.F) {
	f.Add([]byte(`<testsuites tests="1"><testsuite name="s" tests="1"><testcase name="a"/></testsuite></testsuites>`))
	f.Add([]byte(`<?xml version="1.0" encoding="ISO-8859-1"?><testsuite tests="2" failures="1"><testcase name="a"><failure/></testcase><testcase name="a"><flakyFailure/></testcase></testsuite>`))
	f.Add([]byte(`<testsuite><testsuite><testcase classname="c" name="&amp;"><skipped/></testcase></testsuite></testsuite>`))
	f.Fuzz(func(t *testing.T, data []byte) { fuzzDecode(t, FormatJUnit, data, testParams()) })
}

func FuzzGoTest(f *testing.F) {
	f.Add([]byte(`{"Action":"run","Package":"p","Test":"T"}` + "\n" + `{"Action":"pass","Package":"p","Test":"T"}` + "\n" + `{"Action":"pass","Package":"p"}`))
	f.Add([]byte(`{"Action":"build-fail","ImportPath":"p [p.test]"}` + "\n" + `{"Action":"fail","Package":"p","FailedBuild":"p [p.test]"}`))
	f.Add([]byte(`{"Action":"run","Package":"p","Test":"T/sub"}` + "\n" + `{"Action":"out`))
	f.Fuzz(func(t *testing.T, data []byte) { fuzzDecode(t, FormatGoTest, data, testParams()) })
}

func FuzzStatement(f *testing.F) {
	f.Add([]byte(`{"_type":"https://in-toto.io/Statement/v1","subject":[{"name":"x","digest":{"gitCommit":"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"}}],"predicateType":"https://in-toto.io/attestation/test-result/v0.1","predicate":{"result":"PASSED","passedTests":["a"],"warnedTests":[],"failedTests":[]}}`))
	f.Add([]byte(`{"_type":"https://in-toto.io/Statement/v1","subject":[{"name":"x","digest":{"sha256":"0000000000000000000000000000000000000000000000000000000000000000"}}],"predicateType":"https://in-toto.io/attestation/test-result/v0.1","predicate":{"result":"FAILED","passedTests":[],"warnedTests":["w"],"failedTests":["f"]}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		p := testParams()
		p.Commit = ""
		fuzzDecode(t, FormatInToto, data, p)
	})
}

func FuzzDSSE(f *testing.F) {
	seed := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{7}, 32))
	keys := testRegistry(f, map[string]ed25519.PublicKey{"fuzz": seed.Public().(ed25519.PublicKey)})
	f.Add([]byte(`{"payloadType":"application/vnd.in-toto+json","payload":"e30=","signatures":[{"keyid":"k","sig":"AAAA"}]}`))
	f.Add([]byte(`{"payloadType":"x","payload":"!!","signatures":[]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		fuzzDecodeWith(t, keys, FormatDSSE, data, testParams())
	})
}

func FuzzBundle(f *testing.F) {
	f.Add([]byte(`{"mediaType":"application/vnd.dev.sigstore.bundle.v0.3+json","verificationMaterial":{},"dsseEnvelope":{"payload":"e30=","payloadType":"application/vnd.in-toto+json","signatures":[{"sig":"AAAA"}]}}`))
	f.Add([]byte(`{"mediaType":"application/vnd.dev.sigstore.bundle+json;version=0.1","messageSignature":{"messageDigest":{"algorithm":"SHA2_256","digest":"AAAA"},"signature":"AAAA"}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		p := testParams()
		p.Sigstore = &SigstorePolicy{TrustedRoot: emptyRoot(t), IssuerRegexp: ".*", SANRegexp: ".*"}
		fuzzDecode(t, FormatSigstore, data, p)
	})
}

func FuzzDetect(f *testing.F) {
	f.Add("r.xml", []byte(`<testsuite/>`))
	f.Add("testng-results.xml", []byte(`<?xml version="1.0"?><testng-results total="0"/>`))
	f.Add("s.json", []byte(`{"Action":"run"}`))
	f.Add("e.json", []byte(`{"payloadType":"x"}`))
	f.Fuzz(func(t *testing.T, name string, data []byte) {
		if format, err := Detect(name, data); err == nil {
			if _, err := MediaTypeOf(format); err != nil {
				t.Fatalf("Detect gave unknown format %q", format)
			}
		}
	})
}
