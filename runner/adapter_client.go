package runner

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"reflect"
	"sync"
	"sync/atomic"
	"time"
)

// AdapterSpec says how to start an adapter process and how long to wait
// for it.
type AdapterSpec struct {
	// Command is the adapter's argv (no shell); Command[0] is looked up in
	// PATH when it has no slash.
	Command []string
	// Dir is the working directory ("" = the ledger's).
	Dir string
	// Env is added to the ledger's environment (KEY=VALUE).
	Env []string
	// Stderr receives the adapter's stderr (nil: the ledger's stderr). It is
	// never copied into evidence.
	Stderr io.Writer
	// HelloTimeout bounds the start and hello exchange (default 120 s:
	// importing a GPU framework takes seconds).
	HelloTimeout time.Duration
	// CaseTimeout bounds the wait for each answer after the previous one
	// (default 30 s).
	CaseTimeout time.Duration
	// Window is how many cases may be in flight (default 32).
	Window int
	// MaxRestarts is how many times a failed adapter (crash, hang,
	// malformed answer) is restarted within one lane run before the
	// remaining cases are errors (default 3; negative: never).
	MaxRestarts int
	// LedgerVersion is sent in the ledger's hello.
	LedgerVersion string
}

func (s *AdapterSpec) defaults() AdapterSpec {
	o := *s
	if o.HelloTimeout <= 0 {
		o.HelloTimeout = 120 * time.Second
	}
	if o.CaseTimeout <= 0 {
		o.CaseTimeout = 30 * time.Second
	}
	if o.Window <= 0 {
		o.Window = 32
	}
	if o.MaxRestarts == 0 {
		o.MaxRestarts = 3
	}
	if o.Stderr == nil {
		o.Stderr = os.Stderr
	}
	return o
}

// adapterProc is one running adapter process.
type adapterProc struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	out    *bufio.Reader
	hello  AdapterHello
	exited chan struct{} // closed when the process has been waited for
	werr   error         // Wait's result, valid after exited
}

// startAdapter starts the process and exchanges the qmv protocol's
// hellos (ledger-adapter/1).
func startAdapter(ctx context.Context, spec AdapterSpec) (*adapterProc, error) {
	p, err := startProc(ctx, spec, AdapterProtocol)
	if err != nil && ctx.Err() == nil {
		return nil, fmt.Errorf("adapter: %w", err)
	}
	return p, err
}

// startProc starts an adapter process and exchanges hellos under
// protocol: the ledger's hello names it and the adapter's must too.
func startProc(ctx context.Context, spec AdapterSpec, protocol string) (*adapterProc, error) {
	if len(spec.Command) == 0 || spec.Command[0] == "" {
		return nil, fmt.Errorf("empty command")
	}
	cmd := exec.Command(spec.Command[0], spec.Command[1:]...)
	cmd.Dir = spec.Dir
	cmd.Env = append(os.Environ(), spec.Env...)
	cmd.Stderr = spec.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", spec.Command[0], err)
	}
	p := &adapterProc{cmd: cmd, stdin: stdin, out: bufio.NewReaderSize(stdout, 1<<16), exited: make(chan struct{})}
	go func() { p.werr = cmd.Wait(); close(p.exited) }()
	done := make(chan error, 1)
	go func() {
		mine, _ := json.Marshal(AdapterHello{Protocol: protocol, Ledger: spec.LedgerVersion})
		if err := WriteFrame(stdin, FrameHello, mine); err != nil {
			done <- fmt.Errorf("send hello: %w", err)
			return
		}
		typ, payload, err := ReadFrame(p.out)
		if err != nil {
			done <- fmt.Errorf("read hello: %w", err)
			return
		}
		if typ != FrameHello {
			done <- fmt.Errorf("first frame has type %q, want a hello", typ)
			return
		}
		if err := json.Unmarshal(payload, &p.hello); err != nil {
			done <- fmt.Errorf("hello is not JSON: %v", err)
			return
		}
		if p.hello.Protocol != protocol {
			done <- fmt.Errorf("hello: protocol %q, want %q", clipText(p.hello.Protocol), protocol)
			return
		}
		h := p.hello
		h.Protocol = AdapterProtocol // the rest of the hello is checked as in ledger-adapter/1, whatever the protocol
		done <- h.Validate()
	}()
	t := time.NewTimer(spec.HelloTimeout)
	defer t.Stop()
	select {
	case err := <-done:
		if err != nil {
			p.kill()
			return nil, fmt.Errorf("%w%s", err, p.exitNote())
		}
		return p, nil
	case <-t.C:
		p.kill()
		return nil, fmt.Errorf("no hello within %v", spec.HelloTimeout)
	case <-ctx.Done():
		p.kill()
		return nil, ctx.Err()
	}
}

// kill ends the process and waits for it.
func (p *adapterProc) kill() {
	_ = p.cmd.Process.Kill()
	_ = p.stdin.Close()
	<-p.exited
}

// exitNote describes how the process ended, if it has ended.
func (p *adapterProc) exitNote() string {
	select {
	case <-p.exited:
		if p.werr != nil {
			return " (adapter " + p.werr.Error() + ")"
		}
		return " (adapter exited with status 0)"
	case <-time.After(200 * time.Millisecond):
		return ""
	}
}

// close sends bye, closes stdin and waits up to 5 s before killing.
func (p *adapterProc) close() {
	_ = WriteFrame(p.stdin, FrameBye, nil)
	_ = p.stdin.Close()
	select {
	case <-p.exited:
	case <-time.After(5 * time.Second):
		p.kill()
	}
}

// adapterCase is one case sent to an adapter.
type adapterCase struct {
	ID  string
	Req *QMVRequest
}

// adapterSession runs cases through an adapter, restarting it after a
// failure. It is not safe for concurrent use.
type adapterSession struct {
	spec     AdapterSpec
	proc     *adapterProc
	hello    *AdapterHello // the first hello; restarts must repeat it
	restarts int
}

func newAdapterSession(spec AdapterSpec) *adapterSession {
	return &adapterSession{spec: spec.defaults()}
}

// start starts the adapter (when none is running) and checks that a
// restarted adapter names the same implementation, version, device and
// runtime as the first.
func (s *adapterSession) start(ctx context.Context) error {
	if s.proc != nil {
		return nil
	}
	p, err := startAdapter(ctx, s.spec)
	if err != nil {
		return err
	}
	if s.hello == nil {
		h := p.hello
		s.hello = &h
	} else if !sameHello(*s.hello, p.hello) {
		p.kill()
		return fmt.Errorf("adapter: the restarted adapter's hello differs from the first (implementation %s %s)", p.hello.Implementation, p.hello.Version)
	}
	s.proc = p
	return nil
}

// sameHello reports whether two hellos name the same implementation,
// version, device, runtime, source and capabilities (State may differ).
func sameHello(a, b AdapterHello) bool {
	a.State, b.State = nil, nil
	return reflect.DeepEqual(a, b)
}

// Hello starts the adapter if needed and returns its hello.
func (s *adapterSession) Hello(ctx context.Context) (AdapterHello, error) {
	if err := s.start(ctx); err != nil {
		return AdapterHello{}, err
	}
	return *s.hello, nil
}

// Close stops the adapter.
func (s *adapterSession) Close() {
	if s.proc != nil {
		s.proc.close()
		s.proc = nil
	}
}

// Run sends every case and returns one answer per case, in order. A case
// whose answer fails (timeout, crash, malformed or out-of-order answer,
// wrong dtype or length) gets an AnswerFailed naming what happened; after
// a crash, hang or malformed stream the adapter is killed and restarted
// for the remaining cases, at most MaxRestarts times, after which the
// remaining cases fail as not run (the budget is per call). Cancelling ctx fails the remaining
// cases and returns ctx's error.
func (s *adapterSession) Run(ctx context.Context, cases []adapterCase) ([]Answer, error) {
	answers := make([]Answer, len(cases))
	next := 0
	s.restarts = 0 // the restart budget is per call (one lane)
	failRest := func(text string) {
		for ; next < len(cases); next++ {
			answers[next] = Answer{ID: cases[next].ID, Kind: AnswerFailed, Text: text}
		}
	}
	for next < len(cases) {
		if err := ctx.Err(); err != nil {
			failRest("not run: " + err.Error())
			return answers, err
		}
		if s.proc == nil && s.hello != nil && s.restarts >= s.spec.MaxRestarts {
			failRest(fmt.Sprintf("not run: the adapter failed %d times", s.restarts))
			break
		}
		if err := s.start(ctx); err != nil {
			if ctx.Err() != nil {
				failRest("not run: " + ctx.Err().Error())
				return answers, ctx.Err()
			}
			if s.hello == nil || s.spec.MaxRestarts < 0 {
				failRest("not run: " + err.Error())
				break
			}
			answers[next] = Answer{ID: cases[next].ID, Kind: AnswerFailed, Text: "adapter restart failed: " + err.Error()}
			next++
			s.restarts++
			continue
		}
		n, ferr := s.batch(ctx, cases[next:], answers[next:])
		next += n
		if ferr != nil {
			if next < len(cases) {
				answers[next] = Answer{ID: cases[next].ID, Kind: AnswerFailed, Text: ferr.Error()}
				next++
			}
			s.proc.kill()
			s.proc = nil
			s.restarts++
			if s.spec.MaxRestarts < 0 {
				failRest("not run: the adapter failed")
			}
		}
	}
	return answers, ctx.Err()
}

// frame is one frame read from an adapter, or the read's error.
type frame struct {
	typ     byte
	payload []byte
	err     error
}

// pipe is the two goroutines of one batch: a writer that keeps up to
// Window cases in flight and a reader that forwards frames.
type pipe struct {
	window chan struct{}
	stop   chan struct{}
	frames chan frame
	werr   chan error
	sent   atomic.Int64 // cases fully handed to the pipe
	wg     sync.WaitGroup
}

func (s *adapterSession) startPipe(p *adapterProc, cases []adapterCase) *pipe {
	pp := &pipe{window: make(chan struct{}, s.spec.Window), stop: make(chan struct{}),
		frames: make(chan frame, s.spec.Window), werr: make(chan error, 1)}
	pp.wg.Add(2)
	go pp.write(p, cases)
	go pp.read(p, len(cases))
	return pp
}

func (pp *pipe) write(p *adapterProc, cases []adapterCase) {
	defer pp.wg.Done()
	bw := bufio.NewWriterSize(p.stdin, 1<<16)
	for i, c := range cases {
		select {
		case pp.window <- struct{}{}:
		case <-pp.stop:
			return
		}
		payload, err := EncodeCase(c.ID, c.Req)
		if err == nil {
			err = WriteFrame(bw, FrameCase, payload)
		}
		// Flush when the window is full or the cases are done, so the
		// adapter sees work while the ledger waits.
		if err == nil && (len(pp.window) == cap(pp.window) || i == len(cases)-1) {
			err = bw.Flush()
		}
		if err != nil {
			pp.werr <- fmt.Errorf("send case %s: %w", c.ID, err)
			return
		}
		pp.sent.Store(int64(i + 1))
	}
}

func (pp *pipe) read(p *adapterProc, n int) {
	defer pp.wg.Done()
	for i := 0; i < n; i++ {
		typ, payload, err := ReadFrame(p.out)
		select {
		case pp.frames <- frame{typ, payload, err}:
		case <-pp.stop:
			return
		}
		if err != nil {
			return
		}
	}
}

// batch pipelines cases to the running adapter and collects answers into
// out until all are answered (it returns len(cases), nil) or the stream
// fails: then it kills the adapter and returns the number of cases
// answered and the failure of the next one. Answers that arrive but are
// unusable without breaking the stream (wrong dtype or length) fail their
// case and batch goes on.
func (s *adapterSession) batch(ctx context.Context, cases []adapterCase, out []Answer) (int, error) {
	p := s.proc
	pp := s.startPipe(p, cases)
	ok := false
	defer func() {
		// A failed stream is killed first, which unblocks the reader and
		// the writer (their pipe ends close).
		if !ok {
			p.kill()
		}
		close(pp.stop)
		pp.wg.Wait()
	}()
	timer := time.NewTimer(s.spec.CaseTimeout)
	defer timer.Stop()
	var writeErr error
	wait := s.spec.CaseTimeout
	for i, c := range cases {
		if writeErr != nil && int64(i) >= pp.sent.Load() {
			return i, fmt.Errorf("%v%s", writeErr, p.exitNote())
		}
		timer.Reset(wait)
		var f frame
	recv:
		select {
		case f = <-pp.frames:
		case err := <-pp.werr:
			// The adapter stopped reading (it probably exited): answers of
			// cases already sent may still be in the pipe, or the reader
			// will see why the stream ended, so keep reading briefly.
			writeErr, pp.werr = err, nil
			if wait > 2*time.Second {
				wait = 2 * time.Second
				timer.Reset(wait)
			}
			goto recv
		case <-timer.C:
			if writeErr != nil {
				return i, fmt.Errorf("%v%s", writeErr, p.exitNote())
			}
			return i, fmt.Errorf("no answer within %v (adapter killed)", s.spec.CaseTimeout)
		case <-ctx.Done():
			return i, ctx.Err()
		}
		<-pp.window
		a, err := checkAnswer(f, c, p)
		if err != nil {
			return i, err
		}
		out[i] = a
	}
	ok = true
	return len(cases), nil
}

// checkAnswer decodes a frame as the answer to case c. An error means the
// stream is broken; a usable frame with the wrong dtype or length is an
// AnswerFailed for the case.
func checkAnswer(f frame, c adapterCase, p *adapterProc) (Answer, error) {
	if f.err != nil {
		what := "adapter output ended"
		if !errors.Is(f.err, io.EOF) {
			what = "malformed frame: " + f.err.Error()
		}
		return Answer{}, fmt.Errorf("%s before the answer%s", what, p.exitNote())
	}
	a, err := DecodeAnswer(f.typ, f.payload)
	if err != nil {
		return Answer{}, fmt.Errorf("malformed answer: %v", err)
	}
	if a.ID != c.ID {
		return Answer{}, fmt.Errorf("answer names case %q, want %q (answers must come in order)", clipText(a.ID), c.ID)
	}
	if a.Kind == AnswerOutput && (a.Out.DType != c.Req.DType || a.Out.Len() != c.Req.N) {
		return Answer{ID: c.ID, Kind: AnswerFailed, Text: fmt.Sprintf("answer has %d values of %v, want %d of %v", a.Out.Len(), a.Out.DType, c.Req.N, c.Req.DType)}, nil
	}
	return a, nil
}
