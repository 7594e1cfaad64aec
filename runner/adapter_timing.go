package runner

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"unicode/utf8"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/runner/quant"
)

// Frames of the timing capability of AdapterProtocol, which an adapter
// announces with "timing": true in its hello (AdapterHello.Timing). The
// ledger prepares one throughput case at a time on an adapter, then asks
// it for samples of that case until it has enough; an adapter without the
// capability answers no timing frame. docs/reference/implementations.md
// specifies them.
const (
	FramePrepare byte = 'P' // ledger -> adapter: a throughput case's operands (EncodePrepare)
	FrameReady   byte = 'R' // adapter -> ledger: prepared; one product of every vector (EncodeReady)
	FrameTime    byte = 'T' // ledger -> adapter: take samples of the prepared case (EncodeTime)
	FrameSamples byte = 'S' // adapter -> ledger: the samples (EncodeSamples)
)

// MaxPreparePayload caps a prepare frame's payload (512 MiB). The largest
// throughput case, 16384 x 16384 8-bit weights with float32 scales,
// biases and four vectors, takes 288 MiB; every other frame keeps the
// MaxFramePayload cap.
const MaxPreparePayload = 512 << 20

// Limits of the timing frames: vectors of a prepared case, samples of one
// time request or answer, launches of one timed product, the clock name.
const (
	MaxPrepareBatch  = 64
	MaxTimingSamples = 1000
	MaxTimingRepeat  = 64
	maxClockName     = 64
	maxLaunches      = 1 << 24
	maxPrepareElems  = 1 << 28 // N*K of a prepared case (16384 x 16384)
)

// TimingSamples is an adapter's answer to a time frame: the clock that
// timed the samples ("torch.cuda.Event", "perf_counter_ns", "monotonic";
// 1..64 printable ASCII characters), the products timed back to back per
// sample (Launches >= 1) and the samples, each the time of one group of
// Launches products divided by Launches, in seconds per product.
type TimingSamples struct {
	Clock    string
	Launches int
	Samples  []float64
}

// readFrameMax is ReadFrame with the payload cap of prepare frames
// raised to MaxPreparePayload (the adapter side's reader).
func readFrameMax(r *bufio.Reader) (typ byte, payload []byte, err error) {
	var h [5]byte
	if _, err := io.ReadFull(r, h[:1]); err != nil {
		return 0, nil, err
	}
	if _, err := io.ReadFull(r, h[1:]); err != nil {
		return 0, nil, noEOF(err)
	}
	n := binary.LittleEndian.Uint32(h[1:])
	if n > MaxFramePayload && (h[0] != FramePrepare || n > MaxPreparePayload) {
		return 0, nil, fmt.Errorf("adapter protocol: frame %q payload of %d bytes exceeds its cap", h[0], n)
	}
	payload = make([]byte, n)
	if _, err := io.ReadFull(r, payload); err != nil {
		return 0, nil, noEOF(err)
	}
	return h[0], payload, nil
}

// writePrepare writes a prepare frame (up to MaxPreparePayload).
func writePrepare(w io.Writer, payload []byte) error {
	if len(payload) > MaxPreparePayload {
		return fmt.Errorf("adapter protocol: prepare payload of %d bytes exceeds 512 MiB", len(payload))
	}
	var h [5]byte
	h[0] = FramePrepare
	binary.LittleEndian.PutUint32(h[1:], uint32(len(payload)))
	if _, err := w.Write(h[:]); err != nil {
		return err
	}
	_, err := w.Write(payload)
	return err
}

// EncodePrepare returns the payload of a prepare frame: the case payload
// of EncodeCase with xs[0] as its x, then
//
//	u16 batch (= len(xs), 1..64)
//	(batch-1)*K raw x values of xs[1:], in order
//
// Every vector must have K values of r's dtype.
func EncodePrepare(id string, r *QMVRequest, xs []Vec) ([]byte, error) {
	if len(xs) < 1 || len(xs) > MaxPrepareBatch {
		return nil, fmt.Errorf("prepare %s: batch %d not in 1..%d", clipText(id), len(xs), MaxPrepareBatch)
	}
	for b, x := range xs {
		if x.DType != r.DType || x.Len() != r.K {
			return nil, fmt.Errorf("prepare %s: vector %d has %d values of %v, want %d of %v", clipText(id), b, x.Len(), x.DType, r.K, r.DType)
		}
	}
	rr := *r
	rr.X = xs[0]
	p, err := EncodeCase(id, &rr)
	if err != nil {
		return nil, fmt.Errorf("prepare: %w", err)
	}
	w := &wire{b: p}
	w.u16(uint16(len(xs)))
	for _, x := range xs[1:] {
		w.vec(x)
	}
	return w.b, nil
}

// DecodePrepare parses a prepare frame's payload into the case id, the
// request (Variant 0, X = xs[0]) and the batch's vectors. It fails,
// naming the field, as DecodeCase does (N*K up to 2^28 here), on a batch
// outside 1..64 and on a short or long payload.
func DecodePrepare(payload []byte) (string, *QMVRequest, []Vec, error) {
	p := &parser{b: payload}
	id, r, err := decodeCase(p, maxPrepareElems)
	if err != nil {
		return id, nil, nil, fmt.Errorf("prepare: %w", err)
	}
	batch := int(p.u16("batch"))
	if p.err == nil && (batch < 1 || batch > MaxPrepareBatch) {
		p.err = fmt.Errorf("batch %d not in 1..%d", batch, MaxPrepareBatch)
	}
	xs := []Vec{r.X}
	for b := 1; b < batch && p.err == nil; b++ {
		xs = append(xs, p.vec(r.DType, r.K, fmt.Sprintf("x of vector %d", b)))
	}
	if err := p.end(); err != nil {
		return id, nil, nil, fmt.Errorf("prepare %s: %w", id, err)
	}
	return id, r, xs, nil
}

// EncodeReady returns the payload of a ready frame: u16 id length, id,
// u8 dtype, u32 count (batch*N), then the raw outputs of every row, row
// after row (the layout of an output frame). Every row must have the
// first row's dtype.
func EncodeReady(id string, rows []Vec) []byte {
	w := &wire{}
	w.id(id)
	n := 0
	var d quant.DType
	if len(rows) > 0 {
		d = rows[0].DType
	}
	for _, r := range rows {
		n += r.Len()
	}
	w.u8(byte(d))
	w.u32(uint32(n))
	for _, r := range rows {
		w.vec(r)
	}
	return w.b
}

// DecodeReady parses the answer to a prepare frame: a ready frame (Kind
// AnswerOutput, Out holding every row's values in order), an unsupported
// or an error frame. It fails on any other frame type and on a malformed
// payload; the count is checked by the caller against batch*N.
func DecodeReady(typ byte, payload []byte) (Answer, error) {
	switch typ {
	case FrameReady:
		a, err := DecodeAnswer(FrameOutput, payload)
		if err != nil {
			return a, fmt.Errorf("ready frame: %w", err)
		}
		return a, nil
	case FrameUnsupported, FrameError:
		return DecodeAnswer(typ, payload)
	}
	return Answer{}, fmt.Errorf("answer to a prepare frame has type %q, want R, U or E", typ)
}

// EncodeTime returns the payload of a time frame: u16 id length, id, u32
// samples n (1..1000), u32 repeat (1..64: kernel launches per timed
// product; 2 is the negative control's known slowdown).
func EncodeTime(id string, n, repeat int) []byte {
	w := &wire{}
	w.id(id)
	w.u32(uint32(n))
	w.u32(uint32(repeat))
	return w.b
}

// DecodeTime parses a time frame's payload.
func DecodeTime(payload []byte) (id string, n, repeat int, err error) {
	p := &parser{b: payload}
	id = p.id()
	n = int(p.u32("samples"))
	repeat = int(p.u32("repeat"))
	if p.err == nil && (n < 1 || n > MaxTimingSamples) {
		p.err = fmt.Errorf("samples %d not in 1..%d", n, MaxTimingSamples)
	}
	if p.err == nil && (repeat < 1 || repeat > MaxTimingRepeat) {
		p.err = fmt.Errorf("repeat %d not in 1..%d", repeat, MaxTimingRepeat)
	}
	if err := p.end(); err != nil {
		return id, 0, 0, fmt.Errorf("time frame: %w", err)
	}
	return id, n, repeat, nil
}

// EncodeSamples returns the payload of a samples frame:
//
//	u16 id length, id
//	u8  clock name length, clock name (ASCII)
//	u32 launches per sample L
//	u32 n, then n float64 samples (IEEE 754, little-endian), seconds per product
func EncodeSamples(id string, ts TimingSamples) []byte {
	w := &wire{}
	w.id(id)
	w.u8(byte(len(ts.Clock)))
	w.b = append(w.b, ts.Clock...)
	w.u32(uint32(ts.Launches))
	w.u32(uint32(len(ts.Samples)))
	for _, s := range ts.Samples {
		w.b = binary.LittleEndian.AppendUint64(w.b, math.Float64bits(s))
	}
	return w.b
}

// DecodeSamples parses a samples frame's payload. It refuses, naming the
// field, a clock name that is empty, longer than 64 bytes or not
// printable ASCII, launches outside 1..2^24, a count outside 1..1000 or
// that disagrees with the payload, and any sample that is not a finite
// time > 0.
func DecodeSamples(payload []byte) (string, TimingSamples, error) {
	p := &parser{b: payload}
	var ts TimingSamples
	id := p.id()
	cl := p.take(int(p.u8("clock name length")), "clock name")
	ts.Launches = int(p.u32("launches"))
	n := int(p.u32("sample count"))
	if p.err == nil && !validClock(cl) {
		p.err = fmt.Errorf("clock name must be 1..%d printable ASCII characters", maxClockName)
	}
	if p.err == nil && (ts.Launches < 1 || ts.Launches > maxLaunches) {
		p.err = fmt.Errorf("launches per sample %d not in 1..%d", ts.Launches, maxLaunches)
	}
	if p.err == nil && (n < 1 || n > MaxTimingSamples) {
		p.err = fmt.Errorf("sample count %d not in 1..%d", n, MaxTimingSamples)
	}
	if p.err == nil && len(p.b) != 8*n {
		p.err = fmt.Errorf("sample count %d does not match %d sample bytes", n, len(p.b))
	}
	if p.err == nil {
		ts.Clock = string(cl)
		ts.Samples = make([]float64, n)
		for i := range ts.Samples {
			s := math.Float64frombits(binary.LittleEndian.Uint64(p.take(8, "samples")))
			if !ledger.ValidSampleSeconds(s) {
				p.err = fmt.Errorf("sample %d is %v, want a time per product of %g..%g seconds", i, s, ledger.MinSampleSeconds, ledger.MaxSampleSeconds)
				break
			}
			ts.Samples[i] = s
		}
	}
	if err := p.end(); err != nil {
		return id, TimingSamples{}, fmt.Errorf("samples frame %q: %w", clipText(id), err)
	}
	return id, ts, nil
}

func validClock(b []byte) bool {
	if len(b) == 0 || len(b) > maxClockName || !utf8.Valid(b) {
		return false
	}
	for _, c := range b {
		if c < 0x20 || c > 0x7e {
			return false
		}
	}
	return true
}
