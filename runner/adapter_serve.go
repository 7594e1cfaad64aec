package runner

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// UnsupportedError is returned by an adapter's compute or prepare function
// for a case outside what the implementation can run (the server answers
// it with an unsupported frame).
type UnsupportedError struct{ Reason string }

func (e *UnsupportedError) Error() string { return "unsupported: " + e.Reason }

// ServeAdapter is the adapter side of the protocol over r and w (an
// adapter's stdin and stdout): it reads the ledger's hello, writes hello,
// then answers every case frame in order with compute's output (an
// output frame), an *UnsupportedError (an unsupported frame) or another
// error (an error frame), until a bye frame or the end of r. It returns
// nil after a bye or a clean end of input and an error on a protocol
// violation or a write failure. compute gets a request with Variant 0.
// It is AdapterServer without the timing capability.
func ServeAdapter(r io.Reader, w io.Writer, hello AdapterHello, compute func(id string, req *QMVRequest) (Vec, error)) error {
	return AdapterServer{Hello: hello, Compute: compute}.Serve(r, w)
}

// PreparedCase is one throughput case's operands held by an adapter
// (AdapterServer.Prepare): on its device, in as many copies as rotate the
// products past the device's caches, warmed up.
type PreparedCase interface {
	// Output runs one product of every vector and returns batch rows of N
	// raw values of the case's dtype.
	Output() ([]Vec, error)
	// Time takes n samples, each the time of one group of back-to-back
	// products divided by the group's size, in seconds per product; every
	// timed product launches the kernel repeat times.
	Time(n, repeat int) (TimingSamples, error)
	// Close frees the operands.
	Close() error
}

// AdapterServer is the adapter side of AdapterProtocol. Serve answers
// case frames with Compute and, when Prepare is set (the hello then says
// "timing": true), prepare and time frames with the case Prepare returns;
// one case is prepared at a time, a new prepare frame closes the previous
// one.
type AdapterServer struct {
	Hello   AdapterHello
	Compute func(id string, req *QMVRequest) (Vec, error)
	// Prepare puts a throughput case's operands (xs[0] is req.X; req has
	// Variant 0) where its products run, warms up, and returns them.
	Prepare func(id string, req *QMVRequest, xs []Vec) (PreparedCase, error)
}

// Serve runs the protocol over r and w until a bye frame or the end of r
// (nil) or a protocol violation or write failure (an error). A compute,
// prepare, output or time error is answered with an error frame (an
// *UnsupportedError with an unsupported frame) and the server goes on.
func (s AdapterServer) Serve(r io.Reader, w io.Writer) error {
	br := bufio.NewReaderSize(r, 1<<16)
	bw := bufio.NewWriterSize(w, 1<<16)
	typ, payload, err := ReadFrame(br)
	if err != nil {
		return fmt.Errorf("read the ledger's hello: %w", err)
	}
	var theirs AdapterHello
	if typ != FrameHello || json.Unmarshal(payload, &theirs) != nil || theirs.Protocol != AdapterProtocol {
		return fmt.Errorf("the first frame is not a %s hello", AdapterProtocol)
	}
	hello := s.Hello
	hello.Protocol = AdapterProtocol
	hello.Timing = s.Prepare != nil
	hb, err := json.Marshal(hello)
	if err != nil {
		return err
	}
	if err := WriteFrame(bw, FrameHello, hb); err != nil {
		return err
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	var prepared PreparedCase
	var preparedID string
	defer func() {
		if prepared != nil {
			_ = prepared.Close()
		}
	}()
	for {
		read := ReadFrame
		if s.Prepare != nil {
			read = readFrameMax
		}
		typ, payload, err := read(br)
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read a frame: %w", err)
		}
		var ansTyp byte
		var ans []byte
		switch {
		case typ == FrameBye:
			return bw.Flush()
		case typ == FrameCase:
			ansTyp, ans, err = s.answerCase(payload)
		case typ == FramePrepare && s.Prepare != nil:
			if prepared != nil {
				_ = prepared.Close()
				prepared, preparedID = nil, ""
			}
			var id string
			var pc PreparedCase
			id, pc, ansTyp, ans, err = s.answerPrepare(payload)
			if pc != nil {
				prepared, preparedID = pc, id
			}
		case typ == FrameTime && s.Prepare != nil:
			ansTyp, ans, err = answerTime(payload, prepared, preparedID)
		default:
			return fmt.Errorf("unexpected frame type %q", typ)
		}
		if err != nil {
			return err
		}
		if err := WriteFrame(bw, ansTyp, ans); err != nil {
			return err
		}
		// Flush when no further frame is already buffered, so a pipelining
		// ledger gets answers in batches and a waiting one gets it now.
		if br.Buffered() == 0 {
			if err := bw.Flush(); err != nil {
				return err
			}
		}
	}
}

// textAnswer is the unsupported or error frame for err.
func textAnswer(id string, err error) (byte, []byte) {
	var u *UnsupportedError
	if errors.As(err, &u) {
		return FrameUnsupported, EncodeText(id, u.Reason)
	}
	return FrameError, EncodeText(id, err.Error())
}

func (s AdapterServer) answerCase(payload []byte) (byte, []byte, error) {
	id, req, err := DecodeCase(payload)
	if err != nil {
		if id == "" {
			return 0, nil, err
		}
		return FrameError, EncodeText(id, err.Error()), nil
	}
	out, err := s.Compute(id, req)
	if err != nil {
		t, b := textAnswer(id, err)
		return t, b, nil
	}
	return FrameOutput, EncodeOutput(id, out), nil
}

func (s AdapterServer) answerPrepare(payload []byte) (string, PreparedCase, byte, []byte, error) {
	id, req, xs, err := DecodePrepare(payload)
	if err != nil {
		if id == "" {
			return "", nil, 0, nil, err
		}
		return id, nil, FrameError, EncodeText(id, err.Error()), nil
	}
	pc, err := s.Prepare(id, req, xs)
	if err != nil {
		t, b := textAnswer(id, err)
		return id, nil, t, b, nil
	}
	rows, err := pc.Output()
	if err == nil && len(rows) != len(xs) {
		err = fmt.Errorf("the prepared case gave %d output rows for %d vectors", len(rows), len(xs))
	}
	for b := 0; err == nil && b < len(rows); b++ {
		if rows[b].DType != req.DType || rows[b].Len() != req.N {
			err = fmt.Errorf("output row %d has %d values of %v, want %d of %v", b, rows[b].Len(), rows[b].DType, req.N, req.DType)
		}
	}
	if err != nil {
		_ = pc.Close()
		t, b := textAnswer(id, err)
		return id, nil, t, b, nil
	}
	return id, pc, FrameReady, EncodeReady(id, rows), nil
}

func answerTime(payload []byte, pc PreparedCase, preparedID string) (byte, []byte, error) {
	id, n, repeat, err := DecodeTime(payload)
	if err != nil {
		if id == "" {
			return 0, nil, err
		}
		return FrameError, EncodeText(id, err.Error()), nil
	}
	if pc == nil || id != preparedID {
		return FrameError, EncodeText(id, "case "+clipText(id)+" is not the prepared case"), nil
	}
	ts, err := pc.Time(n, repeat)
	if err == nil && len(ts.Samples) != n {
		err = fmt.Errorf("took %d samples, asked for %d", len(ts.Samples), n)
	}
	if err != nil {
		t, b := textAnswer(id, err)
		return t, b, nil
	}
	return FrameSamples, EncodeSamples(id, ts), nil
}
