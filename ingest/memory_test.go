package ingest

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/verify"
)

// maxInput is a body of format of about size bytes, shaped as the
// server's memory measurement (scripts/ingestmem) sends them: many cases,
// padded with text the decoders read and drop.
func maxInput(tb testing.TB, format string, size int, priv ed25519.PrivateKey) []byte {
	tb.Helper()
	var b bytes.Buffer
	switch format {
	case FormatJUnit:
		b.WriteString(`<?xml version="1.0" encoding="UTF-8"?>` + "\n<testsuites>\n" + `<testsuite name="suite" timestamp="2026-12-05T10:00:00" time="12.5">` + "\n")
		for k := 0; b.Len() < size-200; k++ {
			fmt.Fprintf(&b, `<testcase classname="pkg.Class%d" name="test_%d" time="0.001"><system-out>output of test %d, padding padding padding padding padding padding padding padding padding</system-out></testcase>`+"\n", k%97, k, k)
		}
		b.WriteString("</testsuite>\n</testsuites>\n")
	case FormatTestNG:
		b.WriteString(`<?xml version="1.0" encoding="UTF-8"?>` + "\n" + `<testng-results ignored="0" total="0" passed="0" failed="0" skipped="0">` + "\n" +
			`<suite name="suite" started-at="2026-12-05T10:00:00 UTC" finished-at="2026-12-05T10:00:12 UTC"><test name="test">` + "\n")
		for k := 0; b.Len() < size-200; k++ {
			if k%97 == 0 {
				if k > 0 {
					b.WriteString("</class>\n")
				}
				fmt.Fprintf(&b, `<class name="pkg.Class%d">`+"\n", k/97)
			}
			fmt.Fprintf(&b, `<test-method name="test_%d" status="PASS" duration-ms="1"><params><param index="0"><value><![CDATA[%d]]></value></param></params><reporter-output><line><![CDATA[output of test %d, padding padding padding padding padding]]></line></reporter-output></test-method>`+"\n", k, k, k)
		}
		b.WriteString("</class>\n</test></suite>\n</testng-results>\n")
	case FormatGoTest:
		const pkg = "example.com/r/pkg"
		for k := 0; b.Len() < size-1000; k++ {
			fmt.Fprintf(&b, `{"Time":"2026-12-05T10:00:00Z","Action":"run","Package":%q,"Test":"TestCase%d"}`+"\n", pkg, k)
			fmt.Fprintf(&b, `{"Time":"2026-12-05T10:00:00Z","Action":"output","Package":%q,"Test":"TestCase%d","Output":"=== RUN   TestCase%d\n"}`+"\n", pkg, k, k)
			fmt.Fprintf(&b, `{"Time":"2026-12-05T10:00:01Z","Action":"pass","Package":%q,"Test":"TestCase%d","Elapsed":0.01}`+"\n", pkg, k)
		}
		fmt.Fprintf(&b, `{"Time":"2026-12-05T10:00:02Z","Action":"pass","Package":%q,"Elapsed":2}`+"\n", pkg)
	case FormatInToto:
		fmt.Fprintf(&b, `{"_type":%q,"subject":[{"name":"github.com/example/repo","digest":{"gitCommit":"%s","gitTree":"%s"}}],"predicateType":%q,"predicate":{"result":"PASSED","passedTests":[`,
			StatementV1, strings.Repeat("a", 40), strings.Repeat("b", 40), PredicateTestResult)
		for k := range 9000 {
			if k > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, `"pkg/sub.Test_case_%d"`, k)
		}
		b.WriteString(`],"warnedTests":[],"failedTests":[],"configuration":[`)
		for k := 0; b.Len() < size-200; k++ {
			if k > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, `{"name":"config-%d","uri":"https://example.com/configs/%d/settings.yaml"}`, k, k)
		}
		b.WriteString("]}}")
	case FormatDSSE:
		env, err := verify.SignRunnerEnvelope(context.Background(), priv, MediaInToto, maxInput(tb, FormatInToto, size*3/4-1024, nil))
		if err != nil {
			tb.Fatal(err)
		}
		return env
	default:
		tb.Fatalf("no max input for %s", format)
	}
	return b.Bytes()
}

// BenchmarkDecodeMax decodes a 4 MiB input of each format into the
// records of one append (what the server does before appending): with
// -benchmem, B/op is what one maximum-size request allocates in package
// ingest; -memprofile shows where.
func BenchmarkDecodeMax(b *testing.B) {
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	p := testParams()
	keys := testRegistry(b, map[string]ed25519.PublicKey{"h1": pub})
	for _, f := range []string{FormatJUnit, FormatTestNG, FormatGoTest, FormatInToto, FormatDSSE} {
		body := maxInput(b, f, 4<<20, priv)
		b.Run(f, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := decodeWith(context.Background(), keys, f, body, p); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestOriginalBodyIsPrepared: the original's body written directly is
// byte for byte what the ledger's own preparation gives (the store hashes
// that, and the evidence names the original by its id), for every format
// and for content the JSON encoder escapes or base64 pads; an original
// the ledger refuses is refused with the ledger's error.
func TestOriginalBodyIsPrepared(t *testing.T) {
	slow := func(o ledger.Original) ([]byte, error) {
		b, err := json.Marshal(&o)
		if err != nil {
			return nil, err
		}
		return ledger.PrepareRecord(ledger.KindOriginal, b)
	}
	contents := [][]byte{{0}, []byte("a"), []byte("ab"), []byte("<a & b>\u2028\"\\"), {0xff, 0xfe, 0x00, '\n'}, bytes.Repeat([]byte("x"), 100_001)}
	var cases []ledger.Original
	for _, f := range FormatNames() {
		mt, _ := MediaTypeOf(f)
		for _, c := range contents {
			cases = append(cases, ledger.NewOriginal(f, mt, c))
		}
	}
	good := ledger.NewOriginal(FormatJUnit, MediaJUnit, []byte("<x/>"))
	bad := func(edit func(*ledger.Original)) ledger.Original { o := good; edit(&o); return o }
	cases = append(cases,
		bad(func(o *ledger.Original) { o.Content = nil }),
		bad(func(o *ledger.Original) { o.Digest = "sha256:" + strings.Repeat("0", 64) }),
		bad(func(o *ledger.Original) { o.Size++ }),
		bad(func(o *ledger.Original) { o.Format = "" }),
		bad(func(o *ledger.Original) { o.Format = "a b" }),
		bad(func(o *ledger.Original) { o.MediaType = strings.Repeat("m", 129) }),
		bad(func(o *ledger.Original) { o.MediaType = "text/<x>&y" }),
	)
	for i, o := range cases {
		want, werr := slow(o)
		got, gerr := originalBody(o)
		if fmt.Sprint(werr) != fmt.Sprint(gerr) {
			t.Fatalf("case %d (%s): error %v, the ledger's %v", i, o.Format, gerr, werr)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("case %d (%s): body differs from the ledger's:\n got %.200q\nwant %.200q", i, o.Format, got, want)
		}
	}
}
