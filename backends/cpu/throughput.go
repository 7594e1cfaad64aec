package cpu

import (
	"context"
	_ "embed"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/evidence-ledger/ledger/runner"
)

var _ runner.ThroughputBackend = (*Backend)(nil)

//go:embed throughput.go
var srcThroughput []byte

// defaultLLC is the last-level cache size assumed when sysfs does not say.
const defaultLLC = 32 << 20

// minSampleTime is the least time one sample takes: products are grouped
// until a group takes at least this long, so the monotonic clock's
// resolution and the cost of reading it vanish in the group's time.
const minSampleTime = time.Millisecond

// maxCopies caps the operand copies of one prepared case.
const maxCopies = 64

// Clock returns "monotonic": samples are time.Since over Go's monotonic
// clock.
func (b *Backend) Clock() string { return "monotonic" }

// DeviceState reads what moves CPU timings: "cpu.model", "cpu.mhz" (the
// mean "cpu MHz" of /proc/cpuinfo), "cpu.governor" (cpu0's scaling
// governor), "loadavg" (the 1, 5 and 15 minute load averages) and
// "gomaxprocs". Values that cannot be read are "unknown".
func (b *Backend) DeviceState() map[string]string {
	st := map[string]string{"cpu.model": b.device.Model, "cpu.mhz": "unknown", "cpu.governor": "unknown",
		"loadavg": "unknown", "gomaxprocs": strconv.Itoa(runtime.GOMAXPROCS(0))}
	if raw, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		var sum float64
		n := 0
		for _, line := range strings.Split(string(raw), "\n") {
			k, v, ok := strings.Cut(line, ":")
			if !ok || strings.TrimSpace(k) != "cpu MHz" {
				continue
			}
			if f, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
				sum += f
				n++
			}
		}
		if n > 0 {
			st["cpu.mhz"] = strconv.FormatFloat(sum/float64(n), 'f', 0, 64)
		}
	}
	if raw, err := os.ReadFile("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor"); err == nil {
		st["cpu.governor"] = strings.TrimSpace(string(raw))
	}
	if raw, err := os.ReadFile("/proc/loadavg"); err == nil {
		if f := strings.Fields(string(raw)); len(f) >= 3 {
			st["loadavg"] = strings.Join(f[:3], " ")
		}
	}
	return st
}

// lastLevelCache returns the size in bytes of cpu0's highest-level cache
// from /sys/devices/system/cpu/cpu0/cache/index*/{level,size}, or
// defaultLLC when it cannot be read.
func lastLevelCache() int {
	dirs, _ := filepath.Glob("/sys/devices/system/cpu/cpu0/cache/index*")
	best, size := 0, 0
	for _, d := range dirs {
		lv, err1 := os.ReadFile(filepath.Join(d, "level"))
		sz, err2 := os.ReadFile(filepath.Join(d, "size"))
		if err1 != nil || err2 != nil {
			continue
		}
		l, err := strconv.Atoi(strings.TrimSpace(string(lv)))
		if err != nil || l < best {
			continue
		}
		if n := parseCacheSize(strings.TrimSpace(string(sz))); n > 0 {
			best, size = l, n
		}
	}
	if size == 0 {
		return defaultLLC
	}
	return size
}

// parseCacheSize parses sysfs cache sizes ("32768K", "1M", "512"); 0 when
// malformed.
func parseCacheSize(s string) int {
	mul := 1
	switch {
	case strings.HasSuffix(s, "K"):
		mul, s = 1<<10, s[:len(s)-1]
	case strings.HasSuffix(s, "M"):
		mul, s = 1<<20, s[:len(s)-1]
	case strings.HasSuffix(s, "G"):
		mul, s = 1<<30, s[:len(s)-1]
	}
	n, err := strconv.Atoi(s)
	if err != nil || n <= 0 {
		return 0
	}
	return n * mul
}

// PrepareQMV copies r's weights, scales and biases until the copies
// together exceed twice the last-level cache (at most maxCopies), runs a
// warm-up product and chooses the products per sample so that a sample
// takes at least a millisecond. One product runs the kernel (QMV's,
// GOMAXPROCS goroutines) once over each vector of xs; successive kernel
// launches use successive copies, so every launch reads its weights from
// memory. Errors: invalid requests, a vector of the wrong length or dtype,
// ctx cancelled.
func (b *Backend) PrepareQMV(ctx context.Context, r *runner.QMVRequest, xs []runner.Vec) (runner.PreparedQMV, error) {
	if r == nil {
		return nil, fmt.Errorf("cpu prepare: nil request")
	}
	if err := r.Validate(); err != nil {
		return nil, fmt.Errorf("cpu prepare: %w", err)
	}
	if len(xs) == 0 {
		return nil, fmt.Errorf("cpu prepare: no activation vectors")
	}
	for i, x := range xs {
		if x.DType != r.DType || x.Len() != r.K {
			return nil, fmt.Errorf("cpu prepare: vector %d has %d values of %v, want %d of %v", i, x.Len(), x.DType, r.K, r.DType)
		}
	}
	per := 4*len(r.W) + vecBytes(r.Scales) + vecBytes(r.Biases)
	n := min(2*lastLevelCache()/per+1, maxCopies)
	p := &preparedQMV{xs: xs, copies: make([]*runner.QMVRequest, n)}
	for i := range p.copies {
		c := *r
		c.W = append([]uint32(nil), r.W...)
		c.Scales, c.Biases = cloneVec(r.Scales), cloneVec(r.Biases)
		p.copies[i] = &c
	}
	p.launches = 1
	if err := p.product(ctx, runner.Promoted, 1); err != nil { // warm-up
		return nil, err
	}
	start := time.Now()
	if err := p.product(ctx, runner.Promoted, 1); err != nil {
		return nil, err
	}
	if t := max(time.Since(start), time.Microsecond); t < minSampleTime {
		p.launches = int((minSampleTime + t - 1) / t)
	}
	return p, nil
}

func vecBytes(v runner.Vec) int { return 2*len(v.B16) + 4*len(v.B32) }

func cloneVec(v runner.Vec) runner.Vec {
	return runner.Vec{DType: v.DType, B16: append([]uint16(nil), v.B16...), B32: append([]uint32(nil), v.B32...)}
}

// preparedQMV is one case's operand copies. It is used by one goroutine
// at a time (the lane's).
type preparedQMV struct {
	xs       []runner.Vec
	copies   []*runner.QMVRequest
	next     int // the copy the next kernel launch uses
	launches int // products per sample
}

// product runs one product of variant v (the kernel over every vector),
// each launch repeat times, every launch on the next copy.
func (p *preparedQMV) product(ctx context.Context, v runner.Variant, repeat int) error {
	if p.copies == nil {
		return fmt.Errorf("cpu qmv: prepared operands closed")
	}
	for _, x := range p.xs {
		for range repeat {
			r := *p.copies[p.next]
			p.next = (p.next + 1) % len(p.copies)
			r.Variant, r.X = v, x
			if _, err := qmv(ctx, &r, haveSIMD); err != nil {
				return err
			}
		}
	}
	return nil
}

// Arm returns variant v's timed side; repeat > 1 launches the kernel
// repeat times per vector in every product.
func (p *preparedQMV) Arm(v runner.Variant, repeat int) runner.Arm {
	return &cpuArm{p: p, v: v, repeat: max(repeat, 1)}
}

// Output runs one product of variant v on the first copy and returns one
// output row per vector.
func (p *preparedQMV) Output(ctx context.Context, v runner.Variant) ([]runner.Vec, error) {
	if p.copies == nil {
		return nil, fmt.Errorf("cpu qmv: prepared operands closed")
	}
	out := make([]runner.Vec, len(p.xs))
	for i, x := range p.xs {
		r := *p.copies[0]
		r.Variant, r.X = v, x
		y, err := qmv(ctx, &r, haveSIMD)
		if err != nil {
			return nil, err
		}
		out[i] = y
	}
	return out, nil
}

// LaunchesPerSample returns the products one sample times.
func (p *preparedQMV) LaunchesPerSample() int { return p.launches }

// Close drops the copies; further use fails.
func (p *preparedQMV) Close() error {
	p.copies = nil
	return nil
}

// cpuArm is one timed side of a prepared case.
type cpuArm struct {
	p      *preparedQMV
	v      runner.Variant
	repeat int
}

// Sample takes n samples, each the monotonic time of LaunchesPerSample
// products divided by their count, in seconds per product.
func (a *cpuArm) Sample(ctx context.Context, n int) ([]float64, error) {
	out := make([]float64, n)
	for i := range out {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		start := time.Now()
		for range a.p.launches {
			if err := a.p.product(ctx, a.v, a.repeat); err != nil {
				return nil, err
			}
		}
		out[i] = time.Since(start).Seconds() / float64(a.p.launches)
	}
	return out, nil
}
