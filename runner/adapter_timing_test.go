package runner

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/runner/quant"
)

// TestPrepareCodec: a prepared case with three vectors survives
// EncodePrepare and DecodePrepare unchanged; every strict prefix, a
// trailing byte, batch 0 and a batch above the payload are refused.
func TestPrepareCodec(t *testing.T) {
	for _, d := range []quant.DType{quant.Float16, quant.BFloat16, quant.Float32} {
		c := ThroughputCase{ID: "batch3/t", Batch: 3, N: 64, K: 256, DType: d, Bits: 3, GroupSize: 64}
		r, xs, err := ThroughputOperands(c)
		if err != nil {
			t.Fatal(err)
		}
		p, err := EncodePrepare(c.ID, r, xs)
		if err != nil {
			t.Fatal(err)
		}
		id, got, gxs, err := DecodePrepare(p)
		if err != nil || id != c.ID {
			t.Fatalf("%v: %v (id %q)", d, err, id)
		}
		got.Variant = r.Variant
		if !reflect.DeepEqual(got, r) || !reflect.DeepEqual(gxs, xs) {
			t.Fatalf("%v: decoded case differs", d)
		}
		for n := 0; n < len(p); n += 1 + n/5 {
			if _, _, _, err := DecodePrepare(p[:n]); err == nil {
				t.Fatalf("%v: prefix of %d bytes accepted", d, n)
			}
		}
		if _, _, _, err := DecodePrepare(append(append([]byte(nil), p...), 0)); err == nil {
			t.Fatalf("%v: trailing byte accepted", d)
		}
		batchAt := len(p) - 2*r.K*d.Size() - 2
		for _, b := range []uint16{0, 4, MaxPrepareBatch + 1} {
			bad := append([]byte(nil), p...)
			binary.LittleEndian.PutUint16(bad[batchAt:], b)
			if _, _, _, err := DecodePrepare(bad); err == nil {
				t.Fatalf("%v: batch %d accepted", d, b)
			}
		}
		if _, err := EncodePrepare(c.ID, r, nil); err == nil {
			t.Fatal("batch 0 encoded")
		}
		if _, err := EncodePrepare(c.ID, r, []Vec{NewVec(d, r.K-1)}); err == nil {
			t.Fatal("short vector encoded")
		}
	}
}

// TestReadyCodec: a ready frame carries every row in order; unsupported
// and error answers decode; an output or unknown frame type is refused.
func TestReadyCodec(t *testing.T) {
	rows := []Vec{NewVec(quant.Float32, 3), NewVec(quant.Float32, 3)}
	rows[1].Set(2, 0x3f800000)
	a, err := DecodeReady(FrameReady, EncodeReady("c", rows))
	if err != nil || a.Kind != AnswerOutput || a.Out.Len() != 6 || a.Out.At(5) != 0x3f800000 {
		t.Fatalf("%+v %v", a, err)
	}
	if a, err := DecodeReady(FrameUnsupported, EncodeText("c", "no")); err != nil || a.Kind != AnswerUnsupported {
		t.Fatalf("%+v %v", a, err)
	}
	for _, typ := range []byte{FrameOutput, FrameSamples, 'Z'} {
		if _, err := DecodeReady(typ, EncodeReady("c", rows)); err == nil {
			t.Fatalf("frame %q accepted as a ready answer", typ)
		}
	}
	p := EncodeReady("c", rows)
	if _, err := DecodeReady(FrameReady, p[:len(p)-1]); err == nil || !strings.Contains(err.Error(), "ready frame") {
		t.Fatalf("short ready frame: %v", err)
	}
}

// TestTimeCodec: n and repeat round-trip; 0, out-of-range values and a
// trailing byte are refused.
func TestTimeCodec(t *testing.T) {
	id, n, rep, err := DecodeTime(EncodeTime("c", 5, 2))
	if err != nil || id != "c" || n != 5 || rep != 2 {
		t.Fatalf("%q %d %d %v", id, n, rep, err)
	}
	for _, p := range [][]byte{EncodeTime("c", 0, 1), EncodeTime("c", MaxTimingSamples+1, 1), EncodeTime("c", 1, 0),
		EncodeTime("c", 1, MaxTimingRepeat+1), append(EncodeTime("c", 1, 1), 0), EncodeTime("c", 1, 1)[:8]} {
		if _, _, _, err := DecodeTime(p); err == nil {
			t.Fatalf("time payload %x accepted", p)
		}
	}
}

// TestSamplesCodec: samples round-trip bit for bit; every malformed
// variant (non-finite, zero, negative or out-of-range samples, a count that disagrees
// with the bytes, a count of 0, launches 0, an empty, non-ASCII or
// control-character clock, truncation) is refused naming the frame.
func TestSamplesCodec(t *testing.T) {
	ts := TimingSamples{Clock: "torch.cuda.Event", Launches: 16, Samples: []float64{1.5e-5, 2e-5, ledger.MinSampleSeconds, ledger.MaxSampleSeconds}}
	p := EncodeSamples("case/1", ts)
	id, got, err := DecodeSamples(p)
	if err != nil || id != "case/1" || !reflect.DeepEqual(got, ts) {
		t.Fatalf("%q %+v %v", id, got, err)
	}
	for n := 0; n < len(p); n++ {
		if _, _, err := DecodeSamples(p[:n]); err == nil {
			t.Fatalf("prefix of %d bytes accepted", n)
		}
	}
	bad := func(ts TimingSamples) []byte { return EncodeSamples("c", ts) }
	ok := TimingSamples{Clock: "perf_counter_ns", Launches: 1, Samples: []float64{1e-3}}
	with := func(f func(*TimingSamples)) TimingSamples {
		c := ok
		c.Samples = append([]float64(nil), ok.Samples...)
		f(&c)
		return c
	}
	cases := map[string][]byte{
		"nan":         bad(with(func(c *TimingSamples) { c.Samples[0] = math.NaN() })),
		"+inf":        bad(with(func(c *TimingSamples) { c.Samples[0] = math.Inf(1) })),
		"zero":        bad(with(func(c *TimingSamples) { c.Samples[0] = 0 })),
		"negative":    bad(with(func(c *TimingSamples) { c.Samples[0] = -1e-3 })),
		"denormal":    bad(with(func(c *TimingSamples) { c.Samples[0] = math.SmallestNonzeroFloat64 })),
		"1e308":       bad(with(func(c *TimingSamples) { c.Samples[0] = 1e308 })),
		"no samples":  bad(with(func(c *TimingSamples) { c.Samples = nil })),
		"launches 0":  bad(with(func(c *TimingSamples) { c.Launches = 0 })),
		"no clock":    bad(with(func(c *TimingSamples) { c.Clock = "" })),
		"utf-8 clock": bad(with(func(c *TimingSamples) { c.Clock = "µs" })),
		"ctl clock":   bad(with(func(c *TimingSamples) { c.Clock = "a\nb" })),
		"trailing":    append(bad(ok), 0),
	}
	count := bad(ok)
	binary.LittleEndian.PutUint32(count[2+1+1+len(ok.Clock)+4:], 2)
	cases["count"] = count
	for name, p := range cases {
		if _, _, err := DecodeSamples(p); err == nil || !strings.Contains(err.Error(), "samples frame") {
			t.Errorf("%s: %v, want a refusal naming the samples frame", name, err)
		}
	}
}

// TestReadFrameMax: the adapter side's reader takes a prepare frame above
// MaxFramePayload but refuses any other frame type above it and a prepare
// frame above MaxPreparePayload before allocating the claimed length.
func TestReadFrameMax(t *testing.T) {
	head := func(typ byte, n uint32) *bufio.Reader {
		var h [5]byte
		h[0] = typ
		binary.LittleEndian.PutUint32(h[1:], n)
		return bufio.NewReader(bytes.NewReader(h[:]))
	}
	if _, _, err := readFrameMax(head(FrameCase, MaxFramePayload+1)); err == nil || !strings.Contains(err.Error(), "exceeds") {
		t.Fatalf("large case frame: %v", err)
	}
	if _, _, err := readFrameMax(head(FramePrepare, MaxPreparePayload+1)); err == nil || !strings.Contains(err.Error(), "exceeds") {
		t.Fatalf("huge prepare frame: %v", err)
	}
	// A large prepare frame is allowed by the cap; this one is truncated.
	if _, _, err := readFrameMax(head(FramePrepare, MaxFramePayload+1)); err == nil || strings.Contains(err.Error(), "exceeds") {
		t.Fatalf("large prepare frame: %v, want a truncation error", err)
	}
	var buf bytes.Buffer
	if err := WriteFrame(&buf, FrameTime, EncodeTime("c", 1, 1)); err != nil {
		t.Fatal(err)
	}
	typ, p, err := readFrameMax(bufio.NewReader(&buf))
	if err != nil || typ != FrameTime || len(p) != 11 {
		t.Fatalf("%q %d %v", typ, len(p), err)
	}
}

// TestImplThroughputCases: globs select by id, a shorter glob matches the
// leading segments, and a malformed or unmatched glob is refused.
func TestImplThroughputCases(t *testing.T) {
	for glob, want := range map[string]int{"": 162, "batch1/n4096": 18, "batch*/n8192/k8192/f16/b4/g64": 3, "batch2/*/*/bf16": 18} {
		var globs []string
		if glob != "" {
			globs = []string{glob}
		}
		cs, err := implThroughputCases(globs)
		if err != nil || len(cs) != want {
			t.Fatalf("%q: %d cases (%v), want %d", glob, len(cs), err, want)
		}
	}
	for _, bad := range []string{"[", "batch9", "batch1/n4096/k4096/f16/b4/g64/x"} {
		if _, err := implThroughputCases([]string{bad}); err == nil {
			t.Fatalf("%q accepted", bad)
		}
	}
}

// stubPrepared is a PreparedCase with fixed outputs and samples.
type stubPrepared struct {
	rows   []Vec
	closed *int
}

func (p stubPrepared) Output() ([]Vec, error) { return p.rows, nil }
func (p stubPrepared) Time(n, repeat int) (TimingSamples, error) {
	s := make([]float64, n)
	for i := range s {
		s[i] = 1e-3 * float64(repeat)
	}
	return TimingSamples{Clock: "stub", Launches: 2, Samples: s}, nil
}
func (p stubPrepared) Close() error { *p.closed++; return nil }

// TestAdapterServerTiming: the Go adapter side announces timing when it
// has Prepare, answers prepare with ready (every row), time with samples,
// a time frame for a case that is not prepared with an error frame, an
// unsupported prepare with an unsupported frame, and closes each prepared
// case when the next is prepared and at the end.
func TestAdapterServerTiming(t *testing.T) {
	c := ThroughputCase{ID: "b2", Batch: 2, N: 64, K: 128, DType: quant.Float16, Bits: 4, GroupSize: 64}
	r, xs, err := ThroughputOperands(c)
	if err != nil {
		t.Fatal(err)
	}
	prep, _ := EncodePrepare(c.ID, r, xs)
	other, _ := EncodePrepare("unsupported", r, xs)
	var in bytes.Buffer
	WriteFrame(&in, FrameHello, []byte(`{"protocol":"ledger-adapter/1"}`))
	writePrepare(&in, prep)
	WriteFrame(&in, FrameTime, EncodeTime(c.ID, 3, 2))
	WriteFrame(&in, FrameTime, EncodeTime("elsewhere", 3, 1))
	writePrepare(&in, other)
	WriteFrame(&in, FrameBye, nil)
	closed := 0
	srv := AdapterServer{Hello: AdapterHello{Implementation: "stub", Version: "1"},
		Compute: func(string, *QMVRequest) (Vec, error) { return Vec{}, nil },
		Prepare: func(id string, req *QMVRequest, xs []Vec) (PreparedCase, error) {
			if id == "unsupported" {
				return nil, &UnsupportedError{Reason: "no"}
			}
			return stubPrepared{rows: []Vec{NewVec(req.DType, req.N), NewVec(req.DType, req.N)}, closed: &closed}, nil
		}}
	var out bytes.Buffer
	if err := srv.Serve(&in, &out); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(&out)
	typ, hello, _ := ReadFrame(br)
	if typ != FrameHello || !strings.Contains(string(hello), `"timing":true`) {
		t.Fatalf("hello %q %s", typ, hello)
	}
	typ, p, _ := ReadFrame(br)
	if a, err := DecodeReady(typ, p); err != nil || a.Kind != AnswerOutput || a.Out.Len() != 2*c.N {
		t.Fatalf("ready: %+v %v", a, err)
	}
	typ, p, _ = ReadFrame(br)
	if id, ts, err := DecodeSamples(p); typ != FrameSamples || err != nil || id != c.ID || ts.Launches != 2 || !reflect.DeepEqual(ts.Samples, []float64{2e-3, 2e-3, 2e-3}) {
		t.Fatalf("samples %q: %q %+v %v", typ, id, ts, err)
	}
	if typ, p, _ = ReadFrame(br); typ != FrameError || !strings.Contains(string(p), "not the prepared case") {
		t.Fatalf("time of another case: %q %s", typ, p)
	}
	if typ, _, _ = ReadFrame(br); typ != FrameUnsupported {
		t.Fatalf("unsupported prepare answered %q", typ)
	}
	if closed != 1 {
		t.Fatalf("%d prepared cases closed, want 1", closed)
	}
	// Without Prepare the hello has no timing and a prepare frame is a
	// protocol error.
	in.Reset()
	WriteFrame(&in, FrameHello, []byte(`{"protocol":"ledger-adapter/1"}`))
	writePrepare(&in, prep)
	out.Reset()
	srv.Prepare = nil
	if err := srv.Serve(&in, &out); err == nil || !strings.Contains(err.Error(), "unexpected frame type 'P'") {
		t.Fatalf("prepare without timing: %v", err)
	}
	if strings.Contains(out.String(), "timing") {
		t.Fatalf("hello announces timing without Prepare: %s", out.String())
	}
}
