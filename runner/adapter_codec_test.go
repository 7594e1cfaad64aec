package runner

import (
	"bufio"
	"bytes"
	"io"
	"reflect"
	"testing"
)

// TestCaseCodecRoundTrip: every core-lane case survives EncodeCase and
// DecodeCase unchanged; every strict prefix and every one-byte extension
// of its payload is refused.
func TestCaseCodecRoundTrip(t *testing.T) {
	for i, c := range coreCases() {
		req, _, err := buildQMVInputs(c)
		if err != nil {
			t.Fatal(err)
		}
		p, err := EncodeCase(c.ID, req)
		if err != nil {
			t.Fatal(err)
		}
		id, got, err := DecodeCase(p)
		if err != nil || id != c.ID {
			t.Fatalf("%s: %v (id %q)", c.ID, err, id)
		}
		got.Variant = req.Variant
		if !reflect.DeepEqual(got, req) {
			t.Fatalf("%s: decoded request differs", c.ID)
		}
		if i%24 != 0 {
			continue
		}
		for n := 0; n < len(p); n += 1 + n/7 {
			if _, _, err := DecodeCase(p[:n]); err == nil {
				t.Fatalf("%s: prefix of %d bytes accepted", c.ID, n)
			}
		}
		if _, _, err := DecodeCase(append(append([]byte(nil), p...), 0)); err == nil {
			t.Fatalf("%s: trailing byte accepted", c.ID)
		}
	}
}

// TestAnswerCodec: outputs, unsupported and error answers round-trip; a
// count that disagrees with the bytes, a bad dtype and an unknown frame
// type are refused.
func TestAnswerCodec(t *testing.T) {
	out := NewVec(2, 3)
	out.Set(2, 0x7f80)
	a, err := DecodeAnswer(FrameOutput, EncodeOutput("x", out))
	if err != nil || a.Kind != AnswerOutput || a.ID != "x" || !reflect.DeepEqual(a.Out, out) {
		t.Fatalf("output: %+v %v", a, err)
	}
	for _, typ := range []byte{FrameUnsupported, FrameError} {
		a, err := DecodeAnswer(typ, EncodeText("y", "why"))
		if err != nil || a.Text != "why" {
			t.Fatalf("%c: %+v %v", typ, a, err)
		}
	}
	bad := EncodeOutput("x", out)
	if _, err := DecodeAnswer(FrameOutput, bad[:len(bad)-1]); err == nil {
		t.Fatal("short values accepted")
	}
	bad[4] = 9 // dtype code
	if _, err := DecodeAnswer(FrameOutput, bad); err == nil {
		t.Fatal("bad dtype accepted")
	}
	if _, err := DecodeAnswer('Z', EncodeText("y", "")); err == nil {
		t.Fatal("unknown frame type accepted")
	}
}

// TestReadFrame: a clean end is io.EOF, a cut frame io.ErrUnexpectedEOF,
// an oversized length ErrFrameTooLarge.
func TestReadFrame(t *testing.T) {
	var b bytes.Buffer
	if err := WriteFrame(&b, FrameCase, []byte("abc")); err != nil {
		t.Fatal(err)
	}
	whole := b.Bytes()
	r := bufio.NewReader(bytes.NewReader(whole))
	if typ, p, err := ReadFrame(r); err != nil || typ != FrameCase || string(p) != "abc" {
		t.Fatalf("%c %q %v", typ, p, err)
	}
	if _, _, err := ReadFrame(r); err != io.EOF {
		t.Fatalf("end: %v", err)
	}
	for n := 1; n < len(whole); n++ {
		if _, _, err := ReadFrame(bufio.NewReader(bytes.NewReader(whole[:n]))); err != io.ErrUnexpectedEOF {
			t.Fatalf("cut at %d: %v", n, err)
		}
	}
	if _, _, err := ReadFrame(bufio.NewReader(bytes.NewReader([]byte{'C', 0xff, 0xff, 0xff, 0xff}))); err != ErrFrameTooLarge {
		t.Fatalf("oversized: %v", err)
	}
}

// FuzzDecodeCase: no input makes the decoder panic, and whatever it
// accepts re-encodes to the same bytes.
func FuzzDecodeCase(f *testing.F) {
	for _, c := range coreCases()[:4] {
		req, _, _ := buildQMVInputs(c)
		p, _ := EncodeCase(c.ID, req)
		f.Add(p)
	}
	f.Fuzz(func(t *testing.T, p []byte) {
		id, req, err := DecodeCase(p)
		if err != nil {
			return
		}
		q, err := EncodeCase(id, req)
		if err != nil || !bytes.Equal(p, q) {
			t.Fatalf("accepted payload does not re-encode: %v", err)
		}
	})
}
