package runner

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"regexp"
	"unicode/utf8"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/runner/quant"
)

// AdapterProtocol is the version string of the adapter protocol that both
// sides put in their hello. docs/reference/implementations.md is the
// specification; this file is its Go codec. It carries the
// qmv lanes; the allocator lanes use a second version,
// AllocAdapterProtocol ("ledger-alloc-adapter/1", runner/alloc_ext.go),
// over the same frames.
const AdapterProtocol = "ledger-adapter/1"

// Frame types of the adapter protocol. Every frame is a 1-byte type, a
// 4-byte little-endian payload length and the payload.
const (
	FrameHello       byte = 'H' // both ways: UTF-8 JSON (AdapterHello)
	FrameCase        byte = 'C' // ledger -> adapter: one case (EncodeCase)
	FrameOutput      byte = 'Y' // adapter -> ledger: the output vector of a case
	FrameUnsupported byte = 'U' // adapter -> ledger: case id + UTF-8 reason
	FrameError       byte = 'E' // adapter -> ledger: case id + UTF-8 message
	FrameBye         byte = 'Q' // ledger -> adapter: no more cases, exit 0
)

// MaxFramePayload caps one frame's payload (64 MiB); a longer length is a
// protocol error, so a corrupt length never makes the reader allocate it.
const MaxFramePayload = 64 << 20

// maxCaseID and maxReason cap a case id and an unsupported/error text.
const (
	maxCaseID = 256
	maxReason = 1024
)

// ErrFrameTooLarge is returned by ReadFrame for a length above
// MaxFramePayload.
var ErrFrameTooLarge = errors.New("adapter protocol: frame payload exceeds 64 MiB")

// WriteFrame writes one frame. It is not safe for concurrent use on one
// writer.
func WriteFrame(w io.Writer, typ byte, payload []byte) error {
	if len(payload) > MaxFramePayload {
		return ErrFrameTooLarge
	}
	var h [5]byte
	h[0] = typ
	binary.LittleEndian.PutUint32(h[1:], uint32(len(payload)))
	if _, err := w.Write(h[:]); err != nil {
		return err
	}
	_, err := w.Write(payload)
	return err
}

// ReadFrame reads one frame. It returns io.EOF at a clean end of stream
// (no byte of a next frame) and io.ErrUnexpectedEOF for a truncated frame.
func ReadFrame(r *bufio.Reader) (typ byte, payload []byte, err error) {
	var h [5]byte
	if _, err := io.ReadFull(r, h[:1]); err != nil {
		return 0, nil, err
	}
	if _, err := io.ReadFull(r, h[1:]); err != nil {
		return 0, nil, noEOF(err)
	}
	n := binary.LittleEndian.Uint32(h[1:])
	if n > MaxFramePayload {
		return 0, nil, ErrFrameTooLarge
	}
	payload = make([]byte, n)
	if _, err := io.ReadFull(r, payload); err != nil {
		return 0, nil, noEOF(err)
	}
	return h[0], payload, nil
}

func noEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// AdapterHello is the JSON payload of a hello frame. The ledger sends
// {"protocol": AdapterProtocol, "ledger": <runner version>} first; the
// adapter answers with its own hello, which names the implementation under
// test and the device and runtime it runs on. Device and Runtime are
// recorded in the evidence (Device as the evidence's device, Runtime as
// device attributes "runtime.<key>"); Source, when given, is the
// implementation's own claim of its source (for example PyTorch's
// torch.version.git_version) and is checked against the configured subject.
type AdapterHello struct {
	Protocol       string            `json:"protocol"`
	Ledger         string            `json:"ledger,omitempty"`
	Implementation string            `json:"implementation,omitempty"`
	Version        string            `json:"version,omitempty"`
	Device         ledger.Device     `json:"device"`
	Runtime        map[string]string `json:"runtime,omitempty"`
	Source         *HelloSource      `json:"source,omitempty"`
	// Timing announces the timing capability (prepare, ready, time and
	// samples frames, adapter_timing.go); an adapter without it is never
	// sent a timing frame.
	Timing bool `json:"timing,omitempty"`
	// State is what the adapter reads at start that moves timings (clocks,
	// temperature, power state, other processes on the device; keys dotted
	// lower-case names such as "clocks.sm_mhz"), recorded by the throughput
	// lane as "before.<key>". It is not part of the hello a restarted
	// adapter must repeat.
	State map[string]string `json:"state,omitempty"`
}

// HelloSource is an adapter's claim of the source its implementation was
// built from.
type HelloSource struct {
	Repository string `json:"repository,omitempty"`
	Commit     string `json:"commit,omitempty"`
}

var implNameRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._+@:-]{0,127}$`)

// Validate checks an adapter's hello: the protocol version, an
// implementation name (letters, digits, ._+@:-, at most 128), a version
// (1..128 characters), device limits (model and driver at most 512
// characters, at most 32 attributes), at most 24 runtime and 32 state
// entries, every key at most 64 and every value at most 256 characters of
// valid UTF-8.
func (h *AdapterHello) Validate() error {
	if h.Protocol != AdapterProtocol {
		return fmt.Errorf("hello: protocol %q, want %q", clipText(h.Protocol), AdapterProtocol)
	}
	if !implNameRe.MatchString(h.Implementation) {
		return fmt.Errorf("hello: implementation %q is not a valid name", clipText(h.Implementation))
	}
	if h.Version == "" || len(h.Version) > 128 || !utf8.ValidString(h.Version) {
		return fmt.Errorf("hello: version must be 1..128 characters of UTF-8")
	}
	if len(h.Device.Model) > 512 || len(h.Device.Driver) > 512 || h.Device.Cores < 0 || len(h.Device.Attrs) > 32 {
		return fmt.Errorf("hello: device model/driver at most 512 characters, cores >= 0, at most 32 attrs")
	}
	if len(h.Runtime) > 24 || len(h.State) > 32 {
		return fmt.Errorf("hello: at most 24 runtime and 32 state entries")
	}
	for _, m := range []map[string]string{h.Device.Attrs, h.Runtime, h.State} {
		for k, v := range m {
			if k == "" || len(k) > 64 || len(v) > 256 || !utf8.ValidString(k) || !utf8.ValidString(v) {
				return fmt.Errorf("hello: attribute keys 1..64, values at most 256 characters of UTF-8 (key %q)", clipText(k))
			}
		}
	}
	if h.Source != nil && (len(h.Source.Repository) > 512 || len(h.Source.Commit) > 64) {
		return fmt.Errorf("hello: source repository at most 512, commit at most 64 characters")
	}
	return nil
}

func clipText(s string) string {
	if len(s) > 64 {
		s = s[:64] + "..."
	}
	return s
}

// wire is a little-endian payload builder.
type wire struct{ b []byte }

func (w *wire) u8(v byte)    { w.b = append(w.b, v) }
func (w *wire) u16(v uint16) { w.b = binary.LittleEndian.AppendUint16(w.b, v) }
func (w *wire) u32(v uint32) { w.b = binary.LittleEndian.AppendUint32(w.b, v) }
func (w *wire) id(s string)  { w.u16(uint16(len(s))); w.b = append(w.b, s...) }
func (w *wire) vec(v Vec) {
	if v.DType == quant.Float32 {
		for _, x := range v.B32 {
			w.u32(x)
		}
		return
	}
	for _, x := range v.B16 {
		w.u16(x)
	}
}

// parser reads a payload; the first error sticks.
type parser struct {
	b   []byte
	err error
}

func (p *parser) take(n int, what string) []byte {
	if p.err != nil {
		return nil
	}
	if n < 0 || len(p.b) < n {
		p.err = fmt.Errorf("payload ends inside %s", what)
		return nil
	}
	out := p.b[:n]
	p.b = p.b[n:]
	return out
}

func (p *parser) u8(what string) byte {
	if b := p.take(1, what); b != nil {
		return b[0]
	}
	return 0
}

func (p *parser) u16(what string) uint16 {
	if b := p.take(2, what); b != nil {
		return binary.LittleEndian.Uint16(b)
	}
	return 0
}

func (p *parser) u32(what string) uint32 {
	if b := p.take(4, what); b != nil {
		return binary.LittleEndian.Uint32(b)
	}
	return 0
}

func (p *parser) id() string {
	n := int(p.u16("case id length"))
	b := p.take(n, "case id")
	if p.err == nil && (n == 0 || n > maxCaseID || !utf8.Valid(b)) {
		p.err = fmt.Errorf("case id must be 1..%d bytes of UTF-8", maxCaseID)
	}
	return string(b)
}

func (p *parser) vec(d quant.DType, n int, what string) Vec {
	v := NewVec(d, 0)
	raw := p.take(n*d.Size(), what)
	if p.err != nil {
		return v
	}
	v = NewVec(d, n)
	for i := 0; i < n; i++ {
		if d == quant.Float32 {
			v.B32[i] = binary.LittleEndian.Uint32(raw[4*i:])
		} else {
			v.B16[i] = binary.LittleEndian.Uint16(raw[2*i:])
		}
	}
	return v
}

func (p *parser) end() error {
	if p.err == nil && len(p.b) != 0 {
		p.err = fmt.Errorf("%d trailing bytes", len(p.b))
	}
	return p.err
}

// EncodeCase returns the payload of a case frame for a validated request
// (the variant is not sent: the adapter runs its own kernel):
//
//	u16 id length, id (UTF-8, 1..256 bytes)
//	u8  dtype (1 float16, 2 bfloat16, 3 float32)
//	u8  bits (2, 3, 4, 5, 6, 8)
//	u16 group size (32, 64, 128)
//	u32 N, u32 K
//	N*K*bits/32 u32 weight words (row-major; each row one little-endian bit stream)
//	N*K/group scales, then N*K/group biases, then K x values:
//	    raw IEEE bits, u16 each for float16/bfloat16, u32 for float32
//
// All integers are little-endian.
func EncodeCase(id string, r *QMVRequest) ([]byte, error) {
	if id == "" || len(id) > maxCaseID || !utf8.ValidString(id) {
		return nil, fmt.Errorf("case id must be 1..%d bytes of UTF-8", maxCaseID)
	}
	rr := *r
	if rr.Variant == 0 {
		rr.Variant = Promoted
	}
	if err := rr.Validate(); err != nil {
		return nil, err
	}
	w := &wire{b: make([]byte, 0, 32+len(id)+4*len(r.W)+r.DType.Size()*(r.Scales.Len()*2+r.X.Len()))}
	w.id(id)
	w.u8(byte(r.DType))
	w.u8(byte(r.Bits))
	w.u16(uint16(r.GroupSize))
	w.u32(uint32(r.N))
	w.u32(uint32(r.K))
	for _, x := range r.W {
		w.u32(x)
	}
	w.vec(r.Scales)
	w.vec(r.Biases)
	w.vec(r.X)
	return w.b, nil
}

// maxCaseElems caps N*K of a decoded case (2^24 values, far above any
// lane's shape) so a hostile header cannot make the decoder allocate.
const maxCaseElems = 1 << 24

// DecodeCase parses a case frame's payload into its id and a request
// (Variant left 0). It fails, naming the field, on a bad dtype, bits,
// group size or shape, a short or long payload, or an invalid id.
func DecodeCase(payload []byte) (string, *QMVRequest, error) {
	p := &parser{b: payload}
	id, r, err := decodeCase(p, maxCaseElems)
	if err != nil {
		return id, nil, err
	}
	if err := p.end(); err != nil {
		return id, nil, fmt.Errorf("case %s: %w", id, err)
	}
	return id, r, nil
}

// decodeCase parses a case payload from p, up to the end of x, allowing
// N*K up to maxElems.
func decodeCase(p *parser, maxElems int) (string, *QMVRequest, error) {
	id := p.id()
	d := quant.DType(p.u8("dtype"))
	bits := int(p.u8("bits"))
	g := int(p.u16("group size"))
	n := int(p.u32("n"))
	k := int(p.u32("k"))
	if p.err != nil {
		return id, nil, fmt.Errorf("case: %w", p.err)
	}
	if !d.Valid() {
		return id, nil, fmt.Errorf("case %s: dtype code %d not in {1,2,3}", id, d)
	}
	if err := quant.CheckShape(bits, g, n, k); err != nil {
		return id, nil, fmt.Errorf("case %s: %w", id, err)
	}
	if n*k > maxElems {
		return id, nil, fmt.Errorf("case %s: n*k = %d exceeds %d", id, n*k, maxElems)
	}
	r := &QMVRequest{DType: d, Bits: bits, GroupSize: g, N: n, K: k}
	words := n * quant.WordsPerRow(bits, k)
	raw := p.take(4*words, "weights")
	if p.err == nil {
		r.W = make([]uint32, words)
		for i := range r.W {
			r.W[i] = binary.LittleEndian.Uint32(raw[4*i:])
		}
	}
	groups := n * k / g
	r.Scales = p.vec(d, groups, "scales")
	r.Biases = p.vec(d, groups, "biases")
	r.X = p.vec(d, k, "x")
	if p.err != nil {
		return id, nil, fmt.Errorf("case %s: %w", id, p.err)
	}
	return id, r, nil
}

// EncodeOutput returns the payload of an output frame: u16 id length, id,
// u8 dtype, u32 count, then count raw values (u16 or u32 by dtype).
func EncodeOutput(id string, out Vec) []byte {
	w := &wire{}
	w.id(id)
	w.u8(byte(out.DType))
	w.u32(uint32(out.Len()))
	w.vec(out)
	return w.b
}

// EncodeText returns the payload of an unsupported or error frame: u16 id
// length, id, then UTF-8 text (clipped to 1024 bytes).
func EncodeText(id, text string) []byte {
	if len(text) > maxReason {
		text = text[:maxReason]
	}
	w := &wire{}
	w.id(id)
	w.b = append(w.b, text...)
	return w.b
}

// AnswerKind says what an adapter answered for a case.
type AnswerKind uint8

// The answer kinds. AnswerFailed is the ledger's own verdict on a case
// whose answer never came or could not be used (timeout, crash, malformed
// or wrong-length answer): an error for that case.
const (
	AnswerOutput AnswerKind = iota + 1
	AnswerUnsupported
	AnswerError
	AnswerFailed
)

// String returns "output", "unsupported", "error" or "failed".
func (k AnswerKind) String() string {
	switch k {
	case AnswerOutput:
		return "output"
	case AnswerUnsupported:
		return "unsupported"
	case AnswerError:
		return "error"
	case AnswerFailed:
		return "failed"
	}
	return fmt.Sprintf("answer(%d)", uint8(k))
}

// Answer is an adapter's answer to one case.
type Answer struct {
	ID   string
	Kind AnswerKind
	Out  Vec    // AnswerOutput
	Text string // reason or message for the other kinds
}

// DecodeAnswer parses an answer frame (output, unsupported or error). It
// fails on any other frame type and on a malformed payload; the count of
// an output is not checked against the case here.
func DecodeAnswer(typ byte, payload []byte) (Answer, error) {
	p := &parser{b: payload}
	a := Answer{ID: p.id()}
	switch typ {
	case FrameOutput:
		a.Kind = AnswerOutput
		d := quant.DType(p.u8("dtype"))
		n := int(p.u32("count"))
		if p.err == nil && !d.Valid() {
			p.err = fmt.Errorf("dtype code %d not in {1,2,3}", d)
		}
		if p.err == nil && n*d.Size() != len(p.b) {
			p.err = fmt.Errorf("count %d does not match %d value bytes", n, len(p.b))
		}
		if p.err == nil {
			a.Out = p.vec(d, n, "values")
		}
	case FrameUnsupported, FrameError:
		a.Kind = AnswerUnsupported
		if typ == FrameError {
			a.Kind = AnswerError
		}
		if p.err == nil {
			if !utf8.Valid(p.b) || len(p.b) > maxReason {
				p.err = fmt.Errorf("text must be at most %d bytes of UTF-8", maxReason)
			}
			a.Text = string(p.b)
			p.b = nil
		}
	default:
		return a, fmt.Errorf("unexpected frame type %q", typ)
	}
	if err := p.end(); err != nil {
		return a, fmt.Errorf("answer %q: %w", clipText(a.ID), err)
	}
	return a, nil
}
