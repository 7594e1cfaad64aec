package runner

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
	"unicode/utf8"
)

// AllocAdapterProtocol is the allocator adapter protocol, the second
// version of the adapter protocol beside AdapterProtocol (which is
// unchanged). It carries alloc-snapshot/v1 and alloc-footprint/v1 to a real
// runtime's allocator: the adapter generates allocation traffic inside the
// runtime (threads creating and freeing arrays or tensors of the sizes the
// ledger asks for) and answers counter readings; the ledger computes every
// verdict from the readings.
//
// Frames are those of AdapterProtocol (type byte, u32 little-endian
// length, payload). Both sides open with a hello (FrameHello, JSON
// AdapterHello with protocol "ledger-alloc-adapter/1"); then the ledger
// sends requests (FrameRequest, JSON AllocRequest) and the adapter answers
// each, in order, with exactly one FrameReply (JSON), FrameUnsupported
// (UTF-8 reason: the runtime has no way to do it) or FrameError (UTF-8
// message); FrameBye ends the session. Requests, by op:
//
//	info:       reply AllocInfo (runtime rule set name, counters, limits)
//	observe:    mode "coherent" (one reading of every counter under the
//	            allocator's lock) or "independent" (each counter by its own
//	            call, the original way); readings, mutators, sizes[m] (bytes
//	            of mutator m's arrays), live (arrays each mutator holds at
//	            most), min_ops (mutator operations to spread the readings
//	            over). Reply AllocObservation.
//	steps:      run steps in order on one thread: {"op":"alloc","slot":i,
//	            "n":bytes}, {"op":"free","slot":i}, {"op":"clear_cache"};
//	            reply {"results":[AllocStepResult...]}, one per step.
//	set_limits: {"memory":bytes,"cache":bytes} (0 leaves one unchanged);
//	            reply {"memory":old,"cache":old}.
//
// Payloads are at most MaxFramePayload bytes; texts at most 1024 bytes.
const AllocAdapterProtocol = "ledger-alloc-adapter/1"

// Frame types of AllocAdapterProtocol beside FrameHello, FrameUnsupported,
// FrameError and FrameBye.
const (
	FrameRequest byte = 'R' // ledger -> adapter: JSON AllocRequest
	FrameReply   byte = 'A' // adapter -> ledger: JSON reply
)

// AllocRequest is one request of AllocAdapterProtocol.
type AllocRequest struct {
	Op       string      `json:"op"`
	Mode     string      `json:"mode,omitempty"`
	Readings int         `json:"readings,omitempty"`
	Mutators int         `json:"mutators,omitempty"`
	Sizes    []int       `json:"sizes,omitempty"`
	Live     int         `json:"live,omitempty"`
	MinOps   int         `json:"min_ops,omitempty"`
	Steps    []AllocStep `json:"steps,omitempty"`
	Memory   int         `json:"memory,omitempty"`
	Cache    int         `json:"cache,omitempty"`
}

// AllocStep is one step of a steps request.
type AllocStep struct {
	Op   string `json:"op"`
	Slot int    `json:"slot"`
	N    int    `json:"n,omitempty"`
}

// AllocInfo is the reply to info.
type AllocInfo struct {
	// Rules names the runtime's rule set (RuntimeRulesFor).
	Rules string `json:"rules"`
	// Counters are the counter names every reading carries, among
	// "active" (bytes of live buffers), "cache" (bytes of freed buffers
	// held for reuse), "peak" (maximum of active) and "reserved" (bytes
	// held from the backend).
	Counters    []string `json:"counters"`
	MemoryLimit int      `json:"memory_limit,omitempty"`
	CacheLimit  int      `json:"cache_limit,omitempty"`
	// Coherent names the runtime's call that reads every counter under
	// one acquisition of the allocator's lock, "" when it has none.
	Coherent    string `json:"coherent,omitempty"`
	Independent string `json:"independent,omitempty"`
}

// AllocObservation is the reply to observe.
type AllocObservation struct {
	Fields   []string  `json:"fields"`
	Readings [][]int64 `json:"readings"`
	// MutatorOps counts the mutators' operations during the readings.
	MutatorOps int `json:"mutator_ops"`
	// FreshBuffers counts buffer addresses first seen during the readings
	// (-1: not tracked).
	FreshBuffers int `json:"fresh_buffers"`
	// QuiescentBefore/After are readings with no traffic running, after
	// the warm-up and after the mutators stopped.
	QuiescentBefore map[string]int64 `json:"quiescent_before"`
	QuiescentAfter  map[string]int64 `json:"quiescent_after"`
	Stalled         bool             `json:"stalled,omitempty"`
}

// AllocStepResult is the outcome of one step: the counters before and
// after it, the runtime's own size of an allocated buffer (-1 unknown) and
// the runtime's error, if any.
type AllocStepResult struct {
	Before map[string]int64 `json:"before"`
	After  map[string]int64 `json:"after"`
	Size   int64            `json:"size"`
	Error  string           `json:"error,omitempty"`
}

// errAllocUnsupported wraps an adapter's unsupported answer.
type allocUnsupported struct{ reason string }

func (e *allocUnsupported) Error() string { return "unsupported: " + e.reason }

// allocSession is one allocator adapter process, or a replay of one.
type allocSession struct {
	p       *adapterProc
	timeout time.Duration
	replay  []AllocExchange
}

// AllocExchange is one recorded request and its answer, as an allocator
// adapter writes them with LEDGER_ALLOC_DUMP=FILE (one JSON object a
// line): Type is "A" (Answer is the reply's JSON text), "U" or "E"
// (Answer is the reason or message).
type AllocExchange struct {
	Request json.RawMessage `json:"request"`
	Type    string          `json:"type"`
	Answer  string          `json:"answer"`
}

// ReplayAllocLane re-derives an allocator lane's result (lane
// alloc-snapshot/v1 or alloc-footprint/v1) from a recorded session: the
// same Go code judges the recorded answers, and every request the lane
// makes must equal the recorded one, in order (a different request, or
// one past the record, is an error). It is how a test checks committed
// device evidence without the device.
func ReplayAllocLane(ctx context.Context, lane string, rec []AllocExchange) (*Result, error) {
	s := &allocSession{replay: rec}
	var info AllocInfo
	if err := s.do(ctx, AllocRequest{Op: "info"}, &info); err != nil {
		return nil, err
	}
	rules, err := RuntimeRulesFor(info.Rules)
	if err != nil {
		return nil, err
	}
	switch lane {
	case LaneAllocSnap:
		return runExtSnapshot(ctx, s, &info, rules, DefaultSnapshots)
	case LaneAllocFoot:
		return runExtFootprint(ctx, s, &info, rules)
	}
	return nil, fmt.Errorf("%s is not an allocator lane", lane)
}

// doReplay answers req from the record.
func (s *allocSession) doReplay(req AllocRequest, b []byte) (byte, []byte, error) {
	if len(s.replay) == 0 {
		return 0, nil, fmt.Errorf("replay: request %s past the end of the record", req.Op)
	}
	x := s.replay[0]
	s.replay = s.replay[1:]
	var got, want any
	if json.Unmarshal(b, &got) != nil || json.Unmarshal(x.Request, &want) != nil {
		return 0, nil, fmt.Errorf("replay: unreadable request")
	}
	gb, _ := json.Marshal(got)
	wb, _ := json.Marshal(want)
	if string(gb) != string(wb) {
		return 0, nil, fmt.Errorf("replay: the lane asked %s, the record has %s", clipText(string(gb)), clipText(string(wb)))
	}
	if len(x.Type) != 1 {
		return 0, nil, fmt.Errorf("replay: answer type %q", x.Type)
	}
	return x.Type[0], []byte(x.Answer), nil
}

// startAllocSession starts an adapter and exchanges the allocator hello.
func startAllocSession(ctx context.Context, spec AdapterSpec) (*allocSession, error) {
	spec = spec.defaults()
	p, err := startProc(ctx, spec, AllocAdapterProtocol)
	if err != nil {
		return nil, fmt.Errorf("%s adapter protocol: %w", AllocAdapterProtocol, err)
	}
	return &allocSession{p: p, timeout: max(spec.CaseTimeout, 120*time.Second)}, nil
}

// frameRes is one answer frame read from an adapter.
type frameRes struct {
	typ     byte
	payload []byte
	err     error
}

// send writes a request and reads the answer frame into ch.
func (s *allocSession) send(ch chan<- frameRes, op string, b []byte) {
	if err := WriteFrame(s.p.stdin, FrameRequest, b); err != nil {
		ch <- frameRes{err: fmt.Errorf("send %s: %w", op, err)}
		return
	}
	typ, payload, err := ReadFrame(s.p.out)
	ch <- frameRes{typ, payload, err}
}

// do sends one request and decodes its answer into reply; an unsupported
// answer is an *allocUnsupported error.
func (s *allocSession) do(ctx context.Context, req AllocRequest, reply any) error {
	b, err := json.Marshal(req)
	if err != nil {
		return err
	}
	var r frameRes
	if s.replay != nil {
		r.typ, r.payload, r.err = s.doReplay(req, b)
		if r.err != nil {
			return r.err
		}
	} else {
		ch := make(chan frameRes, 1)
		go s.send(ch, req.Op, b)
		t := time.NewTimer(s.timeout)
		defer t.Stop()
		select {
		case r = <-ch:
			if r.err != nil {
				return fmt.Errorf("%s: %w%s", req.Op, r.err, s.p.exitNote())
			}
		case <-t.C:
			s.p.kill()
			return fmt.Errorf("%s: no answer within %v", req.Op, s.timeout)
		case <-ctx.Done():
			s.p.kill()
			return ctx.Err()
		}
	}
	switch r.typ {
	case FrameReply:
		if err := json.Unmarshal(r.payload, reply); err != nil {
			return fmt.Errorf("%s: reply: %v", req.Op, err)
		}
		return nil
	case FrameUnsupported, FrameError:
		txt := string(r.payload)
		if len(txt) > maxReason || !utf8.ValidString(txt) {
			return fmt.Errorf("%s: answer text must be at most %d bytes of UTF-8", req.Op, maxReason)
		}
		if r.typ == FrameUnsupported {
			return &allocUnsupported{txt}
		}
		return fmt.Errorf("%s: adapter error: %s", req.Op, txt)
	}
	return fmt.Errorf("%s: unexpected frame type %q", req.Op, r.typ)
}

func (s *allocSession) close() { s.p.close() }
