package runner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"
)

// request writes one frame to the running adapter and reads its answer,
// waiting at most timeout. A failed write or read, a timeout or ctx's
// cancellation kills the adapter (the session then has none running) and
// is returned as an error naming what was asked.
func (s *adapterSession) request(ctx context.Context, typ byte, payload []byte, what string, timeout time.Duration) (byte, []byte, error) {
	p := s.proc
	if p == nil {
		return 0, nil, fmt.Errorf("%s: the adapter is not running", what)
	}
	done := make(chan frame, 1)
	go func() {
		var err error
		if typ == FramePrepare {
			err = writePrepare(p.stdin, payload)
		} else {
			err = WriteFrame(p.stdin, typ, payload)
		}
		if err != nil {
			done <- frame{err: fmt.Errorf("send: %w", err)}
			return
		}
		t, b, err := ReadFrame(p.out)
		done <- frame{t, b, err}
	}()
	t := time.NewTimer(timeout)
	defer t.Stop()
	var f frame
	select {
	case f = <-done:
	case <-t.C:
		s.kill()
		<-done
		return 0, nil, fmt.Errorf("%s: no answer within %v (adapter killed)", what, timeout)
	case <-ctx.Done():
		s.kill()
		<-done
		return 0, nil, ctx.Err()
	}
	if f.err != nil {
		s.kill()
		note := ""
		if errors.Is(f.err, io.EOF) || errors.Is(f.err, io.ErrUnexpectedEOF) {
			note = p.exitNote()
		}
		return 0, nil, fmt.Errorf("%s: %v%s", what, f.err, note)
	}
	return f.typ, f.payload, nil
}

// kill ends the running adapter, if any.
func (s *adapterSession) kill() {
	if s.proc != nil {
		s.proc.kill()
		s.proc = nil
	}
}

// prepareTimeout bounds a prepare: copying the operands to the device and
// warming up takes longer than a case (the larger of the hello and case
// timeouts).
func (s *adapterSession) prepareTimeout() time.Duration {
	return max(s.spec.HelloTimeout, s.spec.CaseTimeout)
}

// prepare sends a prepare frame for case id and returns the batch rows of
// N outputs of the ready frame. An unsupported answer is returned as an
// *UnsupportedError; an error answer, a malformed or mismatched ready
// frame, a timeout or a crash as an error naming the frame (the adapter
// is then killed, except after an error or unsupported answer).
func (s *adapterSession) prepare(ctx context.Context, id string, r *QMVRequest, xs []Vec) ([]Vec, error) {
	payload, err := EncodePrepare(id, r, xs)
	if err != nil {
		return nil, err
	}
	what := "prepare " + id
	typ, ans, err := s.request(ctx, FramePrepare, payload, what, s.prepareTimeout())
	if err != nil {
		return nil, err
	}
	a, err := DecodeReady(typ, ans)
	if err == nil && a.ID != id {
		err = fmt.Errorf("the answer names case %q", clipText(a.ID))
	}
	if err == nil && a.Kind == AnswerOutput && (a.Out.DType != r.DType || a.Out.Len() != len(xs)*r.N) {
		err = fmt.Errorf("ready frame has %d values of %v, want %d of %v (batch %d x N %d)", a.Out.Len(), a.Out.DType, len(xs)*r.N, r.DType, len(xs), r.N)
	}
	if err != nil {
		s.kill()
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	switch a.Kind {
	case AnswerUnsupported:
		return nil, &UnsupportedError{Reason: a.Text}
	case AnswerError:
		return nil, fmt.Errorf("%s: the adapter answered an error: %s", what, a.Text)
	}
	rows := make([]Vec, len(xs))
	for b := range rows {
		rows[b] = sliceRow(a.Out, b*r.N, (b+1)*r.N)
	}
	return rows, nil
}

// sliceRow returns values lo..hi of v (sharing its storage).
func sliceRow(v Vec, lo, hi int) Vec {
	out := Vec{DType: v.DType}
	if v.B32 != nil {
		out.B32 = v.B32[lo:hi]
	} else {
		out.B16 = v.B16[lo:hi]
	}
	return out
}

// timeSamples sends a time frame for the prepared case id and returns the
// adapter's samples. An error answer, a malformed samples frame (bad
// clock, launches or sample values), a count other than n, a timeout or a
// crash is an error naming the frame.
func (s *adapterSession) timeSamples(ctx context.Context, id string, n, repeat int) (TimingSamples, error) {
	what := fmt.Sprintf("time %s (repeat %d)", id, repeat)
	typ, ans, err := s.request(ctx, FrameTime, EncodeTime(id, n, repeat), what, s.spec.CaseTimeout)
	if err != nil {
		return TimingSamples{}, err
	}
	switch typ {
	case FrameSamples:
	case FrameError, FrameUnsupported:
		a, err := DecodeAnswer(typ, ans)
		if err != nil {
			s.kill()
			return TimingSamples{}, fmt.Errorf("%s: %w", what, err)
		}
		return TimingSamples{}, fmt.Errorf("%s: the adapter answered %v: %s", what, a.Kind, a.Text)
	default:
		s.kill()
		return TimingSamples{}, fmt.Errorf("%s: answer has frame type %q, want a samples frame (S)", what, typ)
	}
	got, ts, err := DecodeSamples(ans)
	if err == nil && got != id {
		err = fmt.Errorf("samples frame names case %q", clipText(got))
	}
	if err == nil && len(ts.Samples) != n {
		err = fmt.Errorf("samples frame holds %d samples, asked for %d", len(ts.Samples), n)
	}
	if err != nil {
		s.kill()
		return TimingSamples{}, fmt.Errorf("%s: %w", what, err)
	}
	return ts, nil
}

// adapterArm is one timed side of a throughput case prepared on an
// adapter: every Sample is a time frame. It keeps the clock and launches
// of the first answer and refuses answers that change them.
type adapterArm struct {
	s        *adapterSession
	side     string // names the arm in errors
	id       string
	repeat   int
	clock    string
	launches int
}

// Sample implements Arm.
func (a *adapterArm) Sample(ctx context.Context, n int) ([]float64, error) {
	ts, err := a.s.timeSamples(ctx, a.id, n, a.repeat)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", a.side, err)
	}
	if a.clock == "" {
		a.clock, a.launches = ts.Clock, ts.Launches
	} else if ts.Clock != a.clock || ts.Launches != a.launches {
		return nil, fmt.Errorf("%s: time %s: samples frame changed clock or launches (%s x%d, before %s x%d)", a.side, a.id, ts.Clock, ts.Launches, a.clock, a.launches)
	}
	return ts.Samples, nil
}
