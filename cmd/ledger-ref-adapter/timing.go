package main

import (
	"context"
	"fmt"
	"time"

	"github.com/evidence-ledger/ledger/backends/cpu"
	"github.com/evidence-ledger/ledger/runner"
)

// refClock names the clock of the samples: Go's monotonic clock
// (time.Now / time.Since).
const refClock = "monotonic"

// minSample is the shortest group a sample times: enough products that
// the clock's resolution and the call overhead are far below 1 %.
const minSample = time.Millisecond

// refPrepared is a throughput case held by the reference adapter: copies
// of the weights, scales and biases (products rotate through them, so
// together they exceed the CPU's caches), the batch's vectors, and the
// products per sample measured at prepare.
type refPrepared struct {
	b        *cpu.Backend
	reqs     []*runner.QMVRequest // one per copy, Variant set
	xs       []runner.Vec
	launches int
	next     int
}

// prepareFunc returns the AdapterServer.Prepare of the CPU backend's
// variant v, with copies of the operands totalling at least rotateBytes
// (at most 64 copies).
func prepareFunc(b *cpu.Backend, v runner.Variant, rotateBytes int) func(string, *runner.QMVRequest, []runner.Vec) (runner.PreparedCase, error) {
	return func(_ string, req *runner.QMVRequest, xs []runner.Vec) (runner.PreparedCase, error) {
		req.Variant = v
		if err := req.Validate(); err != nil {
			return nil, err
		}
		size := 4*len(req.W) + req.DType.Size()*(req.Scales.Len()+req.Biases.Len())
		copies := min(max(1, (rotateBytes+size-1)/size), 64)
		p := &refPrepared{b: b, xs: xs, reqs: []*runner.QMVRequest{req}}
		for range copies - 1 {
			c := *req
			c.W = append([]uint32(nil), req.W...)
			c.Scales, c.Biases = cloneVec(req.Scales), cloneVec(req.Biases)
			p.reqs = append(p.reqs, &c)
		}
		// Warm up every copy once, then size the groups from the fastest of
		// three products.
		for range copies {
			if err := p.product(1); err != nil {
				return nil, err
			}
		}
		best := time.Duration(1<<63 - 1)
		for range 3 {
			t0 := time.Now()
			if err := p.product(1); err != nil {
				return nil, err
			}
			best = min(best, time.Since(t0))
		}
		p.launches = int(min(max(1, (minSample+best-1)/max(best, 1)), 1<<16))
		return p, nil
	}
}

func cloneVec(v runner.Vec) runner.Vec {
	return runner.Vec{DType: v.DType, B16: append([]uint16(nil), v.B16...), B32: append([]uint32(nil), v.B32...)}
}

// product runs one product of every vector, each kernel launched repeat
// times, on the next copy of the operands.
func (p *refPrepared) product(repeat int) error {
	r := p.reqs[p.next]
	p.next = (p.next + 1) % len(p.reqs)
	for range repeat {
		for _, x := range p.xs {
			rr := *r
			rr.X = x
			if _, err := p.b.QMV(context.Background(), &rr); err != nil {
				return err
			}
		}
	}
	return nil
}

// Output implements runner.PreparedCase.
func (p *refPrepared) Output() ([]runner.Vec, error) {
	rows := make([]runner.Vec, len(p.xs))
	for i, x := range p.xs {
		rr := *p.reqs[0]
		rr.X = x
		y, err := p.b.QMV(context.Background(), &rr)
		if err != nil {
			return nil, err
		}
		rows[i] = y
	}
	return rows, nil
}

// Time implements runner.PreparedCase: each sample is the monotonic time
// of p.launches products divided by p.launches.
func (p *refPrepared) Time(n, repeat int) (runner.TimingSamples, error) {
	if repeat < 1 {
		return runner.TimingSamples{}, fmt.Errorf("repeat %d < 1", repeat)
	}
	ts := runner.TimingSamples{Clock: refClock, Launches: p.launches, Samples: make([]float64, n)}
	for i := range ts.Samples {
		t0 := time.Now()
		for range p.launches {
			if err := p.product(repeat); err != nil {
				return runner.TimingSamples{}, err
			}
		}
		ts.Samples[i] = time.Since(t0).Seconds() / float64(p.launches)
	}
	return ts, nil
}

// Close implements runner.PreparedCase.
func (p *refPrepared) Close() error {
	p.reqs, p.xs = nil, nil
	return nil
}
